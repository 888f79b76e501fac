/* isnd's search service: adapts Search requests to the scheduler. A request becomes a scheduler job;
 * the scheduler has it analysed (prepare: here, on a worker or the loop thread), runs it on a CPU
 * worker (search_worker.c) or the GPU, and completes it; finished jobs go back to the loop that owns
 * their calls (its completion queue). Workers never touch any other libuv handle. */
#include "daemon/search_service.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "daemon/generation.h"
#include "daemon/gpu_setup.h"
#include "daemon/rankers.h"
#include "grpc/framing.h"

struct search_service {
    isn_scheduler *scheduler;
    struct service_worker *loop_analyser; /* prepare's state when the scheduler analyses on the loop thread */
    pthread_mutex_t loop_analyser_lock;   /* the loops share it: one analyses at a time */
    uint32_t max_k;
    float prior_weight; /* search.prior_weight */
    bool warm_up;
    bool derive_field_data;
    uint32_t num_threads;
    uint32_t sim_gpus;
    uint32_t gpu_max_k;
    bool gpu_route_all;
    /* Second stage: the GPU's model cache (NULL: none) and gpu/'s device choice over it. */
    isn_gpu_l2 *l2_gpu;
    l2_route l2;
    /* Apart from what the loops read at every request (scheduler): gpu.jobs moves at every GPU job. */
    char gpu_apart[64];
    /* The real first-stage backends ([gpu]), one per device, each a replica of the partition: the
     * scheduler's devices, one dispatcher thread each; only queries of the generation they hold go
     * to them (gpu_setup.c). */
    gpu_first_stage gpu;
};

/* A worker's state: it analyses queries (prepare) and runs them, with its own searcher and planner
 * of each job's generation. */
typedef struct service_worker {
    uint32_t id; /* the loop thread's analyser: the number of workers */
    isn_query_term terms[ISN_MAX_QUERY_TERMS]; /* for pre-analyzed terms */
} service_worker;

static isn_searcher *planner_of(const service_worker *worker, const search_job *job) {
    return job->generation->planners[worker->id];
}

static search_job *job_of(isn_job *sched) { return (search_job *)sched->user; }

/* ------------------------------------------------------------------ scheduler callbacks */

static void on_worker_free(void *user, void *state) {
    (void)user;
    free(state);
}

static void *on_worker_init(void *user, uint32_t id) {
    (void)user;
    service_worker *worker = calloc(1, sizeof *worker);
    if (!worker) return NULL;
    worker->id = id;
    return worker;
}

static void on_run_cpu(void *user, isn_job *sched, const isn_cpu_context *context) {
    (void)user;
    search_job *job = job_of(sched);
    job->enqueued_ns = sched->enqueued_ns;
    job->stop_ns = context->stop_ns;
    job->complete = true;
    search_worker_run(job->generation->workers[((service_worker *)context->worker_state)->id], job, false);
    sched->complete = job->status != ISN_GRPC_STATUS_OK || job->complete;
    /* Errors and cancellations end early for reasons unrelated to the query's cost. */
    sched->measured = job->status == ISN_GRPC_STATUS_OK && !job->delay_us;
}

/* Taken to run, by a worker or into a GPU batch: from now on the loop does not answer it at its
 * deadline; if the loop already did, it is not run. Again true for a job a failed batch hands back. */
static bool on_start(void *user, isn_job *sched) {
    (void)user;
    search_job *job = job_of(sched);
    int queued = JOB_QUEUED;
    return atomic_compare_exchange_strong(&job->phase, &queued, JOB_RUNNING) || queued == JOB_RUNNING;
}

/* A job the GPU answered, packed on its device's dispatcher thread (that device's packer) or on an idle
 * worker helping it (that worker's search worker of the job's generation): the real backend's hits are
 * in the job's request; a simulated device gives none. */
