/* Start-up (listen first, load the index off the loop, then READY), the drain after SIGTERM or
 * SIGINT, and the orderly stop that ends uv_run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "base/base.h"
#include "daemon/rankers.h"
#include "daemon/server.h"

#define FORCED_STOP_GRACE_MS 2000

static void close_if_open(uv_handle_t *handle) {
    if (handle->loop && !uv_is_closing(handle)) uv_close(handle, NULL);
}

/* Between closing every loop's connections (no loop submits any more) and closing their last
 * handles: joined before the loops' completion handles close, as a worker may still be signalling
 * one. The calls the workers held are freed with the loops (serving_loops_free, after uv_run). */
static void stop_search_service(isn_server *server) {
    search_service_stop(server->pool);
    server->pool = NULL;
}

/* Everything answered (or given up): close the remaining handles so uv_run returns. */
void server_stop(isn_server *server) {
    if (server->state == SERVER_STOPPING) return;
    server->state = SERVER_STOPPING;
    generations_stop(server);
    if (server->stats) isn_grpc_stats_server_close(server->stats);
    if (server->grpc_tls) isn_grpc_tls_unwatch(server->grpc_tls);
    if (server->stats_tls) isn_grpc_tls_unwatch(server->stats_tls);
    serving_loops_close(server, stop_search_service);
    close_if_open((uv_handle_t *)&server->drain_timer);
    /* The signal handlers stay installed (unreferenced, so the loop can end): closing them would give
     * the signals their default action back, and a SIGTERM or SIGHUP in the last moments of the exit
     * would kill the process by the signal instead of its exit status. isnd ignores them after the
     * loop (signals_ignore). */
    if (server->sigterm.loop) uv_unref((uv_handle_t *)&server->sigterm);
    if (server->sigint.loop) uv_unref((uv_handle_t *)&server->sigint);
    if (server->sighup.loop) uv_unref((uv_handle_t *)&server->sighup);
    if (server->watchdog.data) close_if_open((uv_handle_t *)&server->watchdog);
}

static uint32_t open_calls(const isn_server *server) { return serving_loops_open_calls(server); }

static void on_forced_stop(uv_timer_t *timer) {
    isn_server *server = timer->data;
    server->lost_requests += open_calls(server);
    log_warn("drain: %u requests still open after the grace period; closing their connections", open_calls(server));
    server->exit_code = 1;
    server_stop(server);
}

static void on_drain_timeout(uv_timer_t *timer) {
    isn_server *server = timer->data;
    if (server->state != SERVER_DRAINING) return;
    log_warn("drain_timeout (%u ms) reached with %u requests open; answering the queued ones UNAVAILABLE",
             server->conf.drain_timeout_ms, open_calls(server));
    server->drain_forced = true;
    if (server->pool) search_service_abandon_queued(server->pool);
    uv_timer_start(&server->drain_timer, on_forced_stop, FORCED_STOP_GRACE_MS, 0);
    serving_loops_tell(server, LOOP_FAIL_WAITING);
}

void server_begin_drain(isn_server *server, const char *why) {
    if (server->state == SERVER_DRAINING || server->state == SERVER_STOPPING) return;
    server_state was = server->state;
    server->drain_start_ns = isn_now_ns(); /* before the state: the loops read it once they see DRAINING */
    server->state = SERVER_DRAINING;
    sd_notify(0, "STOPPING=1\nSTATUS=draining");
    serving_loops_tell(server, LOOP_HEALTH_SHUTDOWN); /* NOT_SERVING to every watcher, and their streams end */
    log_info("%s: draining (%u requests open, drain_timeout %u ms)", why, open_calls(server),
             server->conf.drain_timeout_ms);
    if (was == SERVER_STARTING) {
        isn_grpc_server_stop_accepting(server->loops[0].grpc); /* the listening loop */
        server->stop_after_load = true; /* the load thread cannot be interrupted; stop when it returns */
        return;
    }
    uv_timer_start(&server->drain_timer, on_drain_timeout, server->conf.drain_timeout_ms, 0);
    serving_loops_tell(server, LOOP_DRAIN); /* once every loop has drained, the server stops */
}

