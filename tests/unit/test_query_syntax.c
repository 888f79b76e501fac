/* Query syntax and query trees: the parser's clauses and errors, the bag of words left bit for bit,
 * and every first-stage algorithm (AUTO included) against the brute-force query oracle on random
 * two-field indexes with positions: phrases, required, excluded and field: clauses, k from 1 to 1000. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/files.h"
#include "tests/support/query_oracle.h"
#include "tests/support/random.h"

/* ------------------------------------------------------------------ the parser */

static void split(const char *text, isn_clause_spec *specs, uint32_t *n) {
    char err[ISN_ERR_LEN] = "";
    if (isn_query_syntax_split(text, strlen(text), specs, 64, n, err, sizeof err) != 0)
        fail_msg("'%s': %s", text, err);
}

static void expect_error(const char *text, const char *needle) {
    isn_clause_spec specs[64];
    uint32_t n;
    char err[ISN_ERR_LEN] = "";
    assert_int_equal(isn_query_syntax_split(text, strlen(text), specs, 64, &n, err, sizeof err), -1);
    if (!strstr(err, needle)) fail_msg("'%s': error '%s' lacks '%s'", text, err, needle);
}

static void test_split_operators(void **state) {
    (void)state;
    isn_clause_spec s[64];
    uint32_t n;
    split("+python -django \"image editor\" title:viewer body:\"a b\" plain", s, &n);
    assert_int_equal(n, 6);
    assert_int_equal(s[0].occur, ISN_OCCUR_MUST);
    assert_true(s[0].text_len == 6 && memcmp(s[0].text, "python", 6) == 0);
    assert_int_equal(s[1].occur, ISN_OCCUR_MUST_NOT);
    assert_true(s[2].phrase && s[2].text_len == 12 && s[2].occur == ISN_OCCUR_SHOULD);
    assert_true(s[3].field_len == 5 && memcmp(s[3].field, "title", 5) == 0);
    assert_true(s[4].phrase && s[4].field_len == 4 && s[4].text_len == 3);
    assert_true(!s[5].phrase && s[5].field == NULL && s[5].offset == 55);
    /* Operators only bind to what follows them directly; "::" and "x: y" are text. */
    split("a - b --doc Apache::Session note: x c++", s, &n);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(s[i].occur, ISN_OCCUR_SHOULD);
        assert_true(s[i].field == NULL && !s[i].phrase);
    }
}

static void test_split_errors_name_the_byte(void **state) {
    (void)state;
    expect_error("image \"editor", "quote at byte 6");
    expect_error("a \"  \" b", "empty phrase at byte 2");
    expect_error("x title:(a b)", "parentheses after field title at byte 8");
}

/* ------------------------------------------------------------------ random two-field collections */

#define VOCABULARY 10
#define MAX_TITLE 5
#define MAX_BODY 24
static const char *vocabulary[VOCABULARY] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9"};

typedef struct {
    char dir[64];
    uint32_t num_docs;
    const char *(*words)[2][MAX_BODY];
    uint32_t (*lens)[2];
    const char *const **word_rows; /* [doc * 2 + field] */
    const char *const *const **doc_rows;
    const uint32_t **len_rows;
    query_oracle_collection oracle;
    isn_index *index;
    isn_searcher *searcher;
} collection;

/* Skewed word choice, so that some phrases are frequent and lists have several blocks. */
static const char *random_word(void) {
    uint32_t r = support_rng_below(100);
    return vocabulary[r < 40 ? r % 3 : r < 75 ? 3 + r % 3 : 6 + r % 4];
}

static void collection_open(collection *c, uint32_t num_docs) {
    memset(c, 0, sizeof *c);
    c->num_docs = num_docs;
    c->words = calloc(num_docs, sizeof *c->words);
    c->lens = calloc(num_docs, sizeof *c->lens);
    c->doc_rows = calloc(num_docs, sizeof *c->doc_rows);
    c->len_rows = calloc(num_docs, sizeof *c->len_rows);
    const char *const **rows = calloc(num_docs, 2 * sizeof(const char *const *));
    assert_true(c->words && c->lens && c->doc_rows && c->len_rows && rows);
    isn_build_options options;
    isn_build_options_default(&options);
    options.num_fields = 2;
    snprintf(options.fields[0], sizeof options.fields[0], "title");
    snprintf(options.fields[1], sizeof options.fields[1], "body");
    options.analyzer.stem = false;
    options.analyzer.stopwords = false;
    options.positions = true;
    options.order = ISN_ORDER_INPUT;
    options.progress = false;
    isn_builder *builder = isn_builder_new(&options);
    assert_non_null(builder);
    char err[ISN_ERR_LEN] = "";
    for (uint32_t d = 0; d < num_docs; d++) {
        c->lens[d][0] = support_rng_below(MAX_TITLE + 1);
        c->lens[d][1] = 1 + support_rng_below(MAX_BODY);
        char text[2][MAX_BODY * 4];
        for (uint32_t f = 0; f < 2; f++) {
            size_t at = 0;
            for (uint32_t i = 0; i < c->lens[d][f]; i++) {
                c->words[d][f][i] = random_word();
                at += (size_t)snprintf(text[f] + at, sizeof text[f] - at, "%s%s", i ? " " : "", c->words[d][f][i]);
            }
            text[f][at] = '\0';
            rows[2 * d + f] = c->words[d][f];
        }
        c->doc_rows[d] = &rows[2 * d];
        c->len_rows[d] = c->lens[d];
        char id[32];
        snprintf(id, sizeof id, "doc%u", d);
        const char *fields[2] = {text[0], text[1]};
        size_t field_lens[2] = {strlen(text[0]), strlen(text[1])};
        if (isn_builder_add(builder, id, fields, field_lens, 0.0f, err, sizeof err) != 0) fail_msg("%s", err);
    }
    c->word_rows = rows;
    snprintf(c->dir, sizeof c->dir, "/tmp/isn-test-query-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    isn_build_summary summary;
    if (isn_builder_write(builder, c->dir, &summary, err, sizeof err) != 0) fail_msg("%s", err);
    isn_builder_free(builder);
    c->index = isn_index_open(c->dir, err, sizeof err);
    if (!c->index) fail_msg("%s", err);
    c->searcher = isn_searcher_new(c->index);
    assert_non_null(c->searcher);
    c->oracle = (query_oracle_collection){.num_docs = num_docs, .num_fields = 2, .words = c->doc_rows,
                                          .lens = c->len_rows, .k1 = 1.2, .b = 0.75};
}

static void collection_close(collection *c) {
    isn_searcher_free(c->searcher);
    isn_index_close(c->index);
    support_remove_tree(c->dir);
    free(c->words);
    free(c->lens);
    free((void *)c->word_rows);
    free(c->doc_rows);
    free(c->len_rows);
}

/* A random query tree, and the same written in the query syntax. */
static uint32_t random_query(query_oracle_clause *clauses, char *text, size_t text_len) {
    uint32_t n = 1 + support_rng_below(4);
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        query_oracle_clause *c = &clauses[i];
        uint32_t r = support_rng_below(100);
        c->occur = r < 50 ? QO_SHOULD : r < 75 ? QO_MUST : QO_MUST_NOT;
        r = support_rng_below(100);
        c->field = r < 60 ? -1 : r < 80 ? 0 : 1;
        c->num_words = support_rng_below(100) < 60 ? 1 : 2 + support_rng_below(2);
        at += (size_t)snprintf(text + at, text_len - at, "%s%s%s%s%s", i ? " " : "",
                               c->occur == QO_MUST ? "+" : c->occur == QO_MUST_NOT ? "-" : "",
                               c->field == 0 ? "title:" : c->field == 1 ? "body:" : "", c->num_words > 1 ? "\"" : "",
                               "");
        for (uint32_t w = 0; w < c->num_words; w++) {
            c->words[w] = random_word();
            at += (size_t)snprintf(text + at, text_len - at, "%s%s", w ? " " : "", c->words[w]);
        }
        if (c->num_words > 1) at += (size_t)snprintf(text + at, text_len - at, "\"");
    }
    return n;
}

