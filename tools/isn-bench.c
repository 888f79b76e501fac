/* isn-bench: load generator for any isn.v1.Search server (isnd, isn-agg). One thread drives every
 * request through the non-blocking gRPC client over a few HTTP/2 connections and poll().
 * Open loop (--rate): Poisson arrivals; latency is measured from each request's scheduled send
 * time, so a server (or client) that falls behind is charged for the wait (no coordinated
 * omission). Closed loop (--concurrency): N clients, each sends its next query when the last one
 * is answered. Prints one JSON object (with --sweep: one per rate in "sweep"). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench_stats.h"
#include "grpc/grpc.h"

#define MAX_CONNECTIONS 64
#define MAX_SWEEP 64
#define CLIENT_GRACE_MS 1000    /* wait this long past a deadline before the client gives up */
#define RECONNECT_PAUSE_NS 100000000LL
#define MAX_WAIT_NS 2000000LL   /* poll at least this often while requests are in flight */

typedef struct {
    char *id, *text;
} bench_query;

typedef struct {
    const char *target, *queries_path, *algo, *plot_path;
    double rate;
    uint32_t concurrency;
    double duration_s, warmup_s;
    uint32_t deadline_ms, k, connections, max_inflight;
    isn_grpc_mode mode;
    double sweep[MAX_SWEEP];
    size_t num_sweep;
    uint64_t seed;
    bool allow_remote;
} bench_args;

typedef struct {
    isn_grpc_client *client;
    uint32_t inflight;
    int64_t next_connect_ns;
} bench_conn;

typedef struct {
    isn_grpc_call *call;
    uint32_t conn;
    uint32_t closed_client; /* closed loop: which client sent it */
    int64_t scheduled_ns;
    bool measured;
} bench_slot;

typedef struct {
    const bench_args *args;
    bench_query *queries;
    size_t num_queries;
    bench_conn conns[MAX_CONNECTIONS];
    uint32_t next_conn;
    bench_slot *slots;
    uint32_t *active; /* indexes of used slots */
    uint32_t *free_slots;
    uint32_t num_active, num_free;
    uint64_t rng;
    bench_stats stats;
    int64_t measure_from_ns, measure_to_ns;
} bench_run;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

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
          "  --duration S      measured seconds per run (default 10)\n"
          "  --warmup S        seconds sent but not measured before that (default 1)\n"
          "  --deadline-ms D   sent as grpc-timeout; answers later count as deadline misses (default 1000)\n"
          "  -k K, --mode, --algo   passed in each request (default: the server's)\n"
          "  --connections C   HTTP/2 connections to spread requests over (default 4)\n"
          "  --max-inflight M  requests in flight at most; more are counted as not_sent (default 20000)\n"
          "  --plot OUT.png    throughput vs p99 plot with gnuplot (one point per rate)\n"
          "  --allow-remote    load a target that is not on loopback (refused by default)\n",
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
    a->max_inflight = 20000;
    a->seed = 1;
    static const struct option opts[] = {
        {"target", 1, 0, 't'},      {"queries", 1, 0, 'q'},     {"rate", 1, 0, 'r'},  {"concurrency", 1, 0, 'c'},
        {"duration", 1, 0, 'd'},    {"warmup", 1, 0, 'w'},      {"deadline-ms", 1, 0, 'D'}, {"mode", 1, 0, 'm'},
        {"algo", 1, 0, 'a'},        {"connections", 1, 0, 'C'}, {"sweep", 1, 0, 's'}, {"plot", 1, 0, 'p'},
        {"max-inflight", 1, 0, 'M'}, {"seed", 1, 0, 'S'},       {"help", 0, 0, 'h'},  {"allow-remote", 0, 0, 'R'},
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
    if ((a->rate > 0) + (a->concurrency > 0) + (a->num_sweep > 0) != 1) {
        fprintf(stderr, "isn-bench: give exactly one of --rate, --concurrency and --sweep\n");
        return -1;
    }
    return 0;
}

