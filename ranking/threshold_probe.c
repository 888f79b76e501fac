/* The threshold probe: a cheap, exact lower bound of a query's final k-th score in OR mode, for the
 * scheduler's cost model (what the pruning will skip) and as a seed for the search itself
 * (isn_search_options.initial_threshold) or the GPU's (isn_gpu_request.threshold). The rarest lists, while
 * their postings fit the probe's budget (the rarest alone is cut there), drive a merge (under filters, a drive
 * that runs out before they kept k documents is followed by the next list's: drive_again); each of their
 * documents gets its full BM25 score, the other lists probed with next_geq in decreasing order of their
 * bounds and no further once the document cannot enter the probe's top k (that only saves work: the k-th
 * best of the driven documents is the same). Every score is a real document's, so the k-th best is a bound.
 *
 * A query tree of whole-document terms is probed as what it matches: only documents its filters keep and
 * its excluded terms miss are scored, and a document must hold every required term (the rarest required list
 * alone drives: no document outside it matches). A tree's k-th best is then the k-th of documents the tree
 * matches, a bound of its own answer's k-th score, and never the k-th of documents its filters drop (which
 * would lie above it). Filtered documents are only tested, not scored, so a tree with filters reads up to
 * ISN_PROBE_VISITS driven documents to score ISN_PROBE_POSTINGS of them. */
#include "ranking/ranking_internal.h"

/* The lists a probe reads: the scoring ones (a bag's terms, a tree's optional and required clauses) and a
 * tree's excluded ones, its filters, and how many driven documents it may read and score. */
typedef struct {
    uint32_t n;
    isn_cursor cursors[ISN_PROBE_MAX_TERMS];
    uint32_t term_ids[ISN_PROBE_MAX_TERMS]; /* to open a list's cursor again (a second drive) */
    float weights[ISN_PROBE_MAX_TERMS];
    double bounds[ISN_PROBE_MAX_TERMS];
    bool required[ISN_PROBE_MAX_TERMS];
    bool any_required;
    uint32_t num_excluded;
    isn_cursor excluded[ISN_PROBE_MAX_EXCLUDED];
    uint32_t excluded_ids[ISN_PROBE_MAX_EXCLUDED];
    const ranking_filter *filters;
    const int64_t *filter_values;
    uint32_t num_filters;
    uint32_t visit_budget; /* driven documents read at most (ISN_PROBE_POSTINGS for a bag) */
} probe_lists;

/* Opens list i of the probe on term_id weighted by weight; false for a list the probe cannot read (an
 * unknown term id: the search will refuse it) or that is empty (*empty set). */
static bool open_list(const isn_index *index, probe_lists *p, uint32_t i, uint32_t term_id, float weight) {
    isn_term_stats stats;
    isn_index_term_stats(index, term_id, &stats);
    if (stats.num_blocks == 0)
        return false;
    isn_cursor_open(&p->cursors[i], index, term_id);
    p->term_ids[i] = term_id;
    p->weights[i] = weight;
    p->bounds[i] = (double)weight * stats.max_tf_part;
    return true;
}

/* A bag of words's lists; false when it has no probe. */
static bool bag_lists(const isn_index *index, const isn_query *query, probe_lists *p) {
    const isn_index_info *info = isn_index_get_info(index);
    uint32_t n = query->num_terms;
    if (n == 0 || n > ISN_PROBE_MAX_TERMS)
        return false;
    p->n = n;
    p->any_required = false;
    p->num_excluded = 0;
    p->num_filters = 0;
    p->visit_budget = ISN_PROBE_POSTINGS;
    for (uint32_t i = 0; i < n; i++) {
        if (query->terms[i].term_id >= info->num_terms)
            return false;
        p->required[i] = false;
        float weight = isn_bm25_idf(info->num_docs, query->terms[i].df) * (float)query->terms[i].count;
        if (!open_list(index, p, i, query->terms[i].term_id, weight))
            return false;
    }
    return true;
}