/* A search lays out its memory first and then takes it piece by piece: a miscount would take past the
 * layout (into another piece, before the arena served overruns from the heap). */
static void assert_within_layout(const char *what, const isn_search_stats *stats) {
    if (stats->arena_overrun_bytes)
        fail_msg("%s: took %llu bytes beyond its arena's layout", what, (unsigned long long)stats->arena_overrun_bytes);
}

static bool near(double a, double b) { return fabs(a - b) <= 2e-5 * fabs(b) + 1e-9; }

static void check_hits(const char *what, const isn_hit *hits, uint32_t num_hits, const oracle_hit *expected,
                       uint32_t num_expected, const query_oracle_collection *oracle, const query_oracle_clause *clauses,
                       uint32_t num_clauses, bool and_mode) {
    if (num_hits != num_expected) fail_msg("%s: %u hits, the oracle %u", what, num_hits, num_expected);
    for (uint32_t i = 0; i < num_hits; i++) {
        if (!near(hits[i].score, expected[i].score))
            fail_msg("%s: rank %u doc %u score %.9g, the oracle's rank %u doc %u %.9g", what, i, hits[i].doc,
                     hits[i].score, i, expected[i].doc, expected[i].score);
        if (hits[i].doc != expected[i].doc) {
            /* only a tie within float rounding may swap documents; the hit must still match */
            if (!query_oracle_matches(oracle, clauses, num_clauses, NULL, 0, and_mode, hits[i].doc))
                fail_msg("%s: rank %u doc %u does not match the query", what, i, hits[i].doc);
        }
    }
}

static const isn_algo or_algos[] = {ISN_ALGO_OR, ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW, ISN_ALGO_BMM,
                                    ISN_ALGO_AUTO};
static const isn_algo and_algos[] = {ISN_ALGO_AND, ISN_ALGO_BMAND, ISN_ALGO_AUTO};

static void test_every_algorithm_against_the_oracle(void **state) {
    (void)state;
    static const uint32_t ks[] = {1, 5, 20, 1000};
    isn_hit *hits = calloc(1000, sizeof *hits);
    oracle_hit *expected = calloc(1000, sizeof *expected);
    assert_true(hits && expected);
    uint32_t checked = 0, nonempty = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        support_rng_seed(seed);
        collection c;
        collection_open(&c, 100 + support_rng_below(700));
        for (uint32_t q = 0; q < 40; q++) {
            query_oracle_clause clauses[4];
            char text[256];
            uint32_t n = random_query(clauses, text, sizeof text);
            isn_query query;
            char err[ISN_ERR_LEN] = "";
            if (isn_query_parse_syntax(c.searcher, text, strlen(text), NULL, 0, &query, err, sizeof err) != 0)
                fail_msg("seed %llu '%s': %s", (unsigned long long)seed, text, err);
            for (int mode = 0; mode < 2; mode++) {
                bool and_mode = mode == 1;
                const isn_algo *algos = and_mode ? and_algos : or_algos;
                uint32_t num_algos = and_mode ? 3 : 6;
                for (uint32_t ki = 0; ki < 4; ki++) {
                    uint64_t matched = 0;
                    uint32_t num_expected = query_oracle_top_k(&c.oracle, clauses, n, NULL, 0, and_mode, ks[ki],
                                                               expected, &matched);
                    nonempty += num_expected > 0;
                    for (uint32_t a = 0; a < num_algos; a++) {
                        isn_search_options options;
                        isn_search_options_default(&options);
                        options.mode = and_mode ? ISN_MODE_AND : ISN_MODE_OR;
                        options.algo = algos[a];
                        options.k = ks[ki];
                        uint32_t num_hits = 0;
                        isn_search_stats stats;
                        if (isn_search(c.searcher, &query, &options, hits, &num_hits, &stats, err, sizeof err) != 0)
                            fail_msg("'%s': %s", text, err);
                        char what[400];
                        snprintf(what, sizeof what, "seed %llu '%s' %s k=%u %s", (unsigned long long)seed, text,
                                 and_mode ? "AND" : "OR", ks[ki], isn_algo_name(algos[a]));
                        assert_within_layout(what, &stats);
                        check_hits(what, hits, num_hits, expected, num_expected, &c.oracle, clauses, n, and_mode);
                        if (a == 0 && stats.matched_lower_bound != matched)
                            fail_msg("%s: matched %llu, the oracle %llu", what,
                                     (unsigned long long)stats.matched_lower_bound, (unsigned long long)matched);
                        checked++;
                    }
                }
            }
        }
        collection_close(&c);
    }
    /* the queries must exercise matches, not only empty answers */
    assert_true(nonempty > checked / 20);
    free(hits);
    free(expected);
}

/* `text` parsed with the filters (none: num_filters 0), and each algorithm's top k against the oracle's,
 * every hit satisfying the query; `label` names the case in a failure. One run per algorithm; true when
 * the oracle found hits. */
