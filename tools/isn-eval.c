/*
 * isn-eval: scores a TREC run against TREC relevance judgements (qrels) with the measures
 * trec_eval 9.x reports as ndcg_cut_10, P_10, recall_100 and map, plus recip_rank cut at
 * rank 10 (MRR@10), so ISN's quality numbers can be compared with published ones.
 *
 *   isn-eval [--json] [--per-query] [--compare BASELINE_RUN [--trials N]] QRELS RUN
 *
 * --compare adds, per measure, the paired significance of RUN against BASELINE_RUN over the same
 * judged queries: Student's paired t-test and the paired randomization test (isn_eval_compare in
 * ranking.h), so a claimed gain comes with its p value.
 *
 * The measures and trec_eval's choices they copy (tie order, float scores, graded gains, which
 * queries count) are ranking/'s: "evaluation of rankings" in ranking/ranking.h. The files are
 * read with trec_eval's checks (base's qrels reader, ranking's run reader): duplicate docids
 * within one query of the run or of the qrels are errors, and so is a pair of files with no
 * query in common. Blank lines are skipped. Every error names file:line where there is one
 * and exits with status 2.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "ranking/ranking.h"

#define EXIT_BAD_INPUT 2

static const char usage_text[] =
    "usage: isn-eval [--json] [--per-query] [--compare BASELINE_RUN [--trials N]] QRELS RUN\n"
    "  QRELS lines: qid iter docid rel        (rel >= 1 is relevant)\n"
    "  RUN lines:   qid Q0 docid rank score tag\n"
    "Prints ndcg_cut_10, recip_rank_cut_10, P_10, recall_100 and map as trec_eval 9.x\n"
    "computes them, averaged over the queries present in both files.\n"
    "  --json       one JSON object instead of 'measure<TAB>all<TAB>value' lines\n"
    "  --per-query  also the values of every evaluated query\n"
    "  --compare B  also, per measure, RUN against the baseline run B over the judged queries either\n"
    "               answers: mean difference, wins/losses, paired t-test p and paired randomization\n"
    "               test p (two-sided; exact up to 16 queries, else N random sign flips, seed 1)\n"
    "  --trials N   random sign flips of the randomization test (default 100000)\n";

#define DEFAULT_TRIALS 100000u
#define RANDOMIZATION_SEED 1u

static void print_json_string(const char *text) {
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\')
            printf("\\%c", *c);
        else if (*c < 0x20)
            printf("\\u%04x", *c);
        else
            putchar(*c);
    }
    putchar('"');
}

static void print_json_metrics(const isn_eval_metrics *metrics) {
    for (size_t m = 0; m < ISN_EVAL_MEASURES; m++)
        printf(",\"%s\":%.6f", isn_eval_measure_name(m), isn_eval_measure_value(metrics, m));
}

static void print_text(const isn_eval_report *report, bool per_query) {
    if (per_query) {
        for (size_t q = 0; q < report->num_queries; q++) {
            const isn_eval_query_result *query = &report->queries[q];
            for (size_t m = 0; m < ISN_EVAL_MEASURES; m++)
                printf("%s\t%s\t%.4f\n", isn_eval_measure_name(m), query->query_id,
                       isn_eval_measure_value(&query->metrics, m));
        }
    }
    printf("num_q\tall\t%zu\n", report->num_queries);
    printf("num_q_without_results\tall\t%zu\n", report->num_judged_without_results);
    for (size_t m = 0; m < ISN_EVAL_MEASURES; m++)
        printf("%s\tall\t%.4f\n", isn_eval_measure_name(m), isn_eval_measure_value(&report->mean, m));
}

static void print_comparisons_json(const char *baseline_path, const isn_eval_paired *paired);

static void print_json(const isn_eval_report *report, bool per_query, const char *baseline_path,
                       const isn_eval_paired *paired) {
    printf("{\"queries\":%zu,\"queries_without_results\":%zu", report->num_queries,
           report->num_judged_without_results);
    print_json_metrics(&report->mean);
    if (per_query) {
        printf(",\"per_query\":{");
        for (size_t q = 0; q < report->num_queries; q++) {
            const isn_eval_query_result *query = &report->queries[q];
            if (q > 0)
                putchar(',');
            print_json_string(query->query_id);
            printf(":{\"ranked\":%zu,\"relevant\":%zu", query->ranked, query->relevant);
            print_json_metrics(&query->metrics);
            putchar('}');
        }
        putchar('}');
    }
    if (baseline_path != NULL)
        print_comparisons_json(baseline_path, paired);
    printf("}\n");
}

/* JSON has no NaN: a value that is not a number prints as null. */
static void print_json_number(const char *key, double value) {
    if (isfinite(value))
        printf("\"%s\":%.6g", key, value);
    else
        printf("\"%s\":null", key);
}

static void print_comparisons_text(const isn_eval_paired *paired) {
    for (size_t m = 0; m < ISN_EVAL_MEASURES; m++) {
        const isn_eval_paired *p = &paired[m];
        printf("compare\t%s\tqueries=%zu baseline=%.4f run=%.4f diff=%+.4f wins=%zu losses=%zu t=%.3f "
               "p_t=%.3g p_randomization=%.3g%s\n",
               isn_eval_measure_name(m), p->num_queries, p->mean_baseline, p->mean_run, p->mean_difference, p->wins,
               p->losses, p->t, p->t_p, p->randomization_p, p->randomization_trials ? "" : " (exact)");
    }
}

