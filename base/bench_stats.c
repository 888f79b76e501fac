/* A benchmark run's tallies (isn-bench): see base.h. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int bench_stats_init(bench_stats *stats, size_t latency_cap) {
    memset(stats, 0, sizeof *stats);
    stats->latency_cap = latency_cap ? latency_cap : 1;
    stats->latency_us = malloc(stats->latency_cap * sizeof *stats->latency_us);
    stats->shed_latency_us = malloc(stats->latency_cap * sizeof *stats->shed_latency_us);
    stats->shed_from_send_us = malloc(stats->latency_cap * sizeof *stats->shed_from_send_us);
    stats->send_lag_us = malloc(stats->latency_cap * sizeof *stats->send_lag_us);
    stats->receive_lag_us = malloc(stats->latency_cap * sizeof *stats->receive_lag_us);
    return stats->latency_us && stats->shed_latency_us && stats->shed_from_send_us && stats->send_lag_us &&
                   stats->receive_lag_us
               ? 0
               : -1;
}

void bench_stats_free(bench_stats *stats) {
    free(stats->latency_us);
    free(stats->shed_latency_us);
    free(stats->shed_from_send_us);
    free(stats->send_lag_us);
    free(stats->receive_lag_us);
    stats->latency_us = stats->shed_latency_us = stats->shed_from_send_us = stats->send_lag_us = stats->receive_lag_us =
        NULL;
}

/* One sample into one of the arrays of latency_cap; past the cap it is dropped, and said. */
static void add_sample(bench_stats *stats, uint64_t *samples, size_t *count, uint64_t us) {
    if (*count < stats->latency_cap) samples[(*count)++] = us;
    else stats->latency_overflow = true;
}

void bench_stats_add_send_lag(bench_stats *stats, uint64_t us) {
    add_sample(stats, stats->send_lag_us, &stats->num_send_lags, us);
}

void bench_stats_add_shed_from_send(bench_stats *stats, uint64_t us) {
    add_sample(stats, stats->shed_from_send_us, &stats->num_shed_from_send, us);
}

void bench_stats_add_receive_lag(bench_stats *stats, uint64_t us) {
    add_sample(stats, stats->receive_lag_us, &stats->num_receive_lags, us);
}

static void add_shed_latency(bench_stats *stats, uint64_t us) {
    add_sample(stats, stats->shed_latency_us, &stats->num_shed_latencies, us);
}

void bench_stats_timeline_add(bench_stats *stats, int64_t since_start_ns) {
    if (since_start_ns < 0) return;
    int64_t bucket = since_start_ns / BENCH_TIMELINE_NS;
    if (bucket >= BENCH_TIMELINE_BUCKETS) return;
    stats->timeline[bucket]++;
    if ((size_t)bucket + 1 > stats->timeline_len) stats->timeline_len = (size_t)bucket + 1;
}

uint64_t bench_stats_on_time(const bench_stats *stats) {
    uint64_t bad = stats->late + stats->partial;
    return bad <= stats->ok ? stats->ok - bad : 0;
}

double bench_stats_worst_bucket_share(const bench_stats *stats) {
    if (stats->timeline_len < 3) return 1.0;
    size_t n = stats->timeline_len - 1;
    uint64_t sum = 0, least = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        sum += stats->timeline[i];
        if (stats->timeline[i] < least) least = stats->timeline[i];
    }
    return sum ? (double)least * (double)n / (double)sum : 0.0;
}

