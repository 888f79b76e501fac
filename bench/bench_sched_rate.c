/* The scheduler's own rate: how many jobs per second it moves from submitting threads to CPU
 * workers and back when the jobs themselves cost (almost) nothing, as isnd's path is for a trivial
 * query. Shared state in the scheduler (its locks, the cost model, counters) caps this rate; a
 * front end with several event loops cannot go faster than it.
 *
 *   bench_sched_rate [--submitters S] [--workers W] [--in-flight M] [--work-ns N] [--seconds T]
 *                    [--repeats R]
 *
 * S submitting threads (isnd's event loops) each keep M jobs in flight: every job is prepared on a
 * worker (isnd's path when there are at least scheduler.analysis_min_workers workers), admitted,
 * routed and run there (spinning N ns), and handed back through a lock-free list the submitter
 * drains, as a loop drains its completion queue. Each job has a 50 ms deadline, so admission runs
 * as it does in isnd. Prints one JSON object: jobs per second per repeat (after a warm-up of one
 * period) and their median. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "scheduler/scheduler.h"

typedef struct submitter submitter;

typedef struct {
    isn_job job;
    submitter *owner;
    bool refused; /* resubmitted on the next drain, not counted */
    _Atomic(void *) next;
} rate_job;

struct submitter {
    pthread_t thread;
    _Atomic(rate_job *) done; /* completed jobs, pushed by whichever thread ended them */
    rate_job *jobs;
    uint32_t in_flight;
    atomic_ullong completed;
    isn_scheduler *scheduler;
    const atomic_bool *stop;
    uint64_t refused;
};

static uint64_t work_ns;

static bool prepare(void *user, isn_job *job, void *worker_state) {
    (void)user, (void)worker_state;
    job->k = 10;
    job->placement = ISN_PLACE_CPU;
    return true;
}

static void run_cpu(void *user, isn_job *job, const isn_cpu_context *context) {
    (void)user, (void)job, (void)context;
    uint64_t until = isn_now_ns() + work_ns;
    while (work_ns && isn_now_ns() < until) {
    }
}

static void complete(void *user, isn_job *job, void *worker_state) {
    (void)user, (void)worker_state;
    rate_job *rj = (rate_job *)job;
    submitter *owner = rj->owner;
    rate_job *head = atomic_load_explicit(&owner->done, memory_order_relaxed);
    do atomic_store_explicit(&rj->next, head, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&owner->done, &head, rj, memory_order_release,
                                                  memory_order_relaxed));
}

static void *worker_init(void *user, uint32_t worker) {
    (void)worker;
    return user ? user : (void *)1;
}

static void submit(submitter *sub, rate_job *rj) {
    memset(&rj->job, 0, sizeof rj->job);
    rj->owner = sub;
    rj->refused = false;
    uint64_t now = isn_now_ns();
    rj->job.received_ns = now;
    rj->job.deadline_ns = now + 50000000ull;
    rj->job.prepare_on_worker = true;
    if (isn_scheduler_submit(sub->scheduler, &rj->job) != ISN_SUBMIT_QUEUED) {
        sub->refused++;
        rj->refused = true;
        complete(NULL, &rj->job, NULL);
    }
}

static void *submitter_main(void *arg) {
    submitter *sub = arg;
    for (uint32_t i = 0; i < sub->in_flight; i++) submit(sub, &sub->jobs[i]);
    while (!atomic_load_explicit(sub->stop, memory_order_relaxed)) {
        rate_job *list = atomic_exchange_explicit(&sub->done, NULL, memory_order_acquire);
        if (!list) {
            sched_yield();
            continue;
        }
        while (list) {
            rate_job *next = atomic_load_explicit(&list->next, memory_order_relaxed);
            if (!list->refused) atomic_fetch_add_explicit(&sub->completed, 1, memory_order_relaxed);
            submit(sub, list);
            list = next;
        }
    }
    return NULL;
}

