/* Private to scheduler/ (and to the tests, bench_scheduler and bench_query, which exercise the parts
 * alone): the deques, EDF queues, routing, batch cost, cost model, job features, the GPU devices'
 * adapters and the simulator, and the scheduler's state shared by scheduler.c, submit.c, cpu_workers.c
 * and gpu_dispatch.c. */
#ifndef ISN_SCHEDULER_INTERNAL_H
#define ISN_SCHEDULER_INTERNAL_H

#include <pthread.h>
#include <semaphore.h>

#include "base/base.h"

#include "scheduler/scheduler.h"

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

/* ------------------------------------------------------------------ job features */

/* Features of a query from the index (lexicon statistics, block maxima, and the threshold probe's
 * bounded read of the rarest lists). */
void isn_job_features_of(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                         isn_job_features *features);
/* The same without the threshold probe (~10x cheaper): enough to tell whether the CPU is in the
 * running at all (sched_gpu_clearly_wins); the probe sharpens only the CPU's prediction. */
void isn_job_features_quick(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                            isn_job_features *features);
/* The lists' statistics alone (no block maxima): every list essential, the expected walk all of them.
 * What a job the GPU must answer gets: the GPU's side of the model starts from such features
 * (isn_cost_model_seed) and a batch's time follows the postings it decodes, while reading a short
 * query's block maxima took a worker several microseconds, a quarter of its part of a GPU answer. */
void isn_job_features_lists(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                            isn_job_features *features);

/* ------------------------------------------------------------------ GPU devices */

/* A GPU device backend. run_batch runs the jobs (the same features the cost model saw) and returns
 * when all are done: 0, or -1 with err when the device failed (the jobs are then re-run on the CPU
 * and the device is rested for a while).
 * A device that can run batches while the host handles others (max_in_flight > 1) also has submit,
 * which starts a batch and returns a ticket >= 0 (GPU_DEVICE_BUSY: complete the batches in flight
 * first; -1 with err: failed), and complete, which waits for a ticket's batch and answers its jobs
 * (0, or -1 with err as run_batch). The dispatcher keeps up to max_in_flight batches going, so that the
 * device runs one while the host answers the one before and forms the next. */
#define GPU_DEVICE_BUSY (-2)
struct isn_gpu_device {
    const char *name;
    void *state;
    int (*run_batch)(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len);
    int (*submit)(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len);
    int (*complete)(void *state, int ticket, char *err, size_t err_len);
    uint32_t max_in_flight;      /* batches at once: 1 = run_batch only */
    uint32_t max_batch;          /* jobs per launch */
    uint64_t memory_budget;      /* bytes of posting data one batch may touch */
};

/* Fills *device (the backend stays the caller's; close it after isn_gpu_backend_device_free). 0, or -1.
 * backend may be NULL: the device takes no batch until isn_gpu_backend_device_replace gives it one, and
 * then at most `streams` at once (a backend's own streams when it is given here). */
int isn_gpu_backend_device_new(isn_gpu_backend *backend, uint32_t streams, uint32_t max_batch, uint32_t ordinal,
                               isn_gpu_device *device);
void isn_gpu_backend_device_free(isn_gpu_device *device);
/* The backend's health, taken under the lock that guards its batches (any thread). */
void isn_gpu_backend_device_health(const isn_gpu_device *device, isn_gpu_health *health);
/* Installs another backend between batches (NULL: none for now) and returns the one it had. */
isn_gpu_backend *isn_gpu_backend_device_replace(isn_gpu_device *device, isn_gpu_backend *backend);
/* Whether a replace is waiting for the batches in flight (new batches are refused meanwhile). */
bool isn_gpu_backend_device_replace_pending(const isn_gpu_device *device);

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

struct isn_cost_model {
    isn_cost_device_model device[ISN_DEVICE_KINDS];
    double forgetting;     /* RLS lambda, e.g. 0.999 */
    double key_rate;       /* step of the key corrections towards a residual (0 = off) */
    uint64_t warm_up;      /* updates before a device's errors count in MAPE */
};

void isn_cost_model_init(isn_cost_model *model);
void isn_cost_features(const isn_job_features *features, double x[ISN_COST_FEATURES]);
double isn_cost_predict_ns(const isn_cost_model *model, isn_device_kind device, const isn_job_features *features);
/* Every device's prediction, the features' vector (a few dozen logarithms) computed once for all of them. */
void isn_cost_predict_all_ns(const isn_cost_model *model, const isn_job_features *features,
                             double predicted_ns[ISN_DEVICE_KINDS]);
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
 * time times (1 + margin) is still below the other's. When no device finishes within the remaining
 * budget: if the CPU's queue ahead of it takes at most max_queue_share of the budget, the query's own
 * cost is what misses the deadline and it runs on the CPU cut short (early termination, a partial
 * answer; a GPU batch cannot stop early); otherwise it is overload: shed, or, when degrade_ok, run it
 * cut short if the time left after its wait is at least degrade_min_share of its predicted service. */
