/* The second-stage pass on the host, as the device runs it (gpu.h isn_gpu_l2_pass_emulated and
 * isn_gpu_l2_emulated): the packed buffer is written for a "device" copy and read only through that
 * copy's addresses, row r finds its query as a device thread does, and each step is the kernels'
 * per-thread body. A handle's passes run in in-flight slots as the GPU handle's do (l2_pass_slots.h):
 * each slot's host and "device" buffers, feature rows, inputs and scores are its own and reused from
 * call to call, and the results reach the caller only at the end, as the GPU's copy back does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/l2_pass.h"
#include "gpu/l2_pass_slots.h"

typedef struct {
    uint8_t *host, *device;
    float *rows, *inputs, *scratch, *scores;
    size_t host_cap, device_cap, rows_cap, inputs_cap, scratch_cap, scores_cap;
} emulated_slot;

struct isn_gpu_l2_emulated {
    l2_slot_pool *slots;
};

isn_gpu_l2_emulated *isn_gpu_l2_emulated_new(uint32_t slots) {
    isn_gpu_l2_emulated *e = calloc(1, sizeof *e);
    if (e == NULL) return NULL;
    if ((e->slots = l2_slot_pool_new(slots, sizeof(emulated_slot))) == NULL) {
        free(e);
        return NULL;
    }
    return e;
}

void isn_gpu_l2_emulated_free(isn_gpu_l2_emulated *e) {
    if (e == NULL) return;
    for (uint32_t i = 0; i < l2_slot_pool_size(e->slots); i++) {
        emulated_slot *s = l2_slot_pool_at(e->slots, i);
        free(s->host), free(s->device), free(s->rows), free(s->inputs), free(s->scratch), free(s->scores);
    }
    l2_slot_pool_free(e->slots);
    free(e);
}

/* *buf holds at least `bytes` (one more, so that an empty batch has a buffer too). */
static bool grow(void *buf, size_t *cap, size_t bytes) {
    void **b = buf;
    if (bytes < *cap && *b) return true;
    void *p = realloc(*b, bytes + 1);
    if (p == NULL) return false;
    *b = p;
    *cap = bytes + 1;
    return true;
}

static int run_in_slot(emulated_slot *s, const isn_ranker *ranker, const isn_feature_hits *const *queries,
                       uint32_t num_queries, float *scores, float *features, char *err, size_t err_len) {
    l2_pass_layout L;
    if (l2_pass_plan(ranker, queries, num_queries, &L, err, err_len) != 0) return -1;
    const size_t scratch_floats = isn_ranker_scratch_floats(ranker, L.num_rows);
    if (!grow(&s->host, &s->host_cap, L.bytes) || !grow(&s->device, &s->device_cap, L.bytes) ||
        !grow(&s->rows, &s->rows_cap, (size_t)L.num_rows * L.num_features * sizeof(float)) ||
        !grow(&s->inputs, &s->inputs_cap, (size_t)L.num_rows * L.num_inputs * sizeof(float)) ||
        !grow(&s->scratch, &s->scratch_cap, scratch_floats * sizeof(float)) ||
        !grow(&s->scores, &s->scores_cap, (size_t)L.num_rows * sizeof(float))) {
        snprintf(err, err_len, "second-stage pass (emulated): out of memory for %u candidates", L.num_rows);
        return -1;
    }
    l2_pass_pack(ranker, queries, num_queries, &L, s->host, (uintptr_t)s->device);
    memcpy(s->device, s->host, L.bytes);
    memset(s->host, 0xA5, L.bytes); /* nothing below may read the host copy */
    const isn_feature_hits *table = (const isn_feature_hits *)(s->device + L.queries);
    const uint32_t *row_start = (const uint32_t *)(s->device + L.row_start);
    const isn_transform_view *views = (const isn_transform_view *)(s->device + L.transforms);
    for (uint32_t r = 0; r < L.num_rows; r++) { /* the feature kernel's threads */
        uint32_t q = l2_pass_query_of(row_start, num_queries, r);
        isn_feature_row(&table[q], r - row_start[q], s->rows + (size_t)r * L.num_features);
    }
    for (uint32_t r = 0; r < L.num_rows; r++) /* the transform kernel's threads */
        for (uint32_t j = 0; j < L.num_inputs; j++)
            s->inputs[(size_t)r * L.num_inputs + j] = isn_transform_apply(&views[j], s->rows + (size_t)r * L.num_features);
    /* the model kernels: the trees, the MLP, or the trees then the MLP reading their scores as its last
     * input (the device's dense kernel reads that column beside the rows, as isn_mlp_predict_last) */
    isn_ranker_predict(ranker, s->inputs, L.num_rows, L.num_inputs, s->scratch, s->scores);
    /* the copy back */
    memcpy(scores, s->scores, (size_t)L.num_rows * sizeof(float));
    if (features) memcpy(features, s->rows, (size_t)L.num_rows * L.num_features * sizeof(float));
    return 0;
}

int isn_gpu_l2_pass_on_emulated(isn_gpu_l2_emulated *e, const isn_ranker *ranker, const isn_feature_hits *const *queries,
                                uint32_t num_queries, float *scores, float *features, char *err, size_t err_len) {
    emulated_slot *s = l2_slot_acquire(e->slots);
    int rc = run_in_slot(s, ranker, queries, num_queries, scores, features, err, err_len);
    l2_slot_release(e->slots, s);
    return rc;
}

int isn_gpu_l2_pass_emulated(const isn_ranker *ranker, const isn_feature_hits *const *queries, uint32_t num_queries,
                             float *scores, float *features, char *err, size_t err_len) {
    isn_gpu_l2_emulated *e = isn_gpu_l2_emulated_new(1);
    if (e == NULL) {
        snprintf(err, err_len, "second-stage pass (emulated): out of memory");
        return -1;
    }
    int rc = isn_gpu_l2_pass_on_emulated(e, ranker, queries, num_queries, scores, features, err, err_len);
    isn_gpu_l2_emulated_free(e);
    return rc;
}
