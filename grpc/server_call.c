/* Calls: a pool of them (each keeps its body space, reply buffer and the program's storage), and
 * the three ways a call is answered: a gRPC reply, a gRPC error, a bare HTTP error. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grpc/server_internal.h"

#define KEEP_BUFFER (256 * 1024)
#define MAX_FREE_CALLS 1024
#define MIN_FREE_CALLS 8 /* the pool never trims below this */
#define POOL_SHARE 16    /* the pool keeps at most this fraction (1/16) of the memory budget */

static uint64_t call_bytes(const isn_grpc_server *server) { return sizeof(isn_grpc_call) + server->config.call_app_bytes; }

/* What a call keeps across uses, charged to the budget with it, pooled or in use: itself, its reply
 * buffer's capacity and what the program's storage kept (on_release). */
static uint64_t kept_bytes(const isn_grpc_server *server, const isn_grpc_call *call) {
    return call_bytes(server) + call->reply.cap + call->app_kept;
}

static isn_grpc_call *pool_pop(isn_grpc_server *server) {
    isn_grpc_call *call = server->free_calls;
    if (!call) return NULL;
    server->free_calls = call->next;
    server->num_free_calls--;
    if (server->num_free_calls < server->free_calls_low) server->free_calls_low = server->num_free_calls;
    COUNTER_SUB(server->counters.memory_pooled, kept_bytes(server, call));
    return call;
}

/* A pooled call goes: it gives back what it was charged while pooled. */
static void free_pooled_call(isn_grpc_server *server, isn_grpc_call *call) {
    if (server->handlers.on_release) server->handlers.on_release(call, true, server->app);
    isn_grpc_budget_release(server->budget, kept_bytes(server, call));
    buffer_free(&call->reply);
    free(call);
}

isn_grpc_call *isn_grpc_call_new(isn_grpc_conn *conn, int32_t id, bool *over_budget) {
    isn_grpc_server *server = conn->server;
    *over_budget = false;
    /* A new request needs room for a call even when a pooled one is taken; pooled calls give way
     * to it (they hold memory no request uses). A pooled call's charge covers it: with room, it is
     * taken without touching the budget. */
    isn_grpc_call *call = NULL;
    if (server->free_calls && isn_grpc_budget_has_room(server->budget, call_bytes(server))) {
        call = pool_pop(server);
    } else {
        while (!isn_grpc_budget_charge(server->budget, call_bytes(server))) {
            isn_grpc_call *unused = pool_pop(server);
            if (!unused) {
                *over_budget = true;
                return NULL;
            }
            free_pooled_call(server, unused);
        }
        call = pool_pop(server);
        if (call) isn_grpc_budget_release(server->budget, call_bytes(server)); /* its pooled charge keeps the rest */
    }
    uint64_t app_kept = 0;
    if (call) {
        app_kept = call->app_kept;
    } else {
        call = calloc(1, sizeof *call + server->config.call_app_bytes);
        if (!call) {
            isn_grpc_budget_release(server->budget, call_bytes(server));
            return NULL;
        }
    }
    byte_buffer reply = call->reply; /* keep its storage across uses */
    memset(call, 0, offsetof(isn_grpc_call, body_space));
    call->reply = reply;
    call->reply.len = 0;
    call->conn = conn;
    call->owner = conn;
    call->server = server;
    call->id = id;
    call->app_kept = app_kept;
    call->charged = call_bytes(server) + call->reply.cap + app_kept;
    call->opened_ns = conn->read_ns ? conn->read_ns : isn_now_ns();
    call->arrived_ns = conn->bytes_since_ns && conn->bytes_since_ns < call->opened_ns ? conn->bytes_since_ns
                                                                                      : call->opened_ns;
    isn_grpc_stream_limit_note_wait(&server->stream_limit, call->opened_ns - call->arrived_ns);
    isn_grpc_reader_init(&call->reader, call->body_space, CALL_INLINE_BODY, server->config.max_message_bytes);
    isn_grpc_reader_set_budget(&call->reader, server->budget);
    call->next = conn->calls;
    if (conn->calls) conn->calls->prev = call;
    conn->calls = call;
    conn->num_calls++;
    conn->in_flight++;
    conn->last_activity_ns = call->opened_ns;
    COUNTER_ADD(server->counters.open_calls, 1);
    if (server->handlers.on_open) server->handlers.on_open(call, server->app);
    return call;
}

