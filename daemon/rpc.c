/* The RPC methods, as handlers of grpc/'s server core on each serving loop: which path is which,
 * request validation, Search dispatch to the workers and their replies (back on the loop that owns
 * the call), and Info and Health answered on the loop thread (metadata only, bounded work). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "daemon/server.h"
#include "proto/health.pb-c.h"

#define INFO_MAX_TERMS 1024
#define GLOBAL_STATS_MAX_TERMS 8192
#define SEARCH_MAX_TERMS 8192 /* pre-analyzed terms, repeats included */

static const struct {
    const char *path;
    rpc_method method;
} PATHS[] = {
    {"/isn.v1.Search/Search", RPC_SEARCH},
    {"/isn.v1.Search/Info", RPC_INFO},
    {"/grpc.health.v1.Health/Check", RPC_HEALTH_CHECK},
    {"/grpc.health.v1.Health/Watch", RPC_HEALTH_WATCH},
    {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", RPC_REFLECTION},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", RPC_REFLECTION},
};

rpc_method rpc_method_from_path(const char *path, size_t len) {
    for (size_t i = 0; i < sizeof PATHS / sizeof PATHS[0]; i++)
        if (strlen(PATHS[i].path) == len && !memcmp(PATHS[i].path, path, len)) return PATHS[i].method;
    return RPC_UNKNOWN;
}

bool server_ready(const isn_server *server) { return atomic_load(&server->state) == SERVER_READY; }

static rpc_call *app_of(isn_grpc_call *call) { return isn_grpc_call_app(call); }

/* A call's tag is its rpc_method once its headers are in. */
#define METHOD_NOT_YET_KNOWN (-1)

/* A new call: a fresh arena and job (the job's reply buffer keeps its storage across uses). */
static void on_open(isn_grpc_call *call, void *app) {
    serving_loop *loop = app;
    rpc_call *rc = app_of(call);
    byte_buffer reply = rc->job.reply;
    memset(rc, 0, offsetof(rpc_call, arena_space));
    rc->job.reply = reply;
    rc->job.reply.len = 0;
    rc->job.reply_prepaid = reply.cap; /* charged with the call: what on_release said it kept */
    isn_grpc_call_set_tag(call, METHOD_NOT_YET_KNOWN);
    /* A decoded message is a few times its wire size at most; past that something is wrong. */
    arena_init(&rc->arena, rc->arena_space, sizeof rc->arena_space, (size_t)loop->conf.max_message_bytes * 8 + 65536);
}

#define KEEP_REPLY_BUFFER (256 * 1024)

/* What it keeps (the reply buffer) is charged to the memory budget with the call (isn_grpc_call_new). */
static size_t on_release(isn_grpc_call *call, bool freeing, void *app) {
    rpc_call *rc = app_of(call);
    serving_loop *loop = app;
    deadline_forget(loop, rc);
    generation_lease_return(&loop->generations, generations_slot(loop->server), rc->job.generation, rc->generation_lent);
    rc->job.generation = NULL;
    arena_reset(&rc->arena);
    if (freeing) buffer_free(&rc->job.reply);
    else buffer_clear(&rc->job.reply, KEEP_REPLY_BUFFER);
    return rc->job.reply.cap;
}

static void on_abandoned(isn_grpc_call *call, void *app) {
    (void)app;
    atomic_store(&app_of(call)->job.cancelled, true);
}

/* The access line of a Search or Info call (log.access): what a request id or trace id finds. */
static void log_access(isn_grpc_call *call, rpc_method method, int status, double seconds) {
    const search_job *job = &app_of(call)->job;
    const Isn__V1__SearchRequest *request = method == RPC_SEARCH ? job->request : NULL;
    isn_grpc_trace trace;
    bool traced = isn_grpc_trace_parse(isn_grpc_call_traceparent(call), &trace);
    char ms[32], hits[16];
    snprintf(ms, sizeof ms, "%.3f", seconds * 1e3);
    snprintf(hits, sizeof hits, "%u", job->num_hits);
    bool answered = request && status == ISN_GRPC_STATUS_OK;
    const char *fields[] = {
        "method", rpc_method_label(method),
        "code", isn_grpc_status_name(status),
        "ms", ms,
        "request_id", request && request->request_id && request->request_id[0] ? request->request_id : NULL,
        "trace_id", traced ? trace.trace_id : NULL,
        "parent_span", traced ? trace.span_id : NULL,
        "hits", answered ? hits : NULL,
        "complete", answered ? (job->complete ? "true" : "false") : NULL,
    };
    log_record(ISN_LOG_INFO, "access", fields, sizeof fields / sizeof fields[0] / 2);
}

