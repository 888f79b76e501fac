/* Queued Search requests answered DEADLINE_EXCEEDED at their deadline, not when a worker reaches
 * them: an indexed min-heap of the calls waiting on a worker, by deadline, and one libuv timer armed
 * at the earliest, per serving loop. All on the loop's thread. A request a worker has started is left to it (the search
 * stops early at the scheduler's stop point and answers with what it found). */
#include <stdlib.h>

#include "base/base.h"
#include "daemon/server.h"

static uint64_t key(const serving_loop *loop, uint32_t i) { return loop->deadlines[i]->job.deadline_ns; }

static void place(serving_loop *loop, uint32_t i, rpc_call *rc) {
    loop->deadlines[i] = rc;
    rc->deadline_slot = i + 1;
}

static void sift_up(serving_loop *loop, uint32_t i) {
    rpc_call *rc = loop->deadlines[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (key(loop, parent) <= rc->job.deadline_ns) break;
        place(loop, i, loop->deadlines[parent]);
        i = parent;
    }
    place(loop, i, rc);
}

static void sift_down(serving_loop *loop, uint32_t i) {
    rpc_call *rc = loop->deadlines[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= loop->num_deadlines) break;
        if (child + 1 < loop->num_deadlines && key(loop, child + 1) < key(loop, child)) child++;
        if (key(loop, child) >= rc->job.deadline_ns) break;
        place(loop, i, loop->deadlines[child]);
        i = child;
    }
    place(loop, i, rc);
}

static void arm(serving_loop *loop) {
    if (!loop->deadline_timer.data || uv_is_closing((uv_handle_t *)&loop->deadline_timer)) return; /* closed */
    if (loop->num_deadlines == 0) {
        uv_timer_stop(&loop->deadline_timer);
        return;
    }
    uint64_t now = isn_now_ns(), at = key(loop, 0);
    /* libuv counts milliseconds: round up, so the timer never fires before the deadline */
    uint64_t ms = at > now ? (at - now + 999999) / 1000000 : 0;
    uv_timer_start(&loop->deadline_timer, deadline_timer_fire, ms, 0);
}

bool deadline_watch(serving_loop *loop, rpc_call *rc) {
    if (!rc->job.deadline_ns || rc->deadline_slot) return true;
    if (loop->num_deadlines == loop->deadline_cap) {
        uint32_t cap = loop->deadline_cap ? loop->deadline_cap * 2 : 256;
        rpc_call **grown = realloc(loop->deadlines, cap * sizeof *grown);
        if (!grown) return false; /* the worker still refuses it once the deadline has passed */
        loop->deadlines = grown;
        loop->deadline_cap = cap;
    }
    uint32_t i = loop->num_deadlines++;
    loop->deadlines[i] = rc;
    sift_up(loop, i);
    if (rc->deadline_slot == 1) arm(loop);
    return true;
}

void deadline_forget(serving_loop *loop, rpc_call *rc) {
    if (!rc->deadline_slot) return;
    uint32_t i = rc->deadline_slot - 1;
    rc->deadline_slot = 0;
    rpc_call *last = loop->deadlines[--loop->num_deadlines];
    if (i < loop->num_deadlines) {
        place(loop, i, last);
        sift_down(loop, i);
        sift_up(loop, last->deadline_slot - 1);
    }
    if (i == 0) arm(loop);
}

void deadline_timer_fire(uv_timer_t *timer) {
    serving_loop *loop = timer->data;
    uint64_t now = isn_now_ns();
    while (loop->num_deadlines && key(loop, 0) <= now) {
        rpc_call *rc = loop->deadlines[0];
        deadline_forget(loop, rc);
        int queued = JOB_QUEUED;
        /* a worker that starts it from now on finds it answered and skips it */
        if (!atomic_compare_exchange_strong(&rc->job.phase, &queued, JOB_EXPIRED)) continue;
        rc->answered_at_deadline = true;
        LOOP_METRICS(loop, m->expired_in_queue++);
        isn_grpc_call_fail(rc->call, ISN_GRPC_STATUS_DEADLINE_EXCEEDED, "deadline passed after %.3f ms in the queue",
                       (double)(now - rc->job.enqueued_ns) / 1e6);
    }
    arm(loop);
}

void deadline_timer_init(serving_loop *loop) {
    uv_timer_init(loop->loop, &loop->deadline_timer);
    loop->deadline_timer.data = loop;
}

void deadline_timer_free(serving_loop *loop) {
    free(loop->deadlines);
    loop->deadlines = NULL;
    loop->num_deadlines = loop->deadline_cap = 0;
}
