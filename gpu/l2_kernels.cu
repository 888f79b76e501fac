// Second-stage kernels: tree ensembles (complete trees in heap order, staged through shared memory)
// and MLP dense layers (tiled matrix products). Every sum is taken in the CPU's order with the CPU's
// rounding (no fused multiply-add), so scores equal the CPU's bit for bit.
#include <string.h>

#include "gpu/l2_kernels.h"

#define TREE_CHUNK_BYTES (16u * 1024u) /* splits + leaves of the trees staged at once */
#define X_SMEM_BYTES (32u * 1024u)     /* the block's rows, transposed */

__host__ __device__ static size_t align16(size_t b) { return (b + 15) & ~(size_t)15; }

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

// grid.x: row blocks of blockDim.x rows; grid.y: tree groups. The block's rows are staged transposed
// in shared memory once; its trees go through shared memory in chunks; each thread walks two trees at
// a time (independent loads in flight) and adds their leaves in tree order.
template <typename Acc, int D>
__global__ void forest_kernel(const l2_split *__restrict__ splits, const Acc *__restrict__ leaves, uint32_t num_trees,
                              uint32_t trees_per_group, uint32_t chunk_trees, double base_score, bool average_output,
                              const float *__restrict__ rows, uint32_t n, uint32_t stride, uint32_t num_inputs,
                              uint8_t *__restrict__ leaf_index, float *__restrict__ out) {
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
                else leaf_index[(size_t)(c0 + t + j) * n + row] = (uint8_t)leaf[j];
            }
        }
        for (; t < cn; t++) {
            const uint32_t a = walk<D>(s_splits + t * S, x, R);
            if (summing) acc = acc + s_leaves[t * L + a];
            else leaf_index[(size_t)(c0 + t) * n + row] = (uint8_t)a;
        }
    }
    if (summing && live) out[row] = average_output ? (float)(acc / (Acc)num_trees) : (float)acc;
}

// Sums the leaves the split kernel chose, per row in tree order.
template <typename Acc>
__global__ void sum_leaves_kernel(const Acc *__restrict__ leaves, uint32_t num_trees, uint32_t depth, double base_score,
                                  bool average_output, const uint8_t *__restrict__ leaf_index, uint32_t n,
                                  float *__restrict__ out) {
    const uint32_t row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const uint32_t num_leaves = 1u << depth;
    Acc acc = (Acc)base_score;
    // The loads of SUM_AHEAD trees are issued before their adds, so that their latencies overlap
    // (a one-tree loop waits on every load in turn); the adds stay in tree order.
    constexpr uint32_t SUM_AHEAD = 16;
    uint32_t t = 0;
    for (; t + SUM_AHEAD <= num_trees; t += SUM_AHEAD) {
        uint32_t idx[SUM_AHEAD];
        Acc v[SUM_AHEAD];
#pragma unroll
        for (uint32_t j = 0; j < SUM_AHEAD; j++) idx[j] = __ldg(leaf_index + (size_t)(t + j) * n + row);
#pragma unroll
        for (uint32_t j = 0; j < SUM_AHEAD; j++) v[j] = __ldg(leaves + (size_t)(t + j) * num_leaves + idx[j]);
#pragma unroll
        for (uint32_t j = 0; j < SUM_AHEAD; j++) acc = acc + v[j];
    }
    for (; t < num_trees; t++) acc = acc + __ldg(leaves + (size_t)t * num_leaves + leaf_index[(size_t)t * n + row]);
    out[row] = average_output ? (float)(acc / (Acc)num_trees) : (float)acc;
}

template <typename Acc, int D>
static void *kernel_of() { return (void *)forest_kernel<Acc, D>; }

static void *pick_kernel(bool dbl, uint32_t depth) {
#define CASE(d) \
    case d: return dbl ? kernel_of<double, d>() : kernel_of<float, d>();
    switch (depth) {
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10)
    }
#undef CASE
    return NULL;
}

static uint32_t chunk_trees(const l2_device_forest *f, bool summing) {
    const size_t per_tree = align16(((1u << f->depth) - 1) * sizeof(l2_split)) +
                            (summing ? ((size_t)1 << f->depth) * (f->leaf_d ? sizeof(double) : sizeof(float)) : 0);
    const uint32_t c = (uint32_t)(TREE_CHUNK_BYTES / per_tree);
    return c ? c : 1;
}

static size_t plan_smem(const l2_device_forest *f, uint32_t rows_per_block, uint32_t num_inputs, uint32_t chunk, bool summing) {
    const size_t S = ((size_t)1 << f->depth) - 1, L = (size_t)1 << f->depth;
    return align16((size_t)num_inputs * rows_per_block * sizeof(float)) + align16(chunk * S * sizeof(l2_split)) +
           (summing ? chunk * L * (f->leaf_d ? sizeof(double) : sizeof(float)) : 0);
}

