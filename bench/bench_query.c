/* Single-thread first-stage speed: every algorithm over one query log, several passes.
 * usage: bench_query [--seed-probe] INDEX_DIR QUERIES.tsv LABEL [k] [passes] [algo,algo,...]
 * Prints one JSON object: per algorithm, queries/s (median and best pass) and latency percentiles,
 * plus how many queries gave hits different from the first algorithm (must be 0).
 * --seed-probe: queries are parsed before anything is timed and only isn_search is timed; each
 * algorithm gets two entries, "seeded":false and "seeded":true, whose passes alternate (so that the
 * machine's load hits both alike). Seeded: the scheduler's threshold probe (isn_job_features_of,
 * computed per query outside the timed region, its own cost reported as probe_us_per_query) is the
 * search's initial_threshold; qps_with_probe_median counts the probe's time too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler_internal.h"

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char **read_queries(const char *path, size_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    size_t cap = 1024;
    char **q = malloc(cap * sizeof *q);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    *n = 0;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        char *tab = strchr(line, '\t');
        if (!tab || !tab[1]) continue;
        if (*n == cap) q = realloc(q, (cap *= 2) * sizeof *q);
        q[(*n)++] = strdup(tab + 1);
    }
    free(line);
    fclose(f);
    return q;
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

/* One pass of isn_search over the parsed queries, only the search timed; seeded: the probe as the
 * initial threshold. Returns the pass's seconds; lat gets each query's, work the postings scored. */
/* Search options for an algorithm name of the command line ("auto-and": auto in AND mode). */
static bool options_for(const char *name, uint32_t k, isn_search_options *o, bool *and_mode) {
    isn_search_options_default(o);
    o->k = k;
    *and_mode = strcmp(name, "and") == 0 || strcmp(name, "bmand") == 0 || strcmp(name, "auto-and") == 0;
    if (!isn_algo_from_name(strcmp(name, "auto-and") == 0 ? "auto" : name, &o->algo)) {
        fprintf(stderr, "bench_query: unknown algorithm %s\n", name);
        return false;
    }
    o->mode = *and_mode ? ISN_MODE_AND : ISN_MODE_OR;
    return true;
}

static double timed_pass(isn_searcher *s, const parsed_query *pq, size_t nq, const isn_search_options *base,
                         bool seeded, isn_hit *hits, uint32_t k, isn_hit *reference, uint32_t *ref_n, bool have_ref,
                         double *lat, uint64_t *postings, uint64_t *mismatches) {
    char err[ISN_ERR_LEN];
    double total = 0;
    for (size_t i = 0; i < nq; i++) {
        isn_search_options o = *base;
        o.initial_threshold = seeded ? (float)pq[i].features.threshold_probe : 0.0f;
        isn_search_stats st;
        uint32_t n;
        double q0 = now_seconds();
        if (isn_search(s, &pq[i].query, &o, hits, &n, &st, err, sizeof err) != 0) {
            fprintf(stderr, "bench_query: query %zu: %s\n", i, err);
            exit(1);
        }
        lat[i] = now_seconds() - q0;
        total += lat[i];
        if (postings) {
            *postings += st.postings_scored;
            if (!have_ref) {
                memcpy(reference + i * k, hits, n * sizeof *hits);
                ref_n[i] = n;
            } else if (n != ref_n[i] || memcmp(reference + i * k, hits, n * sizeof *hits) != 0) {
                (*mismatches)++;
            }
        }
    }
    return total;
}

static void print_entry(bool first, const char *name, bool and_mode, bool seeded, double *pass_qps, int passes,
                        double *lat, size_t nl, uint64_t postings, size_t nq, uint64_t mismatches, double probe_us) {
    qsort(pass_qps, (size_t)passes, sizeof *pass_qps, cmp_double);
    qsort(lat, nl, sizeof *lat, cmp_double);
    printf("%s{\"algo\":\"%s\",\"mode\":\"%s\",\"seeded\":%s,\"qps_median\":%.1f,\"qps_best\":%.1f,"
           "\"latency_us\":{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"p999\":%.1f},\"postings_scored_per_query\":%.1f,"
           "\"mismatches\":%llu",
           first ? "" : ",", name, and_mode ? "and" : "or", seeded ? "true" : "false", pass_qps[passes / 2],
           pass_qps[passes - 1], percentile(lat, nl, 0.5) * 1e6, percentile(lat, nl, 0.9) * 1e6,
           percentile(lat, nl, 0.99) * 1e6, percentile(lat, nl, 0.999) * 1e6, (double)postings / (double)nq,
           (unsigned long long)mismatches);
    if (seeded)
        printf(",\"probe_us_per_query\":%.2f,\"qps_with_probe_median\":%.1f", probe_us,
               1.0 / (1.0 / pass_qps[passes / 2] + probe_us * 1e-6));
    printf("}");
}

