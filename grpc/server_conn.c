/* One gRPC client connection: bytes in and out through libuv, an nghttp2 session in between
 * (server_session.c), connection limits and timeouts. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/base.h"
#include "grpc/server_internal.h"

/* Pull at most this much from nghttp2 before handing it to the kernel, so a client that does not
 * read cannot make us buffer without bound: the rest stays queued inside nghttp2 (bounded by the
 * streams it may have open). */
#define FLUSH_CHUNK (64 * 1024)
#define KEEP_BUFFER (256 * 1024)

static void conn_flush(isn_grpc_conn *conn);

/* ------------------------------------------------------------------ I/O */

static void on_closed(uv_handle_t *handle) {
    isn_grpc_conn *conn = handle->data;
    isn_grpc_server *server = conn->server;
    conn_list_remove(&server->conns, &conn->links, &server->counters.connections, server->config.limit);
    buffer_free(&conn->pending);
    buffer_free(&conn->sending);
    tls_session_free(&conn->tls);
    isn_grpc_conn_memory_release(conn);
    free(conn);
    isn_grpc_server_check_drained(server);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *tcp, ssize_t nread, const uv_buf_t *buf);

static void unlist_paused(isn_grpc_conn *conn) {
    if (!conn->read_paused) return;
    for (isn_grpc_conn **at = &conn->server->paused; *at; at = &(*at)->next_paused)
        if (*at == conn) {
            *at = conn->next_paused;
            break;
        }
    conn->read_paused = false;
}

void isn_grpc_resume_paused(isn_grpc_server *server) {
    while (server->paused) {
        isn_grpc_conn *conn = server->paused;
        server->paused = conn->next_paused;
        conn->read_paused = false;
        if (!conn->closing && !conn->close_when_flushed)
            uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
    }
}

static void unhold(isn_grpc_conn *conn) {
    if (!conn->held_until_ns) return;
    conn->held_until_ns = 0;
    conn->server->num_held--;
}

void isn_grpc_conn_close(isn_grpc_conn *conn) {
    if (conn->closing) return;
    unlist_paused(conn);
    unhold(conn);
    conn->closing = true;
    while (conn->calls) {
        isn_grpc_call *call = conn->calls;
        nghttp2_session_set_stream_user_data(conn->session, call->id, NULL);
        isn_grpc_call_detach(conn, call);
    }
    if (conn->in_flight) isn_grpc_calls_disown(conn->server, conn);
    nghttp2_session_del(conn->session);
    conn->session = NULL;
    uv_close((uv_handle_t *)&conn->tcp, on_closed);
}

void isn_grpc_conn_schedule_flush(isn_grpc_conn *conn) {
    if (conn->dirty || conn->closing) return;
    conn->dirty = true;
    conn->next_dirty = conn->server->dirty;
    conn->server->dirty = conn;
}

static void flush_waiting(isn_grpc_server *server) {
    while (server->dirty) {
        isn_grpc_conn *conn = server->dirty;
        server->dirty = conn->next_dirty;
        conn->dirty = false;
        conn->next_dirty = NULL;
        conn_flush(conn);
    }
}

/* Writes what waits to go out, as of `now` (the time the writes see as recent). */
static void flush_at(isn_grpc_server *server, uint64_t now) {
    server->recent_ns = server->flushed_ns = now;
    if (server->dirty) {
        flush_waiting(server);
        server->work.flush_ns += isn_now_ns() - now;
    }
    server->recent_ns = 0;
}

void isn_grpc_flush_dirty(uv_check_t *check) {
    isn_grpc_server *server = check->data;
    server->check_ns = isn_now_ns();
    isn_grpc_poll_check_stall(server, server->check_ns);
    flush_at(server, server->check_ns);
}

void isn_grpc_server_flush(isn_grpc_server *server) { flush_at(server, isn_now_ns()); }

isn_grpc_loop_work isn_grpc_server_loop_work(const isn_grpc_server *server) { return server->work; }

