/* The backend's CPU threads: parked on a condition variable until a run has tasks to hand out. Runs queue
 * in the order they started; a thread takes one task at a time from the first, so a long task does not
 * hold up the others and a run started later waits only for the tasks already taken. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpu/cpu_crew.h"

struct cpu_crew {
    uint32_t threads;
    cpu_hand *hands; /* [threads]: hands[0] is the caller's */
    pthread_t *ids;  /* [threads - 1] */
    uint32_t started, placed; /* threads started; of them, on their CPUs (before cpu_crew_new returns) */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    bool stopping;
    cpu_run *first, *last; /* runs with tasks left to hand out */
};

static void hand_free(cpu_hand *h) {
    isn_searcher_free(h->searcher);
    free(h->suffix_hits);
    free(h->merge_scratch);
}

static bool hand_init(cpu_hand *h, const isn_index *index, uint32_t max_k) {
    h->searcher = isn_searcher_new(index);
    h->suffix_hits = malloc((size_t)max_k * sizeof *h->suffix_hits);
    h->merge_scratch = malloc((size_t)max_k * sizeof *h->merge_scratch);
    return h->searcher && h->suffix_hits && h->merge_scratch;
}

/* Hands out the next task of `run` (the crew's lock held): its index; the run leaves the queue with its last. */
static uint32_t take(cpu_crew *c, cpu_run *run) {
    uint32_t i = run->next++;
    if (run->next == run->n) {
        cpu_run **at = &c->first, *prev = NULL;
        while (*at != run) {
            prev = *at;
            at = &(*at)->queued;
        }
        *at = run->queued;
        if (c->last == run) c->last = prev;
    }
    return i;
}

/* Runs task i of `run` with the lock released, then counts it done (the lock held again). */
static void perform(cpu_crew *c, cpu_run *run, uint32_t i, cpu_hand *hand) {
    pthread_mutex_unlock(&c->lock);
    run->task(run->context, i, hand);
    pthread_mutex_lock(&c->lock);
    if (++run->done == run->n) pthread_cond_broadcast(&c->done);
}

typedef struct {
    cpu_crew *crew;
    uint32_t index;
    uint32_t num_cpus; /* 0: stays where it was started */
    int cpus[];
} thread_arg;

static void *crew_thread(void *arg) {
    thread_arg *a = arg;
    cpu_crew *c = a->crew;
    cpu_hand *hand = &c->hands[a->index];
    char err[160];
    if (a->num_cpus && isn_bind_this_thread(a->cpus, a->num_cpus, err, sizeof err) < 0)
        fprintf(stderr, "isn gpu: CPU thread %u runs on any CPU: %s\n", a->index, err);
    free(a);
    pthread_mutex_lock(&c->lock);
    c->placed++;
    pthread_cond_broadcast(&c->done);
    for (;;) {
        while (!c->stopping && c->first == NULL) pthread_cond_wait(&c->wake, &c->lock);
        if (c->stopping) break;
        cpu_run *run = c->first;
        perform(c, run, take(c, run), hand);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

cpu_crew *cpu_crew_new(const isn_index *index, uint32_t threads, uint32_t max_k, const int *cpus, uint32_t num_cpus) {
    if (threads == 0) threads = 1;
    cpu_crew *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->threads = threads;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    pthread_cond_init(&c->done, NULL);
    c->hands = calloc(threads, sizeof *c->hands);
    c->ids = calloc(threads, sizeof *c->ids);
    if (c->hands == NULL || c->ids == NULL) goto fail;
    for (uint32_t i = 0; i < threads; i++)
        if (!hand_init(&c->hands[i], index, max_k)) goto fail;
    if (!cpus) num_cpus = 0;
    for (uint32_t i = 1; i < threads; i++) {
        thread_arg *a = malloc(sizeof *a + num_cpus * sizeof *cpus);
        if (a == NULL) goto fail;
        a->crew = c;
        a->index = i;
        a->num_cpus = num_cpus;
        if (num_cpus) memcpy(a->cpus, cpus, num_cpus * sizeof *cpus);
        if (pthread_create(&c->ids[i - 1], NULL, crew_thread, a) != 0) {
            free(a);
            goto fail;
        }
        c->started++;
        char name[32];
        snprintf(name, sizeof name, "isn-crew-%u", i);
        name[15] = '\0'; /* the kernel's limit */
        pthread_setname_np(c->ids[i - 1], name);
    }
    /* returns once every thread is on its own CPUs: until it binds itself a thread runs where its creator may */
    pthread_mutex_lock(&c->lock);
    while (c->placed < c->started) pthread_cond_wait(&c->done, &c->lock);
    pthread_mutex_unlock(&c->lock);
    return c;
fail:
    cpu_crew_free(c);
    return NULL;
}

/* The caller finishes its runs first: a run still queued here is one it never finished. */
void cpu_crew_free(cpu_crew *c) {
    if (c == NULL) return;
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    for (uint32_t i = 0; i < c->started; i++) pthread_join(c->ids[i], NULL);
    if (c->hands)
        for (uint32_t i = 0; i < c->threads; i++) hand_free(&c->hands[i]);
    free(c->hands);
    free(c->ids);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    pthread_cond_destroy(&c->done);
    free(c);
}

uint32_t cpu_crew_threads(const cpu_crew *c) { return c->threads; }

void cpu_crew_start(cpu_crew *c, cpu_run *run, uint32_t n, cpu_task task, void *context) {
    *run = (cpu_run){.task = task, .context = context, .n = n};
    if (n == 0) return;
    pthread_mutex_lock(&c->lock);
    if (c->last) c->last->queued = run;
    else c->first = run;
    c->last = run;
    if (c->started > 0) pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
}

void cpu_crew_finish(cpu_crew *c, cpu_run *run) {
    if (run->n == 0) return;
    pthread_mutex_lock(&c->lock);
    while (run->next < run->n) perform(c, run, take(c, run), &c->hands[0]);
    while (run->done < run->n) pthread_cond_wait(&c->done, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

void cpu_crew_run(cpu_crew *c, uint32_t n, cpu_task task, void *context) {
    cpu_run run;
    cpu_crew_start(c, &run, n, task, context);
    cpu_crew_finish(c, &run);
}
