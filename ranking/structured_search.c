/* Query trees on the CPU: Lucene's BooleanQuery over BM25 term, field and phrase clauses, with
 * filters and excluded clauses applied before a candidate is scored.
 *
 * A whole-document term scores from its posting list, as the bag of words does. A field: clause and a
 * phrase are first turned into a list of (doc, score) from the postings and positions (Lucene builds
 * the same per-document frequencies from its positions); their exact maximum is then their bound. The
 * pruned evaluation is MaxScore over these scorers: with required clauses the rarest one leads and
 * optional ones are added only while they can still lift a document into the top k; without, the
 * lists whose summed bounds cannot beat the threshold only complete candidates of the others.
 * The exhaustive evaluation (the or / and algorithms) scores every matching document. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/arena.h"
#include "ranking/ranking_internal.h"

typedef struct {
    bool from_index; /* a whole-document term read from its posting list; else a built list */
    bool required;
    bool filter; /* a filter's documents leading the search: it matches, never scores */
    isn_cursor *cursor;
    float weight;
    const uint32_t *docs;
    const float *scores;
    uint32_t size; /* postings (df) or list length: the rarest required scorer leads */
    uint32_t at;
    uint32_t doc;
    double max_score;
} scorer;

typedef struct {
    isn_searcher *searcher;
    const isn_index *index;
    const isn_query *query;
    const isn_query_structure *tree;
    ranking_run *run;
    uint64_t num_docs;
    const float *norms;
    float k1_plus_1;
    isn_bm25_params bm25;
    scorer *scorers;
    uint32_t num_scorers;
    scorer *excluders;
    uint32_t num_excluders;
    uint32_t *positions; /* RANKING_PHRASE_POSITIONS per term of the longest phrase */
    const ranking_filter *filters;
    const int64_t *filter_values;
    uint32_t num_filters;
} evaluation;

/* ------------------------------------------------------------------ scorer moves */

static inline uint32_t scorer_next_geq(ranking_run *run, scorer *s, uint32_t target) {
    if (s->doc >= target) return s->doc;
    if (s->from_index) return s->doc = ranking_next_geq(run, s->cursor, target);
    uint32_t lo = s->at, step = 1;
    /* galloping, then binary search: lists are walked forward, mostly by small steps */
    while (lo + step < s->size && s->docs[lo + step] < target) {
        lo += step;
        step *= 2;
    }
    uint32_t hi = lo + step < s->size ? lo + step : s->size;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->docs[mid] < target) lo = mid + 1;
        else hi = mid;
    }
    s->at = lo;
    return s->doc = lo < s->size ? s->docs[lo] : ISN_DOC_END;
}

static inline uint32_t scorer_next(ranking_run *run, scorer *s) {
    if (s->from_index) return s->doc = ranking_next(run, s->cursor);
    s->at++;
    return s->doc = s->at < s->size ? s->docs[s->at] : ISN_DOC_END;
}

/* Score of the scorer on the doc it sits on. */
static inline double scorer_score(const evaluation *e, const scorer *s, uint32_t doc) {
    if (s->filter) return 0.0;
    e->run->postings_scored++;
    if (!s->from_index) return (double)s->scores[s->at];
    float tf_part = isn_bm25_tf_part(e->k1_plus_1, isn_cursor_freq(s->cursor), e->norms[doc]);
    return (double)(s->weight * tf_part);
}

/* ------------------------------------------------------------------ filters */

static inline bool admitted(evaluation *e, uint32_t doc) {
    if (e->num_filters && !ranking_filters_accept(e->index, e->filters, e->num_filters, e->filter_values, doc))
        return false;
    for (uint32_t i = 0; i < e->num_excluders; i++)
        if (scorer_next_geq(e->run, &e->excluders[i], doc) == doc) return false;
    return true;
}

/* ------------------------------------------------------------------ built lists: field terms, phrases */

