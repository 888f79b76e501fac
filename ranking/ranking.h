/* ISN ranking: query parsing against an index, BM25, and the first-stage algorithms on the CPU.
 * The one public header of ranking/. */
#ifndef ISN_RANKING_H
#define ISN_RANKING_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "index/index.h"
#include "ranking/feature_rows.h"

typedef enum {
    ISN_MODE_OR = 0,  /* documents matching any term */
    ISN_MODE_AND = 1, /* documents matching every term; an unknown term matches nothing */
} isn_mode;

typedef enum {
    ISN_ALGO_AUTO = 0,
    ISN_ALGO_OR,       /* exhaustive ranked OR (reference) */
    ISN_ALGO_AND,      /* exhaustive ranked AND (reference) */
    ISN_ALGO_MAXSCORE, /* OR mode */
    ISN_ALGO_WAND,     /* OR mode */
    ISN_ALGO_BMW,      /* Block-Max WAND, OR mode */
    ISN_ALGO_BMAND,    /* block-max AND, AND mode */
    ISN_ALGO_BMM,      /* block-max MaxScore over doc-id windows, essential lists scored in bulk; OR mode */
    ISN_ALGO_COUNT
} isn_algo;

/* "auto", "or", "and", "maxscore", "wand", "bmw", "bmand", "bmm". */
const char *isn_algo_name(isn_algo algo);
/* Returns false for an unknown name. */
bool isn_algo_from_name(const char *name, isn_algo *algo);
/* The mode an algorithm implements; AUTO has none and returns the given default. */
isn_mode isn_algo_mode(isn_algo algo, isn_mode default_mode);

/* Upper limit on distinct terms per query; longer queries are refused with a clear error. */
#define ISN_MAX_QUERY_TERMS 1024
/* Upper limit on k. */
#define ISN_MAX_K 100000

typedef struct {
    uint32_t term_id;
    uint32_t count; /* how many times the term occurs in the query: its score counts that many times */
    uint32_t df;    /* document frequency used for IDF (the index's, or the aggregator's global one) */
} isn_query_term;

typedef struct isn_query_structure isn_query_structure;

typedef struct {
    isn_query_term *terms; /* distinct known terms, in first-occurrence order */
    uint32_t num_terms;
    uint32_t num_unknown; /* analyzed terms absent from this index */
    /* NULL: a bag of words, every term a SHOULD clause over the whole document (MUST in AND mode).
     * Otherwise the query tree (phrases, required and excluded clauses, fields, filters) that
     * isn_search evaluates; `terms` then lists the known terms of its scoring clauses, for IDF
     * (an aggregator's df goes there too) and for the cost model and the second stage's features. */
    const isn_query_structure *structure;
} isn_query;

typedef struct {
    uint32_t doc;
    float score;
} isn_hit;

/* ------------------------------------------------------------------ top-k heap
 * The first stage's top-k collector (the algorithms, the threshold probe, the GPU's CPU completion):
 * a min-heap with the worst hit at the root. Documents are offered in increasing id, so a newcomer
 * that ties the worst score has the higher id and loses: it enters only with a strictly greater
 * score. This makes the kept set exactly the top-k by (score descending, doc ascending) whatever an
 * algorithm skipped. Inline: it is on every algorithm's hot path. */

typedef struct {
    isn_hit *entries; /* the caller's, capacity entries */
    uint32_t size;
    uint32_t capacity;
    /* What pruning compares bounds with: the worst kept score once full (a new document must
     * strictly beat it), -inf before; never below floor. */
    double threshold;
    /* A seed's (isn_search_options.initial_threshold) next float down, -inf without one. Bounds equal
     * to the threshold are pruned, and a document scoring exactly the seed must not be: it may still
     * enter (the seed may be a higher doc id's score, and ties go to the lower id). The heap itself
     * ignores the floor: it fills with whatever it is offered. */
    double floor;
} isn_topk;

/* a ranks below b: lower score, or the same score and a higher doc id. */
static inline bool isn_hit_worse(isn_hit a, isn_hit b) {
    return a.score < b.score || (a.score == b.score && a.doc > b.doc);
}

/* capacity >= 1 (the full heap's root is read on every offer). */
static inline void isn_topk_init(isn_topk *topk, isn_hit *entries, uint32_t capacity) {
    topk->entries = entries;
    topk->size = 0;
    topk->capacity = capacity;
    topk->threshold = -INFINITY;
    topk->floor = -INFINITY;
}

/* seed > 0: pruning starts from it (see floor). */
static inline void isn_topk_seed(isn_topk *topk, float seed) {
    topk->floor = nextafterf(seed, 0.0f);
    if (topk->threshold < topk->floor)
        topk->threshold = topk->floor;
}

static inline void isn_topk_sift_down(isn_hit *heap, uint32_t size, uint32_t at) {
    isn_hit moving = heap[at];
    for (;;) {
        uint32_t child = 2 * at + 1;
        if (child >= size)
            break;
        if (child + 1 < size && isn_hit_worse(heap[child + 1], heap[child]))
            child++;
        if (!isn_hit_worse(heap[child], moving))
            break;
        heap[at] = heap[child];
        at = child;
    }
    heap[at] = moving;
}

