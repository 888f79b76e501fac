/* The CPU cost model against real query times, in one process and one thread, so that what other
 * processes do to the timings shows as the noise between two replays rather than hiding in it.
 *
 *   bench_scheduler INDEX_DIR LOG.tsv [LOG.tsv...]          replay: MAPE per log after warm-up
 *   bench_scheduler --fit INDEX_DIR LOG.tsv [LOG.tsv...]    fit the starting formula on the first log
 *
 * Every query is analysed once, its features taken exactly as isnd takes them (isn_job_features_of),
 * and one pass over all logs maps the index before anything is timed. Times are the thread's CPU
 * time, as isnd's workers measure them; runs whose wall time shows preemption are counted
 * (disturbed_runs), so other processes' share of the machine is visible. Replay: for each log, twice,
 * a fresh model (the fitted start) predicts each query, isn_search runs it once, timed, and the model
 * learns the time; MAPE counts after the model's warm-up. The noise floor is the MAPE between the two
 * replays' timings of the same queries: no model can do better than that.
 * Sampled (--sampled N): N queries drawn at random with replacement from each log, as isn-bench sends
 * them, so queries repeat as they do in served traffic; reported apart from the first-sight replays.
 * Fit: the first log's queries timed three times each (median), least squares in log space; prints the weights for
 * cost_model.c and the fitted formula's MAPE on every log (the others are held out).
 * Sampled MAPE is also split into draws of a query not drawn before (first sight: the weights and
 * per-term corrections answer) and repeats (the per-query memo answers).
 * Also timed: features_us_per_query (isn_job_features_of), features_quick_us_per_query
 * (isn_job_features_quick: what a GPU-bound job gets), take_features_cpu_us_per_query (sched_take_features:
 * what isnd's preparation takes for a job only the CPU may answer) and predict_ns_per_query.
 * Every timed search starts from its threshold probe (isn_search_options.initial_threshold), as
 * isnd's workers run OR searches; --unseeded times them from 0 instead (the features are the same;
 * --seed, the default, is still accepted).
 * Options: --k K (10), --algo NAME (auto), --mode or|and (or), --unseeded, --sampled N (0), --dump
 * FILE (per-query features, three timings from separate passes, work counters, the final k-th
 * score, the threshold probe's bound, documents and work features, the query's signature, and
 * per-term block-maximum histograms, for trying features offline).
 * Prints one JSON object. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler_internal.h"

typedef struct {
    isn_query_term *terms;
    isn_query query;
    isn_job_features features;
    double ns[2]; /* the thread's CPU time, as isnd's workers measure it */
} bench_query;

typedef struct {
    const char *path;
    bench_query *queries;
    size_t n;
} query_log;

static void die(const char *what, const char *why) {
    fprintf(stderr, "bench_scheduler: %s: %s\n", what, why);
    exit(1);
}

static void read_log(query_log *log, isn_searcher *searcher, const isn_index *index, uint32_t k, isn_mode mode,
                     isn_algo algo) {
    char err[ISN_ERR_LEN];
    isn_query_log text;
    if (isn_query_log_read(log->path, false, 0, &text, err, sizeof err) != 0) die(log->path, err);
    size_t cap = 0;
    for (size_t i = 0; i < text.count; i++) {
        const char *query_text = text.queries[i].text;
        isn_query query;
        if (isn_query_parse(searcher, query_text, strlen(query_text), &query, err, sizeof err) < 0) die(log->path, err);
        if (query.num_terms == 0) continue;
        if (log->n == cap) {
            cap = cap ? 2 * cap : 1024;
            log->queries = realloc(log->queries, cap * sizeof *log->queries);
            if (!log->queries) die(log->path, "out of memory");
        }
        bench_query *q = &log->queries[log->n++];
        memset(q, 0, sizeof *q);
        q->terms = malloc(query.num_terms * sizeof *q->terms);
        if (!q->terms) die(log->path, "out of memory");
        memcpy(q->terms, query.terms, query.num_terms * sizeof *q->terms);
        q->query = (isn_query){.terms = q->terms, .num_terms = query.num_terms, .num_unknown = query.num_unknown};
        isn_job_features_of(index, &q->query, k, mode, algo, &q->features);
    }
    isn_query_log_free(&text);
    if (log->n == 0) die(log->path, "no queries");
}

