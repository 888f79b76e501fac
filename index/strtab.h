/* String interning table (private to index/): bytes -> dense ids 0,1,2,... in insertion order.
 * Used by the builder for terms and external ids; its strings are an isn_string_store. */
#ifndef ISN_INDEX_STRTAB_H
#define ISN_INDEX_STRTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/string_store.h"

#define ISN_STRTAB_HEAD_BYTES 16

/* A probe touches one slot, and a string of up to ISN_STRTAB_HEAD_BYTES (most terms) nothing else:
 * hash, id, offset, length and the string's first bytes sit together, because on a table far
 * larger than the caches every separate array read is a cache miss per token. Half a cache line. */
typedef struct {
    uint32_t hash;
    uint32_t id;    /* id + 1, 0 = empty */
    uint64_t where; /* offset << 16 | length, or 0xFFFF for a length read from offsets[] */
    uint64_t head[ISN_STRTAB_HEAD_BYTES / 8]; /* the first bytes, zero-padded */
} isn_strtab_slot;

typedef struct {
    isn_string_store strings;
    isn_strtab_slot *slots; /* open addressing, at most half full */
    uint32_t num_slots;
} isn_strtab;

int isn_strtab_init(isn_strtab *table, uint32_t expected);
void isn_strtab_free(isn_strtab *table);
/* Returns the id of the string, adding it when absent (*added says which); UINT32_MAX on OOM. */
uint32_t isn_strtab_intern(isn_strtab *table, const char *s, size_t len, bool *added);
/* UINT32_MAX when absent. */
uint32_t isn_strtab_find(const isn_strtab *table, const char *s, size_t len);
static inline uint32_t isn_strtab_count(const isn_strtab *table) { return table->strings.count; }
static inline const char *isn_strtab_get(const isn_strtab *table, uint32_t id, size_t *len) {
    return isn_string_store_get(&table->strings, id, len);
}

#endif