/* Returns true when the document was kept (the threshold may have risen). */
static inline bool isn_topk_offer(isn_topk *topk, uint32_t doc, float score) {
    isn_hit *heap = topk->entries;
    if (topk->size < topk->capacity) {
        uint32_t at = topk->size++;
        isn_hit hit;
        hit.doc = doc;
        hit.score = score;
        while (at > 0) {
            uint32_t parent = (at - 1) / 2;
            if (!isn_hit_worse(hit, heap[parent]))
                break;
            heap[at] = heap[parent];
            at = parent;
        }
        heap[at] = hit;
        if (topk->size == topk->capacity)
            topk->threshold = heap[0].score > topk->floor ? heap[0].score : topk->floor;
        return true;
    }
    if (!(score > heap[0].score))
        return false;
    heap[0].doc = doc;
    heap[0].score = score;
    isn_topk_sift_down(heap, topk->size, 0);
    topk->threshold = heap[0].score > topk->floor ? heap[0].score : topk->floor;
    return true;
}

/* Turns the heap into a list sorted best first, in place (heapsort: the worst goes to the end each
 * round); size entries. */
static inline void isn_topk_sort(isn_topk *topk) {
    isn_hit *heap = topk->entries;
    for (uint32_t end = topk->size; end > 1; end--) {
        isn_hit worst = heap[0];
        heap[0] = heap[end - 1];
        heap[end - 1] = worst;
        isn_topk_sift_down(heap, end - 1, 0);
    }
}

typedef struct {
    isn_mode mode;
    isn_algo algo;
    uint32_t k;
    /* Collection statistics for IDF; 0 = the index's own. Global statistics from an aggregator go
     * here and in isn_query_term.df so that partitions score alike. */
    uint64_t num_docs;
    /* Per-document BM25 norms (isn_bm25_doc_norm of each document) to score with instead of the
     * index's; NULL = the index's. An aggregator's global average length goes here. The index's
     * block maxima are not bounds under other norms, so such a search runs exhaustively (or / and). */
    const float *doc_norms;
    /* Early termination (scheduler): absolute CLOCK_MONOTONIC time in ns, 0 = none. The search stops
     * once early_stop_fraction of the time from its start to this deadline has passed (checked every
     * few hundred candidates, so cheaply) and returns its best hits so far with complete = false.
     * A fraction of 0 or above 1 counts as 1 (stop at the deadline itself). */
    uint64_t deadline_ns;
    double early_stop_fraction;
    /* A known lower bound of the final k-th score (e.g. isn_job_features.threshold_probe: a real
     * document's score under these same statistics), 0 = none. The OR-mode pruning algorithms
     * (MaxScore, WAND, BMW, and AUTO when it picks one of them) start pruning from it: only documents
     * that cannot reach it are skipped, so a document scoring exactly this still competes and the
     * hits are unchanged. Ignored by the exhaustive algorithms, in AND mode and with doc_norms. Must
     * be finite and >= 0; one above the true k-th score loses hits. With early termination, hits
     * scoring below it may be missing from the best-so-far answer (they are outside the top k). With
     * prior_weight > 0 it must bound the scores with the prior (isn_threshold_probe_prior with the same
     * weight): a BM25-only one is no bound when priors can be negative. */
    float initial_threshold;
    /* Documents below this id are not considered (0 = all): the search answers the top k of the
     * documents from it on. The GPU backend's completion of a partly resident query uses it for the
     * documents its resident prefixes do not cover. */
    uint32_t first_doc;
    /* On an index in global order (index.h isn_index_score_bounds) a bag-of-words search ends once no
     * later document can enter its full top k, the answer unchanged; true: it does not (an A/B of the
     * early end, or a check of it). Not used with doc_norms, nor for query trees. */
    bool ignore_score_bounds;
    /* A static prior in the first-stage score: every matching document scores isn_prior_score(its BM25,
     * prior_weight, its static score) (index.h isn_index_static_score), the same float in every algorithm;
     * matching is unchanged (a document no scoring clause holds gets no score from its prior). 0 (the
     * default): BM25 alone, bit for bit as without the option. Finite and >= 0; above 0 the index needs
     * finite static scores (isn-index build --static-score). Every pruning algorithm and the early end on
     * score bounds stay exact: their bounds add prior_weight x the largest prior of the documents a
     * decision passes over (isn_index_prior_bounds). With caller doc_norms the search is exhaustive. */
    float prior_weight;
} isn_search_options;

/* The first-stage score with a static prior, in float, as every algorithm, the threshold probe and the
 * tests' oracle compute it: BM25 rounded to float first, then the weighted prior added. */
static inline float isn_prior_score(float bm25, float prior_weight, float static_score) {
    return bm25 + prior_weight * static_score;
}