typedef struct {
    isn_searcher *searcher;
    isn_search_options options;
    isn_hit *hits;
    bool seed; /* --seed */
    uint64_t runs, disturbed; /* disturbed: wall time 10% (and 5 us) above CPU time: preempted */
} runner;

static isn_search_options options_for(const runner *r, const bench_query *q) {
    isn_search_options options = r->options;
    if (r->seed) options.initial_threshold = (float)q->features.threshold_probe;
    return options;
}

/* The query's CPU time on this thread (what the model learns in isnd too); counts a run whose wall
 * time says another thread or process took the core meanwhile. */
static double run_timed(runner *r, const bench_query *q) {
    uint32_t n;
    isn_search_stats stats;
    char err[ISN_ERR_LEN];
    isn_search_options options = options_for(r, q);
    uint64_t wall = isn_now_ns(), cpu = isn_thread_cpu_ns();
    if (isn_search(r->searcher, &q->query, &options, r->hits, &n, &stats, err, sizeof err) < 0) die("search", err);
    cpu = isn_thread_cpu_ns() - cpu;
    wall = isn_now_ns() - wall;
    r->runs++;
    if ((double)wall > 1.1 * (double)cpu + 5000.0) r->disturbed++;
    return (double)cpu;
}

/* --dump: per query its features, three timings, the search's work counters, the final k-th score,
 * the threshold probe (bound, documents scored), expected postings, signature, the probe's work
 * features (slack, essential postings and candidate blocks at 1, 3/4 and 1/2 of it, walk postings),
 * the resolved algorithm, and per term (query order) df, weight, bound and a histogram of its block
 * maxima as scores (bins of DUMP_BIN wide): material for trying cost features offline (the MAPE
 * numbers do not use it). */
#define DUMP_BINS 64
#define DUMP_BIN 0.25
static void dump(runner *r, const isn_index *index, const query_log *logs, int num_logs, const char *path) {
    FILE *out = fopen(path, "w");
    if (!out) die(path, "cannot write");
    const isn_index_info *info = isn_index_get_info(index);
    uint64_t num_metas;
    const isn_block_meta *metas = isn_index_block_metas(index, &num_metas);
    /* Three passes over the logs, so that no timing profits from the same query just before it. */
    size_t total = 0;
    for (int l = 0; l < num_logs; l++) total += logs[l].n;
    double *times = malloc(3 * total * sizeof *times);
    if (!times) die("dump", "out of memory");
    for (int t = 0; t < 3; t++) {
        size_t at = 0;
        for (int l = 0; l < num_logs; l++)
            for (size_t i = 0; i < logs[l].n; i++) times[3 * at++ + (size_t)t] = run_timed(r, &logs[l].queries[i]);
    }
    size_t at = 0;
    for (int l = 0; l < num_logs; l++)
        for (size_t i = 0; i < logs[l].n; i++, at++) {
            const bench_query *q = &logs[l].queries[i];
            const isn_job_features *f = &q->features;
            const double *ns = &times[3 * at];
            uint32_t n = 0;
            isn_search_stats stats;
            char err[ISN_ERR_LEN];
            isn_search_options options = options_for(r, q);
            if (isn_search(r->searcher, &q->query, &options, r->hits, &n, &stats, err, sizeof err) < 0)
                die("search", err);
            fprintf(out, "%d %zu %u %llu %llu %llu %llu %llu %llu %u %.0f %.0f %.0f %llu %llu %llu %.6g %u %.6g %u %llu %llu %.6g %llu %llu %llu %llu %llu %llu %llu %d", l, i,
                    f->num_terms, (unsigned long long)f->shortest, (unsigned long long)f->second_shortest,
                    (unsigned long long)f->longest, (unsigned long long)f->total, (unsigned long long)f->blocks,
                    (unsigned long long)f->essential, f->nonessential_lists, ns[0], ns[1], ns[2],
                    (unsigned long long)stats.postings_scored, (unsigned long long)stats.blocks_decoded,
                    (unsigned long long)stats.docs_evaluated, n == r->options.k ? (double)r->hits[n - 1].score : 0.0,
                    q->query.num_terms, f->threshold_probe, f->probe_docs, (unsigned long long)f->expected_postings,
                    (unsigned long long)f->signature, f->probe_slack,
                    (unsigned long long)f->probe_essential[0], (unsigned long long)f->probe_essential[1],
                    (unsigned long long)f->probe_essential[2], (unsigned long long)f->probe_candidate_blocks[0],
                    (unsigned long long)f->probe_candidate_blocks[1], (unsigned long long)f->probe_candidate_blocks[2],
                    (unsigned long long)f->probe_walk_postings, (int)f->algo_resolved);
            for (uint32_t t = 0; t < q->query.num_terms; t++) {
                isn_term_stats ts;
                isn_index_term_stats(index, q->query.terms[t].term_id, &ts);
                double weight = q->query.terms[t].count * isn_bm25_idf(info->num_docs, q->query.terms[t].df);
                uint32_t hist[DUMP_BINS] = {0};
                for (uint32_t b = 0; metas && b < ts.num_blocks && ts.first_block + b < num_metas; b++) {
                    int bin = (int)(weight * metas[ts.first_block + b].max_tf_part / DUMP_BIN);
                    hist[bin < DUMP_BINS ? bin : DUMP_BINS - 1]++;
                }
                fprintf(out, " | %u %u %.6g %.6g", q->query.terms[t].term_id, ts.df, weight, weight * ts.max_tf_part);
                for (int b = 0; b < DUMP_BINS; b++) fprintf(out, " %u", hist[b]);
            }
            fprintf(out, "\n");
        }
    free(times);
    fclose(out);
}

