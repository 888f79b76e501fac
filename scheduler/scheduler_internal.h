/* Private to scheduler/: the scheduler's state, shared by scheduler.c and gpu_dispatch.c. */
#ifndef ISN_SCHEDULER_INTERNAL_H
#define ISN_SCHEDULER_INTERNAL_H

#include <pthread.h>

#include "scheduler/scheduler.h"

#define SCHED_MAX_GRAB 4              /* extra jobs a worker moves to its deque at once */
#define SCHED_MAX_DEAD 32             /* dead jobs unlinked per trip through the lock */
#define SCHED_IDLE_POLL_NS 1000000ull /* idle workers look for stealable work this often */
#define SCHED_GROUP_SCAN 32           /* queued jobs a dispatcher looks at to find a similar size */
#define SCHED_GROUP_RATIO 8.0         /* "similar size": predicted GPU times within this factor */
#define SCHED_SCALE_WEIGHT 0.02       /* weight of the newest job in the measured/predicted sums */
#define SCHED_BATCH_WARM_UP 50         /* batches before the batch error counts */
#define SCHED_PREPARE_BURST 16         /* preparations a worker makes before it runs a queued job */
#define SCHED_PREPARE_START_NS 20000.0 /* a preparation's time before any is measured */
#define SCHED_BATCH_PER_JOB_START_NS 2000.0 /* a GPU batch's part per job before any is measured */

#define COUNT(counter) atomic_fetch_add_explicit(&(counter), 1, memory_order_relaxed)
#define ADD(counter, v) atomic_fetch_add_explicit(&(counter), (v), memory_order_relaxed)
#define LOAD(counter) atomic_load_explicit(&(counter), memory_order_relaxed)

typedef struct isn_scheduler isn_scheduler;

typedef struct {
    isn_scheduler *scheduler;
    pthread_t thread;
    uint32_t id;
    atomic_bool started;
    isn_deque deque;
    void *state;
    void *arena;
    uint64_t rng;
    uint32_t prepared_in_row; /* preparations since its last CPU job */
} sched_worker;

typedef struct {
    isn_scheduler *scheduler;
    pthread_t thread;
    uint32_t id;
    bool started;
    isn_gpu_device *device;
    _Atomic uint64_t rest_until_ns; /* after a failure */
    isn_job **batch;
} sched_dispatcher;

struct isn_scheduler {
    isn_scheduler_config config;
    pthread_mutex_t lock; /* the queues, idle_workers, gpu_inflight_ns, batch_cost, stopping */
    pthread_cond_t cpu_wake, gpu_wake, ready_changed;
    isn_edf_queue queues[ISN_QUEUES];
    isn_edf_queue prepare_queue; /* submitted unprepared */
    atomic_uint prepare_pending; /* its size, read without the lock */
    double prepare_ns;           /* a preparation's time lately (moving average), under the lock */
    bool stopping;
    uint32_t idle_workers;
    double gpu_inflight_ns; /* predicted GPU time of batches running now */
    isn_batch_cost batch_cost; /* GPU batches: fixed part and part per job, learned */
    double batch_ape_sum;      /* |predicted - measured| / measured over batches after the first few */
    uint64_t batch_ape_count;
    uint32_t ready, failed;
    atomic_bool abandon;
    atomic_llong cpu_committed_ns; /* predicted CPU time of jobs in deques or running */
    atomic_uint running;

    pthread_mutex_t model_lock;
    isn_cost_model model;
    /* Measured over predicted service, per device, as moving sums: the model predicts a query's cost
     * on an idle machine; this says how much slower the node runs now (other processes, memory
     * bandwidth, the model's bias). Admission scales its waits and services by it. */
    double actual_ewma[ISN_DEVICE_KINDS], predicted_ewma[ISN_DEVICE_KINDS];

    sched_worker *workers;
    sched_dispatcher *dispatchers;
    uint32_t num_dispatchers;
    uint64_t start_ns;

    _Atomic uint64_t submitted, completed, shed_full, shed_overload, degraded, dropped_dead, partial, abandoned;
    _Atomic uint64_t routed[3], ran_on[ISN_DEVICE_KINDS];
    _Atomic uint64_t stolen_deque, stolen_gpu, undecided_cpu, undecided_gpu;
    _Atomic uint64_t prepared, refused_prepare;
    _Atomic uint64_t batches, batch_jobs, batch_flush[ISN_FLUSH_REASONS], gpu_failures, gpu_reruns;
    _Atomic uint64_t wait_ns[ISN_DEVICE_KINDS], wait_count[ISN_DEVICE_KINDS], busy_ns[ISN_DEVICE_KINDS];
};

void sched_timespec_at(uint64_t ns, struct timespec *ts);
void sched_predict(isn_scheduler *s, isn_job *job);
/* The model learns cost_ns (what the job itself cost); the scale compares wall_ns (what it took,
 * with whatever else ran on the machine meanwhile) with predicted_ns (what admission assumed). */
void sched_learn(isn_scheduler *s, isn_device_kind device, const isn_job_features *features, double cost_ns,
                 double wall_ns, double predicted_ns);
/* Measured over predicted service lately (1 before any), clamped to [0.5, 8]. */
double sched_scale(isn_scheduler *s, isn_device_kind device);
/* Sets the outcome and calls the user's complete(). */
void sched_finish(isn_scheduler *s, isn_job *job, isn_job_outcome outcome);
uint32_t sched_available_gpus(isn_scheduler *s, uint64_t now);
/* gpu_dispatch.c: starts dispatcher i's thread; it reports ready like a worker. 0 or -1. */
int sched_start_dispatcher(isn_scheduler *s, uint32_t i);

#endif