static void on_written(uv_write_t *req, int status) {
    isn_grpc_conn *conn = req->data;
    conn->writing = false;
    if (status == 0) conn->bytes_written += conn->sending.len;
    buffer_clear(&conn->sending, KEEP_BUFFER); /* a burst must not pin its memory */
    isn_grpc_conn_memory_track_buffers(conn);
    if (conn->closing) return;
    if (status < 0) {
        log_debug("grpc %s: write failed: %s", conn->peer, uv_strerror(status));
        isn_grpc_conn_close(conn);
        return;
    }
    conn_flush(conn);
}

typedef enum { WRITE_DONE, WRITE_QUEUED, WRITE_FAILED } write_outcome;

/* Hands conn->pending to the kernel. At once when the socket takes it all (nearly always): no write
 * request, no callback an iteration later, no epoll change when it completes (libuv stops watching
 * for POLLOUT after every queued write, an epoll_ctl each). What the socket does not take goes out
 * through a queued write, which on_written follows up. */
static write_outcome write_now(isn_grpc_conn *conn) {
    uv_buf_t buf = uv_buf_init((char *)conn->pending.data, (unsigned)conn->pending.len);
    int n = uv_try_write((uv_stream_t *)&conn->tcp, &buf, 1);
    conn->server->work.writes++;
    if (n < 0 && n != UV_EAGAIN) {
        log_debug("grpc %s: write failed: %s", conn->peer, uv_strerror(n));
        isn_grpc_conn_close(conn);
        return WRITE_FAILED;
    }
    size_t written = n > 0 ? (size_t)n : 0;
    conn->bytes_written += written;
    if (written == conn->pending.len) {
        buffer_clear(&conn->pending, KEEP_BUFFER); /* a burst must not pin its memory */
        isn_grpc_conn_memory_track_buffers(conn);
        return WRITE_DONE;
    }
    byte_buffer swap = conn->sending;
    conn->sending = conn->pending;
    conn->pending = swap;
    conn->pending.len = 0;
    memmove(conn->sending.data, conn->sending.data + written, conn->sending.len - written);
    conn->sending.len -= written;
    buf = uv_buf_init((char *)conn->sending.data, (unsigned)conn->sending.len);
    conn->write_req.data = conn;
    int rc = uv_write(&conn->write_req, (uv_stream_t *)&conn->tcp, &buf, 1, on_written);
    if (rc < 0) {
        log_debug("grpc %s: write failed: %s", conn->peer, uv_strerror(rc));
        isn_grpc_conn_close(conn);
        return WRITE_FAILED;
    }
    conn->server->work.writes++; /* the queued write, once however many system calls libuv makes for it */
    conn->writing = true;
    return WRITE_QUEUED;
}

/* Encrypts plaintext into the connection's output. */
static bool seal(isn_grpc_conn *conn, const uint8_t *plain, size_t len) {
    return tls_session_write(&conn->tls, plain, len) && tls_session_take_output(&conn->tls, &conn->pending);
}

/* Pulls nghttp2's frames (and, over TLS, OpenSSL's records) into conn->pending, up to FLUSH_CHUNK;
 * *more: nghttp2 may hold more. False when the connection was closed. */
static bool pull_output(isn_grpc_conn *conn, bool tls, bool http2_blocked, bool *more) {
    *more = false;
    if (tls && !tls_session_take_output(&conn->tls, &conn->pending)) {
        log_warn("grpc %s: out of memory for output; closing", conn->peer);
        isn_grpc_conn_close(conn);
        return false;
    }
    /* Over TLS, nghttp2's frames (a reply is several) are gathered into records of up to 16 KiB:
     * a record per frame would cost an encryption, a header and a tag each. */
    uint8_t *staging = conn->server->tls_staging;
    size_t staged = 0;
    bool appended = true;
    while (!http2_blocked && appended && !(*more = conn->pending.len + staged >= FLUSH_CHUNK)) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(conn->session, &data);
        if (n < 0) {
            log_debug("grpc %s: HTTP/2 send failed: %s", conn->peer, nghttp2_strerror((int)n));
            isn_grpc_conn_close(conn);
            return false;
        }
        if (n == 0) break;
        if (!tls) {
            appended = buffer_append(&conn->pending, data, (size_t)n);
        } else {
            if (staged + (size_t)n > TLS_RECORD_MAX && staged) {
                appended = seal(conn, staging, staged);
                staged = 0;
            }
            if (appended && (size_t)n > TLS_RECORD_MAX) {
                appended = seal(conn, data, (size_t)n);
            } else if (appended) {
                memcpy(staging + staged, data, (size_t)n);
                staged += (size_t)n;
            }
        }
        isn_grpc_conn_memory_track_buffers(conn);
    }
    if (appended && staged) appended = seal(conn, staging, staged);
    isn_grpc_conn_memory_track_buffers(conn);
    if (!appended) {
        log_warn("grpc %s: out of memory for output; closing", conn->peer);
        isn_grpc_conn_close(conn);
        return false;
    }
    return true;
}

