/* Bump allocator for one request's decoded protobuf: a chunk inside the request object, further
 * chunks from malloc, all released at once. Also a ProtobufCAllocator so protobuf-c unpacks into it. */
#ifndef ISN_DAEMON_ARENA_H
#define ISN_DAEMON_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

typedef struct arena_chunk arena_chunk;

typedef struct {
    uint8_t *base;
    size_t used, cap;
    arena_chunk *extra; /* malloc'd chunks, newest first */
    size_t extra_bytes;
    size_t limit; /* total bytes beyond the first chunk; alloc fails past it */
    ProtobufCAllocator allocator;
} arena;

void arena_init(arena *arena, void *first_chunk, size_t first_cap, size_t limit);
void *arena_alloc(arena *arena, size_t size);
/* Frees the extra chunks and rewinds the first. */
void arena_reset(arena *arena);

#endif
