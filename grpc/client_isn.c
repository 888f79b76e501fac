/* isn.v1 and grpc.health.v1 calls on top of the raw client: protobuf-c in, plain structs out. */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/server.h"
#include "grpc/client.h"
#include "proto/health.pb-c.h"
#include "proto/isn.pb-c.h"

#define WAIT_SLACK_MS 5000
#define SEARCH_PATH "/isn.v1.Search/Search"

/* Starts a call with `body` (NULL: it could not be made, out of memory) and frees the body. */
static isn_grpc_client_call *start_with_body(isn_grpc_client *client, const char *path, uint8_t *body, size_t len,
                                             uint32_t timeout_ms, const char *traceparent, const char *via, char *err,
                                             size_t err_len) {
    if (!body) {
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    isn_grpc_request request = {.path = path, .body = body, .body_len = len, .frame = true, .timeout_ms = timeout_ms,
                                .traceparent = traceparent, .via = via};
    isn_grpc_client_call *call = isn_grpc_start(client, &request, err, err_len);
    free(body);
    return call;
}

/* The message's wire form, malloc'd (NULL when out of memory), its length in *len. */
static uint8_t *pack_message(const ProtobufCMessage *message, size_t *len) {
    *len = protobuf_c_message_get_packed_size(message);
    uint8_t *body = malloc(*len ? *len : 1);
    if (body) protobuf_c_message_pack(message, body);
    return body;
}

static isn_grpc_client_call *start_message(isn_grpc_client *client, const char *path, const ProtobufCMessage *message,
                                    uint32_t timeout_ms, const char *traceparent, const char *via, char *err,
                                    size_t err_len) {
    size_t size;
    uint8_t *body = pack_message(message, &size);
    return start_with_body(client, path, body, size, timeout_ms, traceparent, via, err, err_len);
}

/* The status of a finished call: its grpc-status, or -1 with what happened instead in `message`. */
static int call_status(const isn_grpc_result *result, char *message, size_t message_len) {
    if (result->grpc_status >= 0) {
        if (message_len) snprintf(message, message_len, "%s", result->grpc_message);
        return result->grpc_status;
    }
    /* gRPC's mapping of HTTP/2 errors: a stream refused unprocessed is UNAVAILABLE, safe to retry (a server
     * that lowered its concurrent streams refuses those a client opened before it heard) */
    if (isn_grpc_result_refused_unprocessed(result)) {
        if (message_len) snprintf(message, message_len, "the server refused the stream unprocessed (REFUSED_STREAM)");
        return ISN_GRPC_STATUS_UNAVAILABLE;
    }
    if (!message_len) return -1;
    if (result->reset) snprintf(message, message_len, "stream reset by the server (HTTP/2 error %u)", result->reset_code);
    else if (result->http_status && result->http_status != 200)
        snprintf(message, message_len, "HTTP status %d (not a gRPC reply)", result->http_status);
    else snprintf(message, message_len, "%s", result->grpc_message[0] ? result->grpc_message : "no gRPC status");
    return -1;
}

/* Waits up to `limit_ms` (-1: no limit) for the call to finish: the call, or NULL with err (the
 * call freed; also NULL when `call` is, the start's err kept). */
static isn_grpc_client_call *wait_finished(isn_grpc_client *client, isn_grpc_client_call *call, int limit_ms, char *err,
                                    size_t err_len) {
    if (call && isn_grpc_wait(client, call, limit_ms, err, err_len) < 0) {
        isn_grpc_client_call_free(call);
        return NULL;
    }
    return call;
}

/* Reads a finished call and frees it. A call that failed: NULL, its status in *status and why in
 * `message`. One that answered OK: *status 0 and the reply unpacked as `type` (free it with
 * protobuf_c_message_free_unpacked), or NULL when the reply does not parse as one. */
static void *take_reply(isn_grpc_client_call *call, const ProtobufCMessageDescriptor *type, int *status, char *message,
                        size_t message_len) {
    const isn_grpc_result *result = isn_grpc_client_call_result(call);
    *status = call_status(result, message, message_len);
    ProtobufCMessage *reply = NULL;
    if (*status == 0) reply = protobuf_c_message_unpack(type, NULL, result->message_len, result->message);
    isn_grpc_client_call_free(call);
    return reply;
}

/* ------------------------------------------------------------------ Search */

uint8_t *isn_grpc_search_request_pack(const isn_grpc_search_request *request, size_t *len) {
    Isn__V1__SearchRequest message = ISN__V1__SEARCH_REQUEST__INIT;
    Isn__V1__GlobalStatistics global = ISN__V1__GLOBAL_STATISTICS__INIT;
    message.query = (char *)(request->query ? request->query : "");
    message.n_terms = request->num_terms;
    message.terms = (char **)request->terms;
    message.k = request->k;
    message.mode = (Isn__V1__Mode)request->mode;
    message.algorithm = (char *)(request->algorithm ? request->algorithm : "");
    message.request_id = (char *)(request->request_id ? request->request_id : "");
    message.debug = request->debug;
    message.ranker = (char *)(request->ranker ? request->ranker : "");
    message.n1 = request->n1;
    message.n_stored_fields = request->num_stored_fields;
    message.stored_fields = (char **)request->stored_fields;
    message.forbid_partial = request->forbid_partial;
    Isn__V1__TermStatistics *stats = NULL, **stat_ptrs = NULL;
    if (request->global_num_docs || request->num_global_terms) {
        global.num_docs = request->global_num_docs;
        global.avg_doc_len = request->global_avg_doc_len;
        if (request->num_global_terms) {
            stats = calloc(request->num_global_terms, sizeof *stats);
            stat_ptrs = calloc(request->num_global_terms, sizeof *stat_ptrs);
            if (!stats || !stat_ptrs) {
                free(stats);
                free(stat_ptrs);
                return NULL;
            }
            for (uint32_t i = 0; i < request->num_global_terms; i++) {
                isn__v1__term_statistics__init(&stats[i]);
                stats[i].term = (char *)request->global_terms[i];
                stats[i].df = request->global_dfs[i];
                stat_ptrs[i] = &stats[i];
            }
            global.n_terms = request->num_global_terms;
            global.terms = stat_ptrs;
        }
        message.global_stats = &global;
    }
    uint8_t *body = pack_message(&message.base, len);
    free(stats);
    free(stat_ptrs);
    return body;
}

isn_grpc_client_call *isn_grpc_search_start_packed(isn_grpc_client *client, const uint8_t *body, size_t len,
                                                   const char *timeout_header, char *err, size_t err_len) {
    isn_grpc_request request = {
        .path = SEARCH_PATH, .body = body, .body_len = len, .frame = true, .timeout_header = timeout_header};
    return isn_grpc_start(client, &request, err, err_len);
}

isn_grpc_client_call *isn_grpc_search_start(isn_grpc_client *client, const isn_grpc_search_request *request, char *err,
                                     size_t err_len) {
    size_t len = 0;
    uint8_t *body = isn_grpc_search_request_pack(request, &len);
    return start_with_body(client, SEARCH_PATH, body, len, request->timeout_ms, request->traceparent, request->via, err,
                           err_len);
}

static void copy_text(char *out, size_t out_len, const char *in) { snprintf(out, out_len, "%s", in ? in : ""); }

int isn_grpc_search_finish(isn_grpc_client_call *call, isn_grpc_search_reply *reply, char *err, size_t err_len) {
    memset(reply, 0, sizeof *reply);
    Isn__V1__SearchResponse *response =
        take_reply(call, &isn__v1__search_response__descriptor, &reply->status, reply->message, sizeof reply->message);
    if (reply->status != 0) return 0;
    if (!response) return isn_error(err, err_len, "the reply is not a valid isn.v1.SearchResponse");
    int rc = 0;
    reply->hits = calloc(response->n_hits ? response->n_hits : 1, sizeof *reply->hits);
    if (!reply->hits) rc = isn_error(err, err_len, "out of memory");
    for (size_t i = 0; rc == 0 && i < response->n_hits; i++) {
        const Isn__V1__Hit *hit = response->hits[i];
        isn_grpc_hit *out = &reply->hits[i];
        out->external_id = strdup(hit->external_id ? hit->external_id : "");
        if (!out->external_id) rc = isn_error(err, err_len, "out of memory");
        out->doc = hit->doc;
        out->score = hit->score;
        out->l1_score = hit->l1_score;
        out->partition = hit->partition;
        reply->num_hits++;
        if (rc == 0 && hit->n_fields && !(out->fields = calloc(hit->n_fields, sizeof *out->fields)))
            rc = isn_error(err, err_len, "out of memory");
        for (size_t j = 0; rc == 0 && j < hit->n_fields; j++) {
            out->fields[j].name = strdup(hit->fields[j]->name ? hit->fields[j]->name : "");
            out->fields[j].value = strdup(hit->fields[j]->value ? hit->fields[j]->value : "");
            out->num_fields++;
            if (!out->fields[j].name || !out->fields[j].value) rc = isn_error(err, err_len, "out of memory");
        }
    }
    reply->complete = response->complete;
    copy_text(reply->incomplete_reason, sizeof reply->incomplete_reason, response->incomplete_reason);
    reply->matched_lower_bound = response->matched_lower_bound;
    copy_text(reply->device, sizeof reply->device, response->device);
    reply->partition_id = response->partition_id;
    reply->partitions_answered = response->partitions_answered;
    reply->partitions_total = response->partitions_total;
    copy_text(reply->generation, sizeof reply->generation, response->generation);
    reply->generation_built_unix = response->generation_built_unix;
    if (response->times) {
        reply->queue_us = response->times->queue_us;
        reply->retrieval_us = response->times->retrieval_us;
        reply->rerank_us = response->times->rerank_us;
        reply->total_us = response->times->total_us;
    }
    if (response->debug) {
        copy_text(reply->algorithm_used, sizeof reply->algorithm_used, response->debug->algorithm_used);
        reply->num_terms = response->debug->num_terms;
        reply->num_unknown_terms = response->debug->num_unknown_terms;
        reply->postings_scored = response->debug->postings_scored;
        reply->docs_evaluated = response->debug->docs_evaluated;
        reply->blocks_decoded = response->debug->blocks_decoded;
    }
    isn__v1__search_response__free_unpacked(response, NULL);
    if (rc != 0) isn_grpc_search_reply_free(reply);
    return rc;
}

/* SearchResponse.complete's field number, looked up once rather than for every reply. */
static uint32_t complete_field_number;
static pthread_once_t complete_field_once = PTHREAD_ONCE_INIT;

static void find_complete_field(void) {
    const ProtobufCFieldDescriptor *field =
        protobuf_c_message_descriptor_get_field_by_name(&isn__v1__search_response__descriptor, "complete");
    complete_field_number = field ? field->id : 0; /* 0: no such field, and every OK reply is an error */
}

int isn_grpc_search_finish_status(isn_grpc_client_call *call, int *status, bool *complete) {
    const isn_grpc_result *result = isn_grpc_client_call_result(call);
    *status = call_status(result, NULL, 0);
    *complete = false;
    int rc = 0;
    if (*status == 0) {
        pthread_once(&complete_field_once, find_complete_field);
        uint64_t value;
        rc = complete_field_number &&
                     isn_grpc_message_varint_field(result->message, result->message_len, complete_field_number, &value)
                 ? 0
                 : -1;
        *complete = rc == 0 && value != 0;
    }
    isn_grpc_client_call_free(call);
    return rc;
}

int isn_grpc_search(isn_grpc_client *client, const isn_grpc_search_request *request, isn_grpc_search_reply *reply,
                    char *err, size_t err_len) {
    memset(reply, 0, sizeof *reply);
    /* a timeout of weeks: wait without a limit rather than overflow an int of ms */
    int limit = request->timeout_ms && request->timeout_ms <= INT_MAX - WAIT_SLACK_MS
                    ? (int)request->timeout_ms + WAIT_SLACK_MS
                    : -1;
    isn_grpc_client_call *call = wait_finished(client, isn_grpc_search_start(client, request, err, err_len), limit, err, err_len);
    return call ? isn_grpc_search_finish(call, reply, err, err_len) : -1;
}

void isn_grpc_search_reply_free(isn_grpc_search_reply *reply) {
    for (uint32_t i = 0; i < reply->num_hits; i++) {
        free(reply->hits[i].external_id);
        for (uint32_t j = 0; j < reply->hits[i].num_fields; j++) {
            free(reply->hits[i].fields[j].name);
            free(reply->hits[i].fields[j].value);
        }
        free(reply->hits[i].fields);
    }
    free(reply->hits);
    reply->hits = NULL;
    reply->num_hits = 0;
}

/* ------------------------------------------------------------------ Info and Health */

int isn_grpc_info(isn_grpc_client *client, const char *const *terms, uint32_t num_terms, bool analyze, int timeout_ms,
                  isn_grpc_info_reply *reply, char *err, size_t err_len) {
    memset(reply, 0, sizeof *reply);
    Isn__V1__InfoRequest message = ISN__V1__INFO_REQUEST__INIT;
    message.n_terms = num_terms;
    message.terms = (char **)terms;
    message.analyze = analyze;
    isn_grpc_client_call *call =
        wait_finished(client, start_message(client, "/isn.v1.Search/Info", &message.base, 0, NULL, NULL, err, err_len),
                      timeout_ms, err, err_len);
    if (!call) return -1;
    Isn__V1__InfoResponse *response =
        take_reply(call, &isn__v1__info_response__descriptor, &reply->status, reply->message, sizeof reply->message);
    if (reply->status != 0) return 0;
    if (!response) return isn_error(err, err_len, "the reply is not a valid isn.v1.InfoResponse");
    reply->partition_id = response->partition_id;
    reply->num_docs = response->num_docs;
    reply->index_version = response->index_version;
    reply->num_terms = response->num_terms;
    reply->num_postings = response->num_postings;
    reply->index_bytes = response->index_bytes;
    reply->total_doc_len = response->total_doc_len;
    reply->avg_doc_len = response->avg_doc_len;
    reply->bm25_k1 = response->bm25_k1;
    reply->bm25_b = response->bm25_b;
    copy_text(reply->server_version, sizeof reply->server_version, response->server_version);
    copy_text(reply->generation, sizeof reply->generation, response->generation);
    reply->generation_built_unix = response->generation_built_unix;
    if (response->analyzer) {
        reply->stem = response->analyzer->stem;
        reply->stopwords = response->analyzer->stopwords;
    }
    int rc = 0;
    if (response->n_terms) {
        reply->terms = calloc(response->n_terms, sizeof *reply->terms);
        if (!reply->terms) rc = isn_error(err, err_len, "out of memory");
        for (size_t i = 0; rc == 0 && i < response->n_terms; i++) {
            isn_grpc_term_info *t = &reply->terms[i];
            t->term = strdup(response->terms[i]->term ? response->terms[i]->term : "");
            t->index_term = strdup(response->terms[i]->index_term ? response->terms[i]->index_term : "");
            t->found = response->terms[i]->found;
            t->df = response->terms[i]->df;
            t->cf = response->terms[i]->cf;
            reply->num_term_infos++;
            if (!t->term || !t->index_term) rc = isn_error(err, err_len, "out of memory");
        }
    }
    isn__v1__info_response__free_unpacked(response, NULL);
    if (rc != 0) isn_grpc_info_reply_free(reply);
    return rc;
}

void isn_grpc_info_reply_free(isn_grpc_info_reply *reply) {
    for (uint32_t i = 0; i < reply->num_term_infos; i++) {
        free(reply->terms[i].term);
        free(reply->terms[i].index_term);
    }
    free(reply->terms);
    reply->terms = NULL;
    reply->num_term_infos = 0;
}

int isn_grpc_health_check(isn_grpc_client *client, const char *service, int *serving, char *err, size_t err_len) {
    Grpc__Health__V1__HealthCheckRequest message = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    message.service = (char *)(service ? service : "");
    isn_grpc_client_call *call = wait_finished(
        client, start_message(client, "/grpc.health.v1.Health/Check", &message.base, 0, NULL, NULL, err, err_len), -1, err, err_len);
    if (!call) return -1;
    char why[512];
    int status;
    Grpc__Health__V1__HealthCheckResponse *response =
        take_reply(call, &grpc__health__v1__health_check_response__descriptor, &status, why, sizeof why);
    *serving = 0;
    if (response) {
        *serving = response->status;
        grpc__health__v1__health_check_response__free_unpacked(response, NULL);
    } else if (status == 0) {
        status = -1;
        snprintf(why, sizeof why, "the reply is not a valid HealthCheckResponse");
    }
    if (status != 0) isn_error(err, err_len, "%s", why);
    return status;
}
