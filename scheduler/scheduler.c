/* The scheduler: admission and routing at submit, CPU workers (EDF queues, own deque, stealing),
 * and the shared parts (lock, counters, start and stop). GPU dispatchers are in gpu_dispatch.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <sys/resource.h>
#include <unistd.h>

#include "scheduler/scheduler_internal.h"

uint32_t isn_scheduler_default_workers(uint32_t cpus, uint32_t loops, uint32_t gpus) {
    if (gpus == 0) return cpus ? cpus : 1;
    uint64_t others = (uint64_t)loops + gpus;
    return cpus > others ? cpus - (uint32_t)others : 1;
}

uint32_t isn_scheduler_default_loops(uint32_t cpus, uint32_t gpus) {
    if (gpus) return cpus > gpus + 1 ? (cpus - gpus) / 2 : 1;
    return cpus >= 8 ? cpus / 4 : 1;
}

/* The CPU workers taking jobs now: every worker but the spares and standby workers resting. What
 * admission divides the CPU's work by. */
static uint32_t cpu_servers(isn_scheduler *s) {
    uint32_t resting = atomic_load_explicit(&s->spares_resting, memory_order_relaxed) +
                       atomic_load_explicit(&s->standby_resting, memory_order_relaxed);
    return s->config.workers > resting ? s->config.workers - resting : 1;
}

void isn_scheduler_config_default(isn_scheduler_config *config) {
    memset(config, 0, sizeof *config);
    config->workers = 1;
    config->queue_capacity = 4096;
    config->deque_capacity = 64;
    config->arena_bytes = 64 * 1024;
    config->early_stop_fraction = 0.9;
    config->admit_fraction = 0.4;
    config->degraded_fraction = 0.5;
    config->route_margin = 0.25;
    config->overload = ISN_OVERLOAD_SHED;
    config->codel_drops_waited = true;
    config->batch = (isn_batch_policy){.max_batch = 64,
                                       .memory_budget = 256u << 20,
                                       .linger_ns = 200000,
                                       .safety_ns = 1000000,
                                       .launch_ns = 8500};
    config->gpu_rest_ns = 1000000000ull;
    isn_gpu_sim_config_default(&config->simulated);
}

void sched_timespec_at(uint64_t ns, struct timespec *ts) {
    /* Condition variables here wait on CLOCK_MONOTONIC (set at init). */
    ts->tv_sec = (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}

void sched_predict(isn_scheduler *s, isn_job *job) {
    pthread_rwlock_rdlock(&s->model_lock);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        job->predicted_ns[d] = isn_cost_predict_ns(&s->model, (isn_device_kind)d, &job->features) +
                               (job->second_stage_ns > 0 ? job->second_stage_ns : 0.0);
    pthread_rwlock_unlock(&s->model_lock);
    job->predicted = true;
}

static double scale_locked(isn_scheduler *s, isn_device_kind device) {
    if (!(s->predicted_ewma[device] > 0)) return 1.0;
    double scale = s->actual_ewma[device] / s->predicted_ewma[device];
    return scale < 0.5 ? 0.5 : scale > 8.0 ? 8.0 : scale;
}

void sched_learn(isn_scheduler *s, isn_device_kind device, const isn_job_features *features, double cost_ns,
                 double wall_ns, double predicted_ns) {
    pthread_rwlock_wrlock(&s->model_lock);
    isn_cost_learn(&s->model, device, features, cost_ns);
    if (wall_ns > 0 && predicted_ns > 0 && isfinite(wall_ns) && isfinite(predicted_ns)) {
        s->actual_ewma[device] += SCHED_SCALE_WEIGHT * (wall_ns - s->actual_ewma[device]);
        s->predicted_ewma[device] += SCHED_SCALE_WEIGHT * (predicted_ns - s->predicted_ewma[device]);
        atomic_store_explicit(&s->scale[device], scale_locked(s, device), memory_order_relaxed);
        atomic_store_explicit(&s->learned_ns[device], isn_now_ns(), memory_order_relaxed);
    }
    pthread_rwlock_unlock(&s->model_lock);
}

bool sched_learn_claim(isn_scheduler *s, isn_device_kind device, uint64_t now_ns) {
    uint64_t after = atomic_load_explicit(&s->learn_after_ns[device], memory_order_relaxed);
    return now_ns >= after && atomic_compare_exchange_strong(&s->learn_after_ns[device], &after, UINT64_MAX);
}

void sched_learn_spaced(isn_scheduler *s, isn_device_kind device, const isn_job_features *features, double cost_ns,
                        double wall_ns, double predicted_ns) {
    uint64_t start = isn_now_ns();
    sched_learn(s, device, features, cost_ns, wall_ns, predicted_ns);
    uint64_t end = isn_now_ns();
    atomic_store(&s->learn_after_ns[device], end + (uint64_t)(SCHED_LEARN_SPACING * (double)(end - start)));
}

double sched_scale(isn_scheduler *s, isn_device_kind device) {
    return isn_scale_relaxed(atomic_load_explicit(&s->scale[device], memory_order_relaxed),
                             atomic_load_explicit(&s->learned_ns[device], memory_order_relaxed), isn_now_ns());
}

void sched_finish_on(isn_scheduler *s, isn_job *job, isn_job_outcome outcome, void *worker_state) {
    job->outcome = outcome;
    if (!job->finished_ns) job->finished_ns = isn_now_ns();
    if (outcome == ISN_JOB_DEADLINE_EXCEEDED) COUNT(s->dropped_dead);
    else if (outcome == ISN_JOB_ABANDONED) COUNT(s->abandoned);
    COUNT(s->completed);
    s->config.complete(s->config.user, job, worker_state);
}

void sched_finish(isn_scheduler *s, isn_job *job, isn_job_outcome outcome) { sched_finish_on(s, job, outcome, NULL); }

uint32_t sched_available_gpus(isn_scheduler *s, uint64_t now) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->num_dispatchers; i++)
        if (atomic_load_explicit(&s->dispatchers[i].rest_until_ns, memory_order_relaxed) <= now) n++;
    return n;
}

/* ------------------------------------------------------------------ submit */

/* Under the lock: GPU jobs queued, and batches they will need. */
static uint32_t gpu_queued(const isn_scheduler *s) {
    return s->queues[ISN_QUEUE_GPU].size + s->queues[ISN_QUEUE_UNDECIDED].size;
}

/* Under the lock: batches not yet launched, the ones the dispatchers are forming included. */
static double gpu_batches_queued(const isn_scheduler *s) {
    uint32_t per_batch = s->config.batch.max_batch ? s->config.batch.max_batch : 1;
    return (double)((gpu_queued(s) + s->gpu_held_jobs + per_batch - 1) / per_batch);
}

/* Under the lock: the predicted GPU time ahead of a job queued now, on all devices together (unscaled):
 * the GPU queue's backlog, the undecided queue's when it counts (either device may take it), the
 * batches being formed and those in flight, and each unlaunched batch's fixed part. */
static double gpu_ahead_ns(const isn_scheduler *s, bool with_undecided) {
    const isn_edf_queue *q = s->queues;
    return q[ISN_QUEUE_GPU].backlog_ns[ISN_DEVICE_GPU] +
           (with_undecided ? q[ISN_QUEUE_UNDECIDED].backlog_ns[ISN_DEVICE_GPU] : 0.0) + s->gpu_held_ns +
           s->gpu_inflight_ns + isn_batch_cost_fixed_ns(&s->batch_cost) * gpu_batches_queued(s);
}

/* Normal (not large) requests waiting to be prepared. The two counters are read apart: a large one
 * counted in one and not yet in the other must not make it negative. */
static uint32_t normal_pending(isn_scheduler *s) {
    int normal = (int)(atomic_load(&s->prepare_pending) - atomic_load(&s->large_pending));
    return normal > 0 ? (uint32_t)normal : 0;
}

/* How long a request queued now waits to be prepared: the count times a preparation's time
 * (estimate_ns) assumes every worker prepares, and in the hybrid the workers prepare between CPU jobs;
 * so at least the count times the queue's measured time between departures, and at least as long as
 * the last one taken had waited. On the estimate alone, requests let in waited past their admission
 * point and were refused after that wait. */
static double prepare_wait_floor(isn_scheduler *s, uint32_t pending, double estimate_ns) {
    double drained = (double)pending * atomic_load_explicit(&s->prepare_departure_ns, memory_order_relaxed);
    double waited = atomic_load_explicit(&s->prepare_sojourn_ns, memory_order_relaxed);
    double wait = estimate_ns > drained ? estimate_ns : drained;
    return waited > wait ? waited : wait;
}

/* Under the lock: how long the workers need for the unprepared jobs queued now (they come first).
 * prepare_ns is measured wall time, contention included: no scale applies to it. */
static double preparing_ns(isn_scheduler *s) {
    double workers = cpu_servers(s);
    uint32_t pending = normal_pending(s);
    return pending ? prepare_wait_floor(s, pending, (double)pending * s->prepare_ns / workers) : 0.0;
}

/* preparing_ns without the lock: the pending count and the published preparation time. */
static double preparing_ns_quick(isn_scheduler *s) {
    double workers = cpu_servers(s);
    uint32_t pending = normal_pending(s);
    return pending ? prepare_wait_floor(s, pending,
                                        (double)pending *
                                            atomic_load_explicit(&s->prepare_ns_published, memory_order_relaxed) /
                                            workers)
                   : 0.0;
}

