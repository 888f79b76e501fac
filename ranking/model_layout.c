/* Read-only views of loaded models for other evaluators (the GPU second stage), and the serial
 * numbers that tell one loaded model from another. */
#include <stdatomic.h>

#include "ranking/ranker.h"
#include "ranking/trees.h"

uint64_t l2_serial(void) {
    static atomic_uint_fast64_t next = 1;
    return atomic_fetch_add(&next, 1);
}

const isn_forest *isn_ranker_forest(const isn_ranker *ranker) {
    return ranker->forest;
}

const isn_mlp *isn_ranker_mlp(const isn_ranker *ranker) {
    return ranker->mlp;
}

uint64_t isn_forest_serial(const isn_forest *forest) {
    return forest->serial;
}

bool isn_forest_layout_get(const isn_forest *f, isn_forest_layout *layout) {
    if (f->depth == 0)
        return false;
    *layout = (isn_forest_layout){.num_trees = f->num_trees, .depth = f->depth, .num_inputs = f->num_inputs,
                                  .base_score = f->base_score, .sum_in_double = f->sum_in_double,
                                  .average_output = f->average_output, .feature = f->pad_feature,
                                  .threshold = f->pad_threshold, .nan_right = f->pad_nan_right,
                                  .leaf_f = f->pad_leaf_f, .leaf_d = f->pad_leaf_d};
    return true;
}
