/* The running scheduler (its threadless parts are test_scheduler_parts.c's): dropping dead jobs, shedding,
 * refusing at arrival, batching on the simulated GPU and re-running a failed batch on the CPU, preparations,
 * workers' and spares' placement and policy. No timing is asserted: tests wait for events, never for
 * durations. */
#include <setjmp.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "scheduler/scheduler_internal.h"
#include "tests/support/random.h"

/* ------------------------------------------------------------------ the running scheduler */

/* Spins until this thread has used ns of CPU time: a cost that the machine's load does not change. */
static void burn_cpu_ns(uint64_t ns) {
    uint64_t until = isn_thread_cpu_ns() + ns;
    volatile uint64_t sink = 0;
    while (isn_thread_cpu_ns() < until)
        for (int i = 0; i < 1000; i++) sink += (uint64_t)i;
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool hold;      /* run_cpu blocks while set */
    uint32_t holding;
    int worker_nice; /* as a worker saw it */
    bool worker_idle_policy;
    uint64_t worker_slice_ns;
    uint32_t ran_cpu, completed;
    bool await_helper;            /* the dispatcher's first GPU answer waits for a worker's (harness_complete) */
    uint32_t gpu_answers_helped;  /* GPU answers completed by a worker helping the dispatcher */
} harness;

typedef struct {
    isn_job job;
    bool done;
} test_job;

static void *harness_worker_init(void *user, uint32_t worker) {
    (void)worker;
    return user;
}

static void harness_run_cpu(void *user, isn_job *job, const isn_cpu_context *context) {
    harness *h = user;
    assert_non_null(context->arena);
    pthread_mutex_lock(&h->lock);
    h->ran_cpu++;
    h->holding++;
    h->worker_nice = getpriority(PRIO_PROCESS, (id_t)gettid());
    h->worker_idle_policy = isn_thread_has_idle_policy(0);
    h->worker_slice_ns = isn_thread_slice_ns(0);
    pthread_cond_broadcast(&h->changed);
    while (h->hold) pthread_cond_wait(&h->changed, &h->lock);
    h->holding--;
    pthread_mutex_unlock(&h->lock);
    job->complete = true;
}

static void harness_complete(void *user, isn_job *job, void *worker_state) {
    harness *h = user;
    pthread_mutex_lock(&h->lock);
    ((test_job *)job->user)->done = true;
    h->completed++;
    bool gpu_answer = job->outcome == ISN_JOB_RAN && job->device == ISN_DEVICE_GPU;
    if (gpu_answer && worker_state) h->gpu_answers_helped++;
    pthread_cond_broadcast(&h->changed);
    /* The dispatcher's first answer waits (5 s at most) until a worker has completed one beside it. */
    if (gpu_answer && !worker_state && h->await_helper) {
        h->await_helper = false;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until); /* the harness's condition variable's clock */
        until.tv_sec += 5;
        while (!h->gpu_answers_helped && pthread_cond_timedwait(&h->changed, &h->lock, &until) == 0) {}
    }
    pthread_mutex_unlock(&h->lock);
}

static void harness_wait(harness *h, uint32_t *counter, uint32_t value) {
    pthread_mutex_lock(&h->lock);
    while (*counter < value) pthread_cond_wait(&h->changed, &h->lock);
    pthread_mutex_unlock(&h->lock);
}

static void harness_release(harness *h) {
    pthread_mutex_lock(&h->lock);
    h->hold = false;
    pthread_cond_broadcast(&h->changed);
    pthread_mutex_unlock(&h->lock);
}

static void harness_config(harness *h, isn_scheduler_config *config) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->changed, NULL);
    isn_scheduler_config_default(config);
    config->workers = 1;
    config->worker_init = harness_worker_init;
    config->run_cpu = harness_run_cpu;
    config->complete = harness_complete;
    config->user = h;
}

/* Starts the scheduler on a harness_config'd config; the test fails when it does not start. */
static isn_scheduler *harness_start(const isn_scheduler_config *config) {
    char err[256];
    isn_scheduler *s = isn_scheduler_start(config, err, sizeof err);
    if (s == NULL) print_message("isn_scheduler_start: %s\n", err);
    assert_non_null(s);
    return s;
}

/* Queues a job that the held worker picks up and sits on: the only worker is then busy. */
static void harness_occupy(harness *h, isn_scheduler *s, isn_job *blocker) {
    assert_int_equal(isn_scheduler_submit(s, blocker), ISN_SUBMIT_QUEUED);
    harness_wait(h, &h->holding, 1);
}

/* Lets held workers go, waits for `completed` completions in all, and stops the scheduler. */
static void harness_finish(harness *h, isn_scheduler *s, uint32_t completed) {
    harness_release(h);
    harness_wait(h, &h->completed, completed);
    isn_scheduler_stop(s);
}

/* Gives the config one simulated GPU taking batches of up to max_batch jobs; the caller frees it
 * (isn_gpu_sim_free) after stopping the scheduler. */
static void harness_attach_gpu(isn_scheduler_config *config, const isn_gpu_sim_config *sim, uint32_t max_batch,
                               isn_gpu_device *gpu) {
    assert_int_equal(isn_gpu_sim_new(sim, max_batch, 1u << 30, gpu), 0);
    config->gpus = gpu;
    config->num_gpus = 1;
}

/* harness_attach_gpu with what the scheduler would have learned of that GPU: batches sent at once (no
 * linger), its launch as the batch's fixed part, and the cost model seeded from its latency model.
 * `model` must outlive the scheduler. */
static void harness_attach_known_gpu(isn_scheduler_config *config, const isn_gpu_sim_config *sim, isn_gpu_device *gpu,
                                     isn_cost_model *model) {
    harness_attach_gpu(config, sim, 32, gpu);
    config->batch.linger_ns = 0;
    config->batch.launch_ns = sim->launch_ns;
    isn_cost_model_init(model);
    isn_cost_model_seed(model, ISN_DEVICE_GPU, isn_gpu_sim_job_ns, sim);
    config->model = model;
}

static isn_scheduler_stats scheduler_stats(isn_scheduler *s) {
    isn_scheduler_stats stats;
    isn_scheduler_get_stats(s, &stats);
    return stats;
}

static void small_job(test_job *t, uint64_t deadline_ns) {
    memset(t, 0, sizeof *t);
    t->job.user = t;
    t->job.deadline_ns = deadline_ns;
    t->job.features =
        (isn_job_features){.num_terms = 1, .shortest = 100, .longest = 100, .total = 100, .essential = 100, .blocks = 1, .k = 10,
                           .expected_postings = 100};
}

static void sleep_until(uint64_t ns) {
    while (isn_now_ns() <= ns) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static void dead_jobs_are_dropped_without_running(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    h.hold = true;
    isn_scheduler *s = harness_start(&config);
    test_job blocker, doomed, later;
    small_job(&blocker, 0);
    harness_occupy(&h, s, &blocker.job); /* the only worker is busy */
    uint64_t deadline = isn_now_ns() + 100000000ull; /* well above the predicted time: admitted */
    small_job(&doomed, deadline);
    assert_int_equal(isn_scheduler_submit(s, &doomed.job), ISN_SUBMIT_QUEUED);
    small_job(&later, 0);
    assert_int_equal(isn_scheduler_submit(s, &later.job), ISN_SUBMIT_QUEUED);
    sleep_until(deadline);
    harness_release(&h);
    harness_wait(&h, &h.completed, 3);
    assert_int_equal(doomed.job.outcome, ISN_JOB_DEADLINE_EXCEEDED);
    assert_int_equal(later.job.outcome, ISN_JOB_RAN);
    assert_int_equal(h.ran_cpu, 2); /* blocker and later; not the dead one */
    isn_scheduler_stats stats = scheduler_stats(s);
    assert_int_equal(stats.dropped_dead, 1);
    isn_scheduler_stop(s);
}

static void overload_sheds_or_degrades(void **state) {
    (void)state;
    for (int policy = 0; policy < 2; policy++) {
        harness h;
        isn_scheduler_config config;
        harness_config(&h, &config);
        config.overload = policy ? ISN_OVERLOAD_DEGRADE : ISN_OVERLOAD_SHED;
        config.degraded_fraction = 0; /* degrade whatever is left */
        config.queue_capacity = 2;
        h.hold = true;
        isn_scheduler *s = harness_start(&config);
        test_job blocker, big, small1, small2, small3;
        small_job(&blocker, 0);
        harness_occupy(&h, s, &blocker.job);
        /* A query predicted to take far longer than its 1 ms budget. */
        small_job(&big, isn_now_ns() + 1000000);
        big.job.features.total = big.job.features.shortest = big.job.features.longest = 50000000;
        big.job.features.essential = big.job.features.expected_postings = 50000000;
        big.job.features.blocks = 400000;
        /* The blocker is predicted to end soon: anything may still start in time. */
        assert_true(isn_scheduler_may_admit(s, isn_now_ns(), isn_now_ns() + 1000000, false));
        /* Under either policy: the queue ahead is short, so its own cost misses the deadline, not
         * overload: it runs cut short (a partial answer), not refused. */
        isn_submit_result r = isn_scheduler_submit(s, &big.job);
        assert_int_equal(r, ISN_SUBMIT_QUEUED);
        assert_true(big.job.degraded);
        /* Cut short to end by its admission point (40% of its 1 ms budget). */
        assert_true(big.job.run_budget_ns > 0 && big.job.run_budget_ns <= 0.4e6);
        /* Queue bound: no deadline, so only capacity refuses. */
        small_job(&small1, 0);
        small_job(&small2, 0);
        small_job(&small3, 0);
        int queued = 1;
        queued += isn_scheduler_submit(s, &small1.job) == ISN_SUBMIT_QUEUED;
        queued += isn_scheduler_submit(s, &small2.job) == ISN_SUBMIT_QUEUED;
        assert_int_equal(isn_scheduler_submit(s, &small3.job), ISN_SUBMIT_SHED_FULL);
        assert_int_equal(queued, 2);
        isn_scheduler_stats stats = scheduler_stats(s);
        assert_int_equal(stats.shed_overload, 0);
        assert_int_equal(stats.degraded, 1);
        assert_int_equal(stats.shed_full, 2);
        harness_finish(&h, s, 3);
    }
}

/* A worker busy with a job predicted to take ~25 ms: a query with a 1 ms budget is refused before
 * anything about it is known (cheap refusals under overload); one without a deadline is not. */
static void refuses_early_when_nothing_can_start(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    h.hold = true;
    isn_scheduler *s = harness_start(&config);
    test_job blocker;
    small_job(&blocker, 0);
    blocker.job.features.total = blocker.job.features.essential = blocker.job.features.longest = 50000000;
    blocker.job.features.expected_postings = 50000000;
    harness_occupy(&h, s, &blocker.job);
    uint64_t now = isn_now_ns();
    assert_false(isn_scheduler_may_admit(s, now, now + 1000000, false));
    assert_true(isn_scheduler_may_admit(s, now, 0, false));
    assert_true(isn_scheduler_may_admit(s, now, now + 10000000000ull, false));
    isn_scheduler_stats stats = scheduler_stats(s);
    assert_int_equal(stats.shed_overload, 1);
    /* counted by the bound that refused it: the blocker's predicted wait, past the 1-ms budget's bound */
    assert_int_equal(stats.shed_arrival_wait, 1);
    assert_int_equal(stats.shed_arrival_late + stats.shed_arrival_preparing, 0);
    assert_true(stats.arrival_refused_bound_seconds_sum > 0);
    assert_true(stats.arrival_refused_done_seconds_sum > stats.arrival_refused_bound_seconds_sum);
    harness_finish(&h, s, 1);
}

/* A request read 25 ms into its 50-ms budget, the node idle: past its admission point (40% of the budget)
 * it is refused, unless its reader keeps up with its sockets. Then it waited in a stall of the whole node,
 * not in a backlog, and is judged on what is left before its early-stop point (90% here): done by now plus
 * 40% of that, which an idle worker is. Past the early-stop point nothing admits it. */
static void an_old_request_whose_reader_keeps_up_is_judged_on_what_is_left(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    isn_scheduler *s = harness_start(&config);
    uint64_t now = isn_now_ns();
    uint64_t budget = 50000000, received = now - 25000000, deadline = received + budget;
    assert_false(isn_scheduler_may_admit(s, received, deadline, false));
    /* refused for its age alone, not for a wait the idle node predicted */
    isn_scheduler_stats refused = scheduler_stats(s);
    assert_int_equal(refused.shed_arrival_late, 1);
    assert_int_equal(refused.shed_arrival_wait + refused.shed_arrival_preparing, 0);
    assert_true(isn_scheduler_may_admit(s, received, deadline, true));
    assert_false(isn_scheduler_may_admit_quick(s, received, deadline, false));
    assert_true(isn_scheduler_may_admit_quick(s, received, deadline, true));
    uint64_t past_stop = now - 46000000;
    assert_false(isn_scheduler_may_admit(s, past_stop, past_stop + budget, true));
    /* At submit, routing's own-cost rule runs an idle node's job whatever its age, but one past its
     * admission point only cut short to end there; judged on what is left, it runs whole. */
    test_job cut, whole;
    small_job(&cut, deadline);
    cut.job.received_ns = received;
    assert_int_equal(isn_scheduler_submit(s, &cut.job), ISN_SUBMIT_QUEUED);
    assert_true(cut.job.degraded);
    small_job(&whole, deadline);
    whole.job.received_ns = received;
    whole.job.reader_keeps_up = true;
    assert_int_equal(isn_scheduler_submit(s, &whole.job), ISN_SUBMIT_QUEUED);
    assert_false(whole.job.degraded);
    harness_finish(&h, s, 2);
}

static void gpu_batches_and_failed_batches_rerun_on_cpu(void **state) {
    (void)state;
    for (int failing = 0; failing < 2; failing++) {
        harness h;
        isn_scheduler_config config;
        harness_config(&h, &config);
        h.hold = true; /* the CPU is busy with the blocker, so the GPU is the clear winner */
        isn_gpu_sim_config sim;
        isn_gpu_sim_config_default(&sim);
        sim.failure_rate = failing ? 1.0 : 0.0;
        isn_gpu_device gpu;
        harness_attach_gpu(&config, &sim, 8, &gpu);
        config.batch.linger_ns = 5000000;
        isn_scheduler *s = harness_start(&config);
        test_job blocker;
        small_job(&blocker, 0);
        blocker.job.features.total = blocker.job.features.shortest = blocker.job.features.essential = 1; /* a CPU job */
        blocker.job.features.expected_postings = 1;
        test_job jobs[20];
        harness_occupy(&h, s, &blocker.job);
        uint32_t on_gpu_queue = 0;
        for (int i = 0; i < 20; i++) {
            small_job(&jobs[i], 0);
            /* Far slower on the CPU than a batch's linger and launch. */
            isn_job_features *f = &jobs[i].job.features;
            f->total = f->shortest = f->longest = f->essential = f->expected_postings = 20000000;
            f->blocks = 20000000 / 128;
            assert_int_equal(isn_scheduler_submit(s, &jobs[i].job), ISN_SUBMIT_QUEUED);
            on_gpu_queue += jobs[i].job.queue != ISN_QUEUE_CPU;
        }
        assert_int_equal(on_gpu_queue, 20);
        if (failing) {
            /* The CPU answers what the GPU could not. */
            isn_scheduler_stats stats;
            do {
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
                isn_scheduler_get_stats(s, &stats);
            } while (stats.gpu_failures == 0);
        }
        harness_release(&h);
        harness_wait(&h, &h.completed, 21);
        isn_scheduler_stats stats = scheduler_stats(s);
        if (!failing) {
            for (int i = 0; i < 20; i++) {
                assert_int_equal(jobs[i].job.outcome, ISN_JOB_RAN);
                assert_int_equal(jobs[i].job.device, ISN_DEVICE_GPU);
                assert_true(jobs[i].job.batch_size >= 1 && jobs[i].job.batch_size <= 8);
            }
            assert_true(stats.batches >= 3); /* 20 jobs, at most 8 a batch */
            assert_int_equal(stats.batch_jobs, 20);
        } else {
            assert_true(stats.gpu_failures >= 1);
            assert_true(stats.gpu_reruns >= 1);
            for (int i = 0; i < 20; i++) assert_int_equal(jobs[i].job.outcome, ISN_JOB_RAN);
        }
        isn_scheduler_stop(s);
        isn_gpu_sim_free(&gpu);
    }
}

/* A simulated GPU with a 3 ms launch and 1 us per query, in bursts of 1 to 16 jobs: the scheduler
 * learns the launch as the batch's fixed part, and each job's GPU prediction stays its own small
 * part (learning its share of whole batches would charge a lone job the full launch). */
/* A device that keeps batches in flight (submit/complete): its first submit waits until the test has
 * queued every job, so that the dispatcher has a second full batch to send while the first is on the
 * device. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool all_queued;
    bool fail_first; /* the first batch completed fails (the device is then rested) */
    const isn_scheduler *scheduler; /* whose dispatcher's rest the completions look at */
    bool completed_while_resting;   /* a batch was completed while the device was rested */
    uint32_t submits, completes, in_flight, most_in_flight, jobs_answered;
    uint32_t tickets; /* batches it holds at once (0: two) */
    uint64_t burn_ns; /* CPU time its submit and its complete each take of the calling thread */
    harness *answers; /* when set: its completions counted at each submit (completed_at_submit) */
    uint32_t completed_at_submit[8];
    isn_job *const *flights[4];
    uint32_t sizes[4];
} async_device;