static void on_status(isn_grpc_call *call, int status, void *app) {
    serving_loop *loop = app;
    int method = isn_grpc_call_tag(call);
    if (method == METHOD_NOT_YET_KNOWN) { /* answered before its headers were complete (header_timeout) */
        const char *path = isn_grpc_call_path(call);
        method = rpc_method_from_path(path, strlen(path));
    }
    uint64_t now = isn_now_ns();
    double seconds = (double)(now - isn_grpc_call_opened_ns(call)) / 1e9;
    app_of(call)->shed = method == RPC_SEARCH && status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
    LOOP_METRICS(loop, metrics_count_request(m, (rpc_method)method, status, seconds));
    if (loop->conf.log_access && (method == RPC_SEARCH || method == RPC_INFO))
        log_access(call, (rpc_method)method, status, seconds);
}

/* A refusal is timed to when it leaves, not to when it was queued: refusals queued early in a long read or
 * iteration wait for the rest of it, and that wait is the client's too. */
static void on_sent(isn_grpc_call *call, void *app) {
    serving_loop *loop = app;
    if (!app_of(call)->shed) return;
    double shed_seconds = (double)(isn_now_ns() - isn_grpc_call_arrived_ns(call)) / 1e9;
    LOOP_METRICS(loop, histogram_observe(&m->shed_seconds, shed_seconds));
}

/* Headers are complete (a gRPC POST): refuse what can be refused before the body arrives. */
static uint64_t deadline_for(const serving_loop *loop, const isn_grpc_call *call, uint32_t request_timeout_ms,
                             uint64_t now);

/* Overload is answered before the request is read: when no device could start it in time (the wait
 * it spent unread in the socket included), RESOURCE_EXHAUSTED costs the HEADERS alone, with no body
 * decoded and no analysis (its deadline as the header or the default gives it). */
static void refuse_search_early(serving_loop *loop, isn_grpc_call *call) {
    isn_server *server = loop->server;
    uint64_t arrived = isn_grpc_call_arrived_ns(call);
    uint64_t deadline = deadline_for(loop, call, 0, arrived);
    if (!server->pool || search_service_may_admit(server->pool, arrived, deadline, serving_loop_forgives_stalls(loop))) return;
    LOOP_METRICS(loop, {
        m->shed++;
        m->shed_at_headers++;
    });
    /* The message is fixed (how long the request had waited is in isn_shed_duration_seconds): a refusal
     * here is what overload costs the loop per excess request. */
    isn_grpc_call_fail_static(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED,
                              "server overloaded: no device can start this query before its deadline (refused "
                              "unread)");
}

static void on_headers(isn_grpc_call *call, void *app) {
    serving_loop *loop = app;
    isn_server *server = loop->server;
    const char *path = isn_grpc_call_path(call);
    rpc_method method = rpc_method_from_path(path, strlen(path));
    isn_grpc_call_set_tag(call, method);
    if (method == RPC_UNKNOWN) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_UNIMPLEMENTED, "unknown method %s", path);
        return;
    }
    /* streams, answered in every state: the status as it changes, and the services' descriptors */
    if (method == RPC_HEALTH_WATCH) {
        isn_grpc_health_watch(loop->watchers, call);
        return;
    }
    if (method == RPC_REFLECTION) {
        isn_grpc_reflection_serve(call);
        return;
    }
    if (isn_grpc_call_timeout_malformed(call)) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "malformed grpc-timeout header");
        return;
    }
    if (isn_grpc_call_timeout_expired(call)) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_DEADLINE_EXCEEDED, "grpc-timeout is 0: the deadline had passed on arrival");
        return;
    }
    if (method == RPC_HEALTH_CHECK) return; /* answered in every state */
    server_state state = atomic_load(&server->state); /* drain_start_ns is set before it changes */
    if (state == SERVER_STARTING) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_UNAVAILABLE, "index is loading; retry shortly");
        return;
    }
    if (state != SERVER_READY && isn_grpc_call_opened_ns(call) >= server->drain_start_ns) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_UNAVAILABLE, "server is shutting down; retry on another replica");
        return;
    }
    if (method != RPC_SEARCH) return;
    stall_watch_search_seen(loop, isn_grpc_call_opened_ns(call));
    refuse_search_early(loop, call);
}

/* ------------------------------------------------------------------ Search */

