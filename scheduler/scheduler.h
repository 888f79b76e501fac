/* ISN scheduler: deadline-ordered queues, CPU workers with work-stealing deques, a batching
 * dispatcher per GPU device, a learned cost model, routing and admission control.
 * The one public header of scheduler/ (design: ../shared/DESIGN.md section 7); the queues, the cost
 * model, the devices' adapters and the simulator are in scheduler_internal.h.
 *
 * The scheduler runs jobs; it does not know what a query is beyond its cost. Its user supplies
 * callbacks that prepare a job (analyse the request) and run it on a CPU worker, and the GPU it
 * should use (the first-stage backend of gpu/gpu.h, or simulated ones). Every job submitted is
 * completed exactly once through complete(), from a worker or dispatcher thread, except a job
 * refused at submit, which the caller answers itself. */
#ifndef ISN_SCHEDULER_H
#define ISN_SCHEDULER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"
#include "ranking/ranking.h"

/* ------------------------------------------------------------------ jobs */

typedef enum { ISN_DEVICE_CPU = 0, ISN_DEVICE_GPU = 1, ISN_DEVICE_KINDS = 2 } isn_device_kind;

/* Real GPU devices one scheduler drives at most (one dispatcher thread each). */
#define ISN_SCHED_MAX_GPUS 16

/* What is known about a query before it runs: the cost model's input. The scheduler takes it from
 * the job's query (isn_job.query), the index's lexicon and block maxima, and ranking/'s threshold
 * probe; a submitter without a query fills it itself. */
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
    /* The algorithm that will run: AUTO resolved (isn_algo_resolve). */
    isn_algo algo_resolved;
    /* The query's identity (its term ids and counts, k, mode, algorithm; 0 = none): the model
     * remembers what such a query took last, because served traffic repeats. */
    uint64_t signature;
    /* Term ids (the rarest first, at most ISN_JOB_KEYS): the model learns a correction per term,
     * for what the numbers above miss (how its documents co-occur with the other terms'). */
    uint32_t num_keys;
    uint32_t keys[ISN_JOB_KEYS];
} isn_job_features;

/* The first-stage threshold a job may start pruning from: the cost model's threshold probe, a real
 * document's score under the index's own statistics and so a lower bound of the k-th score, for an OR
 * query of at most the probe's k scored with those statistics (not an aggregator's global ones, not a
 * second stage's n1 beyond the probe's k); 0 when there is none. The CPU's search and the GPU's
 * request take it from here alike. */
double isn_job_seed_threshold(const isn_job_features *features, isn_mode mode, uint32_t k, bool global_stats);

typedef enum {
    ISN_JOB_RAN,               /* the callback (CPU) or the device (GPU) produced its answer */
    ISN_JOB_DEADLINE_EXCEEDED, /* dequeued after its deadline: not run */
    ISN_JOB_ABANDONED,         /* the scheduler stopped or was told to abandon queued work: not run */
    ISN_JOB_REFUSED,           /* prepared on a worker, then refused: see isn_job.refusal */
} isn_job_outcome;

typedef enum { ISN_QUEUE_CPU = 0, ISN_QUEUE_GPU = 1, ISN_QUEUE_UNDECIDED = 2, ISN_QUEUES = 3 } isn_queue_id;

/* Where a job may run. CPU: the GPU cannot answer it as asked (a second stage, global statistics).
 * GPU: routed to a GPU whenever one is available and never stolen by the CPU workers (tests and
 * benchmarks that must exercise the device); a failed batch still re-runs on the CPU. */
typedef enum { ISN_PLACE_ANY = 0, ISN_PLACE_CPU = 1, ISN_PLACE_GPU = 2 } isn_placement;

