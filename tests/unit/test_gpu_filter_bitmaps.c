/* Which queries of a batch test their filters on a filter bitmap, and which bitmaps a batch builds
 * (gpu/filter_bitmaps.h, the choice the CUDA device and the emulated one make): queries sharing filters share a
 * bitmap; filters whose queries read too few postings, whose signature is too long, or that find no slot free
 * are tested on the columns; a later batch reuses a bitmap it shares with an earlier one and builds over the
 * least recently used slot, never over one its own queries read; unfiltered queries and probe-path ones get none.
 * Runs on the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/filter_bitmaps.h"

#define NUM_DOCS 1000u /* a build pays from NUM_DOCS / GPU_PASS_BUILD_SHARE = 125 postings */
#define MAX_QUERIES 16u

/* A batch under construction: each query one term of df postings and one filter clause `stored = value` on a
 * column (value 0: no filter; long: a value list too long for a signature). */
typedef struct {
    gpu_query queries[MAX_QUERIES];
    gpu_term terms[MAX_QUERIES];
    gpu_filter filters[MAX_QUERIES];
    uint32_t values[128];
    uint32_t num_values;
    gpu_batch batch;
    uint32_t pass_slot[MAX_QUERIES];
    uint32_t build_query[GPU_PASS_SLOTS], build_slot[GPU_PASS_SLOTS];
    uint32_t builds, bitmap_queries;
} test_batch;

static void add_query(test_batch *t, uint32_t value, uint32_t df, bool long_list) {
    const uint32_t q = t->batch.num_queries++;
    t->batch.num_range_queries = t->batch.num_queries;
    t->terms[q] = (gpu_term){.df = df};
    t->queries[q] = (gpu_query){.term_begin = q, .num_terms = 1, .filter_begin = q, .num_filters = value ? 1 : 0};
    gpu_filter *f = &t->filters[q];
    *f = (gpu_filter){.first_word = 0, .bits = 4, .least = value, .most = value};
    if (long_list) { /* value in a list of GPU_PASS_SIGNATURE_WORDS values */
        f->least = 1;
        f->most = 0;
        f->first_value = t->num_values;
        f->num_values = GPU_PASS_SIGNATURE_WORDS;
        for (uint32_t i = 0; i < GPU_PASS_SIGNATURE_WORDS; i++) t->values[t->num_values++] = value + i;
    }
}

static void begin(test_batch *t) {
    memset(t, 0, sizeof *t);
    t->batch = (gpu_batch){.queries = t->queries, .terms = t->terms, .filters = t->filters, .filter_values = t->values};
}

static void assign(gpu_pass_cache *cache, test_batch *t) {
    t->batch.num_terms = t->batch.num_filters = t->batch.num_queries;
    t->batch.num_filter_values = t->num_values;
    t->builds = gpu_pass_assign(cache, &t->batch, NUM_DOCS, t->pass_slot, t->build_query, t->build_slot,
                                &t->bitmap_queries);
}

/* Whether query q's filters are in slot pass_slot[q] - 1 by a build of this batch. */
static bool built_for(const test_batch *t, uint32_t q) {
    for (uint32_t i = 0; i < t->builds; i++)
        if (t->build_slot[i] + 1 == t->pass_slot[q] && t->filters[t->build_query[i]].least == t->filters[q].least)
            return true;
    return false;
}

static void test_queries_share_bitmaps(void **state) {
    (void)state;
    static gpu_pass_cache cache;
    memset(&cache, 0, sizeof cache);
    static test_batch t;
    begin(&t);
    add_query(&t, 1, 100, false); /* value 1: 3 queries, 300 postings */
    add_query(&t, 1, 100, false);
    add_query(&t, 2, 200, false); /* value 2: 200 postings */
    add_query(&t, 1, 100, false);
    add_query(&t, 3, 50, false);  /* value 3: 50 postings, below the build's share: columns */
    add_query(&t, 0, 900, false); /* no filter */
    add_query(&t, 4, 900, true);  /* a signature too long: columns */
    assign(&cache, &t);
    assert_int_equal(t.builds, 2);
    assert_int_equal(t.filters[t.build_query[0]].least, 1); /* the most postings first */
    assert_int_equal(t.filters[t.build_query[1]].least, 2);
    assert_int_equal(t.bitmap_queries, 4);
    assert_true(t.pass_slot[0] != 0 && t.pass_slot[0] == t.pass_slot[1] && t.pass_slot[1] == t.pass_slot[3]);
    assert_true(t.pass_slot[2] != 0 && t.pass_slot[2] != t.pass_slot[0]);
    assert_true(built_for(&t, 0) && built_for(&t, 2));
    assert_int_equal(t.pass_slot[4], 0);
    assert_int_equal(t.pass_slot[5], 0);
    assert_int_equal(t.pass_slot[6], 0);
    /* the probe path's queries (past num_range_queries) are not the range passes': none */
    t.batch.num_range_queries = 2;
    t.pass_slot[2] = 77;
    assign(&cache, &t);
    assert_int_equal(t.builds, 0); /* value 1 is held */
    assert_int_equal(t.bitmap_queries, 2);
    assert_int_equal(t.pass_slot[2], 77); /* untouched */
}

