/* The stats endpoint: a deliberately small HTTP/1.1 server (GET and HEAD, keep-alive, no bodies)
 * for Prometheus, curl and load balancers. The pages are the same for isnd and isn-agg (/metrics,
 * /stats, /healthz, /readyz); each program renders their contents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "grpc/server_internal.h"

#define STATS_REQUEST_MAX 8192

typedef struct stats_conn stats_conn;

struct stats_conn {
    conn_links links; /* first: see conn_links */
    uv_tcp_t tcp;
    isn_grpc_stats_server *server;
    uv_write_t write_req;
    byte_buffer out;
    bool writing;
    bool closing;
    bool close_after_write;
    uint64_t accepted_ns;
    uint64_t last_activity_ns;
    uint64_t write_started_ns;   /* the answer being written; 0 = none */
    uint64_t request_started_ns; /* first byte of an unfinished request; 0 = none */
    tls_session tls;             /* ssl NULL: plain HTTP */
    byte_buffer wire;            /* HTTPS: the ciphertext being written */
    size_t in_len;
    char in[STATS_REQUEST_MAX];
};

struct isn_grpc_stats_server {
    uv_loop_t *loop;
    isn_grpc_stats_config config;
    char server_name[64];
    isn_grpc_stats_pages pages;
    void *app;
    uv_tcp_t listener;
    bool listening;
    bool closing;
    uv_timer_t sweep_timer;
    isn_grpc_connection_limit limit; /* the stats port's own */
    conn_links *conns;
    byte_buffer body; /* the handler's answer; kept across requests */
    uint8_t tls_in[TLS_RECORD_MAX]; /* HTTPS: ciphertext read, on its way into OpenSSL */
    isn_grpc_stats_counters counters;
};

static void on_closed(uv_handle_t *handle) {
    stats_conn *conn = handle->data;
    isn_grpc_stats_server *server = conn->server;
    conn_list_remove(&server->conns, &conn->links, &server->counters.connections, &server->limit);
    buffer_free(&conn->out);
    buffer_free(&conn->wire);
    tls_session_free(&conn->tls);
    free(conn);
}

static void stats_conn_close(stats_conn *conn) {
    if (conn->closing) return;
    conn->closing = true;
    uv_close((uv_handle_t *)&conn->tcp, on_closed);
}

/* A client that did not take its page: reset, so that the kernel drops what it still holds for it
 * instead of trickling it out after the close. */
static void stats_conn_abort(stats_conn *conn) {
    if (conn->closing) return;
    conn->closing = true;
    if (uv_tcp_close_reset(&conn->tcp, on_closed) != 0) uv_close((uv_handle_t *)&conn->tcp, on_closed);
}

static void process_requests(stats_conn *conn);
static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *tcp, ssize_t nread, const uv_buf_t *buf);

static void on_written(uv_write_t *req, int status);

/* HTTPS: what OpenSSL has written (handshake records, an answer, an alert) goes out. */
static bool send_wire(stats_conn *conn) {
    conn->wire.len = 0;
    if (!tls_session_take_output(&conn->tls, &conn->wire)) return false;
    if (!conn->wire.len) return true;
    uv_buf_t buf = uv_buf_init((char *)conn->wire.data, (unsigned)conn->wire.len);
    conn->write_req.data = conn;
    if (uv_write(&conn->write_req, (uv_stream_t *)&conn->tcp, &buf, 1, on_written) < 0) return false;
    conn->writing = true;
    conn->write_started_ns = isn_now_ns();
    return true;
}

/* HTTPS: decrypts what OpenSSL holds into the request buffer, as far as it has room. False when the
 * session failed or ended (the caller closes once its alert is written). */
static bool pull_plaintext(stats_conn *conn) {
    while (conn->in_len < STATS_REQUEST_MAX - 1) {
        ssize_t n = tls_session_read(&conn->tls, (uint8_t *)conn->in + conn->in_len, STATS_REQUEST_MAX - 1 - conn->in_len);
        if (n < 0) return false;
        if (n == 0) break;
        uint64_t now = isn_now_ns();
        conn->last_activity_ns = now;
        if (!conn->request_started_ns) conn->request_started_ns = now;
        conn->in_len += (size_t)n;
    }
    return true;
}

