/* One dispatcher thread per GPU device: forms a batch from the GPU-preferred queue (and undecided
 * jobs when there is room), earliest deadline first and of similar predicted size, sends it when it
 * is full, when the next job would pass the memory budget, when waiting longer would endanger the
 * earliest deadline in it, or when nothing more came for the linger time. Results go back through
 * the same complete() as CPU results; a failed batch is re-run on the CPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "scheduler/scheduler_internal.h"

/* Under the lock: index in the queue of the earliest-deadline job among the first few whose
 * predicted size is close to the batch's first job; the head when there is none. */
static uint32_t pick_similar(const isn_edf_queue *queue, double seed_ns) {
    if (seed_ns <= 0) return 0;
    uint32_t best = UINT32_MAX;
    uint64_t best_deadline = UINT64_MAX;
    uint32_t scan = queue->size < SCHED_GROUP_SCAN ? queue->size : SCHED_GROUP_SCAN;
    for (uint32_t i = 0; i < scan; i++) {
        const isn_job *job = isn_edf_at(queue, i);
        double ratio = job->predicted_ns[ISN_DEVICE_GPU] / seed_ns;
        if (ratio > SCHED_GROUP_RATIO || ratio < 1.0 / SCHED_GROUP_RATIO) continue;
        uint64_t deadline = job->deadline_ns ? job->deadline_ns : UINT64_MAX;
        if (best == UINT32_MAX || deadline < best_deadline) {
            best = i;
            best_deadline = deadline;
        }
    }
    return best == UINT32_MAX ? 0 : best;
}

/* Under the lock: the next candidate for the batch, without taking it. */
static isn_edf_queue *next_source(isn_scheduler *s, double seed_ns, uint32_t *at) {
    isn_edf_queue *queue = NULL;
    if (s->queues[ISN_QUEUE_GPU].size) queue = &s->queues[ISN_QUEUE_GPU];
    else if (s->queues[ISN_QUEUE_UNDECIDED].size) queue = &s->queues[ISN_QUEUE_UNDECIDED];
    if (queue) *at = pick_similar(queue, seed_ns);
    return queue;
}

static uint32_t flights_allowed(const sched_dispatcher *d) {
    uint32_t n = d->device->submit && d->device->complete ? d->device->max_in_flight : 1;
    return n < 1 ? 1 : n > SCHED_MAX_IN_FLIGHT ? SCHED_MAX_IN_FLIGHT : n;
}

/* The time since the dispatcher's last phase change went to `phase`. */
static void phase_ends(isn_scheduler *s, sched_dispatcher *d, isn_dispatcher_phase phase) {
    uint64_t now = isn_now_ns();
    ADD(s->dispatcher_ns[phase], now - d->phase_from_ns);
    d->phase_from_ns = now;
}

