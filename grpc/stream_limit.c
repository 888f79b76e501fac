/* The loop's own overload (server_internal.h, isn_grpc_stream_limit): when the loop, not the workers,
 * is what requests wait for, every request it reads costs it HTTP/2's parsing even when it is only
 * refused (HPACK must see every HEADERS frame), and a refusal of a request that costs little to answer
 * costs a third of the answer: past its capacity, refusing the excess leaves the loop less time to
 * answer than it had, and its goodput collapses. So the loop asks for less instead: it lowers the
 * streams each connection may hold open (SETTINGS_MAX_CONCURRENT_STREAMS) while it is saturated with
 * bytes left in its sockets, and raises them again once it has time to spare. Clients hold the excess
 * (isn-bench counts it not sent, isn-agg's pool finds no room and tries another replica or refuses),
 * at no cost to the loop. Multiplicative decrease, additive increase, over windows of the loop's
 * measured idle time. Pure: the caller gives the times. */
#include "grpc/server_internal.h"

void isn_grpc_stream_limit_init(isn_grpc_stream_limit *l, uint32_t max, uint64_t target_ns, uint64_t now_ns,
                                uint64_t idle_ns) {
    *l = (isn_grpc_stream_limit){.limit = max,
                                 .max = max,
                                 .target_ns = target_ns,
                                 .window_start_ns = now_ns,
                                 .idle_at_start_ns = idle_ns,
                                 .min_wait_ns = UINT64_MAX};
}

void isn_grpc_stream_limit_note_wait(isn_grpc_stream_limit *l, uint64_t wait_ns) {
    if (wait_ns < l->min_wait_ns) l->min_wait_ns = wait_ns;
    l->opened++;
}

bool isn_grpc_stream_limit_window(isn_grpc_stream_limit *l, uint64_t now_ns, uint64_t idle_ns) {
    if (now_ns < l->window_start_ns + ISN_GRPC_STREAM_LIMIT_WINDOW_NS) return false;
    double wall = (double)(now_ns - l->window_start_ns);
    double idle = idle_ns > l->idle_at_start_ns ? (double)(idle_ns - l->idle_at_start_ns) : 0.0;
    l->busy = idle < wall ? 1.0 - idle / wall : 0.0;
    bool backlog = l->backlog || (l->opened && l->min_wait_ns > l->target_ns);
    l->window_start_ns = now_ns;
    l->idle_at_start_ns = idle_ns;
    l->backlog = false;
    l->min_wait_ns = UINT64_MAX;
    l->opened = 0;
    uint32_t before = l->limit;
    uint32_t floor = l->max < ISN_GRPC_STREAM_LIMIT_MIN ? l->max : ISN_GRPC_STREAM_LIMIT_MIN;
    if (l->busy >= ISN_GRPC_STREAM_LIMIT_SATURATED && backlog) {
        uint32_t lower = (uint32_t)(l->limit * ISN_GRPC_STREAM_LIMIT_DECREASE);
        l->limit = lower > floor ? lower : floor;
    } else if (l->busy < ISN_GRPC_STREAM_LIMIT_RELAXED && l->limit < l->max) {
        uint32_t step = l->limit / 4 ? l->limit / 4 : 1;
        l->limit = l->max - l->limit > step ? l->limit + step : l->max;
    }
    if (l->limit < before) l->decreases++;
    return l->limit != before;
}

void isn_grpc_stream_limit_set_max(isn_grpc_stream_limit *l, uint32_t max) {
    l->max = max;
    if (l->limit > max) l->limit = max;
}
