/* Query trees on the GPU first stage: required (+term), optional and excluded (-term) whole-document
 * terms and filters on document attributes (a keyword and an int, some documents without them), OR and
 * AND, k 10 and 1,000, on a collection of several doc-id ranges, against the CPU's exhaustive
 * evaluation of the same tree (isn_search with the or / and algorithm): the same documents and the same
 * scores bit for bit, every query answered by the device itself. Filters and clauses must change the
 * answers of most queries (checked), so a device that ignored them fails. Bags of words with filters (the
 * common tree) run on the unfiltered query's fast path, checked the same way on each of its passes: k 10
 * (a sampling round, then the other ranges at its floor; pruned: at its threshold), k 32 (the bound pass
 * and its rescore), k 1,000 (narrow or compact counters in one round), AND by probing and by ranges.
 * Phrases and field: clauses are refused by isn_gpu_takes_query and answered by the CPU. Runs on the
 * emulated device; the same checks run on a real GPU when there is one (skipped, and saying so, where
 * there is none). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/gpu_device.h"
#include "tests/support/index_builder.h"
#include "tests/support/random.h"

#define NUM_DOCS 120000u /* 15 ranges of 8,192 documents: enough that top-10 samples a share of them first */
#define VOCAB 400u
#define NUM_QUERIES 160u
#define MAX_K 1000u

static support_index tix;
static isn_index *ix;
static isn_searcher *searcher;
static const char *const sections[] = {"admin", "devel", "games", "libs", "net", "python", "science", "sound", "web", "x11"};

static uint32_t skewed_word(void) {
    double u = support_rng_unit();
    return (uint32_t)(u * u * u * VOCAB);
}

static void write_docs(void *user, FILE *f) {
    (void)user;
    for (uint32_t d = 0; d < NUM_DOCS; d++) {
        fprintf(f, "{\"id\": \"d%06u\", \"body\": \"", d);
        uint32_t len = 3 + support_rng_below(60);
        for (uint32_t i = 0; i < len; i++) fprintf(f, "%sw%u", i ? " " : "", skewed_word());
        fprintf(f, "\"");
        if (support_rng_below(12)) fprintf(f, ", \"section\": \"%s\"", sections[support_rng_below(10)]);
        if (support_rng_below(9)) fprintf(f, ", \"year\": %u", 1990 + support_rng_below(36));
        fprintf(f, ", \"serial\": %u}\n", d); /* follows the doc ids: its filters keep whole ranges */
    }
}

static int setup(void **state) {
    (void)state;
    support_rng_seed(40);
    isn_build_options options;
    support_jsonl_build_options(&options);
    options.num_attributes = 3;
    options.attributes[0] = (isn_attribute_spec){.name = "section", .kind = ISN_ATTRIBUTE_KEYWORD};
    options.attributes[1] = (isn_attribute_spec){.name = "year", .kind = ISN_ATTRIBUTE_INT};
    options.attributes[2] = (isn_attribute_spec){.name = "serial", .kind = ISN_ATTRIBUTE_INT};
    if (support_index_build_jsonl(&tix, "gpu-trees", &options, write_docs, NULL) != 0) return -1;
    ix = tix.index;
    searcher = tix.searcher;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    support_index_close(&tix);
    return 0;
}

/* One random query: text with +, - and plain words, and 0..2 filters; `text`, `filter_text` and the
 * specs are the caller's. Every query here has a clause or a filter that restricts it. */
typedef struct {
    char text[256];
    char filter_text[2][96]; /* cut in place by isn_filter_parse */
    char filter_said[2][96];
    isn_filter_spec filters[2];
    const char *values[2][8];
    uint32_t num_filters;
} random_query;

/* filters_only: a bag of words with one or two filters (no + or -); with `only_filter`, a bag of words with
 * that one filter. */