/* Unlocked: a batch the device answered (rc 0) or failed (rc -1, err) at end_ns. Returns locked. */
static void answered(isn_scheduler *s, sched_dispatcher *d, sched_flight *f, int rc, uint64_t end, const char *err) {
    isn_job **batch = f->jobs;
    uint32_t n = f->n;
    /* The device's time for this batch alone: a batch sent while the one before still ran waited for it. */
    uint64_t began = f->start_ns > d->device_free_ns ? f->start_ns : d->device_free_ns;
    uint64_t took = end > began ? end - began : 1;
    d->device_free_ns = end;
    ADD(s->busy_ns[ISN_DEVICE_GPU], took);
    if (rc == 0) {
        /* One job of a batch at most teaches the model its share of the batch time past the fixed part
         * (isn_gpu_lesson_of), and the scale the batch's error (sched_learn_spaced); which job rotates. */
        uint32_t learner = (uint32_t)(LOAD(s->batches) % n);
        if (sched_learn_claim(s, ISN_DEVICE_GPU, end)) {
            isn_gpu_lesson lesson = isn_gpu_lesson_of((double)took, f->fixed_ns, f->predicted_ns,
                                                      batch[learner]->predicted_ns[ISN_DEVICE_GPU], n);
            sched_learn_spaced(s, ISN_DEVICE_GPU, &batch[learner]->features, lesson.cost_ns, lesson.wall_ns,
                               lesson.predicted_ns);
        }
        for (uint32_t i = 0; i < n; i++) batch[i]->finished_ns = end;
        ADD(s->ran_on[ISN_DEVICE_GPU], n);
        sched_open_landing(s, d, batch, n);
        pthread_mutex_lock(&s->lock);
        /* The GPU's error as routing sees it: a whole batch's predicted time against its time. */
        if (s->batch_cost.batches >= SCHED_BATCH_WARM_UP) {
            s->batch_ape_sum += fabs(f->predicted_ns - (double)took) / (double)took;
            s->batch_ape_count++;
        }
        isn_batch_cost_learn(&s->batch_cost, n, (double)took);
        s->gpu_inflight_ns -= f->predicted_ns;
        if (s->gpu_inflight_ns < 0) s->gpu_inflight_ns = 0;
        s->gpu_inflight_jobs -= n;
        return;
    }
    /* The device is unhealthy: rest it, and let the CPU answer these jobs. */
    COUNT(s->gpu_failures);
    fprintf(stderr, "isn scheduler: GPU device %u (%s) failed a batch of %u: %s; its jobs run on the CPU\n", d->id,
            d->device->name ? d->device->name : "?", n, err);
    atomic_store(&d->rest_until_ns, end + s->config.gpu_rest_ns);
    pthread_mutex_lock(&s->lock);
    s->gpu_inflight_ns -= f->predicted_ns;
    if (s->gpu_inflight_ns < 0) s->gpu_inflight_ns = 0;
    s->gpu_inflight_jobs -= n;
    for (uint32_t i = 0; i < n; i++) {
        batch[i]->rerun_on_cpu = true;
        batch[i]->queue = ISN_QUEUE_CPU;
        batch[i]->started_ns = 0;
        COUNT(s->gpu_reruns);
        isn_edf_push(&s->queues[ISN_QUEUE_CPU], batch[i]); /* within the reserve kept for this */
    }
    sched_wake_idle_workers(s, true);
}

/* Locked: waits for the oldest batch in flight and answers it. Returns locked. */
static void land_oldest(isn_scheduler *s, sched_dispatcher *d) {
    sched_flight *f = &d->flights[d->oldest];
    d->oldest = (d->oldest + 1) % SCHED_MAX_IN_FLIGHT;
    d->in_flight--;
    pthread_mutex_unlock(&s->lock);
    char err[256] = "";
    phase_ends(s, d, ISN_DISPATCHER_FORMING);
    int rc = d->device->complete(d->device->state, f->ticket, err, sizeof err);
    phase_ends(s, d, ISN_DISPATCHER_LANDING);
    answered(s, d, f, rc, d->phase_from_ns, err);
    phase_ends(s, d, ISN_DISPATCHER_ANSWERING);
}

/* Locked: completes what nobody took of the dispatcher's landed answers (sched_open_landing), unlocked
 * meanwhile. True when there was some. */
static bool answer_leftovers(isn_scheduler *s, sched_dispatcher *d) {
    if (!sched_own_landings_waiting(d)) return false;
    pthread_mutex_unlock(&s->lock);
    phase_ends(s, d, ISN_DISPATCHER_FORMING);
    sched_complete_own_landings(s, d);
    phase_ends(s, d, ISN_DISPATCHER_ANSWERING);
    pthread_mutex_lock(&s->lock);
    return true;
}

/* Locked: n jobs of predicted GPU time ns leave the batch being formed (launched, or abandoned). */
static void release_held(isn_scheduler *s, double ns, uint32_t n) {
    s->gpu_held_ns -= ns;
    s->gpu_held_jobs -= n;
    if (s->gpu_held_ns < 0 || !s->gpu_held_jobs) s->gpu_held_ns = 0;
}

