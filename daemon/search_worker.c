/* What a worker does with one Search job (analysed once when the scheduler prepared it, usually on a
 * worker): global statistics, the first stage, the second stage, and packing the reply, so the loop
 * thread only copies bytes out. */
#include "daemon/search_job.h"
#include "daemon/generation.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grpc/framing.h"
#include "daemon/rankers.h"

/* One first stage in this many has its thread CPU time taken: two system calls cost a small query's search a
 * few percent, and the ratio wanted is an average. */
#define RETRIEVAL_CPU_SAMPLE 8

struct search_worker {
    const isn_index *index;
    isn_searcher *searcher;
    uint32_t id;
    uint32_t capacity; /* k the scratch below holds */
    isn_hit *hits;
    Isn__V1__Hit *pb_hits;
    Isn__V1__Hit **pb_hit_ptrs;
    byte_buffer id_chars; /* NUL-terminated external ids of the hits */
    isn_query_term terms[ISN_MAX_QUERY_TERMS]; /* warm-up queries */
    float *global_norms; /* document norms for the aggregator's global average length, */
    float global_avg_len; /* computed once per distinct average (it changes only with the corpus) */
    /* Second stage: made on the first request that names a ranker, grown to the largest k since. */
    isn_l2_workspace *l2;
    isn_l2_hit *l2_hits;
    float *l1_scores; /* first-stage score of each reply hit once hits[] hold the ranker's scores */
    uint32_t l2_capacity;
    bool reranked;
    bool reranked_on_gpu;
    uint64_t rerank_ns;
    /* The second stage's model on the GPU, when there is one. */
    const l2_route *route;
    uint32_t searches; /* first stages run, for sampling their thread CPU time */
};

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
    free(w->global_norms);
    isn_l2_workspace_free(w->l2);
    free(w->l2_hits);
    free(w->l1_scores);
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

