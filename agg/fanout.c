/* Fan-out: one attempt per partition, a hedge to another replica when a partition is slower than
 * its recent p95 (the loser is cancelled), a retry elsewhere when a replica fails. It answers no
 * client: it says how the query's partitions stand (agg/query.c answers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg/agg_internal.h"

int64_t agg_deadline_ns(const agg *a, uint64_t header_timeout_ns, uint32_t request_timeout_ms, int64_t now) {
    uint64_t timeout_ns = header_timeout_ns;
    if (!timeout_ns) timeout_ns = (uint64_t)request_timeout_ms * 1000000ull;
    if (!timeout_ns) timeout_ns = (uint64_t)a->config.default_timeout_ms * 1000000ull;
    /* A header of 99999999H is "never": the deadline saturates rather than overflowing the int64 clock. */
    uint64_t deadline = isn_add_sat_u64((uint64_t)(now > 0 ? now : 0), timeout_ns);
    return deadline > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)deadline;
}

uint32_t agg_remaining_ms(const agg *a, const agg_query *q, int64_t now) {
    /* deadline_ns and now are both on the (non-negative) monotonic clock: the difference fits. */
    int64_t left = q->deadline_ns - now - (int64_t)a->config.margin_ms * 1000000LL;
    if (left <= 1000000) return 1;
    return left / 1000000 > UINT32_MAX ? UINT32_MAX : (uint32_t)(left / 1000000);
}

/* The caller's request as every partition gets it, packed once per query: the caller's message, with
 * what the aggregator decides set on it (k, the request id, the global statistics it collected when
 * the caller sent none), and without timeout_ms: the deadline left travels per attempt in grpc-timeout.
 * The bytes are charged to the query. False when out of memory or budget. */
static bool pack_forward(agg *a, agg_query *q) {
    if (q->forward) return true;
    Isn__V1__SearchRequest *request = q->request;
    Isn__V1__GlobalStatistics collected = ISN__V1__GLOBAL_STATISTICS__INIT;
    Isn__V1__TermStatistics *terms = NULL, **term_ptrs = NULL;
    if (!request->global_stats && a->config.global_stats && q->stats.num_docs) {
        terms = calloc(q->stats.num_terms ? q->stats.num_terms : 1, sizeof *terms);
        term_ptrs = calloc(q->stats.num_terms ? q->stats.num_terms : 1, sizeof *term_ptrs);
        if (!terms || !term_ptrs) {
            free(terms);
            free(term_ptrs);
            return false;
        }
        for (uint32_t i = 0; i < q->stats.num_terms; i++) {
            isn__v1__term_statistics__init(&terms[i]);
            terms[i].term = q->stats.terms[i];
            terms[i].df = q->stats.dfs[i];
            term_ptrs[i] = &terms[i];
        }
        collected.num_docs = q->stats.num_docs;
        collected.avg_doc_len = q->stats.avg_doc_len;
        collected.n_terms = q->stats.num_terms;
        collected.terms = term_ptrs;
        request->global_stats = &collected;
    }
    /* Borrowed for the packing only: the unpacked message owns (and frees) its own strings. */
    char *caller_request_id = request->request_id;
    request->request_id = q->request_id;
    request->k = q->k;
    request->timeout_ms = 0;
    size_t len = isn__v1__search_request__get_packed_size(request);
    bool charged = isn_grpc_budget_charge(&a->budget, len);
    if (charged && (q->forward = malloc(len ? len : 1))) {
        isn__v1__search_request__pack(request, q->forward);
        q->forward_len = len;
        q->charged += len;
    } else if (charged) {
        isn_grpc_budget_release(&a->budget, len);
    }
    request->request_id = caller_request_id;
    if (request->global_stats == &collected) request->global_stats = NULL;
    free(terms);
    free(term_ptrs);
    return q->forward != NULL;
}

bool agg_take_extra_token(const agg *a, agg_partition *p, agg_attempt_kind kind) {
    if (kind == ATTEMPT_FIRST) {
        p->extra_tokens += a->config.extra_requests_ratio;
        if (p->extra_tokens > a->config.extra_requests_burst) p->extra_tokens = a->config.extra_requests_burst;
        return true;
    }
    /* A hedge only saves time; a retry saves an answer that is otherwise missing. Hedges come in bursts
     * (a stall delays every query past the p95 at once), so they leave half the burst to retries: a
     * replica that dies right after such a burst still has its requests in flight retried. */
    double reserve = kind == ATTEMPT_HEDGE ? (double)(a->config.extra_requests_burst / 2) : 0.0;
    if (p->extra_tokens < 1.0 + reserve) {
        if (kind == ATTEMPT_HEDGE) p->hedges_denied++;
        else p->retries_denied++;
        return false;
    }
    p->extra_tokens -= 1.0;
    return true;
}

