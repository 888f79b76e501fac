/* Private to gpu/: a query tree (isn_query.structure) read into what the device evaluates (query_tree.c). */
#ifndef ISN_GPU_QUERY_TREE_H
#define ISN_GPU_QUERY_TREE_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu/device.h"

/* A filter as the tree holds it (the CPU's ranking_filter): op an isn_filter_op, values first_value.. of the
 * tree's; the backend compiles it against the resident column into a gpu_filter. */
typedef struct {
    uint32_t attribute, op, negate;
    uint32_t first_value, num_values;
} gpu_tree_filter;

/* A tree of whole-document term clauses and filters, as the device takes it: the required terms, then the
 * optional ones, then the excluded ones (gpu_query.tree). */
typedef struct {
    uint32_t num_terms, num_required, num_excluded;
    uint32_t term_ids[GPU_MAX_TERMS];
    float weights[GPU_MAX_TERMS]; /* idf * count as the CPU computes it; 0 for an excluded term */
    uint32_t num_filters;
    gpu_tree_filter filters[ISN_MAX_QUERY_FILTERS]; /* first_value into values */
    const int64_t *values;                     /* the tree's own (keyword ids or numbers) */
    uint32_t num_values;
    bool empty; /* a required clause no document has, or no clause that scores: no hits */
} gpu_tree_form;

/* Reads the query's tree (in AND mode its optional clauses are required, as on the CPU) with IDF from
 * num_docs and the query's dfs. Returns -1 when the device can take it (form filled), else the
 * isn_gpu_fallback_reason why not: a phrase or a field: clause (QUERY_TREE), more than GPU_MAX_TERMS
 * clauses (TOO_MANY_TERMS), or a tree this build cannot read (QUERY_TREE too). */
int gpu_tree_read(const isn_index *index, const isn_query *query, isn_mode mode, uint64_t num_docs,
                  gpu_tree_form *form);

#endif
