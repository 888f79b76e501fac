// The first stage's conjunctive probe (kernels.h): queries whose shortest list is short enough skip the
// range passes and probe that list's documents into the others.
#include "gpu/range_blocks.cuh"

namespace first_stage {

// Conjunctive queries: each warp decodes one block of the driver (shortest) list, then for every other
// term finds, by the block metadata alone, the blocks that can hold its surviving documents, decodes
// only those, and looks the documents up; a document missing from any list is dropped.
__global__ void __launch_bounds__(kProbeThreads, 3) probe_kernel(probe_args a) {
    __shared__ uint32_t s_docs[kProbeWarps][ISN_BLOCK_SIZE];
    __shared__ float s_parts[kProbeWarps][ISN_BLOCK_SIZE];
    const uint32_t q = blockIdx.y;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    if (a.retry != nullptr && a.retry[q] == 0) return;
    const gpu_query query = a.queries[q];
    const gpu_term driver = a.terms[query.term_begin + query.driver];
    const isn_block_meta *dblocks = a.blocks + driver.first_block;
    uint32_t *wdocs = s_docs[warp];
    float *wparts = s_parts[warp];
    uint64_t scored = 0;
    for (uint32_t db = blockIdx.x * kProbeWarps + warp; db < driver.num_blocks; db += gridDim.x * kProbeWarps) {
        uint32_t docs[4];
        float parts[4];
        const uint32_t n = warp_decode_block(a.payload, dblocks, driver, db, docs, parts);
        double score[4];
        bool alive[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            alive[j] = 4 * lane + j < n && docs[j] < query.doc_limit;
        }
        // a driver document its filters drop is never probed (gpu_query.filter_begin)
        for (uint32_t f = 0; f < query.num_filters; f++) {
            const gpu_filter filter = a.filters[query.filter_begin + f];
            const uint32_t *column = a.attribute_words + filter.first_word;
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (alive[j])
                    alive[j] = gpu_filter_passes(&filter, a.filter_values, gpu_column_stored(column, filter.bits, docs[j]));
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            score[j] = alive[j] ? (double)gpu_posting_contribution(driver.weight, parts[j]) : 0.0;
            scored += alive[j];
        }
        for (uint32_t t = 0; t < query.num_terms; t++) {
            if (t == query.driver) continue;
            if (!__any_sync(0xFFFFFFFFu, alive[0] | alive[1] | alive[2] | alive[3])) break;
            const gpu_term term = a.terms[query.term_begin + t];
            const isn_block_meta *blocks = a.blocks + term.first_block;
            bool pending[4] = {alive[0], alive[1], alive[2], alive[3]};
            uint32_t from = 0;
            for (;;) {
                uint32_t mine = UINT32_MAX;
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (pending[j]) mine = min(mine, docs[j]);
                const uint32_t target = warp_min_u32(mine);
                if (target == UINT32_MAX) break;
                const uint32_t b = warp_lower_block(blocks, from, term.num_blocks, target);
                if (b == term.num_blocks) {
#pragma unroll
                    for (int j = 0; j < 4; j++) alive[j] = alive[j] && !pending[j];
                    break;
                }
                from = b + 1;
                const uint32_t last = __ldg(&blocks[b].last_doc);
                uint32_t bdocs[4];
                float bparts[4];
                const uint32_t bn = warp_decode_block(a.payload, blocks, term, b, bdocs, bparts);
                __syncwarp();
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    wdocs[4 * lane + j] = 4 * lane + j < bn ? bdocs[j] : UINT32_MAX;
                    wparts[4 * lane + j] = bparts[j];
                }
                __syncwarp();
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (!pending[j] || docs[j] > last) continue;
                    pending[j] = false;
                    uint32_t lo = 0, hi = bn;
                    while (lo < hi) {
                        uint32_t mid = (lo + hi) >> 1;
                        if (wdocs[mid] < docs[j]) lo = mid + 1;
                        else hi = mid;
                    }
                    if (lo < bn && wdocs[lo] == docs[j]) {
                        score[j] += (double)gpu_posting_contribution(term.weight, wparts[lo]);
                        scored++;
                    } else {
                        alive[j] = false;
                    }
                }
            }
        }
        uint64_t *out = a.cands + query.cand_offset;
        uint64_t key[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            // a static prior (gpu_query.prior_weight): the score with it, as the CPU's (a branch a query, not a
            // posting); without one scores are positive
            const float bm25 = (float)score[j];
            const uint32_t score_key =
                query.prior_weight != 0.0f && alive[j]
                    ? gpu_float_key(gpu_prior_score(bm25, query.prior_weight, __ldg(a.static_scores + docs[j])))
                    : gpu_nonnegative_key(bm25);
            key[j] = gpu_candidate_key(score_key, docs[j]);
            if (a.retry != nullptr && key[j] > a.theta_key[q]) alive[j] = false;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t mask = __ballot_sync(0xFFFFFFFFu, alive[j]);
            if (mask == 0) continue;
            uint32_t base = 0;
            if (lane == 0) base = atomicAdd(&a.cand_count[q], (uint32_t)__popc(mask));
            base = __shfl_sync(0xFFFFFFFFu, base, 0);
            if (alive[j]) {
                const uint32_t at = base + __popc(mask & ((1u << lane) - 1u));
                if (at < query.cand_cap) out[at] = key[j];
            }
        }
    }
    for (int d = 16; d > 0; d >>= 1) scored += __shfl_xor_sync(0xFFFFFFFFu, scored, d);
    if (lane == 0 && scored) atomicAdd((unsigned long long *)&a.results[q].postings_scored, (unsigned long long)scored);
}


} // namespace first_stage