/* Sends the query to one replica of partition pi (not yet tried): a retry or a hedge only to one that
 * has not shed load within its back-off, and only with a token. False when none is left. */
static bool send_attempt(agg *a, agg_query *q, uint32_t pi, agg_attempt_kind kind, int64_t now) {
    agg_partition *p = &a->partitions[pi];
    agg_part *part = &q->parts[pi];
    bool hedge = kind == ATTEMPT_HEDGE, token = false;
    for (;;) {
        int ri = kind == ATTEMPT_FIRST ? agg_choose_replica(p, part->tried) : agg_choose_extra_replica(p, part->tried, now);
        if (ri < 0) return false;
        if (!token && !(token = agg_take_extra_token(a, p, kind))) return false;
        agg_replica *r = &p->replicas[ri];
        part->tried |= 1u << ri;
        agg_connect_state connected = agg_replica_connect(a, r);
        if (connected == AGG_CONNECTING) continue; /* not this one: its connection is being made */
        if (connected == AGG_CONNECT_FAILED) {
            agg_replica_failed(a, r, true, "cannot connect");
            continue;
        }
        char err[256];
        uint32_t timeout_ms = agg_remaining_ms(a, q, now);
        isn_grpc_request forward = {.path = "/isn.v1.Search/Search", .body = q->forward, .body_len = q->forward_len,
                                    .frame = true, .timeout_ms = timeout_ms, .traceparent = q->traceparent, .via = q->via};
        isn_grpc_client_call *call = isn_grpc_start(r->client, &forward, err, sizeof err);
        if (!call) {
            agg_replica_failed(a, r, true, err);
            continue;
        }
        r->unsent = true;
        part->attempts[part->num_attempts++] =
            (agg_attempt){.call = call, .replica = (uint32_t)ri, .sent_ns = now, .timeout_ms = timeout_ms, .hedge = hedge};
        if (!part->first_sent_ns) part->first_sent_ns = now;
        r->inflight++;
        r->requests++;
        a->metrics.upstream_requests++;
        if (hedge) {
            r->hedges++;
            a->metrics.hedges++;
        }
        return true;
    }
}

/* Partition pi has no replica to send to: unreachable, or (DNS named only this isn-agg) a loop. */
static void part_unreachable(agg *a, agg_part *part, uint32_t pi) {
    part->state = PART_FAILED;
    part->last_status = ISN_GRPC_STATUS_UNAVAILABLE;
    const agg_partition *p = &a->partitions[pi];
    bool any_usable = false;
    for (uint32_t i = 0; i < p->num_replicas && !any_usable; i++)
        any_usable = p->replicas[i].address[0] && !p->replicas[i].draining && !p->replicas[i].leads_back;
    if (any_usable) return;
    if (p->own_address[0]) {
        part->loop = true;
        part->last_status = ISN_GRPC_STATUS_FAILED_PRECONDITION;
        snprintf(part->last_message, sizeof part->last_message,
                 AGG_LOOP_PREFIX "DNS name %.60s names this isn-agg's own address %.60s (skipped) and no other replica",
                 p->dns_name, p->own_address);
        return;
    }
    for (uint32_t i = 0; i < p->num_replicas; i++)
        if (p->replicas[i].leads_back) {
            part->loop = true;
            part->last_status = ISN_GRPC_STATUS_FAILED_PRECONDITION;
            snprintf(part->last_message, sizeof part->last_message,
                     AGG_LOOP_PREFIX "replica %.60s leads back to an aggregator already on the request's path (taken "
                     "out; no other replica)", p->replicas[i].address);
            return;
        }
}

void agg_fanout_start(agg *a, agg_query *q, int64_t now) {
    if (!pack_forward(a, q)) {
        for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
            q->parts[pi].state = PART_FAILED;
            q->parts[pi].last_status = ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
            snprintf(q->parts[pi].last_message, sizeof q->parts[pi].last_message,
                     "the aggregator's memory budget (memory_budget_mib %u) has no room for the request it forwards",
                     a->config.memory_budget_mib);
        }
        a->metrics.over_budget++;
        return;
    }
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_part *part = &q->parts[pi];
        part->tried = 0;
        if (!send_attempt(a, q, pi, ATTEMPT_FIRST, now)) part_unreachable(a, part, pi);
    }
}

static void drop_attempt(agg *a, agg_query *q, uint32_t pi, uint32_t i) {
    agg_part *part = &q->parts[pi];
    a->partitions[pi].replicas[part->attempts[i].replica].inflight--;
    isn_grpc_client_call_free(part->attempts[i].call);
    part->attempts[i] = part->attempts[--part->num_attempts];
}

