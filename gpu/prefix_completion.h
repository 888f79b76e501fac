/* Private to gpu/: the CPU's part of a query whose lists are only partly resident (pruned-prefix
 * cache). The device answers documents below the query's coverage (every resident prefix covers
 * them); this scores the documents from there on, exhaustively, with the CPU's arithmetic, and merges
 * the two top-k lists. */
#ifndef ISN_GPU_PREFIX_COMPLETION_H
#define ISN_GPU_PREFIX_COMPLETION_H

#include <stdint.h>

#include "index/index.h"
#include "ranking/ranking.h"

typedef struct prefix_completion prefix_completion;

/* Scratch for queries of up to max_terms terms and k up to max_k. NULL when out of memory. */
prefix_completion *prefix_completion_new(const isn_index *index, uint32_t max_terms, uint32_t max_k);
void prefix_completion_free(prefix_completion *completion);

/* Top-k (score desc, doc asc) of the documents >= from_doc, OR or AND, with term weights `weights`
 * (idf * count, as the device got them). Returns the number of hits written to out (k entries). */
uint32_t prefix_complete(prefix_completion *completion, const isn_query *query, const float *weights, bool and_mode,
                         uint32_t k, uint32_t from_doc, isn_hit *out, uint64_t *postings);

/* Merges two best-first lists of documents that are disjoint into the best k of both, in place in a
 * (which holds k entries). Returns the count. */
uint32_t prefix_merge(isn_hit *a, uint32_t na, const isn_hit *b, uint32_t nb, uint32_t k, isn_hit *scratch);

#endif
