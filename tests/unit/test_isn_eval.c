/* isn-eval, run as a program: every expected value below is worked out by hand in the comment
 * beside it (rank r discounts by 1/log2(r+1); AP divides by all relevant docs in the qrels).
 * The binary is found through $ISN_BIN_DIR, else ../bin next to this test program.
 * The same definitions were cross-checked against pytrec_eval (trec_eval 9) on random data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <libgen.h>
#include <limits.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/files.h"

#define TOLERANCE 1e-4

static char eval_binary[PATH_MAX];
static char temp_dir[] = "/tmp/isn-eval-test-XXXXXX";

struct eval_result {
    int exit_code;
    char *out;
    char *err;
};

static char *read_whole_file(FILE *stream) {
    size_t size = 0, capacity = 4096;
    char *text = malloc(capacity);
    assert_non_null(text);
    size_t got;
    while ((got = fread(text + size, 1, capacity - size - 1, stream)) > 0) {
        size += got;
        if (capacity - size - 1 == 0) {
            capacity *= 2;
            text = realloc(text, capacity);
            assert_non_null(text);
        }
    }
    text[size] = '\0';
    return text;
}

static void temp_path(char *path, size_t size, const char *name) {
    int written = snprintf(path, size, "%s/%s", temp_dir, name);
    assert_true(written > 0 && (size_t)written < size);
}

static void write_fixture(const char *name, const char *content) {
    char path[PATH_MAX];
    temp_path(path, sizeof path, name);
    FILE *file = fopen(path, "w");
    assert_non_null(file);
    assert_int_equal(fputs(content, file) >= 0, 1);
    assert_int_equal(fclose(file), 0);
}

/* Runs isn-eval with `options` on two files of the temp dir (a name starting with '/' is used
 * as is), capturing stdout, stderr and the exit code. */
static struct eval_result run_eval(const char *options, const char *qrels_name, const char *run_name) {
    char qrels[PATH_MAX], run[PATH_MAX], err[PATH_MAX], command[5 * PATH_MAX + 64];
    if (qrels_name[0] == '/') snprintf(qrels, sizeof qrels, "%s", qrels_name);
    else temp_path(qrels, sizeof qrels, qrels_name);
    if (run_name[0] == '/') snprintf(run, sizeof run, "%s", run_name);
    else temp_path(run, sizeof run, run_name);
    temp_path(err, sizeof err, "stderr.txt");
    /* Paths here hold no single quote: the temp dir is ours and the binary path is checked. */
    int length = snprintf(command, sizeof command, "'%s' %s '%s' '%s' 2>'%s'", eval_binary, options, qrels,
                          run, err);
    assert_true(length > 0 && (size_t)length < sizeof command);
    FILE *stream = popen(command, "r");
    assert_non_null(stream);
    struct eval_result result = {.out = read_whole_file(stream)};
    int status = pclose(stream);
    assert_true(WIFEXITED(status));
    result.exit_code = WEXITSTATUS(status);
    FILE *err_file = fopen(err, "r");
    assert_non_null(err_file);
    result.err = read_whole_file(err_file);
    fclose(err_file);
    return result;
}

static void free_result(struct eval_result *result) {
    free(result->out);
    free(result->err);
}

