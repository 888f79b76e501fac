/* Adaptive concurrency: each loop advertises SETTINGS_MAX_CONCURRENT_STREAMS from what it measures.
 * A loop that falls behind lets requests wait unread in the kernel, where their deadlines run out
 * while nothing counts them, and every refusal it then makes costs it a good part of an answer. So,
 * like CoDel, it watches how long requests waited before their HEADERS were handled (arrival floor
 * to handling); when the least of those waits over an interval stays above the target, the loop is
 * behind whatever it does per request, and it lowers the streams each connection may have open (by
 * HTTP/2 SETTINGS, which clients obey before they send: shedding that costs the loop nothing). When
 * waits fall back below half the target the limit grows again, up to server.max_concurrent_streams. */
#include "grpc/server_internal.h"

#define LIMIT_INTERVAL_NS 50000000ull /* one decision per interval */
#define LIMIT_TARGET_NS 5000000ull    /* the least wait of an interval above this: behind */
#define LIMIT_MIN 4                   /* streams a connection may always have */

void grpc_stream_limit_init(grpc_server *server) {
    server->stream_limit = server->config.max_concurrent_streams;
    server->limit_min_wait_ns = UINT64_MAX;
    __atomic_store_n(&server->counters.stream_limit, server->stream_limit, __ATOMIC_RELAXED);
}

void grpc_stream_limit_observe(grpc_server *server, uint64_t wait_ns) {
    if (wait_ns < server->limit_min_wait_ns) server->limit_min_wait_ns = wait_ns;
}

static void advertise(grpc_server *server) {
    nghttp2_settings_entry entry = {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, server->stream_limit};
    for (conn_links *links = server->conns; links; links = links->next) {
        grpc_conn *conn = (grpc_conn *)links;
        if (conn->closing || !conn->session) continue;
        if (nghttp2_submit_settings(conn->session, NGHTTP2_FLAG_NONE, &entry, 1) == 0) grpc_conn_schedule_flush(conn);
    }
    __atomic_store_n(&server->counters.stream_limit, server->stream_limit, __ATOMIC_RELAXED);
}

void grpc_stream_limit_tick(grpc_server *server, uint64_t now) {
    if (now < server->limit_interval_end_ns) return;
    uint32_t ceiling = server->config.max_concurrent_streams, limit = server->stream_limit;
    uint64_t least = server->limit_min_wait_ns;
    if (least != UINT64_MAX && least > LIMIT_TARGET_NS) {
        limit = limit * 7 / 10;
        if (limit < LIMIT_MIN) limit = LIMIT_MIN;
        if (limit < server->stream_limit) COUNTER_ADD(server->counters.stream_limit_cuts, 1);
    } else if (least == UINT64_MAX || least < LIMIT_TARGET_NS / 2) {
        limit = limit + limit / 4 + 1;
    }
    if (limit > ceiling) limit = ceiling;
    if (limit != server->stream_limit) {
        server->stream_limit = limit;
        advertise(server);
    }
    server->limit_min_wait_ns = UINT64_MAX;
    server->limit_interval_end_ns = now + LIMIT_INTERVAL_NS;
}
