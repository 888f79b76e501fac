/* Feature extraction for the second stage in two steps: the candidates' hits are gathered once from
 * the index (isn_feature_hits_gather), then each row is computed from them alone (isn_feature_row in
 * feature_rows.h), the same function the GPU runs on the same hits. Candidates are gathered in doc-id
 * order so that one cursor per query term moves forward only (each block decoded at most once), and a
 * positions cursor with it; positions are read only for terms a candidate holds. Buffers are the
 * workspace's, grown only past the largest call so far. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/arena.h"
#include "ranking/l2_internal.h"

/* Candidates ahead of the one being read whose per-document data is prefetched. */
#define PREFETCH_AHEAD 8u

/* (float)log1p(len), from a table for the common lengths (the same function's values, computed once). */
#define LOG_LEN_TABLE 4096u
static float log_len_table[LOG_LEN_TABLE];
static pthread_once_t log_len_once = PTHREAD_ONCE_INIT;

static void log_len_fill(void) {
    for (uint32_t len = 0; len < LOG_LEN_TABLE; len++) log_len_table[len] = (float)log1p((double)len);
}

static float log_doc_len(uint32_t len) {
    if (len < LOG_LEN_TABLE) return log_len_table[len];
    return (float)log1p((double)len);
}

/* Grows the positions pool keeping what it holds (the gather appends to it). */
static int reserve_positions(isn_l2_workspace *ws, size_t count) {
    size_t bytes = count * sizeof(uint32_t);
    if (bytes <= ws->hit_positions_bytes)
        return 0;
    size_t want = ws->hit_positions_bytes * 2 > bytes ? ws->hit_positions_bytes * 2 : bytes;
    uint32_t *grown = realloc(ws->hit_positions, want);
    if (grown == NULL)
        return -1;
    ws->hit_positions = grown;
    ws->hit_positions_bytes = want;
    return 0;
}

static void query_constants(isn_l2_workspace *ws, const isn_query *query, uint64_t num_docs, isn_feature_query *q,
                            isn_feature_term *terms, l2_id_term *id_terms) {
    const isn_index_info *info = ws->info;
    memset(q, 0, sizeof *q);
    q->num_terms = query->num_terms;
    q->prox_terms = q->num_terms < ISN_L2_PROX_TERMS ? q->num_terms : ISN_L2_PROX_TERMS;
    q->num_fields = info->num_fields;
    q->unknown = query->num_unknown;
    q->per_field_tf = info->has_positions || info->num_fields == 1;
    q->k1 = info->bm25.k1;
    q->b = info->bm25.b;
    q->k1_plus_1 = q->k1 + 1.0f;
    float longest_avg = 0;
    for (uint32_t f = 0; f < q->num_fields; f++) {
        q->avg_field_len[f] = info->avg_field_len[f];
        longest_avg = info->avg_field_len[f] > longest_avg ? info->avg_field_len[f] : longest_avg;
    }
    for (uint32_t f = 0; f < q->num_fields; f++)
        q->field_weight[f] = info->avg_field_len[f] > 0 ? sqrtf(longest_avg / info->avg_field_len[f]) : 1.0f;
    uint64_t N = num_docs ? num_docs : info->num_docs;
    double total_len = info->total_doc_len ? (double)info->total_doc_len : 1.0;
    q->idf_min = INFINITY;
    q->query_terms = q->unknown;
    for (uint32_t t = 0; t < q->num_terms; t++) {
        const isn_query_term *qt = &query->terms[t];
        isn_term_stats st;
        isn_index_term_stats(ws->index, qt->term_id, &st);
        float idf = isn_bm25_idf(N, qt->df);
        terms[t] = (isn_feature_term){.idf = idf, .count = (float)qt->count, .weight = idf * (float)qt->count,
                                      .p_coll = (st.cf ? (double)st.cf : 0.5) / total_len};
        q->idf_sum += idf;
        q->idf_min = idf < q->idf_min ? idf : q->idf_min;
        q->idf_max = idf > q->idf_max ? idf : q->idf_max;
        q->query_terms += qt->count;
        if (t < q->prox_terms) {
            size_t len = isn_index_term_text(ws->index, qt->term_id, id_terms[t].text, L2_ID_TERM_BYTES);
            id_terms[t].len = len < L2_ID_TERM_BYTES ? (uint32_t)len : L2_ID_TERM_BYTES - 1;
        }
    }
}

