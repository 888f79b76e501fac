/* The GPU's pruned-prefix cache on an index in global order (issue 41), on the emulated device: answers equal
 * the CPU's on a global-order index and an input-order one, OR and AND, k 10 and 1,000, under budgets that cut
 * lists to prefixes, with either admission; in global order the tail bound settles queries on the device that
 * the same cache without it sends to a CPU completion, a bound scaled up settles none and one scaled down
 * changes answers; admission by visit frequency stays within the budget and settles more of the training
 * log's queries than the capped admission at the same budget. With a dominant static prior (the same corpus with
 * static scores, in global order, isn_gpu_request.prior_weight 1) the bound with the prior's part settles more
 * queries than BM25's alone, every answer the CPU's with the prior, and the bound scaled down changes answers; a
 * cache replayed with the prior answers more of a log served with it without CPU work than one replayed without,
 * and it answers on the device held-out queries naming only lists its training log never names, which the
 * whole-list cache at the same budget sends to the CPU. The tier admission holds every list of more than one block
 * below one cut and answers on the device every query naming only such lists. With streaming, either cache answers
 * every query on the device, the lists it lacks copied in with the batch, and a staging region too small for a
 * batch's lists leaves the rest to the CPU, answers unchanged. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/files.h"
#include "tests/support/gpu_device.h"
#include "tests/support/random.h"

#define DOCS 40000
#define VOCABULARY 400
#define QUERIES 120

static char tmp_root[] = "/tmp/isn-test-gpu-prefix-bound-XXXXXX";
static char corpus_path[300], prior_corpus_path[300];
static isn_index *global_ix, *input_ix, *prior_ix;

/* Most documents long with each word once (small tf parts); one in 25 short, repeating its words (large
 * ones): in global order those come first, and the tail's bounds are low (test_early_termination's corpus,
 * larger, so that lists span many blocks). */
static void write_corpus(const char *path, bool priors) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    support_rng_seed(41);
    for (uint32_t d = 0; d < DOCS; d++) {
        const bool peaked = d % 25 == 0;
        const uint32_t words = peaked ? 3 + support_rng_below(5) : 20 + support_rng_below(60);
        fprintf(f, "{\"id\": \"d%u\", \"title\": \"t\", \"body\": \"", d);
        for (uint32_t w = 0; w < words; w++) {
            const uint32_t r = support_rng_below(VOCABULARY);
            const uint32_t term = support_rng_below(r + 1); /* Zipf-like */
            const uint32_t repeat = peaked ? 2 + support_rng_below(6) : 1;
            for (uint32_t k = 0; k < repeat; k++) fprintf(f, "%sw%u", w || k ? " " : "", term);
        }
        fputs("\"", f);
        if (priors) { /* log-normal, dominant over BM25 for many documents; drawn after the words, so the words are
                       * the plain corpus's */
            const double u = support_rng_unit(), v = support_rng_unit();
            fprintf(f, ", \"prior\": %.9g", 10.0 * exp(2.0 * sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v)));
        }
        fputs("}\n", f);
    }
    assert_int_equal(fclose(f), 0);
}

static isn_index *build(const char *path, isn_doc_order order, const char *name) {
    char dir[400], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    isn_build_options o;
    isn_build_options_default(&o);
    o.progress = false;
    o.order = order;
    if (path == prior_corpus_path) snprintf(o.static_score_field, sizeof o.static_score_field, "prior");
    isn_build_summary s;
    if (isn_build_from_file(path, dir, &o, &s, err, sizeof err) != 0) fail_msg("build %s: %s", name, err);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open %s: %s", name, err);
    return ix;
}

/* A log of 1..3-word queries (seeded: the same words for both indexes), each with the CPU's answers. */
typedef struct {
    uint32_t n;
    isn_query queries[QUERIES];
    isn_query_term terms[QUERIES][8];
} query_log;

/* parity 0 or 1: only the even or the odd words (-1: any), so that two logs name no word in common, with words of
 * the same document frequencies. */
