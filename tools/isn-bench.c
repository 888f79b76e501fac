/* isn-bench: load generator for any isn.v1.Search server (isnd, isn-agg). A thread drives its
 * requests through the non-blocking gRPC client over a few HTTP/2 connections and poll(); with
 * --threads T, T such generators (each with its own connections) offer a 1/T share of the rate
 * each, and their tallies are summed, for rates one thread cannot offer.
 * Open loop (--rate): Poisson arrivals; latency is measured from each request's scheduled send
 * time, so a server (or client) that falls behind is charged for the wait (no coordinated
 * omission). Closed loop (--concurrency): N clients, each sends its next query when the last one
 * is answered. Prints one JSON object (with --sweep: one per rate in "sweep").
 * Sustained rate (--sustained MAX): the highest offered rate at which every one of --repeats open-loop
 * runs keeps p99 under the deadline and misses (late, partial, shed, deadline exceeded, errors, not
 * sent) under --max-misses of the scheduled requests, found by halving from MAX until a rate passes,
 * then bisecting to --resolution; the answer with a table on stderr (DESIGN section 7). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grpc/grpc.h"

#define MAX_CONNECTIONS 64
#define MAX_THREADS 64
#define MAX_SWEEP 64
#define CLIENT_GRACE_MS 1000    /* wait this long past a deadline before the client gives up */
#define MAX_WAIT_NS 2000000LL   /* poll at least this often while requests are in flight */

typedef struct {
    const char *target, *queries_path, *algo, *plot_path;
    double rate;
    uint32_t concurrency;
    double duration_s, warmup_s;
    uint32_t deadline_ms, k, connections, max_inflight, threads;
    isn_grpc_mode mode;
    double sweep[MAX_SWEEP];
    size_t num_sweep;
    uint64_t seed;
    bool allow_remote;
    double sustained_max, resolution, max_misses;
    uint32_t repeats;
    const char *label;
    double spike_rate, spike_s; /* --spike RATE:SECONDS */
} bench_args;

typedef struct {
    isn_grpc_call *call;
    uint32_t conn;
    uint32_t closed_client; /* closed loop: which client sent it */
    int64_t scheduled_ns;
    bool measured;
} bench_slot;

typedef struct {
    const bench_args *args;
    isn_query_log queries;
    isn_grpc_pool *pool;
    bench_slot *active; /* calls in flight, at most args->max_inflight */
    uint32_t num_active;
    uint64_t rng;
    bench_stats stats;
    int64_t measure_from_ns, measure_to_ns;
    /* connections with requests started but not yet sent: one send each after a burst of requests */
    isn_grpc_client *unsent[MAX_CONNECTIONS];
    uint32_t num_unsent;
} bench_run;

static int64_t now_ns(void) { return (int64_t)isn_now_ns(); }

