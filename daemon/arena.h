/* Bump allocator for one request's decoded protobuf: a chunk inside the request object, further
 * chunks from malloc, all released at once. Also a ProtobufCAllocator so protobuf-c unpacks into it. */
#ifndef ISN_DAEMON_ARENA_H
#define ISN_DAEMON_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "grpc/framing.h"

typedef struct arena_chunk arena_chunk;

typedef struct {
    uint8_t *base;
    size_t used, cap;
    arena_chunk *extra; /* malloc'd chunks, newest first */
    size_t extra_bytes;
    size_t limit; /* total bytes beyond the first chunk; alloc fails past it */
    /* Charged for the extra chunks once set (arena_charge_to); NULL = not charged. over_budget: an
     * alloc failed because the budget was spent. */
    isn_grpc_memory_budget *budget;
    size_t charged;
    bool over_budget;
    ProtobufCAllocator allocator;
} arena;

void arena_init(arena *arena, void *first_chunk, size_t first_cap, size_t limit);
void *arena_alloc(arena *arena, size_t size);
/* From now on extra chunks are charged to `budget` (a chunk it cannot take is not allocated), until
 * the reset gives the charge back: a request's memory beyond its inline chunk counts against the
 * node's budget like its body and its reply. */
void arena_charge_to(arena *arena, isn_grpc_memory_budget *budget);
/* Frees the extra chunks, gives their charge back and rewinds the first. */
void arena_reset(arena *arena);

#endif