static void on_written(uv_write_t *req, int status) {
    stats_conn *conn = req->data;
    conn->writing = false;
    if (conn->tls.ssl && status == 0 && !conn->closing && !conn->close_after_write && !conn->tls.failed &&
        tls_session_output_pending(&conn->tls)) {
        if (!send_wire(conn)) stats_conn_close(conn);
        return;
    }
    if (conn->tls.ssl && conn->tls.failed) {
        stats_conn_close(conn);
        return;
    }
    conn->write_started_ns = 0;
    conn->out.len = 0;
    if (conn->closing) return;
    if (status < 0 || conn->close_after_write) {
        stats_conn_close(conn);
        return;
    }
    buffer_clear(&conn->out, 1 << 20);
    if (conn->tls.ssl && !pull_plaintext(conn) && !conn->in_len) {
        stats_conn_close(conn);
        return;
    }
    process_requests(conn); /* pipelined requests waited for this write */
    if (!conn->closing) uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read); /* EALREADY is fine */
}

static void respond(stats_conn *conn, int code, const char *reason, const char *content_type, const byte_buffer *body,
                    bool head_only) {
    byte_buffer *out = &conn->out;
    out->len = 0;
    bool ok = buffer_printf(out,
                            "HTTP/1.1 %d %s\r\nServer: %s\r\nContent-Type: %s\r\n"
                            "Content-Length: %zu\r\nCache-Control: no-store\r\n%s\r\n",
                            code, reason, conn->server->server_name, content_type, body ? body->len : 0,
                            conn->close_after_write ? "Connection: close\r\n" : "");
    if (ok && body && !head_only) ok = buffer_append(out, body->data, body->len);
    if (!ok) {
        stats_conn_close(conn);
        return;
    }
    if (conn->tls.ssl) {
        if (!tls_session_write(&conn->tls, out->data, out->len) || !send_wire(conn)) stats_conn_close(conn);
        return;
    }
    uv_buf_t buf = uv_buf_init((char *)out->data, (unsigned)out->len);
    conn->write_req.data = conn;
    if (uv_write(&conn->write_req, (uv_stream_t *)&conn->tcp, &buf, 1, on_written) < 0) {
        stats_conn_close(conn);
        return;
    }
    conn->writing = true;
    conn->write_started_ns = isn_now_ns();
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

static const char *reason_phrase(int code) {
    switch (code) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return code < 300 ? "OK" : code < 500 ? "Bad Request" : "Internal Server Error";
    }
}

/* Fills `body` for `path` and returns the HTTP status. */
static int render_page(const isn_grpc_stats_server *server, const char *path, byte_buffer *body, const char **content_type) {
    if (!strcmp(path, "/metrics")) {
        server->pages.render_metrics(server->app, body);
        *content_type = "text/plain; version=0.0.4; charset=utf-8";
        return 200;
    }
    if (!strcmp(path, "/stats")) {
        server->pages.render_json(server->app, body);
        *content_type = "application/json";
        return 200;
    }
    const char *text = "not found; try /metrics, /stats, /healthz or /readyz\n";
    int code = 404;
    if (!strcmp(path, "/healthz")) {
        text = "ok\n";
        code = 200;
    } else if (!strcmp(path, "/readyz")) {
        return server->pages.readiness(server->app, body);
    }
    buffer_append(body, text, strlen(text));
    return code;
}

