/* Evaluation of rankings, called directly (test_isn_eval drives the isn-eval program): the trec_eval
 * measures of ranking/eval_metrics.c on hand-worked rankings, the run reader's trec_eval order, the
 * report's query pairing, and base's qrels reader (its checks, which error comes first, lookups). */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/base.h"
#include "ranking/ranking.h"

#define TOLERANCE 1e-12

static char temp_dir[] = "/tmp/isn-test-eval-XXXXXX";
static char path_buffer[4096];

static const char *write_bytes(const char *name, const char *content, size_t length) {
    snprintf(path_buffer, sizeof path_buffer, "%s/%s", temp_dir, name);
    FILE *file = fopen(path_buffer, "w");
    assert_non_null(file);
    assert_int_equal(fwrite(content, 1, length, file), length);
    assert_int_equal(fclose(file), 0);
    return path_buffer;
}

static const char *write_file(const char *name, const char *content) {
    return write_bytes(name, content, strlen(content));
}

static void assert_near(double actual, double expected) {
    if (fabs(actual - expected) > TOLERANCE) fail_msg("got %.15f, expected %.15f", actual, expected);
}

/* Ranked judgements 1 0 1 0 (and the relevant doc never retrieved), graded judgements 2 -1 3 0. */
static void test_query_metrics_by_hand(void **state) {
    (void)state;
    /* Binary: relevant at ranks 1 and 3 of 3 relevant (one never retrieved).
     *   AP = (1/1 + 2/3) / 3;  RR = 1;  P@10 = 2/10;  recall@100 = 2/3
     *   nDCG@10 = (1 + 1/log2(4)) / (1 + 1/log2(3) + 1/log2(4)) */
    const long ranked[] = {1, 0, 1, 0}, judged[] = {1, 0, 1, 1};
    isn_eval_metrics m = isn_eval_query_metrics(ranked, 4, judged, 4);
    assert_near(m.map, (1.0 + 2.0 / 3.0) / 3.0);
    assert_near(m.recip_rank_cut_10, 1.0);
    assert_near(m.p_10, 0.2);
    assert_near(m.recall_100, 2.0 / 3.0);
    assert_near(m.ndcg_cut_10, 1.5 / (1.0 + 1.0 / log2(3.0) + 0.5));

    /* Graded, a negative judgement first: gains 0 (not -1), 3, 0, 2 against the ideal 3, 2.
     *   nDCG = (3/log2(3) + 2/log2(5)) / (3 + 2/log2(3));  RR = 1/2;  AP = (1/2 + 2/4) / 2 */
    const long graded_ranked[] = {-1, 3, 0, 2}, graded_judged[] = {2, -1, 3, 0};
    m = isn_eval_query_metrics(graded_ranked, 4, graded_judged, 4);
    assert_near(m.ndcg_cut_10, (3.0 / log2(3.0) + 2.0 / log2(5.0)) / (3.0 + 2.0 / log2(3.0)));
    assert_near(m.recip_rank_cut_10, 0.5);
    assert_near(m.map, (0.5 + 0.5) / 2.0);

    /* Judged only non-relevant: every measure 0 (no division by zero). */
    const long none[] = {0, -2};
    m = isn_eval_query_metrics(none, 2, none, 2);
    for (size_t i = 0; i < ISN_EVAL_MEASURES; i++) assert_near(isn_eval_measure_value(&m, i), 0.0);
}

/* Ranks 11 and 101 fall outside RR@10/P@10/nDCG@10 and recall@100, not outside AP. */
static void test_query_metrics_cutoffs(void **state) {
    (void)state;
    long ranked[150] = {0}, judged[3] = {1, 1, 1};
    ranked[10] = 1;  /* rank 11 */
    ranked[100] = 1; /* rank 101 */
    isn_eval_metrics m = isn_eval_query_metrics(ranked, 150, judged, 3);
    assert_near(m.recip_rank_cut_10, 0.0);
    assert_near(m.p_10, 0.0);
    assert_near(m.ndcg_cut_10, 0.0);
    assert_near(m.recall_100, 1.0 / 3.0);
    assert_near(m.map, (1.0 / 11.0 + 2.0 / 101.0) / 3.0);

    /* More than 10 positive judgements: the ideal DCG uses the 10 largest gains. */
    long many_judged[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 5, 4}, top[1] = {5};
    double ideal = 5.0 + 4.0 / log2(3.0);
    for (size_t r = 3; r <= 10; r++) ideal += 1.0 / log2((double)r + 1.0);
    m = isn_eval_query_metrics(top, 1, many_judged, 12);
    assert_near(m.ndcg_cut_10, 5.0 / ideal);
}