/* What the prior may add to a score whose static score is at most static_bound (a document's own, or
 * index.h's isn_index_prior_bounds for the documents from an id on), as a bound compared in double: the
 * product rounded up by 2^-20 of its magnitude. W x s is exact in double (two 24-bit significands), the
 * float product isn_prior_score adds is within 2^-24 of it, and its float sum within 2^-24 of the sum of
 * its parts' magnitudes; this margin and the BM25 bound's own (RANKING_BOUND_SLACK, or the score bounds'
 * 2^-20) leave room for both, so BM25 bound + this is never below the score, whatever the signs. */
#define ISN_PRIOR_BOUND_MARGIN (1.0 / (1 << 20))
static inline double isn_prior_bound(float prior_weight, float static_bound) {
    double part = (double)prior_weight * (double)static_bound;
    return part + fabs(part) * ISN_PRIOR_BOUND_MARGIN;
}

void isn_search_options_default(isn_search_options *options);

typedef struct {
    isn_algo algo_used;
    uint64_t postings_scored; /* per-term score evaluations */
    uint64_t docs_evaluated;  /* candidates fully scored */
    uint64_t blocks_decoded;
    uint64_t matched_lower_bound; /* documents known to match (a lower bound under pruning) */
    /* False when the search stopped early; the hits are then exactly the top-k of the documents with
     * id below exact_below_doc (every one of them was considered), reason says why ("deadline"). */
    bool complete;
    const char *incomplete_reason; /* "" when complete */
    uint32_t exact_below_doc;
    /* Complete, and ended early: the index's score bounds said no later document could enter. */
    bool ended_by_bound;
    /* Bytes the search's per-query memory took beyond what it laid out first: 0 unless that layout
     * miscounts (the search then still answers, from the heap). */
    uint64_t arena_overrun_bytes;
} isn_search_stats;

/* Per-thread search state: query arena, cursors, heap. Reused across queries with no allocation. */
typedef struct isn_searcher isn_searcher;

isn_searcher *isn_searcher_new(const isn_index *index);
void isn_searcher_free(isn_searcher *searcher);

/* Analyzes `text` with the index's analyzer and fills `query` (its storage lives in the searcher until
 * the next parse). Repeated terms are merged with a count. Returns 0, or -1 with err when the text has
 * more than ISN_MAX_QUERY_TERMS distinct terms. An empty query is not an error here (0 terms). */
int isn_query_parse(isn_searcher *searcher, const char *text, size_t len, isn_query *query, char *err,
                    size_t err_len);

/* ------------------------------------------------------------------ query syntax and query trees
 * What users write (README "Query syntax"): words, "phrases", +required, -excluded, field:word and
 * field:"phrase" for the index's fields, combined freely (`+"image editor" -gimp title:viewer`).
 * Scored as Lucene's BooleanQuery with BM25Similarity: SHOULD and MUST clauses add their scores, a
 * MUST_NOT clause only removes documents, a query with a MUST clause needs no SHOULD clause to match;
 * a phrase scores BM25 with its frequency in the document (every start position where each term sits
 * at its offset) as tf and the sum of its terms' IDFs as weight (Lucene's PhraseQuery); a field:
 * clause scores against that field's own statistics (its length, its average length and document
 * count over the documents that have the field, the term's document frequency in it). */

typedef enum {
    ISN_OCCUR_SHOULD = 0,
    ISN_OCCUR_MUST = 1,
    ISN_OCCUR_MUST_NOT = 2,
} isn_occur;

/* One clause as stated by a user (parsed from query text) or a client (SearchRequest.structured),
 * before analysis. */
typedef struct {
    isn_occur occur;
    /* true: the text's terms in order at their relative positions (stopwords keep their places), one
     * clause; false: each analysed term of the text a clause of its own with this occur and field. */
    bool phrase;
    const char *field; /* NULL or "": the whole document, as the bag of words */
    size_t field_len;
    const char *text;
    size_t text_len;
    size_t offset; /* where the clause starts in the query text, for messages */
} isn_clause_spec;

/* Upper limit on clauses per query (after analysis, terms of a non-phrase clause counted apiece). */
#define ISN_MAX_QUERY_CLAUSES 1024

/* Splits query text into clauses. Syntax errors (an unterminated quote, an empty phrase, an operator
 * or field with nothing after it, parentheses after a field) are -1 with err naming the byte offset.
 * Field names are not checked here (isn_query_from_clauses knows the index). *num_specs <= cap;
 * more clauses than cap is an error. */
int isn_query_syntax_split(const char *text, size_t len, isn_clause_spec *specs, uint32_t cap, uint32_t *num_specs,
                           char *err, size_t err_len);

typedef enum {
    ISN_FILTER_EQ = 0, /* value equals one of values (one value: =, several: in {...}) */
    ISN_FILTER_GE,
    ISN_FILTER_GT,
    ISN_FILTER_LE,
    ISN_FILTER_LT,
} isn_filter_op;

/* One filter clause as a client states it: attribute op value(s); negate turns it into its opposite.
 * Keyword attributes take = (and in); numeric ones every operator. */
