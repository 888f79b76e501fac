/* The bounded build's external ids (private to index/): each id once, numbered 0, 1, 2... in insertion
 * order (the partition's doc ids), in about a third of the memory of a term table (isn_strtab, whose
 * slots carry each string's head for the builder's probe per token): an id is looked up once. */
#ifndef ISN_INDEX_ID_TABLE_H
#define ISN_INDEX_ID_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/string_store.h"

typedef struct {
    uint32_t hash;
    uint32_t id; /* id + 1, 0 = empty */
} id_slot;

typedef struct {
    isn_string_store strings;
    id_slot *slots; /* open addressing, at most 3/4 full */
    uint32_t num_slots;
} id_table;

int id_table_init(id_table *t);
void id_table_free(id_table *t);
/* The id's number, adding it when absent (*added says which); UINT32_MAX out of memory. */
uint32_t id_table_intern(id_table *t, const char *s, size_t len, bool *added);
uint64_t id_table_bytes(const id_table *t);
static inline uint32_t id_table_count(const id_table *t) { return t->strings.count; }
static inline const char *id_table_get(const id_table *t, uint32_t id, size_t *len) {
    return isn_string_store_get(&t->strings, id, len);
}

#endif
