// The second stage on the GPU: a device handle, its model cache (several models resident within a
// budget, uploaded on first use, least recently used evicted) and the scoring calls. Batching is the
// caller's: the rows of many queries go in one call, and so in one launch. The one-pass calls
// (isn_gpu_l2_pass) run in in-flight slots (l2_pass_slots.h), each with its own stream and buffers, so
// that several threads' passes overlap; the handle's lock covers the model cache and the scoring
// calls, and a model that a pass in flight uses is never evicted under it.
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "base/base.h"
#include "gpu/gpu.h"
}
#include "gpu/device.h"
#include "gpu/l2_kernels.h"
#include "gpu/l2_pass.h"
#include "gpu/l2_pass_slots.h"

#define MAX_MODELS 64
#define MAX_SPLIT_SCRATCH (256ull << 20) /* leaf indices of a split batch: trees x rows bytes */
#define MAX_CHUNKS 8

/* One entry a ranker's model: trees, an MLP, or (stacked) both, uploaded and evicted together. */
typedef struct {
    uint64_t serial; /* the trees' serial, else the MLP's; 0 = free slot */
    uint64_t head_serial; /* a stacked ranker's MLP (read after the trees), else 0 */
    uint64_t bytes;
    uint64_t last_use;
    uint32_t in_use; /* passes in flight that run it: not evicted until they end */
    bool is_forest;
    l2_device_forest forest;       /* device pointers inside */
    void *d_forest_mem;
    uint32_t num_inputs; /* the trees' inputs, else the MLP's */
    /* MLP (alone, or the head of a stacked ranker: layers[0].in = the ranker's inputs + 1) */
    uint32_t num_layers, max_width;
    isn_mlp_layer_view layers[16]; /* weights / bias point to device memory */
    void *d_mlp_mem;
} resident_model;

/* Device buffers of one launch sequence's rows, scores and scratch, grown to the largest call. */
typedef struct {
    float *d_rows, *d_out, *d_act[2], *d_tree; /* d_tree: a stacked ranker's trees' scores */
    void *d_leaf_index;
    size_t rows_cap, out_cap, act_cap[2], leaf_index_cap, tree_cap;
} launch_buffers;

/* One one-pass call in flight: its stream, events, page-locked host buffers (the packed batch in; the
 * results out when the caller's memory is not page-locked) and device buffers, reused call to call. */
typedef struct {
    cudaStream_t stream;
    /* ev_features, ev_transforms: the FE / MIT / model split; ev_out: blocking, the waiter sleeps */
    cudaEvent_t ev_start, ev_in, ev_features, ev_transforms, ev_kernels, ev_out;
    uint8_t *h_pass, *h_out, *d_pass;
    float *d_features;
    size_t h_pass_cap, h_out_cap, d_pass_cap, features_cap;
    launch_buffers buffers;
} pass_slot;

struct isn_gpu_l2 {
    pthread_mutex_t lock;
    isn_gpu_l2_options options;
    l2_device_limits limits;
    uint32_t tree_warps_above_inputs; /* ISN_GPU_TREE_WARPS_ABOVE_INPUTS */
    cudaStream_t stream, stream2; /* chunks alternate between the two */
    cudaEvent_t ev_start, ev_join, ev_out, ev_in[MAX_CHUNKS], ev_kernels[MAX_CHUNKS];
    resident_model models[MAX_MODELS];
    uint64_t resident_bytes, clock, hits, misses, evictions;
    /* per-call buffers, grown to the largest call */
    float *d_rows, *d_out, *d_act[2], *d_tree;
    void *d_leaf_index[2]; /* one per stream */
    size_t rows_cap, out_cap, act_cap[2], leaf_index_cap[2], tree_cap;
    /* the one-pass second stage (isn_gpu_l2_pass) */
    l2_slot_pool *pass_slots;
    bool pass_prepared; /* under lock */
};

static double now_ms(void) { return (double)isn_now_ns() / 1e6; }

static int cuda_fail(cudaError_t e, const char *what, char *err, size_t err_len) {
    snprintf(err, err_len, "GPU second stage: %s: %s", what, cudaGetErrorString(e));
    return -1;
}

extern "C" void isn_gpu_l2_options_default(isn_gpu_l2_options *o) {
    memset(o, 0, sizeof *o);
    o->model_memory_budget = 512ull << 20;
    o->max_rows = 262144;
    o->split_below_rows = 0; /* automatic */
    o->overlap_chunks = 0;   /* automatic: one chunk */
}

