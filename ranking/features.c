/* Feature extraction for the second stage. Candidates are visited in doc-id order so that one cursor
 * per query term moves forward only (each block decoded at most once); positions are read only for
 * terms a candidate holds. All scratch comes from the workspace arena, sized once per call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/arena.h"
#include "ranking/l2_internal.h"

typedef struct {
    uint32_t term_id;
    float weight;   /* idf * count, as the first stage */
    float idf;
    float count;
    double p_coll;  /* collection probability of the term, for the language-model feature */
} term_info;

typedef struct {
    const isn_index *ix;
    const isn_index_info *info;
    const float *norms;
    float k1, b, k1_plus_1;
    float field_weight[ISN_MAX_FIELDS]; /* bm25f_weighted's */
    uint32_t num_terms, prox_terms, num_fields, query_terms, unknown;
    double idf_sum, idf_min, idf_max;
    term_info *terms;
    isn_cursor *cursors;
    uint32_t *tf;             /* per term, the current doc's */
    float *tf_bar;            /* per term, BM25F's length-normalised tf */
    float *tf_bar_weighted;   /* per term, the same with the fields weighted */
    uint32_t *positions;      /* [field][prox term][L2_POS_CAP] */
    uint32_t *pos_counts;     /* [field][prox term], capped at L2_POS_CAP */
    const uint32_t **lists;   /* prox_terms pointers */
    uint32_t *sweep_scratch;  /* prox_terms */
    l2_id_term *id_terms;     /* prox_terms */
} extract_ctx;

