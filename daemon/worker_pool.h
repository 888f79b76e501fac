/* Search execution: the scheduler (scheduler/scheduler.h) with one search_worker per CPU worker
 * thread, simulated GPU devices when configured, and a lock-free completion stack plus
 * uv_async_send back to the loop. Workers never touch any other libuv handle. */
#ifndef ISN_DAEMON_WORKER_POOL_H
#define ISN_DAEMON_WORKER_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "conf/conf.h"
#include "base/base.h"
#include "daemon/search_job.h"

typedef struct worker_pool worker_pool;

/* Starts the threads and waits until each has its searcher (and warm-up, when conf asks). Loads
 * the cost model from conf->cost_model_state when set. NULL with err. */
worker_pool *worker_pool_start(const isn_index *index, const isn_conf *conf, uint32_t workers, uv_async_t *wake,
                               char *err, size_t err_len);
/* Loop thread. Analyses the query once (its terms go with the job, in job->memory; the cost
 * model's features come from them) and hands the job to the scheduler. 0 when queued; otherwise
 * the gRPC status to answer with (INVALID_ARGUMENT for a query that cannot run, RESOURCE_EXHAUSTED
 * when shed) and job->message says why. */
int worker_pool_submit(worker_pool *pool, search_job *job);
/* Finished jobs, oldest first; NULL when none. Loop thread only. */
search_job *worker_pool_take_completed(worker_pool *pool);
/* Whether queries are analysed on the loop thread (else on the workers, see scheduler.analysis_min_workers). */
bool worker_pool_analyses_on_loop(const worker_pool *pool);
/* From now on, queued jobs are answered UNAVAILABLE instead of run (drain time is up). */
void worker_pool_abandon_queued(worker_pool *pool);
uint32_t worker_pool_queued(const worker_pool *pool);
uint32_t worker_pool_running(const worker_pool *pool);
uint32_t worker_pool_size(const worker_pool *pool);
/* The scheduler's metrics: Prometheus text, or a JSON object's members ("scheduler":{...}). */
void worker_pool_render_metrics(worker_pool *pool, byte_buffer *out, bool json);
/* The [gpu] first stage: none, healthy, or degraded (not warmed up, or a device error: every query
 * then runs on the CPU; reason says why). Any thread. */
enum { WORKER_POOL_NO_GPU = 0, WORKER_POOL_GPU_HEALTHY = 1, WORKER_POOL_GPU_DEGRADED = 2 };
int worker_pool_gpu_state(const worker_pool *pool, char *reason, size_t reason_len);
/* Stops and joins the threads (queued jobs are dropped: the caller drained first) and saves the
 * cost model when configured. */
void worker_pool_stop(worker_pool *pool);

#endif
