/* Stalls of the node as a serving loop sees them. A loop stopped while it waited in its poll (the process
 * stopped, its VM's host took the CPUs) cannot tell the requests it then reads from fresh ones: it wakes
 * to them as to any. But a poll that returns far past its timeout was not run when it was due. While
 * Search requests come, each loop keeps a short repeating timer, so that its polls time out within
 * STALL_WATCH_MS, and a poll blocked ISN_SCHEDULER_STALL_SEEN_NS past that tells the scheduler that the
 * node resumed (isn_scheduler_note_resume): the preparation queue's stillness then counts from the
 * stall's end, not through it. A loop that stops in the middle of an iteration reads the stall's requests
 * as old instead, which the scheduler's arrival check tells the same way. All on the loop's thread. */
#include "base/base.h"
#include "daemon/server.h"

#define STALL_WATCH_MS 2                 /* the longest a loop's poll waits while requests come */
#define STALL_WATCH_IDLE_NS 100000000ull /* no Search request for this long: the timer stops */

static void stall_watch_tick(uv_timer_t *timer) {
    serving_loop *loop = timer->data;
    if (isn_now_ns() > loop->last_search_ns + STALL_WATCH_IDLE_NS) uv_timer_stop(timer);
}

void stall_watch_init(serving_loop *loop) {
    uv_timer_init(loop->loop, &loop->stall_watch);
    loop->stall_watch.data = loop;
}

void stall_watch_search_seen(serving_loop *loop, uint64_t now_ns) {
    loop->last_search_ns = now_ns;
    if (!uv_is_active((uv_handle_t *)&loop->stall_watch) && !uv_is_closing((uv_handle_t *)&loop->stall_watch))
        uv_timer_start(&loop->stall_watch, stall_watch_tick, STALL_WATCH_MS, STALL_WATCH_MS);
}

void stall_watch_before_poll(serving_loop *loop) {
    /* 0: the poll will not block (work is waiting), -1: no timer bounds it; neither tells of a stall */
    int timeout_ms = uv_backend_timeout(loop->loop);
    loop->poll_timeout_ns = timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0;
    loop->poll_idle_before_ns = uv_metrics_idle_time(loop->loop);
}

/* The loop's idle time is what it spent blocked in its polls (libuv measures it around the system call),
 * so what the poll took is exact whatever the iteration then did with what it read. */
void stall_watch_after_poll(serving_loop *loop) {
    if (!loop->poll_timeout_ns) return;
    uint64_t blocked = uv_metrics_idle_time(loop->loop) - loop->poll_idle_before_ns;
    if (blocked > loop->poll_timeout_ns + ISN_SCHEDULER_STALL_SEEN_NS && loop->server->pool)
        search_service_note_resume(loop->server->pool, isn_now_ns());
    loop->poll_timeout_ns = 0;
}