static void call_unlink(isn_grpc_call *call, isn_grpc_call **head) {
    if (call->prev) call->prev->next = call->next;
    else *head = call->next;
    if (call->next) call->next->prev = call->prev;
    call->prev = call->next = NULL;
}

void isn_grpc_call_release(isn_grpc_server *server, isn_grpc_call *call) {
    isn_grpc_stream_release(call);
    isn_grpc_reader_reset(&call->reader);
    uint64_t charged = call->charged; /* given back below, with the pooled charge taken in the same step */
    call->charged = 0;
    if (call->owner) {
        call->owner->in_flight--;
        call->owner->last_activity_ns = server->recent_ns ? server->recent_ns : isn_now_ns();
        call->owner = NULL;
    }
    COUNTER_SUB(server->counters.open_calls, 1);
    bool pool = server->num_free_calls < MAX_FREE_CALLS && !server->closing;
    size_t app_kept = server->handlers.on_release ? server->handlers.on_release(call, !pool, server->app) : 0;
    if (pool) {
        buffer_clear(&call->reply, KEEP_BUFFER);
        call->app_kept = app_kept;
        /* Pooled only within its share of the budget, and while the budget has room for what it
         * keeps: past either the pool shrinks. */
        uint64_t keep = kept_bytes(server, call);
        uint64_t share = __atomic_load_n(&server->budget->limit, __ATOMIC_RELAXED) / POOL_SHARE;
        bool in_share = !share || server->counters.memory_pooled + keep <= share;
        pool = in_share && isn_grpc_budget_exchange(server->budget, charged, keep);
        if (in_share) charged = 0; /* given back by the exchange, whether the pooled charge fit or not */
        if (!pool && server->handlers.on_release) server->handlers.on_release(call, true, server->app);
    }
    isn_grpc_budget_release(server->budget, charged);
    if (pool) {
        COUNTER_ADD(server->counters.memory_pooled, kept_bytes(server, call));
        call->next = server->free_calls;
        server->free_calls = call;
        server->num_free_calls++;
    } else {
        buffer_free(&call->reply);
        free(call);
    }
}

uint32_t isn_grpc_trim_call_pool(isn_grpc_server *server) {
    uint32_t unused = server->free_calls_low, trimmed = 0;
    while (unused > MIN_FREE_CALLS && server->free_calls) {
        isn_grpc_call *call = pool_pop(server);
        unused--;
        trimmed++;
        free_pooled_call(server, call);
    }
    server->free_calls_low = server->num_free_calls;
    return trimmed;
}

/* jemalloc's control interface when the program is linked with it (weak: NULL otherwise). */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) __attribute__((weak));

#define BURST_BYTES (1u << 20)
#define BURST_CALLS 64

void isn_grpc_release_after_burst(isn_grpc_server *server, uint32_t calls_trimmed) {
    isn_grpc_memory_budget *budget = server->budget;
    uint64_t used = __atomic_load_n(&budget->used, __ATOMIC_RELAXED);
    uint64_t peak = __atomic_load_n(&budget->peak, __ATOMIC_RELAXED);
    uint64_t limit = __atomic_load_n(&budget->limit, __ATOMIC_RELAXED);
    /* Near its limit the budget's memory churns (refused and released replies, calls, sessions):
     * the pages freed meanwhile would add to what it holds until jemalloc's decay returns them. */
    bool near_limit = limit && used >= limit - limit / 4;
    if ((peak > used ? peak - used : 0) < BURST_BYTES && calls_trimmed < BURST_CALLS && !near_limit) return;
    /* Without this an idle process keeps a burst's freed pages: jemalloc purges as it allocates. */
    if (mallctl) mallctl("arena.4096.purge", NULL, NULL, NULL, 0); /* 4096: MALLCTL_ARENAS_ALL */
    __atomic_store_n(&budget->peak, used, __ATOMIC_RELAXED);
}

