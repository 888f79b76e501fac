/* The per-thread second-stage workspace. */
#include <stdlib.h>

#include "ranking/l2_internal.h"
#include "ranking/arena.h"

int l2_reserve(float **buf, size_t *cap, size_t count) {
    if (count <= *cap)
        return 0;
    size_t want = *cap * 2 > count ? *cap * 2 : count;
    float *grown = aligned_alloc(64, ((want * sizeof(float) + 63) / 64) * 64);
    if (grown == NULL)
        return -1;
    free(*buf);
    *buf = grown;
    *cap = want;
    return 0;
}

int l2_reserve_bytes(void **buf, size_t *cap_bytes, size_t bytes) {
    if (bytes <= *cap_bytes)
        return 0;
    size_t want = *cap_bytes * 2 > bytes ? *cap_bytes * 2 : bytes;
    void *grown = malloc(want);
    if (grown == NULL)
        return -1;
    free(*buf);
    *buf = grown;
    *cap_bytes = want;
    return 0;
}

isn_l2_workspace *isn_l2_workspace_new(const isn_index *index) {
    isn_l2_workspace *ws = index != NULL ? calloc(1, sizeof *ws) : NULL;
    if (ws == NULL)
        return NULL;
    ws->index = index;
    ws->info = isn_index_get_info(index);
    return ws;
}

void isn_l2_workspace_free(isn_l2_workspace *ws) {
    if (ws == NULL)
        return;
    ranking_arena_free(&ws->arena);
    void *buffers[] = {ws->features,      ws->inputs,        ws->scores,        ws->scratch,      ws->by_doc,
                       ws->keys,          ws->docs,          ws->hit_docs,      ws->hit_terms,    ws->hit_tf,
                       ws->hit_field_len, ws->hit_field_tf,  ws->hit_pos_count, ws->hit_pos_start, ws->hit_positions};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        free(buffers[i]);
    free(ws);
}
