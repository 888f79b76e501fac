/* The aggregator's metrics and their Prometheus text (/metrics). */
#include "agg/agg_internal.h"

void agg_count_status(agg *a, int status) {
    a->metrics.requests_by_status[status >= 0 && status < ISN_GRPC_STATUS_COUNT ? status : ISN_GRPC_STATUS_INTERNAL]++;
}

uint64_t agg_answered(const agg *a) {
    uint64_t n = 0;
    for (int i = 0; i < ISN_GRPC_STATUS_COUNT; i++) n += a->metrics.requests_by_status[i];
    return n;
}

void agg_observe_answer(agg *a, double seconds) { histogram_observe(&a->metrics.latency, seconds); }

/* One family with a sample per replica, labelled with its partition and address. */
typedef enum {
    REPLICA_UP,
    REPLICA_REQUESTS,
    REPLICA_FAILURES,
    REPLICA_HEDGES,
    REPLICA_LATENCY,
    REPLICA_EJECTIONS,
    REPLICA_DRAINING,
    REPLICA_LEADS_BACK
} replica_metric;

static const struct {
    const char *name, *type, *help;
} REPLICA_METRICS[] = {
    [REPLICA_UP] = {"isn_agg_replica_up", "gauge", "1 while the replica is in rotation."},
    [REPLICA_REQUESTS] = {"isn_agg_replica_requests_total", "counter", "Search requests sent to the replica (hedges included)."},
    [REPLICA_FAILURES] = {"isn_agg_replica_failures_total", "counter", "Failed requests of the replica."},
    [REPLICA_HEDGES] = {"isn_agg_replica_hedges_total", "counter", "Hedged requests sent to the replica."},
    [REPLICA_LATENCY] = {"isn_agg_replica_latency_ewma_seconds", "gauge", "Moving average of the replica's answer time."},
    [REPLICA_EJECTIONS] = {"isn_agg_replica_ejections_total", "counter", "Times the replica was taken out of rotation."},
    [REPLICA_DRAINING] = {"isn_agg_replica_draining", "gauge",
                          "1 while DNS no longer names the replica and its calls in flight finish."},
    [REPLICA_LEADS_BACK] = {"isn_agg_replica_leads_back", "gauge",
                            "1 while the replica is out because it led a request back to this isn-agg (a loop)."},
};

static double replica_value(const agg_replica *r, replica_metric m) {
    switch (m) {
    case REPLICA_UP: return r->up;
    case REPLICA_REQUESTS: return (double)r->requests;
    case REPLICA_FAILURES: return (double)r->failures;
    case REPLICA_HEDGES: return (double)r->hedges;
    case REPLICA_LATENCY: return r->ewma_us / 1e6;
    case REPLICA_EJECTIONS: return (double)r->ejections;
    case REPLICA_DRAINING: return r->draining;
    case REPLICA_LEADS_BACK: return r->leads_back;
    }
    return 0;
}

static bool partition_covered(const agg_partition *p) {
    for (uint32_t i = 0; i < p->num_replicas; i++)
        if (p->replicas[i].up) return true;
    return false;
}

