/* isnd's search service: Search requests in, the scheduler (scheduler/scheduler.h) with one
 * search_worker per CPU worker thread and the GPU (gpu_setup.h) in between, replies back to the loop
 * that owns each job's call (job->completions). */
#ifndef ISN_DAEMON_SEARCH_SERVICE_H
#define ISN_DAEMON_SEARCH_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "conf/conf.h"
#include "base/base.h"
#include "daemon/search_job.h"

typedef struct search_service search_service;
struct index_generation;

/* The worker threads a search service starts, and where they run. `spares` of the `workers` take work only
 * while idle_loops(loops) counts enough event loops idle (scheduler.h isn_scheduler_config.spare_workers),
 * and `standby` of them only while no GPU holds the index (standby_workers); 0: none. The CPU lists are
 * scheduler.h's worker_cpus and spare_cpus (server.pin_loops; 0 CPUs: unbound); the GPU backends' CPU threads
 * run on worker_cpus too. */
typedef struct {
    uint32_t workers, spares, standby;
    uint32_t (*idle_loops)(void *loops);
    bool (*loop_idle)(void *loops, uint32_t loop); /* one of them, for spares bound beside their loop */
    void *loops;
    const int *worker_cpus, *spare_cpus;
    uint32_t num_worker_cpus, num_spare_cpus;
    bool idle_policy; /* the workers in SCHED_IDLE (isn_conf_worker_idle_policy), else at scheduler.worker_nice */
} search_service_threads;

/* Starts the threads, with the first index generation's searchers (warmed up when conf asks). The
 * GPU first stage ([gpu]) holds that generation. Loads the cost model from conf->cost_model_state
 * when set. NULL with err. */
search_service *search_service_start(struct index_generation *first, const isn_conf *conf,
                                     const search_service_threads *threads, char *err, size_t err_len);
/* What a generation needs from the service to serve on it (generation_add_workers): its workers'
 * number, their largest k, the second stage's route, whether to warm up and to derive the index's
 * per-field data in the background. Read on the loop thread,
 * so a generation can be built on another thread (the scheduler keeps running, and its cost model
 * learning). */
typedef struct {
    uint32_t workers;
    uint32_t max_k;
    const l2_route *route;
    bool warm_up;
    bool derive_field_data;
    float prior_weight; /* search.prior_weight: above 0 the index needs finite static scores */
} search_service_params;
void search_service_params_of(const search_service *service, search_service_params *params);
/* The GPU first stage's move to the next generation, on the thread pool. stage, before the switch:
 * uploads the next generation beside the current one (1), or finds that the devices cannot hold
 * both (0: logged) or that there is nothing to move (0). move, after the switch: the jobs bound for
 * the GPU finish, then each device serves the next generation (the staged upload, or its residency
 * freed and uploaded again); queries of the next generation run on the CPU until then. */
int search_service_gpu_stage(search_service *service, const isn_conf *conf, struct index_generation *next);
void search_service_gpu_move(search_service *service, const isn_conf *conf, struct index_generation *next);
/* Whether the GPU first stage runs; whether it holds this generation (others' queries run on the CPU). */
/* Whether a device holds a generation (the GPU first stage takes queries). */
bool search_service_has_gpu(const search_service *service);
/* While the first generation is uploaded after the node became ready (gpu.upload_before_ready = false). */
bool search_service_gpu_uploading(const search_service *service);
/* When that upload ended (isn_now_ns), 0 before it did or without one. */
uint64_t search_service_gpu_attached_ns(const search_service *service);
bool search_service_gpu_holds(const search_service *service, const struct index_generation *generation);
/* From a loop thread (several may submit at once; job->completions names the loop its end goes
 * to). Hands the job to the scheduler, which has the query analysed once (on a worker, or
 * here when workers are few and there is no GPU; its terms go with the job, in job->memory) and takes
 * the cost model's features from it. 0 when queued; otherwise the gRPC status to answer with
 * (INVALID_ARGUMENT for a query that cannot run, RESOURCE_EXHAUSTED when shed) and job->message
 * says why. */
int search_service_submit(search_service *service, search_job *job);
/* Whether a request that reached the node at received_ns, due at deadline_ns, could still be admitted
 * as the last admission decision saw the queues, without the scheduler's lock (false: refuse it now,
 * before reading it); reader_keeps_up: its loop was not saturated (isn_scheduler_may_admit). */
bool search_service_may_admit(search_service *service, uint64_t received_ns, uint64_t deadline_ns,
                              bool reader_keeps_up);
/* A loop saw the node resume from a stall at now_ns (isn_scheduler_note_resume). */
void search_service_note_resume(search_service *service, uint64_t now_ns);
/* Whether queries are analysed on the loop thread (else on the workers, see scheduler.analysis_min_workers). */
bool search_service_analyses_on_loop(const search_service *service);
/* From now on, queued jobs are answered UNAVAILABLE instead of run (drain time is up). */
void search_service_abandon_queued(search_service *service);
uint32_t search_service_queued(const search_service *service);
uint32_t search_service_running(const search_service *service);
/* What the metrics show (metrics_scheduler.h renders them). */
typedef struct {
    isn_scheduler *scheduler;
    isn_gpu_rerank *rerank; /* the second stage's device choice */
    bool rerank_on_gpu;     /* the second stage has a GPU model cache */
    uint32_t simulated_gpus;
} search_service_view;
void search_service_view_of(search_service *service, search_service_view *view);
/* The [gpu] first stage: none (none asked for, or none could be used), healthy, degraded (not warmed
 * up, or a device error: every query then runs on the CPU; reason says why), or still uploading the
 * first generation (the CPU serves meanwhile; reason says so). Any thread. */
enum {
    SEARCH_SERVICE_NO_GPU = 0,
    SEARCH_SERVICE_GPU_HEALTHY = 1,
    SEARCH_SERVICE_GPU_DEGRADED = 2,
    SEARCH_SERVICE_GPU_LOADING = 3
};
int search_service_gpu_state(const search_service *service, char *reason, size_t reason_len);
/* Stops and joins the threads (queued jobs are dropped: the caller drained first) and saves the
 * cost model when configured. */
void search_service_stop(search_service *service);

#endif
