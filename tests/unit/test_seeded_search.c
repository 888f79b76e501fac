/* A search seeded with a lower bound of its k-th score (isn_search_options.initial_threshold) returns
 * exactly the hits and scores of the unseeded search, ties included, for every algorithm, with the
 * seed at the exact k-th score, one float below it, 0, and the scheduler's threshold probe
 * (isn_job_features_of); the OR-mode pruning algorithms do less work with it; the exhaustive
 * algorithms and AND mode ignore it; a bad seed is refused. A search from a document on
 * (isn_search_options.first_doc), seeded or not, returns exactly the best k of the documents from there
 * on, for every algorithm (the GPU backend completes partly resident queries that way).
 * Corpora: documents tied at the k-th score (the seed equals the score of documents that must still
 * enter), and Cranfield ($ISN_CRANFIELD_DIR, set by make test; default build/data/cran) when present,
 * else a synthetic corpus. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler_internal.h"
#include "tests/support/index_builder.h"

#define MAX_K 64
#define MAX_QUERIES 256

typedef struct {
    char dir[64];
    isn_index *index;
    isn_searcher *searcher;
    char *queries[MAX_QUERIES];
    uint32_t num_queries;
} corpus;

static void corpus_close(corpus *c) {
    if (c->searcher) isn_searcher_free(c->searcher);
    if (c->index) isn_index_close(c->index);
    if (c->dir[0]) support_remove_tree(c->dir);
    for (uint32_t i = 0; i < c->num_queries; i++) free(c->queries[i]);
    memset(c, 0, sizeof *c);
}

/* Builds c->dir from a file (JSONL title + body, or TSV id<TAB>text), no positions, input order. */
static void corpus_build(corpus *c, const char *path, isn_input_format format) {
    isn_build_options options;
    isn_build_options_default(&options);
    options.format = format;
    if (format == ISN_FORMAT_TSV) {
        options.num_fields = 1;
        snprintf(options.fields[0], sizeof options.fields[0], "body");
        options.analyzer.stem = false;
        options.analyzer.stopwords = false;
    }
    options.positions = false;
    options.progress = false;
    char err[ISN_ERR_LEN] = "";
    isn_build_summary summary;
    if (isn_build_from_file(path, c->dir, &options, &summary, err, sizeof err) != 0)
        fail_msg("building %s: %s", path, err);
    c->index = isn_index_open(c->dir, err, sizeof err);
    if (!c->index) fail_msg("isn_index_open: %s", err);
    c->searcher = isn_searcher_new(c->index);
    assert_non_null(c->searcher);
}

static FILE *corpus_start(corpus *c, char *tsv, size_t tsv_len) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "/tmp/isn-test-seeded-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    snprintf(tsv, tsv_len, "%s.tsv", c->dir);
    FILE *f = fopen(tsv, "w");
    assert_non_null(f);
    return f;
}

/* Documents tied at every cut: the "red green blue" documents all score alike, two strong ones score
 * above them, and weak ones ("red" and filler) below. The bounds equal the tied score exactly: the
 * list maximum of "blue" (only in tied documents), and the block maxima of "green" in blocks without
 * a strong document; so a seed at that score must not prune those documents. */
static void tie_corpus(corpus *c) {
    char tsv[96];
    FILE *f = corpus_start(c, tsv, sizeof tsv);
    for (uint32_t d = 0; d < 700; d++) {
        bool strong = d == 350 || d == 600, weak = d % 3 == 1;
        fprintf(f, "d%u\t%s\n", d,
                strong ? "red red green green" : weak ? "red filler filler filler filler filler" : "red green blue filler");
    }
    fclose(f);
    corpus_build(c, tsv, ISN_FORMAT_TSV);
    remove(tsv);
    static const char *queries[] = {"blue", "green", "red", "red green", "blue green", "green filler", "red red green"};
    for (size_t i = 0; i < sizeof queries / sizeof *queries; i++) c->queries[c->num_queries++] = strdup(queries[i]);
}

