/* Stalls of the node as a serving loop sees them. A loop stopped while it waited in its poll (the process
 * stopped, its VM's host took the CPUs) wakes to the requests that came in the stall as to fresh ones, and
 * nothing it reads tells of the stall. But a poll that blocks far past its timeout was not run when it was
 * due: the gRPC server then calls on_stall (config.stall_seen_ns, ISN_SCHEDULER_STALL_SEEN_NS), and the
 * scheduler's preparation queue counts its stillness from the stall's end (isn_scheduler_note_resume). A
 * poll bounded by no timer, or by one further off than the stall, cannot tell; so while Search requests
 * come each loop keeps a short repeating timer, and its polls time out within STALL_WATCH_MS. (A loop
 * stopped in the middle of an iteration may read the stall's requests as old, which the scheduler's
 * arrival check tells the same way.) All on the loop's thread. */
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
