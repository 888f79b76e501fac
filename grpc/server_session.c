/* The HTTP/2 side of a connection: nghttp2 server-session callbacks that turn frames into calls,
 * headers, message bytes and closes, and hand complete requests to the program's handlers. */
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grpc/server_internal.h"

#define CONNECTION_WINDOW (16 << 20)
#define STREAM_WINDOW (1 << 20)

/* A stream the server will not take now: the client may retry it (on this connection or another). */
static void refuse_stream(isn_grpc_conn *conn, int32_t stream_id) {
    COUNTER_ADD(conn->server->counters.streams_refused, 1);
    nghttp2_submit_rst_stream(conn->session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_REFUSED_STREAM);
}

/* A request the memory budget has no room for: answered at once, without a call, RESOURCE_EXHAUSTED
 * naming the budget (trailers-only; the rest of the request is refused by on_frame_send's reset). */
static void answer_over_budget(isn_grpc_conn *conn, int32_t stream_id) {
    isn_grpc_server *server = conn->server;
    COUNTER_ADD(server->counters.over_budget, 1);
    char message[200], encoded[400], code[8];
    snprintf(message, sizeof message,
             "server memory budget (%llu bytes) used up: no room for a new request now",
             (unsigned long long)__atomic_load_n(&server->budget->limit, __ATOMIC_RELAXED));
    size_t encoded_len = isn_grpc_percent_encode(message, encoded, sizeof encoded);
    int code_len = snprintf(code, sizeof code, "%d", ISN_GRPC_STATUS_RESOURCE_EXHAUSTED);
    nghttp2_nv headers[] = {
        {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
        {(uint8_t *)"grpc-status", (uint8_t *)code, 11, (size_t)code_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        {(uint8_t *)"grpc-message", (uint8_t *)encoded, 12, encoded_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    log_debug("grpc %s stream %d: %s", conn->peer, stream_id, message);
    if (nghttp2_submit_response(conn->session, stream_id, headers, 4, NULL) != 0) refuse_stream(conn, stream_id);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    isn_grpc_conn *conn = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    /* The block's headers (on_header) go to this call: found once here, not once per header. */
    conn->headers_stream = frame->hd.stream_id;
    conn->headers_call = NULL;
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) { /* trailers */
        conn->headers_call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        return 0;
    }
    conn->server->work.requests++;
    /* Streams the client reset while the program still works on them count too: a client cannot
     * start more work than this by resetting what it started. */
    if (conn->in_flight >= conn->server->config.max_requests_per_connection) {
        refuse_stream(conn, frame->hd.stream_id);
        return 0;
    }
    bool over_budget;
    isn_grpc_call *call = isn_grpc_call_new(conn, frame->hd.stream_id, &over_budget);
    if (!call) {
        if (over_budget) answer_over_budget(conn, frame->hd.stream_id);
        else refuse_stream(conn, frame->hd.stream_id); /* out of memory */
        return 0;
    }
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call);
    conn->headers_call = call;
    return 0;
}

/* The request headers the server reads. */
typedef enum { HEADER_OTHER, HEADER_METHOD, HEADER_PATH, HEADER_CONTENT_TYPE, HEADER_TRACEPARENT, HEADER_VIA, HEADER_TIMEOUT } header_kind;

static header_kind header_kind_of(const uint8_t *name, size_t len) {
#define IS(literal) (!memcmp(name, literal, sizeof literal - 1))
    switch (len) { /* most headers are told apart by their length alone */
    case 5: return IS(":path") ? HEADER_PATH : HEADER_OTHER;
    case 7: return IS(":method") ? HEADER_METHOD : IS("isn-via") ? HEADER_VIA : HEADER_OTHER;
    case 11: return IS("traceparent") ? HEADER_TRACEPARENT : HEADER_OTHER;
    case 12: return IS("content-type") ? HEADER_CONTENT_TYPE : IS("grpc-timeout") ? HEADER_TIMEOUT : HEADER_OTHER;
    default: return HEADER_OTHER;
    }
#undef IS
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) {
    (void)flags;
    isn_grpc_conn *conn = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    isn_grpc_call *call = frame->hd.stream_id == conn->headers_stream
                              ? conn->headers_call
                              : nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!call) return 0;
    /* nghttp2 advertises SETTINGS_MAX_HEADER_LIST_SIZE but does not enforce it on what it receives.
     * Trailers count with the headers: the request's whole header list is bounded. */
    uint64_t size = (uint64_t)call->header_list_bytes + namelen + valuelen + 32;
    call->header_list_bytes = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    if (size > call->server->config.max_header_list_bytes) {
        COUNTER_ADD(call->server->counters.header_lists_too_large, 1);
        log_debug("grpc stream %d: header list over %u bytes; reset", frame->hd.stream_id,
                  call->server->config.max_header_list_bytes);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM; the rest of the block is skipped */
    }
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0; /* trailers: nothing in them is used */
    switch (header_kind_of(name, namelen)) {
    case HEADER_METHOD: call->post = valuelen == 4 && !memcmp(value, "POST", 4); break;
    case HEADER_PATH: {
        size_t n = valuelen < CALL_PATH_MAX - 1 ? valuelen : CALL_PATH_MAX - 1;
        memcpy(call->path, value, n);
        call->path[n] = '\0';
        break;
    }
    case HEADER_CONTENT_TYPE:
        /* application/grpc, application/grpc+proto, application/grpc;charset=... */
        call->content_type_ok = valuelen >= 16 && !memcmp(value, "application/grpc", 16) &&
                                  (valuelen == 16 || value[16] == '+' || value[16] == ';');
        break;
    case HEADER_TRACEPARENT:
        if (valuelen < sizeof call->traceparent) {
            memcpy(call->traceparent, value, valuelen);
            call->traceparent[valuelen] = '\0';
        }
        break;
    case HEADER_VIA: {
        call->via_too_long = valuelen >= sizeof call->via;
        size_t n = call->via_too_long ? 0 : valuelen;
        memcpy(call->via, value, n);
        call->via[n] = '\0';
        break;
    }
    case HEADER_TIMEOUT:
        if (isn_grpc_parse_timeout((const char *)value, valuelen, &call->timeout_ns) < 0) call->timeout_bad = true;
        else call->timeout_sent = true;
        break;
    case HEADER_OTHER: break;
    }
    return 0;
}

/* Headers complete: refuse what is not gRPC at all, then let the program refuse early. */
static void on_request_headers(isn_grpc_call *call) {
    isn_grpc_server *server = call->server;
    if (!call->post) {
        isn_grpc_call_http_error(call, 405);
        return;
    }
    if (!call->content_type_ok) {
        isn_grpc_call_http_error(call, 415);
        return;
    }
    if (server->handlers.on_headers) server->handlers.on_headers(call, server->app);
}

/* The request stream ended: exactly one whole message, or an error for the client. */
static void on_request_complete(isn_grpc_call *call) {
    isn_grpc_read_result result = isn_grpc_reader_finish(&call->reader);
    if (result != ISN_GRPC_READ_OK) {
        char why[200];
        isn_grpc_reader_describe(&call->reader, result, why, sizeof why);
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "%s", why);
        return;
    }
    isn_grpc_server *server = call->server;
    server->handlers.on_request(call, server->app);
}