/* Locked, with a flight free: sends the batch being formed (n jobs). Returns locked. */
static void launch(isn_scheduler *s, sched_dispatcher *d, uint32_t n, isn_flush_reason reason) {
    sched_flight *f = &d->flights[(d->oldest + d->in_flight) % SCHED_MAX_IN_FLIGHT];
    isn_job **batch = d->batch;
    d->batch = f->jobs; /* the flight's array is free: it becomes the next batch's */
    f->jobs = batch;
    f->n = n;
    f->fixed_ns = isn_batch_cost_fixed_ns(&s->batch_cost);
    f->predicted_ns = f->fixed_ns;
    for (uint32_t i = 0; i < n; i++) f->predicted_ns += batch[i]->predicted_ns[ISN_DEVICE_GPU];
    release_held(s, f->predicted_ns - f->fixed_ns, n);
    s->gpu_inflight_ns += f->predicted_ns;
    s->gpu_inflight_jobs += n;
    pthread_mutex_unlock(&s->lock);

    COUNT(s->batches);
    ADD(s->batch_jobs, n);
    COUNT(s->batch_flush[reason]);
    f->start_ns = isn_now_ns();
    for (uint32_t i = 0; i < n; i++) {
        batch[i]->started_ns = f->start_ns;
        batch[i]->device = ISN_DEVICE_GPU;
        batch[i]->worker = d->id;
        batch[i]->batch_size = n;
        batch[i]->complete = true;
        ADD(s->wait_ns[ISN_DEVICE_GPU], f->start_ns - batch[i]->enqueued_ns);
        COUNT(s->wait_count[ISN_DEVICE_GPU]);
    }
    char err[256] = "";
    if (flights_allowed(d) == 1) {
        int rc = d->device->run_batch(d->device->state, batch, n, err, sizeof err);
        answered(s, d, f, rc, isn_now_ns(), err);
        return;
    }
    int ticket = d->device->submit(d->device->state, batch, n, err, sizeof err);
    while (ticket == GPU_DEVICE_BUSY && d->in_flight) {
        /* The device is being swapped: the batches in flight go first. */
        pthread_mutex_lock(&s->lock);
        land_oldest(s, d);
        pthread_mutex_unlock(&s->lock);
        ticket = d->device->submit(d->device->state, batch, n, err, sizeof err);
    }
    if (ticket < 0) {
        if (ticket == GPU_DEVICE_BUSY) snprintf(err, sizeof err, "the device stayed busy with nothing in flight");
        answered(s, d, f, -1, isn_now_ns(), err);
        return;
    }
    f->ticket = ticket;
    pthread_mutex_lock(&s->lock);
    d->in_flight++;
}

