/* The GPU first stage with a static prior (isn_gpu_request.prior_weight, issue 41): the device adds the prior
 * itself. On random partitions of several doc-id ranges with static scores that tie (zeros among them), that
 * are signed, that are all 0 or below, that dominate BM25 and that are tiny, in input and global order:
 * batches of bags of words (OR and AND), query trees (+required, -excluded, OR and AND) and bags with a
 * filter, k 10 and 1,000, pruned and exhaustive, with weights 0, 0.25, 1 and 7.5, are answered by the device
 * itself with exactly isn_search's hits and float scores at that weight (the OR queries at k 10 also seeded
 * with the prior's threshold probe). Weight 0 does the same work on a partition with static scores as on the
 * same one without. A pruned-prefix cache completes queries with a prior on the CPU with the same answers. In
 * global order a dominant prior settles queries early: their range passes stop at the probe's floor, and
 * resident prefixes need no CPU completion, more than without the prior. A BM25-only threshold is ignored for
 * a request with a prior; a partition without static scores, or a weight that overflows them, is answered by
 * the CPU, as isn_search answers it. Runs on the emulated device; the same checks run on a real GPU when there
 * is one (skipped, and saying so, where there is none). */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/gpu_device.h"
#include "tests/support/index_builder.h"
#include "tests/support/random.h"

#define NUM_DOCS 30000u /* four ranges of 8,192 documents */
#define VOCAB 300u
#define BATCH 40u
#define MAX_K 1000u
#define MAX_TERMS 160u

typedef enum { PRIOR_TIES, PRIOR_SIGNED, PRIOR_NEGATIVE, PRIOR_DOMINANT, PRIOR_TINY, PRIOR_NONE } prior_kind;
static const char *const kind_names[] = {"ties", "signed", "negative", "dominant", "tiny", "none"};
static const char *const langs[] = {"en", "de", "fr"};

static double word_cdf[VOCAB];

static uint32_t zipf_word(void) { return support_pick_cdf(word_cdf, VOCAB, support_rng_unit()); }

/* BM25 on this corpus stays below ~40: a dominant prior decides most of a top k, a tiny one breaks ties. */
static float draw_prior(prior_kind kind) {
    switch (kind) {
    case PRIOR_TIES: return (float)support_rng_below(4) * 0.5f;
    case PRIOR_SIGNED: return ((float)support_rng_below(33) - 16.0f) * 0.25f;
    case PRIOR_NEGATIVE: return -(float)support_rng_below(17) * 0.25f; /* every score at most its BM25 */
    case PRIOR_DOMINANT: return (float)(10.0 * exp(2.0 * support_rng_normal()));
    case PRIOR_TINY: return (float)(support_rng_unit() * 1e-4);
    default: return 0.0f;
    }
}

typedef struct {
    prior_kind kind;
    uint64_t seed;
} corpus;

/* The same documents for a seed whatever the kind; the priors drawn first, from a stream of their own. */
static void write_docs(void *user, FILE *f) {
    const corpus *c = user;
    static float priors[NUM_DOCS];
    support_rng_seed(c->seed ^ 0x5eed);
    for (uint32_t d = 0; d < NUM_DOCS; d++) priors[d] = draw_prior(c->kind);
    support_rng_seed(c->seed);
    for (uint32_t d = 0; d < NUM_DOCS; d++) {
        const char *lang = langs[support_rng_below(3)];
        fprintf(f, "{\"id\": \"d%u\", \"lang\": \"%s\", \"title\": \"w%u\", \"body\": \"", d, lang, zipf_word());
        for (uint32_t i = 0, n = 3 + support_rng_below(support_rng_below(8) == 0 ? 60 : 15); i < n; i++)
            fprintf(f, "%sw%u", i ? " " : "", zipf_word());
        fputs("\"", f);
        if (c->kind != PRIOR_NONE) fprintf(f, ", \"prior\": %.9g", (double)priors[d]);
        fputs("}\n", f);
    }
}

static void build(support_index *ix, prior_kind kind, isn_doc_order order, uint64_t seed) {
    corpus c = {kind, seed};
    isn_build_options o;
    support_jsonl_build_options(&o);
    if (kind != PRIOR_NONE) snprintf(o.static_score_field, sizeof o.static_score_field, "prior");
    o.order = order;
    o.positions = false;
    o.num_attributes = 1;
    o.attributes[0] = (isn_attribute_spec){.name = "lang", .kind = ISN_ATTRIBUTE_KEYWORD};
    char name[48];
    snprintf(name, sizeof name, "gpu-prior-%s", kind_names[kind]);
    if (support_index_build_jsonl(ix, name, &o, write_docs, &c) != 0) fail_msg("building the %s index", name);
    assert_int_equal(isn_index_get_info(ix->index)->num_docs, NUM_DOCS);
}

static const bool EMULATED = true, REAL_GPU = false;

static bool device_under_test(void **state) {
    const bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    return emulate;
}

/* ------------------------------------------------------------------ batches */

