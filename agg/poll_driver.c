/* Driving the aggregator from a poll() loop: the replica connections' descriptors, what arrived on
 * them, when to wake up without input, and one send per connection per loop turn. */
#include "agg/agg_internal.h"

/* A dead connection would wake poll() forever: closed once nothing on it is left to finish. */
static void close_if_dead(agg_replica *r) {
    if (r->client && !isn_grpc_usable(r->client) && !r->inflight && (!r->probe || isn_grpc_call_done(r->probe))) {
        isn_grpc_close(r->client);
        r->client = NULL;
    }
}

size_t agg_pollfds(agg *a, struct pollfd *fds, size_t max) {
    size_t n = 0;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas && n < max; i++) {
            agg_replica *r = &a->partitions[pi].replicas[i];
            close_if_dead(r);
            if (r->client) fds[n++] = (struct pollfd){.fd = isn_grpc_fd(r->client), .events = POLLIN};
        }
    return n;
}

void agg_process(agg *a, const struct pollfd *fds, size_t count) {
    char err[256];
    size_t n = 0;
    /* The same walk as agg_pollfds, so the i-th descriptor is the i-th connected replica. */
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas && n < count; i++) {
            agg_replica *r = &a->partitions[pi].replicas[i];
            if (!r->client) continue;
            if (fds[n].revents) isn_grpc_poll(r->client, 0, err, sizeof err);
            n++;
        }
}

uint64_t agg_next_wakeup_ns(agg *a, uint64_t now_ns) {
    if (a->absorbed) {
        a->absorbed = false;
        return now_ns;
    }
    int64_t next = (int64_t)now_ns + 100000000LL; /* probes are looked at every 100 ms at least */
    for (agg_query *q = a->queries; q; q = q->next) {
        int64_t qt = agg_query_next_timer(a, q);
        if (qt < next) next = qt;
    }
    return next < (int64_t)now_ns ? now_ns : (uint64_t)next;
}

/* Sends what this loop turn queued, one write per replica connection. */
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
        a->absorbed = true;
        a->metrics.processing_sum_s += (double)(agg_now_ns() - start) / 1e9;
    }
}

void agg_advance(agg *a) {
    int64_t now = agg_now_ns();
    for (agg_query *q = a->queries, *following; q; q = following) {
        following = q->next;
        agg_query_progress(a, q, now);
    }
    agg_probe_replicas(a, now);
    flush_replicas(a);
}
