/* isn-agg's gRPC server side: see agg_server.h. */
#include "tools/agg_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define AGG_PREFIX_BYTES 5
#define AGG_MAX_CONNECTIONS 1024
#define AGG_READ_CHUNK 65536

typedef struct agg_conn agg_conn;

struct agg_rpc {
    agg_conn *conn; /* NULL once the connection is gone */
    agg_rpc *prev, *next;
    int32_t stream_id;
    char path[128];
    uint64_t timeout_ms;
    uint8_t *body;
    size_t body_len, body_cap;
    bool dispatched, answered, closed;
    uint8_t *reply; /* prefixed message */
    size_t reply_len, reply_sent;
    int status;
    char status_text[8];
    char message[512];
};

struct agg_conn {
    agg_server *server;
    agg_conn *prev, *next;
    int fd;
    nghttp2_session *session;
    agg_rpc *rpcs;
    uint8_t *out;
    size_t out_len, out_sent, out_cap;
    bool dead;
};

struct agg_server {
    int listen_fd;
    int port;
    bool accepting;
    uint32_t max_message_bytes;
    agg_rpc_handler handler;
    void *user;
    agg_conn *conns;
    uint32_t num_conns;
    nghttp2_session_callbacks *callbacks;
};

/* ------------------------------------------------------------------ rpcs */

static void rpc_unlink(agg_rpc *rpc) {
    agg_conn *conn = rpc->conn;
    if (!conn) return;
    if (rpc->prev) rpc->prev->next = rpc->next;
    else conn->rpcs = rpc->next;
    if (rpc->next) rpc->next->prev = rpc->prev;
    rpc->prev = rpc->next = NULL;
}

static void rpc_free(agg_rpc *rpc) {
    rpc_unlink(rpc);
    free(rpc->body);
    free(rpc->reply);
    free(rpc);
}

/* The stream closed (or its connection did): free now if answered, else when the handler answers. */
static void rpc_closed(agg_rpc *rpc) {
    rpc->closed = true;
    if (rpc->answered || !rpc->dispatched) {
        rpc_free(rpc);
        return;
    }
    rpc_unlink(rpc);
    rpc->conn = NULL;
}

const char *agg_rpc_path(const agg_rpc *rpc) { return rpc->path; }
uint64_t agg_rpc_timeout_ms(const agg_rpc *rpc) { return rpc->timeout_ms; }
bool agg_rpc_cancelled(const agg_rpc *rpc) { return rpc->closed; }

const uint8_t *agg_rpc_message(const agg_rpc *rpc, size_t *len) {
    *len = rpc->body_len >= AGG_PREFIX_BYTES ? rpc->body_len - AGG_PREFIX_BYTES : 0;
    return rpc->body ? rpc->body + AGG_PREFIX_BYTES : (const uint8_t *)"";
}

