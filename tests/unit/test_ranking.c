/* First-stage ranking: query parsing, option checks, hand-computed BM25 on a 3-doc index, and every
 * algorithm against the brute-force oracle (tests/support/oracle.c) on hundreds of random indexes and
 * queries, with the stricter property that all algorithms of a mode return bit-identical hits. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/oracle.h"
#include "tests/support/index_builder.h"
#include "tests/support/random.h"

#define TIE_TOLERANCE 1e-5

/* ------------------------------------------------------------------ test collections */

typedef struct {
    uint32_t num_docs;
    const char ***doc_terms; /* doc_terms[d][i]: pointers into words (or literals) */
    uint32_t *doc_lens;
    char dir[64];
    isn_index *index;
    oracle_collection *oracle;
    isn_searcher *searcher;
} collection;

/* Index directories still open: a failed check jumps out of its test before collection_close, so
 * the group teardown removes what is left. */
#define MAX_OPEN_DIRS 8
static char open_dirs[MAX_OPEN_DIRS][64];

/* Indexes the documents (one field "body", no stemming, no stopwords, input order) and prepares
 * the oracle over the same terms. The collection takes doc_terms and doc_lens. */
static void collection_open(collection *c, uint32_t num_docs, const char ***doc_terms, uint32_t *doc_lens) {
    memset(c, 0, sizeof *c);
    c->num_docs = num_docs;
    c->doc_terms = doc_terms;
    c->doc_lens = doc_lens;
    snprintf(c->dir, sizeof c->dir, "/tmp/isn-test-ranking-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    for (int i = 0; i < MAX_OPEN_DIRS; i++) {
        if (open_dirs[i][0] == '\0') {
            memcpy(open_dirs[i], c->dir, sizeof c->dir);
            break;
        }
    }

    isn_build_options options;
    support_plain_build_options(&options);
    isn_builder *builder = isn_builder_new(&options);
    assert_non_null(builder);
    char err[ISN_ERR_LEN] = "";
    size_t text_cap = 1024;
    char *text = malloc(text_cap);
    assert_non_null(text);
    for (uint32_t d = 0; d < num_docs; d++) {
        size_t len = 0;
        for (uint32_t i = 0; i < doc_lens[d]; i++) {
            size_t word = strlen(doc_terms[d][i]);
            if (len + word + 2 > text_cap) {
                text_cap = 2 * (len + word + 2);
                text = realloc(text, text_cap);
                assert_non_null(text);
            }
            if (i > 0)
                text[len++] = ' ';
            memcpy(text + len, doc_terms[d][i], word);
            len += word;
        }
        text[len] = '\0';
        char id[32];
        snprintf(id, sizeof id, "doc%u", d);
        const char *fields[1] = {text};
        size_t field_lens[1] = {len};
        if (isn_builder_add(builder, id, fields, field_lens, 0.0f, err, sizeof err) != 0)
            fail_msg("isn_builder_add doc %u: %s", d, err);
    }
    free(text);
    isn_build_summary summary;
    if (isn_builder_write(builder, c->dir, &summary, err, sizeof err) != 0)
        fail_msg("isn_builder_write: %s", err);
    isn_builder_free(builder);
    c->index = isn_index_open(c->dir, err, sizeof err);
    if (c->index == NULL)
        fail_msg("isn_index_open: %s", err);
    assert_int_equal(isn_index_get_info(c->index)->num_docs, num_docs);
    c->oracle = oracle_new(num_docs, (const char *const *const *)doc_terms, doc_lens, 1.2, 0.75);
    assert_non_null(c->oracle);
    c->searcher = isn_searcher_new(c->index);
    assert_non_null(c->searcher);
}

static void collection_close(collection *c) {
    isn_searcher_free(c->searcher);
    isn_index_close(c->index);
    oracle_free(c->oracle);
    support_remove_tree(c->dir);
    for (int i = 0; i < MAX_OPEN_DIRS; i++)
        if (strcmp(open_dirs[i], c->dir) == 0)
            open_dirs[i][0] = '\0';
}

/* Arrays for a generated collection: doc_terms[d] is for the caller to malloc; collection_close_generated
 * frees them all. */
static const char ***generated_docs_new(uint32_t num_docs, uint32_t **doc_lens) {
    const char ***doc_terms = malloc(num_docs * sizeof *doc_terms);
    *doc_lens = malloc(num_docs * sizeof **doc_lens);
    assert_true(doc_terms && *doc_lens);
    return doc_terms;
}

static void collection_close_generated(collection *c) {
    collection_close(c);
    for (uint32_t d = 0; d < c->num_docs; d++)
        free(c->doc_terms[d]);
    free(c->doc_terms);
    free(c->doc_lens);
}

