/* The AUTO rule, kept in one place so that measurements can retune it. */
#include "ranking/ranking_internal.h"

/* Measured on the Debian mix (363k docs, top-10, one thread): MaxScore was fastest for every query
 * length from 2 terms up (short package synopses and 10-20-term Cranfield queries alike); only for a
 * single term does Block-Max WAND win, since it skips whole blocks of that one list while MaxScore
 * must score all of it until the threshold passes the list's bound. Conjunctive queries always take
 * block-max AND. */
#define RANKING_AUTO_MAXSCORE_MIN_TERMS 2

isn_algo isn_algo_resolve(isn_algo algo, isn_mode mode, const isn_query *query) {
    if (algo != ISN_ALGO_AUTO)
        return algo;
    if (mode == ISN_MODE_AND)
        return ISN_ALGO_BMAND;
    return query->num_terms >= RANKING_AUTO_MAXSCORE_MIN_TERMS ? ISN_ALGO_MAXSCORE : ISN_ALGO_BMW;
}