typedef struct {
    const char *attribute;
    isn_filter_op op;
    bool negate;
    const char *const *values; /* keyword text, or a decimal integer for a numeric attribute */
    uint32_t num_values;
} isn_filter_spec;

/* A filter written as text: "lang=en", "lang!=en", "year>=2020" (and >, <=, <), "site in {a,b}",
 * "site not in {a,b}", into a spec whose strings point into `text` (cut in place; values gets at most
 * max_values). 0, or -1 when the text has none of these forms. */
int isn_filter_parse(char *text, isn_filter_spec *spec, const char **values, uint32_t max_values);

#define ISN_MAX_QUERY_FILTERS 64
#define ISN_MAX_FILTER_VALUES 1024

/* Analyses the clauses with the index's analyzer and compiles them with the filters into `query`
 * (its storage lives in the searcher until the next parse). A field the index lacks is -1 with err
 * naming the fields it has; so is an attribute it lacks, or a value of the wrong kind. A query that is
 * a plain bag of words (every clause SHOULD over the whole document, no phrase of two or more terms,
 * no filter) gets no structure: its terms are exactly isn_query_parse's of the same words. */
int isn_query_from_clauses(isn_searcher *searcher, const isn_clause_spec *specs, uint32_t num_specs,
                           const isn_filter_spec *filters, uint32_t num_filters, isn_query *query, char *err,
                           size_t err_len);

/* isn_query_syntax_split then isn_query_from_clauses; text without syntax gives exactly
 * isn_query_parse's query (the bag of words, bit for bit). */
int isn_query_parse_syntax(isn_searcher *searcher, const char *text, size_t len, const isn_filter_spec *filters,
                           uint32_t num_filters, isn_query *query, char *err, size_t err_len);

/* A query tree is one flat block (no pointers inside), so that it moves by memcpy into another
 * arena: its size in bytes, and a copy whose structure points into dst (bytes of room). */
size_t isn_query_structure_bytes(const isn_query_structure *structure);
void isn_query_structure_copy(void *dst, const isn_query_structure *structure);
/* Whether the tree holds a phrase (phrases read positions: the GPU holds none) or a filter. */
bool isn_query_structure_has_phrase(const isn_query_structure *structure);
bool isn_query_structure_has_filter(const isn_query_structure *structure);
/* A readable form of the tree ("+body:\"image editor\" -gimp ..."), for debugging and messages. */
size_t isn_query_structure_describe(const isn_searcher *searcher, const isn_query *query, char *buf, size_t len);

/* The tree's clauses, their terms and its filters, read-only (gpu/ evaluates trees from them). */
#define ISN_TREE_WHOLE_DOCUMENT (-1)
typedef struct {
    uint8_t occur;  /* isn_occur */
    uint8_t phrase; /* two or more terms matched at their offsets */
    int16_t field;  /* ISN_TREE_WHOLE_DOCUMENT or a field of the index */
    uint32_t first_term, num_terms; /* into the tree's terms */
    uint32_t count;   /* the clause was stated this many times: its score counts so many times */
    uint32_t missing; /* a term of it is absent from the index: it matches no document */
    uint32_t pad;
} isn_tree_clause;
typedef struct {
    uint32_t term_id;
    uint32_t offset;     /* position relative to the clause's first term */
    uint32_t query_term; /* isn_query.terms entry whose df gives its IDF; UINT32_MAX in MUST_NOT clauses */
} isn_tree_term;
typedef struct {
    uint32_t attribute;
    uint8_t op; /* isn_filter_op */
    uint8_t negate;
    uint16_t pad;
    uint32_t first_value, num_values; /* into the tree's values: keyword ids or numbers */
} isn_tree_filter;
typedef struct {
    uint32_t num_clauses, num_terms, num_filters, num_values;
    const isn_tree_clause *clauses;
    const isn_tree_term *terms;
    const isn_tree_filter *filters;
    const int64_t *values;
} isn_tree_view;
/* The arrays of a tree made by this searcher's parsers (every index and count in range). */
void isn_query_structure_view(const isn_query_structure *structure, isn_tree_view *view);

/* Runs the first stage. `hits` must hold options->k entries; they are written best first (score
 * descending, ties by lower doc id) and their number is returned in *num_hits.
 * Returns 0, or -1 with err for invalid options (k = 0 or above ISN_MAX_K, algorithm of the other mode). */
int isn_search(isn_searcher *searcher, const isn_query *query, const isn_search_options *options,
               isn_hit *hits, uint32_t *num_hits, isn_search_stats *stats, char *err, size_t err_len);

/* The algorithm isn_search runs for `algo` in `mode` (isn_algo_mode's default for AUTO): AUTO's
 * choice by the query's shape, any other algorithm itself. The one place the AUTO rule lives, so the
 * scheduler's cost model predicts the algorithm that runs. (isn_search also falls back to the
 * exhaustive algorithms under caller-given doc_norms; that is not applied here.) */
