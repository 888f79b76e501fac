/* Search workers: one thread per worker, each with its own searcher; a bounded FIFO of jobs in, a
 * lock-free completion stack out, and uv_async_send to wake the loop. Workers never touch any
 * other libuv handle. (The scheduler issue replaces this pool with deadline-ordered queues.) */
#ifndef ISN_DAEMON_WORKER_POOL_H
#define ISN_DAEMON_WORKER_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/search_job.h"

typedef struct worker_pool worker_pool;

/* Starts the threads and waits until each has its searcher (and warm-up, when asked). NULL with err. */
worker_pool *worker_pool_start(const isn_index *index, uint32_t workers, uint32_t max_queue, uint32_t max_k,
                               bool warm_up, uv_async_t *wake, char *err, size_t err_len);
/* False when the queue is full (the caller sheds the request). */
bool worker_pool_submit(worker_pool *pool, search_job *job);
/* Finished jobs, oldest first; NULL when none. Loop thread only. */
search_job *worker_pool_take_completed(worker_pool *pool);
/* From now on, queued jobs are answered UNAVAILABLE instead of run (drain time is up). */
void worker_pool_abandon_queued(worker_pool *pool);
uint32_t worker_pool_queued(const worker_pool *pool);
uint32_t worker_pool_running(const worker_pool *pool);
uint32_t worker_pool_size(const worker_pool *pool);
/* Stops and joins the threads; jobs still queued are dropped (the caller drained first). */
void worker_pool_stop(worker_pool *pool);

#endif
