/* Query trees' evaluation, private to ranking/ (structured_search.c and its parts): the scorers a
 * tree's clauses become and how they move. */
#ifndef ISN_RANKING_STRUCTURED_INTERNAL_H
#define ISN_RANKING_STRUCTURED_INTERNAL_H

#include <math.h>

#include "ranking/ranking_internal.h"

/* What a clause reads. Phrases are two-phase, as Lucene's: the conjunction of their terms' lists
 * proposes documents, and a document counts only once positions confirm the phrase there, read only for
 * documents every term holds and only when the search asks for that document, so a phrase beside a
 * rarer required clause or under a high threshold reads few. */
typedef enum {
    SCORER_TERM,       /* a term: its posting list, the whole document's or the field's own */
    SCORER_PHRASE,     /* the conjunction of the phrase's terms, confirmed by positions */
    SCORER_DOCS,       /* a filter's document list: it matches, never scores */
} scorer_kind;

typedef struct {
    scorer_kind kind;
    bool required;
    bool whole_document; /* a phrase over every field; else `field` */
    uint32_t field;
    isn_cursor *cursor; /* TERM: the term's; PHRASE: the rarest term's (it leads) */
    const float *norms; /* by doc: the whole document's, or the field's */
    isn_cursor *cursors; /* PHRASE: one per term */
    isn_positions_cursor *positions;
    const ranking_clause_term *terms;
    uint32_t num_terms;
    float weight;
    uint32_t freq; /* PHRASE: the frequency on doc */
    /* PHRASE: up to doc prune_until, the other clauses' summed bounds; a document whose own bound (from
     * its terms' frequencies, the phrase's at most) cannot lift it into the top k with them is passed
     * without reading its positions (it could not win whatever the phrase adds); INFINITY: never. */
    double others_bound;
    uint32_t prune_until;
    const uint32_t *docs; /* DOCS: one list (docs, size, at), or the union of several */
    const uint32_t **lists;
    uint32_t *list_sizes, *list_at;
    uint32_t num_lists;
    uint32_t size; /* postings (df), the phrase's rarest term's, or the list's length: the rarest leads */
    uint32_t at;
    uint32_t doc;
    /* PHRASE: doc is only where its next match may start (ranking_phrase_matches asked about a document
     * and looked no further); scorer_next_geq settles it */
    bool pending;
    double max_score;
} scorer;

typedef struct {
    isn_searcher *searcher;
    const isn_index *index;
    const isn_query *query;
    const isn_query_structure *tree;
    ranking_run *run;
    uint64_t num_docs;
    uint32_t num_fields;
    const float *norms;
    float k1_plus_1;
    isn_bm25_params bm25;
    const uint8_t *field_tfs;
    scorer *scorers;
    uint32_t num_scorers;
    scorer *excluders;
    uint32_t num_excluders;
    uint32_t *positions; /* RANKING_PHRASE_POSITIONS per term of the longest phrase */
    scorer *guard;       /* run_optional's: a filter's documents, leapfrogged with the candidates */
    void *ranked;        /* run_optional's ordering scratch, one entry per scorer */
    uint32_t *order;
    const ranking_filter *filters;
    const int64_t *filter_values;
    uint32_t num_filters;
} evaluation;


/* From the doc the phrase's lead landed on, the first one where every term is and the phrase matches
 * (structured_phrases.c). */
uint32_t ranking_phrase_settle(evaluation *e, scorer *s, uint32_t doc);
/* Whether the phrase matches doc (not below its last target), reading positions for doc alone: a
 * document the search already holds needs no search for the phrase's next match past it (Lucene's
 * two-phase confirmation). On false, s->doc is past doc and pending. */
bool ranking_phrase_matches(evaluation *e, scorer *s, uint32_t doc);

static inline uint32_t gallop(const uint32_t *docs, uint32_t size, uint32_t *at, uint32_t target) {
    uint32_t lo = *at, step = 1;
    while (lo + step < size && docs[lo + step] < target) {
        lo += step;
        step *= 2;
    }
    uint32_t hi = lo + step < size ? lo + step : size;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (docs[mid] < target) lo = mid + 1;
        else hi = mid;
    }
    *at = lo;
    return lo < size ? docs[lo] : ISN_DOC_END;
}

static inline uint32_t scorer_advance(evaluation *e, scorer *s, uint32_t target) {
    switch (s->kind) {
    case SCORER_TERM: return s->doc = ranking_next_geq(e->run, s->cursor, target);
    case SCORER_PHRASE:
        if (s->pending && s->doc > target) target = s->doc;
        s->pending = false;
        return ranking_phrase_settle(e, s, ranking_next_geq(e->run, s->cursor, target));
    default: break;
    }
    if (s->num_lists <= 1) return s->doc = gallop(s->docs, s->size, &s->at, target);
    uint32_t doc = ISN_DOC_END;
    for (uint32_t i = 0; i < s->num_lists; i++) {
        uint32_t d = gallop(s->lists[i], s->list_sizes[i], &s->list_at[i], target);
        if (d < doc) doc = d;
    }
    return s->doc = doc;
}

