/* Single-thread first-stage speed: every algorithm over one query log, several passes.
 * usage: bench_query [--seed-probe] [--prior-weight W] INDEX_DIR QUERIES.tsv LABEL [k] [passes] [algo,algo,...]
 * Prints one JSON object: per algorithm, queries/s (median and best pass) and latency percentiles,
 * plus how many queries gave hits different from the first algorithm (must be 0).
 * --seed-probe: queries are parsed before anything is timed and only isn_search is timed; each
 * algorithm gets two entries, "seeded":false and "seeded":true, whose passes alternate (so that the
 * machine's load hits both alike). Seeded: the scheduler's threshold probe (isn_job_features_of,
 * computed per query outside the timed region, its own cost reported as probe_us_per_query) is the
 * search's initial_threshold; qps_with_probe_median counts the probe's time too.
 * --prior-weight W: every search adds W x the index's static scores (isn_search_options.prior_weight; the
 * seed is then the prior's probe, isn_threshold_probe_prior); the JSON says which weight ran. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler_internal.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, size_t n, double p) {
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

typedef struct {
    isn_query_term *terms;
    isn_query query;
    isn_job_features features;
} parsed_query;

static float prior_weight; /* --prior-weight */

/* Search options for an algorithm name of the command line ("auto-and": auto in AND mode). */
static bool options_for(const char *name, uint32_t k, isn_search_options *o, bool *and_mode) {
    isn_search_options_default(o);
    o->k = k;
    o->prior_weight = prior_weight;
    *and_mode = strcmp(name, "and") == 0 || strcmp(name, "bmand") == 0 || strcmp(name, "auto-and") == 0;
    if (!isn_algo_from_name(strcmp(name, "auto-and") == 0 ? "auto" : name, &o->algo)) {
        fprintf(stderr, "bench_query: unknown algorithm %s\n", name);
        return false;
    }
    o->mode = *and_mode ? ISN_MODE_AND : ISN_MODE_OR;
    return true;
}

/* The command line's algorithms, one at a time. */
typedef struct {
    char *list, *save;
    const char *name;
    isn_search_options options;
    bool and_mode;
} algorithm_walk;

/* The first algorithm of a mode leaves its hits as the reference; every later one of that mode must
 * match them (the other mode's results differ by design). */
typedef struct {
    isn_hit *hits;    /* [query * k] */
    uint32_t *counts; /* [query] */
    uint32_t k;
    isn_mode mode;
    bool taken;
} reference_hits;

static void reference_init(reference_hits *r, size_t nq, uint32_t k) {
    *r = (reference_hits){.hits = malloc(nq * k * sizeof *r->hits), .counts = calloc(nq, sizeof *r->counts), .k = k};
}

static void reference_free(reference_hits *r) {
    free(r->hits);
    free(r->counts);
}

/* Before an algorithm's first pass. */
static void reference_for_mode(reference_hits *r, isn_mode mode) {
    if (r->taken && r->mode != mode) r->taken = false;
}

static void reference_check(reference_hits *r, size_t query, const isn_hit *hits, uint32_t n, uint64_t *mismatches) {
    isn_hit *expected = r->hits + query * r->k;
    if (!r->taken) {
        memcpy(expected, hits, n * sizeof *hits);
        r->counts[query] = n;
    } else if (n != r->counts[query] || memcmp(expected, hits, n * sizeof *hits) != 0) {
        (*mismatches)++;
    }
}

/* After the pass that checked every query: its hits are the reference from now on. */
static void reference_taken(reference_hits *r, isn_mode mode) {
    if (r->taken) return;
    r->taken = true;
    r->mode = mode;
}

/* Moves to the next algorithm (its options, the reference reset when its mode differs): 1, or 0 at the
 * end of the list, or -1 at an unknown name. */
static int algorithm_next(algorithm_walk *w, uint32_t k, reference_hits *reference) {
    w->name = strtok_r(w->name ? NULL : w->list, ",", &w->save);
    if (!w->name) return 0;
    if (!options_for(w->name, k, &w->options, &w->and_mode)) return -1;
    reference_for_mode(reference, w->options.mode);
    return 1;
}

static void print_header(const char *label, const char *index_dir, size_t nq, uint32_t k, int passes,
                         const char *extra_fields) {
    printf("{\"benchmark\":\"first_stage\",\"label\":\"%s\",\"index\":\"%s\",\"queries\":%zu,\"k\":%u,\"passes\":%d,"
           "\"threads\":1,\"prior_weight\":%g,%s\"results\":[",
           label, index_dir, nq, k, passes, (double)prior_weight, extra_fields);
}

/* One pass of isn_search over the parsed queries, only the search timed; seeded: the probe as the
 * initial threshold. Returns the pass's seconds; lat gets each query's, postings the postings scored. */