/* Value of "measure<TAB>qid<TAB>value" in text output; fails the test when absent. */
static double text_value(const char *out, const char *measure, const char *qid) {
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s\t%s\t", measure, qid);
    for (const char *line = out; line != NULL && *line != '\0';) {
        if (strncmp(line, prefix, strlen(prefix)) == 0) return strtod(line + strlen(prefix), NULL);
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    fail_msg("no line '%s<value>' in output:\n%s", prefix, out);
    return NAN;
}

static double json_measure(const json_t *object, const char *name) {
    const json_t *value = json_object_get(object, name);
    if (value == NULL || !json_is_number(value)) fail_msg("JSON has no number '%s'", name);
    return json_number_value(value);
}

static json_t *parse_json(const char *text) {
    json_error_t error;
    json_t *root = json_loads(text, 0, &error);
    if (root == NULL) fail_msg("output is not JSON (%s):\n%s", error.text, text);
    return root;
}

/* ---------------- fixtures ---------------- */

/* q1: relevant d1, d3, d7 (d7 never retrieved); d2 judged non-relevant.
 * q2: graded, a=3 b=2 c=0. q3: judged, nothing relevant (x=0, y=-1). q4: judged, no run lines.
 * q9 appears only in the run. Lines are shuffled on purpose: grouping must not rely on order. */
static const char main_qrels[] =
    "q1 0 d1 1\n"
    "q2 0 a 3\n"
    "q1 0 d2 0\n"
    "q3 0 x 0\n"
    "\n"
    "q1 0 d3 1\n"
    "q2 0 b 2\n"
    "q3 0 y -1\n"
    "q4 0 z 1\n"
    "q2 0 c 0\n"
    "q1 0 d7 1\n";

/* q1 ranks d1 d2 d3 d4; q2 ranks c b a (the rank column says otherwise and is ignored). */
static const char main_run[] =
    "q2 Q0 a 1 3.0 tag\n"
    "q1 Q0 d1 1 9.0 tag\n"
    "q1 Q0 d2 2 8.0 tag\n"
    "q9 Q0 d1 1 5.0 tag\n"
    "q2 Q0 b 2 4.0 tag\n"
    "q1 Q0 d4 4 6.0 tag\n"
    "q3 Q0 x 1 1.0 tag\n"
    "q1 Q0 d3 3 7.0 tag\n"
    "q2 Q0 c 3 5.0 tag\n"
    "q3 Q0 y 2 0.5 tag\n"
    "q9\tQ0\td3\t2\t4.0\ttag\r\n";

/* q1: relevant at ranks 1 and 3 of 3 relevant.
 *   AP = (1/1 + 2/3) / 3 = 5/9;  RR@10 = 1;  P@10 = 2/10;  recall@100 = 2/3
 *   DCG = 1/log2(2) + 1/log2(4) = 1.5;  IDCG = 1 + 1/log2(3) + 1/log2(4) = 2.1309
 *   nDCG@10 = 1.5 / 2.1309 = 0.7039 */
#define Q1_MAP (5.0 / 9.0)
#define Q1_RR 1.0
#define Q1_P10 0.2
#define Q1_RECALL (2.0 / 3.0)
#define Q1_NDCG (1.5 / (1.0 + 1.0 / log2(3.0) + 0.5))
/* q2: ranking c(0) b(2) a(3); relevant b at rank 2, a at rank 3, 2 relevant.
 *   AP = (1/2 + 2/3) / 2 = 7/12;  RR@10 = 1/2;  P@10 = 2/10;  recall@100 = 1
 *   DCG = 0 + 2/log2(3) + 3/log2(4) = 2.7619;  IDCG = 3/log2(2) + 2/log2(3) = 4.2619
 *   nDCG@10 = 0.6480 (graded: binary gains would give a different value, 0.6934) */
#define Q2_MAP (7.0 / 12.0)
#define Q2_RR 0.5
#define Q2_P10 0.2
#define Q2_RECALL 1.0
#define Q2_NDCG ((2.0 / log2(3.0) + 1.5) / (3.0 + 2.0 / log2(3.0)))
/* q3: no relevant doc; evaluated like trec_eval does, every measure 0, and counted in num_q.
 * Means over q1, q2, q3 (3 queries): */
#define MEAN_OF_3(a, b) (((a) + (b) + 0.0) / 3.0)

static void assert_near(double actual, double expected, const char *what) {
    if (fabs(actual - expected) > TOLERANCE)
        fail_msg("%s: got %.6f, expected %.6f", what, actual, expected);
}

/* isn-eval over the main fixture; it must succeed. */
static struct eval_result run_on_main(const char *options) {
    write_fixture("main.qrels", main_qrels);
    write_fixture("main.run", main_run);
    struct eval_result result = run_eval(options, "main.qrels", "main.run");
    assert_int_equal(result.exit_code, 0);
    return result;
}

/* The main fixture's averages (q4 has no results, so three queries count), read from the text
 * output (trec_eval's names) or else from the JSON one. */
static void check_main_averages(const char *text, const json_t *json) {
    const struct {
        const char *text_name, *json_name;
        double expected;
    } averages[] = {
        {"num_q", "queries", 3},
        {"num_q_without_results", "queries_without_results", 1},
        {"map", "map", MEAN_OF_3(Q1_MAP, Q2_MAP)},
        {"recip_rank_cut_10", "recip_rank_cut_10", MEAN_OF_3(Q1_RR, Q2_RR)},
        {"P_10", "P_10", MEAN_OF_3(Q1_P10, Q2_P10)},
        {"recall_100", "recall_100", MEAN_OF_3(Q1_RECALL, Q2_RECALL)},
        {"ndcg_cut_10", "ndcg_cut_10", MEAN_OF_3(Q1_NDCG, Q2_NDCG)},
    };
    for (size_t i = 0; i < sizeof averages / sizeof averages[0]; i++) {
        double actual = text ? text_value(text, averages[i].text_name, "all") : json_measure(json, averages[i].json_name);
        assert_near(actual, averages[i].expected, averages[i].text_name);
    }
}

static void test_text_output_means(void **state) {
    (void)state;
    struct eval_result result = run_on_main("");
    check_main_averages(result.out, NULL);
    /* Four decimals, trec_eval's format: 5/9 + 7/12 + 0 over 3 = 0.37962... */
    assert_non_null(strstr(result.out, "map\tall\t0.3796\n"));
    assert_null(strstr(result.out, "\tq1\t"));
    free_result(&result);
}

static void test_per_query_text(void **state) {
    (void)state;
    struct eval_result result = run_on_main("--per-query");
    assert_near(text_value(result.out, "map", "q1"), Q1_MAP, "q1 map");
    assert_near(text_value(result.out, "ndcg_cut_10", "q2"), Q2_NDCG, "q2 graded ndcg");
    assert_near(text_value(result.out, "recip_rank_cut_10", "q2"), Q2_RR, "q2 rr");
    assert_near(text_value(result.out, "recall_100", "q1"), Q1_RECALL, "q1 recall");
    assert_near(text_value(result.out, "map", "q3"), 0.0, "q3 map");
    assert_near(text_value(result.out, "ndcg_cut_10", "q3"), 0.0, "q3 ndcg, ideal DCG 0");
    /* Queries outside the intersection get no line. */
    assert_null(strstr(result.out, "\tq9\t"));
    assert_null(strstr(result.out, "\tq4\t"));
    /* Per-query lines come in qid order, before the 'all' lines. */
    const char *q1 = strstr(result.out, "map\tq1\t"), *q2 = strstr(result.out, "map\tq2\t");
    const char *all = strstr(result.out, "\tall\t");
    assert_true(q1 != NULL && q2 != NULL && all != NULL && q1 < q2 && q2 < all);
    free_result(&result);
}

static void test_json_output(void **state) {
    (void)state;
    struct eval_result result = run_on_main("--json --per-query");
    json_t *root = parse_json(result.out);
    check_main_averages(NULL, root);
    const json_t *per_query = json_object_get(root, "per_query");
    assert_non_null(per_query);
    assert_int_equal(json_object_size(per_query), 3);
    assert_near(json_measure(json_object_get(per_query, "q2"), "map"), Q2_MAP, "q2 map");
    assert_near(json_measure(json_object_get(per_query, "q3"), "P_10"), 0.0, "q3 P_10");
    assert_null(json_object_get(per_query, "q9"));
    json_decref(root);

    struct eval_result plain = run_on_main("--json");
    root = parse_json(plain.out);
    assert_null(json_object_get(root, "per_query"));
    json_decref(root);
    free_result(&plain);
    free_result(&result);
}

/* t1: a, b, c all score 2.5 with rank column 1 2 3; trec_eval orders ties by docid decreasing:
 *   c, b, a. Only a is relevant, so it sits at rank 3: RR = 1/3, AP = 1/3,
 *   nDCG = (1/log2(4)) / 1 = 0.5. (Rank-column order or increasing docids would give 1.)
 * t2: d9 and d10 tie; strcmp puts "d9" above "d10", so d9 comes first and the relevant d10
 *   is at rank 2: RR = 1/2, nDCG = 1/log2(3) = 0.6309.
 * t3: 1.00000001 and 1.0 are one value as C floats, which is how trec_eval stores scores:
 *   they tie, b (docid above a) goes first and the relevant a is at rank 2: RR = 1/2.
 * Mean RR = (1/3 + 1/2 + 1/2) / 3 = 4/9. */
static void test_ties_broken_by_docid_decreasing(void **state) {
    (void)state;
    write_fixture("ties.qrels", "t1 0 a 1\nt1 0 b 0\nt2 0 d10 1\nt3 0 a 1\n");
    write_fixture("ties.run",
                  "t1 Q0 a 1 2.5 tag\nt1 Q0 b 2 2.5 tag\nt1 Q0 c 3 2.5 tag\n"
                  "t2 Q0 d10 1 7 tag\nt2 Q0 d9 2 7 tag\n"
                  "t3 Q0 a 1 1.00000001 tag\nt3 Q0 b 2 1.0 tag\n");
    struct eval_result result = run_eval("--per-query", "ties.qrels", "ties.run");
    assert_int_equal(result.exit_code, 0);
    assert_near(text_value(result.out, "recip_rank_cut_10", "t1"), 1.0 / 3.0, "t1 rr");
    assert_near(text_value(result.out, "map", "t1"), 1.0 / 3.0, "t1 map");
    assert_near(text_value(result.out, "ndcg_cut_10", "t1"), 0.5, "t1 ndcg");
    assert_near(text_value(result.out, "recip_rank_cut_10", "t2"), 0.5, "t2 rr");
    assert_near(text_value(result.out, "ndcg_cut_10", "t2"), 1.0 / log2(3.0), "t2 ndcg");
    assert_near(text_value(result.out, "recip_rank_cut_10", "t3"), 0.5, "t3 float tie");
    assert_near(text_value(result.out, "recip_rank_cut_10", "all"), 4.0 / 9.0, "mean rr");
    free_result(&result);
}

/* One query, 150 docs n000..n149 at ranks 1..150 (descending scores); relevant: n049 (rank 50),
 * n119 (rank 120) and never-retrieved "gone", so 3 relevant.
 *   recall@100 = 1/3 (rank 120 is past the cut); AP = (1/50 + 2/120) / 3 = 0.012222 (no depth
 *   cut, as trec_eval's default); RR@10 = 0, P@10 = 0, nDCG@10 = 0 (nothing in the top 10).
 * Also a long-id query: a 100000-character qid and docid on one line, relevant at rank 1. */
static void test_depth_cutoffs_and_long_lines(void **state) {
    (void)state;
    const size_t long_length = 100000;
    char *long_id = malloc(long_length + 1);
    assert_non_null(long_id);
    memset(long_id, 'k', long_length);
    long_id[long_length] = '\0';

    size_t capacity = 3 * long_length + 16384;
    char *qrels = malloc(capacity), *run = malloc(capacity);
    assert_non_null(qrels);
    assert_non_null(run);
    int used = snprintf(qrels, capacity, "deep 0 n049 1\ndeep 0 n119 2\ndeep 0 gone 1\n%s 0 %s 1\n",
                        long_id, long_id);
    assert_true(used > 0);
    size_t run_used = 0;
    for (int i = 0; i < 150; i++)
        run_used += (size_t)snprintf(run + run_used, capacity - run_used,
                                     "deep Q0 n%03d %d %d.5 tag\n", i, i + 1, 1000 - i);
    snprintf(run + run_used, capacity - run_used, "%s Q0 %s 1 1 tag\n", long_id, long_id);
    write_fixture("deep.qrels", qrels);
    write_fixture("deep.run", run);

    struct eval_result result = run_eval("--json --per-query", "deep.qrels", "deep.run");
    assert_int_equal(result.exit_code, 0);
    json_t *root = parse_json(result.out);
    const json_t *deep = json_object_get(json_object_get(root, "per_query"), "deep");
    assert_non_null(deep);
    assert_near(json_measure(deep, "recall_100"), 1.0 / 3.0, "deep recall_100");
    assert_near(json_measure(deep, "map"), (1.0 / 50.0 + 2.0 / 120.0) / 3.0, "deep map");
    assert_near(json_measure(deep, "recip_rank_cut_10"), 0.0, "deep rr@10");
    assert_near(json_measure(deep, "P_10"), 0.0, "deep P_10");
    assert_near(json_measure(deep, "ndcg_cut_10"), 0.0, "deep ndcg");
    const json_t *long_query = json_object_get(json_object_get(root, "per_query"), long_id);
    assert_non_null(long_query);
    assert_near(json_measure(long_query, "map"), 1.0, "long-id map");
    json_decref(root);
    free_result(&result);
    free(qrels);
    free(run);
    free(long_id);
}

/* A negative judgement gives no gain (and no ideal gain): g1 judges a=-2, b=2; the run ranks a, b.
 *   DCG = 0 + 2/log2(3) = 1.2619;  IDCG = 2/log2(2) = 2;  nDCG = 1/log2(3) = 0.6309
 *   (counting -2 as a gain would make DCG negative). AP = (1/2) / 1 = 0.5. */
static void test_negative_judgement_gives_no_gain(void **state) {
    (void)state;
    write_fixture("neg.qrels", "g1 0 a -2\ng1 0 b 2\n");
    write_fixture("neg.run", "g1 Q0 a 1 5 tag\ng1 Q0 b 2 4 tag\n");
    struct eval_result result = run_eval("", "neg.qrels", "neg.run");
    assert_int_equal(result.exit_code, 0);
    assert_near(text_value(result.out, "ndcg_cut_10", "all"), 1.0 / log2(3.0), "ndcg with negative rel");
    assert_near(text_value(result.out, "map", "all"), 0.5, "map, one relevant at rank 2");
    free_result(&result);
}

/* Value of "key=NUMBER" on the "compare<TAB>measure<TAB>" line; fails the test when absent. */
static double compare_value(const char *out, const char *measure, const char *key) {
    char prefix[128], needle[64];
    snprintf(prefix, sizeof prefix, "compare\t%s\t", measure);
    const char *line = strstr(out, prefix);
    if (line == NULL) fail_msg("no line '%s' in:\n%s", prefix, out);
    snprintf(needle, sizeof needle, " %s=", key);
    const char *end = strchr(line, '\n');
    const char *at = strstr(line, needle);
    if (at == NULL || (end != NULL && at > end)) fail_msg("no %s on the %s line:\n%s", key, measure, out);
    return strtod(at + strlen(needle), NULL);
}

/* --compare: three queries, one relevant document each, which the baseline ranks 2nd, 3rd and 4th and
 * the run 1st. Reciprocal ranks differ by 1/2, 2/3, 3/4: mean 0.63889, sd 0.127295, t = 8.6931 with
 * 2 degrees of freedom, whose two-sided p is 1 - t / sqrt(t^2 + 2) = 0.012983. Of the 8 ways to swap
 * pairs only "none" and "all" reach |sum| = 1.9167: the exact randomization p is 0.25. Then 20
 * queries, ten improved and ten worsened alike: no difference, both p values 1 (0.99 and more for the
 * sampled randomization test). */
static void test_paired_comparison(void **state) {
    (void)state;
    write_fixture("cmp.qrels", "q1 0 r 1\nq2 0 r 1\nq3 0 r 1\n");
    write_fixture("cmp-base.run", "q1 Q0 x 1 9 b\nq1 Q0 r 2 8 b\n"
                                  "q2 Q0 x 1 9 b\nq2 Q0 y 2 8 b\nq2 Q0 r 3 7 b\n"
                                  "q3 Q0 x 1 9 b\nq3 Q0 y 2 8 b\nq3 Q0 z 3 7 b\nq3 Q0 r 4 6 b\n");
    write_fixture("cmp.run", "q1 Q0 r 1 9 l\nq1 Q0 x 2 8 l\nq2 Q0 r 1 9 l\nq3 Q0 r 1 9 l\n");
    char options[PATH_MAX + 32];
    temp_path(options, sizeof options, "cmp-base.run");
    char compare[PATH_MAX + 128];
    snprintf(compare, sizeof compare, "--compare '%s'", options);
    struct eval_result result = run_eval(compare, "cmp.qrels", "cmp.run");
    assert_int_equal(result.exit_code, 0);
    assert_near(compare_value(result.out, "recip_rank_cut_10", "diff"), 0.63889, "mean difference");
    assert_near(compare_value(result.out, "recip_rank_cut_10", "t"), 8.6931, "t");
    assert_near(compare_value(result.out, "recip_rank_cut_10", "p_t"), 0.012983, "t-test p");
    assert_near(compare_value(result.out, "recip_rank_cut_10", "p_randomization"), 0.25, "exact randomization p");
    assert_near(compare_value(result.out, "recip_rank_cut_10", "wins"), 3, "wins");
    free_result(&result);

    snprintf(compare, sizeof compare, "--json --trials 2000 --compare '%s'", options);
    result = run_eval(compare, "cmp.qrels", "cmp.run");
    assert_int_equal(result.exit_code, 0);
    json_t *root = parse_json(result.out);
    json_t *mrr = json_object_get(json_object_get(root, "compare"), "recip_rank_cut_10");
    assert_near(json_measure(mrr, "p_randomization"), 0.25, "exact randomization p in JSON");
    assert_near(json_measure(mrr, "queries"), 3, "queries compared");
    json_decref(root);
    free_result(&result);

    char qrels[4096] = "", base[8192] = "", run[8192] = "";
    for (int q = 0; q < 20; q++) {
        /* the relevant document moves from rank 2 to 1 in even queries and from 1 to 2 in odd ones */
        const char *first = q % 2 ? "r" : "x", *second = q % 2 ? "x" : "r";
        snprintf(qrels + strlen(qrels), sizeof qrels - strlen(qrels), "m%d 0 r 1\n", q);
        snprintf(base + strlen(base), sizeof base - strlen(base), "m%d Q0 %s 1 9 b\nm%d Q0 %s 2 8 b\n", q, second,
                 q, first);
        snprintf(run + strlen(run), sizeof run - strlen(run), "m%d Q0 %s 1 9 l\nm%d Q0 %s 2 8 l\n", q, first, q,
                 second);
    }
    write_fixture("even.qrels", qrels);
    write_fixture("even-base.run", base);
    write_fixture("even.run", run);
    temp_path(options, sizeof options, "even-base.run");
    snprintf(compare, sizeof compare, "--trials 5000 --compare '%s'", options);
    result = run_eval(compare, "even.qrels", "even.run");
    assert_int_equal(result.exit_code, 0);
    assert_near(compare_value(result.out, "recip_rank_cut_10", "diff"), 0, "no mean difference");
    assert_near(compare_value(result.out, "recip_rank_cut_10", "p_t"), 1, "t-test p of no difference");
    assert_true(compare_value(result.out, "recip_rank_cut_10", "p_randomization") >= 0.99);
    free_result(&result);
}

/* Runs a failing case and checks exit code 2 and that stderr holds `needle`. */
/* A bad input: isn-eval exits 2 with nothing on stdout, and every needle is in its message. */
struct malformed_case {
    const char *fixture, *content; /* written before the run; NULL: the case needs none */
    const char *options, *qrels, *run;
    const char *needles[2];
};

static const struct malformed_case MALFORMED_CASES[] = {
    {"fields.run", "q1 Q0 d1 1 1.0 tag\nq1 Q0 d2 2 0.5 tag\nq1 Q0 d3 3 0.4\n", "", "good.qrels", "fields.run",
     {"fields.run:3:", "found 5"}},
    {"rel.qrels", "q1 0 d1 1\nq1 0 d2 yes\n", "", "rel.qrels", "good.run", {"rel.qrels:2:", "'yes'"}},
    {"fields.qrels", "q1 0 d1 1\n\nq1 d2 1\n", "", "fields.qrels", "good.run", {"fields.qrels:3:"}},
    {"score.run", "q1 Q0 d1 1 1.0 tag\nq1 Q0 d2 2 high tag\n", "", "good.qrels", "score.run", {"score.run:2:"}},
    {"nan.run", "q1 Q0 d1 1 nan tag\n", "", "good.qrels", "nan.run", {"nan.run:1:"}},
    {"dup.run", "q1 Q0 d1 1 1.0 tag\nq1 Q0 d2 2 0.9 tag\nq2 Q0 d1 1 1.0 tag\nq1 Q0 d1 3 0.1 tag\n", "",
     "good.qrels", "dup.run", {"dup.run:4:", "first at line 1"}},
    {"dup.qrels", "q1 0 d1 1\nq2 0 d1 1\nq1 0 d1 0\n", "", "dup.qrels", "good.run", {"dup.qrels:3:"}},
    {"other.run", "zz Q0 d1 1 1.0 tag\n", "", "good.qrels", "other.run", {"nothing to evaluate"}},
    {NULL, NULL, "", "good.qrels", "/nonexistent/isn-eval.run", {"/nonexistent/isn-eval.run"}},
    {NULL, NULL, "", "/nonexistent/isn-eval.qrels", "good.run", {"/nonexistent/isn-eval.qrels"}},
    {NULL, NULL, "--bogus", "good.qrels", "good.run", {"unknown option"}},
    {NULL, NULL, "--trials 0 --compare good.run", "good.qrels", "good.run", {"--trials needs"}},
    {NULL, NULL, "--compare /nonexistent/base.run", "good.qrels", "good.run", {"/nonexistent/base.run"}},
};

static void test_malformed_input_names_the_line(void **state) {
    (void)state;
    write_fixture("good.qrels", "q1 0 d1 1\nq1 0 d2 0\n");
    write_fixture("good.run", "q1 Q0 d1 1 1.0 tag\n");
    for (size_t i = 0; i < sizeof MALFORMED_CASES / sizeof MALFORMED_CASES[0]; i++) {
        const struct malformed_case *c = &MALFORMED_CASES[i];
        if (c->fixture) write_fixture(c->fixture, c->content);
        struct eval_result result = run_eval(c->options, c->qrels, c->run);
        for (size_t n = 0; n < 2 && c->needles[n]; n++)
            if (result.exit_code != 2 || strstr(result.err, c->needles[n]) == NULL)
                fail_msg("expected exit 2 and '%s' on stderr, got exit %d, stderr:\n%s", c->needles[n],
                         result.exit_code, result.err);
        assert_string_equal(result.out, "");
        free_result(&result);
    }
}

/* ---------------- setup ---------------- */

static int setup_suite(void **state) {
    (void)state;
    const char *bin_dir = getenv("ISN_BIN_DIR");
    if (bin_dir != NULL && bin_dir[0] != '\0') {
        snprintf(eval_binary, sizeof eval_binary, "%s/isn-eval", bin_dir);
    } else {
        char self[PATH_MAX];
        ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
        if (length <= 0) return -1;
        self[length] = '\0';
        snprintf(eval_binary, sizeof eval_binary, "%s/../bin/isn-eval", dirname(self));
    }
    if (strchr(eval_binary, '\'') != NULL || access(eval_binary, X_OK) != 0) {
        fprintf(stderr, "test_isn_eval: no executable %s (build it, or set ISN_BIN_DIR)\n", eval_binary);
        return -1;
    }
    return mkdtemp(temp_dir) != NULL ? 0 : -1;
}

static int teardown_suite(void **state) {
    (void)state;
    return support_remove_tree(temp_dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_output_means),
        cmocka_unit_test(test_per_query_text),
        cmocka_unit_test(test_json_output),
        cmocka_unit_test(test_ties_broken_by_docid_decreasing),
        cmocka_unit_test(test_depth_cutoffs_and_long_lines),
        cmocka_unit_test(test_negative_judgement_gives_no_gain),
        cmocka_unit_test(test_malformed_input_names_the_line),
        cmocka_unit_test(test_paired_comparison),
    };
    return cmocka_run_group_tests(tests, setup_suite, teardown_suite);
}
