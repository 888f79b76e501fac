/* The attribute columns' zone map (attribute_zones.h). */
#include "gpu/attribute_zones.h"

#include <stdlib.h>
#include <string.h>

#include "gpu/posting_decode.h"

int gpu_zones_build(gpu_zones *z, const uint32_t *words, const gpu_attribute *columns, uint32_t num_columns,
                    uint32_t num_docs) {
    memset(z, 0, sizeof *z);
    uint32_t zoned = 0;
    for (uint32_t c = 0; c < num_columns; c++) zoned += columns[c].bits != 0;
    if (zoned == 0 || num_docs == 0) return 0;
    const uint32_t ranges = (num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
    z->first_word = malloc(zoned * sizeof *z->first_word);
    z->bits = malloc(zoned * sizeof *z->bits);
    z->least = malloc((size_t)zoned * ranges * sizeof *z->least);
    z->most = malloc((size_t)zoned * ranges * sizeof *z->most);
    if (z->first_word == NULL || z->bits == NULL || z->least == NULL || z->most == NULL) {
        gpu_zones_free(z);
        return -1;
    }
    z->num_ranges = ranges;
    for (uint32_t c = 0; c < num_columns; c++) {
        if (columns[c].bits == 0) continue;
        const uint32_t at = z->num_columns++;
        z->first_word[at] = columns[c].first_word;
        z->bits[at] = columns[c].bits;
        uint32_t *least = z->least + (size_t)at * ranges, *most = z->most + (size_t)at * ranges;
        for (uint32_t r = 0; r < ranges; r++) {
            least[r] = UINT32_MAX;
            most[r] = 0;
        }
        for (uint32_t d = 0; d < num_docs; d++) {
            const uint32_t v = gpu_column_stored(words + columns[c].first_word, columns[c].bits, d);
            const uint32_t r = d / GPU_RANGE_DOCS;
            least[r] = v < least[r] ? v : least[r];
            most[r] = v > most[r] ? v : most[r];
        }
    }
    return 0;
}

void gpu_zones_free(gpu_zones *z) {
    free(z->first_word);
    free(z->bits);
    free(z->least);
    free(z->most);
    memset(z, 0, sizeof *z);
}

bool gpu_zone_may_pass(const gpu_filter *f, const uint32_t *values, uint32_t least, uint32_t most) {
    if (f->negate && f->num_values == 0) /* fails where the filter's range holds every stored value */
        return !(f->least <= least && most <= f->most);
    if (f->negate) /* fails where every document holds one value that the filter names */
        return least != most || !gpu_stored_holds(least, f->least, f->most, values + f->first_value, f->num_values);
    if (f->num_values == 0) return (f->least > least ? f->least : least) <= (f->most < most ? f->most : most);
    for (uint32_t i = 0; i < f->num_values; i++)
        if (values[f->first_value + i] >= least && values[f->first_value + i] <= most) return true;
    return false;
}

uint32_t gpu_zones_kept_ranges_cached(const gpu_zones *z, gpu_zone_cache *cache, const gpu_batch *batch,
                                      const gpu_query *q) {
    uint32_t signature[GPU_PASS_SIGNATURE_WORDS];
    const uint32_t length = gpu_pass_signature(batch, q, signature);
    const gpu_filter *filters = batch->filters + q->filter_begin;
    if (length == 0) return gpu_zones_kept_ranges(z, filters, q->num_filters, batch->filter_values);
    for (uint32_t i = 0; i < GPU_ZONE_CACHE_ENTRIES; i++) {
        const gpu_zone_entry *e = &cache->entries[i];
        if (e->length == length && memcmp(e->signature, signature, length * sizeof *signature) == 0) return e->kept;
    }
    gpu_zone_entry *e = &cache->entries[cache->next];
    cache->next = (cache->next + 1) % GPU_ZONE_CACHE_ENTRIES;
    e->length = length;
    memcpy(e->signature, signature, length * sizeof *signature);
    e->kept = gpu_zones_kept_ranges(z, filters, q->num_filters, batch->filter_values);
    return e->kept;
}

uint32_t gpu_zones_kept_ranges(const gpu_zones *z, const gpu_filter *filters, uint32_t num_filters,
                               const uint32_t *values) {
    const uint32_t *least[ISN_GPU_MAX_ZONED_FILTERS], *most[ISN_GPU_MAX_ZONED_FILTERS];
    gpu_filter zoned[ISN_GPU_MAX_ZONED_FILTERS];
    uint32_t n = 0;
    for (uint32_t f = 0; f < num_filters && n < ISN_GPU_MAX_ZONED_FILTERS; f++) {
        gpu_filter g = filters[f];
        /* a long value list is tested as the range of its values (a negated one not at all), so that a range
         * costs a few compares whatever the list's length */
        if (g.num_values > ISN_GPU_ZONE_EXACT_VALUES) {
            if (g.negate) continue;
            const uint32_t *v = values + g.first_value;
            g.least = UINT32_MAX;
            g.most = 0;
            for (uint32_t i = 0; i < g.num_values; i++) {
                g.least = v[i] < g.least ? v[i] : g.least;
                g.most = v[i] > g.most ? v[i] : g.most;
            }
            g.num_values = 0;
        }
        for (uint32_t c = 0; c < z->num_columns; c++)
            if (z->first_word[c] == g.first_word && z->bits[c] == g.bits) {
                zoned[n] = g;
                least[n] = z->least + (size_t)c * z->num_ranges;
                most[n++] = z->most + (size_t)c * z->num_ranges;
                break;
            }
    }
    if (n == 0) return z->num_ranges;
    uint32_t kept = 0;
    for (uint32_t r = 0; r < z->num_ranges; r++) {
        bool may = true;
        for (uint32_t f = 0; f < n && may; f++) may = gpu_zone_may_pass(&zoned[f], values, least[f][r], most[f][r]);
        kept += may;
    }
    return kept;
}
