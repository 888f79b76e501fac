/* Private to ranking/: the tree-ensemble representation the loaders build and the evaluator reads. */
#ifndef ISN_RANKING_TREES_H
#define ISN_RANKING_TREES_H

#include "ranking/l2_internal.h"

/* One split, in a form both XGBoost's and LightGBM's semantics map onto: go right when
 * x >= threshold (so x < threshold goes left); NaN goes right when nan_right; with zero_missing,
 * |x| <= 1e-35 also takes the missing direction (LightGBM's zero_as_missing). Children >= 0 are
 * nodes of the same tree, negative ones are ~leaf. */
typedef struct {
    uint32_t feature;
    float threshold;
    int32_t left, right;
    uint8_t nan_right;
    uint8_t zero_missing;
} forest_node;

#define FOREST_ZERO_THRESHOLD 1e-35f
/* Trees up to this depth are padded into complete trees and walked branch-free; deeper ones (or
 * models with zero_missing splits) take the node-array walk. */
#define FOREST_MAX_PADDED_DEPTH 10u

/* A split as the SIMD evaluator reads it: the input's offset in a transposed block of rows, the
 * threshold, and the split's bit among the splits of its level (its position in the level). */
typedef struct {
    uint32_t x_offset;
    float threshold;
    uint32_t bit;
} forest_simd_split;

/* Up to this depth a level has at most 32 splits, whose outcomes fit one 32-bit word per row. */
#define FOREST_SIMD_MAX_DEPTH 6u

struct isn_forest {
    uint64_t serial; /* l2_serial() at creation */
    uint32_t num_trees;
    uint32_t num_inputs;
    double base_score;   /* margin added before the trees */
    bool sum_in_double;  /* LightGBM sums leaves in double, XGBoost in float */
    bool average_output; /* LightGBM random forest: the mean of the trees */
    char **input_names;  /* num_named entries */
    uint32_t num_named;
    /* The loaders' form: nodes and leaves of tree t start at node_start[t] / leaf_start[t]. */
    uint32_t *node_start, *leaf_start;
    forest_node *nodes;
    double *leaves;
    uint32_t num_nodes, num_leaves, cap_nodes, cap_leaves;
    bool any_zero_missing;
    /* Complete-tree form (depth > 0 when built): per tree 2^depth - 1 splits in heap order and 2^depth
     * leaves; padding splits have a NaN threshold (never right) and send NaN left. */
    uint32_t depth;
    uint32_t *pad_feature;
    float *pad_threshold;
    uint8_t *pad_nan_right;
    float *pad_leaf_f;
    double *pad_leaf_d;
    /* Level lists for the SIMD evaluator (trees_simd.c), built when depth <= FOREST_SIMD_MAX_DEPTH: per
     * tree and level, its real splits (padding left out), first those that send NaN left, then those
     * that send it right; level (t, l) holds simd_splits[simd_start[2 * (t * depth + l)] ..
     * simd_start[2 * (t * depth + l) + 2]), its NaN-right part from simd_start[2 * (t * depth + l) + 1]. */
    forest_simd_split *simd_splits;
    uint32_t *simd_start;
};

isn_forest *forest_new(void);
/* Appends a tree with num_nodes splits and num_leaves leaves; returns pointers to fill, NULL on OOM. */
int forest_add_tree(isn_forest *f, uint32_t num_nodes, uint32_t num_leaves, forest_node **nodes, double **leaves);
/* Checks the trees (children in range, every node and leaf reached once, features below num_inputs
 * after it is raised to cover them) and builds the complete-tree form. 0 or -1 with err. */
int forest_finish(isn_forest *f, const char *path, char *err, size_t err_len);

/* trees_simd.c: builds the level lists from the complete-tree form (0, or -1 when out of memory), and
 * scores rows with them. forest_simd_predict returns false when this CPU or model cannot take the
 * SIMD path (then nothing is written); it adds to acc (float when !sum_in_double, else double). */
int forest_simd_build(isn_forest *f);
bool forest_simd_predict(const isn_forest *f, const float *rows, uint32_t m, uint32_t stride, float *acc_f,
                         double *acc_d);

#endif