/* A batch of queries (copied out of the searcher, trees included), the CPU's answers and the device's. */
typedef struct {
    uint32_t n;
    isn_query queries[BATCH];
    isn_query_term terms[BATCH][MAX_TERMS];
    uint8_t trees[BATCH][2048];
    char texts[BATCH][1024];
    isn_gpu_request requests[BATCH];
    isn_hit hits[BATCH][MAX_K], expected[BATCH][MAX_K];
    uint32_t expected_n[BATCH];
} batch;

static const isn_filter_spec english = {.attribute = "lang", .op = ISN_FILTER_EQ, .values = (const char *const[]){"en"},
                                        .num_values = 1};

/* Conjunctive queries through the range passes instead of probing (isn_gpu_options.and_by_ranges). */
static bool and_by_ranges;
/* OR queries of long_terms..long_terms + 31 words (scored in chunks of GPU terms; 0: the usual 1..4). */
static uint32_t long_terms;

/* Only OR bags, with and without the filter (the queries a leading round takes: gpu_query.lead_ranges). */
static bool or_bags_only;

/* Query q of a batch: OR bags, AND bags, OR trees, AND trees, filtered OR bags, by q's place. */
static void query_text(uint32_t q, char *text, size_t cap, isn_mode *mode, bool *filtered) {
    const uint32_t kind = or_bags_only ? (q % 2 ? 4 : 0) : q % 5;
    *mode = kind == 1 || kind == 3 ? ISN_MODE_AND : ISN_MODE_OR;
    *filtered = kind == 4;
    const uint32_t words = long_terms && kind == 0 ? long_terms + support_rng_below(32)
                                                   : 1 + support_rng_below(kind == 1 ? 3 : 4);
    size_t at = 0;
    for (uint32_t i = 0; i < words; i++) {
        /* trees: the first word required, another excluded now and then */
        const char *op = kind == 2 || kind == 3 ? (i == 0 ? "+" : support_rng_below(3) == 0 ? "-" : "") : "";
        /* AND: the head, or nothing matches; long queries: uniform, so that most of their words are distinct */
        const uint32_t word = kind == 1                    ? support_rng_below(40)
                              : long_terms && kind == 0 ? support_rng_below(VOCAB)
                                                        : zipf_word();
        at += (size_t)snprintf(text + at, cap - at, "%s%sw%u", i ? " " : "", op, word);
    }
}

/* Fills the batch with fresh queries and the CPU's answers with weight w (the exhaustive algorithms, which
 * test_static_prior checks against the oracle). seeded: the OR queries carry the prior's threshold probe
 * (threshold_with_prior). */
static void batch_fill(batch *bt, const support_index *ix, uint32_t n, uint32_t k, float w, bool seeded) {
    char err[ISN_ERR_LEN];
    bt->n = n;
    for (uint32_t q = 0; q < n; q++) {
        isn_mode mode;
        bool filtered;
        query_text(q, bt->texts[q], sizeof bt->texts[q], &mode, &filtered);
        isn_query parsed;
        if (isn_query_parse_syntax(ix->searcher, bt->texts[q], strlen(bt->texts[q]), filtered ? &english : NULL,
                                   filtered ? 1 : 0, &parsed, err, sizeof err) != 0)
            fail_msg("'%s': %s", bt->texts[q], err);
        assert_true(parsed.num_terms <= MAX_TERMS);
        bt->queries[q] = parsed;
        memcpy(bt->terms[q], parsed.terms, parsed.num_terms * sizeof *parsed.terms);
        bt->queries[q].terms = bt->terms[q];
        if (parsed.structure) {
            assert_true(isn_query_structure_bytes(parsed.structure) <= sizeof bt->trees[q]);
            isn_query_structure_copy(bt->trees[q], parsed.structure);
            bt->queries[q].structure = (const isn_query_structure *)(const void *)bt->trees[q];
        }
        isn_search_options so;
        isn_search_options_default(&so);
        so.mode = mode;
        so.algo = mode == ISN_MODE_AND ? ISN_ALGO_AND : ISN_ALGO_OR;
        so.k = k;
        so.prior_weight = w;
        if (isn_search(ix->searcher, &bt->queries[q], &so, bt->expected[q], &bt->expected_n[q], NULL, err,
                       sizeof err) != 0)
            fail_msg("'%s' W %g: %s", bt->texts[q], (double)w, err);
        bt->requests[q] = (isn_gpu_request){.query = &bt->queries[q], .mode = mode, .k = k, .prior_weight = w,
                                            .hits = bt->hits[q]};
        if (seeded && mode == ISN_MODE_OR) {
            uint32_t probed = 0;
            const double seed = isn_threshold_probe_prior(ix->index, &bt->queries[q], k, w, NULL, 0, NULL, &probed);
            if (seed > 0.0) assert_true(bt->expected_n[q] == k && seed <= (double)bt->expected[q][k - 1].score);
            bt->requests[q].threshold = seed;
            bt->requests[q].threshold_with_prior = true;
        }
    }
}