static int remove_leftover_dirs(void **state) {
    (void)state;
    for (int i = 0; i < MAX_OPEN_DIRS; i++) {
        if (open_dirs[i][0] != '\0')
            support_remove_tree(open_dirs[i]);
        open_dirs[i][0] = '\0';
    }
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static const isn_algo or_algos[] = {ISN_ALGO_OR, ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW, ISN_ALGO_BMM, ISN_ALGO_AUTO};
static const isn_algo and_algos[] = {ISN_ALGO_AND, ISN_ALGO_BMAND, ISN_ALGO_AUTO};

static bool within(double value, double expected, double relative) {
    return fabs(value - expected) <= relative * fabs(expected) + 1e-12;
}

/* ------------------------------------------------------------------ names and defaults */

static void test_algo_names(void **state) {
    (void)state;
    for (int a = 0; a < ISN_ALGO_COUNT; a++) {
        isn_algo parsed = ISN_ALGO_COUNT;
        assert_true(isn_algo_from_name(isn_algo_name((isn_algo)a), &parsed));
        assert_int_equal(parsed, a);
    }
    isn_algo parsed;
    assert_string_equal(isn_algo_name(ISN_ALGO_BMW), "bmw");
    assert_string_equal(isn_algo_name(ISN_ALGO_MAXSCORE), "maxscore");
    assert_false(isn_algo_from_name("block-max", &parsed));
    assert_false(isn_algo_from_name("", &parsed));
    assert_int_equal(isn_algo_mode(ISN_ALGO_WAND, ISN_MODE_AND), ISN_MODE_OR);
    assert_int_equal(isn_algo_mode(ISN_ALGO_BMAND, ISN_MODE_OR), ISN_MODE_AND);
    assert_int_equal(isn_algo_mode(ISN_ALGO_AUTO, ISN_MODE_AND), ISN_MODE_AND);
    assert_int_equal(isn_algo_mode(ISN_ALGO_AUTO, ISN_MODE_OR), ISN_MODE_OR);

    isn_search_options options;
    memset(&options, 0xff, sizeof options);
    isn_search_options_default(&options);
    assert_int_equal(options.mode, ISN_MODE_OR);
    assert_int_equal(options.algo, ISN_ALGO_AUTO);
    assert_int_equal(options.k, 10);
    assert_int_equal(options.num_docs, 0);
}

/* ------------------------------------------------------------------ the 3-document index */

static const char *tiny_doc0[] = {"apple", "banana"};
static const char *tiny_doc1[] = {"apple", "apple", "banana"};
static const char *tiny_doc2[] = {"banana", "cherry", "cherry", "cherry"};

static void open_tiny(collection *c) {
    static const char **docs[3] = {tiny_doc0, tiny_doc1, tiny_doc2};
    static uint32_t lens[3] = {2, 3, 4};
    collection_open(c, 3, docs, lens);
}

/* By hand, k1 = 1.2, b = 0.75, N = 3, avgdl = 9/3 = 3:
 *   idf(apple, df 2) = ln(1 + 1.5/2.5) = ln 1.6 = 0.470003629; idf(banana, df 3) = ln(8/7) = 0.133531393;
 *   idf(cherry, df 1) = ln(8/3) = 0.980829253.
 *   norm(dl) = 1.2 (0.25 + 0.75 dl/3): dl 2 -> 0.9, dl 3 -> 1.2, dl 4 -> 1.5; tf part = 2.2 tf / (tf + norm).
 *   "apple cherry": d0 = 0.470003629 * 2.2/1.9 = 0.544214729, d1 = 0.470003629 * 4.4/3.2 = 0.646254990,
 *                   d2 = 0.980829253 * 6.6/4.5 = 1.438549571.
 *   "apple banana" AND: d0 = 0.544214729 + 0.133531393 * 2.2/1.9 = 0.698830025,
 *                       d1 = 0.646254990 + 0.133531393 * 2.2/2.2 = 0.779786383.
 *   "cherry cherry banana": d2 = 2 * 1.438549571 + 0.133531393 * 2.2/2.7 = 2.994606768,
 *                           d0 = 0.133531393 * 2.2/1.9 = 0.154615297, d1 = 0.133531393. */
/* The search must return exactly these docs, in this order, with these scores (relative error 1e-6). */
static void expect_hits(isn_searcher *searcher, const char *text, isn_mode mode, isn_algo algo, uint32_t k, uint32_t n,
                        const uint32_t *docs, const double *scores) {
    isn_hit hits[10];
    uint32_t got;
    char err[ISN_ERR_LEN];
    assert_int_equal(support_search_text(searcher, text, mode, algo, k, hits, &got, err), 0);
    assert_int_equal(got, n);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(hits[i].doc, docs[i]);
        assert_true(within(hits[i].score, scores[i], 1e-6));
    }
}

static void test_hand_computed_scores(void **state) {
    (void)state;
    collection c;
    open_tiny(&c);
    for (size_t a = 0; a < sizeof or_algos / sizeof *or_algos; a++) {
        expect_hits(c.searcher, "Apple cherry", ISN_MODE_OR, or_algos[a], 10, 3, (const uint32_t[]){2, 1, 0},
                    (const double[]){1.438549571, 0.646254990, 0.544214729});
        expect_hits(c.searcher, "cherry cherry banana", ISN_MODE_OR, or_algos[a], 2, 2, (const uint32_t[]){2, 0},
                    (const double[]){2.994606768, 0.154615297});
    }
    for (size_t a = 0; a < sizeof and_algos / sizeof *and_algos; a++) {
        expect_hits(c.searcher, "apple banana", ISN_MODE_AND, and_algos[a], 10, 2, (const uint32_t[]){1, 0},
                    (const double[]){0.779786383, 0.698830025});
        expect_hits(c.searcher, "apple cherry", ISN_MODE_AND, and_algos[a], 10, 0, NULL, NULL);
    }
    collection_close(&c);
}

/* ------------------------------------------------------------------ parsing */

static void test_parse_merges_repeats_and_counts_unknown(void **state) {
    (void)state;
    collection c;
    open_tiny(&c);
    isn_query query;
    char err[ISN_ERR_LEN];
    const char *text = "cherry APPLE zebra cherry, cherry; apple quince zebra";
    assert_int_equal(isn_query_parse(c.searcher, text, strlen(text), &query, err, sizeof err), 0);
    assert_int_equal(query.num_terms, 2);
    assert_int_equal(query.num_unknown, 3);
    char term[32];
    isn_index_term_text(c.index, query.terms[0].term_id, term, sizeof term);
    assert_string_equal(term, "cherry");
    assert_int_equal(query.terms[0].count, 3);
    assert_int_equal(query.terms[0].df, 1);
    isn_index_term_text(c.index, query.terms[1].term_id, term, sizeof term);
    assert_string_equal(term, "apple");
    assert_int_equal(query.terms[1].count, 2);
    assert_int_equal(query.terms[1].df, 2);

    /* A second parse starts afresh: nothing of the first leaks in. */
    assert_int_equal(isn_query_parse(c.searcher, "banana", 6, &query, err, sizeof err), 0);
    assert_int_equal(query.num_terms, 1);
    assert_int_equal(query.terms[0].count, 1);
    assert_int_equal(query.terms[0].df, 3);
    assert_int_equal(query.num_unknown, 0);

    assert_int_equal(isn_query_parse(c.searcher, "", 0, &query, err, sizeof err), 0);
    assert_int_equal(query.num_terms, 0);
    assert_int_equal(query.num_unknown, 0);
    collection_close(&c);
}

static void test_empty_and_unknown_queries(void **state) {
    (void)state;
    static const struct {
        const char *text;
        isn_mode mode;
        uint32_t hits;
    } cases[] = {
        {"", ISN_MODE_OR, 0},
        {" ,;. ", ISN_MODE_OR, 0},
        {"zebra quince", ISN_MODE_OR, 0},
        {"zebra cherry", ISN_MODE_OR, 1}, /* OR ignores the unknown term: doc 2, the one with "cherry" */
        {"", ISN_MODE_AND, 0},
        {"zebra", ISN_MODE_AND, 0},
        {"banana zebra", ISN_MODE_AND, 0}, /* AND: an unknown term matches nothing, so nothing matches every term */
        {"banana", ISN_MODE_AND, 3},
    };
    collection c;
    open_tiny(&c);
    isn_hit hits[10];
    char err[ISN_ERR_LEN];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool or_mode = cases[i].mode == ISN_MODE_OR;
        const isn_algo *algos = or_mode ? or_algos : and_algos;
        size_t num_algos = or_mode ? sizeof or_algos / sizeof *or_algos : sizeof and_algos / sizeof *and_algos;
        for (size_t a = 0; a < num_algos; a++) {
            uint32_t n = 99;
            int rc = support_search_text(c.searcher, cases[i].text, cases[i].mode, algos[a], 10, hits, &n, err);
            assert_int_equal(rc, 0);
            assert_int_equal(n, cases[i].hits);
            if (or_mode && n == 1)
                assert_int_equal(hits[0].doc, 2);
        }
    }
    collection_close(&c);
}

