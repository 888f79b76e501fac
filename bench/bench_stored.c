/* What stored fields cost: their section's size against the raw text, and the fetch per query.
 * usage: bench_stored INDEX_DIR QUERIES.tsv [--fields title,...] [--k N] [--repeats N] [--plain DIR]
 *                     [--server HOST:PORT]
 * In process: each query's top k (first stage), then its hits' stored fields fetched and copied as
 * isnd does; per repeat, the fetch time per query and the search time per query of the same pass;
 * medians over the repeats (the first pass warms up and is not counted).
 * --server: the same queries through a running isnd serving INDEX_DIR, each asked without and with
 * the fields in turn (the order alternating), the server's own total time per request (StageTimes,
 * from headers received to reply ready) compared; medians over the repeats of the per-pass means.
 * --plain DIR: the same corpus built without --store, for the file-size comparison.
 * Prints one JSON object. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grpc/client.h"
#include "index/index.h"
#include "ranking/ranking.h"

#define MAX_REPEATS 64

typedef struct {
    const char *index_dir, *queries_path, *plain_dir, *server;
    const char *fields[ISN_MAX_FIELDS];
    uint32_t num_fields;
    uint32_t k, repeats;
} bench_args;

static uint64_t file_bytes(const char *dir) {
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) {
        fprintf(stderr, "bench_stored: %s\n", err);
        exit(1);
    }
    uint64_t bytes = isn_index_get_info(ix)->file_bytes;
    isn_index_close(ix);
    return bytes;
}

/* Raw text of the asked fields over every document, and the time of reading them all in doc order. */
static void scan_all(const isn_index *ix, const int *slots, uint32_t nf, void *scratch, uint64_t *raw, double *seconds) {
    const isn_index_info *info = isn_index_get_info(ix);
    isn_stored_text texts[ISN_MAX_FIELDS];
    char err[ISN_ERR_LEN];
    double start = isn_now_seconds();
    *raw = 0;
    for (uint32_t d = 0; d < info->num_docs; d++) {
        if (isn_index_stored_get(ix, d, scratch, texts, err, sizeof err) != 0) {
            fprintf(stderr, "bench_stored: %s\n", err);
            exit(1);
        }
        for (uint32_t j = 0; j < nf; j++) *raw += texts[slots[j]].len;
    }
    *seconds = isn_now_seconds() - start;
}