static void make_log_of(isn_index *ix, uint64_t seed, int parity, query_log *log) {
    isn_searcher *s = isn_searcher_new(ix);
    support_rng_seed(seed);
    log->n = 0;
    char err[ISN_ERR_LEN];
    for (uint32_t q = 0; q < QUERIES; q++) {
        char text[128];
        size_t len = 0;
        const uint32_t words = 1 + support_rng_below(3);
        for (uint32_t w = 0; w < words; w++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%sw%u", w ? " " : "",
                                    parity < 0 ? support_rng_below(VOCABULARY / 4)
                                               : 2 * support_rng_below(VOCABULARY / 8) + (uint32_t)parity);
        isn_query parsed;
        assert_int_equal(isn_query_parse(s, text, len, &parsed, err, sizeof err), 0);
        if (parsed.num_terms == 0 || parsed.num_terms > 8) continue;
        isn_query *dst = &log->queries[log->n];
        memcpy(log->terms[log->n], parsed.terms, parsed.num_terms * sizeof *parsed.terms);
        *dst = (isn_query){.terms = log->terms[log->n], .num_terms = parsed.num_terms, .num_unknown = parsed.num_unknown};
        log->n++;
    }
    isn_searcher_free(s);
}

static void make_log(isn_index *ix, uint64_t seed, query_log *log) { make_log_of(ix, seed, -1, log); }