static void test_too_many_distinct_terms(void **state) {
    (void)state;
    enum { TERMS = ISN_MAX_QUERY_TERMS + 10 };
    static char words[TERMS][16];
    static const char *doc[TERMS];
    for (uint32_t i = 0; i < TERMS; i++) {
        snprintf(words[i], sizeof words[i], "t%u", i);
        doc[i] = words[i];
    }
    static const char **docs[1] = {doc};
    static uint32_t lens[1] = {TERMS};
    collection c;
    collection_open(&c, 1, docs, lens);

    size_t cap = TERMS * 8;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t len = 0;
    for (uint32_t i = 0; i < ISN_MAX_QUERY_TERMS; i++)
        len += (size_t)snprintf(text + len, cap - len, "t%u ", i);
    /* Exactly the limit, with repeats, is accepted. */
    len += (size_t)snprintf(text + len, cap - len, "t0 t1 ");
    isn_query query;
    char err[ISN_ERR_LEN] = "";
    assert_int_equal(isn_query_parse(c.searcher, text, len, &query, err, sizeof err), 0);
    assert_int_equal(query.num_terms, ISN_MAX_QUERY_TERMS);
    assert_int_equal(query.terms[0].count, 2);
    isn_search_options options;
    isn_search_options_default(&options);
    isn_hit hits[10];
    uint32_t n;
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, NULL, err, sizeof err), 0);
    assert_int_equal(n, 1);

    len += (size_t)snprintf(text + len, cap - len, "t%u", ISN_MAX_QUERY_TERMS);
    assert_int_equal(isn_query_parse(c.searcher, text, len, &query, err, sizeof err), -1);
    assert_non_null(strstr(err, "distinct terms"));
    assert_non_null(strstr(err, "1024"));
    free(text);
    collection_close(&c);
}

/* ------------------------------------------------------------------ option checks */

static void test_invalid_options(void **state) {
    (void)state;
    collection c;
    open_tiny(&c);
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(c.searcher, "apple", 5, &query, err, sizeof err), 0);
    isn_hit hits[4];
    uint32_t n;
    isn_search_options options;

    isn_search_options_default(&options);
    options.k = 0;
    err[0] = '\0';
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "k must be"));

    options.k = ISN_MAX_K + 1;
    err[0] = '\0';
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "100001"));

    isn_search_options_default(&options);
    options.mode = ISN_MODE_AND;
    options.algo = ISN_ALGO_BMW;
    err[0] = '\0';
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "'bmw'"));

    options.mode = ISN_MODE_OR;
    options.algo = ISN_ALGO_BMAND;
    err[0] = '\0';
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "'bmand'"));

    options.algo = ISN_ALGO_COUNT;
    err[0] = '\0';
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "algorithm"));

    isn_search_options_default(&options);
    options.mode = (isn_mode)7;
    err[0] = '\0';
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "mode"));

    /* A query from elsewhere naming a term this index lacks. */
    isn_query_term bogus = {.term_id = 1000000, .count = 1, .df = 1};
    isn_query foreign = {.terms = &bogus, .num_terms = 1, .num_unknown = 0};
    isn_search_options_default(&options);
    err[0] = '\0';
    assert_int_equal(isn_search(c.searcher, &foreign, &options, hits, &n, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "1000000"));

    /* The valid call still works after the refusals, and AUTO reports what it ran. */
    isn_search_stats stats;
    isn_search_options_default(&options);
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, &stats, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_int_not_equal(stats.algo_used, ISN_ALGO_AUTO);
    assert_int_equal(isn_algo_mode(stats.algo_used, ISN_MODE_AND), ISN_MODE_OR);
    assert_int_equal(stats.docs_evaluated, 2);
    options.mode = ISN_MODE_AND;
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, &stats, err, sizeof err), 0);
    assert_int_equal(isn_algo_mode(stats.algo_used, ISN_MODE_OR), ISN_MODE_AND);
    collection_close(&c);
}

/* ------------------------------------------------------------------ random indexes against the oracle */

typedef struct {
    uint32_t vocab;
    char (*words)[16];
    double *cdf; /* Zipf-ish cumulative distribution over the vocabulary */
} vocabulary;

static uint32_t vocab_sample(const vocabulary *v) {
    double u = support_rng_unit() * v->cdf[v->vocab - 1];
    uint32_t lo = 0, hi = v->vocab - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (v->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

typedef struct {
    const char *tokens[64];
    uint32_t num_tokens;
    char unknown[64][16];
    char text[64 * 18];
} random_query;

/* A query written out: its tokens are the words of `words` it names (the oracle's terms). */
static void fixed_query(random_query *q, const char *text, const char *const *words, size_t num_words) {
    snprintf(q->text, sizeof q->text, "%s", text);
    q->num_tokens = 0;
    char copy[128];
    snprintf(copy, sizeof copy, "%s", text);
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " "))
        for (size_t w = 0; w < num_words; w++)
            if (strcmp(tok, words[w]) == 0)
                q->tokens[q->num_tokens++] = words[w];
}

static void make_query(random_query *q, const vocabulary *v, bool and_mode) {
    uint32_t n = and_mode && support_rng_below(4) != 0 ? 1 + support_rng_below(4) : 1 + support_rng_below(30);
    size_t len = 0;
    q->num_tokens = 0;
    bool zipf = support_rng_below(2) == 0 || and_mode;
    for (uint32_t i = 0; i < n; i++) {
        const char *token;
        uint32_t roll = support_rng_below(100);
        if (roll < 8 && !(and_mode && support_rng_below(3) != 0)) {
            snprintf(q->unknown[i], sizeof q->unknown[i], "q%u", support_rng_below(1000));
            token = q->unknown[i];
        } else if (roll < 20 && i > 0) {
            token = q->tokens[support_rng_below(i)];
        } else {
            uint32_t word = zipf ? vocab_sample(v) : support_rng_below(v->vocab);
            token = v->words[word];
        }
        q->tokens[q->num_tokens++] = token;
        len += (size_t)snprintf(q->text + len, sizeof q->text - len, "%s%s", i ? " " : "", token);
    }
}

