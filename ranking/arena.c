/* The per-query bump arena of a searcher. */
#include <stdlib.h>

#include "ranking/ranking_internal.h"
#include "ranking/arena.h"

#define ARENA_ALIGN 64u

static size_t round_up(size_t bytes) {
    return (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

size_t ranking_arena_size(size_t bytes) {
    return round_up(bytes);
}

int ranking_arena_reset(ranking_arena *arena, size_t needed) {
    arena->used = 0;
    if (needed <= arena->capacity)
        return 0;
    size_t capacity = arena->capacity * 2 > needed ? arena->capacity * 2 : round_up(needed);
    uint8_t *base = aligned_alloc(ARENA_ALIGN, capacity);
    if (base == NULL)
        return -1;
    free(arena->base);
    arena->base = base;
    arena->capacity = capacity;
    return 0;
}

void *ranking_arena_take(ranking_arena *arena, size_t bytes) {
    void *at = arena->base + arena->used;
    arena->used += round_up(bytes);
    return at;
}