static uint64_t payload_bytes(isn_index *ix) {
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = true;
    char err[ISN_ERR_LEN];
    isn_gpu_backend *b = isn_gpu_open(ix, &o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    isn_gpu_close(b);
    return h.index_bytes;
}

/* The prior weight open_cache's replay scores with (isn_gpu_options.training_prior_weight). */
static float replay_prior;

/* A cache of `fraction` of the index's device bytes on the emulated device, trained on `train` (k, mode: the
 * replay's). */
static isn_gpu_options cache_options(isn_index *ix, double fraction, int admission, const query_log *train,
                                     uint32_t k, isn_mode mode) {
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = true;
    o.max_batch = QUERIES;
    o.max_k = 1000;
    o.cpu_threads = 1;
    o.memory_budget = (uint64_t)((double)payload_bytes(ix) * fraction);
    o.training_queries = train->queries;
    o.num_training_queries = train->n;
    o.admission = admission;
    o.training_k = k;
    o.training_mode = mode;
    o.training_prior_weight = replay_prior;
    return o;
}

static isn_gpu_backend *open_with(isn_index *ix, const isn_gpu_options *o) {
    char err[ISN_ERR_LEN];
    isn_gpu_backend *b = isn_gpu_open(ix, o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    return b;
}

static isn_gpu_backend *open_cache(isn_index *ix, double fraction, int admission, const query_log *train, uint32_t k,
                                   isn_mode mode) {
    const isn_gpu_options o = cache_options(ix, fraction, admission, train, k, mode);
    isn_gpu_backend *b = open_with(ix, &o);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_true(h.terms_prefix > 0); /* the budget cuts lists */
    assert_true(h.bytes_resident <= o.memory_budget);
    return b;
}

/* A whole-list cache (the capped admission, prefix_cap 1) trained on `train`; it need not cut any list. */
static isn_gpu_backend *open_whole(isn_index *ix, double fraction, const query_log *train) {
    isn_gpu_options o = cache_options(ix, fraction, ISN_GPU_ADMIT_CAPPED, train, 10, ISN_MODE_OR);
    o.prefix_cap = 1.0;
    return open_with(ix, &o);
}

typedef struct {
    uint32_t mismatches, on_prefixes, completed, avoided, settled, cpu;
    uint32_t streamed, lists_streamed; /* streaming: queries answered with lists streamed for them, and the lists */
} outcome;

/* The log on the backend with a static prior of weight w (0: none), every answer compared with the CPU's
 * (mismatches counted, not failed on: the loosened bound's test expects some). */
static outcome run_log_weighted(isn_gpu_backend *b, isn_index *ix, const query_log *log, uint32_t k, isn_mode mode,
                                float w) {
    static isn_gpu_request req[QUERIES];
    static isn_hit got[QUERIES][1000], want[1000];
    isn_searcher *s = isn_searcher_new(ix);
    for (uint32_t q = 0; q < log->n; q++) {
        req[q] = (isn_gpu_request){.query = &log->queries[q], .mode = mode, .k = k, .prior_weight = w,
                                   .threshold_with_prior = true, .hits = got[q]};
        uint32_t probed = 0;
        if (mode == ISN_MODE_OR)
            req[q].threshold = isn_threshold_probe_prior(ix, &log->queries[q], k, w, NULL, 0, NULL, &probed);
    }
    isn_gpu_batch_stats st;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_gpu_search_batch(b, req, log->n, &st, err, sizeof err), 0);
    outcome out = {.completed = st.prefix_queries, .avoided = st.completions_avoided, .settled = st.bound_settled,
                   .cpu = st.cpu_queries, .streamed = st.queries_streamed, .lists_streamed = st.lists_streamed};
    out.on_prefixes = st.prefix_queries + st.completions_avoided;
    for (uint32_t q = 0; q < log->n; q++) {
        isn_search_options o;
        isn_search_options_default(&o);
        o.k = k;
        o.mode = mode;
        o.prior_weight = w;
        uint32_t n = 0;
        assert_int_equal(isn_search(s, &log->queries[q], &o, want, &n, NULL, err, sizeof err), 0);
        bool same = req[q].num_hits == n;
        for (uint32_t i = 0; same && i < n; i++) same = got[q][i].doc == want[i].doc && got[q][i].score == want[i].score;
        out.mismatches += !same;
    }
    isn_searcher_free(s);
    return out;
}

static outcome run_log(isn_gpu_backend *b, isn_index *ix, const query_log *log, uint32_t k, isn_mode mode) {
    return run_log_weighted(b, ix, log, k, mode, 0.0f);
}

/* Equality with the CPU in both orders, both admissions, OR and AND, k 10 and 1,000, at a fifth of the
 * index; in global order some queries are settled on the device. */
static void test_equality_on_prefixes(void **state) {
    (void)state;
    static query_log train, log;
    static const uint32_t ks[] = {10, 1000};
    static const int admissions[] = {ISN_GPU_ADMIT_VISITS, ISN_GPU_ADMIT_CAPPED};
    for (int global = 1; global >= 0; global--) {
        isn_index *ix = global ? global_ix : input_ix;
        make_log(ix, 1, &train);
        make_log(ix, 2, &log);
        uint32_t avoided = 0;
        for (size_t a = 0; a < 2; a++)
            for (int mode = 0; mode < 2; mode++)
                for (size_t i = 0; i < 2; i++) {
                    const isn_mode m = mode ? ISN_MODE_AND : ISN_MODE_OR;
                    isn_gpu_backend *b = open_cache(ix, 0.2, admissions[a], &train, ks[i], m);
                    const outcome o = run_log(b, ix, &log, ks[i], m);
                    print_message("%s order, %s admission, %s k=%u: %u on prefixes, %u completed on the CPU, %u settled "
                                  "by the bound (%u in all), %u on the CPU, %u mismatches\n",
                                  global ? "global" : "input", a ? "capped" : "visits", mode ? "AND" : "OR", ks[i],
                                  o.on_prefixes, o.completed, o.avoided, o.settled, o.cpu, o.mismatches);
                    assert_int_equal(o.mismatches, 0);
                    assert_true(o.on_prefixes > 0);
                    if (!global) assert_int_equal(o.avoided + o.settled, 0);
                    avoided += o.avoided;
                    isn_gpu_close(b);
                }
        if (global) assert_true(avoided > 0);
    }
}

/* The bound settles queries that the same cache (the capped admission's, which does not depend on the bound)
 * would otherwise complete on the CPU; scaled up tenfold it settles none (every query on prefixes goes to the
 * CPU), scaled down to a third it is no bound and answers change. */
static void test_bound_settles_and_a_wrong_bound_is_caught(void **state) {
    (void)state;
    static query_log train, log;
    make_log(global_ix, 1, &train);
    make_log(global_ix, 2, &log);
    isn_gpu_backend *b = open_cache(global_ix, 0.2, ISN_GPU_ADMIT_CAPPED, &train, 10, ISN_MODE_OR);
    const outcome exact = run_log(b, global_ix, &log, 10, ISN_MODE_OR);
    isn_gpu_close(b);
    setenv("ISN_GPU_TAIL_BOUND_PERCENT", "1000", 1);
    b = open_cache(global_ix, 0.2, ISN_GPU_ADMIT_CAPPED, &train, 10, ISN_MODE_OR);
    const outcome loose = run_log(b, global_ix, &log, 10, ISN_MODE_OR);
    isn_gpu_close(b);
    setenv("ISN_GPU_TAIL_BOUND_PERCENT", "30", 1);
    b = open_cache(global_ix, 0.2, ISN_GPU_ADMIT_CAPPED, &train, 10, ISN_MODE_OR);
    const outcome tight = run_log(b, global_ix, &log, 10, ISN_MODE_OR);
    isn_gpu_close(b);
    unsetenv("ISN_GPU_TAIL_BOUND_PERCENT");
    print_message("exact bound: %u of %u on prefixes settled (%u completed), %u mismatches; x10: %u settled (%u "
                  "completed); x0.3: %u settled, %u mismatches\n",
                  exact.avoided, exact.on_prefixes, exact.completed, exact.mismatches, loose.avoided, loose.completed,
                  tight.avoided, tight.mismatches);
    assert_int_equal(exact.mismatches, 0);
    assert_true(exact.avoided > 0);
    assert_true(exact.completed < exact.on_prefixes);
    assert_int_equal(loose.mismatches, 0);
    assert_int_equal(loose.avoided, 0);
    assert_int_equal(loose.on_prefixes, exact.on_prefixes);
    assert_int_equal(loose.completed, loose.on_prefixes);
    assert_true(tight.mismatches > 0);
}

/* A dominant static prior in global order: the tail bound with the prior's part (isn_prior_bound of the static
 * scores' suffix maximum) settles more of the same cache's queries than BM25's bound at weight 0, OR and AND, k 10
 * and 1,000, every answer the CPU's with the prior; scaled down to a third it is no bound and answers change. */
static void test_prior_bound_settles_and_a_wrong_one_is_caught(void **state) {
    (void)state;
    static query_log train, log;
    make_log(prior_ix, 1, &train);
    make_log(prior_ix, 2, &log);
    uint32_t settled[2] = {0, 0};
    for (int mode = 0; mode < 2; mode++)
        for (uint32_t k = 10; k <= 1000; k *= 100) {
            const isn_mode m = mode ? ISN_MODE_AND : ISN_MODE_OR;
            isn_gpu_backend *b = open_cache(prior_ix, 0.2, ISN_GPU_ADMIT_CAPPED, &train, k, m);
            for (int with = 0; with < 2; with++) {
                const outcome o = run_log_weighted(b, prior_ix, &log, k, m, with ? 1.0f : 0.0f);
                print_message("dominant prior, %s k=%u, weight %d: %u on prefixes, %u completed on the CPU, %u settled "
                              "by the bound (%u in all), %u mismatches\n",
                              mode ? "AND" : "OR", k, with, o.on_prefixes, o.completed, o.avoided, o.settled,
                              o.mismatches);
                assert_int_equal(o.mismatches, 0);
                settled[with] += o.avoided;
            }
            isn_gpu_close(b);
        }
    assert_true(settled[1] > settled[0]);
    setenv("ISN_GPU_TAIL_BOUND_PERCENT", "30", 1);
    isn_gpu_backend *b = open_cache(prior_ix, 0.2, ISN_GPU_ADMIT_CAPPED, &train, 10, ISN_MODE_OR);
    const outcome tight = run_log_weighted(b, prior_ix, &log, 10, ISN_MODE_OR, 1.0f);
    isn_gpu_close(b);
    unsetenv("ISN_GPU_TAIL_BOUND_PERCENT");
    print_message("dominant prior, the bound x0.3: %u settled, %u mismatches\n", tight.avoided, tight.mismatches);
    assert_true(tight.mismatches > 0);
}

/* The replay with the prior (isn_gpu_options.training_prior_weight): a dominant prior settles queries far earlier
 * than BM25 alone, so the prefixes admitted by needs completed per byte, trained on one log and serving another with
 * the prior, answer more of its queries without CPU work (settled on the device, or wholly resident) and send fewer
 * to the CPU than the same admission replayed without the prior, OR at k 10 at two budgets, every answer the CPU's.
 * A replay weight the index cannot take (no static scores) fails the open, saying why. */
static void test_replay_with_the_prior(void **state) {
    (void)state;
    static query_log train, log;
    make_log(prior_ix, 1, &train);
    make_log(prior_ix, 2, &log);
    static const double fractions[] = {0.05, 0.1};
    for (size_t f = 0; f < sizeof fractions / sizeof *fractions; f++) {
        outcome o[2];
        for (int with = 0; with < 2; with++) {
            replay_prior = with ? 1.0f : 0.0f;
            isn_gpu_backend *b = open_cache(prior_ix, fractions[f], ISN_GPU_ADMIT_PREFIXES, &train, 10, ISN_MODE_OR);
            o[with] = run_log_weighted(b, prior_ix, &log, 10, ISN_MODE_OR, 1.0f);
            isn_gpu_close(b);
            assert_int_equal(o[with].mismatches, 0);
        }
        replay_prior = 0.0f;
        const uint32_t alone[2] = {log.n - o[0].completed - o[0].cpu, log.n - o[1].completed - o[1].cpu};
        print_message("%.0f%% of the index, served with the prior: replayed with it %u without CPU work, %u completed, %u "
                      "on the CPU; without it %u, %u, %u\n",
                      fractions[f] * 100, alone[1], o[1].completed, o[1].cpu, alone[0], o[0].completed, o[0].cpu);
        assert_true(alone[1] > alone[0]);
        assert_true(o[1].cpu < o[0].cpu);
    }
    static query_log plain;
    make_log(global_ix, 1, &plain);
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = true;
    o.memory_budget = payload_bytes(global_ix) / 10;
    o.training_queries = plain.queries;
    o.num_training_queries = plain.n;
    o.admission = ISN_GPU_ADMIT_PREFIXES;
    o.training_prior_weight = 1.0f;
    char err[ISN_ERR_LEN] = "";
    assert_null(isn_gpu_open(global_ix, &o, err, sizeof err));
    print_message("a replay weight without static scores: %s\n", err);
    assert_non_null(strstr(err, "static scores"));
}

/* Admission by visit frequency, trained on the log it then serves (k 10, OR): within the budget, and more of
 * that log's queries settled on the device than under the capped admission at the same budget; admitting the
 * queries' visited blocks whole, cheapest first, answers at least as many without CPU work. */
static void test_visit_admission(void **state) {
    (void)state;
    static query_log log;
    make_log(global_ix, 3, &log);
    static const double fractions[] = {0.05, 0.1, 0.2};
    for (size_t f = 0; f < sizeof fractions / sizeof *fractions; f++) {
        isn_gpu_backend *b = open_cache(global_ix, fractions[f], ISN_GPU_ADMIT_VISITS, &log, 10, ISN_MODE_OR);
        const outcome visits = run_log(b, global_ix, &log, 10, ISN_MODE_OR);
        isn_gpu_close(b);
        b = open_cache(global_ix, fractions[f], ISN_GPU_ADMIT_QUERIES, &log, 10, ISN_MODE_OR);
        const outcome queries = run_log(b, global_ix, &log, 10, ISN_MODE_OR);
        isn_gpu_close(b);
        b = open_cache(global_ix, fractions[f], ISN_GPU_ADMIT_PREFIXES, &log, 10, ISN_MODE_OR);
        const outcome prefixes = run_log(b, global_ix, &log, 10, ISN_MODE_OR);
        isn_gpu_close(b);
        b = open_cache(global_ix, fractions[f], ISN_GPU_ADMIT_CAPPED, &log, 10, ISN_MODE_OR);
        const outcome capped = run_log(b, global_ix, &log, 10, ISN_MODE_OR);
        isn_gpu_close(b);
        print_message("%.0f%% of the index: visits: %u settled, %u completed, %u on the CPU; queries: %u settled, %u "
                      "completed, %u on the CPU; prefixes: %u settled, %u completed, %u on the CPU; capped: %u settled, "
                      "%u completed, %u on the CPU\n",
                      fractions[f] * 100, visits.avoided, visits.completed, visits.cpu, queries.avoided,
                      queries.completed, queries.cpu, prefixes.avoided, prefixes.completed, prefixes.cpu, capped.avoided,
                      capped.completed, capped.cpu);
        assert_int_equal(visits.mismatches + queries.mismatches + prefixes.mismatches + capped.mismatches, 0);
        assert_true(prefixes.avoided > capped.avoided);
        assert_true(visits.avoided > capped.avoided);
        /* whole queries first: at least as many of the log answered without any CPU work */
        assert_true(queries.avoided + (log.n - queries.on_prefixes - queries.cpu) >=
                    visits.avoided + (log.n - visits.on_prefixes - visits.cpu));
    }
}

/* Held-out queries naming only words the training log never names (its words even, theirs odd, of the same
 * document frequencies), served with the prior: with ISN_GPU_UNNAMED_LISTS=1 the pruned cache admits leading
 * blocks of the lists the log never names by their bands' expected namings (naming_rates.h) and answers more of them on the device than the
 * whole-list cache at the same budget, which spends it on the logged lists; every answer the CPU's. */
static void test_unnamed_lists_take_prefixes(void **state) {
    (void)state;
    static query_log train, held_out;
    make_log_of(prior_ix, 4, 0, &train);
    make_log_of(prior_ix, 5, 1, &held_out);
    replay_prior = 1.0f;
    setenv("ISN_GPU_UNNAMED_LISTS", "1", 1);
    static const double fractions[] = {0.1, 0.2};
    for (size_t f = 0; f < sizeof fractions / sizeof *fractions; f++) {
        isn_gpu_backend *b = open_cache(prior_ix, fractions[f], ISN_GPU_ADMIT_PREFIXES, &train, 10, ISN_MODE_OR);
        const outcome pruned = run_log_weighted(b, prior_ix, &held_out, 10, ISN_MODE_OR, 1.0f);
        isn_gpu_close(b);
        b = open_whole(prior_ix, fractions[f], &train);
        const outcome whole = run_log_weighted(b, prior_ix, &held_out, 10, ISN_MODE_OR, 1.0f);
        isn_gpu_close(b);
        print_message("%.0f%% of the index, %u held-out queries: pruned %u on the CPU, %u completed; whole lists %u on "
                      "the CPU\n", fractions[f] * 100, held_out.n, pruned.cpu, pruned.completed, whole.cpu);
        assert_int_equal(pruned.mismatches + whole.mismatches, 0);
        assert_true(pruned.cpu < whole.cpu);
    }
    unsetenv("ISN_GPU_UNNAMED_LISTS");
    replay_prior = 0.0f;
}

/* Whether a query names a list of one block (the tier admission never holds one). */
static bool names_one_block_list(isn_index *ix, const isn_query *q) {
    for (uint32_t t = 0; t < q->num_terms; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, q->terms[t].term_id, &st);
        if (st.num_blocks == 1) return true;
    }
    return false;
}

