// The CUDA device: the partition resident in device memory, and per batch a fixed sequence on one stream:
// copy the batch in, a threshold pass (every (query, range) block reports its best scores), the k-th best
// of those per query (a lower bound of the answer's k-th score), a scoring pass that skips ranges by
// their block-max bound and keeps documents at or above the threshold, a segmented sort of the
// candidates, and one copy of all results back. Decode is fused into both passes: blocks are decoded
// by warps straight into a shared-memory accumulator of the range, never into global memory.
#include <cuda_runtime.h>
#include <cub/device/device_segmented_sort.cuh>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "gpu/device.h"
}
#include "gpu/posting_decode.h"

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kDocsPerThread = GPU_RANGE_DOCS / kThreads;
constexpr size_t kSharedBytes = GPU_RANGE_DOCS * sizeof(double) + GPU_RANGE_DOCS; // accumulator + match counts
constexpr int kEvents = 7;

struct stream_buffers {
    cudaStream_t stream;
    cudaEvent_t events[kEvents];
    gpu_query *d_queries;
    gpu_term *d_terms;
    gpu_query_result *d_results; // followed by the hits: one region, one copy back
    isn_hit *d_hits;
    uint32_t *d_range_keys;
    uint32_t *d_theta;
    uint32_t *d_cand_count;
    uint64_t *d_cands, *d_cands_sorted;
    int *d_seg_begin, *d_seg_end;
    void *d_sort_temp;
    size_t sort_temp_bytes;
    uint8_t *h_stage; // pinned: queries then terms
    uint8_t *h_out;   // pinned: results then hits
    uint32_t num_queries, total_hits;
    uint64_t bytes_in, bytes_out;
};

struct range_args {
    const uint8_t *payload;
    const isn_block_meta *blocks;
    const float *norms;
    uint32_t num_docs;
    uint32_t num_ranges;
    float k1_plus_1;
    const gpu_query *queries;
    const gpu_term *terms;
    gpu_query_result *results;
    uint32_t *range_keys; // [query][range][key_stride]
    uint32_t key_stride;
    const uint32_t *theta;
    uint64_t *cands; // [query][cand_cap]
    uint32_t *cand_count;
    uint32_t cand_cap;
};

__device__ __forceinline__ uint32_t warp_inclusive_sum(uint32_t v) {
    const unsigned lane = threadIdx.x & 31u;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        uint32_t other = __shfl_up_sync(0xFFFFFFFFu, v, d);
        if (lane >= (unsigned)d) v += other;
    }
    return v;
}

__device__ __forceinline__ uint64_t block_max_u64(uint64_t v, uint64_t *scratch) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, v, d);
        v = other > v ? other : v;
    }
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < kWarps ? scratch[lane] : 0;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, v, d);
        v = other > v ? other : v;
    }
    return v;
}

__device__ __forceinline__ void patch_exceptions(const uint8_t *in, gpu_block_header h, uint32_t n, uint32_t lane,
                                                 uint32_t v[4]) {
    for (uint32_t e = 0; e < h.exceptions; e++) {
        uint32_t p = gpu_exception_position(in, h, n, e);
        if ((p >> 2) != lane) continue;
        uint32_t high = gpu_exception_high(in, h, n, e);
        uint32_t j = p & 3u;
        v[0] |= j == 0 ? high : 0u;
        v[1] |= j == 1 ? high : 0u;
        v[2] |= j == 2 ? high : 0u;
        v[3] |= j == 3 ? high : 0u;
    }
}

