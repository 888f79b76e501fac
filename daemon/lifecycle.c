/* Start-up (listen first, load the index off the loop, then READY), the drain after SIGTERM or
 * SIGINT, the timeout sweep, and the orderly stop that ends uv_run. */
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

/* Everything answered (or given up): close the remaining handles so uv_run returns. */
void server_stop(isn_server *server) {
    if (server->state == SERVER_STOPPING) return;
    server->state = SERVER_STOPPING;
    for (grpc_conn *conn = server->grpc_conns; conn; conn = conn->next) grpc_conn_close(conn);
    for (stats_conn *conn = server->stats_conns; conn; conn = conn->next) stats_conn_close(conn);
    /* Joined before the async handle closes: a worker may still be signalling it. */
    search_service_stop(server->pool);
    server->pool = NULL;
    while (server->orphans) {
        grpc_stream *stream = server->orphans;
        server->orphans = stream->next;
        grpc_stream_release(server, stream);
    }
    grpc_free_stream_pool(server);
    if (server->grpc_listening) close_if_open((uv_handle_t *)&server->grpc_listener);
    if (server->stats_listening) close_if_open((uv_handle_t *)&server->stats_listener);
    server->grpc_listening = server->stats_listening = false;
    close_if_open((uv_handle_t *)&server->completion_async);
    close_if_open((uv_handle_t *)&server->flush_check);
    close_if_open((uv_handle_t *)&server->sweep_timer);
    close_if_open((uv_handle_t *)&server->drain_timer);
    close_if_open((uv_handle_t *)&server->sigterm);
    close_if_open((uv_handle_t *)&server->sigint);
    close_if_open((uv_handle_t *)&server->sighup);
}

void server_check_drained(isn_server *server) {
    if (server->state != SERVER_DRAINING) return;
    if (server->open_streams > 0) return;
    /* Nothing left to answer: let each connection finish writing, then go. */
    bool writing = false;
    for (grpc_conn *conn = server->grpc_conns; conn; conn = conn->next) {
        if (conn->closing) continue;
        grpc_conn_close_when_flushed(conn);
        writing = true;
    }
    if (writing || server->num_grpc_conns) return; /* each close calls back here */
    double seconds = (double)(monotonic_ns() - server->drain_start_ns) / 1e9;
    if (server->lost_requests) {
        log_warn("drained in %.3f s; %llu requests could not be answered", seconds,
                 (unsigned long long)server->lost_requests);
        server->exit_code = 1;
    } else {
        log_info("drained in %.3f s; every request answered", seconds);
    }
    server_stop(server);
}

static void on_forced_stop(uv_timer_t *timer) {
    isn_server *server = timer->data;
    server->lost_requests += server->open_streams;
    log_warn("drain: %u requests still open after the grace period; closing their connections",
             server->open_streams);
    server->exit_code = 1;
    server_stop(server);
}

static void on_drain_timeout(uv_timer_t *timer) {
    isn_server *server = timer->data;
    if (server->state != SERVER_DRAINING) return;
    log_warn("drain_timeout (%u ms) reached with %u requests open; answering the queued ones UNAVAILABLE",
             server->conf.drain_timeout_ms, server->open_streams);
    server->drain_forced = true;
    if (server->pool) search_service_abandon_queued(server->pool);
    for (grpc_conn *conn = server->grpc_conns; conn; conn = conn->next) {
        if (conn->closing) continue;
        for (grpc_stream *stream = conn->streams; stream; stream = stream->next)
            if (!stream->responded && !stream->job_in_flight)
                grpc_stream_fail(stream, GRPC_STATUS_UNAVAILABLE, "server is shutting down");
    }
    uv_timer_start(&server->drain_timer, on_forced_stop, FORCED_STOP_GRACE_MS, 0);
    server_check_drained(server);
}

void server_begin_drain(isn_server *server, const char *why) {
    if (server->state == SERVER_DRAINING || server->state == SERVER_STOPPING) return;
    server_state was = server->state;
    server->state = SERVER_DRAINING;
    server->drain_start_ns = monotonic_ns();
    sd_notify(0, "STOPPING=1\nSTATUS=draining");
    log_info("%s: draining (%u requests open, drain_timeout %u ms)", why, server->open_streams,
             server->conf.drain_timeout_ms);
    if (server->grpc_listening) {
        uv_close((uv_handle_t *)&server->grpc_listener, NULL);
        server->grpc_listening = false;
    }
    if (was == SERVER_STARTING) {
        server->stop_after_load = true; /* the load thread cannot be interrupted; stop when it returns */
        return;
    }
    for (grpc_conn *conn = server->grpc_conns; conn; conn = conn->next) grpc_conn_goaway(conn);
    uv_timer_start(&server->drain_timer, on_drain_timeout, server->conf.drain_timeout_ms, 0);
    server_check_drained(server);
}

/* ------------------------------------------------------------------ timers */