static void conn_flush(isn_grpc_conn *conn) {
    if (conn->closing || conn->held_until_ns) return;
    if (conn->dropped) {
        isn_grpc_conn_release_dropped(conn);
        isn_grpc_server_check_drained(conn->server); /* may close every connection, this one too */
        if (conn->closing) return;
    }
    /* Before its handshake (and after a TLS failure) a TLS connection sends only what OpenSSL wrote. */
    bool tls = conn->tls.ssl != NULL;
    bool http2_blocked = tls && (!conn->tls.handshake_done || conn->tls.failed);
    for (;;) {
        bool more;
        if (!pull_output(conn, tls, http2_blocked, &more)) return;
        if (conn->writing || !conn->pending.len) break;
        if (write_now(conn) != WRITE_DONE) return; /* queued (on_written goes on) or closed */
        if (!more) break;
    }
    if (conn->writing) return;
    if (tls && (conn->tls.failed || conn->tls.closed)) {
        isn_grpc_conn_close(conn); /* its alert, if any, is written */
        return;
    }
    if (http2_blocked) return; /* the handshake waits for the client */
    bool more = nghttp2_session_want_write(conn->session);
    if (!more && (conn->close_when_flushed || !nghttp2_session_want_read(conn->session))) isn_grpc_conn_close(conn);
}

/* A read is at most ISN_GRPC_READ_CHUNK_BYTES and a connection's share of an iteration: what one read brings
 * is processed before its replies can be flushed, so its size bounds (with ISN_GRPC_FLUSH_WAIT_NS) how long a
 * refusal in it waits to go out. */
#define READ_CHUNK_WANTED                                                                                     \
    (ISN_GRPC_READ_CHUNK_BYTES < ISN_GRPC_READ_BYTES_PER_ITERATION ? ISN_GRPC_READ_CHUNK_BYTES                 \
                                                                   : ISN_GRPC_READ_BYTES_PER_ITERATION)
#define READ_CHUNK_BYTES                                                                                      \
    (READ_CHUNK_WANTED < sizeof(((isn_grpc_server *)0)->read_buffer) ? READ_CHUNK_WANTED                      \
                                                                     : sizeof(((isn_grpc_server *)0)->read_buffer))

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    isn_grpc_conn *conn = handle->data;
    /* One buffer for all connections: nghttp2 consumes every read before the next. */
    *buf = uv_buf_init((char *)conn->server->read_buffer, READ_CHUNK_BYTES);
}

/* Output waiting since the last flush goes now if that was ISN_GRPC_FLUSH_WAIT_NS ago (the connection's
 * own, made by what it just read, included). */
static void flush_if_waited(isn_grpc_conn *conn, uint64_t now) {
    isn_grpc_server *server = conn->server;
    isn_grpc_conn_schedule_flush(conn);
    if (now - server->flushed_ns < ISN_GRPC_FLUSH_WAIT_NS) return;
    server->flushed_ns = now;
    flush_waiting(server);
}