static uint32_t async_tickets(const async_device *a) { return a->tickets ? a->tickets : 2; }

static int async_run_batch(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    (void)state, (void)jobs, (void)n;
    snprintf(err, err_len, "the pipelined device has no run_batch path in this test");
    return -1;
}

static int async_submit(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    (void)err, (void)err_len;
    async_device *a = state;
    pthread_mutex_lock(&a->lock);
    while (a->submits == 0 && !a->all_queued) pthread_cond_wait(&a->changed, &a->lock);
    int ticket = -1;
    for (uint32_t i = 0; i < async_tickets(a) && ticket < 0; i++)
        if (!a->flights[i]) ticket = (int)i;
    if (ticket < 0) {
        pthread_mutex_unlock(&a->lock);
        return GPU_DEVICE_BUSY;
    }
    a->flights[ticket] = jobs;
    a->sizes[ticket] = n;
    if (a->answers && a->submits < 8) {
        pthread_mutex_lock(&a->answers->lock);
        a->completed_at_submit[a->submits] = a->answers->completed;
        pthread_mutex_unlock(&a->answers->lock);
    }
    a->submits++;
    if (++a->in_flight > a->most_in_flight) a->most_in_flight = a->in_flight;
    pthread_mutex_unlock(&a->lock);
    burn_cpu_ns(a->burn_ns);
    return ticket;
}

static int async_complete(void *state, int ticket, char *err, size_t err_len) {
    async_device *a = state;
    pthread_mutex_lock(&a->lock);
    if (ticket < 0 || (uint32_t)ticket >= async_tickets(a) || !a->flights[ticket]) {
        pthread_mutex_unlock(&a->lock);
        snprintf(err, err_len, "no batch with ticket %d", ticket);
        return -1;
    }
    bool fail = a->fail_first && a->completes++ == 0;
    if (a->scheduler &&
        atomic_load(&a->scheduler->dispatchers[0].rest_until_ns) > isn_now_ns())
        a->completed_while_resting = true;
    if (!fail) a->jobs_answered += a->sizes[ticket];
    a->flights[ticket] = NULL;
    a->in_flight--;
    pthread_mutex_unlock(&a->lock);
    burn_cpu_ns(a->burn_ns);
    if (fail) snprintf(err, err_len, "injected device failure");
    return fail ? -1 : 0;
}

/* Gives the config the pipelined test device (batches of 4) as its one GPU. */
static void attach_pipelined(isn_scheduler_config *config, async_device *a, isn_gpu_device *gpu) {
    *gpu = (isn_gpu_device){.name = "pipelined", .state = a, .run_batch = async_run_batch, .submit = async_submit,
                            .complete = async_complete, .max_in_flight = async_tickets(a), .max_batch = 4,
                            .memory_budget = 1u << 30};
    config->gpus = gpu;
    config->num_gpus = 1;
    config->batch.max_batch = 4;
}

/* Queues n GPU jobs, then sets a test device's all_queued (under its lock, telling its waiters): its first
 * submit waits for that. */
static void queue_gpu_jobs(isn_scheduler *s, test_job *jobs, uint32_t n, pthread_mutex_t *lock, pthread_cond_t *changed,
                           bool *all_queued) {
    for (uint32_t i = 0; i < n; i++) {
        small_job(&jobs[i], 0);
        jobs[i].job.placement = ISN_PLACE_GPU;
        assert_int_equal(isn_scheduler_submit(s, &jobs[i].job), ISN_SUBMIT_QUEUED);
    }
    pthread_mutex_lock(lock);
    *all_queued = true;
    pthread_cond_broadcast(changed);
    pthread_mutex_unlock(lock);
}

static void queue_for_pipelined(isn_scheduler *s, async_device *a, test_job *jobs, uint32_t n) {
    queue_gpu_jobs(s, jobs, n, &a->lock, &a->changed, &a->all_queued);
}

/* 64 jobs through the pipelined device of `tickets` streams: all answered on it, and it held that many
 * batches at once. */
static void run_pipelined(uint32_t tickets) {
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    async_device a = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER, .tickets = tickets};
    isn_gpu_device gpu;
    attach_pipelined(&config, &a, &gpu);
    isn_scheduler *s = harness_start(&config);
    static test_job jobs[64];
    queue_for_pipelined(s, &a, jobs, 64);
    harness_wait(&h, &h.completed, 64);
    isn_scheduler_stats stats = scheduler_stats(s);
    isn_scheduler_stop(s);
    assert_int_equal(stats.ran_on[ISN_DEVICE_GPU], 64);
    assert_int_equal(a.jobs_answered, 64);
    assert_int_equal(a.in_flight, 0);
    assert_int_equal(a.most_in_flight, tickets);
    assert_int_equal(stats.gpu_failures, 0);
}

static void gpu_batches_overlap_on_a_pipelined_device(void **state) {
    (void)state;
    run_pipelined(2);
}

/* A device of four streams ([gpu] streams = 4) gets four batches at once. */
static void four_batches_on_a_device_of_four_streams(void **state) {
    (void)state;
    run_pipelined(4);
}

/* The dispatcher's time by phase: with a device whose submit and complete each take 200 us of its CPU,
 * the batches show at least that much launching and landing each, their forming and answering are
 * counted too, and all phases together claim no more time than passed. */
static void dispatcher_time_is_accounted_by_phase(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    const uint64_t burn = 200000;
    async_device a = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER, .burn_ns = burn};
    isn_gpu_device gpu;
    attach_pipelined(&config, &a, &gpu);
    uint64_t started = isn_now_ns();
    isn_scheduler *s = harness_start(&config);
    static test_job jobs[64];
    queue_for_pipelined(s, &a, jobs, 64);
    harness_wait(&h, &h.completed, 64);
    isn_scheduler_stats stats = scheduler_stats(s);
    double elapsed = (double)(isn_now_ns() - started) / 1e9;
    isn_scheduler_stop(s);
    assert_true(a.submits >= 16); /* batches of at most 4 */
    const double *phase = stats.dispatcher_seconds;
    assert_true(phase[ISN_DISPATCHER_LAUNCHING] >= a.submits * (double)burn / 1e9);
    assert_true(phase[ISN_DISPATCHER_LANDING] >= a.submits * (double)burn / 1e9);
    assert_true(phase[ISN_DISPATCHER_FORMING] > 0.0 && phase[ISN_DISPATCHER_ANSWERING] > 0.0);
    double sum = 0.0;
    for (int p = 0; p < ISN_DISPATCHER_PHASES; p++) sum += phase[p];
    assert_true(sum <= elapsed);
}

/* A dispatcher whose batch landed while the next one is full launches that one before it completes the
 * landed answers itself, when no worker takes them (its only worker is busy): the pipelined device (two
 * flights, batches of 4) gets its third batch while none of the first batch's answers is complete. Had
 * the dispatcher completed them first, the third batch would have waited for all four to be packed. */