template <bool kScorePass>
__global__ void __launch_bounds__(kThreads) range_kernel(range_args a) {
    extern __shared__ double acc[];
    uint32_t *matches = reinterpret_cast<uint32_t *>(acc + GPU_RANGE_DOCS); // four 8-bit counts a word
    __shared__ uint32_t s_first[GPU_MAX_TERMS], s_count[GPU_MAX_TERMS];
    __shared__ double s_bound[GPU_MAX_TERMS];
    __shared__ gpu_term s_terms[GPU_MAX_TERMS];
    __shared__ uint32_t s_items;
    __shared__ int s_skip;
    __shared__ uint64_t s_scratch[kWarps];

    const uint32_t q = blockIdx.y, r = blockIdx.x, tid = threadIdx.x;
    const gpu_query query = a.queries[q];
    const uint32_t lo = r * GPU_RANGE_DOCS;
    const uint32_t hi = lo + GPU_RANGE_DOCS < a.num_docs ? lo + GPU_RANGE_DOCS : a.num_docs;
    const uint32_t nt = query.num_terms;

    if (tid < nt) {
        gpu_term term = a.terms[query.term_begin + tid];
        s_terms[tid] = term;
        const isn_block_meta *blocks = a.blocks + term.first_block;
        uint32_t first, end;
        gpu_blocks_in_range(blocks, term.num_blocks, lo, hi, &first, &end);
        float max_part = 0.0f;
        for (uint32_t k = first; k < end; k++) max_part = fmaxf(max_part, blocks[k].max_tf_part);
        s_first[tid] = first;
        s_count[tid] = end - first;
        s_bound[tid] = (double)(term.weight * max_part);
    }
    __syncthreads();
    if (tid == 0) {
        int skip = 0;
        double bound = 0.0;
        uint32_t items = 0;
        for (uint32_t t = 0; t < nt; t++) {
            if (query.and_mode && s_count[t] == 0) skip = 1;
            bound += s_bound[t];
            items += s_count[t];
        }
        if (kScorePass && !skip) {
            uint32_t theta = a.theta[q];
            if (theta != 0 && bound * GPU_BOUND_SLACK < (double)__uint_as_float(theta)) skip = 1;
        }
        if (items == 0) skip = 1;
        s_skip = skip;
        s_items = items;
        if (skip && kScorePass) atomicAdd(&a.results[q].ranges_pruned, 1u);
        if (!skip) atomicAdd(&a.results[q].ranges_scored, 1u);
    }
    __syncthreads();
    uint32_t *keys_out = a.range_keys + ((size_t)q * a.num_ranges + r) * a.key_stride;
    if (s_skip) {
        if (!kScorePass && tid < query.range_top) keys_out[tid] = 0;
        return;
    }
    for (uint32_t i = tid; i < GPU_RANGE_DOCS; i += kThreads) acc[i] = 0.0;
    for (uint32_t i = tid; i < GPU_RANGE_DOCS / 4; i += kThreads) matches[i] = 0;
    __syncthreads();

    const uint32_t warp = tid >> 5, lane = tid & 31u;
    uint32_t scored = 0;
    for (uint32_t item = warp; item < s_items; item += kWarps) {
        uint32_t t = 0, rem = item;
        while (rem >= s_count[t]) rem -= s_count[t++];
        const gpu_term term = s_terms[t];
        const isn_block_meta *blocks = a.blocks + term.first_block;
        const uint32_t b = s_first[t] + rem;
        const uint32_t n = gpu_block_count(term.df, term.num_blocks, b);
        const uint8_t *in = a.payload + (int64_t)blocks[b].offset + term.payload_delta;
        const gpu_block_header dh = gpu_read_header(in);
        const uint8_t *freq_in = in + gpu_encoded_bytes(dh, n);
        const gpu_block_header fh = gpu_read_header(freq_in);
        uint32_t gaps[4], freqs[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t i = 4 * lane + j;
            gaps[j] = i < n ? gpu_packed_value(in + dh.header_bytes, n, dh.bits, i) : 0u;
            freqs[j] = i < n ? gpu_packed_value(freq_in + fh.header_bytes, n, fh.bits, i) : 0u;
        }
        if (dh.exceptions) patch_exceptions(in, dh, n, lane, gaps);
        if (fh.exceptions) patch_exceptions(freq_in, fh, n, lane, freqs);
        uint32_t step[4], local = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            step[j] = 4 * lane + j < n ? gaps[j] + 1u : 0u;
            local += step[j];
        }
        uint32_t doc = (b ? blocks[b - 1].last_doc : UINT32_MAX) + (warp_inclusive_sum(local) - local);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            doc += step[j];
            if (4 * lane + j < n && doc >= lo && doc < hi) {
                float c = gpu_term_contribution(term.weight, a.k1_plus_1, freqs[j] + 1u, a.norms[doc]);
                atomicAdd(&acc[doc - lo], (double)c);
                atomicAdd(&matches[(doc - lo) >> 2], 1u << (8u * ((doc - lo) & 3u)));
                scored++;
            }
        }
    }
    for (int d = 16; d > 0; d >>= 1) scored += __shfl_xor_sync(0xFFFFFFFFu, scored, d);
    if (lane == 0 && scored) atomicAdd((unsigned long long *)&a.results[q].postings_scored, (unsigned long long)scored);
    __syncthreads();

    const uint32_t need = query.and_mode ? nt : 1u;
    uint32_t keys[kDocsPerThread];
