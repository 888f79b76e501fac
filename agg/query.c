/* One Search's whole life, owned here: made from the call (service.c), started (global statistics
 * first when they are asked for, then the fan-out), moved on each loop step, answered once (the
 * merged hits, or the status that says why not), then freed. global_stats.c, fanout.c and merge.c
 * do their part and return how it went; only this file answers the client and frees a query. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg/agg_internal.h"

agg_query *agg_query_new(agg *a, isn_grpc_call *call, Isn__V1__SearchRequest *request, uint32_t k, const char *via,
                         int64_t now, bool *over_budget) {
    /* the query, its partitions' state and the unpacked request (about twice its message) */
    size_t message_len;
    isn_grpc_call_message(call, &message_len);
    uint64_t bytes = sizeof(agg_query) + (uint64_t)(a->num_partitions ? a->num_partitions : 1) * sizeof(agg_part) +
                     2 * (uint64_t)message_len;
    *over_budget = !isn_grpc_budget_charge(&a->budget, bytes);
    if (*over_budget) {
        a->metrics.over_budget++;
        return NULL;
    }
    agg_query *q = calloc(1, sizeof *q);
    if (q && !(q->parts = calloc(a->num_partitions ? a->num_partitions : 1, sizeof *q->parts))) {
        free(q);
        q = NULL;
    }
    if (!q) {
        isn_grpc_budget_release(&a->budget, bytes);
        return NULL;
    }
    q->charged = bytes;
    q->num_parts = a->num_partitions;
    isn_grpc_trace incoming;
    if (isn_grpc_trace_parse(isn_grpc_call_traceparent(call), &incoming)) memcpy(q->parent_span, incoming.span_id, sizeof q->parent_span);
    isn_grpc_trace_child(isn_grpc_call_traceparent(call), &q->trace, q->traceparent);
    snprintf(q->request_id, sizeof q->request_id, "%.79s",
             request->request_id && request->request_id[0] ? request->request_id : q->trace.trace_id);
    snprintf(q->via, sizeof q->via, "%s", via);
    q->call = call;
    q->request = request;
    q->k = k;
    q->start_ns = now;
    q->deadline_ns = agg_deadline_ns(a, isn_grpc_call_timeout_ns(call), request->timeout_ms, now);
    /* Answer with what there is a little before the caller's deadline. */
    q->finish_at_ns = q->deadline_ns - (int64_t)a->config.margin_ms * 1000000LL / 2;
    q->next = a->queries;
    if (a->queries) a->queries->prev = q;
    a->queries = q;
    a->num_queries++;
    /* The query keeps the call until it answers; the call's storage points back at the query. */
    *(agg_query **)isn_grpc_call_app(call) = q;
    isn_grpc_call_hold(call);
    return q;
}

void agg_query_begin(agg *a, agg_query *q, int64_t now) {
    q->parked = false;
    /* Overload is refused whole, here: a query that some partitions answered and others shed would
     * cost their work and still be incomplete. */
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        if (!agg_partition_has_room(&a->partitions[pi])) {
            q->full_partition = pi + 1;
            return;
        }
    /* The caller's own statistics pass through; otherwise the cache may already know them. */
    if (a->config.global_stats && !q->request->global_stats && !agg_stats_lookup(a, q)) {
        agg_stats_start(a, q, now);
        return;
    }
    q->searching = true;
    agg_fanout_start(a, q, now);
}

/* ------------------------------------------------------------------ answers */

static void fail(agg *a, agg_query *q, int status, const char *message);
static void finished(agg *a, agg_query *q);

void agg_query_start_parked(agg *a, agg_query *q, int64_t now) {
    agg_part *parts = calloc(a->num_partitions ? a->num_partitions : 1, sizeof *parts);
    if (!parts) {
        fail(a, q, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "aggregator out of memory");
        finished(a, q);
        return;
    }
    free(q->parts);
    q->parts = parts;
    q->num_parts = a->num_partitions;
    agg_query_begin(a, q, now);
}

/* Lets go of the query's call: true when its client is still there to answer. */
static bool release_call(agg_query *q) {
    isn_grpc_call *call = q->call;
    *(agg_query **)isn_grpc_call_app(call) = NULL;
    return isn_grpc_call_unhold(call);
}

/* The access line of a query (access_log): what a request id or a trace id finds. */
static void log_access(const agg *a, const agg_query *q, int status, const agg_answer *answer) {
    if (!a->config.access_log) return;
    char ms[32], hits[16], coverage[32];
    snprintf(ms, sizeof ms, "%.3f", (double)(agg_now_ns() - q->start_ns) / 1e6);
    if (answer) {
        snprintf(hits, sizeof hits, "%zu", answer->response.n_hits);
        snprintf(coverage, sizeof coverage, "%u/%u", answer->answered, q->num_parts);
    }
    const char *fields[] = {
        "method", "isn.v1.Search/Search",
        "code", isn_grpc_status_name(status),
        "ms", ms,
        "request_id", q->request_id,
        "trace_id", q->trace.trace_id,
        "span", q->trace.span_id,
        "parent_span", q->parent_span[0] ? q->parent_span : NULL,
        "hits", answer ? hits : NULL,
        "coverage", answer ? coverage : NULL,
        "complete", answer ? (answer->complete ? "true" : "false") : NULL,
    };
    log_record(ISN_LOG_INFO, "access", fields, sizeof fields / sizeof fields[0] / 2);
}