static uint64_t rng_state = 12345;
static uint32_t rng_below(uint32_t bound) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % bound);
}

/* Zipf-like words w0 (most frequent) .. w499. */
static void random_words(char *out, size_t out_len, uint32_t n) {
    size_t at = 0;
    for (uint32_t i = 0; i < n && at + 8 < out_len; i++) {
        uint32_t r = rng_below(500);
        at += (size_t)snprintf(out + at, out_len - at, "%sw%u", i ? " " : "", r * r / 500);
    }
    out[at] = '\0';
}

/* Cranfield when present, else 3,000 synthetic documents and 150 queries. */
static void real_corpus(corpus *c) {
    const char *dir = getenv("ISN_CRANFIELD_DIR") ? getenv("ISN_CRANFIELD_DIR") : "build/data/cran";
    char docs[512], qpath[512];
    snprintf(docs, sizeof docs, "%s/cranfield.jsonl", dir);
    snprintf(qpath, sizeof qpath, "%s/cranfield.queries.tsv", dir);
    FILE *qf = fopen(qpath, "r");
    if (qf && access(docs, R_OK) == 0) {
        memset(c, 0, sizeof *c);
        snprintf(c->dir, sizeof c->dir, "/tmp/isn-test-seeded-XXXXXX");
        assert_non_null(mkdtemp(c->dir));
        corpus_build(c, docs, ISN_FORMAT_JSONL);
        char line[4096];
        while (c->num_queries < MAX_QUERIES && fgets(line, sizeof line, qf)) {
            char *tab = strchr(line, '\t');
            if (!tab) continue;
            tab[strcspn(tab, "\r\n")] = '\0';
            c->queries[c->num_queries++] = strdup(tab + 1);
        }
        fclose(qf);
        print_message("Cranfield from %s: %u queries\n", dir, c->num_queries);
        return;
    }
    if (qf) fclose(qf);
    print_message("no Cranfield at %s: synthetic corpus\n", dir);
    char tsv[96], text[2048];
    FILE *f = corpus_start(c, tsv, sizeof tsv);
    for (uint32_t d = 0; d < 3000; d++) {
        random_words(text, sizeof text, 5 + rng_below(120));
        fprintf(f, "d%u\t%s\n", d, text);
    }
    fclose(f);
    corpus_build(c, tsv, ISN_FORMAT_TSV);
    remove(tsv);
    for (uint32_t q = 0; q < 150; q++) {
        random_words(text, sizeof text, 1 + rng_below(12));
        c->queries[c->num_queries++] = strdup(text);
    }
}

typedef struct {
    isn_hit hits[MAX_K];
    uint32_t n;
    isn_search_stats stats;
} result;

static void search(corpus *c, const isn_query *query, isn_mode mode, isn_algo algo, uint32_t k, float seed,
                   result *out) {
    isn_search_options options;
    isn_search_options_default(&options);
    assert_true(options.initial_threshold == 0.0f);
    options.mode = mode;
    options.algo = algo;
    options.k = k;
    options.initial_threshold = seed;
    char err[ISN_ERR_LEN] = "";
    memset(out, 0, sizeof *out);
    if (isn_search(c->searcher, query, &options, out->hits, &out->n, &out->stats, err, sizeof err) != 0)
        fail_msg("search (%s, k %u, seed %.9g): %s", isn_algo_name(algo), k, (double)seed, err);
}

/* Same documents in the same order with bit-identical scores. */
static void assert_same(const result *expected, const result *got, const char *what, const char *text,
                        isn_algo algo, uint32_t k, float seed) {
    bool same = expected->n == got->n;
    for (uint32_t i = 0; same && i < got->n; i++)
        same = expected->hits[i].doc == got->hits[i].doc &&
               memcmp(&expected->hits[i].score, &got->hits[i].score, sizeof(float)) == 0;
    if (!same)
        fail_msg("\"%s\" %s k %u, seed %s = %.9g: %u hits (first doc %u), unseeded %u (first doc %u)", text,
                 isn_algo_name(algo), k, what, (double)seed, got->n, got->n ? got->hits[0].doc : 0, expected->n,
                 expected->n ? expected->hits[0].doc : 0);
}

