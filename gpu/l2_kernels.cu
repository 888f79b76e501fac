// Second-stage kernels: tree ensembles (complete trees in heap order, staged through shared memory)
// and MLP dense layers (tiled matrix products). Every sum is taken in the CPU's order with the CPU's
// rounding (no fused multiply-add), so scores equal the CPU's bit for bit.
#include <string.h>

#include <type_traits>

#include "gpu/l2_kernels.h"

static_assert(sizeof(l2_split) == 8, "the plan counts 8 bytes a split");

__device__ static size_t align16(size_t b) { return (b + 15) & ~(size_t)15; }

// A leaf's index in the scratch: a byte while trees have at most 256 leaves.
template <int D>
using leaf_index_t = typename std::conditional<(D <= 8), uint8_t, uint16_t>::type;

// Walks one tree (splits in shared memory, heap order) for the row whose input f is x[f * R]; returns
// its leaf. With rows transposed in shared memory and R a multiple of 32, a warp's 32 reads of any
// inputs fall in 32 different banks.
template <int D>
__device__ __forceinline__ uint32_t walk(const l2_split *splits, const float *x, uint32_t R) {
    uint32_t i = 0;
#pragma unroll
    for (int level = 0; level < D; level++) {
        const l2_split s = splits[i];
        const float v = x[(s.feature_nan_right & ~L2_NAN_RIGHT) * R];
        const uint32_t right = (v >= s.threshold) | ((v != v) & (s.feature_nan_right >> 31));
        i = 2 * i + 1 + right;
    }
    return i - ((1u << D) - 1);
}

// ROW_THREADS. grid.x: row blocks of blockDim.x rows; grid.y: tree groups. The block's rows are staged
// transposed in shared memory once; its trees go through shared memory in chunks; each thread walks
// four trees at a time (independent loads in flight) and adds their leaves in tree order.
template <typename Acc, int D>
__global__ void forest_kernel(const l2_split *__restrict__ splits, const Acc *__restrict__ leaves, uint32_t num_trees,
                              uint32_t trees_per_group, uint32_t chunk_trees, double base_score, bool average_output,
                              const float *__restrict__ rows, uint32_t n, uint32_t stride, uint32_t num_inputs,
                              leaf_index_t<D> *__restrict__ leaf_index, float *__restrict__ out) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr uint32_t S = (1u << D) - 1, L = 1u << D;
    const uint32_t R = blockDim.x, tid = threadIdx.x;
    float *xs = (float *)smem;
    l2_split *s_splits = (l2_split *)(smem + align16((size_t)num_inputs * R * sizeof(float)));
    Acc *s_leaves = (Acc *)((unsigned char *)s_splits + align16((size_t)chunk_trees * S * sizeof(l2_split)));
    const uint32_t row0 = blockIdx.x * R, row = row0 + tid;
    const bool live = row < n;
    for (uint32_t i = tid; i < R * num_inputs; i += R) {
        const uint32_t r = i / num_inputs, f = i - r * num_inputs;
        xs[f * R + r] = row0 + r < n ? rows[(size_t)(row0 + r) * stride + f] : 0.0f;
    }
    const float *x = xs + tid;
    const uint32_t t_begin = blockIdx.y * trees_per_group;
    const uint32_t t_end = min(num_trees, t_begin + trees_per_group);
    const bool summing = gridDim.y == 1;
    Acc acc = (Acc)base_score;
    for (uint32_t c0 = t_begin; c0 < t_end; c0 += chunk_trees) {
        const uint32_t cn = min(chunk_trees, t_end - c0);
        __syncthreads();
        for (uint32_t i = tid; i < cn * S; i += R) s_splits[i] = splits[(size_t)c0 * S + i];
        if (summing)
            for (uint32_t i = tid; i < cn * L; i += R) s_leaves[i] = leaves[(size_t)c0 * L + i];
        __syncthreads();
        if (!live) continue;
        // Four trees at a time: four independent chains of shared-memory loads in flight per thread;
        // their leaves are still added in tree order.
        uint32_t t = 0;
        for (; t + 4 <= cn; t += 4) {
            uint32_t leaf[4];
#pragma unroll
            for (int j = 0; j < 4; j++) leaf[j] = walk<D>(s_splits + (t + j) * S, x, R);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (summing) acc = acc + s_leaves[(t + j) * L + leaf[j]];
                else leaf_index[(size_t)(c0 + t + j) * n + row] = (leaf_index_t<D>)leaf[j];
            }
        }
        for (; t < cn; t++) {
            const uint32_t a = walk<D>(s_splits + t * S, x, R);
            if (summing) acc = acc + s_leaves[t * L + a];
            else leaf_index[(size_t)(c0 + t) * n + row] = (leaf_index_t<D>)a;
        }
    }
    if (summing && live) out[row] = average_output ? (float)(acc / (Acc)num_trees) : (float)acc;
}

