/* Merge: the partitions' hits by final score into one top-k, with coverage (partitions answered of
 * total) and why the answer is incomplete when it is; or the status that says why there is no
 * answer. It answers no client (agg/query.c does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg/agg_internal.h"

int agg_merged_hit_compare(const void *a, const void *b) {
    const agg_merged_hit *x = a, *y = b;
    if (x->hit->score != y->hit->score) return x->hit->score > y->hit->score ? -1 : 1;
    if (x->partition != y->partition) return x->partition < y->partition ? -1 : 1;
    return x->hit->doc < y->hit->doc ? -1 : x->hit->doc > y->hit->doc;
}

uint32_t agg_merge_hits(const agg_part *parts, uint32_t num_parts, agg_merged_hit *out) {
    uint32_t n = 0;
    for (uint32_t pi = 0; pi < num_parts; pi++)
        if (parts[pi].state == PART_ANSWERED)
            for (uint32_t i = 0; i < parts[pi].reply.num_hits; i++)
                out[n++] = (agg_merged_hit){.hit = &parts[pi].reply.hits[i], .partition = pi};
    qsort(out, n, sizeof *out, agg_merged_hit_compare);
    return n;
}

/* No partition answered: the status says why (deadline before shedding before a partition's own
 * error status before unreachable), with the words of the first partition that said something. */
static void unanswered(const agg_query *q, bool any_deadline, bool any_shed, agg_answer *out) {
    int status = any_deadline ? ISN_GRPC_STATUS_DEADLINE_EXCEEDED : any_shed ? ISN_GRPC_STATUS_RESOURCE_EXHAUSTED : ISN_GRPC_STATUS_UNAVAILABLE;
    const char *summary = any_deadline ? "no partition answered before the deadline"
                          : any_shed   ? "every partition that could be reached shed the query (overloaded)"
                                       : "no partition could be reached";
    int first = -1;
    for (uint32_t pi = 0; pi < q->num_parts; pi++) {
        const agg_part *part = &q->parts[pi];
        if (part->state == PART_FAILED && part->last_message[0] && first < 0) first = (int)pi;
        /* a status of the partitions' own (INTERNAL, DATA_LOSS, ...) is passed on as it is */
        if (!any_deadline && !any_shed && part->state == PART_FAILED && part->last_status > 0 &&
            part->last_status != ISN_GRPC_STATUS_UNAVAILABLE && status == ISN_GRPC_STATUS_UNAVAILABLE) {
            status = part->last_status;
            summary = "no partition answered";
            first = (int)pi;
        }
    }
    out->status = status;
    if (first >= 0) snprintf(out->message, sizeof out->message, "%s (partition %d: %s)", summary, first, q->parts[first].last_message);
    else snprintf(out->message, sizeof out->message, "%s", summary);
}

static void refuse(agg_answer *out, int status, const char *message) {
    out->status = status;
    snprintf(out->message, sizeof out->message, "%s", message);
}