static void *dispatcher_main(void *arg) {
    sched_dispatcher *d = arg;
    isn_scheduler *s = d->scheduler;
    const isn_batch_policy *policy = &s->config.batch;
    uint32_t max_batch = d->device->max_batch < policy->max_batch ? d->device->max_batch : policy->max_batch;
    isn_batch_policy device_policy = *policy;
    device_policy.max_batch = max_batch ? max_batch : 1;
    if (d->device->memory_budget && d->device->memory_budget < device_policy.memory_budget)
        device_policy.memory_budget = d->device->memory_budget;
    char err[160];
    if (s->config.num_worker_cpus &&
        isn_bind_this_thread(s->config.worker_cpus, s->config.num_worker_cpus, err, sizeof err) < 0)
        fprintf(stderr, "isn scheduler: GPU dispatcher %u runs on any CPU: %s\n", d->id, err);

    pthread_mutex_lock(&s->lock);
    d->phase_from_ns = isn_now_ns();
    s->ready++;
    pthread_cond_broadcast(&s->ready_changed);
    uint32_t n = 0;
    uint64_t first_added = 0, batch_bytes = 0; /* the batch's jobs' isn_job_memory_bytes */
    isn_job *dead[SCHED_MAX_DEAD];
    while (!s->stopping) {
        uint64_t now = isn_now_ns();
        uint64_t rest_until = atomic_load(&d->rest_until_ns);
        if (rest_until > now) {
            if (d->in_flight) { /* a batch sent before the failure is still answered now */
                land_oldest(s, d);
                continue;
            }
            if (answer_leftovers(s, d)) continue;
            struct timespec until;
            sched_timespec_at(rest_until, &until);
            phase_ends(s, d, ISN_DISPATCHER_FORMING);
            pthread_cond_timedwait(&s->gpu_wake, &s->lock, &until);
            phase_ends(s, d, ISN_DISPATCHER_SLEEPING);
            continue;
        }
        /* Fill the batch while there is room and memory. */
        uint32_t num_dead = 0;
        uint64_t next_bytes = 0;
        bool abandon = atomic_load_explicit(&s->abandon, memory_order_relaxed);
        while (n < device_policy.max_batch) {
            uint32_t at;
            isn_edf_queue *queue = next_source(s, n ? d->batch[0]->predicted_ns[ISN_DEVICE_GPU] : 0, &at);
            if (!queue) break;
            isn_job *job = isn_edf_at(queue, at);
            bool dead_job = job->deadline_ns && job->deadline_ns <= now;
            uint64_t bytes = isn_job_memory_bytes(job);
            if (!dead_job && !abandon && n && batch_bytes + bytes > device_policy.memory_budget) {
                next_bytes = bytes;
                break;
            }
            /* taken into the batch from here: unless it was answered meanwhile (at its deadline) */
            if (!dead_job && !abandon && s->config.start && !s->config.start(s->config.user, job)) dead_job = true;
            if (dead_job || abandon) {
                if (num_dead == SCHED_MAX_DEAD) break;
                dead[num_dead++] = isn_edf_remove_at(queue, at);
                continue;
            }
            if (queue == &s->queues[ISN_QUEUE_UNDECIDED]) COUNT(s->undecided_gpu);
            d->batch[n++] = isn_edf_remove_at(queue, at);
            s->gpu_held_ns += job->predicted_ns[ISN_DEVICE_GPU];
            s->gpu_held_jobs++;
            batch_bytes += bytes;
            if (n == 1) first_added = now;
        }
        if (num_dead) {
            pthread_mutex_unlock(&s->lock);
            for (uint32_t i = 0; i < num_dead; i++)
                sched_finish(s, dead[i], abandon ? ISN_JOB_ABANDONED : ISN_JOB_DEADLINE_EXCEEDED);
            pthread_mutex_lock(&s->lock);
            continue;
        }
        isn_flush_reason reason;
        uint64_t wait_until;
        device_policy.launch_ns = isn_batch_cost_fixed_ns(&s->batch_cost);
        bool flush = n && isn_batch_should_flush(&device_policy, d->batch, n, next_bytes, first_added, now, &reason,
                                                 &wait_until);
        if (flush && d->in_flight < flights_allowed(d)) {
            phase_ends(s, d, ISN_DISPATCHER_FORMING);
            launch(s, d, n, reason);
            phase_ends(s, d, ISN_DISPATCHER_LAUNCHING);
            n = 0;
            batch_bytes = 0;
            continue;
        }
        /* Nothing to launch now: the answers landed that nobody took are completed before the device or
         * the next job is waited for. */
        if (answer_leftovers(s, d)) continue;
        if (d->in_flight) { /* the next batch must wait for the device, or is not due yet */
            land_oldest(s, d);
            continue;
        }
        struct timespec until;
        sched_timespec_at(n ? wait_until : now + SCHED_IDLE_POLL_NS, &until);
        d->sleeping = true;
        d->sleeps_until_ns = n ? wait_until : 0;
        phase_ends(s, d, ISN_DISPATCHER_FORMING);
        pthread_cond_timedwait(&s->gpu_wake, &s->lock, &until);
        phase_ends(s, d, ISN_DISPATCHER_SLEEPING);
        d->sleeping = false;
    }
    /* Stopping: the batches in flight are answered; what the batch being formed holds was never sent. */
    while (d->in_flight) land_oldest(s, d);
    double held = 0;
    for (uint32_t i = 0; i < n; i++) held += d->batch[i]->predicted_ns[ISN_DEVICE_GPU];
    release_held(s, held, n);
    pthread_mutex_unlock(&s->lock);
    sched_close_own_landings(s, d);
    for (uint32_t i = 0; i < n; i++) sched_finish(s, d->batch[i], ISN_JOB_ABANDONED);
    return NULL;
}

int sched_prepare_dispatcher(isn_scheduler *s, uint32_t i) {
    sched_dispatcher *d = &s->dispatchers[i];
    d->scheduler = s;
    d->id = i;
    d->device = &s->config.gpus[i];
    atomic_init(&d->rest_until_ns, 0);
    size_t slots = d->device->max_batch ? d->device->max_batch : 1;
    d->batch = calloc(slots, sizeof *d->batch);
    /* every slot of the flight ring gets an array: the ring turns through all SCHED_MAX_IN_FLIGHT of them */
    for (uint32_t f = 0; f < SCHED_MAX_IN_FLIGHT; f++) {
        d->flights[f].jobs = calloc(slots, sizeof *d->flights[f].jobs);
        if (!d->flights[f].jobs) return -1;
    }
    if (sched_landings_init(d, slots) < 0) return -1;
    if (!d->batch || !d->device->run_batch) return -1;
    d->prepared = true;
    return 0;
}

int sched_spawn_dispatcher(isn_scheduler *s, uint32_t i) {
    sched_dispatcher *d = &s->dispatchers[i];
    if (pthread_create(&d->thread, NULL, dispatcher_main, d) != 0) return -1;
    d->started = true;
    char name[32];
    snprintf(name, sizeof name, "isn-gpu-%u", i);
    name[15] = '\0'; /* the kernel's limit */
    pthread_setname_np(d->thread, name);
    return 0;
}
