/* MaxScore: terms sorted by upper bound; the lowest ones whose bounds together cannot beat the
 * threshold are non-essential. Candidates come only from essential lists; non-essential lists are
 * probed (next_geq) for a candidate while its partial score plus their remaining bounds can win. */
#include "ranking/ranking_internal.h"

void ranking_maxscore(ranking_run *run) {
    ranking_term *terms = run->terms;
    uint32_t n = run->num_terms;
    ranking_sort_terms_by_max_score(terms, n);
    /* bound_below[i]: sum of the bounds of terms 0..i, the most the non-essentials up to i can add. */
    double *bound_below = run->scratch_bounds;
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        sum += terms[i].max_score;
        bound_below[i] = sum;
    }
    isn_topk *topk = &run->topk;
    /* The partition holds for the documents from where it is made on: their priors are below its. */
    double prior = ranking_prior_from(run, ranking_min_doc(terms, 0, n));
    uint32_t first_essential = 0;
    while (first_essential < n && ranking_bound_fails(bound_below[first_essential], prior, topk))
        first_essential++;

    uint32_t doc = ranking_min_doc(terms, first_essential, n);
    while (doc != ISN_DOC_END) {
        if (ranking_should_stop(run, doc))
            break;
        uint32_t next_doc;
        double score = ranking_score_or_step(run, terms, first_essential, n, doc, &next_doc);
        run->matched++;
        bool complete = true;
        const double own_prior = ranking_prior_of(run, doc);
        for (uint32_t i = first_essential; i-- > 0;) {
            if (ranking_bound_fails(score + bound_below[i], own_prior, topk)) {
                complete = false;
                break;
            }
            isn_cursor *cursor = terms[i].cursor;
            if (cursor->doc < doc)
                ranking_next_geq(run, cursor, doc);
            if (cursor->doc == doc)
                score += ranking_term_score(run, &terms[i], doc);
        }
        if (complete) {
            run->docs_evaluated++;
            prior = ranking_prior_from(run, doc);
            if (isn_topk_offer(topk, doc, ranking_final_score(run, doc, score)) &&
                ranking_bound_fails(bound_below[first_essential], prior, topk)) {
                while (first_essential < n && ranking_bound_fails(bound_below[first_essential], prior, topk))
                    first_essential++;
                /* Lists that just became non-essential no longer propose candidates. */
                next_doc = ranking_min_doc(terms, first_essential, n);
            }
        }
        doc = next_doc;
    }
}
