/* Model-input transforms, applied one input (column) at a time over all candidates, so each loop runs
 * one kind of transform with no per-element dispatch. The arithmetic is feature_rows.h's, which the
 * GPU runs too. */
#include <math.h>

#include "ranking/ranker.h"

void isn_ranker_transform_get(const isn_ranker *r, uint32_t input, isn_transform_view *view) {
    const ranker_input *in = &r->inputs[input];
    *view = (isn_transform_view){.kind = in->kind, .feature = in->feature, .a = in->a, .b = in->b,
                                 .bounds = in->bounds, .num_bounds = in->num_bounds, .lines = in->lines,
                                 .num_lines = in->num_lines};
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
                dst[(size_t)i * ni] = isn_transform_linear(in->a, in->b, col[(size_t)i * num_features]);
            break;
        case TX_LOG:
            for (uint32_t i = 0; i < n; i++)
                dst[(size_t)i * ni] = isn_transform_log(in->a, in->b, col[(size_t)i * num_features]);
            break;
        case TX_BUCKET:
            for (uint32_t i = 0; i < n; i++)
                dst[(size_t)i * ni] = isn_transform_bucket(in->bounds, in->num_bounds, col[(size_t)i * num_features]);
            break;
        case TX_TREE:
            for (uint32_t i = 0; i < n; i++)
                dst[(size_t)i * ni] = isn_transform_tree(in->lines, features + (size_t)i * num_features);
            break;
        case TX_KINDS:
            break;
        }
    }
}