/* Fails on any answer that is not the CPU's; with on_device, on any the device did not give itself. Returns
 * how many the device answered. */
static uint32_t batch_check(const batch *bt, uint32_t k, float w, bool on_device, const char *what) {
    uint32_t device = 0;
    for (uint32_t q = 0; q < bt->n; q++) {
        const isn_gpu_request *r = &bt->requests[q];
        device += r->answered_by == ISN_GPU_ANSWERED_DEVICE;
        if (on_device && r->answered_by != ISN_GPU_ANSWERED_DEVICE)
            fail_msg("%s: '%s' (%s k %u W %g) answered on the CPU: %s", what, bt->texts[q],
                     r->mode == ISN_MODE_AND ? "AND" : "OR", k, (double)w,
                     r->fallback_reason ? r->fallback_reason : "?");
        uint32_t at = 0;
        while (at < r->num_hits && at < bt->expected_n[q] && r->hits[at].doc == bt->expected[q][at].doc &&
               memcmp(&r->hits[at].score, &bt->expected[q][at].score, sizeof(float)) == 0)
            at++;
        if (at < r->num_hits || at < bt->expected_n[q])
            fail_msg("%s: '%s' (%s k %u W %g): %u hits, the CPU %u; first difference at rank %u (doc %u score %.9g, "
                     "CPU doc %u score %.9g)",
                     what, bt->texts[q], r->mode == ISN_MODE_AND ? "AND" : "OR", k, (double)w, r->num_hits,
                     bt->expected_n[q], at, at < r->num_hits ? r->hits[at].doc : 0,
                     at < r->num_hits ? (double)r->hits[at].score : 0.0,
                     at < bt->expected_n[q] ? bt->expected[q][at].doc : 0,
                     at < bt->expected_n[q] ? (double)bt->expected[q][at].score : 0.0);
    }
    return device;
}

/* open_backend's isn_gpu_options.max_k */
static uint32_t backend_max_k = MAX_K;

static isn_gpu_backend *open_backend(const support_index *ix, bool emulate, int pruning, double fraction) {
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = emulate;
    o.and_by_ranges = and_by_ranges;
    o.max_batch = BATCH;
    o.max_k = backend_max_k;
    o.pruning = pruning;
    o.memory_fraction = fraction;
    o.cpu_threads = 2;
    char err[ISN_ERR_LEN];
    isn_gpu_backend *b = isn_gpu_open(ix->index, &o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    return b;
}

static void run_batch(isn_gpu_backend *b, batch *bt, isn_gpu_batch_stats *st) {
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_gpu_search_batch(b, bt->requests, bt->n, st, err, sizeof err), 0);
}

/* ------------------------------------------------------------------ the tests */

static const float weights[] = {0.0f, 0.25f, 1.0f, 7.5f};

/* Every kind of prior, both orders, every weight, k 10 and 1,000, pruned and exhaustive: the device's own
 * answers are isn_search's. */
static void test_answers_equal_the_cpu(void **state) {
    const bool emulate = device_under_test(state);
    static const prior_kind kinds[] = {PRIOR_TIES, PRIOR_SIGNED, PRIOR_NEGATIVE, PRIOR_DOMINANT, PRIOR_TINY};
    static const isn_doc_order orders[] = {ISN_ORDER_INPUT, ISN_ORDER_GLOBAL};
    static const uint32_t ks[] = {10, 1000};
    static batch bt;
    static support_index ix;
    for (size_t o = 0; o < 2; o++)
        for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
            build(&ix, kinds[i], orders[o], 11 + i);
            isn_gpu_health h;
            for (int pruning = ISN_GPU_PRUNE_ALWAYS; pruning <= ISN_GPU_PRUNE_NEVER; pruning++) {
                isn_gpu_backend *b = open_backend(&ix, emulate, pruning, 0.0);
                isn_gpu_health_get(b, &h);
                assert_true(h.static_score_bytes >= NUM_DOCS * sizeof(float));
                support_rng_seed(100 * o + 10 * i + (uint64_t)pruning);
                for (size_t wi = 0; wi < sizeof weights / sizeof *weights; wi++)
                    for (size_t ki = 0; ki < 2; ki++) {
                        const float w = weights[wi];
                        batch_fill(&bt, &ix, emulate && ks[ki] == 1000 ? 20 : BATCH, ks[ki], w, ks[ki] == 10);
                        isn_gpu_batch_stats st;
                        run_batch(b, &bt, &st);
                        char what[96];
                        snprintf(what, sizeof what, "%s prior, %s order, %s", kind_names[kinds[i]],
                                 o ? "global" : "input", pruning == ISN_GPU_PRUNE_ALWAYS ? "pruned" : "exhaustive");
                        batch_check(&bt, ks[ki], w, true, what);
                        assert_int_equal(st.cpu_queries, 0);
                        if (wi == 2)
                            printf("%s %s, k %u W %g: %u queries on the device, %llu ranges scored, %llu pruned, %llu "
                                   "rescored, %u settled by the bound\n",
                                   emulate ? "emulated" : "GPU", what, ks[ki], (double)w, st.device_queries,
                                   (unsigned long long)st.ranges_scored, (unsigned long long)st.ranges_pruned,
                                   (unsigned long long)st.ranges_rescored, st.bound_settled);
                    }
                isn_gpu_close(b);
            }
            support_index_close(&ix);
        }
}