static void the_next_batch_launches_before_the_landed_answers(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    async_device a = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER, .answers = &h};
    isn_gpu_device gpu;
    attach_pipelined(&config, &a, &gpu);
    config.batch.linger_ns = 200000000ull; /* batches leave full */
    isn_scheduler *s = harness_start(&config);
    h.hold = true;
    test_job blocker;
    small_job(&blocker, 0);
    blocker.job.placement = ISN_PLACE_CPU;
    harness_occupy(&h, s, &blocker.job);
    static test_job jobs[12];
    queue_for_pipelined(s, &a, jobs, 12);
    harness_wait(&h, &h.completed, 12); /* the busy worker takes none: the dispatcher completes them all */
    harness_finish(&h, s, 13);
    assert_int_equal(a.submits, 3);
    assert_int_equal(a.completed_at_submit[2], 0);
    for (uint32_t i = 0; i < 12; i++) assert_true(jobs[i].done);
}

/* A batch fails while the next one is on the device: the device is rested, the failed batch's jobs
 * run on the CPU, and the batch in flight is still answered during the rest (not after it). */
static void batch_in_flight_answered_when_the_one_before_fails(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    async_device a = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER, .fail_first = true};
    isn_gpu_device gpu;
    attach_pipelined(&config, &a, &gpu);
    /* batches leave full (four jobs each): a batch formed before the test queued the rest would hold one
     * job, and the rest would wait out the device's rest */
    config.batch.linger_ns = 200000000ull;
    config.gpu_rest_ns = 30ull * 1000000000ull;
    isn_scheduler *s = harness_start(&config);
    a.scheduler = s;
    static test_job jobs[8];
    queue_for_pipelined(s, &a, jobs, 8);
    harness_wait(&h, &h.completed, 8);
    isn_scheduler_stats stats = scheduler_stats(s);
    isn_scheduler_stop(s);
    assert_int_equal(a.most_in_flight, 2);
    assert_true(a.completed_while_resting);
    assert_int_equal(stats.gpu_failures, 1);
    assert_int_equal(stats.ran_on[ISN_DEVICE_GPU], 4);
    assert_int_equal(stats.ran_on[ISN_DEVICE_CPU], 4);
}

/* A device of two streams that takes its first batch once every job is queued (all_queued), and
 * whose batches end only when the test lets them (open). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool all_queued, open;
    uint32_t in_flight, submits;
} gated_device;

static int gated_run_batch(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    (void)state, (void)jobs, (void)n;
    snprintf(err, err_len, "the gated device has no run_batch path");
    return -1;
}

static int gated_submit(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    (void)jobs, (void)n, (void)err, (void)err_len;
    gated_device *g = state;
    pthread_mutex_lock(&g->lock);
    /* a batch formed while jobs were still coming would not be full: the dispatcher would then wait for
     * the device (closed) rather than form the next one */
    while (!g->all_queued) pthread_cond_wait(&g->changed, &g->lock);
    int ticket = g->in_flight == 2 ? GPU_DEVICE_BUSY : (int)g->submits % 2;
    if (ticket >= 0) {
        g->in_flight++;
        g->submits++;
    }
    pthread_mutex_unlock(&g->lock);
    return ticket;
}

static int gated_complete(void *state, int ticket, char *err, size_t err_len) {
    (void)ticket, (void)err, (void)err_len;
    gated_device *g = state;
    pthread_mutex_lock(&g->lock);
    while (!g->open) pthread_cond_wait(&g->changed, &g->lock);
    g->in_flight--;
    pthread_mutex_unlock(&g->lock);
    return 0;
}

/* Gives the config the gated device as its one GPU, taking batches of up to max_batch jobs. */
static void attach_gated(isn_scheduler_config *config, gated_device *g, isn_gpu_device *gpu, uint32_t max_batch) {
    *gpu = (isn_gpu_device){.name = "gated", .state = g, .run_batch = gated_run_batch, .submit = gated_submit,
                            .complete = gated_complete, .max_in_flight = 2, .max_batch = max_batch,
                            .memory_budget = 1u << 30};
    config->gpus = gpu;
    config->num_gpus = 1;
    config->batch.max_batch = max_batch;
}

static void queue_for_gated(isn_scheduler *s, gated_device *g, test_job *jobs, uint32_t n) {
    queue_gpu_jobs(s, jobs, n, &g->lock, &g->changed, &g->all_queued);
}

/* A batch formed while the device's flights are all taken waits in its dispatcher, out of the queue and
 * not in flight: admission's GPU wait still counts it. Twelve GPU-only jobs, batches of four, a device of
 * two flights that holds its batches: eight jobs go to the device, the last four wait in the dispatcher. */
static void admission_counts_the_batch_waiting_for_a_flight(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    gated_device g = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};
    isn_gpu_device gpu;
    attach_gated(&config, &g, &gpu, 4);
    config.batch.linger_ns = 3600ull * 1000000000ull; /* batches go when full: four jobs each */
    isn_scheduler *s = harness_start(&config);
    static test_job jobs[12];
    queue_for_gated(s, &g, jobs, 12);
    /* two batches on the device, the third formed behind them (the dispatcher then waits for the first) */
    for (;;) {
        pthread_mutex_lock(&s->lock);
        uint32_t queued = s->queues[ISN_QUEUE_GPU].size + s->queues[ISN_QUEUE_UNDECIDED].size;
        uint32_t in_flight = s->gpu_inflight_jobs;
        pthread_mutex_unlock(&s->lock);
        if (queued == 0 && in_flight == 8) break;
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    uint64_t now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 10ull * 1000000000ull, false));
    pthread_mutex_lock(&s->lock);
    double in_flight_ns = s->gpu_inflight_ns, held_ns = s->gpu_held_ns;
    uint32_t held = s->gpu_held_jobs;
    pthread_mutex_unlock(&s->lock);
    double wait = atomic_load(&s->published_wait_ns[ISN_DEVICE_GPU]);
    double each = jobs[11].job.predicted_ns[ISN_DEVICE_GPU];
    /* the device lets its batches go before anything is checked: a failed check leaves nothing blocked */
    pthread_mutex_lock(&g.lock);
    g.open = true;
    pthread_cond_broadcast(&g.changed);
    pthread_mutex_unlock(&g.lock);
    harness_wait(&h, &h.completed, 12);
    isn_scheduler_stats stats = scheduler_stats(s);
    isn_scheduler_stop(s);
    assert_int_equal(stats.ran_on[ISN_DEVICE_GPU], 12);
    assert_int_equal(g.submits, 3);
    assert_int_equal(held, 4);
    assert_true(each > 0);
    assert_true(held_ns >= 3.99 * each);
    /* nothing had finished: the scale was 1 and no measured time bounded the model */
    if (!(wait >= 0.999 * (in_flight_ns + held_ns)))
        fail_msg("GPU wait %.0f ns with %.0f ns in flight and %.0f ns held", wait, in_flight_ns, held_ns);
}

/* A landed batch's answers are completed by idle workers beside its dispatcher: 32 GPU jobs in one batch
 * (sent at the first job's linger end), two idle workers. The dispatcher's first answer waits
 * until a worker has completed another; alone, it would wait out its 5 s and no worker would have helped. */
static void idle_workers_help_complete_a_landed_batch(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.workers = 2;
    gated_device g = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER, .open = true};
    isn_gpu_device gpu;
    attach_gated(&config, &g, &gpu, 32);
    /* the dispatcher holds the first job until the linger ends, and then fills the batch with the rest */
    config.batch.linger_ns = 200000000ull;
    isn_scheduler *s = harness_start(&config);
    h.await_helper = true;
    static test_job jobs[32];
    queue_for_gated(s, &g, jobs, 32);
    harness_wait(&h, &h.completed, 32);
    isn_scheduler_stats stats = scheduler_stats(s);
    isn_scheduler_stop(s);
    assert_int_equal(g.submits, 1);
    assert_int_equal(stats.ran_on[ISN_DEVICE_GPU], 32);
    for (uint32_t i = 0; i < 32; i++) assert_true(jobs[i].done);
    if (!h.gpu_answers_helped) fail_msg("the dispatcher completed all 32 answers alone");
}

/* A simulated GPU whose batches cost a fixed launch_ns and 1 us a job: the jobs' part is tiny beside it. */
static isn_gpu_sim_config launch_bound_sim(double launch_ns) {
    isn_gpu_sim_config sim;
    isn_gpu_sim_config_default(&sim);
    sim.launch_ns = launch_ns;
    sim.per_query_ns = 1000;
    sim.per_posting_ns = 0;
    return sim;
}

static void gpu_jobs_learn_their_part_not_the_launch(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    isn_gpu_sim_config sim = launch_bound_sim(3e6);
    isn_gpu_device gpu;
    harness_attach_gpu(&config, &sim, 16, &gpu);
    config.batch.max_batch = 16;
    config.batch.linger_ns = 2000000;
    isn_scheduler *s = harness_start(&config);
    static test_job jobs[40 * 16];
    uint32_t sent = 0;
    for (int burst = 0; burst < 40; burst++) {
        uint32_t size = 1u << (burst % 5);
        for (uint32_t i = 0; i < size; i++, sent++) {
            small_job(&jobs[sent], 0);
            jobs[sent].job.placement = ISN_PLACE_GPU;
            assert_int_equal(isn_scheduler_submit(s, &jobs[sent].job), ISN_SUBMIT_QUEUED);
        }
        harness_wait(&h, &h.completed, sent);
    }
    isn_scheduler_stats stats = scheduler_stats(s);
    isn_job_features f = jobs[0].job.features;
    isn_cost_model model;
    sched_get_model(s, &model);
    double per_job = isn_cost_predict_ns(&model, ISN_DEVICE_GPU, &f);
    print_message("learned: batch fixed %.0f us (launch 3000), per job %.0f us; a job's GPU prediction %.0f us\n",
                  stats.batch_fixed_seconds * 1e6, stats.batch_per_job_seconds * 1e6, per_job / 1e3);
    assert_int_equal(stats.ran_on[ISN_DEVICE_GPU], sent);
    assert_true(stats.batches >= 40);
    assert_true(stats.batch_fixed_seconds > 2e-3 && stats.batch_fixed_seconds < 6e-3);
    assert_true(per_job < 500e3);
    isn_scheduler_stop(s);
    isn_gpu_sim_free(&gpu);
}

/* Batches whose time varies by a millisecond around a millisecond-sized fixed part (a simulated GPU:
 * 5 ms a launch, up to 2 ms late, as a host's late wake-ups make it) teach the scale the batch's error,
 * near 1, and not the microsecond jobs' error, a thousandfold: learnt per job, the scale sat at its cap
 * of 8, and admission then refused the GPU nearly everything (a simulated GPU-only node answered 3-7k
 * of 20k requests a second on time). The jobs' own cost stays microseconds. */
static void gpu_scale_learns_the_batch_error(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    isn_gpu_sim_config sim = launch_bound_sim(5e6);
    sim.jitter_ns = 2e6;
    isn_gpu_device gpu;
    isn_cost_model model;
    harness_attach_known_gpu(&config, &sim, &gpu, &model);
    isn_scheduler *s = harness_start(&config);
    static test_job jobs[20];
    for (uint32_t i = 0; i < 20; i++) {
        small_job(&jobs[i], 0);
        jobs[i].job.placement = ISN_PLACE_GPU;
        assert_int_equal(isn_scheduler_submit(s, &jobs[i].job), ISN_SUBMIT_QUEUED);
        harness_wait(&h, &h.completed, i + 1); /* one job a batch */
    }
    double scale = sched_scale(s, ISN_DEVICE_GPU, isn_now_ns());
    print_message("GPU scale after 20 batches: %.2f\n", scale);
    assert_true(scale < 4.0);
    isn_job_features f = jobs[0].job.features;
    isn_cost_model learned;
    sched_get_model(s, &learned);
    assert_true(isn_cost_predict_ns(&learned, ISN_DEVICE_GPU, &f) < 100e3); /* a job stays microseconds */
    isn_scheduler_stop(s);
    isn_gpu_sim_free(&gpu);
}

/* A job's lesson from its batch: its share of the time past the fixed part, within 0.1x-4x its
 * prediction; the scale's sample is the whole batch. */