/* A query tree's lists, as the tree scores them in OR mode (structured_search.c's clause weights): every
 * clause a whole-document term, at most ISN_PROBE_MAX_TERMS scoring and ISN_PROBE_MAX_EXCLUDED excluded
 * ones; false when it has no probe (phrases and field: clauses, too many clauses, a required clause no
 * document holds, no clause that scores). */
static bool tree_lists(const isn_index *index, const isn_query *query, probe_lists *p) {
    const isn_index_info *info = isn_index_get_info(index);
    isn_tree_view view;
    isn_query_structure_view(query->structure, &view);
    p->n = 0;
    p->any_required = false;
    p->num_excluded = 0;
    p->filters = view.filters;
    p->filter_values = view.values;
    p->num_filters = view.num_filters;
    p->visit_budget = view.num_filters ? ISN_PROBE_VISITS : ISN_PROBE_POSTINGS;
    for (uint32_t c = 0; c < view.num_clauses; c++) {
        const isn_tree_clause *clause = &view.clauses[c];
        if (clause->phrase || clause->field != ISN_TREE_WHOLE_DOCUMENT || clause->num_terms != 1)
            return false;
        const bool required = clause->occur == ISN_OCCUR_MUST, excluded = clause->occur == ISN_OCCUR_MUST_NOT;
        if (clause->missing) {
            if (required)
                return false; /* it matches no document */
            continue;
        }
        const isn_tree_term *term = &view.terms[clause->first_term];
        if (term->term_id >= info->num_terms)
            return false;
        if (excluded) {
            if (p->num_excluded == ISN_PROBE_MAX_EXCLUDED)
                return false;
            isn_term_stats stats;
            isn_index_term_stats(index, term->term_id, &stats);
            if (stats.num_blocks > 0) {
                p->excluded_ids[p->num_excluded] = term->term_id;
                isn_cursor_open(&p->excluded[p->num_excluded++], index, term->term_id);
            }
            continue;
        }
        if (p->n == ISN_PROBE_MAX_TERMS || term->query_term >= query->num_terms)
            return false;
        const uint32_t i = p->n++;
        p->required[i] = required;
        p->any_required = p->any_required || required;
        float weight = isn_bm25_idf(info->num_docs, query->terms[term->query_term].df) * (float)clause->count;
        if (!open_list(index, p, i, term->term_id, weight)) {
            if (required)
                return false;
            p->n--; /* an empty optional list adds nothing */
        }
    }
    return p->n > 0;
}

/* Whether a driven document is one the tree matches as far as its filters and excluded terms say (the
 * required terms are checked where their lists are read). */
static bool admitted(const isn_index *index, probe_lists *p, uint32_t doc) {
    if (p->num_filters && !ranking_filters_accept(index, p->filters, p->num_filters, p->filter_values, doc))
        return false;
    for (uint32_t i = 0; i < p->num_excluded; i++) {
        isn_cursor *cursor = &p->excluded[i];
        if (cursor->doc < doc)
            isn_cursor_next_geq(cursor, doc);
        if (cursor->doc == doc)
            return false;
    }
    return true;
}

/* What scoring a driven document reads besides its lists: the lists not driven, probed largest bound first, and
 * what they can add from each on (rest); the top k it is offered to; the prior. */
typedef struct {
    const uint32_t *probed;
    uint32_t num_probed;
    const double *rest;
    const float *norms;
    float k1_plus_1;
    const ranking_run *prior;
    isn_topk *topk;
} probe_scoring;

/* An admitted driven document whose driven lists gave `score`: the probed lists add theirs, no further once it
 * cannot enter the top k (that only saves work: the k-th best is the same), and it is offered unless a required
 * list misses it. */