void bench_stats_merge(bench_stats *sum, const bench_stats *st) {
    sum->scheduled += st->scheduled;
    sum->not_sent += st->not_sent;
    sum->client_refused += st->client_refused;
    sum->refused_streams += st->refused_streams;
    sum->client_refused_no_room += st->client_refused_no_room;
    sum->ok += st->ok;
    sum->deadline_exceeded += st->deadline_exceeded;
    sum->shed += st->shed;
    sum->unavailable += st->unavailable;
    sum->other_status += st->other_status;
    sum->invalid_argument += st->invalid_argument;
    sum->transport_errors += st->transport_errors;
    sum->client_timeouts += st->client_timeouts;
    sum->partial += st->partial;
    sum->late += st->late;
    sum->generator_cpu_ns += st->generator_cpu_ns;
    sum->generator_wall_ns += st->generator_wall_ns;
    for (size_t j = 0; j < st->num_latencies; j++) bench_stats_add_latency(sum, st->latency_us[j]);
    for (size_t j = 0; j < st->num_shed_latencies; j++) add_shed_latency(sum, st->shed_latency_us[j]);
    for (size_t j = 0; j < st->num_shed_from_send; j++) bench_stats_add_shed_from_send(sum, st->shed_from_send_us[j]);
    for (size_t j = 0; j < st->num_send_lags; j++) bench_stats_add_send_lag(sum, st->send_lag_us[j]);
    for (size_t j = 0; j < st->num_receive_lags; j++) bench_stats_add_receive_lag(sum, st->receive_lag_us[j]);
    sum->arrivals_unknown += st->arrivals_unknown;
    sum->latency_overflow |= st->latency_overflow;
    for (size_t b = 0; b < st->timeline_len; b++) sum->timeline[b] += st->timeline[b];
    if (st->timeline_len > sum->timeline_len) sum->timeline_len = st->timeline_len;
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
    case 3: stats->invalid_argument++; break;
    case 4: stats->deadline_exceeded++; break;
    case 8:
        stats->shed++;
        add_shed_latency(stats, latency_us);
        break;
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

static void percentiles_of(uint64_t *values, size_t n, bench_percentiles *out) {
    memset(out, 0, sizeof *out);
    if (n == 0) return;
    qsort(values, n, sizeof *values, compare_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)values[i];
    out->mean = sum / (double)n;
    out->max = (double)values[n - 1];
    out->p50 = nearest_rank(values, n, 0.50);
    out->p90 = nearest_rank(values, n, 0.90);
    out->p99 = nearest_rank(values, n, 0.99);
    out->p999 = nearest_rank(values, n, 0.999);
}

void bench_stats_percentiles(bench_stats *stats, bench_percentiles *out) {
    percentiles_of(stats->latency_us, stats->num_latencies, out);
}

static double ratio(uint64_t part, uint64_t whole) { return whole ? (double)part / (double)whole : 0.0; }

void bench_stats_write_json(FILE *out, bench_stats *stats, double target_rate, uint32_t concurrency,
                            double duration_s, uint32_t deadline_ms) {
    bench_percentiles p;
    bench_stats_percentiles(stats, &p);
    uint64_t sent = stats->scheduled - stats->not_sent - stats->client_refused;
    uint64_t misses = stats->late + stats->deadline_exceeded + stats->client_timeouts;
    if (target_rate > 0) fprintf(out, "{\"target_rate\":%.1f,", target_rate);
    else fprintf(out, "{\"concurrency\":%u,", concurrency);
    fprintf(out,
            "\"duration_s\":%.3f,\"deadline_ms\":%u,\"scheduled\":%llu,\"sent\":%llu,\"not_sent\":%llu,\"client_refused\":%llu,\"client_refused_no_room\":%llu,"
            "\"offered_rate\":%.1f,\"throughput\":%.1f,"
            "\"latency_us\":{\"p50\":%.0f,\"p90\":%.0f,\"p99\":%.0f,\"p999\":%.0f,\"mean\":%.1f,\"max\":%.0f,"
            "\"samples\":%zu,\"truncated\":%s},"
            "\"status\":{\"ok\":%llu,\"deadline_exceeded\":%llu,\"resource_exhausted\":%llu,\"unavailable\":%llu,"
            "\"invalid_argument\":%llu,\"other\":%llu,\"transport_error\":%llu,\"refused_stream\":%llu,\"client_timeout\":%llu},"
            "\"partial\":%llu,\"partial_rate\":%.6f,\"late\":%llu,\"deadline_miss\":%llu,\"deadline_miss_rate\":%.6f,"
            "\"error_rate\":%.6f,",
            duration_s, deadline_ms, (unsigned long long)stats->scheduled, (unsigned long long)sent,
            (unsigned long long)stats->not_sent, (unsigned long long)stats->client_refused,
            (unsigned long long)stats->client_refused_no_room, duration_s > 0 ? (double)stats->scheduled / duration_s : 0.0,
            duration_s > 0 ? (double)stats->ok / duration_s : 0.0, p.p50, p.p90, p.p99, p.p999, p.mean, p.max,
            stats->num_latencies, stats->latency_overflow ? "true" : "false", (unsigned long long)stats->ok,
            (unsigned long long)stats->deadline_exceeded, (unsigned long long)stats->shed,
            (unsigned long long)stats->unavailable, (unsigned long long)stats->invalid_argument,
            (unsigned long long)stats->other_status,
            (unsigned long long)stats->transport_errors, (unsigned long long)stats->refused_streams,
            (unsigned long long)stats->client_timeouts,
            (unsigned long long)stats->partial, ratio(stats->partial, stats->ok), (unsigned long long)stats->late,
            (unsigned long long)misses, ratio(misses, sent),
            ratio(sent - stats->ok, sent));
    bench_percentiles shed, shed_from_send, lag, receive;
    percentiles_of(stats->shed_latency_us, stats->num_shed_latencies, &shed);
    percentiles_of(stats->shed_from_send_us, stats->num_shed_from_send, &shed_from_send);
    percentiles_of(stats->send_lag_us, stats->num_send_lags, &lag);
    percentiles_of(stats->receive_lag_us, stats->num_receive_lags, &receive);
    fprintf(out,
            "\"on_time\":%llu,\"on_time_per_s\":%.1f,\"shed_latency_us\":{\"p50\":%.0f,\"p99\":%.0f,\"max\":%.0f,"
            "\"samples\":%zu},\"shed_from_send_us\":{\"p50\":%.0f,\"p99\":%.0f,\"max\":%.0f,\"samples\":%zu},"
            "\"send_lag_us\":{\"p50\":%.0f,\"p99\":%.0f,\"max\":%.0f,\"samples\":%zu},"
            "\"receive_lag_us\":{\"p50\":%.0f,\"p99\":%.0f,\"max\":%.0f,\"samples\":%zu},\"arrivals_unknown\":%llu,"
            "\"generator_busy\":%.3f,\"timeline_ms\":%lld,\"on_time_timeline\":[",
            (unsigned long long)bench_stats_on_time(stats),
            duration_s > 0 ? (double)bench_stats_on_time(stats) / duration_s : 0.0, shed.p50, shed.p99, shed.max,
            stats->num_shed_latencies, shed_from_send.p50, shed_from_send.p99, shed_from_send.max,
            stats->num_shed_from_send, lag.p50, lag.p99, lag.max, stats->num_send_lags, receive.p50, receive.p99,
            receive.max, stats->num_receive_lags, (unsigned long long)stats->arrivals_unknown,
            ratio(stats->generator_cpu_ns, stats->generator_wall_ns),
            (long long)(BENCH_TIMELINE_NS / 1000000));
    for (size_t b = 0; b < stats->timeline_len; b++) fprintf(out, "%s%u", b ? "," : "", stats->timeline[b]);
    fprintf(out, "]}");
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *values, size_t n) {
    qsort(values, n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}
