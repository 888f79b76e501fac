/* A gRPC server's life: created on a loop, listening, reconfigured, drained (GOAWAY, then each
 * connection closes once its calls are answered and written), closed and freed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "grpc/server_internal.h"

void isn_grpc_server_resolve_config(isn_grpc_server_config *config) {
    if (!config->max_requests_per_connection)
        config->max_requests_per_connection =
            config->max_concurrent_streams > UINT32_MAX / 2 ? UINT32_MAX : 2 * config->max_concurrent_streams;
    if (!config->write_timeout_ms) config->write_timeout_ms = ISN_GRPC_DEFAULT_WRITE_TIMEOUT_MS;
    if (!config->min_send_rate) config->min_send_rate = ISN_GRPC_DEFAULT_MIN_SEND_RATE;
    if (!config->memory_budget_bytes) config->memory_budget_bytes = ISN_GRPC_DEFAULT_MEMORY_BUDGET;
    if (!config->max_header_list_bytes) config->max_header_list_bytes = ISN_GRPC_DEFAULT_MAX_HEADER_LIST_BYTES;
    if (!config->max_early_resets_per_second)
        config->max_early_resets_per_second = ISN_GRPC_DEFAULT_MAX_EARLY_RESETS_PER_SECOND;
    if (!config->stream_limit_target_us) config->stream_limit_target_us = ISN_GRPC_DEFAULT_STREAM_LIMIT_TARGET_US;
}

static uint32_t shortest_timeout(const isn_grpc_server_config *config) {
    uint32_t t = config->header_timeout_ms < config->idle_timeout_ms ? config->header_timeout_ms : config->idle_timeout_ms;
    return t < config->write_timeout_ms ? t : config->write_timeout_ms;
}

/* Tells every connection the streams it may hold open now (a SETTINGS frame each). */
static void apply_stream_limit(isn_grpc_server *server) {
    uint32_t limit = server->stream_limit.limit;
    __atomic_store_n(&server->counters.stream_limit, limit, __ATOMIC_RELAXED);
    __atomic_store_n(&server->counters.stream_limit_lowered, server->stream_limit.decreases, __ATOMIC_RELAXED);
    nghttp2_settings_entry entry = {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limit};
    for (conn_links *links = server->conns; links; links = links->next) {
        isn_grpc_conn *conn = (isn_grpc_conn *)links;
        if (conn->closing || !conn->session || conn->stream_limit_sent == limit) continue;
        if (nghttp2_submit_settings(conn->session, NGHTTP2_FLAG_NONE, &entry, 1) != 0) continue;
        conn->stream_limit_sent = limit;
        isn_grpc_conn_schedule_flush(conn);
    }
}

static void note_poll_entry(uv_prepare_t *prepare) {
    isn_grpc_server *server = prepare->data;
    /* The poll before returned when the iteration's first read came, or, with no read, when its
     * I/O was done (the check after it). */
    server->previous_return_ns = server->first_read_ns ? server->first_read_ns : server->check_ns;
    server->first_read_ns = 0;
    server->poll_entered_ns = isn_now_ns();
    server->iteration++;
    if (!server->idle_time_unknown) {
        uint64_t idle = uv_metrics_idle_time(server->loop);
        server->poll_idle_entered_ns = idle;
        uint64_t lived = server->poll_entered_ns - server->started_ns;
        __atomic_store_n(&server->counters.loop_busy_ns, lived > idle ? lived - idle : 0, __ATOMIC_RELAXED);
        if (server->config.adaptive_stream_limit &&
            isn_grpc_stream_limit_window(&server->stream_limit, server->poll_entered_ns, idle))
            apply_stream_limit(server);
    }
    isn_grpc_resume_paused(server);
    /* the last prepare callback of the iteration (started first, run last): the timeout libuv now uses */
    int timeout_ms = uv_backend_timeout(server->loop);
    server->poll_timeout_ns = timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0;
}

void isn_grpc_poll_check_stall(isn_grpc_server *server, uint64_t now) {
    if (!server->config.stall_seen_ns || !server->poll_timeout_ns || server->idle_time_unknown) return;
    /* the loop's idle time is what it spent blocked in its polls, timed around the system call */
    uint64_t blocked = uv_metrics_idle_time(server->loop) - server->poll_idle_entered_ns, timeout = server->poll_timeout_ns;
    server->poll_timeout_ns = 0;
    if (blocked > timeout + server->config.stall_seen_ns && server->handlers.on_stall) server->handlers.on_stall(now, server->app);
}

/* A poll that waited this long before returning had nothing to read when it began. */
#define POLL_BLOCKED_NS 100000ull