/* Plaintext into nghttp2 a slice at a time (ISN_GRPC_RECV_SLICE_BYTES): nghttp2 takes what it is given
 * whole, so between slices what the read brought about so far (refusals) can go out once output has
 * waited ISN_GRPC_FLUSH_WAIT_NS, not only after the whole read. Returns what nghttp2_session_mem_recv
 * would (negative: an HTTP/2 error); stops early when that flush closed the connection. */
static ssize_t feed_session(isn_grpc_conn *conn, const uint8_t *data, size_t len) {
    isn_grpc_server *server = conn->server;
    for (size_t done = 0;;) {
        size_t n = len - done < ISN_GRPC_RECV_SLICE_BYTES ? len - done : ISN_GRPC_RECV_SLICE_BYTES;
        ssize_t rv = nghttp2_session_mem_recv(conn->session, data + done, n);
        if (rv < 0 || conn->closing) return rv;
        done += n;
        if (done == len) return (ssize_t)len;
        server->recent_ns = isn_now_ns();
        flush_if_waited(conn, server->recent_ns);
        if (conn->closing) return (ssize_t)len;
    }
}

/* Ciphertext from the client: decrypted a record at a time into nghttp2. Returns what
 * nghttp2_session_mem_recv would (negative: an HTTP/2 error); a TLS failure instead marks the session
 * failed and the connection closes once its alert is written. */
static ssize_t feed_tls(isn_grpc_conn *conn, const uint8_t *data, size_t len) {
    if (!tls_session_feed(&conn->tls, data, len)) {
        conn->tls.failed = true;
        return 0;
    }
    for (;;) {
        ssize_t n = tls_session_read(&conn->tls, conn->server->tls_plain, sizeof conn->server->tls_plain);
        if (n < 0) {
            if (conn->tls.failed) log_debug("grpc %s: %s", conn->peer, conn->tls.error);
            uv_read_stop((uv_stream_t *)&conn->tcp);
            return 0;
        }
        if (n == 0) return 0;
        ssize_t rv = feed_session(conn, conn->server->tls_plain, (size_t)n);
        if (rv < 0 || conn->closing) return rv;
    }
}

static void read_bytes(isn_grpc_conn *conn, uv_stream_t *tcp, ssize_t nread, const uv_buf_t *buf) {
    if (nread < 0) {
        if (nread != UV_EOF) log_debug("grpc %s: read failed: %s", conn->peer, uv_strerror((int)nread));
        isn_grpc_conn_close(conn);
        return;
    }
    if (nread == 0) return;
    isn_grpc_server *server = conn->server;
    uint64_t read_at = server->recent_ns;
    uint64_t floor = isn_grpc_read_arrival_floor(server, read_at);
    /* These bytes came after the last mark below them (arrival_marks.c); when the socket was empty
     * after the last read, also after the loop's floor (epoll would have reported them earlier). */
    bool drained = conn->arrival.count && conn->arrival.end[conn->arrival.count - 1] == conn->arrival.read_total;
    uint64_t since = isn_grpc_arrival_since(&conn->arrival, conn->accepted_ns);
    conn->bytes_since_ns = drained && floor > since ? floor : since;
    uint64_t queued = 0;
    if ((size_t)nread == READ_CHUNK_BYTES) { /* a full read: what is left behind it, and since when */
        int fd = -1, left = 0;
        if (uv_fileno((uv_handle_t *)tcp, &fd) == 0 && ioctl(fd, FIONREAD, &left) == 0 && left > 0) queued = (uint64_t)left;
        if (queued) server->stream_limit.backlog = true;
        read_at = isn_now_ns();
    }
    isn_grpc_arrival_note_read(&conn->arrival, (size_t)nread, queued, read_at);
    conn->read_ns = read_at;
    ssize_t rv = conn->tls.ssl ? feed_tls(conn, (const uint8_t *)buf->base, (size_t)nread)
                               : feed_session(conn, (const uint8_t *)buf->base, (size_t)nread);
    conn->read_ns = 0;
    if (conn->read_iteration != server->iteration) {
        conn->read_iteration = server->iteration;
        conn->iteration_bytes = 0;
    }
    conn->iteration_bytes += (size_t)nread;
    if (!conn->closing && !conn->read_paused && rv >= 0 && conn->iteration_bytes >= ISN_GRPC_READ_BYTES_PER_ITERATION) {
        uv_read_stop(tcp);
        conn->read_paused = true;
        conn->next_paused = server->paused;
        server->paused = conn;
    }
    if (conn->closing) return;
    if (rv < 0) {
        COUNTER_ADD(conn->server->counters.protocol_errors, 1);
        log_debug("grpc %s: HTTP/2 protocol error: %s", conn->peer, nghttp2_strerror((int)rv));
        if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
            isn_grpc_conn_close(conn);
            return;
        }
        nghttp2_session_terminate_session(conn->session, NGHTTP2_PROTOCOL_ERROR);
        uv_read_stop(tcp);
        conn->close_when_flushed = true;
    }
    /* What the read brought about (refusals, errors, handshake records) goes out with the rest of
     * the connection's output of this iteration, in one write at its end (the flush check), unless
     * output has waited since the last flush for ISN_GRPC_FLUSH_WAIT_NS: then everything waiting
     * goes now, so that a refusal never waits behind a long poll phase for more than that and one
     * slice of a read (feed_session). A read after an idle loop finds that time passed and flushes at
     * once, as before. */
    flush_if_waited(conn, server->recent_ns);
}

