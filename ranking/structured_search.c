/* Query trees on the CPU: Lucene's BooleanQuery over BM25 term, field and phrase clauses, with
 * filters and excluded clauses applied before a candidate is scored.
 *
 * A term scores from a posting list: the whole document's, or for field:term the field's own list
 * (index/field_postings.c), under that field's norms and statistics. A phrase is two-phase, as Lucene's:
 * the conjunction of its terms' lists proposes documents and their positions confirm them, read only
 * for the documents the search asks about. Every scorer has block-max bounds (a phrase's: the least of
 * its terms'). The pruned evaluation runs in block-max windows: with required clauses the rarest one
 * leads and optional ones lead where the required ones' bounds alone cannot win; without, MaxScore
 * within each window. Optional terms alone (filters and excluded clauses tested per candidate) run the
 * bag of words' block-max MaxScore. A keyword filter's documents lead the search or guard it
 * (leapfrogging) rather than being tested one candidate at a time. The exhaustive evaluation (the or /
 * and algorithms) scores every matching document. */
#include <stdlib.h>
#include <string.h>

#include "ranking/arena.h"
#include "ranking/structured_internal.h"

/* ------------------------------------------------------------------ preparation */

static float clause_weight(evaluation *e, const ranking_clause *clause, uint32_t field_doc_count,
                           const uint32_t *field_dfs) {
    const ranking_clause_term *terms = ranking_structure_terms(e->tree) + clause->first_term;
    double idf = 0.0;
    for (uint32_t i = 0; i < clause->num_terms; i++) {
        if (clause->field == RANKING_WHOLE_DOCUMENT)
            idf += isn_bm25_idf(e->num_docs, e->query->terms[terms[i].query_term].df);
        else
            idf += isn_bm25_idf(field_doc_count, field_dfs[i]);
    }
    return (float)idf * (float)clause->count;
}

static bool whole_document_term(const ranking_clause *clause) {
    return !clause->phrase && clause->field == RANKING_WHOLE_DOCUMENT;
}

/* Arena bytes the clauses need (prepare_clause: cursors, positions cursors and field dfs) and the phrase
 * positions buffer. */
static size_t bytes_needed(const evaluation *e, uint32_t *max_phrase_terms) {
    const ranking_clause *clauses = ranking_structure_clauses(e->tree);
    size_t bytes = 0;
    uint32_t longest = 1;
    for (uint32_t c = 0; c < e->tree->num_clauses; c++) { /* prepare_clause's pieces, each rounded alone */
        const ranking_clause *clause = &clauses[c];
        if (clause->missing) continue;
        bytes += ranking_arena_size(clause->num_terms * sizeof(isn_cursor));
        bytes += ranking_arena_size(clause->num_terms * sizeof(isn_positions_cursor));
        bytes += ranking_arena_size(clause->num_terms * sizeof(uint32_t));
        if (clause->num_terms > longest) longest = clause->num_terms;
    }
    bytes += ranking_arena_size((size_t)longest * RANKING_PHRASE_POSITIONS * sizeof(uint32_t));
    *max_phrase_terms = longest;
    return bytes;
}

