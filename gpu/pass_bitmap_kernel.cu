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

} // namespace first_stage
