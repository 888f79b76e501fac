/* ISN scheduler: deadline-ordered queues, CPU workers with work-stealing deques, a batching
 * dispatcher per GPU device, a learned cost model, routing and admission control.
 * The one public header of scheduler/ (design: ../shared/DESIGN.md section 7).
 *
 * The scheduler runs jobs; it does not know what a query is. Its user supplies callbacks that run a
 * job on a CPU worker and a device backend that runs a batch of jobs on a GPU (or the simulated
 * one in gpu_sim.c). Every job submitted is completed exactly once through complete(), from a
 * worker or dispatcher thread, except a job refused at submit, which the caller answers itself. */
#ifndef ISN_SCHEDULER_H
#define ISN_SCHEDULER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"
#include "ranking/ranking.h"

/* ------------------------------------------------------------------ Chase-Lev deque */

/* A work-stealing deque of pointers (Chase and Lev; the C11 memory orders of Le et al., PPoPP 2013).
 * One owner pushes and pops at the bottom; any thread steals from the top. Fixed capacity (a power of
 * two), so no buffer is ever freed under a thief. */
typedef struct {
    _Alignas(64) atomic_llong top;
    _Alignas(64) atomic_llong bottom;
    _Alignas(64) uint32_t mask;
    _Atomic(void *) *slots;
} isn_deque;

/* 0, or -1 when out of memory. capacity is rounded up to a power of two. */
int isn_deque_init(isn_deque *deque, uint32_t capacity);
void isn_deque_destroy(isn_deque *deque);
/* Owner only. False when full. */
bool isn_deque_push(isn_deque *deque, void *item);
/* Owner only. NULL when empty. */
void *isn_deque_pop(isn_deque *deque);
/* Any thread. NULL when empty or when it lost a race (the caller may try again elsewhere). */
void *isn_deque_steal(isn_deque *deque);
/* Approximate; any thread. */
uint32_t isn_deque_size(isn_deque *deque);

/* ------------------------------------------------------------------ jobs */

typedef enum { ISN_DEVICE_CPU = 0, ISN_DEVICE_GPU = 1, ISN_DEVICE_KINDS = 2 } isn_device_kind;

/* What is known about a query before it runs: the cost model's input (isn_job_features_of fills it
 * from an analysed query and the index's lexicon and block maxima). */
#define ISN_JOB_KEYS 16
typedef struct {
    uint32_t num_terms;
    uint64_t shortest;        /* postings of the shortest list */
    uint64_t second_shortest; /* of the second shortest (0 for one term) */
    uint64_t longest;
    uint64_t total;           /* of all lists */
    uint64_t blocks;          /* 128-posting blocks of all lists */
    /* Postings of the lists a dynamic-pruning algorithm is expected to walk in full: those whose
     * upper bounds together beat a threshold estimated from block maxima or, when higher, the
     * threshold probe below (every list for the
     * exhaustive algorithms). The other lists are only probed. */
    uint64_t essential;
    uint32_t nonessential_lists;
    uint32_t k;
    isn_mode mode;
    isn_algo algo;
    bool gpu_resident; /* every list is in GPU memory */
    /* Postings a MaxScore run is expected to score: each list for the share of the collection read
     * before the threshold (estimated from block maxima) makes it non-essential. */
    uint64_t expected_postings;
    /* OR mode, pruning algorithms, k <= 64: the k-th best full BM25 score among the documents of the
     * rarest lists (at most a few thousand postings, each probed into the other lists). Every such
     * score is a real document's, so the final k-th score is at least this: a lower bound of the
     * threshold, exact when the probed lists hold the top k (0: not probed, or fewer than k). The
     * essential lists above are those that still beat it. */
    double threshold_probe;
    uint32_t probe_docs; /* documents the probe scored */
    /* What the probe says about the work (threshold_probe > 0 only; 0 otherwise). The MaxScore
     * partition at the probe: how far above it the lowest essential list's bound sum lies (relative:
     * a rise of that share drops the list), and at the probe, 3/4 and 1/2 of it the essential lists'
     * postings and their blocks whose maximum, with all non-essential bounds, passes that level (the
     * blocks that can hold a candidate). probe_walk_postings: postings an unseeded MaxScore walks
     * if its threshold rose as the probe's own top k did over the documents it scored (each list
     * walked up to the document where that threshold passed its bound sum). */
    double probe_slack;
    uint64_t probe_essential[3];        /* at 1, 3/4 and 1/2 of the probe */
    uint64_t probe_candidate_blocks[3]; /* likewise */
    uint64_t probe_walk_postings;
    /* The algorithm that will run: AUTO resolved as ranking/algo_choice.c resolves it. */
    isn_algo algo_resolved;
    /* The query's identity (its term ids and counts, k, mode, algorithm; 0 = none): the model
     * remembers what such a query took last, because served traffic repeats. */
    uint64_t signature;
    /* Term ids (the rarest first, at most ISN_JOB_KEYS): the model learns a correction per term,
     * for what the numbers above miss (how its documents co-occur with the other terms'). */
    uint32_t num_keys;
    uint32_t keys[ISN_JOB_KEYS];
} isn_job_features;