typedef struct {
    double wait_ns[ISN_DEVICE_KINDS];
    double service_ns[ISN_DEVICE_KINDS];
    bool available[ISN_DEVICE_KINDS];
    double remaining_ns; /* until the deadline; <= 0 means none */
    double margin;       /* e.g. 0.25 */
    bool degrade_ok;
    double degrade_min_share; /* e.g. 0.5 */
    double max_queue_share;   /* e.g. 0.5; 0: every miss is overload */
} isn_route_input;

isn_route isn_route_decide(const isn_route_input *input, isn_device_kind *best);

/* ------------------------------------------------------------------ batch cost */

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

/* What one job of a GPU batch teaches (gpu_dispatch.c): the batch took took_ns; fixed_ns of it was the
 * batch's fixed part and batch_predicted_ns the whole prediction (fixed part included) at launch; the
 * job, one of `jobs`, was predicted job_predicted_ns of it. Its cost is its share, by prediction, of the
 * time past the fixed part, within [SCHED_SHARE_LOW, SCHED_SHARE_HIGH] times its prediction: a batch
 * of a few microsecond jobs behind a millisecond fixed part that runs a millisecond late (its thread
 * woken late, a slower launch) would otherwise teach each job a thousand times its cost, and the model,
 * learning in logs, forgets that only slowly. The scale learns from the whole batch: measured took_ns against
 * batch_predicted_ns, the error routing pays. */
typedef struct {
    double cost_ns;      /* the job's cost, for the model */
    double wall_ns;      /* measured, for the scale */
    double predicted_ns; /* predicted, for the scale */
} isn_gpu_lesson;
isn_gpu_lesson isn_gpu_lesson_of(double took_ns, double fixed_ns, double batch_predicted_ns, double job_predicted_ns,
                                 uint32_t jobs);
#define SCHED_SHARE_LOW 0.1
#define SCHED_SHARE_HIGH 4.0

/* Postings bytes the device touches for a job: what the memory budget counts. */
uint64_t isn_job_memory_bytes(const isn_job *job);
/* Decides whether a batch of these jobs must go now (isn_batch_policy). The batch's service is
 * predicted with the GPU cost (per job plus one launch); it must finish by the earliest deadline minus
 * safety_ns. Returns true with *reason when it must; else false with *wait_until_ns, the latest time
 * to wait for more. */
bool isn_batch_should_flush(const isn_batch_policy *policy, isn_job *const *jobs, uint32_t n, uint64_t next_job_bytes,
                            uint64_t first_added_ns, uint64_t now_ns, isn_flush_reason *reason,
                            uint64_t *wait_until_ns);

/* ------------------------------------------------------------------ admission's measured bounds */

/* Predictions alone can run away under overload: a learned scale, backlog sums or in-flight GPU time
 * that stay high while nothing is admitted refuse everything, and nothing then corrects them
 * (DESIGN.md section 7). So admission bounds what the model claims by what was measured:
 * - a device's measured time per job (busy time over jobs finished, in windows) gives the measured
 *   wait behind `ahead` jobs (ahead x job time / servers), and the model's wait is kept within
 *   SCHED_MEASURED_SLACK of it either way: when less is admitted the queue shortens and the bound
 *   falls, whatever the model believes, and jobs costlier than predicted are not admitted blindly;
 * - the oldest queued job's age is a floor (what the next job will at least wait);
 * - a learned scale that no measurement refreshes relaxes towards 1 (isn_scale_relaxed), so a refusal
 *   never freezes the signal admission learns from;
 * - the preparation queue, like CoDel, finds a standing backlog (an interval whose least wait stayed
 *   above the target) and then refuses unprepared what waited longer than the target, cheaply and
 *   before any analysis; a job past its admission point is refused unprepared in any case. */
typedef struct {
    double job_ns;          /* measured device time per job (moving average); 0 before any window */
    uint64_t measured_ns;   /* when job_ns was last updated */
    uint64_t window_start_ns, jobs_at_start, busy_at_start;
} isn_service_meter;

void isn_service_meter_init(isn_service_meter *meter, uint64_t now_ns);
/* The device's running totals (busy ns, jobs finished); a window closes every SCHED_METER_WINDOW_NS. */
void isn_service_meter_sample(isn_service_meter *meter, uint64_t busy_ns_total, uint64_t jobs_total, uint64_t now_ns);
/* The measured wait behind `ahead` jobs on `servers` parallel servers; INFINITY before any measurement. */
double isn_service_meter_wait_ns(const isn_service_meter *meter, double ahead, double servers);
/* The wait admission believes: the model's, kept within SCHED_MEASURED_SLACK of the measured one either
 * way (when there is one), and at least the oldest queued job's age. */
double isn_admission_wait_ns(double model_ns, double measured_ns, double oldest_ns);
/* `scale` as last learned at learned_ns, relaxed towards 1 with the time nothing refreshed it. */
double isn_scale_relaxed(double scale, uint64_t learned_ns, uint64_t now_ns);