// TREE_WARPS staging: the block's R rows into xs transposed (input f of row r at xs[f * R + r]), so that
// the walks read conflict-free. Read straight, a warp would either read 32 rows' same input (32 cache
// lines a load) or store one row's 32 inputs into one bank (32-way conflict); instead each warp moves
// strips of 8 inputs (a 32-byte sector of a row) through its own padded tile: loads of whole sectors,
// then stores of R different rows at once.
__device__ __forceinline__ void stage_rows_transposed(float *__restrict__ xs, float *__restrict__ tiles,
                                                      const float *__restrict__ rows, uint32_t row0, uint32_t n,
                                                      uint32_t stride, uint32_t num_inputs, uint32_t R, uint32_t r_shift) {
    constexpr uint32_t W = L2_STAGE_STRIP, P = L2_STAGE_STRIP + 1;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float *tile = tiles + warp * R * P;
    const uint32_t live_rows = min(R, n - row0);
    for (uint32_t f0 = warp * W; f0 < num_inputs; f0 += warps * W) {
        for (uint32_t e = lane; e < R * W; e += 32) {
            const uint32_t r = e / W, j = e % W, f = f0 + j;
            tile[r * P + j] = r < live_rows && f < num_inputs ? rows[(size_t)(row0 + r) * stride + f] : 0.0f;
        }
        __syncwarp();
        for (uint32_t e = lane; e < R * W; e += 32) {
            const uint32_t r = e & (R - 1), j = e >> r_shift, f = f0 + j;
            if (f < num_inputs) xs[f * R + r] = tile[r * P + j];
        }
        __syncwarp();
    }
}

// TREE_WARPS. grid.x: row blocks of R rows; grid.y: tree groups; blockDim.x / R tree lanes, lane p
// walking trees p, p + lanes, ... of each chunk for the block's rows (with R = 32 a lane is a warp,
// so a warp's threads walk the same tree). Rows too wide for ROW_THREADS leave room for few rows a
// block; the warps sharing those rows keep the multiprocessor busy. Leaves go to the scratch by
// tree and row (a warp's stores contiguous); sum_leaves_kernel adds them in tree order.
template <int D>
__global__ void __launch_bounds__(L2_TREE_WARPS_WARPS * 32)
    tree_warps_kernel(const l2_split *__restrict__ splits, uint32_t num_trees, uint32_t trees_per_group,
                      uint32_t chunk_trees, const float *__restrict__ rows, uint32_t n, uint32_t stride,
                      uint32_t num_inputs, uint32_t R, uint32_t r_shift, leaf_index_t<D> *__restrict__ leaf_index) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr uint32_t S = (1u << D) - 1;
    const uint32_t tid = threadIdx.x, lanes = blockDim.x >> r_shift, r = tid & (R - 1), p = tid >> r_shift;
    float *xs = (float *)smem;
    unsigned char *area = smem + align16((size_t)num_inputs * R * sizeof(float));
    l2_split *s_splits = (l2_split *)area;
    const uint32_t row0 = blockIdx.x * R, row = row0 + r;
    const bool live = row < n;
    stage_rows_transposed(xs, (float *)area, rows, row0, n, stride, num_inputs, R, r_shift);
    const float *x = xs + r;
    const uint32_t t_begin = blockIdx.y * trees_per_group;
    const uint32_t t_end = min(num_trees, t_begin + trees_per_group);
    for (uint32_t c0 = t_begin; c0 < t_end; c0 += chunk_trees) {
        const uint32_t cn = min(chunk_trees, t_end - c0);
        __syncthreads(); // the tiles, then the previous chunk, are done with
        {
            const uint2 *from = (const uint2 *)(splits + (size_t)c0 * S);
            uint2 *to = (uint2 *)s_splits;
            for (uint32_t i = tid; i < cn * S; i += blockDim.x) to[i] = __ldg(from + i);
        }
        __syncthreads();
        if (!live) continue;
        uint32_t t = p;
        // Four trees at a time: four independent chains of shared-memory loads in flight per thread.
        for (; t + 3 * lanes < cn; t += 4 * lanes) {
            uint32_t leaf[4];
#pragma unroll
            for (uint32_t j = 0; j < 4; j++) leaf[j] = walk<D>(s_splits + (t + j * lanes) * S, x, R);
#pragma unroll
            for (uint32_t j = 0; j < 4; j++)
                leaf_index[(size_t)(c0 + t + j * lanes) * n + row] = (leaf_index_t<D>)leaf[j];
        }
        for (; t < cn; t += lanes) leaf_index[(size_t)(c0 + t) * n + row] = (leaf_index_t<D>)walk<D>(s_splits + t * S, x, R);
    }
}

