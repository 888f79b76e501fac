/* Idle workers (sched_idle_set): each sleeps on a semaphore of its own, and a bit per worker says who
 * sleeps. A waker claims a sleeper's bit with one atomic and-not and posts that worker's semaphore:
 * no lock is shared between wakers and sleepers. With one condition variable (and its internal lock)
 * for all of them, the loops that wake a worker for every request they queue waited whenever a worker
 * holding that lock was off its core, and a refusal waited with them.
 *
 * Every claim is followed by exactly one post, and every post is consumed by the worker it claimed:
 * in its wait, or, when it did not wait (it found work on its last look, or its wait timed out) and its
 * withdrawal found the bit gone, by a wait for the post that is on its way; that worker then passes the
 * wake on to another sleeper. So no post is left over to wake a later sleep early, and none is lost.
 *
 * Why a wake is not lost: a worker sets its bit (sequentially consistent) before its last look for work;
 * a waker queues the work before it reads the bits; one of them sees the other's store. */
#include <errno.h>
#include <stdlib.h>

#include "scheduler/scheduler_internal.h"

#define BITS_PER_WORD 64u

int sched_idle_init(sched_idle_set *set, uint32_t workers) {
    set->workers = workers;
    set->words = (workers + BITS_PER_WORD - 1) / BITS_PER_WORD;
    atomic_init(&set->count, 0);
    atomic_init(&set->woken, 0);
    atomic_init(&set->passed_on, 0);
    set->bits = calloc(set->words ? set->words : 1, sizeof *set->bits);
    set->wakes = calloc(workers ? workers : 1, sizeof *set->wakes);
    if (!set->bits || !set->wakes) {
        free(set->bits);
        free(set->wakes);
        set->bits = NULL;
        set->wakes = NULL;
        set->workers = set->words = 0;
        return -1;
    }
    for (uint32_t i = 0; i < workers; i++) sem_init(&set->wakes[i], 0, 0);
    return 0;
}

void sched_idle_destroy(sched_idle_set *set) {
    for (uint32_t i = 0; set->wakes && i < set->workers; i++) sem_destroy(&set->wakes[i]);
    free(set->bits);
    free(set->wakes);
    set->bits = NULL;
    set->wakes = NULL;
}

void sched_idle_announce(sched_idle_set *set, uint32_t worker) {
    atomic_fetch_or(&set->bits[worker / BITS_PER_WORD], 1ull << (worker % BITS_PER_WORD));
    atomic_fetch_add(&set->count, 1);
}

void sched_idle_sleep(sched_idle_set *set, uint32_t worker, bool wait, uint64_t until_ns) {
    sem_t *wake = &set->wakes[worker];
    if (wait) {
        struct timespec until;
        sched_timespec_at(until_ns, &until);
        int rc;
        while ((rc = sem_clockwait(wake, CLOCK_MONOTONIC, &until)) != 0 && errno == EINTR) {}
        if (rc == 0) return; /* claimed and posted: the waker took the bit and the count */
    }
    uint64_t bit = 1ull << (worker % BITS_PER_WORD);
    if (atomic_fetch_and(&set->bits[worker / BITS_PER_WORD], ~bit) & bit) {
        atomic_fetch_sub(&set->count, 1);
        return;
    }
    while (sem_wait(wake) != 0 && errno == EINTR) {} /* claimed meanwhile: its post is on the way */
    /* That wake was meant for a worker that sleeps, and this one did not: it goes to another, as a
     * condition variable's signal would have. */
    atomic_fetch_add_explicit(&set->passed_on, 1, memory_order_relaxed);
    sched_idle_wake(set, false);
}

uint32_t sched_idle_wake(sched_idle_set *set, bool all) {
    uint32_t woken = 0;
    for (uint32_t w = 0; w < set->words; w++) {
        uint64_t bits = atomic_load(&set->bits[w]);
        while (bits) {
            uint64_t bit = bits & -bits;
            uint64_t before = atomic_fetch_and(&set->bits[w], ~bit);
            bits = before & ~bit;
            if (!(before & bit)) continue; /* another waker, or the worker itself, took it */
            atomic_fetch_sub(&set->count, 1);
            sem_post(&set->wakes[w * BITS_PER_WORD + (uint32_t)__builtin_ctzll(bit)]);
            woken++;
            atomic_fetch_add_explicit(&set->woken, 1, memory_order_relaxed);
            if (!all) return woken;
        }
    }
    return woken;
}