/* Turns one clause into a scorer (or an excluder, which only needs docs). */
static void prepare_clause(evaluation *e, const ranking_clause *clause, scorer *s, bool scores) {
    ranking_arena *arena = &e->searcher->arena;
    const ranking_clause_term *terms = ranking_structure_terms(e->tree) + clause->first_term;
    uint32_t n = clause->num_terms;
    isn_cursor *cursors = ranking_arena_take(arena, n * sizeof(isn_cursor));
    isn_positions_cursor *positions = ranking_arena_take(arena, n * sizeof(isn_positions_cursor));
    uint32_t *field_dfs = ranking_arena_take(arena, n * sizeof(uint32_t));
    memset(s, 0, sizeof *s);
    s->others_bound = INFINITY;
    s->kind = clause->phrase ? SCORER_PHRASE : SCORER_TERM;
    s->whole_document = clause->field == RANKING_WHOLE_DOCUMENT;
    s->field = s->whole_document ? 0 : (uint32_t)clause->field;
    s->norms = s->whole_document ? e->norms : isn_index_field_norms(e->index, s->field);
    s->cursors = cursors;
    s->positions = positions;
    s->terms = terms;
    s->num_terms = n;
    uint32_t lead = 0, field_doc_count = 0;
    float least_max = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        isn_term_stats stats;
        isn_index_term_stats(e->index, terms[i].term_id, &stats);
        if (s->kind == SCORER_TERM && !s->whole_document)
            isn_cursor_open_field(&cursors[i], e->index, terms[i].term_id, s->field);
        else
            isn_cursor_open(&cursors[i], e->index, terms[i].term_id);
        if (cursors[i].df < cursors[lead].df) lead = i;
        float term_max = stats.max_tf_part;
        if (s->kind == SCORER_PHRASE) {
            isn_positions_cursor_open(&positions[i], e->index, terms[i].term_id);
        }
        if (!s->whole_document) isn_index_field_term_stats(e->index, terms[i].term_id, s->field, &field_dfs[i], &term_max);
        /* a phrase's frequency in a field is at most each of its terms' there */
        if (i == 0 || term_max < least_max) least_max = term_max;
    }
    s->cursor = &cursors[lead];
    s->size = cursors[lead].df;
    float avg_len;
    if (!s->whole_document) isn_index_field_doc_stats(e->index, s->field, &field_doc_count, &avg_len);
    if (scores) {
        s->weight = clause_weight(e, clause, field_doc_count, field_dfs);
        s->max_score = (double)s->weight * least_max;
    }
    if (s->kind == SCORER_TERM) s->doc = s->cursor->doc;
    else ranking_phrase_settle(e, s, s->cursor->doc);
}

/* ------------------------------------------------------------------ evaluation */

/* Optional terms under a scattered keyword filter: its documents lead unless they outnumber the terms'
 * postings by more than this (each costs a probe of every term that can still matter). */
#define RANKING_GUARD_LEADS_BELOW 4u

/* A leading filter seeds block-max MaxScore's windows when its terms' postings between its first and last
 * documents are fewer than this many per document and term (a leapfrog's probes); else the leapfrog. */
#define RANKING_SEED_BELOW 2u

static int by_max_score(const void *a, const void *b) {
    double x = ((const scorer *)a)->max_score, y = ((const scorer *)b)->max_score;
    return x < y ? -1 : x > y;
}

static int by_size(const void *a, const void *b) {
    uint32_t x = ((const scorer *)a)->size, y = ((const scorer *)b)->size;
    return x < y ? -1 : x > y;
}

/* Block-max windows, as Lucene's MaxScore runs them: a window ends where the first of the lists with
 * block maxima (terms and field terms) ends its current block, and within it each scorer's bound is its
 * block's maximum (a phrase's, its whole bound); a window whose bounds sum below the threshold is
 * skipped whole. */
static inline double window_bound(scorer *s, uint32_t target, uint32_t *last) {
    *last = ISN_DOC_END;
    if (s->doc == ISN_DOC_END) return 0.0;
    switch (s->kind) {
    case SCORER_TERM:
        *last = isn_cursor_shallow_next_geq(s->cursor, target);
        return (double)s->weight * isn_cursor_shallow_max(s->cursor);
    case SCORER_PHRASE: {
        /* the phrase's frequency is at most each term's, so its bound is the least of their blocks'
         * (a field's phrase keeps its whole bound: the blocks' maxima are under the documents' norms) */
        if (!s->whole_document) return s->max_score;
        float least = 0.0f;
        for (uint32_t i = 0; i < s->num_terms; i++) {
            isn_cursor *c = &s->cursors[i];
            uint32_t term_last = isn_cursor_shallow_next_geq(c, target);
            if (term_last < *last) *last = term_last;
            float term_max = isn_cursor_shallow_max(c);
            if (i == 0 || term_max < least) least = term_max;
        }
        return (double)s->weight * least;
    }
    default: return s->max_score;
    }
}

