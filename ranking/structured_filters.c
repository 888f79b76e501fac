/* Keyword filters leading a query tree's search: their documents from the index's lists. */
#include <string.h>

#include "ranking/arena.h"
#include "ranking/structured_internal.h"



/* The documents of a keyword filter (attribute in {values}, not negated), ascending, into the DOCS
 * scorer s: the index's own list for one value, their union for a few, else the lists merged into the
 * arena. Without s, a sizing pass: *count the documents, *room the merged list's entries (0 unless
 * merged). */
void ranking_tree_filter_docs(evaluation *e, const ranking_filter *f, scorer *s, uint32_t *count, uint32_t *room) {
    const uint32_t *lists[ISN_MAX_FILTER_VALUES];
    uint32_t sizes[ISN_MAX_FILTER_VALUES];
    uint32_t n = 0, total = 0;
    for (uint32_t v = 0; v < f->num_values; v++) {
        const uint32_t *docs = isn_index_keyword_docs(e->index, f->attribute, e->filter_values[f->first_value + v], &sizes[n]);
        if (docs && sizes[n]) {
            lists[n] = docs;
            total += sizes[n++];
        }
    }
    *count = total;
    if (!s) { /* sizing pass */
        *room = n > RANKING_FILTER_UNION_LISTS ? total : 0;
        return;
    }
    memset(s, 0, sizeof *s);
    s->kind = SCORER_DOCS;
    s->size = total;
    if (n == 0) {
        s->doc = ISN_DOC_END;
        return;
    }
    if (n == 1) {
        s->docs = lists[0];
        s->doc = lists[0][0];
        return;
    }
    ranking_arena *arena = &e->searcher->arena;
    if (n <= RANKING_FILTER_UNION_LISTS) {
        s->num_lists = n;
        s->lists = ranking_arena_take(arena, RANKING_FILTER_UNION_LISTS * sizeof(const uint32_t *));
        s->list_sizes = ranking_arena_take(arena, RANKING_FILTER_UNION_LISTS * sizeof(uint32_t));
        s->list_at = ranking_arena_take(arena, RANKING_FILTER_UNION_LISTS * sizeof(uint32_t));
        s->doc = ISN_DOC_END;
        for (uint32_t i = 0; i < n; i++) {
            s->lists[i] = lists[i];
            s->list_sizes[i] = sizes[i];
            s->list_at[i] = 0;
            if (lists[i][0] < s->doc) s->doc = lists[i][0];
        }
        return;
    }
    uint32_t *merged = ranking_arena_take(arena, (size_t)total * sizeof(uint32_t));
    uint32_t at[ISN_MAX_FILTER_VALUES] = {0}, written = 0;
    while (written < total) { /* a linear pick of the smallest head: the merge is taken only when short */
        uint32_t best = UINT32_MAX, which = 0;
        for (uint32_t i = 0; i < n; i++)
            if (at[i] < sizes[i] && lists[i][at[i]] < best) {
                best = lists[i][at[i]];
                which = i;
            }
        merged[written++] = best;
        at[which]++;
    }
    s->docs = merged;
    s->doc = merged[0];
}

/* The filter whose documents are fewest among those that can lead (keyword, not negated), and how
 * many; -1 for none. */
int ranking_tree_leading_filter(evaluation *e, uint32_t *count, uint32_t *room) {
    int best = -1;
    uint32_t best_count = UINT32_MAX, best_room = 0;
    for (uint32_t f = 0; f < e->num_filters; f++) {
        const ranking_filter *filter = &e->filters[f];
        isn_attribute_kind kind;
        if (filter->negate || filter->op != ISN_FILTER_EQ ||
            isn_index_attribute_find(e->index, isn_index_attribute_name(e->index, filter->attribute), &kind) < 0 ||
            kind != ISN_ATTRIBUTE_KEYWORD)
            continue;
        uint32_t n, r;
        ranking_tree_filter_docs(e, filter, NULL, &n, &r);
        if (n < best_count) {
            best = (int)f;
            best_count = n;
            best_room = r;
        }
    }
    *count = best_count;
    *room = best_room;
    return best;
}