static void test_measure_names_and_mean(void **state) {
    (void)state;
    const char *names[ISN_EVAL_MEASURES] = {"ndcg_cut_10", "recip_rank_cut_10", "P_10", "recall_100", "map"};
    isn_eval_metrics m = {.ndcg_cut_10 = 1, .recip_rank_cut_10 = 2, .p_10 = 3, .recall_100 = 4, .map = 5};
    for (size_t i = 0; i < ISN_EVAL_MEASURES; i++) {
        assert_string_equal(isn_eval_measure_name(i), names[i]);
        assert_near(isn_eval_measure_value(&m, i), (double)(i + 1));
    }
    isn_eval_query_result queries[2] = {{.metrics = m}, {.metrics = {.map = 1.0}}};
    isn_eval_metrics mean = isn_eval_mean(queries, 2);
    assert_near(mean.map, 3.0);
    assert_near(mean.p_10, 1.5);
    assert_near(isn_eval_mean(queries, 0).map, 0.0);
}

/* Runs group by query id; within a query: score descending, ties (as floats) by docid decreasing. */
static void test_run_order(void **state) {
    (void)state;
    isn_eval_run run;
    char err[512];
    const char *path = write_file("order.run", "b Q0 x 1 1 t\n"
                                               "a Q0 d9 1 7 t\n"
                                               "\n"
                                               "a Q0 d10 2 7 t\n"
                                               "a Q0 top 3 1.00000001 t\n"
                                               "a Q0 z 4 1.0 t\n"
                                               "a Q0 best 5 8 t\n");
    assert_int_equal(isn_eval_run_read(path, &run, err, sizeof err), 0);
    const char *expected[][2] = {{"a", "best"}, {"a", "d9"}, {"a", "d10"}, {"a", "z"}, {"a", "top"}, {"b", "x"}};
    assert_int_equal(run.count, 6);
    for (size_t i = 0; i < run.count; i++) {
        assert_string_equal(run.entries[i].key.query_id, expected[i][0]);
        assert_string_equal(run.entries[i].key.doc_id, expected[i][1]);
    }
    assert_int_equal(run.entries[0].key.line, 7);
    isn_eval_run_free(&run);
}

static void expect_error(int rc, const char *err, const char *needle) {
    assert_int_equal(rc, -1);
    if (!strstr(err, needle)) fail_msg("expected '%s' in '%s'", needle, err);
}

/* The first error in the file wins, whether a repeat or a malformed line comes first. */
static void test_readers_report_the_first_error(void **state) {
    (void)state;
    isn_qrels qrels;
    isn_eval_run run;
    char err[512];
    const char *path = write_file("dup_first.qrels", "q 0 a 1\nq 0 b 1\nq 0 a 0\nq 0 c x\nq 0 b 2\n");
    expect_error(isn_qrels_read(path, &qrels, err, sizeof err), err,
                 "dup_first.qrels:3: docid 'a' of query 'q' is judged twice (first at line 1)");
    path = write_file("bad_first.qrels", "q 0 a 1\nq 0 c 1.5\nq 0 a 0\n");
    expect_error(isn_qrels_read(path, &qrels, err, sizeof err), err,
                 "bad_first.qrels:2: relevance '1.5' is not an integer");
    path = write_file("fields.qrels", "q 0 a 1 extra\n");
    expect_error(isn_qrels_read(path, &qrels, err, sizeof err), err,
                 "fields.qrels:1: expected 4 fields 'qid iter docid rel', found 5");
    static const char with_nul[] = "q 0 a 1\nq 0 b\0 1\n";
    path = write_bytes("nul.qrels", with_nul, sizeof with_nul - 1);
    expect_error(isn_qrels_read(path, &qrels, err, sizeof err), err, "nul.qrels:2: line contains a NUL byte");
    expect_error(isn_qrels_read("/nonexistent/x.qrels", &qrels, err, sizeof err), err,
                 "cannot open /nonexistent/x.qrels");

    path = write_file("dup.run", "q Q0 a 1 3 t\nq Q0 b 2 2 t\nr Q0 a 1 1 t\nq Q0 b 3 1 t\nq Q0 a 4 0 t\nq Q0 c 5 nan t\n");
    expect_error(isn_eval_run_read(path, &run, err, sizeof err), err,
                 "dup.run:4: docid 'b' appears twice in the ranking of query 'q' (first at line 2)");
    path = write_file("score.run", "q Q0 a 1 high t\nq Q0 a 2 1 t\n");
    expect_error(isn_eval_run_read(path, &run, err, sizeof err), err, "score.run:1: score 'high' is not a number");
}

