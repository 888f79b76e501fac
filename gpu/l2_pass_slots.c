/* The in-flight slots of the second-stage pass (l2_pass_slots.h): a stack of free slot numbers under
 * a lock, and a condition that a waiting thread sleeps on until one is released. */
#include <pthread.h>
#include <stdlib.h>

#include "gpu/l2_pass_slots.h"

struct l2_slot_pool {
    pthread_mutex_t lock;
    pthread_cond_t released;
    uint32_t slots, num_free;
    size_t slot_bytes;
    uint32_t *free_slots; /* [0..num_free): numbers of the slots no thread holds */
    unsigned char *memory;
};

l2_slot_pool *l2_slot_pool_new(uint32_t slots, size_t slot_bytes) {
    if (slots == 0) slots = L2_PASS_SLOTS_DEFAULT;
    if (slots > L2_PASS_SLOTS_MAX) slots = L2_PASS_SLOTS_MAX;
    if (slot_bytes == 0) slot_bytes = 1;
    l2_slot_pool *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->free_slots = malloc(slots * sizeof *p->free_slots);
    p->memory = calloc(slots, slot_bytes);
    if (p->free_slots == NULL || p->memory == NULL) {
        free(p->free_slots);
        free(p->memory);
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->released, NULL);
    p->slots = p->num_free = slots;
    p->slot_bytes = slot_bytes;
    /* slot 0 on top: a single caller always reuses the same slot's buffers */
    for (uint32_t i = 0; i < slots; i++) p->free_slots[i] = slots - 1 - i;
    return p;
}

void l2_slot_pool_free(l2_slot_pool *p) {
    if (p == NULL) return;
    pthread_cond_destroy(&p->released);
    pthread_mutex_destroy(&p->lock);
    free(p->free_slots);
    free(p->memory);
    free(p);
}

uint32_t l2_slot_pool_size(const l2_slot_pool *p) { return p->slots; }

void *l2_slot_pool_at(l2_slot_pool *p, uint32_t i) { return p->memory + (size_t)i * p->slot_bytes; }

void *l2_slot_acquire(l2_slot_pool *p) {
    pthread_mutex_lock(&p->lock);
    while (p->num_free == 0) pthread_cond_wait(&p->released, &p->lock);
    const uint32_t i = p->free_slots[--p->num_free];
    pthread_mutex_unlock(&p->lock);
    return l2_slot_pool_at(p, i);
}

void l2_slot_release(l2_slot_pool *p, void *slot) {
    const uint32_t i = (uint32_t)(((unsigned char *)slot - p->memory) / p->slot_bytes);
    pthread_mutex_lock(&p->lock);
    p->free_slots[p->num_free++] = i;
    pthread_mutex_unlock(&p->lock);
    pthread_cond_signal(&p->released);
}