static void on_read(uv_stream_t *tcp, ssize_t nread, const uv_buf_t *buf) {
    isn_grpc_conn *conn = tcp->data;
    if (conn->closing) return;
    isn_grpc_server *server = conn->server;
    uint64_t began = server->recent_ns = isn_now_ns();
    read_bytes(conn, tcp, nread, buf);
    server->recent_ns = 0;
    server->work.read_ns += isn_now_ns() - began;
    server->work.reads += nread > 0;
}

void isn_grpc_conn_goaway(isn_grpc_conn *conn) {
    if (conn->closing || conn->goaway_sent) return;
    conn->goaway_sent = true;
    nghttp2_submit_goaway(conn->session, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(conn->session),
                          NGHTTP2_NO_ERROR, NULL, 0);
    isn_grpc_conn_schedule_flush(conn);
}

void isn_grpc_conn_terminate(isn_grpc_conn *conn, uint32_t error_code) {
    if (conn->closing || conn->close_when_flushed) return;
    nghttp2_session_terminate_session(conn->session, error_code);
    isn_grpc_conn_close_when_flushed(conn);
}

/* The hold costs the loop a descriptor and a small receive buffer per connection, and its client a
 * stalled socket: a flood that reconnects after each GOAWAY opens about one connection per hold instead of
 * thousands a second, each of which would cost the loop an accept, a session and HPACK for its burst. */
void isn_grpc_conn_cut(isn_grpc_conn *conn, uint32_t error_code) {
    if (conn->closing || conn->close_when_flushed) return;
    isn_grpc_server *server = conn->server;
    uint32_t hold_ms = server->config.reset_hold_ms;
    if (hold_ms && !server->draining && !server->closing && server->num_held < ISN_GRPC_MAX_HELD_CONNECTIONS) {
        conn->held_until_ns = isn_now_ns() + (uint64_t)hold_ms * 1000000ull;
        server->num_held++;
        COUNTER_ADD(server->counters.reset_floods_held, 1);
        int receive_buffer = ISN_GRPC_HELD_RECEIVE_BUFFER;
        uv_recv_buffer_size((uv_handle_t *)&conn->tcp, &receive_buffer);
    }
    isn_grpc_conn_terminate(conn, error_code);
}

void isn_grpc_conn_close_when_flushed(isn_grpc_conn *conn) {
    if (conn->closing) return;
    conn->close_when_flushed = true;
    uv_read_stop((uv_stream_t *)&conn->tcp);
    isn_grpc_conn_schedule_flush(conn);
}