static void pack_gpu_answer(search_service *service, search_job *job, const isn_job *sched,
                            const service_worker *helper) {
    job->queue_ns = sched->started_ns - sched->enqueued_ns;
    job->retrieval_ns = isn_now_ns() - sched->started_ns;
    job->retrieval_cpu_ns = 0; /* a reused job's last CPU sample is not this answer's */
    job->worker = sched->worker;
    const isn_gpu_request *request = sched->gpu_request;
    if (!request) {
        search_job_pack_simulated(job);
        return;
    }
    search_worker *packer = helper ? job->generation->workers[helper->id] : service->gpu.packers[sched->worker];
    search_worker_pack_gpu(packer, job, request->hits, request->num_hits,
                           request->answered_by == ISN_GPU_ANSWERED_DEVICE ? "gpu" : "cpu");
}

/* Why admission refused a prepared job, as the client sees it. */
static void refuse(search_job *job, isn_submit_result result) {
    switch (result) {
    case ISN_SUBMIT_SHED_FULL:
        job->status = ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(job->message, sizeof job->message, "server overloaded: its queues are full");
        return;
    case ISN_SUBMIT_SHED_OVERLOAD:
        job->status = ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(job->message, sizeof job->message,
                 "server overloaded: no device can answer before the deadline (predicted %.3f ms on the cpu)",
                 job->sched.predicted_ns[ISN_DEVICE_CPU] / 1e6);
        return;
    case ISN_SUBMIT_SHED_LATE:
        job->status = ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(job->message, sizeof job->message,
                 "server overloaded: no device can start this query before its deadline");
        return;
    case ISN_SUBMIT_QUEUED:
    case ISN_SUBMIT_REFUSED:
    case ISN_SUBMIT_STOPPED: break;
    }
    job->status = ISN_GRPC_STATUS_UNAVAILABLE;
    snprintf(job->message, sizeof job->message, "server is shutting down; retry on another replica");
}

static void gpu_uncount(search_service *service, search_job *job) {
    if (!job->gpu_counted) return;
    job->gpu_counted = false;
    gpu_first_stage_leave(&service->gpu);
}

static void on_complete(void *user, isn_job *sched, void *worker_state) {
    search_service *service = user;
    search_job *job = job_of(sched);
    gpu_uncount(service, job);
    if (sched->outcome == ISN_JOB_RAN && sched->device == ISN_DEVICE_GPU) {
        pack_gpu_answer(service, job, sched, worker_state);
    } else if (sched->outcome == ISN_JOB_REFUSED) {
        /* prepare() already set the status of a request it refused. */
        job->reply.len = 0;
        if (sched->refusal) refuse(job, (isn_submit_result)sched->refusal);
    } else if (sched->outcome == ISN_JOB_DEADLINE_EXCEEDED) {
        job->status = ISN_GRPC_STATUS_DEADLINE_EXCEEDED;
        job->reply.len = 0;
        snprintf(job->message, sizeof job->message, "deadline passed after %.3f ms in the queue",
                 (double)(sched->finished_ns - sched->enqueued_ns) / 1e6);
    } else if (sched->outcome == ISN_JOB_ABANDONED) {
        job->status = ISN_GRPC_STATUS_UNAVAILABLE;
        job->reply.len = 0;
        snprintf(job->message, sizeof job->message, "server is shutting down; retry on another replica");
    }
    completion_queue_push(job->completions, job);
}

/* ------------------------------------------------------------------ analysis (once, on a worker or the loop) */

/* Pre-analyzed terms: looked up as given; repeats raise the count; terms absent here are counted. */
static int query_from_terms(service_worker *worker, const Isn__V1__SearchRequest *request, isn_query *query,
                            search_job *job) {
    const isn_index *index = job->generation->index;
    isn_query_term *terms = worker->terms;
    query->terms = terms;
    query->num_terms = 0;
    query->num_unknown = 0;
    query->structure = NULL;
    for (size_t i = 0; i < request->n_terms; i++) {
        const char *text = request->terms[i];
        uint32_t term_id;
        if (!isn_index_find_term(index, text, strlen(text), &term_id)) {
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
            return ISN_GRPC_STATUS_INVALID_ARGUMENT;
        }
        isn_term_stats stats;
        isn_index_term_stats(index, term_id, &stats);
        terms[query->num_terms++] = (isn_query_term){.term_id = term_id, .count = 1, .df = stats.df};
    }
    return 0;
}

