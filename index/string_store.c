#include "index/string_store.h"

#include <stdlib.h>
#include <string.h>

int isn_string_store_init(isn_string_store *store, uint64_t initial_bytes) {
    memset(store, 0, sizeof *store);
    store->offsets_cap = 1024;
    store->offsets = malloc(store->offsets_cap * sizeof *store->offsets);
    store->bytes_cap = initial_bytes;
    store->bytes = malloc(store->bytes_cap);
    if (!store->offsets || !store->bytes) {
        isn_string_store_free(store);
        return -1;
    }
    store->offsets[0] = 0;
    return 0;
}

void isn_string_store_free(isn_string_store *store) {
    free(store->bytes);
    free(store->offsets);
    memset(store, 0, sizeof *store);
}

uint64_t isn_string_store_footprint(const isn_string_store *store) {
    return store->bytes_cap + (uint64_t)store->offsets_cap * sizeof *store->offsets;
}

uint32_t isn_string_store_append(isn_string_store *store, const char *s, size_t len) {
    if (store->count + 1 >= store->offsets_cap) {
        uint64_t *o = realloc(store->offsets, (size_t)store->offsets_cap * 2 * sizeof *o);
        if (!o) return UINT32_MAX;
        store->offsets = o;
        store->offsets_cap *= 2;
    }
    if (store->bytes_len + len > store->bytes_cap) {
        uint64_t cap = store->bytes_cap;
        while (cap < store->bytes_len + len) cap += cap / 2; /* by half: the bytes are most of a table */
        char *b = realloc(store->bytes, cap);
        if (!b) return UINT32_MAX;
        store->bytes = b;
        store->bytes_cap = cap;
    }
    memcpy(store->bytes + store->bytes_len, s, len);
    store->bytes_len += len;
    store->offsets[++store->count] = store->bytes_len;
    return store->count - 1;
}
