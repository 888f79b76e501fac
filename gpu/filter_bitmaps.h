/* Private to gpu/: which of a batch's queries test their filters on a filter bitmap (gpu_query.pass_slot) and
 * which bitmaps a batch builds, for a device that keeps GPU_PASS_SLOTS bitmaps a stream (first_stage_device.cu).
 * Plain C, read by nvcc too, so that the host tests check the choice the device makes.
 *
 * A bitmap holds one set of filters evaluated for every document (gpu_pass_word), named by those filters'
 * contents (their columns, bounds and stored values: the signature), and is kept from batch to batch, as the
 * columns never change while a device is open: a batch reuses the bitmap of filters it shares with an earlier
 * one. Filters whose signature takes more than GPU_PASS_SIGNATURE_WORDS words, and a batch's filters past its
 * first GPU_PASS_GROUPS distinct ones, are tested on the columns. */
#ifndef ISN_GPU_FILTER_BITMAPS_H
#define ISN_GPU_FILTER_BITMAPS_H

#include <stdint.h>

#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_PASS_SLOTS 4u
#define GPU_PASS_SIGNATURE_WORDS 64u
#define GPU_PASS_GROUPS 64u
/* Filters without a bitmap get one when their queries' lists hold at least num_docs / GPU_PASS_BUILD_SHARE
 * postings: a build reads the columns whole, coalesced, 32 documents a thread, where the tests it saves are a
 * scattered load a posting, so it pays for itself well before its queries test as many postings as there are
 * documents. */
#define GPU_PASS_BUILD_SHARE 8u

typedef struct {
    uint32_t length; /* of the signature; 0: the slot holds no bitmap */
    uint32_t signature[GPU_PASS_SIGNATURE_WORDS];
    uint64_t used; /* the cache's batch count when a batch last used it */
} gpu_pass_slot;

/* The distinct filters of a batch's range queries (gpu_pass_assign's scratch). */
typedef struct {
    uint32_t length, signature[GPU_PASS_SIGNATURE_WORDS];
    uint64_t postings; /* in its queries' lists */
    uint32_t query;    /* one of its queries, whose filters a build evaluates */
    int slot;          /* its bitmap, or -1 */
} gpu_pass_group;

/* A stream's bitmaps as the host tracks them; zeroed: none. */
typedef struct {
    gpu_pass_slot slots[GPU_PASS_SLOTS];
    uint64_t batches;
    gpu_pass_group groups[GPU_PASS_GROUPS];
} gpu_pass_cache;

/* The words naming query q's filters into out (GPU_PASS_SIGNATURE_WORDS); returns their count, or 0 when they
 * take more. */
uint32_t gpu_pass_signature(const gpu_batch *batch, const gpu_query *q, uint32_t *out);

/* Gives the batch's range queries with filters their bitmaps: pass_slot[q] (num_range_queries entries) is 1 +
 * the slot, or 0 for a query that tests the columns. Filters a slot already holds keep it; the others, the most
 * postings first, take the least recently used slot no query of this batch uses, if their postings reach
 * num_docs / GPU_PASS_BUILD_SHARE, to be built from query build_query[i] into slot build_slot[i]. Returns the
 * number of builds; *bitmap_queries: the queries given a bitmap. */
uint32_t gpu_pass_assign(gpu_pass_cache *cache, const gpu_batch *batch, uint32_t num_docs, uint32_t *pass_slot,
                         uint32_t build_query[GPU_PASS_SLOTS], uint32_t build_slot[GPU_PASS_SLOTS],
                         uint32_t *bitmap_queries);

#ifdef __cplusplus
}
#endif

#endif