/* Statuses that say the request itself is wrong (a bad field, an unknown ranker, a method or
 * feature the partition lacks): every replica would answer alike, so no retry helps. */
static bool caller_error(int status) {
    return status == ISN_GRPC_STATUS_INVALID_ARGUMENT || status == ISN_GRPC_STATUS_NOT_FOUND ||
           status == ISN_GRPC_STATUS_FAILED_PRECONDITION || status == ISN_GRPC_STATUS_OUT_OF_RANGE ||
           status == ISN_GRPC_STATUS_UNIMPLEMENTED || status == ISN_GRPC_STATUS_PERMISSION_DENIED ||
           status == ISN_GRPC_STATUS_UNAUTHENTICATED;
}

/* Handles finished upstream calls of partition pi; hedges and retries. */
static void progress_part(agg *a, agg_query *q, uint32_t pi, int64_t now) {
    agg_part *part = &q->parts[pi];
    agg_partition *p = &a->partitions[pi];
    for (uint32_t i = 0; i < part->num_attempts && part->state == PART_PENDING;) {
        agg_attempt *at = &part->attempts[i];
        if (!isn_grpc_client_call_done(at->call)) {
            i++;
            continue;
        }
        uint32_t ri = at->replica;
        agg_replica *r = &p->replicas[ri];
        r->inflight--;
        isn_grpc_search_reply reply;
        char err[256];
        bool hedge = at->hedge;
        int64_t sent = at->sent_ns;
        uint32_t timeout_ms = at->timeout_ms;
        /* a stream the replica refused unprocessed (its requests in flight at their limit, or its stream limit
         * lowered under load): busy, as a shed is, not broken */
        bool refused_stream = isn_grpc_result_refused_unprocessed(isn_grpc_client_call_result(at->call));
        bool bad = isn_grpc_search_finish(at->call, &reply, err, sizeof err) != 0;
        part->attempts[i] = part->attempts[--part->num_attempts];
        int status = bad ? -1 : reply.status;
        /* what the replica can take in time: a complete answer well within its timeout, or not */
        bool busy = status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED || refused_stream;
        if (status == ISN_GRPC_STATUS_OK || busy || status == ISN_GRPC_STATUS_DEADLINE_EXCEEDED)
            agg_replica_answered(r, p, (uint64_t)(now - sent) / 1000, timeout_ms, status == ISN_GRPC_STATUS_OK && reply.complete);
        if (status == ISN_GRPC_STATUS_OK) {
            r->consecutive_failures = 0;
            r->shed_backoff_ms = 0;
            uint64_t bytes = agg_reply_bytes(&reply);
            if (!isn_grpc_budget_charge(&a->budget, bytes)) {
                /* the aggregator's own memory is full: this partition's answer cannot be held */
                isn_grpc_search_reply_free(&reply);
                part->state = PART_FAILED;
                part->last_status = ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
                snprintf(part->last_message, sizeof part->last_message,
                         "the aggregator's memory budget (memory_budget_mib %u) has no room for its answer",
                         a->config.memory_budget_mib);
                a->metrics.over_budget++;
                while (part->num_attempts) drop_attempt(a, q, pi, 0);
                return;
            }
            q->charged += bytes;
            agg_record_latency(p, r, (uint32_t)((now - sent) / 1000));
            part->reply = reply;
            part->state = PART_ANSWERED;
            agg_replica_generation_seen(a, pi, ri, reply.generation, "a Search reply");
            if (hedge) {
                r->hedge_wins++;
                a->metrics.hedge_wins++;
            }
            while (part->num_attempts) drop_attempt(a, q, pi, 0); /* cancel the loser */
            return;
        }
        part->last_status = refused_stream ? ISN_GRPC_STATUS_RESOURCE_EXHAUSTED : status; /* busy: the query is shed */
        snprintf(part->last_message, sizeof part->last_message, "%.190s", bad ? err : reply.message);
        if (status == ISN_GRPC_STATUS_FAILED_PRECONDITION && agg_is_loop_message(reply.message)) {
            isn_grpc_search_reply_free(&reply);
            agg_replica_leads_back(a, r, part->last_message);
            if (part->num_attempts == 0 && !(now < q->finish_at_ns && send_attempt(a, q, pi, ATTEMPT_RETRY, now))) {
                part->state = PART_FAILED;
                part->loop = true;
                snprintf(part->last_message, sizeof part->last_message,
                         AGG_LOOP_PREFIX "replica %.60s leads back to an aggregator already on the request's path (%.100s)",
                         r->address, reply.message);
            }
            continue;
        }
        if (caller_error(status)) {
            /* every replica would say the same: the query is refused with the partition's words */
            part->state = PART_FAILED;
            part->caller_error = true;
            if (!bad) isn_grpc_search_reply_free(&reply);
            return;
        }
        if (!bad) isn_grpc_search_reply_free(&reply);
        if (status == -1 || status == ISN_GRPC_STATUS_UNAVAILABLE || status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED ||
            status == ISN_GRPC_STATUS_INTERNAL) {
            /* Shedding (RESOURCE_EXHAUSTED, or a stream refused unprocessed) says busy, not broken: retried
             * elsewhere, but it takes no replica out, or overload would turn into an outage. */
            if (busy) {
                /* no retry or hedge goes to it until its back-off (doubling while it keeps shedding) ends */
                a->metrics.upstream_failures++, r->failures++;
                r->shed_backoff_ms = r->shed_backoff_ms ? r->shed_backoff_ms * 2 : AGG_SHED_BACKOFF_MIN_MS;
                if (r->shed_backoff_ms > AGG_SHED_BACKOFF_MAX_MS) r->shed_backoff_ms = AGG_SHED_BACKOFF_MAX_MS;
                r->shed_until_ns = now + (int64_t)r->shed_backoff_ms * 1000000LL;
            } else
                agg_replica_failed(a, r, status == -1, status == -1 ? "transport error" : "error status");
            /* Another replica may still make it in time. */
            if (part->num_attempts == 0 && now < q->finish_at_ns && send_attempt(a, q, pi, ATTEMPT_RETRY, now))
                a->metrics.retries++;
        }
    }
    if (part->state != PART_PENDING) return;
    if (part->num_attempts == 0) {
        part->state = PART_FAILED;
        return;
    }
    /* Hedge: one attempt out for longer than this partition's recent p95. */
    if (a->config.hedge && !part->hedged && part->num_attempts == 1 &&
        now - part->attempts[0].sent_ns >= agg_hedge_delay_ns(a, p) && now < q->finish_at_ns) {
        part->hedged = true; /* once: a hedge refused now (no token, no replica) is not asked again */
        send_attempt(a, q, pi, ATTEMPT_HEDGE, now);
    }
}