static const isn_algo or_algos[] = {ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW, ISN_ALGO_AUTO, ISN_ALGO_OR};
#define NUM_OR_ALGOS (sizeof or_algos / sizeof *or_algos)

typedef struct {
    uint64_t queries, seeded, probed, probe_exact;
    uint64_t work[NUM_OR_ALGOS][2];  /* postings scored: unseeded, seeded with the probe */
    uint64_t fewer[NUM_OR_ALGOS];    /* queries where the probe seed scored strictly fewer postings */
    uint64_t evaluated[NUM_OR_ALGOS][2];
} tally;

/* One query at one k: every OR algorithm with each seed equals its unseeded run. */
static void check_query(corpus *c, const char *text, uint32_t k, tally *t) {
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(c->searcher, text, strlen(text), &query, err, sizeof err), 0);
    if (query.num_terms == 0) return;
    t->queries++;
    for (size_t a = 0; a < NUM_OR_ALGOS; a++) {
        isn_algo algo = or_algos[a];
        result plain, seeded;
        search(c, &query, ISN_MODE_OR, algo, k, 0.0f, &plain);
        isn_job_features features;
        isn_job_features_of(c->index, &query, k, ISN_MODE_OR, algo, &features);
        float probe = (float)features.threshold_probe;
        if (algo == ISN_ALGO_OR) {
            assert_true(probe == 0.0f); /* not probed for the exhaustive algorithm */
            /* Ignored: even a seed far above every score changes nothing. */
            search(c, &query, ISN_MODE_OR, algo, k, 1e30f, &seeded);
            assert_same(&plain, &seeded, "ignored", text, algo, k, 1e30f);
            continue;
        }
        float kth = plain.n == k ? plain.hits[k - 1].score : 0.0f;
        if (probe > 0.0f) {
            if (!(probe <= kth)) fail_msg("\"%s\" k %u: probe %.9g above the k-th score %.9g", text, k, (double)probe, (double)kth);
            t->probed++;
            t->probe_exact += probe == kth;
        }
        const float seeds[4] = {kth, kth > 0.0f ? nextafterf(kth, 0.0f) : 0.0f, 0.0f, probe};
        const char *names[4] = {"k-th score", "below k-th score", "0", "probe"};
        for (int s = 0; s < 4; s++) {
            if (s != 2 && seeds[s] == 0.0f) continue;
            search(c, &query, ISN_MODE_OR, algo, k, seeds[s], &seeded);
            assert_same(&plain, &seeded, names[s], text, algo, k, seeds[s]);
            t->seeded++;
            if (s == 3) {
                t->work[a][0] += plain.stats.postings_scored;
                t->work[a][1] += seeded.stats.postings_scored;
                t->evaluated[a][0] += plain.stats.docs_evaluated;
                t->evaluated[a][1] += seeded.stats.docs_evaluated;
                t->fewer[a] += seeded.stats.postings_scored < plain.stats.postings_scored ||
                               seeded.stats.docs_evaluated < plain.stats.docs_evaluated;
            }
        }
    }
}

static void test_ties_at_the_seed(void **state) {
    (void)state;
    corpus c;
    tie_corpus(&c);
    tally t = {0};
    static const uint32_t ks[] = {1, 2, 3, 7, 50, 64};
    for (uint32_t q = 0; q < c.num_queries; q++)
        for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) check_query(&c, c.queries[q], ks[i], &t);
    /* The cut falls inside the tied documents for k >= 3 ("red green": 2 strong, then ties). */
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(c.searcher, "red green", 9, &query, err, sizeof err), 0);
    result plain;
    search(&c, &query, ISN_MODE_OR, ISN_ALGO_OR, 7, 0.0f, &plain);
    assert_int_equal(plain.n, 7);
    for (uint32_t r = 3; r < 7; r++) assert_true(plain.hits[r].score == plain.hits[2].score);
    assert_true(t.seeded > 100);
    corpus_close(&c);
}

