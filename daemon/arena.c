#include "daemon/arena.h"

#include <stdlib.h>

struct arena_chunk {
    arena_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

#define ALIGN 16

static void *pb_alloc(void *data, size_t size) { return arena_alloc(data, size); }
static void pb_free(void *data, void *ptr) { (void)data, (void)ptr; }

void arena_init(arena *a, void *first_chunk, size_t first_cap, size_t limit) {
    a->base = first_chunk;
    a->used = 0;
    a->cap = first_cap;
    a->extra = NULL;
    a->extra_bytes = 0;
    a->limit = limit;
    a->budget = NULL;
    a->charged = 0;
    a->over_budget = false;
    a->allocator.alloc = pb_alloc;
    a->allocator.free = pb_free;
    a->allocator.allocator_data = a;
}

void *arena_alloc(arena *a, size_t size) {
    size = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (size == 0) size = ALIGN;
    if (a->cap - a->used >= size) {
        void *p = a->base + a->used;
        a->used += size;
        return p;
    }
    if (a->extra && a->extra->cap - a->extra->used >= size) {
        void *p = (uint8_t *)a->extra->data + a->extra->used;
        a->extra->used += size;
        return p;
    }
    size_t cap = a->extra ? a->extra->cap * 2 : 16384;
    if (cap < size) cap = size;
    if (a->extra_bytes + cap > a->limit) {
        if (a->extra_bytes + size > a->limit) return NULL;
        cap = size;
    }
    if (a->budget && !isn_grpc_budget_charge(a->budget, sizeof(arena_chunk) + cap)) {
        a->over_budget = true;
        return NULL;
    }
    arena_chunk *chunk = malloc(sizeof *chunk + cap);
    if (!chunk) {
        isn_grpc_budget_release(a->budget, a->budget ? sizeof(arena_chunk) + cap : 0);
        return NULL;
    }
    if (a->budget) a->charged += sizeof(arena_chunk) + cap;
    chunk->next = a->extra;
    chunk->used = size;
    chunk->cap = cap;
    a->extra = chunk;
    a->extra_bytes += cap;
    return chunk->data;
}

void arena_reset(arena *a) {
    while (a->extra) {
        arena_chunk *next = a->extra->next;
        free(a->extra);
        a->extra = next;
    }
    a->extra_bytes = 0;
    a->used = 0;
    isn_grpc_budget_release(a->budget, a->charged);
    a->budget = NULL;
    a->charged = 0;
    a->over_budget = false;
}

void arena_charge_to(arena *a, isn_grpc_memory_budget *budget) { a->budget = budget; }