extern "C" isn_gpu_l2 *isn_gpu_l2_open(const isn_gpu_l2_options *options, char *err, size_t err_len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, err_len, "no GPU for the second stage: %s", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        return NULL;
    }
    if (options->device < 0 || options->device >= count) {
        snprintf(err, err_len, "GPU %d does not exist (%d devices)", options->device, count);
        return NULL;
    }
    l2_device_limits limits;
    if ((e = cudaSetDevice(options->device)) != cudaSuccess || (e = l2_device_limits_get(options->device, &limits)) != cudaSuccess) {
        cuda_fail(e, "cannot use the device", err, err_len);
        return NULL;
    }
    isn_gpu_l2 *g = (isn_gpu_l2 *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&g->lock, NULL);
    g->options = *options;
    if (g->options.max_rows == 0) g->options.max_rows = 262144;
    g->limits = limits;
    /* Models of more inputs than this take the kernel whose warps split the trees (at most 256, where
     * the one-thread-a-row kernel stops); lower only to compare the two. */
    g->tree_warps_above_inputs = gpu_env_number("ISN_GPU_TREE_WARPS_ABOVE_INPUTS", 256, 0);
    e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&g->stream2, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreate(&g->ev_start);
    if (e == cudaSuccess) e = cudaEventCreate(&g->ev_join);
    if (e == cudaSuccess) e = cudaEventCreate(&g->ev_out);
    for (int i = 0; e == cudaSuccess && i < MAX_CHUNKS; i++)
        if ((e = cudaEventCreate(&g->ev_in[i])) == cudaSuccess) e = cudaEventCreate(&g->ev_kernels[i]);
    if (e == cudaSuccess && (g->pass_slots = l2_slot_pool_new(options->pass_slots, sizeof(pass_slot))) == NULL)
        e = cudaErrorMemoryAllocation;
    for (uint32_t i = 0; e == cudaSuccess && i < l2_slot_pool_size(g->pass_slots); i++) {
        pass_slot *p = (pass_slot *)l2_slot_pool_at(g->pass_slots, i);
        e = cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreate(&p->ev_start);
        if (e == cudaSuccess) e = cudaEventCreate(&p->ev_in);
        if (e == cudaSuccess) e = cudaEventCreate(&p->ev_features);
        if (e == cudaSuccess) e = cudaEventCreate(&p->ev_transforms);
        if (e == cudaSuccess) e = cudaEventCreate(&p->ev_kernels);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&p->ev_out, cudaEventBlockingSync);
    }
    if (e != cudaSuccess) {
        cuda_fail(e, "cannot create a stream", err, err_len);
        isn_gpu_l2_close(g);
        return NULL;
    }
    return g;
}

static void drop_model(isn_gpu_l2 *g, resident_model *m) {
    cudaFree(m->d_forest_mem);
    cudaFree(m->d_mlp_mem);
    g->resident_bytes -= m->bytes;
    memset(m, 0, sizeof *m);
}

extern "C" void isn_gpu_l2_close(isn_gpu_l2 *g) {
    if (!g) return;
    for (int i = 0; i < MAX_MODELS; i++)
        if (g->models[i].serial) drop_model(g, &g->models[i]);
    cudaFree(g->d_rows);
    cudaFree(g->d_out);
    cudaFree(g->d_act[0]);
    cudaFree(g->d_act[1]);
    cudaFree(g->d_leaf_index[0]);
    cudaFree(g->d_leaf_index[1]);
    cudaFree(g->d_tree);
    for (uint32_t i = 0; g->pass_slots && i < l2_slot_pool_size(g->pass_slots); i++) {
        pass_slot *p = (pass_slot *)l2_slot_pool_at(g->pass_slots, i);
        cudaFree(p->d_pass);
        cudaFree(p->d_features);
        cudaFree(p->buffers.d_rows);
        cudaFree(p->buffers.d_out);
        cudaFree(p->buffers.d_act[0]);
        cudaFree(p->buffers.d_act[1]);
        cudaFree(p->buffers.d_leaf_index);
        cudaFree(p->buffers.d_tree);
        if (p->h_pass) cudaFreeHost(p->h_pass);
        if (p->h_out) cudaFreeHost(p->h_out);
        if (p->stream) cudaStreamDestroy(p->stream);
        if (p->ev_start) cudaEventDestroy(p->ev_start);
        if (p->ev_in) cudaEventDestroy(p->ev_in);
        if (p->ev_features) cudaEventDestroy(p->ev_features);
        if (p->ev_transforms) cudaEventDestroy(p->ev_transforms);
        if (p->ev_kernels) cudaEventDestroy(p->ev_kernels);
        if (p->ev_out) cudaEventDestroy(p->ev_out);
    }
    l2_slot_pool_free(g->pass_slots);
    if (g->stream) cudaStreamDestroy(g->stream);
    if (g->stream2) cudaStreamDestroy(g->stream2);
    if (g->ev_start) cudaEventDestroy(g->ev_start);
    if (g->ev_join) cudaEventDestroy(g->ev_join);
    if (g->ev_out) cudaEventDestroy(g->ev_out);
    for (int i = 0; i < MAX_CHUNKS; i++) {
        if (g->ev_in[i]) cudaEventDestroy(g->ev_in[i]);
        if (g->ev_kernels[i]) cudaEventDestroy(g->ev_kernels[i]);
    }
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static cudaError_t grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return cudaSuccess;
    size_t want = *cap ? *cap : 1 << 20;
    while (want < bytes) want *= 2;
    cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    cudaError_t e = cudaMalloc(buf, want);
    if (e == cudaSuccess) *cap = want;
    return e;
}

