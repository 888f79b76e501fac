/* Does a filter make a query cheaper? Single thread, the same query log with and without a filter
 * clause (issue 40, must-show 3): per setting, queries/s (median over passes) and the documents the
 * filter keeps. Prints one JSON object.
 *
 *   filter_speed INDEX_DIR QUERIES.tsv K PASSES ATTRIBUTE=VALUE|ATTRIBUTE>=N ...
 *
 * The first setting is always "none" (the query text alone, as the bag of words runs it). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "ranking/ranking.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: filter_speed INDEX_DIR QUERIES.tsv K PASSES [ATTRIBUTE=VALUE|ATTRIBUTE>=N]...\n");
        return 2;
    }
    char err[ISN_ERR_LEN];
    isn_index *index = isn_index_open(argv[1], err, sizeof err);
    if (!index) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    isn_query_log log;
    if (isn_query_log_read(argv[2], false, 0, &log, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    uint32_t k = (uint32_t)atoi(argv[3]), passes = (uint32_t)atoi(argv[4]);
    isn_searcher *searcher = isn_searcher_new(index);
    isn_hit *hits = calloc(k, sizeof *hits);
    uint32_t num_docs = isn_index_get_info(index)->num_docs;
    printf("{\"benchmark\":\"filter_speed\",\"queries\":%zu,\"k\":%u,\"passes\":%u,\"settings\":[", log.count, k, passes);
    for (int setting = 4; setting < argc; setting++) {
        bool filtered = setting > 4;
        isn_filter_spec spec = {0};
        char text[256] = "none";
        const char *value = NULL;
        if (filtered) {
            snprintf(text, sizeof text, "%s", argv[setting]);
            char *op = strstr(text, ">=");
            spec.op = op ? ISN_FILTER_GE : ISN_FILTER_EQ;
            if (!op) op = strchr(text, '=');
            if (!op) return fprintf(stderr, "filter_speed: '%s'\n", argv[setting]), 2;
            *op = '\0';
            value = op + (spec.op == ISN_FILTER_GE ? 2 : 1);
            spec.attribute = text;
            spec.values = &value;
            spec.num_values = 1;
        }
        uint32_t kept = 0;
        if (filtered) {
            isn_attribute_kind kind;
            int a = isn_index_attribute_find(index, spec.attribute, &kind);
            int64_t want = 0;
            if (a < 0 || (kind == ISN_ATTRIBUTE_KEYWORD && !isn_index_keyword_id(index, (uint32_t)a, value, strlen(value), &want)))
                return fprintf(stderr, "filter_speed: no attribute value %s=%s\n", spec.attribute, value), 2;
            if (kind == ISN_ATTRIBUTE_INT) want = atoll(value);
            for (uint32_t d = 0; d < num_docs; d++) {
                int64_t v = isn_index_attribute_value(index, (uint32_t)a, d);
                kept += v != ISN_ATTRIBUTE_MISSING && (kind == ISN_ATTRIBUTE_KEYWORD ? v == want : v >= want);
            }
        }
        double *qps = calloc(passes, sizeof *qps);
        uint64_t postings = 0;
        for (uint32_t p = 0; p < passes; p++) {
            uint64_t t0 = isn_now_ns();
            for (size_t q = 0; q < log.count; q++) {
                const char *qt = log.queries[q].text;
                isn_query query;
                if (isn_query_parse_syntax(searcher, qt, strlen(qt), filtered ? &spec : NULL, filtered,
                                           &query, err, sizeof err) != 0)
                    continue; /* a query the syntax refuses (an unknown field) is skipped alike in every setting */
                isn_search_options options;
                isn_search_options_default(&options);
                options.k = k;
                uint32_t n;
                isn_search_stats stats;
                isn_search(searcher, &query, &options, hits, &n, &stats, err, sizeof err);
                postings += p == 0 ? stats.postings_scored : 0;
            }
            qps[p] = (double)log.count / ((double)(isn_now_ns() - t0) / 1e9);
        }
        qsort(qps, passes, sizeof *qps, cmp_double);
        printf("%s{\"filter\":\"%s\",\"docs_kept_share\":%.4f,\"qps_median\":%.1f,\"postings_scored_per_query\":%.1f}",
               filtered ? "," : "", filtered ? argv[setting] : "none", filtered ? (double)kept / num_docs : 1.0, qps[passes / 2], (double)postings / (double)log.count);
        free(qps);
    }
    printf("]}\n");
    isn_searcher_free(searcher);
    isn_query_log_free(&log);
    isn_index_close(index);
    return 0;
}
