/* Private to gpu/: what the backend (backend.c) hands a device, and the two devices that take it:
 * the CUDA one (cuda_device.cu) and the host emulation (emulated_device.c). Plain C, read by nvcc too. */
#ifndef ISN_GPU_DEVICE_H
#define ISN_GPU_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "ranking/ranking.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Documents per range: one thread block scores one (query, range) pair in a shared-memory accumulator
 * of this many doubles (64 KB). */
#define GPU_RANGE_DOCS 8192u
/* Terms per query on the device; longer queries go to the CPU. */
#define GPU_MAX_TERMS 64u
/* Largest number of per-range best scores reported for the threshold. */
#define GPU_MAX_RANGE_TOP 32u
/* Bounds are inflated by this before being compared with the threshold (as ranking/ does). */
#define GPU_BOUND_SLACK (1.0 + 1e-6)

typedef struct {
    uint32_t first_block; /* into the block metadata */
    uint32_t num_blocks;
    uint32_t df;
    float weight;         /* idf * count, computed on the host exactly as isn_search does */
    int64_t payload_delta; /* device payload offset minus on-disk offset (0 when all is resident) */
} gpu_term;

typedef struct {
    uint32_t term_begin; /* into the batch's gpu_term array */
    uint32_t num_terms;
    uint32_t k;
    uint32_t and_mode;
    uint32_t range_top;  /* best scores each range reports for the threshold (1..GPU_MAX_RANGE_TOP) */
    uint32_t hit_offset; /* into the batch's hit array */
} gpu_query;

/* What the device returns, per query. */
typedef struct {
    uint32_t num_hits;
    uint32_t candidates; /* above max_candidates: overflow, the CPU answers */
    uint64_t postings_scored;
    uint32_t ranges_scored;
    uint32_t ranges_pruned;
} gpu_query_result;

typedef struct {
    const gpu_query *queries;
    uint32_t num_queries;
    const gpu_term *terms;
    uint32_t num_terms;
    uint32_t total_hits; /* sum of k */
    /* out, valid after finish */
    gpu_query_result *results;
    isn_hit *hits; /* total_hits entries */
} gpu_batch;

typedef struct {
    double ms_transfer_in, ms_threshold_pass, ms_select_threshold, ms_score_pass, ms_sort, ms_transfer_out;
    uint64_t bytes_to_device, bytes_from_device;
} gpu_batch_timing;

typedef struct {
    const uint8_t *payload; /* host bytes to upload */
    uint64_t payload_bytes;
    const isn_block_meta *blocks;
    uint64_t num_blocks;
    const float *norms;
    uint32_t num_docs;
    float k1_plus_1;
    uint32_t max_batch, max_terms, max_k, max_candidates, streams;
} gpu_upload;

typedef struct gpu_device gpu_device;

typedef struct {
    /* Uploads and allocates per-stream buffers. NULL with err. */
    gpu_device *(*open)(int ordinal, const gpu_upload *upload, char *err, size_t err_len);
    /* Enqueues a batch on stream `slot`; copies what it needs from the batch before returning, except
     * results and hits, written by finish. 0, or -1 with err (the device is then unhealthy). */
    int (*launch)(gpu_device *device, uint32_t slot, const gpu_batch *batch, char *err, size_t err_len);
    int (*finish)(gpu_device *device, uint32_t slot, gpu_batch *batch, gpu_batch_timing *timing, char *err,
                  size_t err_len);
    void (*close)(gpu_device *device);
    const char *(*name)(const gpu_device *device);
} gpu_device_ops;

extern const gpu_device_ops gpu_emulated_device;
/* NULL in a build without CUDA. */
const gpu_device_ops *gpu_cuda_device_ops(void);

/* Per-range best-score count so that ranges * range_top >= 2k where possible. */
static inline uint32_t gpu_range_top(uint32_t k, uint32_t num_docs) {
    uint32_t ranges = (num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
    if (ranges == 0) ranges = 1;
    uint64_t m = ((uint64_t)2 * k + ranges - 1) / ranges;
    if (m < 1) m = 1;
    if (m > GPU_MAX_RANGE_TOP) m = GPU_MAX_RANGE_TOP;
    return (uint32_t)m;
}

#ifdef __cplusplus
}
#endif

#endif