/* The dns: partitions: lookups, the addresses of the last answer, replicas added and removed. */
static void render_discovery(const agg *a, byte_buffer *out) {
    bool any = false;
    for (uint32_t pi = 0; pi < a->num_partitions && !any; pi++) any = a->partitions[pi].dns_name[0];
    if (!any) return;
    prom_family(out, "isn_agg_dns_lookups_total", "counter", "DNS lookups of a dns: partition's name, by result.");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        const agg_partition *p = &a->partitions[pi];
        if (!p->dns_name[0]) continue;
        buffer_printf(out, "isn_agg_dns_lookups_total{partition=\"%u\",result=\"ok\"} %llu\n", pi,
                      (unsigned long long)(p->dns_resolutions - p->dns_failures));
        buffer_printf(out, "isn_agg_dns_lookups_total{partition=\"%u\",result=\"failed\"} %llu\n", pi,
                      (unsigned long long)p->dns_failures);
    }
    prom_family(out, "isn_agg_dns_addresses", "gauge", "Addresses in the last DNS answer for a dns: partition's name.");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        if (a->partitions[pi].dns_name[0])
            buffer_printf(out, "isn_agg_dns_addresses{partition=\"%u\",name=\"%s\"} %u\n", pi, a->partitions[pi].dns_name,
                          a->partitions[pi].dns_addresses);
    prom_family(out, "isn_agg_dns_addresses_beyond_cap", "gauge",
                "Addresses of the last DNS answer that are not replicas: more than the cap per partition "
                "(isn_agg_partition_replica_cap), the rest chosen by rendezvous hashing.");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        if (a->partitions[pi].dns_name[0])
            buffer_printf(out, "isn_agg_dns_addresses_beyond_cap{partition=\"%u\"} %u\n", pi, a->partitions[pi].dns_beyond_cap);
    prom_u64(out, "isn_agg_partition_replica_cap", "gauge", "Replicas a partition may have at most (DNS or configuration).",
             AGG_MAX_REPLICAS);
    prom_family(out, "isn_agg_dns_replica_changes_total", "counter", "Replicas added and removed because DNS said so.");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        const agg_partition *p = &a->partitions[pi];
        if (!p->dns_name[0]) continue;
        buffer_printf(out, "isn_agg_dns_replica_changes_total{partition=\"%u\",change=\"added\"} %llu\n", pi,
                      (unsigned long long)p->replicas_added);
        buffer_printf(out, "isn_agg_dns_replica_changes_total{partition=\"%u\",change=\"removed\"} %llu\n", pi,
                      (unsigned long long)p->replicas_removed);
    }
    prom_family(out, "isn_agg_dns_last_change_timestamp_seconds", "gauge",
                "When DNS last added or removed a replica of the partition (Unix seconds; 0 = never).");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        if (a->partitions[pi].dns_name[0])
            buffer_printf(out, "isn_agg_dns_last_change_timestamp_seconds{partition=\"%u\"} %.3f\n", pi,
                          a->partitions[pi].dns_last_change);
}

static void render_partitions(const agg *a, byte_buffer *out) {
    prom_family(out, "isn_agg_partition_up", "gauge", "1 while the partition has a replica in rotation.");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        buffer_printf(out, "isn_agg_partition_up{partition=\"%u\"} %d\n", pi, partition_covered(&a->partitions[pi]));
    prom_family(out, "isn_agg_partition_p95_seconds", "gauge", "Recent p95 answer time per partition (the hedge delay).");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        buffer_printf(out, "isn_agg_partition_p95_seconds{partition=\"%u\"} %.6f\n", pi, a->partitions[pi].p95_us / 1e6);
    prom_family(out, "isn_agg_partition_extra_tokens", "gauge",
                "Retry and hedge budget of the partition: tokens its first requests earned (a retry or hedge spends one).");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        buffer_printf(out, "isn_agg_partition_extra_tokens{partition=\"%u\"} %.2f\n", pi, a->partitions[pi].extra_tokens);
    prom_family(out, "isn_agg_partition_extra_denied_total", "counter",
                "Retries and hedges not sent: the partition's budget had no token (extra_requests_ratio).");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        buffer_printf(out, "isn_agg_partition_extra_denied_total{partition=\"%u\",kind=\"hedge\"} %llu\n", pi,
                      (unsigned long long)a->partitions[pi].hedges_denied);
        buffer_printf(out, "isn_agg_partition_extra_denied_total{partition=\"%u\",kind=\"retry\"} %llu\n", pi,
                      (unsigned long long)a->partitions[pi].retries_denied);
    }
    prom_family(out, "isn_agg_partition_missing_total", "counter", "Answers that lacked this partition.");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        buffer_printf(out, "isn_agg_partition_missing_total{partition=\"%u\"} %llu\n", pi,
                      (unsigned long long)a->partitions[pi].missing);
    prom_family(out, "isn_agg_partition_replicas", "gauge", "Replicas known per partition (in rotation or out; not draining).");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        uint32_t known = 0;
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++)
            known += a->partitions[pi].replicas[i].address[0] && !a->partitions[pi].replicas[i].draining;
        buffer_printf(out, "isn_agg_partition_replicas{partition=\"%u\"} %u\n", pi, known);
    }
    prom_family(out, "isn_agg_replica_generation_info", "gauge",
                "The index generation the replica's last reply named (value 1; none before its first reply).");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++) {
            const agg_replica *r = &a->partitions[pi].replicas[i];
            if (r->address[0] && r->generation[0])
                buffer_printf(out, "isn_agg_replica_generation_info{partition=\"%u\",replica=\"%s\",generation=\"%s\"} 1\n",
                              pi, r->address, r->generation);
        }
    prom_family(out, "isn_agg_partition_generations_settled", "gauge",
                "1 while the partition's replicas in rotation name one index generation (global statistics cached).");
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        buffer_printf(out, "isn_agg_partition_generations_settled{partition=\"%u\"} %d\n", pi, agg_partition_settled(a, pi));
    render_discovery(a, out);
    for (replica_metric m = REPLICA_UP; m <= REPLICA_LEADS_BACK; m++) {
        prom_family(out, REPLICA_METRICS[m].name, REPLICA_METRICS[m].type, REPLICA_METRICS[m].help);
        for (uint32_t pi = 0; pi < a->num_partitions; pi++)
            for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++) {
                const agg_replica *r = &a->partitions[pi].replicas[i];
                if (!r->address[0]) continue; /* a slot freed by DNS discovery */
                buffer_printf(out, "%s{partition=\"%u\",replica=\"%s\"} %.9g\n", REPLICA_METRICS[m].name, pi, r->address,
                              replica_value(r, m));
            }
    }
}

