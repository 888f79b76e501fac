/* The scheduler: its defaults, cost predictions and learning, and the shared parts (lock, counters, start,
 * stop, statistics). Admission and routing at submit: submit.c; the CPU workers (EDF queues, own deque,
 * stealing): cpu_workers.c; the GPU dispatchers: gpu_dispatch.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    isn_cost_predict_all_ns(&s->model, &job->features, job->predicted_ns);
    pthread_rwlock_unlock(&s->model_lock);
    double second_stage = job->second_stage_ns > 0 ? job->second_stage_ns : 0.0;
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) job->predicted_ns[d] += second_stage;
    job->predicted = true;
}

/* Under the lock: the scale learned costs take on a device (1 before any prediction). */
double sched_scale_locked(isn_scheduler *s, isn_device_kind device) {
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
        atomic_store_explicit(&s->scale[device], sched_scale_locked(s, device), memory_order_relaxed);
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

double sched_scale(isn_scheduler *s, isn_device_kind device, uint64_t now_ns) {
    return isn_scale_relaxed(atomic_load_explicit(&s->scale[device], memory_order_relaxed),
                             atomic_load_explicit(&s->learned_ns[device], memory_order_relaxed), now_ns);
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
    /* The workers look at the dispatchers' landings from their first moment: those, and their count,
     * are there before any worker runs. */
    s->num_dispatchers = config->num_gpus;
    for (uint32_t i = 0; i < config->num_gpus; i++) {
        if (sched_prepare_dispatcher(s, i) != 0) {
            pthread_mutex_lock(&s->lock);
            s->failed++;
            pthread_mutex_unlock(&s->lock);
        }
    }
    /* Thieves look at w->started: set them all before any thread runs. */
    for (uint32_t i = 0; i < config->workers; i++) atomic_store(&s->workers[i].started, true);
    uint32_t spawned = 0;
    for (uint32_t i = 0; i < config->workers; i++) {
        if (pthread_create(&s->workers[i].thread, NULL, sched_worker_main, &s->workers[i]) != 0) {
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
    for (uint32_t i = 0; i < config->num_gpus; i++) {
        if (s->dispatchers[i].prepared && sched_spawn_dispatcher(s, i) != 0) {
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
    sched_unstage_locked(s, SCHED_STAGED_CLOSED); /* what was staged is abandoned with the queue, below */
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
    st->shed_arrival_late = isn_striped_sum(&s->shed_arrival[SCHED_ARRIVAL_LATE]);
    st->shed_arrival_preparing = isn_striped_sum(&s->shed_arrival[SCHED_ARRIVAL_PREPARING]);
    st->shed_arrival_wait = isn_striped_sum(&s->shed_arrival[SCHED_ARRIVAL_WAIT]);
    st->arrival_refused_done_seconds_sum = (double)isn_striped_sum(&s->arrival_refused_done_ns) / 1e9;
    st->arrival_refused_bound_seconds_sum = (double)isn_striped_sum(&s->arrival_refused_bound_ns) / 1e9;
    st->shed_routed = LOAD(s->shed_routed);
    st->stalls_seen = LOAD(s->stalls_seen);
    st->prepare_waits = LOAD(s->prepare_waits);
    st->arrival_wait_seconds_sum = (double)LOAD(s->arrival_wait_ns) / 1e9;
    st->prepare_wait_seconds_sum = (double)LOAD(s->prepare_wait_ns) / 1e9;
    st->shed_full = LOAD(s->shed_full);
    st->shed_overload = isn_striped_sum(&s->shed_overload);
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
    st->prepare_still_seconds = sched_prepare_still_ns(s, isn_now_ns()) / 1e9; /* read first: the prediction read later counts more */
    st->prepare_predicted_wait_seconds = sched_preparing_ns_quick(s, isn_now_ns()) / 1e9;
    st->prepare_departure_seconds = atomic_load_explicit(&s->prepare_departure_ns, memory_order_relaxed) / 1e9;
    for (uint32_t i = 0; i < s->config.workers; i++) st->deque_depth += isn_deque_size(&s->workers[i].deque);
    pthread_rwlock_rdlock(&s->model_lock);
    for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
        st->mape[d] = isn_cost_mape(&s->model, (isn_device_kind)d);
        st->service_scale[d] = sched_scale_locked(s, (isn_device_kind)d);
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
