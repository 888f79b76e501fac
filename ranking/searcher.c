/* Per-thread search state: created once, reused by every query with no allocation on the way. */
#include <stdlib.h>
#include <string.h>

#include "ranking/ranking_internal.h"
#include "ranking/arena.h"

isn_searcher *isn_searcher_new(const isn_index *index) {
    if (index == NULL)
        return NULL;
    isn_searcher *searcher = calloc(1, sizeof *searcher);
    if (searcher == NULL)
        return NULL;
    const isn_index_info *info = isn_index_get_info(index);
    searcher->index = index;
    searcher->norms = isn_index_doc_norms(index);
    searcher->k1_plus_1 = info->bm25.k1 + 1.0f;
    searcher->index_num_docs = info->num_docs;
    searcher->analyzer = isn_index_new_analyzer(index);
    searcher->parsed_terms = calloc(ISN_MAX_QUERY_TERMS, sizeof *searcher->parsed_terms);
    searcher->parse_slots = calloc(RANKING_PARSE_SLOTS, sizeof *searcher->parse_slots);
    if (searcher->analyzer == NULL || searcher->parsed_terms == NULL || searcher->parse_slots == NULL) {
        isn_searcher_free(searcher);
        return NULL;
    }
    return searcher;
}

void isn_searcher_free(isn_searcher *searcher) {
    if (searcher == NULL)
        return;
    isn_analyzer_free(searcher->analyzer);
    free(searcher->parsed_terms);
    free(searcher->parse_slots);
    ranking_arena_free(&searcher->arena);
    free(searcher->structure);
    free(searcher->query_scratch);
    free(searcher->position_scratch);
    free(searcher);
}
