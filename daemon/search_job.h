/* One Search request on its way through a worker: what the loop thread decided (input), the query
 * as analysed when the scheduler prepared the job (on a worker, or on the loop thread when workers
 * are few), and what the worker produced (output: a status, or a framed SearchResponse ready to
 * send). */
#ifndef ISN_DAEMON_SEARCH_JOB_H
#define ISN_DAEMON_SEARCH_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/arena.h"
#include "base/base.h"
#include "gpu/gpu.h"
#include "grpc/server.h"
#include "proto/isn.pb-c.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler.h"

enum { JOB_QUEUED = 0, JOB_RUNNING = 1, JOB_EXPIRED = 2 };

struct index_generation;

typedef struct search_job search_job;

/* Where finished jobs go: the queue of the loop that owns their calls (a lock-free stack, newest
 * first), and how that loop is woken: an eventfd it polls, written only while the loop may be asleep
 * (completion_queue.c says why). */
typedef struct {
    _Atomic(search_job *) head;
    atomic_bool loop_polling; /* the loop has taken the queue empty and may block in its poll */
    int wake_fd;              /* an eventfd; -1 before init */
    /* the loop's own: taken off the stack, not yet handed out (oldest first) */
    search_job *taken, *taken_tail;
    size_t num_taken;
} completion_queue;

/* The loop's thread, before any push: the eventfd (-1 and a message in err when none can be made). */
int completion_queue_init(completion_queue *queue, char *err, size_t err_len);
void completion_queue_close(completion_queue *queue);
/* Any thread. */
void completion_queue_push(completion_queue *queue, search_job *job);
/* The rest: the owning loop's thread. Finished jobs, oldest first, as a list (NULL when none): `least`
 * of them, or half of those waiting when that is more and the loop is behind (behind_ns 0: always; else
 * the oldest waiting finished more than behind_ns before now_ns); the others stay queued, in order. A
 * loop that takes a bounded number between reads keeps a landing batch's answers from holding its
 * sockets unread; taking half keeps a loop that falls behind from falling further (its backlog stays at
 * twice what comes in between two takes). */
search_job *completion_queue_take(completion_queue *queue, size_t least, uint64_t behind_ns, uint64_t now_ns);
/* Just before the loop polls: true when the queue is empty, and from then on a push wakes the loop;
 * false when jobs wait (left by a bounded take, or pushed after it): take them first, then ask again. */
bool completion_queue_may_poll(completion_queue *queue);
/* After the poll: the loop is running, and takes what is pushed before it polls again. */
void completion_queue_polled(completion_queue *queue);
/* Any thread: whether the loop has said it may block in its poll (an idle loop, as of now). */
bool completion_queue_loop_idle(completion_queue *queue);
/* The wake was seen (the eventfd readable): clears it. */
void completion_queue_clear_wake(completion_queue *queue);

struct search_job {
    search_job *next; /* queue link, then completion link */
    /* input: set by the loop thread; read-only for the worker */
    const Isn__V1__SearchRequest *request;
    /* the index generation it was admitted on (a reference, released when it is answered): its
     * query is analysed, run and answered there */
    struct index_generation *generation;
    uint32_t k;
    isn_mode mode;
    isn_algo algo;
    float prior_weight; /* the static prior's weight in the first-stage score (search.prior_weight) */
    uint32_t partition_id;
    uint32_t delay_us;
    completion_queue *completions; /* its loop's */
    uint64_t received_ns; /* its HEADERS came: what replies and metrics time from */
    /* The earliest its bytes can have reached the socket (isn_grpc_call_arrived_ns): admission and the
     * deadline count from here, so that time spent unread is not given away. */
    uint64_t arrived_ns;
    bool reader_keeps_up; /* its loop was not saturated when it read it (isn_job's) */
    uint64_t enqueued_ns;
    uint64_t deadline_ns; /* 0 = none */
    atomic_bool cancelled; /* the client went away: skip if not started */
    /* JOB_QUEUED until a worker or the GPU takes it (JOB_RUNNING), or the loop answers it at its
     * deadline first (JOB_EXPIRED): whoever moves it from JOB_QUEUED owns the answer. */
    atomic_int phase;
    arena *memory;         /* the request's arena: the analysed terms live there */
    isn_query query;       /* analysed once, when the scheduler prepares the job; the worker may rewrite df */
    isn_job sched;         /* the scheduler's view: features, deadline, route, outcome */
    uint64_t stop_ns;      /* set by the scheduler: stop early at this time (0 = never) */
    isn_gpu_request gpu_request; /* when the GPU may answer it: its k hits in `memory` */
    bool gpu_counted;      /* counted in the service's GPU-bound jobs until it completes */
    /* output: set by the worker */
    int status;
    char message[256];
    byte_buffer reply; /* 5-byte prefix + SearchResponse; kept across uses of the job */
    /* The node's memory budget, charged for the reply before it is built (NULL: none), and the bytes
     * charged: the loop hands the charge to the call that sends the reply, or gives it back. */
    isn_grpc_memory_budget *reply_budget;
    uint64_t reply_charged;
    uint64_t reply_prepaid; /* of reply's capacity, what the call's own charge covers (kept from its last use) */
    uint64_t queue_ns, retrieval_ns, total_ns;
    uint64_t retrieval_cpu_ns; /* the worker thread's CPU time in the first stage, on sampled jobs only (else 0) */
    uint32_t num_hits;
    uint32_t worker;
    bool complete; /* false: stopped early, the hits are the best found so far */
};

/* Where the second stage scores: gpu/'s device choice (isn_gpu_rerank: the CPU, or one GPU pass,
 * whichever measured faster for the call's size; CPU only without a GPU model cache). Shared by every
 * worker. */
typedef struct {
    isn_gpu_rerank *rerank;
} l2_route;

/* Per-worker state: a searcher and scratch sized for k up to its capacity, grown on demand. */
typedef struct search_worker search_worker;

search_worker *search_worker_new(const isn_index *index, uint32_t id, uint32_t max_k);
void search_worker_free(search_worker *worker);
/* Runs the job's analysed query to its end (status + reply). abandon: answer UNAVAILABLE without running. */
void search_worker_run(search_worker *worker, search_job *job, bool abandon);
void search_worker_set_l2_route(search_worker *worker, const l2_route *route);
/* The reply of a job the GPU backend answered (hits from the device, or from the backend's CPU
 * fallback: device says which). From the dispatcher thread, with its own worker. */
void search_worker_pack_gpu(search_worker *worker, search_job *job, const isn_hit *hits, uint32_t n,
                            const char *device);
/* The reply of a job a simulated GPU ran (timing only, no hits). */
void search_job_pack_simulated(search_job *job);
/* The stored fields the request asks for, attached to the reply's final hits (stored_fields.c), in the
 * request's arena: ISN_GRPC_STATUS_OK, or a status with err (a field the index does not keep...). */
int stored_fields_attach(const isn_index *index, const search_job *job, Isn__V1__Hit *hits, uint32_t num_hits,
                         char *err, size_t err_len);
/* A few queries over frequent and rare terms, so pages and caches are hot before READY. */
void search_worker_warm_up(search_worker *worker);

#endif
