/* Stem cache: Snowball costs far more than a hash probe, and a corpus repeats the same few
 * hundred thousand words millions of times. */
#include <stdlib.h>

#include "index/analyzer_internal.h"
#include "index/huge_pages.h"

_Static_assert(sizeof(stem_cache_slot) == 32, "a stem cache slot is half a cache line");

void stem_cache_init(stem_cache *cache, uint32_t capacity) {
    memset(cache, 0, sizeof *cache);
    if (capacity != 0 && (capacity & (capacity - 1)) == 0 && capacity >= STEM_CACHE_PROBES)
        cache->capacity = capacity;
}

void stem_cache_release(stem_cache *cache) {
    if (cache->huge_pages) index_table_free(cache->slots, (size_t)cache->capacity * sizeof *cache->slots);
    else free(cache->slots);
    cache->slots = NULL;
}

static inline uint16_t slot_tag(uint64_t hash) {
    return (uint16_t)(hash >> 48);
}

int stem_cache_lookup(stem_cache *cache, uint64_t hash, char *term, size_t len, uint32_t **memo) {
    if (cache->slots == NULL || len > STEM_CACHE_SLOT_BYTES)
        return -1;
    uint32_t mask = cache->capacity - 1;
    uint16_t tag = slot_tag(hash);
    for (uint32_t probe = 0; probe < STEM_CACHE_PROBES; probe++) {
        stem_cache_slot *slot = &cache->slots[((uint32_t)hash + probe) & mask];
        if (slot->term_len == 0)
            break;
        if (slot->tag == tag && slot->term_len == len && memcmp(slot->bytes, term, len) == 0) {
            if (slot->suffix_len != 0)
                memcpy(term + slot->stem_prefix, slot->bytes + len, slot->suffix_len);
            term[slot->stem_prefix + slot->suffix_len] = '\0';
            *memo = &slot->memo;
            cache->hits++;
            return slot->stem_prefix + slot->suffix_len;
        }
    }
    cache->misses++;
    return -1;
}

uint32_t *stem_cache_insert(stem_cache *cache, uint64_t hash, const char *term, size_t len, const char *stem,
                            size_t stem_len) {
    if (cache->capacity == 0 || len == 0 || len > STEM_CACHE_SLOT_BYTES || stem_len > len)
        return NULL;
    size_t prefix = 0;
    while (prefix < stem_len && stem[prefix] == term[prefix])
        prefix++;
    size_t suffix_len = stem_len - prefix;
    if (len + suffix_len > STEM_CACHE_SLOT_BYTES)
        return NULL;
    if (cache->slots == NULL) {
        /* Allocated on first use: analyzers made only to analyze a query or two never pay for it. */
        cache->slots = cache->huge_pages ? index_table_alloc((size_t)cache->capacity * sizeof *cache->slots)
                                         : calloc(cache->capacity, sizeof *cache->slots);
        if (cache->slots == NULL) {
            cache->capacity = 0;
            return NULL;
        }
    }
    uint32_t mask = cache->capacity - 1;
    stem_cache_slot *target = NULL;
    for (uint32_t probe = 0; probe < STEM_CACHE_PROBES; probe++) {
        stem_cache_slot *slot = &cache->slots[((uint32_t)hash + probe) & mask];
        if (slot->term_len == 0) {
            target = slot;
            break;
        }
    }
    if (target == NULL) /* neighbourhood full: evict one of its slots, picked by other hash bits */
        target = &cache->slots[((uint32_t)hash + (uint32_t)(hash >> 30) % STEM_CACHE_PROBES) & mask];
    target->memo = 0;
    target->tag = slot_tag(hash);
    target->term_len = (uint8_t)len;
    target->stem_prefix = (uint8_t)prefix;
    target->suffix_len = (uint8_t)suffix_len;
    memcpy(target->bytes, term, len);
    memcpy(target->bytes + len, stem + prefix, suffix_len);
    return &target->memo;
}