// Sums the leaves the walkers chose, per row in tree order.
template <typename Acc, typename Idx>
__global__ void sum_leaves_kernel(const Acc *__restrict__ leaves, uint32_t num_trees, uint32_t depth, double base_score,
                                  bool average_output, const Idx *__restrict__ leaf_index, uint32_t n,
                                  float *__restrict__ out) {
    const uint32_t row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const uint32_t num_leaves = 1u << depth;
    Acc acc = (Acc)base_score;
    // The loads of SUM_AHEAD trees are issued before their adds, so that their latencies overlap (a
    // one-tree loop waits on every load in turn), and the next trees' indices are asked for before
    // these adds wait on their leaves; the adds stay in tree order.
    constexpr uint32_t SUM_AHEAD = 16;
    const uint32_t full = num_trees / SUM_AHEAD * SUM_AHEAD;
    uint32_t idx[SUM_AHEAD];
    if (full > 0)
#pragma unroll
        for (uint32_t j = 0; j < SUM_AHEAD; j++) idx[j] = __ldg(leaf_index + (size_t)j * n + row);
    for (uint32_t t = 0; t < full; t += SUM_AHEAD) {
        Acc v[SUM_AHEAD];
#pragma unroll
        for (uint32_t j = 0; j < SUM_AHEAD; j++) v[j] = __ldg(leaves + (size_t)(t + j) * num_leaves + idx[j]);
        if (t + SUM_AHEAD < full)
#pragma unroll
            for (uint32_t j = 0; j < SUM_AHEAD; j++) idx[j] = __ldg(leaf_index + (size_t)(t + SUM_AHEAD + j) * n + row);
#pragma unroll
        for (uint32_t j = 0; j < SUM_AHEAD; j++) acc = acc + v[j];
    }
    for (uint32_t t = full; t < num_trees; t++)
        acc = acc + __ldg(leaves + (size_t)t * num_leaves + leaf_index[(size_t)t * n + row]);
    out[row] = average_output ? (float)(acc / (Acc)num_trees) : (float)acc;
}

template <typename Acc, int D>
static void *row_threads_kernel_of() { return (void *)forest_kernel<Acc, D>; }

template <int D>
static void *tree_warps_kernel_of() { return (void *)tree_warps_kernel<D>; }

static void *pick_kernel(l2_forest_kind kind, bool dbl, uint32_t depth) {
#define CASE(d) \
    case d: \
        return kind == L2_FOREST_TREE_WARPS ? tree_warps_kernel_of<d>() \
               : dbl                        ? row_threads_kernel_of<double, d>() \
                                            : row_threads_kernel_of<float, d>();
    switch (depth) {
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10)
    }
#undef CASE
    return NULL;
}

static_assert(L2_MAX_DEPTH == 10, "pick_kernel instantiates depths 1 to 10");