void isn_grpc_calls_disown(isn_grpc_server *server, isn_grpc_conn *conn) {
    for (isn_grpc_call *call = server->abandoned; call; call = call->next)
        if (call->owner == conn) call->owner = NULL;
}

void isn_grpc_free_call_pool(isn_grpc_server *server) {
    for (isn_grpc_call *call; (call = pool_pop(server));) free_pooled_call(server, call);
}

/* The connection is going away (or HTTP/2 closed the stream): a call the program still holds
 * becomes abandoned, released when the program lets go of it. */
void isn_grpc_call_detach(isn_grpc_conn *conn, isn_grpc_call *call) {
    isn_grpc_server *server = conn->server;
    if (conn->headers_call == call) conn->headers_call = NULL, conn->headers_stream = 0;
    call_unlink(call, &conn->calls);
    conn->num_calls--;
    if (call->responded) conn->replying--;
    call->conn = NULL;
    if (call->held) {
        call->next = server->abandoned;
        if (server->abandoned) server->abandoned->prev = call;
        server->abandoned = call;
        if (server->handlers.on_abandoned) server->handlers.on_abandoned(call, server->app);
    } else {
        isn_grpc_call_release(server, call);
    }
}

void isn_grpc_conn_release_dropped(isn_grpc_conn *conn) {
    for (isn_grpc_call *call = conn->calls, *next; call && conn->dropped; call = next) {
        next = call->next;
        if (!call->dropped) continue;
        conn->dropped--;
        nghttp2_session_set_stream_user_data(conn->session, call->id, NULL);
        isn_grpc_call_detach(conn, call);
    }
    conn->dropped = 0;
}

void isn_grpc_call_hold(isn_grpc_call *call) { call->held = true; }

bool isn_grpc_call_unhold(isn_grpc_call *call) {
    call->held = false;
    if (call->conn) return true;
    isn_grpc_server *server = call->server;
    call_unlink(call, &server->abandoned);
    isn_grpc_call_release(server, call);
    isn_grpc_server_check_drained(server);
    return false;
}

/* ------------------------------------------------------------------ accessors */

const char *isn_grpc_call_path(const isn_grpc_call *call) { return call->path; }
void isn_grpc_call_set_tag(isn_grpc_call *call, int tag) { call->tag = tag; }
int isn_grpc_call_tag(const isn_grpc_call *call) { return call->tag; }
void *isn_grpc_call_app(const isn_grpc_call *call) { return (void *)call->app; }
isn_grpc_call *isn_grpc_call_from_app(void *app_storage) {
    return (isn_grpc_call *)((char *)app_storage - offsetof(isn_grpc_call, app));
}
const uint8_t *isn_grpc_call_message(const isn_grpc_call *call, size_t *len) {
    *len = call->reader.length;
    return call->reader.body;
}
void *isn_grpc_call_unpack(isn_grpc_call *call, const ProtobufCMessageDescriptor *descriptor, ProtobufCAllocator *allocator) {
    ProtobufCMessage *message = protobuf_c_message_unpack(descriptor, allocator, call->reader.length, call->reader.body);
    if (!message) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "request is not a valid %s message", descriptor->name);
        return NULL;
    }
    char field[128];
    if (isn_grpc_message_nul_string_field(descriptor, call->reader.body, call->reader.length, field, sizeof field)) {
        protobuf_c_message_free_unpacked(message, allocator);
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "field %s of %s holds a NUL byte", field, descriptor->name);
        return NULL;
    }
    return message;
}
uint64_t isn_grpc_call_timeout_ns(const isn_grpc_call *call) { return call->timeout_ns; }
bool isn_grpc_call_timeout_malformed(const isn_grpc_call *call) { return call->timeout_bad; }
bool isn_grpc_call_timeout_expired(const isn_grpc_call *call) { return call->timeout_sent && call->timeout_ns == 0; }
uint64_t isn_grpc_call_opened_ns(const isn_grpc_call *call) { return call->opened_ns; }

