/* The bounded build's external ids (private to index/): each id once, numbered 0, 1, 2... in insertion
 * order (the partition's doc ids), in about a third of the memory of a term table (isn_strtab, whose
 * slots carry each string's head for the builder's probe per token): an id is looked up once. */
#ifndef ISN_INDEX_ID_TABLE_H
#define ISN_INDEX_ID_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t hash;
    uint32_t id; /* id + 1, 0 = empty */
} id_slot;

typedef struct {
    char *bytes; /* all ids, concatenated */
    uint64_t bytes_len, bytes_cap;
    uint64_t *offsets; /* offsets[id], offsets[count] = bytes_len */
    uint32_t count, offsets_cap;
    id_slot *slots; /* open addressing, at most 3/4 full */
    uint32_t num_slots;
} id_table;

int id_table_init(id_table *t);
void id_table_free(id_table *t);
/* The id's number, adding it when absent (*added says which); UINT32_MAX out of memory. */
uint32_t id_table_intern(id_table *t, const char *s, size_t len, bool *added);
uint64_t id_table_bytes(const id_table *t);
static inline const char *id_table_get(const id_table *t, uint32_t id, size_t *len) {
    *len = (size_t)(t->offsets[id + 1] - t->offsets[id]);
    return t->bytes + t->offsets[id];
}

#endif