#pragma unroll
    for (int j = 0; j < kDocsPerThread; j++) {
        uint32_t i = j * kThreads + tid;
        uint32_t count = (matches[i >> 2] >> (8u * (i & 3u))) & 0xFFu;
        keys[j] = i < hi - lo && count >= need ? __float_as_uint((float)acc[i]) : 0u;
    }
    if (!kScorePass) {
        // m rounds of "best below the previous pick", by (key desc, position asc)
        uint64_t previous = ~0ull;
        for (uint32_t m = 0; m < query.range_top; m++) {
            uint64_t best = 0;
#pragma unroll
            for (int j = 0; j < kDocsPerThread; j++) {
                uint32_t i = j * kThreads + tid;
                uint64_t composite = keys[j] ? ((uint64_t)keys[j] << 32) | (0xFFFFFFFFu - i) : 0ull;
                if (composite < previous && composite > best) best = composite;
            }
            best = block_max_u64(best, s_scratch);
            if (tid == 0) keys_out[m] = (uint32_t)(best >> 32);
            previous = best;
        }
        return;
    }
    const uint32_t theta = a.theta[q];
    uint64_t *cands = a.cands + (size_t)q * a.cand_cap;
#pragma unroll
    for (int j = 0; j < kDocsPerThread; j++) {
        uint32_t i = j * kThreads + tid;
        bool keep = keys[j] != 0 && keys[j] >= theta;
        uint32_t mask = __ballot_sync(0xFFFFFFFFu, keep);
        if (mask == 0) continue;
        uint32_t base = 0;
        if (lane == 0) base = atomicAdd(&a.cand_count[q], (uint32_t)__popc(mask));
        base = __shfl_sync(0xFFFFFFFFu, base, 0);
        if (keep) {
            uint32_t at = base + __popc(mask & ((1u << lane) - 1u));
            if (at < a.cand_cap) cands[at] = gpu_candidate_key(keys[j], lo + i);
        }
    }
}

// The k-th largest of the keys the ranges reported (0 when fewer than k were reported): radix select,
// 8 bits a round.
__global__ void __launch_bounds__(256) threshold_kernel(const gpu_query *queries, const uint32_t *range_keys,
                                                        uint32_t num_ranges, uint32_t key_stride, uint32_t *theta) {
    __shared__ uint32_t hist[256];
    __shared__ uint32_t s_prefix, s_remaining;
    const uint32_t q = blockIdx.x;
    const gpu_query query = queries[q];
    const uint32_t m = query.range_top;
    const uint32_t total = num_ranges * m;
    if (query.k > total) {
        if (threadIdx.x == 0) theta[q] = 0;
        return;
    }
    const uint32_t *keys = range_keys + (size_t)q * num_ranges * key_stride;
    if (threadIdx.x == 0) {
        s_prefix = 0;
        s_remaining = query.k;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint32_t i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        const uint32_t prefix = s_prefix;
        for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
            uint32_t key = keys[(i / m) * key_stride + i % m];
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint32_t remaining = s_remaining, bin = 255;
            for (;; bin--) {
                if (hist[bin] >= remaining || bin == 0) break;
                remaining -= hist[bin];
            }
            s_prefix = prefix | (bin << shift);
            s_remaining = remaining;
        }
        mask |= 0xFFu << shift;
        __syncthreads();
    }
    if (threadIdx.x == 0) theta[q] = s_prefix;
}

__global__ void segments_kernel(const uint32_t *cand_count, uint32_t cand_cap, uint32_t num_queries, int *begin,
                                int *end) {
    uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= num_queries) return;
    uint32_t n = cand_count[q] < cand_cap ? cand_count[q] : cand_cap;
    begin[q] = (int)(q * cand_cap);
    end[q] = (int)(q * cand_cap + n);
}