static bool algos_match_oracle(collection *c, const char *text, const query_oracle_clause *clauses, uint32_t n,
                               const query_oracle_filter *of, const isn_filter_spec *specs, uint32_t num_filters,
                               uint32_t k, const isn_algo *algos, size_t num_algos, const char *label,
                               uint32_t *runs) {
    isn_hit hits[20];
    oracle_hit expected[20];
    isn_query query;
    char err[ISN_ERR_LEN] = "";
    if (isn_query_parse_syntax(c->searcher, text, strlen(text), specs, num_filters, &query, err, sizeof err))
        fail_msg("'%s': %s", text, err);
    uint64_t matched;
    uint32_t num_expected = query_oracle_top_k(&c->oracle, clauses, n, of, num_filters, false, k, expected, &matched);
    for (size_t a = 0; a < num_algos; a++) {
        isn_search_options options;
        isn_search_options_default(&options);
        options.algo = algos[a];
        options.k = k;
        uint32_t num_hits = 0;
        isn_search_stats stats;
        assert_int_equal(isn_search(c->searcher, &query, &options, hits, &num_hits, &stats, err, sizeof err), 0);
        char what[400];
        snprintf(what, sizeof what, "%s '%s' k=%u %s", label, text, k, isn_algo_name(algos[a]));
        assert_within_layout(what, &stats);
        check_hits(what, hits, num_hits, expected, num_expected, &c->oracle, clauses, n, false);
        for (uint32_t i = 0; i < num_hits; i++)
            if (!query_oracle_matches(&c->oracle, clauses, n, of, num_filters, false, hits[i].doc))
                fail_msg("%s: rank %u doc %u does not satisfy the query", what, i, hits[i].doc);
        (*runs)++;
    }
    return num_expected > 0;
}

/* Two to four clauses, optional phrases (the first always one) and terms, the last maybe excluded, and
 * the same query as written. */
static uint32_t random_phrase_query(query_oracle_clause *clauses, char *text, size_t text_len) {
    uint32_t n = 2 + support_rng_below(3);
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        query_oracle_clause *cl = &clauses[i];
        *cl = (query_oracle_clause){.occur = i + 1 < n || support_rng_below(3) ? QO_SHOULD : QO_MUST_NOT,
                                    .field = -1, .num_words = i == 0 || support_rng_below(2) ? 2 : 1};
        at += (size_t)snprintf(text + at, text_len - at, "%s%s%s", i ? " " : "", cl->occur == QO_MUST_NOT ? "-" : "",
                               cl->num_words > 1 ? "\"" : "");
        for (uint32_t w = 0; w < cl->num_words; w++) {
            cl->words[w] = random_word();
            at += (size_t)snprintf(text + at, text_len - at, "%s%s", w ? " " : "", cl->words[w]);
        }
        if (cl->num_words > 1) at += (size_t)snprintf(text + at, text_len - at, "\"");
    }
    return n;
}

/* Optional phrases beside optional terms, k small: a phrase the search only asks about the documents it
 * already holds (a non-essential clause, confirmed for that document alone) must be searched afresh
 * where it becomes essential again in a later window. */
static void test_optional_phrases_against_the_oracle(void **state) {
    (void)state;
    static const isn_algo algos[] = {ISN_ALGO_MAXSCORE, ISN_ALGO_BMM, ISN_ALGO_AUTO};
    uint32_t nonempty = 0, runs = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        support_rng_seed(500 + seed);
        collection c;
        collection_open(&c, 1500 + support_rng_below(1500));
        for (uint32_t q = 0; q < 60; q++) {
            query_oracle_clause clauses[4];
            char text[256];
            uint32_t n = random_phrase_query(clauses, text, sizeof text);
            char label[32];
            snprintf(label, sizeof label, "seed %llu", (unsigned long long)seed);
            nonempty += algos_match_oracle(&c, text, clauses, n, NULL, NULL, 0, 1 + q % 4, algos,
                                           sizeof algos / sizeof *algos, label, &runs);
        }
        collection_close(&c);
    }
    assert_true(nonempty > runs / 3 / 2);
}

/* Whole-document phrases read positions only: they answer before the index has derived its per-field
 * data and never start that pass on the query's worker (the first phrase query of a fresh node used to
 * hold a worker for the whole pass); the background pass then gives them its faster positions cursors,
 * with the same answers, and field: clauses their lists. */
static void test_phrases_do_not_wait_for_the_per_field_data(void **state) {
    (void)state;
    static const isn_algo algos[] = {ISN_ALGO_MAXSCORE, ISN_ALGO_BMM, ISN_ALGO_AUTO};
    support_rng_seed(77);
    collection c;
    collection_open(&c, 2000);
    enum { QUERIES = 40 };
    static query_oracle_clause clauses[QUERIES][4];
    static char texts[QUERIES][256];
    uint32_t sizes[QUERIES], runs = 0, nonempty = 0;
    for (uint32_t q = 0; q < QUERIES; q++) sizes[q] = random_phrase_query(clauses[q], texts[q], sizeof texts[q]);
    for (int derived = 0; derived < 2; derived++) {
        for (uint32_t q = 0; q < QUERIES; q++)
            nonempty += algos_match_oracle(&c, texts[q], clauses[q], sizes[q], NULL, NULL, 0, 1 + q % 10, algos,
                                           sizeof algos / sizeof *algos, derived ? "derived" : "not derived", &runs);
        if (derived) break;
        assert_null(isn_index_field_tfs_if_ready(c.index));
        assert_int_equal(isn_index_derive_field_data_in_background(c.index), 0);
        assert_non_null(isn_index_field_tfs(c.index)); /* waits for the pass, or makes it */
        assert_non_null(isn_index_field_tfs_if_ready(c.index));
    }
    assert_true(nonempty > QUERIES / 2);
    query_oracle_clause title = {.occur = QO_SHOULD, .field = 0, .num_words = 1, .words = {vocabulary[0]}};
    char text[64];
    snprintf(text, sizeof text, "title:%s", vocabulary[0]);
    assert_true(algos_match_oracle(&c, text, &title, 1, NULL, NULL, 0, 5, algos, 1, "field", &runs));
    collection_close(&c);

    /* closed while the pass runs: it stops and its thread is joined (a sanitizer build sees no leak) */
    collection_open(&c, 2000);
    assert_int_equal(isn_index_derive_field_data_in_background(c.index), 0);
    collection_close(&c);
}

/* ------------------------------------------------------------------ the bag of words stays as it was */

/* Block-max windows: a dense list of middling scores whose one block ends early, beside a list of many
 * blocks whose best document (doc 900) comes late. Once the first window's best is known the second list
 * is not essential there; it must become essential again in its later blocks, and a window past the last
 * candidate must end the search cleanly. Every algorithm against the exhaustive one. */