static void gpu_lesson_bounds_a_jobs_share(void **state) {
    (void)state;
    /* one job predicted 1 us behind a 5 ms fixed part, the batch 1 ms late */
    isn_gpu_lesson late = isn_gpu_lesson_of(6e6, 5e6, 5e6 + 1e3, 1e3, 1);
    assert_true(late.cost_ns == SCHED_SHARE_HIGH * 1e3);
    assert_true(late.wall_ns == 6e6 && late.predicted_ns == 5e6 + 1e3);
    /* on time: its share */
    isn_gpu_lesson fair = isn_gpu_lesson_of(5e6 + 4e3, 5e6, 5e6 + 4e3, 1e3, 4);
    assert_true(fabs(fair.cost_ns - 1e3) < 1e-6);
    /* early (a fixed part overestimated): at least a tenth of its prediction */
    isn_gpu_lesson early = isn_gpu_lesson_of(4e6, 5e6, 5e6 + 1e3, 1e3, 1);
    assert_true(early.cost_ns == SCHED_SHARE_LOW * 1e3);
    /* no predictions: an equal share */
    isn_gpu_lesson unknown = isn_gpu_lesson_of(5e6 + 4e3, 5e6, 5e6, 0.0, 4);
    assert_true(fabs(unknown.cost_ns - 1e3) < 1e-6);
}

/* prepare(): refuses jobs whose user asked for it, gives the others the features of a query slow
 * enough (on the CPU) that a short deadline cannot be met. */
typedef struct {
    test_job t;
    bool refuse;
    bool slow;
    bool prepared_on_worker;
} prepared_job;

static bool harness_prepare(void *user, isn_job *job, void *worker_state) {
    prepared_job *p = (prepared_job *)job->user;
    p->prepared_on_worker = worker_state == user;
    if (p->refuse) return false;
    if (p->slow) {
        isn_job_features *f = &job->features;
        f->total = f->shortest = f->longest = f->essential = f->expected_postings = 2000000000ull;
        f->blocks = f->total / 128;
    }
    return true;
}

/* Large requests' preparation held at a gate: how many are inside at once. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool open;
    uint32_t inside, most_inside;
} large_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0};

static bool gated_prepare(void *user, isn_job *job, void *worker_state) {
    (void)user, (void)worker_state;
    if (!job->prepare_on_worker) return true;
    pthread_mutex_lock(&large_gate.lock);
    large_gate.inside++;
    if (large_gate.inside > large_gate.most_inside) large_gate.most_inside = large_gate.inside;
    pthread_cond_broadcast(&large_gate.changed);
    while (!large_gate.open) pthread_cond_wait(&large_gate.changed, &large_gate.lock);
    large_gate.inside--;
    pthread_mutex_unlock(&large_gate.lock);
    return true;
}

/* Three large requests and three workers: one worker prepares them, one at a time, and the normal
 * requests that come meanwhile are prepared and run by the others. (The wait for them gives up after
 * 30 s so that a scheduler that lets large requests take every worker fails instead of hanging.) */
static void large_requests_take_one_worker(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.prepare = gated_prepare;
    config.workers = 3;
    isn_scheduler *s = harness_start(&config);
    static test_job large[3], normal[4];
    for (int i = 0; i < 3; i++) {
        small_job(&large[i], 0);
        large[i].job.prepare_on_worker = true;
        assert_int_equal(isn_scheduler_submit(s, &large[i].job), ISN_SUBMIT_QUEUED);
    }
    pthread_mutex_lock(&large_gate.lock);
    while (large_gate.inside < 1) pthread_cond_wait(&large_gate.changed, &large_gate.lock);
    pthread_mutex_unlock(&large_gate.lock);
    for (int i = 0; i < 4; i++) {
        small_job(&normal[i], 0);
        assert_int_equal(isn_scheduler_submit(s, &normal[i].job), ISN_SUBMIT_QUEUED);
    }
    struct timespec give_up;
    clock_gettime(CLOCK_REALTIME, &give_up);
    give_up.tv_sec += 30;
    pthread_mutex_lock(&h.lock);
    while (h.completed < 4 && pthread_cond_timedwait(&h.changed, &h.lock, &give_up) == 0) {}
    uint32_t completed = h.completed;
    pthread_mutex_unlock(&h.lock);
    pthread_mutex_lock(&large_gate.lock);
    uint32_t most = large_gate.most_inside;
    large_gate.open = true;
    pthread_cond_broadcast(&large_gate.changed);
    pthread_mutex_unlock(&large_gate.lock);
    assert_int_equal(completed, 4); /* the normal ones, while the large ones waited */
    for (int i = 0; i < 4; i++) assert_true(normal[i].done);
    assert_int_equal(most, 1);
    harness_wait(&h, &h.completed, 7);
    isn_scheduler_stop(s);
}

/* Preparations held one by one: the job numbered n (1, 2, ...) waits inside prepare() until the test has
 * released n; `entered` is the highest number that reached prepare(). */
typedef struct {
    test_job t;
    uint32_t number;
} numbered_job;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    uint32_t entered, released;
} prepare_turns = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static bool prepare_in_turn(void *user, isn_job *job, void *worker_state) {
    (void)user, (void)worker_state;
    numbered_job *n = (numbered_job *)job->user;
    pthread_mutex_lock(&prepare_turns.lock);
    prepare_turns.entered = n->number;
    pthread_cond_broadcast(&prepare_turns.changed);
    while (prepare_turns.released < n->number) pthread_cond_wait(&prepare_turns.changed, &prepare_turns.lock);
    pthread_mutex_unlock(&prepare_turns.lock);
    return true;
}

/* Whether job `number` reached prepare() within 30 s (a job refused unprepared never does). */
static bool wait_entered(uint32_t number) {
    struct timespec give_up;
    clock_gettime(CLOCK_REALTIME, &give_up);
    give_up.tv_sec += 30;
    pthread_mutex_lock(&prepare_turns.lock);
    while (prepare_turns.entered < number &&
           pthread_cond_timedwait(&prepare_turns.changed, &prepare_turns.lock, &give_up) == 0) {}
    bool entered = prepare_turns.entered >= number;
    pthread_mutex_unlock(&prepare_turns.lock);
    return entered;
}

static void release_turn(uint32_t number) {
    pthread_mutex_lock(&prepare_turns.lock);
    prepare_turns.released = number;
    pthread_cond_broadcast(&prepare_turns.changed);
    pthread_mutex_unlock(&prepare_turns.lock);
}

/* A standing backlog in the preparation queue (CoDel: an interval whose every request waited past the
 * target), built with one worker whose preparations the test holds: job 1 is taken at once, job 2 after
 * waiting 250 ms (it ends CoDel's first interval, whose least wait was job 1's), job 3 after another
 * 250 ms, ending an interval whose least wait was job 2's. Job 3 has 10 s to its deadline, far from its
 * admission point. With codel_drops_waited it is refused unprepared (CoDel's drop after a wait); without,
 * it is prepared and run. The margins (250 ms against CoDel's 100 ms interval and 5 ms target) are about
 * the order of the takes, not about speed. */
static void a_request_that_waited_in_a_standing_backlog(bool drops_waited) {
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.prepare = prepare_in_turn;
    config.codel_drops_waited = drops_waited;
    prepare_turns.entered = prepare_turns.released = 0;
    isn_scheduler *s = harness_start(&config);
    static numbered_job jobs[3];
    for (uint32_t i = 0; i < 3; i++) {
        small_job(&jobs[i].t, 0);
        jobs[i].t.job.user = &jobs[i];
        jobs[i].number = i + 1;
    }
    assert_int_equal(isn_scheduler_submit(s, &jobs[0].t.job), ISN_SUBMIT_QUEUED);
    assert_true(wait_entered(1));
    for (uint32_t i = 1; i < 3; i++) {
        jobs[i].t.job.deadline_ns = isn_now_ns() + 10000000000ull;
        assert_int_equal(isn_scheduler_submit(s, &jobs[i].t.job), ISN_SUBMIT_QUEUED);
        sleep_until(isn_now_ns() + 250000000ull);
        release_turn(i); /* job i leaves prepare(); the worker takes job i + 1 */
        if (i == 1) assert_true(wait_entered(2));
    }
    if (!drops_waited && !wait_entered(3)) {
        release_turn(3);
        fail_msg("job 3 never reached prepare(): refused unprepared after its wait");
    }
    release_turn(3);
    harness_wait(&h, &h.completed, 3);
    isn_scheduler_stats stats = scheduler_stats(s);
    assert_int_equal(jobs[1].t.job.outcome, ISN_JOB_RAN);
    if (drops_waited) {
        assert_int_equal(jobs[2].t.job.outcome, ISN_JOB_REFUSED);
        assert_int_equal(stats.shed_unprepared, 1);
        assert_int_equal(stats.shed_unprepared_late, 0);
    } else {
        assert_int_equal(jobs[2].t.job.outcome, ISN_JOB_RAN);
        assert_int_equal(stats.shed_unprepared, 0);
    }
    isn_scheduler_stop(s);
}

static void codel_drops_a_request_that_waited_in_a_standing_backlog(void **state) {
    (void)state;
    a_request_that_waited_in_a_standing_backlog(true);
}

static void without_codel_drops_a_request_that_waited_is_served(void **state) {
    (void)state;
    a_request_that_waited_in_a_standing_backlog(false);
}

/* A submission made on a thread of its own; done and result under the harness's lock. */
typedef struct {
    harness *h;
    isn_scheduler *s;
    isn_job *job;
    bool done;
    isn_submit_result result;
} submitter;

static void *submit_on_thread(void *arg) {
    submitter *sub = arg;
    isn_submit_result result = isn_scheduler_submit(sub->s, sub->job);
    pthread_mutex_lock(&sub->h->lock);
    sub->result = result;
    sub->done = true;
    pthread_cond_broadcast(&sub->h->changed);
    pthread_mutex_unlock(&sub->h->lock);
    return NULL;
}

/* isnd's loops queue every request for preparation and wake an idle worker for it. They must not need
 * the scheduler's lock for that (admissions and a dispatcher filling a batch hold it), nor the
 * preparation queue's (the workers taking preparations hold it): under load the loops waited on each,
 * for milliseconds whenever the holder was preempted. Here the test holds one of them while a request
 * is queued (the submission is given 10 s, so that one that waits for the lock fails instead of
 * hanging); the request is then prepared and run. */
static void queues_a_preparation_while_held(pthread_mutex_t *(*held)(isn_scheduler *s)) {
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.prepare = harness_prepare;
    isn_scheduler *s = harness_start(&config);
    while (atomic_load(&s->idle.count) < 1) sleep_until(isn_now_ns() + 100000);
    static prepared_job job;
    memset(&job, 0, sizeof job);
    small_job(&job.t, 0);
    job.t.job.user = &job;
    submitter sub = {.h = &h, .s = s, .job = &job.t.job, .done = false};
    pthread_mutex_t *lock = held(s);
    pthread_mutex_lock(lock);
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, submit_on_thread, &sub), 0);
    struct timespec give_up;
    clock_gettime(CLOCK_REALTIME, &give_up);
    give_up.tv_sec += 10;
    pthread_mutex_lock(&h.lock);
    while (!sub.done && pthread_cond_timedwait(&h.changed, &h.lock, &give_up) == 0) {}
    bool returned_while_locked = sub.done;
    pthread_mutex_unlock(&h.lock);
    pthread_mutex_unlock(lock);
    pthread_join(thread, NULL);
    assert_true(returned_while_locked);
    assert_int_equal(sub.result, ISN_SUBMIT_QUEUED);
    harness_wait(&h, &h.completed, 1);
    assert_int_equal(job.t.job.outcome, ISN_JOB_RAN);
    assert_true(job.prepared_on_worker);
    isn_scheduler_stop(s);
}

static pthread_mutex_t *scheduler_lock(isn_scheduler *s) { return &s->lock; }
static pthread_mutex_t *preparation_queue_lock(isn_scheduler *s) { return &s->prepare_lock; }

static void queuing_a_preparation_wakes_a_worker_without_the_lock(void **state) {
    (void)state;
    queues_a_preparation_while_held(scheduler_lock);
}

