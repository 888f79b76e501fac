/* Private to ranking/: second-stage state shared by feature extraction, rankers and re-ranking. */
#ifndef ISN_RANKING_L2_INTERNAL_H
#define ISN_RANKING_L2_INTERNAL_H

#include "ranking/ranking_internal.h"

/* Document-level features, in registry order (ids 0..L2_DOC_FEATURES-1). */
enum {
    F_BM25, F_BM25F, F_LM_DIRICHLET, F_QUERY_TERMS, F_QUERY_UNKNOWN, F_MATCHED_TERMS, F_MATCHED_FRAC,
    F_ALL_MATCHED, F_TF_SUM, F_TF_MIN, F_TF_MAX, F_TF_MEAN, F_NTF_SUM, F_IDF_SUM, F_IDF_MIN, F_IDF_MAX,
    F_IDF_MEAN, F_MATCHED_IDF_SUM, F_MATCHED_IDF_FRAC, F_TFIDF_SUM, F_TERM_BM25_MAX, F_TERM_BM25_MIN,
    F_DOC_LEN, F_LOG_DOC_LEN, F_STATIC_SCORE, F_MIN_WINDOW, F_WINDOW_DENSITY, F_ORDERED_PAIRS,
    F_UNORDERED_PAIRS, F_ADJACENT_PAIRS, F_FIRST_POS, F_FIRST_POS_NORM, F_BM25F_WEIGHTED,
    F_BM25_NO_LENGTH_NORM, F_LEAD_MATCHED_FRAC, F_ADJACENT_FRAC, F_LONGEST_RUN, F_ID_LEN, F_ID_TOKENS,
    F_ID_UNMATCHED_TOKENS, F_ID_MATCHED_FRAC,
    L2_DOC_FEATURES
};

/* Per-field features, repeated for each field after the document-level ones. */
enum {
    FF_BM25, FF_TF_SUM, FF_MATCHED_FRAC, FF_LEN, FF_FIRST_POS, FF_MIN_WINDOW, FF_ORDERED_PAIRS,
    FF_UNORDERED_PAIRS, L2_FIELD_FEATURES
};

/* Proximity looks at the first this-many query terms and this-many positions per term and field:
 * bounded work per candidate whatever the query or document. */
#define L2_PROX_TERMS 16u
#define L2_POS_CAP 256u
/* Pair features count a pair of consecutive query terms when they occur within this many positions. */
#define L2_PAIR_WINDOW 8u
/* lead_matched_frac counts the query terms found in the first this-many positions of a field. */
#define L2_LEAD_POSITIONS 32u
/* longest_run chains query terms each found at most this many positions after the previous one (a
 * stopword or two between them keep the run). */
#define L2_RUN_GAP 3u
/* Dirichlet smoothing of the query-likelihood feature. */
#define L2_LM_MU 2000.0

struct isn_l2_workspace {
    const isn_index *index;
    const isn_index_info *info;
    ranking_arena arena; /* per call: sorted candidates, cursors, term tables, positions */
    /* Model-side buffers, grown to the largest candidate set seen. */
    float *features;
    float *inputs;
    float *scores;
    float *scratch;
    size_t features_cap, inputs_cap, scores_cap, scratch_cap;
    /* Re-ranking: candidates by doc id (doc << 32 | candidate index), their docs, then score keys. */
    uint64_t *by_doc, *keys;
    uint32_t *docs;
    size_t by_doc_bytes, keys_bytes, docs_bytes;
};

/* A process-wide counter: a fresh number for each loaded model (isn_forest_serial, isn_mlp_serial). */
uint64_t l2_serial(void);

/* Grows *buf to `bytes`; 0 or -1 when out of memory. */
int l2_reserve_bytes(void **buf, size_t *cap_bytes, size_t bytes);

/* Ascending, in place, no allocation. */
void l2_sort_u64(uint64_t *a, size_t n);

/* Grows *buf to hold `count` floats; 0 or -1 when out of memory. */
int l2_reserve(float **buf, size_t *cap, size_t count);

/* Proximity over one field: lists[i] holds the sorted positions of query term i (counts[i] of them,
 * 0 when absent). Writes the smallest window (in positions) holding every present term, and counts
 * of consecutive query-term pairs found in order / in any order within L2_PAIR_WINDOW, and adjacent. */
typedef struct {
    uint32_t min_window;
    uint32_t ordered_pairs;
    uint32_t unordered_pairs;
    uint32_t adjacent_pairs;
    uint32_t longest_run;  /* most consecutive query terms in order, each within L2_RUN_GAP of the last */
    uint32_t lead_terms;   /* terms with a position below L2_LEAD_POSITIONS */
} l2_proximity;

void l2_proximity_compute(const uint32_t *const *lists, const uint32_t *counts, uint32_t num_terms,
                          uint32_t *cursor_scratch, l2_proximity *out);

/* The external id as a text stream (features_id.c): the query's first L2_PROX_TERMS terms as the
 * index spells them, cut to L2_ID_TERM_BYTES, and what one id holds of them. */
#define L2_ID_TERM_BYTES 32u
#define L2_ID_MATCH_MIN 3u
typedef struct {
    char text[L2_ID_TERM_BYTES];
    uint32_t len;
} l2_id_term;

typedef struct {
    uint32_t tokens;           /* tokens of the id */
    uint32_t unmatched_tokens; /* tokens matching no query term */
    uint32_t matched_terms;    /* query terms matched by some token */
} l2_id_hits;

void l2_id_match(const char *id, size_t id_len, const l2_id_term *terms, uint32_t num_terms, l2_id_hits *out);

#endif