static void test_clauses_essential_only_in_later_windows(void **state) {
    (void)state;
    isn_build_options options;
    isn_build_options_default(&options);
    options.num_fields = 2;
    snprintf(options.fields[0], sizeof options.fields[0], "title");
    snprintf(options.fields[1], sizeof options.fields[1], "body");
    options.analyzer.stem = false;
    options.analyzer.stopwords = false;
    options.positions = true;
    options.order = ISN_ORDER_INPUT;
    options.progress = false;
    isn_builder *builder = isn_builder_new(&options);
    assert_non_null(builder);
    char err[ISN_ERR_LEN] = "";
    for (uint32_t d = 0; d < 1000; d++) {
        const char *body = d < 100                 ? "aa bb zz zz zz zz zz zz zz zz zz zz"
                           : d >= 300 && d < 500 ? "bb zz zz zz zz zz zz zz zz zz zz"
                           : d == 900            ? "bb bb bb bb bb bb"
                           : d == 999            ? "yy zz zz"
                                                 : "zz zz zz";
        char id[32];
        snprintf(id, sizeof id, "doc%u", d);
        const char *fields[2] = {"", body};
        size_t lens[2] = {0, strlen(body)};
        if (isn_builder_add(builder, id, fields, lens, 0.0f, err, sizeof err) != 0) fail_msg("%s", err);
    }
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/isn-test-windows-XXXXXX");
    assert_non_null(mkdtemp(dir));
    isn_build_summary summary;
    if (isn_builder_write(builder, dir, &summary, err, sizeof err) != 0) fail_msg("%s", err);
    isn_builder_free(builder);
    isn_index *index = isn_index_open(dir, err, sizeof err);
    if (!index) fail_msg("%s", err);
    isn_searcher *searcher = isn_searcher_new(index);
    static const char *const queries[] = {"aa bb bb -yy", "body:aa body:bb body:bb", "+bb -yy", "+body:bb", "aa \"bb bb\" -yy"};
    static const uint32_t ks[] = {1, 3, 10};
    isn_hit expected[10], hits[10];
    for (size_t q = 0; q < sizeof queries / sizeof *queries; q++)
        for (size_t ki = 0; ki < 3; ki++) {
            uint32_t num_expected = 0;
            for (uint32_t a = 0; a < sizeof or_algos / sizeof *or_algos; a++) {
                isn_query query;
                if (isn_query_parse_syntax(searcher, queries[q], strlen(queries[q]), NULL, 0, &query, err, sizeof err) != 0)
                    fail_msg("'%s': %s", queries[q], err);
                isn_search_options o;
                isn_search_options_default(&o);
                o.algo = or_algos[a];
                o.k = ks[ki];
                uint32_t n = 0;
                isn_search_stats stats;
                if (isn_search(searcher, &query, &o, a == 0 ? expected : hits, a == 0 ? &num_expected : &n, &stats, err,
                               sizeof err) != 0)
                    fail_msg("'%s': %s", queries[q], err);
                if (a == 0) {
                    assert_int_equal(expected[0].doc, 900);
                    continue;
                }
                if (n != num_expected) fail_msg("'%s' k=%u %s: %u hits, exhaustive %u", queries[q], ks[ki], isn_algo_name(o.algo), n, num_expected);
                for (uint32_t i = 0; i < n; i++)
                    if (hits[i].doc != expected[i].doc || hits[i].score != expected[i].score)
                        fail_msg("'%s' k=%u %s: rank %u doc %u %.9g, exhaustive doc %u %.9g", queries[q], ks[ki],
                                 isn_algo_name(o.algo), i, hits[i].doc, hits[i].score, expected[i].doc, expected[i].score);
            }
        }
    isn_searcher_free(searcher);
    isn_index_close(index);
    support_remove_tree(dir);
}

static void test_plain_text_is_the_bag_of_words(void **state) {
    (void)state;
    support_rng_seed(99);
    collection c;
    collection_open(&c, 200);
    isn_searcher *other = isn_searcher_new(c.index);
    assert_non_null(other);
    const char *texts[] = {"w1 w2 w2 w7", "w3 (w4) w5", "\"w1\" w2", "a - b w9", "w0 zzz"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        isn_query plain, parsed;
        char err[ISN_ERR_LEN];
        assert_int_equal(isn_query_parse(other, texts[i], strlen(texts[i]), &plain, err, sizeof err), 0);
        assert_int_equal(isn_query_parse_syntax(c.searcher, texts[i], strlen(texts[i]), NULL, 0, &parsed, err,
                                                sizeof err), 0);
        assert_null(parsed.structure);
        assert_int_equal(parsed.num_terms, plain.num_terms);
        assert_int_equal(parsed.num_unknown, plain.num_unknown);
        assert_memory_equal(parsed.terms, plain.terms, plain.num_terms * sizeof *plain.terms);
    }
    /* however long: more words than a query tree may have clauses */
    static char long_text[3 * 2000 + 1];
    for (uint32_t i = 0; i < 2000; i++) memcpy(long_text + 3 * i, i % 2 ? "w1 " : "w2 ", 3);
    isn_query plain, parsed;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(other, long_text, strlen(long_text), &plain, err, sizeof err), 0);
    assert_int_equal(isn_query_parse_syntax(c.searcher, long_text, strlen(long_text), NULL, 0, &parsed, err, sizeof err), 0);
    assert_null(parsed.structure);
    assert_int_equal(parsed.num_terms, 2);
    assert_memory_equal(parsed.terms, plain.terms, 2 * sizeof *plain.terms);
    isn_searcher_free(other);
    collection_close(&c);
}

