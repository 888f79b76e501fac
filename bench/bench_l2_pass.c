/* The whole second stage (FE + MIT + model) per query, CPU against the one-pass GPU (gpu.h
 * isn_gpu_l2_pass), on a real index and query log. JSON lines on stdout, one per (ranker shape, n1):
 *   cpu_1t: one thread, per query: gather (hits from the index), rows (features from hits),
 *           transforms, model (ms, medians over the queries); cpu_all: every core (one query per thread
 *           at a time, as isnd's workers), queries/s over at least --seconds after a warm pass;
 *   gpu:    per query, the gather on the CPU then one pass (hits in, scores out): pack (the hits into
 *           the page-locked buffer, on the CPU), transfer, kernels, total (medians), and the kernels
 *           split features / transforms / model (kernels_ms); and batches of --batch queries in one pass: queries/s. Scores are checked
 *           equal to the CPU's, every candidate (mismatches counted).
 * Ranker shapes are generated over the index's features (inputs cycle through the features under the
 * four transform kinds): small 100 inputs / 100 trees, medium 500 / 500 (depth 6), and large, the issue's
 * "1,250 inputs, 1,250 trees, two MLP layers": a stacked ranker of 1,250 inputs, 1,250 trees of depth 6,
 * then a two-layer MLP (a hidden layer of LARGE_HEAD_HIDDEN ReLU units, then the linear output) over the
 * 1,250 inputs and the trees' score; an MLP shape (1,250 inputs, two hidden layers of 256) for the MLP
 * path alone. "model" says which ("xgboost", "xgboost+mlp", "mlp").
 * With --check, before the timings, every feature of every candidate and every score of the device pass
 * (the GPU's, else the emulated device's: isn_gpu_l2_pass_emulated) is compared with the CPU's, bit for
 * bit ("check": values compared, values that differ, scores that differ).
 * With --gather-threads K (K > 1) the device pass's gather runs on a crew of K threads (gpu.h
 * isn_gpu_l2_gather: a query's candidates in slices of neighbouring doc ids, a batch's queries at once):
 * its time per query ("gather_crew": the crew's and one thread's, measured alike after the CPU stage read
 * the same lists; with --cpu-only too), the GPU's per-query and batch
 * numbers and the check then take that gather.
 *   bench_l2_pass --index DIR --queries FILE.tsv [--n1 100,1000,10000] [--shapes small,medium,large,mlp]
 *                 [--threads N] [--seconds S] [--batch Q] [--max-queries M] [--gather-threads K] [--cpu-only]
 *                 [--check] [--keep-rankers DIR] [--pipeline P[xK][,P[xK]...]] [--pipeline-gather K]
 * --keep-rankers writes the generated rankers (SHAPE.ranker, SHAPE.model, and large's MLP large.head.mlp) to DIR
 * and keeps them there: a
 * ranker directory for isnd (rerank.ranker_dir), as bench/rerank_serving_device.sh serves them.
 * With --pipeline P (or a list of P or PxK: P producers of K gather threads each), throughput on both
 * sides over the second stage alone (the candidates of every query found once beforehand, so the first
 * stage's search is in neither):
 *   cpu_all_l2:   every core (--threads), one query per thread at a time: queries/s, ms = 1000 / qps;
 *   gpu_pipeline: P producer threads, each gathering a batch of --batch queries (alone, or on its own
 *                 crew of --pipeline-gather threads) and running its pass while the others gather: the
 *                 handle has P in-flight slots, so one batch's copies and kernels overlap the next
 *                 batches' gathers and each other; queries/s over at least --seconds after a warm
 *                 0.3 s, ms = 1000 / qps, the speedups over cpu_all_l2 and cpu_all, and the per-query
 *                 means of each step (which overlap: gather, pack, waiting for a slot, transfer,
 *                 kernels, and the kernels split features / transforms / model; with other streams'
 *                 kernels running beside them these are longer than alone). Every score is compared with the CPU's (mismatches counted). Without a GPU
 *                 the emulated device runs it (a check of the mode, not a measurement). With a list,
 *                 gpu_pipeline is its fastest entry and gpu_pipeline_all every entry. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"

#define MAX_QUERIES 4096
#define MAX_BATCH 64
#define MAX_PIPELINES 16
#define LARGE_HEAD_HIDDEN 64

static uint64_t rng = 4242;
static uint32_t rnd(uint32_t bound) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % bound;
}

static char *query_text[MAX_QUERIES];
static uint32_t num_queries;
static const isn_index *ix;
static char workdir[200] = "/tmp/bench-l2-pass-XXXXXX";

static double now_ms(void) { return (double)isn_now_ns() / 1e6; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, uint32_t n) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, const char *err) {
    fprintf(stderr, "bench_l2_pass: %s: %s\n", what, err);
    exit(1);
}

/* The device pass's gather for one query: on the crew when there is one (rows then in slice order:
 * *order maps them back), else on one thread into ws. */
static void pass_gather(isn_gpu_l2_gather_crew *crew, isn_l2_workspace *ws, const isn_query *query, const uint32_t *docs,
                        uint32_t n, isn_feature_hits *one, const isn_feature_hits *const **list, uint32_t *num,
                        const uint32_t **order) {
    char err[ISN_ERR_LEN];
    if (crew) {
        const isn_gpu_l2_candidates c = {query, 0, docs, n};
        if (isn_gpu_l2_gather(crew, &c, 1, list, num, order, err, sizeof err) != 0) die("gather crew", err);
        return;
    }
    if (isn_feature_hits_gather(ws, query, 0, docs, n, one, err, sizeof err) != 0) die("gather", err);
    static const isn_feature_hits *single[1];
    single[0] = one;
    *list = single;
    *num = 1;
    *order = NULL;
}

/* Puts the pass's rows (of `width` floats) back in the candidates' order. */
static void unslice(const uint32_t *order, uint32_t n, uint32_t width, const float *from, float *to) {
    for (uint32_t r = 0; r < n; r++) memcpy(to + (size_t)order[r] * width, from + (size_t)r * width, width * sizeof(float));
}