static void field_stats(isn_searcher *searcher, uint32_t field, uint32_t *doc_count, float *avg_len) {
    ranking_field_stats *fs = &searcher->field_stats[field];
    if (fs->doc_count == 0) {
        uint32_t n = isn_index_get_info(searcher->index)->num_docs, with = 0;
        uint64_t total = 0;
        for (uint32_t d = 0; d < n; d++) {
            uint32_t len = isn_index_field_len(searcher->index, d, field);
            with += len > 0;
            total += len;
        }
        fs->avg_len = with ? (float)((double)total / with) : 1.0f;
        fs->doc_count = with ? with : 1;
    }
    *doc_count = fs->doc_count;
    *avg_len = fs->avg_len;
}

/* Every start where each term of the phrase sits at its offset, in one field of the doc the cursors
 * sit on. */
static uint32_t phrase_freq_in_field(evaluation *e, const ranking_clause_term *terms, uint32_t n,
                                     isn_cursor *cursors, isn_positions_cursor *positions, uint32_t field) {
    uint32_t counts[RANKING_MAX_PHRASE_TERMS];
    uint32_t *lists = e->positions;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t c = isn_positions_cursor_read(&positions[i], &cursors[i], field, lists + i * RANKING_PHRASE_POSITIONS,
                                               RANKING_PHRASE_POSITIONS);
        counts[i] = c < RANKING_PHRASE_POSITIONS ? c : RANKING_PHRASE_POSITIONS;
        if (counts[i] == 0) return 0;
    }
    uint32_t at[RANKING_MAX_PHRASE_TERMS] = {0};
    uint32_t freq = 0;
    for (uint32_t j = 0; j < counts[0]; j++) {
        uint32_t start = lists[j]; /* term 0 has offset 0 */
        bool all = true;
        for (uint32_t i = 1; i < n && all; i++) {
            uint32_t want = start + terms[i].offset;
            const uint32_t *list = lists + i * RANKING_PHRASE_POSITIONS;
            while (at[i] < counts[i] && list[at[i]] < want) at[i]++;
            all = at[i] < counts[i] && list[at[i]] == want;
        }
        freq += all;
    }
    return freq;
}

/* The documents of one clause that is not a whole-document term, with its frequency in each: a field
 * term (its positions in the field) or a phrase. Writes docs[] and freqs[] (room for the rarest term's
 * df) and returns how many. */
static uint32_t build_clause_list(evaluation *e, const ranking_clause *clause, isn_cursor *cursors,
                                  isn_positions_cursor *positions, uint32_t *docs, uint32_t *freqs) {
    const ranking_clause_term *terms = ranking_structure_terms(e->tree) + clause->first_term;
    uint32_t n = clause->num_terms;
    uint32_t lead = 0;
    for (uint32_t i = 0; i < n; i++) {
        isn_cursor_open(&cursors[i], e->index, terms[i].term_id);
        isn_positions_cursor_open(&positions[i], e->index, terms[i].term_id);
        if (cursors[i].df < cursors[lead].df) lead = i;
    }
    uint32_t num_fields = isn_index_get_info(e->index)->num_fields;
    uint32_t count = 0;
    ranking_run *run = e->run;
    if (n == 1 && clause->field != RANKING_WHOLE_DOCUMENT) {
        /* a field term: its frequency in the field from the per-field counts, positions only past the cap */
        const uint8_t *tfs = isn_index_field_tfs(e->index);
        uint64_t base = tfs ? isn_index_term_first_posting(e->index, terms[0].term_id) : 0;
        uint32_t field = (uint32_t)clause->field;
        for (uint32_t doc = cursors[0].doc; doc != ISN_DOC_END; doc = ranking_next(run, &cursors[0])) {
            uint32_t freq = tfs ? tfs[(base + (uint64_t)cursors[0].block * ISN_BLOCK_SIZE + cursors[0].pos) * num_fields +
                                      field]
                                : ISN_FIELD_TF_CAP;
            if (freq == ISN_FIELD_TF_CAP) freq = isn_positions_cursor_read(&positions[0], &cursors[0], field, NULL, 0);
            if (freq) {
                docs[count] = doc;
                freqs[count++] = freq;
            }
        }
        return count;
    }
    /* a phrase: a field where one of its terms is absent (the per-field counts say so) is not read */
    const uint8_t *tfs = isn_index_field_tfs(e->index);
    uint64_t bases[RANKING_MAX_PHRASE_TERMS];
    for (uint32_t i = 0; tfs && i < n; i++) bases[i] = isn_index_term_first_posting(e->index, terms[i].term_id);
    uint32_t first_field = clause->field == RANKING_WHOLE_DOCUMENT ? 0 : (uint32_t)clause->field;
    uint32_t last_field = clause->field == RANKING_WHOLE_DOCUMENT ? num_fields : first_field + 1;
    uint32_t doc = cursors[lead].doc;
    while (doc != ISN_DOC_END) {
        uint32_t found = doc;
        for (uint32_t i = 0; i < n && found == doc; i++) found = ranking_next_geq(run, &cursors[i], doc);
        if (found != doc) {
            doc = found == ISN_DOC_END ? ISN_DOC_END : ranking_next_geq(run, &cursors[lead], found);
            continue;
        }
        uint32_t freq = 0;
        for (uint32_t f = first_field; f < last_field; f++) {
            bool all = true;
            for (uint32_t i = 0; tfs && i < n && all; i++)
                all = tfs[(bases[i] + (uint64_t)cursors[i].block * ISN_BLOCK_SIZE + cursors[i].pos) * num_fields + f] > 0;
            if (all) freq += phrase_freq_in_field(e, terms, n, cursors, positions, f);
        }
        if (freq) {
            docs[count] = doc;
            freqs[count++] = freq;
        }
        doc = ranking_next(run, &cursors[lead]);
    }
    return count;
}