/* Checks one algorithm's hits against the oracle; returns a description of the first problem. */
static const char *check_against_oracle(const isn_hit *hits, uint32_t num_hits, const oracle_hit *expected,
                                        uint32_t num_expected, const double *scores, const bool *matched,
                                        uint32_t num_docs, uint8_t *seen, char *why, size_t why_len) {
    if (num_hits != num_expected) {
        snprintf(why, why_len, "%u hits, oracle has %u", num_hits, num_expected);
        return why;
    }
    memset(seen, 0, num_docs);
    for (uint32_t i = 0; i < num_hits; i++) {
        uint32_t doc = hits[i].doc;
        if (doc >= num_docs || !matched[doc] || seen[doc]) {
            snprintf(why, why_len, "rank %u: doc %u is out of range, not a match or repeated", i, doc);
            return why;
        }
        seen[doc] = 1;
        if (!within(hits[i].score, scores[doc], TIE_TOLERANCE)) {
            snprintf(why, why_len, "rank %u doc %u: score %.9g, oracle %.9g", i, doc, hits[i].score, scores[doc]);
            return why;
        }
        if (doc != expected[i].doc && !within(scores[doc], expected[i].score, TIE_TOLERANCE)) {
            snprintf(why, why_len, "rank %u: doc %u (oracle score %.9g) where the oracle has doc %u (%.9g)", i, doc,
                     scores[doc], expected[i].doc, expected[i].score);
            return why;
        }
        if (i > 0 && (hits[i].score > hits[i - 1].score ||
                      (hits[i].score == hits[i - 1].score && hits[i].doc < hits[i - 1].doc))) {
            snprintf(why, why_len, "rank %u: hits out of order", i);
            return why;
        }
    }
    return NULL;
}

static uint64_t cases_run;

static void run_random_case(collection *c, const random_query *q, bool and_mode, uint32_t k, uint64_t num_docs_override,
                            uint64_t seed, uint32_t query_number) {
    isn_query query;
    char err[ISN_ERR_LEN] = "";
    if (isn_query_parse(c->searcher, q->text, strlen(q->text), &query, err, sizeof err) != 0)
        fail_msg("seed %llu query %u: parse failed: %s", (unsigned long long)seed, query_number, err);
    uint32_t tokens_seen = query.num_unknown;
    for (uint32_t t = 0; t < query.num_terms; t++) {
        char term[32];
        isn_index_term_text(c->index, query.terms[t].term_id, term, sizeof term);
        if (query.terms[t].df != oracle_df(c->oracle, term))
            fail_msg("seed %llu query %u: df of '%s' is %u, oracle %u", (unsigned long long)seed, query_number, term,
                     query.terms[t].df, oracle_df(c->oracle, term));
        tokens_seen += query.terms[t].count;
    }
    if (tokens_seen != q->num_tokens)
        fail_msg("seed %llu query %u: parse accounts for %u tokens of %u", (unsigned long long)seed, query_number,
                 tokens_seen, q->num_tokens);

    double *scores = malloc(c->num_docs * sizeof *scores);
    bool *matched = malloc(c->num_docs * sizeof *matched);
    uint8_t *seen = malloc(c->num_docs);
    oracle_hit *expected = malloc(k * sizeof *expected);
    isn_hit *reference = malloc(k * sizeof *reference);
    isn_hit *hits = malloc(k * sizeof *hits);
    assert_true(scores && matched && seen && expected && reference && hits);
    oracle_score_all(c->oracle, q->tokens, q->num_tokens, and_mode, num_docs_override, scores, matched);
    uint32_t num_expected =
        oracle_top_k(c->oracle, q->tokens, q->num_tokens, and_mode, num_docs_override, k, expected);

    const isn_algo *algos = and_mode ? and_algos : or_algos;
    size_t num_algos = and_mode ? sizeof and_algos / sizeof *and_algos : sizeof or_algos / sizeof *or_algos;
    uint32_t num_reference = 0;
    for (size_t a = 0; a < num_algos; a++) {
        isn_search_options options;
        isn_search_options_default(&options);
        options.mode = and_mode ? ISN_MODE_AND : ISN_MODE_OR;
        options.algo = algos[a];
        options.k = k;
        options.num_docs = num_docs_override;
        isn_search_stats stats;
        uint32_t num_hits = UINT32_MAX;
        if (isn_search(c->searcher, &query, &options, hits, &num_hits, &stats, err, sizeof err) != 0)
            fail_msg("seed %llu query %u algo %s: search failed: %s", (unsigned long long)seed, query_number,
                     isn_algo_name(algos[a]), err);
        if (getenv("ISN_TEST_VERBOSE") != NULL)
            print_message("seed %llu query %u %s k %u terms %u %s: scored %llu evaluated %llu blocks %llu\n",
                          (unsigned long long)seed, query_number, and_mode ? "AND" : "OR", k, query.num_terms,
                          isn_algo_name(stats.algo_used), (unsigned long long)stats.postings_scored,
                          (unsigned long long)stats.docs_evaluated, (unsigned long long)stats.blocks_decoded);
        char why[256];
        if (check_against_oracle(hits, num_hits, expected, num_expected, scores, matched, c->num_docs, seen, why,
                                 sizeof why) != NULL)
            fail_msg("seed %llu query %u (\"%s\", %s, k %u, N override %llu) algo %s: %s", (unsigned long long)seed,
                     query_number, q->text, and_mode ? "AND" : "OR", k, (unsigned long long)num_docs_override,
                     isn_algo_name(algos[a]), why);
        if (a == 0) {
            num_reference = num_hits;
            memcpy(reference, hits, num_hits * sizeof *hits);
            continue;
        }
        /* Stricter: the same docs in the same order with bit-identical scores as the reference. */
        if (num_hits != num_reference || memcmp(hits, reference, num_hits * sizeof *hits) != 0) {
            uint32_t at = 0;
            while (at < num_hits && at < num_reference && hits[at].doc == reference[at].doc &&
                   memcmp(&hits[at].score, &reference[at].score, sizeof(float)) == 0)
                at++;
            fail_msg("seed %llu query %u (\"%s\", k %u) algo %s differs from %s at rank %u", (unsigned long long)seed,
                     query_number, q->text, k, isn_algo_name(algos[a]), isn_algo_name(algos[0]), at);
        }
        if (stats.docs_evaluated > stats.postings_scored || stats.matched_lower_bound < num_hits)
            fail_msg("seed %llu query %u algo %s: inconsistent stats", (unsigned long long)seed, query_number,
                     isn_algo_name(algos[a]));
        cases_run++;
    }
    free(scores);
    free(matched);
    free(seen);
    free(expected);
    free(reference);
    free(hits);
}

