/* What the per-client protections did, in Prometheus text, for isnd's and isn-agg's /metrics. */
#include <stdio.h>

#include "base/base.h"
#include "grpc/stats_endpoint.h"

static void counter(byte_buffer *out, const char *prefix, const char *name, const char *type, const char *help,
                    uint64_t value) {
    char full[128];
    snprintf(full, sizeof full, "%s_%s", prefix, name);
    prom_u64(out, full, type, help, value);
}

void isn_grpc_render_protection_metrics(const isn_grpc_server *server, const isn_grpc_stats_server *stats, const char *prefix,
                                    byte_buffer *out) {
    isn_grpc_server_counters counters = {0};
    if (server) isn_grpc_server_add_counters(server, &counters);
    isn_grpc_render_protection_counters(server ? &counters : NULL, stats, prefix, out);
}

void isn_grpc_render_protection_counters(const isn_grpc_server_counters *c, const isn_grpc_stats_server *stats, const char *prefix,
                                     byte_buffer *out) {
    if (c) {
        counter(out, prefix, "connections_evicted_total", "counter",
                "Idle gRPC connections closed to make room at max_connections.", c->connections_evicted);
        counter(out, prefix, "write_timeouts_total", "counter",
                "gRPC connections closed because their client did not read what it was sent.", c->write_timeouts);
        counter(out, prefix, "reset_floods_total", "counter",
                "gRPC connections closed for resetting too many streams before their reply (rapid reset).",
                c->reset_floods);
        counter(out, prefix, "reset_floods_held_total", "counter",
                "Of the connections closed for rapid reset, those held unread for server.reset_hold before their GOAWAY.",
                c->reset_floods_held);
        counter(out, prefix, "streams_refused_total", "counter",
                "Streams refused: requests in flight on the connection, or the memory budget, at the limit.",
                c->streams_refused);
        /* isn_stream_limit_lowered_total (isnd), isn_agg_stream_limit_lowered_total (isn-agg) */
        counter(out, prefix, "stream_limit_lowered_total", "counter",
                "Windows in which a saturated serving loop (bytes waiting in its sockets) lowered the streams each "
                "connection may open.",
                c->stream_limit_lowered);
        counter(out, prefix, "stream_limit", "gauge",
                "Streams per connection the serving loops allow now, summed over the loops (max_concurrent_streams "
                "each, lowered while a loop is saturated).",
                c->stream_limit);
        counter(out, prefix, "connections_over_budget_total", "counter",
                "New gRPC connections sent GOAWAY at once: the memory budget had no room for another.",
                c->connections_over_budget);
        counter(out, prefix, "header_lists_too_large_total", "counter",
                "Requests reset for a header list over max_header_list_size.", c->header_lists_too_large);
        counter(out, prefix, "over_memory_budget_total", "counter",
                "Requests, request bodies and replies answered RESOURCE_EXHAUSTED by the memory budget.",
                c->over_budget);
        counter(out, prefix, "request_memory_bytes", "gauge",
                "Memory held by connections (nghttp2 included), calls, request bodies and replies (charged to the budget).",
                c->memory_used);
        counter(out, prefix, "request_memory_pooled_bytes", "gauge",
                "Of the memory charged, what pooled calls keep for their next use (given way to requests).",
                c->memory_pooled);
        counter(out, prefix, "request_memory_budget_bytes", "gauge", "The memory budget.", c->memory_budget);
    }
    if (stats) {
        const isn_grpc_stats_counters *sc = isn_grpc_stats_server_get_counters(stats);
        counter(out, prefix, "stats_connections_rejected_total", "counter",
                "Stats connections closed at once: the stats port's limit reached with none idle.",
                sc->connections_rejected);
        counter(out, prefix, "stats_connections_evicted_total", "counter",
                "Idle stats connections closed to make room at the stats port's limit.", sc->connections_evicted);
    }
}
