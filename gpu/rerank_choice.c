/* The re-ranking device choice, in one place (gpu.h isn_gpu_rerank): each call's whole second stage
 * goes to the CPU or to the one-pass GPU by which one measured faster for calls of its size, learned
 * from this node's own times. A call's size is a cell: candidates and model work, each by power of
 * two. Each cell keeps a moving average of the milliseconds each device took; a cell with no time for
 * a device tries it (the GPU first); otherwise the faster one runs, and now and then a call of the cell
 * runs the other, so that a changed load or a warmed model shows: every EXPLORE_EVERY-th call, or
 * rarer when the other is much slower, so that exploring costs the cell at most EXPLORE_COST_SHARE of
 * its time (a CPU 200 times slower than the GPU, explored every 32nd call, would spend most of the
 * workers' time there and miss the deadline with each explored call). A GPU failure is re-run on the
 * CPU here and counted; the caller sees one call that either scored or failed on the CPU too. Times
 * are kept as relaxed atomics: a stale read only delays a switch. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpu/gpu.h"

#define CANDIDATE_CELLS 24 /* up to 2^23 candidates */
#define WORK_CELLS 40      /* model work, see model_work */
#define EXPLORE_EVERY 32u
#define EXPLORE_COST_SHARE 0.05
#define EXPLORE_RAREST 4096u /* a device that failed (its time set very long) is still retried this often */
#define AVERAGE_WEIGHT 0.125f /* of a new time in the moving average */

enum { DEVICE_CPU, DEVICE_GPU, DEVICES };

typedef struct {
    _Atomic uint32_t ms_bits[DEVICES]; /* float bits of the average time; 0 = not measured */
    _Atomic uint32_t calls;
} choice_cell;

/* The device of the calling thread's last isn_gpu_rerank_score (a worker's reply names it). */
static _Thread_local int last_device = DEVICE_CPU;

int isn_gpu_rerank_last_device(void) { return last_device; }

struct isn_gpu_rerank {
    isn_gpu_l2 *l2; /* NULL: CPU only */
    choice_cell cells[CANDIDATE_CELLS][WORK_CELLS];
    _Atomic uint64_t device_calls[DEVICES], gpu_failures, explored;
};

isn_gpu_rerank *isn_gpu_rerank_new(isn_gpu_l2 *l2) {
    isn_gpu_rerank *r = calloc(1, sizeof *r);
    if (r)
        r->l2 = l2;
    return r;
}

void isn_gpu_rerank_free(isn_gpu_rerank *r) { free(r); }

static uint32_t log2_cell(uint64_t x, uint32_t cells) {
    uint32_t c = 0;
    while (x > 1 && c + 1 < cells) {
        x >>= 1;
        c++;
    }
    return c;
}

/* Model work per candidate: tree nodes walked (trees x depth ~ trees), MLP weights (a stacked ranker
 * has both), and the inputs. */
static uint64_t model_work(const isn_ranker *ranker) {
    uint64_t work = isn_ranker_num_inputs(ranker) + (uint64_t)isn_ranker_num_trees(ranker) * 8;
    const isn_mlp *mlp = isn_ranker_mlp(ranker);
    if (mlp)
        for (uint32_t l = 0; l < isn_mlp_num_layers(mlp); l++) {
            isn_mlp_layer_view v;
            isn_mlp_layer_get(mlp, l, &v);
            work += (uint64_t)v.in * v.out;
        }
    return work;
}

