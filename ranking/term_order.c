/* Orderings of query terms that the algorithms start from. Run once per query, never per posting. */
#include <stdlib.h>

#include "ranking/ranking_internal.h"

static int compare_by_doc(const void *a, const void *b) {
    uint32_t x = ((const ranking_term *)a)->cursor->doc, y = ((const ranking_term *)b)->cursor->doc;
    return (x > y) - (x < y);
}

static int compare_by_df(const void *a, const void *b) {
    uint32_t x = ((const ranking_term *)a)->cursor->df, y = ((const ranking_term *)b)->cursor->df;
    return (x > y) - (x < y);
}

static int compare_by_max_score(const void *a, const void *b) {
    float x = ((const ranking_term *)a)->max_score, y = ((const ranking_term *)b)->max_score;
    return (x > y) - (x < y);
}

void ranking_sort_terms_by_doc(ranking_term *terms, uint32_t n) {
    qsort(terms, n, sizeof *terms, compare_by_doc);
}

void ranking_sort_terms_by_df(ranking_term *terms, uint32_t n) {
    qsort(terms, n, sizeof *terms, compare_by_df);
}

void ranking_sort_terms_by_max_score(ranking_term *terms, uint32_t n) {
    qsort(terms, n, sizeof *terms, compare_by_max_score);
}
