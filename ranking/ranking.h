/* ISN ranking: query parsing against an index, BM25, and the first-stage algorithms on the CPU.
 * The one public header of ranking/. */
#ifndef ISN_RANKING_H
#define ISN_RANKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/index.h"

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
    ISN_ALGO_COUNT
} isn_algo;

/* "auto", "or", "and", "maxscore", "wand", "bmw", "bmand". */
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

typedef struct {
    isn_query_term *terms; /* distinct known terms, in first-occurrence order */
    uint32_t num_terms;
    uint32_t num_unknown; /* analyzed terms absent from this index */
} isn_query;

typedef struct {
    uint32_t doc;
    float score;
} isn_hit;

typedef struct {
    isn_mode mode;
    isn_algo algo;
    uint32_t k;
    /* Collection statistics for IDF; 0 = the index's own. Global statistics from an aggregator go
     * here and in isn_query_term.df so that partitions score alike. */
    uint64_t num_docs;
} isn_search_options;

void isn_search_options_default(isn_search_options *options);

typedef struct {
    isn_algo algo_used;
    uint64_t postings_scored; /* per-term score evaluations */
    uint64_t docs_evaluated;  /* candidates fully scored */
    uint64_t blocks_decoded;
    uint64_t matched_lower_bound; /* documents known to match (a lower bound under pruning) */
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

/* Runs the first stage. `hits` must hold options->k entries; they are written best first (score
 * descending, ties by lower doc id) and their number is returned in *num_hits.
 * Returns 0, or -1 with err for invalid options (k = 0 or above ISN_MAX_K, algorithm of the other mode). */
int isn_search(isn_searcher *searcher, const isn_query *query, const isn_search_options *options,
               isn_hit *hits, uint32_t *num_hits, isn_search_stats *stats, char *err, size_t err_len);

#endif
