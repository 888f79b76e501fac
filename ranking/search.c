/* isn_search: validates options, prepares cursors and term weights, runs one algorithm, sorts hits. */
#include <math.h>
#include <string.h>

#include "ranking/arena.h"
#include "ranking/ranking_internal.h"

/* A prior weight the index can take: finite and >= 0; above 0, finite static scores whose weighted
 * values stay finite in float. */
static int validate_prior(const isn_index *index, float weight, char *err, size_t err_len) {
    if (!(weight >= 0.0f) || isinf(weight))
        return isn_error(err, err_len, "prior_weight must be a finite weight >= 0 (0 = no static prior), got %g",
                         (double)weight);
    if (weight == 0.0f)
        return 0;
    uint32_t bad;
    if (!isn_index_get_info(index)->has_static_scores)
        return isn_error(err, err_len,
                         "prior_weight %g needs static scores, and this index has none (isn-index build --static-score "
                         "FIELD)",
                         (double)weight);
    if (!isn_index_static_scores_finite(index, &bad))
        return isn_error(err, err_len, "prior_weight %g needs finite static scores; document %u's is %g", (double)weight,
                         bad, (double)isn_index_static_score(index, bad));
    float magnitude = isn_index_static_score_magnitude(index);
    if (isinf(weight * magnitude))
        return isn_error(err, err_len, "prior_weight %g times the index's largest static score magnitude %g overflows a float",
                         (double)weight, (double)magnitude);
    return 0;
}

/* The prior a run adds (validate_prior passed): none at weight 0 or without documents. */
static void use_prior(const isn_searcher *searcher, const isn_search_options *options, ranking_run *run) {
    if (options->prior_weight == 0.0f || searcher->index_num_docs == 0)
        return;
    run->prior_bounds = isn_index_prior_bounds(searcher->index);
    run->prior = run->prior_bounds ? isn_index_static_scores(searcher->index) : NULL;
    run->prior_weight = options->prior_weight;
    run->prior_docs = searcher->index_num_docs;
}

static int validate(const isn_searcher *searcher, const isn_query *query, const isn_search_options *options,
                    char *err, size_t err_len) {
    if (options->mode != ISN_MODE_OR && options->mode != ISN_MODE_AND) {
        isn_error(err, err_len, "unknown search mode %d (expected OR or AND)", (int)options->mode);
        return -1;
    }
    if ((unsigned)options->algo >= ISN_ALGO_COUNT) {
        isn_error(err, err_len, "unknown ranking algorithm %d", (int)options->algo);
        return -1;
    }
    if (options->k == 0 || options->k > ISN_MAX_K) {
        isn_error(err, err_len, "k must be between 1 and %d, got %u", ISN_MAX_K, options->k);
        return -1;
    }
    isn_mode algo_mode = isn_algo_mode(options->algo, options->mode);
    if (algo_mode != options->mode) {
        isn_error(err, err_len, "algorithm '%s' implements %s mode but the search asks for %s mode",
                  isn_algo_name(options->algo), algo_mode == ISN_MODE_OR ? "OR" : "AND",
                  options->mode == ISN_MODE_OR ? "OR" : "AND");
        return -1;
    }
    if (!(options->initial_threshold >= 0.0f) || isinf(options->initial_threshold)) {
        isn_error(err, err_len, "initial_threshold must be a finite score >= 0 (0 = none), got %g",
                  (double)options->initial_threshold);
        return -1;
    }
    if (validate_prior(searcher->index, options->prior_weight, err, err_len) != 0)
        return -1;
    if (query->num_terms > ISN_MAX_QUERY_TERMS) {
        isn_error(err, err_len, "query has %u terms, more than the limit of %d", query->num_terms,
                  ISN_MAX_QUERY_TERMS);
        return -1;
    }
    if (query->num_terms > 0 && query->terms == NULL) {
        isn_error(err, err_len, "query has %u terms but no term array", query->num_terms);
        return -1;
    }
    uint32_t index_terms = isn_index_get_info(searcher->index)->num_terms;
    for (uint32_t i = 0; i < query->num_terms; i++) {
        const isn_query_term *term = &query->terms[i];
        if (term->term_id >= index_terms) {
            isn_error(err, err_len, "query term %u has id %u but the index has %u terms", i,
                      term->term_id, index_terms);
            return -1;
        }
        if (term->count == 0) {
            isn_error(err, err_len, "query term %u (id %u) has count 0", i, term->term_id);
            return -1;
        }
    }
    return 0;
}

