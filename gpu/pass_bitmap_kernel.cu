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

__global__ void pass_ranges_kernel(const uint32_t *doc_words, uint32_t num_doc_words, uint32_t num_ranges, uint32_t *out,
                                   uint32_t *empty) {
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
    if (threadIdx.x == 0) {
        out[blockIdx.x] = bits;
        const uint32_t first = 32u * blockIdx.x, kept = (uint32_t)__popc(bits);
        const uint32_t here = first >= num_ranges ? 0u : min(num_ranges - first, 32u);
        if (here > kept) atomicAdd(empty, here - kept);
    }
}

__global__ void pass_popcount_kernel(const uint32_t *doc_words, uint32_t num_words, uint32_t *out) {
    for (uint32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < num_words; w += gridDim.x * blockDim.x)
        out[w] = __popc(doc_words[w]);
}

__global__ void pass_pairs_kernel(const uint32_t *doc_words, const uint32_t *rank, uint32_t num_words, uint2 *out) {
    for (uint32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < num_words; w += gridDim.x * blockDim.x)
        out[w] = make_uint2(doc_words[w], rank[w]);
}

} // namespace first_stage