static int run_local(const bench_args *a, const isn_query_log *queries) {
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(a->index_dir, err, sizeof err);
    if (!ix) return fprintf(stderr, "bench_stored: %s\n", err), 1;
    const isn_index_info *info = isn_index_get_info(ix);
    int slots[ISN_MAX_FIELDS];
    for (uint32_t j = 0; j < a->num_fields; j++)
        if ((slots[j] = isn_index_stored_slot(ix, a->fields[j])) < 0)
            return fprintf(stderr, "bench_stored: %s does not store \"%s\"\n", a->index_dir, a->fields[j]), 1;
    void *scratch = malloc(isn_index_stored_scratch_bytes(ix));
    char *copy = malloc(isn_index_stored_scratch_bytes(ix) * a->k + 1); /* what isnd copies into the reply */
    isn_searcher *searcher = isn_searcher_new(ix);
    isn_hit *hits = malloc(a->k * sizeof *hits);
    if (!scratch || !copy || !searcher || !hits) return fprintf(stderr, "bench_stored: out of memory\n"), 1;
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = a->k;
    double fetch_us[MAX_REPEATS], search_us[MAX_REPEATS], ratio[MAX_REPEATS], hit_us[MAX_REPEATS];
    uint64_t hits_fetched = 0;
    for (uint32_t r = 0; r <= a->repeats; r++) {
        uint64_t search_ns = 0, fetch_ns = 0, fetched = 0;
        for (size_t q = 0; q < queries->count; q++) {
            const char *text = queries->queries[q].text;
            isn_query query;
            isn_search_stats stats;
            uint32_t n = 0;
            uint64_t t0 = isn_now_ns();
            if (isn_query_parse(searcher, text, strlen(text), &query, err, sizeof err) != 0 ||
                isn_search(searcher, &query, &options, hits, &n, &stats, err, sizeof err) != 0)
                n = 0;
            uint64_t t1 = isn_now_ns();
            size_t used = 0;
            for (uint32_t i = 0; i < n; i++) {
                isn_stored_text texts[ISN_MAX_FIELDS];
                if (isn_index_stored_get(ix, hits[i].doc, scratch, texts, err, sizeof err) != 0)
                    return fprintf(stderr, "bench_stored: %s\n", err), 1;
                for (uint32_t j = 0; j < a->num_fields; j++) {
                    memcpy(copy + used, texts[slots[j]].text, texts[slots[j]].len);
                    used += texts[slots[j]].len;
                }
            }
            uint64_t t2 = isn_now_ns();
            search_ns += t1 - t0;
            fetch_ns += t2 - t1;
            fetched += n;
        }
        if (r == 0) continue; /* warm-up */
        double nq = (double)queries->count;
        fetch_us[r - 1] = (double)fetch_ns / 1e3 / nq;
        search_us[r - 1] = (double)search_ns / 1e3 / nq;
        ratio[r - 1] = (double)fetch_ns / (double)search_ns;
        hit_us[r - 1] = fetched ? (double)fetch_ns / 1e3 / (double)fetched : 0;
        hits_fetched = fetched;
    }
    uint64_t raw;
    double scan_seconds;
    scan_all(ix, slots, a->num_fields, scratch, &raw, &scan_seconds);
    uint64_t section = 0;
    for (uint32_t s = 0; s < info->num_sections; s++)
        if (!strcmp(info->sections[s].name, "stored")) section = info->sections[s].bytes;
    printf("{\"benchmark\":\"stored_fields\",\"index\":\"%s\",\"docs\":%u,\"fields\":\"", a->index_dir, info->num_docs);
    for (uint32_t j = 0; j < a->num_fields; j++) printf("%s%s", j ? "," : "", a->fields[j]);
    printf("\",\"size\":{\"raw_text_bytes\":%llu,\"section_bytes\":%llu,\"compression_ratio\":%.3f,\"file_bytes\":%llu",
           (unsigned long long)raw, (unsigned long long)section, section ? (double)raw / (double)section : 0.0,
           (unsigned long long)info->file_bytes);
    if (a->plain_dir) {
        uint64_t plain = file_bytes(a->plain_dir);
        printf(",\"file_bytes_without\":%llu,\"file_growth\":%.4f", (unsigned long long)plain,
               (double)info->file_bytes / (double)plain - 1.0);
    }
    printf(",\"largest_block_bytes\":%zu},", isn_index_stored_scratch_bytes(ix) - 1);
    printf("\"in_process\":{\"queries\":%zu,\"k\":%u,\"repeats\":%u,\"hits_fetched_per_pass\":%llu,"
           "\"fetch_us_per_query_median\":%.3f,\"fetch_us_per_hit_median\":%.3f,\"search_us_per_query_median\":%.3f,"
           "\"fetch_over_search_median\":%.4f,\"scan_all_docs_ms\":%.1f}",
           queries->count, a->k, a->repeats, (unsigned long long)hits_fetched, bench_median(fetch_us, a->repeats),
           bench_median(hit_us, a->repeats), bench_median(search_us, a->repeats), bench_median(ratio, a->repeats), scan_seconds * 1e3);
    free(scratch);
    free(copy);
    free(hits);
    isn_searcher_free(searcher);
    isn_index_close(ix);
    return 0;
}

