/* The GPU's posting layout (gpu/device_layout.c) and the report floor's arithmetic (gpu/posting_decode.h),
 * white-box: every block laid out for the device reads back as the index's own postings (docs, and the tf
 * part the CPU scores with, bit for bit); sizes, alignment and a partial layout; the floor keeps every
 * document that reaches it; score keys order negative scores too; the static prior's score and bounds are the
 * CPU's; a filter bitmap's words hold exactly the documents the filters pass; and the report slots and sampled
 * ranges of the leading round. Runs on the host, so CI checks
 * what the device reads. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/gpu.h"
#include "gpu/posting_decode.h"
#include "index/index.h"
#include "tests/support/index_builder.h"
#include "tests/support/random.h"

#define NUM_DOCS 12000u
#define VOCAB 2000u

static support_index test_index;
static isn_index *ix;

static size_t doc_text(void *user, uint32_t d, char *text, size_t cap) {
    (void)user;
    (void)d;
    uint32_t len = 2 + (uint32_t)(support_rng_unit() * support_rng_unit() * 120);
    size_t at = 0;
    for (uint32_t i = 0; i < len; i++) {
        /* a skewed vocabulary: a few lists of many blocks, wide gaps in the rare ones, repeated words */
        uint32_t w = (uint32_t)(VOCAB * support_rng_unit() * support_rng_unit() * support_rng_unit());
        at += (size_t)snprintf(text + at, cap - at, "w%u ", w);
    }
    return at;
}

static int setup(void **state) {
    (void)state;
    if (support_index_build(&test_index, "gpu_layout", NULL, NUM_DOCS, doc_text, NULL) != 0) return -1;
    ix = test_index.index;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    support_index_close(&test_index);
    return 0;
}

typedef struct {
    uint8_t *widths, *payload;
    isn_block_meta *metas;
    uint32_t *term_blocks;
    uint64_t bytes;
} layout;

/* Lays out each term's first `keep(t)` blocks (all of them with keep NULL). */
static void layout_build(layout *l, uint32_t (*keep)(uint32_t term, uint32_t num_blocks)) {
    uint64_t num_blocks;
    const isn_block_meta *blocks = isn_index_block_metas(ix, &num_blocks);
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    char err[256];
    l->widths = malloc(num_blocks);
    l->term_blocks = calloc(nt, sizeof *l->term_blocks);
    l->metas = malloc(num_blocks * sizeof *l->metas);
    assert_non_null(l->widths);
    assert_non_null(l->term_blocks);
    assert_non_null(l->metas);
    assert_int_equal(gpu_layout_measure(ix, l->widths, 3, err, sizeof err), 0);
    l->bytes = 0;
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        l->term_blocks[t] = keep ? keep(t, st.num_blocks) : st.num_blocks;
        l->bytes += gpu_layout_list_bytes(ix, l->widths, t, l->term_blocks[t]);
    }
    l->payload = malloc(l->bytes ? l->bytes : 1);
    assert_non_null(l->payload);
    memcpy(l->metas, blocks, num_blocks * sizeof *blocks);
    assert_int_equal(gpu_layout_write(ix, l->widths, l->term_blocks, l->payload, l->metas, 3, err, sizeof err), 0);
}

static void layout_free(layout *l) {
    free(l->widths);
    free(l->payload);
    free(l->metas);
    free(l->term_blocks);
}

/* Every laid-out block of term t against the index's cursor: docs, and the tf part as isn_search scores it. */
static uint64_t check_term(const layout *l, uint32_t t) {
    isn_term_stats st;
    isn_index_term_stats(ix, t, &st);
    const isn_block_meta *metas = l->metas + st.first_block;
    const float *norms = isn_index_doc_norms(ix);
    const float k1_plus_1 = isn_index_get_info(ix)->bm25.k1 + 1.0f;
    isn_cursor c;
    isn_cursor_open(&c, ix, t);
    uint64_t checked = 0;
    for (uint32_t b = 0; b < l->term_blocks[t]; b++) {
        const uint32_t n = gpu_block_count(st.df, st.num_blocks, b);
        const uint64_t word = metas[b].offset;
        assert_int_equal(gpu_layout_offset(word) % 16, 0);
        const uint32_t bits = gpu_layout_doc_bits(word);
        assert_true(bits <= 32);
        const uint8_t *offsets = l->payload + gpu_layout_offset(word);
        const uint8_t *parts = offsets + gpu_layout_stream_bytes(n, bits);
        const uint32_t base = b ? metas[b - 1].last_doc : UINT32_MAX;
        uint32_t doc = 0;
        for (uint32_t i = 0; i < n; i++) {
            /* every posting from its block's base alone, as a warp's lanes decode them (device.h) */
            doc = base + gpu_layout_value(offsets, bits, i) + 1u;
            assert_int_equal(doc, c.doc);
            float part;
            memcpy(&part, parts + 4 * i, sizeof part);
            const float expect = isn_bm25_tf_part(k1_plus_1, isn_cursor_freq(&c), norms[c.doc]);
            assert_memory_equal(&part, &expect, sizeof part);
            isn_cursor_next(&c);
            checked++;
        }
        assert_int_equal(doc, metas[b].last_doc);
    }
    return checked;
}

