/* The top-k buffer of ranking_internal.h: compaction by selection, and the final sorted hits. */
#include <stdlib.h>

#include "ranking/ranking_internal.h"

static inline void swap_keys(uint64_t *a, uint64_t *b) {
    uint64_t t = *a;
    *a = *b;
    *b = t;
}

/* Reorders keys[0..n) so that keys[0..k) are the k largest (0 < k < n): quickselect, median of three. */
static void select_largest(uint64_t *keys, uint32_t n, uint32_t k) {
    uint32_t lo = 0, hi = n - 1; /* the k-th largest lies in [lo, hi] */
    while (hi > lo) {
        uint32_t mid = lo + (hi - lo) / 2;
        /* Median of three to keys[hi] as the pivot. */
        if (keys[mid] < keys[lo]) swap_keys(&keys[mid], &keys[lo]);
        if (keys[hi] < keys[lo]) swap_keys(&keys[hi], &keys[lo]);
        if (keys[mid] < keys[hi]) swap_keys(&keys[mid], &keys[hi]);
        uint64_t pivot = keys[hi];
        uint32_t store = lo;
        for (uint32_t i = lo; i < hi; i++)
            if (keys[i] > pivot) swap_keys(&keys[i], &keys[store++]);
        swap_keys(&keys[store], &keys[hi]); /* keys[lo..store) > pivot = keys[store] > keys(store..hi] */
        if (store == k - 1 || store == k)
            return; /* keys are distinct, so the top k are exactly keys[0..k) */
        if (store > k)
            hi = store - 1;
        else
            lo = store + 1;
    }
}

void ranking_buffer_compact(ranking_run *run) {
    ranking_topk_buffer *b = &run->buffer;
    if (b->size > b->k) {
        select_largest(b->keys, b->size, b->k);
        b->size = b->k;
    }
    if (b->size == b->k) {
        uint64_t worst = UINT64_MAX;
        for (uint32_t i = 0; i < b->size; i++)
            if (b->keys[i] < worst) worst = b->keys[i];
        b->kth = ranking_key_score(worst);
        b->have_kth = true;
        run->topk.threshold = (double)b->kth > run->topk.floor ? (double)b->kth : run->topk.floor;
    }
    b->next_compaction = b->capacity;
}

static int compare_keys_descending(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

void ranking_buffer_finish(ranking_run *run) {
    ranking_topk_buffer *b = &run->buffer;
    if (b->size > b->k) {
        select_largest(b->keys, b->size, b->k);
        b->size = b->k;
    }
    qsort(b->keys, b->size, sizeof *b->keys, compare_keys_descending);
    for (uint32_t i = 0; i < b->size; i++) {
        run->topk.entries[i].doc = ranking_key_doc(b->keys[i]);
        run->topk.entries[i].score = ranking_key_score(b->keys[i]);
    }
    run->topk.size = b->size;
}