static double timed_pass(isn_searcher *s, const parsed_query *pq, size_t nq, const isn_search_options *base,
                         bool seeded, isn_hit *hits, reference_hits *reference, double *lat, uint64_t *postings,
                         uint64_t *mismatches) {
    char err[ISN_ERR_LEN];
    double total = 0;
    for (size_t i = 0; i < nq; i++) {
        isn_search_options o = *base;
        o.initial_threshold = seeded ? (float)pq[i].features.threshold_probe : 0.0f;
        isn_search_stats st;
        uint32_t n;
        double q0 = isn_now_seconds();
        if (isn_search(s, &pq[i].query, &o, hits, &n, &st, err, sizeof err) != 0) {
            fprintf(stderr, "bench_query: query %zu: %s\n", i, err);
            exit(1);
        }
        lat[i] = isn_now_seconds() - q0;
        total += lat[i];
        if (postings) {
            *postings += st.postings_scored;
            reference_check(reference, i, hits, n, mismatches);
        }
    }
    return total;
}

/* One result object. seeded: 0 or 1 in a --seed-probe run, -1 (no "seeded" field) otherwise. */
static void print_entry(bool first, const char *name, bool and_mode, int seeded, double *pass_qps, int passes,
                        double *lat, size_t nl, uint64_t postings, size_t nq, uint64_t mismatches, double probe_us) {
    qsort(pass_qps, (size_t)passes, sizeof *pass_qps, cmp_double);
    qsort(lat, nl, sizeof *lat, cmp_double);
    printf("%s{\"algo\":\"%s\",\"mode\":\"%s\",%s\"qps_median\":%.1f,\"qps_best\":%.1f,"
           "\"latency_us\":{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"p999\":%.1f},\"postings_scored_per_query\":%.1f,"
           "\"mismatches\":%llu",
           first ? "" : ",", name, and_mode ? "and" : "or",
           seeded < 0 ? "" : seeded ? "\"seeded\":true," : "\"seeded\":false,", pass_qps[passes / 2],
           pass_qps[passes - 1], percentile(lat, nl, 0.5) * 1e6, percentile(lat, nl, 0.9) * 1e6,
           percentile(lat, nl, 0.99) * 1e6, percentile(lat, nl, 0.999) * 1e6, (double)postings / (double)nq,
           (unsigned long long)mismatches);
    if (seeded > 0)
        printf(",\"probe_us_per_query\":%.2f,\"qps_with_probe_median\":%.1f", probe_us,
               1.0 / (1.0 / pass_qps[passes / 2] + probe_us * 1e-6));
    printf("}");
}

/* --seed-probe: per algorithm, unseeded and seeded passes alternating over pre-parsed queries. */
static int seed_probe_bench(isn_index *ix, const isn_query_log *log, const char *label, const char *index_dir,
                            uint32_t k, int passes, const char *algos) {
    char err[ISN_ERR_LEN];
    size_t nq = log->count;
    isn_searcher *s = isn_searcher_new(ix);
    parsed_query *pq = calloc(nq, sizeof *pq);
    isn_hit *hits = malloc(k * sizeof *hits);
    reference_hits reference;
    reference_init(&reference, nq, k);
    double *lat[2], *pass_qps[2], *probe_ns = malloc((size_t)passes * sizeof *probe_ns);
    for (int v = 0; v < 2; v++) {
        lat[v] = malloc(nq * (size_t)passes * sizeof *lat[v]);
        pass_qps[v] = malloc((size_t)passes * sizeof *pass_qps[v]);
    }
    for (size_t i = 0; i < nq; i++) {
        const char *text = log->queries[i].text;
        if (isn_query_parse(s, text, strlen(text), &pq[i].query, err, sizeof err) != 0) {
            fprintf(stderr, "bench_query: query %zu: %s\n", i, err);
            return 1;
        }
        pq[i].terms = malloc((pq[i].query.num_terms + 1) * sizeof *pq[i].terms);
        memcpy(pq[i].terms, pq[i].query.terms, pq[i].query.num_terms * sizeof *pq[i].terms);
        pq[i].query.terms = pq[i].terms;
    }
    print_header(label, index_dir, nq, k, passes, "\"seed_probe\":true,\"timed\":\"isn_search only\",");
    algorithm_walk walk = {.list = strdup(algos)};
    int more;
    for (bool first = true; (more = algorithm_next(&walk, k, &reference)) > 0;) {
        uint64_t postings[2] = {0, 0}, mismatches[2] = {0, 0};
        for (int p = 0; p < passes; p++) {
            /* The probe, as the loop thread computes it: not part of the timed search. */
            double f0 = isn_now_seconds();
            for (size_t i = 0; i < nq; i++) {
                if (prior_weight == 0.0f) {
                    isn_job_features_of(ix, &pq[i].query, k, walk.options.mode, walk.options.algo, &pq[i].features);
                    continue;
                }
                /* the scheduler's probe is BM25's, no bound of scores with a prior */
                uint32_t scored;
                pq[i].features.threshold_probe =
                    walk.options.mode == ISN_MODE_OR
                        ? isn_threshold_probe_prior(ix, &pq[i].query, k, prior_weight, NULL, 0, NULL, &scored)
                        : 0.0;
            }
            probe_ns[p] = (isn_now_seconds() - f0) * 1e9 / (double)nq;
            for (int v = 0; v < 2; v++) {
                bool check = p == 0;
                double t = timed_pass(s, pq, nq, &walk.options, v == 1, hits, &reference, lat[v] + (size_t)p * nq,
                                      check ? &postings[v] : NULL, &mismatches[v]);
                pass_qps[v][p] = (double)nq / t;
                if (check && v == 0) reference_taken(&reference, walk.options.mode);
            }
        }
        qsort(probe_ns, (size_t)passes, sizeof *probe_ns, cmp_double);
        for (int v = 0; v < 2; v++) {
            print_entry(first, walk.name, walk.and_mode, v, pass_qps[v], passes, lat[v], nq * (size_t)passes, postings[v],
                        nq, mismatches[v], probe_ns[passes / 2] / 1e3);
            first = false;
        }
        fflush(stdout);
    }
    free(walk.list);
    if (more < 0) return 2;
    printf("]}\n");
    for (size_t i = 0; i < nq; i++) free(pq[i].terms);
    free(pq);
    free(hits);
    reference_free(&reference);
    free(probe_ns);
    for (int v = 0; v < 2; v++) {
        free(lat[v]);
        free(pass_qps[v]);
    }
    isn_searcher_free(s);
    return 0;
}

