/* Query trees on the device: the clauses and filters of isn_query.structure read into gpu_tree_form.
 *
 * ranking/ keeps the tree's layout in its internal header (ranking_internal.h), and gpu/ may include only
 * ranking/ranking.h, which has no view of the clauses yet. Until it has one (an accessor for the clauses,
 * their terms and the filters, as "model layouts (read by gpu/)" does for models), this file reads the flat
 * block with its own copy of that layout, and checks the copy against what ranking/ says: the block's size
 * (isn_query_structure_bytes) must be the size this layout gives, and every index and count must be in
 * range; a tree that fails is answered by the CPU (QUERY_TREE), never misread. The equality tests against
 * the CPU (tests/unit/test_gpu_trees.c) fail if the layouts part. */
#include <stddef.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu/query_tree.h"

/* The layout of ranking_internal.h: the header, then clauses, terms (padded to 8 bytes), filters, values. */
typedef struct {
    uint32_t num_clauses, num_terms, num_filters, num_values;
} tree_header;

typedef struct {
    uint8_t occur;
    uint8_t phrase;
    int16_t field; /* TREE_WHOLE_DOCUMENT or a field */
    uint32_t first_term, num_terms;
    uint32_t count;
    uint32_t missing;
    uint32_t pad;
} tree_clause;

#define TREE_WHOLE_DOCUMENT (-1)

typedef struct {
    uint32_t term_id;
    uint32_t offset;
    uint32_t query_term;
} tree_term;

typedef struct {
    uint32_t attribute;
    uint8_t op;
    uint8_t negate;
    uint16_t pad;
    uint32_t first_value, num_values;
} tree_filter;

typedef struct {
    const tree_header *header;
    const tree_clause *clauses;
    const tree_term *terms;
    const tree_filter *filters;
    const int64_t *values;
} tree_view;

static size_t align8(size_t bytes) { return (bytes + 7) & ~(size_t)7; }

/* false when the block is not one this layout describes */
static bool tree_view_of(const isn_query_structure *structure, tree_view *view) {
    const tree_header *h = (const tree_header *)(const void *)structure;
    const uint8_t *at = (const uint8_t *)structure + sizeof *h;
    size_t bytes = sizeof *h + h->num_clauses * sizeof(tree_clause) + align8(h->num_terms * sizeof(tree_term)) +
                   h->num_filters * sizeof(tree_filter) + h->num_values * sizeof(int64_t);
    if (bytes != isn_query_structure_bytes(structure)) return false;
    view->header = h;
    view->clauses = (const tree_clause *)(const void *)at;
    at += h->num_clauses * sizeof(tree_clause);
    view->terms = (const tree_term *)(const void *)at;
    at += align8(h->num_terms * sizeof(tree_term));
    view->filters = (const tree_filter *)(const void *)at;
    at += h->num_filters * sizeof(tree_filter);
    view->values = (const int64_t *)(const void *)at;
    for (uint32_t c = 0; c < h->num_clauses; c++) {
        const tree_clause *clause = &view->clauses[c];
        if (clause->occur > ISN_OCCUR_MUST_NOT || clause->num_terms == 0 || clause->first_term > h->num_terms ||
            clause->num_terms > h->num_terms - clause->first_term)
            return false;
    }
    for (uint32_t f = 0; f < h->num_filters; f++) {
        const tree_filter *filter = &view->filters[f];
        if (filter->op > ISN_FILTER_LT || filter->first_value > h->num_values ||
            filter->num_values > h->num_values - filter->first_value || filter->attribute >= ISN_MAX_ATTRIBUTES)
            return false;
    }
    return true;
}

bool isn_gpu_takes_query(const isn_query *query, const char **why) {
    static const char *const positions = "a phrase or a field: clause: the GPU holds no positions",
                             *unread = "a query tree this build of the GPU backend cannot read";
    if (why) *why = NULL;
    if (query == NULL || query->structure == NULL) return true;
    tree_view view;
    if (!tree_view_of(query->structure, &view)) {
        if (why) *why = unread;
        return false;
    }
    for (uint32_t c = 0; c < view.header->num_clauses; c++)
        if (view.clauses[c].phrase || view.clauses[c].field != TREE_WHOLE_DOCUMENT) {
            if (why) *why = positions;
            return false;
        }
    return true;
}

int gpu_tree_read(const isn_index *index, const isn_query *query, isn_mode mode, uint64_t num_docs,
                  gpu_tree_form *form) {
    tree_view view;
    if (!isn_gpu_takes_query(query, NULL) || !tree_view_of(query->structure, &view)) return ISN_GPU_FALLBACK_QUERY_TREE;
    const tree_header *h = view.header;
    const uint32_t index_terms = isn_index_get_info(index)->num_terms;
    memset(form, 0, offsetof(gpu_tree_form, term_ids));
    form->empty = false;
    form->values = view.values;
    form->num_values = h->num_values;
    /* three passes over the clauses, one per role, so that the terms come required, optional, excluded */
    uint32_t positive = 0;
    for (int role = 0; role < 3; role++)
        for (uint32_t c = 0; c < h->num_clauses; c++) {
            const tree_clause *clause = &view.clauses[c];
            const bool excluded = clause->occur == ISN_OCCUR_MUST_NOT;
            const bool required = clause->occur == ISN_OCCUR_MUST || (mode == ISN_MODE_AND && clause->occur == ISN_OCCUR_SHOULD);
            if ((role == 0 && !required) || (role == 1 && (required || excluded)) || (role == 2 && !excluded)) continue;
            if (clause->num_terms != 1) return ISN_GPU_FALLBACK_QUERY_TREE;
            if (clause->missing) {
                if (required) form->empty = true; /* no document has it */
                continue;
            }
            const tree_term *term = &view.terms[clause->first_term];
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
        const tree_filter *filter = &view.filters[f];
        if (filter->attribute >= isn_index_num_attributes(index) || (filter->op != ISN_FILTER_EQ && filter->num_values != 1))
            return ISN_GPU_FALLBACK_QUERY_TREE;
        form->filters[f] = (gpu_tree_filter){.attribute = filter->attribute, .op = filter->op, .negate = filter->negate,
                                        .first_value = filter->first_value, .num_values = filter->num_values};
    }
    form->num_filters = h->num_filters;
    return -1;
}