/* Under the lock: whether the arrival check may count on the CPU. A request's placement is known only
 * once it has been prepared; when most jobs lately could not go to the CPU (gpu.route_all, or queries
 * only the GPU takes) an idle CPU would let in requests that routing then refuses after their
 * preparation, late and at a worker's cost. With no GPU to judge by (gpu_ns infinite), the CPU counts. */
static bool cpu_counts_at_arrival(const isn_scheduler *s, double gpu_ns) {
    return s->cpu_placeable_share >= 0.5 || !isfinite(gpu_ns);
}

/* Under the lock: how soon each device would start, and be done with, a typical job submitted now,
 * given each device's wait (the CPU's counts the preparations ahead): on the CPU a typical job's time
 * (measured, or what arrivals lately were predicted to take, whichever is more: arrival_cost_ns says
 * why); on the GPU a batch's fixed part and the linger time, after the preparations ahead. The CPU's are
 * infinite while it does not count (cpu_counts_at_arrival). The arrival check compares these with the
 * admission point, so that what it lets in is what admission after preparation admits too: comparing
 * only the waits let in jobs that the queue at its admission level then refused once they had been
 * prepared, and under overload a third of the workers' time went to preparing them. */
static void arrival_view_of(isn_scheduler *s, const double *wait, sched_arrival_view *view) {
    double typical = s->meter[ISN_DEVICE_CPU].job_ns > s->arrival_cost_ns ? s->meter[ISN_DEVICE_CPU].job_ns : s->arrival_cost_ns;
    double workers = cpu_servers(s);
    view->preparing = preparing_ns(s);
    view->gpu_start = view->preparing + wait[ISN_DEVICE_GPU];
    view->gpu_done = view->gpu_start + isn_batch_cost_fixed_ns(&s->batch_cost) + (double)s->config.batch.linger_ns;
    bool cpu = cpu_counts_at_arrival(s, view->gpu_done);
    view->cpu_start = cpu ? wait[ISN_DEVICE_CPU] : INFINITY;
    view->cpu_done = cpu ? wait[ISN_DEVICE_CPU] + typical : INFINITY;
    view->per_pending = typical * s->cpu_bound_share / workers;
}

/* A query that misses its deadline although the work queued ahead of it takes at most this share of
 * its budget misses it by its own cost: it runs cut short and answers partially instead of being
 * refused as overload (RESOURCE_EXHAUSTED means the node is overloaded, not that a query is big). */
#define OWN_COST_QUEUE_SHARE 0.5

/* The arrival check: a typical job would be done by the admission point, or the wait ahead is short
 * enough that missing it would be the job's own cost (typical jobs slower than the budget on an idle
 * node are run and answered partially, as admission would, not refused as overload). */
static bool arrival_admits(double remaining_ns, double done_ns, double start_ns) {
    return done_ns <= remaining_ns || start_ns <= OWN_COST_QUEUE_SHARE * remaining_ns;
}

/* The arrival check on a view, with the requests waiting to be prepared now: each will add a typical
 * arrival's CPU time to the CPU's queue (for the share of jobs that go there). Counted here only: the
 * loops let requests in faster than the workers prepare them, and a view published at the last
 * admission did not yet count the ones let in since, so that a burst let in on one view found the
 * queue past its limit once prepared and routing refused most of it. */
static bool arrival_admits_view(const sched_arrival_view *view, double remaining_ns, uint32_t pending,
                                double preparing_now, double credit_room_ns) {
    double ahead = (double)pending * view->per_pending;
    /* Every request is prepared before either device takes it: the preparations' wait grown since the
     * view was published holds it back on both (counted on the CPU alone, the GPU's view let bursts in
     * that then waited past their admission point to be prepared). */
    double grown = preparing_now > view->preparing ? preparing_now - view->preparing : 0.0;
    double preparing = view->preparing + grown;
    /* It would be refused unprepared, after that wait (take_one_locked). */
    if (preparing >= remaining_ns) return false;
    /* Routing moves its admission point by the time it was prepared in (preparation_credit_ns). */
    double credit = SCHED_ARRIVAL_SHARE * (preparing < credit_room_ns ? preparing : credit_room_ns);
    double cpu_done = view->cpu_done + ahead + grown, gpu_done = view->gpu_done + grown;
    double cpu_start = view->cpu_start + ahead + grown, gpu_start = view->gpu_start + grown;
    double done = cpu_done < gpu_done ? cpu_done : gpu_done;
    double start = cpu_start < gpu_start ? cpu_start : gpu_start;
    return arrival_admits(remaining_ns + credit, done, start);
}

/* Whether CoDel refuses a request arriving now (received then, admitted by admit_by): bounding, and the
 * preparations queued ahead would hold it near CoDel's target. Read without the lock. */
static bool codel_refuses_arrival(isn_scheduler *s, uint64_t received_ns, double admit_by) {
    if (!isn_codel_refuses_arrival(atomic_load_explicit(&s->prepare_bounding, memory_order_relaxed),
                                   preparing_ns_quick(s), admit_by - (double)received_ns))
        return false;
    COUNT(s->shed_arrival_codel);
    return true;
}

/* The arrival view and each device's wait, for the checks made without the lock
 * (isn_scheduler_may_admit_quick, sched_gpu_clearly_wins): refreshed on every admission decision. */
static void publish_waits(isn_scheduler *s, const double *wait) {
    sched_arrival_view view;
    arrival_view_of(s, wait, &view);
    atomic_store_explicit(&s->arrival_cpu_done_ns, view.cpu_done, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_cpu_start_ns, view.cpu_start, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_gpu_done_ns, view.gpu_done, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_gpu_start_ns, view.gpu_start, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_per_pending_ns, view.per_pending, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_preparing_ns, view.preparing, memory_order_relaxed);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        atomic_store_explicit(&s->published_wait_ns[d], wait[d], memory_order_relaxed);
    atomic_store_explicit(&s->waits_published_at_ns, isn_now_ns(), memory_order_relaxed);
}

/* The arrival view publish_waits stored last. */
static void published_view(isn_scheduler *s, sched_arrival_view *view) {
    *view = (sched_arrival_view){.cpu_done = atomic_load_explicit(&s->arrival_cpu_done_ns, memory_order_relaxed),
                                 .cpu_start = atomic_load_explicit(&s->arrival_cpu_start_ns, memory_order_relaxed),
                                 .gpu_done = atomic_load_explicit(&s->arrival_gpu_done_ns, memory_order_relaxed),
                                 .gpu_start = atomic_load_explicit(&s->arrival_gpu_start_ns, memory_order_relaxed),
                                 .per_pending = atomic_load_explicit(&s->arrival_per_pending_ns, memory_order_relaxed),
                                 .preparing = atomic_load_explicit(&s->arrival_preparing_ns, memory_order_relaxed)};
}

/* Jobs bound for the CPU that a new one would queue behind: queued, in workers' deques, running. */
static double cpu_jobs_ahead(isn_scheduler *s) {
    return (double)s->queues[ISN_QUEUE_CPU].size + s->queues[ISN_QUEUE_UNDECIDED].size +
           atomic_load_explicit(&s->deque_jobs, memory_order_relaxed) +
           atomic_load_explicit(&s->running, memory_order_relaxed);
}

/* Under the lock: how long a job queued now would wait on each device (INFINITY for none).
 * Predictions are for an idle node; the scale says how the node runs now. The undecided queue
 * counts for both sides: either may take all of it. What the model claims is kept within a band
 * around each device's measured wait (isn_admission_wait_ns), and the CPU's wait is at least the age of
 * the oldest job still queued: when the workers stall (other processes took the cores), that age grows at
 * once, while the scale learns of it only as jobs finish. */
static void queue_waits(isn_scheduler *s, uint64_t now, const double *scale, double *wait) {
    const isn_edf_queue *q = s->queues;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        isn_service_meter_sample(&s->meter[d], LOAD(s->busy_ns[d]), LOAD(s->ran_on[d]), now);
    double committed = (double)atomic_load_explicit(&s->cpu_committed_ns, memory_order_relaxed);
    double workers = cpu_servers(s);
    double model_cpu = scale[ISN_DEVICE_CPU] *
                       (q[ISN_QUEUE_CPU].backlog_ns[ISN_DEVICE_CPU] + q[ISN_QUEUE_UNDECIDED].backlog_ns[ISN_DEVICE_CPU] +
                        (committed > 0 ? committed : 0)) /
                       workers;
    double measured_cpu = isn_service_meter_wait_ns(&s->meter[ISN_DEVICE_CPU], cpu_jobs_ahead(s), workers);
    const isn_job *head = isn_edf_peek(&q[ISN_QUEUE_CPU]);
    double oldest = head && now > head->enqueued_ns ? (double)(now - head->enqueued_ns) : 0.0;
    /* workers prepare before they search */
    wait[ISN_DEVICE_CPU] = isn_admission_wait_ns(model_cpu, measured_cpu, oldest) + preparing_ns(s);
    uint32_t gpus = sched_available_gpus(s, now);
    if (!gpus) {
        wait[ISN_DEVICE_GPU] = INFINITY;
        publish_waits(s, wait);
        return;
    }
    double model_gpu = scale[ISN_DEVICE_GPU] * gpu_ahead_ns(s, true) / gpus;
    double measured_gpu = isn_service_meter_wait_ns(
        &s->meter[ISN_DEVICE_GPU], (double)gpu_queued(s) + s->gpu_held_jobs + s->gpu_inflight_jobs, gpus);
    wait[ISN_DEVICE_GPU] = isn_admission_wait_ns(model_gpu, measured_gpu, 0.0);
    publish_waits(s, wait);
}