/* Features of a query from the index (lexicon statistics, block maxima, and the threshold probe's
 * bounded read of the rarest lists). */
void isn_job_features_of(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                         isn_job_features *features);
/* The same without the threshold probe (~10x cheaper): enough to tell whether the CPU is in the
 * running at all (isn_scheduler_gpu_clearly_wins); the probe sharpens only the CPU's prediction. */
void isn_job_features_quick(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                            isn_job_features *features);

typedef enum {
    ISN_JOB_RAN,               /* the callback (CPU) or the device (GPU) produced its answer */
    ISN_JOB_DEADLINE_EXCEEDED, /* dequeued after its deadline: not run */
    ISN_JOB_ABANDONED,         /* the scheduler stopped or was told to abandon queued work: not run */
    ISN_JOB_REFUSED,           /* submitted unprepared, then refused: see isn_job.refusal */
} isn_job_outcome;

typedef enum { ISN_QUEUE_CPU = 0, ISN_QUEUE_GPU = 1, ISN_QUEUE_UNDECIDED = 2, ISN_QUEUES = 3 } isn_queue_id;

/* Where a job may run. CPU: the GPU cannot answer it as asked (a second stage, global statistics).
 * GPU: routed to a GPU whenever one is available and never stolen by the CPU workers (tests and
 * benchmarks that must exercise the device); a failed batch still re-runs on the CPU. */
typedef enum { ISN_PLACE_ANY = 0, ISN_PLACE_CPU = 1, ISN_PLACE_GPU = 2 } isn_placement;

typedef struct isn_job isn_job;
struct isn_job {
    /* set by the submitter */
    isn_placement placement;
    uint64_t received_ns; /* start of its time budget */
    uint64_t deadline_ns; /* absolute, CLOCK_MONOTONIC; 0 = none */
    isn_job_features features;
    void *user;
    /* set by the scheduler */
    isn_queue_id queue;
    bool degraded;            /* admitted under overload with a reduced budget (degrade policy) */
    double run_budget_ns;     /* degraded: the most it may run, so that it ends by its admission point */
    double predicted_ns[ISN_DEVICE_KINDS];
    uint64_t enqueued_ns, started_ns, finished_ns;
    isn_job_outcome outcome;
    /* ISN_JOB_REFUSED: 0 when prepare() refused it (the submitter's callback said why), else the
     * isn_submit_result that admission gave it once prepared (shed, queue full, stopping). */
    int refusal;
    isn_device_kind device; /* where it ran */
    uint32_t worker;        /* CPU worker, or GPU device number */
    uint32_t batch_size;    /* GPU: jobs in its batch */
    bool rerun_on_cpu;      /* its GPU batch failed; the CPU ran it */
    /* set by run_cpu */
    bool complete;      /* false: a partial answer (stopped early) */
    bool measured;      /* run_cpu sets false when its time says nothing about the cost (an error) */
};

