/* How much of a held-out query log a list cache chosen from a training log can answer (issue 41): the device answers
 * a query only when each of its lists has a block resident, and an admission learns which lists queries name from
 * the training log alone. For a partition, a training log and a held-out one it prints one JSON line: the held-out
 * queries that name only lists the training log names (what such an admission can hold; the lists it never names go
 * in only by a guess, such as their document frequency), the lists they name that it does not (per query: their
 * postings, and their bytes in the device layout, isn_gpu_list_bytes, which would have to reach the device for the
 * query to be answered there), and the held-out queries by the document frequency of the longest such list (binary
 * orders of magnitude). The CPU answers the rest, so a cache's rate is bounded by the CPU's over the share left to
 * it, and two caches' rates differ by little more than the shares they leave. Every list is measured once in the
 * device layout (a pass over the partition's blocks).
 * Per batch of --batch held-out queries (default 256, the device's batch) it also prints the bytes of the distinct
 * such lists the batch names: what copying a batch's missing lists to the device, instead of answering their queries
 * on the CPU, would move across the bus (the median and largest over the log's full batches).
 *   bench_cache_coverage --index DIR --train FILE.tsv --measured FILE.tsv [--batch N] */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"

#define DF_BANDS 33

typedef struct {
    uint32_t *terms; /* term ids, query q's num[q] of them from first[q] */
    uint32_t *first, *num;
    uint32_t n;
} term_log;

static int read_log(isn_searcher *s, const char *path, term_log *log) {
    char err[256];
    isn_query_log text;
    if (isn_query_log_read(path, false, 0, &text, err, sizeof err) != 0)
        return fprintf(stderr, "bench_cache_coverage: %s\n", err), -1;
    log->first = calloc(text.count + 1, sizeof *log->first);
    log->num = calloc(text.count + 1, sizeof *log->num);
    uint32_t cap = 1024, used = 0;
    log->terms = malloc(cap * sizeof *log->terms);
    if (!log->first || !log->num || !log->terms) return fprintf(stderr, "bench_cache_coverage: out of memory\n"), -1;
    for (size_t i = 0; i < text.count; i++) {
        isn_query q;
        const char *query_text = text.queries[i].text;
        if (isn_query_parse(s, query_text, strlen(query_text), &q, err, sizeof err) != 0 || q.num_terms == 0) continue;
        if (used + q.num_terms > cap) {
            while (used + q.num_terms > cap) cap *= 2;
            uint32_t *grown = realloc(log->terms, cap * sizeof *grown);
            if (!grown) return fprintf(stderr, "bench_cache_coverage: out of memory\n"), -1;
            log->terms = grown;
        }
        log->first[log->n] = used;
        log->num[log->n] = q.num_terms;
        for (uint32_t t = 0; t < q.num_terms; t++) log->terms[used++] = q.terms[t].term_id;
        log->n++;
    }
    isn_query_log_free(&text);
    return 0;
}

