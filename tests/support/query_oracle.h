/* Brute-force reference for query trees (phrases, required and excluded clauses, fields, filters):
 * reads every document's words field by field and scores with its own formulas in double, written
 * apart from ranking/ on purpose. What a query tree means is README "Query syntax": Lucene's
 * BooleanQuery over BM25 term and phrase clauses, a field: clause with that field's statistics. */
#ifndef ISN_TESTS_SUPPORT_QUERY_ORACLE_H
#define ISN_TESTS_SUPPORT_QUERY_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

#include "tests/support/oracle.h"

#define QUERY_ORACLE_MAX_PHRASE 8

typedef enum { QO_SHOULD = 0, QO_MUST = 1, QO_MUST_NOT = 2 } query_oracle_occur;

typedef struct {
    query_oracle_occur occur;
    int field; /* -1: the whole document */
    uint32_t num_words; /* 1: a term; more: a phrase of consecutive words */
    const char *words[QUERY_ORACLE_MAX_PHRASE];
} query_oracle_clause;

/* Filter: attribute `attribute` of the document (int64, INT64_MIN for none) compared with values. */
typedef struct {
    uint32_t attribute;
    int op; /* as isn_filter_op: 0 in values, 1 >=, 2 >, 3 <=, 4 < */
    bool negate;
    uint32_t num_values;
    int64_t values[8];
} query_oracle_filter;

typedef struct {
    uint32_t num_docs, num_fields;
    const char *const *const *const *words; /* words[doc][field][i], position i */
    const uint32_t *const *lens;            /* lens[doc][field] */
    const int64_t *const *attributes;       /* attributes[attr][doc]; NULL without */
    double k1, b;
} query_oracle_collection;

/* The k best documents of the query (score descending, doc ascending): returns how many, and in
 * *matched every document that matches. and_mode: SHOULD clauses are required. */
uint32_t query_oracle_top_k(const query_oracle_collection *collection, const query_oracle_clause *clauses,
                            uint32_t num_clauses, const query_oracle_filter *filters, uint32_t num_filters,
                            bool and_mode, uint32_t k, oracle_hit *out, uint64_t *matched);

/* Whether the document satisfies the query (the brute-force check of a hit), and its score. */
bool query_oracle_matches(const query_oracle_collection *collection, const query_oracle_clause *clauses,
                          uint32_t num_clauses, const query_oracle_filter *filters, uint32_t num_filters,
                          bool and_mode, uint32_t doc);

#endif