/* What a CPU job gets: its worker's state and a scratch arena reset before each job. */
typedef struct {
    uint32_t worker;
    void *worker_state; /* from worker_init */
    void *arena;        /* arena_bytes of scratch */
    size_t arena_bytes;
    /* Early termination: the job should stop at stop_ns (absolute; 0 = never) and mark itself
     * incomplete. Degraded jobs get an earlier stop. */
    uint64_t stop_ns;
} isn_cpu_context;

/* ------------------------------------------------------------------ GPU devices */

/* A GPU device backend. run_batch runs the jobs (the same features the cost model saw) and returns
 * when all are done: 0, or -1 with err when the device failed (the jobs are then re-run on the CPU
 * and the device is rested for a while). */
typedef struct {
    const char *name;
    void *state;
    int (*run_batch)(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len);
    uint32_t max_batch;          /* jobs per launch */
    uint64_t memory_budget;      /* bytes of posting data one batch may touch */
} isn_gpu_device;

/* The real first-stage backend (gpu/gpu.h) as a scheduler device. The submitter owns each job's
 * query: request_of fills the backend request (query, mode, k, hits of k entries the caller keeps
 * until on_job_done), on_job_done gets the answer, from the dispatcher thread. A batch whose device
 * part failed was still answered exactly (the backend re-ran it on the CPU), but run_batch reports the
 * failure so that the scheduler rests the device; an unhealthy backend refuses batches at once. */
typedef struct {
    void (*request_of)(void *user, isn_job *job, isn_gpu_request *request);
    void (*on_job_done)(void *user, isn_job *job, const isn_gpu_request *request);
    void *user;
} isn_gpu_cuda_callbacks;

/* Fills *device (the backend stays the caller's; close it after isn_gpu_cuda_free). 0, or -1. */
int isn_gpu_cuda_new(isn_gpu_backend *backend, const isn_gpu_cuda_callbacks *callbacks, uint32_t max_batch,
                     isn_gpu_device *device);
void isn_gpu_cuda_free(isn_gpu_device *device);
/* The backend's health, taken under the lock that guards its batches (any thread). */
void isn_gpu_cuda_health(const isn_gpu_device *device, isn_gpu_health *health);

/* Second stage: where to score a query's candidates (CPU in the calling worker, or the GPU model
 * cache, isn_gpu_l2_*). Each device's time is learned online as a + b * work, work = candidates x
 * trees (an MLP counts as one tree per 64 weights), by least squares over recent measurements with
 * forgetting; it starts from the crossover measured on an H200 against one CPU thread (100 trees
 * from ~300 candidates, 300 trees from ~100, 1,000 trees from <= 10; CPU ~9.8 ns per candidate-tree).
 * The faster predicted device wins; every explore_every-th call near the crossover (within 4x) tries
 * the other one, so a wrong start is corrected. Thread-safe. */
typedef struct {
    double s[ISN_DEVICE_KINDS][5]; /* decayed sums: n, x, x^2, y, x*y */
    double a[ISN_DEVICE_KINDS], b[ISN_DEVICE_KINDS];
    double forgetting;
    uint32_t explore_every;
    uint64_t decisions, chosen[ISN_DEVICE_KINDS], measured[ISN_DEVICE_KINDS], explored;
    void *lock;
} isn_l2_crossover;

/* 0, or -1 when out of memory. */
int isn_l2_crossover_init(isn_l2_crossover *crossover);
void isn_l2_crossover_destroy(isn_l2_crossover *crossover);
double isn_l2_work(uint32_t candidates, uint32_t trees);
double isn_l2_crossover_predict_ns(isn_l2_crossover *crossover, isn_device_kind device, double work);
/* The device for this much work; gpu_available false always answers CPU (and counts nothing). */
isn_device_kind isn_l2_crossover_choose(isn_l2_crossover *crossover, double work, bool gpu_available);
void isn_l2_crossover_learn(isn_l2_crossover *crossover, isn_device_kind device, double work, double measured_ns);
/* Candidates per query from which the GPU is predicted faster for a model of this many trees
 * (UINT32_MAX: never). */
uint32_t isn_l2_crossover_candidates(isn_l2_crossover *crossover, uint32_t trees);

