/* The cost model's input for one query, from the index alone: list lengths, and which lists a
 * dynamic-pruning algorithm will walk in full. Runs on the thread that prepares the query, so what it
 * reads is bounded: lexicon statistics, block maxima (a bounded number per term), and for the
 * threshold probe (ranking/'s isn_threshold_probe) the postings of the rarest lists
 * (ISN_PROBE_POSTINGS documents, each probed into the other lists). Block maxima alone put the
 * threshold at ~40% (median) of the final k-th score on the Debian logs, and with that the time of a
 * query seen for the first time was not predictable to better than ~25%; the probe is exact for
 * about half of those queries and within 11% for 75%. With the probe's k-th score alone that error
 * was ~19.5%; what the probe says about the work (MaxScore's partition at and below it, the blocks
 * that can pass, and the walk its own top k implies, read in the same passes) brings it to ~16.5%
 * (bench_scheduler). */
#include <math.h>
#include <string.h>

#include "scheduler/scheduler_internal.h"

#define THETA_MAX_K ISN_PROBE_MAX_K /* above this k no threshold is estimated: every list counts */
#define THETA_MAX_BLOCKS 2048       /* block maxima read per term (evenly spread beyond) */
#define QUERY_TERMS_WALKED 64       /* terms whose blocks are looked at */

typedef struct {
    uint32_t term_id;
    uint32_t df;
    double weight; /* idf times the term's count in the query */
    double bound;  /* the most this term adds to a document's score */
    isn_term_stats stats;
} term_info;

static void sort_by_bound(term_info *terms, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) {
        term_info t = terms[i];
        uint32_t j = i;
        while (j > 0 && terms[j - 1].bound > t.bound) {
            terms[j] = terms[j - 1];
            j--;
        }
        terms[j] = t;
    }
}

#define PROBE_SHARES 3 /* the probe's levels for the work features: 1, 3/4 and 1/2 of it */
static const double PROBE_SHARE[PROBE_SHARES] = {1.0, 0.75, 0.5};

/* One pass over a term's block maxima (evenly strided beyond THETA_MAX_BLOCKS), as scores:
 * - the k-th largest, returned: each block maximum belongs to a different document, so k documents
 *   score at least this on this term alone, and in OR mode the final k-th score is at least that
 *   (0 when the term has fewer than k blocks);
 * - above[i] += blocks whose maximum passes levels[i] (ascending, n of them), scaled by the stride;
 * - candidates[s] += blocks whose maximum passes candidate_level[s] (INFINITY: none counted). */
static double scan_blocks(const isn_block_meta *metas, const term_info *t, uint32_t k, const double *levels,
                          uint32_t n, double *above, const double *candidate_level, double *candidates) {
    uint32_t candidate_counts[PROBE_SHARES] = {0};
    float top[THETA_MAX_K];
    uint32_t counts[QUERY_TERMS_WALKED + 1] = {0};
    uint32_t filled = 0, want = k <= THETA_MAX_K ? k : 0;
    uint32_t blocks = t->stats.num_blocks;
    uint32_t step = blocks > THETA_MAX_BLOCKS ? blocks / THETA_MAX_BLOCKS : 1;
    for (uint32_t b = 0; b < blocks; b += step) {
        float v = metas[t->stats.first_block + b].max_tf_part;
        double score = t->weight * v;
        uint32_t lo = 0, hi = n; /* levels below score */
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (levels[mid] < score) lo = mid + 1;
            else hi = mid;
        }
        counts[lo]++;
        for (int s = 0; s < PROBE_SHARES; s++) candidate_counts[s] += score > candidate_level[s];
        if (!want || (filled == want && v <= top[want - 1])) continue;
        uint32_t j = filled < want ? filled++ : want - 1;
        while (j > 0 && top[j - 1] < v) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = v;
    }
    double passing = 0;
    for (uint32_t i = n; i-- > 0;) {
        passing += counts[i + 1];
        above[i] += passing * step;
    }
    for (int s = 0; s < PROBE_SHARES; s++) candidates[s] += (double)candidate_counts[s] * step;
    return want && filled == want && blocks >= k ? t->weight * top[want - 1] : 0.0;
}

