/* A landed GPU batch's completions, shared by its dispatcher with the workers. Completing a GPU job
 * packs its answer (complete() in the user's code), a few microseconds each; done one after another on
 * the dispatcher for a batch of hundreds, that held the last answers of each batch for most of a
 * millisecond, and the dispatcher, busy packing, formed and sent no batch meanwhile: on a node whose GPU
 * takes every search the dispatcher's thread, not the device, bounded the rate.
 *
 * So a landed batch is opened to the workers (a worker looks at the landings before any other work, and
 * idle ones are woken for it), and its dispatcher first launches what it can and completes what nobody
 * claimed only when it would otherwise wait: before waiting for the device's next batch, before sleeping,
 * and before it opens a landing that is still being completed. With no worker free (a hybrid node's
 * workers busy with CPU searches) that is, as before, the dispatcher completing the batch alone, one
 * launch later; nobody waits for a busy worker.
 *
 * A landing's claim word is (round << 32 | batch size << 16 | next index): a thread claims a chunk by
 * compare-and-swap on the word it read, so what it claims is of that round; the one that claims the last
 * chunk closes the landing (landings_open). The landing's array holds a copy of the batch's jobs,
 * written before the round opens (a release store of the word) and again only once every chunk of the
 * round is done; the dispatcher waits for its helpers only when it reuses a landing (SCHED_LANDINGS
 * batches later) that still has a chunk being completed. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/scheduler_internal.h"

#define ROUND_SHIFT 32
#define SIZE_SHIFT 16
#define FIELD_MASK 0xffffu

int sched_landings_init(sched_dispatcher *d, size_t slots) {
    for (uint32_t i = 0; i < SCHED_LANDINGS; i++) {
        sched_landing *l = &d->landings[i];
        if (!(l->jobs = calloc(slots, sizeof *l->jobs))) return -1;
        atomic_init(&l->claim, 0);
        atomic_init(&l->done, 0);
    }
    d->next_landing = 0;
    return 0;
}

void sched_landings_free(sched_dispatcher *d) {
    for (uint32_t i = 0; i < SCHED_LANDINGS; i++) free(d->landings[i].jobs);
}

static uint32_t claim_size(uint64_t claim) { return (uint32_t)(claim >> SIZE_SHIFT) & FIELD_MASK; }
static uint32_t claim_next(uint64_t claim) { return (uint32_t)claim & FIELD_MASK; }

/* Claims the next chunk of the landing and completes it on this thread. False when all was claimed. */
static bool complete_chunk(isn_scheduler *s, sched_landing *l, void *worker_state) {
    uint64_t claim = atomic_load_explicit(&l->claim, memory_order_acquire);
    for (;;) {
        uint32_t next = claim_next(claim), n = claim_size(claim);
        if (next >= n) return false;
        uint32_t end = n - next > SCHED_LANDING_CHUNK ? next + SCHED_LANDING_CHUNK : n;
        if (!atomic_compare_exchange_weak_explicit(&l->claim, &claim, claim + (end - next), memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        if (end == n) atomic_fetch_sub(&s->landings_open, 1);
        for (uint32_t i = next; i < end; i++) sched_finish_on(s, l->jobs[i], ISN_JOB_RAN, worker_state);
        if (worker_state) ADD(s->gpu_answers_helped, end - next);
        atomic_fetch_add_explicit(&l->done, end - next, memory_order_release);
        return true;
    }
}

static bool has_unclaimed(sched_landing *l) {
    uint64_t claim = atomic_load_explicit(&l->claim, memory_order_acquire);
    return claim_next(claim) < claim_size(claim);
}

/* Wakes up to `count` idle workers (a worker that missed the open landing is claimed and woken). */
static void wake_helpers(isn_scheduler *s, uint32_t count) {
    while (count-- && sched_idle_wake(&s->idle, false)) {}
}

/* The dispatcher: completes what nobody claimed of the landing's round, then waits for the chunks its
 * helpers are completing. */
static void finish_landing(isn_scheduler *s, sched_landing *l) {
    while (complete_chunk(s, l, NULL)) {}
    uint64_t round = atomic_load_explicit(&l->claim, memory_order_relaxed);
    while (atomic_load_explicit(&l->done, memory_order_acquire) < claim_size(round)) sched_yield();
}

void sched_open_landing(isn_scheduler *s, sched_dispatcher *d, isn_job *const *jobs, uint32_t n) {
    if (!n) return;
    if (!s->config.workers || n > FIELD_MASK) {
        for (uint32_t i = 0; i < n; i++) sched_finish_on(s, jobs[i], ISN_JOB_RAN, NULL);
        return;
    }
    sched_landing *l = &d->landings[d->next_landing];
    d->next_landing = (d->next_landing + 1) % SCHED_LANDINGS;
    finish_landing(s, l); /* its last round (rarely still open) */
    uint64_t last = atomic_load_explicit(&l->claim, memory_order_relaxed);
    memcpy(l->jobs, jobs, n * sizeof *jobs);
    atomic_store_explicit(&l->done, 0, memory_order_relaxed);
    uint64_t round = (last >> ROUND_SHIFT) + 1;
    /* counted open before its chunks can be claimed: the claimer of the last one closes it */
    atomic_fetch_add(&s->landings_open, 1); /* sequentially consistent: see sched_landings_waiting */
    atomic_store_explicit(&l->claim, round << ROUND_SHIFT | (uint64_t)n << SIZE_SHIFT, memory_order_release);
    uint32_t helpers = n / (2 * SCHED_LANDING_CHUNK), idle = atomic_load(&s->idle.count);
    wake_helpers(s, helpers < idle ? helpers : idle);
}

void sched_complete_own_landings(isn_scheduler *s, sched_dispatcher *d) {
    for (uint32_t k = 0; k < SCHED_LANDINGS; k++)
        while (complete_chunk(s, &d->landings[k], NULL)) {}
}

bool sched_own_landings_waiting(sched_dispatcher *d) {
    for (uint32_t k = 0; k < SCHED_LANDINGS; k++)
        if (has_unclaimed(&d->landings[k])) return true;
    return false;
}

void sched_close_own_landings(isn_scheduler *s, sched_dispatcher *d) {
    for (uint32_t k = 0; k < SCHED_LANDINGS; k++) finish_landing(s, &d->landings[k]);
}

bool sched_help_landings(isn_scheduler *s, void *worker_state) {
    if (!atomic_load_explicit(&s->landings_open, memory_order_relaxed)) return false;
    bool helped = false;
    for (uint32_t i = 0; i < s->num_dispatchers; i++)
        for (uint32_t k = 0; k < SCHED_LANDINGS; k++)
            while (complete_chunk(s, &s->dispatchers[i].landings[k], worker_state)) helped = true;
    return helped;
}

bool sched_landings_waiting(isn_scheduler *s) {
    if (!atomic_load(&s->landings_open)) return false;
    for (uint32_t i = 0; i < s->num_dispatchers; i++)
        for (uint32_t k = 0; k < SCHED_LANDINGS; k++)
            if (has_unclaimed(&s->dispatchers[i].landings[k])) return true;
    return false;
}