/* A query in the query syntax, a query tree (structured_query), and filters: compiled by ranking/
 * into the job's query. The specs point into the request; they live in its arena. */
static int query_from_tree(service_worker *worker, search_job *job, isn_query *query) {
    const Isn__V1__SearchRequest *request = job->request;
    isn_filter_spec *filters = NULL;
    uint32_t num_filters = (uint32_t)request->n_filters;
    if (request->n_filters > ISN_MAX_QUERY_FILTERS) {
        snprintf(job->message, sizeof job->message, "%zu filters (at most %d)", request->n_filters, ISN_MAX_QUERY_FILTERS);
        return ISN_GRPC_STATUS_INVALID_ARGUMENT;
    }
    if (num_filters && !(filters = job->memory ? arena_alloc(job->memory, num_filters * sizeof *filters) : NULL))
        goto out_of_memory;
    for (uint32_t i = 0; i < num_filters; i++) {
        const Isn__V1__Filter *f = request->filters[i];
        filters[i] = (isn_filter_spec){.attribute = f->attribute, .op = (isn_filter_op)f->op, .negate = f->negate,
                                       .values = (const char *const *)f->values, .num_values = (uint32_t)f->n_values};
    }
    char err[ISN_ERR_LEN];
    int rc;
    if (request->structured_query) {
        const Isn__V1__Query *tree = request->structured_query;
        if ((request->query && request->query[0]) || request->n_terms) {
            snprintf(job->message, sizeof job->message, "set one of `query`, `terms` and `structured_query`");
            return ISN_GRPC_STATUS_INVALID_ARGUMENT;
        }
        if (tree->n_clauses > ISN_MAX_QUERY_CLAUSES) {
            snprintf(job->message, sizeof job->message, "structured_query has %zu clauses (at most %d)",
                     tree->n_clauses, ISN_MAX_QUERY_CLAUSES);
            return ISN_GRPC_STATUS_INVALID_ARGUMENT;
        }
        isn_clause_spec *specs = tree->n_clauses && job->memory
                                     ? arena_alloc(job->memory, tree->n_clauses * sizeof *specs) : NULL;
        if (tree->n_clauses && !specs) goto out_of_memory;
        for (size_t i = 0; i < tree->n_clauses; i++) {
            const Isn__V1__Clause *c = tree->clauses[i];
            specs[i] = (isn_clause_spec){.occur = (isn_occur)c->occur, .phrase = c->phrase, .field = c->field,
                                         .field_len = strlen(c->field), .text = c->text, .text_len = strlen(c->text)};
        }
        rc = isn_query_from_clauses(planner_of(worker, job), specs, (uint32_t)tree->n_clauses, filters, num_filters,
                                    query, err, sizeof err);
    } else if (request->query && request->query[0]) {
        rc = isn_query_parse_syntax(planner_of(worker, job), request->query, strlen(request->query), filters,
                                    num_filters, query, err, sizeof err);
    } else {
        snprintf(job->message, sizeof job->message, "filters need `query` or `structured_query`, not `terms`");
        return ISN_GRPC_STATUS_INVALID_ARGUMENT;
    }
    if (rc < 0) {
        snprintf(job->message, sizeof job->message, "%s", err);
        return ISN_GRPC_STATUS_INVALID_ARGUMENT;
    }
    return 0;
out_of_memory:
    snprintf(job->message, sizeof job->message, "out of memory for the query's clauses");
    return ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
}

/* Analyses the request once, on a worker (prepare): its terms go with the job (in the request's
 * arena), and the cost model's features come from them. 0, or the gRPC status to answer with. */