/* MaxScore's threshold after reading a share s of the collection (documents in id order, which is
 * unrelated to score) is about the score of the (k/s)-th best document, so the list whose bounds,
 * with those of all lower lists, sum to level L stops proposing candidates at s = k / docs(> L).
 * docs(> L) is estimated as DOCS_PER_PASSING_BLOCK times the blocks, over all lists, whose maximum
 * passes L (fitted on the Debian logs: a block passing a level holds several documents that do,
 * and documents that pass only by combining terms are not seen by any one block). */
#define DOCS_PER_PASSING_BLOCK 10.0
static uint64_t expected_postings(const term_info *terms, uint32_t n, const double *above, uint32_t k) {
    double expected = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double docs = DOCS_PER_PASSING_BLOCK * above[i];
        expected += docs > k ? terms[i].df * (k / docs) : terms[i].df;
    }
    return (uint64_t)expected;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Order-free over the terms (a sum of mixed (term, count) pairs), then k, mode and algorithm. */
static uint64_t signature_of(const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo) {
    uint64_t sum = 0;
    for (uint32_t i = 0; i < query->num_terms; i++)
        sum += mix64(((uint64_t)query->terms[i].count << 32 | query->terms[i].term_id) + 0x9e3779b97f4a7c15ull);
    uint64_t signature = mix64(sum ^ mix64((uint64_t)k << 16 | (uint64_t)mode << 8 | (uint64_t)algo));
    return signature ? signature : 1;
}

/* How much of the index the features read: the lexicon's list statistics only; their block maxima too;
 * and the threshold probe's postings as well. */
typedef enum { READ_LISTS, READ_BLOCKS, READ_PROBE } features_reach;