static void test_real_queries(void **state) {
    (void)state;
    corpus c;
    real_corpus(&c);
    tally t = {0};
    for (uint32_t q = 0; q < c.num_queries; q++) {
        check_query(&c, c.queries[q], 10, &t);
        if (q % 4 == 0) check_query(&c, c.queries[q], 1, &t);
    }
    print_message("%llu query runs, %llu seeded searches; probed %llu (exact %llu)\n", (unsigned long long)t.queries,
                  (unsigned long long)t.seeded, (unsigned long long)t.probed, (unsigned long long)t.probe_exact);
    assert_true(t.probed > t.queries / 4); /* the probe seeds most queries (on every algorithm but OR) */
    /* Less work with the probe as the seed: strictly fewer on some queries, never more in all. */
    for (size_t a = 0; a + 1 < NUM_OR_ALGOS; a++) {
        print_message("%s: postings scored %llu -> %llu, docs evaluated %llu -> %llu, fewer on %llu queries\n",
                      isn_algo_name(or_algos[a]), (unsigned long long)t.work[a][0], (unsigned long long)t.work[a][1],
                      (unsigned long long)t.evaluated[a][0], (unsigned long long)t.evaluated[a][1],
                      (unsigned long long)t.fewer[a]);
        assert_true(t.fewer[a] > 0);
        assert_true(t.work[a][1] < t.work[a][0]);
        assert_true(t.evaluated[a][1] < t.evaluated[a][0]);
    }
    corpus_close(&c);
}

/* AND mode ignores the seed (the probe bounds OR's k-th score, not AND's); with an absurd seed the
 * hits are unchanged. */
static void test_and_mode_ignores_seed(void **state) {
    (void)state;
    corpus c;
    tie_corpus(&c);
    static const isn_algo and_algos[] = {ISN_ALGO_AND, ISN_ALGO_BMAND, ISN_ALGO_AUTO};
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(c.searcher, "red green", 9, &query, err, sizeof err), 0);
    for (size_t a = 0; a < 3; a++) {
        result plain, seeded;
        search(&c, &query, ISN_MODE_AND, and_algos[a], 10, 0.0f, &plain);
        search(&c, &query, ISN_MODE_AND, and_algos[a], 10, 1e30f, &seeded);
        assert_int_equal(plain.n, 10);
        assert_same(&plain, &seeded, "ignored", "red green", and_algos[a], 10, 1e30f);
    }
    corpus_close(&c);
}

static void test_bad_seed_refused(void **state) {
    (void)state;
    corpus c;
    tie_corpus(&c);
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(c.searcher, "red green", 9, &query, err, sizeof err), 0);
    const float bad[] = {-1.0f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        isn_search_options options;
        isn_search_options_default(&options);
        options.initial_threshold = bad[i];
        isn_hit hits[10];
        uint32_t n = 99;
        isn_search_stats stats;
        err[0] = '\0';
        assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, &stats, err, sizeof err), -1);
        assert_non_null(strstr(err, "initial_threshold"));
        assert_int_equal(n, 0);
    }
    corpus_close(&c);
}