cudaError_t l2_plan_forest(const l2_device_forest *f, uint32_t n, uint32_t num_inputs, l2_split_mode mode,
                           int multiprocessors, size_t max_scratch, l2_forest_plan *plan) {
    memset(plan, 0, sizeof *plan);
    void *kernel = pick_kernel(f->leaf_d != NULL, f->depth);
    if (!kernel) return cudaErrorInvalidValue;
    uint32_t R = 256;
    while (R > 32 && (size_t)num_inputs * R * sizeof(float) > X_SMEM_BYTES) R /= 2;
    if ((size_t)num_inputs * R * sizeof(float) > X_SMEM_BYTES) return cudaErrorInvalidValue;
    plan->rows_per_block = R;
    plan->row_blocks = (n + R - 1) / R;
    plan->groups = 1;
    const size_t one_pass = plan_smem(f, R, num_inputs, chunk_trees(f, true), true);
    if (mode != L2_SPLIT_NEVER && f->num_trees > 1) {
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)kernel, (int)R, one_pass) != cudaSuccess ||
            per_sm < 1)
            per_sm = 1;
        const uint32_t target = (uint32_t)(per_sm * multiprocessors);
        uint32_t groups = plan->row_blocks < target ? (target + plan->row_blocks - 1) / plan->row_blocks : 1;
        if (mode == L2_SPLIT_ALWAYS && groups < 2) groups = 2;
        const uint32_t most = (f->num_trees + 7) / 8; /* at least 8 trees a group */
        if (groups > most) groups = most > 1 ? most : 2;
        if (groups > f->num_trees) groups = f->num_trees;
        if (groups > 1 && (size_t)f->num_trees * n <= max_scratch) plan->groups = groups;
    }
    const bool summing = plan->groups == 1;
    plan->smem_bytes = plan_smem(f, R, num_inputs, chunk_trees(f, summing), summing);
    plan->scratch_bytes = summing ? 0 : (size_t)f->num_trees * n;
    return cudaSuccess;
}

cudaError_t l2_launch_forest(const l2_device_forest *f, const l2_forest_plan *plan, const float *rows, uint32_t n,
                             uint32_t stride, uint32_t num_inputs, uint8_t *leaf_index, float *out, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const bool summing = plan->groups == 1, dbl = f->leaf_d != NULL;
    void *kernel = pick_kernel(dbl, f->depth);
    if (plan->smem_bytes > 48u * 1024u) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)plan->smem_bytes);
        if (e != cudaSuccess) return e;
    }
    uint32_t chunk = chunk_trees(f, summing);
    const uint32_t per_group = (f->num_trees + plan->groups - 1) / plan->groups;
    if (chunk > per_group) chunk = per_group;
    const void *leaves = dbl ? (const void *)f->leaf_d : (const void *)f->leaf_f;
    uint32_t num_trees = f->num_trees;
    double base_score = f->base_score;
    bool average_output = f->average_output;
    void *args[] = {(void *)&f->splits, (void *)&leaves, &num_trees, (void *)&per_group, &chunk, &base_score,
                    &average_output, (void *)&rows, &n, &stride, &num_inputs, &leaf_index, &out};
    cudaError_t e = cudaLaunchKernel(kernel, dim3(plan->row_blocks, plan->groups), dim3(plan->rows_per_block), args,
                                     plan->smem_bytes, stream);
    if (e != cudaSuccess) return e;
    if (!summing) {
        if (dbl)
            sum_leaves_kernel<double><<<(n + 127) / 128, 128, 0, stream>>>(f->leaf_d, f->num_trees, f->depth, f->base_score,
                                                                           f->average_output, leaf_index, n, out);
        else
            sum_leaves_kernel<float><<<(n + 127) / 128, 128, 0, stream>>>(f->leaf_f, f->num_trees, f->depth, f->base_score,
                                                                          f->average_output, leaf_index, n, out);
    }
    return cudaGetLastError();
}

// ------------------------------------------------------------------ dense layers

#define TILE 16

// Block TILE x TILE: rows r0.., outputs o0..; each thread one (row, output), summing tiles of the
// inputs in order. __fmul_rn / __fadd_rn keep the compiler from fusing into FMA.
__global__ void dense_kernel(const float *__restrict__ x, uint32_t x_stride, uint32_t n, const float *__restrict__ w,
                             const float *__restrict__ b, uint32_t in, uint32_t out, bool relu, float *__restrict__ y) {
    __shared__ float xs[TILE][TILE + 1], ws[TILE][TILE + 1];
    const uint32_t r = blockIdx.x * TILE + threadIdx.y, o = blockIdx.y * TILE + threadIdx.x;
    const uint32_t load_r = blockIdx.x * TILE + threadIdx.y, load_o = blockIdx.y * TILE + threadIdx.y;
    float s = 0.0f;
    for (uint32_t i0 = 0; i0 < in; i0 += TILE) {
        const uint32_t i = i0 + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = load_r < n && i < in ? x[(size_t)load_r * x_stride + i] : 0.0f;
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

cudaError_t l2_launch_dense(const float *x, uint32_t x_stride, uint32_t n, const float *w, const float *b, uint32_t in,
                            uint32_t out, bool relu, float *y, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    dim3 grid((n + TILE - 1) / TILE, (out + TILE - 1) / TILE), block(TILE, TILE);
    dense_kernel<<<grid, block, 0, stream>>>(x, x_stride, n, w, b, in, out, relu, y);
    return cudaGetLastError();
}
