#include "daemon/worker_pool.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc.h"
#include "base/base.h"

struct worker_pool {
    isn_scheduler *scheduler;
    const isn_index *index;
    isn_searcher *planner; /* the starting thread's, for the GPU training log */
    struct pool_worker *loop_analyser; /* when queries are analysed on the loop thread */
    uint32_t max_k;
    bool warm_up;
    uint32_t num_threads;
    char cost_model_state[ISN_CONF_PATH_MAX];
    isn_gpu_device *gpus;
    uint32_t num_gpus;
    uint32_t sim_gpus;
    /* The real first-stage backend ([gpu]): one device, answered through gpus[0]. */
    isn_gpu_backend *backend;
    search_worker *gpu_packer; /* the dispatcher thread's: packs the device's answers */
    uint32_t gpu_max_k;
    bool gpu_route_all;
    /* Second stage on the GPU: one handle (calls serialised), the learned crossover. */
    isn_gpu_l2 *l2_gpu;
    pthread_mutex_t l2_lock;
    isn_l2_crossover crossover;
    l2_route l2;
    _Atomic(search_job *) completed; /* Treiber stack, newest first */
    uv_async_t *wake;
};

/* A worker's state: it analyses queries (prepare) and runs them. */
typedef struct pool_worker {
    search_worker *search; /* NULL in the loop thread's analyser */
    isn_searcher *planner;
    isn_query_term terms[ISN_MAX_QUERY_TERMS]; /* for pre-analyzed terms */
} pool_worker;

static search_job *job_of(isn_job *sched) { return (search_job *)sched->user; }

static void push_completed(worker_pool *pool, search_job *job) {
    search_job *head = atomic_load_explicit(&pool->completed, memory_order_relaxed);
    do job->next = head;
    while (!atomic_compare_exchange_weak_explicit(&pool->completed, &head, job, memory_order_release,
                                                  memory_order_relaxed));
    uv_async_send(pool->wake);
}

search_job *worker_pool_take_completed(worker_pool *pool) {
    search_job *list = atomic_exchange_explicit(&pool->completed, NULL, memory_order_acquire), *ordered = NULL;
    while (list) {
        search_job *next = list->next;
        list->next = ordered;
        ordered = list;
        list = next;
    }
    return ordered;
}

/* ------------------------------------------------------------------ scheduler callbacks */

static void on_worker_free(void *user, void *state) {
    (void)user;
    pool_worker *worker = state;
    if (!worker) return;
    search_worker_free(worker->search);
    isn_searcher_free(worker->planner);
    free(worker);
}

static void *on_worker_init(void *user, uint32_t id) {
    worker_pool *pool = user;
    pool_worker *worker = calloc(1, sizeof *worker);
    if (!worker) return NULL;
    worker->search = search_worker_new(pool->index, id, pool->max_k);
    worker->planner = isn_searcher_new(pool->index);
    if (!worker->search || !worker->planner) {
        on_worker_free(user, worker);
        return NULL;
    }
    search_worker_set_l2_route(worker->search, &pool->l2);
    if (pool->warm_up) search_worker_warm_up(worker->search);
    return worker;
}

static void on_run_cpu(void *user, isn_job *sched, const isn_cpu_context *context) {
    (void)user;
    search_job *job = job_of(sched);
    job->enqueued_ns = sched->enqueued_ns;
    job->stop_ns = context->stop_ns;
    job->complete = true;
    search_worker_run(((pool_worker *)context->worker_state)->search, job, false);
    sched->complete = job->status != GRPC_STATUS_OK || job->complete;
    /* Errors and cancellations end early for reasons unrelated to the query's cost. */
    sched->measured = job->status == GRPC_STATUS_OK && !job->delay_us;
}

static void on_gpu_done(void *user, isn_job *sched) {
    (void)user;
    search_job *job = job_of(sched);
    job->queue_ns = sched->started_ns - sched->enqueued_ns;
    job->retrieval_ns = isn_sched_now_ns() - sched->started_ns;
    job->worker = sched->worker;
    search_job_pack_simulated(job);
}

/* The real backend: a job's request (its hits live in the request's arena, see gpu_eligible). */
static void on_gpu_request(void *user, isn_job *sched, isn_gpu_request *request) {
    (void)user;
    search_job *job = job_of(sched);
    request->query = &job->query;
    request->mode = job->mode;
    request->k = job->k;
    request->hits = job->gpu_hits;
}

static void on_gpu_answer(void *user, isn_job *sched, const isn_gpu_request *request) {
    worker_pool *pool = user;
    search_job *job = job_of(sched);
    job->queue_ns = sched->started_ns - sched->enqueued_ns;
    job->retrieval_ns = isn_sched_now_ns() - sched->started_ns;
    search_worker_pack_gpu(pool->gpu_packer, job, request->hits, request->num_hits,
                           request->answered_by == ISN_GPU_ANSWERED_DEVICE ? "gpu" : "cpu");
    job->worker = sched->worker;
}

/* Why admission refused a prepared job, as the client sees it. */
static void refuse(search_job *job, isn_submit_result result) {
    switch (result) {
    case ISN_SUBMIT_SHED_FULL:
        job->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(job->message, sizeof job->message, "server overloaded: its queues are full");
        return;
    case ISN_SUBMIT_SHED_OVERLOAD:
        job->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(job->message, sizeof job->message,
                 "server overloaded: no device can answer before the deadline (predicted %.3f ms on the cpu)",
                 job->sched.predicted_ns[ISN_DEVICE_CPU] / 1e6);
        return;
    case ISN_SUBMIT_QUEUED:
    case ISN_SUBMIT_STOPPED: break;
    }
    job->status = GRPC_STATUS_UNAVAILABLE;
    snprintf(job->message, sizeof job->message, "server is shutting down; retry on another replica");
}