/* Simulated GPU: sleeps for launch_ns + per_posting_ns * postings + per_query_ns * jobs per batch,
 * and fails a batch with probability failure_rate. Numbers from DESIGN.md section 6 (H200): launch +
 * wait ~8-9 us; fused decode + BM25 at 12-74 G postings/s. */
typedef struct {
    double launch_ns;
    double per_posting_ns;
    double per_query_ns;
    double failure_rate; /* 0..1 */
    uint64_t seed;
    /* Called for each job of a successful batch, from the dispatcher thread (may be NULL). */
    void (*on_job_done)(void *user, isn_job *job);
    void *user;
} isn_gpu_sim_config;

void isn_gpu_sim_config_default(isn_gpu_sim_config *config);
/* Fills *device; free with isn_gpu_sim_free(device). 0, or -1 when out of memory. */
int isn_gpu_sim_new(const isn_gpu_sim_config *config, uint32_t max_batch, uint64_t memory_budget,
                    isn_gpu_device *device);
void isn_gpu_sim_free(isn_gpu_device *device);
/* The simulated service time of a batch: what the sleep lasts. */
double isn_gpu_sim_batch_ns(const isn_gpu_sim_config *config, isn_job *const *jobs, uint32_t n);
/* One job's part of it, without the launch: the cost model's GPU target (arg: the config). */
double isn_gpu_sim_job_ns(const isn_job_features *features, const void *config);

/* ------------------------------------------------------------------ cost model */

/* Per device: log(service ns) = w . x(features) + the mean correction of the job's keys + a bias. w is
 * learned by recursive least squares with forgetting, the key corrections by a step towards each
 * residual, the bias by a step against each relative error's sign. A query whose signature is in the
 * memo is predicted from its own measured times instead (plus its own bias).
 * Starts from a formula fitted by bench/bench_scheduler --fit; error is tracked as MAPE. A CPU job's
 * service is its worker thread's CPU time (time lost to preemption is the scheduler's scale's
 * business, not the query's cost); a GPU job's is its share of a batch past its fixed part (the
 * scheduler learns that part per batch: isn_batch_cost). */
#define ISN_COST_FEATURES 30
#define ISN_COST_KEY_SLOTS 4096 /* hashed term ids */
#define ISN_COST_MEMO_SLOTS 4096 /* query signatures, direct-mapped: the last ones seen win */

typedef struct {
    double w[ISN_COST_FEATURES];
    double p[ISN_COST_FEATURES][ISN_COST_FEATURES];
    float key_bias[ISN_COST_KEY_SLOTS];
    /* log time of recently measured queries (moving average), by signature */
    uint64_t memo_signature[ISN_COST_MEMO_SLOTS];
    float memo_log_ns[ISN_COST_MEMO_SLOTS];
    /* Added to the log prediction, learned to minimise relative error (the model itself predicts the
     * mean of log time, a geometric mean; MAPE's best predictor lies lower): one for predictions
     * from the weights, one for those from the memo. */
    double bias, memo_bias;
    uint64_t updates;
    /* mean absolute percentage error: since warm-up, and an exponential moving average (recent) */
    double ape_sum;
    uint64_t ape_count;
    double ape_recent;
} isn_cost_device_model;

typedef struct {
    isn_cost_device_model device[ISN_DEVICE_KINDS];
    double forgetting;     /* RLS lambda, e.g. 0.999 */
    double key_rate;       /* step of the key corrections towards a residual (0 = off) */
    uint64_t warm_up;      /* updates before a device's errors count in MAPE */
} isn_cost_model;

void isn_cost_model_init(isn_cost_model *model);
void isn_cost_features(const isn_job_features *features, double x[ISN_COST_FEATURES]);
double isn_cost_predict_ns(const isn_cost_model *model, isn_device_kind device, const isn_job_features *features);
/* Learns one measured time; counts its error first (against the prediction before learning). */
void isn_cost_learn(isn_cost_model *model, isn_device_kind device, const isn_job_features *features,
                    double measured_ns);