/* ------------------------------------------------------------------ the transport */

void server_transport_config(isn_server *server, const isn_conf *conf, isn_grpc_server_config *grpc,
                             isn_grpc_stats_config *stats) {
    isn_grpc_connection_limit_set(&server->connection_limit, conf->max_connections);
    *grpc = (isn_grpc_server_config){
        .max_concurrent_streams = conf->max_concurrent_streams,
        .adaptive_stream_limit = conf->adaptive_stream_limit,
        .stream_limit_target_us = conf->stream_limit_target_us,
        .max_message_bytes = conf->max_message_bytes,
        .header_timeout_ms = conf->header_timeout_ms,
        .idle_timeout_ms = conf->idle_timeout_ms,
        .call_app_bytes = sizeof(rpc_call),
        .limit = &server->connection_limit,
        .max_requests_per_connection = conf->max_requests_per_connection,
        .write_timeout_ms = conf->write_timeout_ms,
        .min_send_rate = conf->min_send_rate_bytes,
        .memory_budget_bytes = (uint64_t)conf->memory_budget_mib << 20,
        .shared_budget = &server->memory_budget,
        .max_header_list_bytes = conf->max_header_list_bytes,
        .max_early_resets_per_second = conf->max_early_resets_per_second,
        .reset_hold_ms = conf->reset_hold_ms,
        .tls = server->grpc_tls,
        .stall_seen_ns = ISN_SCHEDULER_STALL_SEEN_NS, /* the loops keep their polls short: stall_watch.c */
    };
    *stats = (isn_grpc_stats_config){
        .tls = server->stats_tls,
        .server_name = "isnd/" ISND_VERSION,
        .header_timeout_ms = conf->header_timeout_ms,
        .idle_timeout_ms = conf->idle_timeout_ms,
        .max_connections = conf->stats_max_connections,
        .write_timeout_ms = conf->stats_write_timeout_ms,
    };
}

int server_tls_start(isn_server *server, char *err, size_t err_len) {
    const isn_conf *conf = &server->conf;
    if (!conf->tls_cert[0]) {
        char host[256], why[160];
        uint16_t port;
        if (isn_parse_host_port(conf->listen, host, sizeof host, &port, why, sizeof why) == 0 &&
            strcmp(host, "127.0.0.1") && strcmp(host, "::1") && strcmp(host, "localhost"))
            log_warn("gRPC on %s is plaintext: set server.tls_cert and server.tls_key for a port reached over a network",
                     conf->listen);
        return 0;
    }
    isn_grpc_tls_config grpc = {.cert_file = conf->tls_cert, .key_file = conf->tls_key,
                                .client_ca_file = conf->tls_client_ca, .allowed_peers = conf->tls_allowed_peers};
    isn_grpc_tls_config stats = {.cert_file = conf->tls_cert, .key_file = conf->tls_key, .alpn = "http/1.1"};
    if (!(server->grpc_tls = isn_grpc_tls_server_new(&grpc, err, err_len))) return -1;
    if (conf->stats_listen[0] && !(server->stats_tls = isn_grpc_tls_server_new(&stats, err, err_len))) return -1;
    if (conf->tls_watch_interval_ms) {
        if (isn_grpc_tls_watch(server->grpc_tls, server->loop, conf->tls_watch_interval_ms, err, err_len) < 0) return -1;
        if (server->stats_tls &&
            isn_grpc_tls_watch(server->stats_tls, server->loop, conf->tls_watch_interval_ms, err, err_len) < 0)
            return -1;
    }
    log_info("TLS on: certificate %s%s%s", conf->tls_cert, conf->tls_client_ca[0] ? ", client certificates from " : "",
             conf->tls_client_ca);
    return 0;
}