/* The preparation queue's measured drain rate (as PIE estimates a queue's delay from its departure
 * rate): the time between jobs leaving it while it held a backlog, refusals included. A request queued
 * behind `ahead` others waits about ahead times that. The count times a preparation's time assumed every
 * worker prepares; in the hybrid the workers prepare between CPU searches, and requests let in on that
 * count waited in the queue past their admission point, to be refused there after 10-25 ms. */
typedef struct {
    double per_job_ns;        /* moving average (behind n jobs, about n times it); 0 before any window */
    uint64_t window_start_ns; /* 0: no window open */
    uint64_t last_taken_ns;   /* the window's latest take */
    uint64_t longest_gap_ns;  /* the window's longest time between two takes */
    uint32_t taken;           /* jobs taken since the window opened */
} isn_departure_meter;

/* One job taken off the queue at now_ns, leaving left_behind queued. A window opens at a take that
 * leaves at least `backlog` behind; one that leaves none closes it unmeasured (the arrivals, not the
 * takers, set that pace); it closes measured after SCHED_DEPARTURE_MIN_JOBS jobs and
 * SCHED_DEPARTURE_MIN_NS. A gap between takes of at least SCHED_DEPARTURE_MIN_NS and longer than all
 * the window's others together is left out of it (its time and its job): one stall of the node (its
 * host took the CPUs, a lock's holder was off its core) is not the pace the queue drains at once it
 * moves again. Counted in, a 30 ms stall in a window of 64 jobs taken 10 us apart moved the average
 * from 10 us to about 150 us, and after the stall arrivals were refused for the backlog it left while
 * the workers worked that off in a few milliseconds. While a stall lasts the queue's stillness bounds
 * the wait instead (prepare_wait_floor); a pace of regular long gaps (the workers prepare between long
 * searches) has no gap longer than the others together, and counts whole. */
void isn_departure_meter_taken(isn_departure_meter *meter, uint32_t left_behind, uint32_t backlog, uint64_t now_ns);

typedef struct {
    uint64_t interval_end_ns;
    double min_sojourn_ns;   /* least wait of the jobs taken in this interval */
    double first_sojourn_ns; /* wait of the interval's first job (NAN before it) */
    bool standing;           /* the last interval's least wait was above the target */
    /* Arrivals are bounded (isn_codel_refuses_arrival) from a standing interval whose backlog did not
     * shrink through it (its last job waited at least as long as its first) on, for as long as the
     * bound refuses some in each interval: it keeps the waits under the target, so the standing state
     * it ends cannot be what releases it. A backlog left by a stall that the workers are draining
     * starts no bound: near capacity it drains for longer than an interval while every request in it
     * still meets its deadline, and refusing arrivals to hurry it would only lose them; one that grows
     * or holds is what a load past capacity makes. It is standing all the same, so preparation hurries
     * (sched_take_features). */
    bool bounding;
    uint64_t refusals_at_interval_start;
} isn_codel;

void isn_codel_init(isn_codel *codel, uint64_t now_ns);
/* A job taken off the queue after waiting sojourn_ns; arrival_refusals: how many arrivals the bound
 * has refused so far (a running total). */
void isn_codel_observe(isn_codel *codel, double sojourn_ns, uint64_t now_ns, uint64_t arrival_refusals);
/* Whether a job that waited sojourn_ns is refused unprepared: only in a standing backlog, past the
 * target (SCHED_CODEL_TARGET_NS, or a share of the job's admission budget when that is smaller). */
bool isn_codel_drops(const isn_codel *codel, double sojourn_ns, double admit_budget_ns);
/* The wait CoDel accepts for a job with that admission budget (0: none): SCHED_CODEL_TARGET_NS, or the
 * budget's share when that is smaller. */
double isn_codel_target_ns(double admit_budget_ns);
/* The arrival check's half of CoDel: while bounding, a new request is refused at once when the
 * preparations ahead of it would keep it past SCHED_CODEL_ARRIVAL_SHARE of the target, so that the
 * queue's waits stay below the target and CoDel seldom has to drop a request that has waited (a refusal
 * that costs its client that wait). Released only by an interval in which it refused nothing: released
 * when the standing state ends, the backlog would grow past the target for an interval each time, and
 * those requests would be dropped after waiting. A burst on a queue that was not standing passes. */
bool isn_codel_refuses_arrival(bool bounding, double preparing_ns, double admit_budget_ns);