/* The exhaustive search's full ranking cut to the documents from first_doc on, best k of them. */
static uint32_t expected_from(corpus *c, const isn_query *query, isn_mode mode, uint32_t first_doc, uint32_t k,
                              isn_hit *all, uint32_t all_cap, isn_hit *out) {
    isn_search_options options;
    isn_search_options_default(&options);
    options.mode = mode;
    options.algo = mode == ISN_MODE_OR ? ISN_ALGO_OR : ISN_ALGO_AND;
    options.k = all_cap;
    uint32_t n = 0;
    char err[ISN_ERR_LEN] = "";
    if (isn_search(c->searcher, query, &options, all, &n, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < n && kept < k; i++)
        if (all[i].doc >= first_doc) out[kept++] = all[i];
    return kept;
}

static void check_from_doc(corpus *c, const char *text, isn_hit *all, uint32_t all_cap, uint64_t *runs) {
    static const isn_algo or_from[] = {ISN_ALGO_OR, ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW, ISN_ALGO_BMM,
                                       ISN_ALGO_AUTO};
    static const isn_algo and_from[] = {ISN_ALGO_AND, ISN_ALGO_BMAND, ISN_ALGO_AUTO};
    static const uint32_t ks[] = {1, 10, 64};
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(c->searcher, text, strlen(text), &query, err, sizeof err), 0);
    if (query.num_terms == 0) return;
    uint32_t num_docs = isn_index_get_info(c->index)->num_docs;
    const uint32_t froms[] = {1, num_docs / 3, num_docs / 2 + 7, num_docs - 1, num_docs};
    for (int m = 0; m < 2; m++) {
        isn_mode mode = m == 0 ? ISN_MODE_OR : ISN_MODE_AND;
        const isn_algo *algos = m == 0 ? or_from : and_from;
        size_t num_algos = m == 0 ? sizeof or_from / sizeof *or_from : sizeof and_from / sizeof *and_from;
        for (size_t f = 0; f < sizeof froms / sizeof *froms; f++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                uint32_t k = ks[ki];
                result want;
                memset(&want, 0, sizeof want);
                want.n = expected_from(c, &query, mode, froms[f], k, all, all_cap, want.hits);
                float kth = want.n == k ? want.hits[k - 1].score : 0.0f;
                for (size_t a = 0; a < num_algos; a++)
                    for (int seeded = 0; seeded < 2; seeded++) {
                        isn_search_options options;
                        isn_search_options_default(&options);
                        options.mode = mode;
                        options.algo = algos[a];
                        options.k = k;
                        options.first_doc = froms[f];
                        options.initial_threshold = seeded ? kth : 0.0f;
                        result got;
                        memset(&got, 0, sizeof got);
                        if (isn_search(c->searcher, &query, &options, got.hits, &got.n, &got.stats, err, sizeof err))
                            fail_msg("\"%s\" from doc %u: %s", text, froms[f], err);
                        for (uint32_t i = 0; i < got.n; i++)
                            if (got.hits[i].doc < froms[f])
                                fail_msg("\"%s\" %s from doc %u: hit doc %u is below it", text,
                                         isn_algo_name(algos[a]), froms[f], got.hits[i].doc);
                        assert_same(&want, &got, seeded ? "from doc, seeded" : "from doc", text, algos[a], k,
                                    options.initial_threshold);
                        (*runs)++;
                    }
            }
    }
}

static void test_search_from_doc(void **state) {
    (void)state;
    uint64_t runs = 0;
    const uint32_t all_cap = ISN_MAX_K;
    isn_hit *all = malloc(all_cap * sizeof *all);
    assert_non_null(all);
    corpus c;
    tie_corpus(&c);
    for (uint32_t q = 0; q < c.num_queries; q++) check_from_doc(&c, c.queries[q], all, all_cap, &runs);
    corpus_close(&c);
    real_corpus(&c);
    for (uint32_t q = 0; q < c.num_queries; q += 3) check_from_doc(&c, c.queries[q], all, all_cap, &runs);
    corpus_close(&c);
    free(all);
    print_message("%llu searches from a document on\n", (unsigned long long)runs);
    assert_true(runs > 1000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ties_at_the_seed),
        cmocka_unit_test(test_real_queries),
        cmocka_unit_test(test_and_mode_ignores_seed),
        cmocka_unit_test(test_bad_seed_refused),
        cmocka_unit_test(test_search_from_doc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