static void run_random_collection(uint64_t seed) {
    support_rng_seed(seed * 0x2545F4914F6CDD1Dull + 1);
    uint32_t shape = support_rng_below(10);
    uint32_t num_docs = shape == 0   ? 1 + support_rng_below(5)
                        : shape < 4 ? 1 + support_rng_below(300)
                                    : 1 + support_rng_below(3000);
    vocabulary v;
    v.vocab = 2 + support_rng_below(shape == 0 ? 20 : 3000);
    v.words = malloc(v.vocab * sizeof *v.words);
    v.cdf = malloc(v.vocab * sizeof *v.cdf);
    assert_true(v.words && v.cdf);
    double exponent = 0.7 + 0.6 * support_rng_unit(), total = 0.0;
    for (uint32_t w = 0; w < v.vocab; w++) {
        snprintf(v.words[w], sizeof v.words[w], "w%u", w);
        total += pow(w + 1.0, -exponent);
        v.cdf[w] = total;
    }
    /* Clustered collections give lists whose block maxima differ a lot from block to block (topics
     * and document lengths change by doc id range), which is what block-max skipping feeds on. */
    bool long_docs = support_rng_below(2) == 0;
    bool clustered = support_rng_below(2) == 0;
    uint32_t cluster_size = 20 + support_rng_below(400);
    uint32_t *doc_lens;
    const char ***doc_terms = generated_docs_new(num_docs, &doc_lens);
    uint32_t topic = 0, max_len = 300, topic_share = 0;
    for (uint32_t d = 0; d < num_docs; d++) {
        if (clustered && d % cluster_size == 0) {
            topic = support_rng_below(v.vocab);
            max_len = 1 + support_rng_below(300);
            topic_share = support_rng_below(80);
        }
        if (clustered)
            doc_lens[d] = 1 + support_rng_below(max_len);
        else if (long_docs || support_rng_below(8) == 0)
            doc_lens[d] = 1 + support_rng_below(300);
        else
            doc_lens[d] = 1 + support_rng_below(40);
        doc_terms[d] = malloc(doc_lens[d] * sizeof **doc_terms);
        assert_non_null(doc_terms[d]);
        for (uint32_t i = 0; i < doc_lens[d]; i++) {
            uint32_t word = vocab_sample(&v);
            if (clustered && support_rng_below(100) < topic_share)
                word = (topic + word % 50) % v.vocab;
            doc_terms[d][i] = v.words[word];
        }
    }
    collection c;
    collection_open(&c, num_docs, doc_terms, doc_lens);

    static const uint32_t ks[] = {1, 2, 3, 5, 10, 10, 10, 20, 50, 100, 1000, 10000};
    for (uint32_t i = 0; i < 16; i++) {
        bool and_mode = support_rng_below(3) == 0;
        random_query q;
        make_query(&q, &v, and_mode);
        uint32_t k = ks[support_rng_below(sizeof ks / sizeof *ks)];
        /* Now and then global statistics, as an aggregator would send them. */
        uint64_t num_docs_override = support_rng_below(5) == 0 ? num_docs + support_rng_below(5000) : 0;
        run_random_case(&c, &q, and_mode, k, num_docs_override, seed, i);
    }
    collection_close_generated(&c);
    free(v.words);
    free(v.cdf);
}

static void test_random_against_oracle(void **state) {
    (void)state;
    const char *only = getenv("ISN_TEST_SEED");
    if (only != NULL) {
        run_random_collection(strtoull(only, NULL, 10));
        return;
    }
    /* ISN_TEST_SEEDS=n runs more collections for a longer hunt. */
    const char *count = getenv("ISN_TEST_SEEDS");
    uint64_t seeds = count != NULL ? strtoull(count, NULL, 10) : 40;
    for (uint64_t seed = 1; seed <= seeds; seed++)
        run_random_collection(seed);
    print_message("%llu (query, algorithm) cases matched the oracle\n", (unsigned long long)cases_run);
}

/* A collection where one frequent term spans many blocks and scores are decided by a few rare ones,
 * so that the pruning algorithms skip whole blocks; small k keeps the threshold high. */
static void test_block_skipping_collection(void **state) {
    (void)state;
    uint64_t seed = 777;
    support_rng_seed(seed);
    enum { DOCS = 3000 };
    static const char *words[] = {"common", "often", "some", "rare", "rarer", "rarest"};
    uint32_t *doc_lens;
    const char ***doc_terms = generated_docs_new(DOCS, &doc_lens);
    for (uint32_t d = 0; d < DOCS; d++) {
        doc_lens[d] = 1 + support_rng_below(60);
        doc_terms[d] = malloc(doc_lens[d] * sizeof **doc_terms);
        for (uint32_t i = 0; i < doc_lens[d]; i++) {
            uint32_t roll = support_rng_below(1000);
            doc_terms[d][i] = roll < 700 ? words[0] : roll < 900 ? words[1] : roll < 980 ? words[2]
                              : roll < 995 ? words[3] : roll < 999 ? words[4] : words[5];
        }
    }
    collection c;
    collection_open(&c, DOCS, doc_terms, doc_lens);
    static const char *queries[] = {"common rarest", "common often rare", "often some rarer rarest common",
                                    "common common often", "rare rarer", "some"};
    for (uint32_t qi = 0; qi < sizeof queries / sizeof *queries; qi++) {
        for (uint32_t k = 1; k <= 1000; k *= 10) {
            for (int mode = 0; mode < 2; mode++) {
                random_query q;
                fixed_query(&q, queries[qi], words, sizeof words / sizeof *words);
                run_random_case(&c, &q, mode == 1, k, 0, seed, qi);
            }
        }
    }
    collection_close_generated(&c);
}

/* Exact ties: identical documents score bit-identically, and the lower doc id must win, whatever
 * an algorithm skips. Ties are spread over several blocks, between stronger and weaker docs. */