#define SCHED_METER_WINDOW_NS 20000000ull   /* a service meter's window */
#define SCHED_METER_LONG_WINDOW_NS 200000000ull /* ... and the longest it waits for SCHED_METER_MIN_JOBS */
#define SCHED_METER_MIN_JOBS 8               /* jobs a window needs to say anything */
#define SCHED_METER_WEIGHT 0.3               /* weight of the newest window */
#define SCHED_MEASURED_SLACK 2.0             /* the model may claim at most this times the measured wait */
#ifndef SCHED_MEASURED_FLOOR
#define SCHED_MEASURED_FLOOR (1.0 / SCHED_MEASURED_SLACK) /* ... and at least this share of it */
#endif
#define SCHED_SCALE_RELAX_NS 500000000.0     /* a stale scale's distance to 1 shrinks by e this often */
#define SCHED_DEPARTURE_MIN_JOBS 64           /* a departure window's least jobs ... */
#define SCHED_DEPARTURE_MIN_NS 1000000ull     /* ... and least time */
#define SCHED_CODEL_TARGET_NS 5000000.0      /* preparation queue: acceptable standing wait */
#define SCHED_CODEL_BUDGET_SHARE 0.25        /* or this share of the job's admission budget, if less */
#define SCHED_CODEL_INTERVAL_NS 100000000ull /* CoDel's interval */
#define SCHED_CODEL_ARRIVAL_SHARE 0.5        /* arrivals are refused past this share of the target */
#define SCHED_QUICK_STALE_NS 1000000ull      /* isn_scheduler_may_admit_quick trusts a published start this long */
#define SCHED_RESUME_NOTE_NS 50000ull        /* resumed_ns is rewritten at most this often */
#define SCHED_PUBLISH_EVERY_NS 20000ull      /* admission publishes its arrival view at most this often */

/* ------------------------------------------------------------------ the scheduler's own steps
 * (tests call them directly) */

/* Admits and routes a job whose features are known (what submit does after preparing). */
isn_submit_result sched_admit(isn_scheduler *s, isn_job *job);

/* Whether routing would send this job (its features as they are now) to the GPU as the clear
 * winner, with the queues as they are now. Queues nothing. */
bool sched_gpu_clearly_wins(isn_scheduler *s, isn_job *job);
/* The job's features from its query (job->query set): the threshold probe, several times the cost
 * of the rest, only when the GPU does not clearly take the job anyway (it sharpens only the CPU's
 * prediction). */
void sched_take_features(isn_scheduler *s, isn_job *job);
/* The model as learned so far. */
void sched_get_model(isn_scheduler *s, isn_cost_model *model);


#define SCHED_MAX_GRAB 4              /* extra jobs a worker moves to its deque at once */
#define SCHED_MAX_DEAD 32             /* dead jobs unlinked per trip through the lock */
#define SCHED_IDLE_POLL_NS 1000000ull /* idle workers look for stealable work this often */
#define SCHED_SPARE_RECHECK_NS 500000ull /* a resting spare worker looks at the loops this often */
#define SCHED_STANDBY_RECHECK_NS 10000000ull /* a resting standby worker looks whether it is wanted this often */
#define SCHED_GROUP_SCAN 32           /* queued jobs a dispatcher looks at to find a similar size */
#define SCHED_GROUP_RATIO 8.0         /* "similar size": predicted GPU times within this factor */
#define SCHED_SCALE_WEIGHT 0.02       /* weight of the newest job in the measured/predicted sums */
#define SCHED_PLACEABLE_WEIGHT 0.0625 /* weight of the newest admission in cpu_placeable_share */
/* The arrival check grants a request this share of the time to its admission point; routing, once it
 * is prepared, grants all of it. Under overload admission holds the CPU's wait at its limit, and that
 * wait moves while a request is prepared: with one limit for both, many requests let in near it were
 * refused by routing, each after a worker had prepared it. */
#define SCHED_ARRIVAL_SHARE 0.9
#define SCHED_BATCH_WARM_UP 50         /* batches before the batch error counts */
#define SCHED_LEARN_SPACING 32.0       /* see sched_learn_spaced */
#define SCHED_PREPARE_BURST 16         /* preparations a worker makes before it runs a queued job */
#define SCHED_PREPARE_TAKE 8           /* jobs a worker takes from a long preparation queue at once */
#define SCHED_LARGE_PREPARERS 1        /* workers that may prepare large requests at once */
#define SCHED_STAGED_CLOSED ((isn_job *)&isn_job_staged_closed) /* prepare_staged once stopping */
extern const isn_job isn_job_staged_closed;
#define SCHED_PREPARE_START_NS 20000.0 /* a preparation's time before any is measured */
#define SCHED_BATCH_PER_JOB_START_NS 2000.0 /* a GPU batch's part per job before any is measured */
/* The real GPU's cost before any batch is measured (an H200's, issue 5). */
#define REAL_GPU_START_LAUNCH_NS 100000.0
#define REAL_GPU_START_PER_POSTING_NS 0.1
#define REAL_GPU_START_PER_QUERY_NS 10000.0

#define COUNT(counter) atomic_fetch_add_explicit(&(counter), 1, memory_order_relaxed)
#define ADD(counter, v) atomic_fetch_add_explicit(&(counter), (v), memory_order_relaxed)
#define LOAD(counter) atomic_load_explicit(&(counter), memory_order_relaxed)