static bool same_work(const isn_gpu_batch_stats *a, const isn_gpu_batch_stats *b) {
    return a->ranges_scored == b->ranges_scored && a->ranges_pruned == b->ranges_pruned &&
           a->ranges_rescored == b->ranges_rescored && a->postings_scored == b->postings_scored &&
           a->postings_decoded == b->postings_decoded && a->blocks_skipped == b->blocks_skipped &&
           a->candidates == b->candidates && a->reports == b->reports && a->bound_settled == b->bound_settled &&
           memcmp(a->accumulator_queries, b->accumulator_queries, sizeof a->accumulator_queries) == 0;
}

static void print_work(const char *what, const isn_gpu_batch_stats *st) {
    printf("  %s: ranges scored %llu pruned %llu rescored %llu, postings scored %llu decoded %llu, blocks skipped "
           "%llu, candidates %llu, reports %llu, bound settled %llu\n",
           what, (unsigned long long)st->ranges_scored, (unsigned long long)st->ranges_pruned,
           (unsigned long long)st->ranges_rescored, (unsigned long long)st->postings_scored,
           (unsigned long long)st->postings_decoded, (unsigned long long)st->blocks_skipped,
           (unsigned long long)st->candidates, (unsigned long long)st->reports, (unsigned long long)st->bound_settled);
}

/* Weight 0 on a partition with static scores: the answers and every counter of the device's work are those of
 * the same partition without them. */
static void test_weight_zero_is_unchanged(void **state) {
    const bool emulate = device_under_test(state);
    static support_index with, without;
    static batch a, b;
    build(&with, PRIOR_DOMINANT, ISN_ORDER_INPUT, 5);
    build(&without, PRIOR_NONE, ISN_ORDER_INPUT, 5);
    for (int pruning = ISN_GPU_PRUNE_ALWAYS; pruning <= ISN_GPU_PRUNE_NEVER; pruning++) {
        isn_gpu_backend *bw = open_backend(&with, emulate, pruning, 0.0);
        isn_gpu_backend *bo = open_backend(&without, emulate, pruning, 0.0);
        for (uint32_t k = 10; k <= 1000; k *= 100) {
            support_rng_seed(7 + k);
            batch_fill(&a, &with, BATCH, k, 0.0f, false);
            support_rng_seed(7 + k);
            batch_fill(&b, &without, BATCH, k, 0.0f, false);
            isn_gpu_batch_stats sa, sb;
            run_batch(bw, &a, &sa);
            run_batch(bo, &b, &sb);
            batch_check(&a, k, 0.0f, true, "weight 0 with static scores");
            batch_check(&b, k, 0.0f, true, "no static scores");
            for (uint32_t q = 0; q < a.n; q++) {
                assert_int_equal(a.requests[q].num_hits, b.requests[q].num_hits);
                assert_memory_equal(a.hits[q], b.hits[q], a.requests[q].num_hits * sizeof(isn_hit));
            }
            const char *how = pruning == ISN_GPU_PRUNE_ALWAYS ? "pruned" : "exhaustive";
            /* A real device's pruning races (a range's reports raise the floor the others read while they run),
             * so its counters differ between runs of one batch, and two runs that happen to agree prove nothing
             * (on the H200 one such pair matched while the other partition's run differed, and the next time all
             * agreed). The emulated device runs the same algorithm in a fixed order: there the work is compared;
             * on a GPU, the answers above. */
            if (!emulate) {
                printf("GPU weight 0, %s, k %u: the same answers with and without static scores (the device's work "
                       "counters race, so the emulated device's are the ones compared)\n", how, k);
                continue;
            }
            if (!same_work(&sa, &sb)) {
                print_work("with static scores", &sa);
                print_work("without", &sb);
                fail_msg("weight 0, %s, k %u: the device's work differs with static scores", how, k);
            }
            printf("%s weight 0, %s, k %u: the same answers and work with and without static scores (%llu postings "
                   "scored, %llu ranges pruned, %u bound passes)\n",
                   emulate ? "emulated" : "GPU", how, k,
                   (unsigned long long)sa.postings_scored, (unsigned long long)sa.ranges_pruned,
                   sa.accumulator_queries[ISN_GPU_ACC_BOUNDS]);
        }
        isn_gpu_close(bw);
        isn_gpu_close(bo);
    }
    support_index_close(&with);
    support_index_close(&without);
}

/* A pruned-prefix cache (a fifth of the postings): queries with a prior are answered on the resident prefixes
 * and completed on the CPU with the same prior, seeded with the device's k-th score, equal to isn_search's. */
