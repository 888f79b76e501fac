#include <math.h>

#include "index/index.h"

float isn_bm25_idf(uint64_t num_docs, uint64_t df) {
    double n = (double)num_docs, d = (double)df;
    if (d > n) d = n; /* global statistics may disagree slightly with this partition */
    return (float)log(1.0 + (n - d + 0.5) / (d + 0.5));
}

float isn_bm25_doc_norm(const isn_bm25_params *params, uint32_t doc_len, float avg_doc_len) {
    float ratio = avg_doc_len > 0.0f ? (float)doc_len / avg_doc_len : 0.0f;
    return params->k1 * (1.0f - params->b + params->b * ratio);
}