/* The tier at `fraction` of ix's device bytes, opened without a training log: it reads none. */
static isn_gpu_backend *open_tier(isn_index *ix, double fraction, isn_gpu_options *o) {
    static const query_log no_log;
    *o = cache_options(ix, fraction, ISN_GPU_ADMIT_TIER, &no_log, 10, ISN_MODE_OR);
    o->training_queries = NULL;
    return open_with(ix, o);
}

/* The tier admission (no training log): every list of more than one block resident below one cut, within the
 * budget. Every query naming only such lists is answered on the device, the CPU completing what the cut does
 * not settle, and only queries naming a list of one block go to the CPU whole; every answer the CPU's, OR and AND,
 * k 10 and 1,000, with the prior; at a larger budget the cut is higher; and the held-out queries naming words the
 * training log never names, which the whole-list cache sends to the CPU, are answered on the device. */
static void test_tier_admission(void **state) {
    (void)state;
    static query_log train, held_out;
    make_log_of(prior_ix, 4, 0, &train);
    make_log_of(prior_ix, 5, 1, &held_out);
    /* the last queries name a word of the vocabulary's rare end too, most of whose lists are one block */
    isn_searcher *s = isn_searcher_new(prior_ix);
    for (uint32_t i = 0; i < 8; i++) {
        char text[64], err[ISN_ERR_LEN];
        const int len = snprintf(text, sizeof text, "w%u w%u", 2 * i + 1, VOCABULARY - 1 - i);
        isn_query parsed;
        assert_int_equal(isn_query_parse(s, text, (size_t)len, &parsed, err, sizeof err), 0);
        isn_query *dst = &held_out.queries[held_out.n - 1 - i];
        memcpy(held_out.terms[held_out.n - 1 - i], parsed.terms, parsed.num_terms * sizeof *parsed.terms);
        *dst = (isn_query){.terms = held_out.terms[held_out.n - 1 - i], .num_terms = parsed.num_terms,
                           .num_unknown = parsed.num_unknown};
    }
    isn_searcher_free(s);
    uint32_t one_block = 0;
    for (uint32_t q = 0; q < held_out.n; q++) one_block += names_one_block_list(prior_ix, &held_out.queries[q]);
    assert_true(one_block > 0 && one_block < held_out.n);
    static const double fractions[] = {0.1, 0.2};
    static const uint32_t ks[] = {10, 1000};
    uint32_t cuts[2];
    for (size_t f = 0; f < 2; f++) {
        isn_gpu_options o;
        isn_gpu_backend *b = open_tier(prior_ix, fractions[f], &o);
        isn_gpu_health h;
        isn_gpu_health_get(b, &h);
        assert_true(h.bytes_resident <= o.memory_budget);
        assert_true(h.tier_docs > 0 && h.tier_docs < isn_index_get_info(prior_ix)->num_docs);
        assert_true(h.terms_prefix > 0);
        cuts[f] = h.tier_docs;
        for (int mode = 0; mode < 2; mode++)
            for (size_t i = 0; i < 2; i++) {
                const isn_mode m = mode ? ISN_MODE_AND : ISN_MODE_OR;
                const outcome t = run_log_weighted(b, prior_ix, &held_out, ks[i], m, 1.0f);
                print_message("tier at %.0f%% (cut %u), %s k=%u: %u on the CPU (%u name a list of one block), %u "
                              "completed, %u settled\n", fractions[f] * 100, h.tier_docs, mode ? "AND" : "OR", ks[i],
                              t.cpu, one_block, t.completed, t.avoided);
                assert_int_equal(t.mismatches, 0);
                assert_int_equal(t.cpu, one_block);
            }
        isn_gpu_close(b);
        b = open_whole(prior_ix, fractions[f], &train);
        const outcome whole = run_log_weighted(b, prior_ix, &held_out, 10, ISN_MODE_OR, 1.0f);
        isn_gpu_close(b);
        assert_int_equal(whole.mismatches, 0);
        assert_true(whole.cpu > one_block);
    }
    assert_true(cuts[1] > cuts[0]);
    /* in input order nothing is settled at the cut, and every query on the device is completed: still the CPU's */
    isn_gpu_options o;
    isn_gpu_backend *b = open_tier(input_ix, 0.2, &o);
    static query_log input_log;
    make_log(input_ix, 2, &input_log);
    for (size_t i = 0; i < 2; i++) {
        const outcome t = run_log(b, input_ix, &input_log, ks[i], ISN_MODE_OR);
        assert_int_equal(t.mismatches, 0);
        assert_true(t.completed > 0);
    }
    isn_gpu_close(b);
}

