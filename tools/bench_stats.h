/* Latency and outcome tallies of one isn-bench run, and their JSON form. Self-contained (linked
 * into every tool). */
#ifndef ISN_TOOLS_BENCH_STATS_H
#define ISN_TOOLS_BENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    /* outcomes of measured requests (scheduled after the warmup, before the end) */
    uint64_t scheduled;          /* requests the schedule asked for */
    uint64_t not_sent;           /* the client had no room (in-flight cap) or no connection */
    uint64_t ok, deadline_exceeded, shed, unavailable, other_status;
    uint64_t transport_errors;   /* no gRPC status: reset stream, lost connection */
    uint64_t client_timeouts;    /* no reply by deadline + grace: cancelled by the client */
    uint64_t partial;            /* OK with complete=false */
    uint64_t late;               /* OK but after the deadline */
    /* latencies of OK replies, microseconds */
    uint64_t *latency_us;
    size_t num_latencies, latency_cap;
    bool latency_overflow;       /* more answers than the cap: the tail of the array was dropped */
} bench_stats;

int bench_stats_init(bench_stats *stats, size_t latency_cap);
void bench_stats_free(bench_stats *stats);
void bench_stats_add_latency(bench_stats *stats, uint64_t us);

typedef struct {
    double p50, p90, p99, p999, mean, max; /* microseconds; 0 when nothing was answered */
} bench_percentiles;

/* Sorts the latencies in place. */
void bench_stats_percentiles(bench_stats *stats, bench_percentiles *out);

/* One JSON object (no newline). target_rate <= 0 for closed loop (concurrency is given instead). */
void bench_stats_write_json(FILE *out, bench_stats *stats, double target_rate, uint32_t concurrency,
                            double duration_s, uint32_t deadline_ms);

#endif