static void test_fields_and_errors_against_the_index(void **state) {
    (void)state;
    support_rng_seed(7);
    collection c;
    collection_open(&c, 50);
    isn_query query;
    char err[ISN_ERR_LEN] = "";
    /* a name the index has no field for, before a bare word, is text: the words of "w1 file:lineno" */
    const char *text = "w1 file:lineno";
    assert_int_equal(isn_query_parse_syntax(c.searcher, text, strlen(text), NULL, 0, &query, err, sizeof err), 0);
    assert_null(query.structure);
    isn_query words;
    text = "w1 file lineno";
    assert_int_equal(isn_query_parse(c.searcher, text, strlen(text), &words, err, sizeof err), 0);
    assert_int_equal(query.num_terms, words.num_terms);
    assert_int_equal(query.num_unknown, words.num_unknown);
    for (uint32_t t = 0; t < words.num_terms; t++) assert_int_equal(query.terms[t].term_id, words.terms[t].term_id);
    /* required, it is the phrase of its words, as "+real-time" is */
    text = "+w2:w3";
    assert_int_equal(isn_query_parse_syntax(c.searcher, text, strlen(text), NULL, 0, &query, err, sizeof err), 0);
    char described[256];
    isn_query_structure_describe(c.searcher, &query, described, sizeof described);
    assert_string_equal(described, "+\"w2 w3\"");
    /* a quoted value after it is field syntax: refused, naming the fields there are */
    text = "w1 file:\"w2 w3\"";
    assert_int_equal(isn_query_parse_syntax(c.searcher, text, strlen(text), NULL, 0, &query, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown field 'file' at byte 3"));
    assert_non_null(strstr(err, "title, body"));
    text = "+w1 -title:\"w2 w3\" body:w4";
    assert_int_equal(isn_query_parse_syntax(c.searcher, text, strlen(text), NULL, 0, &query, err, sizeof err), 0);
    assert_non_null(query.structure);
    isn_query_structure_describe(c.searcher, &query, described, sizeof described);
    assert_string_equal(described, "+w1 -title:\"w2 w3\" body:w4");
    /* the tree is one flat block: a copy elsewhere searches alike */
    size_t bytes = isn_query_structure_bytes(query.structure);
    void *copy = malloc(bytes);
    assert_non_null(copy);
    isn_query_structure_copy(copy, query.structure);
    isn_query moved = query;
    moved.structure = copy;
    isn_hit a[10], b[10];
    uint32_t na = 0, nb = 0;
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = 10;
    assert_int_equal(isn_search(c.searcher, &query, &options, a, &na, NULL, err, sizeof err), 0);
    assert_int_equal(isn_search(c.searcher, &moved, &options, b, &nb, NULL, err, sizeof err), 0);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(copy);
    /* a phrase longer than 64 terms is refused, naming its byte (the structure holds state per term) */
    static char long_phrase[2 + 3 * 70 + 1];
    long_phrase[0] = '"';
    for (uint32_t i = 0; i < 70; i++) memcpy(long_phrase + 1 + 3 * i, "w1 ", 3);
    long_phrase[1 + 3 * 70] = '"';
    assert_int_equal(isn_query_parse_syntax(c.searcher, long_phrase, strlen(long_phrase), NULL, 0, &query, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "the phrase at byte 0 has 70 terms"));
    /* excluded clauses alone match nothing (as in Lucene) */
    text = "-w1";
    assert_int_equal(isn_query_parse_syntax(c.searcher, text, strlen(text), NULL, 0, &query, err, sizeof err), 0);
    assert_int_equal(isn_search(c.searcher, &query, &options, a, &na, NULL, err, sizeof err), 0);
    assert_int_equal(na, 0);
    collection_close(&c);
}

/* ------------------------------------------------------------------ filters on attributes */

#define FILTER_DOCS 600
static const char *const categories[] = {"alpha", "beta", "gamma", "delta"};

/* Documents as JSON Lines with a keyword and an int attribute (some missing), built through
 * isn_build_from_file in external-id order (so that attributes must follow the documents' new ids),
 * and the oracle over the same words and values. */
typedef enum {
    RARE_NONE,
    RARE_ALPHA,           /* one alpha in ten stays, the rest become beta */
    RARE_ALPHA_AND_GAMMA, /* and one gamma in ten stays, the rest become delta */
} rare_categories;

static void filter_collection_open(collection *c, uint32_t n, rare_categories rare, const char *(*word)(void),
                                   int64_t *category, int64_t *number, const int64_t **attributes) {
    memset(c, 0, sizeof *c);
    c->num_docs = n;
    c->words = calloc(n, sizeof *c->words);
    c->lens = calloc(n, sizeof *c->lens);
    c->doc_rows = calloc(n, sizeof *c->doc_rows);
    c->len_rows = calloc(n, sizeof *c->len_rows);
    const char *const **rows = calloc(n, 2 * sizeof(const char *const *));
    assert_true(c->words && c->lens && c->doc_rows && c->len_rows && rows);
    snprintf(c->dir, sizeof c->dir, "/tmp/isn-test-query-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    char input[128], out[160];
    snprintf(input, sizeof input, "%s/docs.jsonl", c->dir);
    snprintf(out, sizeof out, "%s/index", c->dir);
    FILE *f = fopen(input, "w");
    assert_non_null(f);
    /* ids in reverse input order: the external-id order reverses the documents */
    for (uint32_t d = 0; d < n; d++) {
        uint32_t doc = n - 1 - d; /* the id the index gives it (ids sort as d%05u) */
        c->lens[doc][0] = support_rng_below(MAX_TITLE + 1);
        c->lens[doc][1] = 1 + support_rng_below(MAX_BODY);
        fprintf(f, "{\"id\": \"d%05u\"", doc);
        static const char *const keys[2] = {"title", "body"};
        for (uint32_t field = 0; field < 2; field++) {
            fprintf(f, ", \"%s\": \"", keys[field]);
            for (uint32_t i = 0; i < c->lens[doc][field]; i++) {
                c->words[doc][field][i] = word();
                fprintf(f, "%s%s", i ? " " : "", c->words[doc][field][i]);
            }
            fprintf(f, "\"");
            rows[2 * doc + field] = c->words[doc][field];
        }
        category[doc] = support_rng_below(10) == 0 ? INT64_MIN : support_rng_below(4);
        /* rare: one in ten stays, so that the category's documents are few and scattered */
        if (rare != RARE_NONE && category[doc] == 0 && support_rng_below(10) != 0) category[doc] = 1;
        if (rare == RARE_ALPHA_AND_GAMMA && category[doc] == 2 && support_rng_below(10) != 0) category[doc] = 3;
        number[doc] = support_rng_below(10) == 0 ? INT64_MIN : (int64_t)support_rng_below(100) - 20;
        if (category[doc] != INT64_MIN) fprintf(f, ", \"cat\": \"%s\"", categories[category[doc]]);
        if (number[doc] != INT64_MIN) fprintf(f, ", \"num\": %lld", (long long)number[doc]);
        fprintf(f, "}\n");
        c->doc_rows[doc] = &rows[2 * doc];
        c->len_rows[doc] = c->lens[doc];
    }
    fclose(f);
    c->word_rows = rows;
    isn_build_options options;
    isn_build_options_default(&options);
    options.analyzer.stem = false;
    options.analyzer.stopwords = false;
    options.order = ISN_ORDER_ID;
    options.progress = false;
    options.num_attributes = 2;
    options.attributes[0] = (isn_attribute_spec){.name = "cat", .kind = ISN_ATTRIBUTE_KEYWORD};
    options.attributes[1] = (isn_attribute_spec){.name = "num", .kind = ISN_ATTRIBUTE_INT};
    isn_build_summary summary;
    char err[ISN_ERR_LEN] = "";
    if (isn_build_from_file(input, out, &options, &summary, err, sizeof err) != 0) fail_msg("%s", err);
    c->index = isn_index_open(out, err, sizeof err);
    if (!c->index) fail_msg("%s", err);
    c->searcher = isn_searcher_new(c->index);
    assert_non_null(c->searcher);
    /* keyword ids are ranks in the sorted dictionary: alpha beta delta gamma */
    static const int64_t rank_of[4] = {0, 1, 3, 2};
    for (uint32_t d = 0; d < n; d++)
        if (category[d] != INT64_MIN) category[d] = rank_of[category[d]];
    attributes[0] = category;
    attributes[1] = number;
    c->oracle = (query_oracle_collection){.num_docs = n, .num_fields = 2, .words = c->doc_rows, .lens = c->len_rows,
                                          .attributes = attributes, .k1 = 1.2, .b = 0.75};
}

static void test_filters_against_the_oracle(void **state) {
    (void)state;
    static int64_t category[FILTER_DOCS], number[FILTER_DOCS];
    static const int64_t *attributes[2];
    isn_hit *hits = calloc(1000, sizeof *hits);
    oracle_hit *expected = calloc(1000, sizeof *expected);
    assert_true(hits && expected);
    uint32_t nonempty = 0, runs = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        support_rng_seed(100 + seed);
        collection c;
        filter_collection_open(&c, FILTER_DOCS, RARE_NONE, random_word, category, number, attributes);
        /* the stored values are the written ones */
        for (uint32_t d = 0; d < FILTER_DOCS; d++) {
            assert_true(isn_index_attribute_value(c.index, 0, d) == category[d]);
            assert_true(isn_index_attribute_value(c.index, 1, d) == number[d]);
        }
        for (uint32_t q = 0; q < 60; q++) {
            query_oracle_clause clauses[4];
            char text[256];
            uint32_t n = random_query(clauses, text, sizeof text);
            query_oracle_filter of[2];
            isn_filter_spec specs[2];
            const char *values[2][3];
            char numbers[2][3][24];
            uint32_t num_filters = 1 + support_rng_below(2);
            for (uint32_t f = 0; f < num_filters; f++) {
                bool keyword = support_rng_below(2) == 0;
                of[f] = (query_oracle_filter){.attribute = keyword ? 0 : 1, .negate = support_rng_below(4) == 0};
                specs[f] = (isn_filter_spec){.attribute = keyword ? "cat" : "num", .negate = of[f].negate,
                                             .values = values[f]};
                if (keyword) {
                    of[f].op = 0;
                    of[f].num_values = 1 + support_rng_below(2);
                    for (uint32_t v = 0; v < of[f].num_values; v++) {
                        uint32_t which = support_rng_below(4);
                        static const int64_t rank_of[4] = {0, 1, 3, 2};
                        of[f].values[v] = rank_of[which];
                        values[f][v] = categories[which];
                    }
                } else {
                    of[f].op = (int)support_rng_below(5);
                    of[f].num_values = 1;
                    of[f].values[0] = (int64_t)support_rng_below(100) - 20;
                    snprintf(numbers[f][0], sizeof numbers[f][0], "%lld", (long long)of[f].values[0]);
                    values[f][0] = numbers[f][0];
                }
                specs[f].op = (isn_filter_op)of[f].op;
                specs[f].num_values = of[f].num_values;
            }
            isn_query query;
            char err[ISN_ERR_LEN] = "";
            if (isn_query_parse_syntax(c.searcher, text, strlen(text), specs, num_filters, &query, err, sizeof err))
                fail_msg("'%s': %s", text, err);
            uint64_t matched;
            uint32_t k = q % 2 ? 10 : 1000;
            uint32_t num_expected = query_oracle_top_k(&c.oracle, clauses, n, of, num_filters, false, k, expected,
                                                       &matched);
            nonempty += num_expected > 0;
            for (uint32_t a = 0; a < 6; a++) {
                isn_search_options options;
                isn_search_options_default(&options);
                options.algo = or_algos[a];
                options.k = k;
                uint32_t num_hits = 0;
                isn_search_stats stats;
                assert_int_equal(isn_search(c.searcher, &query, &options, hits, &num_hits, &stats, err, sizeof err), 0);
                char what[400];
                snprintf(what, sizeof what, "seed %llu '%s' with %u filters k=%u %s", (unsigned long long)seed, text,
                         num_filters, k, isn_algo_name(or_algos[a]));
                assert_within_layout(what, &stats);
                if (num_hits != num_expected) fail_msg("%s: %u hits, the oracle %u", what, num_hits, num_expected);
                /* each document once, a filter that names a value twice included ("cat in {a, a}"): a repeat
                 * has the same score, so it is among the hits of equal score ranked just before */
                for (uint32_t i = 1; i < num_hits; i++)
                    for (uint32_t j = i; j-- > 0 && hits[j].score == hits[i].score;)
                        if (hits[j].doc == hits[i].doc) fail_msg("%s: doc %u at ranks %u and %u", what, hits[i].doc, j, i);
                for (uint32_t i = 0; i < num_hits; i++) {
                    if (!near(hits[i].score, expected[i].score))
                        fail_msg("%s: rank %u score %.9g, the oracle %.9g", what, i, hits[i].score, expected[i].score);
                    if (!query_oracle_matches(&c.oracle, clauses, n, of, num_filters, false, hits[i].doc))
                        fail_msg("%s: rank %u doc %u does not satisfy the query", what, i, hits[i].doc);
                }
                if (a == 0 && stats.matched_lower_bound != matched)
                    fail_msg("%s: matched %llu, the oracle %llu", what, (unsigned long long)stats.matched_lower_bound,
                             (unsigned long long)matched);
                runs++;
            }
        }
        collection_close(&c);
    }
    assert_true(nonempty > runs / 6 / 4);
    free(hits);
    free(expected);
}

/* A keyword filter whose documents are few and scattered leads the search over optional terms (a chunk
 * of its documents at a time, each term leapfrogging through them): every algorithm against the
 * oracle, k small enough that every skipped document could have mattered. */
#define SCATTERED_DOCS 6000
static void test_scattered_filter_leads_against_the_oracle(void **state) {
    (void)state;
    static int64_t category[SCATTERED_DOCS], number[SCATTERED_DOCS];
    static const int64_t *attributes[2];
    uint32_t nonempty = 0, runs = 0, alpha = 0;
    support_rng_seed(300);
    collection c;
    filter_collection_open(&c, SCATTERED_DOCS, RARE_ALPHA, random_word, category, number, attributes);
    for (uint32_t d = 0; d < SCATTERED_DOCS; d++) alpha += category[d] == 0;
    /* few enough to be scattered (not a run the windows would skip between), more than one chunk */
    assert_true(alpha * 8 < SCATTERED_DOCS && alpha > 128);
    for (uint32_t q = 0; q < 40; q++) {
        query_oracle_clause clauses[4];
        char text[256];
        uint32_t n = 1 + support_rng_below(4);
        size_t at = 0;
        for (uint32_t i = 0; i < n; i++) {
            clauses[i] = (query_oracle_clause){.occur = QO_SHOULD, .field = support_rng_below(4) == 0 ? 0 : -1,
                                               .num_words = 1};
            clauses[i].words[0] = random_word();
            at += (size_t)snprintf(text + at, sizeof text - at, "%s%s%s", i ? " " : "",
                                   clauses[i].field == 0 ? "title:" : "", clauses[i].words[0]);
        }
        /* the alpha filter leads; a numeric one, in half the queries, is tested per candidate */
        uint32_t num_filters = 1 + q % 2;
        query_oracle_filter of[2] = {{.attribute = 0, .op = 0, .num_values = 1, .values = {0}},
                                     {.attribute = 1, .op = ISN_FILTER_GE, .num_values = 1, .values = {30}}};
        const char *alpha_value = "alpha", *thirty = "30";
        isn_filter_spec specs[2] = {{.attribute = "cat", .op = ISN_FILTER_EQ, .values = &alpha_value, .num_values = 1},
                                    {.attribute = "num", .op = ISN_FILTER_GE, .values = &thirty, .num_values = 1}};
        char filters[40];
        snprintf(filters, sizeof filters, "cat=alpha%s", num_filters > 1 ? " num>=30" : "");
        nonempty += algos_match_oracle(&c, text, clauses, n, of, specs, num_filters, q % 3 == 0 ? 1 : q % 3 == 1 ? 5 : 20,
                                       or_algos, sizeof or_algos / sizeof *or_algos, filters, &runs);
    }
    collection_close(&c);
    assert_true(nonempty > runs / 6 / 2);
}

/* Long queries (up to 16 clauses: optional terms, excluded ones, maybe a filter that leads them) on a
 * searcher that never searched before, so that its arena is exactly the query's layout: every algorithm
 * against the oracle, and no piece taken past the layout. */
#define LONG_QUERY_CLAUSES 16
static void test_long_queries_stay_within_their_layout(void **state) {
    (void)state;
    static int64_t category[SCATTERED_DOCS], number[SCATTERED_DOCS];
    static const int64_t *attributes[2];
    uint32_t nonempty = 0, runs = 0;
    support_rng_seed(400);
    collection c;
    filter_collection_open(&c, SCATTERED_DOCS, RARE_ALPHA, random_word, category, number, attributes);
    isn_searcher *reused = c.searcher;
    for (uint32_t q = 0; q < 24; q++) {
        query_oracle_clause clauses[LONG_QUERY_CLAUSES];
        char text[LONG_QUERY_CLAUSES * 16];
        uint32_t n = 5 + support_rng_below(LONG_QUERY_CLAUSES - 4);
        size_t at = 0;
        for (uint32_t i = 0; i < n; i++) {
            clauses[i] = (query_oracle_clause){.occur = i > 0 && support_rng_below(5) == 0 ? QO_MUST_NOT : QO_SHOULD,
                                               .field = -1, .num_words = 1};
            clauses[i].words[0] = random_word();
            at += (size_t)snprintf(text + at, sizeof text - at, "%s%s%s", i ? " " : "",
                                   clauses[i].occur == QO_MUST_NOT ? "-" : "", clauses[i].words[0]);
        }
        uint32_t num_filters = q % 2; /* alpha's documents lead the optional terms */
        query_oracle_filter of = {.attribute = 0, .op = 0, .num_values = 1, .values = {0}};
        const char *alpha_value = "alpha";
        isn_filter_spec spec = {.attribute = "cat", .op = ISN_FILTER_EQ, .values = &alpha_value, .num_values = 1};
        c.searcher = isn_searcher_new(c.index);
        assert_non_null(c.searcher);
        nonempty += algos_match_oracle(&c, text, clauses, n, &of, &spec, num_filters, q % 3 == 0 ? 1 : 10, or_algos,
                                       sizeof or_algos / sizeof *or_algos, num_filters ? "cat=alpha" : "", &runs);
        isn_searcher_free(c.searcher);
    }
    c.searcher = reused;
    collection_close(&c);
    assert_true(nonempty > runs / 6 / 2);
}

/* Words of a wider vocabulary, of Zipfian frequency: a few in most documents, most in few. */
#define WIDE_VOCABULARY 400
static char wide_words[WIDE_VOCABULARY][8];
static uint32_t wide_cumulative[WIDE_VOCABULARY];

static const char *wide_word(void) {
    if (!wide_cumulative[0])
        for (uint32_t r = 0; r < WIDE_VOCABULARY; r++) {
            snprintf(wide_words[r], sizeof wide_words[r], "z%u", r);
            wide_cumulative[r] = (r ? wide_cumulative[r - 1] : 0) + 1000000 / (r + 1);
        }
    uint32_t x = support_rng_below(wide_cumulative[WIDE_VOCABULARY - 1]), r = 0;
    while (wide_cumulative[r] <= x) r++;
    return wide_words[r];
}

/* A scattered filter's documents seed block-max MaxScore's windows when its terms hold few postings
 * in its span: over several inner and outer windows, with terms frequent and rare, one filter value or
 * two (their lists walked side by side), other filters and excluded terms tested per candidate. Every
 * algorithm against the oracle, k small enough that a filter document the seeds missed, or a document
 * outside the filter they let in, changes the hits. */
#define SEEDED_DOCS 30000
static void test_filter_seeding_windows_against_the_oracle(void **state) {
    (void)state;
    static int64_t category[SEEDED_DOCS], number[SEEDED_DOCS];
    static const int64_t *attributes[2];
    uint32_t nonempty = 0, runs = 0;
    support_rng_seed(400);
    collection c;
    filter_collection_open(&c, SEEDED_DOCS, RARE_ALPHA_AND_GAMMA, wide_word, category, number, attributes);
    static const int64_t alpha = 0, gamma = 3; /* ranks in the sorted dictionary: alpha beta delta gamma */
    uint32_t alphas = 0;
    for (uint32_t d = 0; d < SEEDED_DOCS; d++) alphas += category[d] == alpha;
    assert_true(alphas * 8 < SEEDED_DOCS && alphas > 2 * 128);
    for (uint32_t q = 0; q < 60; q++) {
        query_oracle_clause clauses[5];
        char text[256];
        uint32_t n = 1 + support_rng_below(4);
        size_t at = 0;
        for (uint32_t i = 0; i < n; i++) {
            clauses[i] = (query_oracle_clause){.occur = QO_SHOULD, .field = support_rng_below(5) == 0 ? 0 : -1,
                                               .num_words = 1};
            /* rare words mostly (the filter's documents then outnumber their postings), now and then a
             * frequent one */
            do clauses[i].words[0] = wide_word();
            while (support_rng_below(4) != 0 && atoi(clauses[i].words[0] + 1) < 20);
            at += (size_t)snprintf(text + at, sizeof text - at, "%s%s%s", i ? " " : "",
                                   clauses[i].field == 0 ? "title:" : "", clauses[i].words[0]);
        }
        if (q % 5 == 4) { /* an excluded frequent word */
            clauses[n] = (query_oracle_clause){.occur = QO_MUST_NOT, .field = -1, .num_words = 1};
            clauses[n].words[0] = wide_words[support_rng_below(5)];
            at += (size_t)snprintf(text + at, sizeof text - at, " -%s", clauses[n++].words[0]);
        }
        bool two_values = q % 2 == 1;
        uint32_t num_filters = 1 + (q % 3 == 2);
        query_oracle_filter of[2] = {{.attribute = 0, .op = 0, .num_values = two_values ? 2 : 1, .values = {alpha, gamma}},
                                     {.attribute = 1, .op = ISN_FILTER_GE, .num_values = 1, .values = {30}}};
        const char *values[2] = {"alpha", "gamma"}, *thirty = "30";
        isn_filter_spec specs[2] = {
            {.attribute = "cat", .op = ISN_FILTER_EQ, .values = values, .num_values = two_values ? 2 : 1},
            {.attribute = "num", .op = ISN_FILTER_GE, .values = &thirty, .num_values = 1}};
        char filters[40];
        snprintf(filters, sizeof filters, "cat in {alpha%s}%s", two_values ? ", gamma" : "", num_filters > 1 ? " num>=30" : "");
        nonempty += algos_match_oracle(&c, text, clauses, n, of, specs, num_filters, q % 3 == 0 ? 1 : q % 3 == 1 ? 5 : 20,
                                       or_algos, sizeof or_algos / sizeof *or_algos, filters, &runs);
    }
    collection_close(&c);
    assert_true(nonempty > runs / 6 / 2);
}

static void test_filter_errors(void **state) {
    (void)state;
    static int64_t category[FILTER_DOCS], number[FILTER_DOCS];
    static const int64_t *attributes[2];
    support_rng_seed(5);
    collection c;
    filter_collection_open(&c, FILTER_DOCS, RARE_NONE, random_word, category, number, attributes);
    const char *one[] = {"x"};
    struct {
        isn_filter_spec spec;
        const char *needle;
    } cases[] = {
        {{.attribute = "lang", .op = ISN_FILTER_EQ, .values = one, .num_values = 1}, "this index has the attributes cat, num"},
        {{.attribute = "num", .op = ISN_FILTER_GE, .values = one, .num_values = 1}, "'x' is not an integer"},
        {{.attribute = "cat", .op = ISN_FILTER_LT, .values = one, .num_values = 1}, "keyword attribute"},
        {{.attribute = "num", .op = ISN_FILTER_GE, .values = one, .num_values = 0}, "takes one value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        isn_query query;
        char err[ISN_ERR_LEN] = "";
        assert_int_equal(isn_query_parse_syntax(c.searcher, "w1", 2, &cases[i].spec, 1, &query, err, sizeof err), -1);
        if (!strstr(err, cases[i].needle)) fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].needle);
    }
    collection_close(&c);
}

/* A damaged attributes file is refused at open, naming the file; the index without it still opens. */
static void test_damaged_attributes_are_refused(void **state) {
    (void)state;
    static int64_t category[FILTER_DOCS], number[FILTER_DOCS];
    static const int64_t *attributes[2];
    support_rng_seed(9);
    collection c;
    filter_collection_open(&c, FILTER_DOCS, RARE_NONE, random_word, category, number, attributes);
    char index_dir[160], path[200];
    snprintf(index_dir, sizeof index_dir, "%s/index", c.dir);
    snprintf(path, sizeof path, "%s/" ISN_ATTRIBUTES_FILE, index_dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    for (int damage = 0; damage < 3; damage++) {
        char err[ISN_ERR_LEN] = "";
        if (damage == 0) { /* one byte flipped past the header */
            fseek(f, size / 2, SEEK_SET);
            int byte = fgetc(f);
            fseek(f, size / 2, SEEK_SET);
            fputc(byte ^ 0x40, f);
        } else if (damage == 1) { /* cut short */
            fflush(f);
            assert_int_equal(truncate(path, size - 9), 0);
        } else { /* only the header */
            fflush(f);
            assert_int_equal(truncate(path, 16), 0);
        }
        fflush(f);
        isn_index *opened = isn_index_open(index_dir, err, sizeof err);
        if (opened) fail_msg("damage %d: a damaged attributes file was accepted", damage);
        if (!strstr(err, ISN_ATTRIBUTES_FILE)) fail_msg("damage %d: '%s' does not name the file", damage, err);
    }
    fclose(f);
    assert_int_equal(unlink(path), 0);
    char err[ISN_ERR_LEN];
    isn_index *plain = isn_index_open(index_dir, err, sizeof err);
    assert_non_null(plain);
    assert_int_equal(isn_index_num_attributes(plain), 0);
    isn_index_close(plain);
    collection_close(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_operators),
        cmocka_unit_test(test_split_errors_name_the_byte),
        cmocka_unit_test(test_plain_text_is_the_bag_of_words),
        cmocka_unit_test(test_fields_and_errors_against_the_index),
        cmocka_unit_test(test_every_algorithm_against_the_oracle),
        cmocka_unit_test(test_clauses_essential_only_in_later_windows),
        cmocka_unit_test(test_optional_phrases_against_the_oracle),
        cmocka_unit_test(test_phrases_do_not_wait_for_the_per_field_data),
        cmocka_unit_test(test_filters_against_the_oracle),
        cmocka_unit_test(test_scattered_filter_leads_against_the_oracle),
        cmocka_unit_test(test_long_queries_stay_within_their_layout),
        cmocka_unit_test(test_filter_seeding_windows_against_the_oracle),
        cmocka_unit_test(test_filter_errors),
        cmocka_unit_test(test_damaged_attributes_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
