/* Streaming calls on the server core: request messages handed over one by one as they arrive (a
 * client stream, as server reflection sends), and replies of any number of messages, each written
 * when it is queued (a server stream, as Health/Watch sends), then trailers. A unary call never
 * touches this file: a call streams only when the program says so from on_headers.
 *
 * Bounds: a request message is refused above the server's max_message_bytes, as a unary one; at
 * most ISN_GRPC_STREAM_MAX_QUEUED bytes wait to be written per call (a client that does not read its
 * stream gets RESOURCE_EXHAUSTED rather than growth). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grpc/server_internal.h"

#define ISN_GRPC_STREAM_MAX_QUEUED (4u << 20)

struct isn_grpc_stream {
    isn_grpc_stream_handlers handlers;
    void *user;
    /* the request message being reassembled */
    uint8_t prefix[ISN_GRPC_PREFIX_BYTES];
    uint32_t prefix_have, length, have;
    uint8_t *body;
    /* framed reply messages not yet taken by nghttp2 */
    byte_buffer out;
    size_t out_taken;
    bool headers_sent, deferred, finishing, closed;
    int status;
    char message[ISN_GRPC_STREAM_MESSAGE_MAX * 3 + 1]; /* percent-encoded grpc-message */
};

int isn_grpc_call_stream(isn_grpc_call *call, const isn_grpc_stream_handlers *handlers, void *user) {
    if (call->stream || call->responded) return -1;
    isn_grpc_stream *s = calloc(1, sizeof *s);
    if (!s) return -1;
    /* Its state and queued messages are charged with the call (released with it); its request
     * messages while they are held (isn_grpc_stream_on_data). */
    isn_grpc_budget_add(call->server->budget, sizeof *s);
    call->charged += sizeof *s;
    s->handlers = *handlers;
    s->user = user;
    call->stream = s;
    return 0;
}

bool isn_grpc_call_is_stream(const isn_grpc_call *call) { return call->stream != NULL; }

/* ------------------------------------------------------------------ request messages */

static void fail_stream(isn_grpc_call *call, int status, const char *why) {
    isn_grpc_call_stream_finish(call, status, why);
}

