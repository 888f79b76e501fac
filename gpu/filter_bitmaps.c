/* Which queries of a batch test their filters on a filter bitmap, and which bitmaps the batch builds
 * (filter_bitmaps.h). */
#include <string.h>

#include "gpu/filter_bitmaps.h"

uint32_t gpu_pass_signature(const gpu_batch *batch, const gpu_query *q, uint32_t *out) {
    uint32_t n = 0;
#define PUT(v)                                           \
    do {                                                 \
        if (n < GPU_PASS_SIGNATURE_WORDS) out[n] = (v);  \
        n++;                                             \
    } while (0)
    PUT(q->num_filters);
    for (uint32_t i = 0; i < q->num_filters; i++) {
        const gpu_filter *f = &batch->filters[q->filter_begin + i];
        PUT((uint32_t)f->first_word);
        PUT((uint32_t)(f->first_word >> 32));
        PUT(f->bits);
        PUT(f->negate);
        PUT(f->least);
        PUT(f->most);
        PUT(f->num_values);
        for (uint32_t v = 0; v < f->num_values; v++) PUT(batch->filter_values[f->first_value + v]);
    }
#undef PUT
    return n <= GPU_PASS_SIGNATURE_WORDS ? n : 0;
}

static int find_group(const gpu_pass_group *groups, uint32_t count, const uint32_t *signature, uint32_t length) {
    for (uint32_t g = 0; g < count; g++)
        if (groups[g].length == length && memcmp(groups[g].signature, signature, length * sizeof *signature) == 0)
            return (int)g;
    return -1;
}

/* The batch's distinct filters into cache->groups, with their postings, and each range query's group + 1 into
 * group_of (0: none); returns their count. */
static uint32_t group_filters(gpu_pass_cache *cache, const gpu_batch *batch, uint32_t *group_of) {
    gpu_pass_group *groups = cache->groups;
    uint32_t count = 0, signature[GPU_PASS_SIGNATURE_WORDS];
    for (uint32_t q = 0; q < batch->num_range_queries; q++) {
        const gpu_query *query = &batch->queries[q];
        group_of[q] = 0;
        if (query->num_filters == 0) continue;
        const uint32_t length = gpu_pass_signature(batch, query, signature);
        if (length == 0) continue;
        int g = find_group(groups, count, signature, length);
        if (g < 0) {
            if (count == GPU_PASS_GROUPS) continue;
            g = (int)count++;
            groups[g].length = length;
            memcpy(groups[g].signature, signature, length * sizeof *signature);
            groups[g].postings = 0;
            groups[g].query = q;
            groups[g].slot = -1;
        }
        for (uint32_t t = 0; t < query->num_terms; t++) groups[g].postings += batch->terms[query->term_begin + t].df;
        group_of[q] = (uint32_t)g + 1u;
    }
    return count;
}

uint32_t gpu_pass_assign(gpu_pass_cache *cache, const gpu_batch *batch, uint32_t num_docs, uint32_t *pass_slot,
                         uint32_t build_query[GPU_PASS_SLOTS], uint32_t build_slot[GPU_PASS_SLOTS],
                         uint32_t *bitmap_queries) {
    cache->batches++;
    *bitmap_queries = 0;
    gpu_pass_group *groups = cache->groups;
    const uint32_t count = group_filters(cache, batch, pass_slot); /* each query's group, for now */
    /* the bitmaps the batch already has, first: none of them is taken for a build below */
    for (uint32_t g = 0; g < count; g++)
        for (uint32_t i = 0; i < GPU_PASS_SLOTS; i++) {
            gpu_pass_slot *slot = &cache->slots[i];
            if (slot->length == groups[g].length &&
                memcmp(slot->signature, groups[g].signature, slot->length * sizeof *slot->signature) == 0) {
                groups[g].slot = (int)i;
                slot->used = cache->batches;
            }
        }
    uint32_t builds = 0;
    for (;;) {
        int best = -1; /* the group without a bitmap whose queries read the most postings */
        for (uint32_t g = 0; g < count; g++)
            if (groups[g].slot < 0 && groups[g].postings * GPU_PASS_BUILD_SHARE >= num_docs &&
                (best < 0 || groups[g].postings > groups[best].postings))
                best = (int)g;
        if (best < 0) break;
        int free_slot = -1; /* the least recently used slot this batch does not use */
        for (uint32_t i = 0; i < GPU_PASS_SLOTS; i++)
            if (cache->slots[i].used != cache->batches &&
                (free_slot < 0 || cache->slots[i].used < cache->slots[free_slot].used))
                free_slot = (int)i;
        if (free_slot < 0) break;
        gpu_pass_slot *slot = &cache->slots[free_slot];
        slot->length = groups[best].length;
        memcpy(slot->signature, groups[best].signature, slot->length * sizeof *slot->signature);
        slot->used = cache->batches;
        groups[best].slot = free_slot;
        build_query[builds] = groups[best].query;
        build_slot[builds++] = (uint32_t)free_slot;
    }
    for (uint32_t q = 0; q < batch->num_range_queries; q++) { /* group to slot */
        const int slot = pass_slot[q] ? groups[pass_slot[q] - 1u].slot : -1;
        pass_slot[q] = slot < 0 ? 0u : (uint32_t)slot + 1u;
        *bitmap_queries += slot >= 0;
    }
    return builds;
}
