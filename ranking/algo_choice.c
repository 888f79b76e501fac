/* The AUTO rule, kept in one place so that measurements can retune it. */
#include "ranking/ranking_internal.h"

/* Conjunctive queries always take block-max AND. For disjunctive ones, Block-Max WAND wins while
 * few terms compete for the pivot; with many terms its per-step pivot search and re-sorting cost
 * more than MaxScore's split into essential and non-essential lists. */
#define RANKING_AUTO_MAXSCORE_MIN_TERMS 8

isn_algo ranking_auto_algo(isn_mode mode, const isn_query *query) {
    if (mode == ISN_MODE_AND)
        return ISN_ALGO_BMAND;
    return query->num_terms >= RANKING_AUTO_MAXSCORE_MIN_TERMS ? ISN_ALGO_MAXSCORE : ISN_ALGO_BMW;
}
