/* The AUTO rule, kept in one place so that measurements can retune it. */
#include "ranking/ranking_internal.h"

/* Measured on the Debian corpus (363k docs, one thread, bench_query): the windowed block-max MaxScore
 * beat MaxScore, WAND and Block-Max WAND at every query length (one term, the short package synopses
 * and the 10-20-term Cranfield queries) at top-10 and at top-1,000. Conjunctive queries take
 * block-max AND. */
isn_algo isn_algo_resolve(isn_algo algo, isn_mode mode, const isn_query *query) {
    (void)query;
    if (algo != ISN_ALGO_AUTO)
        return algo;
    return mode == ISN_MODE_AND ? ISN_ALGO_BMAND : ISN_ALGO_BMM;
}