static uint64_t next_random(bench_run *run) {
    uint64_t z = (run->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Exponential inter-arrival gap of a Poisson process at `rate` per second. */
static int64_t poisson_gap_ns(bench_run *run, double rate) {
    double u = ((double)(next_random(run) >> 11) + 0.5) / 9007199254740992.0;
    return (int64_t)(-log(u) / rate * 1e9);
}

/* ------------------------------------------------------------------ arguments and queries */

static void usage(FILE *out) {
    fputs("usage: isn-bench --target HOST:PORT --queries FILE.tsv (--rate R | --concurrency N | --sweep R1,R2,..)\n"
          "                 [--duration S] [--warmup S] [--deadline-ms D] [-k K] [--mode or|and] [--algo NAME]\n"
          "                 [--connections C] [--max-inflight M] [--seed N] [--plot OUT.png]\n"
          "  --rate R          open loop: Poisson arrivals at R queries/s (latency from the scheduled time)\n"
          "  --concurrency N   closed loop: N clients, one query in flight each\n"
          "  --sweep R1,R2,..  open loop at each rate in turn; prints {\"sweep\":[...]}\n"
          "  --spike R:S       with --rate: the first S measured seconds at R instead (a load spike; the\n"
          "                    JSON's on_time_timeline gives on-time answers per 100 ms of scheduled time)\n"
          "  --duration S      measured seconds per run (default 10)\n"
          "  --warmup S        seconds sent but not measured before that (default 1)\n"
          "  --deadline-ms D   sent as grpc-timeout; answers later count as deadline misses (default 1000)\n"
          "  -k K, --mode, --algo   passed in each request (default: the server's)\n"
          "  --connections C   HTTP/2 connections to spread requests over, per thread (default 4)\n"
          "  --threads T       T generator threads, each offering 1/T of the rate on its own connections\n"
          "                    (open loop only; default 1): for rates one thread cannot offer\n"
          "  --max-inflight M  requests in flight at most; more are counted as not_sent (default 20000)\n"
          "  --plot OUT.png    throughput vs p99 plot with gnuplot (one point per rate)\n"
          "  --allow-remote    load a target that is not on loopback (refused by default)\n"
          "  --sustained MAX   the sustained rate at most MAX: every one of --repeats runs (default 3) keeps\n"
          "                    p99 < deadline and misses < --max-misses (default 0.001) of the scheduled\n"
          "                    requests; bisected to --resolution (default 0.05, relative); --label NAME\n"
          "                    names the configuration in the output\n",
          out);
}

static int parse_double(const char *name, const char *text, double min, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= min) || !isfinite(v)) {
        fprintf(stderr, "isn-bench: %s must be a number >= %g, got '%s'\n", name, min, text);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_u32(const char *name, const char *text, uint32_t min, uint32_t max, uint32_t *out) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        fprintf(stderr, "isn-bench: %s must be an integer in %u..%u, got '%s'\n", name, min, max, text);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* RATE:SECONDS */
static int parse_spike(const char *text, bench_args *a) {
    char copy[128];
    snprintf(copy, sizeof copy, "%s", text);
    char *colon = strchr(copy, ':');
    if (!colon) {
        fprintf(stderr, "isn-bench: --spike takes RATE:SECONDS, got '%s'\n", text);
        return -1;
    }
    *colon = '\0';
    if (parse_double("--spike's rate", copy, 0.001, &a->spike_rate) != 0) return -1;
    return parse_double("--spike's seconds", colon + 1, 0.001, &a->spike_s);
}

static int parse_sweep(const char *text, bench_args *a) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", text);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (a->num_sweep == MAX_SWEEP) {
            fprintf(stderr, "isn-bench: --sweep takes at most %d rates\n", MAX_SWEEP);
            return -1;
        }
        if (parse_double("each --sweep rate", tok, 0.001, &a->sweep[a->num_sweep]) != 0) return -1;
        a->num_sweep++;
    }
    if (!a->num_sweep) {
        fprintf(stderr, "isn-bench: --sweep needs at least one rate\n");
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, bench_args *a) {
    memset(a, 0, sizeof *a);
    a->duration_s = 10;
    a->warmup_s = 1;
    a->deadline_ms = 1000;
    a->connections = 4;
    a->threads = 1;
    a->max_inflight = 20000;
    a->seed = 1;
    a->repeats = 3;
    a->resolution = 0.05;
    a->max_misses = 0.001;
    a->label = "";
    static const struct option opts[] = {
        {"target", 1, 0, 't'},      {"queries", 1, 0, 'q'},     {"rate", 1, 0, 'r'},  {"concurrency", 1, 0, 'c'},
        {"duration", 1, 0, 'd'},    {"warmup", 1, 0, 'w'},      {"deadline-ms", 1, 0, 'D'}, {"mode", 1, 0, 'm'},
        {"algo", 1, 0, 'a'},        {"connections", 1, 0, 'C'}, {"sweep", 1, 0, 's'}, {"plot", 1, 0, 'p'},
        {"max-inflight", 1, 0, 'M'}, {"seed", 1, 0, 'S'},       {"help", 0, 0, 'h'},  {"allow-remote", 0, 0, 'R'},
        {"sustained", 1, 0, 'U'},   {"repeats", 1, 0, 'P'},     {"resolution", 1, 0, 'E'},
        {"max-misses", 1, 0, 'X'},  {"label", 1, 0, 'L'},       {"threads", 1, 0, 'T'},  {"spike", 1, 0, 'K'},
        {0, 0, 0, 0}};
    int c;
    uint32_t seed;
    while ((c = getopt_long(argc, argv, "k:", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 't': a->target = optarg; break;
        case 'q': a->queries_path = optarg; break;
        case 'r': rc = parse_double("--rate", optarg, 0.001, &a->rate); break;
        case 'c': rc = parse_u32("--concurrency", optarg, 1, 100000, &a->concurrency); break;
        case 'd': rc = parse_double("--duration", optarg, 0.001, &a->duration_s); break;
        case 'w': rc = parse_double("--warmup", optarg, 0, &a->warmup_s); break;
        case 'D': rc = parse_u32("--deadline-ms", optarg, 1, 3600000, &a->deadline_ms); break;
        case 'k': rc = parse_u32("-k", optarg, 1, 1000000, &a->k); break;
        case 'C': rc = parse_u32("--connections", optarg, 1, MAX_CONNECTIONS, &a->connections); break;
        case 'M': rc = parse_u32("--max-inflight", optarg, 1, 1000000, &a->max_inflight); break;
        case 'S': rc = parse_u32("--seed", optarg, 0, UINT32_MAX, &seed), a->seed = seed; break;
        case 'a': a->algo = optarg; break;
        case 'p': a->plot_path = optarg; break;
        case 'R': a->allow_remote = true; break;
        case 's': rc = parse_sweep(optarg, a); break;
        case 'U': rc = parse_double("--sustained", optarg, 1, &a->sustained_max); break;
        case 'P': rc = parse_u32("--repeats", optarg, 1, 100, &a->repeats); break;
        case 'E': rc = parse_double("--resolution", optarg, 0.001, &a->resolution); break;
        case 'X': rc = parse_double("--max-misses", optarg, 0, &a->max_misses); break;
        case 'L': a->label = optarg; break;
        case 'T': rc = parse_u32("--threads", optarg, 1, MAX_THREADS, &a->threads); break;
        case 'K': rc = parse_spike(optarg, a); break;
        case 'm':
            if (!strcmp(optarg, "or")) a->mode = ISN_GRPC_MODE_OR;
            else if (!strcmp(optarg, "and")) a->mode = ISN_GRPC_MODE_AND;
            else {
                fprintf(stderr, "isn-bench: --mode must be or or and, got '%s'\n", optarg);
                rc = -1;
            }
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (rc != 0) return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "isn-bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!a->target || !a->queries_path) {
        fprintf(stderr, "isn-bench: --target HOST:PORT and --queries FILE.tsv are required\n");
        return -1;
    }
    if ((a->rate > 0) + (a->concurrency > 0) + (a->num_sweep > 0) + (a->sustained_max > 0) != 1) {
        fprintf(stderr, "isn-bench: give exactly one of --rate, --concurrency, --sweep and --sustained\n");
        return -1;
    }
    if (a->spike_rate > 0 && a->rate <= 0) {
        fprintf(stderr, "isn-bench: --spike goes with --rate (the rate after the spike)\n");
        return -1;
    }
    if (a->threads > 1 && a->concurrency) {
        fprintf(stderr, "isn-bench: --threads is for open-loop load (--rate, --sweep, --sustained)\n");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ requests */

/* Sends one query scheduled at `scheduled_ns`. False when it could not be sent (counted). */
static bool issue(bench_run *run, int64_t scheduled_ns, uint32_t closed_client) {
    bool measured = scheduled_ns >= run->measure_from_ns && scheduled_ns < run->measure_to_ns;
    if (measured) run->stats.scheduled++;
    uint32_t conn_index;
    bool room = run->num_active < run->args->max_inflight;
    isn_grpc_client *client = room ? isn_grpc_pool_pick(run->pool, &conn_index) : NULL;
    const bench_args *a = run->args;
    isn_grpc_call *call = NULL;
    if (client) {
        const isn_logged_query *q = &run->queries.queries[next_random(run) % run->queries.count];
        isn_grpc_search_request rq = {.query = q->text, .k = a->k, .mode = a->mode, .algorithm = a->algo,
                                      .timeout_ms = a->deadline_ms};
        char err[256];
        call = isn_grpc_search_start(client, &rq, err, sizeof err);
        uint32_t i = 0;
        while (call && i < run->num_unsent && run->unsent[i] != client) i++;
        if (call && i == run->num_unsent && run->num_unsent < MAX_CONNECTIONS) run->unsent[run->num_unsent++] = client;
    }
    if (!call) {
        if (measured) run->stats.not_sent++;
        return false;
    }
    run->active[run->num_active++] = (bench_slot){.call = call, .conn = conn_index, .closed_client = closed_client,
                                                  .scheduled_ns = scheduled_ns, .measured = measured};
    isn_grpc_pool_started(run->pool, conn_index);
    return true;
}

/* Sends what issue() started: now, not at the next wait; once per connection for a burst of them. */
static void send_started(bench_run *run) {
    char err[256];
    for (uint32_t i = 0; i < run->num_unsent; i++) isn_grpc_poll(run->unsent[i], 0, err, sizeof err);
    run->num_unsent = 0;
}

static void release_slot(bench_run *run, uint32_t active_pos) {
    isn_grpc_pool_finished(run->pool, run->active[active_pos].conn);
    run->active[active_pos] = run->active[--run->num_active];
}

/* Finishes every call that is done or past its client-side limit; returns how many. Closed loop:
 * the clients whose calls finished are no longer busy. */
static uint32_t collect(bench_run *run, bool *client_busy) {
    uint32_t finished = 0;
    int64_t t = now_ns();
    int64_t give_up_ns = ((int64_t)run->args->deadline_ms + CLIENT_GRACE_MS) * 1000000LL;
    for (uint32_t i = 0; i < run->num_active;) {
        bench_slot *slot = &run->active[i];
        if (isn_grpc_call_done(slot->call)) {
            isn_grpc_search_reply reply;
            char err[256];
            bool bad = isn_grpc_search_finish(slot->call, &reply, err, sizeof err) != 0;
            int status = bad ? -1 : reply.status;
            if (slot->measured) {
                uint64_t latency_us = (uint64_t)((t - slot->scheduled_ns) / 1000);
                uint64_t deadline_us = (uint64_t)run->args->deadline_ms * 1000;
                bench_stats_record(&run->stats, status, status == 0 && reply.complete, latency_us, deadline_us);
                if (status == 0 && reply.complete && latency_us <= deadline_us)
                    bench_stats_timeline_add(&run->stats, slot->scheduled_ns - run->measure_from_ns);
            }
            if (!bad) isn_grpc_search_reply_free(&reply);
        } else if (t - slot->scheduled_ns > give_up_ns) {
            isn_grpc_call_free(slot->call);
            if (slot->measured) run->stats.client_timeouts++;
        } else {
            i++;
            continue;
        }
        if (client_busy) client_busy[slot->closed_client] = false;
        release_slot(run, i);
        finished++;
    }
    return finished;
}

/* One measured run: rate > 0 open loop, else closed loop with args->concurrency clients. */
static void run_load(bench_run *run, double rate) {
    const bench_args *a = run->args;
    int64_t start = now_ns();
    run->measure_from_ns = start + (int64_t)(a->warmup_s * 1e9);
    run->measure_to_ns = run->measure_from_ns + (int64_t)(a->duration_s * 1e9);
    int64_t give_up_at = run->measure_to_ns + ((int64_t)a->deadline_ms + 2 * CLIENT_GRACE_MS) * 1000000LL;
    int64_t *client_ready = NULL;
    bool *client_busy = NULL;
    if (rate <= 0) {
        client_ready = calloc(a->concurrency, sizeof *client_ready);
        client_busy = calloc(a->concurrency, sizeof *client_busy);
        if (!client_ready || !client_busy) {
            fprintf(stderr, "isn-bench: out of memory\n");
            exit(1);
        }
        for (uint32_t i = 0; i < a->concurrency; i++) client_ready[i] = start;
    }
    int64_t next_send = start + (rate > 0 ? poisson_gap_ns(run, rate) : 0);
    /* --spike: the first seconds of the measured run at the spike's rate instead */
    int64_t spike_end = run->measure_from_ns + (int64_t)(a->spike_s * 1e9);
    double spike_factor = a->rate > 0 && a->spike_rate > 0 ? a->spike_rate / a->rate : 1.0;
    for (;;) {
        int64_t t = now_ns();
        int64_t next_event = give_up_at;
        if (rate > 0) {
            while (next_send <= t && next_send < run->measure_to_ns) {
                issue(run, next_send, 0);
                bool spiking = next_send >= run->measure_from_ns && next_send < spike_end;
                next_send += poisson_gap_ns(run, spiking ? rate * spike_factor : rate);
            }
            send_started(run);
            if (next_send < run->measure_to_ns) next_event = next_send;
        } else if (t < run->measure_to_ns) {
            for (uint32_t i = 0; i < a->concurrency; i++) {
                if (client_busy[i]) continue;
                if (client_ready[i] <= t) {
                    int64_t sched = now_ns();
                    /* A client that cannot send (no connection) retries a little later. */
                    if (issue(run, sched, i)) client_busy[i] = true;
                    else client_ready[i] = sched + 10000000LL;
                }
                if (!client_busy[i] && client_ready[i] < next_event) next_event = client_ready[i];
            }
            send_started(run);
        }
        bool sending_done = t >= run->measure_to_ns;
        if (!sending_done && run->measure_to_ns < next_event) next_event = run->measure_to_ns;
        if (sending_done && run->num_active == 0) break;
        if (t >= give_up_at) break;
        /* Sending also reads what has arrived: look before sleeping, or those answers wait. */
        if (collect(run, client_busy)) continue;
        int64_t wait = next_event - now_ns(); /* input on any connection, or the next event */
        if (run->num_active && wait > MAX_WAIT_NS) wait = MAX_WAIT_NS;
        isn_grpc_pool_wait(run->pool, wait > 0 ? (uint64_t)wait : 0);
        collect(run, client_busy);
    }
    /* Whatever is still in flight past the last grace period is abandoned. */
    while (run->num_active) {
        bench_slot *slot = &run->active[0];
        isn_grpc_call_free(slot->call);
        if (slot->measured) run->stats.client_timeouts++;
        release_slot(run, 0);
    }
    free(client_ready);
    free(client_busy);
}

/* ------------------------------------------------------------------ several generator threads */

typedef struct {
    bench_run *run;
    double rate;
} load_share;

static void *load_thread(void *arg) {
    load_share *share = arg;
    run_load(share->run, share->rate);
    return NULL;
}

/* One run at `rate` over the args->threads generators of runs[] (rate <= 0: closed loop, one thread);
 * their tallies end up in runs[0].stats. -1 when out of memory. */
static int load_all(bench_run *runs, double rate) {
    uint32_t n = runs[0].args->threads;
    for (uint32_t i = 0; i < n; i++) { /* the first holds every thread's latencies in the end */
        double expected = rate > 0 ? rate * (runs[0].args->duration_s + 1) * 1.2 / (i ? n : 1) + 1000 : 2e6;
        if (bench_stats_init(&runs[i].stats, (size_t)(expected < 5e7 ? expected : 5e7)) != 0) return -1;
    }
    if (n == 1) {
        run_load(&runs[0], rate);
        return 0;
    }
    pthread_t threads[MAX_THREADS];
    load_share shares[MAX_THREADS];
    for (uint32_t i = 0; i < n; i++) {
        shares[i] = (load_share){&runs[i], rate / n};
        if (pthread_create(&threads[i], NULL, load_thread, &shares[i]) != 0) {
            fprintf(stderr, "isn-bench: cannot start generator thread %u\n", i);
            exit(1);
        }
    }
    for (uint32_t i = 0; i < n; i++) pthread_join(threads[i], NULL);
    bench_stats *sum = &runs[0].stats;
    for (uint32_t i = 1; i < n; i++) {
        bench_stats_merge(sum, &runs[i].stats);
        bench_stats_free(&runs[i].stats);
    }
    return 0;
}

/* With --plot: throughput against p99, one point per rate, by gnuplot. */
static int write_plot(const char *png, const double *throughput, const double *p99_ms, const double *rates,
                      size_t n) {
    FILE *gnuplot = popen("gnuplot 2>&1", "w");
    if (!gnuplot) return -1;
    fprintf(gnuplot,
            "set terminal pngcairo size 900,600\nset output '%s'\nset title 'isn-bench: throughput vs p99 latency'\n"
            "set xlabel 'throughput (answered queries/s)'\nset ylabel 'p99 latency (ms)'\nset grid\nset key off\n"
            "plot '-' using 1:2 with linespoints pt 7\n",
            png);
    for (size_t i = 0; i < n; i++) fprintf(gnuplot, "%.3f %.3f %.1f\n", throughput[i], p99_ms[i], rates[i]);
    fprintf(gnuplot, "e\n");
    int rc = pclose(gnuplot);
    if (rc != 0) {
        fprintf(stderr, "isn-bench: gnuplot failed (exit %d); is gnuplot-nox installed?\n", rc);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ sustained rate */

typedef struct {
    double rate, p50_ms, p99_ms, misses, on_time_per_s;
    bool pass;
} probe_run;

/* Everything that is not an on-time, complete answer, as a share of the scheduled requests. */
static double miss_share(const bench_stats *st) {
    if (st->scheduled == 0) return 1.0;
    uint64_t good = st->ok - (st->late + st->partial <= st->ok ? st->late + st->partial : st->ok);
    return 1.0 - (double)good / (double)st->scheduled;
}

/* One run at `rate` (run: the generators' array); false when out of memory. */
static bool measure_once(bench_run *run, double rate, probe_run *out) {
    const bench_args *a = run->args;
    if (load_all(run, rate) != 0) return false;
    bench_percentiles p;
    bench_stats_percentiles(&run->stats, &p);
    out->rate = rate;
    out->p50_ms = p.p50 / 1000.0;
    out->p99_ms = p.p99 / 1000.0;
    out->misses = miss_share(&run->stats);
    uint64_t on_time = run->stats.ok - (run->stats.late + run->stats.partial <= run->stats.ok
                                            ? run->stats.late + run->stats.partial
                                            : run->stats.ok);
    out->on_time_per_s = (double)on_time / a->duration_s;
    out->pass = run->stats.ok > 0 && out->p99_ms < a->deadline_ms && out->misses < a->max_misses;
    bench_stats_free(&run->stats);
    return true;
}

#define MAX_PROBES 64

/* Every repeat at `rate` must pass; stops at the first that does not. The last run is kept in *last. */
static int probe_rate(bench_run *run, double rate, probe_run *last, FILE *table) {
    for (uint32_t i = 0; i < run->args->repeats; i++) {
        if (!measure_once(run, rate, last)) return -1;
        fprintf(table, "%-12s %12.1f %6u %10.3f %10.3f %9.4f%% %14.1f  %s\n", run->args->label, rate, i + 1,
                last->p50_ms, last->p99_ms, 100.0 * last->misses, last->on_time_per_s, last->pass ? "pass" : "FAIL");
        fflush(table);
        if (!last->pass) return 0;
    }
    return 1;
}

static int run_sustained(bench_run *run) {
    const bench_args *a = run->args;
    FILE *table = stderr;
    fprintf(table, "%-12s %12s %6s %10s %10s %10s %14s\n", "config", "offered/s", "repeat", "p50 ms", "p99 ms", "misses",
            "on-time/s");
    probe_run probes[MAX_PROBES], best = {0}, last;
    size_t n = 0;
    double pass = 0, fail = 0, rate = a->sustained_max;
    while (n < MAX_PROBES) {
        int ok = probe_rate(run, rate, &last, table);
        if (ok < 0) return -1;
        probes[n++] = last;
        if (ok) {
            pass = rate;
            best = last;
        } else {
            fail = rate;
        }
        if (pass == a->sustained_max) break; /* the ceiling itself holds */
        if (pass == 0) {
            if (rate < a->sustained_max / 1024) break; /* nothing holds */
            rate /= 2;
            continue;
        }
        if (fail / pass <= 1.0 + a->resolution) break;
        rate = sqrt(pass * fail);
    }
    printf("{\"label\":\"%s\",\"target\":\"%s\",\"deadline_ms\":%u,\"repeats\":%u,\"max_misses\":%g,"
           "\"sustained\":{\"rate\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"misses\":%.6f,\"on_time_per_s\":%.1f,"
           "\"at_ceiling\":%s},\"probes\":[",
           a->label, a->target, a->deadline_ms, a->repeats, a->max_misses, pass, best.p50_ms, best.p99_ms, best.misses,
           best.on_time_per_s, pass == a->sustained_max ? "true" : "false");
    for (size_t i = 0; i < n; i++)
        printf("%s{\"rate\":%.1f,\"pass\":%s,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"misses\":%.6f,\"on_time_per_s\":%.1f}",
               i ? "," : "", probes[i].rate, probes[i].pass ? "true" : "false", probes[i].p50_ms, probes[i].p99_ms,
               probes[i].misses, probes[i].on_time_per_s);
    printf("]}\n");
    fprintf(table, "%-12s sustained %.1f/s (p99 %.3f ms, misses %.4f%%, on time %.1f/s)%s\n", a->label, pass,
            best.p99_ms, 100.0 * best.misses, best.on_time_per_s, pass == a->sustained_max ? ", the ceiling given" : "");
    return 0;
}

int main(int argc, char **argv) {
    bench_args a;
    if (parse_args(argc, argv, &a) != 0) return 2;
    char err[300];
    /* A load generator aimed at someone else's server by mistake does harm: loopback unless asked. */
    int loopback = a.allow_remote ? 1 : isn_grpc_is_loopback(a.target, err, sizeof err);
    if (loopback != 1) {
        if (loopback < 0) fprintf(stderr, "isn-bench: --target: %s\n", err);
        else fprintf(stderr, "isn-bench: %s is not a loopback address; add --allow-remote to load it\n", a.target);
        return 2;
    }
    static bench_run runs[MAX_THREADS];
    bench_run *run = &runs[0];
    if (isn_query_log_read(a.queries_path, true, 0, &run->queries, err, sizeof err) != 0) {
        fprintf(stderr, "isn-bench: %s\n", err);
        return 1;
    }
    if (run->queries.count == 0) {
        fprintf(stderr, "isn-bench: %s holds no queries\n", a.queries_path);
        return 1;
    }
    for (uint32_t i = 0; i < a.threads; i++) {
        runs[i].args = &a;
        runs[i].queries = run->queries; /* read only, shared */
        runs[i].rng = a.seed + i * 0x9E3779B97F4A7C15ull;
        if (!(runs[i].active = calloc(a.max_inflight, sizeof *runs[i].active))) {
            fprintf(stderr, "isn-bench: out of memory\n");
            return 1;
        }
        /* Fail early with a clear message when the target is not there. */
        runs[i].pool = isn_grpc_pool_new(a.target, a.connections, 2000, err, sizeof err);
        if (!runs[i].pool) {
            fprintf(stderr, "isn-bench: %s\n", err);
            return 1;
        }
    }
    int rc = 0;
    if (a.sustained_max > 0) {
        rc = run_sustained(run) == 0 ? 0 : 1;
        if (rc) fprintf(stderr, "isn-bench: out of memory\n");
    } else {
        size_t num_runs = a.num_sweep ? a.num_sweep : 1;
        double *rates = a.num_sweep ? a.sweep : &a.rate;
        double throughput[MAX_SWEEP], p99_ms[MAX_SWEEP];
        if (a.num_sweep) printf("{\"target\":\"%s\",\"sweep\":[", a.target);
        for (size_t r = 0; r < num_runs; r++) {
            if (load_all(runs, rates[r]) != 0) {
                fprintf(stderr, "isn-bench: out of memory\n");
                return 1;
            }
            if (r) printf(",");
            bench_stats_write_json(stdout, &run->stats, rates[r], a.concurrency, a.duration_s, a.deadline_ms);
            bench_percentiles p;
            bench_stats_percentiles(&run->stats, &p);
            throughput[r] = (double)run->stats.ok / a.duration_s;
            p99_ms[r] = p.p99 / 1000.0;
            fflush(stdout);
            bench_stats_free(&run->stats);
        }
        if (a.num_sweep) printf("]}");
        printf("\n");
        if (a.plot_path && write_plot(a.plot_path, throughput, p99_ms, rates, num_runs) != 0) rc = 1;
    }
    for (uint32_t i = 0; i < a.threads; i++) {
        isn_grpc_pool_free(runs[i].pool);
        free(runs[i].active);
    }
    isn_query_log_free(&run->queries);
    return rc;
}
