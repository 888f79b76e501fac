/* Private to gpu/: a zone map of the resident attribute columns (gpu_attribute): for each range of
 * GPU_RANGE_DOCS documents and each column, the least and most stored value among its documents. From it the
 * backend knows, before a batch runs, how many ranges a query's filters can keep a document of, and sizes the
 * query's report lists (gpu_query.range_top) for those ranges: a filter that follows the doc ids (a date on a
 * partition in crawl order, a site on one in URL order) puts the k answers in a few ranges, where lists sized
 * for every range fill up and send the ranges to be scored again. A filter kept by documents everywhere keeps
 * every range, and its lists stay as they were. */
#ifndef ISN_GPU_ATTRIBUTE_ZONES_H
#define ISN_GPU_ATTRIBUTE_ZONES_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu/device.h"
#include "gpu/filter_bitmaps.h"

/* A query's filters on zoned columns past the first this many are not looked up (a range they drop still
 * counts as kept); a value list longer than ISN_GPU_ZONE_EXACT_VALUES is looked up as the range of its values
 * (negated, not at all). */
#define ISN_GPU_MAX_ZONED_FILTERS 8u
#define ISN_GPU_ZONE_EXACT_VALUES 16u

typedef struct {
    uint32_t num_ranges, num_columns;
    uint64_t *first_word; /* each zoned column's first word and bits (a gpu_filter's name its column) */
    uint32_t *bits;
    uint32_t *least;      /* [column * num_ranges + range]: stored values (0: a document without the attribute) */
    uint32_t *most;
} gpu_zones;

/* The zones of the resident columns (bits != 0) of the packed words; returns -1 when out of memory. */
int gpu_zones_build(gpu_zones *z, const uint32_t *words, const gpu_attribute *columns, uint32_t num_columns,
                    uint32_t num_docs);
void gpu_zones_free(gpu_zones *z);

/* Whether a document whose column's stored values lie in [least, most] may pass the filter: false only when
 * none of those values can. */
bool gpu_zone_may_pass(const gpu_filter *f, const uint32_t *values, uint32_t least, uint32_t most);

/* The ranges that may hold a document passing every one of the filters (values: the batch's filter values): at
 * least the ranges that do. A filter on a column without zones keeps every range. */
uint32_t gpu_zones_kept_ranges(const gpu_zones *z, const gpu_filter *filters, uint32_t num_filters,
                               const uint32_t *values);

/* The kept ranges of the last few distinct filters a slot saw, named by their signature (gpu_pass_signature):
 * a count costs a pass over the ranges, and a batch's queries mostly share their filters. */
#define GPU_ZONE_CACHE_ENTRIES 8u
typedef struct {
    uint32_t length; /* of the signature; 0: empty */
    uint32_t signature[GPU_PASS_SIGNATURE_WORDS];
    uint32_t kept;
} gpu_zone_entry;
typedef struct {
    gpu_zone_entry entries[GPU_ZONE_CACHE_ENTRIES];
    uint32_t next; /* the entry a new signature replaces */
} gpu_zone_cache;

/* gpu_zones_kept_ranges for query q of the batch (its filters and values), through the cache. */
uint32_t gpu_zones_kept_ranges_cached(const gpu_zones *z, gpu_zone_cache *cache, const gpu_batch *batch,
                                      const gpu_query *q);

#endif