static double mape_of(const isn_cost_model *model, const query_log *log, int replay) {
    double sum = 0;
    for (size_t i = 0; i < log->n; i++) {
        double predicted = isn_cost_predict_ns(model, ISN_DEVICE_CPU, &log->queries[i].features);
        sum += fabs(predicted - log->queries[i].ns[replay]) / log->queries[i].ns[replay];
    }
    return 100.0 * sum / (double)log->n;
}

static void print_load(const char *name) {
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    printf("\"%s\":[%.2f,%.2f,%.2f]", name, load[0], load[1], load[2]);
}

static void fit(runner *r, query_log *logs, int num_logs) {
    double a[ISN_COST_FEATURES][ISN_COST_FEATURES] = {{0}}, b[ISN_COST_FEATURES] = {0}, x[ISN_COST_FEATURES];
    const query_log *train = &logs[0];
    /* Each training query's time is the median of three passes over the log: the weights of
     * correlated features (list lengths, blocks, postings walked) then move less from fit to fit. */
    double *passes = malloc(3 * train->n * sizeof *passes);
    if (!passes) die("fit", "out of memory");
    for (int pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < train->n; i++) passes[3 * i + (size_t)pass] = run_timed(r, &train->queries[i]);
    for (size_t i = 0; i < train->n; i++) {
        bench_query *q = &train->queries[i];
        double *t = &passes[3 * i];
        q->ns[0] = t[0] > t[1] ? (t[1] > t[2] ? t[1] : t[0] > t[2] ? t[2] : t[0])
                               : (t[0] > t[2] ? t[0] : t[1] > t[2] ? t[2] : t[1]);
        isn_cost_features(&q->features, x);
        for (int f = 0; f < ISN_COST_FEATURES; f++) {
            b[f] += x[f] * log(q->ns[0]);
            for (int g = 0; g < ISN_COST_FEATURES; g++) a[f][g] += x[f] * x[g];
        }
    }
    free(passes);
    for (int l = 1; l < num_logs; l++)
        for (size_t i = 0; i < logs[l].n; i++) logs[l].queries[i].ns[0] = run_timed(r, &logs[l].queries[i]);
    /* A feature this log never varies (k, mode, algorithm) would only share the constant's weight
     * and extrapolate wildly: it starts at 0 and is left to online learning. */
    double n = a[0][0];
    for (int f = 1; f < ISN_COST_FEATURES; f++) {
        double mean = a[0][f] / n, variance = a[f][f] / n - mean * mean;
        if (variance > 1e-9 * (1.0 + mean * mean)) continue;
        for (int g = 0; g < ISN_COST_FEATURES; g++) a[f][g] = a[g][f] = 0;
        a[f][f] = 1;
        b[f] = 0;
    }
    isn_cost_model model;
    isn_cost_model_init(&model);
    isn_least_squares_solve(a, b, model.device[ISN_DEVICE_CPU].w);
    /* The bias that minimises the fitted formula's MAPE on the training log (searched on a grid). */
    double best_bias = 0, best_mape = INFINITY;
    for (double bias = -0.5; bias <= 0.5; bias += 0.005) {
        model.device[ISN_DEVICE_CPU].bias = bias;
        double m = mape_of(&model, train, 0);
        if (m < best_mape) best_mape = m, best_bias = bias;
    }
    model.device[ISN_DEVICE_CPU].bias = best_bias;
    printf("\"fitted_on\":\"%s\",\"weights\":[", train->path);
    for (int f = 0; f < ISN_COST_FEATURES; f++) printf("%s%.4f", f ? "," : "", model.device[ISN_DEVICE_CPU].w[f]);
    printf("],\"c_initializer\":\"");
    for (int f = 0; f < ISN_COST_FEATURES; f++) printf("%s%.4f", f ? ", " : "", model.device[ISN_DEVICE_CPU].w[f]);
    printf("\",\"bias\":%.3f,\"fitted_formula_mape_percent\":{", best_bias);
    for (int l = 0; l < num_logs; l++)
        printf("%s\"%s\":%.1f", l ? "," : "", logs[l].path, mape_of(&model, &logs[l], 0));
    printf("}");
}