static ssize_t read_reply(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                          uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
    (void)user_data;
    agg_rpc *rpc = source->ptr;
    size_t left = rpc->reply_len - rpc->reply_sent;
    size_t n = left < length ? left : length;
    memcpy(buf, rpc->reply + rpc->reply_sent, n);
    rpc->reply_sent += n;
    if (rpc->reply_sent == rpc->reply_len) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_nv trailer[] = {{(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NONE}};
        if (nghttp2_submit_trailer(session, stream_id, trailer, 1) != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

void agg_rpc_reply(agg_rpc *rpc, const uint8_t *message, size_t len) {
    rpc->answered = true;
    if (rpc->closed || !rpc->conn) {
        rpc_free(rpc);
        return;
    }
    rpc->reply = malloc(len + AGG_PREFIX_BYTES);
    if (!rpc->reply) {
        agg_rpc_fail(rpc, 8, "aggregator out of memory");
        return;
    }
    rpc->reply[0] = 0;
    rpc->reply[1] = (uint8_t)(len >> 24);
    rpc->reply[2] = (uint8_t)(len >> 16);
    rpc->reply[3] = (uint8_t)(len >> 8);
    rpc->reply[4] = (uint8_t)len;
    if (len) memcpy(rpc->reply + AGG_PREFIX_BYTES, message, len);
    rpc->reply_len = len + AGG_PREFIX_BYTES;
    nghttp2_nv headers[] = {
        {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
    };
    nghttp2_data_provider provider = {.source.ptr = rpc, .read_callback = read_reply};
    nghttp2_submit_response(rpc->conn->session, rpc->stream_id, headers, 2, &provider);
}

/* grpc-message is percent-encoded (RFC 3986 unreserved characters pass). */
static void percent_encode(const char *in, char *out, size_t out_len) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && n + 4 < out_len; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '%') out[n++] = (char)*p;
        else out[n++] = '%', out[n++] = hex[*p >> 4], out[n++] = hex[*p & 15];
    }
    out[n] = '\0';
}

void agg_rpc_fail(agg_rpc *rpc, int grpc_status, const char *message) {
    rpc->answered = true;
    if (rpc->closed || !rpc->conn) {
        rpc_free(rpc);
        return;
    }
    snprintf(rpc->status_text, sizeof rpc->status_text, "%d", grpc_status);
    percent_encode(message ? message : "", rpc->message, sizeof rpc->message);
    nghttp2_nv headers[] = {
        {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"grpc-status", (uint8_t *)rpc->status_text, 11, strlen(rpc->status_text), NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"grpc-message", (uint8_t *)rpc->message, 12, strlen(rpc->message), NGHTTP2_NV_FLAG_NONE},
    };
    nghttp2_submit_response(rpc->conn->session, rpc->stream_id, headers, 4, NULL);
}

/* ------------------------------------------------------------------ nghttp2 callbacks */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    agg_conn *conn = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    agg_rpc *rpc = calloc(1, sizeof *rpc);
    if (!rpc) return NGHTTP2_ERR_CALLBACK_FAILURE;
    rpc->conn = conn;
    rpc->stream_id = frame->hd.stream_id;
    rpc->next = conn->rpcs;
    if (conn->rpcs) conn->rpcs->prev = rpc;
    conn->rpcs = rpc;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, rpc);
    return 0;
}

/* grpc-timeout: up to 8 digits and a unit (H M S m u n). */
static uint64_t parse_timeout_ms(const uint8_t *value, size_t len) {
    if (len < 2 || len > 9) return 0;
    uint64_t n = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (value[i] < '0' || value[i] > '9') return 0;
        n = n * 10 + (uint64_t)(value[i] - '0');
    }
    switch (value[len - 1]) {
    case 'H': return n * 3600000;
    case 'M': return n * 60000;
    case 'S': return n * 1000;
    case 'm': return n;
    case 'u': return (n + 999) / 1000;
    case 'n': return (n + 999999) / 1000000;
    default: return 0;
    }
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) {
    (void)flags, (void)user_data;
    agg_rpc *rpc = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!rpc) return 0;
    if (namelen == 5 && !memcmp(name, ":path", 5)) {
        size_t n = valuelen < sizeof rpc->path - 1 ? valuelen : sizeof rpc->path - 1;
        memcpy(rpc->path, value, n);
        rpc->path[n] = '\0';
    } else if (namelen == 12 && !memcmp(name, "grpc-timeout", 12)) {
        rpc->timeout_ms = parse_timeout_ms(value, valuelen);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                         void *user_data) {
    (void)flags;
    agg_conn *conn = user_data;
    agg_rpc *rpc = nghttp2_session_get_stream_user_data(session, stream_id);
    if (!rpc || rpc->dispatched) return 0;
    if (rpc->body_len + len > (size_t)conn->server->max_message_bytes + AGG_PREFIX_BYTES) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    if (rpc->body_len + len > rpc->body_cap) {
        size_t cap = rpc->body_cap ? rpc->body_cap * 2 : 1024;
        while (cap < rpc->body_len + len) cap *= 2;
        uint8_t *body = realloc(rpc->body, cap);
        if (!body) return NGHTTP2_ERR_CALLBACK_FAILURE;
        rpc->body = body;
        rpc->body_cap = cap;
    }
    memcpy(rpc->body + rpc->body_len, data, len);
    rpc->body_len += len;
    return 0;
}