/* Lays out this query's memory in the arena and opens one cursor per term. */
static int prepare_run(isn_searcher *searcher, const isn_query *query, uint64_t num_docs, uint32_t first_doc,
                       uint32_t buffer_keys, ranking_run *run) {
    uint32_t n = query->num_terms;
    size_t needed = ranking_arena_size(n * sizeof(isn_cursor)) + 2 * ranking_arena_size(n * sizeof(ranking_term)) +
                    2 * ranking_arena_size(n * sizeof(double)) + ranking_arena_size(n * sizeof(ranking_window_term)) +
                    ranking_arena_size((size_t)buffer_keys * sizeof(uint64_t));
    if (ranking_arena_reset(&searcher->arena, needed) != 0)
        return -1;
    isn_cursor *cursors = ranking_arena_take(&searcher->arena, n * sizeof(isn_cursor));
    run->terms = ranking_arena_take(&searcher->arena, n * sizeof(ranking_term));
    run->scratch_terms = ranking_arena_take(&searcher->arena, n * sizeof(ranking_term));
    run->scratch_bounds = ranking_arena_take(&searcher->arena, n * sizeof(double));
    run->completion_bounds = ranking_arena_take(&searcher->arena, n * sizeof(double));
    run->window_terms = ranking_arena_take(&searcher->arena, n * sizeof(ranking_window_term));
    if (buffer_keys)
        run->buffer.keys = ranking_arena_take(&searcher->arena, (size_t)buffer_keys * sizeof(uint64_t));
    run->num_terms = n;
    run->window = &searcher->window;
    run->norms = searcher->norms;
    run->k1_plus_1 = searcher->k1_plus_1;
    for (uint32_t i = 0; i < n; i++) {
        const isn_query_term *term = &query->terms[i];
        isn_term_stats stats;
        isn_index_term_stats(searcher->index, term->term_id, &stats);
        isn_cursor_open(&cursors[i], searcher->index, term->term_id);
        if (first_doc > 0)
            isn_cursor_next_geq(&cursors[i], first_doc);
        run->blocks_decoded += cursors[i].decoded_block != UINT32_MAX;
        float weight = isn_bm25_idf(num_docs, term->df) * (float)term->count;
        run->terms[i] = (ranking_term){
            .cursor = &cursors[i], .weight = weight, .max_score = weight * stats.max_tf_part};
    }
    return 0;
}

/* Early termination: the run stops once early_stop_fraction of the time to the deadline has passed. */
static void start_clock(ranking_run *run, const isn_search_options *options) {
    if (!options->deadline_ns)
        return;
    uint64_t start = isn_now_ns();
    double fraction = options->early_stop_fraction > 0.0 && options->early_stop_fraction <= 1.0
                          ? options->early_stop_fraction
                          : 1.0;
    run->stop_ns = options->deadline_ns <= start
                       ? 1
                       : start + (uint64_t)(fraction * (double)(options->deadline_ns - start));
    run->until_clock_check = RANKING_CLOCK_CHECK_EVERY;
}

static void fill_stats(isn_search_stats *stats, const ranking_run *run) {
    stats->postings_scored = run->postings_scored;
    stats->docs_evaluated = run->docs_evaluated;
    stats->blocks_decoded = run->blocks_decoded;
    stats->matched_lower_bound = run->matched;
    stats->complete = !run->stopped;
    stats->incomplete_reason = run->stopped ? "deadline" : "";
    stats->exact_below_doc = run->stopped ? run->stopped_before_doc : ISN_DOC_END;
    stats->ended_by_bound = run->bound_ended;
}

/* Early termination by the index's score bounds (ranking_bounds_settle): for the index's own norms and
 * a top k kept in the heap, the query's summed term weights give the bound's scale. */
static void use_score_bounds(const isn_searcher *searcher, const isn_search_options *options, bool buffered,
                             ranking_run *run) {
    const float *bounds = isn_index_score_bounds(searcher->index);
    /* a prior's bounds fall with its suffix maxima on any index, so with one the end needs no score bounds
     * (the query's whole BM25 bound then stands in), and the buffer's k-th score serves as well */
    if ((!bounds && !run->prior) || options->ignore_score_bounds || options->doc_norms || (buffered && !run->prior))
        return;
    double weight_sum = 0.0, max_sum = 0.0;
    for (uint32_t i = 0; i < run->num_terms; i++) {
        weight_sum += run->terms[i].weight;
        max_sum += run->terms[i].max_score;
    }
    if (bounds) {
        run->bound_scale = isn_index_score_bound_scale(searcher->index, weight_sum, 0.0f);
        run->score_bounds = run->bound_scale > 0.0 ? bounds : NULL;
    }
    if (!run->score_bounds && run->prior)
        run->bound_scale = max_sum * RANKING_BOUND_SLACK;
    run->settles = run->score_bounds || run->prior;
    run->bound_docs = searcher->index_num_docs;
}

/* A query tree: the exhaustive algorithms (or / and) score every match, the others prune (MaxScore over
 * the tree's clauses). A caller's threshold seed is a bag of words' and bounds nothing here; caller
 * norms make the index's bounds invalid, so they too score exhaustively. */
