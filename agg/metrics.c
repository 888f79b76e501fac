/* The aggregator's metrics and their Prometheus text (/metrics). */
#include "agg/agg_internal.h"

void agg_count_status(agg *a, int status) {
    a->metrics.requests_by_status[status >= 0 && status < GRPC_STATUS_COUNT ? status : GRPC_STATUS_INTERNAL]++;
}

void agg_observe_answer(agg *a, double seconds) { histogram_observe(&a->metrics.latency, seconds); }

/* One family with a sample per replica, labelled with its partition and address. */
typedef enum { REPLICA_UP, REPLICA_REQUESTS, REPLICA_FAILURES, REPLICA_HEDGES, REPLICA_LATENCY, REPLICA_EJECTIONS } replica_metric;

static const struct {
    const char *name, *type, *help;
} REPLICA_METRICS[] = {
    [REPLICA_UP] = {"isn_agg_replica_up", "gauge", "1 while the replica is in rotation."},
    [REPLICA_REQUESTS] = {"isn_agg_replica_requests_total", "counter", "Search requests sent to the replica (hedges included)."},
    [REPLICA_FAILURES] = {"isn_agg_replica_failures_total", "counter", "Failed requests of the replica."},
    [REPLICA_HEDGES] = {"isn_agg_replica_hedges_total", "counter", "Hedged requests sent to the replica."},
    [REPLICA_LATENCY] = {"isn_agg_replica_latency_ewma_seconds", "gauge", "Moving average of the replica's answer time."},
    [REPLICA_EJECTIONS] = {"isn_agg_replica_ejections_total", "counter", "Times the replica was taken out of rotation."},
};

static double replica_value(const agg_replica *r, replica_metric m) {
    switch (m) {
    case REPLICA_UP: return r->up;
    case REPLICA_REQUESTS: return (double)r->requests;
    case REPLICA_FAILURES: return (double)r->failures;
    case REPLICA_HEDGES: return (double)r->hedges;
    case REPLICA_LATENCY: return r->ewma_us / 1e6;
    case REPLICA_EJECTIONS: return (double)r->ejections;
    }
    return 0;
}

static void render_partitions(const agg *a, byte_buffer *out) {
    prom_family(out, "isn_agg_partition_p95_seconds", "gauge", "Recent p95 answer time per partition (the hedge delay).");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        buffer_printf(out, "isn_agg_partition_p95_seconds{partition=\"%u\"} %.6f\n", pi, a->partitions[pi].p95_us / 1e6);
    prom_family(out, "isn_agg_partition_missing_total", "counter", "Answers that lacked this partition.");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        buffer_printf(out, "isn_agg_partition_missing_total{partition=\"%u\"} %llu\n", pi,
                      (unsigned long long)a->partitions[pi].missing);
    for (replica_metric m = REPLICA_UP; m <= REPLICA_EJECTIONS; m++) {
        prom_family(out, REPLICA_METRICS[m].name, REPLICA_METRICS[m].type, REPLICA_METRICS[m].help);
        for (uint32_t pi = 0; pi < a->num_partitions; pi++)
            for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++) {
                const agg_replica *r = &a->partitions[pi].replicas[i];
                buffer_printf(out, "%s{partition=\"%u\",replica=\"%s\"} %.9g\n", REPLICA_METRICS[m].name, pi, r->address,
                              replica_value(r, m));
            }
    }
}

void agg_render_metrics(const agg *a, byte_buffer *out) {
    const agg_metrics *m = &a->metrics;
    prom_family(out, "isn_agg_requests_total", "counter", "Search/Info calls answered, by gRPC status.");
    for (int i = 0; i < GRPC_STATUS_COUNT; i++)
        if (m->requests_by_status[i] || i == 0)
            buffer_printf(out, "isn_agg_requests_total{code=\"%d\"} %llu\n", i, (unsigned long long)m->requests_by_status[i]);
    prom_u64(out, "isn_agg_partial_total", "counter", "Answers with complete=false (a partition missing or partial).",
             m->partial);
    prom_u64(out, "isn_agg_hedges_total", "counter", "Hedged requests sent.", m->hedges);
    prom_u64(out, "isn_agg_hedge_wins_total", "counter", "Hedged requests that answered first.", m->hedge_wins);
    prom_u64(out, "isn_agg_retries_total", "counter", "Requests resent to another replica after a failure.", m->retries);
    prom_u64(out, "isn_agg_upstream_requests_total", "counter", "Search requests sent to partitions.", m->upstream_requests);
    prom_u64(out, "isn_agg_upstream_failures_total", "counter",
             "Upstream requests that failed (transport, UNAVAILABLE, shed).", m->upstream_failures);
    prom_family(out, "isn_agg_global_stats_cache_total", "counter", "Global statistics lookups by result.");
    buffer_printf(out, "isn_agg_global_stats_cache_total{result=\"hit\"} %llu\n", (unsigned long long)m->stats_cache_hits);
    buffer_printf(out, "isn_agg_global_stats_cache_total{result=\"miss\"} %llu\n", (unsigned long long)m->stats_cache_misses);
    prom_u64(out, "isn_agg_inflight", "gauge", "Queries in progress.", a->num_queries);
    grpc_render_protection_metrics(a->server, a->stats, "isn_agg", out);
    prom_family(out, "isn_agg_latency_seconds", "histogram", "Search latency seen by the aggregator (answered queries).");
    prom_histogram(out, "isn_agg_latency_seconds", "", &m->latency);
    prom_family(out, "isn_agg_processing_seconds", "summary",
                "Time the aggregator thread itself spent per query (decode, fan-out, merge, encode).");
    buffer_printf(out, "isn_agg_processing_seconds_sum %.6f\nisn_agg_processing_seconds_count %llu\n", m->processing_sum_s,
                  (unsigned long long)m->processing_count);
    render_partitions(a, out);
}
