/* The stats endpoint: a deliberately small HTTP/1.1 server (GET and HEAD, keep-alive, no bodies)
 * for Prometheus, curl and load balancers: /metrics, /stats, /healthz, /readyz. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "daemon/server.h"

static void on_closed(uv_handle_t *handle) {
    stats_conn *conn = handle->data;
    isn_server *server = conn->server;
    if (conn->prev) conn->prev->next = conn->next;
    else server->stats_conns = conn->next;
    if (conn->next) conn->next->prev = conn->prev;
    server->num_stats_conns--;
    buffer_free(&conn->out);
    free(conn);
}

void stats_conn_close(stats_conn *conn) {
    if (conn->closing) return;
    conn->closing = true;
    uv_close((uv_handle_t *)&conn->tcp, on_closed);
}

static void process_requests(stats_conn *conn);
static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *tcp, ssize_t nread, const uv_buf_t *buf);

static void on_written(uv_write_t *req, int status) {
    stats_conn *conn = req->data;
    conn->writing = false;
    conn->out.len = 0;
    if (conn->closing) return;
    if (status < 0 || conn->close_after_write) {
        stats_conn_close(conn);
        return;
    }
    buffer_clear(&conn->out, 1 << 20);
    process_requests(conn); /* pipelined requests waited for this write */
    if (!conn->closing) uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read); /* EALREADY is fine */
}

static void respond(stats_conn *conn, int code, const char *reason, const char *content_type, const byte_buffer *body,
                    bool head_only) {
    byte_buffer *out = &conn->out;
    out->len = 0;
    bool ok = buffer_printf(out,
                            "HTTP/1.1 %d %s\r\nServer: isnd/" ISND_VERSION "\r\nContent-Type: %s\r\n"
                            "Content-Length: %zu\r\nCache-Control: no-store\r\n%s\r\n",
                            code, reason, content_type, body ? body->len : 0,
                            conn->close_after_write ? "Connection: close\r\n" : "");
    if (ok && body && !head_only) ok = buffer_append(out, body->data, body->len);
    if (!ok) {
        stats_conn_close(conn);
        return;
    }
    uv_buf_t buf = uv_buf_init((char *)out->data, (unsigned)out->len);
    conn->write_req.data = conn;
    if (uv_write(&conn->write_req, (uv_stream_t *)&conn->tcp, &buf, 1, on_written) < 0) {
        stats_conn_close(conn);
        return;
    }
    conn->writing = true;
}

static void respond_text(stats_conn *conn, int code, const char *reason, const char *text, bool head_only) {
    byte_buffer body = {.data = (uint8_t *)text, .len = strlen(text), .cap = 0};
    respond(conn, code, reason, "text/plain; charset=utf-8", &body, head_only);
}

/* Finds a header's value in the request head (case-insensitive name). */
static bool header_value(const char *head, const char *name, char *value, size_t value_len) {
    size_t name_len = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line, "\r\n")) {
        line += 2;
        if (!strncasecmp(line, name, name_len) && line[name_len] == ':') {
            const char *v = line + name_len + 1;
            while (*v == ' ' || *v == '\t') v++;
            const char *end = strstr(v, "\r\n");
            size_t n = end ? (size_t)(end - v) : strlen(v);
            if (n >= value_len) n = value_len - 1;
            memcpy(value, v, n);
            value[n] = '\0';
            return true;
        }
    }
    return false;
}

