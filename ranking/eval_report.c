/* A run scored against judgements, query by query and averaged: see "evaluation of rankings" in
 * ranking.h. */
#include <stdlib.h>
#include <string.h>

#include "ranking/ranking.h"

/* Each query's judgements, then the run's entries, are contiguous and in query id order: one merge
 * walk pairs them. */
int isn_eval_evaluate(const isn_qrels *qrels, const isn_eval_run *run, isn_eval_report *report, char *err,
                      size_t err_len) {
    memset(report, 0, sizeof *report);
    report->queries = malloc((qrels->count + 1) * sizeof *report->queries);
    long *ranked = malloc((run->count + 1) * sizeof *ranked);
    long *judged = malloc((qrels->count + 1) * sizeof *judged);
    if (!report->queries || !ranked || !judged) {
        free(ranked);
        free(judged);
        isn_eval_report_free(report);
        return isn_error(err, err_len, "out of memory");
    }
    size_t run_start = 0;
    for (size_t start = 0, end; start < qrels->count; start = end) {
        const char *query_id = qrels->judgements[start].key.query_id;
        size_t num_judged = 0;
        for (end = start; end < qrels->count && !strcmp(qrels->judgements[end].key.query_id, query_id); end++)
            judged[num_judged++] = qrels->judgements[end].relevance;

        while (run_start < run->count && strcmp(run->entries[run_start].key.query_id, query_id) < 0) run_start++;
        size_t num_ranked = 0;
        for (size_t r = run_start; r < run->count && !strcmp(run->entries[r].key.query_id, query_id); r++) {
            const char *doc_id = run->entries[r].key.doc_id;
            ranked[num_ranked++] = isn_qrels_relevance(qrels, query_id, doc_id, strlen(doc_id));
        }
        if (num_ranked == 0) {
            report->num_judged_without_results++;
            continue;
        }
        isn_eval_query_result *result = &report->queries[report->num_queries++];
        *result = (isn_eval_query_result){
            .query_id = query_id,
            .ranked = num_ranked,
            .metrics = isn_eval_query_metrics(ranked, num_ranked, judged, num_judged),
        };
        for (size_t j = 0; j < num_judged; j++) result->relevant += judged[j] >= 1;
    }
    free(ranked);
    free(judged);

    report->mean = isn_eval_mean(report->queries, report->num_queries);
    return 0;
}

void isn_eval_report_free(isn_eval_report *report) {
    free(report->queries);
    memset(report, 0, sizeof *report);
}
