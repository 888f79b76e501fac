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

/* Starts the threads and waits until each has its searcher (and warm-up, when conf asks). Loads
 * the cost model from conf->cost_model_state when set. NULL with err. */
search_service *search_service_start(const isn_index *index, const isn_conf *conf, uint32_t workers, char *err,
                                     size_t err_len);
/* From a loop thread (several may submit at once; job->completions names the loop its end goes
 * to). Hands the job to the scheduler, which has the query analysed once (on a worker, or here when
 * workers are few and there is no GPU; its terms go with the job, in job->memory) and takes the cost
 * model's features from it. 0 when queued; otherwise the gRPC status to answer with
 * (INVALID_ARGUMENT for a query that cannot run, RESOURCE_EXHAUSTED when shed) and job->message
 * says why. */
int search_service_submit(search_service *service, search_job *job);
/* Whether queries are analysed on the loop thread (else on the workers, see scheduler.analysis_min_workers). */
bool search_service_analyses_on_loop(const search_service *service);
/* From now on, queued jobs are answered UNAVAILABLE instead of run (drain time is up). */
void search_service_abandon_queued(search_service *service);
uint32_t search_service_queued(const search_service *service);
uint32_t search_service_running(const search_service *service);
/* What the metrics show (metrics_scheduler.h renders them). */
typedef struct {
    isn_scheduler *scheduler;
    isn_l2_crossover *crossover;
    bool rerank_on_gpu; /* the second stage has a GPU model cache */
    uint32_t simulated_gpus;
} search_service_view;
void search_service_view_of(search_service *service, search_service_view *view);
/* The [gpu] first stage: none, healthy, or degraded (not warmed up, or a device error: every query
 * then runs on the CPU; reason says why). Any thread. */
enum { SEARCH_SERVICE_NO_GPU = 0, SEARCH_SERVICE_GPU_HEALTHY = 1, SEARCH_SERVICE_GPU_DEGRADED = 2 };
int search_service_gpu_state(const search_service *service, char *reason, size_t reason_len);
/* Stops and joins the threads (queued jobs are dropped: the caller drained first) and saves the
 * cost model when configured. */
void search_service_stop(search_service *service);

#endif