isn_algo isn_algo_resolve(isn_algo algo, isn_mode mode, const isn_query *query);

/* ------------------------------------------------------------------ threshold probe
 * A cheap exact lower bound of an OR-mode query's final k-th score under the index's own statistics:
 * the k-th best full BM25 score over the first ISN_PROBE_POSTINGS documents of the rarest lists (each
 * probed into the others). The scheduler's cost model reads what the pruning will skip from it, and a
 * search may start pruning from it (isn_search_options.initial_threshold; the GPU's
 * isn_gpu_request.threshold). A query tree of whole-document terms (optional, required and excluded ones,
 * with filters) is probed as it matches: only documents its filters keep, that miss its excluded terms and
 * hold its required ones count, so the bound is its own k-th score's, filters included; trees with phrases
 * or field: clauses have no probe. Scores at most ISN_PROBE_POSTINGS documents (reading at most
 * ISN_PROBE_VISITS under filters); allocates nothing. */

#define ISN_PROBE_MAX_K 64     /* above this k there is no probe (0 is returned) */
#define ISN_PROBE_MAX_TERMS 16 /* nor for longer queries (a cursor each, on the stack) */
/* Documents the probe scores at most. On the Debian logs (bench_scheduler, one thread): 256 ->
 * first-sight MAPE ~22% at ~20 us per query for the features, 1024 -> ~19.5% at ~38 us, 2048 -> ~19%
 * (fitted formula) at ~55 us, 4096 -> ~18% at ~80 us. */
#define ISN_PROBE_POSTINGS 1024
/* Driven documents a tree with filters reads at most to score ISN_PROBE_POSTINGS (a filter that keeps a
 * tenth of the documents then scores about 800); excluded clauses a probed tree may have. */
#define ISN_PROBE_VISITS 8192
#define ISN_PROBE_MAX_EXCLUDED 4

/* Returns the probe's k-th best score, 0 when it found fewer than k documents (or the query has no
 * probe: k or its length beyond the limits, an unknown term id, an empty list, a tree with a phrase or a
 * field: clause). *docs_scored: the documents it scored (a tree's: those its filters and excluded terms let
 * through). passed_share[i] (num_levels entries): the share of the collection, in id
 * order, read by the time the probe's k-th best passed levels[i] (ascending), 1 where it never did. */
double isn_threshold_probe(const isn_index *index, const isn_query *query, uint32_t k, const double *levels,
                           uint32_t num_levels, double *passed_share, uint32_t *docs_scored);
/* The same for a search with a static prior (isn_search_options.prior_weight): every probed document
 * scores isn_prior_score, so the k-th best bounds that search's k-th score. 0 also when the k-th best is
 * not above 0 (isn_search_options.initial_threshold takes none) or the index has no usable prior for a
 * weight above 0 (the search refuses it). prior_weight 0 is isn_threshold_probe. */
double isn_threshold_probe_prior(const isn_index *index, const isn_query *query, uint32_t k, float prior_weight,
                                 const double *levels, uint32_t num_levels, double *passed_share,
                                 uint32_t *docs_scored);

/* ================================================================== second stage (L2, re-ranking)
 * The first stage's n1 candidates are re-scored: features per (query, candidate) from the index,
 * model-input transforms, then a learned model (tree ensemble or MLP). A ranker file names all three. */

/* ------------------------------------------------------------------ features */

#define ISN_FEATURE_NAME_MAX 64

/* Features of an index with these fields: the document-level features, then the same per-field block
 * for each field, named "FIELD.NAME" (e.g. "body.bm25"). Names are stable across versions. */
uint32_t isn_feature_count(const isn_index_info *info);
/* Writes the name of feature `id`; false when id is out of range. */
bool isn_feature_name(const isn_index_info *info, uint32_t id, char *buf, size_t buf_len);
/* Feature id of a name; false for a name this index does not have. */
bool isn_feature_lookup(const isn_index_info *info, const char *name, uint32_t *id);

/* Per-thread second-stage state: feature scratch, model inputs, scores. Grows only when a query needs
 * more than any before it (more terms or candidates); nothing is allocated per document. */
typedef struct isn_l2_workspace isn_l2_workspace;
isn_l2_workspace *isn_l2_workspace_new(const isn_index *index);
void isn_l2_workspace_free(isn_l2_workspace *workspace);

/* Fills out[i * isn_feature_count(info) + f] for each docs[i] (any order, no duplicates needed).
 * num_docs = collection size for IDF (0 = the index's own, as isn_search_options). 0, or -1 with err. */
int isn_features_extract(isn_l2_workspace *workspace, const isn_query *query, uint64_t num_docs,
                         const uint32_t *docs, uint32_t n, float *out, char *err, size_t err_len);

/* isn_features_extract in its two steps, for another device to take the second (gpu.h): the hits of
 * docs[i] gathered into hits (row i = docs[i]; arrays in the workspace, valid until its next call),
 * then every row computed from the hits alone with isn_feature_row (feature_rows.h), into out as
 * isn_features_extract writes it. */