static void queuing_a_preparation_needs_no_preparation_lock(void **state) {
    (void)state;
    queues_a_preparation_while_held(preparation_queue_lock);
}

/* One worker whose preparations the test releases in turn (prepare_in_turn), a preparation queue of
 * `capacity`, and six jobs numbered 1-6; job 1 is submitted and the worker sits in its preparation, so
 * that nothing more is taken until the test releases it. */
static isn_scheduler *start_with_job_1_held(harness *h, uint32_t capacity, numbered_job jobs[6]) {
    isn_scheduler_config config;
    harness_config(h, &config);
    config.prepare = prepare_in_turn;
    config.queue_capacity = capacity;
    pthread_mutex_lock(&prepare_turns.lock);
    prepare_turns.entered = prepare_turns.released = 0;
    pthread_mutex_unlock(&prepare_turns.lock);
    isn_scheduler *s = harness_start(&config);
    for (uint32_t i = 0; i < 6; i++) {
        small_job(&jobs[i].t, 0);
        jobs[i].t.job.user = &jobs[i];
        jobs[i].number = i + 1;
    }
    assert_int_equal(isn_scheduler_submit(s, &jobs[0].t.job), ISN_SUBMIT_QUEUED);
    assert_true(wait_entered(1));
    return s;
}

/* Requests queued for preparation without the queue's lock still count against queue_capacity (none
 * is taken while job 1 is held), and none is lost: the ones let in are prepared in the order they
 * came, or abandoned by a stop. */
static void staged_preparations_keep_the_capacity_and_their_order(bool stop_first) {
    harness h;
    static numbered_job jobs[6];
    isn_scheduler *s = start_with_job_1_held(&h, 3, jobs);
    for (int i = 1; i < 4; i++) assert_int_equal(isn_scheduler_submit(s, &jobs[i].t.job), ISN_SUBMIT_QUEUED);
    assert_int_equal(isn_scheduler_submit(s, &jobs[4].t.job), ISN_SUBMIT_SHED_FULL);
    if (stop_first) {
        /* the stop waits for the worker, which leaves job 1 once released; jobs 2-4 are abandoned or
         * prepared in turn, whichever comes first, and each is completed once */
        pthread_mutex_lock(&prepare_turns.lock);
        prepare_turns.released = 4;
        pthread_cond_broadcast(&prepare_turns.changed);
        pthread_mutex_unlock(&prepare_turns.lock);
        isn_scheduler_stop(s);
        assert_int_equal(h.completed, 4); /* each job's completion counts once */
        for (int i = 0; i < 4; i++) assert_true(jobs[i].t.done);
        assert_false(jobs[4].t.done);
        return;
    }
    for (uint32_t n = 1; n <= 4; n++) {
        assert_true(wait_entered(n));
        /* 2, 3 and 4 in the order they came: a later one would have entered instead, and waited */
        pthread_mutex_lock(&prepare_turns.lock);
        uint32_t entered = prepare_turns.entered;
        pthread_mutex_unlock(&prepare_turns.lock);
        assert_int_equal(entered, n);
        release_turn(n);
    }
    /* each prepared and completed once (run, or refused by the CPU queue, which has the same small
     * capacity and which the worker fills before it runs any: preparing comes first) */
    harness_wait(&h, &h.completed, 4);
    for (int i = 0; i < 4; i++) assert_true(jobs[i].t.done);
    assert_false(jobs[4].t.done);
    assert_int_equal(isn_scheduler_submit(s, &jobs[5].t.job), ISN_SUBMIT_QUEUED); /* room again */
    assert_true(wait_entered(6));
    release_turn(6);
    harness_wait(&h, &h.completed, 5);
    isn_scheduler_stop(s);
}

static void staged_preparations_are_bounded_and_run_in_order(void **state) {
    (void)state;
    staged_preparations_keep_the_capacity_and_their_order(false);
}

static void staged_preparations_are_abandoned_by_a_stop(void **state) {
    (void)state;
    staged_preparations_keep_the_capacity_and_their_order(true);
}

/* Large requests queued to their bound leave the normal ones their whole room: a sender of 4 MiB
 * queries cannot get normal requests refused as a full queue. */
static void large_requests_leave_normal_ones_their_room(void **state) {
    (void)state;
    harness h;
    static numbered_job jobs[6];
    isn_scheduler *s = start_with_job_1_held(&h, 2, jobs);
    jobs[1].t.job.prepare_on_worker = jobs[2].t.job.prepare_on_worker = true;
    for (int i = 1; i < 5; i++) assert_int_equal(isn_scheduler_submit(s, &jobs[i].t.job), ISN_SUBMIT_QUEUED);
    assert_int_equal(isn_scheduler_submit(s, &jobs[5].t.job), ISN_SUBMIT_SHED_FULL);
    release_turn(6);
    harness_wait(&h, &h.completed, 5);
    isn_scheduler_stop(s);
}

static void unprepared_jobs_are_prepared_by_workers_then_admitted(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.prepare = harness_prepare;
    config.workers = 2;
    isn_scheduler *s = harness_start(&config);
    static prepared_job jobs[4];
    uint64_t now = isn_now_ns();
    for (int i = 0; i < 4; i++) {
        /* job 3's budget is far past what a worker's wakeup can take on a loaded machine (its admission
         * point at 5 ms was missed there) and far short of what its features predict */
        small_job(&jobs[i].t, i == 3 ? now + 200000000 : 0);
        jobs[i].t.job.user = &jobs[i];
        jobs[i].refuse = i == 1;
        jobs[i].slow = i == 3;
    }
    /* complete() finds its test_job through job->user: the prepared_job starts with it. */
    for (int i = 0; i < 4; i++) assert_int_equal(isn_scheduler_submit(s, &jobs[i].t.job), ISN_SUBMIT_QUEUED);
    harness_wait(&h, &h.completed, 4);
    assert_int_equal(jobs[0].t.job.outcome, ISN_JOB_RAN);
    assert_int_equal(jobs[2].t.job.outcome, ISN_JOB_RAN);
    assert_int_equal(jobs[1].t.job.outcome, ISN_JOB_REFUSED);
    assert_int_equal(jobs[1].t.job.refusal, 0);
    /* Prepared, then admission saw it could not finish in 200 ms on an idle node: its own cost, not
     * overload, so it ran cut short (a partial answer) instead of being refused. */
    assert_int_equal(jobs[3].t.job.outcome, ISN_JOB_RAN);
    assert_true(jobs[3].t.job.degraded);
    for (int i = 0; i < 4; i++) assert_true(jobs[i].prepared_on_worker);
    assert_int_equal(h.ran_cpu, 3);
    isn_scheduler_stats stats = scheduler_stats(s);
    assert_int_equal(stats.prepared, 3);
    assert_int_equal(stats.refused_prepare, 1);
    assert_int_equal(stats.prepare_depth, 0);

    /* One worker, held by a job: a job whose deadline passes while it waits for preparation is
     * answered DEADLINE_EXCEEDED without being prepared; after abandon_queued, waiting ones are
     * abandoned. */
    isn_scheduler_stop(s);
    harness_config(&h, &config);
    config.prepare = harness_prepare;
    h.hold = true;
    s = harness_start(&config);
    static prepared_job blocker, late, waiting;
    prepared_job *setup[3] = {&blocker, &late, &waiting};
    for (int i = 0; i < 3; i++) {
        memset(setup[i], 0, sizeof *setup[i]);
        small_job(&setup[i]->t, i == 1 ? isn_now_ns() + 1000000 : 0);
        setup[i]->t.job.user = setup[i];
    }
    harness_occupy(&h, s, &blocker.t.job);
    assert_int_equal(isn_scheduler_submit(s, &late.t.job), ISN_SUBMIT_QUEUED);
    assert_int_equal(isn_scheduler_submit(s, &waiting.t.job), ISN_SUBMIT_QUEUED);
    sleep_until(isn_now_ns() + 2000000);
    isn_scheduler_get_stats(s, &stats);
    assert_int_equal(stats.prepare_depth, 2);
    isn_scheduler_abandon_queued(s);
    harness_release(&h);
    harness_wait(&h, &h.completed, 3);
    assert_int_equal(blocker.t.job.outcome, ISN_JOB_RAN);
    assert_int_equal(late.t.job.outcome, ISN_JOB_DEADLINE_EXCEEDED);
    assert_false(late.prepared_on_worker);
    assert_int_equal(waiting.t.job.outcome, ISN_JOB_ABANDONED);
    assert_false(waiting.prepared_on_worker);
    isn_scheduler_stop(s);
}

/* Preparation comes before searching: a backlog of unprepared jobs is part of the CPU's wait, so
 * admission refuses what cannot be prepared and searched in time. */
/* A scheduler whose one worker prepares, held busy by jobs[0]; jobs[1..n-1] made, not submitted. */
static void prepared_jobs_init(prepared_job *jobs, int n) {
    for (int i = 0; i < n; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        small_job(&jobs[i].t, 0);
        jobs[i].t.job.user = &jobs[i];
    }
}

static isn_scheduler *start_held_preparer(harness *h, prepared_job *jobs, int n) {
    isn_scheduler_config config;
    harness_config(h, &config);
    config.prepare = harness_prepare;
    h->hold = true;
    isn_scheduler *s = harness_start(&config);
    prepared_jobs_init(jobs, n);
    harness_occupy(h, s, &jobs[0].t.job);
    return s;
}

static void preparation_backlog_counts_as_cpu_wait(void **state) {
    (void)state;
    harness h;
    static prepared_job jobs[1001];
    isn_scheduler *s = start_held_preparer(&h, jobs, 1001);
    uint64_t now = isn_now_ns();
    /* 10 ms budget, admitted up to 40%: 4 ms. */
    assert_true(isn_scheduler_may_admit(s, now, now + 10000000, false));
    for (int i = 1; i < 1001; i++) assert_int_equal(isn_scheduler_submit(s, &jobs[i].t.job), ISN_SUBMIT_QUEUED);
    /* 1,000 preparations of ~20 us each ahead of it, on one worker: about 20 ms. */
    now = isn_now_ns();
    assert_false(isn_scheduler_may_admit(s, now, now + 10000000, false));
    assert_true(isn_scheduler_may_admit(s, now, now + 1000000000ull, false));
    harness_finish(&h, s, 1001);
}

/* The requests let in and not yet prepared count at arrival for the CPU time they will queue: 20 of
 * them at a typical 1 ms each, on one worker, hold a new request past a 20 ms budget's admission point
 * (8 ms), though their preparations alone take well under 1 ms. */
static void arrival_counts_what_waits_to_be_prepared(void **state) {
    (void)state;
    harness h;
    static prepared_job jobs[21];
    isn_scheduler *s = start_held_preparer(&h, jobs, 21);
    pthread_mutex_lock(&s->lock);
    s->arrival_cost_ns = 1e6; /* arrivals lately were predicted to take 1 ms each */
    pthread_mutex_unlock(&s->lock);
    uint64_t now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 20000000, false));
    for (int i = 1; i < 21; i++) assert_int_equal(isn_scheduler_submit(s, &jobs[i].t.job), ISN_SUBMIT_QUEUED);
    now = isn_now_ns();
    assert_false(isn_scheduler_may_admit(s, now, now + 20000000, false));
    assert_false(isn_scheduler_may_admit_quick(s, now, now + 20000000, false));
    assert_true(isn_scheduler_may_admit(s, now, now + 1000000000ull, false));
    harness_finish(&h, s, 21);
}

/* A request arriving while others wait to be prepared waits at least as long as the preparation queue has
 * gone without moving, whatever the count of pending preparations suggests (in the hybrid the workers
 * prepare between CPU jobs): the one worker is held in a CPU job with one request pending, and after 25 ms
 * of that a request with a 50 ms budget (admitted up to 20 ms) is refused at arrival, counted as refused
 * by the preparations ahead, instead of being let in to wait past its admission point. With nothing
 * pending that stillness no longer counts. */