static float load_ms(const _Atomic uint32_t *bits) {
    uint32_t b = atomic_load_explicit(bits, memory_order_relaxed);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static void record_ms(_Atomic uint32_t *bits, float ms) {
    float old = load_ms(bits), now = old > 0 ? old + AVERAGE_WEIGHT * (ms - old) : ms;
    if (!(now > 0))
        now = 1e-6f; /* 0 means "never measured" */
    uint32_t b;
    memcpy(&b, &now, sizeof b);
    atomic_store_explicit(bits, b, memory_order_relaxed);
}

int isn_gpu_rerank_choose(isn_gpu_rerank *r, const isn_ranker *ranker, uint32_t candidates) {
    if (r->l2 == NULL)
        return DEVICE_CPU;
    choice_cell *cell = &r->cells[log2_cell(candidates, CANDIDATE_CELLS)][log2_cell(model_work(ranker), WORK_CELLS)];
    float cpu = load_ms(&cell->ms_bits[DEVICE_CPU]), gpu = load_ms(&cell->ms_bits[DEVICE_GPU]);
    if (gpu == 0)
        return DEVICE_GPU;
    if (cpu == 0)
        return DEVICE_CPU;
    int faster = gpu < cpu ? DEVICE_GPU : DEVICE_CPU;
    double slow_over_fast = faster == DEVICE_GPU ? (double)cpu / gpu : (double)gpu / cpu;
    double every = slow_over_fast / EXPLORE_COST_SHARE;
    uint32_t interval = every <= EXPLORE_EVERY ? EXPLORE_EVERY : every >= EXPLORE_RAREST ? EXPLORE_RAREST : (uint32_t)every;
    uint32_t n = atomic_fetch_add_explicit(&cell->calls, 1, memory_order_relaxed);
    if (n % interval == interval - 1) {
        atomic_fetch_add_explicit(&r->explored, 1, memory_order_relaxed);
        return DEVICES - 1 - faster;
    }
    return faster;
}

int isn_gpu_rerank_score(void *context, isn_l2_workspace *workspace, const isn_ranker *ranker,
                         const isn_feature_hits *hits, float *scores, char *err, size_t err_len) {
    isn_gpu_rerank *r = context;
    choice_cell *cell = &r->cells[log2_cell(hits->n, CANDIDATE_CELLS)][log2_cell(model_work(ranker), WORK_CELLS)];
    int device = isn_gpu_rerank_choose(r, ranker, hits->n);
    last_device = DEVICE_CPU;
    uint64_t t0 = isn_now_ns();
    if (device == DEVICE_GPU) {
        char gpu_err[ISN_ERR_LEN];
        const isn_feature_hits *batch[1] = {hits};
        if (isn_gpu_l2_pass(r->l2, ranker, batch, 1, scores, NULL, NULL, gpu_err, sizeof gpu_err) == 0) {
            record_ms(&cell->ms_bits[DEVICE_GPU], (float)((isn_now_ns() - t0) / 1e6));
            atomic_fetch_add_explicit(&r->device_calls[DEVICE_GPU], 1, memory_order_relaxed);
            last_device = DEVICE_GPU;
            return 0;
        }
        /* A model without a GPU form, or a device error: this call on the CPU; the cell's GPU time
         * becomes very long, so later calls of its size stay on the CPU until an exploring call
         * succeeds there again. */
        atomic_fetch_add_explicit(&r->gpu_failures, 1, memory_order_relaxed);
        record_ms(&cell->ms_bits[DEVICE_GPU], 1e9f);
        t0 = isn_now_ns();
    }
    if (isn_stage_score_cpu(workspace, ranker, hits, scores, err, err_len) != 0)
        return -1;
    record_ms(&cell->ms_bits[DEVICE_CPU], (float)((isn_now_ns() - t0) / 1e6));
    atomic_fetch_add_explicit(&r->device_calls[DEVICE_CPU], 1, memory_order_relaxed);
    return 0;
}

void isn_gpu_rerank_stats_get(const isn_gpu_rerank *r, isn_gpu_rerank_stats *stats) {
    isn_gpu_rerank *m = (isn_gpu_rerank *)r;
    stats->cpu_calls = atomic_load_explicit(&m->device_calls[DEVICE_CPU], memory_order_relaxed);
    stats->gpu_calls = atomic_load_explicit(&m->device_calls[DEVICE_GPU], memory_order_relaxed);
    stats->gpu_failures = atomic_load_explicit(&m->gpu_failures, memory_order_relaxed);
    stats->explored = atomic_load_explicit(&m->explored, memory_order_relaxed);
}

double isn_gpu_rerank_expected_ms(const isn_gpu_rerank *r, const isn_ranker *ranker, uint32_t candidates) {
    const choice_cell *cell =
        &r->cells[log2_cell(candidates, CANDIDATE_CELLS)][log2_cell(model_work(ranker), WORK_CELLS)];
    float cpu = load_ms(&cell->ms_bits[DEVICE_CPU]), gpu = r->l2 ? load_ms(&cell->ms_bits[DEVICE_GPU]) : 0.0f;
    if (cpu > 0 && gpu > 0) return cpu < gpu ? cpu : gpu;
    return cpu > 0 ? cpu : gpu;
}

void isn_gpu_rerank_record(isn_gpu_rerank *r, const isn_ranker *ranker, uint32_t candidates, int device, double ms) {
    if (device < 0 || device >= DEVICES)
        return;
    choice_cell *cell = &r->cells[log2_cell(candidates, CANDIDATE_CELLS)][log2_cell(model_work(ranker), WORK_CELLS)];
    record_ms(&cell->ms_bits[device], (float)ms);
}
