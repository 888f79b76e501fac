/* The CPU's part of a partly resident query: exhaustive document-at-a-time scoring from a document
 * on, in the CPU's arithmetic (float contributions summed in double, as ranking/ does), a bounded heap
 * for the top k (ranking/'s isn_topk), and the merge with the device's part. */
#include <stdlib.h>
#include <string.h>

#include "gpu/prefix_completion.h"

struct prefix_completion {
    const isn_index *index;
    const float *norms;
    float k1_plus_1;
    uint32_t max_terms, max_k;
    isn_cursor *cursors;
};

prefix_completion *prefix_completion_new(const isn_index *index, uint32_t max_terms, uint32_t max_k) {
    prefix_completion *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->index = index;
    c->norms = isn_index_doc_norms(index);
    c->k1_plus_1 = isn_index_get_info(index)->bm25.k1 + 1.0f;
    c->max_terms = max_terms;
    c->max_k = max_k;
    c->cursors = malloc((size_t)max_terms * sizeof *c->cursors);
    if (c->cursors == NULL) {
        prefix_completion_free(c);
        return NULL;
    }
    return c;
}

void prefix_completion_free(prefix_completion *c) {
    if (c == NULL) return;
    free(c->cursors);
    free(c);
}

/* a ranks before b: higher score, then lower doc */
static inline bool ranks_before(isn_hit a, isn_hit b) { return isn_hit_worse(b, a); }

uint32_t prefix_complete(prefix_completion *c, const isn_query *query, const float *weights, bool and_mode, uint32_t k,
                         uint32_t from_doc, isn_hit *out, uint64_t *postings) {
    uint32_t nt = query->num_terms < c->max_terms ? query->num_terms : c->max_terms;
    if (k > c->max_k) k = c->max_k;
    if (k == 0) return 0;
    uint32_t doc = ISN_DOC_END;
    uint64_t scored = 0;
    isn_topk topk;
    isn_topk_init(&topk, out, k); /* out is the heap: sorted in place, it is the answer */
    for (uint32_t t = 0; t < nt; t++) {
        isn_cursor_open(&c->cursors[t], c->index, query->terms[t].term_id);
        uint32_t d = isn_cursor_next_geq(&c->cursors[t], from_doc);
        if (d < doc) doc = d;
    }
    while (doc != ISN_DOC_END) {
        double score = 0.0;
        uint32_t matched = 0, next = ISN_DOC_END;
        for (uint32_t t = 0; t < nt; t++) {
            isn_cursor *cur = &c->cursors[t];
            if (cur->doc == doc) {
                score += (double)(weights[t] * isn_bm25_tf_part(c->k1_plus_1, isn_cursor_freq(cur), c->norms[doc]));
                matched++;
                scored++;
                isn_cursor_next(cur);
            }
            if (cur->doc < next) next = cur->doc;
        }
        /* Documents come in increasing id, as isn_topk needs for its tie rule. */
        if (!and_mode || matched == nt) isn_topk_offer(&topk, doc, (float)score);
        doc = next;
    }
    isn_topk_sort(&topk);
    if (postings) *postings += scored;
    return topk.size;
}

uint32_t prefix_merge(isn_hit *a, uint32_t na, const isn_hit *b, uint32_t nb, uint32_t k, isn_hit *scratch) {
    uint32_t i = 0, j = 0, n = 0;
    while (n < k && (i < na || j < nb)) {
        if (j >= nb || (i < na && ranks_before(a[i], b[j]))) scratch[n++] = a[i++];
        else scratch[n++] = b[j++];
    }
    memcpy(a, scratch, n * sizeof *a);
    return n;
}