/* The window from `start`: each scorer's bound in it (bounds[i]), and its last doc. */
static uint32_t open_window(scorer *scorers, uint32_t n, uint32_t start, double *bounds) {
    uint32_t end = ISN_DOC_END;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t last;
        bounds[i] = window_bound(&scorers[i], start, &last);
        if (last < end) end = last;
    }
    return end;
}

/* Lets the phrases of a window pass the documents they cannot lift into the top k (scorer.others_bound). */
static void prune_phrases(scorer *scorers, uint32_t n, const double *bounds, uint32_t window_end) {
    for (uint32_t i = 0; i < n; i++) {
        if (scorers[i].kind != SCORER_PHRASE) continue;
        double others = 0.0;
        for (uint32_t j = 0; j < n; j++)
            if (j != i) others += bounds[j];
        scorers[i].others_bound = others;
        scorers[i].prune_until = window_end;
    }
}

/* Required scorers first (rarest leading), then the optional ones by bound ascending. */
static void run_required(evaluation *e, uint32_t num_required, bool exhaustive) {
    ranking_run *run = e->run;
    scorer *req = e->scorers, *opt = e->scorers + num_required;
    uint32_t num_optional = e->num_scorers - num_required;
    /* below[i]: the summed window bounds of optional scorers 0..i-1 (they are added from the largest down) */
    double *below = run->scratch_bounds, *bounds = run->completion_bounds;
    below[0] = 0.0;
    for (uint32_t i = 0; i < num_optional; i++) below[i + 1] = below[i] + opt[i].max_score;
    uint32_t doc = req[0].doc, window_end = 0;
    bool window_open = false;
    double required_bound = 0.0; /* the required scorers' summed bounds in the window */
    while (doc != ISN_DOC_END) {
        if (ranking_should_stop(run, doc)) return;
        if (!exhaustive && (!window_open || doc > window_end)) {
            /* windows that cannot make the top k are passed by their block metadata, decoding nothing */
            uint32_t target = doc;
            for (;;) {
                window_end = open_window(e->scorers, e->num_scorers, target, bounds);
                double all = 0.0;
                for (uint32_t i = 0; i < e->num_scorers; i++) all += bounds[i];
                if (!ranking_bound_fails(all, ranking_prior_from(run, target), &run->topk) || window_end == ISN_DOC_END)
                    break;
                target = window_end + 1;
            }
            window_open = true;
            if (target > doc) {
                double all = 0.0;
                for (uint32_t i = 0; i < e->num_scorers; i++) all += bounds[i];
                doc = ranking_bound_fails(all, ranking_prior_from(run, target), &run->topk)
                          ? ISN_DOC_END
                          : scorer_next_geq(e, &req[0], target);
                if (doc == ISN_DOC_END || doc > window_end) continue;
            }
            for (uint32_t i = 0; i < num_optional; i++) below[i + 1] = below[i] + bounds[num_required + i];
            prune_phrases(e->scorers, e->num_scorers, bounds, window_end);
            required_bound = 0.0;
            for (uint32_t i = 0; i < num_required; i++) required_bound += bounds[i];
        }
        if (!exhaustive && num_optional) {
            /* a doc holding none of opt[from..) scores at most required_bound + below[from]: where that cannot
             * make the top k, the candidates are the docs of those optional scorers (Lucene's ReqOptSumScorer
             * under block-max bounds) */
            uint32_t from = num_optional + 1;
            const double prior = ranking_prior_from(run, doc); /* the documents passed over are from doc on */
            for (uint32_t i = num_optional + 1; i-- > 0;)
                if (ranking_bound_fails(required_bound + below[i], prior, &run->topk)) {
                    from = i;
                    break;
                }
            if (from <= num_optional) {
                uint32_t next = window_end == ISN_DOC_END ? ISN_DOC_END : window_end + 1;
                for (uint32_t i = from; i < num_optional && next != doc; i++) {
                    uint32_t d = scorer_next_geq(e, &opt[i], doc);
                    if (d < next) next = d;
                }
                if (next != doc) {
                    doc = next == ISN_DOC_END ? ISN_DOC_END : scorer_next_geq(e, &req[0], next);
                    continue;
                }
            }
        }
        uint32_t found = doc;
        /* a phrase confirms doc alone: where it fails, its terms' next common doc is where to look next */
        for (uint32_t i = 1; i < num_required && found == doc; i++)
            found = req[i].kind != SCORER_PHRASE        ? scorer_next_geq(e, &req[i], doc)
                    : ranking_phrase_matches(e, &req[i], doc) ? doc
                                                              : req[i].doc;
        if (found != doc) {
            doc = found == ISN_DOC_END ? ISN_DOC_END : scorer_next_geq(e, &req[0], found);
            continue;
        }
        if (!admitted(e, doc)) {
            doc = scorer_next(e, &req[0]);
            continue;
        }
        double score = 0.0;
        for (uint32_t i = 0; i < num_required; i++) score += scorer_score(e, &req[i], doc);
        bool pruned = false;
        const double own_prior = ranking_prior_of(run, doc);
        for (uint32_t i = num_optional; i-- > 0;) {
            if (!exhaustive && ranking_bound_fails(score + below[i + 1], own_prior, &run->topk)) {
                pruned = true;
                break;
            }
            if (scorer_matches(e, &opt[i], doc)) score += scorer_score(e, &opt[i], doc);
        }
        run->matched++;
        if (pruned) {
            doc = scorer_next(e, &req[0]);
            continue;
        }
        run->docs_evaluated++;
        isn_topk_offer(&run->topk, doc, ranking_final_score(run, doc, score));
        doc = scorer_next(e, &req[0]);
    }
}

