/* Bounds on the scores of a query's documents from a given id on, in global order (tail_bound.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/device.h"
#include "gpu/posting_decode.h"
#include "gpu/tail_bound.h"

/* Room for the rounding of each product weight x tf part (2^-24 each), of the double sum and of its
 * conversion to the float score, far below this; with a prior, of the prior's float sum too (2^-24 of the BM25
 * part's magnitude; isn_prior_bound's own margin takes the prior's part). */
#define TAIL_BOUND_MARGIN (1.0 + 1.0 / (1 << 20))

int tail_bounds_init(tail_bounds *tb, const isn_index *ix, char *err, size_t err_len) {
    tb->doc_bounds = isn_index_score_bounds(ix);
    tb->prior_bounds = isn_index_prior_bounds(ix);
    tb->suffix_max = NULL;
    tb->num_docs = isn_index_get_info(ix)->num_docs;
    tb->stretch = gpu_env_number("ISN_GPU_TAIL_BOUND_PERCENT", 100, 1) / 100.0;
    uint64_t num_blocks;
    tb->blocks = isn_index_block_metas(ix, &num_blocks);
    if (!tb->doc_bounds && !tb->prior_bounds) return 0;
    tb->suffix_max = malloc((num_blocks ? num_blocks : 1) * sizeof *tb->suffix_max);
    if (!tb->suffix_max) {
        snprintf(err, err_len, "GPU backend: out of memory for the suffix maxima of %llu blocks",
                 (unsigned long long)num_blocks);
        return -1;
    }
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        float most = 0.0f;
        for (uint32_t k = st.num_blocks; k-- > 0;) {
            const float part = tb->blocks[st.first_block + k].max_tf_part;
            most = part > most ? part : most;
            tb->suffix_max[st.first_block + k] = most;
        }
    }
    return 0;
}

void tail_bounds_free(tail_bounds *tb) {
    free(tb->suffix_max);
    tb->suffix_max = NULL;
}

/* The bound at doc (below num_docs), each term's block holding doc on sought only in [block_lo[t], block_hi[t]]
 * (where the caller knows it lies; NULL: the whole list) and left in block_at[t] (NULL: not kept). */
static double bound_at(const tail_bounds *tb, const tail_term *terms, uint32_t num_terms, uint32_t doc,
                       float prior_weight, const uint32_t *block_lo, const uint32_t *block_hi, uint32_t *block_at) {
    const bool prior = prior_weight != 0.0f && tb->prior_bounds;
    const double doc_bound = tb->doc_bounds ? tb->doc_bounds[doc] : INFINITY;
    double sum = 0.0;
    for (uint32_t t = 0; t < num_terms; t++) {
        if (!(terms[t].weight > 0.0f)) continue;
        const isn_block_meta *blocks = tb->blocks + terms[t].first_block;
        const uint32_t lo = block_lo ? block_lo[t] : 0, hi = block_hi ? block_hi[t] : terms[t].num_blocks;
        const uint32_t k = lo + gpu_lower_block(blocks + lo, hi - lo, doc);
        if (block_at) block_at[t] = k;
        if (k == terms[t].num_blocks) continue; /* no posting from doc on */
        const double part = tb->suffix_max[terms[t].first_block + k];
        sum += (double)terms[t].weight * (part < doc_bound ? part : doc_bound);
    }
    if (!prior) return sum * TAIL_BOUND_MARGIN * tb->stretch;
    return (sum * TAIL_BOUND_MARGIN + isn_prior_bound(prior_weight, tb->prior_bounds[doc])) * tb->stretch;
}

double tail_bound(const tail_bounds *tb, const tail_term *terms, uint32_t num_terms, uint32_t doc, float prior_weight) {
    if (!tb->doc_bounds && !(prior_weight != 0.0f && tb->prior_bounds)) return INFINITY;
    if (doc >= tb->num_docs) return 0.0;
    return bound_at(tb, terms, num_terms, doc, prior_weight, NULL, NULL, NULL);
}

uint32_t tail_stop(const tail_bounds *tb, const tail_term *terms, uint32_t num_terms, uint32_t from, uint32_t to,
                   uint32_t score_key, float prior_weight) {
    if ((!tb->doc_bounds && !(prior_weight != 0.0f && tb->prior_bounds)) || score_key == 0 || from >= to) return to;
    /* the least id in [from, to] whose bound is below the key (to when none below it is), by bisection. A term's
     * block holding an id lies between those holding the interval's ends, so each step seeks it there alone (the
     * stop runs on the submitting thread for every query of a batch: whole-list searches each step were most of
     * a batch's submission) */
    uint32_t windows_lo[GPU_MAX_TERMS], windows_hi[GPU_MAX_TERMS], block_at[GPU_MAX_TERMS];
    const bool windows = num_terms <= GPU_MAX_TERMS; /* (more terms: each list searched whole) */
    uint32_t *block_lo = windows ? windows_lo : NULL, *block_hi = windows ? windows_hi : NULL;
    for (uint32_t t = 0; windows && t < num_terms; t++) {
        block_lo[t] = 0;
        block_hi[t] = terms[t].num_blocks;
    }
    uint32_t lo = from, hi = to;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (mid >= tb->num_docs) { /* nothing from here on: the bound is 0 */
            if (gpu_bound_below(0.0, score_key)) hi = mid;
            else lo = mid + 1;
            continue;
        }
        const bool below = gpu_bound_below(
            bound_at(tb, terms, num_terms, mid, prior_weight, block_lo, block_hi, windows ? block_at : NULL), score_key);
        if (below) hi = mid;
        else lo = mid + 1;
        for (uint32_t t = 0; windows && t < num_terms; t++)
            if (terms[t].weight > 0.0f) { /* the others were not sought */
                if (below) block_hi[t] = block_at[t];
                else block_lo[t] = block_at[t];
            }
    }
    return lo;
}