/* Frames the response into the job's reply buffer (kept across jobs) and marks the job answered. */
static void reply_ok(search_job *job, const Isn__V1__SearchResponse *response) {
    size_t size = isn__v1__search_response__get_packed_size(response);
    job->reply.len = 0;
    isn_grpc_budget_release(job->reply_budget, job->reply_charged);
    job->reply_charged = 0;
    /* Charged before it is built: replies waiting for clients that do not read must not take the
     * node past its budget (the loop's charge when sending came too late for that). The buffer's
     * capacity is charged, less what the call's charge covers already. */
    size_t need = ISN_GRPC_PREFIX_BYTES + size, have = job->reply_prepaid, more = need > have ? need - have : 0;
    if (size <= UINT32_MAX && !isn_grpc_budget_charge(job->reply_budget, more)) {
        fail_job(job, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "server memory budget for replies reached (a reply of %zu bytes)",
                 size);
        return;
    }
    job->reply_charged = job->reply_budget ? more : 0;
    if (size > UINT32_MAX || !buffer_reserve(&job->reply, need)) {
        isn_grpc_budget_release(job->reply_budget, job->reply_charged);
        job->reply_charged = 0;
        fail_job(job, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for a reply of %zu bytes", size);
        return;
    }
    if (job->reply_budget && job->reply.cap > have + more) { /* rounded up past what was asked */
        isn_grpc_budget_add(job->reply_budget, job->reply.cap - have - more);
        job->reply_charged += job->reply.cap - have - more;
    }
    isn_grpc_write_prefix(job->reply.data, (uint32_t)size);
    isn__v1__search_response__pack(response, job->reply.data + ISN_GRPC_PREFIX_BYTES);
    job->reply.len = ISN_GRPC_PREFIX_BYTES + size;
    job->status = ISN_GRPC_STATUS_OK;
    job->message[0] = '\0';
}

/* Norms for the corpus-wide average document length, so that BM25's length part matches an
 * unpartitioned index too. NULL when it equals this partition's (or memory is short: then the
 * partition's own average is used). */
static const float *global_doc_norms(search_worker *w, double avg_doc_len) {
    const isn_index_info *info = isn_index_get_info(w->index);
    float avg = (float)avg_doc_len;
    if (!(avg > 0.0f) || avg == info->avg_doc_len || info->num_docs == 0) return NULL;
    if (w->global_norms && w->global_avg_len == avg) return w->global_norms;
    if (!w->global_norms && !(w->global_norms = malloc(info->num_docs * sizeof *w->global_norms))) return NULL;
    for (uint32_t d = 0; d < info->num_docs; d++)
        w->global_norms[d] = isn_bm25_doc_norm(&info->bm25, isn_index_doc_len(w->index, d), avg);
    w->global_avg_len = avg;
    return w->global_norms;
}

static void apply_global_stats(search_worker *w, const Isn__V1__GlobalStatistics *global, isn_query *query,
                               isn_search_options *options) {
    options->num_docs = global->num_docs;
    options->doc_norms = global_doc_norms(w, global->avg_doc_len);
    for (size_t i = 0; i < global->n_terms; i++) {
        const Isn__V1__TermStatistics *ts = global->terms[i];
        uint32_t term_id;
        if (!ts->term || !isn_index_find_term(w->index, ts->term, strlen(ts->term), &term_id)) continue;
        for (uint32_t j = 0; j < query->num_terms; j++)
            if (query->terms[j].term_id == term_id) query->terms[j].df = (uint32_t)ts->df;
    }
}

void search_worker_set_l2_route(search_worker *w, const l2_route *route) { w->route = route; }

static void pack_reply(search_worker *w, search_job *job, const isn_search_stats *stats, const isn_query *query,
                       const char *device) {
    const Isn__V1__SearchRequest *request = job->request;
    w->id_chars.len = 0;
    for (uint32_t i = 0; i < job->num_hits; i++) {
        size_t len;
        const char *id = isn_index_doc_id(w->index, w->hits[i].doc, &len);
        isn__v1__hit__init(&w->pb_hits[i]);
        w->pb_hits[i].doc = w->hits[i].doc;
        w->pb_hits[i].score = w->hits[i].score;
        w->pb_hits[i].l1_score = w->reranked ? w->l1_scores[i] : w->hits[i].score;
        /* Offsets now, pointers after the buffer stops growing. */
        w->pb_hits[i].external_id = (char *)(uintptr_t)w->id_chars.len;
        if (!buffer_append(&w->id_chars, id, len) || !buffer_append(&w->id_chars, "", 1)) {
            fail_job(job, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for reply ids");
            return;
        }
    }
    for (uint32_t i = 0; i < job->num_hits; i++) {
        w->pb_hits[i].external_id = (char *)w->id_chars.data + (uintptr_t)w->pb_hits[i].external_id;
        w->pb_hit_ptrs[i] = &w->pb_hits[i];
    }
    char err[ISN_ERR_LEN];
    int status = stored_fields_attach(w->index, job, w->pb_hits, job->num_hits, err, sizeof err);
    if (status != ISN_GRPC_STATUS_OK) {
        fail_job(job, status, "%s", err);
        return;
    }

    Isn__V1__SearchResponse response = ISN__V1__SEARCH_RESPONSE__INIT;
    Isn__V1__StageTimes times = ISN__V1__STAGE_TIMES__INIT;
    Isn__V1__SearchDebug debug = ISN__V1__SEARCH_DEBUG__INIT;
    response.n_hits = job->num_hits;
    response.hits = w->pb_hit_ptrs;
    response.complete = stats->complete;
    response.incomplete_reason = (char *)(stats->complete ? "" : stats->incomplete_reason);
    job->complete = stats->complete;
    response.matched_lower_bound = stats->matched_lower_bound;
    response.device = (char *)device;
    response.partition_id = job->partition_id;
    if (job->generation) {
        response.generation = job->generation->id;
        response.generation_built_unix = job->generation->info->built_unix_seconds;
    }
    response.request_id = request->request_id ? request->request_id : "";
    job->total_ns = isn_now_ns() - job->received_ns;
    times.queue_us = job->queue_ns / 1000;
    times.retrieval_us = job->retrieval_ns / 1000;
    times.total_us = job->total_ns / 1000;
    times.rerank_us = w->rerank_ns / 1000;
    response.times = &times;
    if (request->debug) {
        debug.algorithm_used = (char *)isn_algo_name(stats->algo_used);
        debug.num_terms = query->num_terms;
        debug.num_unknown_terms = query->num_unknown;
        debug.postings_scored = stats->postings_scored;
        debug.docs_evaluated = stats->docs_evaluated;
        debug.blocks_decoded = stats->blocks_decoded;
        debug.worker = w->id;
        char *tree = query->structure && job->memory ? arena_alloc(job->memory, 1024) : NULL;
        if (tree) {
            isn_query_structure_describe(w->searcher, query, tree, 1024);
            debug.query_tree = tree;
        }
        /* the GPU takes required, excluded and filtered trees; phrases and field: clauses need positions, and a
         * static prior needs finite static scores resident beside the postings */
        const char *why = NULL;
        if (!isn_gpu_takes_search(query, job->prior_weight, &why)) debug.cpu_reason = (char *)why;
        response.debug = &debug;
    }
    reply_ok(job, &response);
}

/* The ranker a request names, and its n1 (first-stage candidates): 0, or -1 with the job failed. */
static int ranker_for(search_job *job, ranker_ref **ranker, uint32_t *n1) {
    const Isn__V1__SearchRequest *request = job->request;
    *ranker = NULL;
    *n1 = job->k;
    if (!request->ranker || !request->ranker[0]) {
        if (request->n1) {
            fail_job(job, ISN_GRPC_STATUS_INVALID_ARGUMENT, "n1 = %u without a ranker: name one in `ranker`", request->n1);
            return -1;
        }
        return 0;
    }
    uint32_t max_n1;
    if (rankers_n1(request->n1, job->k, n1, &max_n1) < 0) {
        fail_job(job, ISN_GRPC_STATUS_INVALID_ARGUMENT, "n1 = %u is above this server's limit (rerank.max_n1 = %u)",
                 request->n1, max_n1);
        return -1;
    }
    if (!(*ranker = rankers_acquire(request->ranker))) {
        char names[160];
        rankers_names(names, sizeof names);
        fail_job(job, ISN_GRPC_STATUS_INVALID_ARGUMENT, "unknown ranker \"%.64s\" (served: %s)", request->ranker, names);
        return -1;
    }
    return 0;
}

/* Re-scores the first stage's hits with the ranker; hits[] then hold its best k, l1_scores theirs.
 * The whole stage runs here or as one GPU pass, as gpu/'s device choice says (a GPU failure scores here). */
static int rerank_hits(search_worker *w, search_job *job, const isn_ranker *ranker, const isn_query *query,
                       uint64_t num_docs) {
    char err[ISN_ERR_LEN];
    if (!w->l2 && !(w->l2 = isn_l2_workspace_new(w->index))) {
        fail_job(job, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the second stage");
        return -1;
    }
    if (job->k > w->l2_capacity) {
        isn_l2_hit *l2_hits = realloc(w->l2_hits, job->k * sizeof *l2_hits);
        if (l2_hits) w->l2_hits = l2_hits;
        float *l1 = realloc(w->l1_scores, job->k * sizeof *l1);
        if (l1) w->l1_scores = l1;
        if (!l2_hits || !l1) {
            fail_job(job, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for k = %u", job->k);
            return -1;
        }
        w->l2_capacity = job->k;
    }
    uint32_t m;
    isn_stage_scorer scorer = w->route && w->route->rerank ? isn_gpu_rerank_score : NULL;
    if (isn_rerank_stage(w->l2, ranker, query, num_docs, w->hits, job->num_hits, job->k, scorer,
                         scorer ? w->route->rerank : NULL, w->l2_hits, &m, err, sizeof err) != 0) {
        fail_job(job, ISN_GRPC_STATUS_INTERNAL, "ranker %s: %s", isn_ranker_name(ranker), err);
        return -1;
    }
    w->reranked_on_gpu = scorer && isn_gpu_rerank_last_device() == 1;
    for (uint32_t i = 0; i < m; i++) {
        w->hits[i] = (isn_hit){.doc = w->l2_hits[i].doc, .score = w->l2_hits[i].score};
        w->l1_scores[i] = w->l2_hits[i].l1_score;
    }
    job->num_hits = m;
    w->reranked = true;
    return 0;
}

static void search_worker_search(search_worker *w, search_job *job, uint64_t start, uint32_t first_k,
                                 ranker_ref *ranker);

void search_worker_run(search_worker *w, search_job *job, bool abandon) {
    uint64_t start = isn_now_ns();
    w->reranked = false;
    w->reranked_on_gpu = false;
    w->rerank_ns = 0;
    job->queue_ns = start - job->enqueued_ns;
    job->retrieval_ns = 0;
    job->retrieval_cpu_ns = 0;
    job->num_hits = 0;
    job->worker = w->id;
    /* the scheduler's start (on_start) took it from JOB_QUEUED: the loop no longer answers it */
    if (atomic_load(&job->cancelled)) {
        fail_job(job, ISN_GRPC_STATUS_CANCELLED, "cancelled by the client");
        return;
    }
    if (abandon) {
        fail_job(job, ISN_GRPC_STATUS_UNAVAILABLE, "server is shutting down; retry on another replica");
        return;
    }
    if (job->deadline_ns && start >= job->deadline_ns) {
        fail_job(job, ISN_GRPC_STATUS_DEADLINE_EXCEEDED, "deadline passed after %.3f ms in the queue",
                 (double)job->queue_ns / 1e6);
        return;
    }
    if (job->delay_us) {
        struct timespec delay = {job->delay_us / 1000000, (long)(job->delay_us % 1000000) * 1000};
        nanosleep(&delay, NULL);
    }

    ranker_ref *ranker;
    uint32_t first_k;
    if (ranker_for(job, &ranker, &first_k) < 0) return;
    search_worker_search(w, job, start, first_k, ranker);
    if (ranker) rankers_release(ranker);
}

/* A search that took more memory than it laid out is a sizing bug in ranking/: its answer is right (the
 * rest came from the heap), so it is said once, with the query, for a report, and never again. */
static void warn_of_overrun(const isn_search_stats *stats, const search_job *job) {
    static atomic_bool warned;
    if (!stats->arena_overrun_bytes || atomic_exchange_explicit(&warned, true, memory_order_relaxed)) return;
    log_warn("search: a query took %llu bytes beyond the memory its search laid out (answered correctly; please "
             "report it with the query): \"%.300s\"",
             (unsigned long long)stats->arena_overrun_bytes, job->request->query ? job->request->query : "");
}

/* The first stage for first_k hits, the second stage when a ranker is given, the reply. */
static void search_worker_search(search_worker *w, search_job *job, uint64_t start, uint32_t first_k,
                                 ranker_ref *ranker) {
    const Isn__V1__SearchRequest *request = job->request;
    isn_query query = job->query; /* analysed when the job was prepared, before admission */
    char err[ISN_ERR_LEN];
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = first_k;
    options.mode = job->mode;
    options.algo = job->algo;
    if (request->global_stats) apply_global_stats(w, request->global_stats, &query, &options);
    options.prior_weight = job->prior_weight;
    /* The scheduler's probe scored BM25 alone: with static scores below 0 it bounds nothing here. */
    options.initial_threshold =
        job->prior_weight > 0 ? 0.0f
                              : (float)isn_job_seed_threshold(&job->sched.features, options.mode, first_k,
                                                              request->global_stats != NULL);
    if (!ensure_capacity(w, first_k)) {
        fail_job(job, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for k = %u", first_k);
        return;
    }
    options.deadline_ns = job->stop_ns; /* the scheduler's early-termination point */
    isn_search_stats stats;
    memset(&stats, 0, sizeof stats);
    /* The thread's CPU time (a system call, not the clock's vDSO) on one search in RETRIEVAL_CPU_SAMPLE: the
     * wall time includes the waits of a worker preempted mid-search, this does not, so that their ratio
     * tells the node's own crowding of its cores from a slower machine. */
    bool sampled = w->searches++ % RETRIEVAL_CPU_SAMPLE == 0;
    uint64_t cpu_start = sampled ? isn_thread_cpu_ns() : 0;
    if (isn_search(w->searcher, &query, &options, w->hits, &job->num_hits, &stats, err, sizeof err) < 0) {
        fail_job(job, ISN_GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
        return;
    }
    if (sampled) {
        uint64_t cpu_ns = isn_thread_cpu_ns() - cpu_start;
        job->retrieval_cpu_ns = cpu_ns ? cpu_ns : 1;
    }
    job->retrieval_ns = isn_now_ns() - start;
    warn_of_overrun(&stats, job);
    if (!stats.complete && request->forbid_partial) {
        fail_job(job, ISN_GRPC_STATUS_DEADLINE_EXCEEDED,
                 "the search stopped at its deadline before it finished, and the request forbids partial answers");
        return;
    }
    if (ranker) {
        uint64_t l2_start = isn_now_ns(), l2_cpu_start = isn_thread_cpu_ns();
        if (rerank_hits(w, job, ranker_ref_get(ranker), &query, options.num_docs) < 0) return;
        w->rerank_ns = isn_now_ns() - l2_start;
        job->sched.second_stage_cpu_ns = isn_thread_cpu_ns() - l2_cpu_start;
    }
    pack_reply(w, job, &stats, &query, w->reranked_on_gpu ? "cpu+gpu-l2" : "cpu");
}

void search_worker_pack_gpu(search_worker *w, search_job *job, const isn_hit *hits, uint32_t n, const char *device) {
    w->reranked = false;
    w->reranked_on_gpu = false;
    w->rerank_ns = 0;
    job->worker = w->id;
    if (!ensure_capacity(w, n)) {
        fail_job(job, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for k = %u", n);
        return;
    }
    memcpy(w->hits, hits, n * sizeof *hits);
    job->num_hits = n;
    isn_search_stats stats;
    memset(&stats, 0, sizeof stats);
    stats.complete = true;
    stats.algo_used = job->algo;
    pack_reply(w, job, &stats, &job->query, device);
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

/* A simulated GPU answers with timing only: no hits, device "gpu-sim", so benchmarks can tell. */
void search_job_pack_simulated(search_job *job) {
    Isn__V1__SearchResponse response = ISN__V1__SEARCH_RESPONSE__INIT;
    Isn__V1__StageTimes times = ISN__V1__STAGE_TIMES__INIT;
    response.complete = true;
    response.incomplete_reason = "";
    response.device = "gpu-sim";
    response.partition_id = job->partition_id;
    if (job->generation) {
        response.generation = job->generation->id;
        response.generation_built_unix = job->generation->info->built_unix_seconds;
    }
    response.request_id = job->request->request_id ? job->request->request_id : "";
    job->num_hits = 0;
    job->complete = true;
    job->total_ns = isn_now_ns() - job->received_ns;
    times.queue_us = job->queue_ns / 1000;
    times.retrieval_us = job->retrieval_ns / 1000;
    times.total_us = job->total_ns / 1000;
    response.times = &times;
    reply_ok(job, &response);
}
