// The second stage on the GPU: a device handle, its model cache (several models resident within a
// budget, uploaded on first use, least recently used evicted) and the scoring calls. Batching is the
// caller's: the rows of many queries go in one call, and so in one launch.
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "gpu/gpu.h"
}
#include "gpu/l2_kernels.h"

#define MAX_MODELS 64
#define MAX_SPLIT_SCRATCH (256ull << 20) /* leaf indices of a split batch: trees x rows bytes */

typedef struct {
    uint64_t serial; /* 0 = free slot */
    uint64_t bytes;
    uint64_t last_use;
    bool is_forest;
    l2_device_forest forest;       /* device pointers inside */
    void *d_forest_mem;
    uint32_t num_inputs;
    /* MLP */
    uint32_t num_layers, max_width;
    isn_mlp_layer_view layers[16]; /* weights / bias point to device memory */
    void *d_mlp_mem;
} resident_model;

struct isn_gpu_l2 {
    pthread_mutex_t lock;
    isn_gpu_l2_options options;
    int multiprocessors;
    cudaStream_t stream;
    cudaEvent_t ev_start, ev_in, ev_kernels, ev_out;
    resident_model models[MAX_MODELS];
    uint64_t resident_bytes, clock, hits, misses, evictions;
    /* per-call buffers, grown to the largest call */
    float *d_rows, *d_out, *d_act[2];
    uint8_t *d_leaf_index;
    size_t rows_cap, out_cap, act_cap[2], leaf_index_cap;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cuda_fail(cudaError_t e, const char *what, char *err, size_t err_len) {
    snprintf(err, err_len, "GPU second stage: %s: %s", what, cudaGetErrorString(e));
    return -1;
}

extern "C" void isn_gpu_l2_options_default(isn_gpu_l2_options *o) {
    memset(o, 0, sizeof *o);
    o->model_memory_budget = 512ull << 20;
    o->max_rows = 262144;
    o->split_below_rows = 0; /* automatic */
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
    cudaDeviceProp p;
    if ((e = cudaSetDevice(options->device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&p, options->device)) != cudaSuccess) {
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
    g->multiprocessors = p.multiProcessorCount;
    if ((e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreate(&g->ev_start)) != cudaSuccess || (e = cudaEventCreate(&g->ev_in)) != cudaSuccess ||
        (e = cudaEventCreate(&g->ev_kernels)) != cudaSuccess || (e = cudaEventCreate(&g->ev_out)) != cudaSuccess) {
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
    cudaFree(g->d_leaf_index);
    if (g->stream) cudaStreamDestroy(g->stream);
    if (g->ev_start) cudaEventDestroy(g->ev_start);
    if (g->ev_in) cudaEventDestroy(g->ev_in);
    if (g->ev_kernels) cudaEventDestroy(g->ev_kernels);
    if (g->ev_out) cudaEventDestroy(g->ev_out);
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
            if (g->models[i].serial && (lru < 0 || g->models[i].last_use < g->models[lru].last_use)) lru = i;
        drop_model(g, &g->models[lru]);
        g->evictions++;
        (*evicted)++;
        if (free_slot < 0) free_slot = lru;
    }
    return free_slot;
}

static resident_model *find(isn_gpu_l2 *g, uint64_t serial) {
    for (int i = 0; i < MAX_MODELS; i++)
        if (g->models[i].serial == serial) return &g->models[i];
    return NULL;
}

static resident_model *upload_forest(isn_gpu_l2 *g, const isn_forest *forest, uint32_t *evicted, char *err,
                                     size_t err_len) {
    isn_forest_layout L;
    if (!isn_forest_layout_get(forest, &L)) {
        snprintf(err, err_len, "model has no GPU form (trees deeper than 10 levels, or zero-as-missing splits)");
        return NULL;
    }
    const size_t splits = ((size_t)1 << L.depth) - 1, leaves = (size_t)1 << L.depth;
    const size_t split_bytes = splits * L.num_trees * sizeof(l2_split);
    const size_t leaf_bytes = leaves * L.num_trees * (L.sum_in_double ? sizeof(double) : sizeof(float));
    const uint64_t bytes = split_bytes + leaf_bytes;
    int slot = make_room(g, bytes, evicted, err, err_len);
    if (slot < 0) return NULL;
    l2_split *host = (l2_split *)malloc(split_bytes);
    if (!host) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < splits * L.num_trees; i++)
        host[i] = (l2_split){L.threshold[i], L.feature[i] | (L.nan_right[i] ? L2_NAN_RIGHT : 0u)};
    resident_model *m = &g->models[slot];
    char *mem = NULL;
    cudaError_t e = cudaMalloc((void **)&mem, bytes);
    if (e == cudaSuccess) e = cudaMemcpyAsync(mem, host, split_bytes, cudaMemcpyHostToDevice, g->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(mem + split_bytes, L.sum_in_double ? (const void *)L.leaf_d : (const void *)L.leaf_f, leaf_bytes,
                            cudaMemcpyHostToDevice, g->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
    free(host);
    if (e != cudaSuccess) {
        cudaFree(mem);
        cuda_fail(e, "model upload", err, err_len);
        return NULL;
    }
    memset(m, 0, sizeof *m);
    m->serial = isn_forest_serial(forest);
    m->bytes = bytes;
    m->is_forest = true;
    m->d_forest_mem = mem;
    m->num_inputs = L.num_inputs;
    m->forest = (l2_device_forest){(const l2_split *)mem, L.sum_in_double ? NULL : (const float *)(mem + split_bytes),
                                   L.sum_in_double ? (const double *)(mem + split_bytes) : NULL, L.num_trees, L.depth,
                                   L.base_score, L.average_output};
    g->resident_bytes += bytes;
    return m;
}

static resident_model *upload_mlp(isn_gpu_l2 *g, const isn_mlp *mlp, uint32_t *evicted, char *err, size_t err_len) {
    uint32_t num_layers = isn_mlp_num_layers(mlp);
    if (num_layers == 0 || num_layers > 16) {
        snprintf(err, err_len, "MLP with %u layers has no GPU form", num_layers);
        return NULL;
    }
    isn_mlp_layer_view v[16];
    uint64_t bytes = 0;
    uint32_t max_width = isn_mlp_num_inputs(mlp);
    for (uint32_t i = 0; i < num_layers; i++) {
        isn_mlp_layer_get(mlp, i, &v[i]);
        bytes += ((uint64_t)v[i].in * v[i].out + v[i].out) * sizeof(float);
        if (v[i].out > max_width) max_width = v[i].out;
    }
    int slot = make_room(g, bytes, evicted, err, err_len);
    if (slot < 0) return NULL;
    resident_model *m = &g->models[slot];
    char *mem = NULL;
    cudaError_t e = cudaMalloc((void **)&mem, bytes);
    memset(m, 0, sizeof *m);
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
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
    if (e != cudaSuccess) {
        cudaFree(mem);
        memset(m, 0, sizeof *m);
        cuda_fail(e, "model upload", err, err_len);
        return NULL;
    }
    m->serial = isn_mlp_serial(mlp);
    m->bytes = bytes;
    m->d_mlp_mem = mem;
    m->num_inputs = isn_mlp_num_inputs(mlp);
    m->num_layers = num_layers;
    m->max_width = max_width;
    g->resident_bytes += bytes;
    return m;
}

/* ------------------------------------------------------------------ scoring */

static int score(isn_gpu_l2 *g, const isn_forest *forest, const isn_mlp *mlp, const float *inputs, uint32_t n,
                 uint32_t stride, float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len) {
    double t0 = now_ms();
    isn_gpu_l2_stats st;
    memset(&st, 0, sizeof st);
    uint64_t serial = forest ? isn_forest_serial(forest) : isn_mlp_serial(mlp);
    resident_model *m = find(g, serial);
    st.cache_hit = m != NULL;
    if (m) {
        g->hits++;
    } else {
        g->misses++;
        double u0 = now_ms();
        m = forest ? upload_forest(g, forest, &st.evicted, err, err_len) : upload_mlp(g, mlp, &st.evicted, err, err_len);
        if (!m) return -1;
        st.ms_upload_model = now_ms() - u0;
    }
    m->last_use = ++g->clock;
    if (stride < m->num_inputs) {
        snprintf(err, err_len, "rows of %u floats are narrower than the model's %u inputs", stride, m->num_inputs);
        return -1;
    }
    cudaError_t e = cudaSuccess;
    float ms_in = 0, ms_kernels = 0, ms_out = 0;
    for (uint32_t r0 = 0; r0 < n && e == cudaSuccess; r0 += g->options.max_rows) {
        const uint32_t cnt = n - r0 < g->options.max_rows ? n - r0 : g->options.max_rows;
        if ((e = grow((void **)&g->d_rows, &g->rows_cap, (size_t)cnt * stride * sizeof(float))) != cudaSuccess ||
            (e = grow((void **)&g->d_out, &g->out_cap, (size_t)cnt * sizeof(float))) != cudaSuccess)
            break;
        cudaEventRecord(g->ev_start, g->stream);
        e = cudaMemcpyAsync(g->d_rows, inputs + (size_t)r0 * stride, (size_t)cnt * stride * sizeof(float),
                            cudaMemcpyHostToDevice, g->stream);
        cudaEventRecord(g->ev_in, g->stream);
        if (e == cudaSuccess && m->is_forest) {
            const uint32_t sb = g->options.split_below_rows;
            const l2_split_mode mode = sb == 1 ? L2_SPLIT_NEVER : sb == UINT32_MAX ? L2_SPLIT_ALWAYS
                                       : sb == 0 || cnt < sb ? L2_SPLIT_AUTO : L2_SPLIT_NEVER;
            l2_forest_plan plan;
            e = l2_plan_forest(&m->forest, cnt, m->num_inputs, mode, g->multiprocessors, MAX_SPLIT_SCRATCH, &plan);
            if (e == cudaErrorInvalidValue) {
                snprintf(err, err_len, "model of %u inputs has no GPU form (rows too wide for shared memory)", m->num_inputs);
                return -1;
            }
            if (e == cudaSuccess && plan.scratch_bytes)
                e = grow((void **)&g->d_leaf_index, &g->leaf_index_cap, plan.scratch_bytes);
            if (e == cudaSuccess)
                e = l2_launch_forest(&m->forest, &plan, g->d_rows, cnt, stride, m->num_inputs, g->d_leaf_index, g->d_out,
                                     g->stream);
            st.tree_splits = plan.groups > st.tree_splits ? plan.groups : st.tree_splits;
            st.launches += plan.groups > 1 ? 2 : 1;
        } else if (e == cudaSuccess) {
            const size_t act = (size_t)cnt * m->max_width * sizeof(float);
            if ((e = grow((void **)&g->d_act[0], &g->act_cap[0], act)) == cudaSuccess)
                e = grow((void **)&g->d_act[1], &g->act_cap[1], act);
            const float *x = g->d_rows;
            uint32_t x_stride = stride;
            for (uint32_t i = 0; e == cudaSuccess && i < m->num_layers; i++) {
                const isn_mlp_layer_view *l = &m->layers[i];
                float *y = i + 1 == m->num_layers ? g->d_out : g->d_act[i % 2];
                e = l2_launch_dense(x, x_stride, cnt, l->weights, l->bias, l->in, l->out, l->relu, y, g->stream);
                x = y;
                x_stride = l->out;
                st.launches++;
            }
        }
        cudaEventRecord(g->ev_kernels, g->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(out + r0, g->d_out, (size_t)cnt * sizeof(float), cudaMemcpyDeviceToHost, g->stream);
        cudaEventRecord(g->ev_out, g->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
        float a = 0, b = 0, c = 0;
        if (e == cudaSuccess) {
            cudaEventElapsedTime(&a, g->ev_start, g->ev_in);
            cudaEventElapsedTime(&b, g->ev_in, g->ev_kernels);
            cudaEventElapsedTime(&c, g->ev_kernels, g->ev_out);
        }
        ms_in += a, ms_kernels += b, ms_out += c;
    }
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear a non-sticky error so that the next call can try again */
        return cuda_fail(e, "scoring", err, err_len);
    }
    st.ms_transfer = ms_in + ms_out;
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
