/* gRPC client transport: socket + nghttp2 client session; see grpc/client.h. */
#include "grpc/client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "grpc/tls_internal.h"

#define READ_CHUNK 65536

struct isn_grpc_client_call {
    isn_grpc_client *client; /* NULL once the client is gone */
    isn_grpc_client_call *prev, *next;
    int32_t stream_id;
    bool done;
    uint64_t done_ns; /* when the bytes that completed it were read (isn_now_ns), or it failed */
    uint64_t arrival_ns; /* when those bytes reached the socket (isn_grpc_stamp_arrivals), 0 unknown */
    uint8_t *body; /* request bytes, prefix included when asked */
    size_t body_len, body_sent;
    bool leave_open;
    isn_grpc_result result;
    byte_buffer raw; /* response body as received */
    void *user;      /* the caller's (isn_grpc_client_call_set_user) */
    /* Done and not yet taken (isn_grpc_take_finished): on finished_on's list of such calls. */
    isn_grpc_client *finished_on;
    isn_grpc_client_call *finished_prev, *finished_next;
};

typedef struct client_watch client_watch;

struct isn_grpc_client {
    int fd;
    client_watch *watch; /* when driven from a libuv loop */
    nghttp2_session *session;
    bool failed;
    bool goaway;
    isn_grpc_client_call *calls; /* unfinished, owned by their callers */
    bool track_finished;          /* calls that finish go on `finished` (isn_grpc_track_finished) */
    isn_grpc_client_call *finished; /* done, not yet taken: still owned by their callers */
    uint8_t *out;
    size_t out_len, out_cap, out_sent;
    char authority[300];
    char error[256];
    tls_session tls; /* ssl NULL: plaintext */
    uint64_t read_ns; /* while the bytes of a read are taken in: when they were read */
    bool stamp_arrivals;  /* the socket reports when the kernel received what each read returns */
    uint64_t arrival_ns;  /* while the bytes of a read are taken in: when they arrived, 0 unknown */
};

static int64_t now_ms(void) { return (int64_t)(isn_now_ns() / 1000000); }

/* ------------------------------------------------------------------ calls */

static void call_unlink(isn_grpc_client_call *call) {
    isn_grpc_client *client = call->client;
    if (!client) return;
    if (call->prev) call->prev->next = call->next;
    else client->calls = call->next;
    if (call->next) call->next->prev = call->prev;
    call->prev = call->next = NULL;
}

static void finished_unlink(isn_grpc_client_call *call) {
    isn_grpc_client *client = call->finished_on;
    if (!client) return;
    if (call->finished_prev) call->finished_prev->finished_next = call->finished_next;
    else client->finished = call->finished_next;
    if (call->finished_next) call->finished_next->finished_prev = call->finished_prev;
    call->finished_prev = call->finished_next = NULL;
    call->finished_on = NULL;
}

static void call_finish(isn_grpc_client_call *call) {
    if (call->done) return;
    call->done = true;
    call->done_ns = call->client && call->client->read_ns ? call->client->read_ns : isn_now_ns();
    call->arrival_ns = call->client && call->client->read_ns ? call->client->arrival_ns : 0;
    isn_grpc_client *client = call->client;
    call_unlink(call);
    call->client = NULL;
    if (client && client->track_finished) {
        call->finished_on = client;
        call->finished_next = client->finished;
        if (client->finished) client->finished->finished_prev = call;
        client->finished = call;
    }
    isn_grpc_result *r = &call->result;
    const uint8_t *raw = call->raw.data;
    r->body_len = call->raw.len;
    if (call->raw.len >= ISN_GRPC_PREFIX_BYTES) {
        size_t len = (size_t)raw[1] << 24 | (size_t)raw[2] << 16 | (size_t)raw[3] << 8 | raw[4];
        if (len <= call->raw.len - ISN_GRPC_PREFIX_BYTES) {
            r->message = malloc(len ? len : 1);
            if (r->message) {
                memcpy(r->message, raw + ISN_GRPC_PREFIX_BYTES, len);
                r->message_len = len;
            }
        }
    }
    buffer_free(&call->raw);
    free(call->body);
    call->body = NULL;
}

