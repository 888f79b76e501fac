#include "index/strtab.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int isn_strtab_init(isn_strtab *t, uint32_t expected) {
    memset(t, 0, sizeof *t);
    t->num_slots = 1024;
    while (t->num_slots < expected * 2u && t->num_slots < (1u << 30)) t->num_slots <<= 1;
    t->slots = calloc(t->num_slots, sizeof *t->slots);
    t->slot_hash = malloc(t->num_slots * sizeof *t->slot_hash);
    t->offsets_cap = 1024;
    t->offsets = malloc(t->offsets_cap * sizeof *t->offsets);
    t->bytes_cap = 1 << 16;
    t->bytes = malloc(t->bytes_cap);
    if (!t->slots || !t->slot_hash || !t->offsets || !t->bytes) {
        isn_strtab_free(t);
        return -1;
    }
    t->offsets[0] = 0;
    return 0;
}

void isn_strtab_free(isn_strtab *t) {
    free(t->bytes);
    free(t->offsets);
    free(t->slots);
    free(t->slot_hash);
    memset(t, 0, sizeof *t);
}

static uint32_t probe(const isn_strtab *t, const char *s, size_t len, uint32_t h) {
    uint32_t mask = t->num_slots - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t id = t->slots[i];
        if (id == 0) return i;
        if (t->slot_hash[i] == h) {
            size_t l;
            const char *other = isn_strtab_get(t, id - 1, &l);
            if (l == len && memcmp(other, s, len) == 0) return i;
        }
    }
}

static int grow_slots(isn_strtab *t) {
    uint32_t old_n = t->num_slots, *old_slots = t->slots, *old_hash = t->slot_hash;
    uint32_t n = old_n * 2;
    uint32_t *slots = calloc(n, sizeof *slots), *hashes = malloc(n * sizeof *hashes);
    if (!slots || !hashes) {
        free(slots);
        free(hashes);
        return -1;
    }
    for (uint32_t i = 0; i < old_n; i++) {
        if (!old_slots[i]) continue;
        uint32_t j = old_hash[i] & (n - 1);
        while (slots[j]) j = (j + 1) & (n - 1);
        slots[j] = old_slots[i];
        hashes[j] = old_hash[i];
    }
    free(old_slots);
    free(old_hash);
    t->slots = slots;
    t->slot_hash = hashes;
    t->num_slots = n;
    return 0;
}

/* Both calls hash with XXH3, not base's isn_hash64 (XXH64): the builder interns every token, XXH3 is
 * faster on short strings, and the table never leaves memory. */
uint32_t isn_strtab_find(const isn_strtab *t, const char *s, size_t len) {
    uint32_t h = (uint32_t)XXH3_64bits(s, len);
    uint32_t i = probe(t, s, len, h);
    return t->slots[i] ? t->slots[i] - 1 : UINT32_MAX;
}

uint32_t isn_strtab_intern(isn_strtab *t, const char *s, size_t len, bool *added) {
    uint32_t h = (uint32_t)XXH3_64bits(s, len);
    uint32_t i = probe(t, s, len, h);
    *added = false;
    if (t->slots[i]) return t->slots[i] - 1;
    if (t->count + 1 >= t->offsets_cap) {
        uint64_t *o = realloc(t->offsets, (size_t)t->offsets_cap * 2 * sizeof *o);
        if (!o) return UINT32_MAX;
        t->offsets = o;
        t->offsets_cap *= 2;
    }
    if (t->bytes_len + len > t->bytes_cap) {
        uint64_t cap = t->bytes_cap;
        while (cap < t->bytes_len + len) cap *= 2;
        char *b = realloc(t->bytes, cap);
        if (!b) return UINT32_MAX;
        t->bytes = b;
        t->bytes_cap = cap;
    }
    memcpy(t->bytes + t->bytes_len, s, len);
    t->bytes_len += len;
    uint32_t id = t->count++;
    t->offsets[t->count] = t->bytes_len;
    t->slots[i] = id + 1;
    t->slot_hash[i] = h;
    *added = true;
    if ((uint64_t)t->count * 2 > t->num_slots && grow_slots(t) != 0 && t->count + 1 >= t->num_slots) return UINT32_MAX;
    return id;
}
