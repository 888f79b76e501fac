/* What a worker does with one Search job: analysis (or pre-analyzed terms), global statistics,
 * the first stage, and packing the reply, so the loop thread only copies bytes out. */
#include "daemon/search_job.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/grpc_framing.h"

struct search_worker {
    const isn_index *index;
    isn_searcher *searcher;
    uint32_t id;
    uint32_t capacity; /* k the scratch below holds */
    isn_hit *hits;
    Isn__V1__Hit *pb_hits;
    Isn__V1__Hit **pb_hit_ptrs;
    byte_buffer id_chars; /* NUL-terminated external ids of the hits */
    isn_query_term terms[ISN_MAX_QUERY_TERMS];
};

uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool ensure_capacity(search_worker *w, uint32_t k) {
    if (k <= w->capacity) return true;
    isn_hit *hits = realloc(w->hits, k * sizeof *hits);
    if (hits) w->hits = hits;
    Isn__V1__Hit *pb_hits = realloc(w->pb_hits, k * sizeof *pb_hits);
    if (pb_hits) w->pb_hits = pb_hits;
    Isn__V1__Hit **ptrs = realloc(w->pb_hit_ptrs, k * sizeof *ptrs);
    if (ptrs) w->pb_hit_ptrs = ptrs;
    if (!hits || !pb_hits || !ptrs) return false;
    w->capacity = k;
    return true;
}

search_worker *search_worker_new(const isn_index *index, uint32_t id, uint32_t max_k) {
    search_worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->index = index;
    w->id = id;
    w->searcher = isn_searcher_new(index);
    if (!w->searcher || !ensure_capacity(w, max_k < 16 ? 16 : max_k)) {
        search_worker_free(w);
        return NULL;
    }
    return w;
}

void search_worker_free(search_worker *w) {
    if (!w) return;
    if (w->searcher) isn_searcher_free(w->searcher);
    free(w->hits);
    free(w->pb_hits);
    free(w->pb_hit_ptrs);
    buffer_free(&w->id_chars);
    free(w);
}

static void fail_job(search_job *job, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_job(search_job *job, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job->message, sizeof job->message, fmt, ap);
    va_end(ap);
    job->status = status;
    job->reply.len = 0;
}

/* Pre-analyzed terms: looked up as given; repeats raise the count; terms absent here are counted. */
static int query_from_terms(search_worker *w, const Isn__V1__SearchRequest *request, isn_query *query,
                            search_job *job) {
    query->terms = w->terms;
    query->num_terms = 0;
    query->num_unknown = 0;
    for (size_t i = 0; i < request->n_terms; i++) {
        const char *text = request->terms[i];
        uint32_t term_id;
        if (!isn_index_find_term(w->index, text, strlen(text), &term_id)) {
            query->num_unknown++;
            continue;
        }
        uint32_t j = 0;
        while (j < query->num_terms && w->terms[j].term_id != term_id) j++;
        if (j < query->num_terms) {
            w->terms[j].count++;
            continue;
        }
        if (query->num_terms == ISN_MAX_QUERY_TERMS) {
            fail_job(job, GRPC_STATUS_INVALID_ARGUMENT, "query has more than %d distinct terms", ISN_MAX_QUERY_TERMS);
            return -1;
        }
        isn_term_stats stats;
        isn_index_term_stats(w->index, term_id, &stats);
        w->terms[query->num_terms++] = (isn_query_term){.term_id = term_id, .count = 1, .df = stats.df};
    }
    return 0;
}

static void apply_global_stats(search_worker *w, const Isn__V1__GlobalStatistics *global, isn_query *query,
                               isn_search_options *options) {
    options->num_docs = global->num_docs;
    for (size_t i = 0; i < global->n_terms; i++) {
        const Isn__V1__TermStatistics *ts = global->terms[i];
        uint32_t term_id;
        if (!ts->term || !isn_index_find_term(w->index, ts->term, strlen(ts->term), &term_id)) continue;
        for (uint32_t j = 0; j < query->num_terms; j++)
            if (query->terms[j].term_id == term_id) query->terms[j].df = (uint32_t)ts->df;
    }
}

