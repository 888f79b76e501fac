/* Second-stage scoring: features, transforms and the model over all candidates of a query, then the
 * top k by model score. Every buffer is the workspace's, grown only past the largest query so far. */
#include <math.h>
#include <string.h>

#include "ranking/ranker.h"

/* Order-preserving map of a float onto uint32 (NaN is treated as the lowest score). */
static uint32_t ordered_bits(float x) {
    if (x != x)
        x = -INFINITY;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static int score_docs(isn_l2_workspace *ws, const isn_ranker *rk, const isn_query *query, uint64_t num_docs,
                      const uint32_t *docs, uint32_t n, isn_model_scorer score_model, void *context, char *err,
                      size_t err_len) {
    uint32_t nf = isn_feature_count(ws->info);
    if (nf != rk->num_features) {
        isn_error(err, err_len, "ranker %s was loaded for an index with %u features, this one has %u",
                  rk->name, rk->num_features, nf);
        return -1;
    }
    size_t scratch = score_model ? 0 : isn_ranker_scratch_floats(rk, n);
    if (l2_reserve(&ws->features, &ws->features_cap, (size_t)n * nf) != 0 ||
        l2_reserve(&ws->inputs, &ws->inputs_cap, (size_t)n * rk->num_inputs) != 0 ||
        l2_reserve(&ws->scores, &ws->scores_cap, n) != 0 || l2_reserve(&ws->scratch, &ws->scratch_cap, scratch) != 0) {
        isn_error(err, err_len, "out of memory for %u candidates", n);
        return -1;
    }
    if (isn_features_extract(ws, query, num_docs, docs, n, ws->features, err, err_len) != 0)
        return -1;
    isn_ranker_transform(rk, ws->features, nf, n, ws->inputs);
    if (score_model)
        return score_model(context, rk, ws->inputs, n, rk->num_inputs, ws->scores, err, err_len);
    isn_ranker_predict(rk, ws->inputs, n, rk->num_inputs, ws->scratch, ws->scores);
    return 0;
}

int isn_stage_score_cpu(isn_l2_workspace *ws, const isn_ranker *rk, const isn_feature_hits *hits, float *scores,
                        char *err, size_t err_len) {
    const uint32_t nf = ISN_L2_DOC_FEATURES + ISN_L2_FIELD_FEATURES * hits->query.num_fields, n = hits->n;
    if (nf != rk->num_features) {
        isn_error(err, err_len, "ranker %s was loaded for an index with %u features, these hits have %u", rk->name,
                  rk->num_features, nf);
        return -1;
    }
    size_t scratch = isn_ranker_scratch_floats(rk, n);
    if (l2_reserve(&ws->features, &ws->features_cap, (size_t)n * nf) != 0 ||
        l2_reserve(&ws->inputs, &ws->inputs_cap, (size_t)n * rk->num_inputs) != 0 ||
        l2_reserve(&ws->scratch, &ws->scratch_cap, scratch) != 0) {
        isn_error(err, err_len, "out of memory for %u candidates", n);
        return -1;
    }
    isn_feature_rows(hits, ws->features);
    isn_ranker_transform(rk, ws->features, nf, n, ws->inputs);
    isn_ranker_predict(rk, ws->inputs, n, rk->num_inputs, ws->scratch, scores);
    return 0;
}

/* Candidates in doc order (ws->by_doc, ws->docs), so that a candidate's position breaks score ties
 * toward the lower doc id; then the best k by ws->scores. */
static int order_by_doc(isn_l2_workspace *ws, const isn_hit *candidates, uint32_t n, char *err, size_t err_len) {
    if (l2_reserve_bytes((void **)&ws->by_doc, &ws->by_doc_bytes, (size_t)n * sizeof(uint64_t)) != 0 ||
        l2_reserve_bytes((void **)&ws->keys, &ws->keys_bytes, (size_t)n * sizeof(uint64_t)) != 0 ||
        l2_reserve_bytes((void **)&ws->docs, &ws->docs_bytes, (size_t)n * sizeof(uint32_t)) != 0 ||
        l2_reserve(&ws->scores, &ws->scores_cap, n) != 0) {
        isn_error(err, err_len, "out of memory for %u candidates", n);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        ws->by_doc[i] = (uint64_t)candidates[i].doc << 32 | i;
    l2_sort_u64(ws->by_doc, n);
    for (uint32_t i = 0; i < n; i++)
        ws->docs[i] = (uint32_t)(ws->by_doc[i] >> 32);
    return 0;
}

static void best_k(isn_l2_workspace *ws, const isn_hit *candidates, uint32_t n, uint32_t k, isn_l2_hit *out,
                   uint32_t *num_out) {
    for (uint32_t i = 0; i < n; i++)
        ws->keys[i] = (uint64_t)~ordered_bits(ws->scores[i]) << 32 | i;
    l2_sort_u64(ws->keys, n);
    uint32_t m = k < n ? k : n;
    for (uint32_t j = 0; j < m; j++) {
        uint32_t i = (uint32_t)ws->keys[j];
        out[j] = (isn_l2_hit){.doc = ws->docs[i], .score = ws->scores[i],
                              .l1_score = candidates[(uint32_t)ws->by_doc[i]].score};
    }
    *num_out = m;
}

int isn_rerank_stage(isn_l2_workspace *ws, const isn_ranker *rk, const isn_query *query, uint64_t num_docs,
                     const isn_hit *candidates, uint32_t n, uint32_t k, isn_stage_scorer score_stage, void *context,
                     isn_l2_hit *out, uint32_t *num_out, char *err, size_t err_len) {
    *num_out = 0;
    if (n == 0 || k == 0)
        return 0;
    if (order_by_doc(ws, candidates, n, err, err_len) != 0)
        return -1;
    isn_feature_hits hits;
    if (isn_feature_hits_gather(ws, query, num_docs, ws->docs, n, &hits, err, err_len) != 0)
        return -1;
    int rc = score_stage ? score_stage(context, ws, rk, &hits, ws->scores, err, err_len)
                         : isn_stage_score_cpu(ws, rk, &hits, ws->scores, err, err_len);
    if (rc != 0)
        return -1;
    best_k(ws, candidates, n, k, out, num_out);
    return 0;
}

int isn_rerank(isn_l2_workspace *ws, const isn_ranker *rk, const isn_query *query, uint64_t num_docs,
               const isn_hit *candidates, uint32_t n, uint32_t k, isn_model_scorer score_model, void *context,
               isn_l2_hit *out, uint32_t *num_out, char *err, size_t err_len) {
    *num_out = 0;
    if (n == 0 || k == 0)
        return 0;
    if (order_by_doc(ws, candidates, n, err, err_len) != 0)
        return -1;
    if (score_docs(ws, rk, query, num_docs, ws->docs, n, score_model, context, err, err_len) != 0)
        return -1;
    best_k(ws, candidates, n, k, out, num_out);
    return 0;
}
