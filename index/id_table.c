#include "index/id_table.h"

#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/base.h"

int id_table_init(id_table *t) {
    memset(t, 0, sizeof *t);
    t->num_slots = 1024;
    t->slots = isn_calloc_written(t->num_slots, sizeof *t->slots);
    t->offsets_cap = 1024;
    t->offsets = malloc(t->offsets_cap * sizeof *t->offsets);
    t->bytes_cap = 1 << 14;
    t->bytes = malloc(t->bytes_cap);
    if (!t->slots || !t->offsets || !t->bytes) {
        id_table_free(t);
        return -1;
    }
    t->offsets[0] = 0;
    return 0;
}

void id_table_free(id_table *t) {
    free(t->bytes);
    free(t->offsets);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

uint64_t id_table_bytes(const id_table *t) {
    return t->bytes_cap + (uint64_t)t->offsets_cap * sizeof *t->offsets + (uint64_t)t->num_slots * sizeof *t->slots;
}

static int grow_slots(id_table *t) {
    uint32_t n = t->num_slots * 2;
    id_slot *slots = isn_calloc_written(n, sizeof *slots);
    if (!slots) return -1;
    for (uint32_t i = 0; i < t->num_slots; i++) {
        if (!t->slots[i].id) continue;
        uint32_t j = t->slots[i].hash & (n - 1);
        while (slots[j].id) j = (j + 1) & (n - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->num_slots = n;
    return 0;
}

uint32_t id_table_intern(id_table *t, const char *s, size_t len, bool *added) {
    uint32_t hash = (uint32_t)XXH3_64bits(s, len), mask = t->num_slots - 1, i = hash & mask;
    *added = false;
    for (; t->slots[i].id; i = (i + 1) & mask) {
        uint32_t id = t->slots[i].id - 1;
        if (t->slots[i].hash == hash && t->offsets[id + 1] - t->offsets[id] == len &&
            memcmp(t->bytes + t->offsets[id], s, len) == 0)
            return id;
    }
    if (t->count + 1 >= t->offsets_cap) {
        uint64_t *o = realloc(t->offsets, (size_t)t->offsets_cap * 2 * sizeof *o);
        if (!o) return UINT32_MAX;
        t->offsets = o;
        t->offsets_cap *= 2;
    }
    if (t->bytes_len + len > t->bytes_cap) {
        uint64_t cap = t->bytes_cap;
        while (cap < t->bytes_len + len) cap += cap / 2; /* by half: these bytes are most of the table */
        char *b = realloc(t->bytes, cap);
        if (!b) return UINT32_MAX;
        t->bytes = b;
        t->bytes_cap = cap;
    }
    memcpy(t->bytes + t->bytes_len, s, len);
    uint32_t id = t->count++;
    t->slots[i] = (id_slot){hash, id + 1};
    t->bytes_len += len;
    t->offsets[t->count] = t->bytes_len;
    *added = true;
    if ((uint64_t)t->count * 4 > (uint64_t)t->num_slots * 3 && grow_slots(t) != 0 && t->count + 1 >= t->num_slots)
        return UINT32_MAX;
    return id;
}
