/* A benchmark run's tallies (isn-bench): see base.h. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int bench_stats_init(bench_stats *stats, size_t latency_cap) {
    memset(stats, 0, sizeof *stats);
    stats->latency_cap = latency_cap ? latency_cap : 1;
    stats->latency_us = malloc(stats->latency_cap * sizeof *stats->latency_us);
    return stats->latency_us ? 0 : -1;
}

void bench_stats_free(bench_stats *stats) {
    free(stats->latency_us);
    stats->latency_us = NULL;
}

void bench_stats_add_latency(bench_stats *stats, uint64_t us) {
    if (stats->num_latencies < stats->latency_cap) stats->latency_us[stats->num_latencies++] = us;
    else stats->latency_overflow = true;
}

void bench_stats_record(bench_stats *stats, int status, bool complete, uint64_t latency_us, uint64_t deadline_us) {
    if (status < 0) {
        stats->transport_errors++;
        return;
    }
    switch (status) {
    case 0:
        stats->ok++;
        bench_stats_add_latency(stats, latency_us);
        if (!complete) stats->partial++;
        if (latency_us > deadline_us) stats->late++;
        break;
    case 4: stats->deadline_exceeded++; break;
    case 8: stats->shed++; break;
    case 14: stats->unavailable++; break;
    default: stats->other_status++; break;
    }
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest value with at least p of the sample at or below it. */
static double nearest_rank(const uint64_t *sorted, size_t n, double p) {
    if (n == 0) return 0;
    size_t rank = (size_t)(p * (double)n + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return (double)sorted[rank - 1];
}

void bench_stats_percentiles(bench_stats *stats, bench_percentiles *out) {
    memset(out, 0, sizeof *out);
    size_t n = stats->num_latencies;
    if (n == 0) return;
    qsort(stats->latency_us, n, sizeof *stats->latency_us, compare_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)stats->latency_us[i];
    out->mean = sum / (double)n;
    out->max = (double)stats->latency_us[n - 1];
    out->p50 = nearest_rank(stats->latency_us, n, 0.50);
    out->p90 = nearest_rank(stats->latency_us, n, 0.90);
    out->p99 = nearest_rank(stats->latency_us, n, 0.99);
    out->p999 = nearest_rank(stats->latency_us, n, 0.999);
}

static double ratio(uint64_t part, uint64_t whole) { return whole ? (double)part / (double)whole : 0.0; }

void bench_stats_write_json(FILE *out, bench_stats *stats, double target_rate, uint32_t concurrency,
                            double duration_s, uint32_t deadline_ms) {
    bench_percentiles p;
    bench_stats_percentiles(stats, &p);
    uint64_t sent = stats->scheduled - stats->not_sent;
    uint64_t misses = stats->late + stats->deadline_exceeded + stats->client_timeouts;
    if (target_rate > 0) fprintf(out, "{\"target_rate\":%.1f,", target_rate);
    else fprintf(out, "{\"concurrency\":%u,", concurrency);
    fprintf(out,
            "\"duration_s\":%.3f,\"deadline_ms\":%u,\"scheduled\":%llu,\"sent\":%llu,\"not_sent\":%llu,"
            "\"offered_rate\":%.1f,\"throughput\":%.1f,"
            "\"latency_us\":{\"p50\":%.0f,\"p90\":%.0f,\"p99\":%.0f,\"p999\":%.0f,\"mean\":%.1f,\"max\":%.0f,"
            "\"samples\":%zu,\"truncated\":%s},"
            "\"status\":{\"ok\":%llu,\"deadline_exceeded\":%llu,\"resource_exhausted\":%llu,\"unavailable\":%llu,"
            "\"other\":%llu,\"transport_error\":%llu,\"client_timeout\":%llu},"
            "\"partial\":%llu,\"partial_rate\":%.6f,\"late\":%llu,\"deadline_miss\":%llu,\"deadline_miss_rate\":%.6f,"
            "\"error_rate\":%.6f}",
            duration_s, deadline_ms, (unsigned long long)stats->scheduled, (unsigned long long)sent,
            (unsigned long long)stats->not_sent, duration_s > 0 ? (double)stats->scheduled / duration_s : 0.0,
            duration_s > 0 ? (double)stats->ok / duration_s : 0.0, p.p50, p.p90, p.p99, p.p999, p.mean, p.max,
            stats->num_latencies, stats->latency_overflow ? "true" : "false", (unsigned long long)stats->ok,
            (unsigned long long)stats->deadline_exceeded, (unsigned long long)stats->shed,
            (unsigned long long)stats->unavailable, (unsigned long long)stats->other_status,
            (unsigned long long)stats->transport_errors, (unsigned long long)stats->client_timeouts,
            (unsigned long long)stats->partial, ratio(stats->partial, stats->ok), (unsigned long long)stats->late,
            (unsigned long long)misses, ratio(misses, sent),
            ratio(sent - stats->ok, sent));
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *values, size_t n) {
    qsort(values, n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}