static uint64_t sweep_period_ms(const isn_conf *conf) {
    uint64_t shortest = conf->header_timeout_ms < conf->idle_timeout_ms ? conf->header_timeout_ms : conf->idle_timeout_ms;
    uint64_t period = shortest / 4;
    return period < 10 ? 10 : period > 1000 ? 1000 : period;
}

static void on_sweep(uv_timer_t *timer) {
    isn_server *server = timer->data;
    uint64_t now = monotonic_ns();
    grpc_sweep(server, now);
    stats_sweep(server, now);
    uint64_t period = sweep_period_ms(&server->conf);
    if (uv_timer_get_repeat(timer) != period) uv_timer_set_repeat(timer, period); /* after a reload */
}

/* ------------------------------------------------------------------ loading */

static void load_index(uv_work_t *work) {
    isn_server *server = work->data;
    uint64_t start = monotonic_ns();
    server->index = isn_index_open(server->conf.index_path, server->load_error, sizeof server->load_error);
    if (!server->index) return;
    server->info = isn_index_get_info(server->index);
    server->analyzer = isn_index_new_analyzer(server->index);
    if (!server->analyzer) {
        snprintf(server->load_error, sizeof server->load_error, "out of memory for an analyzer");
        return;
    }
    log_info("index %s: %u documents, %u terms, %llu bytes, format version %u, opened in %.3f s",
             server->conf.index_path, server->info->num_docs, server->info->num_terms,
             (unsigned long long)server->info->file_bytes, server->info->version,
             (double)(monotonic_ns() - start) / 1e9);
    if (rankers_start(server->conf.ranker_dir, server->info, server->conf.default_n1, server->conf.max_n1,
                      server->load_error, sizeof server->load_error) < 0)
        return;
    uint32_t workers = server->conf.workers;
    if (workers == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        workers = cpus > 0 ? (uint32_t)cpus : 1;
    }
    start = monotonic_ns();
    server->pool = search_service_start(server->index, &server->conf, workers, &server->completion_async,
                                     server->load_error, sizeof server->load_error);
    if (!server->pool) return;
    server->num_workers = workers;
    log_info("%u search workers started%s (queries analysed on the %s) in %.3f s", workers,
             server->conf.warm_up ? " and warmed up" : "",
             search_service_analyses_on_loop(server->pool) ? "loop thread" : "workers",
             (double)(monotonic_ns() - start) / 1e9);
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
    server->state = SERVER_READY;
    server->ready_ns = monotonic_ns();
    log_info("ready: serving partition %u on %s (stats on %s) after %.3f s", server->conf.partition_id,
             server->grpc_address, server->stats_listening ? server->stats_address : "-",
             (double)(server->ready_ns - server->start_ns) / 1e9);
    char status_line[200];
    snprintf(status_line, sizeof status_line, "READY=1\nSTATUS=serving partition %u on %s", server->conf.partition_id,
             server->grpc_address);
    sd_notify(0, status_line);
}

int server_start(isn_server *server, char *err, size_t err_len) {
    server->start_ns = monotonic_ns();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    server->start_time = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    server->state = SERVER_STARTING;
    uv_loop_t *loop = server->loop;

    if (listen_tcp(server, &server->grpc_listener, server->conf.listen, grpc_on_connection, server->grpc_address,
                   sizeof server->grpc_address, err, err_len) < 0)
        return -1;
    server->grpc_listening = true;
    log_info("gRPC listening on %s", server->grpc_address);
    if (server->conf.stats_listen[0]) {
        if (listen_tcp(server, &server->stats_listener, server->conf.stats_listen, stats_on_connection,
                       server->stats_address, sizeof server->stats_address, err, err_len) < 0) {
            uv_close((uv_handle_t *)&server->grpc_listener, NULL);
            server->grpc_listening = false;
            return -1;
        }
        server->stats_listening = true;
        log_info("stats listening on http://%s (/metrics /stats /healthz /readyz)", server->stats_address);
    }

    uv_async_init(loop, &server->completion_async, rpc_on_completions);
    server->completion_async.data = server;
    uv_check_init(loop, &server->flush_check);
    server->flush_check.data = server;
    uv_check_start(&server->flush_check, grpc_flush_dirty);
    uv_timer_init(loop, &server->sweep_timer);
    server->sweep_timer.data = server;
    uint64_t period = sweep_period_ms(&server->conf);
    uv_timer_start(&server->sweep_timer, on_sweep, period, period);
    uv_unref((uv_handle_t *)&server->sweep_timer);
    uv_timer_init(loop, &server->drain_timer);
    server->drain_timer.data = server;
    signals_start(server);

    server->load_work.data = server;
    int rc = uv_queue_work(loop, &server->load_work, load_index, on_loaded);
    if (rc < 0) {
        snprintf(err, err_len, "cannot start loading: %s", uv_strerror(rc));
        return -1;
    }
    return 0;
}