static int structured(isn_searcher *searcher, const isn_query *query, const isn_search_options *options,
                      uint64_t num_docs, isn_algo algo, isn_hit *hits, uint32_t *num_hits, isn_search_stats *stats,
                      char *err, size_t err_len) {
    ranking_run run;
    memset(&run, 0, sizeof run);
    run.norms = options->doc_norms ? options->doc_norms : searcher->norms;
    run.k1_plus_1 = searcher->k1_plus_1;
    run.window = &searcher->window;
    use_prior(searcher, options, &run);
    start_clock(&run, options);
    isn_topk_init(&run.topk, hits, options->k);
    bool exhaustive = algo == ISN_ALGO_OR || algo == ISN_ALGO_AND || options->doc_norms != NULL;
    if (ranking_structured_search(searcher, query, options, num_docs, exhaustive, &run, err, err_len) != 0)
        return -1;
    isn_topk_sort(&run.topk);
    *num_hits = run.topk.size;
    if (stats != NULL) {
        /* what ran: the exhaustive evaluation, or MaxScore over the tree's clauses */
        stats->algo_used = !exhaustive ? ISN_ALGO_MAXSCORE : options->mode == ISN_MODE_AND ? ISN_ALGO_AND : ISN_ALGO_OR;
        fill_stats(stats, &run);
    }
    return 0;
}

static int search(isn_searcher *searcher, const isn_query *query, const isn_search_options *options, isn_hit *hits,
                  uint32_t *num_hits, isn_search_stats *stats, char *err, size_t err_len) {
    if (searcher == NULL || query == NULL || options == NULL || hits == NULL || num_hits == NULL) {
        isn_error(err, err_len, "isn_search: searcher, query, options, hits and num_hits must not be NULL");
        return -1;
    }
    *num_hits = 0;
    uint64_t num_docs = options->num_docs != 0 ? options->num_docs : searcher->index_num_docs;
    if (validate(searcher, query, options, err, err_len) != 0)
        return -1;
    isn_algo algo = isn_algo_resolve(options->algo, options->mode, query);
    if (options->doc_norms)
        algo = isn_algo_mode(algo, options->mode) == ISN_MODE_AND ? ISN_ALGO_AND : ISN_ALGO_OR;
    if (stats != NULL) {
        memset(stats, 0, sizeof *stats);
        stats->algo_used = algo;
        stats->complete = true;
        stats->incomplete_reason = "";
        stats->exact_below_doc = ISN_DOC_END;
    }
    if (query->structure)
        return structured(searcher, query, options, num_docs, algo, hits, num_hits, stats, err, err_len);
    if (query->num_terms == 0 || (options->mode == ISN_MODE_AND && query->num_unknown > 0))
        return 0;

    ranking_run run;
    memset(&run, 0, sizeof run);
    /* The algorithms that collect through ranking_collect get a buffer at large k. */
    bool buffered = algo == ISN_ALGO_BMM && options->k >= RANKING_BUFFER_MIN_K;
    if (prepare_run(searcher, query, num_docs, options->first_doc, buffered ? 2 * options->k : 0, &run) != 0) {
        isn_error(err, err_len, "out of memory for a query of %u terms", query->num_terms);
        return -1;
    }
    if (options->doc_norms)
        run.norms = options->doc_norms;
    use_prior(searcher, options, &run);
    use_score_bounds(searcher, options, buffered, &run);
    start_clock(&run, options);
    /* The caller's hit array is the heap: it holds k entries, and sorting it in place is the result. */
    isn_topk_init(&run.topk, hits, options->k);
    if (buffered) {
        run.buffer.capacity = 2 * options->k;
        run.buffer.k = options->k;
        run.buffer.next_compaction = options->k;
    }
    /* Only pruning needs (and uses) a threshold; the exhaustive algorithms score everything anyway. */
    bool prunes = algo == ISN_ALGO_MAXSCORE || algo == ISN_ALGO_WAND || algo == ISN_ALGO_BMW || algo == ISN_ALGO_BMM;
    if (prunes && options->initial_threshold > 0.0f)
        isn_topk_seed(&run.topk, options->initial_threshold);
    switch (algo) {
    case ISN_ALGO_OR:
        ranking_exhaustive_or(&run);
        break;
    case ISN_ALGO_AND:
        ranking_exhaustive_and(&run);
        break;
    case ISN_ALGO_MAXSCORE:
        ranking_maxscore(&run);
        break;
    case ISN_ALGO_WAND:
        ranking_wand(&run);
        break;
    case ISN_ALGO_BMW:
        ranking_block_max_wand(&run);
        break;
    case ISN_ALGO_BMAND:
        ranking_block_max_and(&run);
        break;
    case ISN_ALGO_BMM:
        ranking_block_max_maxscore(&run);
        break;
    default:
        isn_error(err, err_len, "algorithm '%s' cannot run", isn_algo_name(algo));
        return -1;
    }
    if (buffered)
        ranking_buffer_finish(&run);
    else
        isn_topk_sort(&run.topk);
    *num_hits = run.topk.size;
    if (stats != NULL)
        fill_stats(stats, &run);
    return 0;
}

int isn_search(isn_searcher *searcher, const isn_query *query, const isn_search_options *options, isn_hit *hits,
               uint32_t *num_hits, isn_search_stats *stats, char *err, size_t err_len) {
    if (searcher != NULL) /* a search that lays nothing out (no terms) must not report the last one's overrun */
        searcher->arena.used = searcher->arena.reserved = 0;
    int rc = search(searcher, query, options, hits, num_hits, stats, err, err_len);
    if (rc == 0 && stats != NULL)
        stats->arena_overrun_bytes = ranking_arena_overrun(&searcher->arena);
    return rc;
}