int isn_feature_hits_gather(isn_l2_workspace *workspace, const isn_query *query, uint64_t num_docs,
                            const uint32_t *docs, uint32_t n, isn_feature_hits *hits, char *err, size_t err_len);
void isn_feature_rows(const isn_feature_hits *hits, float *out);

/* ------------------------------------------------------------------ models */

/* Gradient-boosted tree ensemble, evaluated over many rows at once (blocked, branch-free traversal). */
typedef struct isn_forest isn_forest;
/* XGBoost JSON (Booster.save_model("x.json")), gbtree: go left when x < threshold, a missing value
 * (NaN) follows default_left; prediction = base_score (as a margin) + sum of leaves, in float. */
isn_forest *isn_forest_load_xgboost(const char *path, char *err, size_t err_len);
/* LightGBM text model (model.txt): go left when x <= threshold; missing types None (NaN acts as 0),
 * Zero (0 and NaN take the default direction) and NaN; sum of leaves in double (no separate base
 * score: LightGBM folds it into the first tree). */
isn_forest *isn_forest_load_lightgbm(const char *path, char *err, size_t err_len);
void isn_forest_free(isn_forest *forest);
uint32_t isn_forest_num_trees(const isn_forest *forest);
/* Inputs the model reads: one more than the largest split feature index (or its declared count). */
uint32_t isn_forest_num_inputs(const isn_forest *forest);
/* Input names the model file declares, or NULL for none / an index past them. */
const char *isn_forest_input_name(const isn_forest *forest, uint32_t input);
/* Scores n rows (row i starts at rows + i * stride; stride >= num_inputs); NaN is a missing value. */
void isn_forest_predict(const isn_forest *forest, const float *rows, uint32_t n, uint32_t stride, float *out);

/* Multi-layer perceptron: dense layers, ReLU or linear, one output. File format in ranking/mlp.c. */
typedef struct isn_mlp isn_mlp;
isn_mlp *isn_mlp_load(const char *path, char *err, size_t err_len);
void isn_mlp_free(isn_mlp *mlp);
uint32_t isn_mlp_num_inputs(const isn_mlp *mlp);
/* Floats of scratch isn_mlp_predict needs for n rows. */
size_t isn_mlp_scratch_floats(const isn_mlp *mlp, uint32_t n);
void isn_mlp_predict(const isn_mlp *mlp, const float *rows, uint32_t n, uint32_t stride, float *scratch,
                     float *out);
/* The same with the MLP's last input taken from a column: row r's inputs are rows[r * stride + 0 ..
 * num_inputs - 2] then last[r] (a stacked ranker's trees' score), summed in that order as isn_mlp_predict
 * would sum the row laid out whole. last may be out (each chunk of rows reads it before writing). */
void isn_mlp_predict_last(const isn_mlp *mlp, const float *rows, uint32_t n, uint32_t stride, const float *last,
                          float *scratch, float *out);

/* ------------------------------------------------------------------ rankers */

/* A ranker file (format in ranking/ranker_load.c) names the model and, per model input, a feature
 * and its transform. Every feature name is checked against the index's registry at load. */
typedef struct isn_ranker isn_ranker;
isn_ranker *isn_ranker_load(const char *path, const isn_index_info *info, char *err, size_t err_len);
void isn_ranker_free(isn_ranker *ranker);
const char *isn_ranker_name(const isn_ranker *ranker);
uint32_t isn_ranker_num_inputs(const isn_ranker *ranker);
/* "xgboost", "lightgbm" or "mlp"; a stacked ranker's "xgboost+mlp" or "lightgbm+mlp". */
const char *isn_ranker_model_kind(const isn_ranker *ranker);
/* Trees (0 for an MLP alone). */
uint32_t isn_ranker_num_trees(const isn_ranker *ranker);
/* Floats of scratch isn_ranker_predict needs for n rows (0 without an MLP). */
size_t isn_ranker_scratch_floats(const isn_ranker *ranker, uint32_t n);
/* The ranker's model over n rows of its inputs (row i at inputs + i * stride, stride >= its inputs):
 * the trees, the MLP, or for a stacked ranker the trees, then the MLP over each row's inputs followed
 * by its trees' score (isn_mlp_predict_last). Every other evaluator (gpu/) gives these numbers. */
void isn_ranker_predict(const isn_ranker *ranker, const float *inputs, uint32_t n, uint32_t stride, float *scratch,
                        float *out);

/* Model input `input` of the ranker as feature_rows.h computes it (pointers into the ranker). */
void isn_ranker_transform_get(const isn_ranker *ranker, uint32_t input, isn_transform_view *view);
/* Transforms feature rows (n x isn_feature_count) into model inputs (n x isn_ranker_num_inputs). */
void isn_ranker_transform(const isn_ranker *ranker, const float *features, uint32_t num_features, uint32_t n,
                          float *inputs);

typedef struct {
    uint32_t doc;
    float score;    /* the model's */
    float l1_score; /* the first stage's */
} isn_l2_hit;