void server_tls_reload(isn_server *server) {
    char err[400];
    isn_grpc_tls *sets[2] = {server->grpc_tls, server->stats_tls};
    for (int i = 0; i < 2; i++) {
        if (!sets[i]) continue;
        if (isn_grpc_tls_reload(sets[i], err, sizeof err) == 0)
            log_info("SIGHUP: TLS certificate reloaded for new %s connections", i == 0 ? "gRPC" : "stats");
        else
            log_error("SIGHUP: TLS certificate not reloaded: %s; the one in use keeps serving", err);
    }
}

/* ------------------------------------------------------------------ loading */

static void load_index(uv_work_t *work) {
    isn_server *server = work->data;
    uint64_t start = isn_now_ns();
    index_generation *first = generations_open_first(server, server->load_error, sizeof server->load_error);
    if (!first) return;
    log_info("index %s: %u documents, %u terms, %llu bytes, format version %u, opened in %.3f s",
             server->conf.index_path, server->info->num_docs, server->info->num_terms,
             (unsigned long long)server->info->file_bytes, server->info->version,
             (double)(isn_now_ns() - start) / 1e9);
    if (rankers_start(server->conf.ranker_dir, server->info, server->conf.default_n1, server->conf.max_n1,
                      server->load_error, sizeof server->load_error) < 0)
        return;
    uint32_t workers = server->conf.workers, standby = 0;
    char sized[200] = "";
    if (workers == 0) {
        /* pinned loops (server.pin_loops) keep their CPUs to themselves: the workers are sized by the rest */
        uint32_t cpus = server->loop_cpus ? server->num_worker_cpus : isn_cpus_available(), gpus = server->gpus_expected;
        uint32_t loops = server->loop_cpus ? 0 : server->num_loops;
        workers = isn_scheduler_default_workers(cpus, loops, gpus);
        /* sized beside a GPU that may never serve (its upload failed) or not yet (uploading): the rest of the
         * CPU-only node's workers stand by for that while */
        uint32_t cpu_only = isn_scheduler_default_workers(cpus, loops, 0);
        standby = gpus && server->conf.gpu_enable && cpu_only > workers ? cpu_only - workers : 0;
        if (gpus)
            snprintf(sized, sizeof sized,
                     " (search.workers = 0: %u CPUs less %u %sloops and %u GPU dispatchers) and %u standby workers "
                     "(working while no GPU holds the index)",
                     cpus + server->num_loops - loops, server->num_loops, loops ? "" : "pinned ", gpus, standby);
        else if (server->conf.gpu_enable)
            snprintf(sized, sizeof sized, " (search.workers = 0: one per CPU%s, no device of gpu.enable on this machine)",
                     loops ? "" : " the pinned loops leave");
        else if (!loops)
            snprintf(sized, sizeof sized, " (search.workers = 0: one per CPU the pinned loops leave)");
    }
    uint32_t spares = server->conf.spare_workers;
    char spared[112] = "";
    if (spares && server->loop_cpus)
        snprintf(spared, sizeof spared, " and %u spare workers (each on a loop's CPU, working while that loop is idle)",
                 spares);
    else if (spares)
        snprintf(spared, sizeof spared, " and %u spare workers (working while that many of the %u loops are idle)", spares,
                 server->num_loops);
    start = isn_now_ns();
    search_service_threads threads = {.workers = workers + spares + standby,
                                      .spares = spares,
                                      .standby = standby,
                                      .idle_loops = serving_loops_idle,
                                      .loop_idle = serving_loop_idle,
                                      .loops = server,
                                      .worker_cpus = server->worker_cpus,
                                      .num_worker_cpus = server->num_worker_cpus,
                                      .spare_cpus = server->loop_cpus,
                                      .num_spare_cpus = server->loop_cpus ? server->num_loops : 0,
                                      .idle_policy = isn_conf_worker_idle_policy(&server->conf, isn_cpus_available(),
                                                                                 server->num_loops)};
    server->pool = search_service_start(first, &server->conf, &threads, server->load_error, sizeof server->load_error);
    if (!server->pool) return;
    server->num_workers = workers + spares + standby;
    char policy[48];
    if (threads.idle_policy) snprintf(policy, sizeof policy, "in SCHED_IDLE");
    else snprintf(policy, sizeof policy, "at nice +%u", server->conf.worker_nice);
    log_info("%u search workers%s%s started %s%s (queries analysed on the %s) in %.3f s", workers, sized, spared, policy,
             server->conf.warm_up ? " and warmed up" : "",
             search_service_analyses_on_loop(server->pool) ? "loop thread" : "workers",
             (double)(isn_now_ns() - start) / 1e9);
}

