/* Signals: SIGTERM and SIGINT drain (a second SIGINT stops at once); SIGHUP re-reads the
 * configuration file, re-applies the command-line flags, and applies the result when every key
 * that changed can change without a restart. */
#include <signal.h>
#include <stdio.h>

#include <systemd/sd-daemon.h>

#include "base/base.h"
#include "daemon/rankers.h"
#include "daemon/server.h"

static void reload(isn_server *server) {
    sd_notify(0, "RELOADING=1");
    isn_conf next;
    isn_conf_default(&next);
    char err[2048];
    int problems = server->config_path ? isn_conf_load_file(&next, server->config_path, err, sizeof err) : 0;
    for (size_t i = 0; problems == 0 && i < server->num_overrides; i++)
        if (isn_conf_set_option(&next, server->overrides[i], err, sizeof err) < 0) problems = 1;
    if (problems == 0 && isn_conf_validate(&next, err, sizeof err) < 0) problems = 1;
    char key[64];
    if (problems != 0) {
        log_error("SIGHUP: configuration not reloaded: %s", err);
        LOOP_METRICS(&server->loops[0], m->reload_failures++);
    } else if (!isn_conf_reloadable(&server->conf, &next, key, sizeof key)) {
        log_error("SIGHUP: configuration not reloaded: %s changed, which needs a restart", key);
        LOOP_METRICS(&server->loops[0], m->reload_failures++);
    } else {
        server->conf = next;
        log_set_level(next.log_level);
        log_set_json(next.log_json);
        isn_grpc_server_config isn_grpc_config;
        isn_grpc_stats_config stats_config;
        server_transport_config(server, &server->conf, &isn_grpc_config, &stats_config);
        serving_loops_tell(server, LOOP_RECONFIGURE); /* each loop takes the new configuration */
        if (server->stats) isn_grpc_stats_server_reconfigure(server->stats, &stats_config);
        LOOP_METRICS(&server->loops[0], m->reloads++);
        log_info("SIGHUP: configuration reloaded from %s (log level %s, max_k %u, drain_timeout %u ms)",
                 server->config_path ? server->config_path : "defaults and flags", isn_log_level_name(next.log_level),
                 next.max_k, next.drain_timeout_ms);
        generations_check(server, "SIGHUP");
    }
    server_tls_reload(server);
    if (rankers_reload(server->conf.default_n1, server->conf.max_n1) > 0)
        LOOP_METRICS(&server->loops[0], m->reload_failures++);
    sd_notify(0, server->state == SERVER_READY ? "READY=1\nSTATUS=serving" : "READY=1");
}

static void on_signal(uv_signal_t *handle, int signum) {
    isn_server *server = handle->data;
    if (server->state == SERVER_STOPPING) return; /* the loops may be gone: nothing to reload or drain */
    if (signum == SIGHUP) {
        reload(server);
        return;
    }
    if (server->state == SERVER_DRAINING && signum == SIGINT) {
        uint32_t open = serving_loops_open_calls(server);
        log_warn("SIGINT again: stopping now with %u requests open", open);
        server->lost_requests += open;
        server->exit_code = 1;
        server_stop(server);
        return;
    }
    server_begin_drain(server, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* systemd's watchdog (WatchdogSec=): pinged from the loop at half the interval, so a loop that stops
 * turning gets the service restarted. The ping goes on while the index loads (the loop turns). */
static void on_watchdog(uv_timer_t *timer) {
    (void)timer;
    sd_notify(0, "WATCHDOG=1");
}

static void watchdog_start(isn_server *server) {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || !usec) return;
    uv_timer_init(server->loop, &server->watchdog);
    server->watchdog.data = server;
    uint64_t every_ms = usec / 2000 ? usec / 2000 : 1;
    uv_timer_start(&server->watchdog, on_watchdog, every_ms, every_ms);
    log_info("systemd watchdog: pinging every %llu ms", (unsigned long long)every_ms);
}

void signals_start(isn_server *server) {
    watchdog_start(server);
    uv_signal_init(server->loop, &server->sigterm);
    uv_signal_init(server->loop, &server->sigint);
    uv_signal_init(server->loop, &server->sighup);
    server->sigterm.data = server->sigint.data = server->sighup.data = server;
    uv_signal_start(&server->sigterm, on_signal, SIGTERM);
    uv_signal_start(&server->sigint, on_signal, SIGINT);
    uv_signal_start(&server->sighup, on_signal, SIGHUP);
}

void signals_ignore(void) {
    /* replaces libuv's handlers without closing them: the process only ends from here on */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
}
