/* How early a top-k could stop on an index in --order global (issue 41): for each query, its exact k-th
 * score (an exhaustive search) and the first document id from which no later document can reach it,
 * under two safe bounds on the documents after an id:
 *  - the index's own (what the CPU and the GPU stop by today): the query's summed term weights times
 *    score_bounds[id], the suffix maximum of each document's best term part (isn_index_score_bound);
 *  - the tightest a block index can know: per query term, the largest weight * tf part among its
 *    postings in blocks (of 128) that reach past the id, summed over the terms.
 * The pruned list cache can only win over whole lists where queries stop early (its prefixes settle
 * them): counted are the queries that need at most half of their postings. Bag-of-words queries (OR).
 * With --prior-weight W the queries score BM25 + W x static score (isn_search_options.prior_weight) and
 * both bounds add W x the static scores' suffix maximum from the id (isn_index_prior_bounds), rounded up as
 * the search rounds it (isn_prior_bound); the JSON reports the weight.
 * usage: bench_settle INDEX_DIR QUERIES.tsv [--k N] [--max-queries N] [--prior-weight W]
 * Prints one JSON object: per bound the quartiles of the stopping id as a fraction of the documents,
 * the queries that need at most half of their postings, and the mean fraction of postings they need;
 * then the mean fraction by the query's number of known terms (1, 2, 3, 4, 5+), under each bound. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "ranking/ranking.h"

#define BLOCK_POSTINGS 128u

typedef struct {
    uint32_t *docs;
    float *block_suffix_max; /* per posting: the largest contribution in its block and every later one */
    uint32_t count, capacity;
} term_postings;

#define BY_TERMS 5 /* queries of 1, 2, 3, 4 and 5 or more known terms */

typedef struct {
    double *index_bound, *block_bound;  /* stopping id / documents, per query */
    uint32_t by_terms_queries[BY_TERMS];
    double by_terms_read_index[BY_TERMS], by_terms_read_block[BY_TERMS];
    double read_index, read_block;      /* summed fractions of postings before the stopping id */
    uint32_t half_index, half_block, queries; /* queries needing at most half of their postings */
} settle_totals;

static void die(const char *what) {
    fprintf(stderr, "bench_settle: %s\n", what);
    exit(1);
}

static void collect(const isn_index *ix, const isn_query_term *term, float weight, term_postings *tp) {
    const float *norms = isn_index_doc_norms(ix);
    const float k1_plus_1 = isn_index_get_info(ix)->bm25.k1 + 1.0f;
    isn_cursor cursor;
    isn_cursor_open(&cursor, ix, term->term_id);
    tp->count = 0;
    if (!tp->capacity) {
        tp->capacity = 4096;
        tp->docs = malloc(tp->capacity * sizeof *tp->docs);
        tp->block_suffix_max = malloc((tp->capacity + 1) * sizeof *tp->block_suffix_max);
        if (!tp->docs || !tp->block_suffix_max) die("out of memory");
    }
    for (uint32_t d = cursor.doc; d != ISN_DOC_END; d = isn_cursor_next(&cursor)) {
        if (tp->count == tp->capacity) {
            tp->capacity *= 2;
            tp->docs = realloc(tp->docs, tp->capacity * sizeof *tp->docs);
            tp->block_suffix_max = realloc(tp->block_suffix_max, (tp->capacity + 1) * sizeof *tp->block_suffix_max);
            if (!tp->docs || !tp->block_suffix_max) die("out of memory");
        }
        tp->docs[tp->count] = d;
        tp->block_suffix_max[tp->count++] = weight * isn_bm25_tf_part(k1_plus_1, isn_cursor_freq(&cursor), norms[d]);
    }
    float later = 0.0f;
    uint32_t first_of_last = tp->count ? (tp->count - 1) / BLOCK_POSTINGS * BLOCK_POSTINGS : 0;
    for (uint32_t start = first_of_last; tp->count; start -= BLOCK_POSTINGS) {
        uint32_t end = start + BLOCK_POSTINGS < tp->count ? start + BLOCK_POSTINGS : tp->count;
        float block = 0.0f;
        for (uint32_t i = start; i < end; i++) block = fmaxf(block, tp->block_suffix_max[i]);
        later = fmaxf(later, block);
        for (uint32_t i = start; i < end; i++) tp->block_suffix_max[i] = later;
        if (start == 0) break;
    }
    tp->block_suffix_max[tp->count] = 0.0f;
}

