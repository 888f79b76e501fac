/* The sustained rate of DESIGN.md section 7, found with the load generator: the highest offered rate
 * at which every one of the repeated open-loop runs keeps p99 under the deadline and misses (late,
 * partial, shed, deadline exceeded, errors, not sent) under a share of the scheduled requests; found
 * by halving from the most until a rate passes, then bisecting to the resolution (isn-bench
 * --sustained). */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>

#include "grpc/client.h"


typedef struct {
    double rate, p50_ms, p99_ms, misses, on_time_per_s;
    /* what the misses were: a run that fails at a rate far below the ones that pass is told apart by
     * these (a stall: late answers and a low worst bucket; the loops' stream limit: not sent) */
    uint64_t late, partial, shed, deadline_exceeded, not_sent, timeouts, errors;
    double worst_bucket; /* the fewest on-time answers in a 100-ms bucket, as a share of the run's mean */
    bool pass;
} probe_run;

/* Everything that is not an on-time, complete answer, as a share of the scheduled requests. */
static double miss_share(const bench_stats *st) {
    /* a malformed query's INVALID_ARGUMENT is its answer: it is neither served nor missed */
    uint64_t asked = st->scheduled - (st->invalid_argument <= st->scheduled ? st->invalid_argument : st->scheduled);
    if (asked == 0) return 1.0;
    uint64_t good = st->ok - (st->late + st->partial <= st->ok ? st->late + st->partial : st->ok);
    return 1.0 - (double)good / (double)asked;
}

/* One open-loop run at `rate`; false when out of memory. */
static bool measure_once(isn_load *load, const isn_load_search *search, double rate, probe_run *out) {
    const isn_load_config *a = isn_load_config_of(load);
    bench_stats stats;
    if (isn_load_run(load, rate, 0, &stats) != 0) return false;
    bench_percentiles p;
    bench_stats_percentiles(&stats, &p);
    out->rate = rate;
    out->p50_ms = p.p50 / 1000.0;
    out->p99_ms = p.p99 / 1000.0;
    out->misses = miss_share(&stats);
    out->on_time_per_s = (double)bench_stats_on_time(&stats) / a->duration_s;
    out->late = stats.late;
    out->partial = stats.partial;
    out->shed = stats.shed;
    out->deadline_exceeded = stats.deadline_exceeded;
    out->not_sent = stats.not_sent;
    out->timeouts = stats.client_timeouts;
    out->errors = stats.unavailable + stats.other_status + stats.transport_errors;
    out->worst_bucket = bench_stats_worst_bucket_share(&stats);
    out->pass = stats.ok > 0 && out->p99_ms < a->deadline_ms && out->misses < search->max_misses;
    bench_stats_free(&stats);
    return true;
}

#define MAX_PROBES 64

/* Every repeat at `rate` must pass; stops at the first that does not. The last run is kept in *last. */
static int probe_rate(isn_load *load, const isn_load_search *search, double rate, probe_run *last, FILE *table) {
    for (uint32_t i = 0; i < search->repeats; i++) {
        if (!measure_once(load, search, rate, last)) return -1;
        fprintf(table, "%-12s %12.1f %6u %10.3f %10.3f %9.4f%% %14.1f %6.2f  %s", search->label, rate, i + 1,
                last->p50_ms, last->p99_ms, 100.0 * last->misses, last->on_time_per_s, last->worst_bucket,
                last->pass ? "pass" : "FAIL");
        if (last->misses > 0)
            fprintf(table, " (late %llu, partial %llu, shed %llu, deadline exceeded %llu, not sent %llu, timeouts %llu, "
                    "errors %llu)", (unsigned long long)last->late, (unsigned long long)last->partial,
                    (unsigned long long)last->shed, (unsigned long long)last->deadline_exceeded,
                    (unsigned long long)last->not_sent, (unsigned long long)last->timeouts,
                    (unsigned long long)last->errors);
        fputc('\n', table);
        fflush(table);
        if (!last->pass) return 0;
    }
    return 1;
}

/* One search's state: bisection (geometric) between the highest rate that held and the lowest that did not. */
typedef struct {
    probe_run probes[MAX_PROBES], best;
    size_t n;
    double pass, fail, rate;
    bool done;
} search_state;