static void test_prefix_cache_completes_with_the_prior(void **state) {
    const bool emulate = device_under_test(state);
    static const prior_kind kinds[] = {PRIOR_SIGNED, PRIOR_DOMINANT};
    static support_index ix;
    static batch bt;
    for (size_t i = 0; i < 2; i++) {
        build(&ix, kinds[i], i ? ISN_ORDER_GLOBAL : ISN_ORDER_INPUT, 23 + i);
        isn_gpu_backend *b = open_backend(&ix, emulate, ISN_GPU_PRUNE_AUTO, 0.2);
        isn_gpu_health h;
        isn_gpu_health_get(b, &h);
        assert_true(h.terms_prefix > 0);
        uint32_t completed = 0;
        support_rng_seed(31 + i);
        for (size_t wi = 1; wi < sizeof weights / sizeof *weights; wi++)
            for (uint32_t k = 10; k <= 1000; k *= 100) {
                batch_fill(&bt, &ix, emulate && k == 1000 ? 20 : BATCH, k, weights[wi], k == 10);
                isn_gpu_batch_stats st;
                run_batch(b, &bt, &st);
                batch_check(&bt, k, weights[wi], false, kind_names[kinds[i]]);
                assert_int_equal(st.fallbacks[ISN_GPU_FALLBACK_STATIC_PRIOR], 0);
                completed += st.prefix_queries;
                printf("%s %s prior, %s order, prefix cache, k %u W %g: %u completed on the CPU, %u settled, %u on the "
                       "CPU (a list not resident)\n",
                       emulate ? "emulated" : "GPU", kind_names[kinds[i]], i ? "global" : "input", k,
                       (double)weights[wi], st.prefix_queries, st.completions_avoided, st.cpu_queries);
            }
        assert_true(completed > 0);
        isn_gpu_close(b);
        support_index_close(&ix);
    }
}

/* The early end in global order under a dominant prior, on the device: OR queries at k 10 seeded with the
 * prior's probe stop their range passes where the tail bound (BM25's and the prior's) falls below the probe's
 * floor, and a prefix cache's queries are settled without a CPU completion; both for more queries than the same
 * queries without the prior, every answer the CPU's. */
static void test_dominant_prior_settles_early(void **state) {
    const bool emulate = device_under_test(state);
    static support_index ix;
    static batch bt;
    build(&ix, PRIOR_DOMINANT, ISN_ORDER_GLOBAL, 41);
    uint32_t settled[2] = {0, 0}, avoided[2] = {0, 0};
    uint64_t skipped[2] = {0, 0};
    for (int with = 0; with < 2; with++) {
        const float w = with ? 1.0f : 0.0f;
        isn_gpu_backend *whole = open_backend(&ix, emulate, ISN_GPU_PRUNE_NEVER, 0.0);
        isn_gpu_backend *cache = open_backend(&ix, emulate, ISN_GPU_PRUNE_NEVER, 0.2);
        support_rng_seed(43);
        for (uint32_t round = 0; round < 3; round++) {
            batch_fill(&bt, &ix, BATCH, 10, w, true);
            if (!with) /* without the prior, the BM25 probe */
                for (uint32_t q = 0; q < bt.n; q++)
                    if (bt.requests[q].mode == ISN_MODE_OR) {
                        uint32_t probed = 0;
                        bt.requests[q].threshold =
                            isn_threshold_probe(ix.index, &bt.queries[q], 10, NULL, 0, NULL, &probed);
                        bt.requests[q].threshold_with_prior = false;
                    }
            isn_gpu_batch_stats st;
            run_batch(whole, &bt, &st);
            batch_check(&bt, 10, w, true, "settled on the whole partition");
            settled[with] += st.bound_settled;
            skipped[with] += st.ranges_bound_skipped;
            run_batch(cache, &bt, &st);
            batch_check(&bt, 10, w, false, "settled on prefixes");
            avoided[with] += st.completions_avoided;
        }
        isn_gpu_close(whole);
        isn_gpu_close(cache);
    }
    printf("%s dominant prior, global order, k 10: settled %u queries (%llu ranges skipped) with the prior, %u (%llu) "
           "without; on prefixes %u completions avoided with it, %u without\n",
           emulate ? "emulated" : "GPU", settled[1], (unsigned long long)skipped[1], settled[0],
           (unsigned long long)skipped[0], avoided[1], avoided[0]);
    assert_true(settled[1] > settled[0]);
    assert_true(skipped[1] > skipped[0]);
    assert_true(avoided[1] > avoided[0]);
    support_index_close(&ix);
}

/* Global order under a dominant prior, OR queries (bags, some with a filter) at k 10 without the probe's seed:
 * the device scores the leading ranges first and prunes the others at their k-th best report (gpu_query.lead_ranges),
 * which is also their report floor, whether the batch prunes or not, so it scores under half the postings that the
 * same queries take without pruning (ISN_GPU_PRUNE_NEVER, every range scored whole) and skips more ranges whole,
 * with the backend's max_k 1,000 or k, every answer the CPU's. The leading ranges' reports are sized by the query's
 * k, not the device's max_k: on the emulated device the same work either way, and no leading range rescored (each
 * reports its share of k with room to spare). The second round ends on the device at the first range whose tail
 * bound is below the leading k-th best (gpu_query.lead_stop): those ranges are stopped, not visited, so the queries
 * visit fewer ranges than with ISN_GPU_LEAD_STOP=0, which visits (and prunes) every one. */
