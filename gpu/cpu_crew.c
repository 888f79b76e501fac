/* The backend's CPU threads: parked on a condition variable between batches; a run hands out task
 * indices from one atomic counter, so a long task does not hold up the others. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "gpu/cpu_crew.h"

struct cpu_crew {
    uint32_t threads;
    cpu_hand *hands; /* [threads]: hands[0] is the caller's */
    pthread_t *ids;  /* [threads - 1] */
    uint32_t started;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation; /* one per run */
    bool stopping;
    /* the run in progress */
    cpu_task task;
    void *context;
    uint32_t n;
    atomic_uint next;
    uint32_t running; /* crew threads still in this run */
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

static void work(cpu_crew *c, cpu_hand *hand) {
    for (;;) {
        uint32_t i = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (i >= c->n) return;
        c->task(c->context, i, hand);
    }
}

typedef struct {
    cpu_crew *crew;
    uint32_t index;
} thread_arg;

static void *crew_thread(void *arg) {
    thread_arg *a = arg;
    cpu_crew *c = a->crew;
    cpu_hand *hand = &c->hands[a->index];
    free(a);
    uint64_t seen = 0;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->stopping && c->generation == seen) pthread_cond_wait(&c->wake, &c->lock);
        if (c->stopping) break;
        seen = c->generation;
        pthread_mutex_unlock(&c->lock);
        work(c, hand);
        pthread_mutex_lock(&c->lock);
        if (--c->running == 0) pthread_cond_signal(&c->done);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

cpu_crew *cpu_crew_new(const isn_index *index, uint32_t threads, uint32_t max_k) {
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
    for (uint32_t i = 1; i < threads; i++) {
        thread_arg *a = malloc(sizeof *a);
        if (a == NULL) goto fail;
        *a = (thread_arg){c, i};
        if (pthread_create(&c->ids[i - 1], NULL, crew_thread, a) != 0) {
            free(a);
            goto fail;
        }
        c->started++;
    }
    return c;
fail:
    cpu_crew_free(c);
    return NULL;
}

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

void cpu_crew_run(cpu_crew *c, uint32_t n, cpu_task task, void *context) {
    if (n == 0) return;
    c->task = task;
    c->context = context;
    c->n = n;
    atomic_store_explicit(&c->next, 0, memory_order_relaxed);
    bool crew = c->started > 0 && n > 1;
    if (crew) {
        pthread_mutex_lock(&c->lock);
        c->running = c->started;
        c->generation++;
        pthread_cond_broadcast(&c->wake);
        pthread_mutex_unlock(&c->lock);
    }
    work(c, &c->hands[0]);
    if (crew) {
        pthread_mutex_lock(&c->lock);
        while (c->running > 0) pthread_cond_wait(&c->done, &c->lock);
        pthread_mutex_unlock(&c->lock);
    }
}