static void doc_features(extract_ctx *c, uint32_t doc, float *row) {
    const uint32_t T = c->num_terms, P = c->prox_terms, F = c->num_fields;
    float *fr = row + L2_DOC_FEATURES;
    uint32_t doc_len = isn_index_doc_len(c->ix, doc);
    double bm25 = 0, bm25_no_norm = 0, lm = 0, ntf = 0, tfidf = 0, matched_idf = 0, term_max = 0, term_min = INFINITY;
    uint32_t matched = 0, tf_sum = 0, tf_min = UINT32_MAX, tf_max = 0;
    for (uint32_t t = 0; t < T; t++) {
        isn_cursor *cur = &c->cursors[t];
        uint32_t tf = isn_cursor_next_geq(cur, doc) == doc ? isn_cursor_freq(cur) : 0;
        c->tf[t] = tf;
        c->tf_bar[t] = 0;
        c->tf_bar_weighted[t] = 0;
        const term_info *ti = &c->terms[t];
        lm += ti->count * log((tf + L2_LM_MU * ti->p_coll) / (doc_len + L2_LM_MU));
        tf_sum += tf;
        tf_min = tf < tf_min ? tf : tf_min;
        tf_max = tf > tf_max ? tf : tf_max;
        if (tf == 0)
            continue;
        double s = (double)(ti->weight * isn_bm25_tf_part(c->k1_plus_1, tf, c->norms[doc]));
        bm25 += s;
        bm25_no_norm += (double)(ti->weight * isn_bm25_tf_part(c->k1_plus_1, tf, c->k1));
        term_max = s > term_max ? s : term_max;
        term_min = s < term_min ? s : term_min;
        matched++;
        matched_idf += ti->idf;
        tfidf += tf * ti->idf;
        ntf += doc_len ? (double)tf / doc_len : 0;
    }
    uint32_t all_terms = T + c->unknown;

    /* Per field: term frequencies and positions, then the field's features. */
    uint32_t best_window = 0, best_window_terms = 0, best_ordered = 0, best_unordered = 0, best_adjacent = 0;
    uint32_t best_run = 0, best_lead = 0;
    uint32_t first_pos = UINT32_MAX, first_pos_len = doc_len;
    bool per_field_tf = c->info->has_positions || F == 1;
    for (uint32_t f = 0; f < F; f++, fr += L2_FIELD_FEATURES) {
        uint32_t len = isn_index_field_len(c->ix, doc, f);
        float avg = c->info->avg_field_len[f] > 0 ? c->info->avg_field_len[f] : 1.0f;
        float len_norm = 1.0f - c->b + c->b * (float)len / avg;
        float field_norm = c->k1 * len_norm;
        uint32_t *pos = c->positions + (size_t)f * P * L2_POS_CAP;
        uint32_t *pos_counts = c->pos_counts + (size_t)f * P;
        double field_bm25 = 0;
        uint32_t field_tf = 0, field_matched = 0, field_first = UINT32_MAX, present = 0;
        for (uint32_t t = 0; t < T; t++) {
            uint32_t tf_f = 0;
            if (c->tf[t] && c->info->has_positions) {
                uint32_t *out = t < P ? pos + (size_t)t * L2_POS_CAP : pos;
                tf_f = isn_index_positions(c->ix, c->terms[t].term_id, doc, f, out, t < P ? L2_POS_CAP : 0);
            } else if (c->tf[t] && F == 1) {
                tf_f = c->tf[t];
            }
            if (t < P) {
                pos_counts[t] = c->info->has_positions ? (tf_f < L2_POS_CAP ? tf_f : L2_POS_CAP) : 0;
                c->lists[t] = pos + (size_t)t * L2_POS_CAP;
                if (pos_counts[t]) {
                    present++;
                    if (c->lists[t][0] < field_first)
                        field_first = c->lists[t][0];
                }
            }
            if (tf_f == 0)
                continue;
            field_tf += tf_f;
            field_matched++;
            field_bm25 += (double)(c->terms[t].weight * isn_bm25_tf_part(c->k1_plus_1, tf_f, field_norm));
            c->tf_bar[t] += (float)tf_f / len_norm;
            c->tf_bar_weighted[t] += c->field_weight[f] * (float)tf_f / len_norm;
        }
        l2_proximity prox;
        l2_proximity_compute(c->lists, pos_counts, P, c->sweep_scratch, &prox);
        fr[FF_BM25] = (float)field_bm25;
        fr[FF_TF_SUM] = (float)field_tf;
        fr[FF_MATCHED_FRAC] = all_terms ? (float)field_matched / all_terms : 0;
        fr[FF_LEN] = (float)len;
        fr[FF_FIRST_POS] = field_first == UINT32_MAX ? (float)len : (float)field_first;
        fr[FF_MIN_WINDOW] = (float)prox.min_window;
        fr[FF_ORDERED_PAIRS] = (float)prox.ordered_pairs;
        fr[FF_UNORDERED_PAIRS] = (float)prox.unordered_pairs;
        if (prox.min_window && (present > best_window_terms ||
                                (present == best_window_terms && prox.min_window < best_window))) {
            best_window = prox.min_window;
            best_window_terms = present;
        }
        best_ordered = prox.ordered_pairs > best_ordered ? prox.ordered_pairs : best_ordered;
        best_unordered = prox.unordered_pairs > best_unordered ? prox.unordered_pairs : best_unordered;
        best_adjacent = prox.adjacent_pairs > best_adjacent ? prox.adjacent_pairs : best_adjacent;
        best_run = prox.longest_run > best_run ? prox.longest_run : best_run;
        best_lead = prox.lead_terms > best_lead ? prox.lead_terms : best_lead;
        if (field_first < first_pos) {
            first_pos = field_first;
            first_pos_len = len;
        }
    }
    double bm25f = 0, bm25f_weighted = 0;
    for (uint32_t t = 0; t < T && per_field_tf; t++) {
        if (c->tf_bar[t] > 0)
            bm25f += c->terms[t].weight * c->tf_bar[t] * c->k1_plus_1 / (c->tf_bar[t] + c->k1);
        if (c->tf_bar_weighted[t] > 0)
            bm25f_weighted += c->terms[t].weight * c->tf_bar_weighted[t] * c->k1_plus_1 /
                              (c->tf_bar_weighted[t] + c->k1);
    }

    row[F_BM25] = (float)bm25;
    row[F_BM25F] = (float)(per_field_tf ? bm25f : bm25);
    row[F_LM_DIRICHLET] = (float)lm;
    row[F_QUERY_TERMS] = (float)c->query_terms;
    row[F_QUERY_UNKNOWN] = (float)c->unknown;
    row[F_MATCHED_TERMS] = (float)matched;
    row[F_MATCHED_FRAC] = all_terms ? (float)matched / all_terms : 0;
    row[F_ALL_MATCHED] = all_terms && matched == all_terms;
    row[F_TF_SUM] = (float)tf_sum;
    row[F_TF_MIN] = T ? (float)tf_min : 0;
    row[F_TF_MAX] = (float)tf_max;
    row[F_TF_MEAN] = T ? (float)tf_sum / T : 0;
    row[F_NTF_SUM] = (float)ntf;
    row[F_IDF_SUM] = (float)c->idf_sum;
    row[F_IDF_MIN] = T ? (float)c->idf_min : 0;
    row[F_IDF_MAX] = (float)c->idf_max;
    row[F_IDF_MEAN] = T ? (float)(c->idf_sum / T) : 0;
    row[F_MATCHED_IDF_SUM] = (float)matched_idf;
    row[F_MATCHED_IDF_FRAC] = c->idf_sum > 0 ? (float)(matched_idf / c->idf_sum) : 0;
    row[F_TFIDF_SUM] = (float)tfidf;
    row[F_TERM_BM25_MAX] = (float)term_max;
    row[F_TERM_BM25_MIN] = matched ? (float)term_min : 0;
    row[F_DOC_LEN] = (float)doc_len;
    row[F_LOG_DOC_LEN] = (float)log1p((double)doc_len);
    row[F_STATIC_SCORE] = isn_index_static_score(c->ix, doc);
    row[F_MIN_WINDOW] = (float)best_window;
    row[F_WINDOW_DENSITY] = best_window ? (float)best_window_terms / best_window : 0;
    row[F_ORDERED_PAIRS] = (float)best_ordered;
    row[F_UNORDERED_PAIRS] = (float)best_unordered;
    row[F_ADJACENT_PAIRS] = (float)best_adjacent;
    row[F_FIRST_POS] = first_pos == UINT32_MAX ? (float)doc_len : (float)first_pos;
    row[F_FIRST_POS_NORM] = first_pos == UINT32_MAX ? 1.0f : (float)first_pos / (first_pos_len ? first_pos_len : 1);
    row[F_BM25F_WEIGHTED] = (float)(per_field_tf ? bm25f_weighted : bm25);
    row[F_BM25_NO_LENGTH_NORM] = (float)bm25_no_norm;
    row[F_LEAD_MATCHED_FRAC] = all_terms ? (float)best_lead / all_terms : 0;
    row[F_ADJACENT_FRAC] = P > 1 ? (float)best_adjacent / (P - 1) : 0;
    row[F_LONGEST_RUN] = (float)best_run;
    size_t id_len = 0;
    const char *id = isn_index_doc_id(c->ix, doc, &id_len);
    l2_id_hits id_hits;
    l2_id_match(id, id_len, c->id_terms, P, &id_hits);
    row[F_ID_LEN] = (float)id_len;
    row[F_ID_TOKENS] = (float)id_hits.tokens;
    row[F_ID_UNMATCHED_TOKENS] = (float)id_hits.unmatched_tokens;
    row[F_ID_MATCHED_FRAC] = all_terms ? (float)id_hits.matched_terms / all_terms : 0;
}

