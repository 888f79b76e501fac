/* Chase-Lev work-stealing deque with the C11 orders of Le, Pop, Cohen and Zappa Nardelli (2013).
 * The buffer never grows: the owner sees "full" and keeps the job in the shared queue instead,
 * which spares the deque any memory reclamation. */
#include <stdlib.h>

#include "scheduler/scheduler_internal.h"

int isn_deque_init(isn_deque *deque, uint32_t capacity) {
    uint32_t size = 2;
    while (size < capacity) size <<= 1;
    deque->slots = calloc(size, sizeof *deque->slots);
    if (!deque->slots) return -1;
    deque->mask = size - 1;
    atomic_init(&deque->top, 0);
    atomic_init(&deque->bottom, 0);
    return 0;
}

void isn_deque_destroy(isn_deque *deque) {
    free(deque->slots);
    deque->slots = NULL;
}

bool isn_deque_push(isn_deque *deque, void *item) {
    long long b = atomic_load_explicit(&deque->bottom, memory_order_relaxed);
    long long t = atomic_load_explicit(&deque->top, memory_order_acquire);
    if (b - t > (long long)deque->mask) return false;
    atomic_store_explicit(&deque->slots[b & deque->mask], item, memory_order_relaxed);
    /* A release store rather than a release fence: the same ordering, and ThreadSanitizer sees it. */
    atomic_store_explicit(&deque->bottom, b + 1, memory_order_release);
    return true;
}

void *isn_deque_pop(isn_deque *deque) {
    long long b = atomic_load_explicit(&deque->bottom, memory_order_relaxed) - 1;
    atomic_store_explicit(&deque->bottom, b, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    long long t = atomic_load_explicit(&deque->top, memory_order_relaxed);
    void *item = NULL;
    if (t <= b) {
        item = atomic_load_explicit(&deque->slots[b & deque->mask], memory_order_relaxed);
        if (t == b) {
            /* The last item: race the thieves for it. */
            if (!atomic_compare_exchange_strong_explicit(&deque->top, &t, t + 1, memory_order_seq_cst,
                                                         memory_order_relaxed))
                item = NULL;
            atomic_store_explicit(&deque->bottom, b + 1, memory_order_relaxed);
        }
    } else {
        atomic_store_explicit(&deque->bottom, b + 1, memory_order_relaxed);
    }
    return item;
}

void *isn_deque_steal(isn_deque *deque) {
    long long t = atomic_load_explicit(&deque->top, memory_order_acquire);
    atomic_thread_fence(memory_order_seq_cst);
    long long b = atomic_load_explicit(&deque->bottom, memory_order_acquire);
    if (t >= b) return NULL;
    void *item = atomic_load_explicit(&deque->slots[t & deque->mask], memory_order_relaxed);
    if (!atomic_compare_exchange_strong_explicit(&deque->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
        return NULL;
    return item;
}

uint32_t isn_deque_size(isn_deque *deque) {
    long long b = atomic_load_explicit(&deque->bottom, memory_order_relaxed);
    long long t = atomic_load_explicit(&deque->top, memory_order_relaxed);
    return b > t ? (uint32_t)(b - t) : 0;
}
