#include "index/strtab.h"

#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/base.h"

int isn_strtab_init(isn_strtab *t, uint32_t expected) {
    memset(t, 0, sizeof *t);
    t->num_slots = 1024;
    while (t->num_slots < expected * 2u && t->num_slots < (1u << 30)) t->num_slots <<= 1;
    t->slots = isn_calloc_written(t->num_slots, sizeof *t->slots);
    if (!t->slots || isn_string_store_init(&t->strings, 1 << 16) != 0) {
        isn_strtab_free(t);
        return -1;
    }
    return 0;
}

void isn_strtab_free(isn_strtab *t) {
    isn_string_store_free(&t->strings);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

#define LENGTH_BITS 16
#define LENGTH_IN_OFFSETS ((1u << LENGTH_BITS) - 1)

static uint64_t slot_where(uint64_t offset, size_t len) {
    return offset << LENGTH_BITS | (len < LENGTH_IN_OFFSETS ? len : LENGTH_IN_OFFSETS);
}

/* The key being looked up, with its first bytes laid out as a slot's head. */
typedef struct {
    const char *s;
    size_t len;
    uint32_t hash;
    uint64_t head[ISN_STRTAB_HEAD_BYTES / 8];
} lookup_key;

static lookup_key make_key(const char *s, size_t len) {
    lookup_key k = {.s = s, .len = len, .hash = (uint32_t)XXH3_64bits(s, len)};
    memcpy(k.head, s, len < ISN_STRTAB_HEAD_BYTES ? len : ISN_STRTAB_HEAD_BYTES);
    return k;
}

static bool slot_holds(const isn_strtab *t, const isn_strtab_slot *slot, const lookup_key *k) {
    uint64_t offset = slot->where >> LENGTH_BITS;
    size_t slot_len = (size_t)(slot->where & LENGTH_IN_OFFSETS);
    if (slot_len == LENGTH_IN_OFFSETS) slot_len = (size_t)(t->strings.offsets[slot->id] - offset);
    if (slot_len != k->len || slot->head[0] != k->head[0] || slot->head[1] != k->head[1]) return false;
    return k->len <= ISN_STRTAB_HEAD_BYTES ||
           memcmp(t->strings.bytes + offset + ISN_STRTAB_HEAD_BYTES, k->s + ISN_STRTAB_HEAD_BYTES,
                  k->len - ISN_STRTAB_HEAD_BYTES) == 0;
}

static uint32_t probe(const isn_strtab *t, const lookup_key *k) {
    uint32_t mask = t->num_slots - 1;
    for (uint32_t i = k->hash & mask;; i = (i + 1) & mask) {
        const isn_strtab_slot *slot = &t->slots[i];
        if (slot->id == 0 || (slot->hash == k->hash && slot_holds(t, slot, k))) return i;
    }
}

static int grow_slots(isn_strtab *t) {
    uint32_t old_n = t->num_slots;
    isn_strtab_slot *old_slots = t->slots;
    uint32_t n = old_n * 2;
    isn_strtab_slot *slots = isn_calloc_written(n, sizeof *slots);
    if (!slots) return -1;
    for (uint32_t i = 0; i < old_n; i++) {
        if (!old_slots[i].id) continue;
        uint32_t j = old_slots[i].hash & (n - 1);
        while (slots[j].id) j = (j + 1) & (n - 1);
        slots[j] = old_slots[i];
    }
    free(old_slots);
    t->slots = slots;
    t->num_slots = n;
    return 0;
}

/* Both calls hash with XXH3, not base's isn_hash64 (XXH64): the builder interns every token, XXH3 is
 * faster on short strings, and the table never leaves memory. */
uint32_t isn_strtab_find(const isn_strtab *t, const char *s, size_t len) {
    lookup_key k = make_key(s, len);
    uint32_t i = probe(t, &k);
    return t->slots[i].id ? t->slots[i].id - 1 : UINT32_MAX;
}

uint32_t isn_strtab_intern(isn_strtab *t, const char *s, size_t len, bool *added) {
    lookup_key k = make_key(s, len);
    uint32_t i = probe(t, &k);
    *added = false;
    if (t->slots[i].id) return t->slots[i].id - 1;
    uint32_t id = isn_string_store_append(&t->strings, s, len);
    if (id == UINT32_MAX) return UINT32_MAX;
    t->slots[i] = (isn_strtab_slot){.hash = k.hash, .id = id + 1, .where = slot_where(t->strings.offsets[id], len)};
    memcpy(t->slots[i].head, k.head, sizeof k.head);
    *added = true;
    uint32_t count = t->strings.count;
    if ((uint64_t)count * 2 > t->num_slots && grow_slots(t) != 0 && count + 1 >= t->num_slots) return UINT32_MAX;
    return id;
}
