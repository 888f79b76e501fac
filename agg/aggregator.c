/* The aggregator's life: replica state from the configuration, partition sizes at start, drain. */
#include <stdlib.h>

#include "agg/agg_internal.h"

agg *agg_new(uv_loop_t *loop, const agg_config *config, char *err, size_t err_len) {
    agg *a = calloc(1, sizeof *a);
    if (!a) {
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    a->loop = loop;
    a->config = *config;
    agg_partitions_init(a);
    if (agg_stats_cache_init(&a->stats_cache) != 0) {
        free(a);
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    return a;
}

void agg_fail_all(agg *a, int grpc_status, const char *message) {
    while (a->queries) {
        if (a->queries->call) agg_query_fail(a, a->queries, grpc_status, message);
        agg_query_free(a, a->queries);
    }
}

/* The loop's handles of the aggregator must be closed (agg_drain, then uv_run returned). */
void agg_free(agg *a) {
    if (!a) return;
    agg_fail_all(a, GRPC_STATUS_UNAVAILABLE, "aggregator stopping");
    agg_replicas_close(a);
    if (a->server) grpc_server_free(a->server);
    if (a->stats) grpc_stats_server_free(a->stats);
    agg_stats_cache_free(&a->stats_cache);
    free(a);
}

const agg_config *agg_get_config(const agg *a) { return &a->config; }

uint32_t agg_inflight(const agg *a) { return a->num_queries; }

void agg_fetch_partition_info(agg *a) {
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_partition *p = &a->partitions[pi];
        for (uint32_t i = 0; i < p->num_replicas && !p->have_info; i++) {
            agg_replica *r = &p->replicas[i];
            if (!agg_replica_connect(a, r)) {
                agg_replica_eject(a, r, "cannot connect at start");
                continue;
            }
            isn_grpc_info_reply info;
            char err[256];
            if (isn_grpc_info(r->client, NULL, 0, false, &info, err, sizeof err) == 0 && info.status == 0) {
                p->num_docs = info.num_docs;
                p->total_doc_len = info.total_doc_len;
                p->have_info = true;
                log_info("partition %u: %llu documents (from %s)", pi, (unsigned long long)info.num_docs, r->address);
            }
            isn_grpc_info_reply_free(&info);
        }
        if (!p->have_info) log_warn("partition %u: no replica answered Info yet", pi);
    }
}