typedef struct isn_job isn_job;
struct isn_job {
    /* set by the submitter (or by config.prepare) */
    isn_placement placement;
    /* A large request: prepared on a worker even when the submitting thread prepares the others, so
     * that its analysis does not hold up the submitter (the server's event loop), and by one worker
     * at a time, after the normal requests, so that its senders cannot take every worker. */
    bool prepare_on_worker;
    uint64_t received_ns; /* start of its time budget */
    /* The submitter's clock reading as it submits (0: the scheduler reads the clock): a server loop has
     * just read it, and the loops' time is what overload is answered with. */
    uint64_t submitted_ns;
    uint64_t deadline_ns; /* absolute, CLOCK_MONOTONIC; 0 = none */
    /* Its reader (a server loop) was keeping up with its sockets when it read it: an age the job gained
     * while the whole node stood still is then not a queue's, and counts against it only in part
     * (isn_scheduler_may_admit). */
    bool reader_keeps_up;
    /* The query, analysed: the scheduler takes the features from it and config.index (with the
     * threshold probe only where the CPU is in the running). NULL: features are the submitter's. */
    const isn_query *query;
    /* What a real GPU first stage (config.gpu_backends) answers this job from, set by the submitter
     * when it prepares the job: its query, mode, k and room for k hits, which the submitter keeps
     * until complete(). The scheduler sets the threshold the device may prune from
     * (isn_job_seed_threshold), and the device's answer is in it when complete() sees the job ran on
     * the GPU (device ISN_DEVICE_GPU, outcome ISN_JOB_RAN). NULL: no real GPU may take the job (a
     * simulated one answers without hits). */
    isn_gpu_request *gpu_request;
    /* The index the query was analysed against (isnd's index generation); NULL: config.index. */
    const isn_index *index;
    uint32_t k;
    isn_mode mode;
    isn_algo algo;
    isn_job_features features;
    /* What its run does after the first stage (a second stage, on whichever device that picks), as the
     * submitter expects it: added to the job's predicted service on every device, so that admission
     * and routing count it (0: none). */
    double second_stage_ns;
    /* Set by run_cpu: the thread's CPU time in that second stage, which the cost model's sample leaves
     * out (the model learns the first stage from the query's features; the scale sees the whole run). */
    uint64_t second_stage_cpu_ns;
    void *user;
    /* set by the scheduler */
    isn_queue_id queue;
    isn_job *staged_next; /* queued for preparation without the queue's lock (isn_scheduler.prepare_staged) */
    bool degraded;            /* admitted under overload with a reduced budget (degrade policy) */
    double run_budget_ns;     /* degraded: the most it may run, so that it ends by its admission point */
    double predicted_ns[ISN_DEVICE_KINDS];
    bool predicted; /* predicted_ns is the model's for these features: admission predicts only if not */
    double preparation_ns; /* how long it waited for and took in preparation (see route_input_given) */
    uint64_t enqueued_ns, started_ns, finished_ns;
    isn_job_outcome outcome;
    /* ISN_JOB_REFUSED: 0 when prepare() refused it (the callback said why), else the
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

/* Simulated GPU (config.simulated_gpus; timing only, its jobs get no hits): sleeps for launch_ns +
 * per_posting_ns * postings + per_query_ns * jobs per batch, and fails a batch with probability
 * failure_rate. Numbers from DESIGN.md section 6 (H200): launch +
 * wait ~8-9 us; fused decode + BM25 at 12-74 G postings/s. */
typedef struct {
    double launch_ns;
    double per_posting_ns;
    double per_query_ns;
    double failure_rate; /* 0..1 */
    double jitter_ns;    /* each batch runs up to this much longer (uniformly): a host's late wake-ups */
    uint64_t seed;
} isn_gpu_sim_config;

void isn_gpu_sim_config_default(isn_gpu_sim_config *config);


/* ------------------------------------------------------------------ the scheduler */

/* ------------------------------------------------------------------ batch forming */

typedef enum {
    ISN_FLUSH_FULL,     /* max_batch jobs */
    ISN_FLUSH_MEMORY,   /* the next job would pass the memory budget */
    ISN_FLUSH_DEADLINE, /* waiting longer would endanger the earliest deadline in the batch */
    ISN_FLUSH_LINGER,   /* nothing more came within the longest wait allowed */
    ISN_FLUSH_REASONS
} isn_flush_reason;

const char *isn_flush_reason_name(isn_flush_reason reason);

/* When a GPU batch goes: full, at its memory budget, when waiting longer would endanger its earliest
 * deadline (minus safety_ns), or after linger_ns. */
typedef struct {
    uint32_t max_batch;
    uint64_t memory_budget;
    uint64_t linger_ns;   /* longest wait for more jobs after the first */
    uint64_t safety_ns;   /* slack kept before the earliest deadline */
    double launch_ns;     /* fixed cost of one batch */
} isn_batch_policy;

typedef enum { ISN_OVERLOAD_SHED, ISN_OVERLOAD_DEGRADE } isn_overload_policy;

/* The cost model (scheduler_internal.h): per device, log service time learned online. */
typedef struct isn_cost_model isn_cost_model;
/* A device the scheduler dispatches batches to (scheduler_internal.h). */
typedef struct isn_gpu_device isn_gpu_device;

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
    /* Workers of SCHED_IDLE instead (worker_nice then does not matter): a loop or dispatcher woken on a
     * worker's core takes it at once, however long the worker has run. */
    bool worker_idle_policy;
    /* The workers' scheduler slice (base.h isn_set_this_thread_slice; 0 = the kernel's): a loop that used
     * up its own short slice and was preempted by a worker runs again when this one ends. */
    uint64_t worker_slice_ns;
    /* The last spare_workers of `workers` work the cores of threads that are often idle (the event loops):
     * a spare takes work only while idle_threads(user) counts at least its rank (1 for the first spare) of
     * those threads idle, else it holds nothing and looks again every SCHED_SPARE_RECHECK_NS. So the cores
     * idle loops leave are worked, and loops that get busy have their cores back without waiting behind a
     * worker. Admission counts the spares working at the time. Fewer than `workers`; 0: none. Any thread
     * may call idle_threads, often: a few loads, no lock. */
    uint32_t spare_workers;
    /* Spares of SCHED_IDLE: a loop woken on a spare's core takes it at once. */
    bool spare_idle_policy;
    /* Where the threads run (isnd's server.pin_loops): the workers that are not spares, and the GPU
     * dispatchers, on the num_worker_cpus CPUs of worker_cpus; spare k (from 1) on spare_cpus[(k - 1) %
     * num_spare_cpus] alone, the CPU of the loop whose idle time it works. 0 CPUs: wherever the thread that
     * starts them may run. The arrays are read when the threads start: they outlive the scheduler's start. */
    const int *worker_cpus, *spare_cpus;
    uint32_t num_worker_cpus, num_spare_cpus;
    uint32_t (*idle_threads)(void *idle_threads_user);
    void *idle_threads_user;
    /* With spare_cpus (below), whether thread i of those idle_threads counts (the loop on spare_cpus[i]) is
     * idle now: spare k then works while the loop whose CPU it shares is idle, not while k loops are. NULL:
     * the count rule for pinned spares too. */
    bool (*thread_idle)(void *idle_threads_user, uint32_t thread);
    /* The last standby_workers of `workers` (after the spares) take work only while standby_wanted(user)
     * says so (isnd: while no GPU holds the index: one uploading, failed or never opened), else they hold
     * nothing and look again every SCHED_STANDBY_RECHECK_NS: a node sized beside a GPU has the CPU-only
     * node's workers when the GPU does not serve. Admission counts those working. 0: none. */
    uint32_t standby_workers;
    bool (*standby_wanted)(void *user);
    isn_overload_policy overload;
    /* In a standing backlog of the preparation queue, a request that waited past CoDel's target is
     * refused unprepared (true, CoDel's dequeue drop) or prepared and admitted as any other (false:
     * only the arrival check bounds the queue; a request past its admission point is refused either way). */
    bool codel_drops_waited;
    isn_batch_policy batch;
    uint64_t gpu_rest_ns;    /* a failed device is left alone this long */
    /* The cost model's starting point: loaded from cost_model_state when that file exists (and saved
     * there at stop), else model (NULL: the fitted formula). A GPU side is seeded from its device's
     * known latency (the simulator's, or the backend's starting numbers) unless loaded. */
    const char *cost_model_state; /* "" or NULL: none; copied */
    const isn_cost_model *model;
    /* The index the jobs' queries are in: the scheduler takes their features from it. */
    const isn_index *index;
    /* CPU side. worker_init runs on each worker thread before it takes jobs (NULL state = failure). */
    void *(*worker_init)(void *user, uint32_t worker);
    void (*worker_free)(void *user, void *worker_state);
    void (*run_cpu)(void *user, isn_job *job, const isn_cpu_context *context);
    /* When set, every submitted job is prepared first: the callback analyses the request (sets
     * job->query, k, mode, algo and placement), then the scheduler takes its features, admits and
     * routes it. false = refused (the callback records why). Where it runs is the scheduler's call:
     * on a worker (earliest deadline first, ahead of other CPU work), or on the submitting thread,
     * with submitter_state as its worker state, when there are fewer than analysis_min_workers
     * workers and no GPU (the workers are then the bottleneck and the submitter is not). */
    bool (*prepare)(void *user, isn_job *job, void *worker_state);
    uint32_t analysis_min_workers;
    void *submitter_state;
    /* Optional: a job is about to run (on a CPU worker, or taken into a GPU batch). False: it was
     * answered meanwhile (its deadline passed while it waited), and it ends ISN_JOB_DEADLINE_EXCEEDED
     * without running. Called again for a job a failed GPU batch hands back to the CPU. */
    bool (*start)(void *user, isn_job *job);
    /* Every job's end, from the thread that ended it: a CPU worker, or the dispatcher of the GPU it
     * ran on (job->worker: the device; its answer in job->gpu_request, none from a simulated one), or
     * an idle worker helping that dispatcher complete a landed batch: then worker_state is that
     * worker's (from worker_init), and NULL everywhere else. */
    void (*complete)(void *user, isn_job *job, void *worker_state);
    void *user;
    /* GPUs, one kind at most. The real first stage, one backend per device (each holds the whole
     * partition; the backends stay the caller's: close them after isn_scheduler_stop), one dispatcher
     * each, up to gpu_backend_max_batch jobs per launch: */
    isn_gpu_backend *gpu_backends[ISN_SCHED_MAX_GPUS];
    uint32_t num_gpu_backends;
    uint32_t gpu_backend_max_batch;
    /* A device whose backend is NULL here starts without one (its index still uploading): it takes no
     * batch until isn_scheduler_gpu_replace gives it one, then up to this many at once. */
    uint32_t gpu_backend_streams;
    /* Or simulated devices (batch.max_batch and batch.memory_budget each): */
    uint32_t simulated_gpus;
    isn_gpu_sim_config simulated;
    /* Or devices the caller made (tests; scheduler_internal.h). */
    isn_gpu_device *gpus;
    uint32_t num_gpus;
} isn_scheduler_config;