cudaError_t l2_device_limits_get(int device, l2_device_limits *d) {
    memset(d, 0, sizeof *d);
    int v[4];
    const cudaDeviceAttr attrs[4] = {cudaDevAttrMultiProcessorCount, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                     cudaDevAttrMaxSharedMemoryPerMultiprocessor, cudaDevAttrMaxThreadsPerMultiProcessor};
    for (int i = 0; i < 4; i++) {
        cudaError_t e = cudaDeviceGetAttribute(&v[i], attrs[i], device);
        if (e != cudaSuccess) return e;
    }
    int reserved = 0;
    if (cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device) != cudaSuccess) {
        cudaGetLastError();
        reserved = 0;
    }
    d->multiprocessors = v[0];
    d->smem_per_block_optin = (size_t)v[1];
    d->smem_per_multiprocessor = (size_t)v[2];
    d->max_threads_per_multiprocessor = (uint32_t)v[3];
    d->smem_reserved_per_block = (size_t)reserved;
    return cudaSuccess;
}

// Above the default 48 KiB a kernel's dynamic shared memory must be allowed first. Always to the
// device's whole opt-in, the same value from every handle: a kernel's attribute is shared by the
// process's threads, and one handle lowering it would fail another's launch. A launch takes only what
// it asks for.
static cudaError_t allow_smem(void *kernel, size_t bytes, size_t optin) {
    if (bytes <= 48u * 1024u) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)optin);
}

typedef struct {
    bool dbl;
    size_t optin;
} occupancy_ctx;

static int occupancy(void *ctx, l2_forest_kind kind, const l2_forest_shape *shape, uint32_t threads, size_t smem) {
    const occupancy_ctx *c = (const occupancy_ctx *)ctx;
    void *kernel = pick_kernel(kind, c->dbl, shape->depth);
    int per_sm = 0;
    if (!kernel || allow_smem(kernel, smem, c->optin) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)kernel, (int)threads, smem) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return per_sm;
}