/* Answers the call with an error status (a call whose client went away is only released). */
static void fail(agg *a, agg_query *q, int status, const char *message) {
    isn_grpc_call *call = q->call;
    agg_count_status(a, status);
    if (release_call(q)) isn_grpc_call_fail(call, status, "%s", message);
    log_access(a, q, status, NULL);
    q->call = NULL;
}

/* The merged answer, or the status that says why there is none; counted per partition. */
static void answer(agg *a, agg_query *q, int64_t now) {
    agg_answer merged;
    agg_merge_answer(q, now, &merged);
    /* the merge's arrays, for as long as the reply is encoded (taken: the answers it points into are) */
    uint64_t merge_bytes = agg_answer_bytes(&merged);
    isn_grpc_budget_add(&a->budget, merge_bytes);
    for (uint32_t pi = 0; pi < q->num_parts && pi < a->num_partitions; pi++) {
        if (q->parts[pi].state == PART_ANSWERED) a->partitions[pi].answered++;
        else a->partitions[pi].missing++;
    }
    if (merged.status != ISN_GRPC_STATUS_OK) {
        fail(a, q, merged.status, merged.message);
    } else {
        isn_grpc_call *call = q->call;
        int status = release_call(q) ? isn_grpc_call_reply_message(call, &merged.response.base) : ISN_GRPC_STATUS_OK;
        agg_count_status(a, status);
        log_access(a, q, status, &merged);
        q->call = NULL;
        if (!merged.complete) a->metrics.partial++;
        agg_observe_answer(a, (double)(now - q->start_ns) / 1e9);
    }
    agg_answer_free(&merged);
    isn_grpc_budget_release(&a->budget, merge_bytes);
}

/* ------------------------------------------------------------------ life */

static void query_free(agg *a, agg_query *q) {
    agg_fanout_release(a, q);
    isn_grpc_budget_release(&a->budget, q->charged);
    agg_term_stats_free(&q->stats);
    free(q->stats_key);
    free(q->forward);
    free(q->parts);
    if (q->request) isn__v1__search_request__free_unpacked(q->request, NULL);
    if (q->prev) q->prev->next = q->next;
    else a->queries = q->next;
    if (q->next) q->next->prev = q->prev;
    a->num_queries--;
    free(q);
}

/* Answered (or its client gone): the query's time is counted and it is freed. */
static void finished(agg *a, agg_query *q) {
    histogram_observe(&a->metrics.processing, (double)q->processing_ns / 1e9);
    query_free(a, q);
}

void agg_query_step(agg *a, agg_query *q, int64_t now) {
    int64_t work_start = agg_now_ns();
    if (q->abandoned) fail(a, q, ISN_GRPC_STATUS_CANCELLED, "cancelled"); /* only released */
    else if (q->full_partition) {
        char why[200];
        snprintf(why, sizeof why,
                 "the tier is at capacity: every replica of partition %u has as many requests in flight as it answers "
                 "in time (at most max_inflight_per_replica, %u)",
                 q->full_partition - 1, a->config.max_inflight_per_replica);
        a->metrics.shed_at_capacity++;
        fail(a, q, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, why);
    }
    else if (q->parked) {
        if (now < q->finish_at_ns) return;
        fail(a, q, ISN_GRPC_STATUS_DEADLINE_EXCEEDED, "deadline passed while the aggregator reloaded");
    } else {
        if (!q->searching && (now >= q->finish_at_ns || agg_stats_done(a, q))) {
            q->searching = true;
            agg_fanout_start(a, q, now);
        }
        if (q->searching) {
            agg_refusal refusal;
            agg_fanout_state state = agg_fanout_step(a, q, now, &refusal);
            if (state == AGG_FANOUT_REFUSED) fail(a, q, refusal.status, refusal.message);
            else if (state == AGG_FANOUT_DONE || now >= q->finish_at_ns) answer(a, q, now);
        }
    }
    q->processing_ns += agg_now_ns() - work_start;
    if (!q->call) finished(a, q);
}

void agg_query_answer_now(agg *a, agg_query *q, int64_t now) {
    if (q->call && !q->parked) answer(a, q, now);
    else if (q->call) fail(a, q, ISN_GRPC_STATUS_UNAVAILABLE, "aggregator stopping before the query started");
    finished(a, q);
}

void agg_query_fail_now(agg *a, agg_query *q, int status, const char *message) {
    if (q->call) fail(a, q, status, message);
    finished(a, q);
}

void agg_queries_fail_all(agg *a, int status, const char *message) {
    while (a->queries) agg_query_fail_now(a, a->queries, status, message);
}

int64_t agg_query_next_timer(const agg *a, const agg_query *q) {
    int64_t next = q->finish_at_ns;
    if (!q->searching) return next;
    int64_t hedge = agg_fanout_next_timer(a, q);
    return hedge < next ? hedge : next;
}