void agg_merge_answer(const agg_query *q, int64_t now, agg_answer *out) {
    memset(out, 0, sizeof *out);
    isn__v1__search_response__init(&out->response);
    isn__v1__stage_times__init(&out->times);
    isn__v1__search_debug__init(&out->debug);
    uint32_t answered = 0, total_hits = 0;
    bool complete = true, any_deadline = false, any_shed = false;
    const char *reason = "";
    uint64_t matched = 0, slowest_us = 0, slowest_rerank_us = 0;
    Isn__V1__SearchDebug *debug = &out->debug;
    bool reranked = false;
    for (uint32_t pi = 0; pi < q->num_parts; pi++) {
        const agg_part *part = &q->parts[pi];
        if (part->state == PART_ANSWERED) {
            answered++;
            total_hits += part->reply.num_hits;
            matched += part->reply.matched_lower_bound;
            /* the slowest partition's own retrieval: its total also counts its queue, from a clock that
             * may start before this aggregator's (isnd counts from when the bytes could have arrived) */
            if (part->reply.retrieval_us > slowest_us) slowest_us = part->reply.retrieval_us;
            if (part->reply.rerank_us > slowest_rerank_us) slowest_rerank_us = part->reply.rerank_us;
            if (q->request->ranker && q->request->ranker[0]) reranked = true;
            if (q->request->debug) {
                /* the partitions' work added up; the terms as the partition that knew most of them */
                if (!debug->algorithm_used[0]) debug->algorithm_used = (char *)part->reply.algorithm_used;
                if (part->reply.num_terms > debug->num_terms) {
                    debug->num_terms = part->reply.num_terms;
                    debug->num_unknown_terms = part->reply.num_unknown_terms;
                } else if (!debug->num_terms && part->reply.num_unknown_terms > debug->num_unknown_terms)
                    debug->num_unknown_terms = part->reply.num_unknown_terms;
                debug->postings_scored += part->reply.postings_scored;
                debug->docs_evaluated += part->reply.docs_evaluated;
                debug->blocks_decoded += part->reply.blocks_decoded;
            }
            if (!part->reply.complete) {
                complete = false;
                if (!reason[0]) reason = part->reply.incomplete_reason;
            }
        } else {
            if (part->last_status == ISN_GRPC_STATUS_DEADLINE_EXCEEDED || part->state == PART_PENDING) any_deadline = true;
            if (part->last_status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED) any_shed = true;
        }
    }
    out->answered = answered;
    if (!answered) {
        unanswered(q, any_deadline, any_shed, out);
        return;
    }
    agg_merged_hit *all = malloc((total_hits ? total_hits : 1) * sizeof *all);
    if (!all) {
        refuse(out, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "aggregator out of memory");
        return;
    }
    uint32_t n = agg_merge_hits(q->parts, q->num_parts, all);
    if (n > q->k) n = q->k;
    /* The partitions' stored fields, passed on as they came. */
    size_t num_fields = 0;
    for (uint32_t i = 0; i < n; i++) num_fields += all[i].hit->num_fields;
    out->hits = calloc(n ? n : 1, sizeof *out->hits);
    out->hit_ptrs = calloc(n ? n : 1, sizeof *out->hit_ptrs);
    out->fields = calloc(num_fields ? num_fields : 1, sizeof *out->fields);
    out->field_ptrs = calloc(num_fields ? num_fields : 1, sizeof *out->field_ptrs);
    if (!out->hits || !out->hit_ptrs || !out->fields || !out->field_ptrs) {
        free(all);
        refuse(out, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "aggregator out of memory for the merged hits");
        return;
    }
    size_t next_field = 0;
    for (uint32_t i = 0; i < n; i++) {
        Isn__V1__Hit *hit = &out->hits[i];
        isn__v1__hit__init(hit);
        hit->external_id = all[i].hit->external_id;
        hit->doc = all[i].hit->doc;
        hit->score = all[i].hit->score;
        hit->l1_score = all[i].hit->l1_score;
        hit->partition = all[i].partition; /* doc numbers a document of that partition's index */
        hit->n_fields = all[i].hit->num_fields;
        hit->fields = out->field_ptrs + next_field;
        for (uint32_t j = 0; j < all[i].hit->num_fields; j++, next_field++) {
            isn__v1__stored_field__init(&out->fields[next_field]);
            out->fields[next_field].name = all[i].hit->fields[j].name;
            out->fields[next_field].value = all[i].hit->fields[j].value;
            out->field_ptrs[next_field] = &out->fields[next_field];
        }
        out->hit_ptrs[i] = hit;
    }
    free(all);
    if (answered < q->num_parts) {
        complete = false;
        reason = "partition_missing";
    }
    if (!complete && q->request->forbid_partial) {
        out->status = ISN_GRPC_STATUS_DEADLINE_EXCEEDED;
        snprintf(out->message, sizeof out->message,
                 "the answer would be partial (%s) and the request forbids partial answers", reason);
        return;
    }
    Isn__V1__SearchResponse *response = &out->response;
    response->n_hits = n;
    response->hits = out->hit_ptrs;
    response->complete = complete;
    response->incomplete_reason = (char *)reason;
    response->matched_lower_bound = matched;
    response->device = "agg";
    out->times.retrieval_us = slowest_us;
    out->times.rerank_us = reranked ? slowest_rerank_us : 0;
    if (q->request->debug) response->debug = debug;
    out->times.total_us = (uint64_t)((now - q->start_ns) / 1000);
    response->times = &out->times;
    response->request_id = (char *)q->request_id; /* the caller's, else the one made for it (the trace id) */
    response->partitions_answered = answered;
    response->partitions_total = q->num_parts;
    out->complete = complete;
    out->status = ISN_GRPC_STATUS_OK;
}

uint64_t agg_answer_bytes(const agg_answer *answer) {
    size_t hits = answer->response.n_hits, fields = 0;
    for (size_t i = 0; i < hits; i++) fields += answer->hits[i].n_fields;
    return (uint64_t)hits * (sizeof *answer->hits + sizeof *answer->hit_ptrs) +
           (uint64_t)fields * (sizeof *answer->fields + sizeof *answer->field_ptrs);
}

void agg_answer_free(agg_answer *answer) {
    free(answer->hits);
    free(answer->hit_ptrs);
    free(answer->fields);
    free(answer->field_ptrs);
    answer->hits = NULL, answer->hit_ptrs = NULL, answer->fields = NULL, answer->field_ptrs = NULL;
}