static void dispatch(agg_conn *conn, agg_rpc *rpc) {
    rpc->dispatched = true;
    if (rpc->body_len < AGG_PREFIX_BYTES) {
        agg_rpc_fail(rpc, 13, "request has no gRPC message");
        return;
    }
    size_t len = (size_t)rpc->body[1] << 24 | (size_t)rpc->body[2] << 16 | (size_t)rpc->body[3] << 8 | rpc->body[4];
    if (rpc->body[0] != 0) {
        agg_rpc_fail(rpc, 12, "compressed messages are not supported");
        return;
    }
    if (len != rpc->body_len - AGG_PREFIX_BYTES) {
        agg_rpc_fail(rpc, 13, "gRPC message length prefix does not match the body (one message per call)");
        return;
    }
    conn->server->handler(conn->server->user, rpc);
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    agg_conn *conn = user_data;
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        agg_rpc *rpc = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (rpc && !rpc->dispatched) dispatch(conn, rpc);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data) {
    (void)error_code, (void)user_data;
    agg_rpc *rpc = nghttp2_session_get_stream_user_data(session, stream_id);
    if (rpc) rpc_closed(rpc);
    return 0;
}

/* ------------------------------------------------------------------ connections */

static int set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static void conn_free(agg_conn *conn) {
    agg_server *server = conn->server;
    while (conn->rpcs) rpc_closed(conn->rpcs);
    nghttp2_session_del(conn->session);
    close(conn->fd);
    free(conn->out);
    if (conn->prev) conn->prev->next = conn->next;
    else server->conns = conn->next;
    if (conn->next) conn->next->prev = conn->prev;
    server->num_conns--;
    free(conn);
}