/* An MLP file of `inputs` inputs and the given layers (ReLU, the last linear), small random weights;
 * with stacked, the last input (the trees' score) weighs more, so that the trees matter. */
static void write_mlp(FILE *m, uint32_t inputs, const uint32_t *widths, int layers, bool stacked) {
    uint32_t in = inputs;
    fprintf(m, "isn-mlp 1\ninputs %u\n", inputs);
    for (int l = 0; l < layers; l++) {
        fprintf(m, "layer %u %s\n", widths[l], l + 1 < layers ? "relu" : "linear");
        for (uint32_t o = 0; o < widths[l]; o++, fputc('\n', m))
            for (uint32_t i = 0; i < in; i++)
                fprintf(m, "%.4f ", ((int)rnd(2001) - 1000) / (stacked && l == 0 && i + 1 == in ? 2000.0 : 20000.0));
        for (uint32_t o = 0; o < widths[l]; o++) fprintf(m, "0.01 ");
        fputc('\n', m);
        in = widths[l];
    }
}

/* A ranker of `inputs` inputs cycling over the features and transforms, and `trees` complete trees of
 * depth 6 whose thresholds are values the inputs take on real candidates (sample rows), or an MLP;
 * with head, the trees then a two-layer MLP over the inputs and their score (SHAPE.head.mlp). */
static isn_ranker *make_ranker(const char *shape, uint32_t inputs, uint32_t trees, bool mlp, bool head,
                               const float *sample, uint32_t sample_rows) {
    const isn_index_info *info = isn_index_get_info(ix);
    const uint32_t nf = isn_feature_count(info);
    char path[sizeof workdir + 64], model[sizeof workdir + 64], name[ISN_FEATURE_NAME_MAX + ISN_FIELD_NAME_MAX], err[ISN_ERR_LEN];
    snprintf(path, sizeof path, "%s/%s.ranker", workdir, shape);
    snprintf(model, sizeof model, "%s/%s.model", workdir, shape);
    FILE *r = fopen(path, "w");
    if (!r) die(path, "cannot write");
    fprintf(r, "isn-ranker 1\nname %s\nmodel %s %s.model\n", shape, mlp ? "mlp" : "xgboost", shape);
    if (head) fprintf(r, "then mlp %s.head.mlp\n", shape);
    for (uint32_t j = 0; j < inputs; j++) {
        isn_feature_name(info, j % nf, name, sizeof name);
        switch ((j / nf) % 4) {
        case 0: fprintf(r, "input %s\n", name); break;
        case 1: fprintf(r, "input %s log 1 0\n", name); break;
        case 2: fprintf(r, "input %s linear 0.5 1\n", name); break;
        default: fprintf(r, "input %s bucket 0 1 2 4 8 16 32\n", name); break;
        }
    }
    fclose(r);
    FILE *m = fopen(model, "w");
    if (!m) die(model, "cannot write");
    if (mlp) {
        const uint32_t widths[3] = {256, 256, 1};
        write_mlp(m, inputs, widths, 3, false);
    } else {
        const uint32_t depth = 6, nodes = (1u << (depth + 1)) - 1, splits = (1u << depth) - 1;
        uint32_t *feat = malloc(nodes * sizeof *feat);
        float *cond = malloc(nodes * sizeof *cond);
        fprintf(m, "{\"learner\": {\"feature_names\": [], \"gradient_booster\": {\"name\": \"gbtree\", \"model\": {\"trees\": [");
        for (uint32_t t = 0; t < trees; t++) {
            for (uint32_t i = 0; i < nodes; i++) {
                feat[i] = rnd(inputs);
                /* a raw feature value: a threshold in the input's own units only for identity inputs,
                 * but any real value splits somewhere */
                cond[i] = i < splits ? sample[(size_t)rnd(sample_rows) * nf + feat[i] % nf] : ((int)rnd(2001) - 1000) / 1e4f;
                if (cond[i] != cond[i]) cond[i] = 0;
            }
            fprintf(m, "%s{\"left_children\": [", t ? ",\n" : "\n");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%d", i ? "," : "", i < splits ? (int)(2 * i + 1) : -1);
            fprintf(m, "], \"right_children\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%d", i ? "," : "", i < splits ? (int)(2 * i + 2) : -1);
            fprintf(m, "], \"split_conditions\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%.9g", i ? "," : "", cond[i]);
            fprintf(m, "], \"split_indices\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%u", i ? "," : "", i < splits ? feat[i] : 0);
            fprintf(m, "], \"default_left\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s%u", i ? "," : "", i % 2);
            fprintf(m, "], \"split_type\": [");
            for (uint32_t i = 0; i < nodes; i++) fprintf(m, "%s0", i ? "," : "");
            fprintf(m, "]}");
        }
        fprintf(m, "]}},\n \"learner_model_param\": {\"base_score\": \"5E-1\", \"num_class\": \"0\", \"num_feature\": "
                   "\"%u\"}, \"objective\": {\"name\": \"rank:ndcg\"}}, \"version\": [1, 7, 4]}\n", inputs);
        free(feat);
        free(cond);
    }
    fclose(m);
    if (head) { /* after the trees: they stay those of the trees-only shape of the same size */
        char head_path[sizeof workdir + 64];
        snprintf(head_path, sizeof head_path, "%s/%s.head.mlp", workdir, shape);
        FILE *h = fopen(head_path, "w");
        if (!h) die(head_path, "cannot write");
        const uint32_t widths[2] = {LARGE_HEAD_HIDDEN, 1};
        write_mlp(h, inputs + 1, widths, 2, true);
        fclose(h);
    }
    isn_ranker *rk = isn_ranker_load(path, info, err, sizeof err);
    if (!rk) die(path, err);
    return rk;
}

/* One query's candidates: the first stage's best n1. */
static uint32_t candidates(isn_searcher *s, uint32_t q, uint32_t n1, isn_query *query, isn_hit *hits, uint32_t *docs) {
    char err[ISN_ERR_LEN];
    if (isn_query_parse(s, query_text[q], strlen(query_text[q]), query, err, sizeof err) != 0) die("query", err);
    isn_search_options o;
    isn_search_options_default(&o);
    o.k = n1;
    uint32_t n = 0;
    isn_search_stats st;
    if (isn_search(s, query, &o, hits, &n, &st, err, sizeof err) != 0) die("search", err);
    for (uint32_t i = 0; i < n; i++) docs[i] = hits[i].doc;
    return n;
}

