/* Part of ranking/ranking.h (included there; include ranking.h, never this file): the second stage's
 * arithmetic from a candidate's hits to its feature row, and from a feature row to model inputs, as
 * inline functions that the C compiler builds for the CPU and nvcc builds for the GPU (gpu/). Both
 * devices run these very lines, in the same order, with IEEE + - * / and nothing else: no fused
 * multiply-add (the CPU's -march has none; gpu/ compiles its pass with -fmad=false) and no library
 * function whose last bit differs between glibc and CUDA (the logarithms are isn_l2_log's own series).
 * So every feature and every model input is equal bit for bit on both. */
#ifndef ISN_RANKING_FEATURE_ROWS_H
#define ISN_RANKING_FEATURE_ROWS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ISN_HOST_DEVICE __host__ __device__
#else
#define ISN_HOST_DEVICE
#endif

/* Document-level features, in registry order (ids 0..ISN_L2_DOC_FEATURES-1; names in
 * ranking/features_registry.c). New features are appended. */
enum {
    ISN_F_BM25, ISN_F_BM25F, ISN_F_LM_DIRICHLET, ISN_F_QUERY_TERMS, ISN_F_QUERY_UNKNOWN, ISN_F_MATCHED_TERMS,
    ISN_F_MATCHED_FRAC, ISN_F_ALL_MATCHED, ISN_F_TF_SUM, ISN_F_TF_MIN, ISN_F_TF_MAX, ISN_F_TF_MEAN, ISN_F_NTF_SUM,
    ISN_F_IDF_SUM, ISN_F_IDF_MIN, ISN_F_IDF_MAX, ISN_F_IDF_MEAN, ISN_F_MATCHED_IDF_SUM, ISN_F_MATCHED_IDF_FRAC,
    ISN_F_TFIDF_SUM, ISN_F_TERM_BM25_MAX, ISN_F_TERM_BM25_MIN, ISN_F_DOC_LEN, ISN_F_LOG_DOC_LEN,
    ISN_F_STATIC_SCORE, ISN_F_MIN_WINDOW, ISN_F_WINDOW_DENSITY, ISN_F_ORDERED_PAIRS, ISN_F_UNORDERED_PAIRS,
    ISN_F_ADJACENT_PAIRS, ISN_F_FIRST_POS, ISN_F_FIRST_POS_NORM, ISN_F_BM25F_WEIGHTED, ISN_F_BM25_NO_LENGTH_NORM,
    ISN_F_LEAD_MATCHED_FRAC, ISN_F_ADJACENT_FRAC, ISN_F_LONGEST_RUN, ISN_F_ID_LEN, ISN_F_ID_TOKENS,
    ISN_F_ID_UNMATCHED_TOKENS, ISN_F_ID_MATCHED_FRAC,
    ISN_L2_DOC_FEATURES
};

/* Per-field features, repeated for each field after the document-level ones. */
enum {
    ISN_FF_BM25, ISN_FF_TF_SUM, ISN_FF_MATCHED_FRAC, ISN_FF_LEN, ISN_FF_FIRST_POS, ISN_FF_MIN_WINDOW,
    ISN_FF_ORDERED_PAIRS, ISN_FF_UNORDERED_PAIRS,
    ISN_L2_FIELD_FEATURES
};

/* Proximity looks at the first this-many query terms and this-many positions per term and field:
 * bounded work per candidate whatever the query or document. */
#define ISN_L2_PROX_TERMS 16u
#define ISN_L2_POS_CAP 256u
/* Pair features count a pair of consecutive query terms when they occur within this many positions. */
#define ISN_L2_PAIR_WINDOW 8u
/* lead_matched_frac counts the query terms found in the first this-many positions of a field. */
#define ISN_L2_LEAD_POSITIONS 32u
/* longest_run chains query terms each found at most this many positions after the previous one (a
 * stopword or two between them keep the run). */
#define ISN_L2_RUN_GAP 3u
/* Dirichlet smoothing of the query-likelihood feature. */
#define ISN_L2_LM_MU 2000.0
#define ISN_L2_MAX_FIELDS 16u /* index.h's ISN_MAX_FIELDS */

/* ------------------------------------------------------------------ hits: the input of a feature row */

typedef struct {
    float weight; /* idf * count, as the first stage */
    float idf;
    float count;
    double p_coll; /* collection probability of the term, for the language-model feature */
} isn_feature_term;

