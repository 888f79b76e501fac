/* Queued Search requests answered DEADLINE_EXCEEDED at their deadline, not when a worker reaches
 * them: an indexed min-heap of the calls waiting on a worker, by deadline, and one libuv timer armed
 * at the earliest. All on the loop thread. A request a worker has started is left to it (the search
 * stops early at the scheduler's stop point and answers with what it found). */
#include <stdlib.h>

#include "base/base.h"
#include "daemon/server.h"

static uint64_t key(const isn_server *server, uint32_t i) { return server->deadlines[i]->job.deadline_ns; }

static void place(isn_server *server, uint32_t i, rpc_call *rc) {
    server->deadlines[i] = rc;
    rc->deadline_slot = i + 1;
}

static void sift_up(isn_server *server, uint32_t i) {
    rpc_call *rc = server->deadlines[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (key(server, parent) <= rc->job.deadline_ns) break;
        place(server, i, server->deadlines[parent]);
        i = parent;
    }
    place(server, i, rc);
}

static void sift_down(isn_server *server, uint32_t i) {
    rpc_call *rc = server->deadlines[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= server->num_deadlines) break;
        if (child + 1 < server->num_deadlines && key(server, child + 1) < key(server, child)) child++;
        if (key(server, child) >= rc->job.deadline_ns) break;
        place(server, i, server->deadlines[child]);
        i = child;
    }
    place(server, i, rc);
}

static void arm(isn_server *server) {
    if (!server->deadline_timer.data || server->state == SERVER_STOPPING) return; /* closed with the loop */
    if (server->num_deadlines == 0) {
        uv_timer_stop(&server->deadline_timer);
        return;
    }
    uint64_t now = isn_now_ns(), at = key(server, 0);
    /* libuv counts milliseconds: round up, so the timer never fires before the deadline */
    uint64_t ms = at > now ? (at - now + 999999) / 1000000 : 0;
    uv_timer_start(&server->deadline_timer, deadline_timer_fire, ms, 0);
}

bool deadline_watch(isn_server *server, rpc_call *rc) {
    if (!rc->job.deadline_ns || rc->deadline_slot) return true;
    if (server->num_deadlines == server->deadline_cap) {
        uint32_t cap = server->deadline_cap ? server->deadline_cap * 2 : 256;
        rpc_call **grown = realloc(server->deadlines, cap * sizeof *grown);
        if (!grown) return false; /* the worker still refuses it once the deadline has passed */
        server->deadlines = grown;
        server->deadline_cap = cap;
    }
    uint32_t i = server->num_deadlines++;
    server->deadlines[i] = rc;
    sift_up(server, i);
    if (rc->deadline_slot == 1) arm(server);
    return true;
}

void deadline_forget(isn_server *server, rpc_call *rc) {
    if (!rc->deadline_slot) return;
    uint32_t i = rc->deadline_slot - 1;
    rc->deadline_slot = 0;
    rpc_call *last = server->deadlines[--server->num_deadlines];
    if (i < server->num_deadlines) {
        place(server, i, last);
        sift_down(server, i);
        sift_up(server, last->deadline_slot - 1);
    }
    if (i == 0) arm(server);
}

void deadline_timer_fire(uv_timer_t *timer) {
    isn_server *server = timer->data;
    uint64_t now = isn_now_ns();
    while (server->num_deadlines && key(server, 0) <= now) {
        rpc_call *rc = server->deadlines[0];
        deadline_forget(server, rc);
        int queued = JOB_QUEUED;
        /* a worker that starts it from now on finds it answered and skips it */
        if (!atomic_compare_exchange_strong(&rc->job.phase, &queued, JOB_EXPIRED)) continue;
        rc->answered_at_deadline = true;
        server->metrics.expired_in_queue++;
        grpc_call_fail(rc->call, GRPC_STATUS_DEADLINE_EXCEEDED, "deadline passed after %.3f ms in the queue",
                       (double)(now - rc->job.enqueued_ns) / 1e6);
    }
    arm(server);
}

void deadline_timer_init(isn_server *server, uv_loop_t *loop) {
    uv_timer_init(loop, &server->deadline_timer);
    server->deadline_timer.data = server;
}

void deadline_timer_free(isn_server *server) {
    free(server->deadlines);
    server->deadlines = NULL;
    server->num_deadlines = server->deadline_cap = 0;
}
