/* Model-input transforms, applied one input (column) at a time over all candidates, so each loop runs
 * one kind of transform with no per-element dispatch. */
#include <math.h>

#include "ranking/ranker.h"

float transform_tree_input(const ranker_input *in, const float *row) {
    uint32_t i = 0;
    while (!in->lines[i].leaf) {
        const tree_input_line *l = &in->lines[i];
        i = row[l->feature] < l->threshold ? l->left : l->right;
    }
    return in->lines[i].value;
}

/* Number of bounds <= x: bucket i holds [bounds[i-1], bounds[i]), the lower bound inclusive. */
static float bucket_of(const float *bounds, uint32_t n, float x) {
    if (x != x)
        return NAN;
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (bounds[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (float)lo;
}

void isn_ranker_transform(const isn_ranker *r, const float *features, uint32_t num_features, uint32_t n,
                          float *inputs) {
    const uint32_t ni = r->num_inputs;
    for (uint32_t j = 0; j < ni; j++) {
        const ranker_input *in = &r->inputs[j];
        const float *col = features + in->feature;
        float *dst = inputs + j;
        switch (in->kind) {
        case TX_LINEAR:
            for (uint32_t i = 0; i < n; i++)
                dst[(size_t)i * ni] = in->a * col[(size_t)i * num_features] + in->b;
            break;
        case TX_LOG:
            for (uint32_t i = 0; i < n; i++) {
                float x = col[(size_t)i * num_features];
                dst[(size_t)i * ni] = in->a * log1pf(x > 0 ? x : 0) + in->b;
            }
            break;
        case TX_BUCKET:
            for (uint32_t i = 0; i < n; i++)
                dst[(size_t)i * ni] = bucket_of(in->bounds, in->num_bounds, col[(size_t)i * num_features]);
            break;
        case TX_TREE:
            for (uint32_t i = 0; i < n; i++)
                dst[(size_t)i * ni] = transform_tree_input(in, features + (size_t)i * num_features);
            break;
        case TX_KINDS:
            break;
        }
    }
}