/* n queries drawn with replacement (xorshift, fixed seed), as isn-bench sends them: MAPE after
 * warm-up of all draws, and apart of a query's first draw and of its later ones (which the model's
 * per-query memo answers). */
static void sampled_mape(runner *r, const query_log *log, uint64_t n) {
    isn_cost_model model;
    isn_cost_model_init(&model);
    bool *seen = calloc(log->n, sizeof *seen);
    if (!seen) die("sampled", "out of memory");
    double ape[2] = {0, 0};
    uint64_t count[2] = {0, 0};
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < n; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        size_t at = state % log->n;
        const bench_query *q = &log->queries[at];
        double predicted = isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &q->features), ns = run_timed(r, q);
        if (i >= model.warm_up) {
            ape[seen[at]] += fabs(predicted - ns) / ns;
            count[seen[at]]++;
        }
        seen[at] = true;
        isn_cost_learn(&model, ISN_DEVICE_CPU, &q->features, ns);
    }
    free(seen);
    printf(",\"sampled_with_repeats\":{\"queries\":%llu,\"mape_percent\":%.1f,\"first_sight\":{\"queries\":%llu,"
           "\"mape_percent\":%.1f},\"repeats\":{\"queries\":%llu,\"mape_percent\":%.1f}}",
           (unsigned long long)n, isn_cost_mape(&model, ISN_DEVICE_CPU), (unsigned long long)count[0],
           count[0] ? 100.0 * ape[0] / (double)count[0] : NAN, (unsigned long long)count[1],
           count[1] ? 100.0 * ape[1] / (double)count[1] : NAN);
}

