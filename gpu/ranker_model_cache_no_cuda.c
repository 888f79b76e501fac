/* The second stage's GPU calls in a build without CUDA: no handle can be opened, so every caller
 * scores on the CPU. */
#ifndef ISN_WITH_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

void isn_gpu_l2_options_default(isn_gpu_l2_options *options) {
    memset(options, 0, sizeof *options);
    options->model_memory_budget = 512ull << 20;
    options->max_rows = 262144;
}

isn_gpu_l2 *isn_gpu_l2_open(const isn_gpu_l2_options *options, char *err, size_t err_len) {
    (void)options;
    snprintf(err, err_len, "no GPU for the second stage: built without CUDA");
    return NULL;
}

void isn_gpu_l2_close(isn_gpu_l2 *l2) {
    (void)l2;
}

static int no_gpu(char *err, size_t err_len) {
    snprintf(err, err_len, "no GPU for the second stage: built without CUDA");
    return -1;
}

int isn_gpu_l2_score_forest(isn_gpu_l2 *l2, const isn_forest *forest, const float *inputs, uint32_t n, uint32_t stride,
                            float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    (void)l2, (void)forest, (void)inputs, (void)n, (void)stride, (void)out, (void)stats;
    return no_gpu(err, err_len);
}

int isn_gpu_l2_score_mlp(isn_gpu_l2 *l2, const isn_mlp *mlp, const float *inputs, uint32_t n, uint32_t stride,
                         float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    (void)l2, (void)mlp, (void)inputs, (void)n, (void)stride, (void)out, (void)stats;
    return no_gpu(err, err_len);
}

int isn_gpu_l2_score(isn_gpu_l2 *l2, const isn_ranker *ranker, const float *inputs, uint32_t n, uint32_t stride,
                     float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    (void)l2, (void)ranker, (void)inputs, (void)n, (void)stride, (void)out, (void)stats;
    return no_gpu(err, err_len);
}

int isn_gpu_l2_pass(isn_gpu_l2 *l2, const isn_ranker *ranker, const isn_feature_hits *const *queries,
                    uint32_t num_queries, float *scores, float *features, isn_gpu_l2_stats *stats, char *err,
                    size_t err_len) {
    (void)l2, (void)ranker, (void)queries, (void)num_queries, (void)scores, (void)features, (void)stats;
    return no_gpu(err, err_len);
}

void isn_gpu_l2_cache_get(const isn_gpu_l2 *l2, isn_gpu_l2_cache_info *info) {
    (void)l2;
    memset(info, 0, sizeof *info);
}

void *isn_gpu_l2_host_alloc(size_t bytes) {
    return malloc(bytes);
}

void isn_gpu_l2_host_free(void *p) {
    free(p);
}
#else
typedef int isn_ranker_model_cache_no_cuda_unused; /* ISO C forbids an empty translation unit */
#endif