/* testing.inject_delay on a random testing.inject_delay_percent of jobs. */
static uint32_t injected_delay_us(serving_loop *loop) {
    const isn_conf *conf = &loop->conf;
    uint64_t state = loop->random_state;
    if (!conf->inject_delay_ms || !conf->inject_delay_percent) return 0;
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    loop->random_state = state;
    return state % 10000 < (uint64_t)conf->inject_delay_percent * 100 ? conf->inject_delay_ms * 1000 : 0;
}

static uint64_t deadline_for(const serving_loop *loop, const isn_grpc_call *call, uint32_t request_timeout_ms,
                             uint64_t now) {
    uint64_t timeout_ns = isn_grpc_call_timeout_ns(call); /* the header wins (a zero one was refused) */
    if (!timeout_ns && request_timeout_ms) timeout_ns = (uint64_t)request_timeout_ms * 1000000ull;
    if (!timeout_ns && loop->conf.default_timeout_ms) timeout_ns = (uint64_t)loop->conf.default_timeout_ms * 1000000ull;
    uint64_t cap_ns = (uint64_t)loop->conf.max_timeout_ms * 1000000ull;
    if (cap_ns && (!timeout_ns || timeout_ns > cap_ns)) timeout_ns = cap_ns;
    /* Uncapped (max_timeout 0), a header of 99999999H saturates here instead of wrapping to the past. */
    return timeout_ns ? isn_add_sat_u64(now, timeout_ns) : 0;
}

static bool blank(const char *text) {
    if (!text) return true;
    for (; *text; text++)
        if (*text != ' ' && *text != '\t' && *text != '\n' && *text != '\r') return false;
    return true;
}

static void handle_search(serving_loop *loop, isn_grpc_call *call) {
    const isn_conf *conf = &loop->conf;
    rpc_call *rc = app_of(call);
    Isn__V1__SearchRequest *request = isn_grpc_call_unpack(call, &isn__v1__search_request__descriptor, &rc->arena.allocator);
    if (!request) return;
    /* what the request takes from here on (analysed terms, stored text for the reply) is charged; its
     * decoding was, as its body */
    arena_charge_to(&rc->arena, &loop->server->memory_budget);
    if (blank(request->query) && request->n_terms == 0 && !request->structured_query) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "empty query: set `query`, `structured_query` or `terms`");
        return;
    }
    if (request->n_terms > SEARCH_MAX_TERMS) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "%zu pre-analyzed terms (at most %d)", request->n_terms,
                         SEARCH_MAX_TERMS);
        return;
    }
    uint32_t k = request->k ? request->k : conf->default_k;
    if (k > conf->max_k) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "k = %u is above this server's limit (max_k = %u)", k,
                         conf->max_k);
        return;
    }
    isn_mode mode;
    switch (request->mode) {
    case ISN__V1__MODE__MODE_DEFAULT: mode = conf->default_mode; break;
    case ISN__V1__MODE__MODE_OR: mode = ISN_MODE_OR; break;
    case ISN__V1__MODE__MODE_AND: mode = ISN_MODE_AND; break;
    default:
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "unknown mode %d (use MODE_OR or MODE_AND)",
                         (int)request->mode);
        return;
    }
    isn_algo algo = conf->default_algo;
    if (request->algorithm && request->algorithm[0] && !isn_algo_from_name(request->algorithm, &algo)) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT,
                         "unknown algorithm \"%.64s\" (auto, or, and, maxscore, wand, bmw, bmm, bmand)", request->algorithm);
        return;
    }
    if (algo != ISN_ALGO_AUTO && isn_algo_mode(algo, mode) != mode) {
        if (request->algorithm && request->algorithm[0] && request->mode != ISN__V1__MODE__MODE_DEFAULT) {
            isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "algorithm %s does not run %s queries",
                             isn_algo_name(algo), mode == ISN_MODE_AND ? "AND" : "OR");
            return;
        }
        /* One side was a default: the explicit side decides. */
        if (request->algorithm && request->algorithm[0]) mode = isn_algo_mode(algo, mode);
        else algo = ISN_ALGO_AUTO;
    }
    const Isn__V1__GlobalStatistics *global = request->global_stats;
    if (global) {
        if (global->n_terms > GLOBAL_STATS_MAX_TERMS) {
            isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "global_stats has %zu terms (at most %d)",
                             global->n_terms, GLOBAL_STATS_MAX_TERMS);
            return;
        }
        if (global->n_terms && !global->num_docs) {
            isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "global_stats gives term df but num_docs = 0");
            return;
        }
        for (size_t i = 0; i < global->n_terms; i++) {
            if (global->terms[i]->df > global->num_docs || global->terms[i]->df > UINT32_MAX) {
                isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT,
                                 "global_stats: df %llu of term \"%.64s\" is above num_docs %llu",
                                 (unsigned long long)global->terms[i]->df, global->terms[i]->term,
                                 (unsigned long long)global->num_docs);
                return;
            }
        }
    }
    /* Its budget counts from when its bytes arrived: waiting unread, reading and decoding spent part of
     * it, and admission must see that (the grpc-timeout counts from the client's send). */
    uint64_t opened = isn_grpc_call_opened_ns(call), arrived = isn_grpc_call_arrived_ns(call), now = isn_now_ns();
    search_job *job = &rc->job;
    job->request = request;
    job->memory = &rc->arena;
    job->k = k;
    job->mode = mode;
    job->algo = algo;
    job->prior_weight = conf->prior_weight;
    job->partition_id = conf->partition_id;
    job->delay_us = conf->job_delay_us + injected_delay_us(loop);
    job->completions = &loop->completions;
    job->reply_budget = &loop->server->memory_budget;
    job->reply_charged = 0;
    job->received_ns = opened;
    job->arrived_ns = arrived;
    job->reader_keeps_up = serving_loop_forgives_stalls(loop);
    job->enqueued_ns = now;
    job->deadline_ns = deadline_for(loop, call, request->timeout_ms, arrived);
    atomic_store(&job->cancelled, false);
    atomic_store(&job->phase, JOB_QUEUED);
    rc->call = call;
    rc->answered_at_deadline = false;
    /* returned with the call (on_release) */
    job->generation = generation_lease_borrow(&loop->generations, generations_slot(loop->server), &rc->generation_lent);
    int refused = search_service_submit(loop->server->pool, job);
    if (refused) {
        if (refused == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED) LOOP_METRICS(loop, m->shed++);
        isn_grpc_call_fail(call, refused, "%s", job->message);
        return;
    }
    isn_grpc_call_hold(call);
    atomic_fetch_add_explicit(&loop->inflight_jobs, 1, memory_order_relaxed);
    deadline_watch(loop, rc);
}