static void test_later_batches_reuse_and_evict(void **state) {
    (void)state;
    static gpu_pass_cache cache;
    memset(&cache, 0, sizeof cache);
    static test_batch t;
    begin(&t);
    add_query(&t, 1, 500, false);
    add_query(&t, 2, 400, false);
    assign(&cache, &t);
    assert_int_equal(t.builds, 2);
    const uint32_t slot_of_1 = t.pass_slot[0], slot_of_2 = t.pass_slot[1];
    /* value 1 again and three new ones: 1 keeps its bitmap; the three new take the two empty slots and value 2's,
     * the least recently used */
    begin(&t);
    add_query(&t, 1, 500, false);
    add_query(&t, 5, 300, false);
    add_query(&t, 6, 300, false);
    add_query(&t, 7, 300, false);
    assign(&cache, &t);
    assert_int_equal(t.builds, 3);
    assert_int_equal(t.pass_slot[0], slot_of_1);
    assert_false(built_for(&t, 0));
    assert_true(built_for(&t, 1) && built_for(&t, 2) && built_for(&t, 3));
    bool took_2s = false;
    for (uint32_t q = 1; q < 4; q++) took_2s |= t.pass_slot[q] == slot_of_2;
    assert_true(took_2s);
    assert_int_equal(t.bitmap_queries, 4);
    /* five filters that each pay for a build, four slots: the one with the fewest postings tests the columns */
    begin(&t);
    add_query(&t, 8, 900, false);
    add_query(&t, 9, 800, false);
    add_query(&t, 10, 700, false);
    add_query(&t, 11, 600, false);
    add_query(&t, 12, 200, false);
    assign(&cache, &t);
    assert_int_equal(t.builds, GPU_PASS_SLOTS);
    assert_int_equal(t.pass_slot[4], 0);
    assert_int_equal(t.bitmap_queries, 4);
    /* value 2 was overwritten: it is built again */
    begin(&t);
    add_query(&t, 2, 400, false);
    assign(&cache, &t);
    assert_int_equal(t.builds, 1);
    assert_true(built_for(&t, 0));
    const uint32_t slot_of_2_again = t.pass_slot[0];
    /* a batch that reads a held bitmap and has four new filters that each pay: it builds three, never over the
     * slot its own queries read, and the fourth new one tests the columns */
    begin(&t);
    add_query(&t, 13, 900, false);
    add_query(&t, 14, 800, false);
    add_query(&t, 2, 100, false);
    add_query(&t, 15, 700, false);
    add_query(&t, 16, 600, false);
    assign(&cache, &t);
    assert_int_equal(t.builds, GPU_PASS_SLOTS - 1);
    assert_int_equal(t.pass_slot[2], slot_of_2_again);
    for (uint32_t i = 0; i < t.builds; i++) assert_int_not_equal(t.build_slot[i] + 1, slot_of_2_again);
    assert_int_equal(t.pass_slot[4], 0); /* the fewest postings of the new ones */
    assert_int_equal(t.bitmap_queries, 4);
}

/* Where a batch keeps a filter's value list does not name it: the same list at two offsets is one bitmap. */
static void test_value_lists_share_by_contents(void **state) {
    (void)state;
    static gpu_pass_cache cache;
    memset(&cache, 0, sizeof cache);
    static test_batch t;
    begin(&t);
    add_query(&t, 1, 100, false);
    add_query(&t, 1, 100, false);
    for (uint32_t q = 0; q < 2; q++) { /* `stored in {5, 9}`, each query its own copy of the list */
        gpu_filter *f = &t.filters[q];
        f->least = 1;
        f->most = 0;
        f->first_value = t.num_values;
        f->num_values = 2;
        t.values[t.num_values++] = 5;
        t.values[t.num_values++] = 9;
    }
    assign(&cache, &t);
    assert_int_equal(t.builds, 1);
    assert_int_equal(t.bitmap_queries, 2);
    assert_true(t.pass_slot[0] != 0 && t.pass_slot[0] == t.pass_slot[1]);
}

/* The signature names everything the test reads: a different column, width, bound, negation or value list is
 * another bitmap. */
static void test_signature_names_the_filters(void **state) {
    (void)state;
    static test_batch t;
    begin(&t);
    add_query(&t, 3, 100, false);
    uint32_t base[GPU_PASS_SIGNATURE_WORDS], other[GPU_PASS_SIGNATURE_WORDS];
    const uint32_t n = gpu_pass_signature(&t.batch, &t.queries[0], base);
    assert_true(n > 0);
    for (int change = 0; change < 5; change++) {
        begin(&t);
        add_query(&t, 3, 100, false);
        gpu_filter *f = &t.filters[0];
        switch (change) {
        case 0: f->first_word = 1ull << 33; break;
        case 1: f->bits = 5; break;
        case 2: f->most = 4; break;
        case 3: f->negate = 1; break;
        default:
            f->num_values = 1;
            t.values[t.num_values++] = 3;
            break;
        }
        const uint32_t m = gpu_pass_signature(&t.batch, &t.queries[0], other);
        assert_true(m > 0);
        assert_false(m == n && memcmp(base, other, n * sizeof *base) == 0);
    }
    begin(&t);
    add_query(&t, 3, 100, true);
    assert_int_equal(gpu_pass_signature(&t.batch, &t.queries[0], other), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queries_share_bitmaps),
        cmocka_unit_test(test_later_batches_reuse_and_evict),
        cmocka_unit_test(test_value_lists_share_by_contents),
        cmocka_unit_test(test_signature_names_the_filters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