/* Rapid reset (CVE-2023-44487): streams opened and reset by the client before their answer, by token
 * bucket: ISN_GRPC_EARLY_RESET_BURST at most, refilled at max_early_resets_per_second and by one for every
 * stream the connection saw answered. A client that cancels what it no longer needs (an aggregator's
 * lost hedges) resets few streams compared with those it gets answered; a flood resets each one it
 * opens, and meets GOAWAY after about the burst. Resets of streams answered OK never count; a refusal
 * (or an error) is no answer: it earns nothing, and a reset crossing it counts. Counting refusals as
 * answers let a flood go on for as long as the node was busy enough to refuse its requests at HEADERS. */
static double early_reset_burst(const isn_grpc_server_config *config) {
    double two_seconds = 2.0 * config->max_early_resets_per_second;
    return two_seconds < ISN_GRPC_EARLY_RESET_BURST ? two_seconds : ISN_GRPC_EARLY_RESET_BURST;
}

static void refill_reset_tokens(isn_grpc_conn *conn, uint64_t now, double earned) {
    const isn_grpc_server_config *config = &conn->server->config;
    double burst = early_reset_burst(config), rate = config->max_early_resets_per_second;
    if (conn->reset_penalized) { /* its address was cut lately (isn_grpc_reset_penalties) */
        if (burst > ISN_GRPC_PENALIZED_RESET_BURST) burst = ISN_GRPC_PENALIZED_RESET_BURST;
        rate /= ISN_GRPC_PENALIZED_RESET_RATE_DIVISOR;
    }
    /* an answer's refill takes the time its read or flush began, which a reset's reading may have passed */
    if (now < conn->reset_tokens_ns) now = conn->reset_tokens_ns;
    if (!conn->reset_tokens_ns) conn->reset_tokens = burst;
    else conn->reset_tokens += (double)(now - conn->reset_tokens_ns) * 1e-9 * rate;
    conn->reset_tokens += earned;
    if (conn->reset_tokens > burst) conn->reset_tokens = burst;
    conn->reset_tokens_ns = now;
}