/* Finished jobs of this loop's calls: each reply goes out on the loop that owns its stream. */
bool rpc_take_completions(serving_loop *loop) {
    /* Once per iteration: the clock is read before the take only when the take needs it. */
    uint64_t behind_ns = (uint64_t)loop->conf.reply_backlog_age_us * 1000;
    uint64_t now = behind_ns ? isn_now_ns() : 0;
    search_job *job = completion_queue_take(&loop->completions, LOOP_REPLIES_PER_ITERATION, behind_ns, now);
    if (!job) return false;
    if (!behind_ns) now = isn_now_ns();
    while (job) {
        search_job *next = job->next;
        isn_grpc_call *call = isn_grpc_call_from_app((char *)job - offsetof(rpc_call, job));
        rpc_call *rc = app_of(call);
        atomic_fetch_sub_explicit(&loop->inflight_jobs, 1, memory_order_relaxed);
        deadline_forget(loop, rc);
        /* read before the call may be released (and freed, when the pool has no room for it) */
        bool answered = rc->answered_at_deadline;
        uint64_t charged = job->reply_charged; /* the call takes it over, or it is given back */
        isn_grpc_memory_budget *budget = job->reply_budget;
        job->reply_charged = 0;
        bool open = isn_grpc_call_unhold(call);
        if (answered) {
            /* DEADLINE_EXCEEDED went out at the deadline: whatever the worker made is dropped */
            isn_grpc_budget_release(budget, charged);
        } else if (!open) {
            isn_grpc_budget_release(budget, charged);
            LOOP_METRICS(loop, m->cancelled++); /* the client went away while a worker had its request */
        } else if (job->status == ISN_GRPC_STATUS_OK) {
            stage_device device = job->sched.device == ISN_DEVICE_GPU ? STAGE_ON_GPU : STAGE_ON_CPU;
            LOOP_METRICS(loop, {
                histogram *stages = m->search_stage_seconds[device];
                histogram_observe(&stages[STAGE_QUEUE], (double)job->queue_ns / 1e9);
                histogram_observe(&stages[STAGE_RETRIEVAL], (double)job->retrieval_ns / 1e9);
                histogram_observe(&stages[STAGE_TOTAL], (double)(now - job->received_ns) / 1e9);
                if (job->sched.finished_ns && now > job->sched.finished_ns)
                    histogram_observe(&m->reply_wait_seconds[device], (double)(now - job->sched.finished_ns) / 1e9);
                if (job->deadline_ns && now > job->deadline_ns) m->answered_late[device]++;
                if (device == STAGE_ON_CPU && job->retrieval_cpu_ns) {
                    m->retrieval_sampled_jobs++;
                    m->retrieval_sampled_wall_ns += job->retrieval_ns;
                    m->retrieval_sampled_cpu_ns += job->retrieval_cpu_ns;
                }
                m->hits_returned += job->num_hits;
            });
            isn_grpc_call_reply_framed_charged(call, job->reply.data, job->reply.len, charged);
        } else {
            isn_grpc_budget_release(budget, charged);
            /* Refused after a worker prepared it: counted as the loop counts its own refusals. */
            if (job->status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED) LOOP_METRICS(loop, m->shed++);
            isn_grpc_call_fail(call, job->status, "%s", job->message);
        }
        job = next;
    }
    return true;
}

