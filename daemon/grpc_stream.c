/* Request streams: a pool of them (each keeps its arena chunk, body space and reply buffer), and
 * the three ways isnd answers one: a gRPC reply, a gRPC error, a bare HTTP error. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "daemon/server.h"

#define KEEP_BUFFER (256 * 1024)
#define MAX_FREE_STREAMS 1024

grpc_stream *grpc_stream_new(grpc_conn *conn, int32_t id) {
    isn_server *server = conn->server;
    grpc_stream *stream = server->free_streams;
    if (stream) {
        server->free_streams = stream->next;
        server->num_free_streams--;
    } else {
        stream = calloc(1, sizeof *stream);
        if (!stream) return NULL;
    }
    byte_buffer reply = stream->job.reply; /* keep its storage across uses */
    memset(stream, 0, offsetof(grpc_stream, arena_space));
    stream->job.reply = reply;
    stream->job.reply.len = 0;
    stream->conn = conn;
    stream->server = server;
    stream->id = id;
    stream->method = RPC_UNKNOWN;
    stream->opened_ns = monotonic_ns();
    grpc_reader_init(&stream->reader, stream->body_space, STREAM_INLINE_BODY, server->conf.max_message_bytes);
    /* A decoded message is a few times its wire size at most; past that something is wrong. */
    arena_init(&stream->arena, stream->arena_space, sizeof stream->arena_space,
               (size_t)server->conf.max_message_bytes * 8 + 65536);
    stream->next = conn->streams;
    if (conn->streams) conn->streams->prev = stream;
    conn->streams = stream;
    conn->num_streams++;
    server->open_streams++;
    return stream;
}

static void stream_unlink(grpc_stream *stream, grpc_stream **head) {
    if (stream->prev) stream->prev->next = stream->next;
    else *head = stream->next;
    if (stream->next) stream->next->prev = stream->prev;
    stream->prev = stream->next = NULL;
}

void grpc_stream_release(isn_server *server, grpc_stream *stream) {
    grpc_reader_reset(&stream->reader);
    arena_reset(&stream->arena);
    server->open_streams--;
    if (server->num_free_streams < MAX_FREE_STREAMS && server->state != SERVER_STOPPING) {
        buffer_clear(&stream->job.reply, KEEP_BUFFER);
        stream->next = server->free_streams;
        server->free_streams = stream;
        server->num_free_streams++;
    } else {
        buffer_free(&stream->job.reply);
        free(stream);
    }
}

void grpc_free_stream_pool(isn_server *server) {
    while (server->free_streams) {
        grpc_stream *next = server->free_streams->next;
        buffer_free(&server->free_streams->job.reply);
        free(server->free_streams);
        server->free_streams = next;
    }
    server->num_free_streams = 0;
}

/* The connection is going away (or HTTP/2 closed the stream): a stream a worker still holds
 * becomes an orphan, released when its job comes back. */
void grpc_stream_detach(grpc_conn *conn, grpc_stream *stream) {
    isn_server *server = conn->server;
    stream_unlink(stream, &conn->streams);
    conn->num_streams--;
    stream->conn = NULL;
    if (stream->job_in_flight) {
        atomic_store(&stream->job.cancelled, true);
        stream->next = server->orphans;
        if (server->orphans) server->orphans->prev = stream;
        server->orphans = stream;
    } else {
        grpc_stream_release(server, stream);
    }
}

static ssize_t read_reply(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                          uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
    (void)user_data;
    grpc_stream *stream = source->ptr;
    size_t left = stream->job.reply.len - stream->reply_sent;
    size_t n = left < length ? left : length;
    memcpy(buf, stream->job.reply.data + stream->reply_sent, n);
    stream->reply_sent += n;
    if (stream->reply_sent == stream->job.reply.len) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        static const nghttp2_nv trailers[] = {
            {(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
        };
        if (nghttp2_submit_trailer(session, stream_id, trailers, 1) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* ------------------------------------------------------------------ responses */

static void submit_headers(grpc_stream *stream, const nghttp2_nv *nv, size_t n, const nghttp2_data_provider *data) {
    grpc_conn *conn = stream->conn;
    stream->responded = true;
    if (nghttp2_submit_response(conn->session, stream->id, nv, n, data) != 0)
        nghttp2_submit_rst_stream(conn->session, NGHTTP2_FLAG_NONE, stream->id, NGHTTP2_INTERNAL_ERROR);
    grpc_conn_schedule_flush(conn);
}

#define NV_STATIC(name, value) \
    {(uint8_t *)(name), (uint8_t *)(value), sizeof(name) - 1, sizeof(value) - 1, \
     NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}

void grpc_stream_reply(grpc_stream *stream) {
    static const nghttp2_nv headers[] = {
        NV_STATIC(":status", "200"),
        NV_STATIC("content-type", "application/grpc"),
        NV_STATIC("grpc-accept-encoding", "identity"),
    };
    nghttp2_data_provider provider = {.source.ptr = stream, .read_callback = read_reply};
    stream->reply_sent = 0;
    stream->server->metrics.bytes_sent += stream->job.reply.len;
    submit_headers(stream, headers, 3, &provider);
}

void grpc_stream_fail(grpc_stream *stream, int status, const char *fmt, ...) {
    char message[512], encoded[1024], code[8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    size_t encoded_len = grpc_percent_encode(message, encoded, sizeof encoded);
    int code_len = snprintf(code, sizeof code, "%d", status);
    nghttp2_nv headers[] = {
        NV_STATIC(":status", "200"),
        NV_STATIC("content-type", "application/grpc"),
        {(uint8_t *)"grpc-status", (uint8_t *)code, 11, (size_t)code_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        {(uint8_t *)"grpc-message", (uint8_t *)encoded, 12, encoded_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    double seconds = (double)(monotonic_ns() - stream->opened_ns) / 1e9;
    metrics_count_request(&stream->server->metrics, stream->method, status, seconds);
    log_debug("grpc %s stream %d %s: %s: %s", stream->conn->peer, stream->id, stream->path, grpc_status_name(status),
              message);
    submit_headers(stream, headers, 4, NULL);
}

void grpc_stream_http_error(grpc_stream *stream, int http_status) {
    char code[8];
    int code_len = snprintf(code, sizeof code, "%d", http_status);
    nghttp2_nv headers[] = {
        {(uint8_t *)":status", (uint8_t *)code, 7, (size_t)code_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    stream->server->metrics.http_rejects++;
    submit_headers(stream, headers, 1, NULL);
}
