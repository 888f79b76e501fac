/* Listening sockets for gRPC and stats, and the connection limit they may share. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grpc/server_internal.h"

int listen_tcp(uv_loop_t *loop, uv_tcp_t *tcp, void *owner, const char *host_port, uv_connection_cb on_connection,
               char *bound, size_t bound_len, char *err, size_t err_len) {
    char host[256], why[200];
    uint16_t port;
    if (isn_parse_host_port(host_port, host, sizeof host, &port, why, sizeof why) < 0) {
        snprintf(err, err_len, "%s", why);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *found;
    int rc = getaddrinfo(host, NULL, &hints, &found);
    if (rc != 0) {
        snprintf(err, err_len, "cannot resolve listen address %s: %s", host_port, gai_strerror(rc));
        return -1;
    }
    struct sockaddr_storage addr;
    memcpy(&addr, found->ai_addr, found->ai_addrlen);
    freeaddrinfo(found);
    if (addr.ss_family == AF_INET) ((struct sockaddr_in *)&addr)->sin_port = htons(port);
    else ((struct sockaddr_in6 *)&addr)->sin6_port = htons(port);

    uv_tcp_init(loop, tcp);
    tcp->data = owner;
    if ((rc = uv_tcp_bind(tcp, (struct sockaddr *)&addr, 0)) < 0 || (rc = uv_listen((uv_stream_t *)tcp, 1024, on_connection)) < 0) {
        snprintf(err, err_len, "cannot listen on %s: %s", host_port, uv_strerror(rc));
        uv_close((uv_handle_t *)tcp, NULL);
        return -1;
    }
    int len = sizeof addr;
    uv_tcp_getsockname(tcp, (struct sockaddr *)&addr, &len);
    char ip[64];
    if (addr.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&addr, ip, sizeof ip);
        snprintf(bound, bound_len, "%s:%d", ip, ntohs(((struct sockaddr_in *)&addr)->sin_port));
    } else {
        uv_ip6_name((struct sockaddr_in6 *)&addr, ip, sizeof ip);
        snprintf(bound, bound_len, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&addr)->sin6_port));
    }
    return 0;
}

static void free_on_close(uv_handle_t *handle) { free(handle->data); }

void isn_grpc_connection_limit_set(isn_grpc_connection_limit *limit, uint32_t max) {
    __atomic_store_n(&limit->max, max, __ATOMIC_RELAXED);
}

int admit_or_reject(isn_grpc_connection_limit *limit, uv_tcp_t *tcp, conn_evict_cb evict, void *server) {
    if (!limit) return 0;
    uint32_t max = __atomic_load_n(&limit->max, __ATOMIC_RELAXED);
    uint32_t open = __atomic_load_n(&limit->open, __ATOMIC_RELAXED);
    for (;;) {
        if (max && open >= max) break;
        if (__atomic_compare_exchange_n(&limit->open, &open, open + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return 0;
    }
    /* An evicted connection gives its place back when its close completes, a loop turn later. */
    if (evict && evict(server)) {
        __atomic_fetch_add(&limit->open, 1, __ATOMIC_RELAXED);
        return 0;
    }
    __atomic_fetch_add(&limit->rejected, 1, __ATOMIC_RELAXED);
    log_debug("connection refused: max_connections (%u) reached", max);
    uv_close((uv_handle_t *)tcp, free_on_close);
    return -1;
}

int accept_or_reject(uv_loop_t *loop, isn_grpc_connection_limit *limit, uv_stream_t *listener, uv_tcp_t *tcp, void *owner,
                     conn_evict_cb evict, void *server) {
    uv_tcp_init(loop, tcp);
    tcp->data = owner;
    int rc = uv_accept(listener, (uv_stream_t *)tcp);
    if (rc < 0) {
        log_warn("accept failed: %s", uv_strerror(rc));
        uv_close((uv_handle_t *)tcp, free_on_close);
        return -1;
    }
    return admit_or_reject(limit, tcp, evict, server);
}

void connection_limit_release(isn_grpc_connection_limit *limit) {
    if (!limit) return;
    uint32_t open = __atomic_load_n(&limit->open, __ATOMIC_RELAXED);
    while (open && !__atomic_compare_exchange_n(&limit->open, &open, open - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void conn_list_add(conn_links **list, conn_links *conn, uint32_t *open) {
    conn->prev = NULL;
    conn->next = *list;
    if (*list) (*list)->prev = conn;
    *list = conn;
    __atomic_store_n(open, *open + 1, __ATOMIC_RELAXED); /* read by other threads (summed over loops) */
}

void conn_list_remove(conn_links **list, conn_links *conn, uint32_t *open, isn_grpc_connection_limit *limit) {
    if (conn->prev) conn->prev->next = conn->next;
    else *list = conn->next;
    if (conn->next) conn->next->prev = conn->prev;
    __atomic_store_n(open, *open - 1, __ATOMIC_RELAXED);
    connection_limit_release(limit);
}

void conn_list_sweep(conn_links *list, uint32_t header_timeout_ms, uint32_t idle_timeout_ms, conn_sweep_cb check,
                     void *owner) {
    uint64_t now = isn_now_ns();
    uint64_t header_ns = (uint64_t)header_timeout_ms * 1000000ull;
    uint64_t idle_ns = (uint64_t)idle_timeout_ms * 1000000ull;
    for (conn_links *conn = list, *next; conn; conn = next) {
        next = conn->next; /* `check` may close it (the links go when the close completes) */
        check(conn, now, header_ns, idle_ns, owner);
    }
}

static uint64_t sweep_period_ms(uint32_t header_timeout_ms, uint32_t idle_timeout_ms) {
    uint64_t shortest = header_timeout_ms < idle_timeout_ms ? header_timeout_ms : idle_timeout_ms;
    uint64_t period = shortest / 4;
    return period < 10 ? 10 : period > 1000 ? 1000 : period;
}

void sweep_timer_start(uv_loop_t *loop, uv_timer_t *timer, void *data, uv_timer_cb on_sweep, uint32_t header_timeout_ms,
                       uint32_t idle_timeout_ms) {
    uv_timer_init(loop, timer);
    timer->data = data;
    uint64_t period = sweep_period_ms(header_timeout_ms, idle_timeout_ms);
    uv_timer_start(timer, on_sweep, period, period);
    uv_unref((uv_handle_t *)timer);
}

void sweep_timer_set_timeouts(uv_timer_t *timer, uint32_t header_timeout_ms, uint32_t idle_timeout_ms) {
    uint64_t period = sweep_period_ms(header_timeout_ms, idle_timeout_ms);
    if (uv_timer_get_repeat(timer) != period) uv_timer_set_repeat(timer, period);
}