/* --server: per pass, the mean server total time without and with the fields. */
static int run_server(const bench_args *a, const isn_query_log *queries) {
    char err[ISN_ERR_LEN];
    isn_grpc_client *c = isn_grpc_connect(a->server, 5000, err, sizeof err);
    if (!c) return fprintf(stderr, "bench_stored: %s: %s\n", a->server, err), 1;
    double without_us[MAX_REPEATS], with_us[MAX_REPEATS], extra_us[MAX_REPEATS], reply_bytes[MAX_REPEATS];
    for (uint32_t r = 0; r <= a->repeats; r++) {
        double sum[2] = {0, 0}, bytes = 0;
        for (size_t q = 0; q < queries->count; q++) {
            for (int turn = 0; turn < 2; turn++) {
                int asked = (int)((q + r) % 2) ^ turn; /* alternate which goes first */
                isn_grpc_search_request rq = {.query = queries->queries[q].text, .k = a->k};
                if (asked) {
                    rq.stored_fields = a->fields;
                    rq.num_stored_fields = a->num_fields;
                }
                isn_grpc_search_reply reply;
                if (isn_grpc_search(c, &rq, &reply, err, sizeof err) != 0) return fprintf(stderr, "bench_stored: %s\n", err), 1;
                if (reply.status != 0 && reply.status != ISN_GRPC_STATUS_INVALID_ARGUMENT)
                    return fprintf(stderr, "bench_stored: status %d: %s\n", reply.status, reply.message), 1;
                sum[asked] += (double)reply.total_us;
                for (uint32_t i = 0; asked && i < reply.num_hits; i++)
                    for (uint32_t j = 0; j < reply.hits[i].num_fields; j++) bytes += (double)strlen(reply.hits[i].fields[j].value);
                isn_grpc_search_reply_free(&reply);
            }
        }
        if (r == 0) continue;
        double nq = (double)queries->count;
        without_us[r - 1] = sum[0] / nq;
        with_us[r - 1] = sum[1] / nq;
        extra_us[r - 1] = (sum[1] - sum[0]) / nq;
        reply_bytes[r - 1] = bytes / nq;
    }
    printf("\"through_isnd\":{\"server\":\"%s\",\"queries\":%zu,\"k\":%u,\"repeats\":%u,"
           "\"server_total_us_without_median\":%.2f,\"server_total_us_with_median\":%.2f,"
           "\"extra_us_per_query_median\":%.2f,\"stored_text_bytes_per_reply\":%.0f}",
           a->server, queries->count, a->k, a->repeats, bench_median(without_us, a->repeats), bench_median(with_us, a->repeats),
           bench_median(extra_us, a->repeats), bench_median(reply_bytes, a->repeats));
    isn_grpc_close(c);
    return 0;
}

int main(int argc, char **argv) {
    bench_args a = {.k = 10, .repeats = 7, .fields = {"title"}, .num_fields = 1};
    static const struct option opts[] = {{"fields", 1, 0, 'f'}, {"k", 1, 0, 'k'}, {"repeats", 1, 0, 'r'},
                                         {"plain", 1, 0, 'p'}, {"server", 1, 0, 's'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            a.num_fields = 0;
            for (char *name = strtok(optarg, ","); name && a.num_fields < ISN_MAX_FIELDS; name = strtok(NULL, ","))
                a.fields[a.num_fields++] = name;
            break;
        case 'k': a.k = (uint32_t)atoi(optarg); break;
        case 'r': a.repeats = (uint32_t)atoi(optarg); break;
        case 'p': a.plain_dir = optarg; break;
        case 's': a.server = optarg; break;
        default: return 2;
        }
    }
    if (optind + 2 != argc || a.k == 0 || a.k > ISN_MAX_K || a.repeats == 0 || a.repeats > MAX_REPEATS || !a.num_fields) {
        fprintf(stderr, "usage: bench_stored INDEX_DIR QUERIES.tsv [--fields a,b] [--k N] [--repeats 1..%d] [--plain DIR] "
                        "[--server HOST:PORT]\n", MAX_REPEATS);
        return 2;
    }
    a.index_dir = argv[optind];
    a.queries_path = argv[optind + 1];
    isn_query_log queries;
    char err[ISN_ERR_LEN];
    if (isn_query_log_read(a.queries_path, false, 0, &queries, err, sizeof err) != 0 || queries.count == 0)
        return fprintf(stderr, "bench_stored: %s: %s\n", a.queries_path, queries.count ? err : "no queries"), 1;
    int rc = run_local(&a, &queries);
    if (rc == 0 && a.server) {
        printf(",");
        rc = run_server(&a, &queries);
    }
    printf("}\n");
    isn_query_log_free(&queries);
    return rc;
}
