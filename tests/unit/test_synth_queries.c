/* isn-index synth's query log fitted to a real one (--fit-queries): drawn by df fraction, or transplanted
 * (--transplant-queries), where each distinct real term keeps a synthetic term of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "tests/support/files.h"

static char tmp_root[] = "/tmp/isn-test-synth-queries-XXXXXX";
static char fitted[300], log_path[300];

/* "apple" and "pear" are in the same 40 documents, "plum" and "fig" in the same 400 others: two pairs of terms
 * with one df each, which a log drawn by df fraction cannot tell apart. */
static int setup(void **state) {
    (void)state;
    if (!mkdtemp(tmp_root)) return -1;
    snprintf(fitted, sizeof fitted, "%s/fitted", tmp_root);
    snprintf(log_path, sizeof log_path, "%s/log.tsv", tmp_root);
    isn_build_options o;
    isn_build_options_default(&o);
    o.num_fields = 1;
    o.analyzer.stem = false;
    o.analyzer.stopwords = false;
    isn_builder *b = isn_builder_new(&o);
    if (!b) return -1;
    char err[ISN_ERR_LEN], id[32], body[64];
    for (int d = 0; d < 2000; d++) {
        snprintf(id, sizeof id, "d%d", d);
        snprintf(body, sizeof body, "filler%d %s %s", d % 50, d < 40 ? "apple pear" : "",
                 d >= 40 && d < 440 ? "plum fig" : "");
        const char *fields[1] = {body};
        size_t lens[1] = {strlen(body)};
        if (isn_builder_add(b, id, fields, lens, 0.0f, err, sizeof err) != 0) return -1;
    }
    isn_build_summary s;
    if (isn_builder_write(b, fitted, &s, err, sizeof err) != 0) return -1;
    isn_builder_free(b);
    FILE *f = fopen(log_path, "w");
    if (!f) return -1;
    fputs("1\tapple plum\n2\tpear fig\n3\tapple fig\n4\tunknownword\n5\tpear\n", f);
    return fclose(f);
}

static int teardown(void **state) {
    (void)state;
    return support_remove_tree(tmp_root);
}

/* The log's queries, one term list per line: lines[q][i]. Returns the number of lines. */
static int read_log(const char *path, char lines[][4][16]) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < 64) {
        memset(lines[n], 0, sizeof lines[n]);
        char *text = strchr(line, '\t');
        assert_non_null(text);
        int t = 0;
        for (char *tok = strtok(text + 1, " \n"); tok && t < 4; tok = strtok(NULL, " \n"))
            snprintf(lines[n][t++], sizeof lines[n][0], "%s", tok);
        n++;
    }
    fclose(f);
    return n;
}

/* Fitted to the small index and its log (log: NULL for none). */
static isn_synth_options fitted_options(uint32_t docs, const char *log, bool transplant, uint32_t queries) {
    isn_synth_options o;
    isn_synth_options_default(&o);
    o.docs = docs;
    o.threads = 1;
    o.fit_index = fitted;
    o.fit_queries = log;
    o.transplant_queries = transplant;
    o.queries = queries;
    return o;
}

static void synth_with_log(const char *out, bool transplant, uint32_t queries) {
    const isn_synth_options o = fitted_options(20000, log_path, transplant, queries);
    char err[ISN_ERR_LEN];
    if (isn_synth_build(out, &o, NULL, err, sizeof err) != 0) fail_msg("synth: %s", err);
}

/* Transplanted: the log's own queries in order (the one with no term of the fitted index left out), apple and
 * pear two synthetic terms though their df is the same, and every query naming apple naming the same one. */
static void test_transplant_keeps_the_terms_apart(void **state) {
    (void)state;
    char dir[320], path[340];
    snprintf(dir, sizeof dir, "%s/transplanted", tmp_root);
    synth_with_log(dir, true, 100);
    snprintf(path, sizeof path, "%s/queries.tsv", dir);
    char q[64][4][16];
    assert_int_equal(read_log(path, q), 4);
    const char *apple = q[0][0], *plum = q[0][1], *pear = q[1][0], *fig = q[1][1];
    assert_string_not_equal(apple, pear);
    assert_string_not_equal(plum, fig);
    assert_string_not_equal(apple, plum);
    assert_string_equal(q[2][0], apple);
    assert_string_equal(q[2][1], fig);
    assert_string_equal(q[3][0], pear);
    assert_string_equal(q[3][1], "");
    /* --queries caps the log */
    snprintf(dir, sizeof dir, "%s/transplanted-2", tmp_root);
    synth_with_log(dir, true, 2);
    snprintf(path, sizeof path, "%s/queries.tsv", dir);
    assert_int_equal(read_log(path, q), 2);
}

/* The distinct terms a log names. */
static int distinct_terms(char lines[][4][16], int n) {
    char seen[16][16];
    int count = 0;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < 4 && lines[i][t][0]; t++) {
            int j = 0;
            while (j < count && strcmp(seen[j], lines[i][t])) j++;
            if (j == count && count < 16) snprintf(seen[count++], sizeof seen[0], "%s", lines[i][t]);
        }
    return count;
}

/* Drawn by df fraction (the default), the four terms of two dfs become at most two synthetic terms, so a cache
 * trained on part of the log finds every term of the rest: what --transplant-queries is for. Transplanted, four. */
static void test_drawn_log_merges_terms_of_one_df(void **state) {
    (void)state;
    char dir[320], path[340];
    char q[64][4][16];
    snprintf(dir, sizeof dir, "%s/drawn", tmp_root);
    synth_with_log(dir, false, 40);
    snprintf(path, sizeof path, "%s/queries.tsv", dir);
    const int n = read_log(path, q);
    assert_int_equal(n, 40);
    assert_in_range(distinct_terms(q, n), 1, 2);
    snprintf(dir, sizeof dir, "%s/transplanted-all", tmp_root);
    synth_with_log(dir, true, 40);
    snprintf(path, sizeof path, "%s/queries.tsv", dir);
    assert_int_equal(distinct_terms(q, read_log(path, q)), 4);
}

static void test_transplant_needs_a_log(void **state) {
    (void)state;
    char dir[320], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/no-log", tmp_root);
    const isn_synth_options o = fitted_options(1000, NULL, true, 10);
    assert_int_equal(isn_synth_build(dir, &o, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "--transplant-queries needs --fit-queries"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transplant_keeps_the_terms_apart),
        cmocka_unit_test(test_drawn_log_merges_terms_of_one_df),
        cmocka_unit_test(test_transplant_needs_a_log),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