static void test_every_posting_reads_back(void **state) {
    (void)state;
    layout l;
    layout_build(&l, NULL);
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    uint64_t postings = 0, wide = 0;
    for (uint32_t t = 0; t < nt; t++) {
        postings += check_term(&l, t);
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        wide += st.num_blocks > 4;
    }
    assert_int_equal(postings, isn_index_get_info(ix)->num_postings);
    assert_true(wide > 10); /* lists of many full blocks were laid out, not only short ones */
    layout_free(&l);
}

/* The sizes the budget counts are the sizes written; short blocks take less than full ones. */
static void test_sizes(void **state) {
    (void)state;
    layout l;
    layout_build(&l, NULL);
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    uint64_t sum = 0;
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        const uint64_t bytes = gpu_layout_list_bytes(ix, l.widths, t, st.num_blocks);
        assert_int_equal(isn_gpu_list_bytes(ix, t, st.num_blocks), bytes);
        sum += bytes;
    }
    assert_int_equal(sum, l.bytes);
    assert_int_equal(isn_gpu_list_bytes(ix, nt, 1), 0); /* unknown term */
    assert_true(gpu_layout_block_bytes(1, 20) < gpu_layout_block_bytes(128, 20));
    assert_int_equal(gpu_layout_block_bytes(128, 0), 512); /* a stream of 0-bit fields: only the parts */
    layout_free(&l);
}

static uint32_t keep_half(uint32_t term, uint32_t num_blocks) {
    (void)term;
    return num_blocks > 1 ? num_blocks / 2 : num_blocks;
}

/* A partial layout (a pruned-prefix cache's): the leading blocks of each list, still exact. */
static void test_prefixes_read_back(void **state) {
    (void)state;
    layout l;
    layout_build(&l, keep_half);
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    for (uint32_t t = 0; t < nt; t++) check_term(&l, t);
    layout_free(&l);
}

/* The floor keeps every score that reaches it, even summed in another order; its candidate key bounds
 * every such document's key, and no document below it. */
static void test_floor(void **state) {
    (void)state;
    const uint32_t key = gpu_float_key(12.375f);
    assert_false(gpu_below_floor(12.375, key));
    assert_false(gpu_below_floor(12.375 * (1.0 - 1e-9), key)); /* a different summation order */
    assert_true(gpu_below_floor(12.37, key));
    assert_false(gpu_below_floor(0.0, 0)); /* no floor */
    const uint32_t above_key = gpu_float_key(12.5f), below_key = gpu_float_key(12.25f);
    assert_true(gpu_candidate_key(key, UINT32_MAX - 1) <= gpu_floor_candidate_key(key));
    assert_true(gpu_candidate_key(above_key, UINT32_MAX) <= gpu_floor_candidate_key(key));
    assert_true(gpu_candidate_key(below_key, 0) > gpu_floor_candidate_key(key));
    assert_int_equal(gpu_floor_candidate_key(0), GPU_NO_CANDIDATE);
    /* a negative floor (a score with a static prior) keeps the scores a hair below it too */
    const uint32_t negative = gpu_float_key(-3.5f);
    assert_false(gpu_below_floor(-3.5, negative));
    assert_false(gpu_below_floor(-3.5 * (1.0 + 1e-9), negative));
    assert_true(gpu_below_floor(-3.6, negative));
}

/* Score keys order every score as the floats do, negative ones (a static prior's) included, with 0 never a key
 * (it stands for none), -0 and +0 one key, and the score read back from a key and from a candidate key; the
 * one-operation key of a score >= 0 is the same. */