static void count_early_reset(isn_grpc_conn *conn) {
    const isn_grpc_server_config *config = &conn->server->config;
    uint64_t now = isn_now_ns();
    refill_reset_tokens(conn, now, 0.0);
    conn->reset_tokens -= 1.0;
    if (conn->reset_tokens >= 0.0) return;
    COUNTER_ADD(conn->server->counters.reset_floods, 1);
    isn_grpc_reset_penalty_note(conn->server->penalties, conn->peer_key, now);
    isn_grpc_conn_cut(conn, NGHTTP2_ENHANCE_YOUR_CALM);
    uint64_t left_out;
    if (isn_log_limiter_allows(&conn->server->reset_flood_log, now, &left_out)) {
        char more[96] = "";
        if (left_out)
            snprintf(more, sizeof more, "; %llu more connections cut so since the last such line",
                     (unsigned long long)left_out);
        log_warn("grpc %s: more than %u streams per second reset before their reply; closing (GOAWAY "
                 "ENHANCE_YOUR_CALM%s)%s",
                 conn->peer, config->max_early_resets_per_second,
                 conn->held_until_ns ? ", held unread for server.reset_hold first" : "", more);
    }
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    isn_grpc_conn *conn = user_data;
    conn->preface_done = true;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        isn_grpc_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (call && !call->answered_ok && !conn->close_when_flushed) count_early_reset(conn);
        return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    isn_grpc_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!call) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST && !call->responded)
        on_request_headers(call);
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
        if (call->stream) return isn_grpc_stream_on_end(call), 0;
        call->request_complete = true;
        if (!call->responded) on_request_complete(call);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *user_data) {
    (void)flags;
    isn_grpc_conn *conn = user_data;
    COUNTER_ADD(conn->server->counters.bytes_received, len);
    isn_grpc_call *call = nghttp2_session_get_stream_user_data(session, stream_id);
    if (call && call->stream) return isn_grpc_stream_on_data(call, data, len);
    if (!call || call->responded) return 0;
    isn_grpc_read_result result = isn_grpc_reader_feed(&call->reader, data, len);
    if (result == ISN_GRPC_READ_OK) return 0;
    char why[200];
    isn_grpc_reader_describe(&call->reader, result, why, sizeof why);
    if (result == ISN_GRPC_READ_OVER_BUDGET) COUNTER_ADD(conn->server->counters.over_budget, 1);
    int status = result == ISN_GRPC_READ_TOO_LARGE || result == ISN_GRPC_READ_OUT_OF_MEMORY || result == ISN_GRPC_READ_OVER_BUDGET
                     ? ISN_GRPC_STATUS_RESOURCE_EXHAUSTED
                 : result == ISN_GRPC_READ_COMPRESSED                                    ? ISN_GRPC_STATUS_UNIMPLEMENTED
                                                                                     : ISN_GRPC_STATUS_INVALID_ARGUMENT;
    isn_grpc_call_fail(call, status, "%s", why);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data) {
    isn_grpc_conn *conn = user_data;
    isn_grpc_call *call = nghttp2_session_get_stream_user_data(session, stream_id);
    if (!call) return 0;
    if (call->answered_ok && error_code == NGHTTP2_NO_ERROR) {
        uint64_t recent = conn->server->recent_ns;
        refill_reset_tokens(conn, recent ? recent : isn_now_ns(), 1.0);
    }
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    isn_grpc_call_detach(conn, call);
    isn_grpc_server_check_drained(conn->server);
    return 0;
}

