/* Listening sockets for gRPC and stats, the connection limit they may share, and HOST:PORT. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grpc/server_internal.h"

int grpc_parse_host_port(const char *text, char *host, size_t host_len, uint16_t *port, char *err, size_t err_len) {
    const char *host_start = text, *host_end, *colon;
    if (*text == '[') {
        host_start = text + 1;
        host_end = strchr(host_start, ']');
        if (!host_end || host_end[1] != ':')
            return isn_error(err, err_len, "bad address \"%s\": expected [IPV6]:PORT", text);
        colon = host_end + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon) return isn_error(err, err_len, "bad address \"%s\": expected HOST:PORT", text);
        if (memchr(text, ':', (size_t)(colon - text)))
            return isn_error(err, err_len, "bad address \"%s\": write an IPv6 host in brackets, [::1]:PORT", text);
        host_end = colon;
    }
    size_t n = (size_t)(host_end - host_start);
    if (n == 0) return isn_error(err, err_len, "bad address \"%s\": the host is empty", text);
    if (n >= host_len) return isn_error(err, err_len, "bad address \"%s\": the host is too long", text);
    const char *digits = colon + 1;
    uint32_t value = 0;
    size_t len = strlen(digits);
    if (len == 0 || len > 5) return isn_error(err, err_len, "bad address \"%s\": the port must be a number from 0 to 65535", text);
    for (size_t i = 0; i < len; i++) {
        if (digits[i] < '0' || digits[i] > '9')
            return isn_error(err, err_len, "bad address \"%s\": the port must be a number from 0 to 65535", text);
        value = value * 10 + (uint32_t)(digits[i] - '0');
    }
    if (value > 65535) return isn_error(err, err_len, "bad address \"%s\": the port must be a number from 0 to 65535", text);
    memcpy(host, host_start, n);
    host[n] = '\0';
    *port = (uint16_t)value;
    return 0;
}

int listen_tcp(uv_loop_t *loop, uv_tcp_t *tcp, void *owner, const char *host_port, uv_connection_cb on_connection,
               char *bound, size_t bound_len, char *err, size_t err_len) {
    char host[256], why[200];
    uint16_t port;
    if (grpc_parse_host_port(host_port, host, sizeof host, &port, why, sizeof why) < 0) {
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

int accept_or_reject(uv_loop_t *loop, grpc_connection_limit *limit, uv_stream_t *listener, uv_tcp_t *tcp, void *owner) {
    uv_tcp_init(loop, tcp);
    tcp->data = owner;
    int rc = uv_accept(listener, (uv_stream_t *)tcp);
    if (rc < 0 || (limit && limit->max && limit->open >= limit->max)) {
        if (rc < 0) log_warn("accept failed: %s", uv_strerror(rc));
        else {
            limit->rejected++;
            log_debug("connection refused: max_connections (%u) reached", limit->max);
        }
        uv_close((uv_handle_t *)tcp, free_on_close);
        return -1;
    }
    if (limit) limit->open++;
    return 0;
}

void connection_limit_release(grpc_connection_limit *limit) {
    if (limit && limit->open) limit->open--;
}

uint64_t sweep_period_ms(uint32_t header_timeout_ms, uint32_t idle_timeout_ms) {
    uint64_t shortest = header_timeout_ms < idle_timeout_ms ? header_timeout_ms : idle_timeout_ms;
    uint64_t period = shortest / 4;
    return period < 10 ? 10 : period > 1000 ? 1000 : period;
}