uint64_t isn_grpc_call_arrived_ns(const isn_grpc_call *call) { return call->arrived_ns; }

/* ------------------------------------------------------------------ responses */

static ssize_t read_reply(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                          uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
    (void)user_data;
    isn_grpc_call *call = source->ptr;
    size_t left = call->reply_len - call->reply_sent;
    size_t n = left < length ? left : length;
    memcpy(buf, call->reply_data + call->reply_sent, n);
    call->reply_sent += n;
    if (call->reply_sent == call->reply_len) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        static const nghttp2_nv trailers[] = {
            {(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
        };
        if (nghttp2_submit_trailer(session, stream_id, trailers, 1) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

static void submit_headers(isn_grpc_call *call, const nghttp2_nv *nv, size_t n, const nghttp2_data_provider *data) {
    isn_grpc_conn *conn = call->conn;
    call->responded = true;
    conn->replying++;
    if (nghttp2_submit_response(conn->session, call->id, nv, n, data) != 0)
        nghttp2_submit_rst_stream(conn->session, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_INTERNAL_ERROR);
    isn_grpc_conn_schedule_flush(conn);
}

#define NV_STATIC(name, value) \
    {(uint8_t *)(name), (uint8_t *)(value), sizeof(name) - 1, sizeof(value) - 1, \
     NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}

static void reply_framed(isn_grpc_call *call, const uint8_t *framed, size_t len, bool precharged);

void isn_grpc_call_reply_framed_charged(isn_grpc_call *call, const uint8_t *framed, size_t len, uint64_t charged) {
    if (!call->conn || call->responded) {
        isn_grpc_budget_release(call->server->budget, charged);
        return;
    }
    call->charged += charged;
    reply_framed(call, framed, len, true);
}

void isn_grpc_call_reply_framed(isn_grpc_call *call, const uint8_t *framed, size_t len) { reply_framed(call, framed, len, false); }

static void reply_framed(isn_grpc_call *call, const uint8_t *framed, size_t len, bool precharged) {
    if (!call->conn || call->responded) return;
    static const nghttp2_nv headers[] = {
        NV_STATIC(":status", "200"),
        NV_STATIC("content-type", "application/grpc"),
        NV_STATIC("grpc-accept-encoding", "identity"),
    };
    isn_grpc_server *server = call->server;
    /* A framed reply lives in the program's storage until the call is released: charged as held.
     * Refused, the call must not keep that storage while a status waits for a client that may not
     * read: the stream is reset with ENHANCE_YOUR_CALM (RESOURCE_EXHAUSTED to a gRPC client) and the
     * call released at the next flush, after the program is done with it. */
    if (framed != call->reply.data && !precharged) {
        if (!isn_grpc_budget_charge(server->budget, len)) {
            isn_grpc_conn *conn = call->conn;
            COUNTER_ADD(server->counters.over_budget, 1);
            if (server->handlers.on_status)
                server->handlers.on_status(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, server->app);
            call->responded = true;
            conn->replying++;
            call->dropped = true;
            conn->dropped++;
            nghttp2_submit_rst_stream(conn->session, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_ENHANCE_YOUR_CALM);
            isn_grpc_conn_schedule_flush(conn);
            return;
        }
        call->charged += len;
    }
    if (server->handlers.on_status) server->handlers.on_status(call, ISN_GRPC_STATUS_OK, server->app);
    call->answered_ok = true;
    nghttp2_data_provider provider = {.source.ptr = call, .read_callback = read_reply};
    call->reply_data = framed;
    call->reply_len = len;
    call->reply_sent = 0;
    COUNTER_ADD(server->counters.bytes_sent, len);
    submit_headers(call, headers, 3, &provider);
}

int isn_grpc_call_reply_message(isn_grpc_call *call, const ProtobufCMessage *message) {
    size_t size = protobuf_c_message_get_packed_size(message);
    call->reply.len = 0;
    isn_grpc_server *server = call->server;
    /* The buffer's capacity is charged with the call already; only growth is charged here. */
    size_t have = call->reply.cap, need = ISN_GRPC_PREFIX_BYTES + size, more = need > have ? need - have : 0;
    if (!isn_grpc_budget_charge(server->budget, more)) {
        COUNTER_ADD(server->counters.over_budget, 1);
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "server memory budget for replies reached");
        return ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    call->charged += more;
    if (!buffer_reserve(&call->reply, need)) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the reply");
        return ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    if (call->reply.cap > have + more) { /* rounded up past what was asked */
        isn_grpc_budget_add(server->budget, call->reply.cap - have - more);
        call->charged += call->reply.cap - have - more;
    }
    isn_grpc_write_prefix(call->reply.data, (uint32_t)size);
    protobuf_c_message_pack(message, call->reply.data + ISN_GRPC_PREFIX_BYTES);
    call->reply.len = ISN_GRPC_PREFIX_BYTES + size;
    isn_grpc_call_reply_framed(call, call->reply.data, call->reply.len);
    return ISN_GRPC_STATUS_OK;
}

void isn_grpc_call_vfail(isn_grpc_call *call, int status, const char *fmt, va_list ap) {
    if (!call->conn || call->responded) return;
    char message[512], encoded[1024], code[8];
    vsnprintf(message, sizeof message, fmt, ap);
    size_t encoded_len = isn_grpc_percent_encode(message, encoded, sizeof encoded);
    int code_len = snprintf(code, sizeof code, "%d", status);
    nghttp2_nv headers[] = {
        NV_STATIC(":status", "200"),
        NV_STATIC("content-type", "application/grpc"),
        {(uint8_t *)"grpc-status", (uint8_t *)code, 11, (size_t)code_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        {(uint8_t *)"grpc-message", (uint8_t *)encoded, 12, encoded_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    isn_grpc_server *server = call->server;
    if (server->handlers.on_status) server->handlers.on_status(call, status, server->app);
    log_debug("grpc %s stream %d %s: %s: %s", call->conn->peer, call->id, call->path, isn_grpc_status_name(status), message);
    /* Answered before the request was all here: what came of its body is of no more use. */
    if (!call->request_complete) isn_grpc_reader_reset(&call->reader);
    submit_headers(call, headers, 4, NULL);
}

void isn_grpc_call_fail_static(isn_grpc_call *call, int status, const char *message) {
    if (!call->conn || call->responded) return;
    /* Nothing formatted or encoded, and nothing copied: the same bytes each time, so that HPACK's
     * dynamic table holds the message after the first refusal and each later one costs a few bytes.
     * Under overload, when the loops are the bottleneck, what a refusal costs is what they can still
     * spend on answers. */
    static const char *const codes[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11",
                                        "12", "13", "14", "15", "16"};
    const char *code = status >= 0 && status < (int)(sizeof codes / sizeof codes[0]) ? codes[status] : "2";
    nghttp2_nv headers[] = {
        NV_STATIC(":status", "200"),
        NV_STATIC("content-type", "application/grpc"),
        {(uint8_t *)"grpc-status", (uint8_t *)code, 11, strlen(code), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
        {(uint8_t *)"grpc-message", (uint8_t *)message, 12, strlen(message), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
    };
    isn_grpc_server *server = call->server;
    if (server->handlers.on_status) server->handlers.on_status(call, status, server->app);
    if (!call->request_complete) isn_grpc_reader_reset(&call->reader);
    submit_headers(call, headers, 4, NULL);
}

void isn_grpc_call_fail(isn_grpc_call *call, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    isn_grpc_call_vfail(call, status, fmt, ap);
    va_end(ap);
}

void isn_grpc_call_http_error(isn_grpc_call *call, int http_status) {
    char code[8];
    int code_len = snprintf(code, sizeof code, "%d", http_status);
    nghttp2_nv headers[] = {
        {(uint8_t *)":status", (uint8_t *)code, 7, (size_t)code_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    COUNTER_ADD(call->server->counters.http_rejects, 1);
    submit_headers(call, headers, 1, NULL);
}