static void test_qrels_lookup(void **state) {
    (void)state;
    isn_qrels qrels;
    char err[512];
    const char *path = write_file("lookup.qrels", "q2 0 b -1\nq1 0 doc 2\n\nq1 0 do 1\nq10 0 a 3\n");
    assert_int_equal(isn_qrels_read(path, &qrels, err, sizeof err), 0);
    assert_int_equal(qrels.count, 4);
    /* Sorted by query id, then doc id. */
    assert_string_equal(qrels.judgements[0].key.query_id, "q1");
    assert_string_equal(qrels.judgements[0].key.doc_id, "do");
    assert_int_equal(qrels.judgements[3].key.line, 1);
    assert_int_equal(isn_qrels_relevance(&qrels, "q1", "doc", 3), 2);
    assert_int_equal(isn_qrels_relevance(&qrels, "q1", "document", 2), 1); /* a length, not a C string */
    assert_int_equal(isn_qrels_relevance(&qrels, "q1", "d", 1), 0);
    assert_int_equal(isn_qrels_relevance(&qrels, "q2", "b", 1), -1);
    assert_int_equal(isn_qrels_relevance(&qrels, "q10", "a", 1), 3);
    assert_int_equal(isn_qrels_relevance(&qrels, "q3", "a", 1), 0);
    isn_qrels_free(&qrels);
    isn_qrels_free(&qrels); /* fine twice, and on a zeroed one */
}

/* q1 judged and ranked, q2 judged only non-relevant and ranked, q3 judged without run lines, q9 only
 * in the run: two queries evaluated in id order, one judged without results. */
static void test_evaluate_pairs_queries(void **state) {
    (void)state;
    isn_qrels qrels;
    isn_eval_run run;
    isn_eval_report report;
    char err[512];
    const char *qrels_path = write_file("pair.qrels", "q2 0 x 0\nq1 0 a 1\nq3 0 z 1\nq1 0 b 1\n");
    assert_int_equal(isn_qrels_read(qrels_path, &qrels, err, sizeof err), 0);
    const char *run_path = write_file("pair.run", "q9 Q0 a 1 1 t\nq1 Q0 c 1 3 t\nq1 Q0 b 2 2 t\nq2 Q0 x 1 1 t\n");
    assert_int_equal(isn_eval_run_read(run_path, &run, err, sizeof err), 0);
    assert_int_equal(isn_eval_evaluate(&qrels, &run, &report, err, sizeof err), 0);
    assert_int_equal(report.num_queries, 2);
    assert_int_equal(report.num_judged_without_results, 1);
    assert_string_equal(report.queries[0].query_id, "q1");
    assert_int_equal(report.queries[0].ranked, 2);
    assert_int_equal(report.queries[0].relevant, 2);
    assert_near(report.queries[0].metrics.map, (1.0 / 2.0) / 2.0);
    assert_near(report.queries[0].metrics.recip_rank_cut_10, 0.5);
    assert_string_equal(report.queries[1].query_id, "q2");
    assert_int_equal(report.queries[1].relevant, 0);
    assert_near(report.mean.map, 0.25 / 2.0);
    isn_eval_report_free(&report);
    isn_eval_run_free(&run);
    isn_qrels_free(&qrels);
}

static int setup(void **state) {
    (void)state;
    return mkdtemp(temp_dir) ? 0 : -1;
}

/* The fixtures are plain files directly in temp_dir. */
static int teardown(void **state) {
    (void)state;
    DIR *dir = opendir(temp_dir);
    if (!dir) return -1;
    for (struct dirent *entry; (entry = readdir(dir));) {
        if (entry->d_name[0] == '.') continue;
        snprintf(path_buffer, sizeof path_buffer, "%s/%s", temp_dir, entry->d_name);
        unlink(path_buffer);
    }
    closedir(dir);
    return rmdir(temp_dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_metrics_by_hand),
        cmocka_unit_test(test_query_metrics_cutoffs),
        cmocka_unit_test(test_measure_names_and_mean),
        cmocka_unit_test(test_run_order),
        cmocka_unit_test(test_readers_report_the_first_error),
        cmocka_unit_test(test_qrels_lookup),
        cmocka_unit_test(test_evaluate_pairs_queries),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