/* Answered before the request ended (too large, stalled, refused early): once the reply is out,
 * ask the client to stop sending, without error (RFC 9113 section 8.1). Submitted earlier, the
 * RST_STREAM could overtake the reply. */
static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    isn_grpc_conn *conn = user_data;
    if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    isn_grpc_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    isn_grpc_server *server = conn->server;
    if (call && server->handlers.on_sent) server->handlers.on_sent(call, server->app);
    /* No call: answered without one (answer_over_budget), maybe before its request ended. */
    bool request_ended =
        call ? call->request_complete : nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) != 0;
    if (!request_ended) nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_error(nghttp2_session *session, int lib_error_code, const char *msg, size_t len, void *user_data) {
    (void)session, (void)lib_error_code;
    isn_grpc_conn *conn = user_data;
    log_debug("grpc %s: HTTP/2: %.*s", conn->peer, (int)len, msg);
    return 0;
}

/* The callbacks and options every session shares: made once, whichever loop's thread comes first. */
static nghttp2_session_callbacks *callbacks;
static nghttp2_option *options;
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;

static void make_shared(void) {
    if (nghttp2_session_callbacks_new(&callbacks) == 0) {
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, on_frame_send);
        nghttp2_session_callbacks_set_error_callback2(callbacks, on_error);
    }
    if (nghttp2_option_new(&options) == 0) {
        /* Bounds on what a peer can make us hold, beyond nghttp2's own defaults. */
        nghttp2_option_set_max_settings(options, 32);
        nghttp2_option_set_max_outbound_ack(options, 1000);
        /* nghttp2's own limit counts every RST_STREAM, cancellations of slow calls and isn-agg's
         * lost hedges included; count_early_reset counts only the resets that cost work. This one
         * stays as a backstop far above any client's cancellations. */
        nghttp2_option_set_stream_reset_rate_limit(options, 100000, 20000);
        /* Closed streams are kept only for RFC 7540's priority tree, which this server does not
         * use (SETTINGS_NO_RFC7540_PRIORITIES): keeping them costs every stream a list entry and
         * a later free. */
        nghttp2_option_set_no_closed_streams(options, 1);
    }
}

/* A server session for the connection with the server's settings; 0 or an nghttp2 error. */
int isn_grpc_session_new(isn_grpc_conn *conn) {
    pthread_once(&shared_once, make_shared);
    if (!callbacks || !options) return NGHTTP2_ERR_NOMEM;
    int rc = nghttp2_session_server_new3(&conn->session, callbacks, conn, options, &conn->mem);
    if (rc != 0) return rc;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, conn->server->stream_limit.limit},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, conn->server->config.max_header_list_bytes},
        /* gRPC answers each stream as soon as it can; RFC 7540's dependency tree would cost every
         * stream its insertion and removal for an order nothing here asks for. */
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    nghttp2_submit_settings(conn->session, NGHTTP2_FLAG_NONE, settings, sizeof settings / sizeof settings[0]);
    conn->stream_limit_sent = conn->server->stream_limit.limit;
    nghttp2_session_set_local_window_size(conn->session, NGHTTP2_FLAG_NONE, 0, CONNECTION_WINDOW);
    return 0;
}
