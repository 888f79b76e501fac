#include "daemon/worker_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"

typedef struct {
    worker_pool *pool;
    pthread_t thread;
    uint32_t id;
    search_worker *worker;
    bool started;
} worker_thread;

struct worker_pool {
    pthread_mutex_t lock;
    pthread_cond_t has_work;
    pthread_cond_t ready_changed;
    search_job *head, *tail;
    uint32_t max_queue;
    atomic_uint queued;
    atomic_uint running;
    bool stopping;
    atomic_bool abandon;
    uint32_t ready, failed;
    bool warm_up;
    const isn_index *index;
    uint32_t max_k;
    _Atomic(search_job *) completed; /* Treiber stack, newest first */
    uv_async_t *wake;
    uint32_t num_threads;
    worker_thread threads[];
};

static void push_completed(worker_pool *pool, search_job *job) {
    search_job *head = atomic_load_explicit(&pool->completed, memory_order_relaxed);
    do job->next = head;
    while (!atomic_compare_exchange_weak_explicit(&pool->completed, &head, job, memory_order_release,
                                                  memory_order_relaxed));
    uv_async_send(pool->wake);
}

search_job *worker_pool_take_completed(worker_pool *pool) {
    search_job *list = atomic_exchange_explicit(&pool->completed, NULL, memory_order_acquire), *ordered = NULL;
    while (list) {
        search_job *next = list->next;
        list->next = ordered;
        ordered = list;
        list = next;
    }
    return ordered;
}

static void *worker_main(void *arg) {
    worker_thread *self = arg;
    worker_pool *pool = self->pool;
    self->worker = search_worker_new(pool->index, self->id, pool->max_k);
    if (self->worker && pool->warm_up) search_worker_warm_up(self->worker);
    pthread_mutex_lock(&pool->lock);
    if (self->worker) pool->ready++;
    else pool->failed++;
    pthread_cond_broadcast(&pool->ready_changed);
    if (!self->worker) {
        pthread_mutex_unlock(&pool->lock);
        return NULL;
    }
    for (;;) {
        while (!pool->head && !pool->stopping) pthread_cond_wait(&pool->has_work, &pool->lock);
        if (pool->stopping) break;
        search_job *job = pool->head;
        pool->head = job->next;
        if (!pool->head) pool->tail = NULL;
        atomic_fetch_sub(&pool->queued, 1);
        atomic_fetch_add(&pool->running, 1);
        pthread_mutex_unlock(&pool->lock);

        search_worker_run(self->worker, job, atomic_load(&pool->abandon));
        atomic_fetch_sub(&pool->running, 1);
        push_completed(pool, job);

        pthread_mutex_lock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    search_worker_free(self->worker);
    self->worker = NULL;
    return NULL;
}

worker_pool *worker_pool_start(const isn_index *index, uint32_t workers, uint32_t max_queue, uint32_t max_k,
                               bool warm_up, uv_async_t *wake, char *err, size_t err_len) {
    worker_pool *pool = calloc(1, sizeof *pool + workers * sizeof(worker_thread));
    if (!pool) {
        snprintf(err, err_len, "out of memory for the worker pool");
        return NULL;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->has_work, NULL);
    pthread_cond_init(&pool->ready_changed, NULL);
    pool->max_queue = max_queue;
    pool->index = index;
    pool->max_k = max_k;
    pool->warm_up = warm_up;
    pool->wake = wake;
    pool->num_threads = workers;
    for (uint32_t i = 0; i < workers; i++) {
        worker_thread *t = &pool->threads[i];
        t->pool = pool;
        t->id = i;
        if (pthread_create(&t->thread, NULL, worker_main, t) != 0) {
            pthread_mutex_lock(&pool->lock);
            pool->failed++;
            pthread_mutex_unlock(&pool->lock);
            continue;
        }
        t->started = true;
        char name[32];
        snprintf(name, sizeof name, "isn-worker-%u", i);
        name[15] = '\0'; /* the kernel's limit */
        pthread_setname_np(t->thread, name);
    }
    pthread_mutex_lock(&pool->lock);
    while (pool->ready + pool->failed < workers) pthread_cond_wait(&pool->ready_changed, &pool->lock);
    uint32_t failed = pool->failed;
    pthread_mutex_unlock(&pool->lock);
    if (failed) {
        snprintf(err, err_len, "%u of %u search workers could not start (out of memory or threads)", failed,
                 workers);
        worker_pool_stop(pool);
        return NULL;
    }
    return pool;
}

bool worker_pool_submit(worker_pool *pool, search_job *job) {
    job->next = NULL;
    pthread_mutex_lock(&pool->lock);
    if (atomic_load(&pool->queued) >= pool->max_queue) {
        pthread_mutex_unlock(&pool->lock);
        return false;
    }
    if (pool->tail) pool->tail->next = job;
    else pool->head = job;
    pool->tail = job;
    atomic_fetch_add(&pool->queued, 1);
    pthread_cond_signal(&pool->has_work);
    pthread_mutex_unlock(&pool->lock);
    return true;
}

void worker_pool_abandon_queued(worker_pool *pool) { atomic_store(&pool->abandon, true); }

uint32_t worker_pool_queued(const worker_pool *pool) { return atomic_load(&((worker_pool *)pool)->queued); }
uint32_t worker_pool_running(const worker_pool *pool) { return atomic_load(&((worker_pool *)pool)->running); }
uint32_t worker_pool_size(const worker_pool *pool) { return pool->num_threads; }

void worker_pool_stop(worker_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->has_work);
    pthread_mutex_unlock(&pool->lock);
    for (uint32_t i = 0; i < pool->num_threads; i++)
        if (pool->threads[i].started) pthread_join(pool->threads[i].thread, NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->has_work);
    pthread_cond_destroy(&pool->ready_changed);
    free(pool);
}
