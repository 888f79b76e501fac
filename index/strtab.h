/* String interning table (private to index/): bytes -> dense ids 0,1,2,... in insertion order.
 * Used by the builder for terms and external ids. */
#ifndef ISN_INDEX_STRTAB_H
#define ISN_INDEX_STRTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    char *bytes; /* all strings, concatenated */
    uint64_t bytes_len, bytes_cap;
    uint64_t *offsets; /* offsets[id], offsets[count] = bytes_len */
    uint32_t count, offsets_cap;
    isn_strtab_slot *slots; /* open addressing */
    uint32_t num_slots;
} isn_strtab;

int isn_strtab_init(isn_strtab *table, uint32_t expected);
void isn_strtab_free(isn_strtab *table);
/* Returns the id of the string, adding it when absent (*added says which); UINT32_MAX on OOM. */
uint32_t isn_strtab_intern(isn_strtab *table, const char *s, size_t len, bool *added);
/* UINT32_MAX when absent. */
uint32_t isn_strtab_find(const isn_strtab *table, const char *s, size_t len);
static inline const char *isn_strtab_get(const isn_strtab *table, uint32_t id, size_t *len) {
    *len = (size_t)(table->offsets[id + 1] - table->offsets[id]);
    return table->bytes + table->offsets[id];
}

#endif