void agg_render_metrics(const agg *a, byte_buffer *out) {
    const agg_metrics *m = &a->metrics;
    prom_family(out, "isn_agg_requests_total", "counter", "Search/Info/Health calls answered, by gRPC status code name.");
    for (int i = 0; i < ISN_GRPC_STATUS_COUNT; i++)
        if (m->requests_by_status[i] || i == 0)
            buffer_printf(out, "isn_agg_requests_total{code=\"%s\"} %llu\n", isn_grpc_status_name(i),
                          (unsigned long long)m->requests_by_status[i]);
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
    prom_u64(out, "isn_agg_partition_generation_changes_total", "counter",
             "Times a replica's replies named another index generation than its last ones.", m->generation_changes);
    prom_u64(out, "isn_agg_inflight", "gauge", "Queries in progress.", a->num_queries);
    isn_grpc_render_protection_metrics(a->server, a->stats, "isn_agg", out);
    isn_grpc_tls_render_metrics("isn_agg", a->grpc_tls, a->stats_tls, out);
    prom_family(out, "isn_agg_latency_seconds", "histogram", "Search latency seen by the aggregator (answered queries).");
    prom_histogram(out, "isn_agg_latency_seconds", "", &m->latency);
    prom_family(out, "isn_agg_processing_seconds", "histogram",
                "Time the aggregator thread itself spent per query (decode, fan-out, merge, encode).");
    prom_histogram(out, "isn_agg_processing_seconds", "", &m->processing);
    prom_family(out, "isn_agg_send_seconds_total", "counter",
                "Time the aggregator thread spent handing queued requests to the replica connections.");
    buffer_printf(out, "isn_agg_send_seconds_total %.6f\n", m->send_seconds);
    char why[512];
    prom_u64(out, "isn_agg_ready", "gauge", "1 while ready: enough partitions have a healthy replica (ready_coverage).",
             agg_ready(a, why, sizeof why));
    uint32_t covered = 0;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) covered += partition_covered(&a->partitions[pi]);
    prom_u64(out, "isn_agg_partitions", "gauge", "Partitions configured.", a->num_partitions);
    prom_u64(out, "isn_agg_partitions_covered", "gauge", "Partitions with at least one replica in rotation.", covered);
    prom_u64(out, "isn_agg_reloads_total", "counter", "SIGHUP reloads applied.", m->reloads);
    prom_u64(out, "isn_agg_shed_at_capacity_total", "counter",
             "Queries refused whole (RESOURCE_EXHAUSTED) because every replica of a partition had "
             "max_inflight_per_replica requests in flight.",
             m->shed_at_capacity);
    prom_u64(out, "isn_agg_over_budget_total", "counter",
             "Queries and partition answers refused: the aggregator's memory budget (memory_budget_mib) was full.",
             m->over_budget);
    prom_u64(out, "isn_agg_loop_refusals_total", "counter",
             "Searches refused as request loops (this isn-agg already on their isn-via path, or too many hops).",
             m->loop_refusals);
    prom_u64(out, "isn_agg_health_watchers", "gauge", "Open Health/Watch streams.", isn_grpc_health_num_watchers(a->watchers));
    render_partitions(a, out);
    isn_grpc_render_process_metrics(out, a->start_time);
    prom_family(out, "isn_build_info", "gauge", "The program, its version and what it serves (value 1).");
    buffer_printf(out, "isn_build_info{program=\"isn-agg\",version=\"%s\",partitions=\"%u\"} 1\n", AGG_VERSION,
                  a->num_partitions);
}