/* The peer's "address:port" into out, and its address as the penalty box's key (0 unknown). */
static uint64_t peer_name(uv_tcp_t *tcp, char *out, size_t out_len) {
    struct sockaddr_storage addr;
    int len = sizeof addr;
    char host[64] = "?";
    int port = 0;
    uint64_t key = 0;
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&addr, &len) == 0) {
        key = isn_grpc_peer_key(&addr);
        if (addr.ss_family == AF_INET) {
            uv_ip4_name((struct sockaddr_in *)&addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in *)&addr)->sin_port);
        } else if (addr.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
        }
    }
    snprintf(out, out_len, "%.46s:%d", host, port);
    return key;
}

/* The memory budget has no room for another connection: GOAWAY (no stream processed, so the client may
 * retry them elsewhere or later), saying why, and closed once that is written (reading on meanwhile:
 * closing on unread bytes would reset the connection before the client reads why). */
static void refuse_over_budget(isn_grpc_conn *conn) {
    isn_grpc_server *server = conn->server;
    COUNTER_ADD(server->counters.connections_over_budget, 1);
    char why[160];
    int len = snprintf(why, sizeof why, "server memory budget (%llu bytes) used up",
                       (unsigned long long)__atomic_load_n(&server->budget->limit, __ATOMIC_RELAXED));
    log_debug("grpc %s: %s; GOAWAY", conn->peer, why);
    conn->goaway_sent = true;
    nghttp2_submit_goaway(conn->session, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, (const uint8_t *)why, (size_t)len);
    conn->close_when_flushed = true;
}

/* A connection counted in (limit and list) and accepted into conn->tcp: its HTTP/2 session starts. */
static void conn_start(isn_grpc_server *server, isn_grpc_conn *conn) {
    uint64_t now = isn_now_ns();
    conn->accepted_ns = conn->last_activity_ns = now;
    conn->peer_key = peer_name(&conn->tcp, conn->peer, sizeof conn->peer);
    conn->reset_penalized = isn_grpc_reset_penalized(server->penalties, conn->peer_key, now);
    uv_tcp_nodelay(&conn->tcp, 1);

    conn_list_add(&server->conns, &conn->links, &server->counters.connections);
    COUNTER_ADD(server->counters.connections_accepted, 1);

    /* Refused only once the budget is used up: a client that could still be answered is let in (its
     * session, some 30 KiB, may pass the limit by that much, once per loop: the next one is refused). */
    bool room = isn_grpc_budget_has_room(server->budget, sizeof *conn + (server->config.tls ? TLS_CONN_BYTES : 0));
    isn_grpc_conn_memory_init(conn);
    if (server->config.tls) {
        if (tls_session_accept(&conn->tls, server->config.tls) < 0) {
            log_warn("grpc %s: out of memory for a TLS session", conn->peer);
            conn->closing = true;
            uv_close((uv_handle_t *)&conn->tcp, on_closed);
            return;
        }
        isn_grpc_conn_memory_charge_tls(conn);
    }
    if (isn_grpc_session_new(conn) != 0) {
        log_warn("grpc %s: cannot create an HTTP/2 session", conn->peer);
        conn->closing = true;
        uv_close((uv_handle_t *)&conn->tcp, on_closed);
        return;
    }
    if (!room) refuse_over_budget(conn);
    else if (server->goaway) isn_grpc_conn_goaway(conn);
    log_debug("grpc %s: connected", conn->peer);
    uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
    isn_grpc_conn_schedule_flush(conn);
}

static void free_handle(uv_handle_t *handle) { free(handle); }
static void free_handle_data(uv_handle_t *handle) { free(handle->data); }

/* The front's turn to give a connection to a peer: accepted here, its descriptor (a duplicate: the
 * handle that accepted it closes its own) goes to the peer's inbox and its loop is woken. */