/* --seed-probe: per algorithm, unseeded and seeded passes alternating over pre-parsed queries. */
static int seed_probe_bench(isn_index *ix, char **queries, size_t nq, const char *label, const char *index_dir,
                            uint32_t k, int passes, const char *algos) {
    char err[ISN_ERR_LEN];
    isn_searcher *s = isn_searcher_new(ix);
    parsed_query *pq = calloc(nq, sizeof *pq);
    isn_hit *hits = malloc(k * sizeof *hits), *reference = malloc(nq * k * sizeof *reference);
    uint32_t *ref_n = calloc(nq, sizeof *ref_n);
    double *lat[2], *pass_qps[2], *probe_ns = malloc((size_t)passes * sizeof *probe_ns);
    for (int v = 0; v < 2; v++) {
        lat[v] = malloc(nq * (size_t)passes * sizeof *lat[v]);
        pass_qps[v] = malloc((size_t)passes * sizeof *pass_qps[v]);
    }
    for (size_t i = 0; i < nq; i++) {
        if (isn_query_parse(s, queries[i], strlen(queries[i]), &pq[i].query, err, sizeof err) != 0) {
            fprintf(stderr, "bench_query: query %zu: %s\n", i, err);
            return 1;
        }
        pq[i].terms = malloc((pq[i].query.num_terms + 1) * sizeof *pq[i].terms);
        memcpy(pq[i].terms, pq[i].query.terms, pq[i].query.num_terms * sizeof *pq[i].terms);
        pq[i].query.terms = pq[i].terms;
    }
    isn_mode ref_mode = ISN_MODE_OR;
    bool have_ref = false;
    printf("{\"benchmark\":\"first_stage\",\"label\":\"%s\",\"index\":\"%s\",\"queries\":%zu,\"k\":%u,\"passes\":%d,"
           "\"threads\":1,\"seed_probe\":true,\"timed\":\"isn_search only\",\"results\":[",
           label, index_dir, nq, k, passes);
    char *list = strdup(algos);
    int first = 1;
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        isn_search_options o;
        bool and_mode;
        if (!options_for(name, k, &o, &and_mode)) return 2;
        if (have_ref && ref_mode != o.mode) have_ref = false;
        uint64_t postings[2] = {0, 0}, mismatches[2] = {0, 0};
        for (int p = 0; p < passes; p++) {
            /* The probe, as the loop thread computes it: not part of the timed search. */
            double f0 = now_seconds();
            for (size_t i = 0; i < nq; i++)
                isn_job_features_of(ix, &pq[i].query, k, o.mode, o.algo, &pq[i].features);
            probe_ns[p] = (now_seconds() - f0) * 1e9 / (double)nq;
            for (int v = 0; v < 2; v++) {
                bool check = p == 0;
                double t = timed_pass(s, pq, nq, &o, v == 1, hits, k, reference, ref_n, have_ref,
                                      lat[v] + (size_t)p * nq, check ? &postings[v] : NULL, &mismatches[v]);
                pass_qps[v][p] = (double)nq / t;
                if (check && v == 0 && !have_ref) {
                    have_ref = true;
                    ref_mode = o.mode;
                }
            }
        }
        qsort(probe_ns, (size_t)passes, sizeof *probe_ns, cmp_double);
        for (int v = 0; v < 2; v++) {
            print_entry(first, name, and_mode, v == 1, pass_qps[v], passes, lat[v], nq * (size_t)passes, postings[v],
                        nq, mismatches[v], probe_ns[passes / 2] / 1e3);
            first = 0;
        }
        fflush(stdout);
    }
    printf("]}\n");
    free(list);
    for (size_t i = 0; i < nq; i++) free(pq[i].terms);
    free(pq);
    free(hits);
    free(reference);
    free(ref_n);
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
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--seed-probe") == 0) {
            seed_probe = true;
            memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
            argc--;
            break;
        }
    if (argc < 4) {
        fprintf(stderr, "usage: bench_query [--seed-probe] INDEX_DIR QUERIES.tsv LABEL [k] [passes] [algo,...]\n");
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
    size_t nq;
    char **queries = read_queries(argv[2], &nq);
    if (seed_probe) {
        int rc = seed_probe_bench(ix, queries, nq, argv[3], argv[1], k, passes, algos);
        for (size_t i = 0; i < nq; i++) free(queries[i]);
        free(queries);
        isn_index_close(ix);
        return rc;
    }
    isn_searcher *s = isn_searcher_new(ix);
    isn_hit *hits = malloc(k * sizeof *hits), *reference = malloc(nq * k * sizeof *reference);
    uint32_t *ref_n = calloc(nq, sizeof *ref_n);
    double *lat = malloc(nq * (size_t)passes * sizeof *lat), *pass_qps = malloc((size_t)passes * sizeof *pass_qps);
    isn_mode ref_mode = ISN_MODE_OR;
    bool have_ref = false;

    printf("{\"benchmark\":\"first_stage\",\"label\":\"%s\",\"index\":\"%s\",\"queries\":%zu,\"k\":%u,\"passes\":%d,"
           "\"threads\":1,\"results\":[",
           argv[3], argv[1], nq, k, passes);
    char *list = strdup(algos);
    int first = 1;
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        isn_search_options o;
        bool and_mode;
        if (!options_for(name, k, &o, &and_mode)) return 2;
        if (have_ref && ref_mode != o.mode) have_ref = false; /* results of the other mode differ by design */
        uint64_t postings = 0, mismatches = 0;
        for (int p = 0; p < passes; p++) {
            double t0 = now_seconds();
            for (size_t i = 0; i < nq; i++) {
                double q0 = now_seconds();
                isn_query q;
                isn_search_stats st;
                uint32_t n;
                if (isn_query_parse(s, queries[i], strlen(queries[i]), &q, err, sizeof err) != 0 ||
                    isn_search(s, &q, &o, hits, &n, &st, err, sizeof err) != 0) {
                    fprintf(stderr, "bench_query: query %zu: %s\n", i, err);
                    return 1;
                }
                lat[(size_t)p * nq + i] = now_seconds() - q0;
                if (p == 0) {
                    postings += st.postings_scored;
                    if (!have_ref) {
                        memcpy(reference + i * k, hits, n * sizeof *hits);
                        ref_n[i] = n;
                    } else if (n != ref_n[i] || memcmp(reference + i * k, hits, n * sizeof *hits) != 0) {
                        mismatches++;
                    }
                }
            }
            pass_qps[p] = (double)nq / (now_seconds() - t0);
        }
        if (!have_ref) {
            have_ref = true;
            ref_mode = o.mode;
        }
        qsort(pass_qps, (size_t)passes, sizeof *pass_qps, cmp_double);
        qsort(lat, nq * (size_t)passes, sizeof *lat, cmp_double);
        size_t nl = nq * (size_t)passes;
        printf("%s{\"algo\":\"%s\",\"mode\":\"%s\",\"qps_median\":%.1f,\"qps_best\":%.1f,\"latency_us\":{\"p50\":%.1f,"
               "\"p90\":%.1f,\"p99\":%.1f,\"p999\":%.1f},\"postings_scored_per_query\":%.1f,\"mismatches\":%llu}",
               first ? "" : ",", name, and_mode ? "and" : "or", pass_qps[passes / 2], pass_qps[passes - 1],
               percentile(lat, nl, 0.5) * 1e6, percentile(lat, nl, 0.9) * 1e6, percentile(lat, nl, 0.99) * 1e6,
               percentile(lat, nl, 0.999) * 1e6, (double)postings / (double)nq, (unsigned long long)mismatches);
        first = 0;
        fflush(stdout);
    }
    printf("]}\n");
    free(list);
    for (size_t i = 0; i < nq; i++) free(queries[i]);
    free(queries);
    free(hits);
    free(reference);
    free(ref_n);
    free(lat);
    free(pass_qps);
    isn_searcher_free(s);
    isn_index_close(ix);
    return 0;
}
