/* Second stage on the GPU against the CPU on the same machine. JSON lines on stdout.
 *  1. batches: per query 1,000 candidates through a 1,000-tree depth-6 model (MODEL, default the
 *     XGBoost oracle of test_trees, else a generated one), batches of 1..256 queries in one call:
 *     batch latency, queries/s, kernel and transfer time; GPU scores checked equal to the CPU's.
 *  2. cpu: the same queries on every core (one query per thread at a time, as isnd's workers score)
 *     and on one thread: queries/s and per-query latency.
 *  1b. variants: batches of 16..256 with the overlap chunks (1 = no overlap) and tree splitting
 *     forced each way, to pick the defaults.
 *  3. crossover: models of 100..3,000 trees, one query of C candidates: the CPU's time on one thread
 *     against the GPU's (one call, transfers included), and the smallest C where the GPU wins.
 *   bench_gpu_l2 [--model FILE.json] [--threads N] [--seconds S] */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "gpu/gpu.h"
#include "ranking/ranking.h"

#define FEATURES 12
#define CANDIDATES 1000
#define MAX_BATCH 256

static uint64_t rng = 99;
static float uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rng >> 40) / (float)(1u << 24);
}

/* XGBoost JSON of `trees` complete trees of depth `depth` with random splits on FEATURES inputs. */
static void write_model(const char *path, uint32_t trees, uint32_t depth) {
    FILE *out = fopen(path, "w");
    if (!out) {
        perror(path);
        exit(1);
    }
    const uint32_t splits = (1u << depth) - 1, nodes = 2 * splits + 1;
    fprintf(out, "{\"learner\": {\"feature_names\": [], \"gradient_booster\": {\"name\": \"gbtree\", \"model\": {\"trees\": [");
    for (uint32_t t = 0; t < trees; t++) {
        fprintf(out, "%s{\"left_children\": [", t ? ",\n" : "\n");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%d", i ? ", " : "", i < splits ? (int)(2 * i + 1) : -1);
        fprintf(out, "], \"right_children\": [");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%d", i ? ", " : "", i < splits ? (int)(2 * i + 2) : -1);
        fprintf(out, "], \"split_conditions\": [");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%.6g", i ? ", " : "", i < splits ? uniform() * 4 - 2 : uniform() * 0.2 - 0.1);
        fprintf(out, "], \"split_indices\": [");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%u", i ? ", " : "", i < splits ? (uint32_t)(uniform() * FEATURES) % FEATURES : 0);
        fprintf(out, "], \"default_left\": [");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%d", i ? ", " : "", uniform() < 0.5f);
        fprintf(out, "], \"split_type\": [");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s0", i ? ", " : "");
        fprintf(out, "]}");
    }
    fprintf(out, "]}},\n \"learner_model_param\": {\"base_score\": \"5E-1\", \"num_class\": \"0\", \"num_feature\": \"%d\"},"
                 " \"objective\": {\"name\": \"reg:squarederror\"}}, \"version\": [1, 7, 4]}\n", FEATURES);
    fclose(out);
}

static isn_forest *load(const char *path) {
    char err[ISN_ERR_LEN];
    isn_forest *f = isn_forest_load_xgboost(path, err, sizeof err);
    if (!f) {
        fprintf(stderr, "bench_gpu_l2: %s\n", err);
        exit(1);
    }
    return f;
}

/* ------------------------------------------------------------------ CPU */

typedef struct {
    const isn_forest *forest;
    const float *rows; /* MAX_BATCH queries */
    double seconds;
    uint64_t queries;
    uint32_t id;
} cpu_worker;

static void *cpu_run(void *arg) {
    cpu_worker *w = arg;
    float out[CANDIDATES];
    double end = isn_now_seconds() + w->seconds;
    for (uint32_t q = w->id; isn_now_seconds() < end; q = (q + 1) % MAX_BATCH) {
        isn_forest_predict(w->forest, w->rows + (size_t)q * CANDIDATES * FEATURES, CANDIDATES, FEATURES, out);
        w->queries++;
    }
    return NULL;
}

static double cpu_qps(const isn_forest *f, const float *rows, uint32_t threads, double seconds) {
    pthread_t tid[256];
    cpu_worker w[256];
    double start = isn_now_seconds();
    for (uint32_t t = 0; t < threads; t++) {
        w[t] = (cpu_worker){.forest = f, .rows = rows, .seconds = seconds, .id = t * 7};
        pthread_create(&tid[t], NULL, cpu_run, &w[t]);
    }
    uint64_t total = 0;
    for (uint32_t t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        total += w[t].queries;
    }
    return (double)total / (isn_now_seconds() - start);
}