void isn_scheduler_config_default(isn_scheduler_config *config);

/* The CPU workers a node starts when not told (search.workers = 0), on `cpus` usable CPUs beside `loops`
 * event loops and `gpus` GPU devices. Without a GPU, one per CPU: the workers are the node's capacity, and
 * a loop that waits for a core costs little next to them. With one, the CPUs less the loops and one per
 * device (its dispatcher waits on the device without yielding): the workers then only analyse queries,
 * pack the device's answers and take the overflow, and a worker per CPU keeps every core busy, so that a
 * loop woken by a request waits for a core behind them and refusals leave it milliseconds late. At least
 * one. */
uint32_t isn_scheduler_default_workers(uint32_t cpus, uint32_t loops, uint32_t gpus);

/* The event loops a node starts when not told (server.loops = 0), on `cpus` usable CPUs. Without a GPU, one
 * per four CPUs from 8 on, else one: the workers are the capacity and a loop has time to spare. With
 * `gpus` devices, half the CPUs their dispatchers leave (the workers, isn_scheduler_default_workers, take
 * the rest): the devices answer several times the CPUs' rate, so past capacity the loops (HTTP/2,
 * decoding, replies, and a refusal for every excess request) are as much the bottleneck as the workers
 * that analyse queries and pack the devices' answers, and a refusal waits for a loop's iteration. At
 * least one. */