static void on_loaded(uv_work_t *work, int status) {
    isn_server *server = work->data;
    if (server->state == SERVER_STOPPING) { /* stopped for good while loading (SIGINT twice) */
        search_service_stop(server->pool);
        server->pool = NULL;
        return;
    }
    if (status < 0 || !server->pool) {
        log_error("cannot serve: %s", status < 0 ? uv_strerror(status) : server->load_error);
        server->exit_code = 1;
        server_stop(server);
        return;
    }
    if (server->stop_after_load) {
        log_info("index loaded during drain; stopping");
        server_stop(server);
        return;
    }
    generations_serve_first(server);
    server->state = SERVER_READY;
    server->ready_ns = isn_now_ns();
    serving_loops_tell(server, LOOP_HEALTH_CHANGED);
    log_info("ready: serving partition %u on %s (stats on %s) after %.3f s", server->conf.partition_id,
             server->grpc_address, server->stats ? server->stats_address : "-",
             (double)(server->ready_ns - server->start_ns) / 1e9);
    char status_line[200];
    snprintf(status_line, sizeof status_line, "READY=1\nSTATUS=serving partition %u on %s", server->conf.partition_id,
             server->grpc_address);
    sd_notify(0, status_line);
    generations_upload_gpu(server);
}

int server_start(isn_server *server, char *err, size_t err_len) {
    server->start_ns = isn_now_ns();
    server->start_time = isn_wall_seconds();
    server->state = SERVER_STARTING;
    uv_loop_t *loop = server->loop;
    server->generations = generations_new(server);
    if (!server->generations) return isn_error(err, err_len, "out of memory for the index generations");

    if (server_tls_start(server, err, err_len) < 0) return -1;
    isn_grpc_server_config isn_grpc_config;
    isn_grpc_stats_config stats_config;
    server_transport_config(server, &server->conf, &isn_grpc_config, &stats_config);
    if (serving_loops_make(server, err, err_len) < 0) return -1;
    if (isn_grpc_server_listen(server->loops[0].grpc, server->conf.listen, server->grpc_address,
                           sizeof server->grpc_address, err, err_len) < 0)
        return -1;
    log_info("gRPC listening on %s", server->grpc_address);
    if (server->conf.stats_listen[0]) {
        server->stats = isn_grpc_stats_server_new(loop, &stats_config, &stats_pages, server);
        if (!server->stats) return isn_error(err, err_len, "out of memory for the stats endpoint");
        if (isn_grpc_stats_server_listen(server->stats, server->conf.stats_listen, server->stats_address,
                                     sizeof server->stats_address, err, err_len) < 0) {
            isn_grpc_server_stop_accepting(server->loops[0].grpc);
            return -1;
        }
        log_info("stats listening on %s://%s (/metrics /stats /healthz /readyz)", server->stats_tls ? "https" : "http",
                 server->stats_address);
    }

    uv_timer_init(loop, &server->drain_timer);
    server->drain_timer.data = server;
    signals_start(server);
    if (serving_loops_start(server, err, err_len) < 0) return -1;

    server->load_work.data = server;
    int rc = uv_queue_work(loop, &server->load_work, load_index, on_loaded);
    if (rc < 0) {
        snprintf(err, err_len, "cannot start loading: %s", uv_strerror(rc));
        return -1;
    }
    serving_loops_pin_first(server); /* the thread pool's threads are there now, on every CPU */
    return 0;
}