/* When a job must be admitted by: received plus its share of the budget (at most the early-stop
 * point, after which a job answers only partially); the rest is slack for prediction error and the
 * reply's way back. 0: no deadline. */
static double admit_by_ns(const isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns) {
    if (!deadline_ns) return 0;
    double fraction = s->config.admit_fraction < s->config.early_stop_fraction ? s->config.admit_fraction
                                                                                : s->config.early_stop_fraction;
    return (double)received_ns + fraction * (double)(deadline_ns - received_ns);
}

/* How far routing moves a prepared job's admission point for the time it spent being prepared (waiting
 * included): all of it, up to half the way to the early-stop point. The arrival check grants the same,
 * so that what it lets in is what routing admits once the job is prepared. */
static double preparation_credit_ns(const isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, double admit_by,
                                    double preparation_ns) {
    double stop_at = (double)received_ns + s->config.early_stop_fraction * (double)(deadline_ns - received_ns);
    double room = stop_at > admit_by ? (stop_at - admit_by) / 2 : 0.0;
    return preparation_ns < room ? preparation_ns : room;
}

/* What routing weighs for this job now, given each device's wait and whether the job would start a
 * GPU batch. True when it is already past its deadline. */
static bool route_input_given(isn_scheduler *s, const isn_job *job, uint64_t now, const double *scale,
                              const double *wait_ns, bool starts_batch, isn_route_input *out) {
    uint32_t gpus = sched_available_gpus(s, now);
    isn_route_input in = {.margin = s->config.route_margin,
                          .degrade_ok = s->config.overload == ISN_OVERLOAD_DEGRADE,
                          .degrade_min_share = s->config.degraded_fraction,
                          .max_queue_share = OWN_COST_QUEUE_SHARE};
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) in.wait_ns[d] = wait_ns[d];
    in.available[ISN_DEVICE_CPU] = s->config.workers > 0 && !(job->placement == ISN_PLACE_GPU && gpus > 0);
    in.service_ns[ISN_DEVICE_CPU] = scale[ISN_DEVICE_CPU] * job->predicted_ns[ISN_DEVICE_CPU];
    in.available[ISN_DEVICE_GPU] = gpus > 0 && job->placement != ISN_PLACE_CPU;
    if (!gpus) in.wait_ns[ISN_DEVICE_GPU] = 0;
    /* A job costs the GPU its own part; it pays a batch's fixed part only when it starts a batch
     * (then it may also wait up to the linger time for company). Jobs already queued paid theirs. */
    double fixed_ns = isn_batch_cost_fixed_ns(&s->batch_cost);
    in.service_ns[ISN_DEVICE_GPU] = scale[ISN_DEVICE_GPU] * (job->predicted_ns[ISN_DEVICE_GPU] +
                                                             (starts_batch ? fixed_ns : 0.0)) +
                                    (starts_batch ? (double)s->config.batch.linger_ns : 0.0);
    bool already_dead = job->deadline_ns && job->deadline_ns <= now;
    /* The arrival check let this job in against its admission point; the time it then spent being
     * prepared is the node's own pipeline, and moves that point later (by half the room left before
     * the early-stop point at most), so that admission after preparation does not refuse, for the
     * node's own delay, what the arrival check admitted (the queues' waits sit at that point under
     * overload). */
    double admit_by = admit_by_ns(s, job->received_ns, job->deadline_ns);
    if (job->deadline_ns && job->preparation_ns > 0)
        admit_by += preparation_credit_ns(s, job->received_ns, job->deadline_ns, admit_by, job->preparation_ns);
    in.remaining_ns = job->deadline_ns && !already_dead ? (admit_by > (double)now ? admit_by - (double)now : 1) : 0;

    *out = in;
    return already_dead;
}

/* Under the lock: route_input_given with the queues' waits now. */
static bool route_input_of(isn_scheduler *s, const isn_job *job, uint64_t now, const double *scale,
                           isn_route_input *out) {
    double wait[ISN_DEVICE_KINDS];
    queue_waits(s, now, scale, wait);
    bool starts_batch = gpu_queued(s) % (s->config.batch.max_batch ? s->config.batch.max_batch : 1) == 0;
    return route_input_given(s, job, now, scale, wait, starts_batch, out);
}

/* Under the lock: whether a job just queued for the GPU needs a sleeping dispatcher woken. A
 * dispatcher holding a batch wakes by itself at the batch's linger end or latest start, and picks up
 * what was queued meanwhile: it needs a job to wake it only when it holds none, when a full batch is
 * waiting, or when this job must start before it would wake. Waking it for every job cost a context
 * switch and a trip through the lock per job. */
static bool gpu_needs_wake(const isn_scheduler *s, const isn_job *job, double gpu_service_ns) {
    uint32_t per_batch = s->config.batch.max_batch ? s->config.batch.max_batch : 1;
    double latest_start = job->deadline_ns ? (double)job->deadline_ns - (double)s->config.batch.safety_ns - gpu_service_ns
                                           : INFINITY;
    for (uint32_t i = 0; i < s->num_dispatchers; i++) {
        const sched_dispatcher *d = &s->dispatchers[i];
        if (!d->sleeping) continue;
        if (!d->sleeps_until_ns || gpu_queued(s) >= per_batch || latest_start < (double)d->sleeps_until_ns) return true;
    }
    return false;
}

/* Admits and routes a prepared job. prepare_ns >= 0: a worker prepared it in that time (the moving
 * average the CPU's wait counts is updated in the same trip through the lock), and that worker looks
 * at the queues next, so another is woken for it only when this one goes on preparing. */
static isn_submit_result admit(isn_scheduler *s, isn_job *job, double prepare_ns) {
    uint64_t now = isn_now_ns();
    job->enqueued_ns = now;
    job->started_ns = job->finished_ns = 0;
    job->degraded = false;
    job->run_budget_ns = 0;
    job->rerun_on_cpu = false;
    job->batch_size = 0;
    job->complete = true;
    job->measured = true;
    if (!job->received_ns) job->received_ns = now;
    /* preparation predicted it already unless the features changed since (the probe) */
    if (!job->predicted) sched_predict(s, job);
    job->predicted = false;
    double scale[ISN_DEVICE_KINDS] = {sched_scale(s, ISN_DEVICE_CPU), sched_scale(s, ISN_DEVICE_GPU)};

    pthread_mutex_lock(&s->lock);
    /* the normal queue's wait counts normal preparations; a large request's is not one of them */
    if (prepare_ns >= 0 && !job->prepare_on_worker) {
        s->prepare_ns += SCHED_SCALE_WEIGHT * (prepare_ns - s->prepare_ns);
        atomic_store_explicit(&s->prepare_ns_published, s->prepare_ns, memory_order_relaxed);
    }
    if (s->stopping) {
        pthread_mutex_unlock(&s->lock);
        return ISN_SUBMIT_STOPPED;
    }
    isn_route_input in;
    bool already_dead = route_input_of(s, job, now, scale, &in);
    s->cpu_placeable_share += SCHED_PLACEABLE_WEIGHT * ((in.available[ISN_DEVICE_CPU] ? 1.0 : 0.0) - s->cpu_placeable_share);
    if (in.available[ISN_DEVICE_CPU])
        s->arrival_cost_ns += SCHED_SCALE_WEIGHT * (in.service_ns[ISN_DEVICE_CPU] - s->arrival_cost_ns);
    isn_device_kind best;
    isn_route route = already_dead ? ISN_ROUTE_CPU : isn_route_decide(&in, &best);
    if (route == ISN_ROUTE_SHED) {
        pthread_mutex_unlock(&s->lock);
        COUNT(s->shed_overload);
        COUNT(s->shed_routed);
        return ISN_SUBMIT_SHED_OVERLOAD;
    }
    if (route == ISN_ROUTE_DEGRADE) {
        /* It runs until its admission point at most, and is counted in the queue for that long. */
        job->degraded = true;
        job->run_budget_ns = in.remaining_ns - in.wait_ns[ISN_DEVICE_CPU];
        double budget = job->run_budget_ns / scale[ISN_DEVICE_CPU];
        if (budget < job->predicted_ns[ISN_DEVICE_CPU]) job->predicted_ns[ISN_DEVICE_CPU] = budget;
        route = ISN_ROUTE_CPU;
    }
    isn_queue_id queue = route == ISN_ROUTE_GPU ? ISN_QUEUE_GPU
                         : route == ISN_ROUTE_UNDECIDED ? ISN_QUEUE_UNDECIDED
                                                        : ISN_QUEUE_CPU;
    job->queue = queue;
    /* The CPU queue's heap keeps a reserve beyond the admission limit for jobs a failed GPU hands back. */
    if (s->queues[queue].size >= s->config.queue_capacity || !isn_edf_push(&s->queues[queue], job)) {
        pthread_mutex_unlock(&s->lock);
        COUNT(s->shed_full);
        return ISN_SUBMIT_SHED_FULL;
    }
    if (job->degraded) COUNT(s->degraded);
    s->cpu_bound_share += SCHED_PLACEABLE_WEIGHT * ((queue != ISN_QUEUE_GPU ? 1.0 : 0.0) - s->cpu_bound_share);
    COUNT(s->submitted);
    COUNT(s->routed[queue]);
    bool self_takes = prepare_ns >= 0 && !atomic_load_explicit(&s->prepare_pending, memory_order_relaxed);
    bool wake_cpu = queue != ISN_QUEUE_GPU && atomic_load(&s->idle.count) && !self_takes;
    bool wake_gpu = queue != ISN_QUEUE_CPU && gpu_needs_wake(s, job, in.service_ns[ISN_DEVICE_GPU]);
    pthread_mutex_unlock(&s->lock);
    /* Woken after the unlock, so that the woken thread does not wait for the lock at once. */
    if (wake_cpu) sched_wake_idle_workers(s, false);
    if (wake_gpu) pthread_cond_broadcast(&s->gpu_wake);
    return ISN_SUBMIT_QUEUED;
}

