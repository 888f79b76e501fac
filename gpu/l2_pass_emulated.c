/* The second-stage pass on the host, as the device runs it (gpu.h isn_gpu_l2_pass_emulated): the
 * packed buffer is written for a "device" copy and read only through that copy's addresses, row r
 * finds its query as a device thread does, and each step is the kernels' per-thread body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/l2_pass.h"

int isn_gpu_l2_pass_emulated(const isn_ranker *ranker, const isn_feature_hits *const *queries, uint32_t num_queries,
                             float *scores, float *features, char *err, size_t err_len) {
    l2_pass_layout L;
    if (l2_pass_plan(ranker, queries, num_queries, &L, err, err_len) != 0)
        return -1;
    const isn_forest *forest = isn_ranker_forest(ranker);
    const isn_mlp *mlp = isn_ranker_mlp(ranker);
    size_t scratch_floats = mlp ? isn_mlp_scratch_floats(mlp, L.num_rows) : 0;
    uint8_t *host = malloc(L.bytes), *device = malloc(L.bytes);
    float *rows = features ? NULL : malloc(((size_t)L.num_rows * L.num_features + 1) * sizeof(float));
    float *inputs = malloc(((size_t)L.num_rows * L.num_inputs + 1) * sizeof(float));
    float *scratch = malloc((scratch_floats + 1) * sizeof(float));
    int rc = 0;
    if (!host || !device || (!features && !rows) || !inputs || !scratch) {
        snprintf(err, err_len, "second-stage pass (emulated): out of memory for %u candidates", L.num_rows);
        rc = -1;
        goto done;
    }
    l2_pass_pack(ranker, queries, num_queries, &L, host, (uintptr_t)device);
    memcpy(device, host, L.bytes);
    memset(host, 0xA5, L.bytes); /* nothing below may read the host copy */
    float *out_rows = features ? features : rows;
    const isn_feature_hits *table = (const isn_feature_hits *)(device + L.queries);
    const uint32_t *row_start = (const uint32_t *)(device + L.row_start);
    const isn_transform_view *views = (const isn_transform_view *)(device + L.transforms);
    for (uint32_t r = 0; r < L.num_rows; r++) { /* the feature kernel's threads */
        uint32_t q = l2_pass_query_of(row_start, num_queries, r);
        isn_feature_row(&table[q], r - row_start[q], out_rows + (size_t)r * L.num_features);
    }
    for (uint32_t r = 0; r < L.num_rows; r++) /* the transform kernel's threads */
        for (uint32_t j = 0; j < L.num_inputs; j++)
            inputs[(size_t)r * L.num_inputs + j] = isn_transform_apply(&views[j], out_rows + (size_t)r * L.num_features);
    if (forest)
        isn_forest_predict(forest, inputs, L.num_rows, L.num_inputs, scores);
    else
        isn_mlp_predict(mlp, inputs, L.num_rows, L.num_inputs, scratch, scores);
done:
    free(host);
    free(device);
    free(rows);
    free(inputs);
    free(scratch);
    return rc;
}