int isn_features_extract(isn_l2_workspace *ws, const isn_query *query, uint64_t num_docs, const uint32_t *docs,
                         uint32_t n, float *out, char *err, size_t err_len) {
    extract_ctx c = {.ix = ws->index, .info = ws->info, .norms = isn_index_doc_norms(ws->index)};
    c.k1 = c.info->bm25.k1;
    c.b = c.info->bm25.b;
    c.k1_plus_1 = c.k1 + 1.0f;
    c.num_terms = query->num_terms;
    c.prox_terms = c.num_terms < L2_PROX_TERMS ? c.num_terms : L2_PROX_TERMS;
    c.num_fields = c.info->num_fields;
    c.unknown = query->num_unknown;
    const uint32_t T = c.num_terms, P = c.prox_terms, F = c.num_fields;
    if (n == 0)
        return 0;
    size_t need = ranking_arena_size((size_t)n * sizeof(uint64_t)) + ranking_arena_size(T * sizeof(term_info)) +
                  ranking_arena_size(T * sizeof(isn_cursor)) + 3 * ranking_arena_size(T * sizeof(uint32_t)) +
                  ranking_arena_size((size_t)F * P * L2_POS_CAP * sizeof(uint32_t)) +
                  ranking_arena_size((size_t)F * P * sizeof(uint32_t)) + ranking_arena_size(P * sizeof(uint32_t *)) +
                  ranking_arena_size(P * sizeof(uint32_t)) + ranking_arena_size(P * sizeof(l2_id_term));
    if (ranking_arena_reset(&ws->arena, need) != 0) {
        isn_error(err, err_len, "out of memory for the features of %u candidates", n);
        return -1;
    }
    uint64_t *order = ranking_arena_take(&ws->arena, (size_t)n * sizeof(uint64_t));
    c.terms = ranking_arena_take(&ws->arena, T * sizeof(term_info));
    c.cursors = ranking_arena_take(&ws->arena, T * sizeof(isn_cursor));
    c.tf = ranking_arena_take(&ws->arena, T * sizeof(uint32_t));
    c.tf_bar = ranking_arena_take(&ws->arena, T * sizeof(float));
    c.tf_bar_weighted = ranking_arena_take(&ws->arena, T * sizeof(float));
    c.positions = ranking_arena_take(&ws->arena, (size_t)F * P * L2_POS_CAP * sizeof(uint32_t));
    c.pos_counts = ranking_arena_take(&ws->arena, (size_t)F * P * sizeof(uint32_t));
    c.lists = ranking_arena_take(&ws->arena, P * sizeof(uint32_t *));
    c.sweep_scratch = ranking_arena_take(&ws->arena, P * sizeof(uint32_t));
    c.id_terms = ranking_arena_take(&ws->arena, P * sizeof(l2_id_term));

    float longest_avg = 0;
    for (uint32_t f = 0; f < F; f++)
        longest_avg = c.info->avg_field_len[f] > longest_avg ? c.info->avg_field_len[f] : longest_avg;
    for (uint32_t f = 0; f < F; f++)
        c.field_weight[f] = c.info->avg_field_len[f] > 0 ? sqrtf(longest_avg / c.info->avg_field_len[f]) : 1.0f;
    uint64_t N = num_docs ? num_docs : c.info->num_docs;
    double total_len = c.info->total_doc_len ? (double)c.info->total_doc_len : 1.0;
    c.idf_min = INFINITY;
    c.query_terms = c.unknown;
    for (uint32_t t = 0; t < T; t++) {
        const isn_query_term *qt = &query->terms[t];
        isn_term_stats st;
        isn_index_term_stats(c.ix, qt->term_id, &st);
        float idf = isn_bm25_idf(N, qt->df);
        c.terms[t] = (term_info){.term_id = qt->term_id, .idf = idf, .count = (float)qt->count,
                                 .weight = idf * (float)qt->count, .p_coll = (st.cf ? (double)st.cf : 0.5) / total_len};
        c.idf_sum += idf;
        c.idf_min = idf < c.idf_min ? idf : c.idf_min;
        c.idf_max = idf > c.idf_max ? idf : c.idf_max;
        c.query_terms += qt->count;
        isn_cursor_open(&c.cursors[t], c.ix, qt->term_id);
        if (t < P) {
            size_t len = isn_index_term_text(c.ix, qt->term_id, c.id_terms[t].text, L2_ID_TERM_BYTES);
            c.id_terms[t].len = len < L2_ID_TERM_BYTES ? (uint32_t)len : L2_ID_TERM_BYTES - 1;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (docs[i] >= c.info->num_docs) {
            isn_error(err, err_len, "candidate %u is doc %u, past the index's %u documents", i, docs[i],
                      c.info->num_docs);
            return -1;
        }
        order[i] = (uint64_t)docs[i] << 32 | i;
    }
    l2_sort_u64(order, n);
    uint32_t count = isn_feature_count(c.info);
    for (uint32_t i = 0; i < n; i++)
        doc_features(&c, (uint32_t)(order[i] >> 32), out + (size_t)(uint32_t)order[i] * count);
    return 0;
}