isn_submit_result sched_admit(isn_scheduler *s, isn_job *job) { return admit(s, job, -1.0); }

/* Under the lock: whether a job received then, due then, could still start in time on some device. */
static bool may_admit_locked(isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, uint64_t now,
                             const double *scale) {
    if (!deadline_ns) return true;
    double admit_by = admit_by_ns(s, received_ns, deadline_ns);
    if (codel_refuses_arrival(s, received_ns, admit_by)) return false;
    double remaining = SCHED_ARRIVAL_SHARE * (admit_by - (double)now);
    double wait[ISN_DEVICE_KINDS];
    queue_waits(s, now, scale, wait); /* publishes the arrival view of these waits */
    sched_arrival_view view;
    published_view(s, &view);
    return arrival_admits_view(&view, remaining, normal_pending(s), preparing_ns(s),
                               preparation_credit_ns(s, received_ns, deadline_ns, admit_by, INFINITY));
}

/* Queues a job for a worker to prepare (prepare_one), unless no device could even start it in time
 * (judged from the last admission decision's waits while they are fresh: the request's HEADERS passed
 * the same check). */
static isn_submit_result queue_for_prepare(isn_scheduler *s, isn_job *job) {
    job->enqueued_ns = isn_now_ns();
    job->refusal = 0;
    if (!job->received_ns) job->received_ns = job->enqueued_ns;
    if (!s->config.prepare) return ISN_SUBMIT_STOPPED;
    if (!isn_scheduler_may_admit_quick(s, job->received_ns, job->deadline_ns)) return ISN_SUBMIT_SHED_LATE;
    isn_edf_queue *queue = job->prepare_on_worker ? &s->large_prepare_queue : &s->prepare_queue;
    pthread_mutex_lock(&s->prepare_lock);
    if (s->prepare_closed) {
        pthread_mutex_unlock(&s->prepare_lock);
        return ISN_SUBMIT_STOPPED;
    }
    if (queue->size >= s->config.queue_capacity || !isn_edf_push(queue, job)) {
        pthread_mutex_unlock(&s->prepare_lock);
        COUNT(s->shed_full);
        return ISN_SUBMIT_SHED_FULL;
    }
    if (job->prepare_on_worker) atomic_fetch_add(&s->large_pending, 1);
    atomic_fetch_add(&s->prepare_pending, 1);
    pthread_mutex_unlock(&s->prepare_lock);
    if (atomic_load(&s->idle.count)) sched_wake_idle_workers(s, false);
    return ISN_SUBMIT_QUEUED;
}

bool sched_gpu_clearly_wins(isn_scheduler *s, isn_job *job) {
    uint64_t now = isn_now_ns();
    if (!sched_available_gpus(s, now)) return false;
    sched_predict(s, job);
    double scale[ISN_DEVICE_KINDS] = {sched_scale(s, ISN_DEVICE_CPU), sched_scale(s, ISN_DEVICE_GPU)};
    isn_route_input in;
    bool already_dead;
    /* Only whether to probe hangs on this: the last admission's waits do while they are fresh (as in
     * isn_scheduler_may_admit_quick), without the lock every admission takes. */
    if (now <= atomic_load_explicit(&s->waits_published_at_ns, memory_order_relaxed) + SCHED_QUICK_STALE_NS) {
        double wait[ISN_DEVICE_KINDS];
        for (int d = 0; d < ISN_DEVICE_KINDS; d++)
            wait[d] = atomic_load_explicit(&s->published_wait_ns[d], memory_order_relaxed);
        already_dead = route_input_given(s, job, now, scale, wait, false, &in);
    } else {
        pthread_mutex_lock(&s->lock);
        already_dead = route_input_of(s, job, now, scale, &in);
        pthread_mutex_unlock(&s->lock);
    }
    isn_device_kind best;
    return !already_dead && isn_route_decide(&in, &best) == ISN_ROUTE_GPU;
}

bool isn_scheduler_may_admit(isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns) {
    if (!deadline_ns) return true;
    uint64_t now = isn_now_ns();
    double scale[ISN_DEVICE_KINDS] = {sched_scale(s, ISN_DEVICE_CPU), sched_scale(s, ISN_DEVICE_GPU)};
    pthread_mutex_lock(&s->lock);
    bool ok = may_admit_locked(s, received_ns, deadline_ns, now, scale);
    pthread_mutex_unlock(&s->lock);
    if (!ok) COUNT(s->shed_overload);
    return ok;
}

bool isn_scheduler_may_admit_quick(isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns) {
    if (!deadline_ns) return true;
    uint64_t now = isn_now_ns();
    /* A refusal here reaches no admission decision, so it refreshes nothing: once the published
     * start is older than SCHED_QUICK_STALE_NS the full check runs (and publishes anew), or a refusal
     * based on it would latch. */
    if (now > atomic_load_explicit(&s->waits_published_at_ns, memory_order_relaxed) + SCHED_QUICK_STALE_NS)
        return isn_scheduler_may_admit(s, received_ns, deadline_ns);
    double admit_by = admit_by_ns(s, received_ns, deadline_ns);
    if (codel_refuses_arrival(s, received_ns, admit_by)) {
        COUNT(s->shed_overload);
        return false;
    }
    double remaining = SCHED_ARRIVAL_SHARE * (admit_by - (double)now);
    sched_arrival_view view;
    published_view(s, &view);
    bool ok = arrival_admits_view(&view, remaining, normal_pending(s), preparing_ns_quick(s),
                                  preparation_credit_ns(s, received_ns, deadline_ns, admit_by, INFINITY));
    if (!ok) COUNT(s->shed_overload);
    return ok;
}

bool isn_scheduler_prepares_on_submit(const isn_scheduler *s) {
    return s->config.prepare && s->config.workers < s->config.analysis_min_workers && s->num_dispatchers == 0;
}

isn_submit_result isn_scheduler_submit(isn_scheduler *s, isn_job *job) {
    if (!job->received_ns) job->received_ns = isn_now_ns();
    job->preparation_ns = 0;
    if (!s->config.prepare) {
        sched_take_features(s, job);
        return sched_admit(s, job);
    }
    if (!isn_scheduler_prepares_on_submit(s) || job->prepare_on_worker) return queue_for_prepare(s, job);
    if (!isn_scheduler_may_admit(s, job->received_ns, job->deadline_ns)) return ISN_SUBMIT_SHED_LATE;
    /* Few workers and no GPU: the workers are the bottleneck, the submitting thread is not. */
    if (!s->config.prepare(s->config.user, job, s->config.submitter_state)) return ISN_SUBMIT_REFUSED;
    sched_take_features(s, job);
    return sched_admit(s, job);
}

/* ------------------------------------------------------------------ CPU workers */

/* Under the lock: the next job for an idle CPU worker, in the order CPU-preferred, undecided, then
 * GPU-preferred when the GPU side is behind (the job would finish sooner here than after the GPU's
 * backlog). Dead jobs met on the way are unlinked into *dead. */
static isn_job *take_shared(isn_scheduler *s, uint64_t now, isn_job **dead, uint32_t *num_dead, uint32_t max_dead) {
    for (;;) {
        isn_job *job = NULL;
        isn_queue_id from = ISN_QUEUE_CPU;
        if (s->queues[ISN_QUEUE_CPU].size) job = isn_edf_pop(&s->queues[ISN_QUEUE_CPU]);
        else if (s->queues[ISN_QUEUE_UNDECIDED].size) {
            job = isn_edf_pop(&s->queues[ISN_QUEUE_UNDECIDED]);
            from = ISN_QUEUE_UNDECIDED;
        } else if (s->queues[ISN_QUEUE_GPU].size) {
            isn_job *head = isn_edf_peek(&s->queues[ISN_QUEUE_GPU]);
            uint32_t gpus = sched_available_gpus(s, now);
            double gpu_done = gpus ? gpu_ahead_ns(s, false) / gpus : INFINITY;
            if (head->placement != ISN_PLACE_GPU && head->predicted_ns[ISN_DEVICE_CPU] < gpu_done) {
                job = isn_edf_pop(&s->queues[ISN_QUEUE_GPU]);
                from = ISN_QUEUE_GPU;
            }
        }
        if (!job) return NULL;
        if (job->deadline_ns && job->deadline_ns <= now && *num_dead < max_dead) {
            dead[(*num_dead)++] = job;
            continue;
        }
        if (from == ISN_QUEUE_UNDECIDED) COUNT(s->undecided_cpu);
        else if (from == ISN_QUEUE_GPU) COUNT(s->stolen_gpu);
        return job;
    }
}

static void commit_cpu(isn_scheduler *s, const isn_job *job, int sign) {
    atomic_fetch_add_explicit(&s->cpu_committed_ns, sign * (long long)job->predicted_ns[ISN_DEVICE_CPU],
                              memory_order_relaxed);
}