bool isn_grpc_client_call_done(const isn_grpc_client_call *call) { return call->done; }
void isn_grpc_client_call_set_user(isn_grpc_client_call *call, void *user) { call->user = user; }
void *isn_grpc_client_call_user(const isn_grpc_client_call *call) { return call->user; }

void isn_grpc_track_finished(isn_grpc_client *client) { client->track_finished = true; }

/* The list goes to the caller as it is, linked through finished_next, with `onto` after its last call;
 * each call leaves the client (its finished_on cleared) so that freeing one later touches no client. */
isn_grpc_client_call *isn_grpc_take_finished(isn_grpc_client *client, isn_grpc_client_call *onto) {
    isn_grpc_client_call *taken = client->finished;
    if (!taken) return onto;
    client->finished = NULL;
    isn_grpc_client_call *last = taken;
    for (isn_grpc_client_call *call = taken; call; call = call->finished_next) {
        call->finished_on = NULL;
        last = call;
    }
    last->finished_next = onto;
    return taken;
}

isn_grpc_client_call *isn_grpc_client_call_next_finished(const isn_grpc_client_call *call) {
    return call->finished_next;
}
uint64_t isn_grpc_client_call_done_ns(const isn_grpc_client_call *call) { return call->done_ns; }
uint64_t isn_grpc_client_call_arrival_ns(const isn_grpc_client_call *call) { return call->arrival_ns; }
const isn_grpc_result *isn_grpc_client_call_result(const isn_grpc_client_call *call) { return &call->result; }

bool isn_grpc_result_refused_unprocessed(const isn_grpc_result *result) {
    return result->grpc_status < 0 && result->reset && result->reset_code == NGHTTP2_REFUSED_STREAM;
}

void isn_grpc_client_call_free(isn_grpc_client_call *call) {
    if (!call) return;
    finished_unlink(call);
    if (!call->done && call->client) {
        isn_grpc_client *client = call->client;
        if (client->session && call->stream_id > 0) {
            nghttp2_session_set_stream_user_data(client->session, call->stream_id, NULL);
            nghttp2_submit_rst_stream(client->session, NGHTTP2_FLAG_NONE, call->stream_id, NGHTTP2_CANCEL);
        }
        call_unlink(call);
    }
    buffer_free(&call->raw);
    free(call->body);
    free(call->result.message);
    free(call);
}

/* ------------------------------------------------------------------ nghttp2 callbacks */

static int hex_value(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void percent_decode(const uint8_t *in, size_t len, char *out, size_t out_len) {
    size_t n = 0;
    for (size_t i = 0; i < len && n + 1 < out_len; i++) {
        int hi, lo;
        if (in[i] == '%' && i + 2 < len && (hi = hex_value(in[i + 1])) >= 0 && (lo = hex_value(in[i + 2])) >= 0) {
            out[n++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[n++] = (char)in[i];
        }
    }
    out[n] = '\0';
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) {
    (void)flags, (void)user_data;
    isn_grpc_client_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!call) return 0;
    char text[16];
    size_t n = valuelen < sizeof text - 1 ? valuelen : sizeof text - 1;
    memcpy(text, value, n);
    text[n] = '\0';
    if (namelen == 7 && !memcmp(name, ":status", 7)) call->result.http_status = atoi(text);
    else if (namelen == 11 && !memcmp(name, "grpc-status", 11)) call->result.grpc_status = atoi(text);
    else if (namelen == 12 && !memcmp(name, "grpc-message", 12))
        percent_decode(value, valuelen, call->result.grpc_message, sizeof call->result.grpc_message);
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *user_data) {
    (void)flags, (void)user_data;
    isn_grpc_client_call *call = nghttp2_session_get_stream_user_data(session, stream_id);
    if (!call) return 0;
    /* Room for a typical reply at the first chunk, then doubling. */
    if (!call->raw.cap && !buffer_reserve(&call->raw, 4096)) return NGHTTP2_ERR_CALLBACK_FAILURE;
    return buffer_append(&call->raw, data, len) ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    isn_grpc_client *client = user_data;
    if (frame->hd.type == NGHTTP2_GOAWAY) client->goaway = true;
    isn_grpc_client_call *call = frame->hd.stream_id ? nghttp2_session_get_stream_user_data(session, frame->hd.stream_id) : NULL;
    if (!call) return 0;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        call->result.reset = true;
        call->result.reset_code = frame->rst_stream.error_code;
    }
    /* The reply is complete once the server ends its side, even if ours is still open (the server
     * answered before reading the whole request): stop sending and finish the call. */
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        if (nghttp2_session_get_stream_local_close(session, frame->hd.stream_id) == 0)
            nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
        nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, NULL);
        call_finish(call);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data) {
    (void)user_data;
    isn_grpc_client_call *call = nghttp2_session_get_stream_user_data(session, stream_id);
    if (!call) return 0;
    if (error_code != NGHTTP2_NO_ERROR && !call->result.reset) {
        call->result.reset = true;
        call->result.reset_code = error_code;
    }
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    call_finish(call);
    return 0;
}