uint32_t isn_scheduler_default_loops(uint32_t cpus, uint32_t gpus);

typedef struct isn_scheduler isn_scheduler;

/* Makes the GPU devices, starts the threads (and runs worker_init on each). NULL with err. */
isn_scheduler *isn_scheduler_start(const isn_scheduler_config *config, char *err, size_t err_len);

typedef enum {
    ISN_SUBMIT_QUEUED,
    ISN_SUBMIT_SHED_FULL,     /* its queue is at capacity */
    ISN_SUBMIT_SHED_OVERLOAD, /* no device can finish it in time (shed policy) */
    ISN_SUBMIT_STOPPED,       /* the scheduler is stopping */
    ISN_SUBMIT_SHED_LATE,     /* no device could even start it within its admission budget */
    ISN_SUBMIT_REFUSED,       /* prepare() refused it on the submitting thread (it said why) */
} isn_submit_result;

/* Any thread while jobs are prepared on the workers; one submitting thread at a time when they are
 * prepared on the submitting thread (isn_scheduler_prepares_on_submit: config.submitter_state is
 * that thread's). On ISN_SUBMIT_QUEUED the job belongs to the scheduler until complete(); otherwise
 * the caller answers it. A job whose budget no device could even start in is refused before any
 * analysis, so that refusals stay cheap under overload. With config.prepare the job is prepared
 * (see there) before it is admitted and routed; a refusal after preparing on a worker completes it
 * ISN_JOB_REFUSED. */
