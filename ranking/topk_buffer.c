/* The top-k buffer of ranking_internal.h: compaction by selection, and the final sorted hits. */
#include <string.h>

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
        /* Branch-free Lomuto: which side a key goes to is as random as the scores. */
        for (uint32_t i = lo; i < hi; i++) {
            uint64_t v = keys[i];
            keys[i] = keys[store];
            keys[store] = v;
            store += v > pivot;
        }
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

/* Sorts keys[0..n) descending by LSD radix sort on bytes, through tmp (n entries); bytes that are
 * the same in every key are skipped, so most passes over the doc half cost only the histogram. */
static void radix_sort_descending(uint64_t *keys, uint64_t *tmp, uint32_t n) {
    uint32_t counts[8][256];
    memset(counts, 0, sizeof counts);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t inverted = ~keys[i];
        for (unsigned d = 0; d < 8; d++)
            counts[d][(inverted >> (8 * d)) & 0xFF]++;
    }
    uint64_t *from = keys, *to = tmp;
    for (unsigned d = 0; d < 8; d++) {
        uint32_t *c = counts[d];
        if (c[(~from[0] >> (8 * d)) & 0xFF] == n)
            continue; /* every key has this byte */
        uint32_t sum = 0;
        for (unsigned v = 0; v < 256; v++) {
            uint32_t here = c[v];
            c[v] = sum;
            sum += here;
        }
        for (uint32_t i = 0; i < n; i++)
            to[c[(~from[i] >> (8 * d)) & 0xFF]++] = from[i];
        uint64_t *swap = from;
        from = to;
        to = swap;
    }
    if (from != keys)
        memcpy(keys, from, (size_t)n * sizeof *keys);
}

void ranking_buffer_finish(ranking_run *run) {
    ranking_topk_buffer *b = &run->buffer;
    if (b->size > b->k) {
        select_largest(b->keys, b->size, b->k);
        b->size = b->k;
    }
    /* After the selection the buffer's second half (capacity is twice k) is free. */
    radix_sort_descending(b->keys, b->keys + b->k, b->size);
    for (uint32_t i = 0; i < b->size; i++) {
        run->topk.entries[i].doc = ranking_key_doc(b->keys[i]);
        run->topk.entries[i].score = ranking_key_score(b->keys[i]);
    }
    run->topk.size = b->size;
}