/* Idle CPU workers (idle_workers.c): a semaphore and a bit each, so that waking one takes no lock. */
typedef struct {
    _Atomic uint64_t *bits; /* a bit per worker: it sleeps, or is about to */
    sem_t *wakes;           /* one per worker */
    uint32_t workers, words;
    atomic_uint count; /* bits set, read as a hint: no need to look when 0 */
    _Atomic uint64_t woken, passed_on; /* wakes posted; of them, claims of a worker that did not wait */
} sched_idle_set;
/* 0, or -1 when out of memory. */
int sched_idle_init(sched_idle_set *set, uint32_t workers);
void sched_idle_destroy(sched_idle_set *set);
/* The worker, before its last look for work: from here on a wake may claim it. */
void sched_idle_announce(sched_idle_set *set, uint32_t worker);
/* The worker, after that look: waits for a wake until until_ns (CLOCK_MONOTONIC) when `wait`, then
 * withdraws; returns once no wake for it is pending. */
void sched_idle_sleep(sched_idle_set *set, uint32_t worker, bool wait, uint64_t until_ns);
/* Any thread: claims and wakes one sleeper, or all; how many it woke. */
uint32_t sched_idle_wake(sched_idle_set *set, bool all);

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
    uint32_t spare_rank;      /* 0: a worker of its own core; k: the k-th spare (config.spare_workers) */
    bool standby;             /* one of config.standby_workers */
    bool resting;             /* a spare that found too few idle loops, or a standby worker not wanted */
    /* Jobs taken from the preparation queue in one trip through its lock, with what was decided of
     * each there (prepare_one prepares them one at a time). */
    struct {
        isn_job *job;
        bool unworthy, late, large;
    } taken[SCHED_PREPARE_TAKE];
    uint32_t taken_count, taken_next;
} sched_worker;

/* A batch a dispatcher sent and has not answered yet. */
#define SCHED_MAX_IN_FLIGHT 8
typedef struct {
    isn_job **jobs; /* the device's max_batch entries */
    uint32_t n;
    int ticket;
    double predicted_ns, fixed_ns; /* its predicted time, and the batch cost's fixed part then */
    uint64_t start_ns;
} sched_flight;

/* A landed batch whose completions idle workers share with its dispatcher (gpu_landing.c). */
#define SCHED_LANDINGS 4
#define SCHED_LANDING_CHUNK 8
typedef struct {
    isn_job **jobs;           /* a copy of the batch's, the device's max_batch entries */
    _Atomic uint64_t claim;   /* round << 32 | batch size << 16 | next index to claim */
    _Atomic uint32_t done;    /* of this round's jobs, those completed */
} sched_landing;

typedef struct {
    isn_scheduler *scheduler;
    pthread_t thread;
    uint32_t id;
    bool prepared; /* its arrays are there (sched_prepare_dispatcher) */
    bool started;
    isn_gpu_device *device;
    sched_landing landings[SCHED_LANDINGS];
    uint32_t next_landing;
    sched_flight flights[SCHED_MAX_IN_FLIGHT];
    uint32_t in_flight, oldest; /* flights[oldest], the next ones in a ring */
    uint64_t device_free_ns;    /* when the device answered its last batch */
    _Atomic uint64_t rest_until_ns; /* after a failure */
    isn_job **batch;
    /* Under the lock, while it waits on gpu_wake: when it wakes by itself (its batch's linger end or
     * latest start), or 0 when it holds no batch and needs a job to wake it. */
    uint64_t sleeps_until_ns;
    bool sleeping;
    uint64_t phase_from_ns; /* when the dispatcher's current phase began (sched_dispatcher_phase) */
} sched_dispatcher;

/* What the arrival check weighs (before a request is analysed), from each device's wait: how soon a
 * typical job could start and be done on each (the CPU's infinite while it does not count), and the CPU
 * time each request still waiting to be prepared will add to the CPU's queue. */
typedef struct {
    double cpu_start, cpu_done, gpu_start, gpu_done;
    double per_pending;
    double preparing; /* the preparations' wait counted in the four above */
} sched_arrival_view;

/* What the arrival check found, refusals by the bound that refused them (counted apart, so that an
 * operator can tell a node behind on its preparations from one whose devices' predicted waits refuse). */
typedef enum {
    SCHED_ARRIVAL_ADMITS,
    SCHED_ARRIVAL_LATE,      /* past its admission point when looked at, before any wait */
    SCHED_ARRIVAL_PREPARING, /* the preparations ahead alone reach its admission point */
    SCHED_ARRIVAL_WAIT,      /* no device's predicted start and finish fit what is left */
} sched_arrival_verdict;

/* The arrival check on a view (submit.c): whether a job with remaining_ns to its admission point would be
 * done in time, with `pending` requests waiting to be prepared ahead of it and the preparations' wait
 * now, and if not, which bound refuses it. It only gets harder to pass as pending and preparing_now
 * grow, which lets the quick check refuse on the view alone. For a SCHED_ARRIVAL_WAIT refusal, *miss (may
 * be NULL) gets the sooner device's predicted finish and the bound it had to meet. */
typedef struct {
    double done_ns, bound_ns;
} sched_arrival_miss;
sched_arrival_verdict sched_arrival_judge_view(const sched_arrival_view *view, double remaining_ns, uint32_t pending,
                                               double preparing_now, double credit_room_ns, sched_arrival_miss *miss);