isn_submit_result isn_scheduler_submit(isn_scheduler *scheduler, isn_job *job);
/* From now on queued jobs complete ISN_JOB_ABANDONED instead of running. */
void isn_scheduler_abandon_queued(isn_scheduler *scheduler);
/* Stops and joins the threads (queued jobs complete ISN_JOB_ABANDONED), saves the cost model to
 * config.cost_model_state when set, and frees the devices it made. */
void isn_scheduler_stop(isn_scheduler *scheduler);

/* A GPU dispatcher's time (isn_scheduler_stats.dispatcher_seconds). */
typedef enum {
    ISN_DISPATCHER_FORMING,   /* taking jobs into a batch, the scheduler's lock held or awaited */
    ISN_DISPATCHER_LAUNCHING, /* the device's submit: staging the batch's queries, launching */
    ISN_DISPATCHER_LANDING,   /* the device's complete: waiting for it, copying answers out */
    ISN_DISPATCHER_ANSWERING, /* its share of completing the landed answers, and what the batch taught */
    ISN_DISPATCHER_SLEEPING,  /* nothing to send, or a batch lingering for more */
    ISN_DISPATCHER_PHASES
} isn_dispatcher_phase;

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
    uint64_t gpu_answers_helped; /* GPU jobs completed by a worker helping their dispatcher (gpu_landing.c) */
    /* Where the GPU dispatchers' time went, seconds summed over them: a dispatcher whose time is all
     * forming, launching, landing and answering is what bounds the GPU's rate, not the device. */
    double dispatcher_seconds[ISN_DISPATCHER_PHASES];
    uint32_t queue_depth[ISN_QUEUES];
    uint32_t deque_depth;    /* all workers */
    uint32_t prepare_depth;  /* submitted unprepared, waiting for a worker */
    uint64_t prepared, refused_prepare; /* prepared by workers; refused by prepare() */
    uint32_t spare_workers, spares_resting; /* config.spare_workers; of them, those resting now */
    uint32_t standby_workers, standby_resting; /* config.standby_workers; of them, those resting now */
    uint64_t spare_rests;                   /* times a spare found too few idle loops and stopped taking work */
    uint64_t shed_unprepared; /* of shed_overload: refused from the preparation queue, never analysed */
    uint64_t shed_unprepared_late; /* of those: past their admission point (the rest: CoDel) */
    uint64_t shed_arrival_codel;   /* of shed_overload: refused on arrival, the preparations ahead past CoDel's target */
    /* Of shed_overload: refused on arrival by the arrival check's bounds: already past the admission
     * point, the preparations ahead reaching it, or no device's predicted wait fitting before it; for
     * the last, the predicted finishes and the bounds they missed, summed. */
    uint64_t shed_arrival_late, shed_arrival_preparing, shed_arrival_wait;
    double arrival_refused_done_seconds_sum, arrival_refused_bound_seconds_sum;
    uint64_t shed_routed;          /* of shed_overload: refused by routing once prepared (no device in time) */
    /* Stalls the loops saw (isn_scheduler_note_resume); the preparation queue's stillness counts from
     * the latest one's end. */
    uint64_t stalls_seen;
    /* Requests taken from the preparation queue, with the time they had spent from arrival (the
     * loop's arrival floor) to that queue and in it, summed: where a request's budget went before a
     * worker looked at it. */
    uint64_t prepare_waits;
    double arrival_wait_seconds_sum, prepare_wait_seconds_sum;
    /* What admission now believes of the preparation queue: the wait a request queued now would have
     * before a worker takes it, how long the queue has gone without moving while requests wait in it, and
     * its measured time between departures while it held a backlog. */
    double prepare_predicted_wait_seconds, prepare_still_seconds, prepare_departure_seconds;
    double measured_job_seconds[ISN_DEVICE_KINDS]; /* each device's measured time per job (0: none yet) */
    bool prepare_backlog_standing; /* the preparation queue holds a standing backlog (CoDel) */
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
/* Whether a request that reached the node at received_ns, due at deadline_ns (0: none), could still be
 * admitted now on some device: false means it would be shed whatever it asks, so its caller may refuse
 * it before reading or analysing it (counted as shed_overload). reader_keeps_up: as isn_job's. Any
 * thread.
 *
 * A job is admitted only if it is predicted done by its admission point: received plus
 * config.admit_fraction of its budget. For a job whose reader keeps up, the point is also at least now
 * plus that share of what is left before its early-stop point. A job that waited while the whole node
 * stood still (its VM's host took the CPUs, the process was stopped) is old when it is read, with the
 * queues empty behind it: on the first point alone, every request such a stall held was refused as
 * overload, though the node could answer each in time. Where the reader is saturated, age is what
 * overload looks like, and a moved point admitted requests too late for their replies to get out in
 * time. */