__global__ void gather_kernel(const gpu_query *queries, const uint64_t *sorted, const uint32_t *cand_count,
                              uint32_t cand_cap, gpu_query_result *results, isn_hit *hits) {
    const uint32_t q = blockIdx.x;
    const uint32_t count = cand_count[q];
    const uint32_t k = queries[q].k;
    const uint32_t n = count > cand_cap ? 0 : (count < k ? count : k);
    if (threadIdx.x == 0) {
        results[q].num_hits = n;
        results[q].candidates = count;
    }
    const uint64_t *mine = sorted + (size_t)q * cand_cap;
    isn_hit *out = hits + queries[q].hit_offset;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        uint64_t key = mine[i];
        isn_hit h;
        h.doc = (uint32_t)key;
        h.score = __uint_as_float(~(uint32_t)(key >> 32));
        out[i] = h;
    }
}

} // namespace

struct gpu_device {
    int ordinal;
    cudaDeviceProp prop;
    gpu_upload upload;
    uint8_t *d_payload;
    isn_block_meta *d_blocks;
    float *d_norms;
    uint32_t num_ranges;
    uint32_t key_stride;
    stream_buffers streams[8];
};

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess) {                                                                       \
            snprintf(err, err_len, "CUDA error %s at %s:%d: %s", cudaGetErrorName(e_), __FILE__, __LINE__, \
                     cudaGetErrorString(e_));                                                          \
            return -1;                                                                                 \
        }                                                                                              \
    } while (0)

static void cuda_close(gpu_device *d) {
    if (d == nullptr) return;
    cudaSetDevice(d->ordinal);
    for (uint32_t i = 0; i < d->upload.streams; i++) {
        stream_buffers *s = &d->streams[i];
        if (s->stream) cudaStreamSynchronize(s->stream);
        for (int e = 0; e < kEvents; e++)
            if (s->events[e]) cudaEventDestroy(s->events[e]);
        if (s->stream) cudaStreamDestroy(s->stream);
        cudaFree(s->d_queries);
        cudaFree(s->d_terms);
        cudaFree(s->d_results);
        cudaFree(s->d_range_keys);
        cudaFree(s->d_theta);
        cudaFree(s->d_cand_count);
        cudaFree(s->d_cands);
        cudaFree(s->d_cands_sorted);
        cudaFree(s->d_seg_begin);
        cudaFree(s->d_seg_end);
        cudaFree(s->d_sort_temp);
        cudaFreeHost(s->h_stage);
        cudaFreeHost(s->h_out);
    }
    cudaFree(d->d_payload);
    cudaFree(d->d_blocks);
    cudaFree(d->d_norms);
    delete d;
}

static size_t results_bytes(uint32_t queries) {
    return ((size_t)queries * sizeof(gpu_query_result) + 15) / 16 * 16;
}

static int open_stream(gpu_device *d, stream_buffers *s, char *err, size_t err_len) {
    const gpu_upload *u = &d->upload;
    CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    for (int e = 0; e < kEvents; e++) CHECK(cudaEventCreate(&s->events[e]));
    CHECK(cudaMalloc(&s->d_queries, u->max_batch * sizeof(gpu_query)));
    CHECK(cudaMalloc(&s->d_terms, u->max_terms * sizeof(gpu_term)));
    CHECK(cudaMalloc(&s->d_results, results_bytes(u->max_batch) + (size_t)u->max_batch * u->max_k * sizeof(isn_hit)));
    s->d_hits = reinterpret_cast<isn_hit *>(reinterpret_cast<uint8_t *>(s->d_results) + results_bytes(u->max_batch));
    CHECK(cudaMalloc(&s->d_range_keys, (size_t)u->max_batch * d->num_ranges * d->key_stride * sizeof(uint32_t)));
    CHECK(cudaMalloc(&s->d_theta, u->max_batch * sizeof(uint32_t)));
    CHECK(cudaMalloc(&s->d_cand_count, u->max_batch * sizeof(uint32_t)));
    size_t cand_items = (size_t)u->max_batch * u->max_candidates;
    if (cand_items > (size_t)INT32_MAX) {
        snprintf(err, err_len, "max_batch * max_candidates (%zu) is above the sort's 2^31 limit", cand_items);
        return -1;
    }
    CHECK(cudaMalloc(&s->d_cands, cand_items * sizeof(uint64_t)));
    CHECK(cudaMalloc(&s->d_cands_sorted, cand_items * sizeof(uint64_t)));
    CHECK(cudaMalloc(&s->d_seg_begin, u->max_batch * sizeof(int)));
    CHECK(cudaMalloc(&s->d_seg_end, u->max_batch * sizeof(int)));
    CHECK(cub::DeviceSegmentedSort::SortKeys(nullptr, s->sort_temp_bytes, s->d_cands, s->d_cands_sorted,
                                             (int)cand_items, (int)u->max_batch, s->d_seg_begin, s->d_seg_end,
                                             s->stream));
    CHECK(cudaMalloc(&s->d_sort_temp, s->sort_temp_bytes));
    CHECK(cudaMallocHost(&s->h_stage, u->max_batch * sizeof(gpu_query) + u->max_terms * sizeof(gpu_term)));
    CHECK(cudaMallocHost(&s->h_out, results_bytes(u->max_batch) + (size_t)u->max_batch * u->max_k * sizeof(isn_hit)));
    return 0;
}