static void random_query_make(random_query *q, bool filters_only, const char *only_filter) {
    size_t at = 0;
    uint32_t words = 1 + support_rng_below(4);
    bool restricted = false;
    for (uint32_t i = 0; i < words; i++) {
        uint32_t kind = filters_only ? 2 : support_rng_below(6); /* 0: required, 1: excluded, else optional */
        const char *op = kind == 0 ? "+" : kind == 1 ? "-" : "";
        restricted |= kind <= 1;
        at += (size_t)snprintf(q->text + at, sizeof q->text - at, "%s%sw%u", i ? " " : "", op, skewed_word());
    }
    q->num_filters = filters_only ? 1 + support_rng_below(2) : support_rng_below(3);
    if (!restricted && q->num_filters == 0) q->num_filters = 1;
    if (only_filter) q->num_filters = 1;
    for (uint32_t f = 0; f < q->num_filters; f++) {
        char *t = q->filter_text[f];
        switch (only_filter ? 5 : support_rng_below(5)) {
        case 5: snprintf(t, 96, "%s", only_filter); break;
        case 0: snprintf(t, 96, "section=%s", sections[support_rng_below(10)]); break;
        case 1: snprintf(t, 96, "section!=%s", sections[support_rng_below(10)]); break;
        case 2: { /* distinct values: ranking/ repeats the documents of a repeated value (reported) */
            uint32_t first = support_rng_below(10), second = (first + 1 + support_rng_below(9)) % 10;
            snprintf(t, 96, "section in {%s, %s, nosuch}", sections[first], sections[second]);
            break;
        }
        case 3: snprintf(t, 96, "year>=%u", 1990 + support_rng_below(36)); break;
        default: snprintf(t, 96, "year<%u", 1990 + support_rng_below(36)); break;
        }
        memcpy(q->filter_said[f], t, sizeof q->filter_said[f]);
        assert_int_equal(isn_filter_parse(t, &q->filters[f], q->values[f], 8), 0);
    }
}

static const bool EMULATED = true, REAL_GPU = false;

/* The queries' trees (copied out of the searcher), the CPU's exhaustive answers and the device's. */
typedef struct {
    isn_query queries[NUM_QUERIES];
    isn_query_term terms[NUM_QUERIES][8];
    uint8_t trees[NUM_QUERIES][4096];
    isn_gpu_request requests[NUM_QUERIES];
    isn_hit hits[NUM_QUERIES][MAX_K], expected[NUM_QUERIES][MAX_K], unrestricted[MAX_K];
    uint32_t expected_n[NUM_QUERIES];
    char texts[NUM_QUERIES][256];
} tree_batch;

/* How a batch runs on the device (check_trees). */
typedef struct {
    bool emulate, filters_only, and_by_ranges;
    bool seeded; /* OR requests carry the CPU's threshold probe of their tree (isn_threshold_probe) */
    isn_mode mode;
    uint32_t k;
    int pruning;
    const char *only_filter; /* with filters_only: every query's one filter (random_query_make) */
    bool mixed;              /* with filters_only: every fourth query a bag of words without filters */
    uint32_t streams;        /* isn_gpu_options.streams (0: the default) */
} tree_run;

/* check_trees's second batch's statistics (its one query). */
static isn_gpu_batch_stats second_batch;

/* The run's NUM_QUERIES random trees on the device against the CPU's exhaustive answers; *st: the first
 * batch's statistics. */