/* Streaming (isn_gpu_options.stream_bytes): on the whole-list cache and on the tier, each at a tenth of the index, the
 * held-out queries naming lists the training log never names (and, for the tier, lists of one block), which both
 * send to the CPU or complete there without it, are all answered on the device with their missing lists streamed:
 * OR and AND, k 10 and 1,000, with the prior, in global and in input order; every answer the CPU's. A region of
 * 64 KiB holds only part of a batch's lists: the rest go to the CPU, answers unchanged. On the emulated device, and on
 * a real GPU when there is one (the CUDA device's gather kernel). */
static const bool EMULATED = true, REAL_GPU = false;

static void test_streaming(void **state) {
    const bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    static query_log train, held_out, input_log;
    make_log_of(prior_ix, 4, 0, &train);
    make_log_of(prior_ix, 5, 1, &held_out);
    make_log(input_ix, 2, &input_log);
    static const uint32_t ks[] = {10, 1000};
    for (int cache = 0; cache < 2; cache++) {
        isn_gpu_options o;
        isn_gpu_backend *b;
        if (cache == 0) {
            b = open_whole(prior_ix, 0.1, &train);
            const outcome without = run_log_weighted(b, prior_ix, &held_out, 10, ISN_MODE_OR, 1.0f);
            assert_true(without.cpu > 0);
            isn_gpu_close(b);
            o = cache_options(prior_ix, 0.1, ISN_GPU_ADMIT_CAPPED, &train, 10, ISN_MODE_OR);
            o.prefix_cap = 1.0;
        } else {
            b = open_tier(prior_ix, 0.1, &o);
            const outcome without = run_log_weighted(b, prior_ix, &held_out, 1000, ISN_MODE_OR, 1.0f);
            assert_true(without.cpu + without.completed > 0);
            isn_gpu_close(b);
        }
        o.stream_bytes = 64u << 20;
        o.emulate = emulate;
        b = open_with(prior_ix, &o);
        isn_gpu_health h;
        isn_gpu_health_get(b, &h);
        assert_true(h.stream_bytes >= 2ull * (64u << 20));
        for (int mode = 0; mode < 2; mode++)
            for (size_t i = 0; i < 2; i++) {
                const isn_mode m = mode ? ISN_MODE_AND : ISN_MODE_OR;
                const outcome t = run_log_weighted(b, prior_ix, &held_out, ks[i], m, 1.0f);
                print_message("%s: %s at 10%% streaming, %s k=%u: %u streamed (%u lists), %u on the CPU, %u "
                              "completed\n", emulate ? "emulated" : "GPU", cache ? "tier" : "whole lists", mode ? "AND" : "OR", ks[i], t.streamed, t.lists_streamed,
                              t.cpu, t.completed);
                assert_int_equal(t.mismatches, 0);
                assert_int_equal(t.cpu, 0);
                assert_int_equal(t.completed, 0);
                assert_true(t.streamed > 0 && t.lists_streamed > 0);
            }
        isn_gpu_health_get(b, &h);
        assert_true(h.queries_streamed > 0 && h.bytes_streamed > 0);
        isn_gpu_close(b);
    }
    /* input order: nothing settles early, every list streamed whole all the same */
    isn_gpu_options o = cache_options(input_ix, 0.1, ISN_GPU_ADMIT_CAPPED, &train, 10, ISN_MODE_OR);
    o.training_queries = NULL;
    o.num_training_queries = 0;
    o.prefix_cap = 1.0;
    o.stream_bytes = 64u << 20;
    o.emulate = emulate;
    isn_gpu_backend *b = open_with(input_ix, &o);
    for (size_t i = 0; i < 2; i++) {
        const outcome t = run_log(b, input_ix, &input_log, ks[i], ISN_MODE_OR);
        assert_int_equal(t.mismatches, 0);
        assert_int_equal(t.cpu, 0);
        assert_true(t.streamed > 0);
    }
    isn_gpu_close(b);
    /* a region too small for the batch's lists: some streamed, the rest on the CPU */
    o = cache_options(prior_ix, 0.1, ISN_GPU_ADMIT_CAPPED, &train, 10, ISN_MODE_OR);
    o.prefix_cap = 1.0;
    o.stream_bytes = 64u << 10;
    o.emulate = emulate;
    b = open_with(prior_ix, &o);
    const outcome t = run_log_weighted(b, prior_ix, &held_out, 10, ISN_MODE_OR, 1.0f);
    print_message("whole lists at 10%% streaming into 64 KiB: %u streamed (%u lists), %u on the CPU\n", t.streamed,
                  t.lists_streamed, t.cpu);
    assert_int_equal(t.mismatches, 0);
    assert_true(t.streamed > 0 && t.cpu > 0);
    isn_gpu_close(b);
}

