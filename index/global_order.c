/* --order global: documents by decreasing global score, and the score bounds an early stop needs. */
#include <math.h>
#include <stdlib.h>

#include "index/builder.h"

float global_best_part(const isn_bm25_params *bm25, uint32_t max_tf, uint32_t doc_len, float avg_doc_len) {
    return isn_bm25_tf_part(bm25->k1 + 1.0f, max_tf, isn_bm25_doc_norm(bm25, doc_len, avg_doc_len));
}

typedef struct {
    float gs;
    uint32_t old;
} ranked_doc;

static int cmp_ranked(const void *a, const void *b) {
    const ranked_doc *x = a, *y = b;
    if (x->gs != y->gs) return x->gs > y->gs ? -1 : 1;
    return (x->old > y->old) - (x->old < y->old);
}

uint32_t *global_order_permutation(const float *gs, uint32_t num_docs) {
    ranked_doc *docs = malloc((size_t)(num_docs ? num_docs : 1) * sizeof *docs);
    uint32_t *new_of_old = malloc((size_t)(num_docs ? num_docs : 1) * sizeof *new_of_old);
    if (!docs || !new_of_old) {
        free(docs);
        free(new_of_old);
        return NULL;
    }
    for (uint32_t d = 0; d < num_docs; d++) docs[d] = (ranked_doc){gs[d] == gs[d] ? gs[d] : -INFINITY, d}; /* NaN last */
    /* the comparison is total (ties by old id), so any sort gives the one order */
    qsort(docs, num_docs, sizeof *docs, cmp_ranked);
    for (uint32_t nw = 0; nw < num_docs; nw++) new_of_old[docs[nw].old] = nw;
    free(docs);
    return new_of_old;
}

void global_suffix_maxima(float *parts, uint32_t num_docs) {
    for (uint32_t d = num_docs; d-- > 1;)
        if (parts[d] > parts[d - 1]) parts[d - 1] = parts[d];
}