static void check_trees(const tree_run *run, isn_gpu_batch_stats *st) {
    static tree_batch tb;
    char err[ISN_ERR_LEN];
    uint32_t changed = 0, seeds = 0;
    const bool emulate = run->emulate;
    const isn_mode mode = run->mode;
    const uint32_t k = run->k;
    for (uint32_t q = 0; q < NUM_QUERIES; q++) {
        random_query rq;
        random_query_make(&rq, run->filters_only, run->only_filter);
        const bool plain_bag = run->mixed && q % 4 == 3;
        if (plain_bag) rq.num_filters = 0;
        isn_query parsed;
        if (isn_query_parse_syntax(searcher, rq.text, strlen(rq.text), rq.filters, rq.num_filters, &parsed, err,
                                   sizeof err) != 0)
            fail_msg("'%s': %s", rq.text, err);
        if (!plain_bag) assert_non_null(parsed.structure);
        assert_true(isn_gpu_takes_query(&parsed, NULL));
        assert_true(parsed.num_terms <= 8);
        tb.queries[q] = parsed;
        if (parsed.structure) {
            size_t bytes = isn_query_structure_bytes(parsed.structure);
            assert_true(bytes <= sizeof tb.trees[q]);
            isn_query_structure_copy(tb.trees[q], parsed.structure);
            tb.queries[q].structure = (const isn_query_structure *)(const void *)tb.trees[q];
        }
        memcpy(tb.terms[q], parsed.terms, parsed.num_terms * sizeof *parsed.terms);
        tb.queries[q].terms = tb.terms[q];
        snprintf(tb.texts[q], sizeof tb.texts[q], "%s", rq.text);
        for (uint32_t f = 0; f < rq.num_filters; f++)
            snprintf(tb.texts[q] + strlen(tb.texts[q]), sizeof tb.texts[q] - strlen(tb.texts[q]), " [%s]",
                     rq.filter_said[f]);
        isn_search_options so;
        isn_search_options_default(&so);
        so.mode = mode;
        so.algo = mode == ISN_MODE_AND ? ISN_ALGO_AND : ISN_ALGO_OR; /* exhaustive: the reference */
        so.k = k;
        assert_int_equal(isn_search(searcher, &tb.queries[q], &so, tb.expected[q], &tb.expected_n[q], NULL, err, sizeof err), 0);
        /* the same words as a bag, without operators or filters: the tree must change the answer */
        char bag[256];
        size_t at = 0;
        for (const char *c = rq.text; *c; c++)
            if (*c != '+' && *c != '-') bag[at++] = *c;
        bag[at] = '\0';
        isn_query plain;
        uint32_t n_plain = 0;
        assert_int_equal(isn_query_parse(searcher, bag, at, &plain, err, sizeof err), 0);
        assert_int_equal(isn_search(searcher, &plain, &so, tb.unrestricted, &n_plain, NULL, err, sizeof err), 0);
        bool same = n_plain == tb.expected_n[q];
        for (uint32_t i = 0; same && i < n_plain; i++)
            same = tb.unrestricted[i].doc == tb.expected[q][i].doc && tb.unrestricted[i].score == tb.expected[q][i].score;
        changed += !same;
        tb.requests[q] = (isn_gpu_request){.query = &tb.queries[q], .mode = mode, .k = k, .hits = tb.hits[q]};
        if (run->seeded && mode == ISN_MODE_OR) {
            uint32_t probed = 0;
            tb.requests[q].threshold = isn_threshold_probe(ix, &tb.queries[q], k, NULL, 0, NULL, &probed);
            /* a seed the device may start from: never above the tree's own k-th score */
            if (tb.expected_n[q] == k)
                assert_true(tb.requests[q].threshold <= (double)tb.expected[q][k - 1].score * (1 + 1e-6));
            else
                assert_true(tb.requests[q].threshold == 0.0);
            seeds += tb.requests[q].threshold > 0.0;
        }
    }
    /* most trees restrict their bag's answer: a device that ignored them would differ */
    if (changed < NUM_QUERIES / 2 && !run->only_filter) fail_msg("only %u of %u trees change their bag of words' answer", changed, NUM_QUERIES);
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = emulate;
    o.max_batch = NUM_QUERIES;
    o.max_k = MAX_K;
    o.pruning = run->pruning;
    o.and_by_ranges = run->and_by_ranges;
    if (run->streams) o.streams = run->streams;
    isn_gpu_backend *b = isn_gpu_open(ix, &o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_true(h.attribute_bytes > 0);
    /* in two batches, the second of one query, so that the filters' offsets in a batch are checked too */
    assert_int_equal(isn_gpu_search_batch(b, tb.requests, NUM_QUERIES - 1, st, err, sizeof err), 0);
    assert_int_equal(isn_gpu_search_batch(b, tb.requests + NUM_QUERIES - 1, 1, &second_batch, err, sizeof err), 0);
    for (uint32_t q = 0; q < NUM_QUERIES; q++) {
        const isn_gpu_request *r = &tb.requests[q];
        if (r->answered_by != ISN_GPU_ANSWERED_DEVICE)
            fail_msg("'%s' (%s k %u): answered on the CPU: %s", tb.texts[q], mode ? "AND" : "OR", k,
                     r->fallback_reason ? r->fallback_reason : "?");
        if (r->num_hits != tb.expected_n[q])
            fail_msg("'%s' (%s k %u, %s): %u hits, CPU %u", tb.texts[q], mode ? "AND" : "OR", k,
                     emulate ? "emulated" : "GPU", r->num_hits, tb.expected_n[q]);
        for (uint32_t i = 0; i < r->num_hits; i++)
            if (r->hits[i].doc != tb.expected[q][i].doc || r->hits[i].score != tb.expected[q][i].score)
                fail_msg("'%s' (%s k %u, %s) hit %u: doc %u %.9g, CPU doc %u %.9g", tb.texts[q], mode ? "AND" : "OR", k,
                         emulate ? "emulated" : "GPU", i, r->hits[i].doc, (double)r->hits[i].score, tb.expected[q][i].doc,
                         (double)tb.expected[q][i].score);
    }
    printf("%s %s k=%u%s%s%s: %u %s equal to the CPU's exhaustive answers, all on the device (%u change their bag's; "
           "%u seeded; accumulators wide %u compact %u narrow %u bounds %u; ranges pruned %llu, rescored %llu; postings "
           "decoded %llu, scored %llu; reports %llu)\n",
           emulate ? "emulated" : "GPU", mode ? "AND" : "OR", k, run->pruning == ISN_GPU_PRUNE_ALWAYS ? " pruned" : "",
           run->and_by_ranges ? " by ranges" : "", mode == ISN_MODE_AND && !run->and_by_ranges ? " probed" : "",
           NUM_QUERIES, run->mixed ? "bags of words, three in four with filters" : run->filters_only ? "bags of words with filters" : "trees", changed, seeds,
           st->accumulator_queries[ISN_GPU_ACC_WIDE], st->accumulator_queries[ISN_GPU_ACC_COMPACT],
           st->accumulator_queries[ISN_GPU_ACC_NARROW], st->accumulator_queries[ISN_GPU_ACC_BOUNDS],
           (unsigned long long)st->ranges_pruned, (unsigned long long)st->ranges_rescored,
           (unsigned long long)st->postings_decoded, (unsigned long long)st->postings_scored,
           (unsigned long long)st->reports);
    isn_gpu_close(b);
}

static void test_trees_equal_the_cpu(void **state) {
    bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    static const uint32_t ks[] = {10, MAX_K};
    for (int mode = 0; mode < 2; mode++)
        for (size_t i = 0; i < 2; i++)
            for (int p = ISN_GPU_PRUNE_ALWAYS; p <= ISN_GPU_PRUNE_NEVER; p++) {
                const tree_run run = {.emulate = emulate, .mode = (isn_mode)mode, .k = ks[i], .pruning = p};
                isn_gpu_batch_stats st;
                check_trees(&run, &st);
            }
}

/* Bags of words with filters take the unfiltered query's passes, each of which must test the filters:
 * k 10 samples (unpruned: the sample's k-th best report is the other ranges' floor; pruned: their
 * threshold), k 32 takes the bound pass (on a GPU also with its log of crossings overflowing), k 1,000 one
 * round of narrow or compact counters (on a GPU; the emulated device runs their logic on doubles); AND probes the
 * rarest list, or takes the range passes. */
static void test_filtered_bags_take_the_fast_path(void **state) {
    bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    static const uint32_t ks[] = {10, 32, MAX_K};
    for (size_t i = 0; i < 3; i++)
        for (int p = ISN_GPU_PRUNE_ALWAYS; p <= ISN_GPU_PRUNE_NEVER; p++) {
            const tree_run run = {.emulate = emulate, .filters_only = true, .mode = ISN_MODE_OR, .k = ks[i], .pruning = p};
            isn_gpu_batch_stats st;
            check_trees(&run, &st);
            const uint32_t queries = NUM_QUERIES - 1;
            /* the bound pass takes every one (on a GPU, those whose sums fit its narrow counters; the others
             * take compact ones, also in one round) */
            if (p == ISN_GPU_PRUNE_NEVER && ks[i] == 32 && emulate)
                assert_int_equal(st.accumulator_queries[ISN_GPU_ACC_BOUNDS], queries);
            if (p == ISN_GPU_PRUNE_NEVER && ks[i] == 32 && !emulate) {
                assert_true(st.accumulator_queries[ISN_GPU_ACC_BOUNDS] > 0);
                assert_int_equal(st.accumulator_queries[ISN_GPU_ACC_BOUNDS] + st.accumulator_queries[ISN_GPU_ACC_COMPACT],
                                 queries);
            }
            if (p == ISN_GPU_PRUNE_NEVER && !emulate) /* none takes the match counts' wide accumulator */
                assert_int_equal(st.accumulator_queries[ISN_GPU_ACC_WIDE], 0);
            if (p == ISN_GPU_PRUNE_ALWAYS && ks[i] == 10) /* sampled, then pruned at the sample's threshold */
                assert_true(st.ranges_pruned + st.blocks_skipped > 0);
            /* the filters most queries share are tested on bitmaps (four a stream), the others on the columns:
             * both ways are checked here */
            assert_true(st.filter_bitmaps_built > 0);
            assert_true(st.filter_bitmap_queries > 0 && st.filter_bitmap_queries < queries);
        }
    if (!emulate) {
        /* the bound pass adds every posting and tests the filters where a count crosses the floor, and in the scan
         * of its group's counts where that log overflows (ISN_GPU_CROSSING_LOG=1: a log of one slot); a scan that
         * reported the documents the filters drop would differ from the CPU. k 10 and 1,000 (seeded: narrow counters
         * with a floor) scan theirs too. */
        setenv("ISN_GPU_CROSSING_LOG", "1", 1);
        uint64_t scanned = 0;
        for (size_t i = 0; i < 3; i++) {
            const tree_run run = {.emulate = false, .filters_only = true, .seeded = true, .mode = ISN_MODE_OR,
                                  .k = ks[i], .pruning = ISN_GPU_PRUNE_NEVER};
            isn_gpu_batch_stats st;
            check_trees(&run, &st);
            printf("GPU k=%u, a crossing log of one slot: %llu ranges scanned\n", ks[i],
                   (unsigned long long)st.ranges_scanned);
            if (ks[i] == 32) assert_true(st.accumulator_queries[ISN_GPU_ACC_BOUNDS] > 0);
            scanned += st.ranges_scanned;
        }
        unsetenv("ISN_GPU_CROSSING_LOG");
        assert_true(scanned > 0);
    }
    {
        /* the bound pass's queries of one batch with filters on a bitmap, on the columns and none, each in its
         * kernel (their queries listed by variant): each answered as the CPU does */
        const tree_run run = {.emulate = emulate, .filters_only = true, .mixed = true, .mode = ISN_MODE_OR, .k = 32,
                              .pruning = ISN_GPU_PRUNE_NEVER};
        isn_gpu_batch_stats st;
        check_trees(&run, &st);
        if (emulate) assert_int_equal(st.accumulator_queries[ISN_GPU_ACC_BOUNDS], NUM_QUERIES - 1);
        else assert_true(st.accumulator_queries[ISN_GPU_ACC_BOUNDS] > 0);
        assert_true(st.filter_bitmap_queries > 0 && st.filter_bitmap_queries < NUM_QUERIES - 1);
    }
    {
        /* ISN_GPU_BOUND_PASS_FILTERED=0 (to compare): the same batch's queries with filters leave the bound pass, its
         * plain bags (one in four) stay on it, and every one is answered as the CPU does */
        setenv("ISN_GPU_BOUND_PASS_FILTERED", "0", 1);
        const tree_run run = {.emulate = emulate, .filters_only = true, .mixed = true, .mode = ISN_MODE_OR, .k = 32,
                              .pruning = ISN_GPU_PRUNE_NEVER};
        isn_gpu_batch_stats st;
        check_trees(&run, &st);
        unsetenv("ISN_GPU_BOUND_PASS_FILTERED");
        assert_true(st.accumulator_queries[ISN_GPU_ACC_BOUNDS] > 0);
        assert_true(st.accumulator_queries[ISN_GPU_ACC_BOUNDS] <= NUM_QUERIES / 4);
    }
    for (int by_ranges = 0; by_ranges < 2; by_ranges++)
        for (size_t i = 0; i < 3; i += 2) {
            const tree_run run = {.emulate = emulate, .filters_only = true, .and_by_ranges = by_ranges,
                                  .mode = ISN_MODE_AND, .k = ks[i], .pruning = ISN_GPU_PRUNE_NEVER};
            isn_gpu_batch_stats st;
            check_trees(&run, &st);
        }
}

/* Bags of words with filters seeded with the CPU's probe of their tree (isnd's scheduler hands it to the device
 * as bench_gpu does): the same answers as the CPU's, and the seed reaches the device, so it does less work than
 * for the same queries unseeded: pruned batches score fewer postings from their first round, unpruned ones
 * report only documents at or above the floor (k 32: the bound pass with a floor). Before the backend took a
 * tree's seed it dropped it, and the two runs did the same work. Trees with required and excluded terms get
 * the seed too and must still answer as the CPU does (the device does not prune them). */
static void test_filtered_bags_take_the_seed(void **state) {
    bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    static const uint32_t ks[] = {10, 32};
    for (size_t i = 0; i < 2; i++)
        for (int p = ISN_GPU_PRUNE_ALWAYS; p <= ISN_GPU_PRUNE_NEVER; p++) {
            isn_gpu_batch_stats plain, seeded;
            tree_run run = {.emulate = emulate, .filters_only = true, .mode = ISN_MODE_OR, .k = ks[i], .pruning = p};
            support_rng_seed(4000 + ks[i]); /* the same queries in both runs */
            check_trees(&run, &plain);
            run.seeded = true;
            support_rng_seed(4000 + ks[i]);
            check_trees(&run, &seeded);
            if (p == ISN_GPU_PRUNE_ALWAYS)
                assert_true(seeded.postings_scored < plain.postings_scored);
            else if (ks[i] == 32)
                assert_true(seeded.reports < plain.reports);
        }
    const tree_run trees = {.emulate = emulate, .seeded = true, .mode = ISN_MODE_OR, .k = 10, .pruning = ISN_GPU_PRUNE_ALWAYS};
    isn_gpu_batch_stats st;
    check_trees(&trees, &st);
}

/* Filter bitmaps (gpu_query.pass_slot, filter_bitmaps.h) are kept from batch to batch: a batch whose queries all
 * share one filter builds one bitmap and tests every query on it; the next batch with that filter on the same
 * stream builds none and uses it; answers equal the CPU's in both, for a keyword, a negated keyword, an int range
 * and a value list, pruned and not. */
static void test_filter_bitmaps_are_kept(void **state) {
    bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    static const char *const filters[] = {"section=games", "section!=libs", "year>=2010", "section in {net, web}",
                                          "year<2000"};
    for (size_t f = 0; f < sizeof filters / sizeof *filters; f++)
        for (int p = ISN_GPU_PRUNE_ALWAYS; p <= ISN_GPU_PRUNE_NEVER; p++) {
            const tree_run run = {.emulate = emulate, .filters_only = true, .only_filter = filters[f],
                                  .mode = ISN_MODE_OR, .k = 10, .pruning = p, .streams = 1};
            isn_gpu_batch_stats st;
            check_trees(&run, &st);
            assert_int_equal(st.filter_bitmaps_built, 1);
            assert_int_equal(st.filter_bitmap_queries, NUM_QUERIES - 1);
            assert_int_equal(second_batch.filter_bitmaps_built, 0);
            assert_int_equal(second_batch.filter_bitmap_queries, 1);
        }
}

/* A filter that follows the doc ids (a date on a partition in crawl order) keeps a few of the ranges: the range
 * passes skip the others, whose postings its bitmap drops every one of (gpu_pass_keeps_ranges), for answers
 * equal to the CPU's. Each of the first batch's queries scores at most the ranges (or bound groups) that hold
 * a document the filter keeps; without the skip each scored every range its lists reach, about 15. */
/* Bags of words with a filter bitmap and a report floor (k 64 seeded with the CPU's probe: the short kernel, one round)
 * are scored several ranges a step, their accumulator's slots numbered by the documents the bitmap keeps
 * (report_ranked), and answer as the CPU does, also where a step's crossing log overflows (ISN_GPU_CROSSING_LOG=1: its
 * ranges reported from a scan of their counters); with one range a step (ISN_GPU_RANKED=1) they answer the same and
 * take no such step. k 1,000 unseeded (round 2 at the sample's floor, where the sample has k) is checked against the
 * CPU either way. k 32 seeded takes the bound pass: in ranked steps of several groups of ranges (report_bounds_ranked)
 * where a report block has the groups to fill one, here given a block for all 15 ranges (ISN_GPU_MIN_RANGES_PER_BLOCK),
 * and then a query whose filter keeps a tenth of the documents (section=games) has all five groups in one step, where
 * one group a step took up to five; with a group a block, as this small batch gets by default, no ranked step, nor
 * for a filter that follows the doc ids (serial>=60000: the zone maps show it keeps nothing of ranges 0..6). */
static void test_filtered_bags_take_ranked_steps(void **state) {
    (void)state;
    if (!support_have_gpu()) skip();
    for (int ranked = 1; ranked >= 0; ranked--) {
        if (ranked) unsetenv("ISN_GPU_RANKED");
        else setenv("ISN_GPU_RANKED", "1", 1);
        for (int log = 0; log < 2; log++) {
            if (log) setenv("ISN_GPU_CROSSING_LOG", "1", 1);
            else unsetenv("ISN_GPU_CROSSING_LOG");
            static const struct {
                uint32_t k;
                bool seeded;
                bool whole_blocks; /* a report block takes every range of the partition */
                const char *only_filter;
                bool follows_ids; /* the filter keeps nothing of some ranges, by the zone maps */
            } cases[] = {{64, true, false, NULL, false},
                         {MAX_K, false, false, NULL, false},
                         {32, true, false, NULL, false},
                         {32, true, true, NULL, false},
                         {32, true, true, "section=games", false},
                         {32, true, true, "serial>=60000", true}};
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                const tree_run run = {.emulate = false, .filters_only = true, .seeded = cases[c].seeded,
                                      .only_filter = cases[c].only_filter, .mode = ISN_MODE_OR, .k = cases[c].k,
                                      .pruning = ISN_GPU_PRUNE_NEVER};
                isn_gpu_batch_stats st;
                if (cases[c].whole_blocks) setenv("ISN_GPU_MIN_RANGES_PER_BLOCK", "15", 1);
                check_trees(&run, &st);
                unsetenv("ISN_GPU_MIN_RANGES_PER_BLOCK");
                printf("GPU k=%u %s%s%s%s, %s, crossing log %s: %llu ranked steps, %llu ranges scored (%llu scanned), "
                       "%llu bitmap queries\n",
                       cases[c].k, cases[c].seeded ? "seeded" : "sampled", cases[c].whole_blocks ? ", whole blocks" : "",
                       cases[c].only_filter ? ", " : "", cases[c].only_filter ? cases[c].only_filter : "",
                       ranked ? "ranked" : "one range a step",
                       log ? "of one slot" : "as configured", (unsigned long long)st.ranked_steps,
                       (unsigned long long)st.ranges_scored, (unsigned long long)st.ranges_scanned,
                       (unsigned long long)st.filter_bitmap_queries);
                assert_true(st.filter_bitmap_queries > 0);
                const bool follows_ids = cases[c].follows_ids;
                if (!ranked || (cases[c].k == 32 && (!cases[c].whole_blocks || follows_ids)))
                    assert_int_equal(st.ranked_steps, 0);
                else if (cases[c].seeded) assert_true(st.ranked_steps > 0);
                if (ranked && cases[c].seeded && log) assert_true(st.ranges_scanned > 0);
                if (cases[c].k == 32) assert_true(st.accumulator_queries[ISN_GPU_ACC_BOUNDS] > 0);
                if (ranked && cases[c].only_filter && !follows_ids &&
                    st.ranked_steps > st.accumulator_queries[ISN_GPU_ACC_BOUNDS])
                    fail_msg("k 32, section=games, whole blocks: %llu ranked steps for %u queries on the bound pass",
                             (unsigned long long)st.ranked_steps, st.accumulator_queries[ISN_GPU_ACC_BOUNDS]);
            }
        }
    }
    unsetenv("ISN_GPU_CROSSING_LOG");
    unsetenv("ISN_GPU_RANKED");
}

