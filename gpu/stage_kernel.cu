// The streamed lists of a batch (gpu_stage_list) gathered from the host's layout, which the device reads in place
// (mapped host memory), into the batch's stream's staging region: one launch for all of them, instead of three
// copies a list whose calls would cost the submitting thread more than the bytes cost the bus.
#include "gpu/kernels.h"
#include "gpu/posting_decode.h"

namespace first_stage {

// Blocks stride over the lists (blockIdx.y) and, within one, over its 16-byte words and its blocks (blockIdx.x), so
// that a long list is read by many blocks at once.
__global__ void stage_gather_kernel(stage_args a) {
    const gpu_stage_list l = a.lists[blockIdx.y];
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4 *from = reinterpret_cast<const uint4 *>(a.host_payload + l.host_offset);
    uint4 *to = reinterpret_cast<uint4 *>(a.payload + l.stage_offset);
    const uint64_t words = l.bytes / 16u;
    for (uint64_t i = first; i < words; i += stride) to[i] = from[i];
    for (uint64_t b = first; b < l.num_blocks; b += stride) {
        isn_block_meta m = a.host_blocks[l.host_block + b];
        m.offset = gpu_stage_meta_word(m.offset, l.host_offset, l.stage_offset);
        a.blocks[l.stage_block + b] = m;
        if (a.suffix != nullptr) a.suffix[l.stage_block + b] = a.host_suffix[l.host_block + b];
    }
}

} // namespace first_stage