static void test_ties_prefer_lower_doc_ids(void **state) {
    (void)state;
    enum { DOCS = 700 };
    static const char *tie_doc[] = {"red", "green", "filler", "filler"};
    static const char *strong_doc[] = {"red", "red", "green", "green"};
    static const char *weak_doc[] = {"red", "filler", "filler", "filler", "filler", "filler"};
    const char **doc_terms[DOCS];
    uint32_t doc_lens[DOCS];
    for (uint32_t d = 0; d < DOCS; d++) {
        bool strong = d == 350 || d == 600, weak = d % 3 == 1;
        doc_terms[d] = strong ? strong_doc : weak ? weak_doc : tie_doc;
        doc_lens[d] = strong ? 4 : weak ? 6 : 4;
    }
    collection c;
    collection_open(&c, DOCS, doc_terms, doc_lens);
    static const uint32_t ks[] = {1, 2, 3, 7, 100, 300};
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
        uint32_t k = ks[ki];
        for (int mode = 0; mode < 2; mode++) {
            const isn_algo *algos = mode == 1 ? and_algos : or_algos;
            size_t num_algos = mode == 1 ? 3 : 5;
            for (size_t a = 0; a < num_algos; a++) {
                isn_hit hits[300];
                uint32_t n;
                char err[ISN_ERR_LEN];
                isn_mode search_mode = mode == 1 ? ISN_MODE_AND : ISN_MODE_OR;
                int rc = support_search_text(c.searcher, "red green", search_mode, algos[a], k, hits, &n, err);
                assert_int_equal(rc, 0);
                assert_int_equal(n, k);
                /* The two strong docs, then tied docs 0, 2, 3, 5, 6, ... (d % 3 != 1) by id. */
                uint32_t tied = 0;
                for (uint32_t r = 0; r < n; r++) {
                    uint32_t expected;
                    if (r < 2) {
                        expected = r == 0 ? 350 : 600;
                    } else {
                        while (tied % 3 == 1 || tied == 350 || tied == 600)
                            tied++;
                        expected = tied++;
                    }
                    if (hits[r].doc != expected)
                        fail_msg("k %u %s rank %u: doc %u, expected %u", k, isn_algo_name(algos[a]), r, hits[r].doc,
                                 expected);
                    if (r > 2 && memcmp(&hits[r].score, &hits[2].score, sizeof(float)) != 0)
                        fail_msg("k %u %s rank %u: tied docs differ in score", k, isn_algo_name(algos[a]), r);
                }
            }
        }
    }
    collection_close(&c);
}

/* Deterministic block boundaries: "omni" and "x" are in every doc (so both lists' blocks are docs
 * [128 j, 128 j + 127]) and every doc has the same length; x has tf 1 except in a few winners placed
 * on the first or last doc of a block. Between winners whole blocks are weak, so the block-max
 * algorithms skip them and must land exactly on the next block's first doc. */
static void test_block_boundary_winners(void **state) {
    (void)state;
    enum { DOCS = 10 * ISN_BLOCK_SIZE, LENGTH = 40 };
    static const struct {
        uint32_t doc, tf;
    } winners[] = {{0, 8}, {3 * ISN_BLOCK_SIZE, 12}, {5 * ISN_BLOCK_SIZE, 16}, {6 * ISN_BLOCK_SIZE + 127, 20},
                   {7 * ISN_BLOCK_SIZE, 24}, {9 * ISN_BLOCK_SIZE, 28}, {9 * ISN_BLOCK_SIZE + 1, 30}};
    enum { WINNERS = sizeof winners / sizeof *winners };
    uint32_t *doc_lens;
    const char ***doc_terms = generated_docs_new(DOCS, &doc_lens);
    for (uint32_t d = 0; d < DOCS; d++) {
        uint32_t tf = 1;
        for (uint32_t w = 0; w < WINNERS; w++)
            if (winners[w].doc == d)
                tf = winners[w].tf;
        doc_lens[d] = LENGTH;
        doc_terms[d] = malloc(LENGTH * sizeof **doc_terms);
        assert_non_null(doc_terms[d]);
        doc_terms[d][0] = "omni";
        for (uint32_t i = 1; i < LENGTH; i++)
            doc_terms[d][i] = i <= tf ? "x" : "filler";
    }
    collection c;
    collection_open(&c, DOCS, doc_terms, doc_lens);
    static const char *queries[] = {"omni x", "x", "x x omni"}, *query_words[] = {"x", "omni"};
    for (uint32_t qi = 0; qi < sizeof queries / sizeof *queries; qi++) {
        for (uint32_t k = 1; k <= WINNERS; k++) {
            for (int mode = 0; mode < 2; mode++) {
                random_query q;
                fixed_query(&q, queries[qi], query_words, sizeof query_words / sizeof *query_words);
                run_random_case(&c, &q, mode == 1, k, 0, 4242, qi);
                /* And explicitly: the winners, strongest (latest) first. */
                const isn_algo *algos = mode == 1 ? and_algos : or_algos;
                size_t num_algos = mode == 1 ? 3 : 5;
                for (size_t a = 0; a < num_algos; a++) {
                    isn_hit hits[WINNERS];
                    uint32_t n;
                    char err[ISN_ERR_LEN];
                    isn_mode search_mode = mode == 1 ? ISN_MODE_AND : ISN_MODE_OR;
                    int rc = support_search_text(c.searcher, queries[qi], search_mode, algos[a], k, hits, &n, err);
                    assert_int_equal(rc, 0);
                    assert_int_equal(n, k);
                    for (uint32_t r = 0; r < k; r++)
                        if (hits[r].doc != winners[WINNERS - 1 - r].doc)
                            fail_msg("\"%s\" k %u algo %s rank %u: doc %u, expected %u", queries[qi], k,
                                     isn_algo_name(algos[a]), r, hits[r].doc, winners[WINNERS - 1 - r].doc);
                }
            }
        }
    }
    collection_close_generated(&c);
}

/* Dense lists whose strength changes by segment of doc ids: every list spans many blocks and the
 * block maxima rise and fall, so the block-max algorithms skip often and at many block boundaries. */
