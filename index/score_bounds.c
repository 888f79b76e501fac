/* Section 'score_bounds' at open, and the bound an early stop reads (index.h says why it holds). */
#include <float.h>
#include <math.h>

#include "index/reader.h"

int isn_index_check_score_bounds(isn_index *ix, const void *section, uint64_t bytes, char *err, size_t err_len) {
    uint32_t nd = ix->meta->num_docs;
    bool flagged = (ix->meta->flags & ISN_META_SCORE_BOUNDS) != 0;
    ix->score_bounds = NULL;
    if (!flagged) {
        if (bytes) return isn_error(err, err_len, "section 'score_bounds' has %llu bytes in an index without score bounds", (unsigned long long)bytes);
        return 0;
    }
    if (bytes != (uint64_t)nd * sizeof(float))
        return isn_error(err, err_len, "section 'score_bounds' has %llu bytes, expected %llu", (unsigned long long)bytes,
                         (unsigned long long)nd * sizeof(float));
    const float *bounds = section;
    for (uint32_t d = 0; d < nd; d++) {
        if (!(bounds[d] >= 0.0f && bounds[d] <= FLT_MAX))
            return isn_error(err, err_len, "section 'score_bounds': document %u has bound %g (finite, >= 0 expected)", d, (double)bounds[d]);
        if (d && bounds[d] > bounds[d - 1])
            return isn_error(err, err_len, "section 'score_bounds': document %u's bound %g exceeds the one before (%g)", d,
                             (double)bounds[d], (double)bounds[d - 1]);
    }
    ix->score_bounds = bounds;
    return 0;
}

const float *isn_index_score_bounds(const isn_index *ix) { return ix->score_bounds; }

/* Room for the rounding of the tf parts, their products by the weights and a sum in any order: each is
 * within a few float ulps (2^-24 each) of the exact value, far below this. */
#define SCORE_BOUND_MARGIN (1.0 + 1.0 / (1 << 20))

double isn_index_score_bound_scale(const isn_index *ix, double weight_sum, float avg_doc_len) {
    if (!ix->score_bounds || weight_sum <= 0.0) return 0.0;
    double stretch = 1.0, local = ix->info.avg_doc_len;
    if (avg_doc_len > 0.0f && (double)avg_doc_len > local && local > 0.0) stretch = (double)avg_doc_len / local;
    return weight_sum * stretch * SCORE_BOUND_MARGIN;
}

bool isn_index_score_bound(const isn_index *ix, uint32_t doc, double weight_sum, float avg_doc_len, double *bound) {
    *bound = 0.0;
    if (!ix->score_bounds) return false;
    if (doc >= ix->meta->num_docs || weight_sum <= 0.0) return true;
    *bound = (double)ix->score_bounds[doc] * isn_index_score_bound_scale(ix, weight_sum, avg_doc_len);
    return true;
}