static void on_complete(void *user, isn_job *sched) {
    worker_pool *pool = user;
    search_job *job = job_of(sched);
    if (sched->outcome == ISN_JOB_REFUSED) {
        /* prepare() already set the status of a request it refused. */
        job->reply.len = 0;
        if (sched->refusal) refuse(job, (isn_submit_result)sched->refusal);
    } else if (sched->outcome == ISN_JOB_DEADLINE_EXCEEDED) {
        job->status = GRPC_STATUS_DEADLINE_EXCEEDED;
        job->reply.len = 0;
        snprintf(job->message, sizeof job->message, "deadline passed after %.3f ms in the queue",
                 (double)(sched->finished_ns - sched->enqueued_ns) / 1e6);
    } else if (sched->outcome == ISN_JOB_ABANDONED) {
        job->status = GRPC_STATUS_UNAVAILABLE;
        job->reply.len = 0;
        snprintf(job->message, sizeof job->message, "server is shutting down; retry on another replica");
    }
    push_completed(pool, job);
}

/* ------------------------------------------------------------------ analysis (once, here) */

/* Pre-analyzed terms: looked up as given; repeats raise the count; terms absent here are counted. */
static int query_from_terms(worker_pool *pool, pool_worker *worker, const Isn__V1__SearchRequest *request,
                            isn_query *query, search_job *job) {
    isn_query_term *terms = worker->terms;
    query->terms = terms;
    query->num_terms = 0;
    query->num_unknown = 0;
    for (size_t i = 0; i < request->n_terms; i++) {
        const char *text = request->terms[i];
        uint32_t term_id;
        if (!isn_index_find_term(pool->index, text, strlen(text), &term_id)) {
            query->num_unknown++;
            continue;
        }
        uint32_t j = 0;
        while (j < query->num_terms && terms[j].term_id != term_id) j++;
        if (j < query->num_terms) {
            terms[j].count++;
            continue;
        }
        if (query->num_terms == ISN_MAX_QUERY_TERMS) {
            snprintf(job->message, sizeof job->message, "query has more than %d distinct terms", ISN_MAX_QUERY_TERMS);
            return GRPC_STATUS_INVALID_ARGUMENT;
        }
        isn_term_stats stats;
        isn_index_term_stats(pool->index, term_id, &stats);
        terms[query->num_terms++] = (isn_query_term){.term_id = term_id, .count = 1, .df = stats.df};
    }
    return 0;
}

/* Analyses the request once, on a worker (prepare): its terms go with the job (in the request's
 * arena), and the cost model's features come from them. 0, or the gRPC status to answer with. */