static void test_filters_skip_ranges_they_keep_nothing_of(void **state) {
    bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    static const struct {
        const char *filter;
        uint32_t ranges; /* of GPU_RANGE_DOCS documents (8,192) holding a document it keeps */
    } cases[] = {{"serial<16384", 2}, {"serial>=106496", 2}, {"serial>=60000", 8}};
    static const uint32_t ks[] = {10, 1000};
    /* seeded, so that the bound pass takes them: it skips whole groups of ranges */
    const tree_run bounded = {.emulate = emulate, .filters_only = true, .only_filter = "serial>=60000", .seeded = true,
                              .mode = ISN_MODE_OR, .k = 32, .pruning = ISN_GPU_PRUNE_NEVER, .streams = 1};
    isn_gpu_batch_stats bst;
    check_trees(&bounded, &bst);
    /* its documents lie in ranges 7..14: groups 2..4 of three ranges for the bound pass, 8 ranges for the others
     * (without the skip: 5 groups, 15 ranges) */
    const uint64_t bounded_queries = bst.accumulator_queries[ISN_GPU_ACC_BOUNDS];
    assert_true(bounded_queries > 0);
    if (bst.ranges_scored > bounded_queries * 3 + (NUM_QUERIES - 1 - bounded_queries) * 8)
        fail_msg("serial>=60000 k 32: %llu ranges or groups scored, %llu queries on the bound pass",
                 (unsigned long long)bst.ranges_scored, (unsigned long long)bounded_queries);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t i = 0; i < sizeof ks / sizeof *ks; i++)
            for (int p = ISN_GPU_PRUNE_ALWAYS; p <= ISN_GPU_PRUNE_NEVER; p++) {
                const tree_run run = {.emulate = emulate, .filters_only = true, .only_filter = cases[c].filter,
                                      .mode = ISN_MODE_OR, .k = ks[i], .pruning = p, .streams = 1};
                isn_gpu_batch_stats st;
                check_trees(&run, &st);
                assert_int_equal(st.filter_bitmap_queries, NUM_QUERIES - 1);
                if (st.ranges_scored > (uint64_t)(NUM_QUERIES - 1) * cases[c].ranges)
                    fail_msg("'%s' k %u: %llu ranges scored for %u queries, at most %u each", cases[c].filter, ks[i],
                             (unsigned long long)st.ranges_scored, NUM_QUERIES - 1, cases[c].ranges);
                assert_true(st.ranges_pruned > 0);
            }
}

