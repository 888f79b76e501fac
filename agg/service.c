/* The calls isn-agg answers: Search (fanned out), Info (the partitions' totals) and the standard
 * health Check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg/agg_internal.h"
#include "proto/health.pb-c.h"

/* A new query in the list, with its deadline: the call's grpc-timeout, else the request's
 * timeout_ms, else the default. NULL when out of memory. */
static agg_query *query_new(agg *a, grpc_call *call, Isn__V1__SearchRequest *request, uint32_t k, int64_t now) {
    agg_query *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    if (!(q->parts = calloc(a->num_partitions ? a->num_partitions : 1, sizeof *q->parts))) {
        free(q);
        return NULL;
    }
    q->num_parts = a->num_partitions;
    grpc_trace incoming;
    if (grpc_trace_parse(grpc_call_traceparent(call), &incoming)) memcpy(q->parent_span, incoming.span_id, sizeof q->parent_span);
    grpc_trace_child(grpc_call_traceparent(call), &q->trace, q->traceparent);
    snprintf(q->request_id, sizeof q->request_id, "%.79s",
             request->request_id && request->request_id[0] ? request->request_id : q->trace.trace_id);
    q->call = call;
    q->request = request;
    q->k = k;
    q->start_ns = now;
    q->deadline_ns = agg_deadline_ns(a, grpc_call_timeout_ns(call), request->timeout_ms, now);
    /* Answer with what there is a little before the caller's deadline. */
    q->finish_at_ns = q->deadline_ns - (int64_t)a->config.margin_ms * 1000000LL / 2;
    q->next = a->queries;
    if (a->queries) a->queries->prev = q;
    a->queries = q;
    a->num_queries++;
    return q;
}

/* A call answered at once, before it became a query. */
static void fail_call(agg *a, grpc_call *call, int status, const char *message) {
    agg_count_status(a, status);
    grpc_call_fail(call, status, "%s", message);
}

