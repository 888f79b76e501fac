/* Query trees on the device: the clauses and filters of isn_query.structure (ranking.h's read-only
 * view) read into gpu_tree_form. A tree whose clauses the device cannot take (phrases and field:
 * clauses read positions; clauses of several terms) is answered by the CPU, and says why. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu/query_tree.h"

bool isn_gpu_takes_query(const isn_query *query, const char **why) {
    static const char *const positions = "a phrase or a field: clause: the GPU holds no positions";
    if (why) *why = NULL;
    if (query == NULL || query->structure == NULL) return true;
    isn_tree_view view;
    isn_query_structure_view(query->structure, &view);
    for (uint32_t c = 0; c < view.num_clauses; c++)
        if (view.clauses[c].phrase || view.clauses[c].field != ISN_TREE_WHOLE_DOCUMENT) {
            if (why) *why = positions;
            return false;
        }
    return true;
}

bool isn_gpu_takes_search(const isn_query *query, float prior_weight, const char **why) {
    if (!(prior_weight >= 0.0f) || isinf(prior_weight)) {
        if (why) *why = "static prior: the weight is not a finite number >= 0";
        return false;
    }
    return isn_gpu_takes_query(query, why);
}

int gpu_tree_read(const isn_index *index, const isn_query *query, isn_mode mode, uint64_t num_docs,
                  gpu_tree_form *form) {
    if (!isn_gpu_takes_query(query, NULL)) return ISN_GPU_FALLBACK_QUERY_TREE;
    isn_tree_view view;
    isn_query_structure_view(query->structure, &view);
    const isn_tree_view *h = &view;
    const uint32_t index_terms = isn_index_get_info(index)->num_terms;
    memset(form, 0, offsetof(gpu_tree_form, term_ids));
    form->empty = false;
    form->values = view.values;
    form->num_values = h->num_values;
    /* three passes over the clauses, one per role, so that the terms come required, optional, excluded */
    uint32_t positive = 0;
    for (int role = 0; role < 3; role++)
        for (uint32_t c = 0; c < h->num_clauses; c++) {
            const isn_tree_clause *clause = &view.clauses[c];
            const bool excluded = clause->occur == ISN_OCCUR_MUST_NOT;
            const bool required = clause->occur == ISN_OCCUR_MUST || (mode == ISN_MODE_AND && clause->occur == ISN_OCCUR_SHOULD);
            if ((role == 0 && !required) || (role == 1 && (required || excluded)) || (role == 2 && !excluded)) continue;
            if (clause->num_terms != 1) return ISN_GPU_FALLBACK_QUERY_TREE;
            if (clause->missing) {
                if (required) form->empty = true; /* no document has it */
                continue;
            }
            const isn_tree_term *term = &view.terms[clause->first_term];
            if (term->term_id >= index_terms || (!excluded && term->query_term >= query->num_terms))
                return ISN_GPU_FALLBACK_QUERY_TREE;
            if (form->num_terms == GPU_MAX_TERMS) return ISN_GPU_FALLBACK_TOO_MANY_TERMS;
            const uint32_t t = form->num_terms++;
            form->term_ids[t] = term->term_id;
            /* ranking/'s clause weight: the (float) idf times the (float) count */
            form->weights[t] =
                excluded ? 0.0f : isn_bm25_idf(num_docs, query->terms[term->query_term].df) * (float)clause->count;
            form->num_required += role == 0;
            form->num_excluded += role == 2;
            positive += !excluded;
        }
    if (positive == 0) form->empty = true; /* excluded clauses alone match nothing (Lucene) */
    if (h->num_filters > ISN_MAX_QUERY_FILTERS) return ISN_GPU_FALLBACK_QUERY_TREE;
    for (uint32_t f = 0; f < h->num_filters; f++) {
        const isn_tree_filter *filter = &view.filters[f];
        if (filter->attribute >= isn_index_num_attributes(index) || (filter->op != ISN_FILTER_EQ && filter->num_values != 1))
            return ISN_GPU_FALLBACK_QUERY_TREE;
        form->filters[f] = (gpu_tree_filter){.attribute = filter->attribute, .op = filter->op, .negate = filter->negate,
                                        .first_value = filter->first_value, .num_values = filter->num_values};
    }
    form->num_filters = h->num_filters;
    return -1;
}