/* A filter that keeps a few of the ranges has its answers there: its report lists are sized for those ranges
 * (attribute_zones.h), so fewer of them fill up and are scored again than with lists sized for every range
 * (ISN_GPU_ZONE_MAPS=0), for the same queries and the same answers. */
static void test_filtered_report_lists_fit_the_kept_ranges(void **state) {
    bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    isn_gpu_batch_stats zoned, unzoned;
    for (int z = 0; z < 2; z++) {
        if (z == 0) setenv("ISN_GPU_ZONE_MAPS", "0", 1);
        else unsetenv("ISN_GPU_ZONE_MAPS");
        support_rng_seed(41); /* the same queries both times */
        /* k 32: lists of 8 a range for all 15, of 29 for the 2 kept, too long for the bound pass either way */
        const tree_run run = {.emulate = emulate, .filters_only = true, .only_filter = "serial<16384",
                              .mode = ISN_MODE_OR, .k = 32, .pruning = ISN_GPU_PRUNE_NEVER, .streams = 1};
        check_trees(&run, z ? &zoned : &unzoned);
    }
    if (zoned.ranges_rescored >= unzoned.ranges_rescored)
        fail_msg("ranges scored again: %llu with lists for the kept ranges, %llu with lists for all",
                 (unsigned long long)zoned.ranges_rescored, (unsigned long long)unzoned.ranges_rescored);
}

