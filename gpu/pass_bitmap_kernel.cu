// The filter bitmaps of the first stage (kernels.h, gpu_query.pass_slot): a batch's queries that share their
// filters test one bit a posting, read from a bitmap built here once, instead of each posting's stored value in
// the attribute columns and the filters' fields (filter_lane). A posting's test was a scattered load of its own
// beside the decode's two coalesced ones.
#include "gpu/kernels.h"
#include "gpu/posting_decode.h"

namespace first_stage {

__global__ void pass_bitmap_kernel(const uint32_t *attribute_words, const gpu_filter *filters, uint32_t num_filters,
                                   const uint32_t *values, uint32_t num_docs, uint32_t num_words, uint32_t *out) {
    for (uint32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < num_words; w += gridDim.x * blockDim.x)
        out[w] = gpu_pass_word(attribute_words, filters, num_filters, values, w, num_docs);
}

__global__ void pass_ranges_kernel(const uint32_t *doc_words, uint32_t num_doc_words, uint32_t num_ranges, uint32_t *out) {
    constexpr uint32_t kPerRange = GPU_RANGE_DOCS / 32u;
    __shared__ uint32_t bits;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u, warps = blockDim.x >> 5;
    if (threadIdx.x == 0) bits = 0;
    __syncthreads();
    for (uint32_t i = warp; i < 32u; i += warps) {
        const uint32_t r = 32u * blockIdx.x + i;
        uint32_t any = 0;
        if (r < num_ranges)
            for (uint32_t at = r * kPerRange + lane, end = r * kPerRange + kPerRange; at < end && at < num_doc_words; at += 32u)
                any |= doc_words[at];
        if (__any_sync(0xFFFFFFFFu, any != 0) && lane == 0) atomicOr(&bits, 1u << i);
    }
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = bits;
}

__device__ __forceinline__ uint32_t block_sum_1024(uint32_t c, uint32_t *warp_sums) {
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    for (int d = 16; d > 0; d >>= 1) c += __shfl_xor_sync(0xFFFFFFFFu, c, d);
    if (lane == 0) warp_sums[warp] = c;
    __syncthreads();
    uint32_t total = 0;
    for (uint32_t w = 0; w < (blockDim.x >> 5); w++) total += warp_sums[w];
    __syncthreads();
    return total;
}

__global__ void pass_rank_sums_kernel(const uint32_t *doc_words, uint32_t num_words, uint32_t *sums) {
    __shared__ uint32_t warp_sums[32];
    const uint32_t w = blockIdx.x * kRankBlockWords + threadIdx.x;
    const uint32_t total = block_sum_1024(w < num_words ? __popc(doc_words[w]) : 0u, warp_sums);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

__global__ void pass_rank_kernel(const uint32_t *doc_words, uint32_t num_words, const uint32_t *sums, uint32_t *rank) {
    __shared__ uint32_t warp_sums[32];
    uint32_t before = 0;
    for (uint32_t b = threadIdx.x; b < blockIdx.x; b += blockDim.x) before += sums[b];
    const uint32_t offset = block_sum_1024(before, warp_sums);
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const uint32_t w = blockIdx.x * kRankBlockWords + threadIdx.x;
    const uint32_t c = w < num_words ? __popc(doc_words[w]) : 0u;
    uint32_t inclusive = c;
    for (int d = 1; d < 32; d <<= 1) {
        const uint32_t other = __shfl_up_sync(0xFFFFFFFFu, inclusive, d);
        if (lane >= (uint32_t)d) inclusive += other;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    uint32_t warp_before = 0;
    for (uint32_t v = 0; v < warp; v++) warp_before += warp_sums[v];
    if (w < num_words) rank[w] = offset + warp_before + inclusive - c;
}

} // namespace first_stage
