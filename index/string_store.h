/* The strings of an interning table (private to index/): each appended once, numbered 0, 1, 2... in
 * order, their bytes end to end. The tables (isn_strtab for the builder's terms, id_table for the bounded
 * build's external ids and keyword attributes) keep their own hash slots over it. */
#ifndef ISN_INDEX_STRING_STORE_H
#define ISN_INDEX_STRING_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *bytes; /* all strings, concatenated */
    uint64_t bytes_len, bytes_cap;
    uint64_t *offsets; /* offsets[i] where string i starts, offsets[count] = bytes_len */
    uint32_t count, offsets_cap;
} isn_string_store;

int isn_string_store_init(isn_string_store *store, uint64_t initial_bytes);
void isn_string_store_free(isn_string_store *store);
/* The new string's number; UINT32_MAX out of memory (the store unchanged). */
uint32_t isn_string_store_append(isn_string_store *store, const char *s, size_t len);
/* What the store holds allocated, in bytes. */
uint64_t isn_string_store_footprint(const isn_string_store *store);
static inline const char *isn_string_store_get(const isn_string_store *store, uint32_t i, size_t *len) {
    *len = (size_t)(store->offsets[i + 1] - store->offsets[i]);
    return store->bytes + store->offsets[i];
}

#endif