static int analyse(service_worker *worker, search_job *job) {
    const Isn__V1__SearchRequest *request = job->request;
    isn_query parsed;
    if ((request->query && request->query[0]) || request->structured_query || request->n_filters) {
        int status = query_from_tree(worker, job, &parsed);
        if (status) return status;
    } else {
        int status = query_from_terms(worker, request, &parsed, job);
        if (status) return status;
    }
    job->query = parsed;
    job->query.terms = NULL;
    if (parsed.num_terms) {
        size_t bytes = parsed.num_terms * sizeof *parsed.terms;
        job->query.terms = job->memory ? arena_alloc(job->memory, bytes) : NULL;
        if (!job->query.terms) {
            snprintf(job->message, sizeof job->message, "out of memory for %u query terms", parsed.num_terms);
            return ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        memcpy(job->query.terms, parsed.terms, bytes);
    }
    if (parsed.structure) {
        size_t bytes = isn_query_structure_bytes(parsed.structure);
        void *tree = job->memory ? arena_alloc(job->memory, bytes) : NULL;
        if (!tree) {
            snprintf(job->message, sizeof job->message, "out of memory for the query tree");
            return ISN_GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        isn_query_structure_copy(tree, parsed.structure);
        job->query.structure = tree;
    }
    job->sched.query = &job->query;
    job->sched.index = job->generation->index;
    job->sched.k = job->k;
    job->sched.mode = job->mode;
    job->sched.algo = job->algo;
    return 0;
}

/* How long a job of the generation the GPU is about to move to waits for that move rather than run on
 * the CPU workers: a quarter of the time left to its deadline, at most GPU_MOVE_WAIT_NS. */
#define GPU_MOVE_WAIT_NS 50000000ull

static uint64_t gpu_move_wait_until(const search_job *job) {
    uint64_t now = isn_now_ns(), wait = GPU_MOVE_WAIT_NS;
    if (job->deadline_ns) {
        if (job->deadline_ns <= now) return 0;
        if ((job->deadline_ns - now) / 4 < wait) wait = (job->deadline_ns - now) / 4;
    }
    return now + wait;
}

/* Whether the GPU backend can answer the job as asked; if so its hits get room in the request's arena.
 * may_wait: the caller may wait briefly for the GPU's move to the job's generation (not a loop thread). */
static bool gpu_eligible(search_service *service, search_job *job, bool may_wait) {
    const Isn__V1__SearchRequest *request = job->request;
    if (!service->gpu.num_backends || job->delay_us || request->global_stats || (request->ranker && request->ranker[0]) ||
        job->k > service->gpu_max_k || job->query.num_terms == 0 || !isn_gpu_takes_search(&job->query, job->prior_weight, NULL))
        return false;
    if (!gpu_first_stage_enter(&service->gpu, job->generation, may_wait ? gpu_move_wait_until(job) : 0)) return false;
    job->gpu_counted = true;
    isn_hit *hits = job->memory ? arena_alloc(job->memory, job->k * sizeof *hits) : NULL;
    if (!hits) return false;
    job->gpu_request = (isn_gpu_request){.query = &job->query, .mode = job->mode, .k = job->k, .hits = hits,
                                         .prior_weight = job->prior_weight};
    return true;
}


/* What the job's second stage is expected to take on the device gpu/'s choice runs it on, for the
 * scheduler to count in its prediction (0: no ranker named, or none of its size measured yet; an
 * unknown ranker or n1 is refused later, by the worker). */
static double expected_second_stage_ns(search_service *service, const search_job *job) {
    const Isn__V1__SearchRequest *request = job->request;
    if (!request->ranker || !request->ranker[0] || !service->l2.rerank) return 0.0;
    uint32_t n1, max_n1;
    if (rankers_n1(request->n1, job->k, &n1, &max_n1) < 0) return 0.0;
    ranker_ref *ranker = rankers_acquire(request->ranker);
    if (!ranker) return 0.0;
    double ms = isn_gpu_rerank_expected_ms(service->l2.rerank, ranker_ref_get(ranker), n1);
    rankers_release(ranker);
    return ms * 1e6;
}

static bool on_prepare(void *user, isn_job *sched, void *worker_state) {
    search_service *service = user;
    search_job *job = job_of(sched);
    bool on_loop = worker_state == service->loop_analyser;
    if (on_loop) pthread_mutex_lock(&service->loop_analyser_lock);
    int refused = analyse(worker_state, job);
    if (on_loop) pthread_mutex_unlock(&service->loop_analyser_lock);
    if (refused) {
        job->status = refused;
        return false;
    }
    sched->gpu_request = NULL;
    sched->second_stage_ns = expected_second_stage_ns(service, job);
    if (service->gpu.num_backends) {
        bool eligible = gpu_eligible(service, job, !on_loop);
        if (!eligible) gpu_uncount(service, job);
        sched->gpu_request = eligible ? &job->gpu_request : NULL;
        sched->placement = !eligible ? ISN_PLACE_CPU : service->gpu_route_all ? ISN_PLACE_GPU : ISN_PLACE_ANY;
    } else if (service->sim_gpus && service->gpu_route_all) {
        sched->placement = ISN_PLACE_GPU; /* a simulated GPU answers any query (without hits) */
    }
    return true; /* the scheduler takes the cost features from job->sched.query */
}

/* Query text (or pre-analyzed terms) past which analysis leaves the loop thread for a worker. */
#define LARGE_QUERY_BYTES 8192

static bool large_request(const Isn__V1__SearchRequest *request) {
    size_t bytes = request->query ? strnlen(request->query, LARGE_QUERY_BYTES + 1) : 0;
    for (size_t i = 0; i < request->n_terms && bytes <= LARGE_QUERY_BYTES; i++)
        bytes += strnlen(request->terms[i], LARGE_QUERY_BYTES + 1);
    return bytes > LARGE_QUERY_BYTES;
}

int search_service_submit(search_service *service, search_job *job) {
    job->next = NULL;
    job->complete = true;
    job->stop_ns = 0;
    job->gpu_counted = false;
    isn_job *sched = &job->sched;
    memset(sched, 0, sizeof *sched);
    sched->user = job;
    sched->received_ns = job->arrived_ns;
    sched->submitted_ns = job->enqueued_ns;
    sched->deadline_ns = job->deadline_ns;
    sched->reader_keeps_up = job->reader_keeps_up;
    sched->prepare_on_worker = large_request(job->request);
    /* The scheduler has the query analysed (on_prepare) on a worker, or here when workers are few
     * and there is no GPU, then admits and routes it. */
    isn_submit_result result = isn_scheduler_submit(service->scheduler, sched);
    if (result == ISN_SUBMIT_QUEUED) return 0;
    if (result == ISN_SUBMIT_REFUSED) return job->status;
    refuse(job, result);
    return job->status;
}

bool search_service_may_admit(search_service *service, uint64_t received_ns, uint64_t deadline_ns,
                              bool reader_keeps_up) {
    return isn_scheduler_may_admit_quick(service->scheduler, received_ns, deadline_ns, reader_keeps_up);
}

void search_service_note_resume(search_service *service, uint64_t now_ns) {
    isn_scheduler_note_resume(service->scheduler, now_ns);
}

/* ------------------------------------------------------------------ start, stop */

void search_service_params_of(const search_service *service, search_service_params *params) {
    *params = (search_service_params){
        .workers = service->num_threads, .max_k = service->max_k, .route = &service->l2, .warm_up = service->warm_up,
        .derive_field_data = service->derive_field_data, .prior_weight = service->prior_weight};
}

bool search_service_gpu_holds(const search_service *service, const index_generation *generation) {
    return gpu_first_stage_holds(&service->gpu, generation);
}

bool search_service_has_gpu(const search_service *service) { return atomic_load(&service->gpu.attached) > 0; }

bool search_service_gpu_uploading(const search_service *service) { return atomic_load(&service->gpu.uploading); }

uint64_t search_service_gpu_attached_ns(const search_service *service) {
    return atomic_load(&service->gpu.attached_ns);
}

/* Standby workers take work while no GPU holds the index: before its upload ends, after it failed, while a
 * generation moves. */
static bool standby_wanted(void *user) { return !search_service_has_gpu(user); }

search_service *search_service_start(index_generation *first, const isn_conf *conf,
                                     const search_service_threads *threads, char *err, size_t err_len) {
    uint32_t workers = threads->workers;
    const isn_index *index = first->index;
    search_service *service = calloc(1, sizeof *service);
    if (!service) {
        snprintf(err, err_len, "out of memory for the search service");
        return NULL;
    }
    service->max_k = conf->max_k;
    service->prior_weight = conf->prior_weight;
    service->warm_up = conf->warm_up;
    service->derive_field_data = conf->derive_field_data;
    service->num_threads = workers;
    /* the starting thread's, for the GPU training log */
    isn_searcher *planner = isn_searcher_new(index);
    pthread_mutex_init(&service->loop_analyser_lock, NULL);
    if (!planner) {
        snprintf(err, err_len, "out of memory for the query planner");
        isn_searcher_free(planner);
        search_service_stop(service);
        return NULL;
    }
    search_service_params params;
    search_service_params_of(service, &params);
    if (generation_add_workers(first, &params, err, err_len) < 0) {
        isn_searcher_free(planner);
        search_service_stop(service);
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
    config.worker_idle_policy = threads->idle_policy;
    config.worker_slice_ns = (uint64_t)conf->worker_slice_us * 1000;
    config.spare_workers = threads->spares;
    config.spare_idle_policy = conf->spare_idle_policy;
    config.idle_threads = threads->idle_loops;
    config.idle_threads_user = threads->loops;
    config.thread_idle = threads->loop_idle;
    config.standby_workers = threads->standby;
    config.worker_cpus = threads->worker_cpus;
    config.num_worker_cpus = threads->num_worker_cpus;
    config.spare_cpus = threads->spare_cpus;
    config.num_spare_cpus = threads->num_spare_cpus;
    config.standby_wanted = standby_wanted;
    config.overload = conf->overload_degrade ? ISN_OVERLOAD_DEGRADE : ISN_OVERLOAD_SHED;
    config.codel_drops_waited = conf->codel_drop_waited;
    config.batch.max_batch = conf->gpu_batch_max;
    config.batch.memory_budget = conf->gpu_batch_memory_bytes;
    config.batch.linger_ns = (uint64_t)conf->gpu_batch_linger_us * 1000;
    config.batch.safety_ns = (uint64_t)conf->gpu_deadline_safety_us * 1000;
    config.index = NULL; /* each job names its generation's index (job->sched.index) */
    config.cost_model_state = conf->cost_model_state;
    config.analysis_min_workers = conf->analysis_min_workers;
    config.worker_init = on_worker_init;
    config.worker_free = on_worker_free;
    config.run_cpu = on_run_cpu;
    config.start = on_start;
    config.prepare = on_prepare;
    config.complete = on_complete;
    config.user = service;
    int gpu_rc = gpu_first_stage_open(&service->gpu, first, conf, planner, threads->worker_cpus, threads->num_worker_cpus,
                                      err, err_len);
    isn_searcher_free(planner);
    if (gpu_rc < 0) {
        search_service_stop(service);
        return NULL;
    }
    for (uint32_t d = 0; d < service->gpu.num_backends; d++) config.gpu_backends[d] = service->gpu.backends[d];
    service->gpu_route_all = conf->gpu_route_all; /* real devices' and simulated ones' (on_prepare) */
    if (service->gpu.num_backends) {
        service->gpu_max_k = conf->gpu_max_k;
        config.num_gpu_backends = service->gpu.num_backends;
        config.gpu_backend_max_batch = conf->gpu_max_batch;
        config.gpu_backend_streams = conf->gpu_streams;
    }
    service->l2_gpu = gpu_setup_second_stage(conf);
    service->l2.rerank = isn_gpu_rerank_new(service->l2_gpu);
    if (!service->l2.rerank) {
        snprintf(err, err_len, "out of memory for the second stage's device choice");
        isn_searcher_free(planner);
        search_service_stop(service);
        return NULL;
    }
    if (conf->gpu_sim_devices) {
        service->sim_gpus = conf->gpu_sim_devices;
        config.simulated_gpus = conf->gpu_sim_devices;
        config.simulated.launch_ns = conf->gpu_sim_launch_ns;
        config.simulated.per_posting_ns = 1000.0 / conf->gpu_sim_postings_per_us;
        config.simulated.per_query_ns = conf->gpu_sim_query_ns;
        config.simulated.failure_rate = conf->gpu_sim_failure_permille / 1000.0;
        log_warn("SIMULATED GPUs: scheduler.simulated_gpus_answer_without_hits = %u; queries routed to them "
                 "are answered WITHOUT HITS (device \"gpu-sim\"). For benchmarks and tests only, never in "
                 "production. Latency model: launch %u ns + %u ns per query + postings at %u per us; the cost "
                 "model's GPU side is seeded from it",
                 conf->gpu_sim_devices, conf->gpu_sim_launch_ns, conf->gpu_sim_query_ns, conf->gpu_sim_postings_per_us);
    }
    /* The analyser the scheduler uses on the loop thread when it analyses there (few workers, no
     * GPU: the workers are then the bottleneck and the loop thread is not). */
    service->loop_analyser = calloc(1, sizeof *service->loop_analyser);
    if (!service->loop_analyser) {
        snprintf(err, err_len, "out of memory for the query analyser");
        search_service_stop(service);
        return NULL;
    }
    service->loop_analyser->id = workers;
    config.submitter_state = service->loop_analyser;
    service->scheduler = isn_scheduler_start(&config, err, err_len);
    if (!service->scheduler) {
        search_service_stop(service);
        return NULL;
    }
    return service;
}

bool search_service_analyses_on_loop(const search_service *service) {
    return isn_scheduler_prepares_on_submit(service->scheduler);
}

void search_service_view_of(search_service *service, search_service_view *view) {
    view->scheduler = service->scheduler;
    view->rerank = service->l2.rerank;
    view->rerank_on_gpu = service->l2_gpu != NULL;
    view->simulated_gpus = service->sim_gpus;
}

void search_service_abandon_queued(search_service *service) { isn_scheduler_abandon_queued(service->scheduler); }

uint32_t search_service_queued(const search_service *service) {
    isn_scheduler_stats stats;
    isn_scheduler_get_stats(service->scheduler, &stats);
    return stats.queue_depth[0] + stats.queue_depth[1] + stats.queue_depth[2] + stats.deque_depth;
}

uint32_t search_service_running(const search_service *service) {
    isn_scheduler_stats stats;
    isn_scheduler_get_stats(service->scheduler, &stats);
    return stats.running;
}


/* ------------------------------------------------------------------ the GPU's generation (gpu_setup.c) */

int search_service_gpu_stage(search_service *service, const isn_conf *conf, index_generation *next) {
    return gpu_first_stage_stage(&service->gpu, conf, next);
}

void search_service_gpu_move(search_service *service, const isn_conf *conf, index_generation *next) {
    gpu_first_stage_move(&service->gpu, service->scheduler, conf, next);
}

void search_service_stop(search_service *service) {
    if (!service) return;
    isn_scheduler_stop(service->scheduler); /* saves the cost model, frees the devices it made */
    /* the GPU parts made at start, once the scheduler no longer uses them */
    gpu_first_stage_close(&service->gpu);
    isn_gpu_rerank_free(service->l2.rerank);
    isn_gpu_l2_close(service->l2_gpu);
    pthread_mutex_destroy(&service->loop_analyser_lock);
    free(service->loop_analyser);
    free(service);
}

int search_service_gpu_state(const search_service *service, char *reason, size_t reason_len) {
    uint32_t devices = isn_scheduler_gpu_count(service->scheduler), healthy = 0;
    reason[0] = '\0';
    if (search_service_gpu_uploading(service)) {
        snprintf(reason, reason_len, "uploading the index to %u device%s", devices, devices == 1 ? "" : "s");
        return SEARCH_SERVICE_GPU_LOADING;
    }
    if (!devices || !search_service_has_gpu(service)) return SEARCH_SERVICE_NO_GPU;
    for (uint32_t d = 0; d < devices; d++) {
        isn_gpu_health health;
        if (!isn_scheduler_gpu_health(service->scheduler, d, &health)) continue;
        if (health.ready && health.healthy) healthy++;
        else if (!reason[0])
            snprintf(reason, reason_len, "GPU %u: %s", d, health.ready ? health.reason : "not warmed up");
    }
    return healthy == devices ? SEARCH_SERVICE_GPU_HEALTHY : SEARCH_SERVICE_GPU_DEGRADED;
}