static void replay(runner *r, query_log *logs, int num_logs, uint64_t sampled) {
    printf("\"logs\":[");
    for (int l = 0; l < num_logs; l++) {
        query_log *log = &logs[l];
        double learned[2], start_only[2];
        for (int rep = 0; rep < 2; rep++) {
            isn_cost_model model, start;
            isn_cost_model_init(&model);
            isn_cost_model_init(&start);
            double start_sum = 0;
            uint64_t start_count = 0;
            for (size_t i = 0; i < log->n; i++) {
                bench_query *q = &log->queries[i];
                q->ns[rep] = run_timed(r, q);
                if (i >= model.warm_up) {
                    start_sum += fabs(isn_cost_predict_ns(&start, ISN_DEVICE_CPU, &q->features) - q->ns[rep]) / q->ns[rep];
                    start_count++;
                }
                isn_cost_learn(&model, ISN_DEVICE_CPU, &q->features, q->ns[rep]);
            }
            learned[rep] = isn_cost_mape(&model, ISN_DEVICE_CPU);
            start_only[rep] = start_count ? 100.0 * start_sum / (double)start_count : NAN;
        }
        double noise = 0, median_ns;
        double *sorted = malloc(log->n * sizeof *sorted);
        if (!sorted) die("replay", "out of memory");
        for (size_t i = 0; i < log->n; i++) {
            noise += fabs(log->queries[i].ns[1] - log->queries[i].ns[0]) / log->queries[i].ns[0];
            sorted[i] = log->queries[i].ns[0];
        }
        for (size_t i = 1; i < log->n; i++) {
            double v = sorted[i];
            size_t j = i;
            while (j > 0 && sorted[j - 1] > v) {
                sorted[j] = sorted[j - 1];
                j--;
            }
            sorted[j] = v;
        }
        median_ns = sorted[log->n / 2];
        free(sorted);
        printf("%s{\"log\":\"%s\",\"queries\":%zu,\"median_us\":%.1f,\"warm_up\":200,"
               "\"mape_percent\":[%.1f,%.1f],\"mape_start_formula_only_percent\":[%.1f,%.1f],"
               "\"noise_floor_percent\":%.1f",
               l ? "," : "", log->path, log->n, median_ns / 1e3, learned[0], learned[1], start_only[0], start_only[1],
               100.0 * noise / (double)log->n);
        if (sampled) sampled_mape(r, log, sampled);
        printf("}");
    }
    printf("]");
}

