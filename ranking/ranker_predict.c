/* A ranker's model over rows of its inputs on the CPU: trees, an MLP, or the trees then an MLP
 * stacked on them (the ranker file's `then mlp` line). The stacked MLP's last input is the trees'
 * score, read from `out` where the trees left it: no row is copied to append it. */
#include "ranking/ranker.h"

size_t isn_ranker_scratch_floats(const isn_ranker *rk, uint32_t n) {
    return rk->mlp ? isn_mlp_scratch_floats(rk->mlp, n) : 0;
}

void isn_ranker_predict(const isn_ranker *rk, const float *inputs, uint32_t n, uint32_t stride, float *scratch,
                        float *out) {
    if (rk->forest)
        isn_forest_predict(rk->forest, inputs, n, stride, out);
    if (rk->forest && rk->mlp)
        isn_mlp_predict_last(rk->mlp, inputs, n, stride, out, scratch, out);
    else if (rk->mlp)
        isn_mlp_predict(rk->mlp, inputs, n, stride, scratch, out);
}