uint64_t isn_grpc_read_arrival_floor(isn_grpc_server *server, uint64_t now) {
    if (!server->first_read_ns) {
        /* Bytes that were there when the previous poll returned were read in its iteration (epoll
         * reports every ready socket): these came after it returned. A poll that blocked returned when
         * they came, or after a stall it slept through (isn_grpc_poll_check_stall); they are taken for
         * fresh either way: aged from that poll's start, the stall's requests were judged on what was
         * left of their budgets, and admission refused many that the node would have answered in time. */
        bool blocked = now - server->poll_entered_ns > POLL_BLOCKED_NS || !server->previous_return_ns;
        server->arrival_floor_ns = blocked ? now : server->previous_return_ns;
        server->first_read_ns = now;
    }
    return server->arrival_floor_ns;
}

isn_grpc_server *isn_grpc_server_new(uv_loop_t *loop, const isn_grpc_server_config *config, const isn_grpc_server_handlers *handlers,
                             void *app) {
    isn_grpc_server *server = calloc(1, sizeof *server);
    if (!server) return NULL;
    server->loop = loop;
    server->config = *config;
    isn_grpc_server_resolve_config(&server->config);
    server->config.call_app_bytes =
        (config->call_app_bytes + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    server->budget = config->shared_budget ? config->shared_budget : &server->own_budget;
    server->penalties = &server->own_penalties;
    __atomic_store_n(&server->budget->limit, server->config.memory_budget_bytes, __ATOMIC_RELAXED);
    server->handlers = *handlers;
    server->app = app;
    /* the loop's idle time, which the stream limit's windows read: without it every window would
     * look busy, so the limit stays fixed */
    if (uv_loop_configure(loop, UV_METRICS_IDLE_TIME) != 0) server->idle_time_unknown = true;
    server->started_ns = isn_now_ns();
    isn_grpc_stream_limit_init(&server->stream_limit, server->config.max_concurrent_streams,
                               (uint64_t)server->config.stream_limit_target_us * 1000, isn_now_ns(),
                               uv_metrics_idle_time(loop));
    server->counters.stream_limit = server->stream_limit.limit;
    uv_check_init(loop, &server->flush_check);
    server->flush_check.data = server;
    uv_check_start(&server->flush_check, isn_grpc_flush_dirty);
    uv_prepare_init(loop, &server->poll_watch);
    server->poll_watch.data = server;
    uv_prepare_start(&server->poll_watch, note_poll_entry);
    uv_unref((uv_handle_t *)&server->poll_watch);
    sweep_timer_start(loop, &server->sweep_timer, server, isn_grpc_sweep, shortest_timeout(&server->config),
                      server->config.idle_timeout_ms);
    return server;
}

int isn_grpc_server_add_peer(isn_grpc_server *front, isn_grpc_server *peer) {
    isn_grpc_server **grown = realloc(front->peers, (front->num_peers + 1) * sizeof *grown);
    if (!grown) return -1;
    front->peers = grown;
    front->peers[front->num_peers++] = peer;
    peer->penalties = front->penalties; /* one penalty box for the listener's loops */
    if (!peer->inbox_async.data) {
        pthread_mutex_init(&peer->inbox_lock, NULL);
        uv_async_init(peer->loop, &peer->inbox_async, isn_grpc_adopt_handed_over);
        peer->inbox_async.data = peer;
        peer->inbox_open = true;
    }
    return 0;
}

int isn_grpc_server_listen(isn_grpc_server *server, const char *host_port, char *bound, size_t bound_len, char *err,
                       size_t err_len) {
    if (listen_tcp(server->loop, &server->listener, server, host_port, isn_grpc_on_connection, bound, bound_len, err,
                   err_len) < 0)
        return -1;
    server->listening = true;
    return 0;
}

void isn_grpc_server_reconfigure(isn_grpc_server *server, const isn_grpc_server_config *config) {
    size_t app_bytes = server->config.call_app_bytes; /* fixed: pooled calls have this size */
    isn_grpc_tls *tls = server->config.tls; /* fixed: the credentials rotate, the port's mode does not */
    server->config = *config;
    server->config.tls = tls;
    isn_grpc_server_resolve_config(&server->config);
    server->config.call_app_bytes = app_bytes;
    __atomic_store_n(&server->budget->limit, server->config.memory_budget_bytes, __ATOMIC_RELAXED);
    sweep_timer_set_timeouts(&server->sweep_timer, shortest_timeout(&server->config), server->config.idle_timeout_ms);
    isn_grpc_stream_limit_set_max(&server->stream_limit, server->config.max_concurrent_streams);
    server->stream_limit.target_ns = (uint64_t)server->config.stream_limit_target_us * 1000;
    if (!server->config.adaptive_stream_limit) server->stream_limit.limit = server->config.max_concurrent_streams;
    apply_stream_limit(server);
}

void isn_grpc_server_stop_accepting(isn_grpc_server *server) {
    if (!server->listening) return;
    uv_close((uv_handle_t *)&server->listener, NULL);
    server->listening = false;
}

void isn_grpc_server_goaway_all(isn_grpc_server *server) {
    server->goaway = true;
    for (conn_links *links = server->conns; links; links = links->next) isn_grpc_conn_goaway((isn_grpc_conn *)links);
}

void isn_grpc_server_drain(isn_grpc_server *server) {
    isn_grpc_server_stop_accepting(server);
    server->draining = true;
    isn_grpc_server_goaway_all(server);
    isn_grpc_server_check_drained(server);
}

void isn_grpc_server_check_drained(isn_grpc_server *server) {
    if (!server->draining || server->drained || server->closing) return;
    if (server->counters.open_calls > 0) return;
    /* Nothing left to answer: let each connection finish writing, then go. */
    bool writing = false;
    for (conn_links *links = server->conns; links; links = links->next) {
        isn_grpc_conn *conn = (isn_grpc_conn *)links;
        if (conn->closing) continue;
        isn_grpc_conn_close_when_flushed(conn);
        writing = true;
    }
    if (writing || server->counters.connections) return; /* each close calls back here */
    server->drained = true;
    if (server->handlers.on_drained) server->handlers.on_drained(server, server->app);
}

void isn_grpc_server_fail_waiting(isn_grpc_server *server, int status, const char *message) {
    for (conn_links *links = server->conns; links; links = links->next) {
        isn_grpc_conn *conn = (isn_grpc_conn *)links;
        if (conn->closing) continue;
        for (isn_grpc_call *call = conn->calls; call; call = call->next)
            if (!call->responded && !call->held) isn_grpc_call_fail(call, status, "%s", message);
    }
    isn_grpc_server_check_drained(server);
}

static void close_if_open(uv_handle_t *handle) {
    if (handle->loop && !uv_is_closing(handle)) uv_close(handle, NULL);
}

void isn_grpc_server_close(isn_grpc_server *server) {
    if (server->closing) return;
    server->closing = true;
    for (conn_links *links = server->conns; links; links = links->next) isn_grpc_conn_close((isn_grpc_conn *)links);
    isn_grpc_server_stop_accepting(server);
    close_if_open((uv_handle_t *)&server->flush_check);
    close_if_open((uv_handle_t *)&server->poll_watch);
    close_if_open((uv_handle_t *)&server->sweep_timer);
    if (server->inbox_async.data) { /* the front may be handing one over right now */
        pthread_mutex_lock(&server->inbox_lock);
        server->inbox_open = false;
        for (uint32_t i = 0; i < server->inbox_len; i++) close(server->inbox[i]);
        server->inbox_len = 0;
        pthread_mutex_unlock(&server->inbox_lock);
        close_if_open((uv_handle_t *)&server->inbox_async);
    }
}

void isn_grpc_server_free(isn_grpc_server *server) {
    if (!server) return;
    server->closing = true;
    while (server->abandoned) {
        isn_grpc_call *call = server->abandoned;
        server->abandoned = call->next;
        isn_grpc_call_release(server, call);
    }
    isn_grpc_free_call_pool(server);
    if (server->inbox_async.data) pthread_mutex_destroy(&server->inbox_lock);
    free(server->inbox);
    free(server->peers);
    free(server);
}

void isn_grpc_server_add_counters(const isn_grpc_server *server, isn_grpc_server_counters *sum) {
#define ADD(field) sum->field += __atomic_load_n(&server->counters.field, __ATOMIC_RELAXED)
    ADD(connections);
    ADD(open_calls);
    ADD(connections_accepted);
    ADD(connections_timed_out);
    ADD(protocol_errors);
    ADD(http_rejects);
    ADD(bytes_received);
    ADD(bytes_sent);
    ADD(connections_evicted);
    ADD(write_timeouts);
    ADD(reset_floods);
    ADD(reset_floods_held);
    ADD(streams_refused);
    ADD(stream_limit_lowered);
    ADD(stream_limit);
    ADD(connections_over_budget);
    ADD(header_lists_too_large);
    ADD(over_budget);
    ADD(memory_pooled);
    ADD(loop_busy_ns);
#undef ADD
    sum->memory_used = __atomic_load_n(&server->budget->used, __ATOMIC_RELAXED);
    sum->memory_budget = __atomic_load_n(&server->budget->limit, __ATOMIC_RELAXED);
}

isn_grpc_server_counters isn_grpc_server_read_counters(const isn_grpc_server *server) {
    isn_grpc_server_counters counters = {0};
    isn_grpc_server_add_counters(server, &counters);
    return counters;
}