/* Under the lock, after taking a job: when the CPU queue is long, a few more of its earliest jobs
 * go to this worker's deque at once (fewer trips through the lock; others may steal them). They are
 * pushed latest first, so the owner pops them in deadline order. */
static void grab_extra(isn_scheduler *s, sched_worker *w) {
    uint32_t queued = s->queues[ISN_QUEUE_CPU].size, workers = cpu_servers(s);
    if (w->spare_rank || w->standby || queued <= workers) return; /* nothing it may have to leave */
    uint32_t extra = queued / workers - 1;
    if (extra > SCHED_MAX_GRAB) extra = SCHED_MAX_GRAB;
    isn_job *grabbed[SCHED_MAX_GRAB];
    uint32_t n = 0;
    while (n < extra && s->queues[ISN_QUEUE_CPU].size) grabbed[n++] = isn_edf_pop(&s->queues[ISN_QUEUE_CPU]);
    while (n > 0) {
        isn_job *job = grabbed[--n];
        if (!isn_deque_push(&w->deque, job)) {
            isn_edf_push(&s->queues[ISN_QUEUE_CPU], job);
            continue;
        }
        atomic_fetch_add_explicit(&s->deque_jobs, 1, memory_order_relaxed);
        commit_cpu(s, job, +1);
    }
    if (atomic_load(&s->idle.count)) sched_wake_idle_workers(s, false);
}

static isn_job *steal_from_others(isn_scheduler *s, sched_worker *self) {
    uint32_t n = s->config.workers;
    if (n < 2) return NULL;
    self->rng = self->rng * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t start = (uint32_t)(self->rng >> 33) % n;
    for (uint32_t i = 0; i < n; i++) {
        sched_worker *victim = &s->workers[(start + i) % n];
        if (victim == self || !atomic_load_explicit(&victim->started, memory_order_acquire)) continue;
        isn_job *job = isn_deque_steal(&victim->deque);
        if (job) {
            atomic_fetch_sub_explicit(&s->deque_jobs, 1, memory_order_relaxed);
            COUNT(s->stolen_deque);
            return job;
        }
    }
    return NULL;
}

static void run_cpu_job(isn_scheduler *s, sched_worker *w, isn_job *job, bool committed) {
    uint64_t now = isn_now_ns();
    if (!committed) commit_cpu(s, job, +1);
    if (atomic_load_explicit(&s->abandon, memory_order_relaxed)) {
        commit_cpu(s, job, -1);
        sched_finish(s, job, ISN_JOB_ABANDONED);
        return;
    }
    if ((job->deadline_ns && now >= job->deadline_ns) || (s->config.start && !s->config.start(s->config.user, job))) {
        commit_cpu(s, job, -1);
        sched_finish(s, job, ISN_JOB_DEADLINE_EXCEEDED);
        return;
    }
    isn_cpu_context context = {.worker = w->id,
                               .worker_state = w->state,
                               .arena = w->arena,
                               .arena_bytes = s->config.arena_bytes};
    if (job->deadline_ns) {
        context.stop_ns = job->received_ns +
                          (uint64_t)(s->config.early_stop_fraction * (double)(job->deadline_ns - job->received_ns));
        if (context.stop_ns > job->deadline_ns) context.stop_ns = job->deadline_ns;
        if (job->degraded && now + (uint64_t)job->run_budget_ns < context.stop_ns)
            context.stop_ns = now + (uint64_t)job->run_budget_ns;
    }
    job->started_ns = now;
    job->device = ISN_DEVICE_CPU;
    job->worker = w->id;
    job->complete = true;
    job->measured = true;
    atomic_fetch_add_explicit(&s->running, 1, memory_order_relaxed);
    uint64_t cpu_start = isn_thread_cpu_ns();
    job->second_stage_cpu_ns = 0;
    s->config.run_cpu(s->config.user, job, &context);
    uint64_t cpu_used = isn_thread_cpu_ns() - cpu_start;
    atomic_fetch_sub_explicit(&s->running, 1, memory_order_relaxed);
    job->finished_ns = isn_now_ns();
    uint64_t service = job->finished_ns - job->started_ns;
    ADD(s->busy_ns[ISN_DEVICE_CPU], service);
    ADD(s->wait_ns[ISN_DEVICE_CPU], job->started_ns - job->enqueued_ns);
    COUNT(s->wait_count[ISN_DEVICE_CPU]);
    COUNT(s->ran_on[ISN_DEVICE_CPU]);
    if (!job->complete) COUNT(s->partial);
    /* A partial run's time is cut short by its deadline, not set by its cost: it teaches nothing.
     * The model learns the thread's CPU time, so that time other threads and processes take from
     * this one (preemption) does not teach it that queries got costlier; the scale sees that. */
    uint64_t first_stage_cpu = cpu_used > job->second_stage_cpu_ns ? cpu_used - job->second_stage_cpu_ns : 0;
    if (job->complete && job->measured && sched_learn_claim(s, ISN_DEVICE_CPU, job->finished_ns))
        sched_learn_spaced(s, ISN_DEVICE_CPU, &job->features, (double)first_stage_cpu, (double)service,
                           job->degraded ? 0.0 : job->predicted_ns[ISN_DEVICE_CPU]); /* a degraded one's was cut */
    commit_cpu(s, job, -1);
    sched_finish(s, job, ISN_JOB_RAN);
}

/* Linux gives each thread its own nice value and policy: a worker lowers only its own priority. */
static void lower_worker_priority(const isn_scheduler *s, uint32_t worker) {
    if (s->config.worker_idle_policy || (s->workers[worker].spare_rank && s->config.spare_idle_policy)) {
        char err[160];
        if (isn_set_this_thread_idle_policy(err, sizeof err) == 0) return;
        fprintf(stderr, "isn scheduler: worker %u keeps the normal policy (its nice value instead): %s\n", worker, err);
    }
    char err[160];
    if (s->config.worker_slice_ns && isn_set_this_thread_slice(s->config.worker_slice_ns, err, sizeof err) < 0 && worker == 0)
        fprintf(stderr, "isn scheduler: the workers keep the kernel's slice: %s\n", err);
    if (s->config.worker_nice <= 0) return;
    errno = 0;
    pid_t tid = gettid();
    int current = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno == 0 && setpriority(PRIO_PROCESS, (id_t)tid, current + s->config.worker_nice) == 0) return;
    fprintf(stderr, "isn scheduler: worker %u keeps its priority: setpriority: %s\n", worker, strerror(errno));
}

void sched_take_features(isn_scheduler *s, isn_job *job) {
    const isn_index *index = job->index ? job->index : s->config.index;
    if (!job->query || !index) return;
    job->predicted = false;
    if (job->placement == ISN_PLACE_GPU) {
        isn_job_features_lists(index, job->query, job->k, job->mode, job->algo, &job->features);
        return;
    }
    isn_job_features_quick(index, job->query, job->k, job->mode, job->algo, &job->features);
    /* With a preparation backlog (half of what arrivals may queue, or a standing one) the workers' time
     * goes to preparing: the probe, several times the cost of the rest and only a sharper CPU
     * prediction, is skipped (and so is the look at the queues that decides whether it is needed). */
    bool hurried = atomic_load_explicit(&s->prepare_standing, memory_order_relaxed) ||
                   preparing_ns_quick(s) > 0.5 * SCHED_CODEL_ARRIVAL_SHARE * SCHED_CODEL_TARGET_NS;
    bool gpu_bound = job->placement == ISN_PLACE_ANY && (hurried || sched_gpu_clearly_wins(s, job));
    if (!gpu_bound) {
        isn_job_features_of(index, job->query, job->k, job->mode, job->algo, &job->features);
        job->predicted = false;
    }
}

/* The user's analysis, then the features: both are the preparation whose time the CPU's wait counts.
 * Its time in *took_ns. */
static bool prepare_timed(isn_scheduler *s, isn_job *job, void *worker_state, double *took_ns) {
    uint64_t start = isn_now_ns();
    bool ok = s->config.prepare(s->config.user, job, worker_state);
    if (ok) sched_take_features(s, job);
    *took_ns = (double)(isn_now_ns() - start);
    return ok;
}

/* Whether a worker may take a large request to prepare now (exact under prepare_lock). */
static bool large_takeable(isn_scheduler *s) {
    return atomic_load(&s->large_pending) && atomic_load(&s->large_preparing) < SCHED_LARGE_PREPARERS;
}

void sched_wake_idle_workers(isn_scheduler *s, bool all) { sched_idle_wake(&s->idle, all); }

/* Whether a worker finds something to prepare now. */
static bool preparation_waiting(isn_scheduler *s) {
    return atomic_load(&s->prepare_pending) > atomic_load(&s->large_pending) || large_takeable(s);
}

/* Under prepare_lock: takes one job from the preparation queues into the worker's hands and decides
 * there whether it is refused unprepared. False when there was none it may take. */