/* ------------------------------------------------------------------ Info */

typedef struct {
    index_generation *generation;
    arena *arena;
    Isn__V1__InfoResponse *response;
    const char *asked;
    size_t cap;
    bool failed;
} info_ctx;

static void add_term_info(info_ctx *ctx, const char *asked, const char *term, size_t len) {
    if (ctx->failed) return;
    Isn__V1__InfoResponse *response = ctx->response;
    if (response->n_terms == ctx->cap) {
        size_t cap = ctx->cap ? ctx->cap * 2 : 16;
        Isn__V1__TermInfo **grown = arena_alloc(ctx->arena, cap * sizeof *grown);
        if (!grown) {
            ctx->failed = true;
            return;
        }
        if (response->n_terms) memcpy(grown, response->terms, response->n_terms * sizeof *grown);
        response->terms = grown;
        ctx->cap = cap;
    }
    Isn__V1__TermInfo *info = arena_alloc(ctx->arena, sizeof *info);
    char *copy = arena_alloc(ctx->arena, len + 1);
    if (!info || !copy) {
        ctx->failed = true;
        return;
    }
    isn__v1__term_info__init(info);
    memcpy(copy, term, len);
    copy[len] = '\0';
    info->term = (char *)asked;
    info->index_term = copy;
    uint32_t term_id;
    const isn_index *index = ctx->generation->index;
    if (isn_index_find_term(index, term, len, &term_id)) {
        isn_term_stats stats;
        isn_index_term_stats(index, term_id, &stats);
        info->found = true;
        info->df = stats.df;
        info->cf = stats.cf;
    }
    response->terms[response->n_terms++] = info;
}

static void on_analyzed_term(void *user, const char *term, size_t len, uint32_t position) {
    (void)position;
    info_ctx *ctx = user;
    add_term_info(ctx, ctx->asked, term, len);
}

/* This loop's analyzer for Info, made anew when the generation is not the one it was made for (an
 * analyzer is not shared between threads, and each generation records its own settings). */
static isn_analyzer *loop_analyzer(serving_loop *loop, const index_generation *generation) {
    if (loop->analyzer && !strcmp(loop->analyzer_generation, generation->id)) return loop->analyzer;
    if (loop->analyzer) isn_analyzer_free(loop->analyzer);
    loop->analyzer = isn_index_new_analyzer(generation->index);
    snprintf(loop->analyzer_generation, sizeof loop->analyzer_generation, "%s", loop->analyzer ? generation->id : "");
    return loop->analyzer;
}

