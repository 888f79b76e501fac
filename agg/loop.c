/* The aggregator on its libuv loop: replica input, new calls and timers each ask for a step; one
 * step per loop turn moves every query on and then sends, one write per replica connection, what
 * the step queued. */
#include "agg/agg_internal.h"

/* Probes of replicas that are out are looked at this often at least. */
#define AGG_TICK_NS 100000000LL

static void on_keep_going(uv_idle_t *idle) { (void)idle; }

void agg_kick(agg *a) {
    if (!a->handles_started) return;
    a->dirty = true;
    /* The loop must not sleep before the step (an idle handle makes its poll not block). */
    uv_idle_start(&a->keep_going, on_keep_going);
}

/* A dead connection is closed once nothing on it is left to finish (the next call reconnects). */
static void close_dead_replicas(agg *a) {
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++) {
            agg_replica *r = &a->partitions[pi].replicas[i];
            if (r->client && !isn_grpc_usable(r->client) && !r->inflight &&
                (!r->probe || isn_grpc_client_call_done(r->probe))) {
                isn_grpc_close(r->client);
                r->client = NULL;
            }
        }
}

/* Sends what this step queued, one write per replica connection. Sending also reads what came in,
 * so answers may be waiting afterwards: then another step follows at once. */
static void flush_replicas(agg *a) {
    int64_t start = agg_now_ns();
    bool any = false;
    char err[256];
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++) {
            agg_replica *r = &a->partitions[pi].replicas[i];
            if (!r->unsent) continue;
            r->unsent = false;
            if (r->client) isn_grpc_poll(r->client, 0, err, sizeof err);
            any = true;
        }
    if (any) {
        a->dirty = true;
        a->metrics.send_seconds += (double)(agg_now_ns() - start) / 1e9;
    }
}

void agg_advance(agg *a) {
    int64_t now = agg_now_ns();
    for (agg_query *q = a->queries, *following; q; q = following) {
        following = q->next;
        agg_query_step(a, q, now);
    }
    agg_reload_step(a, now);
    agg_discovery_reap(a);
    agg_probe_replicas(a, now);
    close_dead_replicas(a);
    agg_readiness_changed(a);
    flush_replicas(a);
}

static void on_wakeup(uv_timer_t *timer) { agg_kick(timer->data); }

/* The next hedge or deadline of any query, or the next tick. */
static void arm_wakeup(agg *a) {
    int64_t now = agg_now_ns(), next = now + AGG_TICK_NS;
    for (agg_query *q = a->queries; q; q = q->next) {
        int64_t qt = agg_query_next_timer(a, q);
        if (qt < next) next = qt;
    }
    uint64_t wait_ms = next <= now ? 0 : (uint64_t)(next - now + 999999) / 1000000; /* never early */
    uv_timer_start(&a->wakeup, on_wakeup, wait_ms, 0);
}

static void on_step(uv_check_t *check) {
    agg *a = check->data;
    if (a->dirty) {
        a->dirty = false;
        agg_advance(a);
        arm_wakeup(a);
    }
    if (!a->dirty) uv_idle_stop(&a->keep_going);
}

int agg_loop_start(agg *a, char *err, size_t err_len) {
    uv_timer_init(a->loop, &a->wakeup);
    uv_check_init(a->loop, &a->step);
    uv_idle_init(a->loop, &a->keep_going);
    a->wakeup.data = a->step.data = a->keep_going.data = a;
    int rc = uv_check_start(&a->step, on_step);
    if (rc < 0) return isn_error(err, err_len, "cannot start the aggregator's loop step: %s", uv_strerror(rc));
    a->handles_started = true;
    arm_wakeup(a);
    return agg_connector_start(a, err, err_len);
}

void agg_loop_stop(agg *a) {
    if (!a->handles_started) return;
    a->handles_started = false;
    agg_connector_stop(a);
    uv_close((uv_handle_t *)&a->wakeup, NULL);
    uv_close((uv_handle_t *)&a->step, NULL);
    uv_close((uv_handle_t *)&a->keep_going, NULL);
}
