/* The attribute columns' zone map (gpu/attribute_zones.h): each range's least and most stored value, whether a
 * filter may pass a range from them (never false where a document of the range passes: checked against every
 * document for random filters), and the count of ranges a query's filters keep, exact for a column that follows
 * the doc ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "gpu/attribute_zones.h"
#include "gpu/posting_decode.h"
#include "tests/support/random.h"

enum { DOCS = 10 * GPU_RANGE_DOCS + 500, RANGES = 11, SERIAL_BITS = 18, RANDOM_BITS = 5 };
enum { SERIAL_WORDS = (DOCS * SERIAL_BITS + 31) / 32 + 1, RANDOM_WORDS = (DOCS * RANDOM_BITS + 31) / 32 + 1 };
static uint32_t words[SERIAL_WORDS + RANDOM_WORDS];
static const gpu_attribute columns[] = {{.first_word = 0, .bits = SERIAL_BITS}, {.bits = 0},
                                        {.first_word = SERIAL_WORDS, .bits = RANDOM_BITS}};

static void put(uint32_t *column, uint32_t bits, uint32_t doc, uint32_t v) {
    const uint64_t bit = (uint64_t)doc * bits;
    column[bit >> 5] |= v << (bit & 31);
    if ((bit & 31) + bits > 32) column[(bit >> 5) + 1] |= v >> (32 - (bit & 31));
}

static int setup(void **state) {
    (void)state;
    support_rng_seed(7);
    memset(words, 0, sizeof words);
    for (uint32_t d = 0; d < DOCS; d++) {
        put(words, SERIAL_BITS, d, d + 1);                                          /* stored: the doc id + 1 */
        put(words + SERIAL_WORDS, RANDOM_BITS, d, d % 97 == 0 ? 0 : 1 + support_rng_below(20)); /* 0: no value */
    }
    return 0;
}

static void test_zones_hold_each_range_s_extremes(void **state) {
    (void)state;
    gpu_zones z;
    assert_int_equal(gpu_zones_build(&z, words, columns, 3, DOCS), 0);
    assert_int_equal(z.num_ranges, RANGES);
    assert_int_equal(z.num_columns, 2); /* the column without bits is not resident */
    for (uint32_t r = 0; r < RANGES; r++) {
        assert_int_equal(z.least[r], r * GPU_RANGE_DOCS + 1);
        assert_int_equal(z.most[r], (r + 1 < RANGES ? (r + 1) * GPU_RANGE_DOCS : DOCS));
        assert_int_equal(z.least[RANGES + r], 0); /* every range holds documents without the attribute */
        assert_int_equal(z.most[RANGES + r], 20);
    }
    gpu_zones_free(&z);
}

/* Where some document of a range passes, the zone says it may: random filters of every kind on both columns. */
static void test_zones_never_drop_a_passing_range(void **state) {
    (void)state;
    gpu_zones z;
    assert_int_equal(gpu_zones_build(&z, words, columns, 3, DOCS), 0);
    uint32_t values[24]; /* lists past ISN_GPU_ZONE_EXACT_VALUES are counted as the range of their values */
    for (int round = 0; round < 400; round++) {
        const uint32_t c = support_rng_below(2) ? 2 : 0, top = c ? 21 : DOCS + 1;
        gpu_filter f = {.first_word = columns[c].first_word, .bits = columns[c].bits, .least = 1, .most = 0};
        f.negate = support_rng_below(3) == 0;
        if (support_rng_below(2)) {
            f.least = support_rng_below(top);
            f.most = f.least + support_rng_below(c ? 4 : 3 * GPU_RANGE_DOCS);
        } else {
            f.num_values = 1 + support_rng_below(24);
            for (uint32_t i = 0; i < f.num_values; i++) values[i] = support_rng_below(top);
        }
        uint32_t exact = 0;
        for (uint32_t r = 0; r < RANGES; r++) {
            bool passes = false;
            for (uint32_t d = r * GPU_RANGE_DOCS; d < DOCS && d < (r + 1) * GPU_RANGE_DOCS && !passes; d++)
                passes = gpu_filters_accept(words, &f, 1, values, d);
            const bool may = gpu_zone_may_pass(&f, values, z.least[(c ? RANGES : 0) + r], z.most[(c ? RANGES : 0) + r]);
            if (passes && !may) fail_msg("round %d, column %u, range %u: a document passes, the zone says none", round, c, r);
            exact += passes;
        }
        const uint32_t kept = gpu_zones_kept_ranges(&z, &f, 1, values);
        assert_true(kept >= exact);
        /* on the column that follows the ids, a range filter keeps exactly the ranges it should */
        if (c == 0 && !f.negate && f.num_values == 0) assert_int_equal(kept, exact);
    }
    gpu_zones_free(&z);
}