/* The field's own document frequency of a term: the documents with positions of it in the field. */
static uint32_t field_df(evaluation *e, uint32_t term_id, uint32_t field, isn_cursor *cursor,
                         isn_positions_cursor *positions) {
    const uint8_t *tfs = isn_index_field_tfs(e->index);
    uint32_t num_fields = isn_index_get_info(e->index)->num_fields;
    isn_term_stats stats;
    isn_index_term_stats(e->index, term_id, &stats);
    uint32_t df = 0;
    if (tfs) {
        const uint8_t *at = tfs + isn_index_term_first_posting(e->index, term_id) * num_fields + field;
        for (uint32_t i = 0; i < stats.df; i++) df += at[(size_t)i * num_fields] > 0;
        return df;
    }
    isn_cursor_open(cursor, e->index, term_id);
    isn_positions_cursor_open(positions, e->index, term_id);
    for (uint32_t doc = cursor->doc; doc != ISN_DOC_END; doc = ranking_next(e->run, cursor))
        df += isn_positions_cursor_read(positions, cursor, field, NULL, 0) > 0;
    return df;
}

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

/* ------------------------------------------------------------------ preparation */

static uint32_t min_df(const evaluation *e, const ranking_clause *clause) {
    const ranking_clause_term *terms = ranking_structure_terms(e->tree) + clause->first_term;
    uint32_t least = UINT32_MAX;
    for (uint32_t i = 0; i < clause->num_terms; i++) {
        isn_term_stats stats;
        isn_index_term_stats(e->index, terms[i].term_id, &stats);
        if (stats.df < least) least = stats.df;
    }
    return least;
}

static bool whole_document_term(const ranking_clause *clause) {
    return !clause->phrase && clause->field == RANKING_WHOLE_DOCUMENT;
}

