/* The per-query bump arena of a searcher. */
#include <stdio.h>
#include <stdlib.h>

#include "ranking/ranking_internal.h"
#include "ranking/arena.h"

#define ARENA_ALIGN 64u

/* A piece taken past the arena's capacity: its own allocation, freed at the next reset. The header is
 * a whole alignment unit so that the piece after it stays aligned. */
struct ranking_arena_spill {
    ranking_arena_spill *next;
    uint8_t pad[ARENA_ALIGN - sizeof(ranking_arena_spill *)];
};

static size_t round_up(size_t bytes) {
    return (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

size_t ranking_arena_size(size_t bytes) {
    return round_up(bytes);
}

static void free_spills(ranking_arena *arena) {
    while (arena->spills) {
        ranking_arena_spill *next = arena->spills->next;
        free(arena->spills);
        arena->spills = next;
    }
}

int ranking_arena_reset(ranking_arena *arena, size_t needed) {
    free_spills(arena);
    arena->used = 0;
    arena->reserved = needed;
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
    size_t size = round_up(bytes), at = arena->used;
    arena->used += size;
    if (arena->used <= arena->capacity)
        return arena->base + at;
    ranking_arena_spill *spill = aligned_alloc(ARENA_ALIGN, sizeof(ranking_arena_spill) + size);
    if (spill == NULL) {
        /* the takers cannot fail (they sized the arena first); running on would write through NULL */
        fprintf(stderr, "ranking: out of memory for %zu bytes a query took beyond its arena\n", size);
        abort();
    }
    spill->next = arena->spills;
    arena->spills = spill;
    return spill + 1;
}

size_t ranking_arena_overrun(const ranking_arena *arena) {
    return arena->used > arena->reserved ? arena->used - arena->reserved : 0;
}

void ranking_arena_free(ranking_arena *arena) {
    free_spills(arena);
    free(arena->base);
    arena->base = NULL;
    arena->capacity = arena->reserved = arena->used = 0;
}