typedef struct {
    uint32_t num_terms;  /* distinct known query terms */
    uint32_t prox_terms; /* the first min(num_terms, ISN_L2_PROX_TERMS) of them carry positions */
    uint32_t num_fields;
    uint32_t unknown;     /* analyzed query terms absent from the index */
    uint32_t query_terms; /* analyzed query terms, repeats and unknown ones included */
    bool per_field_tf;    /* the index has positions, or one field: field term frequencies are known */
    float k1, b, k1_plus_1;
    double idf_sum, idf_min, idf_max;
    float avg_field_len[ISN_L2_MAX_FIELDS];
    float field_weight[ISN_L2_MAX_FIELDS]; /* bm25f_weighted's */
} isn_feature_query;

typedef struct {
    uint32_t doc_len;
    float norm; /* the first stage's BM25 norm of the document */
    float static_score;
    float log_doc_len; /* log1p(doc_len), rounded to float */
    uint32_t id_len, id_tokens, id_unmatched_tokens, id_matched_terms; /* the external id as text */
} isn_feature_doc;

/* The hits of n candidates of one query, gathered once (isn_feature_hits_gather): everything a feature
 * row is computed from. Arrays are row-major; position lists are sorted. */
typedef struct {
    isn_feature_query query;
    const isn_feature_term *terms; /* num_terms */
    uint32_t n;
    const isn_feature_doc *docs; /* [n] */
    const uint32_t *tf;          /* [n][num_terms]: in the whole document */
    const uint32_t *field_len;   /* [n][num_fields] */
    const uint32_t *field_tf;    /* [n][num_fields][num_terms]; 0 without per_field_tf */
    const uint32_t *pos_count;   /* [n][num_fields][prox_terms]: stored positions, at most ISN_L2_POS_CAP */
    const uint32_t *pos_start;   /* [n][num_fields][prox_terms]: where they start in `positions` */
    const uint32_t *positions;
    uint32_t num_positions;
} isn_feature_hits;

/* ------------------------------------------------------------------ proximity of one field */

typedef struct {
    uint32_t min_window;
    uint32_t ordered_pairs;
    uint32_t unordered_pairs;
    uint32_t adjacent_pairs;
    uint32_t longest_run; /* most consecutive query terms in order, each within ISN_L2_RUN_GAP of the last */
    uint32_t lead_terms;  /* terms with a position below ISN_L2_LEAD_POSITIONS */
} isn_l2_proximity;

/* Smallest gap q - p (q from b, p from a, q > p); UINT32_MAX when b has nothing after any p. */
ISN_HOST_DEVICE static inline uint32_t isn_l2_smallest_forward_gap(const uint32_t *a, uint32_t na, const uint32_t *b,
                                                                   uint32_t nb) {
    uint32_t best = UINT32_MAX, j = 0;
    for (uint32_t i = 0; i < na; i++) {
        while (j < nb && b[j] <= a[i]) j++;
        if (j == nb)
            break;
        if (b[j] - a[i] < best)
            best = b[j] - a[i];
    }
    return best;
}

/* The classic k-list sweep: repeatedly advance the list holding the window's smallest position. */
ISN_HOST_DEVICE static inline uint32_t isn_l2_smallest_window(const uint32_t *const *lists, const uint32_t *counts,
                                                              uint32_t num_terms) {
    uint32_t at[ISN_L2_PROX_TERMS];
    uint32_t present = 0;
    for (uint32_t t = 0; t < num_terms; t++) {
        at[t] = 0;
        present += counts[t] > 0;
    }
    if (present == 0)
        return 0;
    uint32_t best = UINT32_MAX;
    for (;;) {
        uint32_t lo = UINT32_MAX, hi = 0, lo_term = 0;
        for (uint32_t t = 0; t < num_terms; t++) {
            if (counts[t] == 0)
                continue;
            uint32_t p = lists[t][at[t]];
            if (p < lo) {
                lo = p;
                lo_term = t;
            }
            if (p > hi)
                hi = p;
        }
        if (hi - lo + 1 < best)
            best = hi - lo + 1;
        if (++at[lo_term] == counts[lo_term])
            return best;
    }
}

/* Dynamic programming over the terms in query order: runs of term t - 1 end at its positions; a
 * position of term t extends the best run ending 1..ISN_L2_RUN_GAP before it. */