/* ------------------------------------------------------------------ the cache */

/* Room for `bytes` more: evicts the least recently used until it fits. -1 when it never can. */
static int make_room(isn_gpu_l2 *g, uint64_t bytes, uint32_t *evicted, char *err, size_t err_len) {
    if (bytes > g->options.model_memory_budget) {
        snprintf(err, err_len, "model of %llu bytes is above the GPU model budget (%llu bytes)",
                 (unsigned long long)bytes, (unsigned long long)g->options.model_memory_budget);
        return -1;
    }
    int free_slot = -1;
    for (int i = 0; i < MAX_MODELS && free_slot < 0; i++)
        if (!g->models[i].serial) free_slot = i;
    while (g->resident_bytes + bytes > g->options.model_memory_budget || free_slot < 0) {
        int lru = -1;
        for (int i = 0; i < MAX_MODELS; i++)
            if (g->models[i].serial && !g->models[i].in_use && (lru < 0 || g->models[i].last_use < g->models[lru].last_use))
                lru = i;
        if (lru < 0) {
            snprintf(err, err_len, "model of %llu bytes does not fit the GPU model budget (%llu bytes) beside the models "
                                   "that passes in flight are using", (unsigned long long)bytes,
                     (unsigned long long)g->options.model_memory_budget);
            return -1;
        }
        drop_model(g, &g->models[lru]);
        g->evictions++;
        (*evicted)++;
        if (free_slot < 0) free_slot = lru;
    }
    return free_slot;
}

static resident_model *find(isn_gpu_l2 *g, uint64_t serial, uint64_t head_serial) {
    for (int i = 0; i < MAX_MODELS; i++)
        if (g->models[i].serial == serial && g->models[i].head_serial == head_serial) return &g->models[i];
    return NULL;
}

/* The device form of a forest: its layout, and the bytes of its splits and leaves. False with err. */
static bool forest_part(const isn_forest *forest, isn_forest_layout *L, size_t *split_bytes, size_t *leaf_bytes,
                        char *err, size_t err_len) {
    if (!isn_forest_layout_get(forest, L)) {
        snprintf(err, err_len, "model has no GPU form (trees deeper than 10 levels, or zero-as-missing splits)");
        return false;
    }
    *split_bytes = (((size_t)1 << L->depth) - 1) * L->num_trees * sizeof(l2_split);
    *leaf_bytes = ((size_t)1 << L->depth) * L->num_trees * (L->sum_in_double ? sizeof(double) : sizeof(float));
    return true;
}

/* The layers of an MLP, their bytes and widest layer. False with err. */
static bool mlp_part(const isn_mlp *mlp, isn_mlp_layer_view *v, uint32_t *num_layers, uint64_t *bytes,
                     uint32_t *max_width, char *err, size_t err_len) {
    *num_layers = isn_mlp_num_layers(mlp);
    if (*num_layers == 0 || *num_layers > 16) {
        snprintf(err, err_len, "MLP with %u layers has no GPU form", *num_layers);
        return false;
    }
    *bytes = 0;
    *max_width = isn_mlp_num_inputs(mlp);
    for (uint32_t i = 0; i < *num_layers; i++) {
        isn_mlp_layer_get(mlp, i, &v[i]);
        *bytes += ((uint64_t)v[i].in * v[i].out + v[i].out) * sizeof(float);
        if (v[i].out > *max_width) *max_width = v[i].out;
    }
    return true;
}

/* A ranker's model onto the device as one cache entry: the trees, the MLP, or both (a stacked ranker's
 * trees and the MLP that reads their score), evicting others until it fits. NULL with err. */