static void preparation_wait_is_at_least_the_queues_stillness(void **state) {
    (void)state;
    harness h;
    static prepared_job jobs[2];
    isn_scheduler *s = start_held_preparer(&h, jobs, 2);
    assert_int_equal(isn_scheduler_submit(s, &jobs[1].t.job), ISN_SUBMIT_QUEUED); /* one pending, ~20 us */
    uint64_t now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false));
    sleep_until(isn_now_ns() + 25000000); /* the queue still for 25 ms */
    /* what /metrics shows of it: the queue still for the 25 ms at least, and the wait predicted from that */
    isn_scheduler_stats stalled = scheduler_stats(s);
    assert_true(stalled.prepare_still_seconds >= 0.025);
    assert_true(stalled.prepare_predicted_wait_seconds >= stalled.prepare_still_seconds);
    now = isn_now_ns();
    assert_false(isn_scheduler_may_admit(s, now, now + 50000000, false));
    assert_int_equal(scheduler_stats(s).shed_arrival_preparing, 1);
    assert_false(isn_scheduler_may_admit_quick(s, now, now + 50000000, false));
    assert_true(isn_scheduler_may_admit(s, now, now + 1000000000ull, false));
    harness_release(&h);
    harness_wait(&h, &h.completed, 2);
    /* nothing pending: the stillness says nothing about the next */
    assert_true(scheduler_stats(s).prepare_still_seconds == 0.0);
    now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false));
    isn_scheduler_stop(s);
}

/* A stall of the whole node holds the preparation queue still, and its workers with it: they go on when
 * it ends. The one worker is held 25 ms with a request pending, as in a stall. A request read then that
 * waited those 25 ms unread, by a loop that keeps up with its sockets, tells that the node was stopped
 * (its loops with it) and resumed now: the stillness counts from then, and a fresh request with a 50 ms
 * budget (admitted up to 20 ms) is admitted. The same request read by a saturated loop is old from
 * overload, not from a stall, and tells nothing: the fresh request is refused on the 25 ms. */
static void a_loop_that_read_a_stalls_backlog_restarts_the_stillness(void **state) {
    (void)state;
    harness h;
    static prepared_job jobs[2];
    isn_scheduler *s = start_held_preparer(&h, jobs, 2);
    assert_int_equal(isn_scheduler_submit(s, &jobs[1].t.job), ISN_SUBMIT_QUEUED);
    uint64_t held_from = isn_now_ns();
    sleep_until(held_from + 25000000);
    uint64_t now = isn_now_ns();
    assert_true(isn_scheduler_may_admit_quick(s, held_from, held_from + 1000000000ull, false));
    assert_false(isn_scheduler_may_admit(s, now, now + 50000000, false));
    assert_true(scheduler_stats(s).prepare_still_seconds >= 0.025);
    assert_int_equal(scheduler_stats(s).stalls_seen, 0);
    assert_true(isn_scheduler_may_admit_quick(s, held_from, held_from + 1000000000ull, true));
    assert_true(isn_scheduler_may_admit_quick(s, held_from, held_from + 1000000000ull, true)); /* the same stall's */
    now = isn_now_ns();
    isn_scheduler_stats resumed = scheduler_stats(s);
    assert_true(resumed.prepare_still_seconds < 0.025);
    assert_int_equal(resumed.stalls_seen, 1);
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false));
    assert_true(isn_scheduler_may_admit_quick(s, now, now + 50000000, false));
    harness_finish(&h, s, 2);
}

/* One job's CPU run held at a gate (run_gate.hold_on) until another is named or none. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    const isn_job *hold_on, *inside;
} run_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL};

static void gated_run_cpu(void *user, isn_job *job, const isn_cpu_context *context) {
    pthread_mutex_lock(&run_gate.lock);
    if (job == run_gate.hold_on) {
        run_gate.inside = job;
        pthread_cond_broadcast(&run_gate.changed);
        while (job == run_gate.hold_on) pthread_cond_wait(&run_gate.changed, &run_gate.lock);
    }
    pthread_mutex_unlock(&run_gate.lock);
    harness_run_cpu(user, job, context); /* h->hold is off: it counts the run and returns */
}

static void run_gate_hold(const isn_job *job) {
    pthread_mutex_lock(&run_gate.lock);
    run_gate.hold_on = job;
    pthread_cond_broadcast(&run_gate.changed);
    pthread_mutex_unlock(&run_gate.lock);
}

static void run_gate_wait_inside(const isn_job *job) {
    pthread_mutex_lock(&run_gate.lock);
    while (run_gate.inside != job) pthread_cond_wait(&run_gate.changed, &run_gate.lock);
    pthread_mutex_unlock(&run_gate.lock);
}

/* A stall's wait ends with the stall: the one worker is held 25 ms in a CPU job while two requests wait
 * to be prepared, then takes them (each had waited 25 ms) and is held again in the first one's run. A
 * request let in next has only itself pending, in a queue that has just moved, and is admitted with a
 * 50 ms budget (admitted up to 20 ms): the wait of those taken in the drain is not carried to it. */
static void a_stall_that_ended_holds_no_arrival_back(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.prepare = harness_prepare;
    config.run_cpu = gated_run_cpu;
    static prepared_job jobs[4];
    prepared_jobs_init(jobs, 4);
    run_gate_hold(&jobs[0].t.job);
    isn_scheduler *s = harness_start(&config);
    assert_int_equal(isn_scheduler_submit(s, &jobs[0].t.job), ISN_SUBMIT_QUEUED);
    run_gate_wait_inside(&jobs[0].t.job);
    assert_int_equal(isn_scheduler_submit(s, &jobs[1].t.job), ISN_SUBMIT_QUEUED);
    assert_int_equal(isn_scheduler_submit(s, &jobs[2].t.job), ISN_SUBMIT_QUEUED);
    sleep_until(isn_now_ns() + 25000000); /* the stall */
    run_gate_hold(&jobs[1].t.job); /* job 0 goes on; the worker prepares jobs 1 and 2 and stops in job 1's run */
    run_gate_wait_inside(&jobs[1].t.job);
    isn_scheduler_stats drained = scheduler_stats(s);
    assert_int_equal(drained.prepare_depth, 0);
    assert_int_equal(isn_scheduler_submit(s, &jobs[3].t.job), ISN_SUBMIT_QUEUED);
    uint64_t now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false));
    assert_true(isn_scheduler_may_admit_quick(s, now, now + 50000000, false));
    assert_int_equal(scheduler_stats(s).shed_overload, 0);
    run_gate_hold(NULL);
    harness_wait(&h, &h.completed, 4);
    isn_scheduler_stop(s);
}

/* Requests waiting to be prepared hold a new one back on the GPU as on the CPU, by the queue's measured
 * drain: the one worker is held, 200 requests wait, and a simulated GPU whose batches take 5 ms is idle
 * (the CPU does not count: the jobs lately were all the GPU's). A 50 ms budget's admission point is
 * 20 ms away. Counted as 200 preparations of ~20 us on one worker (4 ms) they leave it in reach; drained
 * at the measured one per 100 us (20 ms) they hold the request past it, both in the full check and in
 * the quick one reading a view published before they queued. At one per 80 us (16 ms, then 5 ms on the
 * GPU) it is admitted: routing moves the admission point by the preparation's wait (up to half the way
 * to the early-stop point, 10 ms), and the arrival check grants the same. */
static double random_ns(double max_ns) { return support_rng_unit() * max_ns; }

/* The quick check refuses on the published view alone, with nothing counted as waiting to be prepared,
 * before it reads the counts every loop and worker write: exact only while the arrival check gets no
 * easier as the requests waiting to be prepared and the preparations' wait grow (the credit they earn
 * moves the admission point by less than they move the job's start and end). Checked over views made as
 * publish_waits makes them (each device's start after the preparations, the CPU's at times not counted). */
static void arrival_check_never_eases_as_preparations_wait(void **state) {
    (void)state;
    support_rng_seed(42);
    int admitted = 0, refused = 0;
    for (int i = 0; i < 200000; i++) {
        sched_arrival_view view;
        view.preparing = support_rng_below(4) ? random_ns(20e6) : 0.0;
        view.cpu_start = view.preparing + random_ns(30e6);
        view.cpu_done = view.cpu_start + random_ns(5e6);
        if (support_rng_below(5) == 0) view.cpu_start = view.cpu_done = INFINITY;
        view.gpu_start = view.preparing + random_ns(30e6);
        view.gpu_done = view.gpu_start + random_ns(2e6);
        view.per_pending = random_ns(200e3);
        double remaining = random_ns(25e6), credit_room = random_ns(15e6);
        uint32_t pending = support_rng_below(400);
        double preparing_now = view.preparing + random_ns(10e6) - 3e6; /* at times below the view's */
        if (preparing_now < 0) preparing_now = 0;
        bool full = sched_arrival_admits_view(&view, remaining, pending, preparing_now, credit_room);
        bool alone = sched_arrival_admits_view(&view, remaining, 0, view.preparing, credit_room);
        if (full && !alone)
            fail_msg("case %d: refused on the view alone, admitted with %u pending and %.0f ns preparing "
                     "(view: cpu %.0f..%.0f, gpu %.0f..%.0f, per pending %.0f, preparing %.0f; remaining %.0f, credit room %.0f)",
                     i, pending, preparing_now, view.cpu_start, view.cpu_done, view.gpu_start, view.gpu_done,
                     view.per_pending, view.preparing, remaining, credit_room);
        double more = preparing_now + random_ns(5e6);
        if (sched_arrival_admits_view(&view, remaining, pending + 1 + support_rng_below(50), preparing_now, credit_room) &&
            !full)
            fail_msg("case %d: more requests waiting to be prepared admitted what fewer refused", i);
        if (sched_arrival_admits_view(&view, remaining, pending, more, credit_room) && !full)
            fail_msg("case %d: a longer preparations' wait admitted what a shorter one refused", i);
        full ? admitted++ : refused++;
    }
    /* both outcomes were met often enough for the property to mean something */
    assert_true(admitted > 10000);
    assert_true(refused > 10000);
}

/* Each arrival refusal names its bound: past the admission point already, the preparations ahead
 * reaching it, or the devices' predicted finish past it (with that finish and the bound it missed). */
static void arrival_refusals_name_their_bound(void **state) {
    (void)state;
    sched_arrival_view view = {.cpu_start = 1e6, .cpu_done = 2e6, .gpu_start = 3e6, .gpu_done = 4e6,
                               .per_pending = 0, .preparing = 0};
    sched_arrival_miss miss = {.done_ns = -1, .bound_ns = -1};
    assert_int_equal(sched_arrival_judge_view(&view, 10e6, 0, 0, 0, &miss), SCHED_ARRIVAL_ADMITS);
    assert_true(miss.done_ns == -1); /* untouched when admitted */
    assert_int_equal(sched_arrival_judge_view(&view, 0, 0, 0, 0, &miss), SCHED_ARRIVAL_LATE);
    assert_int_equal(sched_arrival_judge_view(&view, -5e6, 0, 0, 0, NULL), SCHED_ARRIVAL_LATE);
    assert_int_equal(sched_arrival_judge_view(&view, 10e6, 0, 12e6, 0, &miss), SCHED_ARRIVAL_PREPARING);
    /* the CPU done at 2 ms, starting at 1 ms: a 1.5-ms budget is missed (the start is past half of it) */
    assert_int_equal(sched_arrival_judge_view(&view, 1.5e6, 0, 0, 0, &miss), SCHED_ARRIVAL_WAIT);
    assert_true(miss.done_ns == 2e6);
    assert_true(miss.bound_ns == 1.5e6);
    /* requests waiting to be prepared add to the CPU's side; the GPU's finish is then the sooner */
    view.per_pending = 1e6;
    assert_int_equal(sched_arrival_judge_view(&view, 3.5e6, 5, 0, 0, &miss), SCHED_ARRIVAL_WAIT);
    assert_true(miss.done_ns == 4e6);
    /* the preparation credit moves the bound the finish is held to */
    view.per_pending = 0;
    view.preparing = 1e6;
    view.cpu_start = 2e6;
    view.cpu_done = 3e6;
    assert_int_equal(sched_arrival_judge_view(&view, 2e6, 0, 1e6, 10e6, &miss), SCHED_ARRIVAL_WAIT);
    assert_true(fabs(miss.bound_ns - (2e6 + SCHED_ARRIVAL_SHARE * 1e6)) < 1);
}