/* Percent, since warm-up; NAN when nothing counted yet. */
double isn_cost_mape(const isn_cost_model *model, isn_device_kind device);
/* Starts a device's model from a known latency model (a simulator's, or one measured elsewhere):
 * weights fitted by least squares to ns_of() over a spread of synthetic queries, so the model does
 * not learn it during the first minutes of load. The key corrections and error counts restart. */
void isn_cost_model_seed(isn_cost_model *model, isn_device_kind device,
                         double (*ns_of)(const isn_job_features *features, const void *arg), const void *arg);
/* Solves (a + a small ridge) w = b: least squares from normal equations (bench_scheduler --fit). */
void isn_least_squares_solve(double a[ISN_COST_FEATURES][ISN_COST_FEATURES], const double b[ISN_COST_FEATURES],
                             double w[ISN_COST_FEATURES]);
/* Text file, written to PATH.tmp then renamed. 0, or -1 with err. */
int isn_cost_model_save(const isn_cost_model *model, const char *path, char *err, size_t err_len);
/* 0; 1 when the file does not exist (the model is left as it was); -1 with err for a bad file. */
int isn_cost_model_load(isn_cost_model *model, const char *path, char *err, size_t err_len);

/* ------------------------------------------------------------------ EDF queue */

/* Bounded min-heap of jobs by deadline (no deadline sorts last, then first come first served).
 * Not thread-safe: the scheduler holds its lock around it. */
typedef struct {
    isn_job **heap;
    uint64_t *keys; /* deadline, or UINT64_MAX */
    uint64_t *seq;  /* arrival order among equal keys */
    uint32_t size, capacity;
    uint64_t next_seq;
    double backlog_ns[ISN_DEVICE_KINDS]; /* predicted service of what is queued, per device */
} isn_edf_queue;

int isn_edf_init(isn_edf_queue *queue, uint32_t capacity);
void isn_edf_destroy(isn_edf_queue *queue);
bool isn_edf_push(isn_edf_queue *queue, isn_job *job);
isn_job *isn_edf_pop(isn_edf_queue *queue);
isn_job *isn_edf_peek(const isn_edf_queue *queue);
/* The i-th entry of the heap array (any order): for scans that pick by size. */
isn_job *isn_edf_at(const isn_edf_queue *queue, uint32_t i);
/* Removes the i-th heap entry. */
isn_job *isn_edf_remove_at(isn_edf_queue *queue, uint32_t i);

/* ------------------------------------------------------------------ routing */

typedef enum { ISN_ROUTE_CPU, ISN_ROUTE_GPU, ISN_ROUTE_UNDECIDED, ISN_ROUTE_SHED, ISN_ROUTE_DEGRADE } isn_route;

/* The routing decision as a pure function, so it can be tested alone. completion = wait + service per
 * device (a device with no capacity has an infinite one). A device wins clearly when its completion
 * time times (1 + margin) is still below the other's. Overload: when no device finishes within the
 * remaining budget, shed; or, when degrade_ok, run it on the CPU cut short (early termination; a GPU
 * batch cannot stop early) if the time left after its wait is at least degrade_min_share of its
 * predicted service. */
typedef struct {
    double wait_ns[ISN_DEVICE_KINDS];
    double service_ns[ISN_DEVICE_KINDS];
    bool available[ISN_DEVICE_KINDS];
    double remaining_ns; /* until the deadline; <= 0 means none */
    double margin;       /* e.g. 0.25 */
    bool degrade_ok;
    double degrade_min_share; /* e.g. 0.5 */
} isn_route_input;

isn_route isn_route_decide(const isn_route_input *input, isn_device_kind *best);

/* ------------------------------------------------------------------ batch forming */

typedef enum {
    ISN_FLUSH_FULL,     /* max_batch jobs */
    ISN_FLUSH_MEMORY,   /* the next job would pass the memory budget */
    ISN_FLUSH_DEADLINE, /* waiting longer would endanger the earliest deadline in the batch */
    ISN_FLUSH_LINGER,   /* nothing more came within the longest wait allowed */
    ISN_FLUSH_REASONS
} isn_flush_reason;

const char *isn_flush_reason_name(isn_flush_reason reason);