ISN_HOST_DEVICE static inline uint32_t isn_l2_longest_run(const uint32_t *const *lists, const uint32_t *counts,
                                                          uint32_t num_terms) {
    uint32_t runs[2][ISN_L2_POS_CAP];
    uint32_t best = 0;
    for (uint32_t t = 0; t < num_terms; t++) {
        uint32_t *run = runs[t & 1];
        const uint32_t *prev = runs[(t & 1) ^ 1];
        uint32_t prev_count = t > 0 ? counts[t - 1] : 0, j = 0;
        for (uint32_t i = 0; i < counts[t]; i++) {
            uint32_t q = lists[t][i], longest_before = 0;
            while (j < prev_count && lists[t - 1][j] + ISN_L2_RUN_GAP < q) j++;
            for (uint32_t k = j; k < prev_count && lists[t - 1][k] < q; k++)
                longest_before = prev[k] > longest_before ? prev[k] : longest_before;
            run[i] = longest_before + 1;
            best = run[i] > best ? run[i] : best;
        }
    }
    return best;
}

/* lists[i] holds the sorted positions of query term i (counts[i] of them, 0 when absent), num_terms
 * <= ISN_L2_PROX_TERMS, counts <= ISN_L2_POS_CAP. */
ISN_HOST_DEVICE static inline void isn_l2_proximity_compute(const uint32_t *const *lists, const uint32_t *counts,
                                                            uint32_t num_terms, isn_l2_proximity *out) {
    out->min_window = isn_l2_smallest_window(lists, counts, num_terms);
    out->ordered_pairs = out->unordered_pairs = out->adjacent_pairs = 0;
    out->longest_run = isn_l2_longest_run(lists, counts, num_terms);
    out->lead_terms = 0;
    for (uint32_t t = 0; t < num_terms; t++)
        out->lead_terms += counts[t] > 0 && lists[t][0] < ISN_L2_LEAD_POSITIONS;
    for (uint32_t t = 0; t + 1 < num_terms; t++) {
        if (counts[t] == 0 || counts[t + 1] == 0)
            continue;
        uint32_t forward = isn_l2_smallest_forward_gap(lists[t], counts[t], lists[t + 1], counts[t + 1]);
        uint32_t backward = isn_l2_smallest_forward_gap(lists[t + 1], counts[t + 1], lists[t], counts[t]);
        out->adjacent_pairs += forward == 1;
        out->ordered_pairs += forward <= ISN_L2_PAIR_WINDOW;
        out->unordered_pairs += forward <= ISN_L2_PAIR_WINDOW || backward <= ISN_L2_PAIR_WINDOW;
    }
}

/* The natural logarithm from + - * / and exact scaling by a power of two, so that both devices get the
 * same bits (glibc's log and CUDA's may differ in the last one): x = m 2^e with m in [sqrt(1/2),
 * sqrt(2)), ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^23 (the rest is
 * below 1e-17). Within a few ulps of log(). 0 gives -inf, a negative or NaN x NaN. */
ISN_HOST_DEVICE static inline double isn_l2_log(double x) {
    if (!(x > 0))
        return x == 0 ? -INFINITY : NAN;
    if (x == INFINITY)
        return x;
    int e;
    double m = frexp(x, &e);
    if (m < 0.70710678118654752440) {
        m *= 2;
        e--;
    }
    /* Horner written out, so that every 1.0 / k is a constant both compilers fold (IEEE, exact-rounded) */
    double s = (m - 1) / (m + 1), s2 = s * s, sum = 1.0 / 23;
    sum = sum * s2 + 1.0 / 21;
    sum = sum * s2 + 1.0 / 19;
    sum = sum * s2 + 1.0 / 17;
    sum = sum * s2 + 1.0 / 15;
    sum = sum * s2 + 1.0 / 13;
    sum = sum * s2 + 1.0 / 11;
    sum = sum * s2 + 1.0 / 9;
    sum = sum * s2 + 1.0 / 7;
    sum = sum * s2 + 1.0 / 5;
    sum = sum * s2 + 1.0 / 3;
    sum = sum * s2 + 1.0;
    return (double)e * 0.693147180559945286227 + ((double)e * 2.319046813846299558e-17 + 2 * s * sum);
}

