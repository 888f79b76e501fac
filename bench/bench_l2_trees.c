/* Second-stage CPU speed: per query, N candidates through a tree ensemble (default: the oracle model of
 * tests/unit/test_trees.c, 1,000 trees of depth 6 trained by XGBoost), on one thread and on T threads that
 * each score their own queries. Prints JSON.
 *   bench_l2_trees [MODEL.json] [CANDIDATES (1000)] [THREADS (all cores)] [SECONDS (3)] */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/base.h"
#include "ranking/ranking.h"

typedef struct {
    const isn_forest *forest;
    uint32_t n, width;
    double seconds;
    uint64_t queries;
    double busy;
} worker;

static void *run(void *arg) {
    worker *w = arg;
    float *rows = malloc(sizeof(float) * w->n * w->width), *out = malloc(sizeof(float) * w->n);
    unsigned seed = 1;
    for (size_t i = 0; i < (size_t)w->n * w->width; i++)
        rows[i] = (float)rand_r(&seed) / RAND_MAX * 4 - 2;
    double start = isn_now_seconds(), end = start + w->seconds;
    while (isn_now_seconds() < end) {
        isn_forest_predict(w->forest, rows, w->n, w->width, out);
        w->queries++;
    }
    w->busy = isn_now_seconds() - start;
    free(rows);
    free(out);
    return NULL;
}

static double measure(const isn_forest *f, uint32_t n, uint32_t threads, double seconds, double *per_query_ms) {
    pthread_t tid[256];
    worker w[256];
    uint64_t total = 0;
    double busy = 0;
    for (uint32_t t = 0; t < threads; t++) {
        w[t] = (worker){.forest = f, .n = n, .width = isn_forest_num_inputs(f), .seconds = seconds};
        pthread_create(&tid[t], NULL, run, &w[t]);
    }
    for (uint32_t t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        total += w[t].queries;
        busy += w[t].busy;
    }
    *per_query_ms = busy / total * 1e3;
    return total / (busy / threads);
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "build/l2-oracle/xgb_model.json";
    uint32_t n = argc > 2 ? (uint32_t)atoi(argv[2]) : 1000;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t threads = argc > 3 ? (uint32_t)atoi(argv[3]) : (uint32_t)cores;
    double seconds = argc > 4 ? atof(argv[4]) : 3;
    char err[ISN_ERR_LEN];
    isn_forest *f = isn_forest_load_xgboost(model, err, sizeof err);
    if (f == NULL) {
        fprintf(stderr, "bench_l2_trees: %s (run build/tests/test_trees once to generate it)\n", err);
        return 1;
    }
    if (threads < 1 || threads > 256 || n < 1) {
        fprintf(stderr, "bench_l2_trees: threads must be 1..256 and candidates >= 1\n");
        return 2;
    }
    double ms1, msT;
    double qps1 = measure(f, n, 1, seconds, &ms1);
    double qpsT = measure(f, n, threads, seconds, &msT);
    const char *kernel = getenv("ISN_L2_KERNEL"); /* scalar | avx2 | avx512; unset = the best this CPU has */
    printf("{\"model\": \"%s\", \"kernel\": \"%s\", \"trees\": %u, \"candidates\": %u, \"cores\": %ld,\n"
           " \"one_thread\": {\"ms_per_query\": %.3f, \"queries_per_s\": %.1f, \"ns_per_doc_tree\": %.3f},\n"
           " \"threads_%u\": {\"ms_per_query\": %.3f, \"queries_per_s\": %.1f}}\n",
           model, kernel ? kernel : "best", isn_forest_num_trees(f), n, cores, ms1, qps1, ms1 * 1e6 / ((double)n * isn_forest_num_trees(f)),
           threads, msT, qpsT);
    isn_forest_free(f);
    return 0;
}