/* Median time of one call of fn, repeated for about `budget` seconds (at least 3 times). */
typedef struct {
    isn_gpu_l2 *gpu;
    const isn_forest *forest;
    const float *rows;
    uint32_t n;
    float *out;
    isn_gpu_l2_stats stats;
} call;

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_ms(call *c, bool on_gpu, double budget) {
    double times[2000];
    int n = 0;
    double end = isn_now_seconds() + budget;
    char err[ISN_ERR_LEN];
    while (n < 2000 && (n < 3 || isn_now_seconds() < end)) {
        double t0 = isn_now_seconds();
        if (on_gpu) {
            if (isn_gpu_l2_score_forest(c->gpu, c->forest, c->rows, c->n, FEATURES, c->out, &c->stats, err, sizeof err) != 0) {
                fprintf(stderr, "bench_gpu_l2: %s\n", err);
                exit(1);
            }
        } else {
            isn_forest_predict(c->forest, c->rows, c->n, FEATURES, c->out);
        }
        times[n++] = (isn_now_seconds() - t0) * 1e3;
    }
    qsort(times, n, sizeof *times, by_double);
    return times[n / 2];
}

/* One handle with these options: batch latency of `batch` queries, scores checked against the CPU's. */
static void variant_row(const isn_forest *f, const float *rows, uint32_t batch, uint32_t chunks, uint32_t split_below,
                        float *gpu_out, const float *cpu_out) {
    char err[ISN_ERR_LEN];
    isn_gpu_l2_options o;
    isn_gpu_l2_options_default(&o);
    o.overlap_chunks = chunks;
    o.split_below_rows = split_below;
    isn_gpu_l2 *gpu = isn_gpu_l2_open(&o, err, sizeof err);
    if (!gpu) return;
    call c = {.gpu = gpu, .forest = f, .rows = rows, .n = batch * CANDIDATES, .out = gpu_out};
    median_ms(&c, true, 0.05);
    double ms = median_ms(&c, true, 0.4);
    uint32_t mismatches = 0;
    for (uint32_t i = 0; i < c.n; i++) mismatches += memcmp(&cpu_out[i], &gpu_out[i], sizeof(float)) != 0;
    printf("{\"bench\": \"gpu_l2_variant\", \"batch\": %u, \"overlap_chunks\": %u, \"split\": \"%s\", \"batch_ms\": %.4f, "
           "\"kernel_ms\": %.4f, \"transfer_ms\": %.4f, \"tree_groups\": %u, \"mismatches\": %u}\n",
           batch, chunks, split_below == 1 ? "never" : "auto", ms, c.stats.ms_kernels, c.stats.ms_transfer,
           c.stats.tree_splits, mismatches);
    fflush(stdout);
    isn_gpu_l2_close(gpu);
}

