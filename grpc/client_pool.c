/* A few client connections to one server, used round robin: a connection that failed or was told
 * to go away is replaced once its calls are finished (at most every RECONNECT_PAUSE_NS per slot),
 * and one wait covers every connection with calls in flight. See grpc/client.h. */
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/base.h"
#include "grpc/client.h"

#define RECONNECT_PAUSE_NS 100000000ull
#define RECONNECT_TIMEOUT_MS 1000

typedef struct {
    isn_grpc_client *client;
    uint32_t inflight;
    uint64_t next_connect_ns;
} pool_slot;

struct isn_grpc_pool {
    char target[300];
    isn_grpc_tls *tls;
    char server_name[256];
    uint32_t size, next;
    bool track_finished; /* every connection keeps its finished calls (isn_grpc_pool_track_finished) */
    bool stamp_arrivals; /* every connection asks when its bytes arrived (isn_grpc_pool_stamp_arrivals) */
    pool_slot *slots;
    struct pollfd *fds;
    uint32_t *fd_slots;
};

isn_grpc_pool *isn_grpc_pool_new(const char *target, uint32_t size, uint32_t timeout_ms, char *err, size_t err_len) {
    return isn_grpc_pool_new_tls(target, size, timeout_ms, NULL, NULL, err, err_len);
}

isn_grpc_pool *isn_grpc_pool_new_tls(const char *target, uint32_t size, uint32_t timeout_ms, isn_grpc_tls *tls,
                                     const char *server_name, char *err, size_t err_len) {
    isn_grpc_pool *pool = calloc(1, sizeof *pool);
    if (!pool || !(pool->slots = calloc(size ? size : 1, sizeof *pool->slots)) ||
        !(pool->fds = calloc(size ? size : 1, sizeof *pool->fds)) ||
        !(pool->fd_slots = calloc(size ? size : 1, sizeof *pool->fd_slots))) {
        isn_grpc_pool_free(pool);
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    snprintf(pool->target, sizeof pool->target, "%s", target);
    pool->size = size ? size : 1;
    pool->tls = tls;
    snprintf(pool->server_name, sizeof pool->server_name, "%s", server_name ? server_name : "");
    /* The first connection at once: a target that is not there fails here, with a clear message. */
    pool->slots[0].client = isn_grpc_connect_tls(target, timeout_ms, tls, pool->server_name, err, err_len);
    if (!pool->slots[0].client) {
        isn_grpc_pool_free(pool);
        return NULL;
    }
    return pool;
}

void isn_grpc_pool_free(isn_grpc_pool *pool) {
    if (!pool) return;
    for (uint32_t i = 0; pool->slots && i < pool->size; i++) isn_grpc_close(pool->slots[i].client);
    free(pool->slots);
    free(pool->fds);
    free(pool->fd_slots);
    free(pool);
}

isn_grpc_client *isn_grpc_pool_pick_again(isn_grpc_pool *pool, uint32_t last, uint32_t *slot) {
    if (last < pool->size) {
        pool_slot *s = &pool->slots[last];
        if (s->client && isn_grpc_usable(s->client) && s->inflight < isn_grpc_max_streams(s->client)) {
            *slot = last;
            return s->client;
        }
    }
    return isn_grpc_pool_pick(pool, slot);
}

/* A socket that refuses leaves its calls without arrival times, which the caller sees (arrival_ns 0). */
static void stamp_arrivals(isn_grpc_client *client) {
    char err[256];
    (void)isn_grpc_stamp_arrivals(client, err, sizeof err);
}

isn_grpc_client *isn_grpc_pool_pick(isn_grpc_pool *pool, uint32_t *slot) {
    for (uint32_t tries = 0; tries < pool->size; tries++) {
        uint32_t i = pool->next++ % pool->size;
        pool_slot *s = &pool->slots[i];
        if (s->client && !isn_grpc_usable(s->client) && s->inflight == 0) {
            isn_grpc_close(s->client);
            s->client = NULL;
        }
        if (!s->client) {
            uint64_t now = isn_now_ns();
            if (now < s->next_connect_ns) continue;
            char err[256];
            s->client = isn_grpc_connect_tls(pool->target, RECONNECT_TIMEOUT_MS, pool->tls, pool->server_name, err, sizeof err);
            if (!s->client) {
                s->next_connect_ns = now + RECONNECT_PAUSE_NS;
                continue;
            }
            if (pool->track_finished) isn_grpc_track_finished(s->client);
            if (pool->stamp_arrivals) stamp_arrivals(s->client);
        }
        if (isn_grpc_usable(s->client) && s->inflight < isn_grpc_max_streams(s->client)) {
            *slot = i;
            return s->client;
        }
    }
    return NULL;
}

void isn_grpc_pool_started(isn_grpc_pool *pool, uint32_t slot) { pool->slots[slot].inflight++; }
void isn_grpc_pool_finished(isn_grpc_pool *pool, uint32_t slot) { pool->slots[slot].inflight--; }

void isn_grpc_pool_wait(isn_grpc_pool *pool, uint64_t wait_ns) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < pool->size; i++) {
        if (!pool->slots[i].client || pool->slots[i].inflight == 0) continue;
        isn_grpc_client *client = pool->slots[i].client;
        pool->fds[n] = (struct pollfd){.fd = isn_grpc_fd(client), .events = POLLIN};
        if (isn_grpc_wants_write(client)) pool->fds[n].events |= POLLOUT;
        pool->fd_slots[n++] = i;
    }
    struct timespec ts = {(time_t)(wait_ns / 1000000000ull), (long)(wait_ns % 1000000000ull)};
    if (ppoll(pool->fds, n, &ts, NULL) <= 0) return;
    char err[256];
    for (uint32_t j = 0; j < n; j++)
        if (pool->fds[j].revents) isn_grpc_service(pool->slots[pool->fd_slots[j]].client, pool->fds[j].revents, err, sizeof err);
}

void isn_grpc_pool_track_finished(isn_grpc_pool *pool) {
    pool->track_finished = true;
    for (uint32_t i = 0; i < pool->size; i++)
        if (pool->slots[i].client) isn_grpc_track_finished(pool->slots[i].client);
}

void isn_grpc_pool_stamp_arrivals(isn_grpc_pool *pool) {
    pool->stamp_arrivals = true;
    for (uint32_t i = 0; i < pool->size; i++)
        if (pool->slots[i].client) stamp_arrivals(pool->slots[i].client);
}

isn_grpc_client_call *isn_grpc_pool_take_finished(isn_grpc_pool *pool) {
    isn_grpc_client_call *all = NULL;
    for (uint32_t i = 0; i < pool->size; i++)
        if (pool->slots[i].client) all = isn_grpc_take_finished(pool->slots[i].client, all);
    return all;
}

int isn_grpc_is_loopback(const char *host_port, char *err, size_t err_len) {
    char host[256];
    uint16_t port;
    if (isn_parse_host_port(host_port, host, sizeof host, &port, err, err_len) != 0) return -1;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *found;
    if (getaddrinfo(host, NULL, &hints, &found) != 0) return isn_error(err, err_len, "cannot resolve \"%s\"", host);
    bool loopback = true;
    for (struct addrinfo *ai = found; ai; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET)
            loopback &= (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        else if (ai->ai_family == AF_INET6)
            loopback &= IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    }
    freeaddrinfo(found);
    return loopback ? 1 : 0;
}