static void offer_driven(probe_lists *p, const probe_scoring *s, uint32_t doc, double score) {
    isn_topk *topk = s->topk;
    const bool full = topk->size == topk->capacity;
    bool matches = true;
    /* without a prior the pruning below stays as it was; with one, the document's own is added */
    const double own_prior = ranking_prior_of(s->prior, doc);
    uint32_t j = 0;
    for (; j < s->num_probed && matches && !(full && score + s->rest[j] + own_prior <= topk->entries[0].score); j++) {
        const uint32_t i = s->probed[j];
        isn_cursor *cursor = &p->cursors[i];
        if (cursor->doc < doc)
            isn_cursor_next_geq(cursor, doc);
        if (cursor->doc == doc)
            score += (double)(p->weights[i] * isn_bm25_tf_part(s->k1_plus_1, isn_cursor_freq(cursor), s->norms[doc]));
        else
            matches = !p->required[i];
    }
    if (j == s->num_probed && matches)
        isn_topk_offer(topk, doc, ranking_final_score(s->prior, doc, score));
}

/* Under filters a drive can run out of documents before they kept k of them (a rare word beside a common one),
 * with most of the visit budget unspent: the rarest list not driven then drives alone from its first document,
 * cut at the budget, past the documents the first drive visited (each list's cursor opened again, the first
 * drive's to skip those). Its documents' scores are as whole as the first drive's, so the k-th best of both is
 * still a bound. */
static void drive_again(const isn_index *index, probe_lists *p, const bool driver[], const probe_scoring *s,
                        uint32_t *visited, uint32_t *scored) {
    uint32_t next = s->probed[0];
    for (uint32_t j = 1; j < s->num_probed; j++)
        if (p->cursors[s->probed[j]].df < p->cursors[next].df)
            next = s->probed[j];
    for (uint32_t i = 0; i < p->n; i++)
        isn_cursor_open(&p->cursors[i], index, p->term_ids[i]);
    for (uint32_t i = 0; i < p->num_excluded; i++)
        isn_cursor_open(&p->excluded[i], index, p->excluded_ids[i]);
    isn_cursor again; /* `next` is also probed, from its own cursor */
    isn_cursor_open(&again, index, p->term_ids[next]);
    for (uint32_t doc = again.doc; doc != ISN_DOC_END && *scored < ISN_PROBE_POSTINGS && *visited < p->visit_budget;
         doc = isn_cursor_next(&again)) {
        bool seen = false;
        for (uint32_t i = 0; i < p->n && !seen; i++) {
            if (!driver[i])
                continue;
            if (p->cursors[i].doc < doc)
                isn_cursor_next_geq(&p->cursors[i], doc);
            seen = p->cursors[i].doc == doc;
        }
        ++*visited;
        if (seen || !admitted(index, p, doc))
            continue;
        offer_driven(p, s, doc, 0.0);
        ++*scored;
    }
}

double isn_threshold_probe(const isn_index *index, const isn_query *query, uint32_t k, const double *levels,
                           uint32_t num_levels, double *passed_share, uint32_t *docs_scored) {
    return isn_threshold_probe_prior(index, query, k, 0.0f, levels, num_levels, passed_share, docs_scored);
}

