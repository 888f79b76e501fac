/* Tree ensembles: the loaders' node arrays, their validation, and the padded complete-tree layout the
 * evaluator walks branch-free. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/trees.h"

isn_forest *forest_new(void) {
    isn_forest *f = calloc(1, sizeof(isn_forest));
    if (f)
        f->serial = l2_serial();
    return f;
}

static int grow(void **buf, uint32_t *cap, uint32_t need, size_t elem) {
    /* allocated even for a tree of no nodes or leaves: the caller points into the array */
    if (need <= *cap && *buf != NULL)
        return 0;
    uint32_t want = *cap ? *cap : 1024;
    while (want < need)
        want *= 2;
    void *grown = realloc(*buf, (size_t)want * elem);
    if (grown == NULL)
        return -1;
    *buf = grown;
    *cap = want;
    return 0;
}

int forest_add_tree(isn_forest *f, uint32_t num_nodes, uint32_t num_leaves, forest_node **nodes, double **leaves) {
    if ((f->num_trees & (f->num_trees + 1)) == 0 || f->num_trees == 0) { /* 0, 1, 3, 7...: double the tables */
        size_t want = ((size_t)f->num_trees + 1) * 2;
        uint32_t *ns = realloc(f->node_start, want * sizeof *ns), *ls;
        if (ns == NULL)
            return -1;
        f->node_start = ns;
        if ((ls = realloc(f->leaf_start, want * sizeof *ls)) == NULL)
            return -1;
        f->leaf_start = ls;
    }
    if ((uint64_t)f->num_nodes + num_nodes > UINT32_MAX / 2 || (uint64_t)f->num_leaves + num_leaves > UINT32_MAX / 2)
        return -1;
    if (grow((void **)&f->nodes, &f->cap_nodes, f->num_nodes + num_nodes, sizeof(forest_node)) != 0 ||
        grow((void **)&f->leaves, &f->cap_leaves, f->num_leaves + num_leaves, sizeof(double)) != 0)
        return -1;
    f->node_start[f->num_trees] = f->num_nodes;
    f->leaf_start[f->num_trees] = f->num_leaves;
    *nodes = f->nodes + f->num_nodes;
    *leaves = f->leaves + f->num_leaves;
    f->num_trees++;
    f->num_nodes += num_nodes;
    f->num_leaves += num_leaves;
    return 0;
}

static uint32_t tree_nodes(const isn_forest *f, uint32_t t) {
    return (t + 1 < f->num_trees ? f->node_start[t + 1] : f->num_nodes) - f->node_start[t];
}

static uint32_t tree_leaves(const isn_forest *f, uint32_t t) {
    return (t + 1 < f->num_trees ? f->leaf_start[t + 1] : f->num_leaves) - f->leaf_start[t];
}

/* Depth-first check that tree t is a tree: every child in range, every node and leaf reached exactly
 * once. Returns its depth, or -1. `seen` holds nodes + leaves bytes, `stack` nodes + 1 entries. */
static int check_tree(const isn_forest *f, uint32_t t, uint8_t *seen, int32_t *stack, uint32_t *stack_depth) {
    uint32_t nn = tree_nodes(f, t), nl = tree_leaves(f, t);
    const forest_node *nodes = f->nodes + f->node_start[t];
    memset(seen, 0, nn + nl);
    if (nn == 0)
        return nl == 1 ? 0 : -1;
    uint32_t top = 0, max_depth = 0, reached = 0;
    stack[top] = 0;
    stack_depth[top++] = 0;
    while (top) {
        top--;
        int32_t ref = stack[top];
        uint32_t depth = stack_depth[top];
        if (ref < 0) {
            uint32_t leaf = (uint32_t)~ref;
            if (leaf >= nl || seen[nn + leaf]++)
                return -1;
            reached++;
            max_depth = depth > max_depth ? depth : max_depth;
            continue;
        }
        if ((uint32_t)ref >= nn || seen[ref]++)
            return -1;
        reached++;
        if (top + 2 > nn + 1)
            return -1;
        stack[top] = nodes[ref].left;
        stack_depth[top++] = depth + 1;
        stack[top] = nodes[ref].right;
        stack_depth[top++] = depth + 1;
    }
    return reached == nn + nl ? (int)max_depth : -1;
}