static void arrival_counts_the_measured_drain_of_preparations(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.prepare = harness_prepare;
    h.hold = true;
    isn_gpu_sim_config sim;
    isn_gpu_sim_config_default(&sim);
    sim.launch_ns = 5e6;
    isn_gpu_device gpu;
    isn_cost_model model;
    harness_attach_known_gpu(&config, &sim, &gpu, &model);
    isn_scheduler *s = harness_start(&config);
    static prepared_job jobs[201];
    prepared_jobs_init(jobs, 201);
    harness_occupy(&h, s, &jobs[0].t.job);
    pthread_mutex_lock(&s->lock);
    s->cpu_placeable_share = 0.0;
    pthread_mutex_unlock(&s->lock);
    uint64_t now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false)); /* publishes a view with nothing pending */
    for (int i = 1; i < 201; i++) assert_int_equal(isn_scheduler_submit(s, &jobs[i].t.job), ISN_SUBMIT_QUEUED);
    atomic_store(&s->prepare_departure_ns, 100e3);
    atomic_store(&s->waits_published_at_ns, isn_now_ns()); /* that view, still fresh */
    now = isn_now_ns();
    assert_false(isn_scheduler_may_admit_quick(s, now, now + 50000000, false));
    assert_false(isn_scheduler_may_admit(s, now, now + 50000000, false));
    assert_true(isn_scheduler_may_admit(s, now, now + 1000000000ull, false));
    atomic_store(&s->prepare_departure_ns, 80e3);
    now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false));
    atomic_store(&s->prepare_departure_ns, 0.0); /* nothing measured: the count alone */
    now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false));
    assert_true(isn_scheduler_may_admit_quick(s, now, now + 50000000, false));
    harness_finish(&h, s, 201);
    isn_gpu_sim_free(&gpu);
}

/* gpu_clearly_wins: a query far cheaper on a GPU with nothing queued is the GPU's; a tiny one, or
 * one tied to the CPU, is not; nothing is queued by asking. */
static void gpu_clearly_wins_reports_routing_without_queueing(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    isn_gpu_sim_config sim;
    isn_gpu_sim_config_default(&sim);
    isn_gpu_device gpu;
    harness_attach_gpu(&config, &sim, 8, &gpu);
    isn_cost_model model;
    isn_cost_model_init(&model);
    isn_cost_model_seed(&model, ISN_DEVICE_GPU, isn_gpu_sim_job_ns, &sim);
    config.model = &model;
    isn_scheduler *s = harness_start(&config);
    test_job big, tiny;
    small_job(&big, 0);
    isn_job_features *f = &big.job.features;
    f->total = f->shortest = f->longest = f->essential = f->expected_postings = 20000000;
    f->blocks = 20000000 / 128;
    assert_true(sched_gpu_clearly_wins(s, &big.job));
    big.job.placement = ISN_PLACE_CPU;
    assert_false(sched_gpu_clearly_wins(s, &big.job));
    small_job(&tiny, 0);
    f = &tiny.job.features;
    f->total = f->shortest = f->longest = f->essential = f->expected_postings = 3;
    assert_false(sched_gpu_clearly_wins(s, &tiny.job));
    isn_scheduler_stats stats = scheduler_stats(s);
    assert_int_equal(stats.submitted, 0);
    assert_int_equal(stats.queue_depth[ISN_QUEUE_GPU] + stats.queue_depth[ISN_QUEUE_CPU], 0);
    isn_scheduler_stop(s);
    isn_gpu_sim_free(&gpu);
}

/* The arrival check counts only devices the traffic may use: once the jobs admitted lately were all
 * the GPU's (gpu.route_all), a request that the GPU cannot finish by its admission point is refused on
 * arrival, however idle the CPU (counting the CPU let it in, and routing refused it after its
 * preparation, late); once jobs the CPU may take come back, the idle CPU counts again. */
static void arrival_ignores_a_cpu_the_jobs_cannot_use(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    isn_gpu_sim_config sim;
    isn_gpu_sim_config_default(&sim);
    sim.launch_ns = 100e6; /* every batch takes 100 ms: far past a 50 ms budget's admission point */
    isn_gpu_device gpu;
    isn_cost_model model;
    harness_attach_known_gpu(&config, &sim, &gpu, &model);
    isn_scheduler *s = harness_start(&config);
    uint64_t now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false)); /* nothing admitted yet: the CPU counts */
    static test_job gpu_jobs[16], cpu_jobs[16];
    for (int i = 0; i < 16; i++) {
        small_job(&gpu_jobs[i], 0);
        gpu_jobs[i].job.placement = ISN_PLACE_GPU;
        assert_int_equal(isn_scheduler_submit(s, &gpu_jobs[i].job), ISN_SUBMIT_QUEUED);
        assert_int_equal(gpu_jobs[i].job.queue, ISN_QUEUE_GPU);
    }
    now = isn_now_ns();
    assert_false(isn_scheduler_may_admit(s, now, now + 50000000, false)); /* the worker is idle */
    assert_true(isn_scheduler_may_admit(s, now, now + 10000000000ull, false));
    for (int i = 0; i < 16; i++) {
        small_job(&cpu_jobs[i], 0);
        cpu_jobs[i].job.placement = ISN_PLACE_CPU;
        assert_int_equal(isn_scheduler_submit(s, &cpu_jobs[i].job), ISN_SUBMIT_QUEUED);
    }
    harness_wait(&h, &h.completed, 32);
    now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 50000000, false));
    isn_scheduler_stop(s);
    isn_gpu_sim_free(&gpu);
}

/* The arrival check judges a typical arrival by what arrivals cost, not by the jobs that ran: with the
 * worker busy for ~5 ms and requests predicted to take ~20 ms refused by routing, a request with 8 ms
 * to its admission point is refused on arrival (it was let in while the CPU had measured nothing, or
 * only the cheap jobs that routing let through, and routing refused it after its preparation). */
static void arrival_judges_by_what_arrivals_cost(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    h.hold = true;
    isn_scheduler *s = harness_start(&config);
    test_job blocker;
    small_job(&blocker, 0);
    blocker.job.features.total = blocker.job.features.essential = blocker.job.features.longest = 10000000;
    blocker.job.features.expected_postings = 10000000;
    harness_occupy(&h, s, &blocker.job);
    uint64_t now = isn_now_ns();
    assert_true(isn_scheduler_may_admit(s, now, now + 20000000, false)); /* nothing judged yet */
    static test_job costly[64];
    for (int i = 0; i < 64; i++) {
        small_job(&costly[i], isn_now_ns() + 2000000);
        isn_job_features *f = &costly[i].job.features;
        f->total = f->essential = f->longest = f->expected_postings = 40000000;
        assert_int_equal(isn_scheduler_submit(s, &costly[i].job), ISN_SUBMIT_SHED_OVERLOAD);
    }
    now = isn_now_ns();
    assert_false(isn_scheduler_may_admit(s, now, now + 20000000, false));
    assert_true(isn_scheduler_may_admit(s, now, now + 1000000000ull, false));
    harness_finish(&h, s, 1);
}

/* Workers lower their own priority by worker_nice, not the caller's. */
static void workers_run_nicer_than_the_process(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.worker_nice = 3;
    int before = getpriority(PRIO_PROCESS, (id_t)gettid());
    isn_scheduler *s = harness_start(&config);
    test_job job;
    small_job(&job, 0);
    assert_int_equal(isn_scheduler_submit(s, &job.job), ISN_SUBMIT_QUEUED);
    harness_wait(&h, &h.completed, 1);
    isn_scheduler_stop(s);
    int expected = before + 3 > 19 ? 19 : before + 3;
    assert_int_equal(h.worker_nice, expected);
    assert_int_equal(getpriority(PRIO_PROCESS, (id_t)gettid()), before);
}

/* With worker_idle_policy the workers leave the normal policy for SCHED_IDLE; the caller keeps its own. */
static void workers_run_at_the_idle_policy(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.worker_idle_policy = true;
    isn_scheduler *s = harness_start(&config);
    test_job job;
    small_job(&job, 0);
    assert_int_equal(isn_scheduler_submit(s, &job.job), ISN_SUBMIT_QUEUED);
    harness_wait(&h, &h.completed, 1);
    isn_scheduler_stop(s);
    assert_true(h.worker_idle_policy);
    assert_false(isn_thread_has_idle_policy(0));
}

/* With worker_slice the workers take that scheduler slice; the caller keeps its own. */
/* Not told how many: a worker per CPU without a GPU; with one, the CPUs the loops and the dispatchers leave. */
static void default_workers_leave_the_loops_a_core(void **state) {
    (void)state;
    assert_int_equal(isn_scheduler_default_workers(12, 4, 0), 12);
    assert_int_equal(isn_scheduler_default_workers(12, 4, 1), 7);
    assert_int_equal(isn_scheduler_default_workers(16, 4, 2), 10);
    assert_int_equal(isn_scheduler_default_workers(2, 1, 1), 1);
    assert_int_equal(isn_scheduler_default_workers(1, 1, 0), 1);
    assert_int_equal(isn_scheduler_default_workers(0, 1, 0), 1);
}

/* The gate of a spare or standby worker as the test sets it (idle loops; wanted or not), and how often the
 * worker looked (under the harness's lock, so that the test can wait for looks). */
static uint32_t gate_open, gate_looks;

static uint32_t gate_look(void *user) {
    harness *h = user;
    pthread_mutex_lock(&h->lock);
    uint32_t open = gate_open;
    gate_looks++;
    pthread_cond_broadcast(&h->changed);
    pthread_mutex_unlock(&h->lock);
    return open;
}

static bool gate_wanted(void *user) { return gate_look(user) != 0; }

/* Waits until *counter reaches value, for 10 s at most; false when it did not. */
static bool harness_wait_for(harness *h, uint32_t *counter, uint32_t value) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&h->lock);
    while (*counter < value && pthread_cond_timedwait(&h->changed, &h->lock, &until) == 0) {}
    bool reached = *counter >= value;
    pthread_mutex_unlock(&h->lock);
    return reached;
}

static uint32_t every_loop_idle(void *user) {
    (void)user;
    return 8;
}

static uint32_t gate_thread_looked = UINT32_MAX;

static bool own_loop_idle(void *user, uint32_t thread) {
    harness *h = user;
    pthread_mutex_lock(&h->lock);
    gate_thread_looked = thread;
    pthread_mutex_unlock(&h->lock);
    return gate_look(user) != 0;
}

typedef enum {
    GATE_SPARE,             /* working while enough loops are idle */
    GATE_SPARE_BESIDE_LOOP, /* bound beside a loop (config.spare_cpus): while that loop is, whatever the count */
    GATE_STANDBY,           /* working while wanted */
} gate_kind;

/* Two workers, the second gated: a spare (in SCHED_IDLE) working while the loops look idle, a spare bound
 * beside a loop working while that loop is idle (every loop idle by count meanwhile), or a standby worker
 * working while it is wanted. With the first busy and the gate shut, a queued job waits however often the
 * gated worker looks, and runs on it once the gate opens. Admission meanwhile counts one worker, not two
 * (the stats' resting count). Returns whether the job ran at SCHED_IDLE. */