static void features_of(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                        features_reach reach, isn_job_features *f) {
    memset(f, 0, sizeof *f);
    f->k = k;
    f->mode = isn_algo_mode(algo, mode);
    f->algo = algo;
    const isn_index_info *info = isn_index_get_info(index);
    uint64_t num_metas;
    const isn_block_meta *metas = isn_index_block_metas(index, &num_metas);
    term_info terms[QUERY_TERMS_WALKED];
    uint32_t n = 0;
    for (uint32_t i = 0; i < query->num_terms; i++) {
        isn_term_stats stats;
        isn_index_term_stats(index, query->terms[i].term_id, &stats);
        uint64_t df = stats.df;
        f->total += df;
        f->blocks += stats.num_blocks;
        if (f->num_terms == 0 || df < f->shortest) {
            f->second_shortest = f->num_terms ? f->shortest : 0;
            f->shortest = df;
        } else if (f->num_terms == 1 || df < f->second_shortest) {
            f->second_shortest = df;
        }
        if (df > f->longest) f->longest = df;
        f->num_terms++;
        double weight = (double)query->terms[i].count * isn_bm25_idf(info->num_docs, query->terms[i].df);
        /* Terms beyond the array (queries of more than QUERY_TERMS_WALKED distinct terms) stay
         * essential: an over-estimate for such rare queries. */
        bool readable = metas && stats.first_block + stats.num_blocks <= num_metas;
        if (n < QUERY_TERMS_WALKED && readable)
            terms[n++] = (term_info){.term_id = query->terms[i].term_id,
                                     .df = stats.df,
                                     .weight = weight,
                                     .bound = weight * stats.max_tf_part,
                                     .stats = stats};
    }
    sort_by_bound(terms, n);
    double levels[QUERY_TERMS_WALKED], above[QUERY_TERMS_WALKED] = {0}, level = 0.0;
    for (uint32_t t = 0; t < n; t++) levels[t] = level += terms[t].bound;
    f->signature = signature_of(query, k, mode, algo);
    bool exhaustive = algo == ISN_ALGO_OR || algo == ISN_ALGO_AND;
    f->algo_resolved = isn_algo_resolve(algo, f->mode, query);
    bool probing = reach == READ_PROBE && f->mode == ISN_MODE_OR && !exhaustive;
    /* essential_from[s]: the first list (by bound) left essential at PROBE_SHARE[s] of the probe. */
    uint32_t essential_from[PROBE_SHARES] = {0};
    double candidate_level[PROBE_SHARES] = {INFINITY, INFINITY, INFINITY}, candidates[PROBE_SHARES] = {0};
    if (probing) {
        double passed_share[QUERY_TERMS_WALKED];
        f->threshold_probe = isn_threshold_probe(index, query, k, levels, n, passed_share, &f->probe_docs);
        if (f->threshold_probe > 0.0) {
            f->probe_walk_postings = f->total;
            for (uint32_t t = 0; t < n; t++)
                f->probe_walk_postings -= (uint64_t)((1.0 - passed_share[t]) * terms[t].df);
            for (int s = 0; s < PROBE_SHARES; s++) {
                double bar = PROBE_SHARE[s] * f->threshold_probe;
                uint32_t e = 0;
                while (e < n && levels[e] <= bar) e++;
                essential_from[s] = e;
                candidate_level[s] = bar - (e ? levels[e - 1] : 0.0);
                f->probe_essential[s] = f->total;
                for (uint32_t t = 0; t < e; t++) f->probe_essential[s] -= terms[t].df;
            }
            f->probe_slack = essential_from[0] < n ? levels[essential_from[0]] / f->threshold_probe - 1.0 : 1.0;
        }
    }
    double theta = 0.0;
    for (uint32_t t = 0; t < n && reach >= READ_BLOCKS; t++) {
        double level_of_term[PROBE_SHARES];
        for (int s = 0; s < PROBE_SHARES; s++)
            level_of_term[s] = t >= essential_from[s] ? candidate_level[s] : INFINITY;
        double kth = scan_blocks(metas, &terms[t], k, levels, n, above, level_of_term, candidates);
        if (kth > theta) theta = kth;
    }
    for (int s = 0; s < PROBE_SHARES; s++)
        if (f->threshold_probe > 0.0) f->probe_candidate_blocks[s] = (uint64_t)candidates[s];
    if (f->mode == ISN_MODE_AND) {
        /* Intersections are driven by the shortest list; the others are probed. */
        f->essential = exhaustive ? f->total : f->shortest;
        f->nonessential_lists = exhaustive || !f->num_terms ? 0 : f->num_terms - 1;
    } else if (exhaustive) {
        f->essential = f->total;
    } else {
        if (f->threshold_probe > theta) theta = f->threshold_probe;
        uint64_t walked = 0;
        for (uint32_t i = 0; i < n; i++) walked += terms[i].df;
        f->expected_postings = expected_postings(terms, n, above, k) + (f->total - walked);
        /* The lowest bounds that together stay under the threshold: MaxScore only probes them. */
        f->essential = f->total;
        double below = 0.0;
        for (uint32_t i = 0; i < n && theta > 0.0; i++) {
            below += terms[i].bound;
            if (below > theta) break;
            f->essential -= terms[i].df;
            f->nonessential_lists++;
        }
    }
    if (f->mode == ISN_MODE_AND || exhaustive) f->expected_postings = f->essential;
    /* Keys: the rarest terms, whose co-occurrence sets the threshold. */
    for (uint32_t i = 1; i < n; i++) {
        uint32_t j = i;
        term_info t = terms[i];
        while (j > 0 && terms[j - 1].df > t.df) {
            terms[j] = terms[j - 1];
            j--;
        }
        terms[j] = t;
    }
    for (uint32_t i = 0; i < n && f->num_keys < ISN_JOB_KEYS; i++) f->keys[f->num_keys++] = terms[i].term_id;
}

void isn_job_features_of(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                         isn_job_features *features) {
    features_of(index, query, k, mode, algo, READ_PROBE, features);
}

void isn_job_features_quick(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                            isn_job_features *features) {
    features_of(index, query, k, mode, algo, READ_BLOCKS, features);
}

void isn_job_features_lists(const isn_index *index, const isn_query *query, uint32_t k, isn_mode mode, isn_algo algo,
                            isn_job_features *features) {
    features_of(index, query, k, mode, algo, READ_LISTS, features);
}