static bool take_one_locked(isn_scheduler *s, sched_worker *w, uint64_t now) {
    bool large = false;
    isn_job *job = s->prepare_queue.size ? isn_edf_pop(&s->prepare_queue) : NULL;
    if (!job && !w->taken_count && large_takeable(s)) {
        /* Large requests (a 4 MiB query's analysis takes a worker for many normal queries' time) are
         * prepared by SCHED_LARGE_PREPARERS workers at most, after the normal ones: their senders
         * cannot hold every worker. */
        job = isn_edf_pop(&s->large_prepare_queue);
        large = true;
        atomic_fetch_add(&s->large_preparing, 1);
        atomic_fetch_sub(&s->large_pending, 1);
    }
    if (!job) return false;
    atomic_fetch_sub(&s->prepare_pending, 1);
    double sojourn = now > job->enqueued_ns ? (double)(now - job->enqueued_ns) : 0.0;
    COUNT(s->prepare_waits);
    ADD(s->prepare_wait_ns, (uint64_t)sojourn);
    if (job->enqueued_ns > job->received_ns) ADD(s->arrival_wait_ns, job->enqueued_ns - job->received_ns);
    if (!large) {
        atomic_store_explicit(&s->prepare_sojourn_ns, sojourn, memory_order_relaxed);
        uint32_t backlog = cpu_servers(s);
        isn_departure_meter_taken(&s->prepare_departures, s->prepare_queue.size, backlog, now);
        atomic_store_explicit(&s->prepare_departure_ns, s->prepare_departures.per_job_ns,
                              memory_order_relaxed);
        isn_codel_observe(&s->prepare_codel, sojourn, now, atomic_load_explicit(&s->shed_arrival_codel, memory_order_relaxed));
        atomic_store_explicit(&s->prepare_standing, s->prepare_codel.standing, memory_order_relaxed);
        atomic_store_explicit(&s->prepare_bounding, s->prepare_codel.bounding, memory_order_relaxed);
    }
    double admit_by = admit_by_ns(s, job->received_ns, job->deadline_ns);
    /* Refused unprepared: past its admission point nothing can admit it, and in a standing
     * backlog a job that waited past the target makes room for fresher ones (CoDel). */
    bool late = job->deadline_ns && now < job->deadline_ns && (double)now >= admit_by;
    bool unworthy = late || (s->config.codel_drops_waited && job->deadline_ns && now < job->deadline_ns && !large &&
                             isn_codel_drops(&s->prepare_codel, sojourn, admit_by - (double)job->received_ns));
    w->taken[w->taken_count].job = job;
    w->taken[w->taken_count].unworthy = unworthy;
    w->taken[w->taken_count].late = late;
    w->taken[w->taken_count].large = large;
    w->taken_count++;
    return true;
}

/* Takes the next jobs to prepare: from a long queue several at once (a share of the backlog that
 * leaves the other workers as much), since the queue's lock, taken once per job by a dozen workers
 * and the loops, was where workers waited most. False when there were none. */
static bool take_preparations(isn_scheduler *s, sched_worker *w) {
    w->taken_count = w->taken_next = 0;
    uint32_t want = normal_pending(s) / cpu_servers(s);
    want = want < 1 ? 1 : want > SCHED_PREPARE_TAKE ? SCHED_PREPARE_TAKE : want;
    uint64_t now = isn_now_ns();
    pthread_mutex_lock(&s->prepare_lock);
    while (w->taken_count < want && take_one_locked(s, w, now))
        if (w->taken[w->taken_count - 1].large) break;
    pthread_mutex_unlock(&s->prepare_lock);
    return w->taken_count > 0;
}

/* A worker prepares the next job it took (taking more when it has none), and admits it. False when
 * there was none. Preparing is short and decides where the job goes, so it comes before all CPU work. */
static bool prepare_one(isn_scheduler *s, sched_worker *w) {
    if (w->taken_next == w->taken_count && !take_preparations(s, w)) return false;
    isn_job *job = w->taken[w->taken_next].job;
    bool unworthy = w->taken[w->taken_next].unworthy, late = w->taken[w->taken_next].late,
         large = w->taken[w->taken_next].large;
    w->taken_next++;
    uint64_t now = isn_now_ns();
    job->preparation_ns = now > job->enqueued_ns ? (double)(now - job->enqueued_ns) : 0.0;
    w->prepared_in_row++;
    double took_ns = 0;
    if (unworthy) {
        COUNT(s->shed_overload);
        COUNT(s->shed_unprepared);
        if (late) COUNT(s->shed_unprepared_late);
        job->refusal = (int)ISN_SUBMIT_SHED_LATE;
        sched_finish(s, job, ISN_JOB_REFUSED);
    } else if (job->deadline_ns && now >= job->deadline_ns) {
        sched_finish(s, job, ISN_JOB_DEADLINE_EXCEEDED);
    } else if (atomic_load_explicit(&s->abandon, memory_order_relaxed)) {
        sched_finish(s, job, ISN_JOB_ABANDONED);
    } else if (!prepare_timed(s, job, w->state, &took_ns)) {
        COUNT(s->refused_prepare);
        job->refusal = 0;
        sched_finish(s, job, ISN_JOB_REFUSED);
    } else {
        COUNT(s->prepared);
        job->preparation_ns += took_ns;
        isn_submit_result result = admit(s, job, took_ns);
        if (result != ISN_SUBMIT_QUEUED) {
            job->refusal = (int)result;
            sched_finish(s, job, ISN_JOB_REFUSED);
        }
    }
    if (large) {
        atomic_fetch_sub(&s->large_preparing, 1);
        if (large_takeable(s) && atomic_load(&s->idle.count)) sched_wake_idle_workers(s, false);
    }
    return true;
}

/* A gated worker before it takes work: a spare (config.spare_workers) while enough of the loops whose cores it
 * works are idle, a standby worker (config.standby_workers) while it is wanted. One that may not rests: it holds
 * no job (its deque is left to thieves), admission does not count it, and it looks again after rest_for. */
static bool gate_open(isn_scheduler *s, sched_worker *w) {
    bool open = w->spare_rank ? s->config.idle_threads(s->config.idle_threads_user) >= w->spare_rank
                              : s->config.standby_wanted(s->config.user);
    if (open != w->resting) return open;
    w->resting = !open;
    _Atomic uint32_t *resting = w->spare_rank ? &s->spares_resting : &s->standby_resting;
    if (open) atomic_fetch_sub_explicit(resting, 1, memory_order_relaxed);
    else atomic_fetch_add_explicit(resting, 1, memory_order_relaxed);
    if (!open && w->spare_rank) COUNT(s->spare_rests);
    return open;
}

/* A resting worker's pause before it looks again; true when the scheduler stops meanwhile. */
static bool rest_for(isn_scheduler *s, uint64_t ns) {
    pthread_mutex_lock(&s->lock);
    bool stopping = s->stopping;
    pthread_mutex_unlock(&s->lock);
    if (stopping) return true;
    struct timespec pause = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {}
    return false;
}

static void *worker_main(void *arg) {
    sched_worker *w = arg;
    isn_scheduler *s = w->scheduler;
    lower_worker_priority(s, w->id);
    w->state = s->config.worker_init ? s->config.worker_init(s->config.user, w->id) : w;
    pthread_mutex_lock(&s->lock);
    if (w->state) s->ready++;
    else s->failed++;
    pthread_cond_broadcast(&s->ready_changed);
    pthread_mutex_unlock(&s->lock);
    if (!w->state) return NULL;

    isn_job *dead[SCHED_MAX_DEAD];
    for (;;) {
        if ((w->spare_rank || w->standby) && w->taken_next == w->taken_count && !gate_open(s, w)) {
            if (rest_for(s, w->spare_rank ? SCHED_SPARE_RECHECK_NS : SCHED_STANDBY_RECHECK_NS)) break;
            continue;
        }
        /* A landed GPU batch's answers are the nearest their deadlines: helping with them comes first. */
        if (sched_help_landings(s, w->state)) continue;
        /* Preparing comes first, but a few at a time: queued work must not starve under a flood. */
        bool holds_taken = w->taken_next < w->taken_count;
        if ((holds_taken || (w->prepared_in_row < SCHED_PREPARE_BURST &&
                             atomic_load_explicit(&s->prepare_pending, memory_order_relaxed))) &&
            prepare_one(s, w))
            continue;
        w->prepared_in_row = 0;
        isn_job *job = isn_deque_pop(&w->deque);
        if (job) {
            atomic_fetch_sub_explicit(&s->deque_jobs, 1, memory_order_relaxed);
            run_cpu_job(s, w, job, true);
            continue;
        }
        uint32_t num_dead = 0;
        uint64_t now = isn_now_ns();
        pthread_mutex_lock(&s->lock);
        job = take_shared(s, now, dead, &num_dead, SCHED_MAX_DEAD);
        if (job) grab_extra(s, w);
        pthread_mutex_unlock(&s->lock);
        for (uint32_t i = 0; i < num_dead; i++) sched_finish(s, dead[i], ISN_JOB_DEADLINE_EXCEEDED);
        if (job) {
            run_cpu_job(s, w, job, false);
            continue;
        }
        if (num_dead) continue;
        job = steal_from_others(s, w);
        if (job) {
            run_cpu_job(s, w, job, true);
            continue;
        }
        pthread_mutex_lock(&s->lock);
        if (s->stopping) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        sched_idle_announce(&s->idle, w->id); /* before the last look: see idle_workers.c */
        bool idle = !s->queues[ISN_QUEUE_CPU].size && !s->queues[ISN_QUEUE_UNDECIDED].size && !preparation_waiting(s) &&
                    !sched_landings_waiting(s);
        pthread_mutex_unlock(&s->lock);
        /* Deques are not under the lock: a timed wait bounds how long stealable work can sit. */
        sched_idle_sleep(&s->idle, w->id, idle, isn_now_ns() + SCHED_IDLE_POLL_NS);
    }
    if (s->config.worker_free) s->config.worker_free(s->config.user, w->state);
    return NULL;
}

