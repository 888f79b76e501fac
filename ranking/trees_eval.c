/* Tree-ensemble evaluation over many rows. Trees of depth <= 6 take the SIMD path of trees_simd.c
 * when the CPU has AVX2 or AVX-512. Otherwise (or with ISN_L2_KERNEL=scalar): rows in chunks whose
 * accumulators stay on the stack, trees in blocks that fit in L2, and within a block each tree walks
 * LANES rows at once, level by level,
 * branch-free (one compare per level, no data-dependent branches), so the rows' walks overlap in the
 * pipeline instead of each waiting on its own chain of loads. Each row still adds its trees in model
 * order, as XGBoost and LightGBM do, so sums round as theirs do. */
#include <math.h>
#include <string.h>

#include "ranking/trees.h"

#define ROW_CHUNK 512u
#define LANES 8u
#define TREE_BLOCK_BYTES (96u * 1024u)

static uint32_t trees_per_block(const isn_forest *f) {
    size_t splits = ((size_t)1 << f->depth) - 1;
    size_t bytes = splits * 9 + (splits + 1) * (f->sum_in_double ? 8 : 4);
    size_t per = TREE_BLOCK_BYTES / bytes;
    return per ? (uint32_t)per : 1;
}

/* One macro body for float and double accumulation: XGBoost sums in float, LightGBM in double. */
#define PADDED_WALK(ACC_T, LEAVES)                                                                       \
    do {                                                                                                 \
        const uint32_t D = f->depth;                                                                     \
        const size_t splits = ((size_t)1 << D) - 1;                                                      \
        const uint32_t block = trees_per_block(f);                                                       \
        for (uint32_t t0 = 0; t0 < f->num_trees; t0 += block) {                                          \
            uint32_t t1 = t0 + block < f->num_trees ? t0 + block : f->num_trees;                         \
            for (uint32_t r0 = 0; r0 < m; r0 += LANES) {                                                 \
                const float *rp[LANES];                                                                  \
                for (uint32_t j = 0; j < LANES; j++)                                                     \
                    rp[j] = rows + (size_t)(r0 + j < m ? r0 + j : m - 1) * stride;                       \
                for (uint32_t t = t0; t < t1; t++) {                                                     \
                    const uint32_t *feat = f->pad_feature + t * splits;                                  \
                    const float *thr = f->pad_threshold + t * splits;                                    \
                    const uint8_t *nr = f->pad_nan_right + t * splits;                                   \
                    uint32_t idx[LANES] = {0};                                                           \
                    for (uint32_t level = 0; level < D; level++)                                         \
                        for (uint32_t j = 0; j < LANES; j++) {                                           \
                            uint32_t i = idx[j];                                                         \
                            float x = rp[j][feat[i]];                                                    \
                            uint32_t right = (uint32_t)(x >= thr[i]) | ((uint32_t)(x != x) & nr[i]);     \
                            idx[j] = 2 * i + 1 + right;                                                  \
                        }                                                                                \
                    const __typeof__(*(LEAVES)) *leaf = (LEAVES) + t * (splits + 1) - splits;            \
                    uint32_t lanes = m - r0 < LANES ? m - r0 : LANES;                                    \
                    for (uint32_t j = 0; j < lanes; j++)                                                 \
                        acc[r0 + j] += (ACC_T)leaf[idx[j]];                                              \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
    } while (0)

/* Node-array walk for deep trees and zero-as-missing splits. */
static double walk_tree(const isn_forest *f, uint32_t t, const float *row) {
    const forest_node *nodes = f->nodes + f->node_start[t];
    const double *leaves = f->leaves + f->leaf_start[t];
    if (f->node_start[t] == (t + 1 < f->num_trees ? f->node_start[t + 1] : f->num_nodes))
        return leaves[0];
    int32_t ref = 0;
    while (ref >= 0) {
        const forest_node *n = &nodes[ref];
        float x = row[n->feature];
        bool right;
        if (x != x)
            right = n->nan_right;
        else if (n->zero_missing && fabsf(x) <= FOREST_ZERO_THRESHOLD)
            right = n->nan_right;
        else
            right = x >= n->threshold;
        ref = right ? n->right : n->left;
    }
    return leaves[~ref];
}

#define GENERIC_WALK(ACC_T)                                                                              \
    do {                                                                                                 \
        const uint32_t block = 64;                                                                       \
        for (uint32_t t0 = 0; t0 < f->num_trees; t0 += block) {                                          \
            uint32_t t1 = t0 + block < f->num_trees ? t0 + block : f->num_trees;                         \
            for (uint32_t r = 0; r < m; r++)                                                             \
                for (uint32_t t = t0; t < t1; t++)                                                       \
                    acc[r] += (ACC_T)walk_tree(f, t, rows + (size_t)r * stride);                         \
        }                                                                                                \
    } while (0)

static void chunk_float(const isn_forest *f, const float *rows, uint32_t m, uint32_t stride, float *out) {
    float acc[ROW_CHUNK];
    for (uint32_t r = 0; r < m; r++)
        acc[r] = (float)f->base_score;
    if (forest_simd_predict(f, rows, m, stride, acc, NULL))
        ;
    else if (f->depth)
        PADDED_WALK(float, f->pad_leaf_f);
    else
        GENERIC_WALK(float);
    memcpy(out, acc, m * sizeof *out);
}

static void chunk_double(const isn_forest *f, const float *rows, uint32_t m, uint32_t stride, float *out) {
    double acc[ROW_CHUNK];
    for (uint32_t r = 0; r < m; r++)
        acc[r] = f->base_score;
    if (forest_simd_predict(f, rows, m, stride, NULL, acc))
        ;
    else if (f->depth)
        PADDED_WALK(double, f->pad_leaf_d);
    else
        GENERIC_WALK(double);
    for (uint32_t r = 0; r < m; r++)
        out[r] = (float)(f->average_output ? acc[r] / f->num_trees : acc[r]);
}

void isn_forest_predict(const isn_forest *f, const float *rows, uint32_t n, uint32_t stride, float *out) {
    for (uint32_t r0 = 0; r0 < n; r0 += ROW_CHUNK) {
        uint32_t m = n - r0 < ROW_CHUNK ? n - r0 : ROW_CHUNK;
        if (f->sum_in_double)
            chunk_double(f, rows + (size_t)r0 * stride, m, stride, out + r0);
        else
            chunk_float(f, rows + (size_t)r0 * stride, m, stride, out + r0);
    }
}
