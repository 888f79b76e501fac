/* The scheduler's CPU workers: EDF queues, each worker's own deque, stealing, and the preparation of
 * submitted jobs (features, admission) that workers take in turns with searches. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "scheduler/scheduler_internal.h"

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
            double gpu_done = gpus ? sched_gpu_ahead_ns(s, false) / gpus : INFINITY;
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
    uint32_t queued = s->queues[ISN_QUEUE_CPU].size, workers = sched_cpu_servers(s);
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

/* config.worker_cpus or, for a spare, its loop's CPU in config.spare_cpus. */
static void bind_worker(const isn_scheduler *s, const sched_worker *w) {
    const isn_scheduler_config *c = &s->config;
    const int *cpus = w->spare_rank && c->num_spare_cpus ? &c->spare_cpus[(w->spare_rank - 1) % c->num_spare_cpus]
                                                         : c->worker_cpus;
    uint32_t n = w->spare_rank && c->num_spare_cpus ? 1 : c->num_worker_cpus;
    char err[160];
    if (n && isn_bind_this_thread(cpus, n, err, sizeof err) < 0)
        fprintf(stderr, "isn scheduler: worker %u runs on any CPU: %s\n", w->id, err);
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
    /* The quick features only decide whether the GPU takes a job that either may answer: a job only the CPU
     * may answer goes to the probe at once (a second pass over its block maxima otherwise). */
    if (job->placement == ISN_PLACE_CPU) {
        isn_job_features_of(index, job->query, job->k, job->mode, job->algo, &job->features);
        return;
    }
    isn_job_features_quick(index, job->query, job->k, job->mode, job->algo, &job->features);
    /* With a preparation backlog (half of what arrivals may queue, or a standing one) the workers' time
     * goes to preparing: the probe, several times the cost of the rest and only a sharper CPU
     * prediction, is skipped (and so is the look at the queues that decides whether it is needed). */
    bool hurried = atomic_load_explicit(&s->prepare_standing, memory_order_relaxed) ||
                   sched_preparing_ns_quick(s, isn_now_ns()) > 0.5 * SCHED_CODEL_ARRIVAL_SHARE * SCHED_CODEL_TARGET_NS;
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
    if (!large) atomic_fetch_sub(&s->normal_queued, 1);
    atomic_fetch_sub(&s->prepare_pending, 1);
    double sojourn = now > job->enqueued_ns ? (double)(now - job->enqueued_ns) : 0.0;
    COUNT(s->prepare_waits);
    ADD(s->prepare_wait_ns, (uint64_t)sojourn);
    if (job->enqueued_ns > job->received_ns) ADD(s->arrival_wait_ns, job->enqueued_ns - job->received_ns);
    if (!large) {
        atomic_store_explicit(&s->prepare_moved_ns, now, memory_order_relaxed);
        uint32_t backlog = sched_cpu_servers(s);
        isn_departure_meter_taken(&s->prepare_departures, s->prepare_queue.size, backlog, now);
        atomic_store_explicit(&s->prepare_departure_ns, s->prepare_departures.per_job_ns,
                              memory_order_relaxed);
        isn_codel_observe(&s->prepare_codel, sojourn, now, atomic_load_explicit(&s->shed_arrival_codel, memory_order_relaxed));
        atomic_store_explicit(&s->prepare_standing, s->prepare_codel.standing, memory_order_relaxed);
        atomic_store_explicit(&s->prepare_bounding, s->prepare_codel.bounding, memory_order_relaxed);
    }
    /* Refused unprepared: past its admission point nothing can admit it, and in a standing
     * backlog a job that waited past the target makes room for fresher ones (CoDel). */
    bool late = job->deadline_ns && now < job->deadline_ns &&
                (double)now >= sched_admit_by_at_ns(s, job->received_ns, job->deadline_ns, now, job->reader_keeps_up);
    double admit_budget = sched_admit_by_ns(s, job->received_ns, job->deadline_ns) - (double)job->received_ns;
    bool unworthy = late || (s->config.codel_drops_waited && job->deadline_ns && now < job->deadline_ns && !large &&
                             isn_codel_drops(&s->prepare_codel, sojourn, admit_budget));
    w->taken[w->taken_count].job = job;
    w->taken[w->taken_count].unworthy = unworthy;
    w->taken[w->taken_count].late = late;
    w->taken[w->taken_count].large = large;
    w->taken_count++;
    return true;
}

/* Takes the next jobs to prepare: from a long queue several at once (a share of the backlog that
 * leaves the other workers as much), since the queue's lock, taken once per job by a dozen workers,
 * was where workers waited most. The requests staged since the last take join the queue first. False
 * when there were none. */
static bool take_preparations(isn_scheduler *s, sched_worker *w) {
    w->taken_count = w->taken_next = 0;
    uint32_t want = sched_normal_pending(s) / sched_cpu_servers(s);
    want = want < 1 ? 1 : want > SCHED_PREPARE_TAKE ? SCHED_PREPARE_TAKE : want;
    uint64_t now = isn_now_ns();
    pthread_mutex_lock(&s->prepare_lock);
    sched_unstage_locked(s, NULL);
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
        isn_striped_add(&s->shed_overload, 1);
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
        isn_submit_result result = sched_admit_prepared(s, job, took_ns);
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
 * works are idle (bound beside one, while that one is), a standby worker (config.standby_workers) while it is
 * wanted. One that may not rests: it holds no job (its deque is left to thieves), admission does not count it,
 * and it looks again after rest_for. */
static bool gate_open(isn_scheduler *s, sched_worker *w) {
    const isn_scheduler_config *c = &s->config;
    bool open = !w->spare_rank ? c->standby_wanted(c->user)
                : c->num_spare_cpus && c->thread_idle
                    ? c->thread_idle(c->idle_threads_user, (w->spare_rank - 1) % c->num_spare_cpus)
                    : c->idle_threads(c->idle_threads_user) >= w->spare_rank;
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

/* A CPU worker's thread (sched_worker). */
void *sched_worker_main(void *arg) {
    sched_worker *w = arg;
    isn_scheduler *s = w->scheduler;
    bind_worker(s, w);
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