static inline bool sched_arrival_admits_view(const sched_arrival_view *view, double remaining_ns, uint32_t pending,
                                             double preparing_now, double credit_room_ns) {
    return sched_arrival_judge_view(view, remaining_ns, pending, preparing_now, credit_room_ns, NULL) ==
           SCHED_ARRIVAL_ADMITS;
}

struct isn_scheduler {
    isn_scheduler_config config;
    /* The loops read config at every request; the lock after it is written at every admission. */
    char config_apart[64];
    pthread_mutex_t lock; /* the queues, gpu_inflight_ns, batch_cost, stopping */
    pthread_cond_t gpu_wake, ready_changed; /* under the lock */
    /* Idle workers sleep on semaphores of their own (idle_workers.c). The loops wake one for every
     * request they queue for preparation; under the scheduler's lock, and then under one condition
     * variable's, they waited whenever its holder was off its core. */
    sched_idle_set idle;
    isn_edf_queue queues[ISN_QUEUES];
    /* The preparation queues have a lock of their own: every request passes through them once
     * unprepared, and under the scheduler's lock the loops and the workers preparing queued behind
     * the admissions, the dispatchers and each other. */
    pthread_mutex_t prepare_lock; /* prepare_queue, large_prepare_queue, prepare_codel, prepare_closed */
    isn_edf_queue prepare_queue; /* submitted unprepared */
    isn_edf_queue large_prepare_queue; /* the same, for large requests (isn_job.prepare_on_worker) */
    bool prepare_closed;               /* stopping: nothing more is queued for preparation */
    /* Normal requests queued for preparation and not yet in prepare_queue, linked by
     * isn_job.staged_next, newest first; SCHED_STAGED_CLOSED once stopping. Their submitters (the
     * event loops) link them in without prepare_lock: a worker preempted while holding it stalled
     * every loop for milliseconds, and every request in their sockets, refusals included, waited with
     * them. Whoever holds the lock next moves them into prepare_queue (sched_unstage_locked) first. */
    _Atomic(isn_job *) prepare_staged;
    /* Normal requests staged or in prepare_queue: what queue_capacity bounds. A request's room is
     * reserved here before it is staged, so the next unstage always finds room in the queue; large
     * requests have a queue and a bound of their own, and cannot take the normal ones' room. */
    atomic_uint normal_queued;
    atomic_uint large_preparing;       /* workers preparing a large one now (SCHED_LARGE_PREPARERS at most) */
    atomic_uint prepare_pending;       /* both queues' sizes and the staged list's, read without a lock */
    atomic_uint large_pending;         /* the large queue's size, read without a lock */
    double prepare_ns;           /* a preparation's time lately (moving average), under the lock */
    _Atomic double prepare_ns_published; /* prepare_ns, for the arrival check made without the lock */
    /* When the normal preparation queue last moved: a request taken from it, or one let into it empty. */
    _Atomic uint64_t prepare_moved_ns;
    /* When the node last resumed from a stall, as far as the loops can tell (isn_scheduler_note_resume). */
    _Atomic uint64_t resumed_ns;
    bool stopping;
    /* Landed batches with chunks not yet claimed (opened, and not yet closed by the claimer of their last
     * chunk): a worker looks at the landings (sched_help_landings) only while this is not 0. */
    atomic_uint landings_open;
    /* Of the jobs admitted lately, the share the CPU could take (moving average, under the lock):
     * the arrival check counts the CPU's wait only while most traffic may use it. */
    double cpu_placeable_share;
    /* A prepared job's predicted CPU time (scaled), moving average over every job admission judged,
     * refused or not (under the lock). The CPU's measured time per job is of the jobs that ran: under
     * overload routing refuses the costly ones, so that measure falls below what arrivals cost, and the
     * arrival check, judging a typical arrival by it, let in requests routing then refused. */
    double arrival_cost_ns;
    /* Of the jobs admitted lately, the share queued where the CPU may run them (moving average, under
     * the lock): what the requests still waiting to be prepared will add to the CPU's wait. */
    double cpu_bound_share;
    double gpu_inflight_ns; /* predicted GPU time of batches running now */
    uint32_t gpu_inflight_jobs; /* their jobs */
    /* Jobs the dispatchers took from the queues into the batches they are forming, and their predicted
     * GPU time: out of the queues and not yet in flight (a formed batch waits there while the device's
     * flights are full), but ahead of every job queued now. */
    double gpu_held_ns;
    uint32_t gpu_held_jobs;
    isn_batch_cost batch_cost; /* GPU batches: fixed part and part per job, learned */
    double batch_ape_sum;      /* |predicted - measured| / measured over batches after the first few */
    uint64_t batch_ape_count;
    uint32_t ready, failed;
    atomic_bool abandon;
    atomic_llong cpu_committed_ns; /* predicted CPU time of jobs in deques or running */
    atomic_uint deque_jobs;        /* jobs in the workers' deques */
    /* the arrival view (sched_arrival_view) an admission decision published last (publish_waits), for
     * isn_scheduler_may_admit_quick: on lines of their own, which no counter beside them moves */
    char published_apart[64];
    _Atomic double arrival_cpu_done_ns, arrival_cpu_start_ns, arrival_gpu_done_ns, arrival_gpu_start_ns;
    _Atomic double arrival_preparing_ns;
    _Atomic double arrival_per_pending_ns;
    _Atomic double published_wait_ns[ISN_DEVICE_KINDS]; /* each device's wait then */
    _Atomic uint64_t waits_published_at_ns; /* when they were published */
    char published_apart_after[64];
    atomic_uint running;

