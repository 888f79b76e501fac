/* The per-thread second-stage workspace. */
#include <stdlib.h>

#include "ranking/l2_internal.h"

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
    if (index == NULL)
        return NULL;
    isn_l2_workspace *ws = calloc(1, sizeof *ws);
    if (ws == NULL)
        return NULL;
    ws->index = index;
    ws->info = isn_index_get_info(index);
    return ws;
}

void isn_l2_workspace_free(isn_l2_workspace *ws) {
    if (ws == NULL)
        return;
    free(ws->arena.base);
    free(ws->features);
    free(ws->inputs);
    free(ws->scores);
    free(ws->scratch);
    free(ws->by_doc);
    free(ws->keys);
    free(ws->docs);
    free(ws);
}