static void handle_info(serving_loop *loop, isn_grpc_call *call) {
    isn_server *server = loop->server;
    rpc_call *rc = app_of(call);
    Isn__V1__InfoRequest *request = isn_grpc_call_unpack(call, &isn__v1__info_request__descriptor, &rc->arena.allocator);
    if (!request) return;
    if (request->n_terms > INFO_MAX_TERMS) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "Info asks for %zu terms (at most %d per request)",
                         request->n_terms, INFO_MAX_TERMS);
        return;
    }
    index_generation *generation = generations_acquire(server);
    const isn_index_info *info = generation->info;
    Isn__V1__InfoResponse response = ISN__V1__INFO_RESPONSE__INIT;
    Isn__V1__AnalyzerSettings analyzer = ISN__V1__ANALYZER_SETTINGS__INIT;
    char *fields[ISN_MAX_FIELDS];
    analyzer.stem = info->analyzer.stem;
    analyzer.stopwords = info->analyzer.stopwords;
    analyzer.max_token_bytes = info->analyzer.max_token_bytes;
    response.partition_id = loop->conf.partition_id;
    response.num_docs = info->num_docs;
    response.index_version = info->version;
    response.analyzer = &analyzer;
    response.bm25_k1 = info->bm25.k1;
    response.bm25_b = info->bm25.b;
    response.num_terms = info->num_terms;
    response.num_postings = info->num_postings;
    response.avg_doc_len = info->avg_doc_len;
    response.total_doc_len = info->total_doc_len;
    for (uint32_t i = 0; i < info->num_fields && i < ISN_MAX_FIELDS; i++) fields[i] = (char *)info->fields[i];
    response.n_fields = info->num_fields;
    response.fields = fields;
    response.has_positions = info->has_positions;
    char *stored[ISN_MAX_FIELDS];
    for (uint32_t i = 0; i < info->num_stored_fields; i++) stored[i] = (char *)info->stored_fields[i];
    response.n_stored_fields = info->num_stored_fields;
    response.stored_fields = stored;
    response.index_bytes = info->file_bytes;
    response.server_version = ISND_VERSION;
    response.generation = generation->id;
    response.generation_built_unix = info->built_unix_seconds;
    response.generation_built_from_mtime = info->built_from_mtime;
    info_ctx ctx = {.generation = generation, .arena = &rc->arena, .response = &response};
    isn_analyzer *analyze_with = request->analyze && request->n_terms ? loop_analyzer(loop, generation) : NULL;
    if (request->analyze && request->n_terms && !analyze_with) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for an analyzer");
        generation_release(generation);
        return;
    }
    for (size_t i = 0; i < request->n_terms; i++) {
        const char *term = request->terms[i] ? request->terms[i] : "";
        ctx.asked = term;
        if (request->analyze) isn_analyze(analyze_with, term, strlen(term), on_analyzed_term, &ctx);
        else add_term_info(&ctx, term, term, strlen(term));
    }
    if (ctx.failed) isn_grpc_call_fail(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the Info reply");
    else isn_grpc_call_reply_message(call, &response.base);
    generation_release(generation);
}

/* ------------------------------------------------------------------ Health */

/* Health/Watch's view of a service: the node's readiness for "" and isn.v1.Search. */
int rpc_health_status(const char *service, void *app) {
    const isn_server *server = app;
    if (*service && strcmp(service, "isn.v1.Search")) return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
    return server_ready(server) ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                                : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

static void handle_health_check(const isn_server *server, isn_grpc_call *call) {
    Grpc__Health__V1__HealthCheckRequest *request =
        isn_grpc_call_unpack(call, &grpc__health__v1__health_check_request__descriptor, &app_of(call)->arena.allocator);
    if (!request) return;
    const char *service = request->service ? request->service : "";
    if (*service && strcmp(service, "isn.v1.Search")) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_NOT_FOUND, "unknown service \"%.64s\"", service);
        return;
    }
    Grpc__Health__V1__HealthCheckResponse response = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    response.status = server_ready(server) ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                                           : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    isn_grpc_call_reply_message(call, &response.base);
}

static void on_request(isn_grpc_call *call, void *app) {
    serving_loop *loop = app;
    switch ((rpc_method)isn_grpc_call_tag(call)) {
    case RPC_SEARCH: handle_search(loop, call); break;
    case RPC_INFO: handle_info(loop, call); break;
    case RPC_HEALTH_CHECK: handle_health_check(loop->server, call); break;
    default: isn_grpc_call_fail(call, ISN_GRPC_STATUS_UNIMPLEMENTED, "unknown method %s", isn_grpc_call_path(call)); break;
    }
}

static void on_drained(isn_grpc_server *grpc, void *app) {
    (void)grpc;
    serving_loops_drained(app);
}

/* The loop's poll slept through a stall of the node (stall_watch.c says how it can tell). */
static void on_stall(uint64_t now_ns, void *app) {
    serving_loop *loop = app;
    if (loop->server->pool) search_service_note_resume(loop->server->pool, now_ns);
}

const isn_grpc_server_handlers rpc_handlers = {
    .on_open = on_open,
    .on_headers = on_headers,
    .on_request = on_request,
    .on_status = on_status,
    .on_sent = on_sent,
    .on_abandoned = on_abandoned,
    .on_release = on_release,
    .on_drained = on_drained,
    .on_stall = on_stall,
};