typedef struct {
    const isn_ranker *rk;
    uint32_t n1;
    double seconds;
    uint32_t next_query;
    pthread_mutex_t lock;
    uint64_t done;
    double stop_at;
} cpu_run;

/* The CPU's whole second stage for one query, as isn_rerank runs it: features, transforms, model. */
static void cpu_stage(isn_l2_workspace *ws, const isn_ranker *rk, const isn_query *query, const uint32_t *docs,
                      uint32_t n, float *rows, float *inputs, float *scratch, float *scores, double *ms) {
    char err[ISN_ERR_LEN];
    const uint32_t nf = isn_feature_count(isn_index_get_info(ix));
    isn_feature_hits hits;
    double t0 = now_ms();
    if (isn_feature_hits_gather(ws, query, 0, docs, n, &hits, err, sizeof err) != 0) die("gather", err);
    double t1 = now_ms();
    isn_feature_rows(&hits, rows);
    double t2 = now_ms();
    isn_ranker_transform(rk, rows, nf, n, inputs);
    double t3 = now_ms();
    isn_ranker_predict(rk, inputs, n, isn_ranker_num_inputs(rk), scratch, scores);
    double t4 = now_ms();
    if (ms) ms[0] = t1 - t0, ms[1] = t2 - t1, ms[2] = t3 - t2, ms[3] = t4 - t3;
}

static void *cpu_worker(void *arg) {
    cpu_run *run = arg;
    const uint32_t nf = isn_feature_count(isn_index_get_info(ix)), ni = isn_ranker_num_inputs(run->rk);
    isn_searcher *s = isn_searcher_new(ix);
    isn_l2_workspace *ws = isn_l2_workspace_new(ix);
    isn_hit *hits = malloc((size_t)run->n1 * sizeof *hits);
    uint32_t *docs = malloc((size_t)run->n1 * sizeof *docs);
    float *rows = malloc((size_t)run->n1 * nf * sizeof(float)), *inputs = malloc((size_t)run->n1 * ni * sizeof(float));
    float *scores = malloc(run->n1 * sizeof(float));
    float *scratch = malloc(isn_ranker_scratch_floats(run->rk, run->n1) * sizeof(float) + 1);
    for (;;) {
        pthread_mutex_lock(&run->lock);
        uint32_t q = run->next_query++ % num_queries;
        pthread_mutex_unlock(&run->lock);
        if (now_ms() > run->stop_at) break;
        isn_query query;
        uint32_t n = candidates(s, q, run->n1, &query, hits, docs);
        cpu_stage(ws, run->rk, &query, docs, n, rows, inputs, scratch, scores, NULL);
        pthread_mutex_lock(&run->lock);
        run->done++;
        pthread_mutex_unlock(&run->lock);
    }
    free(hits), free(docs), free(rows), free(inputs), free(scores), free(scratch);
    isn_l2_workspace_free(ws);
    isn_searcher_free(s);
    return NULL;
}

static double cpu_rate(const isn_ranker *rk, uint32_t n1, uint32_t threads, double seconds) {
    cpu_run run = {.rk = rk, .n1 = n1, .seconds = seconds};
    pthread_mutex_init(&run.lock, NULL);
    pthread_t th[256];
    double t0 = now_ms();
    run.stop_at = t0 + seconds * 1000;
    for (uint32_t t = 0; t < threads; t++) pthread_create(&th[t], NULL, cpu_worker, &run);
    for (uint32_t t = 0; t < threads; t++) pthread_join(th[t], NULL);
    double elapsed = (now_ms() - t0) / 1000;
    pthread_mutex_destroy(&run.lock);
    return run.done / elapsed;
}

/* ------------------------------------------------------------------ throughput of the second stage alone */

/* Every query's candidates, found once (its terms copied out of the searcher), and the CPU's scores. */
typedef struct {
    uint32_t n1;
    isn_query *query;
    isn_query_term **terms;
    uint32_t *docs; /* query q's at docs + q * n1 */
    uint32_t *n;
    float *cpu_scores; /* likewise */
} candidate_sets;

static void candidate_sets_keep(candidate_sets *c, uint32_t q, const isn_query *query, const uint32_t *docs, uint32_t n,
                                const float *scores) {
    c->query[q] = *query;
    c->terms[q] = realloc(c->terms[q], (query->num_terms + 1) * sizeof *c->terms[q]);
    if (!c->terms[q]) die("candidates", "out of memory");
    if (query->num_terms) memcpy(c->terms[q], query->terms, query->num_terms * sizeof *query->terms);
    c->query[q].terms = c->terms[q];
    c->query[q].structure = NULL; /* the gather reads the terms alone */
    memcpy(c->docs + (size_t)q * c->n1, docs, n * sizeof *docs);
    memcpy(c->cpu_scores + (size_t)q * c->n1, scores, n * sizeof *scores);
    c->n[q] = n;
}

typedef struct {
    const isn_ranker *rk;
    const candidate_sets *c;
    isn_gpu_l2 *gpu;                /* NULL: the emulated device below */
    isn_gpu_l2_emulated *emulated;
    uint32_t batch, gather_threads;
    _Atomic uint64_t next; /* the next query (a thread takes batch of them) */
    double stop_at;
    pthread_mutex_t lock;
    /* summed by the threads at their end */
    uint64_t queries, compared, mismatches;
    double gather_ms, pack_ms, wait_ms, transfer_ms, kernels_ms, fe_ms, mit_ms, model_ms;
    int failed;
    char err[ISN_ERR_LEN];
} pipeline_run;