static void test_dominant_prior_leading_ranges(void **state) {
    const bool emulate = device_under_test(state);
    static support_index ix;
    static batch bt;
    build(&ix, PRIOR_DOMINANT, ISN_ORDER_GLOBAL, 47);
    /* AUTO with max_k 1,000 and 10, unpruned, and AUTO without the device's stop */
    enum { kConfigs = 4 };
    static const uint32_t max_ks[kConfigs] = {MAX_K, 10, MAX_K, MAX_K};
    static const int prunings[kConfigs] = {ISN_GPU_PRUNE_AUTO, ISN_GPU_PRUNE_AUTO, ISN_GPU_PRUNE_NEVER,
                                           ISN_GPU_PRUNE_AUTO};
    static const char *const names[kConfigs] = {"leading ranges first", "leading ranges first", "unpruned",
                                                "leading ranges first, no stop"};
    isn_gpu_backend *backends[kConfigs];
    for (int i = 0; i < kConfigs; i++) {
        backend_max_k = max_ks[i];
        if (i == 3) assert_int_equal(setenv("ISN_GPU_LEAD_STOP", "0", 1), 0);
        backends[i] = open_backend(&ix, emulate, prunings[i], 0.0);
        if (i == 3) assert_int_equal(unsetenv("ISN_GPU_LEAD_STOP"), 0);
    }
    backend_max_k = MAX_K;
    uint64_t scored[kConfigs] = {0}, pruned[kConfigs] = {0}, reports[kConfigs] = {0}, stopped[kConfigs] = {0};
    uint64_t rescored[kConfigs] = {0}, visited[kConfigs] = {0};
    support_rng_seed(47);
    or_bags_only = true;
    for (uint32_t round = 0; round < 3; round++) {
        batch_fill(&bt, &ix, BATCH, 10, 1.0f, false);
        for (int i = 0; i < kConfigs; i++) {
            isn_gpu_batch_stats st;
            run_batch(backends[i], &bt, &st);
            batch_check(&bt, 10, 1.0f, true, names[i]);
            scored[i] += st.postings_scored;
            pruned[i] += st.ranges_pruned;
            reports[i] += st.reports;
            stopped[i] += st.ranges_stopped;
            rescored[i] += st.ranges_rescored;
            visited[i] += st.ranges_scored + st.ranges_pruned;
        }
    }
    or_bags_only = false;
    for (int i = 0; i < kConfigs; i++) {
        printf("%s dominant prior, global order, k 10 unseeded, %s, max_k %u: %llu postings scored, %llu ranges visited, "
               "%llu pruned, %llu stopped, %llu rescored, %llu reports\n",
               emulate ? "emulated" : "GPU", names[i], max_ks[i], (unsigned long long)scored[i],
               (unsigned long long)visited[i], (unsigned long long)pruned[i], (unsigned long long)stopped[i],
               (unsigned long long)rescored[i], (unsigned long long)reports[i]);
        isn_gpu_close(backends[i]);
    }
    for (int i = 0; i < 2; i++) {
        assert_true(2 * scored[i] < scored[2]);
        assert_true(pruned[i] + stopped[i] > pruned[2]);
        /* the device's stop: fewer ranges visited than without it, the rest stopped */
        assert_true(stopped[i] > 0);
        assert_true(visited[i] < visited[3]);
        assert_int_equal(visited[i] + stopped[i], visited[3]);
    }
    assert_int_equal(stopped[3], 0);
    if (emulate) { /* (the CUDA device's counters may differ from run to run: its range passes race) */
        assert_int_equal(reports[0], reports[1]);
        assert_int_equal(scored[0], scored[1]);
        assert_int_equal(rescored[0], 0);
        assert_int_equal(rescored[1], 0);
    }
    support_index_close(&ix);
}

/* Global order with a prior of ties (PRIOR_TIES, weight 1: BM25 decides within them), OR bags at k 10 whose
 * requests carry the CPU's exact k-th score as their threshold, in unpruned batches (a fresh backend's first
 * streams + 1 batches are, prune_choice.c): the queries take leading ranges, and the device stops them after those
 * at that floor where it is above the leading ranges' k-th best (gpu_lead_stop_key: the host seeks the stop only
 * among the leading ranges, and an unpruned batch has no seed). So each batch stops at least the ranges the same
 * queries stop without a threshold, and more in all, every answer the CPU's. */