static void sleep_seconds(double seconds) {
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static uint64_t total_completed(submitter *subs, uint32_t n) {
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += atomic_load_explicit(&subs[i].completed, memory_order_relaxed);
    return sum;
}

int main(int argc, char **argv) {
    uint32_t submitters = 4, workers = 8, in_flight = 64, repeats = 3;
    double seconds = 2.0;
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value) {
            fprintf(stderr, "bench_sched_rate: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--submitters")) submitters = (uint32_t)atoi(value);
        else if (!strcmp(argv[i], "--workers")) workers = (uint32_t)atoi(value);
        else if (!strcmp(argv[i], "--in-flight")) in_flight = (uint32_t)atoi(value);
        else if (!strcmp(argv[i], "--work-ns")) work_ns = strtoull(value, NULL, 10);
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(value);
        else if (!strcmp(argv[i], "--repeats")) repeats = (uint32_t)atoi(value);
        else {
            fprintf(stderr, "bench_sched_rate: unknown option %s (see the comment at the top of bench_sched_rate.c)\n",
                    argv[i]);
            return 2;
        }
        i++;
    }
    if (!submitters || !workers || !in_flight || !repeats || repeats > 64 || !(seconds > 0)) {
        fprintf(stderr, "bench_sched_rate: submitters, workers, in-flight, repeats (<= 64) and seconds must be > 0\n");
        return 2;
    }

    isn_scheduler_config config;
    isn_scheduler_config_default(&config);
    config.workers = workers;
    config.queue_capacity = submitters * in_flight + 64;
    config.analysis_min_workers = 1;
    config.prepare = prepare;
    config.run_cpu = run_cpu;
    config.complete = complete;
    config.worker_init = worker_init;
    char err[256];
    isn_scheduler *scheduler = isn_scheduler_start(&config, err, sizeof err);
    if (!scheduler) {
        fprintf(stderr, "bench_sched_rate: %s\n", err);
        return 1;
    }
    atomic_bool stop = false;
    submitter *subs = calloc(submitters, sizeof *subs);
    for (uint32_t i = 0; i < submitters; i++) {
        subs[i].jobs = calloc(in_flight, sizeof *subs[i].jobs);
        subs[i].in_flight = in_flight;
        subs[i].scheduler = scheduler;
        subs[i].stop = &stop;
        pthread_create(&subs[i].thread, NULL, submitter_main, &subs[i]);
    }
    double rates[64];
    sleep_seconds(seconds); /* warm-up */
    for (uint32_t r = 0; r < repeats; r++) {
        uint64_t start_count = total_completed(subs, submitters), start = isn_now_ns();
        sleep_seconds(seconds);
        uint64_t count = total_completed(subs, submitters), end = isn_now_ns();
        rates[r] = (double)(count - start_count) / ((double)(end - start) / 1e9);
    }
    atomic_store(&stop, true);
    uint64_t refused = 0;
    for (uint32_t i = 0; i < submitters; i++) {
        pthread_join(subs[i].thread, NULL);
        refused += subs[i].refused;
    }
    isn_scheduler_stop(scheduler);
    double sorted[64];
    memcpy(sorted, rates, repeats * sizeof *rates);
    printf("{\"benchmark\":\"sched_rate\",\"submitters\":%u,\"workers\":%u,\"in_flight_per_submitter\":%u,"
           "\"work_ns\":%llu,\"seconds\":%.2f,\"refused\":%llu,\"jobs_per_s\":[",
           submitters, workers, in_flight, (unsigned long long)work_ns, seconds, (unsigned long long)refused);
    for (uint32_t r = 0; r < repeats; r++) printf("%s%.0f", r ? "," : "", rates[r]);
    printf("],\"median_jobs_per_s\":%.0f}\n", bench_median(sorted, repeats));
    for (uint32_t i = 0; i < submitters; i++) free(subs[i].jobs);
    free(subs);
    return 0;
}
