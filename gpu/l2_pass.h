/* Private to gpu/: the second stage's one device pass per batch (FE -> transforms -> model: trees, an
 * MLP, or trees then an MLP), its upload and the host run of the same pass (l2_pass_emulated.c). The
 * batch's hits and the ranker's transforms travel in one buffer, packed on the host with the device
 * addresses they will have there, so the device reads them with no fix-up and one copy carries them all. */
#ifndef ISN_GPU_L2_PASS_H
#define ISN_GPU_L2_PASS_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where each part lies in the packed buffer (byte offsets; the device reads them at base + offset). */
typedef struct {
    size_t queries;    /* isn_feature_hits[num_queries], pointers into the buffer */
    size_t row_start;  /* uint32_t[num_queries + 1]: the batch's first row of each query, then the total */
    size_t transforms; /* isn_transform_view[num_inputs], pointers into the buffer */
    size_t bytes;      /* the whole buffer */
    uint32_t num_queries, num_rows, num_features, num_inputs;
} l2_pass_layout;

/* Checks the batch (one index's queries: the same fields, so the same feature count, the ranker's)
 * and sizes its buffer. 0, or -1 with err naming what does not fit. */
int l2_pass_plan(const isn_ranker *ranker, const isn_feature_hits *const *queries, uint32_t num_queries,
                 l2_pass_layout *layout, char *err, size_t err_len);

/* Writes the buffer into host (layout->bytes), its pointers set for a copy at device_base. */
void l2_pass_pack(const isn_ranker *ranker, const isn_feature_hits *const *queries, uint32_t num_queries,
                  const l2_pass_layout *layout, uint8_t *host, uintptr_t device_base);

/* The query of the batch that row r belongs to: row_start[q] <= r < row_start[q + 1]. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline uint32_t l2_pass_query_of(const uint32_t *row_start, uint32_t num_queries, uint32_t r) {
    uint32_t lo = 0, hi = num_queries;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (row_start[mid] <= r)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

#ifdef __cplusplus
}
#endif

#endif