static void hand_over(isn_grpc_server *server, uv_stream_t *listener, isn_grpc_server *peer) {
    uv_tcp_t *accepted = malloc(sizeof *accepted);
    if (!accepted) {
        log_warn("grpc: out of memory for a connection");
        return;
    }
    uv_tcp_init(server->loop, accepted);
    int rc = uv_accept(listener, (uv_stream_t *)accepted);
    uv_os_fd_t fd = -1;
    int copy = rc >= 0 && uv_fileno((uv_handle_t *)accepted, &fd) == 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    uv_close((uv_handle_t *)accepted, free_handle);
    if (copy < 0) {
        log_warn("grpc accept failed: %s", rc < 0 ? uv_strerror(rc) : strerror(errno));
        return;
    }
    pthread_mutex_lock(&peer->inbox_lock);
    bool taken = false;
    if (peer->inbox_open) {
        if (peer->inbox_len == peer->inbox_cap) {
            uint32_t cap = peer->inbox_cap ? peer->inbox_cap * 2 : 16;
            int *grown = realloc(peer->inbox, cap * sizeof *grown);
            if (grown) peer->inbox = grown, peer->inbox_cap = cap;
        }
        if (peer->inbox_len < peer->inbox_cap) {
            peer->inbox[peer->inbox_len++] = copy;
            uv_async_send(&peer->inbox_async);
            taken = true;
        }
    }
    pthread_mutex_unlock(&peer->inbox_lock);
    if (!taken) close(copy); /* the peer is closing (or no memory): the client sees the connection end */
}

void isn_grpc_on_connection(uv_stream_t *listener, int status) {
    isn_grpc_server *server = listener->data;
    if (status < 0) {
        log_warn("grpc accept failed: %s", uv_strerror(status));
        return;
    }
    if (server->num_peers) {
        uint32_t turn = server->next_peer;
        server->next_peer = (turn + 1) % (server->num_peers + 1);
        if (turn < server->num_peers) {
            hand_over(server, listener, server->peers[turn]);
            return;
        }
    }
    isn_grpc_conn *conn = calloc(1, sizeof *conn);
    if (!conn) {
        log_warn("grpc: out of memory for a connection");
        return;
    }
    conn->server = server;
    if (accept_or_reject(server->loop, server->config.limit, listener, &conn->tcp, conn, isn_grpc_evict_idle, server) < 0)
        return; /* freed by the reject path */
    conn_start(server, conn);
}

void isn_grpc_adopt_handed_over(uv_async_t *async) {
    isn_grpc_server *server = async->data;
    pthread_mutex_lock(&server->inbox_lock);
    int *fds = server->inbox;
    uint32_t n = server->inbox_len;
    server->inbox = NULL;
    server->inbox_len = server->inbox_cap = 0;
    pthread_mutex_unlock(&server->inbox_lock);
    for (uint32_t i = 0; i < n; i++) {
        isn_grpc_conn *conn = server->closing ? NULL : calloc(1, sizeof *conn);
        if (!conn) {
            close(fds[i]);
            continue;
        }
        conn->server = server;
        uv_tcp_init(server->loop, &conn->tcp);
        conn->tcp.data = conn;
        int rc = uv_tcp_open(&conn->tcp, fds[i]);
        if (rc < 0) {
            log_warn("grpc: cannot take a connection over: %s", uv_strerror(rc));
            close(fds[i]);
            uv_close((uv_handle_t *)&conn->tcp, free_handle_data);
            continue;
        }
        if (admit_or_reject(server->config.limit, &conn->tcp, isn_grpc_evict_idle, server) < 0) continue;
        conn_start(server, conn);
    }
    free(fds);
}

/* ------------------------------------------------------------------ timeouts */

bool isn_grpc_evict_idle(void *owner) {
    isn_grpc_server *server = owner;
    isn_grpc_conn *oldest = NULL;
    for (conn_links *links = server->conns; links; links = links->next) {
        isn_grpc_conn *conn = (isn_grpc_conn *)links;
        if (conn->closing || conn->close_when_flushed || conn->in_flight) continue;
        if (!oldest || conn->last_activity_ns < oldest->last_activity_ns) oldest = conn;
    }
    if (!oldest) return false;
    log_debug("grpc %s: closed to make room (max_connections reached; idle longest)", oldest->peer);
    COUNTER_ADD(server->counters.connections_evicted, 1);
    isn_grpc_conn_goaway(oldest);
    isn_grpc_conn_close(oldest); /* now: its place is needed */
    return true;
}