uint64_t agg_reply_bytes(const isn_grpc_search_reply *reply) {
    uint64_t bytes = (uint64_t)reply->num_hits * sizeof *reply->hits;
    for (uint32_t i = 0; i < reply->num_hits; i++) {
        const isn_grpc_hit *h = &reply->hits[i];
        bytes += (h->external_id ? strlen(h->external_id) + 1 : 0) + (uint64_t)h->num_fields * sizeof *h->fields;
        for (uint32_t j = 0; j < h->num_fields; j++)
            bytes += (h->fields[j].name ? strlen(h->fields[j].name) + 1 : 0) + (h->fields[j].value ? strlen(h->fields[j].value) + 1 : 0);
    }
    return bytes;
}

int64_t agg_fanout_next_timer(const agg *a, const agg_query *q) {
    int64_t next = INT64_MAX;
    if (!a->config.hedge) return next;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        const agg_part *part = &q->parts[pi];
        if (part->state != PART_PENDING || part->hedged || part->num_attempts != 1) continue;
        int64_t hedge_at = part->attempts[0].sent_ns + agg_hedge_delay_ns(a, &a->partitions[pi]);
        if (hedge_at < next) next = hedge_at;
    }
    return next;
}

agg_fanout_state agg_fanout_step(agg *a, agg_query *q, int64_t now, agg_refusal *refusal) {
    bool pending = false;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_part *part = &q->parts[pi];
        if (part->state == PART_PENDING) progress_part(a, q, pi, now);
        if (part->loop) {
            /* a configuration that loops: the client hears of it now, not as a partial answer */
            refusal->status = ISN_GRPC_STATUS_FAILED_PRECONDITION;
            snprintf(refusal->message, sizeof refusal->message, AGG_LOOP_PREFIX "partition %u: %s", pi,
                     part->last_message + strlen(AGG_LOOP_PREFIX));
            return AGG_FANOUT_REFUSED;
        }
        if (part->caller_error) {
            refusal->status = part->last_status;
            snprintf(refusal->message, sizeof refusal->message, "partition %u: %s", pi, part->last_message);
            return AGG_FANOUT_REFUSED;
        }
        if (part->state == PART_PENDING) pending = true;
    }
    return pending ? AGG_FANOUT_PENDING : AGG_FANOUT_DONE;
}

void agg_fanout_release(agg *a, agg_query *q) {
    /* a parked query that failed before a reload gave it new parts has as many as it was made with */
    for (uint32_t pi = 0; pi < q->num_parts; pi++) {
        agg_part *part = &q->parts[pi];
        while (part->num_attempts) drop_attempt(a, q, pi, 0);
        agg_stats_info_free(a, part, pi);
        isn_grpc_search_reply_free(&part->reply);
    }
}