/* Decides whether a batch of these jobs must go now. The batch's service is predicted with the GPU
 * cost (per job plus one launch); it must finish by the earliest deadline minus safety_ns. Returns
 * true with *reason when it must; else false with *wait_until_ns, the latest time to wait for more. */
typedef struct {
    uint32_t max_batch;
    uint64_t memory_budget;
    uint64_t linger_ns;   /* longest wait for more jobs after the first */
    uint64_t safety_ns;   /* slack kept before the earliest deadline */
    double launch_ns;     /* fixed cost of one batch */
} isn_batch_policy;

/* A GPU batch's time as a fixed part plus a part per job, learned online from measured batches
 * (batch_cost.c). The fixed part is paid once per batch: jobs learn only their share of the rest,
 * and routing charges a job its marginal cost. */
typedef struct {
    double w[2];    /* fixed, per job (microseconds) */
    double p[2][2]; /* RLS covariance */
    uint64_t batches;
} isn_batch_cost;

void isn_batch_cost_init(isn_batch_cost *cost, double fixed_ns, double per_job_ns);
void isn_batch_cost_learn(isn_batch_cost *cost, uint32_t jobs, double measured_ns);
double isn_batch_cost_fixed_ns(const isn_batch_cost *cost);   /* >= 0 */
double isn_batch_cost_per_job_ns(const isn_batch_cost *cost); /* >= 0 */

/* Postings bytes the device touches for a job: what the memory budget counts. */
uint64_t isn_job_memory_bytes(const isn_job *job);
bool isn_batch_should_flush(const isn_batch_policy *policy, isn_job *const *jobs, uint32_t n, uint64_t next_job_bytes,
                            uint64_t first_added_ns, uint64_t now_ns, isn_flush_reason *reason,
                            uint64_t *wait_until_ns);

/* ------------------------------------------------------------------ the scheduler */

typedef enum { ISN_OVERLOAD_SHED, ISN_OVERLOAD_DEGRADE } isn_overload_policy;

typedef struct {
    uint32_t workers;        /* CPU worker threads */
    uint32_t queue_capacity; /* per queue (CPU, GPU, undecided) */
    uint32_t deque_capacity; /* per worker */
    size_t arena_bytes;      /* per-worker scratch */
    double early_stop_fraction; /* a CPU job stops at received + this * (deadline - received) */
    double admit_fraction;      /* admitted only if predicted to complete by received + this * budget */
    double degraded_fraction;   /* degraded only when it can run at least this share of its predicted time */
    double route_margin;
    int worker_nice;         /* workers' nice value relative to the process (Linux: per thread) */
    isn_overload_policy overload;
    isn_batch_policy batch;
    uint64_t gpu_rest_ns;    /* a failed device is left alone this long */
    isn_cost_model model;    /* starting point (isn_cost_model_init, or loaded) */
    /* CPU side. worker_init runs on each worker thread before it takes jobs (NULL state = failure). */
    void *(*worker_init)(void *user, uint32_t worker);
    void (*worker_free)(void *user, void *worker_state);
    void (*run_cpu)(void *user, isn_job *job, const isn_cpu_context *context);
    /* Jobs submitted unprepared: a worker calls this first (query analysis and the cost features,
     * off the submitter's thread), then admits and routes the job as isn_scheduler_submit would.
     * false = refused (the callback records why): the job completes ISN_JOB_REFUSED. */
    bool (*prepare)(void *user, isn_job *job, void *worker_state);
    /* Every job's end, from the thread that ended it. */
    void (*complete)(void *user, isn_job *job);
    void *user;
    isn_gpu_device *gpus; /* may be NULL */
    uint32_t num_gpus;
} isn_scheduler_config;

void isn_scheduler_config_default(isn_scheduler_config *config);

typedef struct isn_scheduler isn_scheduler;

/* Starts the threads (and runs worker_init on each). NULL with err. */
isn_scheduler *isn_scheduler_start(const isn_scheduler_config *config, char *err, size_t err_len);

typedef enum {
    ISN_SUBMIT_QUEUED,
    ISN_SUBMIT_SHED_FULL,     /* its queue is at capacity */
    ISN_SUBMIT_SHED_OVERLOAD, /* no device can finish it in time (shed policy) */
    ISN_SUBMIT_STOPPED,       /* the scheduler is stopping */
} isn_submit_result;