int main(int argc, char **argv) {
    bool do_fit = false, seed = true;
    const char *dump_path = NULL;
    uint64_t sampled = 0;
    uint32_t k = 10;
    isn_algo algo = ISN_ALGO_AUTO;
    isn_mode mode = ISN_MODE_OR;
    int arg = 1;
    for (; arg < argc && argv[arg][0] == '-'; arg++) {
        if (!strcmp(argv[arg], "--fit")) do_fit = true;
        else if (!strcmp(argv[arg], "--seed")) seed = true;
        else if (!strcmp(argv[arg], "--unseeded")) seed = false;
        else if (!strcmp(argv[arg], "--dump") && arg + 1 < argc) dump_path = argv[++arg];
        else if (!strcmp(argv[arg], "--sampled") && arg + 1 < argc) sampled = strtoull(argv[++arg], NULL, 10);
        else if (!strcmp(argv[arg], "--k") && arg + 1 < argc) k = (uint32_t)atoi(argv[++arg]);
        else if (!strcmp(argv[arg], "--algo") && arg + 1 < argc) {
            if (!isn_algo_from_name(argv[++arg], &algo)) die(argv[arg], "unknown algorithm");
        } else if (!strcmp(argv[arg], "--mode") && arg + 1 < argc) {
            arg++;
            if (!strcmp(argv[arg], "and")) mode = ISN_MODE_AND;
            else if (strcmp(argv[arg], "or")) die(argv[arg], "mode is or or and");
        } else die(argv[arg], "unknown option");
    }
    if (argc - arg < 2 || k == 0 || k > ISN_MAX_K) {
        fprintf(stderr, "usage: bench_scheduler [--fit] [--unseeded] [--sampled N] [--k K] [--algo NAME] [--mode or|and] INDEX_DIR "
                        "LOG.tsv...\n");
        return 2;
    }
    char err[ISN_ERR_LEN];
    isn_index *index = isn_index_open(argv[arg], err, sizeof err);
    if (!index) die(argv[arg], err);
    runner r = {.searcher = isn_searcher_new(index), .hits = malloc(k * sizeof(isn_hit)), .seed = seed};
    if (!r.searcher || !r.hits) die("searcher", "out of memory");
    isn_search_options_default(&r.options);
    r.options.k = k;
    r.options.algo = algo;
    r.options.mode = isn_algo_mode(algo, mode);
    int num_logs = argc - arg - 1;
    query_log *logs = calloc((size_t)num_logs, sizeof *logs);
    if (!logs) die("logs", "out of memory");
    for (int l = 0; l < num_logs; l++) {
        logs[l].path = argv[arg + 1 + l];
        read_log(&logs[l], r.searcher, index, k, mode, algo);
    }
    for (int l = 0; l < num_logs; l++)
        for (size_t i = 0; i < logs[l].n; i++) run_timed(&r, &logs[l].queries[i]);

    printf("{\"benchmark\":\"cost_model\",\"index\":\"%s\",\"k\":%u,\"algo\":\"%s\",\"seeded\":%s,\"threads\":1,",
           argv[arg], k, isn_algo_name(algo), seed ? "true" : "false");
    print_load("load_before");
    printf(",");
    r.runs = r.disturbed = 0;
    if (dump_path) dump(&r, index, logs, num_logs, dump_path);
    if (do_fit) fit(&r, logs, num_logs);
    else replay(&r, logs, num_logs, sampled);
    /* What the model costs per query: features (admitting thread) and one prediction. */
    size_t all = 0;
    uint64_t t0 = isn_now_ns();
    for (int l = 0; l < num_logs; l++)
        for (size_t i = 0; i < logs[l].n; i++, all++)
            isn_job_features_of(index, &logs[l].queries[i].query, k, mode, algo, &logs[l].queries[i].features);
    uint64_t t1 = isn_now_ns();
    isn_job_features quick;
    for (int l = 0; l < num_logs; l++)
        for (size_t i = 0; i < logs[l].n; i++)
            isn_job_features_quick(index, &logs[l].queries[i].query, k, mode, algo, &quick);
    uint64_t t1q = isn_now_ns();
    /* What isnd's preparation takes for a job only the CPU may answer (no GPU, or one it cannot take). */
    isn_scheduler no_scheduler; /* read only for a job without its own index */
    memset(&no_scheduler, 0, sizeof no_scheduler);
    for (int l = 0; l < num_logs; l++)
        for (size_t i = 0; i < logs[l].n; i++) {
            isn_job job = {.index = index, .query = &logs[l].queries[i].query, .k = k, .mode = mode, .algo = algo,
                           .placement = ISN_PLACE_CPU};
            sched_take_features(&no_scheduler, &job);
        }
    uint64_t t1c = isn_now_ns();
    isn_cost_model timing_model;
    isn_cost_model_init(&timing_model);
    double sink = 0;
    for (int rep = 0; rep < 10; rep++)
        for (int l = 0; l < num_logs; l++)
            for (size_t i = 0; i < logs[l].n; i++)
                sink += isn_cost_predict_ns(&timing_model, ISN_DEVICE_CPU, &logs[l].queries[i].features);
    uint64_t t2 = isn_now_ns();
    printf(",\"features_us_per_query\":%.2f,\"features_quick_us_per_query\":%.2f,"
           "\"take_features_cpu_us_per_query\":%.2f,\"predict_ns_per_query\":%.0f",
           (double)(t1 - t0) / 1e3 / (double)all, (double)(t1q - t1) / 1e3 / (double)all,
           (double)(t1c - t1q) / 1e3 / (double)all, sink > 0 ? (double)(t2 - t1c) / (10.0 * (double)all) : 0.0);
    printf(",\"timed_runs\":%llu,\"disturbed_runs\":%llu,", (unsigned long long)r.runs,
           (unsigned long long)r.disturbed);
    print_load("load_after");
    printf("}\n");
    for (int l = 0; l < num_logs; l++) {
        for (size_t i = 0; i < logs[l].n; i++) free(logs[l].queries[i].terms);
        free(logs[l].queries);
    }
    free(logs);
    free(r.hits);
    isn_searcher_free(r.searcher);
    isn_index_close(index);
    return 0;
}