int main(int argc, char **argv) {
    bool seed_probe = false;
    for (int i = 1; i < argc;) {
        if (strcmp(argv[i], "--seed-probe") == 0) {
            seed_probe = true;
            memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
            argc--;
        } else if (strcmp(argv[i], "--prior-weight") == 0 && i + 1 < argc) {
            char *end;
            prior_weight = strtof(argv[i + 1], &end);
            if (*end || end == argv[i + 1]) {
                fprintf(stderr, "bench_query: --prior-weight takes a number, got '%s'\n", argv[i + 1]);
                return 2;
            }
            memmove(&argv[i], &argv[i + 2], (size_t)(argc - i - 1) * sizeof *argv);
            argc -= 2;
        } else {
            i++;
        }
    }
    if (argc < 4) {
        fprintf(stderr, "usage: bench_query [--seed-probe] [--prior-weight W] INDEX_DIR QUERIES.tsv LABEL [k] [passes] "
                        "[algo,...]\n");
        return 2;
    }
    uint32_t k = argc > 4 ? (uint32_t)atoi(argv[4]) : 10;
    int passes = argc > 5 ? atoi(argv[5]) : 5;
    const char *algos = argc > 6 ? argv[6] : "or,maxscore,wand,bmw,auto,and,bmand";
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(argv[1], err, sizeof err);
    if (!ix) {
        fprintf(stderr, "bench_query: %s\n", err);
        return 1;
    }
    isn_query_log log;
    if (isn_query_log_read(argv[2], false, 0, &log, err, sizeof err) < 0) {
        fprintf(stderr, "bench_query: %s\n", err);
        return 1;
    }
    size_t nq = log.count;
    if (seed_probe) {
        int rc = seed_probe_bench(ix, &log, argv[3], argv[1], k, passes, algos);
        isn_query_log_free(&log);
        isn_index_close(ix);
        return rc;
    }
    isn_searcher *s = isn_searcher_new(ix);
    isn_hit *hits = malloc(k * sizeof *hits);
    reference_hits reference;
    reference_init(&reference, nq, k);
    double *lat = malloc(nq * (size_t)passes * sizeof *lat), *pass_qps = malloc((size_t)passes * sizeof *pass_qps);
    print_header(argv[3], argv[1], nq, k, passes, "");
    algorithm_walk walk = {.list = strdup(algos)};
    int more;
    for (bool first = true; (more = algorithm_next(&walk, k, &reference)) > 0;) {
        uint64_t postings = 0, mismatches = 0;
        for (int p = 0; p < passes; p++) {
            double t0 = isn_now_seconds();
            for (size_t i = 0; i < nq; i++) {
                double q0 = isn_now_seconds();
                isn_query q;
                isn_search_stats st;
                uint32_t n;
                const char *text = log.queries[i].text;
                if (isn_query_parse(s, text, strlen(text), &q, err, sizeof err) != 0 ||
                    isn_search(s, &q, &walk.options, hits, &n, &st, err, sizeof err) != 0) {
                    fprintf(stderr, "bench_query: query %zu: %s\n", i, err);
                    return 1;
                }
                lat[(size_t)p * nq + i] = isn_now_seconds() - q0;
                if (p == 0) {
                    postings += st.postings_scored;
                    reference_check(&reference, i, hits, n, &mismatches);
                }
            }
            pass_qps[p] = (double)nq / (isn_now_seconds() - t0);
        }
        reference_taken(&reference, walk.options.mode);
        print_entry(first, walk.name, walk.and_mode, -1, pass_qps, passes, lat, nq * (size_t)passes, postings, nq, mismatches, 0);
        first = false;
        fflush(stdout);
    }
    free(walk.list);
    if (more < 0) return 2;
    printf("]}\n");
    isn_query_log_free(&log);
    free(hits);
    reference_free(&reference);
    free(lat);
    free(pass_qps);
    isn_searcher_free(s);
    isn_index_close(ix);
    return 0;
}