    /* Every admission reads the model to predict; only the spaced learners write it. */
    pthread_rwlock_t model_lock;
    isn_cost_model model;
    /* Measured over predicted service, per device, as moving sums: the model predicts a query's cost
     * on an idle machine; this says how much slower the node runs now (other processes, memory
     * bandwidth, the model's bias). Admission scales its waits and services by it. */
    double actual_ewma[ISN_DEVICE_KINDS], predicted_ewma[ISN_DEVICE_KINDS];
    /* Their clamped ratio, published after each update: admission reads it on every job, without
     * the model's lock. */
    _Atomic double scale[ISN_DEVICE_KINDS];
    _Atomic uint64_t learned_ns[ISN_DEVICE_KINDS]; /* when each scale was last refreshed */
    /* When each device's model may learn again (sched_learn_claim); UINT64_MAX while a thread has the turn. */
    _Atomic uint64_t learn_after_ns[ISN_DEVICE_KINDS];
    /* Under the lock: each device's measured time per job, and the preparation queue's CoDel state. */
    isn_service_meter meter[ISN_DEVICE_KINDS];
    isn_codel prepare_codel; /* under prepare_lock */
    isn_departure_meter prepare_departures; /* the normal queue's, under prepare_lock */
    _Atomic double prepare_departure_ns;    /* its per_job_ns, read without the lock */
    atomic_bool prepare_standing; /* prepare_codel.standing, read without the lock */
    atomic_bool prepare_bounding; /* prepare_codel.bounding, read without the lock */

    char cost_model_state[4096]; /* config.cost_model_state's copy */
    isn_gpu_device *own_gpus;    /* the devices made from config.gpu_backend or config.simulated_gpus */
    uint32_t num_own_gpus;
    bool own_gpus_real;
    bool serving; /* started: the model is worth saving at stop */

    sched_worker *workers;
    sched_dispatcher *dispatchers;
    uint32_t num_dispatchers;
    uint64_t start_ns;

    _Atomic uint64_t submitted, completed, shed_full, degraded, dropped_dead, partial, abandoned;
    /* counted by every loop at each refusal: striped, so the loops do not pass one line between them */
    isn_striped_counter shed_overload;
    /* arrival refusals by sched_arrival_verdict; for the SCHED_ARRIVAL_WAIT ones, their predicted finishes
     * and the bounds they had to meet, summed (how far past its bound the prediction was). Striped as
     * shed_overload is: under overload every loop adds to them at nearly every request. */
    isn_striped_counter shed_arrival[SCHED_ARRIVAL_WAIT + 1], arrival_refused_done_ns, arrival_refused_bound_ns;
    _Atomic uint64_t routed[3], ran_on[ISN_DEVICE_KINDS];
    _Atomic uint64_t stolen_deque, stolen_gpu, undecided_cpu, undecided_gpu;
    _Atomic uint32_t spares_resting, standby_resting;
    _Atomic uint64_t spare_rests;
    _Atomic uint64_t prepared, refused_prepare, shed_unprepared, shed_unprepared_late, shed_arrival_codel, shed_routed;
    _Atomic uint64_t stalls_seen; /* isn_scheduler_note_resume's stalls */
    _Atomic uint64_t prepare_waits, arrival_wait_ns, prepare_wait_ns;
    _Atomic uint64_t batches, batch_jobs, batch_flush[ISN_FLUSH_REASONS], gpu_failures, gpu_reruns,
        gpu_answers_helped;
    _Atomic uint64_t dispatcher_ns[ISN_DISPATCHER_PHASES];
    _Atomic uint64_t wait_ns[ISN_DEVICE_KINDS], wait_count[ISN_DEVICE_KINDS], busy_ns[ISN_DEVICE_KINDS];
};

void sched_timespec_at(uint64_t ns, struct timespec *ts);
void sched_predict(isn_scheduler *s, isn_job *job);
/* The model learns cost_ns (what the job itself cost); the scale compares wall_ns (what it took,
 * with whatever else ran on the machine meanwhile) with predicted_ns (what admission assumed). */
void sched_learn(isn_scheduler *s, isn_device_kind device, const isn_job_features *features, double cost_ns,
                 double wall_ns, double predicted_ns);
/* Whether the calling thread may teach the device's model from a job it finished at now_ns; true
 * claims the turn, which the caller must end with sched_learn_spaced. */