static int setup(void **state) {
    (void)state;
    snprintf(corpus_path, sizeof corpus_path, "%s/corpus.jsonl", tmp_root);
    snprintf(prior_corpus_path, sizeof prior_corpus_path, "%s/prior-corpus.jsonl", tmp_root);
    write_corpus(corpus_path, false);
    write_corpus(prior_corpus_path, true);
    global_ix = build(corpus_path, ISN_ORDER_GLOBAL, "global");
    input_ix = build(corpus_path, ISN_ORDER_INPUT, "input");
    prior_ix = build(prior_corpus_path, ISN_ORDER_GLOBAL, "prior-global");
    return 0;
}

static int cleanup(void **state) {
    (void)state;
    isn_index_close(global_ix);
    isn_index_close(input_ix);
    isn_index_close(prior_ix);
    return support_remove_tree(tmp_root);
}

int main(void) {
    if (!mkdtemp(tmp_root)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equality_on_prefixes),
        cmocka_unit_test(test_bound_settles_and_a_wrong_bound_is_caught),
        cmocka_unit_test(test_prior_bound_settles_and_a_wrong_one_is_caught),
        cmocka_unit_test(test_visit_admission),
        cmocka_unit_test(test_replay_with_the_prior),
        cmocka_unit_test(test_unnamed_lists_take_prefixes),
        cmocka_unit_test(test_tier_admission),
        cmocka_unit_test_prestate(test_streaming, (void *)&EMULATED),
        cmocka_unit_test_prestate(test_streaming, (void *)&REAL_GPU),
    };
    return cmocka_run_group_tests(tests, setup, cleanup);
}