/* ------------------------------------------------------------------ start, stop */

static int init_cond(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

static void free_devices(isn_scheduler *s) {
    for (uint32_t i = 0; i < s->num_own_gpus; i++) {
        if (s->own_gpus_real) isn_gpu_backend_device_free(&s->own_gpus[i]);
        else isn_gpu_sim_free(&s->own_gpus[i]);
    }
    free(s->own_gpus);
    s->own_gpus = NULL;
    s->num_own_gpus = 0;
}

/* The devices the configuration names (the real backends or simulated ones) become config.gpus, and
 * the cost model's GPU side starts from what is known of them. 0, or -1 with err. */
static int make_devices(isn_scheduler *s, bool model_loaded, char *err, size_t err_len) {
    isn_scheduler_config *c = &s->config;
    if (!c->num_gpu_backends && !c->simulated_gpus) return 0;
    if (c->num_gpu_backends && c->simulated_gpus) {
        snprintf(err, err_len, "scheduler: real GPU backends and simulated GPUs are exclusive");
        return -1;
    }
    if (c->num_gpu_backends > ISN_SCHED_MAX_GPUS) {
        snprintf(err, err_len, "scheduler: %u GPU backends (at most %d)", c->num_gpu_backends, ISN_SCHED_MAX_GPUS);
        return -1;
    }
    uint32_t n = c->num_gpu_backends ? c->num_gpu_backends : c->simulated_gpus;
    s->own_gpus = calloc(n, sizeof *s->own_gpus);
    if (!s->own_gpus) {
        snprintf(err, err_len, "scheduler: out of memory for %u GPU devices", n);
        return -1;
    }
    if (c->num_gpu_backends) {
        s->own_gpus_real = true; /* free_devices frees them as real ones */
        for (uint32_t i = 0; i < n; i++) {
            if (isn_gpu_backend_device_new(c->gpu_backends[i], c->gpu_backend_streams, c->gpu_backend_max_batch, i,
                                           &s->own_gpus[i]) < 0) {
                free_devices(s);
                snprintf(err, err_len, "scheduler: out of memory for GPU device %u", i);
                return -1;
            }
            s->num_own_gpus++;
        }
        /* Until it has measured batches, the GPU side starts from the H200 numbers of issue 5 (about
         * 10 G postings/s decode + score, ~0.1 ms per launch and wait, ~10 us per query). */
        c->batch.launch_ns = REAL_GPU_START_LAUNCH_NS;
        if (!model_loaded) {
            isn_gpu_sim_config start;
            isn_gpu_sim_config_default(&start);
            start.launch_ns = c->batch.launch_ns;
            start.per_posting_ns = REAL_GPU_START_PER_POSTING_NS;
            start.per_query_ns = REAL_GPU_START_PER_QUERY_NS;
            isn_cost_model_seed(&s->model, ISN_DEVICE_GPU, isn_gpu_sim_job_ns, &start);
        }
    } else {
        isn_gpu_sim_config sim = c->simulated;
        for (uint32_t i = 0; i < n; i++) {
            sim.seed = i + 1;
            if (isn_gpu_sim_new(&sim, c->batch.max_batch, c->batch.memory_budget, &s->own_gpus[i]) < 0) break;
            s->num_own_gpus++;
        }
        if (s->num_own_gpus < n) {
            free_devices(s);
            snprintf(err, err_len, "scheduler: out of memory for %u simulated GPU devices", n);
            return -1;
        }
        c->batch.launch_ns = sim.launch_ns;
        /* The simulator's latency model is known: the GPU side starts from it instead of learning it
         * under load (a state file's GPU part may be from another simulator setting). */
        isn_cost_model_seed(&s->model, ISN_DEVICE_GPU, isn_gpu_sim_job_ns, &sim);
    }
    c->gpus = s->own_gpus;
    c->num_gpus = s->num_own_gpus;
    return 0;
}

isn_scheduler *isn_scheduler_start(const isn_scheduler_config *config, char *err, size_t err_len) {
    if (!config->run_cpu || !config->complete || config->workers == 0) {
        snprintf(err, err_len, "scheduler: run_cpu, complete and at least one worker are required");
        return NULL;
    }
    if ((config->spare_workers && !config->idle_threads) || (config->standby_workers && !config->standby_wanted) ||
        (uint64_t)config->spare_workers + config->standby_workers >= config->workers) {
        snprintf(err, err_len,
                 "scheduler: %u spare and %u standby workers need idle_threads and standby_wanted, and a worker of its "
                 "own beside them (%u workers)",
                 config->spare_workers, config->standby_workers, config->workers);
        return NULL;
    }
    if (config->queue_capacity == 0 || config->batch.max_batch == 0) {
        snprintf(err, err_len, "scheduler: queue capacity and batch size must be at least 1");
        return NULL;
    }
    isn_scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "scheduler: out of memory");
        return NULL;
    }
    s->config = *config;
    snprintf(s->cost_model_state, sizeof s->cost_model_state, "%s",
             config->cost_model_state ? config->cost_model_state : "");
    s->config.cost_model_state = s->cost_model_state;
    if (config->model) s->model = *config->model;
    else isn_cost_model_init(&s->model);
    bool model_loaded = false;
    if (s->cost_model_state[0]) {
        char why[512];
        int rc = isn_cost_model_load(&s->model, s->cost_model_state, why, sizeof why);
        if (rc < 0) log_warn("cost model state not loaded, starting from the fitted formula: %s", why);
        else if (rc == 0) log_info("cost model state loaded from %s", s->cost_model_state);
        model_loaded = rc == 0;
    }
    if (make_devices(s, model_loaded, err, err_len) < 0) {
        free(s);
        return NULL;
    }
    config = &s->config; /* with the devices made here */
    isn_batch_cost_init(&s->batch_cost, config->batch.launch_ns, SCHED_BATCH_PER_JOB_START_NS);
    s->start_ns = isn_now_ns();
    /* Held briefly by many threads at a time: a waiter spins a little before it sleeps, instead of
     * paying a futex sleep and wake-up for a hold shorter than either. */
    pthread_mutexattr_t spin_first;
    pthread_mutexattr_init(&spin_first);
    pthread_mutexattr_settype(&spin_first, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&s->lock, &spin_first);
    pthread_mutex_init(&s->prepare_lock, &spin_first);
    pthread_mutexattr_destroy(&spin_first);
    pthread_rwlock_init(&s->model_lock, NULL);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) atomic_init(&s->scale[d], 1.0);
    init_cond(&s->gpu_wake);
    init_cond(&s->ready_changed);
    uint32_t reserve = 0;
    for (uint32_t i = 0; i < config->num_gpus; i++) reserve += config->gpus[i].max_batch;
    s->workers = calloc(config->workers, sizeof *s->workers);
    s->dispatchers = calloc(config->num_gpus ? config->num_gpus : 1, sizeof *s->dispatchers);
    bool ok = s->workers && s->dispatchers && sched_idle_init(&s->idle, config->workers) == 0;
    for (int q = 0; q < ISN_QUEUES && ok; q++)
        ok = isn_edf_init(&s->queues[q], config->queue_capacity + (q == ISN_QUEUE_CPU ? reserve : 0)) == 0;
    ok = ok && isn_edf_init(&s->prepare_queue, config->queue_capacity) == 0 &&
         isn_edf_init(&s->large_prepare_queue, config->queue_capacity) == 0;
    s->prepare_ns = SCHED_PREPARE_START_NS;
    s->cpu_placeable_share = 1.0;
    s->cpu_bound_share = 1.0;
    atomic_store(&s->prepare_ns_published, SCHED_PREPARE_START_NS);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) isn_service_meter_init(&s->meter[d], s->start_ns);
    isn_codel_init(&s->prepare_codel, s->start_ns);
    for (uint32_t i = 0; i < config->workers && ok; i++) {
        sched_worker *w = &s->workers[i];
        w->scheduler = s;
        w->id = i;
        /* the workers of their own cores, then the spares, then the standby workers */
        uint32_t own = config->workers - config->spare_workers - config->standby_workers;
        w->spare_rank = i >= own && i < own + config->spare_workers ? i - own + 1 : 0;
        w->standby = i >= own + config->spare_workers;
        w->rng = 0x9e3779b97f4a7c15ull * (i + 1);
        w->arena = config->arena_bytes ? malloc(config->arena_bytes) : NULL;
        ok = isn_deque_init(&w->deque, config->deque_capacity ? config->deque_capacity : 64) == 0 &&
             (w->arena || !config->arena_bytes);
    }
    if (!ok) {
        snprintf(err, err_len, "scheduler: out of memory for queues of %u jobs", config->queue_capacity);
        isn_scheduler_stop(s);
        return NULL;
    }
    /* Thieves look at w->started: set them all before any thread runs. */
    for (uint32_t i = 0; i < config->workers; i++) atomic_store(&s->workers[i].started, true);
    uint32_t spawned = 0;
    for (uint32_t i = 0; i < config->workers; i++) {
        if (pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]) != 0) {
            atomic_store(&s->workers[i].started, false);
            pthread_mutex_lock(&s->lock);
            s->failed++;
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        spawned++;
        char name[32];
        snprintf(name, sizeof name, "isn-cpu-%u", i);
        name[15] = '\0'; /* the kernel's limit */
        pthread_setname_np(s->workers[i].thread, name);
    }
    s->num_dispatchers = config->num_gpus;
    for (uint32_t i = 0; i < config->num_gpus; i++) {
        if (sched_start_dispatcher(s, i) != 0) {
            pthread_mutex_lock(&s->lock);
            s->failed++;
            pthread_mutex_unlock(&s->lock);
        }
    }
    (void)spawned;
    pthread_mutex_lock(&s->lock);
    while (s->ready + s->failed < config->workers + config->num_gpus) pthread_cond_wait(&s->ready_changed, &s->lock);
    uint32_t failed = s->failed;
    pthread_mutex_unlock(&s->lock);
    if (failed) {
        snprintf(err, err_len, "scheduler: %u of %u threads could not start (out of memory or threads)", failed,
                 config->workers + config->num_gpus);
        isn_scheduler_stop(s);
        return NULL;
    }
    s->serving = true;
    return s;
}

