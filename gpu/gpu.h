/* ISN GPU backend interface. The one public header of gpu/.
 * Built with CUDA (make CUDA=1, the default when nvcc is found) it talks to the devices; built without,
 * the no-GPU backend reports zero devices and everything runs on the CPU. */
#ifndef ISN_GPU_H
#define ISN_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "ranking/ranking.h"

typedef struct {
    int ordinal;
    char name[256];
    uint64_t memory_bytes;
    int compute_major;
    int compute_minor;
    int multiprocessors;
} isn_gpu_device_info;

/* "cuda" or "none". */
const char *isn_gpu_backend_name(void);

/* Number of usable devices; 0 without CUDA, without a driver or without a GPU (then err says why). */
int isn_gpu_device_count(char *err, size_t err_len);

/* 0, or -1 with err. */
int isn_gpu_device_info_get(int ordinal, isn_gpu_device_info *info, char *err, size_t err_len);

/* Runs a small kernel on the device and checks its result: proves the build, the driver and the device
 * work together. 0, or -1 with err. */
int isn_gpu_self_test(int ordinal, char *err, size_t err_len);

/* ------------------------------------------------------------------ first-stage backend
 *
 * A backend holds one partition's postings on one device and answers batches of first-stage queries
 * with the CPU's answers (same top-k, ties by lower doc id; scores are computed with the CPU's float
 * arithmetic and summed in double, so they are equal, not merely close). What the device cannot
 * answer exactly (a term not resident, too many terms, candidate overflow, a device error, an
 * unhealthy device) is answered by the CPU inside isn_gpu_complete, so every request gets its answer. */

typedef struct {
    int device;                /* ordinal to use; ignored by the emulated device */
    bool emulate;              /* run the device algorithm on the host instead (tests and CI, no GPU) */
    uint64_t memory_budget;    /* bytes of device memory for postings + metadata; 0 = 85% of free memory */
    uint32_t max_batch;        /* queries per batch (default 1024) */
    uint32_t max_k;            /* largest k served on the device (default 1000, at most 10000) */
    uint32_t max_candidates;   /* per query, before the final sort (0 = max(4 * max_k, 16384)) */
    uint32_t streams;          /* batches in flight at once (default 2) */
    /* Term ids of a training query log, one per occurrence: when the partition does not fit the budget
     * the most visited lists (visits per byte) stay resident. NULL = by document frequency. */
    const uint32_t *training_terms;
    uint64_t num_training_terms;
} isn_gpu_options;

void isn_gpu_options_default(isn_gpu_options *options);

typedef struct isn_gpu_backend isn_gpu_backend;

/* Picks the device, checks it with isn_gpu_self_test, uploads the payload and block metadata (or the
 * lists that fit the budget), warms the kernels up. NULL with err when no device can be used; the
 * caller then serves on the CPU. */
isn_gpu_backend *isn_gpu_open(const isn_index *index, const isn_gpu_options *options, char *err, size_t err_len);
void isn_gpu_close(isn_gpu_backend *backend);

typedef enum {
    ISN_GPU_ANSWERED_DEVICE = 1,
    ISN_GPU_ANSWERED_CPU = 2, /* fallback: see isn_gpu_request.fallback_reason */
} isn_gpu_answered_by;

typedef struct {
    /* in */
    const isn_query *query; /* terms with df (as isn_query_parse fills them) */
    isn_mode mode;
    uint32_t k;        /* 1..ISN_MAX_K; above options.max_k the CPU answers */
    uint64_t num_docs; /* collection size for IDF; 0 = the index's */
    isn_hit *hits;     /* k entries, caller's */
    /* out */
    uint32_t num_hits;
    isn_gpu_answered_by answered_by;
    const char *fallback_reason; /* static text, NULL when the device answered */
} isn_gpu_request;

typedef struct {
    uint32_t queries;
    uint32_t device_queries;
    uint32_t cpu_queries;
    uint64_t bytes_to_device;
    uint64_t bytes_from_device;
    uint64_t ranges_scored;   /* (query, doc-id range) pairs decoded and scored, both passes */
    uint64_t ranges_pruned;   /* skipped by their block-max bound against the shared threshold */
    uint64_t postings_scored; /* both passes */
    uint64_t candidates;      /* entering the final sort */
    /* Device time per stage, from events (0 for the emulated device) */
    double ms_transfer_in, ms_threshold_pass, ms_select_threshold, ms_score_pass, ms_sort, ms_transfer_out;
    double ms_total;          /* submit to complete, wall clock, CPU fallback included */
} isn_gpu_batch_stats;

/* Validates the requests and enqueues the device part of the batch (n <= max_batch). The requests and
 * their hit arrays must stay valid until isn_gpu_complete. Returns a ticket >= 0, or -1 with err (bad
 * request, or every stream busy). */
int isn_gpu_submit(isn_gpu_backend *backend, isn_gpu_request *requests, uint32_t n, char *err, size_t err_len);
/* Waits for the batch, fills every request (re-running on the CPU what the device did not answer,
 * the whole batch after a device error). 0, or -1 with err only for a bad ticket. */
int isn_gpu_complete(isn_gpu_backend *backend, int ticket, isn_gpu_batch_stats *stats, char *err, size_t err_len);
/* Submit + complete. */
int isn_gpu_search_batch(isn_gpu_backend *backend, isn_gpu_request *requests, uint32_t n, isn_gpu_batch_stats *stats,
                         char *err, size_t err_len);

typedef struct {
    bool healthy;
    char reason[256];      /* why not healthy (the first device error) */
    char device_name[256];
    uint64_t index_bytes;    /* payload + block metadata + norms of the whole partition */
    uint64_t bytes_resident; /* of those, on the device */
    uint32_t terms_total;
    uint32_t terms_resident;
    uint64_t batches;
    uint64_t queries_device;
    uint64_t queries_cpu;
    uint64_t queries_not_resident; /* answered on the CPU because a list was not resident */
    uint64_t device_errors;
    uint64_t bytes_transferred;
} isn_gpu_health;

void isn_gpu_health_get(const isn_gpu_backend *backend, isn_gpu_health *health);

/* Test hook: the next batch's device work fails as a CUDA error would; the backend turns unhealthy and
 * that batch and every later one are answered on the CPU. */
void isn_gpu_inject_fault(isn_gpu_backend *backend);

#endif