/* Scores n rows of model inputs (row i at inputs + i * stride) with the ranker's model into
 * scores[0..n): another evaluator of the model (the GPU's, gpu.h isn_gpu_l2_score) giving the CPU's
 * numbers. 0, or -1 with err. */
typedef int (*isn_model_scorer)(void *context, const isn_ranker *ranker, const float *inputs, uint32_t n,
                                uint32_t stride, float *scores, char *err, size_t err_len);

/* The whole second stage of one query's candidates from their gathered hits (isn_feature_hits_gather):
 * scores[i] for hits row i, the numbers of the CPU's feature rows, transforms and model. A scorer may
 * run it on any device (gpu.h isn_gpu_rerank_score chooses one); isn_stage_score_cpu is the CPU's,
 * with the workspace's buffers. 0, or -1 with err. */
typedef int (*isn_stage_scorer)(void *context, isn_l2_workspace *workspace, const isn_ranker *ranker,
                                const isn_feature_hits *hits, float *scores, char *err, size_t err_len);
int isn_stage_score_cpu(isn_l2_workspace *workspace, const isn_ranker *ranker, const isn_feature_hits *hits,
                        float *scores, char *err, size_t err_len);

/* isn_rerank with the whole second stage behind one scorer: the hits are gathered here, then
 * score_stage(context, ...) scores them (NULL: isn_stage_score_cpu). Same order, same hits. */
int isn_rerank_stage(isn_l2_workspace *workspace, const isn_ranker *ranker, const isn_query *query, uint64_t num_docs,
                     const isn_hit *candidates, uint32_t n, uint32_t k, isn_stage_scorer score_stage, void *context,
                     isn_l2_hit *out, uint32_t *num_out, char *err, size_t err_len);

/* Scores the candidates (e.g. the first stage's n1 hits) with the ranker and writes the best k into
 * out (k entries), model score descending, ties to the lower doc id: features, transforms, the model,
 * the order. The model runs on the CPU when score_model is NULL, else through score_model(context,
 * ...); when that fails, so does the call (nothing in out), and the caller may run it again on the
 * CPU. 0, or -1 with err. */
int isn_rerank(isn_l2_workspace *workspace, const isn_ranker *ranker, const isn_query *query, uint64_t num_docs,
               const isn_hit *candidates, uint32_t n, uint32_t k, isn_model_scorer score_model, void *context,
               isn_l2_hit *out, uint32_t *num_out, char *err, size_t err_len);

/* ------------------------------------------------------------------ model layouts (read by gpu/)
 * Read-only views of a loaded model in the form the CPU evaluates, so that another evaluator (the GPU
 * second stage) computes the same numbers. Valid while the model lives. */

/* The models of a ranker: trees, an MLP, or both (stacked: the trees, then the MLP reading the ranker's
 * inputs followed by the trees' score, isn_ranker_predict). */
const isn_forest *isn_ranker_forest(const isn_ranker *ranker);
const isn_mlp *isn_ranker_mlp(const isn_ranker *ranker);

/* Unique per loaded model in this process (never reused, unlike an address): a cache key. */
uint64_t isn_forest_serial(const isn_forest *forest);
uint64_t isn_mlp_serial(const isn_mlp *mlp);

/* Complete trees of one depth in heap order: split i of tree t at [t * (2^depth - 1) + i], its
 * children at 2i + 1 (x < threshold, or NaN with !nan_right) and 2i + 2; leaf j at [t * 2^depth + j].
 * Padding splits have a NaN threshold (always left). Each row sums base_score then its trees' leaves
 * in tree order: in float from leaf_f, or with sum_in_double in double from leaf_d (then divided by
 * num_trees with average_output), the result rounded to float. */
typedef struct {
    uint32_t num_trees, depth, num_inputs;
    double base_score;
    bool sum_in_double, average_output;
    const uint32_t *feature;
    const float *threshold;
    const uint8_t *nan_right;
    const float *leaf_f;
    const double *leaf_d;
} isn_forest_layout;

/* False when the model has no such form (deeper than 10 levels, or LightGBM zero-as-missing splits). */
bool isn_forest_layout_get(const isn_forest *forest, isn_forest_layout *layout);

/* Layer l of an MLP: out[o] = act(sum_i weights[o * in + i] * x[i], summed in float in order i = 0..in-1
 * without fused multiply-add, then + bias[o]); act = ReLU or identity. */
typedef struct {
    uint32_t in, out;
    bool relu;
    const float *weights;
    const float *bias;
} isn_mlp_layer_view;

uint32_t isn_mlp_num_layers(const isn_mlp *mlp);
void isn_mlp_layer_get(const isn_mlp *mlp, uint32_t layer, isn_mlp_layer_view *view);