void isn_scheduler_abandon_queued(isn_scheduler *s) { atomic_store(&s->abandon, true); }

void isn_scheduler_stop(isn_scheduler *s) {
    if (!s) return;
    log_info("idle workers: %llu wakes posted, %llu passed on by a worker that did not wait",
             (unsigned long long)atomic_load(&s->idle.woken), (unsigned long long)atomic_load(&s->idle.passed_on));
    pthread_mutex_lock(&s->prepare_lock);
    s->prepare_closed = true;
    pthread_mutex_unlock(&s->prepare_lock);
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    sched_wake_idle_workers(s, true);
    pthread_cond_broadcast(&s->gpu_wake);
    pthread_mutex_unlock(&s->lock);
    for (uint32_t i = 0; s->workers && i < s->config.workers; i++)
        if (atomic_load(&s->workers[i].started)) pthread_join(s->workers[i].thread, NULL);
    for (uint32_t i = 0; s->dispatchers && i < s->num_dispatchers; i++)
        if (s->dispatchers[i].started) pthread_join(s->dispatchers[i].thread, NULL);
    /* Whatever is left was never run. */
    for (uint32_t i = 0; s->workers && i < s->config.workers; i++) {
        isn_job *job;
        if (s->workers[i].deque.slots)
            while ((job = isn_deque_pop(&s->workers[i].deque))) sched_finish(s, job, ISN_JOB_ABANDONED);
        isn_deque_destroy(&s->workers[i].deque);
        free(s->workers[i].arena);
    }
    for (int q = 0; q < ISN_QUEUES; q++) {
        isn_job *job;
        while (s->queues[q].heap && (job = isn_edf_pop(&s->queues[q]))) sched_finish(s, job, ISN_JOB_ABANDONED);
        isn_edf_destroy(&s->queues[q]);
    }
    isn_job *unprepared;
    while (s->prepare_queue.heap && (unprepared = isn_edf_pop(&s->prepare_queue)))
        sched_finish(s, unprepared, ISN_JOB_ABANDONED);
    while (s->large_prepare_queue.heap && (unprepared = isn_edf_pop(&s->large_prepare_queue)))
        sched_finish(s, unprepared, ISN_JOB_ABANDONED);
    isn_edf_destroy(&s->prepare_queue);
    isn_edf_destroy(&s->large_prepare_queue);
    for (uint32_t i = 0; s->dispatchers && i < s->num_dispatchers; i++) {
        free(s->dispatchers[i].batch);
        for (uint32_t f = 0; f < SCHED_MAX_IN_FLIGHT; f++) free(s->dispatchers[i].flights[f].jobs);
        sched_landings_free(&s->dispatchers[i]);
    }
    if (s->cost_model_state[0] && s->serving) {
        char why[512];
        if (isn_cost_model_save(&s->model, s->cost_model_state, why, sizeof why) < 0)
            log_warn("cost model state not saved: %s", why);
    }
    free_devices(s);
    free(s->workers);
    free(s->dispatchers);
    sched_idle_destroy(&s->idle);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->prepare_lock);
    pthread_rwlock_destroy(&s->model_lock);
    pthread_cond_destroy(&s->gpu_wake);
    pthread_cond_destroy(&s->ready_changed);
    free(s);
}

/* ------------------------------------------------------------------ stats */

void isn_scheduler_get_stats(isn_scheduler *s, isn_scheduler_stats *st) {
    memset(st, 0, sizeof *st);
    st->submitted = LOAD(s->submitted);
    st->completed = LOAD(s->completed);
    st->prepared = LOAD(s->prepared);
    st->refused_prepare = LOAD(s->refused_prepare);
    st->spare_workers = s->config.spare_workers;
    st->spares_resting = LOAD(s->spares_resting);
    st->spare_rests = LOAD(s->spare_rests);
    st->standby_workers = s->config.standby_workers;
    st->standby_resting = LOAD(s->standby_resting);
    st->shed_unprepared = LOAD(s->shed_unprepared);
    st->shed_unprepared_late = LOAD(s->shed_unprepared_late);
    st->shed_arrival_codel = LOAD(s->shed_arrival_codel);
    st->shed_routed = LOAD(s->shed_routed);
    st->prepare_waits = LOAD(s->prepare_waits);
    st->arrival_wait_seconds_sum = (double)LOAD(s->arrival_wait_ns) / 1e9;
    st->prepare_wait_seconds_sum = (double)LOAD(s->prepare_wait_ns) / 1e9;
    st->shed_full = LOAD(s->shed_full);
    st->shed_overload = LOAD(s->shed_overload);
    st->degraded = LOAD(s->degraded);
    st->dropped_dead = LOAD(s->dropped_dead);
    st->partial = LOAD(s->partial);
    st->abandoned = LOAD(s->abandoned);
    for (int q = 0; q < 3; q++) st->routed[q] = LOAD(s->routed[q]);
    st->stolen_deque = LOAD(s->stolen_deque);
    st->stolen_gpu = LOAD(s->stolen_gpu);
    st->undecided_cpu = LOAD(s->undecided_cpu);
    st->undecided_gpu = LOAD(s->undecided_gpu);
    st->batches = LOAD(s->batches);
    st->batch_jobs = LOAD(s->batch_jobs);
    for (int r = 0; r < ISN_FLUSH_REASONS; r++) st->batch_flush[r] = LOAD(s->batch_flush[r]);
    st->gpu_failures = LOAD(s->gpu_failures);
    st->gpu_reruns = LOAD(s->gpu_reruns);
    st->gpu_answers_helped = LOAD(s->gpu_answers_helped);
    for (int p = 0; p < ISN_DISPATCHER_PHASES; p++) st->dispatcher_seconds[p] = (double)LOAD(s->dispatcher_ns[p]) / 1e9;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        st->ran_on[d] = LOAD(s->ran_on[d]);
        st->wait_seconds_sum[d] = (double)LOAD(s->wait_ns[d]) / 1e9;
        st->wait_count[d] = LOAD(s->wait_count[d]);
        st->busy_seconds[d] = (double)LOAD(s->busy_ns[d]) / 1e9;
    }
    st->running = atomic_load_explicit(&s->running, memory_order_relaxed);
    st->uptime_seconds = (double)(isn_now_ns() - s->start_ns) / 1e9;
    st->workers = s->config.workers;
    st->gpus = s->num_dispatchers;
    pthread_mutex_lock(&s->lock);
    for (int q = 0; q < ISN_QUEUES; q++) st->queue_depth[q] = s->queues[q].size;
    st->prepare_depth = atomic_load(&s->prepare_pending);
    st->batch_fixed_seconds = isn_batch_cost_fixed_ns(&s->batch_cost) / 1e9;
    st->batch_mape = s->batch_ape_count ? 100.0 * s->batch_ape_sum / (double)s->batch_ape_count : NAN;
    st->batch_per_job_seconds = isn_batch_cost_per_job_ns(&s->batch_cost) / 1e9;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) st->measured_job_seconds[d] = s->meter[d].job_ns / 1e9;
    st->prepare_backlog_standing = atomic_load(&s->prepare_standing);
    pthread_mutex_unlock(&s->lock);
    for (uint32_t i = 0; i < s->config.workers; i++) st->deque_depth += isn_deque_size(&s->workers[i].deque);
    pthread_rwlock_rdlock(&s->model_lock);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        st->mape[d] = isn_cost_mape(&s->model, (isn_device_kind)d);
        st->service_scale[d] = scale_locked(s, (isn_device_kind)d);
        st->model_updates[d] = s->model.device[d].updates;
    }
    pthread_rwlock_unlock(&s->model_lock);
}

uint32_t isn_scheduler_gpu_count(const isn_scheduler *s) { return s->own_gpus_real ? s->num_own_gpus : 0; }

isn_gpu_backend *isn_scheduler_gpu_replace(isn_scheduler *s, uint32_t device, isn_gpu_backend *backend) {
    if (!s->own_gpus_real || device >= s->num_own_gpus) return NULL;
    return isn_gpu_backend_device_replace(&s->own_gpus[device], backend);
}

bool isn_scheduler_gpu_health(isn_scheduler *s, uint32_t device, isn_gpu_health *health) {
    if (!s->own_gpus_real || device >= s->num_own_gpus) return false;
    isn_gpu_backend_device_health(&s->own_gpus[device], health);
    return true;
}

void sched_get_model(isn_scheduler *s, isn_cost_model *model) {
    pthread_rwlock_rdlock(&s->model_lock);
    *model = s->model;
    pthread_rwlock_unlock(&s->model_lock);
}
