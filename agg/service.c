/* The calls isn-agg answers: Search (fanned out), Info (the partitions' totals) and the standard
 * health Check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg/agg_internal.h"
#include "proto/health.pb-c.h"

/* A call answered at once, before it became a query. */
static void fail_call(agg *a, isn_grpc_call *call, int status, const char *message) {
    agg_count_status(a, status);
    isn_grpc_call_fail(call, status, "%s", message);
}

static void handle_search(agg *a, isn_grpc_call *call) {
    int64_t now = agg_now_ns();
    size_t len;
    const uint8_t *message = isn_grpc_call_message(call, &len);
    Isn__V1__SearchRequest *request = isn__v1__search_request__unpack(NULL, len, message);
    if (!request) {
        fail_call(a, call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "request is not a valid isn.v1.SearchRequest message");
        return;
    }
    char field[128];
    if (isn_grpc_message_nul_string_field(&isn__v1__search_request__descriptor, message, len, field, sizeof field)) {
        char why[200];
        snprintf(why, sizeof why, "field %s of isn.v1.SearchRequest holds a NUL byte", field);
        fail_call(a, call, ISN_GRPC_STATUS_INVALID_ARGUMENT, why);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    char via[ISN_GRPC_VIA_MAX + 1], loop[400];
    if (!agg_via_forward(a, isn_grpc_call_via(call), via, sizeof via, loop, sizeof loop)) {
        a->metrics.loop_refusals++;
        log_warn("Search refused: %s", loop);
        fail_call(a, call, ISN_GRPC_STATUS_FAILED_PRECONDITION, loop);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    uint32_t k = request->k ? request->k : a->config.default_k;
    if (k > a->config.max_k) {
        char why[128];
        snprintf(why, sizeof why, "k = %u is above the aggregator's max_k %u", k, a->config.max_k);
        fail_call(a, call, ISN_GRPC_STATUS_INVALID_ARGUMENT, why);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    bool over_budget;
    agg_query *q = agg_query_new(a, call, request, k, via, now, &over_budget);
    if (!q) {
        char why[200];
        snprintf(why, sizeof why,
                 over_budget ? "the aggregator's memory budget (memory_budget_mib %u) has no room for another query"
                             : "aggregator out of memory",
                 a->config.memory_budget_mib);
        fail_call(a, call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, why);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    /* While a reload waits for the queries in progress, a new one waits for the new replica sets. */
    if (a->pending) {
        q->parked = true;
        return;
    }
    agg_query_begin(a, q, now);
    q->processing_ns += agg_now_ns() - now;
    agg_query_step(a, q, agg_now_ns()); /* every partition may have failed at once */
}

static void handle_info(agg *a, isn_grpc_call *call) {
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
    agg_count_status(a, ISN_GRPC_STATUS_OK);
    isn_grpc_call_reply_message(call, &response.base);
}

/* SERVING while the aggregator can answer (agg_ready); NOT_SERVING while too few partitions have a
 * healthy replica, and once it drains; NOT_FOUND for a service other
 * than "" and isn.v1.Search (the health protocol's rule, as isnd answers). */
static void handle_health(agg *a, isn_grpc_call *call) {
    Grpc__Health__V1__HealthCheckRequest *request =
        isn_grpc_call_unpack(call, &grpc__health__v1__health_check_request__descriptor, NULL);
    if (!request) return;
    const char *service = request->service ? request->service : "";
    bool liveness = !strcmp(service, AGG_HEALTH_LIVENESS);
    bool known = !*service || !strcmp(service, "isn.v1.Search") || liveness;
    if (!known) isn_grpc_call_fail(call, ISN_GRPC_STATUS_NOT_FOUND, "unknown service \"%.64s\"", service);
    protobuf_c_message_free_unpacked(&request->base, NULL);
    if (!known) return;
    Grpc__Health__V1__HealthCheckResponse response = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    bool serving = liveness ? !a->draining : agg_ready(a, NULL, 0);
    response.status = serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                              : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    isn_grpc_call_reply_message(call, &response.base);
}

void agg_handle_call(agg *a, isn_grpc_call *call) {
    const char *path = isn_grpc_call_path(call);
    if (isn_grpc_call_timeout_malformed(call))
        fail_call(a, call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "malformed grpc-timeout header");
    else if (isn_grpc_call_timeout_expired(call))
        fail_call(a, call, ISN_GRPC_STATUS_DEADLINE_EXCEEDED, "grpc-timeout is 0: the deadline had passed on arrival");
    else if (!strcmp(path, "/grpc.health.v1.Health/Check")) handle_health(a, call);
    /* While draining, a call here came on a stream the connection took before its GOAWAY: it is in
     * flight for its client, and answered like any other. */
    else if (!strcmp(path, "/isn.v1.Search/Search")) handle_search(a, call);
    else if (!strcmp(path, "/isn.v1.Search/Info")) handle_info(a, call);
    else {
        char why[200];
        snprintf(why, sizeof why, "unknown method %.150s", path);
        fail_call(a, call, ISN_GRPC_STATUS_UNIMPLEMENTED, why);
    }
}
