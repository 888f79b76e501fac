/* The references: exhaustive ranked OR and ranked AND. Every matching document is scored. */
#include "ranking/ranking_internal.h"

void ranking_exhaustive_or(ranking_run *run) {
    ranking_term *terms = run->terms;
    uint32_t n = run->num_terms;
    uint32_t doc = ISN_DOC_END;
    for (uint32_t i = 0; i < n; i++)
        if (terms[i].cursor->doc < doc)
            doc = terms[i].cursor->doc;
    while (doc != ISN_DOC_END) {
        if (ranking_should_stop(run, doc))
            break;
        double score = 0.0;
        uint32_t next_doc = ISN_DOC_END;
        for (uint32_t i = 0; i < n; i++) {
            isn_cursor *cursor = terms[i].cursor;
            if (cursor->doc == doc) {
                score += ranking_term_score(run, &terms[i], doc);
                ranking_next(run, cursor);
            }
            if (cursor->doc < next_doc)
                next_doc = cursor->doc;
        }
        run->docs_evaluated++;
        run->matched++;
        isn_topk_offer(&run->topk, doc, (float)score);
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
        uint32_t found = ranking_align_followers(run, terms, n, doc);
        if (found != doc) {
            if (found == ISN_DOC_END)
                break;
            doc = ranking_next_geq(run, lead, found);
            continue;
        }
        double score = 0.0;
        for (uint32_t j = 0; j < n; j++)
            score += ranking_term_score(run, &terms[j], doc);
        run->docs_evaluated++;
        run->matched++;
        isn_topk_offer(&run->topk, doc, (float)score);
        doc = ranking_next(run, lead);
    }
}