static ssize_t read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
    (void)session, (void)stream_id, (void)user_data;
    isn_grpc_client_call *call = source->ptr;
    size_t left = call->body_len - call->body_sent;
    size_t n = left < length ? left : length;
    if (n) memcpy(buf, call->body + call->body_sent, n);
    call->body_sent += n;
    if (call->body_sent == call->body_len) {
        if (call->leave_open) {
            if (n == 0) return NGHTTP2_ERR_DEFERRED; /* never resumed: the stream stays open */
        } else {
            *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        }
    }
    return (ssize_t)n;
}

/* ------------------------------------------------------------------ connection */

static int set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static int connect_socket(const char *host_port, uint32_t timeout_ms, char *err, size_t err_len) {
    char host[256], port[8];
    uint16_t port_number;
    if (isn_parse_host_port(host_port, host, sizeof host, &port_number, err, err_len) < 0) return -1;
    snprintf(port, sizeof port, "%u", port_number);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found, *ai;
    int rc = getaddrinfo(host, port, &hints, &found);
    if (rc != 0) return isn_error(err, err_len, "cannot resolve %s: %s", host_port, gai_strerror(rc));
    int fd = -1;
    char why[128] = "no address";
    for (ai = found; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        set_nonblocking(fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int soerr = 0;
            socklen_t len = sizeof soerr;
            if (poll(&pfd, 1, timeout_ms ? (int)timeout_ms : -1) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
                break;
            snprintf(why, sizeof why, "%s", soerr ? strerror(soerr) : "timed out");
        } else {
            snprintf(why, sizeof why, "%s", strerror(errno));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(found);
    if (fd < 0) return isn_error(err, err_len, "cannot connect to %s: %s", host_port, why);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static bool out_append_tls(isn_grpc_client *client);
static int take_input(isn_grpc_client *client, const uint8_t *data, size_t len);

/* The host part of HOST:PORT or [IPV6]:PORT. */
static void host_of(const char *host_port, char *host, size_t host_len) {
    const char *start = host_port, *end;
    if (*start == '[') {
        start++;
        end = strchr(start, ']');
    } else {
        end = strrchr(start, ':');
    }
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= host_len) n = host_len - 1;
    memcpy(host, start, n);
    host[n] = '\0';
}

/* Runs the TLS handshake to its end, within the connect timeout (the socket is non-blocking). */
static int tls_handshake(isn_grpc_client *client, const char *host_port, uint32_t timeout_ms, char *err, size_t err_len) {
    int64_t deadline = now_ms() + (timeout_ms ? timeout_ms : 10000);
    uint8_t buf[READ_CHUNK];
    while (!client->tls.handshake_done) {
        if (take_input(client, NULL, 0) < 0)
            return isn_error(err, err_len, "TLS with %s: %s", host_port, client->error);
        if (client->tls.handshake_done) break;
        if (!out_append_tls(client)) return isn_error(err, err_len, "out of memory");
        while (client->out_sent < client->out_len) {
            ssize_t w = send(client->fd, client->out + client->out_sent, client->out_len - client->out_sent, MSG_NOSIGNAL);
            if (w > 0) {
                client->out_sent += (size_t)w;
                continue;
            }
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return isn_error(err, err_len, "TLS with %s: send failed: %s", host_port, strerror(errno));
            struct pollfd pfd = {.fd = client->fd, .events = POLLOUT};
            int64_t left = deadline - now_ms();
            if (left <= 0 || poll(&pfd, 1, (int)left) == 0)
                return isn_error(err, err_len, "TLS handshake with %s timed out", host_port);
        }
        client->out_len = client->out_sent = 0;
        struct pollfd pfd = {.fd = client->fd, .events = POLLIN};
        int64_t left = deadline - now_ms();
        if (left <= 0 || poll(&pfd, 1, (int)left) == 0)
            return isn_error(err, err_len, "TLS handshake with %s timed out", host_port);
        ssize_t r = recv(client->fd, buf, sizeof buf, 0);
        if (r == 0) return isn_error(err, err_len, "TLS with %s: the server closed the connection in the handshake (it "
                                                   "may require a client certificate, or not speak TLS)", host_port);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
            return isn_error(err, err_len, "TLS with %s: %s", host_port, strerror(errno));
        }
        if (take_input(client, buf, (size_t)r) < 0)
            return isn_error(err, err_len, "TLS with %s: %s", host_port, client->error);
    }
    const unsigned char *protocol;
    unsigned int protocol_len;
    SSL_get0_alpn_selected(client->tls.ssl, &protocol, &protocol_len);
    if (protocol_len != 2 || memcmp(protocol, "h2", 2))
        return isn_error(err, err_len, "TLS with %s: the server did not agree to HTTP/2 (ALPN h2)", host_port);
    return 0;
}

isn_grpc_client *isn_grpc_connect(const char *host_port, uint32_t timeout_ms, char *err, size_t err_len) {
    return isn_grpc_connect_tls(host_port, timeout_ms, NULL, NULL, err, err_len);
}

isn_grpc_client *isn_grpc_connect_tls(const char *host_port, uint32_t timeout_ms, isn_grpc_tls *tls,
                                      const char *server_name, char *err, size_t err_len) {
    int fd = connect_socket(host_port, timeout_ms, err, err_len);
    if (fd < 0) return NULL;
    isn_grpc_client *client = calloc(1, sizeof *client);
    nghttp2_session_callbacks *callbacks = NULL;
    if (!client || nghttp2_session_callbacks_new(&callbacks) != 0) {
        free(client);
        close(fd);
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    client->fd = fd;
    snprintf(client->authority, sizeof client->authority, "%s", host_port);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);
    /* The reply's headers are read for :status, grpc-status and grpc-message alone, each parsed here;
     * nghttp2's HTTP checks of every header (names, values, pseudo-headers) cost a load generator about
     * as much as decoding them, on headers it does not read. */
    nghttp2_option *options = NULL;
    int rc = nghttp2_option_new(&options);
    if (rc == 0) {
        nghttp2_option_set_no_http_messaging(options, 1);
        rc = nghttp2_session_client_new2(&client->session, callbacks, client, options);
        nghttp2_option_del(options);
    }
    nghttp2_session_callbacks_del(callbacks);
    if (rc != 0) {
        close(fd);
        free(client);
        isn_error(err, err_len, "cannot create an HTTP/2 session: %s", nghttp2_strerror(rc));
        return NULL;
    }
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
    };
    nghttp2_submit_settings(client->session, NGHTTP2_FLAG_NONE, settings, 2);
    nghttp2_session_set_local_window_size(client->session, NGHTTP2_FLAG_NONE, 0, 16 << 20);
    if (tls) {
        char host[256];
        if (server_name && server_name[0]) snprintf(host, sizeof host, "%s", server_name);
        else host_of(host_port, host, sizeof host);
        if (tls_session_connect(&client->tls, tls, host, err, err_len) < 0 ||
            tls_handshake(client, host_port, timeout_ms, err, err_len) < 0) {
            isn_grpc_close(client);
            return NULL;
        }
    }
    return client;
}

int isn_grpc_fd(const isn_grpc_client *client) { return client->fd; }
bool isn_grpc_usable(const isn_grpc_client *client) { return !client->failed && !client->goaway; }

uint32_t isn_grpc_max_streams(const isn_grpc_client *client) {
    return client->session ? nghttp2_session_get_remote_settings(client->session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
                           : 0;
}

static void fail_connection(isn_grpc_client *client, const char *why) {
    if (!client->failed) snprintf(client->error, sizeof client->error, "%s", why);
    client->failed = true;
    while (client->calls) {
        isn_grpc_client_call *call = client->calls;
        if (client->session && call->stream_id > 0)
            nghttp2_session_set_stream_user_data(client->session, call->stream_id, NULL);
        if (!call->result.grpc_message[0])
            snprintf(call->result.grpc_message, sizeof call->result.grpc_message, "connection lost: %s", why);
        call_finish(call);
    }
}

void isn_grpc_close(isn_grpc_client *client) {
    if (!client) return;
    isn_grpc_client_unwatch(client);
    fail_connection(client, "client closed");
    while (client->finished) finished_unlink(client->finished); /* their callers still own them */
    nghttp2_session_del(client->session);
    tls_session_free(&client->tls);
    close(client->fd);
    free(client->out);
    free(client);
}

isn_grpc_client_call *isn_grpc_start(isn_grpc_client *client, const isn_grpc_request *request, char *err, size_t err_len) {
    if (client->failed) {
        isn_error(err, err_len, "connection failed: %s", client->error);
        return NULL;
    }
    if (client->goaway) {
        isn_error(err, err_len, "server sent GOAWAY; connect again");
        return NULL;
    }
    isn_grpc_client_call *call = calloc(1, sizeof *call);
    size_t total = request->body_len + (request->frame ? ISN_GRPC_PREFIX_BYTES : 0);
    if (!call || !(call->body = malloc(total ? total : 1))) {
        free(call);
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    uint8_t *p = call->body;
    if (request->frame) {
        isn_grpc_write_prefix(p, (uint32_t)request->body_len);
        p += ISN_GRPC_PREFIX_BYTES;
    }
    if (request->body_len) memcpy(p, request->body, request->body_len);
    call->body_len = total;
    call->leave_open = request->leave_open;
    call->result.grpc_status = -1;

    char timeout[ISN_GRPC_TIMEOUT_MAX_LEN];
    const char *content_type = request->content_type ? request->content_type : "application/grpc";
    nghttp2_nv headers[10];
    size_t n = 0;
#define NV(name, value) \
    headers[n++] = (nghttp2_nv){(uint8_t *)(name), (uint8_t *)(value), strlen(name), strlen(value), NGHTTP2_NV_FLAG_NONE}
    NV(":method", "POST");
    NV(":scheme", "http");
    NV(":authority", client->authority);
    NV(":path", request->path);
    NV("content-type", content_type);
    NV("te", "trailers");
    NV("user-agent", "isn-grpc-client/0.1");
    if (request->timeout_header) {
        NV("grpc-timeout", request->timeout_header);
    } else if (request->timeout_ms) {
        isn_grpc_format_timeout((uint64_t)request->timeout_ms * 1000000ull, timeout, sizeof timeout);
        NV("grpc-timeout", timeout);
    }
    if (request->traceparent) NV("traceparent", request->traceparent);
    if (request->via) NV("isn-via", request->via);
#undef NV
    nghttp2_data_provider provider = {.source.ptr = call, .read_callback = read_body};
    int32_t id = nghttp2_submit_request(client->session, NULL, headers, n, &provider, call);
    if (id < 0) {
        free(call->body);
        free(call);
        isn_error(err, err_len, "cannot start a call: %s", nghttp2_strerror(id));
        return NULL;
    }
    call->stream_id = id;
    call->client = client;
    call->next = client->calls;
    if (client->calls) client->calls->prev = call;
    client->calls = call;
    return call;
}

static bool out_reserve(isn_grpc_client *client, size_t n) {
    if (client->out_len + n <= client->out_cap) return true;
    size_t cap = client->out_cap ? client->out_cap : 16384;
    while (cap < client->out_len + n) cap *= 2;
    uint8_t *out = realloc(client->out, cap);
    if (!out) return false;
    client->out = out;
    client->out_cap = cap;
    return true;
}

static bool out_append(isn_grpc_client *client, const uint8_t *data, size_t n) {
    if (!out_reserve(client, n)) return false;
    memcpy(client->out + client->out_len, data, n);
    client->out_len += n;
    return true;
}

/* The ciphertext OpenSSL wrote joins the bytes to send. */
static bool out_append_tls(isn_grpc_client *client) {
    size_t pending = tls_session_output_pending(&client->tls);
    if (!pending) return true;
    if (!out_reserve(client, pending)) return false;
    client->out_len += tls_session_read_output(&client->tls, client->out + client->out_len, pending);
    return true;
}

static bool seal(isn_grpc_client *client, const uint8_t *plain, size_t len) {
    return tls_session_write(&client->tls, plain, len) && out_append_tls(client);
}

/* Received bytes into the HTTP/2 session, through TLS when the connection has it. -1 with
 * client->error on a failure. */
static int take_input(isn_grpc_client *client, const uint8_t *data, size_t len) {
    if (!client->tls.ssl) {
        ssize_t used = nghttp2_session_mem_recv(client->session, data, len);
        if (used < 0) {
            fail_connection(client, nghttp2_strerror((int)used));
            return -1;
        }
        return 0;
    }
    if (!tls_session_feed(&client->tls, data, len)) {
        fail_connection(client, "out of memory for TLS input");
        return -1;
    }
    uint8_t plain[TLS_RECORD_MAX];
    for (;;) {
        ssize_t n = tls_session_read(&client->tls, plain, sizeof plain);
        if (n == 0) return 0;
        if (n < 0) {
            fail_connection(client, client->tls.error);
            return -1;
        }
        ssize_t used = nghttp2_session_mem_recv(client->session, plain, (size_t)n);
        if (used < 0) {
            fail_connection(client, nghttp2_strerror((int)used));
            return -1;
        }
    }
}

/* Moves queued frames to the socket as far as it takes them. -1 on a dead connection. */
static int send_pending(isn_grpc_client *client) {
    for (;;) {
        if (client->out_sent == client->out_len) {
            client->out_len = client->out_sent = 0;
            const uint8_t *data;
            ssize_t n;
            if (client->tls.ssl && !out_append_tls(client)) return -1;
            /* Over TLS, frames are gathered into records of up to 16 KiB (not a record per frame). */
            uint8_t staging[TLS_RECORD_MAX];
            size_t staged = 0;
            while ((n = nghttp2_session_mem_send(client->session, &data)) > 0) {
                if (!client->tls.ssl) {
                    if (!out_append(client, data, (size_t)n)) return -1;
                } else {
                    if (staged + (size_t)n > sizeof staging && staged) {
                        if (!seal(client, staging, staged)) return -1;
                        staged = 0;
                    }
                    if ((size_t)n > sizeof staging) {
                        if (!seal(client, data, (size_t)n)) return -1;
                    } else {
                        memcpy(staging + staged, data, (size_t)n);
                        staged += (size_t)n;
                    }
                }
                if (client->out_len + staged >= 65536) break;
            }
            if (staged && !seal(client, staging, staged)) return -1;
            if (n < 0) return -1;
            if (client->out_len == 0) return 0;
        }
        ssize_t w = send(client->fd, client->out + client->out_sent, client->out_len - client->out_sent, MSG_NOSIGNAL);
        if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        client->out_sent += (size_t)w;
    }
}

static void watch_update(isn_grpc_client *client);

static int send_or_fail(isn_grpc_client *client, char *err, size_t err_len) {
    if (send_pending(client) == 0) return 0;
    fail_connection(client, "send failed");
    return isn_error(err, err_len, "connection failed: %s", client->error);
}

int isn_grpc_stamp_arrivals(isn_grpc_client *client, char *err, size_t err_len) {
    int on = 1;
    if (setsockopt(client->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) != 0)
        return isn_error(err, err_len, "the socket gives no receive times (SO_TIMESTAMPNS): %s", strerror(errno));
    client->stamp_arrivals = true;
    return 0;
}

/* recv; *read_ns when it returned, and with isn_grpc_stamp_arrivals *arrival_ns when the kernel received
 * the last of the bytes returned (TCP reports the newest segment's time: later than or equal to every
 * byte's own), both on the clock of isn_now_ns; *arrival_ns 0 when the kernel said nothing. */
static ssize_t read_stamped(isn_grpc_client *client, uint8_t *buf, size_t len, uint64_t *read_ns, uint64_t *arrival_ns) {
    *arrival_ns = 0;
    if (!client->stamp_arrivals) {
        ssize_t r = recv(client->fd, buf, len, 0);
        *read_ns = isn_now_ns();
        return r;
    }
    union {
        char bytes[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof control};
    ssize_t r = recvmsg(client->fd, &msg, 0);
    *read_ns = isn_now_ns();
    if (r <= 0) return r;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
        struct timespec at;
        memcpy(&at, CMSG_DATA(c), sizeof at);
        /* the kernel's time is the wall clock's: read beside the monotonic one, it says how long ago */
        uint64_t stamp = (uint64_t)at.tv_sec * 1000000000ull + (uint64_t)at.tv_nsec, wall = isn_wall_ns();
        uint64_t ago = wall > stamp ? wall - stamp : 0;
        *arrival_ns = ago < *read_ns ? *read_ns - ago : *read_ns;
    }
    return r;
}

/* Reads what the socket holds (its poll said `revents`), then sends what that queued. */
static int take_ready_input(isn_grpc_client *client, short revents, char *err, size_t err_len) {
    if (revents & (POLLIN | POLLHUP | POLLERR)) {
        uint8_t buf[READ_CHUNK];
        for (;;) {
            uint64_t read_ns, arrival_ns;
            ssize_t r = read_stamped(client, buf, sizeof buf, &read_ns, &arrival_ns);
            if (r > 0) {
                client->read_ns = read_ns;
                client->arrival_ns = arrival_ns;
                int taken = take_input(client, buf, (size_t)r);
                client->read_ns = client->arrival_ns = 0;
                if (taken < 0)
                    return isn_error(err, err_len, "%s: %s", client->tls.ssl ? "TLS or HTTP/2 error" : "HTTP/2 error",
                                     client->error);
                if ((size_t)r < sizeof buf) break;
                continue;
            }
            if (r == 0) {
                fail_connection(client, "server closed the connection");
                return isn_error(err, err_len, "%s", client->error);
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            fail_connection(client, strerror(errno));
            return isn_error(err, err_len, "read failed: %s", client->error);
        }
    }
    return send_or_fail(client, err, err_len);
}

static int poll_once(isn_grpc_client *client, int timeout_ms, char *err, size_t err_len) {
    if (client->failed) return isn_error(err, err_len, "connection failed: %s", client->error);
    if (send_or_fail(client, err, err_len) < 0) return -1;
    struct pollfd pfd = {.fd = client->fd, .events = POLLIN};
    if (client->out_sent < client->out_len) pfd.events |= POLLOUT;
    int rc = poll(&pfd, 1, timeout_ms);
    if (rc < 0 && errno != EINTR) {
        fail_connection(client, strerror(errno));
        return isn_error(err, err_len, "poll failed: %s", client->error);
    }
    return take_ready_input(client, rc > 0 ? pfd.revents : 0, err, err_len);
}

int isn_grpc_poll(isn_grpc_client *client, int timeout_ms, char *err, size_t err_len) {
    int rc = poll_once(client, timeout_ms, err, err_len);
    if (client->watch) watch_update(client);
    return rc;
}

int isn_grpc_service(isn_grpc_client *client, short revents, char *err, size_t err_len) {
    int rc = client->failed ? isn_error(err, err_len, "connection failed: %s", client->error)
                            : take_ready_input(client, revents, err, err_len);
    if (client->watch) watch_update(client);
    return rc;
}

bool isn_grpc_wants_write(const isn_grpc_client *client) { return client->out_sent < client->out_len; }

int isn_grpc_wait(isn_grpc_client *client, isn_grpc_client_call *call, int timeout_ms, char *err, size_t err_len) {
    int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;
    while (!call->done) {
        int wait = 1000;
        if (timeout_ms >= 0) {
            int64_t left = deadline - now_ms();
            if (left <= 0) return isn_error(err, err_len, "no reply within %d ms", timeout_ms);
            wait = left < 1000 ? (int)left : 1000;
        }
        if (isn_grpc_poll(client, wait, err, err_len) < 0 && !call->done) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ on a libuv loop */

struct client_watch {
    uv_poll_t poll;
    isn_grpc_client *client; /* NULL once unwatched: the handle is closing */
    isn_grpc_activity_cb on_activity;
    void *user;
    int events;
};

static void on_watch_closed(uv_handle_t *handle) { free(handle->data); }

static void on_socket_ready(uv_poll_t *poll, int status, int events) {
    (void)events;
    client_watch *watch = poll->data;
    isn_grpc_client *client = watch->client;
    if (!client) return;
    char err[256];
    (void)status; /* an error shows in the poll that follows */
    isn_grpc_poll(client, 0, err, sizeof err);
    /* The callback may close the client (and with it the watch): nothing after it. */
    watch->on_activity(client, watch->user);
}

/* Readable always; writable while output waits for the socket. A failed connection is not
 * watched: its socket would wake the loop forever. */
static void watch_update(isn_grpc_client *client) {
    client_watch *watch = client->watch;
    if (client->failed) {
        if (watch->events) uv_poll_stop(&watch->poll);
        watch->events = 0;
        return;
    }
    int events = UV_READABLE | (client->out_sent < client->out_len ? UV_WRITABLE : 0);
    if (events != watch->events && uv_poll_start(&watch->poll, events, on_socket_ready) == 0) watch->events = events;
}

int isn_grpc_client_watch(uv_loop_t *loop, isn_grpc_client *client, isn_grpc_activity_cb on_activity, void *user,
                          char *err, size_t err_len) {
    if (client->watch) return isn_error(err, err_len, "the client is watched already");
    client_watch *watch = calloc(1, sizeof *watch);
    if (!watch) return isn_error(err, err_len, "out of memory");
    int rc = uv_poll_init(loop, &watch->poll, client->fd);
    if (rc < 0) {
        free(watch);
        return isn_error(err, err_len, "cannot watch the client's socket: %s", uv_strerror(rc));
    }
    watch->poll.data = watch;
    watch->client = client;
    watch->on_activity = on_activity;
    watch->user = user;
    client->watch = watch;
    watch_update(client);
    return 0;
}

void isn_grpc_client_unwatch(isn_grpc_client *client) {
    client_watch *watch = client->watch;
    if (!watch) return;
    client->watch = NULL;
    watch->client = NULL;
    uv_close((uv_handle_t *)&watch->poll, on_watch_closed);
}