/* Writes the subtree `ref` of tree t at heap slot `slot` of the padded tree (level `level`). */
static void pad_subtree(isn_forest *f, uint32_t t, int32_t ref, uint32_t slot, uint32_t level) {
    uint32_t splits = (1u << f->depth) - 1;
    size_t base = (size_t)t * splits;
    if (level == f->depth) {
        double v = f->leaves[f->leaf_start[t] + (uint32_t)~ref];
        f->pad_leaf_f[(size_t)t * (splits + 1) + slot - splits] = (float)v;
        f->pad_leaf_d[(size_t)t * (splits + 1) + slot - splits] = v;
        return;
    }
    if (ref < 0) { /* a leaf above the bottom: padding splits that always go left carry it down */
        f->pad_feature[base + slot] = 0;
        f->pad_threshold[base + slot] = NAN;
        f->pad_nan_right[base + slot] = 0;
        pad_subtree(f, t, ref, 2 * slot + 1, level + 1);
        pad_subtree(f, t, ref, 2 * slot + 2, level + 1);
        return;
    }
    const forest_node *node = &f->nodes[f->node_start[t] + (uint32_t)ref];
    f->pad_feature[base + slot] = node->feature;
    f->pad_threshold[base + slot] = node->threshold;
    f->pad_nan_right[base + slot] = node->nan_right;
    pad_subtree(f, t, node->left, 2 * slot + 1, level + 1);
    pad_subtree(f, t, node->right, 2 * slot + 2, level + 1);
}

int forest_finish(isn_forest *f, const char *path, char *err, size_t err_len) {
    uint32_t max_nodes = 0, max_leaves = 0, depth = 0;
    for (uint32_t t = 0; t < f->num_trees; t++) {
        max_nodes = tree_nodes(f, t) > max_nodes ? tree_nodes(f, t) : max_nodes;
        max_leaves = tree_leaves(f, t) > max_leaves ? tree_leaves(f, t) : max_leaves;
    }
    uint8_t *seen = malloc((size_t)max_nodes + max_leaves + 1);
    int32_t *stack = malloc(((size_t)max_nodes + 2) * sizeof *stack);
    uint32_t *stack_depth = malloc(((size_t)max_nodes + 2) * sizeof *stack_depth);
    int rc = 0;
    if (!seen || !stack || !stack_depth) {
        isn_error(err, err_len, "%s: out of memory", path);
        rc = -1;
    }
    for (uint32_t t = 0; rc == 0 && t < f->num_trees; t++) {
        int d = check_tree(f, t, seen, stack, stack_depth);
        if (d < 0) {
            isn_error(err, err_len, "%s: tree %u is malformed (a child out of range, or a node or leaf "
                      "reached twice or never)", path, t);
            rc = -1;
            break;
        }
        depth = (uint32_t)d > depth ? (uint32_t)d : depth;
        const forest_node *nodes = f->nodes + f->node_start[t];
        for (uint32_t i = 0; i < tree_nodes(f, t); i++) {
            if (nodes[i].feature >= f->num_inputs)
                f->num_inputs = nodes[i].feature + 1;
            if (isnan(nodes[i].threshold)) {
                isn_error(err, err_len, "%s: tree %u node %u has a NaN threshold", path, t, i);
                rc = -1;
            }
            f->any_zero_missing |= nodes[i].zero_missing != 0;
        }
    }
    free(seen);
    free(stack);
    free(stack_depth);
    if (rc != 0)
        return -1;
    if (f->num_trees == 0) {
        isn_error(err, err_len, "%s: the model has no trees", path);
        return -1;
    }
    if (depth > FOREST_MAX_PADDED_DEPTH || f->any_zero_missing)
        return 0;
    f->depth = depth ? depth : 1;
    size_t splits = ((size_t)1 << f->depth) - 1, total = splits * f->num_trees;
    f->pad_feature = malloc(total * sizeof *f->pad_feature);
    f->pad_threshold = malloc(total * sizeof *f->pad_threshold);
    f->pad_nan_right = malloc(total);
    f->pad_leaf_f = malloc((total + f->num_trees) * sizeof(float));
    f->pad_leaf_d = malloc((total + f->num_trees) * sizeof(double));
    if (!f->pad_feature || !f->pad_threshold || !f->pad_nan_right || !f->pad_leaf_f || !f->pad_leaf_d) {
        isn_error(err, err_len, "%s: out of memory for the padded trees", path);
        return -1;
    }
    for (uint32_t t = 0; t < f->num_trees; t++)
        pad_subtree(f, t, tree_nodes(f, t) ? 0 : ~0, 0, 0);
    if (forest_simd_build(f) != 0) {
        isn_error(err, err_len, "%s: out of memory for the SIMD level lists", path);
        return -1;
    }
    return 0;
}

void isn_forest_free(isn_forest *f) {
    if (f == NULL)
        return;
    for (uint32_t i = 0; i < f->num_named; i++)
        free(f->input_names[i]);
    void *arrays[] = {f->input_names, f->node_start,    f->leaf_start,    f->nodes,
                      f->leaves,      f->pad_feature,   f->pad_threshold, f->pad_nan_right,
                      f->pad_leaf_f,  f->pad_leaf_d,    f->simd_splits,   f->simd_start};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        free(arrays[i]);
    free(f);
}

uint32_t isn_forest_num_trees(const isn_forest *f) {
    return f->num_trees;
}

uint32_t isn_forest_num_inputs(const isn_forest *f) {
    return f->num_inputs;
}

const char *isn_forest_input_name(const isn_forest *f, uint32_t input) {
    return input < f->num_named ? f->input_names[input] : NULL;
}
