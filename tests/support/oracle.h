/* Brute-force BM25 reference for tests: scores every document of a small collection directly from
 * its terms, in double, with its own formulas. Written apart from ranking/ and index/ on purpose:
 * it is the oracle every first-stage algorithm (CPU and GPU) is checked against. */
#ifndef ISN_TESTS_SUPPORT_ORACLE_H
#define ISN_TESTS_SUPPORT_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct oracle_collection oracle_collection;

typedef struct {
    uint32_t doc;
    double score;
} oracle_hit;

/* docs[d] holds doc_lens[d] term strings (already analyzed); document d gets id d. The strings are
 * copied. k1 and b are the BM25 parameters. NULL when out of memory. */
oracle_collection *oracle_new(uint32_t num_docs, const char *const *const *docs, const uint32_t *doc_lens,
                              double k1, double b);
void oracle_free(oracle_collection *oracle);

/* A static prior (isn_search_options.prior_weight): from now on every matching document's score is its
 * BM25 plus weight x priors[d], in double. priors is copied; NULL or weight 0 removes the prior. false
 * when out of memory. */
bool oracle_set_prior(oracle_collection *oracle, const double *priors, double weight);

/* Scores every document for a query given as its analyzed terms; a repeated term counts once per
 * occurrence. and_mode: a document must hold every term (a term absent from the collection matches
 * nothing). num_docs_override: N used in IDF (0 = the collection's own). Fills scores[d] and
 * matched[d] for every document and returns the number of matching documents. */
uint32_t oracle_score_all(const oracle_collection *oracle, const char *const *query, uint32_t query_len, bool and_mode,
                          uint64_t num_docs_override, double *scores, bool *matched);

/* The k best matching documents, score descending then doc ascending; returns how many (<= k). */
uint32_t oracle_top_k(const oracle_collection *oracle, const char *const *query, uint32_t query_len, bool and_mode,
                      uint64_t num_docs_override, uint32_t k, oracle_hit *out);

/* Document frequency of a term in the collection. */
uint32_t oracle_df(const oracle_collection *oracle, const char *term);

#endif