static void handle_search(agg *a, grpc_call *call) {
    int64_t now = agg_now_ns();
    size_t len;
    const uint8_t *message = grpc_call_message(call, &len);
    Isn__V1__SearchRequest *request = isn__v1__search_request__unpack(NULL, len, message);
    if (!request) {
        fail_call(a, call, GRPC_STATUS_INVALID_ARGUMENT, "request is not a valid isn.v1.SearchRequest message");
        return;
    }
    char field[128];
    if (grpc_message_nul_string_field(&isn__v1__search_request__descriptor, message, len, field, sizeof field)) {
        char why[200];
        snprintf(why, sizeof why, "field %s of isn.v1.SearchRequest holds a NUL byte", field);
        fail_call(a, call, GRPC_STATUS_INVALID_ARGUMENT, why);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    char via[GRPC_VIA_MAX + 1], loop[400];
    if (!agg_via_forward(a, grpc_call_via(call), via, sizeof via, loop, sizeof loop)) {
        a->metrics.loop_refusals++;
        log_warn("Search refused: %s", loop);
        fail_call(a, call, GRPC_STATUS_FAILED_PRECONDITION, loop);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    uint32_t k = request->k ? request->k : a->config.default_k;
    if (k > a->config.max_k) {
        char why[128];
        snprintf(why, sizeof why, "k = %u is above the aggregator's max_k %u", k, a->config.max_k);
        fail_call(a, call, GRPC_STATUS_INVALID_ARGUMENT, why);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    agg_query *q = query_new(a, call, request, k, now);
    if (!q) {
        fail_call(a, call, GRPC_STATUS_RESOURCE_EXHAUSTED, "aggregator out of memory");
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    memcpy(q->via, via, sizeof q->via);
    /* The query keeps the call until it answers; the call's storage points back at the query. */
    *(agg_query **)grpc_call_app(call) = q;
    grpc_call_hold(call);
    /* While a reload waits for the queries in progress, a new one waits for the new replica sets. */
    if (a->pending) {
        q->parked = true;
        return;
    }
    agg_query_begin(a, q, now);
    q->processing_ns += agg_now_ns() - now;
    agg_query_progress(a, q, agg_now_ns()); /* every partition may have failed at once */
}

void agg_query_begin(agg *a, agg_query *q, int64_t now) {
    q->parked = false;
    /* The caller's own statistics pass through; otherwise the cache may already know them. */
    if (a->config.global_stats && !q->request->global_stats && !agg_stats_lookup(a, q)) agg_stats_start(a, q, now);
    else agg_search_start(a, q, now);
}

static void handle_info(agg *a, grpc_call *call) {
    Isn__V1__InfoResponse response = ISN__V1__INFO_RESPONSE__INIT;
    uint64_t docs = 0, len = 0;
    for (uint32_t i = 0; i < a->num_partitions; i++) {
        docs += a->partitions[i].num_docs;
        len += a->partitions[i].total_doc_len;
    }
    response.num_docs = docs;
    response.total_doc_len = len;
    response.avg_doc_len = docs ? (double)len / (double)docs : 0;
    response.server_version = "isn-agg " AGG_VERSION;
    agg_count_status(a, GRPC_STATUS_OK);
    grpc_call_reply_message(call, &response.base);
}

/* SERVING while the aggregator can answer (agg_ready); NOT_SERVING while too few partitions have a
 * healthy replica, and once it drains; NOT_FOUND for a service other
 * than "" and isn.v1.Search (the health protocol's rule, as isnd answers). */
static void handle_health(agg *a, grpc_call *call) {
    Grpc__Health__V1__HealthCheckRequest *request =
        grpc_call_unpack(call, &grpc__health__v1__health_check_request__descriptor, NULL);
    if (!request) return;
    const char *service = request->service ? request->service : "";
    bool liveness = !strcmp(service, AGG_HEALTH_LIVENESS);
    bool known = !*service || !strcmp(service, "isn.v1.Search") || liveness;
    if (!known) grpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "unknown service \"%.64s\"", service);
    protobuf_c_message_free_unpacked(&request->base, NULL);
    if (!known) return;
    Grpc__Health__V1__HealthCheckResponse response = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    bool serving = liveness ? !a->draining : agg_ready(a, NULL, 0);
    response.status = serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                              : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    grpc_call_reply_message(call, &response.base);
}

void agg_handle_call(agg *a, grpc_call *call) {
    const char *path = grpc_call_path(call);
    if (grpc_call_timeout_malformed(call))
        fail_call(a, call, GRPC_STATUS_INVALID_ARGUMENT, "malformed grpc-timeout header");
    else if (grpc_call_timeout_expired(call))
        fail_call(a, call, GRPC_STATUS_DEADLINE_EXCEEDED, "grpc-timeout is 0: the deadline had passed on arrival");
    else if (!strcmp(path, "/grpc.health.v1.Health/Check")) handle_health(a, call);
    /* While draining, a call here came on a stream the connection took before its GOAWAY: it is in
     * flight for its client, and answered like any other. */
    else if (!strcmp(path, "/isn.v1.Search/Search")) handle_search(a, call);
    else if (!strcmp(path, "/isn.v1.Search/Info")) handle_info(a, call);
    else {
        char why[200];
        snprintf(why, sizeof why, "unknown method %.150s", path);
        fail_call(a, call, GRPC_STATUS_UNIMPLEMENTED, why);
    }
}

/* ------------------------------------------------------------------ answers */

/* Lets go of the query's call: true when its client is still there to answer. */
static bool release_call(agg_query *q) {
    grpc_call *call = q->call;
    *(agg_query **)grpc_call_app(call) = NULL;
    return grpc_call_unhold(call);
}

/* The access line of a query (access_log): what a request id or a trace id finds. */
static void log_access(const agg *a, const agg_query *q, int status) {
    if (!a->config.access_log) return;
    char ms[32], hits[16], coverage[32];
    snprintf(ms, sizeof ms, "%.3f", (double)(agg_now_ns() - q->start_ns) / 1e6);
    snprintf(hits, sizeof hits, "%u", q->reply_hits);
    snprintf(coverage, sizeof coverage, "%u/%u", q->reply_answered, q->num_parts);
    const char *fields[] = {
        "method", "isn.v1.Search/Search",
        "code", grpc_status_name(status),
        "ms", ms,
        "request_id", q->request_id,
        "trace_id", q->trace.trace_id,
        "span", q->trace.span_id,
        "parent_span", q->parent_span[0] ? q->parent_span : NULL,
        "hits", q->replied ? hits : NULL,
        "coverage", q->replied ? coverage : NULL,
        "complete", q->replied ? (q->reply_complete ? "true" : "false") : NULL,
    };
    log_record(ISN_LOG_INFO, "access", fields, sizeof fields / sizeof fields[0] / 2);
}

void agg_query_reply(agg *a, agg_query *q, const ProtobufCMessage *message) {
    grpc_call *call = q->call;
    int status = release_call(q) ? grpc_call_reply_message(call, message) : GRPC_STATUS_OK;
    agg_count_status(a, status);
    q->replied = true;
    log_access(a, q, status);
    q->call = NULL;
}

void agg_query_fail(agg *a, agg_query *q, int status, const char *message) {
    grpc_call *call = q->call;
    agg_count_status(a, status);
    if (release_call(q)) grpc_call_fail(call, status, "%s", message);
    log_access(a, q, status);
    q->call = NULL;
}
