/* Private to ranking/: the top-k collector, a min-heap with the worst hit at the root.
 * Documents are offered in increasing id, so a newcomer that ties the worst score has the higher id
 * and loses: it enters only with a strictly greater score. This makes the kept set exactly the top-k
 * by (score descending, doc ascending) whatever the algorithm skipped. */
#ifndef ISN_RANKING_TOPK_H
#define ISN_RANKING_TOPK_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ranking/ranking.h"

typedef struct {
    isn_hit *entries;
    uint32_t size;
    uint32_t capacity;
    /* What pruning compares bounds with (ranking_bound_fails): the worst kept score once full (a new
     * document must strictly beat it), -inf before; never below floor. */
    double threshold;
    /* A seed's (isn_search_options.initial_threshold) next float down, -inf without one. Bounds equal
     * to the threshold are pruned, and a document scoring exactly the seed must not be: it may still
     * enter (the seed may be a higher doc id's score, and ties go to the lower id). The heap itself
     * ignores the floor: it fills with whatever it is offered. */
    double floor;
} ranking_topk;

static inline bool ranking_hit_worse(isn_hit a, isn_hit b) {
    return a.score < b.score || (a.score == b.score && a.doc > b.doc);
}

static inline void ranking_topk_init(ranking_topk *topk, isn_hit *entries, uint32_t capacity) {
    topk->entries = entries;
    topk->size = 0;
    topk->capacity = capacity;
    topk->threshold = -INFINITY;
    topk->floor = -INFINITY;
}

/* seed > 0: pruning starts from it (see floor). */
static inline void ranking_topk_seed(ranking_topk *topk, float seed) {
    topk->floor = nextafterf(seed, 0.0f);
    if (topk->threshold < topk->floor)
        topk->threshold = topk->floor;
}

static inline void ranking_topk_sift_down(isn_hit *heap, uint32_t size, uint32_t at) {
    isn_hit moving = heap[at];
    for (;;) {
        uint32_t child = 2 * at + 1;
        if (child >= size)
            break;
        if (child + 1 < size && ranking_hit_worse(heap[child + 1], heap[child]))
            child++;
        if (!ranking_hit_worse(heap[child], moving))
            break;
        heap[at] = heap[child];
        at = child;
    }
    heap[at] = moving;
}

/* Returns true when the document was kept (the threshold may have risen). */
static inline bool ranking_topk_offer(ranking_topk *topk, uint32_t doc, float score) {
    isn_hit *heap = topk->entries;
    if (topk->size < topk->capacity) {
        uint32_t at = topk->size++;
        isn_hit hit = {.doc = doc, .score = score};
        while (at > 0) {
            uint32_t parent = (at - 1) / 2;
            if (!ranking_hit_worse(hit, heap[parent]))
                break;
            heap[at] = heap[parent];
            at = parent;
        }
        heap[at] = hit;
        if (topk->size == topk->capacity)
            topk->threshold = heap[0].score > topk->floor ? heap[0].score : topk->floor;
        return true;
    }
    if (!(score > heap[0].score))
        return false;
    heap[0].doc = doc;
    heap[0].score = score;
    ranking_topk_sift_down(heap, topk->size, 0);
    topk->threshold = heap[0].score > topk->floor ? heap[0].score : topk->floor;
    return true;
}

/* Turns the heap into a list sorted best first (heapsort: the worst goes to the end each round). */
static inline void ranking_topk_sort(ranking_topk *topk) {
    isn_hit *heap = topk->entries;
    for (uint32_t end = topk->size; end > 1; end--) {
        isn_hit worst = heap[0];
        heap[0] = heap[end - 1];
        heap[end - 1] = worst;
        ranking_topk_sift_down(heap, end - 1, 0);
    }
}

#endif