static void test_floor_stops_after_leading_ranges(void **state) {
    const bool emulate = device_under_test(state);
    static support_index ix;
    static batch bt;
    build(&ix, PRIOR_TIES, ISN_ORDER_GLOBAL, 53);
    const float w = 1.0f;
    support_rng_seed(53);
    or_bags_only = true;
    uint64_t cut[2] = {0, 0};
    for (uint32_t round = 0; round < 4; round++) {
        isn_gpu_backend *b = open_backend(&ix, emulate, ISN_GPU_PRUNE_AUTO, 0.0);
        batch_fill(&bt, &ix, BATCH, 10, w, false);
        uint64_t batch_cut[2];
        for (int floor = 0; floor < 2; floor++) {
            for (uint32_t q = 0; q < bt.n; q++) {
                const bool full = bt.expected_n[q] == 10 && bt.expected[q][9].score > 0.0f;
                bt.requests[q].threshold = floor && full ? (double)bt.expected[q][9].score : 0.0;
                bt.requests[q].threshold_with_prior = true;
            }
            isn_gpu_batch_stats st;
            run_batch(b, &bt, &st);
            batch_check(&bt, 10, w, true, floor ? "stopped at the floor" : "without a floor");
            assert_false(st.pruned);
            batch_cut[floor] = st.ranges_stopped + st.ranges_bound_skipped;
            cut[floor] += batch_cut[floor];
        }
        assert_true(batch_cut[1] >= batch_cut[0]);
        isn_gpu_close(b);
    }
    or_bags_only = false;
    printf("%s ties prior weight %g, global order, k 10, unpruned: %llu ranges stopped or skipped with the CPU's k-th "
           "score as the floor, %llu without\n",
           emulate ? "emulated" : "GPU", (double)w, (unsigned long long)cut[1], (unsigned long long)cut[0]);
    assert_true(cut[1] > cut[0]);
    support_index_close(&ix);
}

/* A request with a prior and a BM25-only threshold (a cost model's isn_threshold_probe) does not prune from it:
 * with negative static scores it bounds nothing (here it is above many queries' k-th score), and the answers
 * stay the CPU's. */
static void test_bm25_threshold_is_ignored_with_a_prior(void **state) {
    const bool emulate = device_under_test(state);
    static support_index ix;
    static batch bt;
    build(&ix, PRIOR_NEGATIVE, ISN_ORDER_INPUT, 51);
    isn_gpu_backend *b = open_backend(&ix, emulate, ISN_GPU_PRUNE_ALWAYS, 0.0);
    support_rng_seed(53);
    batch_fill(&bt, &ix, BATCH, 10, 7.5f, false);
    uint32_t above = 0;
    for (uint32_t q = 0; q < bt.n; q++)
        if (bt.requests[q].mode == ISN_MODE_OR) {
            uint32_t probed = 0;
            bt.requests[q].threshold = isn_threshold_probe(ix.index, &bt.queries[q], 10, NULL, 0, NULL, &probed);
            /* a BM25 bound above the k-th score with the prior: it would lose answers */
            above += bt.expected_n[q] == 10 && bt.requests[q].threshold > (double)bt.expected[q][9].score;
        }
    isn_gpu_batch_stats st;
    run_batch(b, &bt, &st);
    batch_check(&bt, 10, 7.5f, true, "a BM25 threshold with a prior");
    printf("%s: %u of the BM25 thresholds are above the k-th score with the prior, ignored\n",
           emulate ? "emulated" : "GPU", above);
    assert_true(above > 0);
    isn_gpu_close(b);
    support_index_close(&ix);
}

/* Conjunctive queries scored by the range passes (their match counts) rather than probed, and disjunctive ones of
 * 100-131 words (scored in chunks of terms, unpruned): with a prior, the CPU's answers too. */
static void test_long_queries_and_and_by_ranges(void **state) {
    const bool emulate = device_under_test(state);
    static const prior_kind kinds[] = {PRIOR_SIGNED, PRIOR_DOMINANT};
    static support_index ix;
    static batch bt;
    for (size_t i = 0; i < 2; i++) {
        build(&ix, kinds[i], i ? ISN_ORDER_GLOBAL : ISN_ORDER_INPUT, 71 + i);
        for (int pass = 0; pass < 2; pass++) {
            and_by_ranges = pass == 0;
            long_terms = pass == 1 ? 100 : 0;
            for (int pruning = ISN_GPU_PRUNE_ALWAYS; pruning <= ISN_GPU_PRUNE_NEVER; pruning++) {
                isn_gpu_backend *b = open_backend(&ix, emulate, pruning, 0.0);
                support_rng_seed(73 + i + 2 * (uint64_t)pass);
                for (size_t wi = 1; wi < sizeof weights / sizeof *weights; wi++)
                    for (uint32_t k = 10; k <= 1000; k *= 100) {
                        /* long queries: as many as one batch's term budget holds on the device */
                        batch_fill(&bt, &ix, emulate ? 10 : long_terms ? 24 : BATCH, k, weights[wi], k == 10);
                        uint32_t longest = 0;
                        for (uint32_t q = 0; q < bt.n; q++)
                            longest = bt.queries[q].num_terms > longest ? bt.queries[q].num_terms : longest;
                        if (long_terms) assert_true(longest > 64); /* more than one chunk of terms */
                        isn_gpu_batch_stats st;
                        run_batch(b, &bt, &st);
                        batch_check(&bt, k, weights[wi], true, pass ? "long OR queries" : "AND by ranges");
                        assert_int_equal(st.cpu_queries, 0);
                    }
                isn_gpu_close(b);
            }
        }
        and_by_ranges = false;
        long_terms = 0;
        support_index_close(&ix);
    }
}