static void run_segmented_collection(uint64_t seed) {
    support_rng_seed(seed);
    enum { WORDS = 8 };
    static const char *words[WORDS] = {"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"};
    uint32_t num_docs = 500 + support_rng_below(3000);
    uint32_t *doc_lens;
    const char ***doc_terms = generated_docs_new(num_docs, &doc_lens);
    uint32_t segment_left = 0, max_len = 1, presence[WORDS] = {0}, max_tf[WORDS] = {0};
    for (uint32_t d = 0; d < num_docs; d++) {
        if (segment_left == 0) {
            segment_left = 20 + support_rng_below(300);
            max_len = 5 + support_rng_below(200);
            for (uint32_t w = 0; w < WORDS; w++) {
                presence[w] = support_rng_below(3) == 0 ? support_rng_below(10) : support_rng_below(101);
                max_tf[w] = 1 + (support_rng_below(4) == 0 ? support_rng_below(30) : support_rng_below(3));
            }
        }
        segment_left--;
        const char *terms[600];
        uint32_t len = 0;
        /* "omni" is in every doc, so its blocks are exactly docs [128 j, 128 j + 127]. The first docs
         * of such a block are now and then short and strong: winners right past the block ends
         * where block-max skipping stops. */
        bool boundary_winner = d % ISN_BLOCK_SIZE < 3 && support_rng_below(3) == 0;
        for (uint32_t tf = 1 + support_rng_below(3); tf > 0; tf--)
            terms[len++] = "omni";
        for (uint32_t w = 0; w < WORDS; w++) {
            if (boundary_winner ? support_rng_below(2) == 0 : support_rng_below(100) >= presence[w])
                continue;
            uint32_t tf_limit = boundary_winner ? 20 : max_tf[w];
            for (uint32_t tf = 1 + support_rng_below(tf_limit); tf > 0; tf--)
                terms[len++] = words[w];
        }
        uint32_t filler = boundary_winner ? 0 : support_rng_below(max_len);
        for (uint32_t i = 0; i < filler || len == 0; i++)
            terms[len++] = "filler";
        doc_lens[d] = len;
        doc_terms[d] = malloc(len * sizeof **doc_terms);
        assert_non_null(doc_terms[d]);
        memcpy(doc_terms[d], terms, len * sizeof *terms);
    }
    collection c;
    collection_open(&c, num_docs, doc_terms, doc_lens);
    static const uint32_t ks[] = {1, 2, 5, 10, 10, 20, 50, 200};
    for (uint32_t qi = 0; qi < 40; qi++) {
        random_query q;
        q.num_tokens = 0;
        size_t len = 0;
        bool and_mode = support_rng_below(2) == 0;
        uint32_t mask = 1 + support_rng_below((1u << (WORDS + 1)) - 1);
        if (and_mode) /* short conjunctions, or nothing would match */
            mask = (1u << support_rng_below(WORDS + 1)) | (1u << support_rng_below(WORDS + 1)) |
                   (support_rng_below(2) << WORDS);
        for (uint32_t w = 0; w <= WORDS; w++) {
            if (!(mask & (1u << w)))
                continue;
            const char *word = w < WORDS ? words[w] : "omni";
            q.tokens[q.num_tokens++] = word;
            len += (size_t)snprintf(q.text + len, sizeof q.text - len, "%s%s", len ? " " : "", word);
        }
        run_random_case(&c, &q, and_mode, ks[support_rng_below(sizeof ks / sizeof *ks)], 0, seed, qi);
    }
    collection_close_generated(&c);
}

static void test_segmented_collections(void **state) {
    (void)state;
    for (uint64_t seed = 1001; seed <= 1010; seed++)
        run_segmented_collection(seed);
}

/* Many windows of the block-max MaxScore: 40,000 documents span several of its accumulator windows
 * (8,192 docs) and bound windows (16,384 docs at least), with topics changing by doc id range so that
 * the lists' bounds, and which of them are essential, change from window to window. */
static void test_many_windows_collection(void **state) {
    (void)state;
    uint64_t seed = 4242;
    support_rng_seed(seed);
    enum { DOCS = 40000, CLUSTER = 2500 };
    static const char *words[] = {"common", "often", "some", "mid", "rare", "rarer", "rarest", "topic"};
    uint32_t *doc_lens;
    const char ***doc_terms = generated_docs_new(DOCS, &doc_lens);
    for (uint32_t d = 0; d < DOCS; d++) {
        /* every other cluster favours "topic" and "mid" and has shorter documents */
        bool hot = (d / CLUSTER) % 2 == 1;
        doc_lens[d] = 1 + support_rng_below(hot ? 12 : 40);
        doc_terms[d] = malloc(doc_lens[d] * sizeof **doc_terms);
        for (uint32_t i = 0; i < doc_lens[d]; i++) {
            uint32_t roll = support_rng_below(1000);
            doc_terms[d][i] = hot && roll < 150   ? words[7]
                              : hot && roll < 250 ? words[3]
                              : roll < 650        ? words[0]
                              : roll < 850        ? words[1]
                              : roll < 950        ? words[2]
                              : roll < 980        ? words[3]
                              : roll < 994        ? words[4]
                              : roll < 999        ? words[5]
                                                  : words[6];
        }
    }
    collection c;
    collection_open(&c, DOCS, doc_terms, doc_lens);
    static const char *queries[] = {"common rarest", "topic mid rare", "often some rarer rarest common topic",
                                    "common often some mid rare rarer rarest topic", "rare rarer", "topic"};
    static const uint32_t ks[] = {1, 10, 100, 1000};
    for (uint32_t qi = 0; qi < sizeof queries / sizeof *queries; qi++) {
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            random_query q;
            fixed_query(&q, queries[qi], words, sizeof words / sizeof *words);
            run_random_case(&c, &q, false, ks[ki], 0, seed, qi);
        }
    }
    collection_close_generated(&c);
}

/* Until the top-k is full every candidate of the block-max MaxScore is completed and offered: its
 * first windows are short, so that a threshold is known before a full window. Here every document
 * holds both terms, ten strong ones come first, and the rest can never beat them: the search must
 * complete far fewer documents than one full window (8,192) holds. */
static void test_threshold_learnt_before_full_window(void **state) {
    (void)state;
    enum { DOCS = 20000, STRONG_FROM = 3, STRONG = 10 };
    static const char *strong_doc[] = {"alpha", "alpha", "alpha", "beta", "beta", "beta"};
    static const char *weak_doc[] = {"alpha", "beta", "filler", "filler", "filler", "filler"};
    const char ***doc_terms = malloc(DOCS * sizeof *doc_terms);
    uint32_t *doc_lens = malloc(DOCS * sizeof *doc_lens);
    assert_true(doc_terms && doc_lens);
    for (uint32_t d = 0; d < DOCS; d++) {
        bool strong = d >= STRONG_FROM && d < STRONG_FROM + STRONG;
        doc_terms[d] = strong ? strong_doc : weak_doc;
        doc_lens[d] = 6;
    }
    collection c;
    collection_open(&c, DOCS, doc_terms, doc_lens);
    isn_query query;
    char err[ISN_ERR_LEN] = "";
    assert_int_equal(isn_query_parse(c.searcher, "alpha beta", 10, &query, err, sizeof err), 0);
    isn_search_options options;
    isn_search_options_default(&options);
    options.algo = ISN_ALGO_BMM;
    options.k = STRONG;
    isn_hit hits[STRONG];
    uint32_t n = 0;
    isn_search_stats stats;
    assert_int_equal(isn_search(c.searcher, &query, &options, hits, &n, &stats, err, sizeof err), 0);
    assert_int_equal(n, STRONG);
    for (uint32_t r = 0; r < n; r++)
        assert_int_equal(hits[r].doc, STRONG_FROM + r);
    if (stats.docs_evaluated >= 4096)
        fail_msg("bmm completed %llu documents for a top-%u whose threshold the first %u documents settle",
                 (unsigned long long)stats.docs_evaluated, STRONG, STRONG_FROM + STRONG);
    collection_close(&c);
    free(doc_terms);
    free(doc_lens);
}