/* A load generator aimed at someone else's server by mistake does harm: loopback unless asked. */
static int check_loopback(const char *target) {
    char host[256];
    const char *start = target, *end = strrchr(target, ':');
    if (*target == '[') start++, end = strchr(target, ']');
    if (!end || (size_t)(end - start) >= sizeof host) {
        fprintf(stderr, "isn-bench: bad --target \"%s\": expected HOST:PORT\n", target);
        return -1;
    }
    memcpy(host, start, (size_t)(end - start));
    host[end - start] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *found;
    if (getaddrinfo(host, NULL, &hints, &found) != 0) {
        fprintf(stderr, "isn-bench: cannot resolve \"%s\"\n", host);
        return -1;
    }
    bool loopback = true;
    for (struct addrinfo *ai = found; ai; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET)
            loopback &= (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        else if (ai->ai_family == AF_INET6)
            loopback &= IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    }
    freeaddrinfo(found);
    if (!loopback) {
        fprintf(stderr, "isn-bench: %s is not a loopback address; add --allow-remote to load it\n", target);
        return -1;
    }
    return 0;
}

static int load_queries(const char *path, bench_query **out, size_t *count) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "isn-bench: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    bench_query *queries = NULL;
    size_t n = 0, cap = 0, line_no = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        char *tab = strchr(line, '\t');
        if (!tab || !tab[1]) {
            fprintf(stderr, "isn-bench: %s:%zu: expected qid<TAB>query text\n", path, line_no);
            rc = -1;
            break;
        }
        *tab = '\0';
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            bench_query *grown = realloc(queries, cap * sizeof *queries);
            if (!grown) {
                rc = -1;
                break;
            }
            queries = grown;
        }
        queries[n].id = strdup(line);
        queries[n].text = strdup(tab + 1);
        if (!queries[n].id || !queries[n].text) {
            rc = -1;
            break;
        }
        n++;
    }
    free(line);
    fclose(f);
    if (rc == 0 && n == 0) {
        fprintf(stderr, "isn-bench: %s holds no queries\n", path);
        rc = -1;
    }
    *out = queries;
    *count = n;
    return rc;
}

/* ------------------------------------------------------------------ requests */

/* A usable connection, round robin; reconnects (at most every RECONNECT_PAUSE_NS per slot) one that
 * failed or was told to go away once its calls are finished. */
static bench_conn *pick_connection(bench_run *run, uint32_t *index) {
    uint32_t n = run->args->connections;
    for (uint32_t tries = 0; tries < n; tries++) {
        uint32_t i = run->next_conn++ % n;
        bench_conn *c = &run->conns[i];
        if (c->client && !isn_grpc_usable(c->client) && c->inflight == 0) {
            isn_grpc_close(c->client);
            c->client = NULL;
        }
        if (!c->client) {
            int64_t t = now_ns();
            if (t < c->next_connect_ns) continue;
            char err[256];
            c->client = isn_grpc_connect(run->args->target, 1000, err, sizeof err);
            if (!c->client) {
                c->next_connect_ns = t + RECONNECT_PAUSE_NS;
                continue;
            }
        }
        if (isn_grpc_usable(c->client)) {
            *index = i;
            return c;
        }
    }
    return NULL;
}

/* Sends one query scheduled at `scheduled_ns`. False when it could not be sent (counted). */
static bool issue(bench_run *run, int64_t scheduled_ns, uint32_t closed_client) {
    bool measured = scheduled_ns >= run->measure_from_ns && scheduled_ns < run->measure_to_ns;
    if (measured) run->stats.scheduled++;
    uint32_t conn_index;
    bench_conn *conn = run->num_free ? pick_connection(run, &conn_index) : NULL;
    const bench_args *a = run->args;
    isn_grpc_call *call = NULL;
    if (conn) {
        const bench_query *q = &run->queries[next_random(run) % run->num_queries];
        isn_grpc_search_request rq = {.query = q->text, .k = a->k, .mode = a->mode, .algorithm = a->algo,
                                      .timeout_ms = a->deadline_ms};
        char err[256];
        call = isn_grpc_search_start(conn->client, &rq, err, sizeof err);
        if (call) isn_grpc_poll(conn->client, 0, err, sizeof err); /* send now, not at the next wait */
    }
    if (!call) {
        if (measured) run->stats.not_sent++;
        return false;
    }
    uint32_t s = run->free_slots[--run->num_free];
    run->slots[s] = (bench_slot){.call = call, .conn = conn_index, .closed_client = closed_client,
                                 .scheduled_ns = scheduled_ns, .measured = measured};
    run->active[run->num_active++] = s;
    conn->inflight++;
    return true;
}