/* Probes the search's next rate and moves it on; -1 when out of memory. */
static int search_step(isn_load *load, const isn_load_search *a, search_state *st, FILE *table) {
    probe_run last;
    int ok = probe_rate(load, a, st->rate, &last, table);
    if (ok < 0) return -1;
    st->probes[st->n++] = last;
    if (ok) {
        st->pass = st->rate;
        st->best = last;
    } else {
        st->fail = st->rate;
    }
    if (st->n == MAX_PROBES || st->pass == a->max_rate) { /* the ceiling itself holds */
        st->done = true;
    } else if (st->pass == 0) {
        if (st->rate < a->max_rate / 1024) st->done = true; /* nothing holds */
        else st->rate /= 2;
    } else if (st->fail / st->pass <= 1.0 + a->resolution) {
        st->done = true;
    } else {
        st->rate = sqrt(st->pass * st->fail);
    }
    return 0;
}

static void write_search(const isn_load_config *c, const isn_load_search *a, const search_state *st, uint32_t index,
                         FILE *out, FILE *table) {
    const probe_run *best = &st->best;
    fprintf(out, "{\"label\":\"%s\",\"target\":\"%s\",\"deadline_ms\":%u,\"repeats\":%u,\"max_misses\":%g,"
           "\"search\":%u,\"searches\":%u,"
           "\"sustained\":{\"rate\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"misses\":%.6f,\"on_time_per_s\":%.1f,"
           "\"at_ceiling\":%s},\"probes\":[",
           a->label, c->target, c->deadline_ms, a->repeats, a->max_misses, index + 1, a->searches ? a->searches : 1,
           st->pass, best->p50_ms, best->p99_ms, best->misses, best->on_time_per_s,
           st->pass == a->max_rate ? "true" : "false");
    for (size_t i = 0; i < st->n; i++) {
        const probe_run *p = &st->probes[i];
        fprintf(out, "%s{\"rate\":%.1f,\"pass\":%s,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"misses\":%.6f,\"on_time_per_s\":%.1f,"
               "\"worst_bucket_share\":%.3f,\"late\":%llu,\"partial\":%llu,\"shed\":%llu,\"deadline_exceeded\":%llu,"
               "\"not_sent\":%llu,\"client_timeouts\":%llu,\"errors\":%llu}",
               i ? "," : "", p->rate, p->pass ? "true" : "false", p->p50_ms, p->p99_ms, p->misses, p->on_time_per_s,
               p->worst_bucket, (unsigned long long)p->late, (unsigned long long)p->partial, (unsigned long long)p->shed,
               (unsigned long long)p->deadline_exceeded, (unsigned long long)p->not_sent, (unsigned long long)p->timeouts,
               (unsigned long long)p->errors);
    }
    fprintf(out, "]}\n");
    fprintf(table, "%-12s sustained %.1f/s (p99 %.3f ms, misses %.4f%%, on time %.1f/s)%s\n", a->label, st->pass,
            best->p99_ms, 100.0 * best->misses, best->on_time_per_s, st->pass == a->max_rate ? ", the ceiling given" : "");
}

int isn_load_sustained(isn_load *load, const isn_load_search *search, FILE *out, FILE *table) {
    const isn_load_config *c = isn_load_config_of(load);
    uint32_t n = search->searches ? search->searches : 1;
    search_state *states = calloc(n, sizeof *states);
    if (!states) return -1;
    for (uint32_t i = 0; i < n; i++) states[i].rate = search->max_rate;
    fprintf(table, "%-12s %12s %6s %10s %10s %10s %14s %6s\n", "config", "offered/s", "repeat", "p50 ms", "p99 ms", "misses",
            "on-time/s", "worst");
    /* the searches take turns, a probed rate each, so that a machine whose speed drifts drifts under all of them */
    for (uint32_t left = n; left;) {
        left = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (states[i].done) continue;
            if (n > 1) fprintf(table, "%-12s search %u of %u\n", search->label, i + 1, n);
            if (search_step(load, search, &states[i], table) != 0) {
                free(states);
                return -1;
            }
            left += !states[i].done;
        }
    }
    for (uint32_t i = 0; i < n; i++) write_search(c, search, &states[i], i, out, table);
    free(states);
    return 0;
}