static int analyse(worker_pool *pool, pool_worker *worker, search_job *job) {
    const Isn__V1__SearchRequest *request = job->request;
    isn_query parsed;
    if (request->query && request->query[0]) {
        char err[ISN_ERR_LEN];
        if (isn_query_parse(worker->planner, request->query, strlen(request->query), &parsed, err, sizeof err) < 0) {
            snprintf(job->message, sizeof job->message, "%s", err);
            return GRPC_STATUS_INVALID_ARGUMENT;
        }
    } else {
        int status = query_from_terms(pool, worker, request, &parsed, job);
        if (status) return status;
    }
    job->query = parsed;
    job->query.terms = NULL;
    if (parsed.num_terms) {
        size_t bytes = parsed.num_terms * sizeof *parsed.terms;
        job->query.terms = job->memory ? arena_alloc(job->memory, bytes) : NULL;
        if (!job->query.terms) {
            snprintf(job->message, sizeof job->message, "out of memory for %u query terms", parsed.num_terms);
            return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        memcpy(job->query.terms, parsed.terms, bytes);
    }
    isn_job_features_quick(pool->index, &job->query, job->k, job->mode, job->algo, &job->sched.features);
    return 0;
}

/* Whether the GPU backend can answer the job as asked; if so its hits get room in the request's arena. */
static bool gpu_eligible(worker_pool *pool, search_job *job) {
    const Isn__V1__SearchRequest *request = job->request;
    if (!pool->backend || job->delay_us || request->global_stats || (request->ranker && request->ranker[0]) ||
        job->k > pool->gpu_max_k || job->query.num_terms == 0)
        return false;
    job->gpu_hits = job->memory ? arena_alloc(job->memory, job->k * sizeof *job->gpu_hits) : NULL;
    return job->gpu_hits != NULL;
}

static bool on_prepare(void *user, isn_job *sched, void *worker_state) {
    worker_pool *pool = user;
    search_job *job = job_of(sched);
    int refused = analyse(pool, worker_state, job);
    if (refused) {
        job->status = refused;
        return false;
    }
    job->gpu_hits = NULL;
    if (pool->backend)
        sched->placement = !gpu_eligible(pool, job) ? ISN_PLACE_CPU
                           : pool->gpu_route_all    ? ISN_PLACE_GPU
                                                    : ISN_PLACE_ANY;
    /* The threshold probe costs several times the rest of the analysis and only sharpens the CPU's
     * prediction: skip it for a job the GPU takes anyway. */
    bool gpu_bound = sched->placement == ISN_PLACE_GPU ||
                     (sched->placement == ISN_PLACE_ANY && isn_scheduler_gpu_clearly_wins(pool->scheduler, sched));
    if (!gpu_bound)
        isn_job_features_of(pool->index, &job->query, job->k, job->mode, job->algo, &job->sched.features);
    return true;
}

int worker_pool_submit(worker_pool *pool, search_job *job) {
    job->next = NULL;
    job->complete = true;
    job->stop_ns = 0;
    isn_job *sched = &job->sched;
    memset(sched, 0, sizeof *sched);
    sched->user = job;
    sched->received_ns = job->received_ns;
    sched->deadline_ns = job->deadline_ns;
    if (!isn_scheduler_may_admit(pool->scheduler, job->received_ns, job->deadline_ns)) {
        snprintf(job->message, sizeof job->message,
                 "server overloaded: no device can start this query before its deadline");
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    /* With enough workers the loop thread only frames requests: a worker analyses the query
     * (prepare) before the scheduler admits and routes it, so analysis scales with the workers. */
    isn_submit_result result;
    if (pool->loop_analyser) {
        if (!on_prepare(pool, sched, pool->loop_analyser)) return job->status;
        result = isn_scheduler_submit(pool->scheduler, sched);
    } else {
        result = isn_scheduler_submit_unprepared(pool->scheduler, sched);
    }
    if (result == ISN_SUBMIT_QUEUED) return 0;
    refuse(job, result);
    return job->status;
}

/* ------------------------------------------------------------------ the real GPU */

#define TRAINING_MAX_QUERIES 100000u

/* The [gpu] training log's queries (TSV "id<TAB>query", or a query per line), analysed as requests
 * are. Only needed while the backend opens. 0, or -1 with err. */
static int load_training_log(worker_pool *pool, const char *path, isn_query **queries, uint32_t *count, char *err,
                             size_t err_len) {
    *queries = NULL;
    *count = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len, "gpu.training_queries %s: cannot open: %m", path);
        return -1;
    }
    size_t terms_cap = 0, terms_len = 0, cap = 0;
    isn_query_term *terms = NULL;
    isn_query *list = NULL;
    char *line = NULL, why[ISN_ERR_LEN];
    size_t line_cap = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && *count < TRAINING_MAX_QUERIES && (len = getline(&line, &line_cap, f)) > 0) {
        char *text = memchr(line, '\t', (size_t)len);
        text = text ? text + 1 : line;
        isn_query q;
        if (isn_query_parse(pool->planner, text, (size_t)(line + len - text), &q, why, sizeof why) < 0 ||
            q.num_terms == 0)
            continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 1024;
            isn_query *grown = realloc(list, cap * sizeof *list);
            if (!grown) rc = -1;
            else list = grown;
        }
        if (rc == 0 && terms_len + q.num_terms > terms_cap) {
            terms_cap = 2 * (terms_len + q.num_terms) + 4096;
            isn_query_term *grown = realloc(terms, terms_cap * sizeof *terms);
            if (!grown) rc = -1;
            else terms = grown;
        }
        if (rc != 0) break;
        memcpy(terms + terms_len, q.terms, q.num_terms * sizeof *q.terms);
        list[*count] = q;
        list[*count].terms = (isn_query_term *)(uintptr_t)terms_len; /* an offset until terms stop moving */
        terms_len += q.num_terms;
        (*count)++;
    }
    free(line);
    fclose(f);
    if (rc != 0) {
        snprintf(err, err_len, "gpu.training_queries %s: out of memory", path);
        free(list);
        free(terms);
        *count = 0;
        return -1;
    }
    for (uint32_t i = 0; i < *count; i++) list[i].terms = terms + (uintptr_t)list[i].terms;
    *queries = list;
    return 0;
}

static void free_training_log(isn_query *queries, uint32_t count) {
    if (queries && count) free(queries[0].terms);
    free(queries);
}

/* Opens the [gpu] backend (uploads the postings, warms every kernel up) and makes it the scheduler's
 * device. No usable GPU is not an error: the node serves on the CPU and says why. -1 with err only for
 * a bad configuration. */
static int open_gpu(worker_pool *pool, const isn_conf *conf, isn_scheduler_config *config, char *err,
                    size_t err_len) {
    if (!conf->gpu_enable) return 0;
    if (conf->gpu_sim_devices) {
        snprintf(err, err_len, "gpu.enable and scheduler.simulated_gpus_answer_without_hits are exclusive: "
                               "pick the real GPU or the simulator");
        return -1;
    }
    isn_gpu_options options;
    isn_gpu_options_default(&options);
    options.device = (int)conf->gpu_device;
    options.emulate = conf->gpu_emulate;
    options.memory_budget = (uint64_t)conf->gpu_memory_budget_mib << 20;
    options.max_batch = conf->gpu_max_batch;
    options.max_k = conf->gpu_max_k;
    isn_query *training = NULL;
    uint32_t num_training = 0;
    if (conf->gpu_training_queries[0]) {
        if (load_training_log(pool, conf->gpu_training_queries, &training, &num_training, err, err_len) < 0)
            return -1;
        options.training_queries = training;
        options.num_training_queries = num_training;
    }
    char why[512];
    uint64_t start = isn_sched_now_ns();
    pool->backend = isn_gpu_open(pool->index, &options, why, sizeof why);
    free_training_log(training, num_training);
    if (!pool->backend) {
        log_warn("gpu: no GPU first stage, serving on the CPU only: %s", why);
        return 0;
    }
    isn_gpu_cuda_callbacks callbacks = {.request_of = on_gpu_request, .on_job_done = on_gpu_answer, .user = pool};
    pool->gpus = calloc(1, sizeof *pool->gpus);
    pool->gpu_packer = search_worker_new(pool->index, UINT32_MAX, conf->gpu_max_k);
    if (!pool->gpus || !pool->gpu_packer || isn_gpu_cuda_new(pool->backend, &callbacks, conf->gpu_max_batch, &pool->gpus[0]) < 0) {
        snprintf(err, err_len, "out of memory for the GPU device");
        return -1;
    }
    pool->num_gpus = 1;
    pool->gpu_max_k = conf->gpu_max_k;
    pool->gpu_route_all = conf->gpu_route_all;
    config->gpus = pool->gpus;
    config->num_gpus = 1;
    isn_gpu_health health;
    isn_gpu_cuda_health(&pool->gpus[0], &health);
    log_info("gpu: %s%s ready in %.3f s (warm-up %.1f ms): %u of %u lists resident (%u as prefixes), %.1f of %.1f MB%s",
             health.device_name, conf->gpu_emulate ? " (EMULATED on the host: tests only)" : "",
             (double)(isn_sched_now_ns() - start) / 1e9, health.warmup_ms, health.terms_resident + health.terms_prefix,
             health.terms_total, health.terms_prefix, (double)health.bytes_resident / 1e6,
             (double)health.index_bytes / 1e6, conf->gpu_route_all ? "; route_all: every eligible query to the GPU" : "");
    return 0;
}