static void handle_request(stats_conn *conn, char *head) {
    isn_server *server = conn->server;
    server->metrics.stats_requests++;
    char method[8], target[256], version[16];
    if (sscanf(head, "%7s %255s %15s", method, target, version) != 3 || strncmp(version, "HTTP/1.", 7)) {
        conn->close_after_write = true;
        respond_text(conn, 400, "Bad Request", "malformed request line\n", false);
        return;
    }
    char value[64];
    bool http10 = !strcmp(version, "HTTP/1.0");
    bool has_connection = header_value(head, "Connection", value, sizeof value);
    if ((http10 && !(has_connection && !strcasecmp(value, "keep-alive"))) ||
        (has_connection && !strcasecmp(value, "close")))
        conn->close_after_write = true;
    if ((header_value(head, "Content-Length", value, sizeof value) && strcmp(value, "0")) ||
        header_value(head, "Transfer-Encoding", value, sizeof value)) {
        conn->close_after_write = true;
        respond_text(conn, 413, "Payload Too Large", "request bodies are not accepted\n", false);
        return;
    }
    bool head_only = !strcmp(method, "HEAD");
    if (!head_only && strcmp(method, "GET")) {
        respond_text(conn, 405, "Method Not Allowed", "only GET and HEAD\n", false);
        return;
    }
    char *query = strchr(target, '?');
    if (query) *query = '\0';
    if (!strcmp(target, "/metrics")) {
        byte_buffer body = {0};
        metrics_render_prometheus(server, &body);
        respond(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", &body, head_only);
        buffer_free(&body);
    } else if (!strcmp(target, "/stats")) {
        byte_buffer body = {0};
        metrics_render_json(server, &body);
        respond(conn, 200, "OK", "application/json", &body, head_only);
        buffer_free(&body);
    } else if (!strcmp(target, "/healthz")) {
        respond_text(conn, 200, "OK", "ok\n", head_only);
    } else if (!strcmp(target, "/readyz")) {
        char reason[300], text[400];
        if (server_ready(server) && server->pool &&
            search_service_gpu_state(server->pool, reason, sizeof reason) == SEARCH_SERVICE_GPU_DEGRADED) {
            snprintf(text, sizeof text, "ready (degraded: GPU unhealthy, serving on the CPU: %s)\n", reason);
            respond_text(conn, 200, "OK", text, head_only);
        } else if (server_ready(server)) respond_text(conn, 200, "OK", "ready\n", head_only);
        else
            respond_text(conn, 503, "Service Unavailable",
                         server->state == SERVER_STARTING ? "starting: index loading\n" : "draining\n", head_only);
    } else {
        respond_text(conn, 404, "Not Found", "not found; try /metrics, /stats, /healthz or /readyz\n", head_only);
    }
}

static void process_requests(stats_conn *conn) {
    while (!conn->writing && !conn->closing && conn->in_len) {
        conn->in[conn->in_len] = '\0';
        char *end = strstr(conn->in, "\r\n\r\n");
        if (!end) {
            if (conn->in_len >= STATS_REQUEST_MAX - 1) {
                conn->close_after_write = true;
                respond_text(conn, 431, "Request Header Fields Too Large", "request head too large\n", false);
            }
            return;
        }
        size_t used = (size_t)(end - conn->in) + 4;
        end[2] = '\0'; /* keep the last header's CRLF for header_value */
        handle_request(conn, conn->in);
        memmove(conn->in, conn->in + used, conn->in_len - used);
        conn->in_len -= used;
        conn->request_started_ns = conn->in_len ? monotonic_ns() : 0;
    }
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    stats_conn *conn = handle->data;
    size_t room = STATS_REQUEST_MAX - 1 - conn->in_len;
    *buf = uv_buf_init(conn->in + conn->in_len, (unsigned)room);
}

static void on_read(uv_stream_t *tcp, ssize_t nread, const uv_buf_t *buf) {
    (void)buf;
    stats_conn *conn = tcp->data;
    if (conn->closing) return;
    if (nread < 0) {
        stats_conn_close(conn);
        return;
    }
    if (nread == 0) return;
    uint64_t now = monotonic_ns();
    conn->last_activity_ns = now;
    if (!conn->request_started_ns) conn->request_started_ns = now;
    conn->in_len += (size_t)nread;
    if (conn->in_len >= STATS_REQUEST_MAX - 1 && conn->writing) {
        uv_read_stop(tcp); /* a client pipelining faster than we answer: wait */
        return;
    }
    process_requests(conn);
}

void stats_on_connection(uv_stream_t *listener, int status) {
    isn_server *server = listener->data;
    if (status < 0) return;
    stats_conn *conn = calloc(1, sizeof *conn);
    if (!conn) return;
    conn->server = server;
    if (accept_or_reject(server, listener, &conn->tcp, conn) < 0) return;
    conn->accepted_ns = conn->last_activity_ns = monotonic_ns();
    conn->next = server->stats_conns;
    if (server->stats_conns) server->stats_conns->prev = conn;
    server->stats_conns = conn;
    server->num_stats_conns++;
    uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
}

void stats_sweep(isn_server *server, uint64_t now) {
    uint64_t header_ns = (uint64_t)server->conf.header_timeout_ms * 1000000ull;
    uint64_t idle_ns = (uint64_t)server->conf.idle_timeout_ms * 1000000ull;
    for (stats_conn *conn = server->stats_conns, *next; conn; conn = next) {
        next = conn->next;
        if (conn->closing || conn->writing) continue;
        bool slow = conn->request_started_ns && now - conn->request_started_ns > header_ns;
        if (slow || now - conn->last_activity_ns > idle_ns) {
            server->metrics.connections_timed_out++;
            stats_conn_close(conn);
        }
    }
}