static bool gated_worker_waits_for_its_gate(gate_kind kind) {
    bool spare = kind != GATE_STANDBY;
    int cpus[1];
    harness harness_storage, *h = &harness_storage;
    isn_scheduler_config config;
    harness_config(h, &config);
    config.workers = 2;
    if (spare) {
        config.spare_workers = 1;
        config.idle_threads = kind == GATE_SPARE_BESIDE_LOOP ? every_loop_idle : gate_look;
        config.idle_threads_user = h;
        config.spare_idle_policy = true;
    } else {
        config.standby_workers = 1;
        config.standby_wanted = gate_wanted;
    }
    if (kind == GATE_SPARE_BESIDE_LOOP) {
        assert_true(isn_this_thread_cpus(cpus, 1) >= 1);
        config.thread_idle = own_loop_idle;
        config.spare_cpus = cpus;
        config.num_spare_cpus = 1;
    }
    gate_open = 0;
    gate_looks = 0;
    h->hold = true;
    isn_scheduler *s = harness_start(&config);
    test_job first, second;
    small_job(&first, 0);
    small_job(&second, 0);
    harness_occupy(h, s, &first.job);
    assert_int_equal(isn_scheduler_submit(s, &second.job), ISN_SUBMIT_QUEUED);
    pthread_mutex_lock(&h->lock);
    uint32_t looks = gate_looks;
    pthread_mutex_unlock(&h->lock);
    assert_true(harness_wait_for(h, &gate_looks, looks + 3));
    isn_scheduler_stats stats;
    isn_scheduler_get_stats(s, &stats);
    assert_int_equal(spare ? stats.spare_workers : stats.standby_workers, 1);
    assert_int_equal(spare ? stats.spares_resting : stats.standby_resting, 1);
    pthread_mutex_lock(&h->lock);
    assert_int_equal(h->ran_cpu, 1); /* the second job waits: its only taker rests */
    assert_false(h->worker_idle_policy); /* the first ran on the worker of its own core */
    if (kind == GATE_SPARE_BESIDE_LOOP) assert_int_equal(gate_thread_looked, 0);
    gate_open = 1;
    pthread_mutex_unlock(&h->lock);
    assert_true(harness_wait_for(h, &h->ran_cpu, 2)); /* and runs on the gated worker once the gate opens */
    pthread_mutex_lock(&h->lock);
    bool idle_policy = h->worker_idle_policy;
    pthread_mutex_unlock(&h->lock);
    isn_scheduler_get_stats(s, &stats);
    assert_int_equal(spare ? stats.spares_resting : stats.standby_resting, 0);
    if (spare) assert_true(stats.spare_rests >= 1);
    harness_finish(h, s, 2);
    return idle_policy;
}

/* A spare worker takes a job only while enough loops are idle, and runs it at SCHED_IDLE when asked. */
static void spare_worker_works_only_while_loops_are_idle(void **state) {
    (void)state;
    assert_true(gated_worker_waits_for_its_gate(GATE_SPARE));
}

/* A spare bound beside a loop works while that loop is idle, however many others are. */
static void bound_spare_works_while_its_own_loop_is_idle(void **state) {
    (void)state;
    assert_true(gated_worker_waits_for_its_gate(GATE_SPARE_BESIDE_LOOP));
}

/* A standby worker takes a job only while it is wanted (isnd: no GPU holds the index). */
static void standby_worker_works_only_while_wanted(void **state) {
    (void)state;
    assert_false(gated_worker_waits_for_its_gate(GATE_STANDBY));
}

/* A spare needs the loops' count and a worker of its own beside it. */
static void spare_workers_need_a_worker_and_the_loops(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.workers = 2;
    config.spare_workers = 2;
    config.idle_threads = gate_look;
    char err[256];
    assert_null(isn_scheduler_start(&config, err, sizeof err));
    assert_non_null(strstr(err, "spare"));
    config.spare_workers = 1;
    config.idle_threads = NULL;
    assert_null(isn_scheduler_start(&config, err, sizeof err));
    assert_non_null(strstr(err, "idle_threads"));
    config.idle_threads = gate_look;
    config.standby_workers = 1; /* with the spare, none of its own */
    config.standby_wanted = gate_wanted;
    assert_null(isn_scheduler_start(&config, err, sizeof err));
    assert_non_null(strstr(err, "standby"));
}

/* Not told how many loops: a quarter of the CPUs from 8 on without a GPU; beside devices, half of what their
 * dispatchers leave, the workers taking the rest. */
static void default_loops_split_the_cpus_beside_a_gpu(void **state) {
    (void)state;
    assert_int_equal(isn_scheduler_default_loops(12, 0), 3);
    assert_int_equal(isn_scheduler_default_loops(4, 0), 1);
    assert_int_equal(isn_scheduler_default_loops(12, 1), 5);
    assert_int_equal(isn_scheduler_default_workers(12, isn_scheduler_default_loops(12, 1), 1), 6);
    assert_int_equal(isn_scheduler_default_loops(16, 2), 7);
    assert_int_equal(isn_scheduler_default_workers(16, isn_scheduler_default_loops(16, 2), 2), 7);
    assert_int_equal(isn_scheduler_default_loops(4, 1), 1);
    assert_int_equal(isn_scheduler_default_loops(2, 1), 1);
    assert_int_equal(isn_scheduler_default_loops(1, 1), 1);
    assert_int_equal(isn_scheduler_default_loops(0, 1), 1);
}

static void workers_take_their_slice(void **state) {
    (void)state;
    if (!isn_thread_slice_ns(0)) {
        print_message("skipped: this kernel does not say a thread's slice (per-thread slices need Linux 6.12)\n");
        skip();
    }
    uint64_t before = isn_thread_slice_ns(0);
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.worker_slice_ns = before == 700000 ? 900000 : 700000;
    isn_scheduler *s = harness_start(&config);
    test_job job;
    small_job(&job, 0);
    assert_int_equal(isn_scheduler_submit(s, &job.job), ISN_SUBMIT_QUEUED);
    harness_wait(&h, &h.completed, 1);
    isn_scheduler_stop(s);
    assert_int_equal(h.worker_slice_ns, config.worker_slice_ns);
    assert_int_equal(isn_thread_slice_ns(0), before);
}

static void stop_abandons_queued_jobs(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    h.hold = true;
    isn_scheduler *s = harness_start(&config);
    test_job blocker, queued;
    small_job(&blocker, 0);
    small_job(&queued, 0);
    harness_occupy(&h, s, &blocker.job);
    assert_int_equal(isn_scheduler_submit(s, &queued.job), ISN_SUBMIT_QUEUED);
    isn_scheduler_abandon_queued(s);
    harness_release(&h);
    harness_wait(&h, &h.completed, 2);
    assert_int_equal(queued.job.outcome, ISN_JOB_ABANDONED);
    isn_scheduler_stop(s);
}

static void many_jobs_many_workers_all_complete(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.workers = 4;
    config.queue_capacity = 5000;
    isn_scheduler *s = harness_start(&config);
    enum { N = 3000 };
    test_job *jobs = calloc(N, sizeof *jobs);
    assert_non_null(jobs);
    for (int i = 0; i < N; i++) {
        small_job(&jobs[i], 0);
        assert_int_equal(isn_scheduler_submit(s, &jobs[i].job), ISN_SUBMIT_QUEUED);
    }
    harness_wait(&h, &h.completed, N);
    for (int i = 0; i < N; i++) assert_int_equal(jobs[i].job.outcome, ISN_JOB_RAN);
    assert_int_equal(h.ran_cpu, N);
    isn_scheduler_stop(s);
    free(jobs);
}

/* A job with a second stage: its run costs the first stage's FIRST_NS and then SECOND_NS of CPU, which
 * run_cpu reports. The scheduler predicts the whole run (the second stage the submitter expects added),
 * while the cost model learns the first stage alone: a repeated query's prediction is its first stage's
 * cost plus its expected second stage, not that plus the second stage learned again. */
#define FIRST_NS 300000ull
#define SECOND_NS 3000000ull

static void run_two_stages(void *user, isn_job *job, const isn_cpu_context *context) {
    (void)user, (void)context;
    burn_cpu_ns(FIRST_NS);
    uint64_t second_start = isn_thread_cpu_ns();
    burn_cpu_ns(SECOND_NS);
    job->second_stage_cpu_ns = isn_thread_cpu_ns() - second_start;
    job->complete = true;
}

static void second_stage_is_predicted_not_learned(void **state) {
    (void)state;
    harness h;
    isn_scheduler_config config;
    harness_config(&h, &config);
    config.run_cpu = run_two_stages;
    isn_scheduler *s = harness_start(&config);
    test_job t;
    for (uint32_t i = 0; i < 40; i++) {
        small_job(&t, 0);
        t.job.features.signature = 0x5eed; /* the same query each time: the model's memo answers it */
        t.job.second_stage_ns = (double)SECOND_NS;
        assert_int_equal(isn_scheduler_submit(s, &t.job), ISN_SUBMIT_QUEUED);
        harness_wait(&h, &h.completed, i + 1);
    }
    double predicted = t.job.predicted_ns[ISN_DEVICE_CPU];
    print_message("second stage: predicted %.0f us for a run of %.0f us (first stage %.0f us)\n", predicted / 1e3,
                  (FIRST_NS + SECOND_NS) / 1e3, FIRST_NS / 1e3);
    assert_true(predicted >= (double)SECOND_NS);
    /* learned with the second stage in its samples, the prediction would be about FIRST + 2 SECOND */
    if (!(predicted < (double)(FIRST_NS + SECOND_NS) + SECOND_NS / 2.0))
        fail_msg("predicted %.0f ns: the model learned the second stage too", predicted);
    isn_scheduler_stop(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(second_stage_is_predicted_not_learned),
        cmocka_unit_test(dead_jobs_are_dropped_without_running),
        cmocka_unit_test(overload_sheds_or_degrades),
        cmocka_unit_test(refuses_early_when_nothing_can_start),
        cmocka_unit_test(an_old_request_whose_reader_keeps_up_is_judged_on_what_is_left),
        cmocka_unit_test(gpu_batches_and_failed_batches_rerun_on_cpu),
        cmocka_unit_test(admission_counts_the_batch_waiting_for_a_flight),
        cmocka_unit_test(idle_workers_help_complete_a_landed_batch),
        cmocka_unit_test(dispatcher_time_is_accounted_by_phase),
        cmocka_unit_test(the_next_batch_launches_before_the_landed_answers),
        cmocka_unit_test(gpu_jobs_learn_their_part_not_the_launch),
        cmocka_unit_test(gpu_scale_learns_the_batch_error),
        cmocka_unit_test(gpu_lesson_bounds_a_jobs_share),
        cmocka_unit_test(arrival_ignores_a_cpu_the_jobs_cannot_use),
        cmocka_unit_test(arrival_judges_by_what_arrivals_cost),
        cmocka_unit_test(arrival_counts_what_waits_to_be_prepared),
        cmocka_unit_test(workers_run_nicer_than_the_process),
        cmocka_unit_test(workers_run_at_the_idle_policy),
        cmocka_unit_test(workers_take_their_slice),
        cmocka_unit_test(default_workers_leave_the_loops_a_core),
        cmocka_unit_test(default_loops_split_the_cpus_beside_a_gpu),
        cmocka_unit_test(spare_worker_works_only_while_loops_are_idle),
        cmocka_unit_test(bound_spare_works_while_its_own_loop_is_idle),
        cmocka_unit_test(spare_workers_need_a_worker_and_the_loops),
        cmocka_unit_test(standby_worker_works_only_while_wanted),
        cmocka_unit_test(queuing_a_preparation_wakes_a_worker_without_the_lock),
        cmocka_unit_test(queuing_a_preparation_needs_no_preparation_lock),
        cmocka_unit_test(staged_preparations_are_bounded_and_run_in_order),
        cmocka_unit_test(staged_preparations_are_abandoned_by_a_stop),
        cmocka_unit_test(large_requests_leave_normal_ones_their_room),
        cmocka_unit_test(unprepared_jobs_are_prepared_by_workers_then_admitted),
        cmocka_unit_test(large_requests_take_one_worker),
        cmocka_unit_test(codel_drops_a_request_that_waited_in_a_standing_backlog),
        cmocka_unit_test(without_codel_drops_a_request_that_waited_is_served),
        cmocka_unit_test(preparation_backlog_counts_as_cpu_wait),
        cmocka_unit_test(preparation_wait_is_at_least_the_queues_stillness),
        cmocka_unit_test(a_loop_that_read_a_stalls_backlog_restarts_the_stillness),
        cmocka_unit_test(a_stall_that_ended_holds_no_arrival_back),
        cmocka_unit_test(arrival_refusals_name_their_bound),
        cmocka_unit_test(arrival_counts_the_measured_drain_of_preparations),
        cmocka_unit_test(arrival_check_never_eases_as_preparations_wait),
        cmocka_unit_test(gpu_clearly_wins_reports_routing_without_queueing),
        cmocka_unit_test(stop_abandons_queued_jobs),
        cmocka_unit_test(many_jobs_many_workers_all_complete),
        cmocka_unit_test(gpu_batches_overlap_on_a_pipelined_device),
        cmocka_unit_test(four_batches_on_a_device_of_four_streams),
        cmocka_unit_test(batch_in_flight_answered_when_the_one_before_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
