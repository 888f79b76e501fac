/* The scheduler at submit: admission (the waits each device would give a job, CoDel at arrival, the
 * deadline's share) and routing of a job to a queue, and preparing it first where submit does. */
#include <assert.h>
#include <math.h>

#include "scheduler/scheduler_internal.h"

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
double sched_gpu_ahead_ns(const isn_scheduler *s, bool with_undecided) {
    const isn_edf_queue *q = s->queues;
    return q[ISN_QUEUE_GPU].backlog_ns[ISN_DEVICE_GPU] +
           (with_undecided ? q[ISN_QUEUE_UNDECIDED].backlog_ns[ISN_DEVICE_GPU] : 0.0) + s->gpu_held_ns +
           s->gpu_inflight_ns + isn_batch_cost_fixed_ns(&s->batch_cost) * gpu_batches_queued(s);
}

/* Normal (not large) requests waiting to be prepared. The two counters are read apart: a large one
 * counted in one and not yet in the other must not make it negative. */
uint32_t sched_normal_pending(isn_scheduler *s) {
    int normal = (int)(atomic_load(&s->prepare_pending) - atomic_load(&s->large_pending));
    return normal > 0 ? (uint32_t)normal : 0;
}

/* How long the normal preparation queue has gone without moving (prepare_moved_ns), counted from the
 * node's last resumption from a stall (resumed_ns) when that came later: a stall of the whole node holds
 * the queue still and its workers with it, who go on the moment it ends, so the stillness it leaves says
 * nothing of their wait. Counted whole, it refused the requests the stall had left in the sockets (they
 * are read at once, before the workers, resumed in their jobs, take the next), each after waiting
 * through the stall. */
static double queue_still_ns(isn_scheduler *s, uint64_t now) {
    uint64_t moved = atomic_load_explicit(&s->prepare_moved_ns, memory_order_relaxed);
    uint64_t resumed = atomic_load_explicit(&s->resumed_ns, memory_order_relaxed);
    if (resumed > moved) moved = resumed;
    return now > moved ? (double)(now - moved) : 0.0;
}

void isn_scheduler_note_resume(isn_scheduler *s, uint64_t now) {
    uint64_t resumed = atomic_load_explicit(&s->resumed_ns, memory_order_relaxed);
    if (now <= resumed + SCHED_RESUME_NOTE_NS) return; /* the same stall's backlog, read request by request */
    atomic_store_explicit(&s->resumed_ns, now, memory_order_relaxed);
    if (now > resumed + ISN_SCHEDULER_STALL_SEEN_NS) COUNT(s->stalls_seen);
}

/* A request read now that arrived at received_ns, by a loop that keeps up with its sockets
 * (reader_keeps_up), after over ISN_SCHEDULER_STALL_SEEN_NS unread: it waited through a stall, which
 * ended about now. Under overload the loops read old requests because they fall behind, and say they do
 * not keep up. */
static void note_resume_if_stalled(isn_scheduler *s, uint64_t received_ns, uint64_t now, bool reader_keeps_up) {
    if (reader_keeps_up && now >= received_ns + ISN_SCHEDULER_STALL_SEEN_NS) isn_scheduler_note_resume(s, now);
}

/* How long a request queued now waits to be prepared: the count times a preparation's time
 * (estimate_ns) assumes every worker prepares, and in the hybrid the workers prepare between CPU jobs;
 * so at least the count times the queue's measured time between departures, and at least as long as
 * the queue has gone without moving (nothing taken, nothing let into it empty): while the workers are
 * held elsewhere the count says nothing of the wait, and on the estimate alone requests let in waited
 * past their admission point and were refused after that wait. Not the wait of the last one taken:
 * after a stall every request taken in the drain that follows had waited through it, and that wait,
 * carried to each arrival until a fresh one was taken, refused requests that the drained queue would
 * have prepared at once. */
static double prepare_wait_floor(isn_scheduler *s, uint32_t pending, double estimate_ns, uint64_t now) {
    double drained = (double)pending * atomic_load_explicit(&s->prepare_departure_ns, memory_order_relaxed);
    double still = queue_still_ns(s, now);
    double wait = estimate_ns > drained ? estimate_ns : drained;
    return still > wait ? still : wait;
}

