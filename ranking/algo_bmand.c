/* Block-max AND: the leapfrog of ranked AND, but before aligning the lists on a candidate the block
 * maxima of the blocks holding it bound every doc up to the first of those blocks' ends; when that
 * bound cannot beat the threshold the lead list jumps past the range, decoding nothing in it. */
#include "ranking/ranking_internal.h"

void ranking_block_max_and(ranking_run *run) {
    ranking_term *terms = run->terms;
    uint32_t n = run->num_terms;
    ranking_sort_terms_by_df(terms, n);
    double total_bound = 0.0;
    for (uint32_t i = 0; i < n; i++)
        total_bound += terms[i].max_score;
    isn_topk *topk = &run->topk;
    isn_cursor *lead = terms[0].cursor;
    /* The block bound holds for every doc up to blocks_end: reuse it while candidates stay there. */
    bool have_blocks = false;
    uint32_t blocks_end = 0;
    double block_bound = 0.0;
    uint32_t doc = lead->doc;
    while (doc != ISN_DOC_END) {
        if (ranking_should_stop(run, doc))
            break;
        if (topk->threshold != -INFINITY) {
            /* every document from doc on (the range the block bound skips too) has a prior below this */
            const double prior = ranking_prior_from(run, doc);
            if (ranking_bound_fails(total_bound, prior, topk))
                break;
            if (!have_blocks || doc > blocks_end) {
                have_blocks = true;
                block_bound = 0.0;
                blocks_end = ISN_DOC_END;
                for (uint32_t i = 0; i < n; i++) {
                    uint32_t block_last = isn_cursor_shallow_next_geq(terms[i].cursor, doc);
                    block_bound += (double)(terms[i].weight * isn_cursor_shallow_max(terms[i].cursor));
                    if (block_last < blocks_end)
                        blocks_end = block_last;
                }
            }
            if (ranking_bound_fails(block_bound, prior, topk)) {
                if (blocks_end == ISN_DOC_END)
                    break;
                /* As in BMW: metadata ending a block before the candidate (an index failing
                 * isn_index_verify) must not stop progress. */
                doc = ranking_next_geq(run, lead, blocks_end >= doc ? blocks_end + 1 : doc + 1);
                continue;
            }
        }
        doc = ranking_and_step(run, terms, n, lead, doc);
    }
}