/* The second stage's GPU handle (real GPUs only: the emulated device has no L2 kernels). */
static void open_l2_gpu(worker_pool *pool, const isn_conf *conf) {
    if (!conf->gpu_enable || !conf->gpu_rerank || conf->gpu_emulate) return;
    isn_gpu_l2_options options;
    isn_gpu_l2_options_default(&options);
    options.device = (int)conf->gpu_device;
    options.model_memory_budget = conf->gpu_model_memory_bytes;
    char why[512];
    pool->l2_gpu = isn_gpu_l2_open(&options, why, sizeof why);
    if (!pool->l2_gpu) {
        log_warn("gpu: second stage on the CPU only: %s", why);
        return;
    }
    pool->l2.gpu = pool->l2_gpu;
    log_info("gpu: second stage may run on the GPU (model cache %u MiB); starting crossover for 300 trees: %u "
             "candidates",
             conf->gpu_model_memory_bytes >> 20, isn_l2_crossover_candidates(&pool->crossover, 300));
}

/* ------------------------------------------------------------------ start, stop */

worker_pool *worker_pool_start(const isn_index *index, const isn_conf *conf, uint32_t workers, uv_async_t *wake,
                               char *err, size_t err_len) {
    worker_pool *pool = calloc(1, sizeof *pool);
    if (!pool) {
        snprintf(err, err_len, "out of memory for the worker pool");
        return NULL;
    }
    pool->index = index;
    pool->max_k = conf->max_k;
    pool->warm_up = conf->warm_up;
    pool->wake = wake;
    pool->num_threads = workers;
    snprintf(pool->cost_model_state, sizeof pool->cost_model_state, "%s", conf->cost_model_state);
    pool->planner = isn_searcher_new(index);
    pthread_mutex_init(&pool->l2_lock, NULL);
    pool->l2.lock = &pool->l2_lock;
    pool->l2.crossover = &pool->crossover;
    if (!pool->planner || isn_l2_crossover_init(&pool->crossover) < 0) {
        snprintf(err, err_len, "out of memory for the query planner");
        worker_pool_stop(pool);
        return NULL;
    }

    isn_scheduler_config config;
    isn_scheduler_config_default(&config);
    config.workers = workers;
    config.queue_capacity = conf->max_queue;
    config.early_stop_fraction = conf->early_stop_percent / 100.0;
    config.admit_fraction = conf->admit_percent / 100.0;
    config.degraded_fraction = conf->degraded_stop_percent / 100.0;
    config.route_margin = conf->route_margin_percent / 100.0;
    config.worker_nice = (int)conf->worker_nice;
    config.overload = conf->overload_degrade ? ISN_OVERLOAD_DEGRADE : ISN_OVERLOAD_SHED;
    config.batch.max_batch = conf->gpu_batch_max;
    config.batch.memory_budget = conf->gpu_batch_memory_bytes;
    config.batch.linger_ns = (uint64_t)conf->gpu_batch_linger_us * 1000;
    config.batch.safety_ns = (uint64_t)conf->gpu_deadline_safety_us * 1000;
    config.batch.launch_ns = conf->gpu_sim_devices ? conf->gpu_sim_launch_ns : config.batch.launch_ns;
    config.worker_init = on_worker_init;
    config.worker_free = on_worker_free;
    config.run_cpu = on_run_cpu;
    config.prepare = on_prepare;
    config.complete = on_complete;
    config.user = pool;
    bool model_loaded = false;
    if (conf->cost_model_state[0]) {
        char why[512];
        int rc = isn_cost_model_load(&config.model, conf->cost_model_state, why, sizeof why);
        if (rc < 0) log_warn("cost model state not loaded, starting from the fitted formula: %s", why);
        else if (rc == 0) log_info("cost model state loaded from %s", conf->cost_model_state);
        model_loaded = rc == 0;
    }
    if (open_gpu(pool, conf, &config, err, err_len) < 0) {
        worker_pool_stop(pool);
        return NULL;
    }
    if (pool->backend) {
        /* Until it has measured batches, the GPU side starts from the H200 numbers of issue 5 (about
         * 10 G postings/s decode + score, ~0.1 ms per launch and wait, ~10 us per query). */
        config.batch.launch_ns = 100000;
        if (!model_loaded) {
            isn_gpu_sim_config start;
            isn_gpu_sim_config_default(&start);
            start.launch_ns = config.batch.launch_ns;
            start.per_posting_ns = 0.1;
            start.per_query_ns = 10000;
            isn_cost_model_seed(&config.model, ISN_DEVICE_GPU, isn_gpu_sim_job_ns, &start);
        }
    }
    open_l2_gpu(pool, conf);
    if (conf->gpu_sim_devices) {
        pool->sim_gpus = conf->gpu_sim_devices;
        pool->gpus = calloc(conf->gpu_sim_devices, sizeof *pool->gpus);
        isn_gpu_sim_config sim;
        isn_gpu_sim_config_default(&sim);
        sim.launch_ns = conf->gpu_sim_launch_ns;
        sim.per_posting_ns = 1000.0 / conf->gpu_sim_postings_per_us;
        sim.per_query_ns = conf->gpu_sim_query_ns;
        sim.failure_rate = conf->gpu_sim_failure_permille / 1000.0;
        sim.on_job_done = on_gpu_done;
        sim.user = pool;
        for (uint32_t i = 0; pool->gpus && i < conf->gpu_sim_devices; i++) {
            sim.seed = i + 1;
            if (isn_gpu_sim_new(&sim, conf->gpu_batch_max, conf->gpu_batch_memory_bytes, &pool->gpus[i]) < 0) break;
            pool->num_gpus++;
        }
        if (pool->num_gpus < conf->gpu_sim_devices) {
            snprintf(err, err_len, "out of memory for %u simulated GPU devices", conf->gpu_sim_devices);
            worker_pool_stop(pool);
            return NULL;
        }
        config.gpus = pool->gpus;
        config.num_gpus = pool->num_gpus;
        /* The simulator's latency model is known: the GPU side starts from it instead of learning
         * it under load (a state file's GPU part may be from another simulator setting). */
        isn_cost_model_seed(&config.model, ISN_DEVICE_GPU, isn_gpu_sim_job_ns, &sim);
        log_warn("SIMULATED GPUs: scheduler.simulated_gpus_answer_without_hits = %u; queries routed to them "
                 "are answered WITHOUT HITS (device \"gpu-sim\"). For benchmarks and tests only, never in "
                 "production. Latency model: launch %u ns + %u ns per query + postings at %u per us; the cost "
                 "model's GPU side is seeded from it",
                 pool->num_gpus, conf->gpu_sim_launch_ns, conf->gpu_sim_query_ns, conf->gpu_sim_postings_per_us);
    }
    /* Analysis goes where there is time to spare: a few workers without a GPU are the bottleneck
     * (the loop thread is not); with a GPU, or many workers, the loop thread is. */
    if (workers < conf->analysis_min_workers && !pool->backend && !pool->num_gpus) {
        pool->loop_analyser = calloc(1, sizeof *pool->loop_analyser);
        if (!pool->loop_analyser) {
            snprintf(err, err_len, "out of memory for the query analyser");
            worker_pool_stop(pool);
            return NULL;
        }
        pool->loop_analyser->planner = pool->planner;
    }
    pool->scheduler = isn_scheduler_start(&config, err, err_len);
    if (!pool->scheduler) {
        worker_pool_stop(pool);
        return NULL;
    }
    return pool;
}