/* Without static scores, or with a weight whose weighted scores overflow a float, the CPU answers (as isn_search
 * does: it refuses both, no hits), saying why; isn_gpu_takes_search takes any finite weight >= 0. */
static void test_refusals(void **state) {
    (void)state;
    static support_index none, some;
    static batch bt;
    build(&none, PRIOR_NONE, ISN_ORDER_INPUT, 61);
    build(&some, PRIOR_DOMINANT, ISN_ORDER_INPUT, 61);
    const struct {
        support_index *ix;
        float w;
    } cases[] = {{&none, 1.0f}, {&some, 3e38f}};
    for (size_t c = 0; c < 2; c++) {
        isn_gpu_backend *b = open_backend(cases[c].ix, true, ISN_GPU_PRUNE_AUTO, 0.0);
        isn_gpu_health h;
        isn_gpu_health_get(b, &h);
        assert_true(c ? h.static_score_bytes > 0 : h.static_score_bytes == 0);
        support_rng_seed(67);
        batch_fill(&bt, cases[c].ix, 10, 10, 0.0f, false);
        for (uint32_t q = 0; q < bt.n; q++) {
            bt.requests[q].prior_weight = cases[c].w;
            assert_true(isn_gpu_takes_search(&bt.queries[q], cases[c].w, NULL));
        }
        isn_gpu_batch_stats st;
        run_batch(b, &bt, &st);
        assert_int_equal(st.fallbacks[ISN_GPU_FALLBACK_STATIC_PRIOR], bt.n);
        for (uint32_t q = 0; q < bt.n; q++) {
            assert_int_equal(bt.requests[q].answered_by, ISN_GPU_ANSWERED_CPU);
            assert_non_null(strstr(bt.requests[q].fallback_reason, "static prior"));
            assert_int_equal(bt.requests[q].num_hits, 0); /* isn_search refuses the weight */
        }
        assert_string_equal(isn_gpu_fallback_label(ISN_GPU_FALLBACK_STATIC_PRIOR), "static_prior");
        bt.requests[0].prior_weight = -1.0f;
        char err[ISN_ERR_LEN];
        assert_int_equal(isn_gpu_search_batch(b, bt.requests, 1, NULL, err, sizeof err), -1);
        assert_non_null(strstr(err, "prior_weight must be a finite weight >= 0"));
        isn_gpu_close(b);
    }
    const char *why = NULL;
    assert_false(isn_gpu_takes_search(&bt.queries[0], -1.0f, &why));
    assert_non_null(strstr(why, "static prior"));
    assert_false(isn_gpu_takes_search(&bt.queries[0], NAN, NULL));
    assert_true(isn_gpu_takes_search(&bt.queries[0], 0.0f, NULL));
    support_index_close(&none);
    support_index_close(&some);
}

static int setup(void **state) {
    (void)state;
    double sum = 0.0, acc = 0.0;
    for (uint32_t t = 0; t < VOCAB; t++) sum += 1.0 / (t + 1.0);
    for (uint32_t t = 0; t < VOCAB; t++) word_cdf[t] = (acc += 1.0 / (t + 1.0) / sum);
    return 0;
}

#define ON_EMULATED(test) {#test "_emulated", test, NULL, NULL, (void *)&EMULATED}
#define ON_GPU(test) {#test "_gpu", test, NULL, NULL, (void *)&REAL_GPU}

int main(void) {
    const struct CMUnitTest tests[] = {
        ON_EMULATED(test_answers_equal_the_cpu),
        ON_GPU(test_answers_equal_the_cpu),
        ON_EMULATED(test_weight_zero_is_unchanged),
        ON_GPU(test_weight_zero_is_unchanged),
        ON_EMULATED(test_prefix_cache_completes_with_the_prior),
        ON_GPU(test_prefix_cache_completes_with_the_prior),
        ON_EMULATED(test_dominant_prior_settles_early),
        ON_GPU(test_dominant_prior_settles_early),
        ON_EMULATED(test_dominant_prior_leading_ranges),
        ON_GPU(test_dominant_prior_leading_ranges),
        ON_EMULATED(test_floor_stops_after_leading_ranges),
        ON_GPU(test_floor_stops_after_leading_ranges),
        ON_EMULATED(test_bm25_threshold_is_ignored_with_a_prior),
        ON_GPU(test_bm25_threshold_is_ignored_with_a_prior),
        ON_EMULATED(test_long_queries_and_and_by_ranges),
        ON_GPU(test_long_queries_and_and_by_ranges),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