/* Phrases and field: clauses read positions: the device does not take them, says why, and the backend
 * answers them on the CPU with that reason. */
static void test_phrases_go_to_the_cpu(void **state) {
    bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    static const char *const texts[] = {"\"w1 w2\" w3", "body:w1 +w2"};
    char err[ISN_ERR_LEN];
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = emulate;
    isn_gpu_backend *b = isn_gpu_open(ix, &o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        isn_query q;
        assert_int_equal(isn_query_parse_syntax(searcher, texts[i], strlen(texts[i]), NULL, 0, &q, err, sizeof err), 0);
        const char *why = NULL;
        assert_false(isn_gpu_takes_query(&q, &why));
        assert_non_null(strstr(why, "positions"));
        isn_hit hits[10], want[10];
        uint32_t n = 0;
        isn_search_options so;
        isn_search_options_default(&so);
        so.k = 10;
        so.algo = ISN_ALGO_OR;
        assert_int_equal(isn_search(searcher, &q, &so, want, &n, NULL, err, sizeof err), 0);
        isn_gpu_request r = {.query = &q, .mode = ISN_MODE_OR, .k = 10, .hits = hits};
        isn_gpu_batch_stats st;
        assert_int_equal(isn_gpu_search_batch(b, &r, 1, &st, err, sizeof err), 0);
        assert_int_equal(r.answered_by, ISN_GPU_ANSWERED_CPU);
        assert_int_equal(st.fallbacks[ISN_GPU_FALLBACK_QUERY_TREE], 1);
        assert_int_equal(r.num_hits, n);
        for (uint32_t j = 0; j < n; j++) assert_true(hits[j].doc == want[j].doc && hits[j].score == want[j].score);
    }
    isn_gpu_close(b);
}

