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
    if (!t->slots || isn_string_store_init(&t->strings, 1 << 14) != 0) {
        id_table_free(t);
        return -1;
    }
    return 0;
}

void id_table_free(id_table *t) {
    isn_string_store_free(&t->strings);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

uint64_t id_table_bytes(const id_table *t) {
    return isn_string_store_footprint(&t->strings) + (uint64_t)t->num_slots * sizeof *t->slots;
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
        if (t->slots[i].hash != hash) continue;
        uint32_t id = t->slots[i].id - 1;
        size_t id_len;
        const char *held = id_table_get(t, id, &id_len);
        if (id_len == len && memcmp(held, s, len) == 0) return id;
    }
    uint32_t id = isn_string_store_append(&t->strings, s, len);
    if (id == UINT32_MAX) return UINT32_MAX;
    t->slots[i] = (id_slot){hash, id + 1};
    *added = true;
    uint32_t count = t->strings.count;
    if ((uint64_t)count * 4 > (uint64_t)t->num_slots * 3 && grow_slots(t) != 0 && count + 1 >= t->num_slots)
        return UINT32_MAX;
    return id;
}
