/* Merge: the partitions' hits by final score into one top-k, with coverage (partitions answered of
 * total) and why the answer is incomplete when it is. */
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
static void fail_unanswered(agg *a, agg_query *q, bool any_deadline, bool any_shed) {
    int status = any_deadline ? GRPC_STATUS_DEADLINE_EXCEEDED : any_shed ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_UNAVAILABLE;
    const char *summary = any_deadline ? "no partition answered before the deadline"
                          : any_shed   ? "every partition that could be reached shed the query (overloaded)"
                                       : "no partition could be reached";
    int first = -1;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        const agg_part *part = &q->parts[pi];
        if (part->state == PART_FAILED && part->last_message[0] && first < 0) first = (int)pi;
        /* a status of the partitions' own (INTERNAL, DATA_LOSS, ...) is passed on as it is */
        if (!any_deadline && !any_shed && part->state == PART_FAILED && part->last_status > 0 &&
            part->last_status != GRPC_STATUS_UNAVAILABLE && status == GRPC_STATUS_UNAVAILABLE) {
            status = part->last_status;
            summary = "no partition answered";
            first = (int)pi;
        }
    }
    char why[400];
    if (first >= 0) snprintf(why, sizeof why, "%s (partition %d: %s)", summary, first, q->parts[first].last_message);
    else snprintf(why, sizeof why, "%s", summary);
    agg_query_fail(a, q, status, why);
}

void agg_query_finish(agg *a, agg_query *q, int64_t now) {
    uint32_t answered = 0, total_hits = 0;
    bool complete = true, any_deadline = false, any_shed = false;
    const char *reason = "";
    uint64_t matched = 0, slowest_us = 0, slowest_rerank_us = 0;
    Isn__V1__SearchDebug debug = ISN__V1__SEARCH_DEBUG__INIT;
    bool reranked = false;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_part *part = &q->parts[pi];
        if (part->state == PART_ANSWERED) {
            answered++;
            total_hits += part->reply.num_hits;
            matched += part->reply.matched_lower_bound;
            if (part->reply.total_us > slowest_us) slowest_us = part->reply.total_us;
            if (part->reply.rerank_us > slowest_rerank_us) slowest_rerank_us = part->reply.rerank_us;
            if (q->request->ranker && q->request->ranker[0]) reranked = true;
            if (q->request->debug) {
                /* the partitions' work added up; the terms as the partition that knew most of them */
                if (!debug.algorithm_used[0]) debug.algorithm_used = part->reply.algorithm_used;
                if (part->reply.num_terms > debug.num_terms) {
                    debug.num_terms = part->reply.num_terms;
                    debug.num_unknown_terms = part->reply.num_unknown_terms;
                } else if (!debug.num_terms && part->reply.num_unknown_terms > debug.num_unknown_terms)
                    debug.num_unknown_terms = part->reply.num_unknown_terms;
                debug.postings_scored += part->reply.postings_scored;
                debug.docs_evaluated += part->reply.docs_evaluated;
                debug.blocks_decoded += part->reply.blocks_decoded;
            }
            if (!part->reply.complete) {
                complete = false;
                if (!reason[0]) reason = part->reply.incomplete_reason;
            }
            a->partitions[pi].answered++;
        } else {
            a->partitions[pi].missing++;
            if (part->last_status == GRPC_STATUS_DEADLINE_EXCEEDED || part->state == PART_PENDING) any_deadline = true;
            if (part->last_status == GRPC_STATUS_RESOURCE_EXHAUSTED) any_shed = true;
        }
    }
    if (!answered) {
        fail_unanswered(a, q, any_deadline, any_shed);
        return;
    }
    agg_merged_hit *all = malloc((total_hits ? total_hits : 1) * sizeof *all);
    if (!all) {
        agg_query_fail(a, q, GRPC_STATUS_RESOURCE_EXHAUSTED, "aggregator out of memory");
        return;
    }
    uint32_t n = agg_merge_hits(q->parts, a->num_partitions, all);
    if (n > q->k) n = q->k;
    Isn__V1__Hit *hits = calloc(n ? n : 1, sizeof *hits);
    Isn__V1__Hit **hit_ptrs = calloc(n ? n : 1, sizeof *hit_ptrs);
    /* The partitions' stored fields, passed on as they came. */
    size_t num_fields = 0;
    for (uint32_t i = 0; i < n; i++) num_fields += all[i].hit->num_fields;
    Isn__V1__StoredField *fields = calloc(num_fields ? num_fields : 1, sizeof *fields);
    Isn__V1__StoredField **field_ptrs = calloc(num_fields ? num_fields : 1, sizeof *field_ptrs);
    if (!fields || !field_ptrs) {
        free(hits), free(hit_ptrs), free(fields), free(field_ptrs), free(all);
        agg_query_fail(a, q, GRPC_STATUS_RESOURCE_EXHAUSTED, "aggregator out of memory for the hits' stored fields");
        return;
    }
    size_t next_field = 0;
    Isn__V1__SearchResponse response = ISN__V1__SEARCH_RESPONSE__INIT;
    Isn__V1__StageTimes times = ISN__V1__STAGE_TIMES__INIT;
    for (uint32_t i = 0; hits && hit_ptrs && i < n; i++) {
        isn__v1__hit__init(&hits[i]);
        hits[i].external_id = all[i].hit->external_id;
        hits[i].doc = all[i].hit->doc;
        hits[i].score = all[i].hit->score;
        hits[i].l1_score = all[i].hit->l1_score;
        hits[i].n_fields = all[i].hit->num_fields;
        hits[i].fields = field_ptrs + next_field;
        for (uint32_t j = 0; j < all[i].hit->num_fields; j++, next_field++) {
            isn__v1__stored_field__init(&fields[next_field]);
            fields[next_field].name = all[i].hit->fields[j].name;
            fields[next_field].value = all[i].hit->fields[j].value;
            field_ptrs[next_field] = &fields[next_field];
        }
        hit_ptrs[i] = &hits[i];
    }
    response.n_hits = hits && hit_ptrs ? n : 0;
    response.hits = hit_ptrs;
    if (answered < a->num_partitions) {
        complete = false;
        reason = "partition_missing";
    }
    if (!complete && q->request->forbid_partial) {
        free(hits);
        free(hit_ptrs);
        free(all);
        char why[128];
        snprintf(why, sizeof why, "the answer would be partial (%s) and the request forbids partial answers", reason);
        agg_query_fail(a, q, GRPC_STATUS_DEADLINE_EXCEEDED, why);
        return;
    }
    if (!complete) a->metrics.partial++;
    response.complete = complete;
    response.incomplete_reason = (char *)reason;
    response.matched_lower_bound = matched;
    response.device = "agg";
    times.retrieval_us = slowest_us;
    times.rerank_us = reranked ? slowest_rerank_us : 0;
    if (q->request->debug) response.debug = &debug;
    times.total_us = (uint64_t)((now - q->start_ns) / 1000);
    response.times = &times;
    response.request_id = q->request_id; /* the caller's, else the one made for it (the trace id) */
    q->reply_hits = response.n_hits;
    q->reply_answered = answered;
    q->reply_complete = complete;
    response.partitions_answered = answered;
    response.partitions_total = a->num_partitions;
    agg_query_reply(a, q, &response.base);
    agg_observe_answer(a, (double)(now - q->start_ns) / 1e9);
    free(hits);
    free(hit_ptrs);
    free(fields);
    free(field_ptrs);
    free(all);
}