static int by_value(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint32_t band_of(uint64_t df) {
    uint32_t band = 0;
    while (df > 1 && band + 1 < DF_BANDS) df >>= 1, band++;
    return band;
}

int main(int argc, char **argv) {
    const char *index_dir = NULL, *train_path = NULL, *measured_path = NULL;
    unsigned long batch = 256;
    static const struct option opts[] = {
        {"index", 1, 0, 'i'}, {"train", 1, 0, 't'}, {"measured", 1, 0, 'm'}, {"batch", 1, 0, 'b'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'i': index_dir = optarg; break;
        case 't': train_path = optarg; break;
        case 'm': measured_path = optarg; break;
        case 'b': {
            char *end;
            batch = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || batch == 0 || batch > UINT_MAX)
                return fprintf(stderr, "bench_cache_coverage: --batch '%s' is not a positive query count\n", optarg), 2;
            break;
        }
        default: return 2;
        }
    }
    if (!index_dir || !train_path || !measured_path) {
        fprintf(stderr, "usage: bench_cache_coverage --index DIR --train FILE.tsv --measured FILE.tsv [--batch N]\n");
        return 2;
    }
    char err[256];
    isn_index *ix = isn_index_open(index_dir, err, sizeof err);
    if (!ix) return fprintf(stderr, "bench_cache_coverage: %s\n", err), 1;
    isn_searcher *s = isn_searcher_new(ix);
    term_log train = {0}, measured = {0};
    if (!s || read_log(s, train_path, &train) != 0 || read_log(s, measured_path, &measured) != 0) return 1;
    if (train.n == 0 || measured.n == 0) return fprintf(stderr, "bench_cache_coverage: a log has no usable query\n"), 1;
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    uint32_t *namings = calloc(nt ? nt : 1, sizeof *namings);
    uint64_t *list_bytes = malloc((nt ? nt : 1) * sizeof *list_bytes);
    /* the batch that last counted a list, plus one: a list named twice in a batch crosses the bus once */
    uint32_t *counted_in = calloc(nt ? nt : 1, sizeof *counted_in);
    const uint32_t full_batches = measured.n / (uint32_t)batch;
    uint64_t *batch_bytes = calloc(full_batches ? full_batches : 1, sizeof *batch_bytes);
    if (!namings || !list_bytes || !counted_in || !batch_bytes)
        return fprintf(stderr, "bench_cache_coverage: out of memory\n"), 1;
    for (uint32_t i = 0; i < train.first[train.n - 1] + train.num[train.n - 1]; i++) namings[train.terms[i]]++;
    uint32_t all_named = 0, by_band[DF_BANDS] = {0};
    uint64_t missing = 0, missing_bytes = 0, postings = 0, device_bytes = 0;
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        postings += st.df;
        device_bytes += list_bytes[t] = isn_gpu_list_bytes(ix, t, st.num_blocks);
    }
    for (uint32_t q = 0; q < measured.n; q++) {
        uint64_t longest = 0;
        for (uint32_t t = 0; t < measured.num[q]; t++) {
            const uint32_t term = measured.terms[measured.first[q] + t];
            if (namings[term]) continue;
            isn_term_stats st;
            isn_index_term_stats(ix, term, &st);
            missing += st.df;
            missing_bytes += list_bytes[term];
            const uint32_t in_batch = q / (uint32_t)batch;
            if (in_batch < full_batches && counted_in[term] != in_batch + 1) {
                counted_in[term] = in_batch + 1;
                batch_bytes[in_batch] += list_bytes[term];
            }
            longest = st.df > longest ? st.df : longest;
        }
        if (longest) by_band[band_of(longest)]++;
        else all_named++;
    }
    printf("{\"bench\": \"cache_coverage\", \"index\": \"%s\", \"postings\": %llu, \"device_bytes\": %llu, "
           "\"train_queries\": %u, \"measured_queries\": %u, \"measured_only_trained_lists\": %.4f, "
           "\"missing_postings_per_query\": %.0f, \"missing_device_bytes_per_query\": %.0f, "
           "\"queries_by_longest_missing_list\": {",
           index_dir, (unsigned long long)postings, (unsigned long long)device_bytes, train.n, measured.n,
           (double)all_named / measured.n, (double)missing / measured.n, (double)missing_bytes / measured.n);
    bool first = true;
    for (uint32_t b = 0; b < DF_BANDS; b++)
        if (by_band[b]) printf("%s\"df_2^%u\": %u", first ? "" : ", ", b, by_band[b]), first = false;
    printf("}, \"batch\": %lu, \"full_batches\": %u", batch, full_batches);
    if (full_batches) {
        qsort(batch_bytes, full_batches, sizeof *batch_bytes, by_value);
        printf(", \"missing_device_bytes_per_batch_median\": %llu, \"missing_device_bytes_per_batch_max\": %llu",
               (unsigned long long)batch_bytes[(full_batches - 1) / 2],
               (unsigned long long)batch_bytes[full_batches - 1]);
    }
    printf("}\n");
    free(counted_in);
    free(batch_bytes);
    free(namings);
    free(list_bytes);
    isn_searcher_free(s);
    isn_index_close(ix);
    return 0;
}