typedef struct {
    double bound;
    uint32_t index;
} ranked_scorer;

static int by_bound(const void *a, const void *b) {
    const ranked_scorer *x = a, *y = b;
    return x->bound < y->bound ? -1 : x->bound > y->bound ? 1 : (x->index > y->index) - (x->index < y->index);
}

/* order[]: the scorers by bound ascending (few: insertion; many: qsort of (bound, index) pairs). */
static void order_by_bound(const double *bounds, uint32_t n, ranked_scorer *ranked, uint32_t *order) {
    if (n <= 16) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t j = i;
            for (; j > 0 && bounds[order[j - 1]] > bounds[i]; j--) order[j] = order[j - 1];
            order[j] = i;
        }
        return;
    }
    for (uint32_t i = 0; i < n; i++) ranked[i] = (ranked_scorer){bounds[i], i};
    qsort(ranked, n, sizeof *ranked, by_bound);
    for (uint32_t i = 0; i < n; i++) order[i] = ranked[i].index;
}

/* Only optional scorers: at least one must hold the document. MaxScore in block-max windows: within a
 * window the scorers are ordered by their window bounds, and those whose summed bounds cannot beat the
 * threshold (a prefix) only complete candidates of the others. */
static void run_optional(evaluation *e, bool exhaustive) {
    ranking_run *run = e->run;
    scorer *s = e->scorers;
    uint32_t n = e->num_scorers;
    double *prefix = run->scratch_bounds; /* prefix[i]: summed window bounds of scorers order[0..i-1] */
    double *bounds = run->completion_bounds;
    ranked_scorer *ranked = e->ranked;
    uint32_t *order = e->order;
    scorer *guard = e->guard;
    uint32_t start = ISN_DOC_END;
    for (uint32_t i = 0; i < n; i++)
        if (s[i].doc < start) start = s[i].doc;
    while (start != ISN_DOC_END) {
        if (guard && (start = scorer_next_geq(e, guard, start)) == ISN_DOC_END) return;
        uint32_t end = ISN_DOC_END;
        if (!exhaustive) {
            end = open_window(s, n, start, bounds);
            double all = 0.0;
            for (uint32_t i = 0; i < n; i++) all += bounds[i];
            if (ranking_bound_fails(all, ranking_prior_from(run, start), &run->topk)) {
                start = end == ISN_DOC_END ? ISN_DOC_END : end + 1;
                continue;
            }
        } else {
            for (uint32_t i = 0; i < n; i++) bounds[i] = s[i].max_score;
        }
        if (!exhaustive) prune_phrases(s, n, bounds, end);
        order_by_bound(bounds, n, ranked, order);
        prefix[0] = 0.0;
        for (uint32_t i = 0; i < n; i++) prefix[i + 1] = prefix[i] + bounds[order[i]];
        uint32_t first_essential = 0;
        for (;;) {
            if (!exhaustive) { /* the partition serves the documents from start on */
                const double prior = ranking_prior_from(run, start);
                while (first_essential < n && ranking_bound_fails(prefix[first_essential + 1], prior, &run->topk))
                    first_essential++;
            }
            if (first_essential == n) {
                start = end == ISN_DOC_END ? ISN_DOC_END : end + 1;
                break;
            }
            uint32_t doc = ISN_DOC_END;
            for (uint32_t i = first_essential; i < n; i++) {
                uint32_t d = scorer_next_geq(e, &s[order[i]], start);
                if (d < doc) doc = d;
            }
            if (doc == ISN_DOC_END || doc > end) { /* later windows may make other scorers essential */
                start = end == ISN_DOC_END ? ISN_DOC_END : end + 1;
                break;
            }
            if (guard && scorer_next_geq(e, guard, doc) != doc) { /* the filter's next document leads */
                start = guard->doc;
                if (start == ISN_DOC_END) return;
                if (start > end) break;
                continue;
            }
            if (ranking_should_stop(run, doc)) return;
            start = doc + 1;
            if (!exhaustive) {
                /* the doc's own bound: the essential scorers that hold it, and every non-essential one */
                double doc_bound = prefix[first_essential];
                for (uint32_t i = first_essential; i < n; i++)
                    if (s[order[i]].doc == doc) doc_bound += bounds[order[i]];
                if (ranking_bound_fails(doc_bound, ranking_prior_of(run, doc), &run->topk)) {
                    for (uint32_t i = first_essential; i < n; i++)
                        if (s[order[i]].doc == doc) scorer_next(e, &s[order[i]]);
                    continue;
                }
            }
            bool admit = admitted(e, doc);
            double score = 0.0;
            for (uint32_t i = first_essential; i < n; i++) {
                scorer *sc = &s[order[i]];
                if (sc->doc == doc) {
                    if (admit) score += scorer_score(e, sc, doc);
                    scorer_next(e, sc);
                }
            }
            if (!admit) continue;
            run->matched++;
            bool pruned = false;
            const double own_prior = ranking_prior_of(run, doc);
            for (uint32_t i = first_essential; i-- > 0;) {
                if (!exhaustive && ranking_bound_fails(score + prefix[i + 1], own_prior, &run->topk)) {
                    pruned = true;
                    break;
                }
                if (scorer_matches(e, &s[order[i]], doc)) score += scorer_score(e, &s[order[i]], doc);
            }
            if (pruned) continue;
            run->docs_evaluated++;
            isn_topk_offer(&run->topk, doc, ranking_final_score(run, doc, score));
        }
        if (start == ISN_DOC_END) break;
        /* the next window starts at the first doc any scorer still holds */
        uint32_t next = ISN_DOC_END;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t d = s[i].doc >= start ? s[i].doc : start;
            if (d < next) next = d;
        }
        start = next;
    }
}