bool isn_scheduler_may_admit(isn_scheduler *scheduler, uint64_t received_ns, uint64_t deadline_ns, bool reader_keeps_up);
/* The same without the scheduler's lock, for a front end that checks every request as it arrives:
 * against the soonest start the last admission decision saw (stale by at most what changed since;
 * the full check follows at submit). */
bool isn_scheduler_may_admit_quick(isn_scheduler *scheduler, uint64_t received_ns, uint64_t deadline_ns,
                                   bool reader_keeps_up);
/* A request unread this long by a loop that keeps up, or a loop's poll blocking this long past its
 * timeout, tells that the node (or that loop) was stopped: a stall. Shorter waits are a loop's wait for
 * a core behind busy workers, and leave a 50 ms request its admission room. */
#define ISN_SCHEDULER_STALL_SEEN_NS 15000000ull
/* The node resumed from a stall at now_ns, as a loop saw it (its poll blocked ISN_SCHEDULER_STALL_SEEN_NS
 * past its timeout, or it read a request held that long while it kept up): the stall held the preparation
 * queue and its workers still together, and they go on as it ends, so the queue's stillness counts from
 * then; stats.stalls_seen counts it (once, whichever loops and requests tell of it). Any thread. */
void isn_scheduler_note_resume(isn_scheduler *scheduler, uint64_t now_ns);
/* Whether submit prepares jobs on the submitting thread (see config.prepare). */
bool isn_scheduler_prepares_on_submit(const isn_scheduler *scheduler);
/* Real GPU devices (config.gpu_backends); 0 without. */
uint32_t isn_scheduler_gpu_count(const isn_scheduler *scheduler);
/* Device i's health (config.gpu_backends[i]), taken under the lock that guards its batches; false
 * when there is no such real device. Any thread. */
bool isn_scheduler_gpu_health(isn_scheduler *scheduler, uint32_t device, isn_gpu_health *health);
/* Installs `backend` as real device i's first stage, between its batches, and returns the one it had
 * (the caller closes it; NULL also when there is no such device). NULL leaves the device without
 * one for a while: it refuses batches and reports itself unhealthy, so queries run on the CPU. The
 * caller sees to it that no job for the old backend's index is queued for the GPU meanwhile (isnd
 * swapping index generations). */
isn_gpu_backend *isn_scheduler_gpu_replace(isn_scheduler *scheduler, uint32_t device, isn_gpu_backend *backend);

#endif