int isn_feature_hits_gather(isn_l2_workspace *ws, const isn_query *query, uint64_t num_docs, const uint32_t *docs,
                            uint32_t n, isn_feature_hits *hits, char *err, size_t err_len) {
    const isn_index *ix = ws->index;
    const isn_index_info *info = ws->info;
    const uint32_t T = query->num_terms, F = info->num_fields;
    const uint32_t P = T < ISN_L2_PROX_TERMS ? T : ISN_L2_PROX_TERMS;
    memset(hits, 0, sizeof *hits);
    pthread_once(&log_len_once, log_len_fill);
    size_t need = 2 * ranking_arena_size((size_t)n * sizeof(uint64_t)) + ranking_arena_size(T * sizeof(isn_cursor)) +
                  ranking_arena_size(T * sizeof(isn_positions_cursor)) + ranking_arena_size(P * sizeof(l2_id_term));
    if (ranking_arena_reset(&ws->arena, need) != 0 ||
        l2_reserve_bytes((void **)&ws->hit_docs, &ws->hit_docs_bytes, (size_t)n * sizeof(isn_feature_doc)) != 0 ||
        l2_reserve_bytes((void **)&ws->hit_terms, &ws->hit_terms_bytes, ((size_t)T + 1) * sizeof(isn_feature_term)) != 0 ||
        l2_reserve_bytes((void **)&ws->hit_tf, &ws->hit_tf_bytes, (size_t)n * T * sizeof(uint32_t)) != 0 ||
        l2_reserve_bytes((void **)&ws->hit_field_len, &ws->hit_field_len_bytes, (size_t)n * F * sizeof(uint32_t)) != 0 ||
        l2_reserve_bytes((void **)&ws->hit_field_tf, &ws->hit_field_tf_bytes, (size_t)n * F * T * sizeof(uint32_t)) != 0 ||
        l2_reserve_bytes((void **)&ws->hit_pos_count, &ws->hit_pos_count_bytes, (size_t)n * F * P * sizeof(uint32_t)) != 0 ||
        l2_reserve_bytes((void **)&ws->hit_pos_start, &ws->hit_pos_start_bytes, (size_t)n * F * P * sizeof(uint32_t)) != 0 ||
        reserve_positions(ws, ISN_L2_POS_CAP) != 0) {
        isn_error(err, err_len, "out of memory for the hits of %u candidates", n);
        return -1;
    }
    uint64_t *order = ranking_arena_take(&ws->arena, (size_t)n * sizeof(uint64_t));
    uint64_t *sort_scratch = ranking_arena_take(&ws->arena, (size_t)n * sizeof(uint64_t));
    isn_cursor *cursors = ranking_arena_take(&ws->arena, T * sizeof(isn_cursor));
    isn_positions_cursor *position_cursors = ranking_arena_take(&ws->arena, T * sizeof(isn_positions_cursor));
    l2_id_term *id_terms = ranking_arena_take(&ws->arena, P * sizeof(l2_id_term));
    query_constants(ws, query, num_docs, &hits->query, ws->hit_terms, id_terms);
    for (uint32_t t = 0; t < T; t++) {
        isn_cursor_open(&cursors[t], ix, query->terms[t].term_id);
        isn_positions_cursor_open(&position_cursors[t], ix, query->terms[t].term_id);
    }
    for (uint32_t i = 0; i < n; i++) {
        if (docs[i] >= info->num_docs) {
            isn_error(err, err_len, "candidate %u is doc %u, past the index's %u documents", i, docs[i], info->num_docs);
            return -1;
        }
        order[i] = (uint64_t)docs[i] << 32 | i;
    }
    l2_sort_u64_radix(order, sort_scratch, n);
    const float *norms = isn_index_doc_norms(ix);
    uint32_t used = 0;
    /* The documents' own data first, every candidate's: loads independent of each other, which the
     * CPU overlaps (candidates lie far apart, so most of them miss the cache); then the terms'
     * postings and positions, each cursor moving forward. */
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t doc = (uint32_t)(order[k] >> 32), i = (uint32_t)order[k];
        if (k + PREFETCH_AHEAD < n) {
            /* the id's first byte missed the cache on nearly every candidate */
            const uint32_t ahead = (uint32_t)(order[k + PREFETCH_AHEAD] >> 32);
            size_t ahead_len;
            __builtin_prefetch(isn_index_doc_id(ix, ahead, &ahead_len));
        }
        isn_feature_doc *d = &ws->hit_docs[i];
        uint32_t *field_len = ws->hit_field_len + (size_t)i * F;
        d->doc_len = isn_index_doc_len(ix, doc);
        d->norm = norms[doc];
        d->static_score = isn_index_static_score(ix, doc);
        d->log_doc_len = log_doc_len(d->doc_len);
        for (uint32_t f = 0; f < F; f++)
            field_len[f] = isn_index_field_len(ix, doc, f);
        size_t id_len = 0;
        const char *id = isn_index_doc_id(ix, doc, &id_len);
        l2_id_hits id_hits;
        l2_id_match(id, id_len, id_terms, P, &id_hits);
        d->id_len = (uint32_t)id_len;
        d->id_tokens = id_hits.tokens;
        d->id_unmatched_tokens = id_hits.unmatched_tokens;
        d->id_matched_terms = id_hits.matched_terms;
    }
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t doc = (uint32_t)(order[k] >> 32), i = (uint32_t)order[k];
        uint32_t *tf = ws->hit_tf + (size_t)i * T;
        uint32_t *field_tf = ws->hit_field_tf + (size_t)i * F * T;
        uint32_t *pos_count = ws->hit_pos_count + (size_t)i * F * P, *pos_start = ws->hit_pos_start + (size_t)i * F * P;
        for (uint32_t t = 0; t < T; t++)
            tf[t] = isn_cursor_next_geq(&cursors[t], doc) == doc ? isn_cursor_freq(&cursors[t]) : 0;
        for (uint32_t f = 0; f < F; f++) {
            for (uint32_t t = 0; t < T; t++) {
                uint32_t tf_f = 0, stored = 0;
                if (tf[t] && info->has_positions) {
                    if (t < P && reserve_positions(ws, (size_t)used + ISN_L2_POS_CAP) != 0) {
                        isn_error(err, err_len, "out of memory for the positions of %u candidates", n);
                        return -1;
                    }
                    /* the term's cursor sits on doc (tf > 0): its positions cursor follows it forward */
                    tf_f = isn_positions_cursor_read(&position_cursors[t], &cursors[t], f, ws->hit_positions + used,
                                                     t < P ? ISN_L2_POS_CAP : 0);
                    stored = t < P ? (tf_f < ISN_L2_POS_CAP ? tf_f : ISN_L2_POS_CAP) : 0;
                } else if (tf[t] && F == 1) {
                    tf_f = tf[t];
                }
                field_tf[(size_t)f * T + t] = tf_f;
                if (t < P) {
                    pos_count[(size_t)f * P + t] = stored;
                    pos_start[(size_t)f * P + t] = used;
                    used += stored;
                }
            }
        }
    }
    hits->terms = ws->hit_terms;
    hits->n = n;
    hits->docs = ws->hit_docs;
    hits->tf = ws->hit_tf;
    hits->field_len = ws->hit_field_len;
    hits->field_tf = ws->hit_field_tf;
    hits->pos_count = ws->hit_pos_count;
    hits->pos_start = ws->hit_pos_start;
    hits->positions = ws->hit_positions;
    hits->num_positions = used;
    return 0;
}

void isn_feature_rows(const isn_feature_hits *hits, float *out) {
    const uint32_t count = ISN_L2_DOC_FEATURES + ISN_L2_FIELD_FEATURES * hits->query.num_fields;
    for (uint32_t i = 0; i < hits->n; i++)
        isn_feature_row(hits, i, out + (size_t)i * count);
}

int isn_features_extract(isn_l2_workspace *ws, const isn_query *query, uint64_t num_docs, const uint32_t *docs,
                         uint32_t n, float *out, char *err, size_t err_len) {
    if (n == 0)
        return 0;
    isn_feature_hits hits;
    if (isn_feature_hits_gather(ws, query, num_docs, docs, n, &hits, err, err_len) != 0)
        return -1;
    isn_feature_rows(&hits, out);
    return 0;
}
