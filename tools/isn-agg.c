/* isn-agg: the reference aggregator (agg/agg.h) as a program: arguments, signals and the libuv
 * loop its gRPC server, stats endpoint, replica connections and timers run on. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>
#include <uv.h>

#include "agg/agg.h"
#include "base/base.h"

static void usage(FILE *out) {
    fputs("usage: isn-agg [--config FILE] [--listen HOST:PORT] [--stats-listen HOST:PORT|\"\"]\n"
          "               --partition HOST:PORT[,HOST:PORT...] (once per partition, its replicas)\n"
          "               --partition dns:NAME:PORT (replicas: NAME's A/AAAA records, re-resolved)\n"
          "               [--global-stats] [--no-hedge] [--set KEY=VALUE ...] [--check-config]\n"
          "--check-config validates the configuration (file and flags) and exits. conf/isn-agg.conf documents\n"
          "every key.\n"
          "Aggregates isn.v1.Search over partitions. Keys (file: KEY = VALUE, optional [agg] section;\n"
          "command line: --set KEY=VALUE): listen, stats_listen, partition (repeat), default_timeout_ms (1000),\n"
          "margin_ms (2), default_k (10), max_k (10000), hedge (true), hedge_min_us (500),\n"
          "hedge_initial_ms (20), extra_requests_ratio (0.1), extra_requests_burst (10), max_inflight_per_replica\n"
          "(256), drain_timeout_ms (10000), global_stats (false), probe_interval_ms (500), failures_to_eject (3),\n"
          "ready_coverage (1: ready while every partition has a healthy replica; 0.5: half of them),\n"
          "log_json (false: JSON Lines logs), access_log (false: a line per Search with request and trace id),\n"
          "dns_interval_ms (5000: dns: partitions are resolved again this often; replicas join and drain live),\n"
          "dns_servers (\"\": /etc/resolv.conf's; else IP[:PORT],...).\n"
          "The log names the ports (port 0 = any free port). SIGTERM/SIGINT drain: no new connection or stream,\n"
          "Health NOT_SERVING, every query in flight answered from the partitions by its own deadline (at most\n"
          "drain_timeout_ms, 10000), then exit 0; a second one stops at once (exit 1). SIGHUP reads\n"
          "the file and the command line again and takes new partitions and replicas without failing a query.\n",
          out);
}

static bool check_only;

static int parse_args(int argc, char **argv, agg_config *config) {
    agg_config_default(config);
    optind = 0; /* getopt starts over (a reload parses the same arguments again) */
    char err[512];
    /* The file first, so the command line overrides it (partitions from both add up). */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config") && agg_config_load(config, argv[i + 1], err, sizeof err) != 0) {
            log_error("%s", err);
            return -1;
        }
    static const struct option opts[] = {{"config", 1, 0, 'c'},    {"listen", 1, 0, 'l'}, {"stats-listen", 1, 0, 'S'},
                                         {"partition", 1, 0, 'p'}, {"global-stats", 0, 0, 'g'},
                                         {"no-hedge", 0, 0, 'n'},  {"set", 1, 0, 's'},   {"help", 0, 0, 'h'},
                                         {"check-config", 0, 0, 'C'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'c': break;
        case 'l': rc = agg_config_set(config, "listen", optarg, err, sizeof err); break;
        case 'S': rc = agg_config_set(config, "stats_listen", optarg, err, sizeof err); break;
        case 'p': rc = agg_config_set(config, "partition", optarg, err, sizeof err); break;
        case 'g': config->global_stats = true; break;
        case 'n': config->hedge = false; break;
        case 's': {
            char key[64];
            const char *eq = strchr(optarg, '=');
            if (!eq || (size_t)(eq - optarg) >= sizeof key) {
                snprintf(err, sizeof err, "--set wants KEY=VALUE, got \"%s\"", optarg);
                rc = -1;
                break;
            }
            memcpy(key, optarg, (size_t)(eq - optarg));
            key[eq - optarg] = '\0';
            rc = agg_config_set(config, key, eq + 1, err, sizeof err);
            break;
        }
        case 'h': usage(stdout); exit(0);
        case 'C': check_only = true; break;
        default: usage(stderr); return -1;
        }
        if (rc != 0) {
            log_error("%s", err);
            return -1;
        }
    }
    if (optind < argc) {
        log_error("unexpected argument \"%s\"", argv[optind]);
        return -1;
    }
    if (agg_config_validate(config, err, sizeof err) != 0) {
        log_error("%s", err);
        return -1;
    }
    return 0;
}

typedef struct {
    agg *aggregator;
    int argc;
    char **argv;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t watchdog;
    bool stopping;
} program;

/* SIGTERM/SIGINT: drain; the loop ends once everything is closed. A second one stops at once. The
 * handlers stay installed but stop holding the loop open: closing them would give the signals their
 * default action back, and one more in the last moments would kill the process instead of its exit. */