bool worker_pool_analyses_on_loop(const worker_pool *pool) { return pool->loop_analyser != NULL; }

void worker_pool_abandon_queued(worker_pool *pool) { isn_scheduler_abandon_queued(pool->scheduler); }

uint32_t worker_pool_queued(const worker_pool *pool) {
    isn_scheduler_stats stats;
    isn_scheduler_get_stats(pool->scheduler, &stats);
    return stats.queue_depth[0] + stats.queue_depth[1] + stats.queue_depth[2] + stats.deque_depth;
}

uint32_t worker_pool_running(const worker_pool *pool) {
    isn_scheduler_stats stats;
    isn_scheduler_get_stats(pool->scheduler, &stats);
    return stats.running;
}

uint32_t worker_pool_size(const worker_pool *pool) { return pool->num_threads; }

void worker_pool_stop(worker_pool *pool) {
    if (!pool) return;
    if (pool->scheduler) {
        if (pool->cost_model_state[0]) {
            isn_cost_model model;
            char why[512];
            isn_scheduler_get_model(pool->scheduler, &model);
            if (isn_cost_model_save(&model, pool->cost_model_state, why, sizeof why) < 0)
                log_warn("cost model state not saved: %s", why);
        }
        isn_scheduler_stop(pool->scheduler);
    }
    for (uint32_t i = 0; i < pool->num_gpus; i++) {
        if (pool->backend) isn_gpu_cuda_free(&pool->gpus[i]);
        else isn_gpu_sim_free(&pool->gpus[i]);
    }
    free(pool->gpus);
    isn_gpu_close(pool->backend);
    search_worker_free(pool->gpu_packer);
    isn_gpu_l2_close(pool->l2_gpu);
    isn_l2_crossover_destroy(&pool->crossover);
    pthread_mutex_destroy(&pool->l2_lock);
    isn_searcher_free(pool->planner);
    free(pool->loop_analyser);
    free(pool);
}

/* ------------------------------------------------------------------ metrics */

static const char *const QUEUE_NAMES[ISN_QUEUES] = {"cpu", "gpu", "undecided"};
static const char *const DEVICE_NAMES[ISN_DEVICE_KINDS] = {"cpu", "gpu"};