static void record_outcome(bench_run *run, const bench_slot *slot, const isn_grpc_search_reply *reply,
                           bool transport_error, int64_t done_ns) {
    if (!slot->measured) return;
    bench_stats *st = &run->stats;
    if (transport_error || reply->status < 0) {
        st->transport_errors++;
        return;
    }
    switch (reply->status) {
    case 0: {
        st->ok++;
        uint64_t us = (uint64_t)((done_ns - slot->scheduled_ns) / 1000);
        bench_stats_add_latency(st, us);
        if (!reply->complete) st->partial++;
        if (us > (uint64_t)run->args->deadline_ms * 1000) st->late++;
        break;
    }
    case 4: st->deadline_exceeded++; break;
    case 8: st->shed++; break;
    case 14: st->unavailable++; break;
    default: st->other_status++; break;
    }
}

static void release_slot(bench_run *run, uint32_t active_pos) {
    uint32_t s = run->active[active_pos];
    run->conns[run->slots[s].conn].inflight--;
    run->slots[s].call = NULL;
    run->active[active_pos] = run->active[--run->num_active];
    run->free_slots[run->num_free++] = s;
}

/* Finishes every call that is done or past its client-side limit; returns how many. Closed loop:
 * the clients whose calls finished are no longer busy. */
static uint32_t collect(bench_run *run, bool *client_busy) {
    uint32_t finished = 0;
    int64_t t = now_ns();
    int64_t give_up_ns = ((int64_t)run->args->deadline_ms + CLIENT_GRACE_MS) * 1000000LL;
    for (uint32_t i = 0; i < run->num_active;) {
        bench_slot *slot = &run->slots[run->active[i]];
        if (isn_grpc_call_done(slot->call)) {
            isn_grpc_search_reply reply;
            char err[256];
            bool bad = isn_grpc_search_finish(slot->call, &reply, err, sizeof err) != 0;
            record_outcome(run, slot, &reply, bad, t);
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

/* Waits for input on any connection (or until `until_ns`), then lets each process what came. */
static void wait_and_poll(bench_run *run, int64_t until_ns) {
    struct pollfd fds[MAX_CONNECTIONS];
    uint32_t map[MAX_CONNECTIONS], n = 0;
    for (uint32_t i = 0; i < run->args->connections; i++) {
        if (!run->conns[i].client || run->conns[i].inflight == 0) continue;
        fds[n] = (struct pollfd){.fd = isn_grpc_fd(run->conns[i].client), .events = POLLIN};
        map[n++] = i;
    }
    int64_t wait = until_ns - now_ns();
    if (n && wait > MAX_WAIT_NS) wait = MAX_WAIT_NS;
    if (wait < 0) wait = 0;
    struct timespec ts = {(time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL)};
    ppoll(fds, n, &ts, NULL);
    char err[256];
    for (uint32_t j = 0; j < n; j++) isn_grpc_poll(run->conns[map[j]].client, 0, err, sizeof err);
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
    for (;;) {
        int64_t t = now_ns();
        int64_t next_event = give_up_at;
        if (rate > 0) {
            while (next_send <= t && next_send < run->measure_to_ns) {
                issue(run, next_send, 0);
                next_send += poisson_gap_ns(run, rate);
            }
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
        }
        bool sending_done = t >= run->measure_to_ns;
        if (!sending_done && run->measure_to_ns < next_event) next_event = run->measure_to_ns;
        if (sending_done && run->num_active == 0) break;
        if (t >= give_up_at) break;
        /* Sending also reads what has arrived: look before sleeping, or those answers wait. */
        if (collect(run, client_busy)) continue;
        wait_and_poll(run, next_event);
        collect(run, client_busy);
    }
    /* Whatever is still in flight past the last grace period is abandoned. */
    while (run->num_active) {
        bench_slot *slot = &run->slots[run->active[0]];
        isn_grpc_call_free(slot->call);
        if (slot->measured) run->stats.client_timeouts++;
        release_slot(run, 0);
    }
    free(client_ready);
    free(client_busy);
}

/* ------------------------------------------------------------------ plot */

static int write_plot(const char *png, const double *throughput, const double *p99_ms, const double *rates,
                      size_t n) {
    char data_path[] = "/tmp/isn-bench-plot-XXXXXX";
    int fd = mkstemp(data_path);
    if (fd < 0) return -1;
    FILE *data = fdopen(fd, "w");
    for (size_t i = 0; i < n; i++) fprintf(data, "%.3f %.3f %.1f\n", throughput[i], p99_ms[i], rates[i]);
    fclose(data);
    char script_path[] = "/tmp/isn-bench-gp-XXXXXX";
    fd = mkstemp(script_path);
    if (fd < 0) {
        unlink(data_path);
        return -1;
    }
    FILE *script = fdopen(fd, "w");
    fprintf(script,
            "set terminal pngcairo size 900,600\nset output '%s'\nset title 'isn-bench: throughput vs p99 latency'\n"
            "set xlabel 'throughput (answered queries/s)'\nset ylabel 'p99 latency (ms)'\nset grid\nset key off\n"
            "plot '%s' using 1:2 with linespoints pt 7\n",
            png, data_path);
    fclose(script);
    char command[512];
    snprintf(command, sizeof command, "gnuplot %s 2>&1", script_path);
    int rc = system(command);
    unlink(data_path);
    unlink(script_path);
    if (rc != 0) {
        fprintf(stderr, "isn-bench: gnuplot failed (exit %d); is gnuplot-nox installed?\n", rc);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
    bench_args a;
    if (parse_args(argc, argv, &a) != 0) return 2;
    if (!a.allow_remote && check_loopback(a.target) != 0) return 2;
    bench_run run = {.args = &a, .rng = a.seed};
    if (load_queries(a.queries_path, &run.queries, &run.num_queries) != 0) return 1;
    run.slots = calloc(a.max_inflight, sizeof *run.slots);
    run.active = calloc(a.max_inflight, sizeof *run.active);
    run.free_slots = calloc(a.max_inflight, sizeof *run.free_slots);
    if (!run.slots || !run.active || !run.free_slots) {
        fprintf(stderr, "isn-bench: out of memory\n");
        return 1;
    }
    for (uint32_t i = 0; i < a.max_inflight; i++) run.free_slots[run.num_free++] = a.max_inflight - 1 - i;
    /* Fail early with a clear message when the target is not there. */
    char err[256];
    run.conns[0].client = isn_grpc_connect(a.target, 2000, err, sizeof err);
    if (!run.conns[0].client) {
        fprintf(stderr, "isn-bench: %s\n", err);
        return 1;
    }
    size_t num_runs = a.num_sweep ? a.num_sweep : 1;
    double *rates = a.num_sweep ? a.sweep : &a.rate;
    double throughput[MAX_SWEEP], p99_ms[MAX_SWEEP];
    if (a.num_sweep) printf("{\"target\":\"%s\",\"sweep\":[", a.target);
    for (size_t r = 0; r < num_runs; r++) {
        double expected = rates[r] > 0 ? rates[r] * (a.duration_s + 1) * 1.2 + 1000 : 2e6;
        if (bench_stats_init(&run.stats, (size_t)(expected < 5e7 ? expected : 5e7)) != 0) {
            fprintf(stderr, "isn-bench: out of memory\n");
            return 1;
        }
        run_load(&run, rates[r]);
        if (r) printf(",");
        bench_stats_write_json(stdout, &run.stats, rates[r], a.concurrency, a.duration_s, a.deadline_ms);
        bench_percentiles p;
        bench_stats_percentiles(&run.stats, &p);
        throughput[r] = (double)run.stats.ok / a.duration_s;
        p99_ms[r] = p.p99 / 1000.0;
        fflush(stdout);
        bench_stats_free(&run.stats);
    }
    if (a.num_sweep) printf("]}");
    printf("\n");
    for (uint32_t i = 0; i < a.connections; i++) isn_grpc_close(run.conns[i].client);
    int rc = 0;
    if (a.plot_path && write_plot(a.plot_path, throughput, p99_ms, rates, num_runs) != 0) rc = 1;
    for (size_t i = 0; i < run.num_queries; i++) {
        free(run.queries[i].id);
        free(run.queries[i].text);
    }
    free(run.queries);
    free(run.slots);
    free(run.active);
    free(run.free_slots);
    return rc;
}