static void handle_request(stats_conn *conn, char *head) {
    isn_grpc_stats_server *server = conn->server;
    server->counters.requests++;
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
    byte_buffer *body = &server->body;
    body->len = 0;
    const char *content_type = "text/plain; charset=utf-8";
    int code = render_page(server, target, body, &content_type);
    respond(conn, code, reason_phrase(code), content_type, body, head_only);
    buffer_clear(body, 1 << 20);
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
        conn->request_started_ns = conn->in_len ? isn_now_ns() : 0;
    }
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    stats_conn *conn = handle->data;
    if (conn->tls.ssl) {
        *buf = uv_buf_init((char *)conn->server->tls_in, sizeof conn->server->tls_in);
        return;
    }
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
    if (conn->tls.ssl) {
        bool fed = tls_session_feed(&conn->tls, (const uint8_t *)buf->base, (size_t)nread);
        bool alive = fed && pull_plaintext(conn);
        if (!alive) {
            if (conn->tls.failed) log_debug("stats: %s", conn->tls.error);
            uv_read_stop(tcp);
            /* close_notify after whole requests (a client that half-closes): they are answered first */
            if (conn->tls.closed && conn->in_len) conn->close_after_write = true;
            else conn->tls.failed = true;
        }
        if (!conn->writing && tls_session_output_pending(&conn->tls) && !send_wire(conn)) {
            stats_conn_close(conn);
            return;
        }
        if (conn->tls.failed) {
            if (!conn->writing) stats_conn_close(conn);
            return;
        }
        /* The handshake done and no request begun: idle, and evictable, like a plain keep-alive connection. */
        if (conn->tls.handshake_done && !conn->in_len) conn->request_started_ns = 0;
        /* A client pipelining faster than we answer: its bytes wait in the kernel, not in OpenSSL (a
         * record's worth at most), until the answer is written. */
        if ((conn->in_len >= STATS_REQUEST_MAX - 1 || tls_session_input_pending(&conn->tls) >= TLS_RECORD_MAX) &&
            conn->writing) {
            uv_read_stop(tcp);
            return;
        }
        if (!conn->writing) process_requests(conn);
        if (!alive && !conn->writing && !conn->closing) stats_conn_close(conn); /* no whole request was left */
        return;
    }
    uint64_t now = isn_now_ns();
    conn->last_activity_ns = now;
    if (!conn->request_started_ns) conn->request_started_ns = now;
    conn->in_len += (size_t)nread;
    if (conn->in_len >= STATS_REQUEST_MAX - 1 && conn->writing) {
        uv_read_stop(tcp); /* a client pipelining faster than we answer: wait */
        return;
    }
    process_requests(conn);
}

/* At the connection limit: the connection idle longest (no request in progress, no answer being
 * written) makes room. */
static bool evict_idle(void *owner) {
    isn_grpc_stats_server *server = owner;
    stats_conn *oldest = NULL;
    for (conn_links *links = server->conns; links; links = links->next) {
        stats_conn *conn = (stats_conn *)links;
        if (conn->closing || conn->writing || conn->request_started_ns) continue;
        if (!oldest || conn->last_activity_ns < oldest->last_activity_ns) oldest = conn;
    }
    if (!oldest) return false;
    server->counters.connections_evicted++;
    stats_conn_close(oldest);
    return true;
}

static void on_connection(uv_stream_t *listener, int status) {
    isn_grpc_stats_server *server = listener->data;
    if (status < 0) return;
    stats_conn *conn = calloc(1, sizeof *conn);
    if (!conn) return;
    conn->server = server;
    if (accept_or_reject(server->loop, &server->limit, listener, &conn->tcp, conn, evict_idle, server) < 0) {
        server->counters.connections_rejected = server->limit.rejected;
        return;
    }
    conn->accepted_ns = conn->last_activity_ns = isn_now_ns();
    conn_list_add(&server->conns, &conn->links, &server->counters.connections);
    if (server->config.tls && tls_session_accept(&conn->tls, server->config.tls) < 0) {
        stats_conn_close(conn);
        return;
    }
    /* The handshake is the first part of the request head: it must end within header_timeout. */
    if (server->config.tls) conn->request_started_ns = conn->accepted_ns;
    uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
}