/* Runs `text` on the collection with the block-max MaxScore and the exhaustive OR at top K_SMALL, checks
 * that they agree (documents and scores) and returns the block-max MaxScore's statistics. */
#define K_SMALL 10
static isn_search_stats bmm_against_or(collection *c, const char *text, isn_hit *hits) {
    isn_query query;
    char err[ISN_ERR_LEN] = "";
    assert_int_equal(isn_query_parse(c->searcher, text, strlen(text), &query, err, sizeof err), 0);
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = K_SMALL;
    isn_hit expected[K_SMALL];
    uint32_t num_expected = 0, n = 0;
    options.algo = ISN_ALGO_OR;
    assert_int_equal(isn_search(c->searcher, &query, &options, expected, &num_expected, NULL, err, sizeof err), 0);
    options.algo = ISN_ALGO_BMM;
    isn_search_stats stats;
    assert_int_equal(isn_search(c->searcher, &query, &options, hits, &n, &stats, err, sizeof err), 0);
    assert_int_equal(n, num_expected);
    for (uint32_t r = 0; r < n; r++) {
        assert_int_equal(hits[r].doc, expected[r].doc);
        assert_true(hits[r].score == expected[r].score);
    }
    return stats;
}

/* Which lists the block-max MaxScore leaves non-essential is its choice among those whose bounds fit
 * under the threshold: a frequent term repeated in the query has the highest bound, but taking it (and
 * not the two rare terms) as non-essential leaves the rare terms' few docs as the candidates. Here half
 * of the documents hold "common", 200 hold the rare terms too, and the top 10 are among those 200: the
 * search must consider far fewer documents than "common" holds, and return the exhaustive OR's hits. */
static void test_frequent_repeated_term_not_essential(void **state) {
    (void)state;
    enum { DOCS = 40000 };
    static const char *plain[] = {"filler", "filler", "filler", "filler"};
    static const char *frequent[] = {"common", "filler", "filler", "filler"};
    static const char *all[] = {"common", "rarea", "rareb", "filler"};
    const char ***doc_terms = malloc(DOCS * sizeof *doc_terms);
    uint32_t *doc_lens = malloc(DOCS * sizeof *doc_lens);
    assert_true(doc_terms && doc_lens);
    for (uint32_t d = 0; d < DOCS; d++) {
        doc_terms[d] = d % 200 == 0 ? all : d % 2 == 0 ? frequent : plain;
        doc_lens[d] = 4;
    }
    collection c;
    collection_open(&c, DOCS, doc_terms, doc_lens);
    isn_hit hits[K_SMALL];
    isn_search_stats stats = bmm_against_or(
        &c, "common common common common common common common common common common rarea rareb", hits);
    for (uint32_t r = 0; r < K_SMALL; r++)
        assert_int_equal(hits[r].doc, 200 * r);
    if (stats.matched_lower_bound >= DOCS / 4)
        fail_msg("bmm considered %llu documents; \"common\" alone holds %u and the rare terms %u",
                 (unsigned long long)stats.matched_lower_bound, DOCS / 2, DOCS / 200);
    collection_close(&c);
    free(doc_terms);
    free(doc_lens);
}

/* A non-essential list that is sparse next to the essential ones is read in bulk, a block at a time,
 * and added to the candidates it holds, instead of being looked up for each candidate: its postings
 * are then scored whether or not a candidate holds them. Here "alpha" and "beta" (a quarter of the
 * documents each) are essential and "gamma", in 400 long documents that hold neither, is not: with the
 * exhaustive OR's hits, the postings scored must include gamma's. */
static void test_sparse_nonessential_list_read_in_bulk(void **state) {
    (void)state;
    enum { DOCS = 40000, LONG = 400 };
    static const char *alpha[] = {"alpha", "filler", "filler", "filler"};
    static const char *beta[] = {"beta", "filler", "filler", "filler"};
    static const char *plain[] = {"filler", "filler", "filler", "filler"};
    static const char *long_doc[LONG];
    long_doc[0] = "gamma";
    for (uint32_t i = 1; i < LONG; i++)
        long_doc[i] = "filler";
    const char ***doc_terms = malloc(DOCS * sizeof *doc_terms);
    uint32_t *doc_lens = malloc(DOCS * sizeof *doc_lens);
    assert_true(doc_terms && doc_lens);
    uint32_t essential_postings = 0, gamma_postings = 0;
    for (uint32_t d = 0; d < DOCS; d++) {
        bool is_gamma = d % 100 == 2;
        doc_terms[d] = d % 4 == 0 ? alpha : d % 4 == 1 ? beta : is_gamma ? long_doc : plain;
        doc_lens[d] = is_gamma ? LONG : 4;
        essential_postings += d % 4 < 2;
        gamma_postings += is_gamma;
    }
    collection c;
    collection_open(&c, DOCS, doc_terms, doc_lens);
    isn_hit hits[K_SMALL];
    isn_search_stats stats = bmm_against_or(&c, "alpha beta gamma", hits);
    if (stats.postings_scored < essential_postings + gamma_postings * 9 / 10)
        fail_msg("bmm scored %llu postings: alpha and beta hold %u, gamma %u, which must be read in bulk",
                 (unsigned long long)stats.postings_scored, essential_postings, gamma_postings);
    collection_close(&c);
    free(doc_terms);
    free(doc_lens);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_algo_names),
        cmocka_unit_test(test_hand_computed_scores),
        cmocka_unit_test(test_parse_merges_repeats_and_counts_unknown),
        cmocka_unit_test(test_empty_and_unknown_queries),
        cmocka_unit_test(test_too_many_distinct_terms),
        cmocka_unit_test(test_invalid_options),
        cmocka_unit_test(test_block_skipping_collection),
        cmocka_unit_test(test_ties_prefer_lower_doc_ids),
        cmocka_unit_test(test_block_boundary_winners),
        cmocka_unit_test(test_segmented_collections),
        cmocka_unit_test(test_many_windows_collection),
        cmocka_unit_test(test_threshold_learnt_before_full_window),
        cmocka_unit_test(test_frequent_repeated_term_not_essential),
        cmocka_unit_test(test_sparse_nonessential_list_read_in_bulk),
        cmocka_unit_test(test_random_against_oracle),
    };
    return cmocka_run_group_tests(tests, NULL, remove_leftover_dirs);
}