static void test_kept_ranges_of_several_filters(void **state) {
    (void)state;
    gpu_zones z;
    assert_int_equal(gpu_zones_build(&z, words, columns, 3, DOCS), 0);
    const uint32_t values[] = {5, 3 * GPU_RANGE_DOCS + 10};
    const gpu_filter first_two = {.first_word = 0, .bits = SERIAL_BITS, .least = 1, .most = 2 * GPU_RANGE_DOCS};
    const gpu_filter from_one = {.first_word = 0, .bits = SERIAL_BITS, .least = GPU_RANGE_DOCS + 1, .most = DOCS};
    const gpu_filter listed = {.first_word = 0, .bits = SERIAL_BITS, .least = 1, .most = 0, .num_values = 2};
    const gpu_filter everywhere = {.first_word = SERIAL_WORDS, .bits = RANDOM_BITS, .least = 1, .most = 20};
    const gpu_filter not_first = {.first_word = 0, .bits = SERIAL_BITS, .negate = 1, .least = 1, .most = GPU_RANGE_DOCS};
    const gpu_filter unzoned = {.first_word = 12345, .bits = 3, .least = 1, .most = 1};
    assert_int_equal(gpu_zones_kept_ranges(&z, &first_two, 1, values), 2);
    const gpu_filter both[] = {first_two, from_one};
    assert_int_equal(gpu_zones_kept_ranges(&z, both, 2, values), 1);
    assert_int_equal(gpu_zones_kept_ranges(&z, &listed, 1, values), 2);
    assert_int_equal(gpu_zones_kept_ranges(&z, &everywhere, 1, values), RANGES);
    assert_int_equal(gpu_zones_kept_ranges(&z, &not_first, 1, values), RANGES - 1);
    assert_int_equal(gpu_zones_kept_ranges(&z, &unzoned, 1, values), RANGES);
    gpu_zones_free(&z);
}

/* The devices' report slots (gpu_report_stride) hold every list the backend sizes: any k up to max_k over every
 * range, and over as few as a sixteenth of them (the backend caps the rest at the stride). */
static void test_report_slots_hold_the_lists(void **state) {
    (void)state;
    static const uint32_t docs[] = {1000, 120000, 1000000, 10000000, 20000000, 100000000, 400000000};
    static const uint32_t max_ks[] = {10, 100, 1000, 10000};
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++)
        for (size_t j = 0; j < sizeof max_ks / sizeof *max_ks; j++) {
            const uint32_t stride = gpu_report_stride(max_ks[j], docs[i]);
            const uint32_t ranges = (docs[i] + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
            assert_true(stride <= GPU_MAX_RANGE_TOP);
            for (uint32_t k = 1; k <= max_ks[j]; k += k < 64 ? 1 : 97) {
                if (gpu_range_top(k, docs[i]) > stride) fail_msg("docs %u max_k %u k %u", docs[i], max_ks[j], k);
                const uint32_t few = ranges / GPU_ZONE_RANGE_SHARE ? ranges / GPU_ZONE_RANGE_SHARE : 1;
                if (gpu_range_top_of_ranges(k, few) > stride)
                    fail_msg("docs %u max_k %u k %u over %u ranges", docs[i], max_ks[j], k, few);
            }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zones_hold_each_range_s_extremes),
        cmocka_unit_test(test_zones_never_drop_a_passing_range),
        cmocka_unit_test(test_kept_ranges_of_several_filters),
        cmocka_unit_test(test_report_slots_hold_the_lists),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