/* The CPU's second stage from the kept candidates, one query at a time per thread. */
static void *cpu_l2_worker(void *arg) {
    pipeline_run *run = arg;
    const candidate_sets *c = run->c;
    const uint32_t nf = isn_feature_count(isn_index_get_info(ix)), ni = isn_ranker_num_inputs(run->rk);
    isn_l2_workspace *ws = isn_l2_workspace_new(ix);
    float *rows = malloc((size_t)c->n1 * nf * sizeof(float)), *inputs = malloc((size_t)c->n1 * ni * sizeof(float));
    float *scores = malloc(c->n1 * sizeof(float));
    float *scratch = malloc(isn_ranker_scratch_floats(run->rk, c->n1) * sizeof(float) + 1);
    uint64_t done = 0;
    while (now_ms() < run->stop_at) {
        const uint32_t q = (uint32_t)(atomic_fetch_add(&run->next, 1) % num_queries);
        cpu_stage(ws, run->rk, &c->query[q], c->docs + (size_t)q * c->n1, c->n[q], rows, inputs, scratch, scores, NULL);
        done++;
    }
    pthread_mutex_lock(&run->lock);
    run->queries += done;
    pthread_mutex_unlock(&run->lock);
    free(rows), free(inputs), free(scores), free(scratch);
    isn_l2_workspace_free(ws);
    return NULL;
}

/* A producer: gathers its batch (alone, or on its crew), runs the pass in one of the handle's slots,
 * checks the scores; the other producers gather meanwhile. */
static void *gpu_producer(void *arg) {
    pipeline_run *run = arg;
    const candidate_sets *c = run->c;
    const uint32_t B = run->batch;
    isn_l2_workspace *ws[MAX_BATCH];
    for (uint32_t b = 0; b < B; b++) ws[b] = run->gather_threads > 1 ? NULL : isn_l2_workspace_new(ix);
    isn_gpu_l2_gather_crew *crew = run->gather_threads > 1 ? isn_gpu_l2_gather_crew_new(ix, run->gather_threads, 0) : NULL;
    if (run->gather_threads > 1 && !crew) die("pipeline crew", "cannot start");
    const size_t cap = (size_t)B * c->n1;
    /* page-locked for the GPU: the scores come back on the slot's stream, straight into it */
    float *scores = run->gpu ? isn_gpu_l2_host_alloc(cap * sizeof(float)) : malloc(cap * sizeof(float));
    float *in_order = malloc(cap * sizeof(float));
    if (!scores || !in_order) die("pipeline", "out of memory");
    uint64_t queries = 0, compared = 0, mismatches = 0;
    double gather_ms = 0, pack_ms = 0, wait_ms = 0, transfer_ms = 0, kernels_ms = 0, fe_ms = 0, mit_ms = 0, model_ms = 0;
    char err[ISN_ERR_LEN];
    int failed = 0;
    while (!failed && now_ms() < run->stop_at) {
        const uint64_t first = atomic_fetch_add(&run->next, B);
        isn_feature_hits hits[MAX_BATCH];
        const isn_feature_hits *list[MAX_BATCH];
        isn_gpu_l2_candidates cands[MAX_BATCH];
        uint32_t qs[MAX_BATCH], rows = 0;
        const double g0 = now_ms();
        for (uint32_t b = 0; b < B; b++) {
            qs[b] = (uint32_t)((first + b) % num_queries);
            cands[b] = (isn_gpu_l2_candidates){&c->query[qs[b]], 0, c->docs + (size_t)qs[b] * c->n1, c->n[qs[b]]};
            rows += c->n[qs[b]];
            if (!crew && isn_feature_hits_gather(ws[b], cands[b].query, 0, cands[b].docs, cands[b].n, &hits[b], err,
                                                 sizeof err) != 0)
                die("pipeline gather", err);
            list[b] = &hits[b];
        }
        const isn_feature_hits *const *slices = list;
        uint32_t num_slices = B;
        const uint32_t *order = NULL;
        if (crew && isn_gpu_l2_gather(crew, cands, B, &slices, &num_slices, &order, err, sizeof err) != 0)
            die("pipeline crew", err);
        gather_ms += now_ms() - g0;
        isn_gpu_l2_stats st;
        memset(&st, 0, sizeof st);
        const int rc = run->gpu ? isn_gpu_l2_pass(run->gpu, run->rk, slices, num_slices, scores, NULL, &st, err, sizeof err)
                                : isn_gpu_l2_pass_on_emulated(run->emulated, run->rk, slices, num_slices, scores, NULL,
                                                              err, sizeof err);
        if (rc != 0) {
            failed = 1;
            break;
        }
        pack_ms += st.ms_pack, wait_ms += st.ms_wait, transfer_ms += st.ms_transfer, kernels_ms += st.ms_kernels;
        fe_ms += st.ms_features, mit_ms += st.ms_transforms, model_ms += st.ms_model;
        const float *got = scores;
        if (order) {
            unslice(order, rows, 1, scores, in_order);
            got = in_order;
        }
        for (uint32_t b = 0, at = 0; b < B; at += c->n[qs[b]], b++)
            for (uint32_t i = 0; i < c->n[qs[b]]; i++)
                mismatches += memcmp(&got[at + i], &c->cpu_scores[(size_t)qs[b] * c->n1 + i], sizeof(float)) != 0;
        compared += rows;
        queries += B;
    }
    pthread_mutex_lock(&run->lock);
    if (failed && !run->failed) {
        run->failed = 1;
        snprintf(run->err, sizeof run->err, "%s", err);
    }
    /* batches that ended past the stop count: they ran inside the measured time */
    run->queries += queries, run->compared += compared, run->mismatches += mismatches;
    run->gather_ms += gather_ms, run->pack_ms += pack_ms, run->wait_ms += wait_ms;
    run->transfer_ms += transfer_ms, run->kernels_ms += kernels_ms;
    run->fe_ms += fe_ms, run->mit_ms += mit_ms, run->model_ms += model_ms;
    pthread_mutex_unlock(&run->lock);
    if (run->gpu) isn_gpu_l2_host_free(scores);
    else free(scores);
    free(in_order);
    isn_gpu_l2_gather_crew_free(crew);
    for (uint32_t b = 0; b < B; b++) isn_l2_workspace_free(ws[b]);
    return NULL;
}