/* ln(1 + x) for x >= 0 without losing a small x to the rounding of 1 + x (Goldberg's correction). */
ISN_HOST_DEVICE static inline double isn_l2_log1p(double x) {
    double u = 1 + x;
    if (u == 1)
        return x;
    return isn_l2_log(u) * x / (u - 1);
}

/* index.h's isn_bm25_tf_part, which the first stage scores with: the same expression. */
ISN_HOST_DEVICE static inline float isn_l2_bm25_tf_part(float k1_plus_1, uint32_t tf, float doc_norm) {
    float f = (float)tf;
    return f * k1_plus_1 / (f + doc_norm);
}

/* ------------------------------------------------------------------ one feature row */

/* Row i of the hits into row[0 .. ISN_L2_DOC_FEATURES + ISN_L2_FIELD_FEATURES * num_fields). */
ISN_HOST_DEVICE static inline void isn_feature_row(const isn_feature_hits *h, uint32_t i, float *row) {
    const isn_feature_query *q = &h->query;
    const uint32_t T = q->num_terms, P = q->prox_terms, F = q->num_fields;
    const isn_feature_doc *d = &h->docs[i];
    const uint32_t *tf = h->tf + (size_t)i * T;
    const uint32_t *field_len = h->field_len + (size_t)i * F;
    const uint32_t *field_tf = h->field_tf + (size_t)i * F * T;
    const uint32_t *pos_count = h->pos_count + (size_t)i * F * P;
    const uint32_t *pos_start = h->pos_start + (size_t)i * F * P;
    const uint32_t doc_len = d->doc_len;
    float *fr = row + ISN_L2_DOC_FEATURES;

    double bm25 = 0, bm25_no_norm = 0, lm = 0, ntf = 0, tfidf = 0, matched_idf = 0, term_max = 0, term_min = INFINITY;
    uint32_t matched = 0, tf_sum = 0, tf_min = UINT32_MAX, tf_max = 0;
    for (uint32_t t = 0; t < T; t++) {
        const isn_feature_term *ti = &h->terms[t];
        uint32_t n = tf[t];
        lm += ti->count * isn_l2_log((n + ISN_L2_LM_MU * ti->p_coll) / (doc_len + ISN_L2_LM_MU));
        tf_sum += n;
        tf_min = n < tf_min ? n : tf_min;
        tf_max = n > tf_max ? n : tf_max;
        if (n == 0)
            continue;
        double s = (double)(ti->weight * isn_l2_bm25_tf_part(q->k1_plus_1, n, d->norm));
        bm25 += s;
        bm25_no_norm += (double)(ti->weight * isn_l2_bm25_tf_part(q->k1_plus_1, n, q->k1));
        term_max = s > term_max ? s : term_max;
        term_min = s < term_min ? s : term_min;
        matched++;
        matched_idf += ti->idf;
        tfidf += n * ti->idf;
        ntf += doc_len ? (double)n / doc_len : 0;
    }
    uint32_t all_terms = T + q->unknown;

    /* Per field: its features from the term frequencies and positions. */
    uint32_t best_window = 0, best_window_terms = 0, best_ordered = 0, best_unordered = 0, best_adjacent = 0;
    uint32_t best_run = 0, best_lead = 0, first_pos = UINT32_MAX, first_pos_len = doc_len;
    const uint32_t *lists[ISN_L2_PROX_TERMS];
    for (uint32_t f = 0; f < F; f++, fr += ISN_L2_FIELD_FEATURES) {
        uint32_t len = field_len[f];
        float avg = q->avg_field_len[f] > 0 ? q->avg_field_len[f] : 1.0f;
        float len_norm = 1.0f - q->b + q->b * (float)len / avg;
        float field_norm = q->k1 * len_norm;
        const uint32_t *counts = pos_count + (size_t)f * P;
        double field_bm25 = 0;
        uint32_t field_tf_sum = 0, field_matched = 0, field_first = UINT32_MAX, present = 0;
        for (uint32_t t = 0; t < T; t++) {
            uint32_t tf_f = field_tf[(size_t)f * T + t];
            if (t < P) {
                lists[t] = h->positions + pos_start[(size_t)f * P + t];
                if (counts[t]) {
                    present++;
                    if (lists[t][0] < field_first)
                        field_first = lists[t][0];
                }
            }
            if (tf_f == 0)
                continue;
            field_tf_sum += tf_f;
            field_matched++;
            field_bm25 += (double)(h->terms[t].weight * isn_l2_bm25_tf_part(q->k1_plus_1, tf_f, field_norm));
        }
        isn_l2_proximity prox;
        isn_l2_proximity_compute(lists, counts, P, &prox);
        fr[ISN_FF_BM25] = (float)field_bm25;
        fr[ISN_FF_TF_SUM] = (float)field_tf_sum;
        fr[ISN_FF_MATCHED_FRAC] = all_terms ? (float)field_matched / all_terms : 0;
        fr[ISN_FF_LEN] = (float)len;
        fr[ISN_FF_FIRST_POS] = field_first == UINT32_MAX ? (float)len : (float)field_first;
        fr[ISN_FF_MIN_WINDOW] = (float)prox.min_window;
        fr[ISN_FF_ORDERED_PAIRS] = (float)prox.ordered_pairs;
        fr[ISN_FF_UNORDERED_PAIRS] = (float)prox.unordered_pairs;
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

    /* BM25F: each term's length-normalised frequencies summed over the fields (in field order), then
     * saturated once; plain and with the fields weighted. */
    double bm25f = 0, bm25f_weighted = 0;
    for (uint32_t t = 0; t < T && q->per_field_tf; t++) {
        float tf_bar = 0, tf_bar_weighted = 0;
        for (uint32_t f = 0; f < F; f++) {
            uint32_t tf_f = field_tf[(size_t)f * T + t];
            if (tf_f == 0)
                continue;
            float avg = q->avg_field_len[f] > 0 ? q->avg_field_len[f] : 1.0f;
            float len_norm = 1.0f - q->b + q->b * (float)field_len[f] / avg;
            tf_bar += (float)tf_f / len_norm;
            tf_bar_weighted += q->field_weight[f] * (float)tf_f / len_norm;
        }
        if (tf_bar > 0)
            bm25f += h->terms[t].weight * tf_bar * q->k1_plus_1 / (tf_bar + q->k1);
        if (tf_bar_weighted > 0)
            bm25f_weighted += h->terms[t].weight * tf_bar_weighted * q->k1_plus_1 / (tf_bar_weighted + q->k1);
    }

    row[ISN_F_BM25] = (float)bm25;
    row[ISN_F_BM25F] = (float)(q->per_field_tf ? bm25f : bm25);
    row[ISN_F_LM_DIRICHLET] = (float)lm;
    row[ISN_F_QUERY_TERMS] = (float)q->query_terms;
    row[ISN_F_QUERY_UNKNOWN] = (float)q->unknown;
    row[ISN_F_MATCHED_TERMS] = (float)matched;
    row[ISN_F_MATCHED_FRAC] = all_terms ? (float)matched / all_terms : 0;
    row[ISN_F_ALL_MATCHED] = all_terms && matched == all_terms;
    row[ISN_F_TF_SUM] = (float)tf_sum;
    row[ISN_F_TF_MIN] = T ? (float)tf_min : 0;
    row[ISN_F_TF_MAX] = (float)tf_max;
    row[ISN_F_TF_MEAN] = T ? (float)tf_sum / T : 0;
    row[ISN_F_NTF_SUM] = (float)ntf;
    row[ISN_F_IDF_SUM] = (float)q->idf_sum;
    row[ISN_F_IDF_MIN] = T ? (float)q->idf_min : 0;
    row[ISN_F_IDF_MAX] = (float)q->idf_max;
    row[ISN_F_IDF_MEAN] = T ? (float)(q->idf_sum / T) : 0;
    row[ISN_F_MATCHED_IDF_SUM] = (float)matched_idf;
    row[ISN_F_MATCHED_IDF_FRAC] = q->idf_sum > 0 ? (float)(matched_idf / q->idf_sum) : 0;
    row[ISN_F_TFIDF_SUM] = (float)tfidf;
    row[ISN_F_TERM_BM25_MAX] = (float)term_max;
    row[ISN_F_TERM_BM25_MIN] = matched ? (float)term_min : 0;
    row[ISN_F_DOC_LEN] = (float)doc_len;
    row[ISN_F_LOG_DOC_LEN] = d->log_doc_len;
    row[ISN_F_STATIC_SCORE] = d->static_score;
    row[ISN_F_MIN_WINDOW] = (float)best_window;
    row[ISN_F_WINDOW_DENSITY] = best_window ? (float)best_window_terms / best_window : 0;
    row[ISN_F_ORDERED_PAIRS] = (float)best_ordered;
    row[ISN_F_UNORDERED_PAIRS] = (float)best_unordered;
    row[ISN_F_ADJACENT_PAIRS] = (float)best_adjacent;
    row[ISN_F_FIRST_POS] = first_pos == UINT32_MAX ? (float)doc_len : (float)first_pos;
    row[ISN_F_FIRST_POS_NORM] =
        first_pos == UINT32_MAX ? 1.0f : (float)first_pos / (first_pos_len ? first_pos_len : 1);
    row[ISN_F_BM25F_WEIGHTED] = (float)(q->per_field_tf ? bm25f_weighted : bm25);
    row[ISN_F_BM25_NO_LENGTH_NORM] = (float)bm25_no_norm;
    row[ISN_F_LEAD_MATCHED_FRAC] = all_terms ? (float)best_lead / all_terms : 0;
    row[ISN_F_ADJACENT_FRAC] = P > 1 ? (float)best_adjacent / (P - 1) : 0;
    row[ISN_F_LONGEST_RUN] = (float)best_run;
    row[ISN_F_ID_LEN] = (float)d->id_len;
    row[ISN_F_ID_TOKENS] = (float)d->id_tokens;
    row[ISN_F_ID_UNMATCHED_TOKENS] = (float)d->id_unmatched_tokens;
    row[ISN_F_ID_MATCHED_FRAC] = all_terms ? (float)d->id_matched_terms / all_terms : 0;
}

/* ------------------------------------------------------------------ model-input transforms */

typedef enum {
    ISN_TRANSFORM_LINEAR, /* a * x + b */
    ISN_TRANSFORM_LOG,    /* a * ln(1 + max(x, 0)) + b, the logarithm (isn_l2_log1p) in double rounded once */
    ISN_TRANSFORM_BUCKET, /* the number of bounds <= x (NaN stays NaN) */
    ISN_TRANSFORM_TREE,   /* a decision tree over the whole feature row */
    ISN_TRANSFORM_KINDS
} isn_transform_kind;

/* A line of a decision-tree input: a split (x < threshold goes to `left`, else and NaN to `right`;
 * both are later lines) or a leaf. */
typedef struct {
    bool leaf;
    uint32_t feature;
    float threshold;
    uint32_t left, right;
    float value;
} isn_transform_tree_line;

typedef struct {
    isn_transform_kind kind;
    uint32_t feature; /* registry id; unused by trees */
    float a, b;
    const float *bounds; /* bucket: ascending */
    uint32_t num_bounds;
    const isn_transform_tree_line *lines; /* tree: line 0 is the root */
    uint32_t num_lines;
} isn_transform_view;

ISN_HOST_DEVICE static inline float isn_transform_linear(float a, float b, float x) { return a * x + b; }

ISN_HOST_DEVICE static inline float isn_transform_log(float a, float b, float x) {
    return a * (float)isn_l2_log1p((double)(x > 0 ? x : 0)) + b;
}

ISN_HOST_DEVICE static inline float isn_transform_bucket(const float *bounds, uint32_t n, float x) {
    if (x != x)
        return NAN;
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (bounds[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (float)lo;
}

ISN_HOST_DEVICE static inline float isn_transform_tree(const isn_transform_tree_line *lines, const float *row) {
    uint32_t i = 0;
    while (!lines[i].leaf) {
        const isn_transform_tree_line *l = &lines[i];
        i = row[l->feature] < l->threshold ? l->left : l->right;
    }
    return lines[i].value;
}

/* One model input from one feature row. */
ISN_HOST_DEVICE static inline float isn_transform_apply(const isn_transform_view *t, const float *row) {
    switch (t->kind) {
    case ISN_TRANSFORM_LINEAR:
        return isn_transform_linear(t->a, t->b, row[t->feature]);
    case ISN_TRANSFORM_LOG:
        return isn_transform_log(t->a, t->b, row[t->feature]);
    case ISN_TRANSFORM_BUCKET:
        return isn_transform_bucket(t->bounds, t->num_bounds, row[t->feature]);
    case ISN_TRANSFORM_TREE:
        return isn_transform_tree(t->lines, row);
    default:
        return NAN;
    }
}

#endif