static void print_comparisons_json(const char *baseline_path, const isn_eval_paired *paired) {
    printf(",\"compare\":{\"baseline\":");
    print_json_string(baseline_path);
    printf(",\"randomization_trials\":%u", paired[0].randomization_trials);
    for (size_t m = 0; m < ISN_EVAL_MEASURES; m++) {
        const isn_eval_paired *p = &paired[m];
        printf(",\"%s\":{\"queries\":%zu,", isn_eval_measure_name(m), p->num_queries);
        print_json_number("baseline", p->mean_baseline);
        putchar(',');
        print_json_number("run", p->mean_run);
        putchar(',');
        print_json_number("difference", p->mean_difference);
        printf(",\"wins\":%zu,\"losses\":%zu,", p->wins, p->losses);
        print_json_number("t", p->t);
        putchar(',');
        print_json_number("p_t", p->t_p);
        putchar(',');
        print_json_number("p_randomization", p->randomization_p);
        putchar('}');
    }
    putchar('}');
}

/* Bad input: "isn-eval: message" on stderr (the readers' messages start with PATH:LINE:), exit 2. */
static int bad_input(const char *message) {
    fprintf(stderr, "isn-eval: %s\n", message);
    return EXIT_BAD_INPUT;
}

int main(int argc, char **argv) {
    bool json = false, per_query = false;
    const char *baseline_path = NULL;
    uint32_t trials = DEFAULT_TRIALS;
    const char *paths[2];
    size_t num_paths = 0;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = true;
        } else if (!options_done && strcmp(arg, "--json") == 0) {
            json = true;
        } else if (!options_done && strcmp(arg, "--per-query") == 0) {
            per_query = true;
        } else if (!options_done && strcmp(arg, "--compare") == 0) {
            if (i + 1 == argc) {
                fprintf(stderr, "isn-eval: --compare needs a baseline run file\n%s", usage_text);
                return EXIT_BAD_INPUT;
            }
            baseline_path = argv[++i];
        } else if (!options_done && strcmp(arg, "--trials") == 0) {
            char *end = NULL;
            unsigned long value = i + 1 < argc ? strtoul(argv[i + 1], &end, 10) : 0;
            if (i + 1 == argc || end == argv[i + 1] || *end != '\0' || argv[i + 1][0] == '-' || value == 0 ||
                value > 100000000ul) {
                fprintf(stderr, "isn-eval: --trials needs a whole number from 1 to 100000000, not '%s'\n",
                        i + 1 < argc ? argv[i + 1] : "");
                return EXIT_BAD_INPUT;
            }
            trials = (uint32_t)value;
            i++;
        } else if (!options_done && (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!options_done && arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "isn-eval: unknown option '%s'\n%s", arg, usage_text);
            return EXIT_BAD_INPUT;
        } else if (num_paths < 2) {
            paths[num_paths++] = arg;
        } else {
            fprintf(stderr, "isn-eval: too many arguments\n%s", usage_text);
            return EXIT_BAD_INPUT;
        }
    }
    if (num_paths != 2) {
        fprintf(stderr, "isn-eval: expected QRELS and RUN files\n%s", usage_text);
        return EXIT_BAD_INPUT;
    }

    char err[4096];
    isn_qrels qrels = {0};
    isn_eval_run run = {0};
    isn_eval_report report = {0};
    isn_eval_run baseline_run = {0};
    isn_eval_report baseline = {0};
    isn_eval_paired paired[ISN_EVAL_MEASURES];
    int rc = 0;
    if (isn_qrels_read(paths[0], &qrels, err, sizeof err) != 0 ||
        isn_eval_run_read(paths[1], &run, err, sizeof err) != 0 ||
        isn_eval_evaluate(&qrels, &run, &report, err, sizeof err) != 0 ||
        (baseline_path != NULL && (isn_eval_run_read(baseline_path, &baseline_run, err, sizeof err) != 0 ||
                                   isn_eval_evaluate(&qrels, &baseline_run, &baseline, err, sizeof err) != 0))) {
        rc = bad_input(err);
    } else if (report.num_queries == 0) {
        snprintf(err, sizeof err, "no query of %s has judgements in %s: nothing to evaluate", paths[1], paths[0]);
        rc = bad_input(err);
    } else if (baseline_path != NULL && baseline.num_queries == 0) {
        snprintf(err, sizeof err, "no query of the baseline %s has judgements in %s: nothing to compare",
                 baseline_path, paths[0]);
        rc = bad_input(err);
    } else {
        for (size_t m = 0; baseline_path != NULL && m < ISN_EVAL_MEASURES && rc == 0; m++)
            if (isn_eval_compare(&baseline, &report, m, trials, RANDOMIZATION_SEED, &paired[m], err, sizeof err) != 0)
                rc = bad_input(err);
        if (rc != 0) {
            /* reported */
        } else if (json) {
            print_json(&report, per_query, baseline_path, paired);
        } else {
            print_text(&report, per_query);
            if (baseline_path != NULL)
                print_comparisons_text(paired);
        }
        if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
            snprintf(err, sizeof err, "cannot write the results: %s", strerror(errno));
            rc = bad_input(err);
        }
    }
    isn_eval_report_free(&report);
    isn_eval_report_free(&baseline);
    isn_eval_run_free(&baseline_run);
    isn_eval_run_free(&run);
    isn_qrels_free(&qrels);
    return rc;
}