int ranking_structured_search(isn_searcher *searcher, const isn_query *query, const isn_search_options *options,
                              uint64_t num_docs, bool exhaustive, ranking_run *run, char *err, size_t err_len) {
    const isn_query_structure *tree = query->structure;
    const isn_index_info *info = isn_index_get_info(searcher->index);
    evaluation e = {.searcher = searcher, .index = searcher->index, .query = query, .tree = tree, .run = run,
                    .num_docs = num_docs, .num_fields = info->num_fields, .norms = run->norms, .k1_plus_1 = searcher->k1_plus_1, .bm25 = info->bm25,
                    .filters = ranking_structure_filters(tree), .filter_values = ranking_structure_values(tree),
                    .num_filters = tree->num_filters};
    const ranking_clause *clauses = ranking_structure_clauses(tree);
    const ranking_clause_term *terms = ranking_structure_terms(tree);
    for (uint32_t c = 0; c < tree->num_clauses; c++) {
        if (clauses[c].field != RANKING_WHOLE_DOCUMENT && (uint32_t)clauses[c].field >= info->num_fields) {
            isn_error(err, err_len, "query clause %u names field %d; the index has %u", c, clauses[c].field,
                      info->num_fields);
            return -1;
        }
        for (uint32_t t = 0; t < clauses[c].num_terms; t++) {
            const ranking_clause_term *term = &terms[clauses[c].first_term + t];
            if (clauses[c].missing) continue;
            if (term->term_id >= info->num_terms ||
                (clauses[c].occur != ISN_OCCUR_MUST_NOT && clauses[c].field == RANKING_WHOLE_DOCUMENT &&
                 term->query_term >= query->num_terms)) {
                isn_error(err, err_len, "query clause %u has a term outside the index or the query", c);
                return -1;
            }
        }
    }
    for (uint32_t c = 0; c < tree->num_clauses; c++) {
        if (whole_document_term(&clauses[c]) || clauses[c].missing) continue;
        if (!info->has_positions) {
            isn_error(err, err_len, "phrases and field: clauses need positions, and this index has none (built with "
                                    "--no-positions)");
            return -1;
        }
        /* A whole-document phrase reads positions only (faster once the index derived its per-field
         * data, never waiting for that pass); a field: clause needs the field's own lists and norms. */
        if (clauses[c].field == RANKING_WHOLE_DOCUMENT) continue;
        if (!e.field_tfs) e.field_tfs = isn_index_field_tfs(e.index);
        if (!e.field_tfs) {
            isn_error(err, err_len, "out of memory for the index's per-field term frequencies (%u fields), which "
                                    "field: clauses read", info->num_fields);
            return -1;
        }
    }
    bool and_mode = options->mode == ISN_MODE_AND;
    uint32_t max_phrase_terms = 1;
    uint32_t lead_count = 0, lead_room = 0;
    int lead = ranking_tree_leading_filter(&e, &lead_count, &lead_room);
    /* the scorers (one more for a leading filter joining required clauses), the excluders, a leading
     * filter's own scorer when nothing is required, then the rest */
    size_t needed = ranking_arena_size((tree->num_clauses + 1) * sizeof(scorer)) +
                    ranking_arena_size(tree->num_clauses * sizeof(scorer)) + ranking_arena_size(sizeof(scorer)) +
                    bytes_needed(&e, &max_phrase_terms) + 2 * ranking_arena_size((tree->num_clauses + 2) * sizeof(double)) +
                    ranking_arena_size((tree->num_clauses + 1) * 2 * sizeof(double)) +
                    ranking_arena_size((tree->num_clauses + 1) * sizeof(uint32_t)) +
                    ranking_arena_size((size_t)lead_room * sizeof(uint32_t)) +
                    3 * ranking_arena_size(RANKING_FILTER_UNION_LISTS * sizeof(const uint32_t *)) +
                    2 * ranking_arena_size(tree->num_clauses * sizeof(ranking_term)) +
                    ranking_arena_size(tree->num_clauses * sizeof(ranking_window_term)) +
                    ranking_arena_size(tree->num_filters * sizeof(ranking_filter));
    if (ranking_arena_reset(&searcher->arena, needed) != 0) {
        isn_error(err, err_len, "out of memory for a query of %u clauses", tree->num_clauses);
        return -1;
    }
    ranking_arena *arena = &searcher->arena;
    e.scorers = ranking_arena_take(arena, (tree->num_clauses + 1) * sizeof(scorer));
    e.excluders = ranking_arena_take(arena, tree->num_clauses * sizeof(scorer));
    run->scratch_bounds = ranking_arena_take(arena, (tree->num_clauses + 2) * sizeof(double));
    run->completion_bounds = ranking_arena_take(arena, (tree->num_clauses + 2) * sizeof(double));
    e.ranked = ranking_arena_take(arena, (tree->num_clauses + 1) * 2 * sizeof(double));
    e.order = ranking_arena_take(arena, (tree->num_clauses + 1) * sizeof(uint32_t));
    e.positions = ranking_arena_take(arena, (size_t)max_phrase_terms * RANKING_PHRASE_POSITIONS * sizeof(uint32_t));
    uint32_t num_required = 0;
    bool any_positive = false;
    for (uint32_t c = 0; c < tree->num_clauses; c++) {
        const ranking_clause *clause = &clauses[c];
        bool required = clause->occur == ISN_OCCUR_MUST || (and_mode && clause->occur == ISN_OCCUR_SHOULD);
        if (clause->occur == ISN_OCCUR_MUST_NOT) {
            if (!clause->missing) prepare_clause(&e, clause, &e.excluders[e.num_excluders++], false);
            continue;
        }
        any_positive = true;
        if (clause->missing) {
            if (required) return 0; /* a required clause no document can satisfy */
            continue;
        }
        scorer *s = &e.scorers[e.num_scorers++];
        prepare_clause(&e, clause, s, true);
        s->required = required;
        num_required += required;
    }
    if (!any_positive || e.num_scorers == 0) return 0; /* Lucene: excluded clauses alone match nothing */
    uint64_t walked = 0;
    for (uint32_t i = 0; i < e.num_scorers; i++) walked += e.scorers[i].size;
    /* one value's list is the index's own, free to use; several are merged first, worth it when few */
    if (lead >= 0 && (lead_room == 0 || (double)lead_count < RANKING_FILTER_MERGED_BELOW * (double)walked)) {
        /* with required clauses it joins them; else it guards the disjunction's candidates */
        scorer *s = num_required ? &e.scorers[e.num_scorers++] : ranking_arena_take(arena, sizeof(scorer));
        uint32_t count, room;
        ranking_tree_filter_docs(&e, &e.filters[lead], s, &count, &room);
        s->required = num_required > 0;
        if (num_required) num_required++;
        else e.guard = s;
        /* its documents hold it: the others are what each candidate is still tested for */
        ranking_filter *rest = ranking_arena_take(arena, tree->num_filters * sizeof(ranking_filter));
        uint32_t kept = 0;
        for (uint32_t f = 0; f < e.num_filters; f++)
            if (f != (uint32_t)lead) rest[kept++] = e.filters[f];
        e.filters = rest;
        e.num_filters = kept;
    }
    if (options->first_doc) {
        for (uint32_t i = 0; i < e.num_scorers; i++) scorer_next_geq(&e, &e.scorers[i], options->first_doc);
        if (e.guard) scorer_next_geq(&e, e.guard, options->first_doc);
    }
    /* required first, rarest leading; optional ones by bound ascending */
    uint32_t r = 0;
    for (uint32_t i = 0; i < e.num_scorers; i++)
        if (e.scorers[i].required) {
            scorer moving = e.scorers[i];
            e.scorers[i] = e.scorers[r];
            e.scorers[r++] = moving;
        }
    qsort(e.scorers, num_required, sizeof(scorer), by_size);
    qsort(e.scorers + num_required, e.num_scorers - num_required, sizeof(scorer), by_max_score);
    if (num_required) run_required(&e, num_required, exhaustive);
    /* a filter's documents lead when scattered and not far more than the terms' postings; else they admit */
    else if (!exhaustive && ranking_tree_terms_only(&e) &&
             (!e.guard || e.guard->size > RANKING_GUARD_LEADS_BELOW * walked || ranking_tree_dense_docs(e.guard)))
        ranking_tree_run_terms(&e, false);
    /* leading, they seed block-max MaxScore's windows where the terms' lists hold few postings in their
     * span beside the probes a leapfrog would make (one per document and term); else the leapfrog */
    else if (!exhaustive && ranking_tree_terms_only(&e) &&
             ranking_tree_postings_in_span(&e, e.guard) < RANKING_SEED_BELOW * (uint64_t)e.guard->size * e.num_scorers)
        ranking_tree_run_terms(&e, true);
    else if (!exhaustive && ranking_tree_terms_only(&e)) ranking_tree_run_guarded_terms(&e);
    else run_optional(&e, exhaustive);
    return 0;
}