static void accept_connections(agg_server *server) {
    for (;;) {
        int fd = accept4(server->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (server->num_conns >= AGG_MAX_CONNECTIONS) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        agg_conn *conn = calloc(1, sizeof *conn);
        if (!conn) {
            close(fd);
            return;
        }
        conn->server = server;
        conn->fd = fd;
        if (nghttp2_session_server_new(&conn->session, server->callbacks, conn) != 0) {
            close(fd);
            free(conn);
            return;
        }
        nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 4096},
                                             {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
        nghttp2_submit_settings(conn->session, NGHTTP2_FLAG_NONE, settings, 2);
        nghttp2_session_set_local_window_size(conn->session, NGHTTP2_FLAG_NONE, 0, 16 << 20);
        conn->next = server->conns;
        if (server->conns) server->conns->prev = conn;
        server->conns = conn;
        server->num_conns++;
    }
}

/* Moves what nghttp2 has queued to the socket as far as it takes it. -1 on a dead connection. */
static int conn_flush(agg_conn *conn) {
    for (;;) {
        if (conn->out_sent == conn->out_len) {
            conn->out_len = conn->out_sent = 0;
            const uint8_t *data;
            ssize_t n;
            while ((n = nghttp2_session_mem_send(conn->session, &data)) > 0) {
                if (conn->out_len + (size_t)n > conn->out_cap) {
                    size_t cap = conn->out_cap ? conn->out_cap : 16384;
                    while (cap < conn->out_len + (size_t)n) cap *= 2;
                    uint8_t *out = realloc(conn->out, cap);
                    if (!out) return -1;
                    conn->out = out;
                    conn->out_cap = cap;
                }
                memcpy(conn->out + conn->out_len, data, (size_t)n);
                conn->out_len += (size_t)n;
                if (conn->out_len >= 65536) break;
            }
            if (n < 0) return -1;
            if (conn->out_len == 0) return 0;
        }
        ssize_t w = send(conn->fd, conn->out + conn->out_sent, conn->out_len - conn->out_sent, MSG_NOSIGNAL);
        if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        conn->out_sent += (size_t)w;
    }
}

static void conn_read(agg_conn *conn) {
    uint8_t buf[AGG_READ_CHUNK];
    for (;;) {
        ssize_t r = recv(conn->fd, buf, sizeof buf, 0);
        if (r > 0) {
            if (nghttp2_session_mem_recv(conn->session, buf, (size_t)r) < 0) {
                conn->dead = true;
                return;
            }
            if ((size_t)r < sizeof buf) return;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) conn->dead = true;
        if (r < 0 && errno == EINTR) continue;
        return;
    }
}

/* ------------------------------------------------------------------ server */

agg_server *agg_server_new(const char *listen_address, uint32_t max_message_bytes, agg_rpc_handler handler,
                           void *user, char *err, size_t err_len) {
    char host[256];
    const char *colon = strrchr(listen_address, ':');
    if (!colon || colon == listen_address || (size_t)(colon - listen_address) >= sizeof host) {
        snprintf(err, err_len, "bad listen address \"%s\": expected HOST:PORT", listen_address);
        return NULL;
    }
    const char *h = listen_address;
    size_t hlen = (size_t)(colon - listen_address);
    if (h[0] == '[' && hlen >= 2 && h[hlen - 1] == ']') h++, hlen -= 2;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0) {
        snprintf(err, err_len, "cannot resolve listen address \"%s\": %s", listen_address, gai_strerror(rc));
        return NULL;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 512) != 0 || set_nonblocking(fd) != 0) {
        snprintf(err, err_len, "cannot listen on %s: %s", listen_address, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return NULL;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &bound_len);
    agg_server *server = calloc(1, sizeof *server);
    if (!server || nghttp2_session_callbacks_new(&server->callbacks) != 0) {
        close(fd);
        free(server);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    server->listen_fd = fd;
    server->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                     : ((struct sockaddr_in *)&bound)->sin_port);
    server->accepting = true;
    server->max_message_bytes = max_message_bytes;
    server->handler = handler;
    server->user = user;
    nghttp2_session_callbacks_set_on_begin_headers_callback(server->callbacks, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(server->callbacks, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(server->callbacks, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(server->callbacks, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(server->callbacks, on_stream_close);
    return server;
}

int agg_server_port(const agg_server *server) { return server->port; }
uint32_t agg_server_connections(const agg_server *server) { return server->num_conns; }

void agg_server_stop_accepting(agg_server *server) {
    if (!server->accepting) return;
    server->accepting = false;
    close(server->listen_fd);
    server->listen_fd = -1;
    for (agg_conn *c = server->conns; c; c = c->next) nghttp2_submit_shutdown_notice(c->session);
}

void agg_server_free(agg_server *server) {
    if (!server) return;
    while (server->conns) conn_free(server->conns);
    if (server->listen_fd >= 0) close(server->listen_fd);
    nghttp2_session_callbacks_del(server->callbacks);
    free(server);
}

size_t agg_server_pollfds(agg_server *server, struct pollfd *fds, size_t max) {
    size_t n = 0;
    if (server->accepting && n < max) fds[n++] = (struct pollfd){.fd = server->listen_fd, .events = POLLIN};
    for (agg_conn *c = server->conns; c && n < max; c = c->next) {
        conn_flush(c);
        short events = POLLIN;
        if (c->out_sent < c->out_len) events |= POLLOUT;
        fds[n++] = (struct pollfd){.fd = c->fd, .events = events};
    }
    return n;
}

void agg_server_process(agg_server *server, const struct pollfd *fds, size_t count) {
    size_t i = 0;
    bool accept_ready = false;
    if (server->accepting && i < count) accept_ready = fds[i++].revents & POLLIN;
    /* The connection list is in the same order as agg_server_pollfds wrote it. */
    agg_conn *c = server->conns;
    for (; c && i < count; c = c->next, i++) {
        if (fds[i].fd != c->fd) break;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) conn_read(c);
    }
    for (agg_conn *conn = server->conns, *next; conn; conn = next) {
        next = conn->next;
        if (!conn->dead && conn_flush(conn) < 0) conn->dead = true;
        if (conn->dead || (!nghttp2_session_want_read(conn->session) && !nghttp2_session_want_write(conn->session) &&
                           conn->out_sent == conn->out_len))
            conn_free(conn);
    }
    if (accept_ready) accept_connections(server);
}

void agg_server_flush(agg_server *server) {
    for (agg_conn *conn = server->conns; conn; conn = conn->next)
        if (!conn->dead && conn_flush(conn) < 0) conn->dead = true;
}