/* Queries/s of `threads` threads running fn for `seconds`; the run's sums are reset first. */
static double run_threads(pipeline_run *run, void *(*fn)(void *), uint32_t threads, double seconds) {
    pthread_t th[256];
    run->queries = run->compared = run->mismatches = 0;
    run->gather_ms = run->pack_ms = run->wait_ms = run->transfer_ms = run->kernels_ms = 0;
    run->fe_ms = run->mit_ms = run->model_ms = 0;
    atomic_store(&run->next, 0);
    const double t0 = now_ms();
    run->stop_at = t0 + seconds * 1000;
    for (uint32_t t = 0; t < threads; t++)
        if (pthread_create(&th[t], NULL, fn, run) != 0) die("threads", "cannot start");
    for (uint32_t t = 0; t < threads; t++) pthread_join(th[t], NULL);
    if (run->failed) die("pipeline pass", run->err);
    return run->queries / ((now_ms() - t0) / 1000);
}

int main(int argc, char **argv) {
    const char *index_dir = NULL, *queries_path = NULL, *n1_list = "100,1000,10000", *shapes = "small,medium,large,mlp";
    uint32_t threads = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN), batch = 16, max_queries = 200, gather_threads = 1;
    uint32_t pipeline = 0, pipeline_gather = 1; /* the most producers of the list; default K */
    const char *pipeline_list = NULL;
    double seconds = 2;
    bool cpu_only = false, check = false;
    const char *keep_rankers = NULL;
    static struct option opts[] = {{"index", 1, 0, 'i'},   {"queries", 1, 0, 'q'}, {"n1", 1, 0, 'n'},
                                   {"shapes", 1, 0, 's'},  {"threads", 1, 0, 't'}, {"seconds", 1, 0, 'S'},
                                   {"batch", 1, 0, 'b'},   {"max-queries", 1, 0, 'm'}, {"cpu-only", 0, 0, 'c'}, {"check", 0, 0, 'k'},
                                   {"gather-threads", 1, 0, 'g'}, {"keep-rankers", 1, 0, 'K'}, {"pipeline", 1, 0, 'P'},
                                   {"pipeline-gather", 1, 0, 'G'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'i': index_dir = optarg; break;
        case 'q': queries_path = optarg; break;
        case 'n': n1_list = optarg; break;
        case 's': shapes = optarg; break;
        case 't': threads = (uint32_t)atoi(optarg); break;
        case 'S': seconds = atof(optarg); break;
        case 'b': batch = (uint32_t)atoi(optarg); break;
        case 'm': max_queries = (uint32_t)atoi(optarg); break;
        case 'c': cpu_only = true; break;
        case 'k': check = true; break;
        case 'K': keep_rankers = optarg; break;
        case 'g': gather_threads = (uint32_t)atoi(optarg); break;
        case 'P': pipeline_list = optarg; break;
        case 'G': pipeline_gather = (uint32_t)atoi(optarg); break;
        default: fprintf(stderr, "usage: see bench/bench_l2_pass.c\n"); return 2;
        }
    }
    if (!index_dir || !queries_path || threads == 0 || threads > 256 || batch == 0 || batch > MAX_BATCH ||
        max_queries == 0 || max_queries > MAX_QUERIES || gather_threads == 0 || gather_threads > 256 ||
        pipeline_gather == 0 || pipeline_gather > 256) {
        fprintf(stderr, "bench_l2_pass: --index DIR and --queries FILE.tsv are required; --threads 1..256, --batch "
                        "1..%d, --max-queries 1..%d, --gather-threads 1..256, --pipeline-gather 1..256\n", MAX_BATCH,
                MAX_QUERIES);
        return 2;
    }
    uint32_t pipe_producers[MAX_PIPELINES], pipe_gather[MAX_PIPELINES], num_pipes = 0;
    for (const char *p = pipeline_list; p && *p;) {
        char *end;
        unsigned long producers = strtoul(p, &end, 10), k = pipeline_gather;
        if (*end == 'x') k = strtoul(end + 1, &end, 10);
        if (producers == 0 || producers > 64 || k == 0 || k > 256 || (*end && *end != ',') || num_pipes == MAX_PIPELINES) {
            fprintf(stderr, "bench_l2_pass: --pipeline %s: a list of at most %d entries P or PxK (P producers 1..64, K "
                            "gather threads each 1..256)\n", pipeline_list, MAX_PIPELINES);
            return 2;
        }
        pipe_producers[num_pipes] = (uint32_t)producers;
        pipe_gather[num_pipes++] = (uint32_t)k;
        if (producers > pipeline) pipeline = (uint32_t)producers;
        p = *end ? end + 1 : end;
    }
    char err[ISN_ERR_LEN];
    isn_index *index = isn_index_open(index_dir, err, sizeof err);
    if (!index) die(index_dir, err);
    ix = index;
    FILE *qf = fopen(queries_path, "r");
    if (!qf) die(queries_path, "cannot read");
    char line[8192];
    while (num_queries < max_queries && fgets(line, sizeof line, qf)) {
        char *text = strchr(line, '\t');
        if (!text) continue;
        text[strcspn(text, "\n")] = 0;
        query_text[num_queries++] = strdup(text + 1);
    }
    fclose(qf);
    if (keep_rankers) {
        if (strlen(keep_rankers) >= sizeof workdir) die(keep_rankers, "path too long");
        if (mkdir(keep_rankers, 0755) != 0 && errno != EEXIST) die(keep_rankers, strerror(errno));
        snprintf(workdir, sizeof workdir, "%s", keep_rankers);
    } else if (!mkdtemp(workdir)) die("mkdtemp", "failed");
    isn_gpu_l2 *gpu = NULL;
    if (!cpu_only) {
        isn_gpu_l2_options o;
        isn_gpu_l2_options_default(&o);
        if (pipeline) o.pass_slots = pipeline; /* a slot for every producer's pass */
        gpu = isn_gpu_l2_open(&o, err, sizeof err);
        if (!gpu) fprintf(stderr, "bench_l2_pass: no GPU (%s): CPU only\n", err);
    }
    const isn_index_info *info = isn_index_get_info(ix);
    const uint32_t nf = isn_feature_count(info);
    isn_searcher *s = isn_searcher_new(ix);
    isn_l2_workspace *ws = isn_l2_workspace_new(ix), *batch_ws[MAX_BATCH];
    for (uint32_t b = 0; b < batch; b++) batch_ws[b] = isn_l2_workspace_new(ix);
    isn_gpu_l2_gather_crew *crew = NULL;
    if (gather_threads > 1 && !(crew = isn_gpu_l2_gather_crew_new(ix, gather_threads, 0))) die("gather crew", "cannot start");

    /* sample rows for thresholds */
    uint32_t sample_cap = 2000, sample_rows = 0;
    float *sample = malloc((size_t)sample_cap * nf * sizeof(float));
    isn_hit *hits = malloc(10000 * sizeof *hits);
    uint32_t *docs = malloc(10000 * sizeof *docs), *batch_docs = malloc((size_t)MAX_BATCH * 10000 * sizeof *batch_docs);
    for (uint32_t q = 0; q < num_queries && sample_rows + 100 <= sample_cap; q++) {
        isn_query query;
        uint32_t n = candidates(s, q, 100, &query, hits, docs);
        if (isn_features_extract(ws, &query, 0, docs, n, sample + (size_t)sample_rows * nf, err, sizeof err) != 0) die("features", err);
        sample_rows += n;
    }

    char shape_list[256];
    snprintf(shape_list, sizeof shape_list, "%s", shapes);
    char *shapes_at = NULL;
    for (char *shape = strtok_r(shape_list, ",", &shapes_at); shape; shape = strtok_r(NULL, ",", &shapes_at)) {
        uint32_t inputs = 100, trees = 100;
        bool mlp = false, head = false;
        if (!strcmp(shape, "medium")) inputs = trees = 500;
        else if (!strcmp(shape, "large")) inputs = trees = 1250, head = true;
        else if (!strcmp(shape, "mlp")) inputs = 1250, mlp = true;
        else if (strcmp(shape, "small")) die(shape, "unknown shape (small, medium, large, mlp)");
        isn_ranker *rk = make_ranker(shape, inputs, trees, mlp, head, sample, sample_rows);
        for (const char *p = n1_list; *p;) {
            uint32_t n1 = (uint32_t)strtoul(p, (char **)&p, 10);
            if (*p == ',') p++;
            if (n1 == 0 || n1 > 10000) die(n1_list, "n1 must be 1..10000");
            const uint32_t ni = isn_ranker_num_inputs(rk), cap = n1 * batch;
            float *rows = malloc((size_t)cap * nf * sizeof(float)), *inputs_buf = malloc((size_t)cap * ni * sizeof(float));
            float *scores = malloc(cap * sizeof(float)), *dev_scores = isn_gpu_l2_host_alloc(cap * sizeof(float));
            float *scratch = malloc(isn_ranker_scratch_floats(rk, cap) * sizeof(float) + 1);
            double *part[4], *gpu_transfer = malloc(num_queries * sizeof(double)), *gpu_kernels = malloc(num_queries * sizeof(double));
            double *gpu_total = malloc(num_queries * sizeof(double)), *gpu_gather = malloc(num_queries * sizeof(double));
            double *cpu_total = malloc(num_queries * sizeof(double)), *crew_gather = malloc(num_queries * sizeof(double));
            double *one_gather = malloc(num_queries * sizeof(double)), *gpu_pack = calloc(num_queries, sizeof(double));
            double *gpu_fe = calloc(num_queries, sizeof(double)), *gpu_mit = calloc(num_queries, sizeof(double));
            double *gpu_model = calloc(num_queries, sizeof(double));
            float *sliced_rows = check ? malloc((size_t)cap * nf * sizeof(float)) : NULL;
            float *sliced_scores = gpu ? isn_gpu_l2_host_alloc(cap * sizeof(float)) : malloc(cap * sizeof(float));
            for (int k = 0; k < 4; k++) part[k] = malloc(num_queries * sizeof(double));
            uint64_t mismatches = 0, compared = 0;
            uint64_t check_values = 0, check_differ = 0, check_scores_differ = 0;
            float *check_rows = check ? malloc((size_t)cap * nf * sizeof(float)) : NULL;
            float *check_scores = check ? malloc(cap * sizeof(float)) : NULL;
            double candidates_sum = 0;
            candidate_sets kept = {.n1 = n1};
            if (pipeline) {
                kept.query = calloc(num_queries, sizeof *kept.query);
                kept.terms = calloc(num_queries, sizeof *kept.terms);
                kept.docs = malloc((size_t)num_queries * n1 * sizeof *kept.docs);
                kept.n = calloc(num_queries, sizeof *kept.n);
                kept.cpu_scores = malloc((size_t)num_queries * n1 * sizeof *kept.cpu_scores);
                if (!kept.query || !kept.terms || !kept.docs || !kept.n || !kept.cpu_scores) die("candidates", "out of memory");
            }
            for (uint32_t q = 0; q < num_queries; q++) {
                isn_query query;
                uint32_t n = candidates(s, q, n1, &query, hits, docs);
                candidates_sum += n;
                double ms[4];
                cpu_stage(ws, rk, &query, docs, n, rows, inputs_buf, scratch, scores, ms);
                if (pipeline) candidate_sets_keep(&kept, q, &query, docs, n, scores);
                for (int k = 0; k < 4; k++) part[k][q] = ms[k];
                cpu_total[q] = ms[0] + ms[1] + ms[2] + ms[3];
                if (crew && n > 0) { /* the crew against one thread, both after cpu_stage warmed the same lists */
                    const isn_feature_hits *const *list;
                    uint32_t num;
                    const uint32_t *order;
                    isn_feature_hits h;
                    double c0 = now_ms();
                    pass_gather(NULL, batch_ws[0], &query, docs, n, &h, &list, &num, &order);
                    double c1 = now_ms();
                    pass_gather(crew, NULL, &query, docs, n, NULL, &list, &num, &order);
                    one_gather[q] = c1 - c0;
                    crew_gather[q] = now_ms() - c1;
                }
                if (check && n > 0) {
                    isn_feature_hits h;
                    const isn_feature_hits *const *list;
                    uint32_t num;
                    const uint32_t *order;
                    pass_gather(crew, batch_ws[0], &query, docs, n, &h, &list, &num, &order);
                    float *pass_rows = order ? sliced_rows : check_rows, *pass_scores = order ? sliced_scores : check_scores;
                    int rc = gpu ? isn_gpu_l2_pass(gpu, rk, list, num, pass_scores, pass_rows, NULL, err, sizeof err)
                                 : isn_gpu_l2_pass_emulated(rk, list, num, pass_scores, pass_rows, err, sizeof err);
                    if (rc != 0) die("check pass", err);
                    if (order) {
                        unslice(order, n, nf, sliced_rows, check_rows);
                        unslice(order, n, 1, sliced_scores, check_scores);
                    }
                    for (size_t v = 0; v < (size_t)n * nf; v++)
                        check_differ += memcmp(&rows[v], &check_rows[v], sizeof(float)) != 0;
                    for (uint32_t i = 0; i < n; i++) check_scores_differ += memcmp(&scores[i], &check_scores[i], 4) != 0;
                    check_values += (uint64_t)n * nf;
                }
                if (!gpu || n == 0) continue;
                isn_feature_hits h;
                const isn_feature_hits *const *list;
                uint32_t num;
                const uint32_t *order;
                double g0 = now_ms();
                pass_gather(crew, batch_ws[0], &query, docs, n, &h, &list, &num, &order);
                gpu_gather[q] = now_ms() - g0;
                isn_gpu_l2_stats st;
                if (isn_gpu_l2_pass(gpu, rk, list, num, order ? sliced_scores : dev_scores, NULL, &st, err, sizeof err) != 0)
                    die("GPU pass", err);
                double u0 = now_ms();
                if (order) unslice(order, n, 1, sliced_scores, dev_scores);
                gpu_transfer[q] = st.ms_transfer;
                gpu_kernels[q] = st.ms_kernels;
                gpu_pack[q] = st.ms_pack;
                gpu_fe[q] = st.ms_features, gpu_mit[q] = st.ms_transforms, gpu_model[q] = st.ms_model;
                gpu_total[q] = gpu_gather[q] + st.ms_total + (now_ms() - u0);
                for (uint32_t i = 0; i < n; i++) mismatches += memcmp(&scores[i], &dev_scores[i], sizeof(float)) != 0;
                compared += n;
            }
            double gather_ms = median(part[0], num_queries), rows_ms = median(part[1], num_queries);
            double mit_ms = median(part[2], num_queries), model_ms = median(part[3], num_queries);
            double cpu_ms = median(cpu_total, num_queries);
            cpu_rate(rk, n1, threads, 0.3); /* warm */
            double cpu_all_qps = cpu_rate(rk, n1, threads, seconds);
            printf("{\"bench\":\"l2_pass\",\"shape\":\"%s\",\"model\":\"%s\",\"inputs\":%u,\"trees\":%u,\"mlp\":%s,\"n1\":%u,"
                   "\"queries\":%u,\"mean_candidates\":%.1f,\"cpu_1t_ms\":{\"gather\":%.4f,\"rows\":%.4f,\"transforms\":%.4f,"
                   "\"model\":%.4f,\"total\":%.4f},\"cpu_all\":{\"threads\":%u,\"qps\":%.1f,\"seconds\":%.1f}",
                   shape, isn_ranker_model_kind(rk), ni, isn_ranker_num_trees(rk), isn_ranker_mlp(rk) ? "true" : "false", n1, num_queries, candidates_sum / num_queries,
                   gather_ms, rows_ms, mit_ms, model_ms, cpu_ms, threads, cpu_all_qps, seconds);
            if (crew)
                printf(",\"gather_crew\":{\"threads\":%u,\"ms\":%.4f,\"one_thread_ms\":%.4f}", gather_threads,
                       median(crew_gather, num_queries), median(one_gather, num_queries));
            if (check)
                printf(",\"check\":{\"device\":\"%s\",\"values\":%llu,\"differ\":%llu,\"scores_differ\":%llu}",
                       gpu ? "cuda" : "emulated", (unsigned long long)check_values, (unsigned long long)check_differ,
                       (unsigned long long)check_scores_differ);
            if (gpu) {
                double g_gather = median(gpu_gather, num_queries), g_transfer = median(gpu_transfer, num_queries);
                double g_kernels = median(gpu_kernels, num_queries), g_total = median(gpu_total, num_queries);
                double g_pack = median(gpu_pack, num_queries), g_fe = median(gpu_fe, num_queries);
                double g_mit = median(gpu_mit, num_queries), g_model = median(gpu_model, num_queries);
                /* batches: batch queries in one pass */
                uint32_t batches = 0;
                double t0 = now_ms();
                for (uint32_t q0 = 0; q0 + batch <= num_queries || (q0 == 0 && batches == 0); q0 += batch) {
                    const isn_feature_hits *list[MAX_BATCH];
                    isn_feature_hits hb[MAX_BATCH];
                    static isn_query bq[MAX_BATCH];
                    static isn_gpu_l2_candidates bc[MAX_BATCH];
                    uint32_t nb = 0;
                    for (uint32_t q = q0; q < q0 + batch && q < num_queries; q++) {
                        uint32_t n = candidates(s, q, n1, &bq[nb], hits, batch_docs + (size_t)nb * n1);
                        /* the crew gathers after the whole batch is searched: the terms out of the searcher */
                        static isn_query_term *terms[MAX_BATCH];
                        static uint32_t terms_cap[MAX_BATCH];
                        if (bq[nb].num_terms > terms_cap[nb]) {
                            terms[nb] = realloc(terms[nb], bq[nb].num_terms * sizeof *terms[nb]);
                            if (!terms[nb]) die("batch", "out of memory");
                            terms_cap[nb] = bq[nb].num_terms;
                        }
                        if (bq[nb].num_terms) memcpy(terms[nb], bq[nb].terms, bq[nb].num_terms * sizeof *terms[nb]);
                        bq[nb].terms = terms[nb];
                        bc[nb] = (isn_gpu_l2_candidates){&bq[nb], 0, batch_docs + (size_t)nb * n1, n};
                        if (!crew && isn_feature_hits_gather(batch_ws[nb], &bq[nb], 0, bc[nb].docs, n, &hb[nb], err, sizeof err) != 0)
                            die("gather", err);
                        list[nb] = &hb[nb];
                        nb++;
                    }
                    const isn_feature_hits *const *slices = list;
                    uint32_t num_slices = nb;
                    const uint32_t *order = NULL;
                    if (crew && isn_gpu_l2_gather(crew, bc, nb, &slices, &num_slices, &order, err, sizeof err) != 0)
                        die("gather crew", err);
                    if (isn_gpu_l2_pass(gpu, rk, slices, num_slices, dev_scores, NULL, NULL, err, sizeof err) != 0)
                        die("GPU batch", err);
                    batches++;
                    if (q0 + batch >= num_queries) break;
                }
                double batch_s = (now_ms() - t0) / 1000;
                printf(",\"gpu\":{\"gather_threads\":%u,\"per_query_ms\":{\"gather_cpu\":%.4f,\"pack\":%.4f,\"transfer\":%.4f,\"kernels\":%.4f,\"total\":%.4f},"
                       "\"kernels_ms\":{\"features\":%.4f,\"transforms\":%.4f,\"model\":%.4f},"
                       "\"batch\":%u,\"batched_qps_with_first_stage\":%.1f,\"speedup_1t\":%.2f,\"compared\":%llu,"
                       "\"mismatches\":%llu}",
                       gather_threads, g_gather, g_pack, g_transfer, g_kernels, g_total, g_fe, g_mit, g_model, batch, batches * batch / batch_s,
                       g_total > 0 ? cpu_ms / g_total : 0, (unsigned long long)compared, (unsigned long long)mismatches);
            }
            if (pipeline) {
                pipeline_run run = {.rk = rk, .c = &kept, .gpu = gpu, .batch = batch};
                pthread_mutex_init(&run.lock, NULL);
                run_threads(&run, cpu_l2_worker, threads, 0.3); /* warm */
                const double cpu_l2_qps = run_threads(&run, cpu_l2_worker, threads, seconds);
                printf(",\"cpu_all_l2\":{\"threads\":%u,\"qps\":%.1f,\"per_query_ms\":%.4f,\"seconds\":%.1f}", threads,
                       cpu_l2_qps, cpu_l2_qps > 0 ? 1000 / cpu_l2_qps : 0, seconds);
                if (!gpu && !(run.emulated = isn_gpu_l2_emulated_new(pipeline))) die("emulated device", "out of memory");
                static char entry[MAX_PIPELINES][1024];
                double best_qps = -1;
                uint32_t best = 0;
                for (uint32_t e = 0; e < num_pipes; e++) {
                    run.gather_threads = pipe_gather[e];
                    run_threads(&run, gpu_producer, pipe_producers[e], 0.3); /* warm: the slots' buffers grown */
                    const double qps = run_threads(&run, gpu_producer, pipe_producers[e], seconds);
                    const double per = run.queries ? 1.0 / run.queries : 0;
                    snprintf(entry[e], sizeof entry[e],
                             "{\"device\":\"%s\",\"producers\":%u,\"gather_threads_each\":%u,\"slots\":%u,\"batch\":%u,"
                             "\"qps\":%.1f,\"per_query_ms\":%.4f,\"speedup_vs_cpu_all_l2\":%.2f,\"speedup_vs_cpu_all\":%.2f,"
                             "\"step_ms_per_query\":{\"gather\":%.4f,\"pack\":%.4f,\"wait_slot\":%.4f,\"transfer\":%.4f,"
                             "\"kernels\":%.4f,\"features\":%.4f,\"transforms\":%.4f,\"model\":%.4f},\"compared\":%llu,"
                             "\"mismatches\":%llu}",
                             gpu ? "cuda" : "emulated", pipe_producers[e], pipe_gather[e], pipeline, batch, qps,
                             qps > 0 ? 1000 / qps : 0, cpu_l2_qps > 0 ? qps / cpu_l2_qps : 0,
                             cpu_all_qps > 0 ? qps / cpu_all_qps : 0, run.gather_ms * per, run.pack_ms * per,
                             run.wait_ms * per, run.transfer_ms * per, run.kernels_ms * per, run.fe_ms * per,
                             run.mit_ms * per, run.model_ms * per,
                             (unsigned long long)run.compared, (unsigned long long)run.mismatches);
                    if (qps > best_qps) best_qps = qps, best = e;
                }
                printf(",\"gpu_pipeline\":%s,\"gpu_pipeline_all\":[", entry[best]);
                for (uint32_t e = 0; e < num_pipes; e++) printf("%s%s", e ? "," : "", entry[e]);
                printf("]");
                isn_gpu_l2_emulated_free(run.emulated);
                pthread_mutex_destroy(&run.lock);
                for (uint32_t q = 0; q < num_queries; q++) free(kept.terms[q]);
                free(kept.query), free(kept.terms), free(kept.docs), free(kept.n), free(kept.cpu_scores);
            }
            printf("}\n");
            fflush(stdout);
            free(rows), free(inputs_buf), free(scores), isn_gpu_l2_host_free(dev_scores), free(scratch);
            free(check_rows), free(check_scores), free(sliced_rows), free(crew_gather), free(one_gather);
            if (gpu) isn_gpu_l2_host_free(sliced_scores);
            else free(sliced_scores);
            for (int k = 0; k < 4; k++) free(part[k]);
            free(gpu_transfer), free(gpu_kernels), free(gpu_pack), free(gpu_fe), free(gpu_mit), free(gpu_model), free(gpu_total), free(gpu_gather), free(cpu_total);
        }
        isn_ranker_free(rk);
    }
    char cmd[sizeof workdir + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", workdir);
    if (!keep_rankers && system(cmd) != 0) fprintf(stderr, "bench_l2_pass: could not remove %s\n", workdir);
    isn_gpu_l2_close(gpu);
    isn_gpu_l2_gather_crew_free(crew);
    free(batch_docs), free(sample), free(hits), free(docs);
    for (uint32_t b = 0; b < batch; b++) isn_l2_workspace_free(batch_ws[b]);
    isn_l2_workspace_free(ws);
    isn_searcher_free(s);
    isn_index_close(index);
    return 0;
}