int isn_grpc_stream_on_data(isn_grpc_call *call, const uint8_t *data, size_t len) {
    isn_grpc_stream *s = call->stream;
    while (len && !s->finishing && call->conn) {
        if (s->prefix_have < ISN_GRPC_PREFIX_BYTES) {
            size_t n = ISN_GRPC_PREFIX_BYTES - s->prefix_have < len ? ISN_GRPC_PREFIX_BYTES - s->prefix_have : len;
            memcpy(s->prefix + s->prefix_have, data, n);
            s->prefix_have += (uint32_t)n, data += n, len -= n;
            if (s->prefix_have < ISN_GRPC_PREFIX_BYTES) break;
            if (s->prefix[0] > 1) return fail_stream(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "bad message flags"), 0;
            if (s->prefix[0] == 1)
                return fail_stream(call, ISN_GRPC_STATUS_UNIMPLEMENTED, "compressed messages are not supported"), 0;
            s->length = (uint32_t)s->prefix[1] << 24 | (uint32_t)s->prefix[2] << 16 | (uint32_t)s->prefix[3] << 8 |
                        s->prefix[4];
            if (s->length > call->server->config.max_message_bytes) {
                char why[120];
                snprintf(why, sizeof why, "message of %u bytes is above the limit of %u", s->length,
                         call->server->config.max_message_bytes);
                return fail_stream(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, why), 0;
            }
            s->have = 0;
            if (!isn_grpc_budget_charge(call->server->budget, s->length)) {
                char why[160];
                COUNTER_ADD(call->server->counters.over_budget, 1);
                snprintf(why, sizeof why, "server memory budget reached; a message of %u bytes cannot be held now",
                         s->length);
                return fail_stream(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, why), 0;
            }
            if (!(s->body = malloc(s->length ? s->length : 1))) {
                isn_grpc_budget_release(call->server->budget, s->length);
                return fail_stream(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for a message"), 0;
            }
        }
        size_t n = s->length - s->have < len ? s->length - s->have : len;
        memcpy(s->body + s->have, data, n);
        s->have += (uint32_t)n, data += n, len -= n;
        if (s->have < s->length) break;
        uint8_t *body = s->body;
        s->body = NULL;
        s->prefix_have = 0;
        if (s->handlers.on_message) s->handlers.on_message(call, body, s->length, s->user);
        free(body);
        isn_grpc_budget_release(call->server->budget, s->length);
    }
    return 0;
}

void isn_grpc_stream_on_end(isn_grpc_call *call) {
    isn_grpc_stream *s = call->stream;
    call->request_complete = true;
    if (s->finishing || !call->conn) return;
    if (s->prefix_have) {
        fail_stream(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "request stream ended inside a message");
        return;
    }
    if (s->handlers.on_half_close) s->handlers.on_half_close(call, s->user);
}

void isn_grpc_stream_release(isn_grpc_call *call) {
    isn_grpc_stream *s = call->stream;
    if (!s) return;
    call->stream = NULL;
    if (s->handlers.on_close) s->handlers.on_close(call, s->user);
    if (s->body) isn_grpc_budget_release(call->server->budget, s->length);
    free(s->body);
    buffer_free(&s->out);
    free(s);
}

/* ------------------------------------------------------------------ replies */

static ssize_t read_stream(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                           uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
    (void)user_data;
    isn_grpc_call *call = source->ptr;
    isn_grpc_stream *s = call->stream;
    if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t left = s->out.len - s->out_taken, n = left < length ? left : length;
    if (n) {
        memcpy(buf, s->out.data + s->out_taken, n);
        s->out_taken += n;
        if (s->out_taken == s->out.len) s->out.len = s->out_taken = 0;
    }
    if (s->out.len) return (ssize_t)n; /* more queued */
    if (!s->finishing) {
        if (n) return (ssize_t)n;
        s->deferred = true; /* resumed by the next message or the finish */
        return NGHTTP2_ERR_DEFERRED;
    }
    *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    char code[8];
    int code_len = snprintf(code, sizeof code, "%d", s->status);
    nghttp2_nv trailers[] = {
        {(uint8_t *)"grpc-status", (uint8_t *)code, 11, (size_t)code_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        {(uint8_t *)"grpc-message", (uint8_t *)s->message, 12, strlen(s->message), NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    if (nghttp2_submit_trailer(session, stream_id, trailers, s->message[0] ? 2 : 1) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return (ssize_t)n;
}

/* The response headers and the data source, once: DATA then follows whatever is queued. */
static void start_reply(isn_grpc_call *call) {
    isn_grpc_stream *s = call->stream;
    s->headers_sent = true;
    call->responded = true;
    static const nghttp2_nv headers[] = {
        {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
        {(uint8_t *)"grpc-accept-encoding", (uint8_t *)"identity", 20, 8,
         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
    };
    nghttp2_data_provider provider = {.source.ptr = call, .read_callback = read_stream};
    if (nghttp2_submit_response(call->conn->session, call->id, headers, 3, &provider) != 0)
        nghttp2_submit_rst_stream(call->conn->session, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_INTERNAL_ERROR);
}

static void kick(isn_grpc_call *call) {
    isn_grpc_stream *s = call->stream;
    if (!s->headers_sent) start_reply(call);
    else if (s->deferred) {
        s->deferred = false;
        nghttp2_session_resume_data(call->conn->session, call->id);
    }
    isn_grpc_conn_schedule_flush(call->conn);
}

int isn_grpc_call_stream_send(isn_grpc_call *call, const ProtobufCMessage *message) {
    isn_grpc_stream *s = call->stream;
    if (!s || !call->conn || s->finishing) return -1;
    size_t size = protobuf_c_message_get_packed_size(message);
    if (s->out.len + ISN_GRPC_PREFIX_BYTES + size > ISN_GRPC_STREAM_MAX_QUEUED) {
        isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "the client does not read its stream");
        return -1;
    }
    size_t cap = s->out.cap, need = s->out.len + ISN_GRPC_PREFIX_BYTES + size, more = need > cap ? need - cap : 0;
    if (!isn_grpc_budget_charge(call->server->budget, more)) {
        COUNTER_ADD(call->server->counters.over_budget, 1);
        isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "server memory budget for replies reached");
        return -1;
    }
    call->charged += more;
    if (!buffer_reserve(&s->out, need - s->out.len)) {
        isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for a stream message");
        return -1;
    }
    if (s->out.cap > cap + more) { /* rounded up past what was asked: charged with the call too */
        isn_grpc_budget_add(call->server->budget, s->out.cap - cap - more);
        call->charged += s->out.cap - cap - more;
    }
    isn_grpc_write_prefix(s->out.data + s->out.len, (uint32_t)size);
    protobuf_c_message_pack(message, s->out.data + s->out.len + ISN_GRPC_PREFIX_BYTES);
    s->out.len += ISN_GRPC_PREFIX_BYTES + size;
    COUNTER_ADD(call->server->counters.bytes_sent, ISN_GRPC_PREFIX_BYTES + size);
    kick(call);
    return 0;
}

void isn_grpc_call_stream_finish(isn_grpc_call *call, int status, const char *message) {
    isn_grpc_stream *s = call->stream;
    if (!s || !call->conn || s->finishing) return;
    isn_grpc_server *server = call->server;
    if (!s->headers_sent) {
        /* nothing sent yet: a trailers-only answer, as a unary failure (it counts the status) */
        s->finishing = true;
        if (status == ISN_GRPC_STATUS_OK) {
            s->status = status;
            s->message[0] = '\0';
            if (server->handlers.on_status) server->handlers.on_status(call, status, server->app);
            kick(call);
        } else
            isn_grpc_call_fail(call, status, "%s", message ? message : "");
        return;
    }
    s->finishing = true;
    s->status = status;
    isn_grpc_percent_encode(message ? message : "", s->message, sizeof s->message);
    if (server->handlers.on_status) server->handlers.on_status(call, status, server->app);
    kick(call);
}