static void render_prometheus(const isn_scheduler_stats *st, byte_buffer *out) {
    prom_family(out, "isn_scheduler_queue_depth", "gauge", "Jobs waiting in each scheduler queue (EDF ordered).");
    for (int q = 0; q < ISN_QUEUES; q++)
        buffer_printf(out, "isn_scheduler_queue_depth{queue=\"%s\"} %u\n", QUEUE_NAMES[q], st->queue_depth[q]);
    prom_family(out, "isn_scheduler_deque_depth", "gauge", "Jobs held in the CPU workers' own deques.");
    buffer_printf(out, "isn_scheduler_deque_depth %u\n", st->deque_depth);
    prom_family(out, "isn_scheduler_routed_total", "counter", "Routing decisions: the queue each admitted job went to.");
    for (int q = 0; q < ISN_QUEUES; q++)
        buffer_printf(out, "isn_scheduler_routed_total{queue=\"%s\"} %llu\n", QUEUE_NAMES[q],
                      (unsigned long long)st->routed[q]);
    prom_family(out, "isn_scheduler_ran_total", "counter", "Jobs run, by device.");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        buffer_printf(out, "isn_scheduler_ran_total{device=\"%s\"} %llu\n", DEVICE_NAMES[d],
                      (unsigned long long)st->ran_on[d]);
    prom_family(out, "isn_scheduler_wait_seconds_total", "counter", "Time jobs waited from admission to start, by device.");
    prom_family(out, "isn_scheduler_waits_total", "counter", "Jobs counted in isn_scheduler_wait_seconds_total.");
    prom_family(out, "isn_scheduler_busy_seconds_total", "counter",
         "Time spent running jobs, summed over CPU workers or GPU devices (utilisation = rate / units).");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        buffer_printf(out, "isn_scheduler_wait_seconds_total{device=\"%s\"} %.9g\n", DEVICE_NAMES[d],
                      st->wait_seconds_sum[d]);
        buffer_printf(out, "isn_scheduler_waits_total{device=\"%s\"} %llu\n", DEVICE_NAMES[d],
                      (unsigned long long)st->wait_count[d]);
        buffer_printf(out, "isn_scheduler_busy_seconds_total{device=\"%s\"} %.9g\n", DEVICE_NAMES[d],
                      st->busy_seconds[d]);
    }
    prom_family(out, "isn_scheduler_utilisation", "gauge", "Busy share of each device kind since start (0..1).");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        uint32_t units = d == ISN_DEVICE_CPU ? st->workers : st->gpus;
        double u = units && st->uptime_seconds > 0 ? st->busy_seconds[d] / (units * st->uptime_seconds) : 0;
        buffer_printf(out, "isn_scheduler_utilisation{device=\"%s\"} %.6f\n", DEVICE_NAMES[d], u);
    }
    prom_family(out, "isn_scheduler_steals_total", "counter",
         "Work taken across: from another worker's deque, GPU-preferred jobs run by the CPU, undecided jobs "
         "taken by each side.");
    buffer_printf(out,
                  "isn_scheduler_steals_total{kind=\"deque\"} %llu\nisn_scheduler_steals_total{kind=\"gpu_to_cpu\"} "
                  "%llu\nisn_scheduler_steals_total{kind=\"undecided_cpu\"} %llu\n"
                  "isn_scheduler_steals_total{kind=\"undecided_gpu\"} %llu\n",
                  (unsigned long long)st->stolen_deque, (unsigned long long)st->stolen_gpu,
                  (unsigned long long)st->undecided_cpu, (unsigned long long)st->undecided_gpu);
    prom_family(out, "isn_scheduler_shed_total", "counter",
         "Jobs refused at admission: a full queue, or no device able to finish before the deadline.");
    buffer_printf(out, "isn_scheduler_shed_total{reason=\"queue_full\"} %llu\nisn_scheduler_shed_total{reason=\"overload\"} %llu\n",
                  (unsigned long long)st->shed_full, (unsigned long long)st->shed_overload);
    prom_family(out, "isn_scheduler_degraded_total", "counter", "Jobs admitted degraded under overload (earlier stop).");
    buffer_printf(out, "isn_scheduler_degraded_total %llu\n", (unsigned long long)st->degraded);
    prom_family(out, "isn_scheduler_dropped_dead_total", "counter", "Jobs past their deadline when dequeued: not run.");
    buffer_printf(out, "isn_scheduler_dropped_dead_total %llu\n", (unsigned long long)st->dropped_dead);
    prom_family(out, "isn_scheduler_partial_total", "counter", "Jobs that stopped early with their best hits (complete=false).");
    buffer_printf(out, "isn_scheduler_partial_total %llu\n", (unsigned long long)st->partial);
    prom_family(out, "isn_scheduler_batches_total", "counter", "GPU batches sent, by why they were sent.");
    for (int r = 0; r < ISN_FLUSH_REASONS; r++)
        buffer_printf(out, "isn_scheduler_batches_total{reason=\"%s\"} %llu\n", isn_flush_reason_name(r),
                      (unsigned long long)st->batch_flush[r]);
    prom_family(out, "isn_scheduler_batch_jobs_total", "counter", "Jobs sent in GPU batches (mean batch size = this / batches).");
    buffer_printf(out, "isn_scheduler_batch_jobs_total %llu\n", (unsigned long long)st->batch_jobs);
    prom_family(out, "isn_scheduler_gpu_failures_total", "counter", "GPU batches that failed (their jobs re-ran on the CPU).");
    buffer_printf(out, "isn_scheduler_gpu_failures_total %llu\n", (unsigned long long)st->gpu_failures);
    prom_family(out, "isn_scheduler_gpu_reruns_total", "counter", "Jobs re-run on the CPU after a GPU failure.");
    buffer_printf(out, "isn_scheduler_gpu_reruns_total %llu\n", (unsigned long long)st->gpu_reruns);
    prom_family(out, "isn_scheduler_service_scale", "gauge",
         "Measured over predicted service time lately, by device; admission scales its estimates by it.");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        buffer_printf(out, "isn_scheduler_service_scale{device=\"%s\"} %.3f\n", DEVICE_NAMES[d], st->service_scale[d]);
    prom_family(out, "isn_scheduler_prepare_queue_depth", "gauge", "Requests waiting for a worker to analyse them.");
    buffer_printf(out, "isn_scheduler_prepare_queue_depth %u\n", st->prepare_depth);
    prom_family(out, "isn_scheduler_prepared_total", "counter", "Requests a worker analysed and passed to admission.");
    buffer_printf(out, "isn_scheduler_prepared_total %llu\n", (unsigned long long)st->prepared);
    prom_family(out, "isn_scheduler_refused_at_analysis_total", "counter",
         "Requests refused while a worker analysed them (invalid query, too many terms, out of memory).");
    buffer_printf(out, "isn_scheduler_refused_at_analysis_total %llu\n", (unsigned long long)st->refused_prepare);
    prom_family(out, "isn_scheduler_gpu_batch_fixed_seconds", "gauge",
         "Learned fixed part of a GPU batch's time (launch, copies, synchronisation), paid once per batch.");
    buffer_printf(out, "isn_scheduler_gpu_batch_fixed_seconds %.9f\n", st->batch_fixed_seconds);
    prom_family(out, "isn_scheduler_gpu_batch_mape_percent", "gauge",
         "Mean absolute percentage error of GPU batch times as predicted (fixed part + jobs), NaN before any.");
    if (isnan(st->batch_mape)) buffer_printf(out, "isn_scheduler_gpu_batch_mape_percent NaN\n");
    else buffer_printf(out, "isn_scheduler_gpu_batch_mape_percent %.3f\n", st->batch_mape);
    prom_family(out, "isn_scheduler_gpu_batch_per_job_seconds", "gauge", "Learned part of a GPU batch's time per job.");
    buffer_printf(out, "isn_scheduler_gpu_batch_per_job_seconds %.9f\n", st->batch_per_job_seconds);
    prom_family(out, "isn_cost_model_mape_percent", "gauge",
         "Cost model mean absolute percentage error since warm-up, by device (NaN before any).");
    prom_family(out, "isn_cost_model_updates_total", "counter", "Measured times the cost model learned from, by device.");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        if (isnan(st->mape[d])) buffer_printf(out, "isn_cost_model_mape_percent{device=\"%s\"} NaN\n", DEVICE_NAMES[d]);
        else buffer_printf(out, "isn_cost_model_mape_percent{device=\"%s\"} %.3f\n", DEVICE_NAMES[d], st->mape[d]);
        buffer_printf(out, "isn_cost_model_updates_total{device=\"%s\"} %llu\n", DEVICE_NAMES[d],
                      (unsigned long long)st->model_updates[d]);
    }
}