/* The scorer's first doc >= target: where it sits already (the common case, inlined), else moved. */
__attribute__((always_inline)) static inline uint32_t scorer_next_geq(evaluation *e, scorer *s, uint32_t target) {
    if (s->doc >= target && !s->pending) return s->doc;
    return scorer_advance(e, s, target);
}

static inline uint32_t scorer_next(evaluation *e, scorer *s) {
    switch (s->kind) {
    case SCORER_TERM: return s->doc = ranking_next(e->run, s->cursor);
    case SCORER_PHRASE:
        if (s->pending) return scorer_next_geq(e, s, s->doc);
        return ranking_phrase_settle(e, s, ranking_next(e->run, s->cursor));
    default: break;
    }
    if (s->num_lists > 1) return scorer_next_geq(e, s, s->doc + 1);
    s->at++;
    return s->doc = s->at < s->size ? s->docs[s->at] : ISN_DOC_END;
}

/* Whether the scorer holds doc (a target not below its last one); a phrase reads positions for doc alone. */
static inline bool scorer_matches(evaluation *e, scorer *s, uint32_t doc) {
    if (s->kind == SCORER_PHRASE) return ranking_phrase_matches(e, s, doc);
    return scorer_next_geq(e, s, doc) == doc;
}

/* Score of the scorer on the doc it sits on. */
static inline double scorer_score(const evaluation *e, const scorer *s, uint32_t doc) {
    if (s->kind == SCORER_DOCS) return 0.0;
    e->run->postings_scored++;
    uint32_t freq = s->kind == SCORER_TERM ? isn_cursor_freq(s->cursor) : s->freq;
    return (double)(s->weight * isn_bm25_tf_part(e->k1_plus_1, freq, s->norms[doc]));
}

/* ------------------------------------------------------------------ filters */

static inline bool admitted(evaluation *e, uint32_t doc) {
    if (e->num_filters && !ranking_filters_accept(e->index, e->filters, e->num_filters, e->filter_values, doc))
        return false;
    for (uint32_t i = 0; i < e->num_excluders; i++)
        if (scorer_matches(e, &e->excluders[i], doc)) return false;
    return true;
}


/* ------------------------------------------------------------------ filters leading the search
 * (structured_filters.c) */

/* Up to this many values, a filter's documents are the union of the index's lists, walked side by side;
 * more are merged into one list first. */
#define RANKING_FILTER_UNION_LISTS 16u

/* A keyword filter's documents lead the search (or guard the candidates of a disjunction, leapfrogging
 * with them), so that documents without the keyword are skipped by whole runs, never tested one by one:
 * a filter of up to RANKING_FILTER_UNION_LISTS values always; of more when their merged list is shorter
 * than a share of the postings the clauses would walk (the merge costs a pass over it). */
#define RANKING_FILTER_MERGED_BELOW 1.0


/* The documents of a keyword filter (attribute in {values}, not negated), ascending, into the DOCS
 * scorer s: the index's own list for one value, their union for a few, else the lists merged into the
 * arena. Without s, a sizing pass: *count the documents, *room the merged list's entries (0 unless
 * merged). */
void ranking_tree_filter_docs(evaluation *e, const ranking_filter *f, scorer *s, uint32_t *count, uint32_t *room);
/* The filter whose documents are fewest among those that can lead (keyword, not negated), and how
 * many; -1 for none. */
int ranking_tree_leading_filter(evaluation *e, uint32_t *count, uint32_t *room);

/* ------------------------------------------------------------------ optional terms alone
 * (structured_terms.c) */

/* Whether every scorer is a term (whole-document or field:). */
bool ranking_tree_terms_only(const evaluation *e);
/* Whether a filter's documents lie close together (block-max MaxScore then beats a leapfrog). */
bool ranking_tree_dense_docs(const scorer *docs);
/* About how many postings the scorers' lists hold between the first and the last of a filter's
 * documents (their blocks that reach there, from the block metadata alone). */
uint64_t ranking_tree_postings_in_span(const evaluation *e, const scorer *docs);
/* Optional terms with filters or excluded clauses tested per candidate: the bag of words' block-max
 * MaxScore under the tree's admit hook; seeded, the leading filter's (e->guard) documents seed its
 * windows. */
void ranking_tree_run_terms(evaluation *e, bool seeded);
/* Optional terms under a scattered keyword filter (e->guard): its documents lead, a chunk at a time. */
void ranking_tree_run_guarded_terms(evaluation *e);

#endif
