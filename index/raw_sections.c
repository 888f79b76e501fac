/* Raw section access for the GPU backend, which uploads the payload and block metadata unchanged. */
#include "index/reader.h"

const uint8_t *isn_index_postings_payload(const isn_index *index, uint64_t *bytes) {
    *bytes = index->postings_bytes;
    return index->postings;
}

const isn_block_meta *isn_index_block_metas(const isn_index *index, uint64_t *count) {
    *count = index->meta->num_blocks;
    return index->blocks;
}
