/* The calls isn-agg answers: Search (fanned out), Info (the partitions' totals) and the standard
 * health Check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg/agg_internal.h"
#include "proto/health.pb-c.h"

/* A new query in the list, with its deadline: the call's grpc-timeout, else the request's
 * timeout_ms, else the default. NULL when out of memory. */
static agg_query *query_new(agg *a, agg_rpc *rpc, Isn__V1__SearchRequest *request, uint32_t k, int64_t now) {
    agg_query *q = calloc(1, sizeof *q + a->num_partitions * sizeof(agg_part));
    if (!q) return NULL;
    q->rpc = rpc;
    q->request = request;
    q->k = k;
    q->start_ns = now;
    uint64_t timeout_ms = agg_rpc_timeout_ms(rpc);
    if (!timeout_ms) timeout_ms = request->timeout_ms;
    if (!timeout_ms) timeout_ms = a->config.default_timeout_ms;
    q->deadline_ns = now + (int64_t)timeout_ms * 1000000LL;
    /* Answer with what there is a little before the caller's deadline. */
    q->finish_at_ns = q->deadline_ns - (int64_t)a->config.margin_ms * 1000000LL / 2;
    q->next = a->queries;
    if (a->queries) a->queries->prev = q;
    a->queries = q;
    a->num_queries++;
    return q;
}

static void handle_search(agg *a, agg_rpc *rpc) {
    int64_t now = agg_now_ns();
    size_t len;
    const uint8_t *message = agg_rpc_message(rpc, &len);
    Isn__V1__SearchRequest *request = isn__v1__search_request__unpack(NULL, len, message);
    if (!request) {
        agg_count_status(a, GRPC_INVALID_ARGUMENT);
        agg_rpc_fail(rpc, GRPC_INVALID_ARGUMENT, "request is not a valid isn.v1.SearchRequest message");
        return;
    }
    uint32_t k = request->k ? request->k : a->config.default_k;
    if (k > a->config.max_k) {
        agg_count_status(a, GRPC_INVALID_ARGUMENT);
        char why[128];
        snprintf(why, sizeof why, "k = %u is above the aggregator's max_k %u", k, a->config.max_k);
        agg_rpc_fail(rpc, GRPC_INVALID_ARGUMENT, why);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    agg_query *q = query_new(a, rpc, request, k, now);
    if (!q) {
        agg_count_status(a, GRPC_RESOURCE_EXHAUSTED);
        agg_rpc_fail(rpc, GRPC_RESOURCE_EXHAUSTED, "aggregator out of memory");
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    /* The caller's own statistics pass through; otherwise the cache may already know them. */
    if (a->config.global_stats && !request->global_stats && !agg_stats_lookup(a, q)) agg_stats_start(a, q, now);
    else agg_search_start(a, q, now);
    q->processing_ns += agg_now_ns() - now;
    agg_query_progress(a, q, agg_now_ns()); /* every partition may have failed at once */
}

static void handle_info(agg *a, agg_rpc *rpc) {
    Isn__V1__InfoResponse response = ISN__V1__INFO_RESPONSE__INIT;
    uint64_t docs = 0, len = 0;
    for (uint32_t i = 0; i < a->num_partitions; i++) {
        docs += a->partitions[i].num_docs;
        len += a->partitions[i].total_doc_len;
    }
    response.num_docs = docs;
    response.total_doc_len = len;
    response.avg_doc_len = docs ? (double)len / (double)docs : 0;
    response.server_version = "isn-agg 0.1";
    size_t size = isn__v1__info_response__get_packed_size(&response);
    uint8_t body[256];
    if (size > sizeof body) {
        agg_rpc_fail(rpc, GRPC_INTERNAL, "Info reply too large");
        return;
    }
    isn__v1__info_response__pack(&response, body);
    agg_count_status(a, GRPC_OK);
    agg_rpc_reply(rpc, body, size);
}

static void handle_health(agg_rpc *rpc) {
    Grpc__Health__V1__HealthCheckResponse response = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    response.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    uint8_t body[16];
    size_t size = grpc__health__v1__health_check_response__pack(&response, body);
    agg_rpc_reply(rpc, body, size);
}

void agg_handle_call(agg *a, agg_rpc *rpc) {
    const char *path = agg_rpc_path(rpc);
    if (!strcmp(path, "/isn.v1.Search/Search")) handle_search(a, rpc);
    else if (!strcmp(path, "/isn.v1.Search/Info")) handle_info(a, rpc);
    else if (!strcmp(path, "/grpc.health.v1.Health/Check")) handle_health(rpc);
    else {
        char why[200];
        snprintf(why, sizeof why, "unknown method %.150s", path);
        agg_count_status(a, GRPC_UNIMPLEMENTED);
        agg_rpc_fail(rpc, GRPC_UNIMPLEMENTED, why);
    }
}