#define ON_EMULATED(test) {#test "_emulated", test, NULL, NULL, (void *)&EMULATED}
#define ON_GPU(test) {#test "_gpu", test, NULL, NULL, (void *)&REAL_GPU}

int main(void) {
    const struct CMUnitTest tests[] = {
        ON_EMULATED(test_trees_equal_the_cpu), ON_GPU(test_trees_equal_the_cpu),
        ON_EMULATED(test_filtered_bags_take_the_fast_path), ON_GPU(test_filtered_bags_take_the_fast_path),
        ON_EMULATED(test_filtered_bags_take_the_seed), ON_GPU(test_filtered_bags_take_the_seed),
        cmocka_unit_test(test_filtered_bags_take_ranked_steps),
        ON_EMULATED(test_phrases_go_to_the_cpu), ON_GPU(test_phrases_go_to_the_cpu),
        ON_EMULATED(test_filter_bitmaps_are_kept), ON_GPU(test_filter_bitmaps_are_kept),
        ON_EMULATED(test_filters_skip_ranges_they_keep_nothing_of), ON_GPU(test_filters_skip_ranges_they_keep_nothing_of),
        ON_EMULATED(test_filtered_report_lists_fit_the_kept_ranges), ON_GPU(test_filtered_report_lists_fit_the_kept_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