double sched_prepare_still_ns(isn_scheduler *s, uint64_t now) { return sched_normal_pending(s) ? queue_still_ns(s, now) : 0.0; }

/* Under the lock: how long the workers need for the unprepared jobs queued now (they come first).
 * prepare_ns is measured wall time, contention included: no scale applies to it. */
static double preparing_ns(isn_scheduler *s, uint64_t now) {
    double workers = sched_cpu_servers(s);
    uint32_t pending = sched_normal_pending(s);
    return pending ? prepare_wait_floor(s, pending, (double)pending * s->prepare_ns / workers, now) : 0.0;
}

/* preparing_ns without the lock: the pending count and the published preparation time. */
double sched_preparing_ns_quick(isn_scheduler *s, uint64_t now) {
    double workers = sched_cpu_servers(s);
    uint32_t pending = sched_normal_pending(s);
    return pending ? prepare_wait_floor(s, pending,
                                        (double)pending *
                                            atomic_load_explicit(&s->prepare_ns_published, memory_order_relaxed) /
                                            workers,
                                        now)
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
static void arrival_view_of(isn_scheduler *s, uint64_t now, const double *wait, sched_arrival_view *view) {
    double typical = s->meter[ISN_DEVICE_CPU].job_ns > s->arrival_cost_ns ? s->meter[ISN_DEVICE_CPU].job_ns : s->arrival_cost_ns;
    double workers = sched_cpu_servers(s);
    view->preparing = preparing_ns(s, now);
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
sched_arrival_verdict sched_arrival_judge_view(const sched_arrival_view *view, double remaining_ns, uint32_t pending,
                                               double preparing_now, double credit_room_ns, sched_arrival_miss *miss) {
    if (remaining_ns <= 0) return SCHED_ARRIVAL_LATE;
    double ahead = (double)pending * view->per_pending;
    /* Every request is prepared before either device takes it: the preparations' wait grown since the
     * view was published holds it back on both (counted on the CPU alone, the GPU's view let bursts in
     * that then waited past their admission point to be prepared). */
    double grown = preparing_now > view->preparing ? preparing_now - view->preparing : 0.0;
    double preparing = view->preparing + grown;
    /* It would be refused unprepared, after that wait (take_one_locked). */
    if (preparing >= remaining_ns) return SCHED_ARRIVAL_PREPARING;
    /* Routing moves its admission point by the time it was prepared in (preparation_credit_ns). */
    double credit = SCHED_ARRIVAL_SHARE * (preparing < credit_room_ns ? preparing : credit_room_ns);
    double cpu_done = view->cpu_done + ahead + grown, gpu_done = view->gpu_done + grown;
    double cpu_start = view->cpu_start + ahead + grown, gpu_start = view->gpu_start + grown;
    double done = cpu_done < gpu_done ? cpu_done : gpu_done;
    double start = cpu_start < gpu_start ? cpu_start : gpu_start;
    if (arrival_admits(remaining_ns + credit, done, start)) return SCHED_ARRIVAL_ADMITS;
    if (miss) *miss = (sched_arrival_miss){.done_ns = done, .bound_ns = remaining_ns + credit};
    return SCHED_ARRIVAL_WAIT;
}

/* Counts an arrival refusal by its bound (a wait refusal with its predicted finish and the bound it
 * missed), and tells whether the verdict admits. */
static bool arrival_verdict_admits(isn_scheduler *s, sched_arrival_verdict verdict, const sched_arrival_miss *miss) {
    if (verdict == SCHED_ARRIVAL_ADMITS) return true;
    isn_striped_add(&s->shed_arrival[verdict], 1);
    if (verdict == SCHED_ARRIVAL_WAIT && isfinite(miss->done_ns)) {
        isn_striped_add(&s->arrival_refused_done_ns, (uint64_t)miss->done_ns);
        isn_striped_add(&s->arrival_refused_bound_ns, (uint64_t)miss->bound_ns);
    }
    return false;
}

/* Whether CoDel refuses a request arriving now (received then, admitted by admit_by): bounding, and the
 * preparations queued ahead (preparing_ns, read without the lock) would hold it near CoDel's target. */
static bool codel_refuses_arrival(isn_scheduler *s, uint64_t received_ns, double admit_by, double preparing_ns) {
    if (!isn_codel_refuses_arrival(atomic_load_explicit(&s->prepare_bounding, memory_order_relaxed), preparing_ns,
                                   admit_by - (double)received_ns))
        return false;
    COUNT(s->shed_arrival_codel);
    return true;
}

/* The arrival view and each device's wait, for the checks made without the lock
 * (isn_scheduler_may_admit_quick, sched_gpu_clearly_wins): refreshed by every full arrival check (`fresh`,
 * which gets the view it decides on), and by routing at most every SCHED_PUBLISH_EVERY_NS. Every loop
 * reads them at each request; written at each job's routing, their lines left the loops' caches faster
 * than a loop read them, and each read waited for the writer's core. */
static void publish_waits(isn_scheduler *s, uint64_t now, const double *wait, sched_arrival_view *fresh) {
    /* now is the caller's reading, taken before its lock: one taken later may have published already */
    uint64_t last = atomic_load_explicit(&s->waits_published_at_ns, memory_order_relaxed);
    if (!fresh && (now < last || now - last < SCHED_PUBLISH_EVERY_NS)) return;
    sched_arrival_view own, *view = fresh ? fresh : &own;
    arrival_view_of(s, now, wait, view);
    atomic_store_explicit(&s->arrival_cpu_done_ns, view->cpu_done, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_cpu_start_ns, view->cpu_start, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_gpu_done_ns, view->gpu_done, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_gpu_start_ns, view->gpu_start, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_per_pending_ns, view->per_pending, memory_order_relaxed);
    atomic_store_explicit(&s->arrival_preparing_ns, view->preparing, memory_order_relaxed);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        atomic_store_explicit(&s->published_wait_ns[d], wait[d], memory_order_relaxed);
    if (now > last) atomic_store_explicit(&s->waits_published_at_ns, now, memory_order_relaxed);
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
static void queue_waits(isn_scheduler *s, uint64_t now, const double *scale, double *wait, sched_arrival_view *view) {
    const isn_edf_queue *q = s->queues;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        isn_service_meter_sample(&s->meter[d], LOAD(s->busy_ns[d]), LOAD(s->ran_on[d]), now);
    double committed = (double)atomic_load_explicit(&s->cpu_committed_ns, memory_order_relaxed);
    double workers = sched_cpu_servers(s);
    double model_cpu = scale[ISN_DEVICE_CPU] *
                       (q[ISN_QUEUE_CPU].backlog_ns[ISN_DEVICE_CPU] + q[ISN_QUEUE_UNDECIDED].backlog_ns[ISN_DEVICE_CPU] +
                        (committed > 0 ? committed : 0)) /
                       workers;
    double measured_cpu = isn_service_meter_wait_ns(&s->meter[ISN_DEVICE_CPU], cpu_jobs_ahead(s), workers);
    const isn_job *head = isn_edf_peek(&q[ISN_QUEUE_CPU]);
    double oldest = head && now > head->enqueued_ns ? (double)(now - head->enqueued_ns) : 0.0;
    /* workers prepare before they search */
    wait[ISN_DEVICE_CPU] = isn_admission_wait_ns(model_cpu, measured_cpu, oldest) + preparing_ns(s, now);
    uint32_t gpus = sched_available_gpus(s, now);
    if (!gpus) {
        wait[ISN_DEVICE_GPU] = INFINITY;
        publish_waits(s, now, wait, view);
        return;
    }
    double model_gpu = scale[ISN_DEVICE_GPU] * sched_gpu_ahead_ns(s, true) / gpus;
    double measured_gpu = isn_service_meter_wait_ns(
        &s->meter[ISN_DEVICE_GPU], (double)gpu_queued(s) + s->gpu_held_jobs + s->gpu_inflight_jobs, gpus);
    wait[ISN_DEVICE_GPU] = isn_admission_wait_ns(model_gpu, measured_gpu, 0.0);
    publish_waits(s, now, wait, view);
}

static double admit_fraction(const isn_scheduler *s) {
    return s->config.admit_fraction < s->config.early_stop_fraction ? s->config.admit_fraction
                                                                    : s->config.early_stop_fraction;
}

/* When a job must be admitted by: received plus its share of the budget (at most the early-stop
 * point, after which a job answers only partially); the rest is slack for prediction error and the
 * reply's way back. 0: no deadline. */
double sched_admit_by_ns(const isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns) {
    if (!deadline_ns) return 0;
    return (double)received_ns + admit_fraction(s) * (double)(deadline_ns - received_ns);
}

/* The admission point of a job looked at now (isn_scheduler_may_admit says why): sched_admit_by_ns, or,
 * where its reader keeps up, now plus the same share of what is left before the early-stop point,
 * whichever is later. The second grows by only part of the job's wait, so that the wait still counts
 * against it, and reaches now at the early-stop point, after which the job could only answer in part. */
double sched_admit_by_at_ns(const isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, uint64_t now,
                            bool reader_keeps_up) {
    if (!deadline_ns) return 0;
    double first = sched_admit_by_ns(s, received_ns, deadline_ns);
    if (!reader_keeps_up) return first;
    double stop_at = (double)received_ns + s->config.early_stop_fraction * (double)(deadline_ns - received_ns);
    if ((double)now >= stop_at) return first;
    double moved = (double)now + admit_fraction(s) * (stop_at - (double)now);
    return moved > first ? moved : first;
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
    double admit_by = sched_admit_by_at_ns(s, job->received_ns, job->deadline_ns, now, job->reader_keeps_up);
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
    queue_waits(s, now, scale, wait, NULL);
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
isn_submit_result sched_admit_prepared(isn_scheduler *s, isn_job *job, double prepare_ns) {
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
    double scale[ISN_DEVICE_KINDS] = {sched_scale(s, ISN_DEVICE_CPU, now), sched_scale(s, ISN_DEVICE_GPU, now)};

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
        isn_striped_add(&s->shed_overload, 1);
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

isn_submit_result sched_admit(isn_scheduler *s, isn_job *job) { return sched_admit_prepared(s, job, -1.0); }

/* Under the lock: whether a job received then, due then, could still start in time on some device. */
static bool may_admit_locked(isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, uint64_t now,
                             const double *scale, bool reader_keeps_up) {
    if (!deadline_ns) return true;
    /* CoDel's target follows the job's own admission budget, not how much of it is left */
    if (codel_refuses_arrival(s, received_ns, sched_admit_by_ns(s, received_ns, deadline_ns), sched_preparing_ns_quick(s, now)))
        return false;
    double admit_by = sched_admit_by_at_ns(s, received_ns, deadline_ns, now, reader_keeps_up);
    double remaining = SCHED_ARRIVAL_SHARE * (admit_by - (double)now);
    double wait[ISN_DEVICE_KINDS];
    sched_arrival_view view;
    queue_waits(s, now, scale, wait, &view); /* and publishes it when due */
    sched_arrival_miss miss;
    sched_arrival_verdict verdict = sched_arrival_judge_view(
        &view, remaining, sched_normal_pending(s), preparing_ns(s, now),
        preparation_credit_ns(s, received_ns, deadline_ns, admit_by, INFINITY), &miss);
    return arrival_verdict_admits(s, verdict, &miss);
}

const isn_job isn_job_staged_closed;

void sched_unstage_locked(isn_scheduler *s, isn_job *leave) {
    if (s->prepare_closed) return;
    if (!leave && !atomic_load_explicit(&s->prepare_staged, memory_order_relaxed)) return;
    isn_job *newest = atomic_exchange_explicit(&s->prepare_staged, leave, memory_order_acq_rel), *oldest = NULL;
    while (newest) { /* reversed: the heap breaks ties between equal deadlines by arrival */
        isn_job *next = newest->staged_next;
        newest->staged_next = oldest;
        oldest = newest;
        newest = next;
    }
    for (isn_job *job = oldest, *next; job; job = next) {
        next = job->staged_next;
        job->staged_next = NULL;
        /* its room was reserved in normal_queued when it was staged (stage_for_prepare) */
        bool queued = isn_edf_push(&s->prepare_queue, job);
        assert(queued);
        (void)queued;
    }
}

/* A normal request goes on the staged list without prepare_lock: its room reserved first (the list
 * and the queue never hold more than queue_capacity between them), then counted as pending (before it
 * can be taken, so that the count never runs below zero), then linked in unless the scheduler is
 * stopping. */
static isn_submit_result stage_for_prepare(isn_scheduler *s, isn_job *job) {
    uint32_t queued_before = atomic_fetch_add(&s->normal_queued, 1);
    if (queued_before >= s->config.queue_capacity) {
        atomic_fetch_sub(&s->normal_queued, 1);
        COUNT(s->shed_full);
        return ISN_SUBMIT_SHED_FULL;
    }
    /* a queue that was empty has not been held up: its stillness counts from now (prepare_wait_floor) */
    if (!queued_before) atomic_store_explicit(&s->prepare_moved_ns, job->enqueued_ns, memory_order_relaxed);
    atomic_fetch_add(&s->prepare_pending, 1);
    isn_job *head = atomic_load_explicit(&s->prepare_staged, memory_order_relaxed);
    do {
        if (head == SCHED_STAGED_CLOSED) {
            atomic_fetch_sub(&s->prepare_pending, 1);
            atomic_fetch_sub(&s->normal_queued, 1);
            return ISN_SUBMIT_STOPPED;
        }
        job->staged_next = head;
    } while (!atomic_compare_exchange_weak_explicit(&s->prepare_staged, &head, job, memory_order_release,
                                                    memory_order_relaxed));
    return ISN_SUBMIT_QUEUED;
}

/* A large request, under prepare_lock: its own queue, which the staged list does not feed. */
static isn_submit_result queue_large_for_prepare(isn_scheduler *s, isn_job *job) {
    pthread_mutex_lock(&s->prepare_lock);
    if (s->prepare_closed) {
        pthread_mutex_unlock(&s->prepare_lock);
        return ISN_SUBMIT_STOPPED;
    }
    if (s->large_prepare_queue.size >= s->config.queue_capacity || !isn_edf_push(&s->large_prepare_queue, job)) {
        pthread_mutex_unlock(&s->prepare_lock);
        COUNT(s->shed_full);
        return ISN_SUBMIT_SHED_FULL;
    }
    atomic_fetch_add(&s->large_pending, 1);
    atomic_fetch_add(&s->prepare_pending, 1);
    pthread_mutex_unlock(&s->prepare_lock);
    return ISN_SUBMIT_QUEUED;
}

static bool may_admit_quick_at(isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, bool reader_keeps_up,
                               uint64_t now);

/* Queues a job for a worker to prepare (prepare_one), unless no device could even start it in time
 * (judged from the last admission decision's waits while they are fresh: the request's HEADERS passed
 * the same check). */
static isn_submit_result queue_for_prepare(isn_scheduler *s, isn_job *job) {
    job->enqueued_ns = job->submitted_ns ? job->submitted_ns : isn_now_ns();
    job->refusal = 0;
    if (!job->received_ns) job->received_ns = job->enqueued_ns;
    if (!s->config.prepare) return ISN_SUBMIT_STOPPED;
    if (!may_admit_quick_at(s, job->received_ns, job->deadline_ns, job->reader_keeps_up, job->enqueued_ns))
        return ISN_SUBMIT_SHED_LATE;
    isn_submit_result result = job->prepare_on_worker ? queue_large_for_prepare(s, job) : stage_for_prepare(s, job);
    if (result == ISN_SUBMIT_QUEUED && atomic_load(&s->idle.count)) sched_wake_idle_workers(s, false);
    return result;
}

bool sched_gpu_clearly_wins(isn_scheduler *s, isn_job *job) {
    uint64_t now = isn_now_ns();
    if (!sched_available_gpus(s, now)) return false;
    sched_predict(s, job);
    double scale[ISN_DEVICE_KINDS] = {sched_scale(s, ISN_DEVICE_CPU, now), sched_scale(s, ISN_DEVICE_GPU, now)};
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

bool isn_scheduler_may_admit(isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, bool reader_keeps_up) {
    if (!deadline_ns) return true;
    uint64_t now = isn_now_ns();
    note_resume_if_stalled(s, received_ns, now, reader_keeps_up);
    double scale[ISN_DEVICE_KINDS] = {sched_scale(s, ISN_DEVICE_CPU, now), sched_scale(s, ISN_DEVICE_GPU, now)};
    pthread_mutex_lock(&s->lock);
    bool ok = may_admit_locked(s, received_ns, deadline_ns, now, scale, reader_keeps_up);
    pthread_mutex_unlock(&s->lock);
    if (!ok) isn_striped_add(&s->shed_overload, 1);
    return ok;
}

/* isn_scheduler_may_admit_quick at the caller's reading of the clock. */
static bool may_admit_quick_at(isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, bool reader_keeps_up,
                               uint64_t now) {
    if (!deadline_ns) return true;
    note_resume_if_stalled(s, received_ns, now, reader_keeps_up);
    /* A refusal here reaches no admission decision, so it refreshes nothing: once the published
     * start is older than SCHED_QUICK_STALE_NS the full check runs (and publishes anew), or a refusal
     * based on it would latch. */
    if (now > atomic_load_explicit(&s->waits_published_at_ns, memory_order_relaxed) + SCHED_QUICK_STALE_NS)
        return isn_scheduler_may_admit(s, received_ns, deadline_ns, reader_keeps_up);
    double admit_by = sched_admit_by_at_ns(s, received_ns, deadline_ns, now, reader_keeps_up);
    double remaining = SCHED_ARRIVAL_SHARE * (admit_by - (double)now);
    double credit_room = preparation_credit_ns(s, received_ns, deadline_ns, admit_by, INFINITY);
    sched_arrival_view view;
    published_view(s, &view);
    /* The view alone, with nothing waiting to be prepared, is the most it could admit (what waits only
     * moves the job's start and end later, by more than the credit it earns): when that refuses, the
     * counts that every loop and worker write, whose reads wait for those cores' cache lines, need not be
     * read. Under overload most requests are refused here. CoDel's bound needs them while it is on. */
    sched_arrival_miss miss;
    if (!atomic_load_explicit(&s->prepare_bounding, memory_order_relaxed) &&
        !arrival_verdict_admits(s, sched_arrival_judge_view(&view, remaining, 0, view.preparing, credit_room, &miss), &miss)) {
        isn_striped_add(&s->shed_overload, 1);
        return false;
    }
    double preparing = sched_preparing_ns_quick(s, now); /* read once */
    if (codel_refuses_arrival(s, received_ns, sched_admit_by_ns(s, received_ns, deadline_ns), preparing)) {
        isn_striped_add(&s->shed_overload, 1);
        return false;
    }
    bool ok = arrival_verdict_admits(
        s, sched_arrival_judge_view(&view, remaining, sched_normal_pending(s), preparing, credit_room, &miss), &miss);
    if (!ok) isn_striped_add(&s->shed_overload, 1);
    return ok;
}

bool isn_scheduler_may_admit_quick(isn_scheduler *s, uint64_t received_ns, uint64_t deadline_ns, bool reader_keeps_up) {
    return !deadline_ns || may_admit_quick_at(s, received_ns, deadline_ns, reader_keeps_up, isn_now_ns());
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
    if (!isn_scheduler_may_admit(s, job->received_ns, job->deadline_ns, job->reader_keeps_up)) return ISN_SUBMIT_SHED_LATE;
    /* Few workers and no GPU: the workers are the bottleneck, the submitting thread is not. */
    if (!s->config.prepare(s->config.user, job, s->config.submitter_state)) return ISN_SUBMIT_REFUSED;
    sched_take_features(s, job);
    return sched_admit(s, job);
}