static resident_model *upload(isn_gpu_l2 *g, const isn_forest *forest, const isn_mlp *mlp, uint32_t *evicted, char *err,
                              size_t err_len) {
    isn_forest_layout L;
    size_t split_bytes = 0, leaf_bytes = 0;
    isn_mlp_layer_view v[16];
    uint32_t num_layers = 0, max_width = 0;
    uint64_t mlp_bytes = 0;
    if (forest && !forest_part(forest, &L, &split_bytes, &leaf_bytes, err, err_len)) return NULL;
    if (mlp && !mlp_part(mlp, v, &num_layers, &mlp_bytes, &max_width, err, err_len)) return NULL;
    const uint64_t forest_bytes = split_bytes + leaf_bytes, bytes = forest_bytes + mlp_bytes;
    int slot = make_room(g, bytes, evicted, err, err_len);
    if (slot < 0) return NULL;
    resident_model *m = &g->models[slot];
    memset(m, 0, sizeof *m);
    cudaError_t e = cudaSuccess;
    l2_split *host = NULL;
    if (forest) {
        host = (l2_split *)malloc(split_bytes);
        if (!host) {
            snprintf(err, err_len, "out of memory");
            return NULL;
        }
        for (size_t i = 0; i < split_bytes / sizeof(l2_split); i++)
            host[i] = (l2_split){L.threshold[i], L.feature[i] | (L.nan_right[i] ? L2_NAN_RIGHT : 0u)};
        char *mem = NULL;
        e = cudaMalloc((void **)&mem, forest_bytes);
        if (e == cudaSuccess) {
            m->d_forest_mem = mem;
            e = cudaMemcpyAsync(mem, host, split_bytes, cudaMemcpyHostToDevice, g->stream);
        }
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(mem + split_bytes, L.sum_in_double ? (const void *)L.leaf_d : (const void *)L.leaf_f,
                                leaf_bytes, cudaMemcpyHostToDevice, g->stream);
        m->is_forest = true;
        m->forest = (l2_device_forest){(const l2_split *)mem, L.sum_in_double ? NULL : (const float *)(mem + split_bytes),
                                       L.sum_in_double ? (const double *)(mem + split_bytes) : NULL, L.num_trees,
                                       L.depth, L.base_score, L.average_output};
    }
    if (mlp && e == cudaSuccess) {
        char *mem = NULL;
        e = cudaMalloc((void **)&mem, mlp_bytes);
        if (e == cudaSuccess) m->d_mlp_mem = mem;
        size_t off = 0;
        for (uint32_t i = 0; e == cudaSuccess && i < num_layers; i++) {
            size_t wb = (size_t)v[i].in * v[i].out * sizeof(float), bb = v[i].out * sizeof(float);
            e = cudaMemcpyAsync(mem + off, v[i].weights, wb, cudaMemcpyHostToDevice, g->stream);
            if (e == cudaSuccess) e = cudaMemcpyAsync(mem + off + wb, v[i].bias, bb, cudaMemcpyHostToDevice, g->stream);
            m->layers[i] = v[i];
            m->layers[i].weights = (const float *)(mem + off);
            m->layers[i].bias = (const float *)(mem + off + wb);
            off += wb + bb;
        }
        m->num_layers = num_layers;
        m->max_width = max_width;
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
    free(host);
    if (e != cudaSuccess) {
        cudaFree(m->d_forest_mem);
        cudaFree(m->d_mlp_mem);
        memset(m, 0, sizeof *m);
        cuda_fail(e, "model upload", err, err_len);
        return NULL;
    }
    m->serial = forest ? isn_forest_serial(forest) : isn_mlp_serial(mlp);
    m->head_serial = forest && mlp ? isn_mlp_serial(mlp) : 0;
    m->bytes = bytes;
    m->num_inputs = forest ? L.num_inputs : isn_mlp_num_inputs(mlp);
    g->resident_bytes += bytes;
    return m;
}

/* ------------------------------------------------------------------ scoring */

static uint32_t chunk_count(const isn_gpu_l2_options *o, uint32_t n) {
    /* Automatic is one chunk: on an H200 (1,000 trees, 1,000 candidates a query) the smaller kernels
     * of 2..8 chunks lost more time than the hidden copy saved (bench_gpu_l2's variants). */
    uint32_t c = o->overlap_chunks ? o->overlap_chunks : 1;
    if (c > MAX_CHUNKS) c = MAX_CHUNKS;
    if (c > n) c = n;
    return c ? c : 1;
}

/* One chunk of rows through the forest on `stream`, with the leaf-index scratch *scratch (grown as
 * needed). cudaErrorInvalidValue with err set when the model has no GPU form. */
static cudaError_t launch_forest_chunk(isn_gpu_l2 *g, resident_model *m, const float *rows, uint32_t cnt, uint32_t stride,
                                       void **scratch, size_t *scratch_cap, float *out, cudaStream_t stream,
                                       isn_gpu_l2_stats *st, char *err, size_t err_len) {
    const uint32_t sb = g->options.split_below_rows;
    const l2_split_mode mode = sb == 1 ? L2_SPLIT_NEVER : sb == UINT32_MAX ? L2_SPLIT_ALWAYS
                               : sb == 0 || cnt < sb ? L2_SPLIT_AUTO : L2_SPLIT_NEVER;
    l2_forest_plan plan;
    const l2_plan_options options = {mode, MAX_SPLIT_SCRATCH, g->tree_warps_above_inputs, NULL, NULL};
    cudaError_t e = l2_plan_forest(&m->forest, cnt, m->num_inputs, &g->limits, &options, &plan, err, err_len);
    if (e == cudaErrorInvalidValue) return e; /* err says why */
    if (e == cudaSuccess && plan.scratch_bytes) e = grow(scratch, scratch_cap, plan.scratch_bytes);
    if (e == cudaSuccess)
        e = l2_launch_forest(&m->forest, &plan, rows, cnt, stride, m->num_inputs, *scratch, out, stream);
    if (plan.groups > st->tree_splits) st->tree_splits = plan.groups;
    const uint32_t slices = (cnt + plan.slice_rows - 1) / plan.slice_rows;
    st->launches += plan.kind == L2_FOREST_TREE_WARPS ? 2 * slices : plan.groups > 1 ? 2 : 1;
    return e;
}

/* The MLP over cnt rows at x (stride floats apart) into out, its activations in act[0..1] (grown as
 * needed); last non-NULL: the first layer's last input of row r is last[r] (a stacked ranker's trees'
 * score). */
static cudaError_t launch_mlp(resident_model *m, const float *x, uint32_t cnt, uint32_t stride, const float *last,
                              float **act, size_t *act_cap, float *out, cudaStream_t stream, isn_gpu_l2_stats *st) {
    const size_t act_bytes = (size_t)cnt * m->max_width * sizeof(float);
    cudaError_t e = grow((void **)&act[0], &act_cap[0], act_bytes);
    if (e == cudaSuccess) e = grow((void **)&act[1], &act_cap[1], act_bytes);
    uint32_t x_stride = stride;
    for (uint32_t i = 0; e == cudaSuccess && i < m->num_layers; i++) {
        const isn_mlp_layer_view *l = &m->layers[i];
        float *y = i + 1 == m->num_layers ? out : act[i % 2];
        e = l2_launch_dense(x, x_stride, i == 0 ? last : NULL, cnt, l->weights, l->bias, l->in, l->out, l->relu, y, stream);
        x = y;
        x_stride = l->out;
        st->launches++;
    }
    return e;
}

/* A stacked model over cnt rows: the trees into tree (grown as needed), then the MLP reading the rows
 * and those scores into out, on one stream. cudaErrorInvalidValue with err set as launch_forest_chunk. */
static cudaError_t launch_stacked(isn_gpu_l2 *g, resident_model *m, const float *rows, uint32_t cnt, uint32_t stride,
                                  void **scratch, size_t *scratch_cap, float **tree, size_t *tree_cap, float **act,
                                  size_t *act_cap, float *out, cudaStream_t stream, isn_gpu_l2_stats *st, char *err,
                                  size_t err_len) {
    cudaError_t e = grow((void **)tree, tree_cap, (size_t)cnt * sizeof(float));
    if (e == cudaSuccess)
        e = launch_forest_chunk(g, m, rows, cnt, stride, scratch, scratch_cap, *tree, stream, st, err, err_len);
    if (e == cudaSuccess) e = launch_mlp(m, rows, cnt, stride, *tree, act, act_cap, out, stream, st);
    return e;
}

/* Rows of `stride` floats feed the model: the trees read the first num_inputs, a stacked MLP the first
 * layers[0].in - 1 (then the trees' score). False with err. */
static bool rows_fit(const resident_model *m, uint32_t stride, char *err, size_t err_len) {
    const uint32_t head = m->is_forest && m->num_layers ? m->layers[0].in - 1 : 0;
    if (stride < m->num_inputs || stride < head) {
        snprintf(err, err_len, "rows of %u floats are narrower than the model's %u inputs", stride,
                 head > m->num_inputs ? head : m->num_inputs);
        return false;
    }
    return true;
}

/* The model on the device: from the cache, else uploaded (evicting as needed). NULL with err. */
static resident_model *resident(isn_gpu_l2 *g, const isn_forest *forest, const isn_mlp *mlp, isn_gpu_l2_stats *st,
                                char *err, size_t err_len) {
    uint64_t serial = forest ? isn_forest_serial(forest) : isn_mlp_serial(mlp);
    resident_model *m = find(g, serial, forest && mlp ? isn_mlp_serial(mlp) : 0);
    st->cache_hit = m != NULL;
    if (m) {
        g->hits++;
    } else {
        g->misses++;
        double u0 = now_ms();
        m = upload(g, forest, mlp, &st->evicted, err, err_len);
        if (!m) return NULL;
        st->ms_upload_model = now_ms() - u0;
    }
    m->last_use = ++g->clock;
    return m;
}

static int score(isn_gpu_l2 *g, const isn_forest *forest, const isn_mlp *mlp, const float *inputs, uint32_t n,
                 uint32_t stride, float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    double t0 = now_ms();
    isn_gpu_l2_stats st;
    memset(&st, 0, sizeof st);
    resident_model *m = resident(g, forest, mlp, &st, err, err_len);
    if (!m) return -1;
    if (!rows_fit(m, stride, err, err_len)) return -1;
    err[0] = 0;
    cudaError_t e = cudaSuccess;
    double ms_kernels = 0, ms_transfer = 0;
    for (uint32_t r0 = 0; r0 < n && e == cudaSuccess; r0 += g->options.max_rows) {
        const uint32_t cnt = n - r0 < g->options.max_rows ? n - r0 : g->options.max_rows;
        if ((e = grow((void **)&g->d_rows, &g->rows_cap, (size_t)cnt * stride * sizeof(float))) != cudaSuccess ||
            (e = grow((void **)&g->d_out, &g->out_cap, (size_t)cnt * sizeof(float))) != cudaSuccess)
            break;
        /* MLP layers share one pair of activation buffers: one chunk. */
        const uint32_t chunks = m->is_forest && !m->num_layers ? chunk_count(&g->options, cnt) : 1;
        cudaEventRecord(g->ev_start, g->stream);
        cudaStreamWaitEvent(g->stream2, g->ev_start, 0);
        for (uint32_t c = 0; c < chunks && e == cudaSuccess; c++) {
            const uint32_t c0 = (uint32_t)((uint64_t)cnt * c / chunks), c1 = (uint32_t)((uint64_t)cnt * (c + 1) / chunks);
            const int s = c % 2;
            cudaStream_t stream = s ? g->stream2 : g->stream;
            e = cudaMemcpyAsync(g->d_rows + (size_t)c0 * stride, inputs + ((size_t)r0 + c0) * stride,
                                (size_t)(c1 - c0) * stride * sizeof(float), cudaMemcpyHostToDevice, stream);
            cudaEventRecord(g->ev_in[c], stream);
            if (e == cudaSuccess && m->is_forest && m->num_layers)
                e = launch_stacked(g, m, g->d_rows, cnt, stride, &g->d_leaf_index[s], &g->leaf_index_cap[s], &g->d_tree,
                                   &g->tree_cap, g->d_act, g->act_cap, g->d_out, stream, &st, err, err_len);
            else if (e == cudaSuccess && m->is_forest)
                e = launch_forest_chunk(g, m, g->d_rows + (size_t)c0 * stride, c1 - c0, stride, &g->d_leaf_index[s],
                                        &g->leaf_index_cap[s], g->d_out + c0, stream, &st, err, err_len);
            else if (e == cudaSuccess)
                e = launch_mlp(m, g->d_rows, cnt, stride, NULL, g->d_act, g->act_cap, g->d_out, stream, &st);
            cudaEventRecord(g->ev_kernels[c], stream);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(out + r0 + c0, g->d_out + c0, (size_t)(c1 - c0) * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream);
        }
        cudaEventRecord(g->ev_join, g->stream2);
        cudaStreamWaitEvent(g->stream, g->ev_join, 0);
        cudaEventRecord(g->ev_out, g->stream);
        const cudaError_t e2 = cudaStreamSynchronize(g->stream);
        if (e == cudaSuccess) e = e2;
        if (e == cudaErrorInvalidValue && err[0]) return -1; /* no GPU form; err says why */
        float first_in = 0, total = 0, last_kernel = 0;
        if (e == cudaSuccess) {
            cudaEventElapsedTime(&first_in, g->ev_start, g->ev_in[0]);
            cudaEventElapsedTime(&total, g->ev_start, g->ev_out);
            for (uint32_t c = 0; c < chunks; c++) {
                float k = 0;
                cudaEventElapsedTime(&k, g->ev_start, g->ev_kernels[c]);
                if (k > last_kernel) last_kernel = k;
            }
        }
        ms_kernels += last_kernel - first_in;
        ms_transfer += total - (last_kernel - first_in);
    }
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear a non-sticky error so that the next call can try again */
        return cuda_fail(e, "scoring", err, err_len);
    }
    st.ms_transfer = ms_transfer;
    st.ms_kernels = ms_kernels;
    st.ms_total = now_ms() - t0;
    if (stats) *stats = st;
    return 0;
}