/* The first posting of tp with doc >= doc. */
static uint32_t first_at(const term_postings *tp, uint32_t doc) {
    uint32_t lo = 0, hi = tp->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (tp->docs[mid] < doc) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static double block_bound_at(const term_postings *tps, uint32_t n, uint32_t doc) {
    double sum = 0.0;
    for (uint32_t t = 0; t < n; t++) sum += tps[t].block_suffix_max[first_at(&tps[t], doc)];
    return sum;
}

/* The first id from which bound(id) < theta; bound non-increasing in id (num_docs when none). */
static uint32_t stopping_id(uint32_t num_docs, double theta, double (*bound)(const void *, uint32_t), const void *ctx) {
    uint32_t lo = 0, hi = num_docs;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (bound(ctx, mid) < theta) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

typedef struct {
    const float *bounds;
    double scale;
    const term_postings *tps;
    uint32_t num_terms;
    const float *prior_bounds; /* NULL without --prior-weight */
    float prior_weight;
} bound_ctx;

static double prior_at(const bound_ctx *c, uint32_t doc) {
    return c->prior_bounds ? isn_prior_bound(c->prior_weight, c->prior_bounds[doc]) : 0.0;
}

static double index_bound(const void *ctx, uint32_t doc) {
    const bound_ctx *c = ctx;
    return c->scale * c->bounds[doc] + prior_at(c, doc);
}

static double block_bound(const void *ctx, uint32_t doc) {
    const bound_ctx *c = ctx;
    return block_bound_at(c->tps, c->num_terms, doc) + prior_at(c, doc);
}

static double postings_before(const term_postings *tps, uint32_t n, uint32_t doc) {
    uint64_t before = 0, total = 0;
    for (uint32_t t = 0; t < n; t++) {
        before += first_at(&tps[t], doc);
        total += tps[t].count;
    }
    return total ? (double)before / (double)total : 0.0;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_bound(const char *name, double *fractions, uint32_t queries, uint32_t at_most_half, double read) {
    qsort(fractions, queries, sizeof *fractions, by_value);
    printf("\"%s\": {\"stop_at_docs_quartiles\": [%.4f, %.4f, %.4f], \"queries_reading_at_most_half\": %u, "
           "\"postings_read_mean\": %.4f}",
           name, fractions[queries / 4], fractions[queries / 2], fractions[3 * queries / 4], at_most_half,
           read / queries);
}

int main(int argc, char **argv) {
    uint32_t k = 10, max_queries = 1000;
    float prior_weight = 0.0f;
    static const char usage[] = "usage: bench_settle INDEX_DIR QUERIES.tsv [--k N] [--max-queries N] [--prior-weight W]";
    static const struct option long_options[] = {{"k", required_argument, NULL, 'k'},
                                                 {"max-queries", required_argument, NULL, 'm'},
                                                 {"prior-weight", required_argument, NULL, 'p'},
                                                 {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "", long_options, NULL)) != -1;) {
        char *end;
        if (c == 'k') k = (uint32_t)atoi(optarg);
        else if (c == 'm') max_queries = (uint32_t)atoi(optarg);
        else if (c != 'p' || (prior_weight = strtof(optarg, &end), *end || end == optarg)) die(usage);
    }
    if (argc - optind != 2 || k == 0 || k > ISN_MAX_K || max_queries == 0) die(usage);
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(argv[optind], err, sizeof err);
    if (!ix) die(err);
    const float *bounds = isn_index_score_bounds(ix);
    if (!bounds) die("the index has no score bounds: build it with --order global");
    const float *prior_bounds = prior_weight != 0.0f ? isn_index_prior_bounds(ix) : NULL;
    if (prior_weight != 0.0f && !prior_bounds) die("--prior-weight needs finite static scores: build with --static-score");
    isn_query_log log;
    if (isn_query_log_read(argv[optind + 1], false, max_queries, &log, err, sizeof err) != 0) die(err);
    const uint32_t num_docs = (uint32_t)isn_index_get_info(ix)->num_docs;
    isn_searcher *searcher = isn_searcher_new(ix);
    isn_hit *hits = calloc(k, sizeof *hits);
    term_postings *tps = calloc(ISN_MAX_QUERY_TERMS, sizeof *tps);
    settle_totals st = {.index_bound = calloc(log.count, sizeof(double)), .block_bound = calloc(log.count, sizeof(double))};
    if (!searcher || !hits || !tps || !st.index_bound || !st.block_bound) die("out of memory");
    for (size_t q = 0; q < log.count; q++) {
        isn_query query;
        const char *text = log.queries[q].text;
        if (isn_query_parse(searcher, text, strlen(text), &query, err, sizeof err) != 0) die(err);
        isn_search_options options;
        isn_search_options_default(&options);
        options.k = k;
        options.algo = ISN_ALGO_OR;
        options.ignore_score_bounds = true;
        options.prior_weight = prior_weight;
        uint32_t num_hits = 0;
        if (isn_search(searcher, &query, &options, hits, &num_hits, NULL, err, sizeof err) != 0) die(err);
        if (num_hits < k) continue; /* fewer matches than k: nothing bounds the rest */
        double weight_sum = 0.0;
        for (uint32_t t = 0; t < query.num_terms; t++) {
            float weight = isn_bm25_idf(num_docs, query.terms[t].df) * (float)query.terms[t].count;
            weight_sum += weight;
            collect(ix, &query.terms[t], weight, &tps[t]);
        }
        bound_ctx ctx = {.bounds = bounds, .scale = isn_index_score_bound_scale(ix, weight_sum, 0.0f), .tps = tps,
                         .num_terms = query.num_terms, .prior_bounds = prior_bounds, .prior_weight = prior_weight};
        double theta = hits[num_hits - 1].score;
        uint32_t at_index = stopping_id(num_docs, theta, index_bound, &ctx);
        uint32_t at_block = stopping_id(num_docs, theta, block_bound, &ctx);
        st.index_bound[st.queries] = (double)at_index / num_docs;
        st.block_bound[st.queries] = (double)at_block / num_docs;
        double read_index = postings_before(tps, query.num_terms, at_index);
        double read_block = postings_before(tps, query.num_terms, at_block);
        st.half_index += read_index <= 0.5;
        st.half_block += read_block <= 0.5;
        st.read_index += read_index;
        st.read_block += read_block;
        uint32_t group = query.num_terms < BY_TERMS ? query.num_terms - 1 : BY_TERMS - 1;
        st.by_terms_queries[group]++;
        st.by_terms_read_index[group] += read_index;
        st.by_terms_read_block[group] += read_block;
        st.queries++;
    }
    if (!st.queries) die("no query has k matches");
    printf("{\"index\": \"%s\", \"documents\": %u, \"k\": %u, \"prior_weight\": %g, \"queries\": %u, ", argv[optind],
           num_docs, k, (double)prior_weight, st.queries);
    print_bound("index_score_bounds", st.index_bound, st.queries, st.half_index, st.read_index);
    printf(", ");
    print_bound("per_term_block_suffix_max", st.block_bound, st.queries, st.half_block, st.read_block);
    /* by the query's known terms: queries, and the mean fraction of postings each bound needs */
    printf(", \"by_terms\": [");
    for (uint32_t g = 0; g < BY_TERMS; g++) {
        uint32_t n = st.by_terms_queries[g];
        printf("%s{\"terms\": \"%u%s\", \"queries\": %u, \"postings_read_mean\": [%.4f, %.4f]}", g ? ", " : "", g + 1,
               g == BY_TERMS - 1 ? "+" : "", n, n ? st.by_terms_read_index[g] / n : 0.0,
               n ? st.by_terms_read_block[g] / n : 0.0);
    }
    printf("]}\n");
    for (uint32_t t = 0; t < ISN_MAX_QUERY_TERMS; t++) {
        free(tps[t].docs);
        free(tps[t].block_suffix_max);
    }
    free(tps);
    free(hits);
    free(st.index_bound);
    free(st.block_bound);
    isn_searcher_free(searcher);
    isn_query_log_free(&log);
    isn_index_close(ix);
    return 0;
}
