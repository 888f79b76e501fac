/* WAND and Block-Max WAND. Terms are kept sorted by their cursor's doc. The pivot is the first term
 * at which the sum of upper bounds of the terms before it (and itself) could beat the threshold: no
 * document before the pivot's doc can enter the top-k, so the terms before the pivot may jump to it. */
#include "ranking/ranking_internal.h"

/* Index of the pivot term, or n when no remaining document can beat the threshold. The documents passed
 * over start at the first term's: their priors are at most the prior's bound from there. */
static inline uint32_t find_pivot(const ranking_run *run, const ranking_term *terms, uint32_t n) {
    const double prior = ranking_prior_from(run, terms[0].cursor->doc);
    double bound = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        if (terms[i].cursor->doc == ISN_DOC_END)
            return n;
        bound += terms[i].max_score;
        if (!ranking_bound_fails(bound, prior, &run->topk))
            return i;
    }
    return n;
}

/* Scores the document on which terms[0..] sit, moves them on, and keeps the order. Out of line on
 * purpose, like the exhaustive OR's offer: inlined into the pivot loops (with the heap insertion it
 * carries), it takes the registers those loops keep their state in (GCC 12 -O2; bench_query: BMW
 * slower on long queries). */
__attribute__((noinline)) static void evaluate_pivot(ranking_run *run, ranking_term *terms, uint32_t n, uint32_t doc) {
    double score = 0.0;
    uint32_t moved = 0;
    while (moved < n && terms[moved].cursor->doc == doc) {
        score += ranking_term_score(run, &terms[moved], doc);
        ranking_next(run, terms[moved].cursor);
        moved++;
    }
    ranking_offer_scored(run, doc, score);
    ranking_resort_prefix(terms, moved, n);
}

/* Moves every term before the pivot up to the pivot's doc. */
static inline void advance_to_pivot(ranking_run *run, ranking_term *terms, uint32_t n, uint32_t doc) {
    uint32_t moved = 0;
    while (terms[moved].cursor->doc < doc) {
        ranking_next_geq(run, terms[moved].cursor, doc);
        moved++;
    }
    ranking_resort_prefix(terms, moved, n);
}

/* Top of both WANDs' loop: false when the run must stop or no remaining document can win; else
 * *pivot_doc is the pivot term's doc and *pivot its index. */
static inline bool next_pivot(ranking_run *run, ranking_term *terms, uint32_t n, uint32_t *pivot,
                              uint32_t *pivot_doc) {
    if (ranking_should_stop(run, terms[0].cursor->doc))
        return false;
    *pivot = find_pivot(run, terms, n);
    if (*pivot == n)
        return false;
    *pivot_doc = terms[*pivot].cursor->doc;
    return true;
}

/* Scores the pivot doc when every term before the pivot sits on it, else moves those terms there. */
static inline void step_at_pivot(ranking_run *run, ranking_term *terms, uint32_t n, uint32_t pivot_doc) {
    if (terms[0].cursor->doc == pivot_doc)
        evaluate_pivot(run, terms, n, pivot_doc);
    else
        advance_to_pivot(run, terms, n, pivot_doc);
}

void ranking_wand(ranking_run *run) {
    ranking_term *terms = run->terms;
    uint32_t n = run->num_terms;
    ranking_sort_terms_by_doc(terms, n);
    for (uint32_t pivot, pivot_doc; next_pivot(run, terms, n, &pivot, &pivot_doc);)
        step_at_pivot(run, terms, n, pivot_doc);
}

/* Block-Max WAND: before touching postings at the pivot doc, the block maxima of the blocks that hold
 * it bound the score of every doc up to the first of those blocks' ends. When that bound cannot beat
 * the threshold, the whole range is skipped without decoding. */
void ranking_block_max_wand(ranking_run *run) {
    ranking_term *terms = run->terms;
    uint32_t n = run->num_terms;
    ranking_sort_terms_by_doc(terms, n);
    uint32_t pivot, pivot_doc;
    while (next_pivot(run, terms, n, &pivot, &pivot_doc)) {
        /* Terms after the pivot sitting on the same doc add to its score: include them. */
        uint32_t last = pivot;
        while (last + 1 < n && terms[last + 1].cursor->doc == pivot_doc)
            last++;
        double block_bound = 0.0;
        uint32_t blocks_end = ISN_DOC_END;
        uint32_t strongest = 0;
        for (uint32_t i = 0; i <= last; i++) {
            isn_cursor *cursor = terms[i].cursor;
            uint32_t block_last = isn_cursor_shallow_next_geq(cursor, pivot_doc);
            block_bound += (double)(terms[i].weight * isn_cursor_shallow_max(cursor));
            if (block_last < blocks_end)
                blocks_end = block_last;
            if (terms[i].max_score > terms[strongest].max_score)
                strongest = i;
        }
        if (!ranking_bound_fails(block_bound, ranking_prior_from(run, pivot_doc), &run->topk)) {
            step_at_pivot(run, terms, n, pivot_doc);
            continue;
        }
        /* No doc in [pivot_doc, blocks_end] can win, nor any doc before the next term's doc. */
        uint32_t next = blocks_end == ISN_DOC_END ? ISN_DOC_END : blocks_end + 1;
        if (last + 1 < n && terms[last + 1].cursor->doc < next)
            next = terms[last + 1].cursor->doc;
        /* Only block metadata that contradicts the postings (an index failing isn_index_verify) could
         * end a block before the pivot; moving on anyway keeps such an index from hanging a thread. */
        if (next <= pivot_doc)
            next = pivot_doc + 1;
        ranking_next_geq(run, terms[strongest].cursor, next);
        ranking_sink_term(terms, strongest, n);
    }
}