static void sweep_conn(conn_links *links, uint64_t now, uint64_t header_ns, uint64_t idle_ns, void *owner) {
    stats_conn *conn = (stats_conn *)links;
    if (conn->closing) return;
    isn_grpc_stats_server *server = owner;
    if (conn->writing) { /* a client that does not read its page holds nothing for long */
        if (now - conn->write_started_ns > (uint64_t)server->config.write_timeout_ms * 1000000ull) {
            server->counters.connections_timed_out++;
            stats_conn_abort(conn);
        }
        return;
    }
    bool slow = conn->request_started_ns && now - conn->request_started_ns > header_ns;
    if (slow || now - conn->last_activity_ns > idle_ns) {
        tls_session_count_timeout(&conn->tls);
        server->counters.connections_timed_out++;
        stats_conn_close(conn);
    }
}

static void on_sweep(uv_timer_t *timer) {
    isn_grpc_stats_server *server = timer->data;
    conn_list_sweep(server->conns, server->config.header_timeout_ms, server->config.idle_timeout_ms, sweep_conn, server);
}

/* ------------------------------------------------------------------ the server */

isn_grpc_stats_server *isn_grpc_stats_server_new(uv_loop_t *loop, const isn_grpc_stats_config *config,
                                         const isn_grpc_stats_pages *pages, void *app) {
    isn_grpc_stats_server *server = calloc(1, sizeof *server);
    if (!server) return NULL;
    server->loop = loop;
    server->pages = *pages;
    server->app = app;
    sweep_timer_start(loop, &server->sweep_timer, server, on_sweep, config->header_timeout_ms, config->idle_timeout_ms);
    isn_grpc_stats_server_reconfigure(server, config);
    return server;
}

int isn_grpc_stats_server_listen(isn_grpc_stats_server *server, const char *host_port, char *bound, size_t bound_len,
                             char *err, size_t err_len) {
    if (listen_tcp(server->loop, &server->listener, server, host_port, on_connection, bound, bound_len, err, err_len) < 0)
        return -1;
    server->listening = true;
    return 0;
}

void isn_grpc_stats_server_reconfigure(isn_grpc_stats_server *server, const isn_grpc_stats_config *config) {
    isn_grpc_tls *tls = server->config.tls ? server->config.tls : config->tls; /* the port's mode stays */
    server->config = *config;
    server->config.tls = tls;
    snprintf(server->server_name, sizeof server->server_name, "%s", config->server_name ? config->server_name : "isn");
    server->config.server_name = server->server_name;
    if (!server->config.max_connections) server->config.max_connections = ISN_GRPC_DEFAULT_STATS_MAX_CONNECTIONS;
    if (!server->config.write_timeout_ms) server->config.write_timeout_ms = ISN_GRPC_DEFAULT_STATS_WRITE_TIMEOUT_MS;
    server->limit.max = server->config.max_connections;
    uint32_t shortest = config->header_timeout_ms < server->config.write_timeout_ms ? config->header_timeout_ms
                                                                                    : server->config.write_timeout_ms;
    if (uv_is_active((uv_handle_t *)&server->sweep_timer))
        sweep_timer_set_timeouts(&server->sweep_timer, shortest, config->idle_timeout_ms);
}

void isn_grpc_stats_server_close(isn_grpc_stats_server *server) {
    if (server->closing) return;
    server->closing = true;
    for (conn_links *links = server->conns; links; links = links->next) stats_conn_close((stats_conn *)links);
    if (server->listening) uv_close((uv_handle_t *)&server->listener, NULL);
    server->listening = false;
    if (!uv_is_closing((uv_handle_t *)&server->sweep_timer)) uv_close((uv_handle_t *)&server->sweep_timer, NULL);
}

void isn_grpc_stats_server_free(isn_grpc_stats_server *server) {
    if (!server) return;
    buffer_free(&server->body);
    free(server);
}

const isn_grpc_stats_counters *isn_grpc_stats_server_get_counters(const isn_grpc_stats_server *server) {
    return &server->counters;
}
