/* Query text to query terms: the index's own analyzer, lexicon lookup, repeated terms merged. */
#include <string.h>

#include "ranking/ranking_internal.h"

typedef struct {
    isn_searcher *searcher;
    isn_query *query;
    bool too_many_terms;
} parse_state;

static uint32_t slot_of(uint32_t term_id) {
    return (term_id * 2654435761u) >> 20; /* 12 bits: RANKING_PARSE_SLOTS */
}

_Static_assert(RANKING_PARSE_SLOTS == 1u << 12, "slot_of keeps 12 bits");
_Static_assert(RANKING_PARSE_SLOTS >= 2 * ISN_MAX_QUERY_TERMS, "the dedup table stays at most half full");

static void add_term(void *ctx, const char *term, size_t len, uint32_t position) {
    (void)position;
    parse_state *state = ctx;
    isn_searcher *searcher = state->searcher;
    isn_query *query = state->query;
    uint32_t term_id;
    if (!isn_index_find_emitted_term(searcher->index, searcher->analyzer, term, len, &term_id)) {
        query->num_unknown++;
        return;
    }
    uint32_t slot = slot_of(term_id);
    for (;;) {
        ranking_parse_slot *entry = &searcher->parse_slots[slot];
        if (entry->generation != searcher->parse_generation)
            break;
        if (entry->term_id == term_id) {
            query->terms[entry->index].count++;
            return;
        }
        slot = (slot + 1) & (RANKING_PARSE_SLOTS - 1);
    }
    if (query->num_terms == ISN_MAX_QUERY_TERMS) {
        state->too_many_terms = true;
        return;
    }
    isn_term_stats stats;
    isn_index_term_stats(searcher->index, term_id, &stats);
    uint32_t index = query->num_terms++;
    query->terms[index] = (isn_query_term){.term_id = term_id, .count = 1, .df = stats.df};
    searcher->parse_slots[slot] = (ranking_parse_slot){
        .generation = searcher->parse_generation, .term_id = term_id, .index = index};
}

int isn_query_parse(isn_searcher *searcher, const char *text, size_t len, isn_query *query, char *err,
                    size_t err_len) {
    if (searcher == NULL || query == NULL || (text == NULL && len > 0)) {
        isn_error(err, err_len, "isn_query_parse: searcher, query and text must not be NULL");
        return -1;
    }
    query->terms = searcher->parsed_terms;
    query->num_terms = 0;
    query->num_unknown = 0;
    query->structure = NULL;
    if (++searcher->parse_generation == 0) {
        /* The stamps wrapped: old slots could look live again, so clear them once. */
        memset(searcher->parse_slots, 0, RANKING_PARSE_SLOTS * sizeof *searcher->parse_slots);
        searcher->parse_generation = 1;
    }
    parse_state state = {.searcher = searcher, .query = query, .too_many_terms = false};
    if (len > 0)
        isn_analyze(searcher->analyzer, text, len, add_term, &state);
    if (state.too_many_terms) {
        isn_error(err, err_len, "query has more than %d distinct terms (the limit per query)",
                  ISN_MAX_QUERY_TERMS);
        query->num_terms = 0;
        query->num_unknown = 0;
        return -1;
    }
    return 0;
}
