/* The static scores' suffix maxima, derived at open: what a search that adds a weighted prior to BM25
 * (isn_search_options.prior_weight) bounds the prior of every document from an id on with. */
#include <math.h>
#include <stdlib.h>

#include "index/reader.h"

int isn_index_derive_prior_bounds(isn_index *ix, char *err, size_t err_len) {
    ix->prior_bounds = NULL;
    ix->static_magnitude = 0.0f;
    ix->nonfinite_static_doc = UINT32_MAX;
    uint32_t nd = ix->meta->num_docs;
    if (!ix->static_scores || nd == 0) return 0;
    /* A NaN would poison every maximum before it and an infinity every bound: such an index still opens
     * (its scores serve features), but a search refuses to weight its prior (isn_index_prior_bounds NULL). */
    for (uint32_t d = 0; d < nd; d++) {
        float s = ix->static_scores[d];
        if (!isfinite(s)) {
            ix->nonfinite_static_doc = d;
            return 0;
        }
        if (fabsf(s) > ix->static_magnitude) ix->static_magnitude = fabsf(s);
    }
    ix->prior_bounds = malloc((size_t)nd * sizeof *ix->prior_bounds);
    if (!ix->prior_bounds)
        return isn_error(err, err_len, "out of memory for the bounds of %u static scores", nd);
    float best = ix->static_scores[nd - 1];
    for (uint32_t d = nd; d-- > 0;) {
        if (ix->static_scores[d] > best) best = ix->static_scores[d];
        ix->prior_bounds[d] = best;
    }
    return 0;
}

const float *isn_index_prior_bounds(const isn_index *ix) { return ix->prior_bounds; }

float isn_index_static_score_magnitude(const isn_index *ix) { return ix->static_magnitude; }

bool isn_index_static_scores_finite(const isn_index *ix, uint32_t *bad_doc) {
    if (bad_doc) *bad_doc = ix->nonfinite_static_doc;
    return ix->nonfinite_static_doc == UINT32_MAX;
}