int main(int argc, char **argv) {
    const char *model = "build/l2-oracle/xgb_model.json";
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t threads = (uint32_t)cores;
    double seconds = 2;
    static const struct option opts[] = {{"model", 1, 0, 'm'}, {"threads", 1, 0, 't'}, {"seconds", 1, 0, 's'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 'm') model = optarg;
        else if (c == 't') threads = (uint32_t)atoi(optarg);
        else if (c == 's') seconds = atof(optarg);
        else return 2;
    }
    if (threads < 1 || threads > 256) threads = 16;
    char err[ISN_ERR_LEN], dir[] = "/tmp/bench-gpu-l2-XXXXXX", path[128];
    if (!mkdtemp(dir)) return 1;
    struct stat st;
    if (stat(model, &st) != 0) {
        snprintf(path, sizeof path, "%s/m1000.json", dir);
        write_model(path, 1000, 6);
        fprintf(stderr, "bench_gpu_l2: %s missing; using a generated 1000-tree depth-6 model\n", model);
        model = path;
    }
    isn_forest *f = load(model);
    isn_gpu_l2_options o;
    isn_gpu_l2_options_default(&o);
    isn_gpu_l2 *gpu = isn_gpu_l2_open(&o, err, sizeof err);
    size_t max_rows = (size_t)MAX_BATCH * CANDIDATES;
    float *pinned = isn_gpu_l2_host_alloc(max_rows * FEATURES * sizeof(float));
    float *rows = pinned ? pinned : malloc(max_rows * FEATURES * sizeof(float));
    float *gpu_out = malloc(max_rows * sizeof(float)), *cpu_out = malloc(max_rows * sizeof(float));
    for (size_t i = 0; i < max_rows * FEATURES; i++) rows[i] = uniform() * 4 - 2;
    printf("{\"bench\": \"gpu_l2_setup\", \"model\": \"%s\", \"trees\": %u, \"cores\": %ld, \"cpu_threads\": %u, "
           "\"gpu\": \"%s\"}\n", model, isn_forest_num_trees(f), cores, threads, gpu ? "yes" : err);

    /* 2 first: the CPU reference. */
    double q1 = cpu_qps(f, rows, 1, seconds), qT = cpu_qps(f, rows, threads, seconds);
    printf("{\"bench\": \"gpu_l2_cpu\", \"candidates\": %d, \"trees\": %u, \"one_thread_qps\": %.1f, "
           "\"one_thread_ms_per_query\": %.3f, \"threads\": %u, \"qps\": %.1f}\n",
           CANDIDATES, isn_forest_num_trees(f), q1, 1e3 / q1, threads, qT);
    fflush(stdout);
    if (!gpu) {
        fprintf(stderr, "bench_gpu_l2: no GPU: %s\n", err);
        if (pinned) isn_gpu_l2_host_free(pinned);
        else free(rows);
        isn_forest_free(f);
        return 0;
    }
    /* 1. batches */
    static const uint32_t batches[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        call c = {.gpu = gpu, .forest = f, .rows = rows, .n = batches[b] * CANDIDATES, .out = gpu_out};
        median_ms(&c, true, 0.05); /* warm: model upload, buffers */
        double ms = median_ms(&c, true, 0.5);
        isn_forest_predict(f, rows, c.n, FEATURES, cpu_out);
        uint32_t mismatches = 0;
        for (uint32_t i = 0; i < c.n; i++) mismatches += memcmp(&cpu_out[i], &gpu_out[i], sizeof(float)) != 0;
        double qps = batches[b] / (ms / 1e3);
        printf("{\"bench\": \"gpu_l2_batch\", \"batch\": %u, \"candidates\": %d, \"trees\": %u, \"batch_ms\": %.4f, "
               "\"qps\": %.1f, \"x_cpu_threads\": %.2f, \"kernel_ms\": %.4f, \"transfer_ms\": %.4f, \"tree_groups\": %u, "
               "\"mismatches\": %u}\n",
               batches[b], CANDIDATES, isn_forest_num_trees(f), ms, qps, qps / qT, c.stats.ms_kernels,
               c.stats.ms_transfer, c.stats.tree_splits, mismatches);
        fflush(stdout);
    }
    /* 1b. variants */
    isn_forest_predict(f, rows, MAX_BATCH * CANDIDATES, FEATURES, cpu_out);
    static const uint32_t vbatches[] = {16, 64, 256}, vchunks[] = {1, 2, 3, 4, 8};
    for (size_t b = 0; b < sizeof vbatches / sizeof vbatches[0]; b++)
        for (size_t k = 0; k < sizeof vchunks / sizeof vchunks[0]; k++)
            for (uint32_t split = 0; split < 2; split++)
                variant_row(f, rows, vbatches[b], vchunks[k], split ? 1 : 0, gpu_out, cpu_out);
    /* 3. crossover */
    static const uint32_t sizes[] = {100, 300, 1000, 3000};
    static const uint32_t cands[] = {10, 30, 100, 300, 1000, 3000, 10000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        snprintf(path, sizeof path, "%s/m%u.json", dir, sizes[s]);
        write_model(path, sizes[s], 6);
        isn_forest *m = load(path);
        uint32_t crossover = 0;
        for (size_t k = 0; k < sizeof cands / sizeof cands[0]; k++) {
            call c = {.gpu = gpu, .forest = m, .rows = rows, .n = cands[k], .out = gpu_out};
            median_ms(&c, true, 0.02);
            double g = median_ms(&c, true, 0.2), cpu = median_ms(&c, false, 0.2);
            if (!crossover && g < cpu) crossover = cands[k];
            printf("{\"bench\": \"gpu_l2_crossover\", \"trees\": %u, \"candidates\": %u, \"cpu_one_thread_ms\": %.4f, "
                   "\"gpu_ms\": %.4f, \"gpu_kernel_ms\": %.4f, \"tree_groups\": %u}\n",
                   sizes[s], cands[k], cpu, g, c.stats.ms_kernels, c.stats.tree_splits);
            fflush(stdout);
        }
        printf("{\"bench\": \"gpu_l2_crossover_summary\", \"trees\": %u, \"gpu_wins_from_candidates\": %u}\n", sizes[s],
               crossover);
        isn_forest_free(m);
    }
    isn_gpu_l2_cache_info info;
    isn_gpu_l2_cache_get(gpu, &info);
    printf("{\"bench\": \"gpu_l2_cache\", \"resident_models\": %u, \"resident_bytes\": %llu, \"hits\": %llu, "
           "\"misses\": %llu, \"evictions\": %llu}\n",
           info.resident_models, (unsigned long long)info.resident_bytes, (unsigned long long)info.hits,
           (unsigned long long)info.misses, (unsigned long long)info.evictions);
    isn_gpu_l2_close(gpu);
    if (pinned) isn_gpu_l2_host_free(pinned);
    else free(rows);
    free(gpu_out);
    free(cpu_out);
    isn_forest_free(f);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    return system(path) == 0 ? 0 : 1;
}