static void on_stop_signal(uv_signal_t *handle, int signum) {
    program *p = handle->data;
    const char *name = signum == SIGTERM ? "SIGTERM" : "SIGINT";
    if (p->stopping) {
        log_warn("%s again: stopping at once", name);
        agg_stop_now(p->aggregator);
        return;
    }
    p->stopping = true;
    log_info("stopping (%s): draining; a second SIGTERM or SIGINT stops at once", name);
    sd_notify(0, "STOPPING=1\nSTATUS=draining");
    agg_drain(p->aggregator);
    uv_unref((uv_handle_t *)&p->sigterm);
    uv_unref((uv_handle_t *)&p->sigint);
    uv_unref((uv_handle_t *)&p->sighup);
    if (p->watchdog.data) uv_close((uv_handle_t *)&p->watchdog, NULL);
}

/* SIGHUP: the configuration file and the command line again; a bad one is logged and changes nothing. */
static void on_reload_signal(uv_signal_t *handle, int signum) {
    (void)signum;
    program *p = handle->data;
    sd_notify(0, "RELOADING=1");
    agg_tls_reload(p->aggregator);
    static agg_config config;
    char err[512];
    if (parse_args(p->argc, p->argv, &config) != 0) {
        log_warn("reload refused: the configuration above is invalid; the old one stays");
    } else if (agg_reload(p->aggregator, &config, err, sizeof err) != 0) {
        log_warn("reload refused: %s; the old one stays", err);
    } else {
        log_set_json(config.log_json);
        log_info("reload: %u partitions; queries arriving now wait for those in progress", config.num_partitions);
    }
    sd_notify(0, "READY=1");
}

/* systemd's watchdog: pinged from the loop, so a loop that stops turning is restarted. */
static void on_watchdog(uv_timer_t *timer) {
    (void)timer;
    sd_notify(0, "WATCHDOG=1");
}

static void start_watchdog(uv_loop_t *loop, program *p) {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || !usec) return;
    uv_timer_init(loop, &p->watchdog);
    p->watchdog.data = p;
    uint64_t every_ms = usec / 2000 ? usec / 2000 : 1;
    uv_timer_start(&p->watchdog, on_watchdog, every_ms, every_ms);
    log_info("systemd watchdog: pinging every %llu ms", (unsigned long long)every_ms);
}

static int port_of(const char *address) {
    const char *colon = strrchr(address, ':');
    return colon ? atoi(colon + 1) : 0;
}

int main(int argc, char **argv) {
    static agg_config config;
    if (parse_args(argc, argv, &config) != 0) return 2;
    if (check_only) {
        printf("configuration OK: %u partitions\n", config.num_partitions);
        return 0;
    }
    log_set_json(config.log_json);
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    char err[512];
    static program p;
    p.aggregator = agg_new(loop, &config, err, sizeof err);
    if (!p.aggregator || agg_serve(p.aggregator, err, sizeof err) != 0) {
        log_error("%s", err);
        return 1;
    }
    p.argc = argc;
    p.argv = argv;
    uv_signal_init(loop, &p.sigterm);
    uv_signal_init(loop, &p.sigint);
    uv_signal_init(loop, &p.sighup);
    p.sigterm.data = p.sigint.data = p.sighup.data = &p;
    uv_signal_start(&p.sigterm, on_stop_signal, SIGTERM);
    uv_signal_start(&p.sigint, on_stop_signal, SIGINT);
    uv_signal_start(&p.sighup, on_reload_signal, SIGHUP);
    agg_fetch_partition_info(p.aggregator);
    /* "started:" says the process serves; whether it can answer is readiness, said as /readyz says it */
    char why[512];
    bool ready = agg_ready(p.aggregator, why, sizeof why);
    log_info("started: %u partitions, gRPC port %d, stats port %d, hedging %s, global statistics %s; %s (%s)",
             config.num_partitions, port_of(agg_grpc_address(p.aggregator)), port_of(agg_stats_address(p.aggregator)),
             config.hedge ? "on" : "off", config.global_stats ? "on" : "off", ready ? "ready" : "not ready", why);
    sd_notify(0, "READY=1\nSTATUS=serving");
    start_watchdog(loop, &p);
    uv_run(loop, UV_RUN_DEFAULT);
    /* replaces libuv's handlers without closing them: a signal now is ignored, not the exit's end */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    uint32_t lost = agg_lost_queries(p.aggregator);
    agg_free(p.aggregator);
    uv_loop_close(loop);
    if (lost) {
        log_warn("stopped: %u queries in flight were answered UNAVAILABLE (stopped at once)", lost);
        return 1;
    }
    log_info("stopped");
    return 0;
}