static int open_device(gpu_device *d, char *err, size_t err_len) {
    const gpu_upload *u = &d->upload;
    CHECK(cudaSetDevice(d->ordinal));
    CHECK(cudaGetDeviceProperties(&d->prop, d->ordinal));
    // The same bytes as on disk, padded so that two-word unaligned loads stay inside the allocation.
    CHECK(cudaMalloc(&d->d_payload, u->payload_bytes + 64));
    CHECK(cudaMemset(d->d_payload + u->payload_bytes, 0, 64));
    CHECK(cudaMemcpy(d->d_payload, u->payload, u->payload_bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&d->d_blocks, (u->num_blocks ? u->num_blocks : 1) * sizeof(isn_block_meta)));
    CHECK(cudaMemcpy(d->d_blocks, u->blocks, u->num_blocks * sizeof(isn_block_meta), cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&d->d_norms, (u->num_docs ? u->num_docs : 1) * sizeof(float)));
    CHECK(cudaMemcpy(d->d_norms, u->norms, (size_t)u->num_docs * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaFuncSetAttribute(range_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
    CHECK(cudaFuncSetAttribute(range_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
    for (uint32_t i = 0; i < u->streams; i++)
        if (open_stream(d, &d->streams[i], err, err_len) != 0) return -1;
    return 0;
}

static gpu_device *cuda_open(int ordinal, const gpu_upload *upload, char *err, size_t err_len) {
    gpu_device *d = new (std::nothrow) gpu_device();
    if (d == nullptr) {
        snprintf(err, err_len, "CUDA device: out of memory");
        return nullptr;
    }
    d->ordinal = ordinal;
    d->upload = *upload;
    d->num_ranges = (upload->num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
    if (d->num_ranges == 0) d->num_ranges = 1;
    d->key_stride = gpu_range_top(upload->max_k, upload->num_docs);
    if (upload->streams > 8 || open_device(d, err, err_len) != 0) {
        if (upload->streams > 8) snprintf(err, err_len, "CUDA device: at most 8 streams");
        cuda_close(d);
        return nullptr;
    }
    return d;
}

static int cuda_launch(gpu_device *d, uint32_t slot, const gpu_batch *batch, char *err, size_t err_len) {
    const gpu_upload *u = &d->upload;
    stream_buffers *s = &d->streams[slot];
    cudaStream_t st = s->stream;
    const uint32_t nq = batch->num_queries;
    CHECK(cudaSetDevice(d->ordinal));
    size_t qbytes = nq * sizeof(gpu_query), tbytes = batch->num_terms * sizeof(gpu_term);
    memcpy(s->h_stage, batch->queries, qbytes);
    memcpy(s->h_stage + qbytes, batch->terms, tbytes);
    CHECK(cudaEventRecord(s->events[0], st));
    CHECK(cudaMemcpyAsync(s->d_queries, s->h_stage, qbytes, cudaMemcpyHostToDevice, st));
    CHECK(cudaMemcpyAsync(s->d_terms, s->h_stage + qbytes, tbytes, cudaMemcpyHostToDevice, st));
    CHECK(cudaMemsetAsync(s->d_results, 0, nq * sizeof(gpu_query_result), st));
    CHECK(cudaMemsetAsync(s->d_cand_count, 0, nq * sizeof(uint32_t), st));
    CHECK(cudaEventRecord(s->events[1], st));

    range_args a;
    a.payload = d->d_payload;
    a.blocks = d->d_blocks;
    a.norms = d->d_norms;
    a.num_docs = u->num_docs;
    a.num_ranges = d->num_ranges;
    a.k1_plus_1 = u->k1_plus_1;
    a.queries = s->d_queries;
    a.terms = s->d_terms;
    a.results = s->d_results;
    a.range_keys = s->d_range_keys;
    a.key_stride = d->key_stride;
    a.theta = s->d_theta;
    a.cands = s->d_cands;
    a.cand_count = s->d_cand_count;
    a.cand_cap = u->max_candidates;
    dim3 grid(d->num_ranges, nq);
    range_kernel<false><<<grid, kThreads, kSharedBytes, st>>>(a);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(s->events[2], st));
    threshold_kernel<<<nq, 256, 0, st>>>(s->d_queries, s->d_range_keys, d->num_ranges, d->key_stride, s->d_theta);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(s->events[3], st));
    range_kernel<true><<<grid, kThreads, kSharedBytes, st>>>(a);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(s->events[4], st));
    segments_kernel<<<(nq + 255) / 256, 256, 0, st>>>(s->d_cand_count, u->max_candidates, nq, s->d_seg_begin,
                                                       s->d_seg_end);
    CHECK(cudaGetLastError());
    size_t temp = s->sort_temp_bytes;
    CHECK(cub::DeviceSegmentedSort::SortKeys(s->d_sort_temp, temp, s->d_cands, s->d_cands_sorted,
                                             (int)((size_t)nq * u->max_candidates), (int)nq, s->d_seg_begin,
                                             s->d_seg_end, st));
    gather_kernel<<<nq, 256, 0, st>>>(s->d_queries, s->d_cands_sorted, s->d_cand_count, u->max_candidates,
                                      s->d_results, s->d_hits);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(s->events[5], st));
    // One copy back: the results, then the hits of every query.
    size_t rbytes = results_bytes(u->max_batch);
    CHECK(cudaMemcpyAsync(s->h_out, s->d_results, nq * sizeof(gpu_query_result), cudaMemcpyDeviceToHost, st));
    CHECK(cudaMemcpyAsync(s->h_out + rbytes, s->d_hits, (size_t)batch->total_hits * sizeof(isn_hit),
                          cudaMemcpyDeviceToHost, st));
    CHECK(cudaEventRecord(s->events[6], st));
    s->num_queries = nq;
    s->total_hits = batch->total_hits;
    s->bytes_in = qbytes + tbytes;
    s->bytes_out = nq * sizeof(gpu_query_result) + (size_t)batch->total_hits * sizeof(isn_hit);
    return 0;
}

static int cuda_finish(gpu_device *d, uint32_t slot, gpu_batch *batch, gpu_batch_timing *timing, char *err,
                       size_t err_len) {
    stream_buffers *s = &d->streams[slot];
    CHECK(cudaSetDevice(d->ordinal));
    CHECK(cudaStreamSynchronize(s->stream));
    CHECK(cudaGetLastError());
    float ms[kEvents - 1];
    for (int e = 0; e + 1 < kEvents; e++) CHECK(cudaEventElapsedTime(&ms[e], s->events[e], s->events[e + 1]));
    timing->ms_transfer_in = ms[0];
    timing->ms_threshold_pass = ms[1];
    timing->ms_select_threshold = ms[2];
    timing->ms_score_pass = ms[3];
    timing->ms_sort = ms[4];
    timing->ms_transfer_out = ms[5];
    timing->bytes_to_device = s->bytes_in;
    timing->bytes_from_device = s->bytes_out;
    memcpy(batch->results, s->h_out, s->num_queries * sizeof(gpu_query_result));
    memcpy(batch->hits, s->h_out + results_bytes(d->upload.max_batch), (size_t)s->total_hits * sizeof(isn_hit));
    return 0;
}

static const char *cuda_name(const gpu_device *d) { return d->prop.name; }

static const gpu_device_ops cuda_ops = {
    cuda_open, cuda_launch, cuda_finish, cuda_close, cuda_name,
};

extern "C" const gpu_device_ops *gpu_cuda_device_ops(void) { return &cuda_ops; }