static int locked_score(isn_gpu_l2 *g, const isn_forest *forest, const isn_mlp *mlp, const float *inputs, uint32_t n,
                        uint32_t stride, float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    pthread_mutex_lock(&g->lock);
    cudaSetDevice(g->options.device);
    int rc = score(g, forest, mlp, inputs, n, stride, out, stats, err, err_len);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

extern "C" int isn_gpu_l2_score_forest(isn_gpu_l2 *g, const isn_forest *forest, const float *inputs, uint32_t n,
                                       uint32_t stride, float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    return locked_score(g, forest, NULL, inputs, n, stride, out, stats, err, err_len);
}

extern "C" int isn_gpu_l2_score_mlp(isn_gpu_l2 *g, const isn_mlp *mlp, const float *inputs, uint32_t n, uint32_t stride,
                                    float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    return locked_score(g, NULL, mlp, inputs, n, stride, out, stats, err, err_len);
}

extern "C" int isn_gpu_l2_score(isn_gpu_l2 *g, const isn_ranker *ranker, const float *inputs, uint32_t n,
                                uint32_t stride, float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    return locked_score(g, isn_ranker_forest(ranker), isn_ranker_mlp(ranker), inputs, n, stride, out, stats, err,
                        err_len);
}

/* ------------------------------------------------------------------ the one-pass second stage */

static cudaError_t grow_host(uint8_t **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return cudaSuccess;
    size_t want = *cap ? *cap : 1 << 20;
    while (want < bytes) want *= 2;
    if (*buf) cudaFreeHost(*buf);
    *buf = NULL;
    *cap = 0;
    cudaError_t e = cudaMallocHost((void **)buf, want);
    if (e == cudaSuccess) *cap = want;
    return e;
}

/* Whether the host memory at p is page-locked: a copy to it then runs on the stream asynchronously;
 * to other memory the copy goes through the slot's own page-locked buffer. */
static bool page_locked(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

/* The model resident and marked in use by a pass (the kernel stack raised on the first pass): under
 * the lock, released by release_model. NULL with err. */
static resident_model *take_model(isn_gpu_l2 *g, const isn_ranker *ranker, isn_gpu_l2_stats *st, char *err,
                                  size_t err_len) {
    pthread_mutex_lock(&g->lock);
    resident_model *m = NULL;
    cudaError_t e = cudaSuccess;
    if (!g->pass_prepared && (e = l2_prepare_pass_kernels()) != cudaSuccess)
        cuda_fail(e, "second-stage pass: the feature kernel's stack", err, err_len);
    else {
        g->pass_prepared = true;
        if ((m = resident(g, isn_ranker_forest(ranker), isn_ranker_mlp(ranker), st, err, err_len)) != NULL) m->in_use++;
    }
    pthread_mutex_unlock(&g->lock);
    return m;
}

static void release_model(isn_gpu_l2 *g, resident_model *m) {
    pthread_mutex_lock(&g->lock);
    m->in_use--;
    pthread_mutex_unlock(&g->lock);
}

/* One pass in slot p, the model m held in use by the caller. */
static int pass_in_slot(isn_gpu_l2 *g, pass_slot *p, resident_model *m, const isn_ranker *ranker,
                        const isn_feature_hits *const *queries, uint32_t num_queries, const l2_pass_layout *Lp,
                        float *scores, float *features, isn_gpu_l2_stats *st, char *err, size_t err_len) {
    const l2_pass_layout L = *Lp;
    launch_buffers *b = &p->buffers;
    const size_t scores_bytes = (size_t)L.num_rows * sizeof(float);
    const size_t features_bytes = (size_t)L.num_rows * L.num_features * sizeof(float);
    const bool direct_scores = page_locked(scores), direct_features = features == NULL || page_locked(features);
    const size_t staged = (direct_scores ? 0 : scores_bytes) + (direct_features ? 0 : features_bytes);
    cudaError_t e = grow_host(&p->h_pass, &p->h_pass_cap, L.bytes);
    if (e == cudaSuccess && staged) e = grow_host(&p->h_out, &p->h_out_cap, staged);
    if (e == cudaSuccess) e = grow((void **)&p->d_pass, &p->d_pass_cap, L.bytes);
    if (e == cudaSuccess) e = grow((void **)&p->d_features, &p->features_cap, features_bytes);
    if (e == cudaSuccess) e = grow((void **)&b->d_rows, &b->rows_cap, (size_t)L.num_rows * L.num_inputs * sizeof(float));
    if (e == cudaSuccess) e = grow((void **)&b->d_out, &b->out_cap, scores_bytes);
    if (e != cudaSuccess) return cuda_fail(e, "second-stage pass buffers", err, err_len);
    const double k0 = now_ms();
    l2_pass_pack(ranker, queries, num_queries, &L, p->h_pass, (uintptr_t)p->d_pass);
    st->ms_pack = now_ms() - k0;
    float *scores_to = direct_scores ? scores : (float *)p->h_out;
    float *features_to = direct_features ? features : (float *)(p->h_out + (direct_scores ? 0 : scores_bytes));
    err[0] = 0;
    cudaEventRecord(p->ev_start, p->stream);
    e = cudaMemcpyAsync(p->d_pass, p->h_pass, L.bytes, cudaMemcpyHostToDevice, p->stream);
    cudaEventRecord(p->ev_in, p->stream);
    if (e == cudaSuccess)
        e = l2_launch_feature_rows((const isn_feature_hits *)(p->d_pass + L.queries), (const uint32_t *)(p->d_pass + L.row_start),
                                   L.num_queries, L.num_rows, L.num_features, p->d_features, p->stream);
    cudaEventRecord(p->ev_features, p->stream);
    if (e == cudaSuccess)
        e = l2_launch_transforms((const isn_transform_view *)(p->d_pass + L.transforms), L.num_inputs, p->d_features,
                                 L.num_features, L.num_rows, b->d_rows, p->stream);
    cudaEventRecord(p->ev_transforms, p->stream);
    st->launches += 2;
    if (e == cudaSuccess && m->is_forest && m->num_layers)
        e = launch_stacked(g, m, b->d_rows, L.num_rows, L.num_inputs, &b->d_leaf_index, &b->leaf_index_cap, &b->d_tree,
                           &b->tree_cap, b->d_act, b->act_cap, b->d_out, p->stream, st, err, err_len);
    else if (e == cudaSuccess && m->is_forest)
        e = launch_forest_chunk(g, m, b->d_rows, L.num_rows, L.num_inputs, &b->d_leaf_index, &b->leaf_index_cap, b->d_out,
                                p->stream, st, err, err_len);
    else if (e == cudaSuccess)
        e = launch_mlp(m, b->d_rows, L.num_rows, L.num_inputs, NULL, b->d_act, b->act_cap, b->d_out, p->stream, st);
    cudaEventRecord(p->ev_kernels, p->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(scores_to, b->d_out, scores_bytes, cudaMemcpyDeviceToHost, p->stream);
    if (e == cudaSuccess && features)
        e = cudaMemcpyAsync(features_to, p->d_features, features_bytes, cudaMemcpyDeviceToHost, p->stream);
    cudaEventRecord(p->ev_out, p->stream);
    const cudaError_t e2 = cudaEventSynchronize(p->ev_out);
    if (e == cudaSuccess) e = e2;
    if (e == cudaErrorInvalidValue && err[0]) return -1; /* no GPU form; err says why */
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cuda_fail(e, "second-stage pass", err, err_len);
    }
    if (!direct_scores) memcpy(scores, scores_to, scores_bytes);
    if (!direct_features) memcpy(features, features_to, features_bytes);
    float first_in = 0, features_end = 0, transforms_end = 0, kernels_end = 0, total = 0;
    cudaEventElapsedTime(&first_in, p->ev_start, p->ev_in);
    cudaEventElapsedTime(&features_end, p->ev_start, p->ev_features);
    cudaEventElapsedTime(&transforms_end, p->ev_start, p->ev_transforms);
    cudaEventElapsedTime(&kernels_end, p->ev_start, p->ev_kernels);
    cudaEventElapsedTime(&total, p->ev_start, p->ev_out);
    st->ms_kernels = kernels_end - first_in;
    st->ms_features = features_end - first_in;
    st->ms_transforms = transforms_end - features_end;
    st->ms_model = kernels_end - transforms_end;
    st->ms_transfer = total - st->ms_kernels;
    return 0;
}

extern "C" int isn_gpu_l2_pass(isn_gpu_l2 *g, const isn_ranker *ranker, const isn_feature_hits *const *queries,
                               uint32_t num_queries, float *scores, float *features, isn_gpu_l2_stats *stats, char *err,
                               size_t err_len) {
    const double t0 = now_ms();
    isn_gpu_l2_stats st;
    memset(&st, 0, sizeof st);
    l2_pass_layout L;
    if (l2_pass_plan(ranker, queries, num_queries, &L, err, err_len) != 0) return -1;
    cudaSetDevice(g->options.device);
    resident_model *m = take_model(g, ranker, &st, err, err_len);
    if (!m) return -1;
    int rc = -1;
    if (rows_fit(m, L.num_inputs, err, err_len)) {
        const double w0 = now_ms();
        pass_slot *p = (pass_slot *)l2_slot_acquire(g->pass_slots);
        st.ms_wait = now_ms() - w0;
        rc = pass_in_slot(g, p, m, ranker, queries, num_queries, &L, scores, features, &st, err, err_len);
        l2_slot_release(g->pass_slots, p);
    }
    release_model(g, m);
    st.ms_total = now_ms() - t0;
    if (rc == 0 && stats) *stats = st;
    return rc;
}

extern "C" void isn_gpu_l2_cache_get(const isn_gpu_l2 *g, isn_gpu_l2_cache_info *info) {
    isn_gpu_l2 *mg = (isn_gpu_l2 *)g;
    pthread_mutex_lock(&mg->lock);
    memset(info, 0, sizeof *info);
    for (int i = 0; i < MAX_MODELS; i++) info->resident_models += g->models[i].serial != 0;
    info->resident_bytes = g->resident_bytes;
    info->budget_bytes = g->options.model_memory_budget;
    info->hits = g->hits;
    info->misses = g->misses;
    info->evictions = g->evictions;
    pthread_mutex_unlock(&mg->lock);
}

extern "C" void *isn_gpu_l2_host_alloc(size_t bytes) {
    void *p = NULL;
    return cudaMallocHost(&p, bytes) == cudaSuccess ? p : NULL;
}

extern "C" void isn_gpu_l2_host_free(void *p) {
    if (p) cudaFreeHost(p);
}