cudaError_t l2_plan_forest(const l2_device_forest *f, uint32_t n, uint32_t num_inputs, const l2_device_limits *device,
                           const l2_plan_options *options, l2_forest_plan *plan, char *err, size_t err_len) {
    const l2_forest_shape shape = {f->num_trees, f->depth, num_inputs, f->leaf_d != NULL};
    occupancy_ctx ctx = {f->leaf_d != NULL, device->smem_per_block_optin};
    l2_plan_options o = *options;
    o.occupancy = occupancy;
    o.occupancy_ctx = &ctx;
    return l2_forest_plan_make(&shape, n, device, &o, plan, err, err_len) == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

template <typename Idx>
static void launch_sum(const l2_device_forest *f, const Idx *leaf_index, uint32_t n, float *out, cudaStream_t stream) {
    if (f->leaf_d)
        sum_leaves_kernel<double, Idx><<<(n + 127) / 128, 128, 0, stream>>>(f->leaf_d, f->num_trees, f->depth, f->base_score,
                                                                            f->average_output, leaf_index, n, out);
    else
        sum_leaves_kernel<float, Idx><<<(n + 127) / 128, 128, 0, stream>>>(f->leaf_f, f->num_trees, f->depth, f->base_score,
                                                                           f->average_output, leaf_index, n, out);
}

static void launch_sum_any(const l2_device_forest *f, uint32_t index_bytes, const void *leaf_index, uint32_t n, float *out,
                           cudaStream_t stream) {
    if (index_bytes == 1) launch_sum(f, (const uint8_t *)leaf_index, n, out, stream);
    else launch_sum(f, (const uint16_t *)leaf_index, n, out, stream);
}

cudaError_t l2_launch_forest(const l2_device_forest *f, const l2_forest_plan *plan, const float *rows, uint32_t n,
                             uint32_t stride, uint32_t num_inputs, void *leaf_index, float *out, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const bool dbl = f->leaf_d != NULL;
    void *kernel = pick_kernel(plan->kind, dbl, f->depth);
    if (!kernel) return cudaErrorInvalidValue;
    cudaError_t e = allow_smem(kernel, plan->smem_bytes, plan->smem_optin);
    if (e != cudaSuccess) return e;
    uint32_t num_trees = f->num_trees, per_group = plan->trees_per_group, chunk = plan->chunk_trees;
    if (plan->kind == L2_FOREST_ROW_THREADS) {
        const void *leaves = dbl ? (const void *)f->leaf_d : (const void *)f->leaf_f;
        double base_score = f->base_score;
        bool average_output = f->average_output;
        void *args[] = {(void *)&f->splits, (void *)&leaves, &num_trees, &per_group, &chunk, &base_score,
                        &average_output, (void *)&rows, &n, &stride, &num_inputs, &leaf_index, &out};
        e = cudaLaunchKernel(kernel, dim3(plan->row_blocks, plan->groups), dim3(plan->threads), args, plan->smem_bytes, stream);
        if (e == cudaSuccess && plan->groups > 1) launch_sum_any(f, plan->index_bytes, leaf_index, n, out, stream);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    uint32_t R = plan->rows_per_block, r_shift = 0;
    while ((1u << r_shift) < R) r_shift++;
    for (uint32_t s0 = 0; s0 < n && e == cudaSuccess; s0 += plan->slice_rows) {
        uint32_t cnt = min(plan->slice_rows, n - s0);
        const float *slice_rows = rows + (size_t)s0 * stride;
        void *args[] = {(void *)&f->splits, &num_trees, &per_group, &chunk, (void *)&slice_rows, &cnt, &stride,
                        &num_inputs, &R, &r_shift, &leaf_index};
        e = cudaLaunchKernel(kernel, dim3((cnt + R - 1) / R, plan->groups), dim3(plan->threads), args, plan->smem_bytes, stream);
        if (e == cudaSuccess) launch_sum_any(f, plan->index_bytes, leaf_index, cnt, out + s0, stream);
        if (e == cudaSuccess) e = cudaGetLastError();
    }
    return e;
}

// ------------------------------------------------------------------ dense layers

#define TILE 16

// Block TILE x TILE: rows r0.., outputs o0..; each thread one (row, output), summing tiles of the
// inputs in order. __fmul_rn / __fadd_rn keep the compiler from fusing into FMA. With x_last, input
// in - 1 of row r is x_last[r] (a stacked ranker's trees' score), loaded into the tile in its place.
__global__ void dense_kernel(const float *__restrict__ x, uint32_t x_stride, const float *__restrict__ x_last,
                             uint32_t n, const float *__restrict__ w, const float *__restrict__ b, uint32_t in,
                             uint32_t out, bool relu, float *__restrict__ y) {
    const uint32_t from_x = x_last ? in - 1 : in;
    __shared__ float xs[TILE][TILE + 1], ws[TILE][TILE + 1];
    const uint32_t r = blockIdx.x * TILE + threadIdx.y, o = blockIdx.y * TILE + threadIdx.x;
    const uint32_t load_r = blockIdx.x * TILE + threadIdx.y, load_o = blockIdx.y * TILE + threadIdx.y;
    float s = 0.0f;
    for (uint32_t i0 = 0; i0 < in; i0 += TILE) {
        const uint32_t i = i0 + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = load_r < n && i < in ? (i < from_x ? x[(size_t)load_r * x_stride + i] : x_last[load_r])
                                                            : 0.0f;
        ws[threadIdx.y][threadIdx.x] = load_o < out && i < in ? w[(size_t)load_o * in + i] : 0.0f;
        __syncthreads();
        const uint32_t m = min(TILE, in - i0);
        for (uint32_t k = 0; k < m; k++) s = __fadd_rn(s, __fmul_rn(ws[threadIdx.x][k], xs[threadIdx.y][k]));
        __syncthreads();
    }
    if (r < n && o < out) {
        s = __fadd_rn(s, b[o]);
        y[(size_t)r * out + o] = relu && s < 0 ? 0.0f : s;
    }
}

cudaError_t l2_launch_dense(const float *x, uint32_t x_stride, const float *x_last, uint32_t n, const float *w,
                            const float *b, uint32_t in, uint32_t out, bool relu, float *y, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    dim3 grid((n + TILE - 1) / TILE, (out + TILE - 1) / TILE), block(TILE, TILE);
    dense_kernel<<<grid, block, 0, stream>>>(x, x_stride, x_last, n, w, b, in, out, relu, y);
    return cudaGetLastError();
}