static void test_score_keys(void **state) {
    (void)state;
    static const float scores[] = {-INFINITY, -3e38f, -1e6f, -2.5f, -1.0f, -1e-30f, -1e-45f, 0.0f,
                                   1e-45f,    1e-30f, 0.5f,   1.0f,  2.5f,  1e6f,   3e38f,  INFINITY};
    const size_t n = sizeof scores / sizeof *scores;
    for (size_t i = 0; i < n; i++) {
        const uint32_t key = gpu_float_key(scores[i]);
        assert_true(key != 0);
        assert_true(gpu_key_float(key) == scores[i]);
        assert_true(gpu_candidate_score(gpu_candidate_key(key, 7)) == scores[i]);
        if (scores[i] >= 0.0f) assert_int_equal(gpu_nonnegative_key(scores[i]), key);
        if (i > 0) assert_true(gpu_float_key(scores[i - 1]) < key);
    }
    assert_int_equal(gpu_float_key(-0.0f), gpu_float_key(0.0f));
    /* a bound below a negative score's key is below, one at it is not */
    assert_true(gpu_bound_below(-2.6, gpu_float_key(-2.5f)));
    assert_false(gpu_bound_below(-2.5, gpu_float_key(-2.5f)));
    assert_false(gpu_bound_below(-2.5 * (1.0 - 1e-15), gpu_float_key(-2.5f)));
}

/* The prior's part of a bound is isn_prior_bound's, and a BM25 bound with it is never below a score with the prior
 * (isn_prior_score) of a document under both, whatever the signs; the report floor of a range takes the prior's
 * part away from the BM25 a slot must reach, and none where the prior alone may reach the floor. */
static void test_prior_bounds(void **state) {
    (void)state;
    static const float weights[] = {0.25f, 1.0f, 7.5f}, statics[] = {-4.0f, -1e-4f, 0.0f, 1e-4f, 0.5f, 3.0f, 200.0f};
    for (size_t w = 0; w < 3; w++)
        for (size_t i = 0; i < sizeof statics / sizeof *statics; i++) {
            assert_true(gpu_prior_bound(weights[w], statics[i]) == isn_prior_bound(weights[w], statics[i]));
            for (uint32_t r = 0; r < 2000; r++) {
                /* a BM25 at its bound, a static score at its own */
                const double bm25 = support_rng_unit() * 40.0;
                const float score = gpu_prior_score((float)bm25, weights[w], statics[i]);
                assert_true(score == isn_prior_score((float)bm25, weights[w], statics[i]));
                assert_false(gpu_prior_below(bm25, gpu_prior_bound(weights[w], statics[i]), gpu_float_key(score)));
            }
        }
    const uint32_t floor = gpu_float_key(10.0f);
    assert_true(gpu_prior_floor_value(floor, 4.0) > 5.99 && gpu_prior_floor_value(floor, 4.0) < 6.0);
    assert_true(gpu_prior_floor_value(floor, -2.0) > 11.99 && gpu_prior_floor_value(floor, -2.0) < 12.0);
    assert_true(gpu_prior_floor_value(floor, 10.5) == 0.0);
    assert_true(gpu_prior_floor_value(0, -5.0) == 0.0);
    assert_true(gpu_prior_floor_value(gpu_float_key(-3.0f), -5.0) > 1.99); /* a negative floor, a more negative prior */
}

/* Stores value v of document doc in a column of `bits`-bit values from word 0 (gpu_column_stored's layout). */
static void column_put(uint32_t *words, uint32_t bits, uint32_t doc, uint32_t v) {
    for (uint32_t i = 0; i < bits; i++)
        if (v >> i & 1u) words[((uint64_t)doc * bits + i) >> 5] |= 1u << (((uint64_t)doc * bits + i) & 31u);
}

/* A filter bitmap's range bits (gpu_pass_range_word): set for exactly the ranges holding a kept document, the
 * last range partial, over more than 32 ranges (two words); gpu_pass_keeps_ranges over spans of them. */
/* The report slots and the sampling round's ranges (device.h, posting_decode.h): an index whose prior queries score
 * their leading ranges first has room for a top max_k in one range with room to spare (up to GPU_MAX_RANGE_TOP), where
 * the usual slots on 20M documents hold 5; a query's leading ranges and their reports are sized by its own k
 * (gpu_lead_ranges_of), the other ranges' reports laid after theirs (gpu_report_place); the leading round samples
 * ranges 0..lead-1, the strided one every stride-th. */