double isn_threshold_probe_prior(const isn_index *index, const isn_query *query, uint32_t k, float prior_weight,
                                 const double *levels, uint32_t num_levels, double *passed_share,
                                 uint32_t *docs_scored) {
    *docs_scored = 0;
    for (uint32_t i = 0; i < num_levels; i++)
        passed_share[i] = 1.0;
    if (k == 0 || k > ISN_PROBE_MAX_K || !(prior_weight >= 0.0f) || isinf(prior_weight))
        return 0.0;
    /* the probe scores as the search does (search.c's use_prior): a weight the search refuses has no probe */
    ranking_run prior = {.prior_weight = prior_weight};
    if (prior_weight > 0.0f) {
        prior.prior_bounds = isn_index_prior_bounds(index);
        prior.prior = isn_index_static_scores(index);
        prior.prior_docs = isn_index_get_info(index)->num_docs;
        if (!prior.prior_bounds || isinf(prior_weight * isn_index_static_score_magnitude(index)))
            return 0.0;
    }
    probe_lists p;
    if (!(query->structure ? tree_lists(index, query, &p) : bag_lists(index, query, &p)))
        return 0.0;
    const uint32_t n = p.n;
    const isn_index_info *info = isn_index_get_info(index);
    const float *norms = isn_index_doc_norms(index);
    float k1_plus_1 = info->bm25.k1 + 1.0f;
    isn_cursor *cursors = p.cursors;
    bool driver[ISN_PROBE_MAX_TERMS] = {false};
    uint32_t drivers = 0;
    uint64_t driven = 0;
    if (p.any_required) { /* every match holds the rarest required term: its list alone drives */
        uint32_t rarest = n;
        for (uint32_t i = 0; i < n; i++)
            if (p.required[i] && (rarest == n || cursors[i].df < cursors[rarest].df))
                rarest = i;
        driver[rarest] = true;
        drivers = 1;
    }
    while (!p.any_required && drivers < n) {
        uint32_t rarest = n;
        for (uint32_t i = 0; i < n; i++)
            if (!driver[i] && (rarest == n || cursors[i].df < cursors[rarest].df))
                rarest = i;
        if (drivers > 0 && driven + cursors[rarest].df > p.visit_budget)
            break;
        driver[rarest] = true;
        drivers++;
        driven += cursors[rarest].df;
    }
    /* probed[]: the other lists, largest bound first; rest[j]: the most probed[j..] can add. */
    uint32_t probed[ISN_PROBE_MAX_TERMS], num_probed = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (driver[i])
            continue;
        uint32_t j = num_probed++;
        while (j > 0 && p.bounds[probed[j - 1]] < p.bounds[i]) {
            probed[j] = probed[j - 1];
            j--;
        }
        probed[j] = i;
    }
    double rest[ISN_PROBE_MAX_TERMS + 1];
    rest[num_probed] = 0.0;
    for (uint32_t j = num_probed; j-- > 0;)
        rest[j] = rest[j + 1] + p.bounds[probed[j]] * RANKING_BOUND_SLACK;
    /* Documents come in increasing id, as the search offers them: the same heap keeps the same k. */
    isn_hit entries[ISN_PROBE_MAX_K];
    isn_topk topk;
    isn_topk_init(&topk, entries, k);
    const probe_scoring scoring = {probed, num_probed, rest, norms, k1_plus_1, &prior, &topk};
    uint32_t scored = 0, visited = 0, passed = 0;
    uint32_t doc = ISN_DOC_END;
    for (uint32_t i = 0; i < n; i++)
        if (driver[i] && cursors[i].doc < doc)
            doc = cursors[i].doc;
    while (doc != ISN_DOC_END && scored < ISN_PROBE_POSTINGS && visited < p.visit_budget) {
        const bool admit = admitted(index, &p, doc);
        double score = 0.0;
        uint32_t next_doc = ISN_DOC_END;
        for (uint32_t i = 0; i < n; i++) {
            isn_cursor *cursor = &cursors[i];
            if (!driver[i])
                continue;
            if (cursor->doc == doc) {
                if (admit)
                    score += (double)(p.weights[i] *
                                      isn_bm25_tf_part(k1_plus_1, isn_cursor_freq(cursor), norms[doc]));
                isn_cursor_next(cursor);
            }
            if (cursor->doc < next_doc)
                next_doc = cursor->doc;
        }
        visited++;
        if (admit) {
            offer_driven(&p, &scoring, doc, score);
            while (topk.size == k && passed < num_levels && entries[0].score > levels[passed])
                passed_share[passed++] = ((double)doc + 1.0) / info->num_docs;
            scored++;
        }
        doc = next_doc;
    }
    /* (the second drive's documents come in id order again: no share of the collection is read off them; a tree
     * with a required term has none: its rarest required list drove, and every match is in it) */
    if (p.num_filters && !p.any_required && topk.size < k && doc == ISN_DOC_END && num_probed > 0)
        drive_again(index, &p, driver, &scoring, &visited, &scored);
    *docs_scored = scored;
    /* a prior may take scores to 0 or below: no seed then (initial_threshold takes none) */
    return topk.size == k && entries[0].score > 0.0f ? entries[0].score : 0.0;
}
