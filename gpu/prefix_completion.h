/* Private to gpu/: the merge for a query whose lists are only partly resident (pruned-prefix cache).
 * The device answers documents below the query's coverage (every resident prefix covers them); the CPU
 * answers the documents from there on (isn_search from that document, seeded with the device's k-th
 * score); this merges the two top-k lists. */
#ifndef ISN_GPU_PREFIX_COMPLETION_H
#define ISN_GPU_PREFIX_COMPLETION_H

#include <stdint.h>

#include "ranking/ranking.h"

/* Merges two best-first lists of documents that are disjoint into the best k of both, in place in a
 * (which holds k entries). Returns the count. */
uint32_t prefix_merge(isn_hit *a, uint32_t na, const isn_hit *b, uint32_t nb, uint32_t k, isn_hit *scratch);

#endif