/* Owes output: bytes queued or being written, frames nghttp2 wants to send, or answers that flow
 * control holds back. */
static bool conn_owes_output(const isn_grpc_conn *conn) {
    /* Before its handshake a TLS connection owes only the handshake's records: its SETTINGS wait for the
     * client, and a stalled handshake is the header timeout's to end (counted as a TLS timeout). */
    if (conn->tls.ssl && !conn->tls.handshake_done) return conn->writing || conn->pending.len;
    return conn->writing || conn->pending.len || conn->replying || nghttp2_session_want_write(conn->session);
}

/* A client that does not read, or reads a trickle, is closed: less than min_send_rate bytes per
 * second over each write_timeout window while output is owed. */
static bool write_timed_out(isn_grpc_conn *conn, uint64_t now, const isn_grpc_server_config *config) {
    if (!conn_owes_output(conn)) {
        conn->owing_since_ns = 0;
        return false;
    }
    if (!conn->owing_since_ns) {
        conn->owing_since_ns = now;
        conn->owing_mark = conn->bytes_written;
        return false;
    }
    uint64_t window_ns = (uint64_t)config->write_timeout_ms * 1000000ull;
    if (now - conn->owing_since_ns < window_ns) return false;
    uint64_t needed = (uint64_t)config->min_send_rate * config->write_timeout_ms / 1000;
    if (conn->bytes_written - conn->owing_mark < (needed ? needed : 1)) return true;
    conn->owing_since_ns = now;
    conn->owing_mark = conn->bytes_written;
    return false;
}

/* A held connection's GOAWAY goes out now (its hold ended, or the server drains). */
static void release_hold(isn_grpc_conn *conn) {
    unhold(conn);
    isn_grpc_conn_schedule_flush(conn);
}

static void sweep_conn(conn_links *links, uint64_t now, uint64_t header_ns, uint64_t idle_ns, void *owner) {
    isn_grpc_conn *conn = (isn_grpc_conn *)links;
    if (conn->closing) return;
    isn_grpc_server *server = owner;
    if (conn->held_until_ns) { /* owes its GOAWAY on purpose: no write timeout while held */
        if (now >= conn->held_until_ns || server->draining) release_hold(conn);
        return;
    }
    if (write_timed_out(conn, now, &server->config)) {
        log_debug("grpc %s: output not read within write_timeout; closing", conn->peer);
        COUNTER_ADD(server->counters.write_timeouts, 1);
        isn_grpc_conn_close(conn);
        return;
    }
    if (!conn->preface_done && now - conn->accepted_ns > header_ns) {
        tls_session_count_timeout(&conn->tls);
        log_debug("grpc %s: no %s within header_timeout; closing", conn->peer,
                  conn->tls.ssl && !conn->tls.handshake_done ? "TLS handshake" : "HTTP/2 preface");
        COUNTER_ADD(server->counters.connections_timed_out, 1);
        isn_grpc_conn_close(conn);
        return;
    }
    for (isn_grpc_call *call = conn->calls; call; call = call->next) {
        if (call->request_complete || call->responded || now - call->opened_ns <= header_ns) continue;
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_DEADLINE_EXCEEDED,
                       "request not received in full within header_timeout (%u ms)", server->config.header_timeout_ms);
    }
    if (conn->in_flight == 0 && !conn->close_when_flushed && now - conn->last_activity_ns > idle_ns) {
        log_debug("grpc %s: idle for idle_timeout; closing", conn->peer);
        COUNTER_ADD(server->counters.connections_timed_out, 1);
        isn_grpc_conn_goaway(conn);
        isn_grpc_conn_close_when_flushed(conn);
    }
}

void isn_grpc_sweep(uv_timer_t *timer) {
    isn_grpc_server *server = timer->data;
    conn_list_sweep(server->conns, server->config.header_timeout_ms, server->config.idle_timeout_ms, sweep_conn, server);
    uint32_t trimmed = isn_grpc_trim_call_pool(server); /* a burst's calls go back once they are not needed */
    isn_grpc_release_after_burst(server, trimmed);
}