static void test_report_slots_and_sampled_ranges(void **state) {
    (void)state;
    const uint32_t docs = 20000000, ranges = gpu_num_ranges(docs);
    assert_true(gpu_report_slots(10, docs, false, false) < 10);
    assert_int_equal(gpu_report_slots(10, docs, false, false), gpu_range_top(10, docs));
    assert_int_equal(gpu_report_slots(10, docs, true, false), gpu_report_stride(10, docs));
    /* a top 10 in one range with room to spare: 1 + 10 + 3 sqrt(10), rounded up */
    assert_int_equal(gpu_report_slots(10, docs, false, true), 21);
    assert_int_equal(gpu_report_slots(1000, docs, false, true), GPU_MAX_RANGE_TOP);
    assert_int_equal(gpu_report_slots(1000, 8192, false, true), GPU_MAX_RANGE_TOP); /* one range: all of it */
    gpu_query strided = {.sample_stride = 8}, lead = {.lead_ranges = 3, .sample_stride = 1}, one = {.sample_stride = 1};
    assert_int_equal(gpu_sampled_ranges(&strided, ranges), (ranges + 7) / 8);
    assert_int_equal(gpu_sampled_range(&strided, 2), 16);
    assert_true(gpu_range_sampled(&strided, 16) && !gpu_range_sampled(&strided, 17));
    assert_int_equal(gpu_sampled_ranges(&lead, ranges), 3);
    assert_int_equal(gpu_sampled_ranges(&lead, 2), 2);
    assert_int_equal(gpu_sampled_range(&lead, 2), 2);
    assert_true(gpu_range_sampled(&lead, 2) && !gpu_range_sampled(&lead, 3));
    assert_true(gpu_two_rounds(&strided) && gpu_two_rounds(&lead) && !gpu_two_rounds(&one));
    assert_int_equal(gpu_sampled_ranges(&one, ranges), ranges);
    /* the leading ranges of a query: its own k's share a range with room to spare, within the slots */
    uint32_t top;
    assert_int_equal(gpu_lead_ranges_of(10, 21, &top), 1);
    assert_int_equal(top, 21);
    assert_int_equal(gpu_lead_ranges_of(10, GPU_MAX_RANGE_TOP, &top), 1);
    assert_int_equal(top, 21); /* not the device's slots */
    const uint32_t lead1000 = gpu_lead_ranges_of(1000, GPU_MAX_RANGE_TOP, &top);
    assert_int_equal(lead1000, 24); /* 1000 / 24 = 41.7, + 3 sqrt(41.7) + 1 = 62.0; 1000 / 23 needs 64.3 */
    assert_int_equal(top, 63);
    assert_true(lead1000 * top > 1000);
    /* report places: leading ranges of lead_top, the others of range_top */
    gpu_query placed = {.lead_ranges = 2, .lead_top = 7, .range_top = 3};
    assert_int_equal(gpu_range_reports(&placed, 1), 7);
    assert_int_equal(gpu_range_reports(&placed, 2), 3);
    assert_int_equal(gpu_reports_before(&placed, 1), 7);
    assert_int_equal(gpu_reports_before(&placed, 2), 14);
    assert_int_equal(gpu_reports_before(&placed, 4), 20);
    for (uint32_t i = 0; i < gpu_reports_before(&placed, 5); i++) {
        uint32_t r, j;
        gpu_report_place(&placed, i, &r, &j);
        assert_true(j < gpu_range_reports(&placed, r));
        assert_int_equal(gpu_reports_before(&placed, r) + j, i);
    }
}