static void render_json(const worker_pool *pool, const isn_scheduler_stats *st, byte_buffer *out) {
    buffer_printf(out,
                  "\"scheduler\":{\"queues\":{\"cpu\":%u,\"gpu\":%u,\"undecided\":%u,\"deques\":%u},"
                  "\"routed\":{\"cpu\":%llu,\"gpu\":%llu,\"undecided\":%llu},\"ran\":{\"cpu\":%llu,\"gpu\":%llu},"
                  "\"shed_queue_full\":%llu,\"shed_overload\":%llu,\"degraded\":%llu,\"dropped_dead\":%llu,"
                  "\"partial\":%llu,\"steals\":{\"deque\":%llu,\"gpu_to_cpu\":%llu,\"undecided_cpu\":%llu,"
                  "\"undecided_gpu\":%llu},\"batches\":%llu,\"batch_jobs\":%llu,\"gpu_failures\":%llu,",
                  st->queue_depth[0], st->queue_depth[1], st->queue_depth[2], st->deque_depth,
                  (unsigned long long)st->routed[0], (unsigned long long)st->routed[1],
                  (unsigned long long)st->routed[2], (unsigned long long)st->ran_on[0],
                  (unsigned long long)st->ran_on[1], (unsigned long long)st->shed_full,
                  (unsigned long long)st->shed_overload, (unsigned long long)st->degraded,
                  (unsigned long long)st->dropped_dead, (unsigned long long)st->partial,
                  (unsigned long long)st->stolen_deque, (unsigned long long)st->stolen_gpu,
                  (unsigned long long)st->undecided_cpu, (unsigned long long)st->undecided_gpu,
                  (unsigned long long)st->batches, (unsigned long long)st->batch_jobs,
                  (unsigned long long)st->gpu_failures);
    buffer_printf(out, "\"simulated_gpus\":%u,\"gpus\":%u,\"service_scale\":{\"cpu\":%.3f,\"gpu\":%.3f},",
                  pool->sim_gpus, st->gpus,
                  st->service_scale[0], st->service_scale[1]);
    buffer_printf(out, "\"prepare\":{\"queued\":%u,\"prepared\":%llu,\"refused\":%llu},", st->prepare_depth,
                  (unsigned long long)st->prepared, (unsigned long long)st->refused_prepare);
    buffer_printf(out, "\"gpu_batch_us\":{\"fixed\":%.1f,\"per_job\":%.2f},", st->batch_fixed_seconds * 1e6,
                  st->batch_per_job_seconds * 1e6);
    if (isnan(st->batch_mape)) buffer_printf(out, "\"gpu_batch_mape_percent\":null,");
    else buffer_printf(out, "\"gpu_batch_mape_percent\":%.3f,", st->batch_mape);
    buffer_printf(out, "\"cost_model_mape_percent\":{");
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        if (isnan(st->mape[d])) buffer_printf(out, "%s\"%s\":null", d ? "," : "", DEVICE_NAMES[d]);
        else buffer_printf(out, "%s\"%s\":%.3f", d ? "," : "", DEVICE_NAMES[d], st->mape[d]);
    }
    buffer_printf(out, "}}");
}

