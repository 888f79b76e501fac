/* Private to ranking/: second-stage state shared by feature extraction, rankers and re-ranking. */
#ifndef ISN_RANKING_L2_INTERNAL_H
#define ISN_RANKING_L2_INTERNAL_H

#include "ranking/ranking_internal.h"

/* The feature enums and limits are ranking.h's (ranking/feature_rows.h), which gpu/ compiles too. */
#define L2_DOC_FEATURES ISN_L2_DOC_FEATURES
#define L2_FIELD_FEATURES ISN_L2_FIELD_FEATURES

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
    /* Gathered hits (isn_feature_hits_gather), grown to the largest call so far. */
    isn_feature_doc *hit_docs;
    isn_feature_term *hit_terms;
    uint32_t *hit_tf, *hit_field_len, *hit_field_tf, *hit_pos_count, *hit_pos_start, *hit_positions;
    size_t hit_docs_bytes, hit_terms_bytes, hit_tf_bytes, hit_field_len_bytes, hit_field_tf_bytes, hit_pos_count_bytes,
        hit_pos_start_bytes, hit_positions_bytes;
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
/* The same sort in a few linear passes, with scratch room for n keys (no allocation either). */
void l2_sort_u64_radix(uint64_t *a, uint64_t *scratch, size_t n);

/* Grows *buf to hold `count` floats; 0 or -1 when out of memory. */
int l2_reserve(float **buf, size_t *cap, size_t count);

/* The external id as a text stream (features_id.c): the query's first ISN_L2_PROX_TERMS terms as the
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