/* Arena bytes the query needs: cursors, positions, scorers and every built list. */
static size_t bytes_needed(const evaluation *e, uint32_t *max_phrase_terms) {
    const ranking_clause *clauses = ranking_structure_clauses(e->tree);
    size_t bytes = 2 * ranking_arena_size(e->tree->num_clauses * sizeof(scorer));
    uint32_t longest = 1;
    for (uint32_t c = 0; c < e->tree->num_clauses; c++) {
        const ranking_clause *clause = &clauses[c];
        if (clause->missing) continue;
        bytes += ranking_arena_size(clause->num_terms * (sizeof(isn_cursor) + sizeof(isn_positions_cursor)));
        bytes += ranking_arena_size(clause->num_terms * sizeof(uint32_t));
        if (!whole_document_term(clause)) {
            size_t n = min_df(e, clause);
            bytes += 3 * ranking_arena_size(n * sizeof(uint32_t));
        }
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
    if (whole_document_term(clause)) {
        isn_term_stats stats;
        isn_index_term_stats(e->index, terms[0].term_id, &stats);
        isn_cursor_open(&cursors[0], e->index, terms[0].term_id);
        s->from_index = true;
        s->cursor = &cursors[0];
        s->doc = cursors[0].doc;
        s->size = cursors[0].df;
        if (scores) {
            s->weight = clause_weight(e, clause, 0, NULL);
            s->max_score = (double)s->weight * stats.max_tf_part;
        }
        return;
    }
    size_t cap = min_df(e, clause);
    uint32_t *docs = ranking_arena_take(arena, cap * sizeof(uint32_t));
    uint32_t *freqs = ranking_arena_take(arena, cap * sizeof(uint32_t));
    float *list_scores = ranking_arena_take(arena, cap * sizeof(float));
    uint32_t count = build_clause_list(e, clause, cursors, positions, docs, freqs);
    s->docs = docs;
    s->size = count;
    s->doc = count ? docs[0] : ISN_DOC_END;
    if (!scores) return;
    uint32_t field_doc_count = 0;
    float avg_len = 0.0f;
    if (clause->field != RANKING_WHOLE_DOCUMENT) {
        field_stats(e->searcher, (uint32_t)clause->field, &field_doc_count, &avg_len);
        if (n == 1) field_dfs[0] = count;
        else
            for (uint32_t i = 0; i < n; i++)
                field_dfs[i] = field_df(e, terms[i].term_id, (uint32_t)clause->field, &cursors[i], &positions[i]);
    }
    float weight = clause_weight(e, clause, field_doc_count, field_dfs);
    double max_score = 0.0;
    for (uint32_t i = 0; i < count; i++) {
        float norm = clause->field == RANKING_WHOLE_DOCUMENT
                         ? e->norms[docs[i]]
                         : isn_bm25_doc_norm(&e->bm25, isn_index_field_len(e->index, docs[i], (uint32_t)clause->field),
                                             avg_len);
        list_scores[i] = weight * isn_bm25_tf_part(e->k1_plus_1, freqs[i], norm);
        if (list_scores[i] > max_score) max_score = list_scores[i];
    }
    s->scores = list_scores;
    s->max_score = max_score;
}

/* ------------------------------------------------------------------ a filter leading the search */

/* The documents of a keyword filter (attribute in {values}, not negated), ascending: the index's own
 * list for one value, else the lists merged into the arena. NULL when no filter can lead. */
static const uint32_t *filter_docs(evaluation *e, const ranking_filter *f, uint32_t *count, uint32_t *room) {
    *count = 0;
    const uint32_t *lists[ISN_MAX_FILTER_VALUES];
    uint32_t sizes[ISN_MAX_FILTER_VALUES], at[ISN_MAX_FILTER_VALUES];
    uint32_t n = 0, total = 0;
    for (uint32_t v = 0; v < f->num_values; v++) {
        const uint32_t *docs = isn_index_keyword_docs(e->index, f->attribute, e->filter_values[f->first_value + v], &sizes[n]);
        if (docs && sizes[n]) {
            lists[n] = docs;
            at[n] = 0;
            total += sizes[n++];
        }
    }
    if (room) { /* sizing pass */
        *room = n > 1 ? total : 0;
        *count = total;
        return NULL;
    }
    if (n == 1) {
        *count = total;
        return lists[0];
    }
    uint32_t *merged = ranking_arena_take(&e->searcher->arena, (size_t)(total ? total : 1) * sizeof(uint32_t));
    while (*count < total) { /* few values: a linear pick of the smallest head is enough */
        uint32_t best = UINT32_MAX, which = 0;
        for (uint32_t i = 0; i < n; i++)
            if (at[i] < sizes[i] && lists[i][at[i]] < best) {
                best = lists[i][at[i]];
                which = i;
            }
        merged[(*count)++] = best;
        at[which]++;
    }
    return merged;
}

/* The filter whose documents are fewest among those that can lead (keyword, not negated), and how
 * many; -1 for none. */
static int leading_filter(evaluation *e, uint32_t *count, uint32_t *room) {
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
        filter_docs(e, filter, &n, &r);
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

/* A filter leads when its documents are fewer than a fraction of the postings the clauses would
 * walk: each of its documents costs a skip in every list, each posting a step and a test. */
#define RANKING_FILTER_LEADS_BELOW 0.25

/* ------------------------------------------------------------------ evaluation */

static int by_max_score(const void *a, const void *b) {
    double x = ((const scorer *)a)->max_score, y = ((const scorer *)b)->max_score;
    return x < y ? -1 : x > y;
}

static int by_size(const void *a, const void *b) {
    uint32_t x = ((const scorer *)a)->size, y = ((const scorer *)b)->size;
    return x < y ? -1 : x > y;
}

/* Required scorers first (rarest leading), then the optional ones by bound ascending. */
static void run_required(evaluation *e, uint32_t num_required, bool need_optional, bool exhaustive) {
    ranking_run *run = e->run;
    scorer *req = e->scorers, *opt = e->scorers + num_required;
    uint32_t num_optional = e->num_scorers - num_required;
    /* below[i]: the summed bounds of optional scorers 0..i-1 (they are added from the largest down) */
    double *below = run->scratch_bounds;
    below[0] = 0.0;
    for (uint32_t i = 0; i < num_optional; i++) below[i + 1] = below[i] + opt[i].max_score;
    uint32_t doc = req[0].doc;
    while (doc != ISN_DOC_END) {
        if (ranking_should_stop(run, doc)) return;
        uint32_t found = doc;
        for (uint32_t i = 1; i < num_required && found == doc; i++) found = scorer_next_geq(run, &req[i], doc);
        if (found != doc) {
            doc = found == ISN_DOC_END ? ISN_DOC_END : scorer_next_geq(run, &req[0], found);
            continue;
        }
        if (!admitted(e, doc)) {
            doc = scorer_next(run, &req[0]);
            continue;
        }
        double score = 0.0;
        for (uint32_t i = 0; i < num_required; i++) score += scorer_score(e, &req[i], doc);
        /* without a required clause of its own (a filter leads) a document needs an optional one */
        bool any_optional = false, pruned = false;
        for (uint32_t i = num_optional; i-- > 0;) {
            if (!exhaustive && ranking_bound_fails(score + below[i + 1], &run->topk)) {
                pruned = true;
                break;
            }
            if (scorer_next_geq(run, &opt[i], doc) == doc) {
                score += scorer_score(e, &opt[i], doc);
                any_optional = true;
            }
        }
        if (need_optional && !any_optional) {
            doc = scorer_next(run, &req[0]);
            continue;
        }
        run->matched += !need_optional || !pruned || any_optional;
        run->docs_evaluated++;
        isn_topk_offer(&run->topk, doc, (float)score);
        doc = scorer_next(run, &req[0]);
    }
}

/* Only optional scorers: at least one must hold the document. MaxScore: the scorers whose summed
 * bounds cannot beat the threshold (a prefix by bound) only complete candidates of the others. */
static void run_optional(evaluation *e, bool exhaustive) {
    ranking_run *run = e->run;
    scorer *s = e->scorers;
    uint32_t n = e->num_scorers;
    double *prefix = run->scratch_bounds; /* prefix[i]: summed bounds of scorers 0..i-1 */
    prefix[0] = 0.0;
    for (uint32_t i = 0; i < n; i++) prefix[i + 1] = prefix[i] + s[i].max_score;
    uint32_t first_essential = 0;
    for (;;) {
        if (!exhaustive)
            while (first_essential < n && ranking_bound_fails(prefix[first_essential + 1], &run->topk))
                first_essential++;
        if (first_essential == n) return;
        uint32_t doc = ISN_DOC_END;
        for (uint32_t i = first_essential; i < n; i++)
            if (s[i].doc < doc) doc = s[i].doc;
        if (doc == ISN_DOC_END) return;
        if (ranking_should_stop(run, doc)) return;
        bool admit = admitted(e, doc);
        double score = 0.0;
        for (uint32_t i = first_essential; i < n; i++)
            if (s[i].doc == doc) {
                if (admit) score += scorer_score(e, &s[i], doc);
                scorer_next(run, &s[i]);
            }
        if (!admit) continue;
        run->matched++;
        bool pruned = false;
        for (uint32_t i = first_essential; i-- > 0;) {
            if (!exhaustive && ranking_bound_fails(score + prefix[i + 1], &run->topk)) {
                pruned = true;
                break;
            }
            if (scorer_next_geq(run, &s[i], doc) == doc) score += scorer_score(e, &s[i], doc);
        }
        if (pruned) continue;
        run->docs_evaluated++;
        isn_topk_offer(&run->topk, doc, (float)score);
    }
}

int ranking_structured_search(isn_searcher *searcher, const isn_query *query, const isn_search_options *options,
                              uint64_t num_docs, bool exhaustive, ranking_run *run, char *err, size_t err_len) {
    const isn_query_structure *tree = query->structure;
    const isn_index_info *info = isn_index_get_info(searcher->index);
    evaluation e = {.searcher = searcher, .index = searcher->index, .query = query, .tree = tree, .run = run,
                    .num_docs = num_docs, .norms = run->norms, .k1_plus_1 = searcher->k1_plus_1, .bm25 = info->bm25,
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
    for (uint32_t c = 0; c < tree->num_clauses && !info->has_positions; c++)
        if (!whole_document_term(&clauses[c]) && !clauses[c].missing) {
            isn_error(err, err_len, "phrases and field: clauses need positions, and this index has none (built with "
                                    "--no-positions)");
            return -1;
        }
    bool and_mode = options->mode == ISN_MODE_AND;
    uint32_t max_phrase_terms = 1;
    uint32_t lead_count = 0, lead_room = 0;
    int lead = leading_filter(&e, &lead_count, &lead_room);
    size_t needed = bytes_needed(&e, &max_phrase_terms) + ranking_arena_size((tree->num_clauses + 2) * sizeof(double)) +
                    ranking_arena_size(sizeof(scorer)) + ranking_arena_size((size_t)lead_room * sizeof(uint32_t)) +
                    ranking_arena_size(tree->num_filters * sizeof(ranking_filter));
    if (ranking_arena_reset(&searcher->arena, needed) != 0) {
        isn_error(err, err_len, "out of memory for a query of %u clauses", tree->num_clauses);
        return -1;
    }
    ranking_arena *arena = &searcher->arena;
    e.scorers = ranking_arena_take(arena, (tree->num_clauses + 1) * sizeof(scorer));
    e.excluders = ranking_arena_take(arena, tree->num_clauses * sizeof(scorer));
    run->scratch_bounds = ranking_arena_take(arena, (tree->num_clauses + 2) * sizeof(double));
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
    bool need_optional = false;
    if (lead >= 0 && (double)lead_count < RANKING_FILTER_LEADS_BELOW * (double)walked) {
        scorer *s = &e.scorers[e.num_scorers++];
        uint32_t count;
        memset(s, 0, sizeof *s);
        s->docs = filter_docs(&e, &e.filters[lead], &count, NULL);
        s->size = count;
        s->doc = count ? s->docs[0] : ISN_DOC_END;
        s->filter = s->required = true;
        need_optional = num_required == 0;
        num_required++;
        /* its documents hold it: the others are what each candidate is still tested for */
        ranking_filter *rest = ranking_arena_take(arena, tree->num_filters * sizeof(ranking_filter));
        uint32_t kept = 0;
        for (uint32_t f = 0; f < e.num_filters; f++)
            if (f != (uint32_t)lead) rest[kept++] = e.filters[f];
        e.filters = rest;
        e.num_filters = kept;
    }
    if (options->first_doc)
        for (uint32_t i = 0; i < e.num_scorers; i++) scorer_next_geq(run, &e.scorers[i], options->first_doc);
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
    if (num_required) run_required(&e, num_required, need_optional, exhaustive);
    else run_optional(&e, exhaustive);
    return 0;
}
