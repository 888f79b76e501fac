/* isn-bench: load generator for any isn.v1.Search server (isnd, isn-agg), on the load generator of
 * grpc/ (isn_load_*: open loop with Poisson arrivals and latency from each request's scheduled send
 * time, or closed loop; --threads generators). Prints one JSON object (with --sweep: one per rate in
 * "sweep"). Sustained rate (--sustained MAX): the highest offered rate at which every one of --repeats
 * open-loop runs keeps p99 under the deadline and misses under --max-misses of the scheduled requests
 * (DESIGN section 7); the answer with a table on stderr. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grpc/client.h"

#define MAX_SWEEP 64

typedef struct {
    const char *target, *queries_path, *algo, *plot_path, *ranker;
    uint32_t n1;
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
    uint32_t repeats, searches;
    const char *label;
    double spike_rate, spike_s; /* --spike RATE:SECONDS */
    double client_throttle;     /* --client-throttle K (0: off) */
    const char *tls_ca, *tls_cert, *tls_key, *tls_server_name; /* TLS to the target (mutual with a cert) */
} bench_args;

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
          "  --ranker NAME     re-rank each answer with the server's ranker NAME; --n1 N: its best N\n"
          "                    candidates (default: the server's rerank.default_n1)\n"
          "  --connections C   HTTP/2 connections to spread requests over, per thread (default 4)\n"
          "  --threads T       T generator threads, each offering 1/T of the rate on its own connections\n"
          "                    (open loop only; default 1): for rates one thread cannot offer\n"
          "  --max-inflight M  requests in flight at most; more are counted as not_sent (default 20000)\n"
          "  --client-throttle K  open loop: while the server refuses, refuse requests in the client so that\n"
          "                    about K times what it accepts reaches it (K >= 1; Google SRE's client-side\n"
          "                    throttling over the last second), and a request with no stream to spare at once:\n"
          "                    counted as client_refused, never sent\n"
          "  --plot OUT.png    throughput vs p99 plot with gnuplot (one point per rate)\n"
          "  --allow-remote    load a target that is not on loopback (refused by default)\n"
          "  --tls-ca FILE     TLS: the target's certificate checked against this CA (PEM); --tls-cert FILE\n"
          "                    and --tls-key FILE for mutual TLS; --tls-server-name N: the name to check\n"
          "                    (default: the target's host)\n"
          "  --sustained MAX   the sustained rate at most MAX: every one of --repeats runs (default 3) keeps\n"
          "                    p99 < deadline and misses < --max-misses (default 0.001) of the scheduled\n"
          "                    requests; bisected to --resolution (default 0.05, relative); --label NAME\n"
          "                    names the configuration in the output; --searches N: N searches at once, a\n"
          "                    probed rate each in turn (a JSON line each), so that a machine whose speed\n"
          "                    drifts over the minutes they take drifts under all of them alike\n",
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
        {"tls-ca", 1, 0, 1000},     {"tls-cert", 1, 0, 1001},   {"tls-key", 1, 0, 1002}, {"tls-server-name", 1, 0, 1003},
        {"ranker", 1, 0, 1004},     {"n1", 1, 0, 1005},         {"client-throttle", 1, 0, 1006}, {"searches", 1, 0, 1007},
        {0, 0, 0, 0}};
    int c;
    uint32_t seed;
    while ((c = getopt_long(argc, argv, "k:", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 't': a->target = optarg; break;
        case 1000: a->tls_ca = optarg; break;
        case 1001: a->tls_cert = optarg; break;
        case 1002: a->tls_key = optarg; break;
        case 1003: a->tls_server_name = optarg; break;
        case 1004: a->ranker = optarg; break;
        case 1005: rc = parse_u32("--n1", optarg, 1, 1000000, &a->n1); break;
        case 1007: rc = parse_u32("--searches", optarg, 1, 16, &a->searches); break;
        case 1006: rc = parse_double("--client-throttle", optarg, 1, &a->client_throttle); break;
        case 'q': a->queries_path = optarg; break;
        case 'r': rc = parse_double("--rate", optarg, 0.001, &a->rate); break;
        case 'c': rc = parse_u32("--concurrency", optarg, 1, 100000, &a->concurrency); break;
        case 'd': rc = parse_double("--duration", optarg, 0.001, &a->duration_s); break;
        case 'w': rc = parse_double("--warmup", optarg, 0, &a->warmup_s); break;
        case 'D': rc = parse_u32("--deadline-ms", optarg, 1, 3600000, &a->deadline_ms); break;
        case 'k': rc = parse_u32("-k", optarg, 1, 1000000, &a->k); break;
        case 'C': rc = parse_u32("--connections", optarg, 1, ISN_LOAD_MAX_CONNECTIONS, &a->connections); break;
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
        case 'T': rc = parse_u32("--threads", optarg, 1, ISN_LOAD_MAX_THREADS, &a->threads); break;
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
    if (a->n1 && !a->ranker) {
        fprintf(stderr, "isn-bench: --n1 goes with --ranker (the candidates it re-ranks)\n");
        return -1;
    }
    if (a->spike_rate > 0 && a->rate <= 0) {
        fprintf(stderr, "isn-bench: --spike goes with --rate (the rate after the spike)\n");
        return -1;
    }
    if (a->searches && !a->sustained_max) {
        fprintf(stderr, "isn-bench: --searches goes with --sustained\n");
        return -1;
    }
    if (a->client_throttle > 0 && (a->concurrency || a->spike_rate > 0)) {
        fprintf(stderr, "isn-bench: --client-throttle is for open-loop load without --spike (which measures the server alone)\n");
        return -1;
    }
    if (a->threads > 1 && a->concurrency) {
        fprintf(stderr, "isn-bench: --threads is for open-loop load (--rate, --sweep, --sustained)\n");
        return -1;
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
    isn_query_log queries;
    if (isn_query_log_read(a.queries_path, true, 0, &queries, err, sizeof err) != 0) {
        fprintf(stderr, "isn-bench: %s\n", err);
        return 1;
    }
    if (queries.count == 0) {
        fprintf(stderr, "isn-bench: %s holds no queries\n", a.queries_path);
        return 1;
    }
    isn_grpc_tls *tls = NULL;
    if (a.tls_ca || a.tls_cert || a.tls_key) {
        isn_grpc_tls_config tls_config = {.ca_file = a.tls_ca, .cert_file = a.tls_cert, .key_file = a.tls_key};
        if (!a.tls_ca || !(tls = isn_grpc_tls_client_new(&tls_config, err, sizeof err))) {
            fprintf(stderr, "isn-bench: %s\n", a.tls_ca ? err : "--tls-cert and --tls-key need --tls-ca");
            isn_query_log_free(&queries);
            return 2;
        }
    }
    isn_load_config config = {.tls = tls, .server_name = a.tls_server_name, .target = a.target, .queries = &queries, .algo = a.algo, .ranker = a.ranker, .n1 = a.n1, .mode = a.mode, .k = a.k,
                              .deadline_ms = a.deadline_ms, .connections = a.connections,
                              .max_inflight = a.max_inflight, .threads = a.threads, .duration_s = a.duration_s,
                              .warmup_s = a.warmup_s, .spike_rate = a.spike_rate, .spike_s = a.spike_s, .client_throttle = a.client_throttle,
                              .seed = a.seed};
    isn_load *load = isn_load_new(&config, err, sizeof err);
    if (!load) {
        fprintf(stderr, "isn-bench: %s\n", err);
        isn_grpc_tls_free(tls);
        isn_query_log_free(&queries);
        return 1;
    }
    int rc = 0;
    if (a.sustained_max > 0) {
        isn_load_search search = {.max_rate = a.sustained_max, .resolution = a.resolution,
                                  .max_misses = a.max_misses, .repeats = a.repeats, .searches = a.searches, .label = a.label};
        if (isn_load_sustained(load, &search, stdout, stderr) != 0) {
            fprintf(stderr, "isn-bench: out of memory\n");
            rc = 1;
        }
    } else {
        size_t num_runs = a.num_sweep ? a.num_sweep : 1;
        double *rates = a.num_sweep ? a.sweep : &a.rate;
        double throughput[MAX_SWEEP], p99_ms[MAX_SWEEP];
        if (a.num_sweep) printf("{\"target\":\"%s\",\"sweep\":[", a.target);
        for (size_t r = 0; r < num_runs && rc == 0; r++) {
            bench_stats stats;
            if (isn_load_run(load, rates[r], a.concurrency, &stats) != 0) {
                fprintf(stderr, "isn-bench: out of memory\n");
                rc = 1;
                break;
            }
            if (r) printf(",");
            bench_stats_write_json(stdout, &stats, rates[r], a.concurrency, a.duration_s, a.deadline_ms);
            bench_percentiles p;
            bench_stats_percentiles(&stats, &p);
            throughput[r] = (double)stats.ok / a.duration_s;
            p99_ms[r] = p.p99 / 1000.0;
            fflush(stdout);
            bench_stats_free(&stats);
        }
        if (a.num_sweep) printf("]}");
        printf("\n");
        if (rc == 0 && a.plot_path && write_plot(a.plot_path, throughput, p99_ms, rates, num_runs) != 0) rc = 1;
    }
    isn_load_free(load);
    isn_grpc_tls_free(tls);
    isn_query_log_free(&queries);
    return rc;
}