/* Any thread. On ISN_SUBMIT_QUEUED the job belongs to the scheduler until complete(). */
isn_submit_result isn_scheduler_submit(isn_scheduler *scheduler, isn_job *job);
/* Any thread: the job's features are not known yet. It waits (earliest deadline first, ahead of
 * all other CPU work) for a worker to run config.prepare on it, then is admitted and routed; a
 * refusal then completes it ISN_JOB_REFUSED. ISN_SUBMIT_QUEUED, _SHED_FULL or _STOPPED. */
isn_submit_result isn_scheduler_submit_unprepared(isn_scheduler *scheduler, isn_job *job);
/* Any thread. False when a job with this budget would be shed whatever it costs: no device could
 * even start it within its admission budget. Lets the caller refuse before analysing the query,
 * so that refusals stay cheap under overload. Counts the refusal as shed_overload when false. */
bool isn_scheduler_may_admit(isn_scheduler *scheduler, uint64_t received_ns, uint64_t deadline_ns);
/* Any thread: whether routing would send this job (its features as they are now) to the GPU as the
 * clear winner, with the queues as they are now. Lets the caller skip work that only refines the
 * CPU's prediction. Queues nothing. */
bool isn_scheduler_gpu_clearly_wins(isn_scheduler *scheduler, isn_job *job);
/* From now on queued jobs complete ISN_JOB_ABANDONED instead of running. */
void isn_scheduler_abandon_queued(isn_scheduler *scheduler);
/* Stops and joins the threads; queued jobs complete ISN_JOB_ABANDONED. */
void isn_scheduler_stop(isn_scheduler *scheduler);

/* Counters, read at any time (each is read atomically; the set is not one snapshot). */
typedef struct {
    uint64_t submitted, completed;
    uint64_t shed_full, shed_overload, degraded;
    uint64_t dropped_dead, partial, abandoned;
    uint64_t routed[3]; /* cpu, gpu, undecided */
    uint64_t ran_on[ISN_DEVICE_KINDS];
    uint64_t stolen_deque;   /* jobs a worker took from another worker's deque */
    uint64_t stolen_gpu;     /* GPU-preferred jobs a CPU worker took */
    uint64_t undecided_cpu;  /* undecided jobs a CPU worker took */
    uint64_t undecided_gpu;  /* undecided jobs a dispatcher took */
    uint64_t batches, batch_jobs, batch_flush[ISN_FLUSH_REASONS];
    uint64_t gpu_failures, gpu_reruns;
    uint32_t queue_depth[ISN_QUEUES];
    uint32_t deque_depth;    /* all workers */
    uint32_t prepare_depth;  /* submitted unprepared, waiting for a worker */
    uint64_t prepared, refused_prepare; /* prepared by workers; refused by prepare() */
    uint32_t running;
    double wait_seconds_sum[ISN_DEVICE_KINDS]; /* enqueued to started */
    uint64_t wait_count[ISN_DEVICE_KINDS];
    double busy_seconds[ISN_DEVICE_KINDS];     /* summed over workers / devices */
    double uptime_seconds;
    uint32_t workers, gpus;
    double mape[ISN_DEVICE_KINDS];             /* percent; NAN before any */
    double service_scale[ISN_DEVICE_KINDS];    /* measured / predicted service lately (admission uses it) */
    double batch_fixed_seconds, batch_per_job_seconds; /* a GPU batch's time, as learned (isn_batch_cost) */
    double batch_mape; /* percent: GPU batches' predicted (fixed + jobs) against measured time; NAN before any */
    uint64_t model_updates[ISN_DEVICE_KINDS];
} isn_scheduler_stats;

void isn_scheduler_get_stats(isn_scheduler *scheduler, isn_scheduler_stats *stats);
/* The model as learned so far (for saving). */
void isn_scheduler_get_model(isn_scheduler *scheduler, isn_cost_model *model);

uint64_t isn_sched_now_ns(void);

#endif
