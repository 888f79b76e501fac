/* The references: exhaustive ranked OR and ranked AND. Every matching document is scored. */
#include "ranking/ranking_internal.h"

/* Out of line on purpose: every document reaches the heap here, and the heap's code inlined into the
 * OR loop takes the registers that hold the loop's cursors (GCC 12 -O2; bench_query: slower on long
 * queries). */
__attribute__((noinline)) static void offer_from_or(ranking_run *run, uint32_t doc, double score) {
    ranking_offer_scored(run, doc, score);
}

void ranking_exhaustive_or(ranking_run *run) {
    ranking_term *terms = run->terms;
    uint32_t n = run->num_terms;
    uint32_t doc = ranking_min_doc(terms, 0, n);
    while (doc != ISN_DOC_END) {
        if (ranking_should_stop(run, doc))
            break;
        uint32_t next_doc;
        double score = ranking_score_or_step(run, terms, 0, n, doc, &next_doc);
        offer_from_or(run, doc, score);
        doc = next_doc;
    }
}

/* Leapfrog from the rarest list: every other list jumps to the candidate or past it. */
void ranking_exhaustive_and(ranking_run *run) {
    ranking_term *terms = run->terms;
    uint32_t n = run->num_terms;
    ranking_sort_terms_by_df(terms, n);
    isn_cursor *lead = terms[0].cursor;
    uint32_t doc = lead->doc;
    while (doc != ISN_DOC_END) {
        if (ranking_should_stop(run, doc))
            break;
        doc = ranking_and_step(run, terms, n, lead, doc);
    }
}