static void pack_reply(search_worker *w, search_job *job, const isn_search_stats *stats, const isn_query *query) {
    const Isn__V1__SearchRequest *request = job->request;
    w->id_chars.len = 0;
    for (uint32_t i = 0; i < job->num_hits; i++) {
        size_t len;
        const char *id = isn_index_doc_id(w->index, w->hits[i].doc, &len);
        isn__v1__hit__init(&w->pb_hits[i]);
        w->pb_hits[i].doc = w->hits[i].doc;
        w->pb_hits[i].score = w->hits[i].score;
        w->pb_hits[i].l1_score = w->hits[i].score;
        /* Offsets now, pointers after the buffer stops growing. */
        w->pb_hits[i].external_id = (char *)(uintptr_t)w->id_chars.len;
        if (!buffer_append(&w->id_chars, id, len) || !buffer_append(&w->id_chars, "", 1)) {
            fail_job(job, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for reply ids");
            return;
        }
    }
    for (uint32_t i = 0; i < job->num_hits; i++) {
        w->pb_hits[i].external_id = (char *)w->id_chars.data + (uintptr_t)w->pb_hits[i].external_id;
        w->pb_hit_ptrs[i] = &w->pb_hits[i];
    }

    Isn__V1__SearchResponse response = ISN__V1__SEARCH_RESPONSE__INIT;
    Isn__V1__StageTimes times = ISN__V1__STAGE_TIMES__INIT;
    Isn__V1__SearchDebug debug = ISN__V1__SEARCH_DEBUG__INIT;
    response.n_hits = job->num_hits;
    response.hits = w->pb_hit_ptrs;
    response.complete = true;
    response.incomplete_reason = "";
    response.matched_lower_bound = stats->matched_lower_bound;
    response.device = "cpu";
    response.partition_id = job->partition_id;
    response.request_id = request->request_id ? request->request_id : "";
    job->total_ns = monotonic_ns() - job->received_ns;
    times.queue_us = job->queue_ns / 1000;
    times.retrieval_us = job->retrieval_ns / 1000;
    times.total_us = job->total_ns / 1000;
    response.times = &times;
    if (request->debug) {
        debug.algorithm_used = (char *)isn_algo_name(stats->algo_used);
        debug.num_terms = query->num_terms;
        debug.num_unknown_terms = query->num_unknown;
        debug.postings_scored = stats->postings_scored;
        debug.docs_evaluated = stats->docs_evaluated;
        debug.blocks_decoded = stats->blocks_decoded;
        debug.worker = w->id;
        response.debug = &debug;
    }
    size_t size = isn__v1__search_response__get_packed_size(&response);
    job->reply.len = 0;
    if (size > UINT32_MAX || !buffer_reserve(&job->reply, GRPC_PREFIX_BYTES + size)) {
        fail_job(job, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for a reply of %zu bytes", size);
        return;
    }
    grpc_write_prefix(job->reply.data, (uint32_t)size);
    isn__v1__search_response__pack(&response, job->reply.data + GRPC_PREFIX_BYTES);
    job->reply.len = GRPC_PREFIX_BYTES + size;
    job->status = GRPC_STATUS_OK;
    job->message[0] = '\0';
}

void search_worker_run(search_worker *w, search_job *job, bool abandon) {
    uint64_t start = monotonic_ns();
    job->queue_ns = start - job->enqueued_ns;
    job->retrieval_ns = 0;
    job->num_hits = 0;
    job->worker = w->id;
    if (atomic_load(&job->cancelled)) {
        fail_job(job, GRPC_STATUS_CANCELLED, "cancelled by the client");
        return;
    }
    if (abandon) {
        fail_job(job, GRPC_STATUS_UNAVAILABLE, "server is shutting down; retry on another replica");
        return;
    }
    if (job->deadline_ns && start >= job->deadline_ns) {
        fail_job(job, GRPC_STATUS_DEADLINE_EXCEEDED, "deadline passed after %.3f ms in the queue",
                 (double)job->queue_ns / 1e6);
        return;
    }
    if (job->delay_us) {
        struct timespec delay = {job->delay_us / 1000000, (long)(job->delay_us % 1000000) * 1000};
        nanosleep(&delay, NULL);
    }

    const Isn__V1__SearchRequest *request = job->request;
    isn_query query;
    char err[ISN_ERR_LEN];
    if (request->query && request->query[0]) {
        if (isn_query_parse(w->searcher, request->query, strlen(request->query), &query, err, sizeof err) < 0) {
            fail_job(job, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
            return;
        }
    } else if (query_from_terms(w, request, &query, job) < 0) {
        return;
    }
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = job->k;
    options.mode = job->mode;
    options.algo = job->algo;
    if (request->global_stats) apply_global_stats(w, request->global_stats, &query, &options);
    if (!ensure_capacity(w, job->k)) {
        fail_job(job, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for k = %u", job->k);
        return;
    }
    isn_search_stats stats;
    memset(&stats, 0, sizeof stats);
    if (isn_search(w->searcher, &query, &options, w->hits, &job->num_hits, &stats, err, sizeof err) < 0) {
        fail_job(job, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
        return;
    }
    job->retrieval_ns = monotonic_ns() - start;
    pack_reply(w, job, &stats, &query);
}

void search_worker_warm_up(search_worker *w) {
    const isn_index_info *info = isn_index_get_info(w->index);
    if (info->num_terms == 0 || info->num_docs == 0) return;
    /* Spread over the lexicon: touches lexicon blocks, block metadata and postings of several lists. */
    for (uint32_t round = 0; round < 8; round++) {
        isn_query query = {.terms = w->terms, .num_terms = 0, .num_unknown = 0};
        for (uint32_t t = 0; t < 4; t++) {
            uint32_t term_id = (uint32_t)(((uint64_t)info->num_terms * (round * 4 + t)) / 32);
            if (query.num_terms && w->terms[query.num_terms - 1].term_id == term_id) continue;
            isn_term_stats stats;
            isn_index_term_stats(w->index, term_id, &stats);
            w->terms[query.num_terms++] = (isn_query_term){.term_id = term_id, .count = 1, .df = stats.df};
        }
        isn_search_options options;
        isn_search_options_default(&options);
        options.k = 10;
        uint32_t n;
        isn_search_stats stats;
        char err[ISN_ERR_LEN];
        isn_search(w->searcher, &query, &options, w->hits, &n, &stats, err, sizeof err);
    }
}