bool sched_learn_claim(isn_scheduler *s, isn_device_kind device, uint64_t now_ns);
/* sched_learn, then the device's next turn set so that its learning takes at most
 * 1/SCHED_LEARN_SPACING of one thread's time, over all threads together: one update (a least-squares
 * step over every feature pair) costs microseconds under the model's lock, which every admission's
 * prediction takes too. Spaced per thread, a dozen workers held that lock a third of the time and
 * predictions queued behind them. */
void sched_learn_spaced(isn_scheduler *s, isn_device_kind device, const isn_job_features *features, double cost_ns,
                        double wall_ns, double predicted_ns);
/* Measured over predicted service lately (1 before any), clamped to [0.5, 8], as it stands at now_ns (the
 * caller's clock reading: a loop checks every request, and each reading costs it). */
double sched_scale(isn_scheduler *s, isn_device_kind device, uint64_t now_ns);
/* Wakes one idle worker, or all; with or without the lock held (sched_idle_wake). */
void sched_wake_idle_workers(isn_scheduler *s, bool all);
/* Under prepare_lock: the staged requests (prepare_staged) into prepare_queue, in their order of
 * arrival, leaving `leave` in their place (NULL; SCHED_STAGED_CLOSED when stopping, in the same atomic
 * step, so that a request staged meanwhile is either taken here or refused as stopping). Their room
 * was reserved when they were staged (normal_queued), so none is left over. */
void sched_unstage_locked(isn_scheduler *s, isn_job *leave);
/* Sets the outcome and calls the user's complete(). */
void sched_finish(isn_scheduler *s, isn_job *job, isn_job_outcome outcome);
/* The same, from a worker helping with a landed GPU batch: complete() gets its worker state. */
void sched_finish_on(isn_scheduler *s, isn_job *job, isn_job_outcome outcome, void *worker_state);
/* gpu_landing.c. The landings' arrays (slots jobs each): 0, or -1 when out of memory. */
int sched_landings_init(sched_dispatcher *d, size_t slots);
void sched_landings_free(sched_dispatcher *d);
/* The dispatcher, unlocked: opens the n jobs of a batch that ran to the workers (waking idle ones), to
 * complete the rest itself later (sched_complete_own_landings); completes them at once without workers. */
void sched_open_landing(isn_scheduler *s, sched_dispatcher *d, isn_job *const *jobs, uint32_t n);
/* The dispatcher, unlocked: completes what nobody claimed of its landings. */
void sched_complete_own_landings(isn_scheduler *s, sched_dispatcher *d);
/* Whether the dispatcher's landings have chunks nobody claimed. */
bool sched_own_landings_waiting(sched_dispatcher *d);
/* The dispatcher, stopping, unlocked: completes its landings and waits for its helpers' chunks. */
void sched_close_own_landings(isn_scheduler *s, sched_dispatcher *d);
/* A worker: completes chunks of landed batches while any are unclaimed. True when it completed some. */
bool sched_help_landings(isn_scheduler *s, void *worker_state);
/* Whether a landed batch has chunks no one has claimed (a worker about to wait looks). */
bool sched_landings_waiting(isn_scheduler *s);
uint32_t sched_available_gpus(isn_scheduler *s, uint64_t now);
/* gpu_dispatch.c: dispatcher i's batch, flights and landings, before any worker runs (the workers help
 * with its landings from their first look); then, once prepared, its thread, which reports ready like a
 * worker. Each 0 or -1. */
int sched_prepare_dispatcher(isn_scheduler *s, uint32_t i);
int sched_spawn_dispatcher(isn_scheduler *s, uint32_t i);

/* ------------------------------------------------------------------ what scheduler.c, submit.c and
 * cpu_workers.c share (each said where it is defined) */

/* The CPU workers taking jobs now: every worker but the spares and standby workers resting. What
 * admission divides the CPU's work by (inline: the loops' admission at HEADERS reads it per request). */
static inline uint32_t sched_cpu_servers(isn_scheduler *s) {
    uint32_t resting = atomic_load_explicit(&s->spares_resting, memory_order_relaxed) +
                       atomic_load_explicit(&s->standby_resting, memory_order_relaxed);
    return s->config.workers > resting ? s->config.workers - resting : 1;
}
/* scheduler.c: under the lock, a device's scale */
double sched_scale_locked(isn_scheduler *s, isn_device_kind device);
/* submit.c: the GPU's and the preparations' backlogs, a job's admit-by time, and admission after a worker
 * prepared a job (prepare_ns: how long that took) */
double sched_gpu_ahead_ns(const isn_scheduler *s, bool with_undecided);
uint32_t sched_normal_pending(isn_scheduler *s);
double sched_preparing_ns_quick(isn_scheduler *s, uint64_t now);
/* How long the normal preparation queue has gone without moving while requests wait in it (0: none waits). */
double sched_prepare_still_ns(isn_scheduler *s, uint64_t now);
double sched_admit_by_ns(const isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns);
double sched_admit_by_at_ns(const isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, uint64_t now,
                            bool reader_keeps_up);
isn_submit_result sched_admit_prepared(isn_scheduler *s, isn_job *job, double prepare_ns);
/* cpu_workers.c: a CPU worker's thread */
void *sched_worker_main(void *arg);

#endif