/* ------------------------------------------------------------------ evaluation of rankings
 * What isn-eval reports: a TREC run scored against relevance judgements with the measures trec_eval
 * 9.x names ndcg_cut_10, P_10, recall_100 and map, plus recip_rank cut at rank 10 (MRR@10), with
 * trec_eval's choices (a number that differs from trec_eval's is useless):
 * - A query's ranking is its run lines by score descending, ties broken by docid in decreasing strcmp
 *   order; the rank column is ignored. Scores are C floats, as trec_eval stores them: two scores
 *   equal in single precision tie.
 * - A document is relevant when its judgement is >= 1. nDCG gains are the judgements (negative ones
 *   count 0); the ideal ranking is built from every judgement of the query. MAP and recall divide by
 *   the number of relevant documents in the qrels, retrieved or not.
 * - Averages run over the queries in both files. A query judged only non-relevant scores 0 on every
 *   measure and is counted. Run queries without judgements are ignored; judged queries absent from
 *   the run are only counted. */

#define ISN_EVAL_NDCG_CUTOFF 10
#define ISN_EVAL_RECIP_RANK_CUTOFF 10
#define ISN_EVAL_PRECISION_CUTOFF 10
#define ISN_EVAL_RECALL_CUTOFF 100

typedef struct {
    double ndcg_cut_10;
    double recip_rank_cut_10;
    double p_10;
    double recall_100;
    double map;
} isn_eval_metrics;

/* The measures in output order, by trec_eval's names: "ndcg_cut_10", "recip_rank_cut_10", "P_10",
 * "recall_100", "map". */
#define ISN_EVAL_MEASURES 5
const char *isn_eval_measure_name(size_t measure);
double isn_eval_measure_value(const isn_eval_metrics *metrics, size_t measure);

/* One query's measures. ranked[r]: the judgement of the document at rank r + 1 (0 when unjudged);
 * judged: every judgement of the query, in any order (the ideal ranking, and the relevant count). */
isn_eval_metrics isn_eval_query_metrics(const long *ranked, size_t num_ranked, const long *judged, size_t num_judged);

/* One line of a TREC run: "qid Q0 docid rank score tag" (Q0, rank and tag are ignored). */
typedef struct {
    isn_trec_key key; /* first: the record isn_trec_read_records fills */
    float score;
} isn_eval_run_entry;

typedef struct {
    isn_eval_run_entry *entries; /* grouped by query id in strcmp order, each query's in ranking order */
    size_t count;
    isn_trec_file file; /* holds the ids */
} isn_eval_run;

/* Reads a run: blank lines are skipped; a line without exactly 6 fields, a score that is not a number
 * (NaN included) and a docid twice in one query's ranking are errors naming "PATH:LINE:", the first
 * in the file being reported. 0, or -1 with err. */
int isn_eval_run_read(const char *path, isn_eval_run *run, char *err, size_t err_len);
/* Also fine on a zeroed isn_eval_run. */
void isn_eval_run_free(isn_eval_run *run);

typedef struct {
    const char *query_id; /* into the qrels */
    size_t ranked;        /* documents the run ranks */
    size_t relevant;      /* judgements >= 1 */
    isn_eval_metrics metrics;
} isn_eval_query_result;

typedef struct {
    isn_eval_query_result *queries; /* the queries judged and ranked, in query id (strcmp) order */
    size_t num_queries;
    size_t num_judged_without_results;
    isn_eval_metrics mean; /* over `queries`; 0 when there is none */
} isn_eval_report;

/* Each measure's mean over the queries; 0 when there is none. */
isn_eval_metrics isn_eval_mean(const isn_eval_query_result *queries, size_t num_queries);

/* Scores the run against the judgements. The report's query ids point into qrels, which must outlive
 * it. 0, or -1 with err (out of memory). */
int isn_eval_evaluate(const isn_qrels *qrels, const isn_eval_run *run, isn_eval_report *report, char *err,
                      size_t err_len);
void isn_eval_report_free(isn_eval_report *report);

/* Whether a run beats a baseline by more than chance, one measure over the same judged queries: the
 * queries either report holds (a query one run did not answer scores 0 there, as trec_eval -c counts
 * it), each query's difference run - baseline, then
 * - Student's paired t-test: t = mean / (sd / sqrt(n)), two-sided p with n - 1 degrees of freedom;
 * - the paired randomization test: the share of the 2^n ways of swapping each query's pair whose
 *   |sum of differences| reaches the observed one, two-sided; every way when n <= 16 (exact), else
 *   `trials` random ways from `seed` (reproducible) and p = (hits + 1) / (trials + 1). */
typedef struct {
    size_t num_queries;
    double mean_baseline, mean_run, mean_difference;
    size_t wins, losses; /* queries where the run scores above / below the baseline */
    double t, t_p;       /* NaN with fewer than two queries */
    double randomization_p;
    uint32_t randomization_trials; /* 0: exact */
} isn_eval_paired;

int isn_eval_compare(const isn_eval_report *baseline, const isn_eval_report *run, size_t measure, uint32_t trials,
                     uint64_t seed, isn_eval_paired *out, char *err, size_t err_len);
/* Two-sided p of Student's t with dof degrees of freedom (regularized incomplete beta). */
double isn_student_t_two_sided_p(double t, double dof);

#endif