int worker_pool_gpu_state(const worker_pool *pool, char *reason, size_t reason_len) {
    if (!pool->backend) return WORKER_POOL_NO_GPU;
    isn_gpu_health health;
    isn_gpu_cuda_health(&pool->gpus[0], &health);
    if (health.ready && health.healthy) return WORKER_POOL_GPU_HEALTHY;
    snprintf(reason, reason_len, "%s", health.ready ? health.reason : "not warmed up");
    return WORKER_POOL_GPU_DEGRADED;
}

static void render_gpu_json(worker_pool *pool, byte_buffer *out) {
    buffer_printf(out, ",\"gpu\":{\"first_stage\":");
    if (pool->backend) {
        isn_gpu_health h;
        isn_gpu_cuda_health(&pool->gpus[0], &h);
        buffer_printf(out,
                      "{\"device\":\"%s\",\"ready\":%s,\"healthy\":%s,\"reason\":\"%s\",\"warmup_ms\":%.3f,"
                      "\"index_bytes\":%llu,\"bytes_resident\":%llu,\"terms_total\":%u,\"terms_resident\":%u,"
                      "\"terms_prefix\":%u,\"batches\":%llu,\"queries_device\":%llu,\"queries_cpu\":%llu,"
                      "\"queries_not_resident\":%llu,\"queries_prefix\":%llu,\"device_errors\":%llu,"
                      "\"bytes_transferred\":%llu}",
                      h.device_name, h.ready ? "true" : "false", h.healthy ? "true" : "false",
                      h.healthy ? "" : "device error", h.warmup_ms, (unsigned long long)h.index_bytes,
                      (unsigned long long)h.bytes_resident, h.terms_total, h.terms_resident, h.terms_prefix,
                      (unsigned long long)h.batches, (unsigned long long)h.queries_device,
                      (unsigned long long)h.queries_cpu, (unsigned long long)h.queries_not_resident,
                      (unsigned long long)h.queries_prefix, (unsigned long long)h.device_errors,
                      (unsigned long long)h.bytes_transferred);
    } else {
        buffer_printf(out, "null");
    }
    isn_l2_crossover *c = &pool->crossover;
    buffer_printf(out,
                  ",\"rerank\":{\"gpu\":%s,\"chosen\":{\"cpu\":%llu,\"gpu\":%llu},\"explored\":%llu,"
                  "\"measured\":{\"cpu\":%llu,\"gpu\":%llu},\"ns_per_candidate_tree\":{\"cpu\":%.4f,\"gpu\":%.4f},"
                  "\"fixed_ns\":{\"cpu\":%.0f,\"gpu\":%.0f},\"crossover_candidates\":{\"100\":%u,\"300\":%u,"
                  "\"1000\":%u}}}",
                  pool->l2_gpu ? "true" : "false", (unsigned long long)c->chosen[0], (unsigned long long)c->chosen[1],
                  (unsigned long long)c->explored, (unsigned long long)c->measured[0],
                  (unsigned long long)c->measured[1], c->b[0], c->b[1], c->a[0], c->a[1],
                  isn_l2_crossover_candidates(c, 100), isn_l2_crossover_candidates(c, 300),
                  isn_l2_crossover_candidates(c, 1000));
}

static void render_gpu_prometheus(worker_pool *pool, byte_buffer *out) {
    if (pool->backend) {
        isn_gpu_health h;
        isn_gpu_cuda_health(&pool->gpus[0], &h);
        char text[4096];
        size_t len = isn_gpu_health_format_metrics(&h, "device=\"0\"", text, sizeof text);
        if (len >= sizeof text) len = sizeof text - 1;
        buffer_append(out, text, len);
    }
    isn_l2_crossover *c = &pool->crossover;
    prom_family(out, "isn_rerank_device_total", "counter", "Second-stage calls by the device the crossover chose.");
    buffer_printf(out, "isn_rerank_device_total{device=\"cpu\"} %llu\nisn_rerank_device_total{device=\"gpu\"} %llu\n",
                  (unsigned long long)c->chosen[0], (unsigned long long)c->chosen[1]);
    prom_family(out, "isn_rerank_crossover_candidates", "gauge",
         "Candidates per query from which the GPU second stage is predicted faster, by model trees.");
    for (uint32_t trees = 100; trees <= 1000; trees = trees == 100 ? 300 : 1001)
        buffer_printf(out, "isn_rerank_crossover_candidates{trees=\"%u\"} %u\n", trees,
                      isn_l2_crossover_candidates(c, trees));
}

void worker_pool_render_metrics(worker_pool *pool, byte_buffer *out, bool json) {
    isn_scheduler_stats st;
    isn_scheduler_get_stats(pool->scheduler, &st);
    if (json) {
        render_json(pool, &st, out);
        render_gpu_json(pool, out);
    } else {
        render_prometheus(&st, out);
        render_gpu_prometheus(pool, out);
    }
}
