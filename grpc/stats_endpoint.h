/* A deliberately small HTTP/1.1 server (GET and HEAD, keep-alive, pipelining, no request bodies)
 * for Prometheus, curl and load balancers. It answers the four pages every server shows: /metrics
 * (Prometheus text), /stats (JSON), /healthz ("ok" while the process runs) and /readyz; the
 * program fills in what only it knows. Any other path is a 404. */
#ifndef ISN_GRPC_STATS_ENDPOINT_H
#define ISN_GRPC_STATS_ENDPOINT_H

#include "grpc/server.h"

typedef struct {
    void (*render_metrics)(void *app, byte_buffer *body); /* Prometheus text format */
    void (*render_json)(void *app, byte_buffer *body);
    /* Writes a one-line reason into `body` and returns 200 (ready) or 503 (not ready). */
    int (*readiness)(void *app, byte_buffer *body);
} isn_grpc_stats_pages;

typedef struct {
    const char *server_name;   /* the Server header: "isnd/0.1.0" */
    uint32_t header_timeout_ms; /* a request head must arrive within this */
    uint32_t idle_timeout_ms;
    /* The stats port's own connection limit, apart from the gRPC port's so that neither starves the
     * other; at it the connection idle longest is closed to make room.
     * 0 = ISN_GRPC_DEFAULT_STATS_MAX_CONNECTIONS. */
    uint32_t max_connections;
    /* A page not taken by the client within this is dropped with its connection.
     * 0 = ISN_GRPC_DEFAULT_STATS_WRITE_TIMEOUT_MS. */
    uint32_t write_timeout_ms;
    /* TLS credentials (HTTPS), NULL = plain HTTP. The handshake counts against header_timeout_ms. */
    isn_grpc_tls *tls;
} isn_grpc_stats_config;

typedef struct {
    uint32_t connections;
    uint64_t requests;
    uint64_t connections_timed_out; /* slow request head, idle, or a page not read in time */
    uint64_t connections_rejected;  /* max_connections reached with none idle */
    uint64_t connections_evicted;
} isn_grpc_stats_counters;

isn_grpc_stats_server *isn_grpc_stats_server_new(uv_loop_t *loop, const isn_grpc_stats_config *config,
                                         const isn_grpc_stats_pages *pages, void *app);
int isn_grpc_stats_server_listen(isn_grpc_stats_server *server, const char *host_port, char *bound, size_t bound_len,
                             char *err, size_t err_len);
void isn_grpc_stats_server_reconfigure(isn_grpc_stats_server *server, const isn_grpc_stats_config *config);
/* Closes the listener and every connection. */
void isn_grpc_stats_server_close(isn_grpc_stats_server *server);
/* After uv_run returned. */
void isn_grpc_stats_server_free(isn_grpc_stats_server *server);
const isn_grpc_stats_counters *isn_grpc_stats_server_get_counters(const isn_grpc_stats_server *server);

#endif
