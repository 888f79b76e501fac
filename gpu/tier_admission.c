/* The pruned-prefix cache's tier admission (tier_admission.h). */
#include <stdio.h>
#include <stdlib.h>

#include "gpu/device.h"
#include "gpu/posting_decode.h"
#include "gpu/tier_admission.h"

/* The least cut that needs block b of a list: a cut c keeps the blocks up to the one holding document c - 1
 * (those that may hold a document below c), so the first block is needed by every cut above 0 and a later one by
 * every cut past the document after its predecessor's last. */
static uint64_t cut_needing(const isn_block_meta *list, uint32_t b) {
    return b == 0 ? 1 : (uint64_t)list[b - 1].last_doc + 2;
}

int tier_admission(const isn_index *index, const uint8_t *widths, uint64_t budget, uint32_t *term_blocks,
                   uint64_t *used, uint32_t *cut, char *err, size_t err_len) {
    const isn_index_info *info = isn_index_get_info(index);
    const uint32_t num_docs = info->num_docs;
    uint64_t num_blocks;
    const isn_block_meta *blocks = isn_index_block_metas(index, &num_blocks);
    /* bytes_at[c]: the bytes of the blocks whose least cut is c; their sum up to a cut is what it keeps */
    uint64_t *bytes_at = calloc((size_t)num_docs + 1, sizeof *bytes_at);
    if (!bytes_at) {
        snprintf(err, err_len, "GPU backend: out of memory choosing the tier of %u documents", num_docs);
        return -1;
    }
    for (uint32_t t = 0; t < info->num_terms; t++) {
        isn_term_stats st;
        isn_index_term_stats(index, t, &st);
        if (st.num_blocks < 2) continue;
        const isn_block_meta *list = blocks + st.first_block;
        for (uint32_t b = 0; b < st.num_blocks; b++) {
            const uint64_t c = cut_needing(list, b);
            if (c <= num_docs)
                bytes_at[c] += gpu_layout_block_bytes(gpu_block_count(st.df, st.num_blocks, b), widths[st.first_block + b]);
        }
    }
    uint64_t kept = 0;
    uint32_t best = 0;
    for (uint32_t c = 1; c <= num_docs && kept + bytes_at[c] <= budget; c++) {
        kept += bytes_at[c];
        best = c;
    }
    free(bytes_at);
    for (uint32_t t = 0; t < info->num_terms; t++) {
        isn_term_stats st;
        isn_index_term_stats(index, t, &st);
        term_blocks[t] = 0;
        if (st.num_blocks < 2 || best == 0) continue;
        const uint32_t need = gpu_lower_block(blocks + st.first_block, st.num_blocks, best - 1) + 1;
        term_blocks[t] = need < st.num_blocks ? need : st.num_blocks;
    }
    *used = kept;
    *cut = best;
    return 0;
}