static void test_filter_bitmap_ranges(void **state) {
    (void)state;
    enum { DOCS = 40 * GPU_RANGE_DOCS + 1000, RANGES = 41 };
    static uint32_t bitmap[DOCS / 32 + 1 + 8];
    const uint32_t doc_words = gpu_pass_doc_words(DOCS), stride = gpu_pass_stride(DOCS);
    assert_int_equal(stride - doc_words, 3); /* two words of range bits, then the count of empty ranges */
    assert_true(stride <= sizeof bitmap / sizeof *bitmap);
    static const uint32_t kept[] = {0, 5 * GPU_RANGE_DOCS + 31, 6 * GPU_RANGE_DOCS - 1, 33 * GPU_RANGE_DOCS, DOCS - 1};
    memset(bitmap, 0, sizeof bitmap);
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) bitmap[kept[i] / 32] |= 1u << (kept[i] % 32);
    for (uint32_t w = 0; w < stride - doc_words; w++) bitmap[doc_words + w] = gpu_pass_range_word(bitmap, doc_words, w);
    for (uint32_t r = 0; r < 64; r++) {
        bool want = false;
        for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) want = want || kept[i] / GPU_RANGE_DOCS == r;
        if (gpu_pass_keeps_ranges(bitmap, DOCS, r, 1) != want) fail_msg("range %u: kept %d", r, !want);
    }
    assert_true(gpu_pass_keeps_ranges(bitmap, DOCS, RANGES - 1, 1)); /* the partial last range */
    assert_false(gpu_pass_keeps_ranges(bitmap, DOCS, 1, 4));        /* ranges 1..4 */
    assert_true(gpu_pass_keeps_ranges(bitmap, DOCS, 3, 3));         /* 3..5 */
    assert_true(gpu_pass_keeps_ranges(bitmap, DOCS, 31, 3));        /* across the words: 31..33 */
    assert_false(gpu_pass_keeps_ranges(bitmap, DOCS, 34, 6));
    /* kept: ranges 0, 5, 33 and 40 of the 41; the bits past the last range count for nothing */
    assert_int_equal(gpu_pass_empty_ranges(bitmap + doc_words, RANGES), RANGES - 4);
    bitmap[doc_words] = 0xFFFFFFFFu;
    bitmap[doc_words + 1] = (1u << (RANGES - 32)) - 1u;
    assert_int_equal(gpu_pass_empty_ranges(bitmap + doc_words, RANGES), 0);
    bitmap[doc_words + 1] &= ~(1u << (RANGES - 33)); /* the last range's bit */
    assert_int_equal(gpu_pass_empty_ranges(bitmap + doc_words, RANGES), 1);
}

/* gpu_pass_word (the CUDA device's filter bitmaps, gpu_query.pass_slot): each bit is gpu_filters_accept of its
 * document, for a range and a negated value list over two columns (one of 7-bit values, which straddle words),
 * and no bit past the last document (a count that is not a multiple of 32). */
static void test_filter_bitmap_words(void **state) {
    (void)state;
    enum { DOCS = 1000, WORDS_A = DOCS * 4 / 32 + 2, WORDS_B = DOCS * 7 / 32 + 2 };
    static uint32_t words[WORDS_A + WORDS_B];
    memset(words, 0, sizeof words);
    uint32_t *a = words, *b = words + WORDS_A;
    for (uint32_t d = 0; d < DOCS; d++) {
        column_put(a, 4, d, support_rng_below(11)); /* 0: no value, else 1..10 */
        column_put(b, 7, d, support_rng_below(100));
    }
    const uint32_t values[] = {3, 17, 42, 99};
    const gpu_filter filters[] = {
        {.first_word = 0, .bits = 4, .least = 2, .most = 4},
        {.first_word = WORDS_A, .bits = 7, .negate = 1, .least = 1, .most = 0, .first_value = 0, .num_values = 4},
    };
    for (uint32_t nf = 1; nf <= 2; nf++) {
        uint32_t passed = 0;
        for (uint32_t w = 0; w <= DOCS / 32; w++) {
            const uint32_t bits = gpu_pass_word(words, filters, nf, values, w, DOCS);
            for (uint32_t i = 0; i < 32; i++) {
                const uint32_t doc = 32 * w + i;
                const bool want = doc < DOCS && gpu_filters_accept(words, filters, nf, values, doc);
                if (((bits >> i) & 1u) != want) fail_msg("filters %u, doc %u: bit %u, accept %d", nf, doc, bits >> i & 1u, want);
                passed += want;
            }
        }
        /* neither everything nor nothing: the bits say something */
        assert_true(passed > DOCS / 10 && passed < DOCS);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter_bitmap_words),
        cmocka_unit_test(test_filter_bitmap_ranges),
        cmocka_unit_test(test_every_posting_reads_back),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_prefixes_read_back),
        cmocka_unit_test(test_floor),
        cmocka_unit_test(test_score_keys),
        cmocka_unit_test(test_prior_bounds),
        cmocka_unit_test(test_report_slots_and_sampled_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
