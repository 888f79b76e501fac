/* The feature registry: stable names for the second stage's features. Models name their inputs with
 * these, so a name never changes meaning; new features are appended. */
#include <stdio.h>
#include <string.h>

#include "ranking/l2_internal.h"

static const char *const doc_feature_names[L2_DOC_FEATURES] = {
    [ISN_F_BM25] = "bm25",                     /* the first stage's score: whole document */
    [ISN_F_BM25F] = "bm25f",                   /* fields weighted alike, each normalised by its own length */
    [ISN_F_LM_DIRICHLET] = "lm_dirichlet",     /* query log-likelihood, Dirichlet smoothing (mu 2000) */
    [ISN_F_QUERY_TERMS] = "query_terms",       /* analyzed query terms, repeats and unknown ones included */
    [ISN_F_QUERY_UNKNOWN] = "query_unknown",   /* terms absent from the index */
    [ISN_F_MATCHED_TERMS] = "matched_terms",   /* distinct query terms in the document */
    [ISN_F_MATCHED_FRAC] = "matched_frac",     /* matched_terms over distinct query terms (unknown included) */
    [ISN_F_ALL_MATCHED] = "all_matched",       /* 1 when every query term is in the document */
    [ISN_F_TF_SUM] = "tf_sum",                 /* term frequencies over distinct known query terms */
    [ISN_F_TF_MIN] = "tf_min",
    [ISN_F_TF_MAX] = "tf_max",
    [ISN_F_TF_MEAN] = "tf_mean",
    [ISN_F_NTF_SUM] = "ntf_sum",               /* sum of tf / document length */
    [ISN_F_IDF_SUM] = "idf_sum",               /* IDF over distinct known query terms */
    [ISN_F_IDF_MIN] = "idf_min",
    [ISN_F_IDF_MAX] = "idf_max",
    [ISN_F_IDF_MEAN] = "idf_mean",
    [ISN_F_MATCHED_IDF_SUM] = "matched_idf_sum",
    [ISN_F_MATCHED_IDF_FRAC] = "matched_idf_frac",
    [ISN_F_TFIDF_SUM] = "tfidf_sum",
    [ISN_F_TERM_BM25_MAX] = "term_bm25_max",   /* the largest single-term BM25 contribution */
    [ISN_F_TERM_BM25_MIN] = "term_bm25_min",   /* the smallest among matched terms (0 when none) */
    [ISN_F_DOC_LEN] = "doc_len",
    [ISN_F_LOG_DOC_LEN] = "log_doc_len",
    [ISN_F_STATIC_SCORE] = "static_score",
    [ISN_F_MIN_WINDOW] = "min_window",         /* smallest window (positions) holding all matched terms of a field; 0 = none */
    [ISN_F_WINDOW_DENSITY] = "window_density", /* terms in that window over its length */
    [ISN_F_ORDERED_PAIRS] = "ordered_pairs",   /* consecutive query-term pairs found in order within 8 positions */
    [ISN_F_UNORDERED_PAIRS] = "unordered_pairs",
    [ISN_F_ADJACENT_PAIRS] = "adjacent_pairs", /* pairs found next to each other, in order */
    [ISN_F_FIRST_POS] = "first_pos",           /* earliest position of any query term (document length when none) */
    [ISN_F_FIRST_POS_NORM] = "first_pos_norm", /* first_pos over that field's length */
    /* BM25F with each field weighted by sqrt(longest average field length / its own): a title
     * counts about three times a body ten times its length. */
    [ISN_F_BM25F_WEIGHTED] = "bm25f_weighted",
    [ISN_F_BM25_NO_LENGTH_NORM] = "bm25_no_length_norm", /* BM25 with b = 0: saturation, no length penalty */
    [ISN_F_LEAD_MATCHED_FRAC] = "lead_matched_frac", /* terms in a field's first L2_LEAD_POSITIONS, over query terms */
    [ISN_F_ADJACENT_FRAC] = "adjacent_frac",     /* adjacent_pairs over the query's consecutive pairs */
    [ISN_F_LONGEST_RUN] = "longest_run",         /* most consecutive query terms found in order, close together */
    [ISN_F_ID_LEN] = "id_len",                   /* static prior: bytes of the external id (LETOR's URL length) */
    [ISN_F_ID_TOKENS] = "id_tokens",             /* the id as text (features_id.c): its tokens */
    [ISN_F_ID_UNMATCHED_TOKENS] = "id_unmatched_tokens", /* tokens of the id matching no query term */
    [ISN_F_ID_MATCHED_FRAC] = "id_matched_frac", /* query terms matched in the id, over query terms */
};

static const char *const field_feature_names[L2_FIELD_FEATURES] = {
    [ISN_FF_BM25] = "bm25",
    [ISN_FF_TF_SUM] = "tf_sum",
    [ISN_FF_MATCHED_FRAC] = "matched_frac",
    [ISN_FF_LEN] = "len",
    [ISN_FF_FIRST_POS] = "first_pos",
    [ISN_FF_MIN_WINDOW] = "min_window",
    [ISN_FF_ORDERED_PAIRS] = "ordered_pairs",
    [ISN_FF_UNORDERED_PAIRS] = "unordered_pairs",
};

uint32_t isn_feature_count(const isn_index_info *info) {
    return L2_DOC_FEATURES + L2_FIELD_FEATURES * info->num_fields;
}

bool isn_feature_name(const isn_index_info *info, uint32_t id, char *buf, size_t buf_len) {
    if (id < L2_DOC_FEATURES) {
        snprintf(buf, buf_len, "%s", doc_feature_names[id]);
        return true;
    }
    if (id >= isn_feature_count(info))
        return false;
    id -= L2_DOC_FEATURES;
    snprintf(buf, buf_len, "%s.%s", info->fields[id / L2_FIELD_FEATURES], field_feature_names[id % L2_FIELD_FEATURES]);
    return true;
}

bool isn_feature_lookup(const isn_index_info *info, const char *name, uint32_t *id) {
    char buf[ISN_FEATURE_NAME_MAX + ISN_FIELD_NAME_MAX];
    uint32_t count = isn_feature_count(info);
    for (uint32_t i = 0; i < count; i++) {
        isn_feature_name(info, i, buf, sizeof buf);
        if (strcmp(buf, name) == 0) {
            *id = i;
            return true;
        }
    }
    return false;
}
