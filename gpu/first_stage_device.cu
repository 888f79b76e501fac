// The CUDA first-stage device: the partition resident in device memory (in the device layout, device.h),
// and per batch a fixed sequence on one stream:
//  1. copy the batch in;
//  2. report pass: every (query, range) is scored once into a shared-memory accumulator and reports
//     its range_top best documents (score desc, doc asc) at or above the query's floor, if it has one,
//     as candidate keys. A query without the CPU's floor scores a sample of its ranges first, and the
//     sample's k-th best report is the other ranges' floor (gpu_query.sampled_floor);
//  3. the k-th best report per query, or the floor if lower, is the threshold theta (a lower bound of
//     the answer's k-th score: reports are scores of distinct documents, and every answer reaches the
//     floor); the reports at or above theta are candidates, and a range whose every report reaches
//     theta (it may hold more such documents) goes on a work list;
//  4. rescore pass: only the ranges of the work list (almost none when range_top fits k, see
//     gpu_range_top) are scored again and give every document at or above theta;
//  5. conjunctive queries with a short enough shortest list skip 2-4: their shortest list's documents
//     are probed into the other lists, skipping blocks by their metadata;
//  6. a segmented sort of the candidates, and one copy of all results back.
// Decode is fused into the consumers: blocks are decoded by warps straight into the accumulator (or the
// probe), never into global memory.
//
// Why one range kernel serves OR, WAND, BMW and MaxScore: the answer does not depend on the algorithm,
// only the work does. On the CPU WAND/BMW skip postings one pivot at a time with a threshold that rises as
// the heap fills; on the GPU a whole range is decoded by a block's warps in the time one pivot step takes,
// and the report pass gives the threshold a finished WAND run would end with for the price of one pass,
// after which almost no range is scored twice. Skipping needs bounds that vary: where every range holds
// some block of each list whose maximum is near the list's (typical of logs whose queries mix a rare
// term with common ones), a range bound skips nothing, and skipping documents inside a range (MaxScore
// at the floor) costs the block a barrier and a pass more than the atomics it saves. The pruned path
// (sampling round, bound grid, MaxScore split) is kept for partitions where bounds do vary, and AUTO
// (backend.c) runs it only where it measures cheaper; per-posting pivoting inside a range would make
// lanes diverge and serialize on the cursor order. The block-max skip pays in AND probing and where a
// term has no block in a range.
#include <cuda_runtime.h>
#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "gpu/device.h"
}
#include "gpu/posting_decode.h"

namespace {

#ifndef ISN_GPU_RANGE_THREADS
#define ISN_GPU_RANGE_THREADS 256
#endif
constexpr int kThreads = ISN_GPU_RANGE_THREADS;
constexpr int kWarps = kThreads / 32;
constexpr int kSlotsPerLane = GPU_RANGE_DOCS / kThreads;
// accumulator, then a region that holds the AND match counts while scoring and the per-warp report
// lists while selecting
constexpr size_t kAuxBytes = GPU_RANGE_DOCS;
constexpr size_t kSharedBytes = GPU_RANGE_DOCS * sizeof(double) + kAuxBytes;
static_assert(kWarps * GPU_MAX_RANGE_TOP * sizeof(uint64_t) <= kAuxBytes, "report lists fit the aux region");
// Disjunctive ranges keep, past the bound grids in the aux region, a bitmap of the accumulator slots they
// touched (bit i of word c: slot 32 c + i, so word c is also bound-grid cell c; the report's per-warp lists
// take the grids' place once scored): the report and the clearing visit those slots only, not all GPU_RANGE_DOCS (a range's postings
// usually touch a small fraction of them), and the accumulator stays zero between ranges. AND ranges need
// the whole aux region for their match counts and keep the dense zeroing and scan.
constexpr uint32_t kCells = GPU_RANGE_DOCS / GPU_SUB_DOCS;
constexpr size_t kTouchedOffset = 3 * kCells * sizeof(double);
static_assert(GPU_SUB_DOCS == 32, "a bound-grid cell is one word of the touched bitmap");
static_assert(kTouchedOffset + kCells * sizeof(uint32_t) <= kAuxBytes, "the bitmap fits the aux region");
static_assert(kWarps * GPU_MAX_RANGE_TOP * sizeof(uint64_t) <= kTouchedOffset, "the report lists fit below the bitmap");
// The compact and narrow accumulators' report blocks (report_kernel<.., kCompactAcc or kNarrowAcc>):
// unpruned disjunctive queries only, so the aux region holds the report lists and then the bitmap, no bound
// grids or match counts.
constexpr size_t kCompactTouchedOffset = kWarps * GPU_MAX_RANGE_TOP * sizeof(uint64_t);
constexpr size_t kCompactSharedBytes = GPU_RANGE_DOCS * (sizeof(uint32_t) + sizeof(uint16_t)) + kCompactTouchedOffset +
                                       kCells * sizeof(uint32_t);
// Narrow report blocks resident per multiprocessor: five fit its shared memory with report lists of
// GPU_MAX_RANGE_TOP documents a warp, six (in 40 registers) with lists of kShortListTop. The host gives the
// six-block kernel the narrow queries whose range_top fits the short lists (most: range_top falls as a
// partition's ranges grow), the five-block one the others.
constexpr uint32_t kShortListTop = 16;
__host__ __device__ constexpr uint32_t list_top_of(int blocks) { return blocks >= 6 ? kShortListTop : GPU_MAX_RANGE_TOP; }
constexpr size_t narrow_touched_offset(int blocks) { return kWarps * list_top_of(blocks) * sizeof(uint64_t); }
constexpr size_t narrow_shared_bytes(int blocks) {
    return GPU_RANGE_DOCS * sizeof(uint32_t) + narrow_touched_offset(blocks) + kCells * sizeof(uint32_t);
}
constexpr int kProbeThreads = 256;
constexpr int kProbeWarps = kProbeThreads / 32;
constexpr int kEvents = 8;
// Segments (queries) per call of CUB's segmented sort: above a few hundred it partitions the segments by
// size and waits on the host for the partition's sizes, so a launch of a large batch would block until
// the device finished the batch's kernels (no overlap with the next batch's host work). Every tuning's
// partitioning threshold is 300 or more.
constexpr uint32_t kSortSegmentsPerCall = 256;

struct stream_buffers {
    cudaStream_t stream;
    cudaEvent_t events[kEvents];
    // d_in: the batch's queries, terms and variant list, laid out as h_stage (one copy in); d_zeroed: the
    // work count, the candidate counts, then the results and hits (one memset, one copy back)
    uint8_t *d_in, *d_zeroed;
    gpu_query *d_queries;
    gpu_term *d_terms;
    gpu_query_result *d_results; // followed by the hits: one region, one copy back
    isn_hit *d_hits;
    uint64_t *d_reports;
    uint32_t *d_prune;     // per query: the pruning threshold of the second round (a score key)
    uint64_t *d_theta_key; // per query: candidates are the documents with keys at most this
    uint32_t *d_retry;     // per query: collected again after an overflow
    uint32_t *d_cand_count;
    uint2 *d_work;
    uint32_t *d_work_count;
    uint64_t *d_cands, *d_cands_sorted;
    int *d_seg_begin, *d_seg_end;
    void *d_sort_temp;
    size_t sort_temp_bytes;
    uint32_t *d_variant; // range queries by report kernel: the compact ones, then the wide ones
    uint8_t *h_stage; // pinned: queries, terms, then the variant list
    uint8_t *h_out;   // pinned: results then hits
    uint32_t num_queries, num_range_queries, total_hits, total_candidates;
    uint32_t max_k; // the batch's largest k (sort_and_copy_out)
    uint32_t probe_grid_x;
    uint64_t bytes_in, bytes_out;
};

struct range_args {
    const uint8_t *payload;
    const isn_block_meta *blocks;
    uint32_t num_docs;
    uint32_t num_ranges;
    uint32_t ranges_per_block;
    const gpu_query *queries;
    const gpu_term *terms;
    gpu_query_result *results;
    uint64_t *reports; // [query][range][report_stride]
    uint32_t report_stride;
    uint32_t round;          // report pass: 1 the sampled ranges, 2 the others
    const uint32_t *prune;   // the second round's threshold per query
    const uint64_t *theta_key;
    uint64_t *cands; // the pool: query q's segment at queries[q].cand_offset
    uint32_t *cand_count;
    uint2 *work; // (query, range) pairs for the rescore pass
    uint32_t *work_count;
    uint32_t dense_report; // nonzero: disjunctive ranges zero and scan every slot too (ISN_GPU_DENSE_REPORT, to compare)
    uint32_t dense_floor;  // nonzero: narrow ranges with a floor are reported by report_dense (ISN_GPU_DENSE_FLOOR=0: never)
    const uint32_t *query_index; // report blocks: blockIdx.y's query (nullptr: blockIdx.y itself)
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

__device__ __forceinline__ uint64_t warp_min_u64(uint64_t v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, v, d);
        v = other < v ? other : v;
    }
    return v;
}

__device__ __forceinline__ uint32_t warp_min_u32(uint32_t v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = min(v, __shfl_xor_sync(0xFFFFFFFFu, v, d));
    return v;
}

// Accumulator slots. In double (query.fixed_shift == 0) slot i is acc[i]. In fixed point it is two
// counters, low[i] (32 bits) and high[i], that add the low acc_layout::kLow bits and the rest of each
// contribution apart: shared memory has native 32-bit atomic adds but none for 64 bits (a compare-and-swap
// loop, which every posting would wait on). The wide layout's high counters are 32 bits, after the low ones
// (the same 64 KB as the doubles). The compact layout's are 16 bits (48 KB in all), which lets four blocks
// share a multiprocessor instead of three; the host gives it only queries whose bounds fit (accumulator_kind).
// Neither counter can overflow: a slot adds at most kMaxAdds low parts below 2^kLow (< 2^32), and its high
// parts sum to at most its total over 2^kLow (wide: < 2^53 / 2^22 < 2^31; compact: below 2^16, since the
// query's bounds sum below 2^(kLow + 16)); high * 2^kLow + low is the exact 64-bit sum. The narrow layout
// has no high counters (32 KB in all, one atomic add per posting): the host gives it only queries whose
// bounds sum below 2^31 (accumulator_kind), so the 32-bit counter holds the whole sum.
enum acc_kind { kWideAcc = ISN_GPU_ACC_WIDE, kCompactAcc = ISN_GPU_ACC_COMPACT, kNarrowAcc = ISN_GPU_ACC_NARROW };
template <int kKind> struct acc_layout;
template <> struct acc_layout<kWideAcc> {
    static constexpr uint32_t kLow = 22, kMaxAdds = GPU_MAX_OR_TERMS, kHighBits = 32;
    static constexpr size_t kBytes = GPU_RANGE_DOCS * sizeof(double);
};
template <> struct acc_layout<kCompactAcc> {
    static constexpr uint32_t kLow = 26, kMaxAdds = GPU_MAX_TERMS, kHighBits = 16; // one chunk of terms
    static constexpr size_t kBytes = GPU_RANGE_DOCS * (sizeof(uint32_t) + sizeof(uint16_t));
};
template <> struct acc_layout<kNarrowAcc> {
    static constexpr uint32_t kLow = 32, kHighBits = 0;
    static constexpr size_t kBytes = GPU_RANGE_DOCS * sizeof(uint32_t);
};
static_assert((unsigned long long)acc_layout<kWideAcc>::kMaxAdds * ((1ull << acc_layout<kWideAcc>::kLow) - 1u) <
                  (1ull << 32),
              "a wide slot's low parts fit 32 bits");
static_assert((unsigned long long)acc_layout<kCompactAcc>::kMaxAdds * ((1ull << acc_layout<kCompactAcc>::kLow) - 1u) <
                  (1ull << 32),
              "a compact slot's low parts fit 32 bits");

template <int C>
__device__ __forceinline__ unsigned long long acc_high(const double *acc, uint32_t i) {
    const uint32_t *low = reinterpret_cast<const uint32_t *>(acc);
    if (acc_layout<C>::kHighBits == 0) return 0;
    if (acc_layout<C>::kHighBits == 16) return reinterpret_cast<const uint16_t *>(low + GPU_RANGE_DOCS)[i];
    return low[GPU_RANGE_DOCS + i];
}

template <int C>
__device__ __forceinline__ void acc_add_fixed(double *acc, uint32_t slot, unsigned long long add) {
    constexpr uint32_t kLow = acc_layout<C>::kLow;
    uint32_t *low = reinterpret_cast<uint32_t *>(acc);
    if constexpr (acc_layout<C>::kHighBits == 0) {
        atomicAdd(low + slot, (uint32_t)add);
    } else {
        atomicAdd(low + slot, (uint32_t)add & ((1u << kLow) - 1u));
        if constexpr (acc_layout<C>::kHighBits == 16) // two counters per word; the lower never carries into the upper
            atomicAdd(low + GPU_RANGE_DOCS + (slot >> 1), (uint32_t)(add >> kLow) << (16u * (slot & 1u)));
        else
            atomicAdd(low + GPU_RANGE_DOCS + slot, (uint32_t)(add >> kLow));
    }
}

// inv_scale: 0 for double accumulators, else 2^-fixed_shift (fixed-point ones).
template <int C>
__device__ __forceinline__ double acc_value(const double *acc, uint32_t i, double inv_scale) {
    if (C == kWideAcc && inv_scale == 0.0) return acc[i];
    const uint32_t *low = reinterpret_cast<const uint32_t *>(acc);
    return (double)((acc_high<C>(acc, i) << acc_layout<C>::kLow) + low[i]) * inv_scale;
}

template <int C>
__device__ __forceinline__ void acc_clear(double *acc, uint32_t i, bool fixed) {
    if (C == kWideAcc && !fixed) {
        acc[i] = 0.0;
        return;
    }
    uint32_t *low = reinterpret_cast<uint32_t *>(acc);
    low[i] = 0u;
    if (acc_layout<C>::kHighBits == 16) reinterpret_cast<uint16_t *>(low + GPU_RANGE_DOCS)[i] = 0u;
    else if (acc_layout<C>::kHighBits == 32) low[GPU_RANGE_DOCS + i] = 0u;
}

// First block in [lo, hi) whose last doc >= target, hi when none; all 32 lanes call it and get the
// answer. A 33-way search: each round one independent load per lane instead of a chain of dependent
// loads (the latency of a binary search is what limited the first version).
__device__ uint32_t warp_lower_block(const isn_block_meta *blocks, uint32_t lo, uint32_t hi, uint32_t target) {
    const uint32_t lane = threadIdx.x & 31u;
    while (hi - lo > 32u) {
        const uint32_t span = hi - lo;
        const uint32_t p = lo + (uint32_t)(((uint64_t)(lane + 1) * span) / 33u);
        const uint32_t mask = __ballot_sync(0xFFFFFFFFu, __ldg(&blocks[p].last_doc) >= target);
        if (mask == 0) {
            lo = __shfl_sync(0xFFFFFFFFu, p, 31) + 1;
        } else {
            const int f = __ffs(mask) - 1;
            const uint32_t at = __shfl_sync(0xFFFFFFFFu, p, f);
            const uint32_t before = __shfl_sync(0xFFFFFFFFu, p, f > 0 ? f - 1 : 0);
            lo = f > 0 ? before + 1 : lo;
            hi = at + 1;
        }
    }
    const uint32_t p = lo + lane;
    const uint32_t mask = __ballot_sync(0xFFFFFFFFu, p < hi && __ldg(&blocks[p].last_doc) >= target);
    return mask ? lo + (uint32_t)(__ffs(mask) - 1) : hi;
}

// Block b of a list decoded by one warp: lane l gets postings 4l..4l+3 (docs and tf parts), valid below n.
// The device layout (device.h) puts a lane's four offsets side by side (one or two 16-byte loads) and its
// four parts too (one).
__device__ __forceinline__ void lane_fields(const uint8_t *stream, uint32_t bits, uint32_t n, uint32_t lane,
                                            uint32_t v[4]) {
    if (bits == 0 || 4u * lane >= n) { // a lane past the count reads nothing (short streams end before it)
        v[0] = v[1] = v[2] = v[3] = 0u;
        return;
    }
    const uint32_t bit = lane * bits, shift = bit & 31u, mask = bits >= 32u ? 0xFFFFFFFFu : (1u << bits) - 1u;
    const uint4 *at = reinterpret_cast<const uint4 *>(stream) + (bit >> 5);
    const uint4 low = __ldg(at);
    const uint4 high = shift + bits > 32u ? __ldg(at + 1) : make_uint4(0u, 0u, 0u, 0u);
    v[0] = __funnelshift_r(low.x, high.x, shift) & mask;
    v[1] = __funnelshift_r(low.y, high.y, shift) & mask;
    v[2] = __funnelshift_r(low.z, high.z, shift) & mask;
    v[3] = __funnelshift_r(low.w, high.w, shift) & mask;
}

__device__ __forceinline__ uint32_t block_base(const isn_block_meta *blocks, uint32_t b) {
    return b ? __ldg(&blocks[b - 1].last_doc) : UINT32_MAX;
}

__device__ __forceinline__ uint32_t warp_decode_block(const uint8_t *payload, const isn_block_meta *blocks,
                                                      const gpu_term &term, uint32_t b, uint32_t docs[4],
                                                      float parts[4]) {
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t n = gpu_block_count(term.df, term.num_blocks, b);
    const uint64_t word = __ldg(reinterpret_cast<const unsigned long long *>(&blocks[b].offset));
    const uint32_t base = block_base(blocks, b);
    const uint32_t doc_bits = gpu_layout_doc_bits(word);
    const uint8_t *in = payload + gpu_layout_offset(word);
    uint32_t offsets[4];
    lane_fields(in, doc_bits, n, lane, offsets);
    const float4 lane_parts = 4u * lane < n ? __ldg(reinterpret_cast<const float4 *>(in + gpu_layout_stream_bytes(n, doc_bits)) + lane)
                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    parts[0] = lane_parts.x;
    parts[1] = lane_parts.y;
    parts[2] = lane_parts.z;
    parts[3] = lane_parts.w;
#pragma unroll
    for (int j = 0; j < 4; j++) docs[j] = gpu_layout_doc_of(base, offsets[j]);
    return n;
}

// A term as a range block keeps it (gpu_term without the bound, which only thread 0 reads once).
struct range_term {
    uint32_t first_block, num_blocks, df;
    float weight;
};

struct range_shared {
    range_term terms[GPU_MAX_TERMS];
    // the blocks [first, first + count) of each term in the range: score_range's in [0]; report_unpruned's
    // alternate, this range's and the next's
    uint32_t span_first[2][GPU_MAX_TERMS], span_count[2][GPU_MAX_TERMS];
    uint32_t lb[GPU_MAX_TERMS]; // first block with last doc >= hi - 1 of the previous range (the cursor)
    union {
        float range_max[GPU_MAX_TERMS]; // score_range: weight * the largest block maximum among the term's blocks here
        // report_unpruned (no bounds), queries of at most 32 terms: per span buffer, the blocks of the terms
        // before term t, found once by one warp instead of by every warp (a sixth block a multiprocessor
        // leaves no shared memory for another array)
        uint32_t item_start[2][32];
    };
    float max_score[GPU_MAX_TERMS]; // gpu_term.max_score, kept with the span (cursor) for the MaxScore split
    uint32_t skipped;
    uint32_t item_total[2]; // report_unpruned: the blocks of all terms, per span buffer
};

__device__ __forceinline__ float warp_max_f(float v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, d));
    return v;
}

__device__ __forceinline__ double warp_max_d(double v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = fmax(v, __shfl_xor_sync(0xFFFFFFFFu, v, d));
    return v;
}

// Block b of a term decoded by the warp and added to the range accumulator; with `touched`, every slot
// added to gets its bit (a lane's postings are consecutive, so it ors them into as few words as it can).
// The adds and ors return nothing, so no lane waits on shared memory.
// Whether add_block marks the touched bitmap: when `touched` is given (the wide kernels), always (the
// compact and narrow kernels with the bitmap), never (report_dense's narrow ranges).
enum bitmap_marks { kMarksIfGiven, kMarksAlways, kMarksNever };
template <int C = kWideAcc, int kMarks = kMarksIfGiven>
__device__ __forceinline__ uint32_t add_block(const range_args &a, const gpu_query &query, const range_term &rt,
                                              uint32_t b, uint32_t lo, uint32_t hi, double scale, double *acc,
                                              uint8_t *matches, uint32_t *touched) {
    const uint32_t lane = threadIdx.x & 31u;
    gpu_term term;
    term.first_block = rt.first_block;
    term.num_blocks = rt.num_blocks;
    term.df = rt.df;
    term.weight = rt.weight;
    uint32_t docs[4], scored = 0;
    float parts[4];
    const uint32_t n = warp_decode_block(a.payload, a.blocks + term.first_block, term, b, docs, parts);
    bool valid[4];
#pragma unroll
    for (int j = 0; j < 4; j++) valid[j] = 4 * lane + j < n && docs[j] >= lo && docs[j] < hi;
    constexpr bool kNarrowed = C != kWideAcc; // the compact and narrow kernels: unpruned OR queries, fixed point
    uint32_t word = UINT32_MAX, bits = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (!valid[j]) continue;
        const float c = gpu_posting_contribution(term.weight, parts[j]);
        const uint32_t slot = docs[j] - lo;
        if (C == kNarrowAcc) // c * 2^shift is a whole number below 2^31 (accumulator_kind): exact in float too
            acc_add_fixed<C>(acc, slot, __float2uint_rn(c * __int_as_float((127 + (int)query.fixed_shift) << 23)));
        else if (kNarrowed || query.fixed_shift)
            acc_add_fixed<C>(acc, slot, (unsigned long long)__double2ll_rn((double)c * scale));
        else
            atomicAdd(&acc[slot], (double)c);
        if (kMarks == kMarksAlways || (kMarks == kMarksIfGiven && touched != nullptr)) {
            if ((slot >> 5) != word) {
                if (bits) atomicOr(&touched[word], bits);
                word = slot >> 5;
                bits = 0;
            }
            bits |= 1u << (slot & 31u);
        }
        if (!kNarrowed && query.and_mode)
            atomicAdd(reinterpret_cast<uint32_t *>(matches) + (slot >> 2), 1u << (8u * (slot & 3u)));
        scored++;
    }
    if (kMarks != kMarksNever && bits) atomicOr(&touched[word], bits);
    return scored;
}

// The cursor window of the warp's own term (term `warp`) for the next range: the last docs of blocks
// from, from + 1, ..., one per lane (from UINT32_MAX: none).
struct span_prefetch {
    uint32_t from = UINT32_MAX, last = 0;
};

// Item `item` of the blocks of terms [from, cn) in term order, as (term, block index in its span). With
// lanes_hold_terms lane t holds term t's count in the span and the counts before it (lane_before): the
// term is the last whose blocks start at or before the item. All lanes of the warp ask for the same item.
__device__ __forceinline__ uint32_t item_block(uint32_t item, uint32_t from, bool lanes_hold_terms, uint32_t lane_before,
                                               uint32_t cn, const range_shared &s, uint32_t &rem) {
    if (lanes_hold_terms) {
        const uint32_t lane = threadIdx.x & 31u;
        const uint32_t g = item + __shfl_sync(0xFFFFFFFFu, lane_before, from & 31u);
        const uint32_t t = (uint32_t)__popc(__ballot_sync(0xFFFFFFFFu, lane < cn && lane_before <= g)) - 1u;
        rem = g - __shfl_sync(0xFFFFFFFFu, lane_before, t);
        return t;
    }
    uint32_t t = from;
    rem = item;
    while (rem >= s.span_count[0][t]) rem -= s.span_count[0][t++];
    return t;
}

// The block span of term t (the warp's) in [lo, hi) into span buffer `buffer`, from the cursor s.lb[t] (the
// previous range's last block) or by a search; with `prune`, the largest block bound among the span's
// blocks (weight * max_tf_part), else 0. `prefetched`: the warp keeps term t's next cursor window loaded
// ahead (span_prefetch), so its latency passes while this range is scored and reported.
__device__ __forceinline__ float term_span(const range_args &a, const range_term &term, uint32_t t, bool prefetched,
                                           bool prune, uint32_t lo, uint32_t hi, bool cursor, range_shared &s,
                                           span_prefetch &pf, uint32_t buffer) {
    const uint32_t lane = threadIdx.x & 31u;
    const isn_block_meta *blocks = a.blocks + term.first_block;
    const uint32_t nb = term.num_blocks;
    uint32_t first, lb = nb;
    float most = 0.0f;
    bool spanned = false; // the span (and `most`) found by the cursor's window
    if (cursor) {
        // The previous range's last block `from` ends before this range's end, and this range's blocks
        // usually lie among the 32 from `from` (a few ranges on, as a sampling round's and the ranges
        // between its samples are, too): one round of independent loads then gives the whole span (a
        // search costs two or three dependent ones). Past the window, the search.
        const uint32_t from = s.lb[t], p = from + lane;
        const uint32_t last = prefetched && pf.from == from ? pf.last : p < nb ? __ldg(&blocks[p].last_doc) : 0u;
        const float bound = prune && p < nb ? term.weight * __ldg(&blocks[p].max_tf_part) : 0.0f;
        const uint32_t reaches_lo = __ballot_sync(0xFFFFFFFFu, p < nb && last >= lo);
        const uint32_t reaches_hi = __ballot_sync(0xFFFFFFFFu, p < nb && last >= hi - 1);
        first = reaches_lo ? from + (uint32_t)(__ffs(reaches_lo) - 1)
                : from + 32u < nb ? warp_lower_block(blocks, from + 32u, nb, lo) : nb;
        if (reaches_hi != 0 || from + 32u >= nb) {
            lb = reaches_hi ? from + (uint32_t)(__ffs(reaches_hi) - 1) : nb;
            const uint32_t end = lb < nb ? lb + 1 : nb;
            if (prune && p >= first && p < end) most = bound;
            spanned = true;
        }
    } else {
        first = warp_lower_block(blocks, 0, nb, lo);
    }
    if (!spanned) {
        // a range of GPU_RANGE_DOCS docs meets at most GPU_RANGE_DOCS / 128 + 2 blocks
        const uint32_t reach = first + GPU_RANGE_DOCS / ISN_BLOCK_SIZE + 2, window = reach < nb ? reach : nb;
        lb = warp_lower_block(blocks, first, window, hi - 1);
        if (lb == window && window < nb) lb = warp_lower_block(blocks, window, nb, hi - 1);
        const uint32_t end = lb < nb ? lb + 1 : nb;
        if (prune)
            for (uint32_t b = first + lane; b < end; b += 32) most = fmaxf(most, term.weight * __ldg(&blocks[b].max_tf_part));
    }
    const uint32_t end = lb < nb ? lb + 1 : nb;
    if (prefetched) {
        pf.from = lb;
        pf.last = lb + lane < nb ? __ldg(&blocks[lb + lane].last_doc) : 0u;
    }
    if (lane == 0) {
        s.span_first[buffer][t] = first;
        s.span_count[buffer][t] = end > first ? end - first : 0;
        s.lb[t] = lb;
    }
    return prune ? warp_max_f(most) : 0.0f;
}

// Scores documents [lo, hi) of query q into acc (and, for AND, clears the documents that miss a term),
// skipping what cannot reach the score key theta (0: nothing), as the emulated device does: the range
// when its block-max bound is below theta or no essential list has a block here; an essential block
// whose maximum plus the other lists' range maxima is below it; a non-essential block (MaxScore: a
// leading run of the ascending bounds sums below theta) whose cells of accumulated essential scores
// plus the non-essential range maxima stay below it. A document left partly scored cannot reach theta.
// With `cursor`, the block spans continue from the previous range of the same block (r = previous + 1,
// terms fit one chunk). With `touched` (disjunctive queries) acc is zero on entry and the slots scored are
// marked there (clear_touched zeroes them again), else acc is zeroed here. Returns false when the range
// was skipped (acc untouched); all threads agree.
template <int C = kWideAcc>
__device__ bool score_range(const range_args &a, const gpu_query &query, uint32_t q, uint32_t lo, uint32_t hi,
                            bool cursor, uint32_t theta, double *acc, uint8_t *matches, uint32_t *touched,
                            range_shared &s, span_prefetch &pf) {
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const uint32_t nt = query.num_terms;
    bool zeroed = false;
    uint32_t scored = 0;
    const double scale = query.fixed_shift ? __longlong_as_double((long long)(1023 + query.fixed_shift) << 52) : 0.0;
    const double inv_scale = query.fixed_shift ? __longlong_as_double((long long)(1023 - query.fixed_shift) << 52) : 0.0;
    // pruning needs every term's range maximum at once: one chunk of terms
    const uint32_t prune = nt <= GPU_MAX_TERMS ? theta : 0u;
    for (uint32_t c0 = 0; c0 < nt; c0 += GPU_MAX_TERMS) {
        const uint32_t cn = nt - c0 < GPU_MAX_TERMS ? nt - c0 : GPU_MAX_TERMS;
        // block spans of this chunk's terms, one warp per term
        for (uint32_t t = warp; t < cn; t += kWarps) {
            range_term term;
            float max_score = 0.0f;
            if (!cursor) {
                const gpu_term g = a.terms[query.term_begin + c0 + t];
                term = range_term{g.first_block, g.num_blocks, g.df, g.weight};
                max_score = g.max_score;
            } else {
                term = s.terms[t];
            }
            // the warp's own first term keeps its next window loaded ahead (unpruned: the pruned cursor skips)
            const float most = term_span(a, term, t, t == warp && !prune, prune != 0, lo, hi, cursor, s, pf, 0);
            if (lane == 0) {
                if (!cursor) {
                    s.terms[t] = term;
                    s.max_score[t] = max_score;
                }
                s.range_max[t] = most;
            }
        }
        if (tid == 0) s.skipped = 0; // read by thread 0 alone, after this chunk's blocks
        __syncthreads();
        // Every thread derives the same summary of the spans instead of thread 0 deriving it for the others
        // behind a second barrier. Up to 32 terms lane t holds term t's count and the counts before it, so
        // sums are warp reductions and an item finds its term with one ballot (item_block); the MaxScore
        // split walks the bounds in order.
        const bool lanes_hold_terms = cn <= 32;
        const uint32_t lane_count = lanes_hold_terms && lane < cn ? s.span_count[0][lane] : 0u;
        const uint32_t lane_before = warp_inclusive_sum(lane_count) - lane_count;
        uint32_t items = 0, ne_end = 0, essential_items = 0;
        bool and_missing = false;
        double total = 0.0, prefix = 0.0;
        if (lanes_hold_terms && !prune) {
            items = __shfl_sync(0xFFFFFFFFu, lane_before + lane_count, 31);
            and_missing = __any_sync(0xFFFFFFFFu, query.and_mode && lane < cn && lane_count == 0);
        } else {
            for (uint32_t t = 0; t < cn; t++) {
                and_missing = and_missing || (query.and_mode && s.span_count[0][t] == 0);
                items += s.span_count[0][t];
                total += s.range_max[t];
            }
            if (prune && !query.and_mode)
                while (ne_end < cn) {
                    const float bound = s.max_score[ne_end]; // prune: one chunk, c0 == 0
                    if (!gpu_bound_below(prefix + bound, prune)) break;
                    prefix += bound;
                    ne_end++;
                }
        }
        for (uint32_t t = ne_end; t < cn && prune; t++) essential_items += s.span_count[0][t];
        if (!prune) essential_items = items;
        // a disjunctive range is skipped only when no chunk has postings in it (decided below); AND, or
        // pruned: one chunk only, acc untouched
        // (a barrier before leaving: the caller's next range writes the spans this summary just read)
        if ((query.and_mode && (and_missing || items == 0)) ||
            (prune && (essential_items == 0 || gpu_bound_below(total, prune)))) {
            __syncthreads();
            return false;
        }
        if (items == 0) {
            __syncthreads();
            continue;
        }
        // disjunctive queries: the bound grid (gpu_block_cells) of all lists and of the non-essential
        // ones, in the aux region (unused by disjunctive queries while scoring), then the cells' largest
        // accumulated essential scores beside them
        static_assert(3 * kCells * sizeof(double) <= kTouchedOffset, "the grids fit the aux region");
        static_assert(kCells <= kThreads, "a thread per cell");
        double *cell_bound = reinterpret_cast<double *>(matches), *cell_ne = cell_bound + kCells;
        double *cell_max = cell_bound + 2 * kCells;
        const bool grid = prune && !query.and_mode;
        if (grid) {
            for (uint32_t i = tid; i < 2 * kCells; i += kThreads) cell_bound[i] = 0.0;
            __syncthreads();
            // a warp per block, its lanes over the block's cells (a rare list's block spans the range)
            for (uint32_t item = warp; item < items; item += kWarps) {
                uint32_t rem;
                const uint32_t t = item_block(item, 0, lanes_hold_terms, lane_before, cn, s, rem);
                const range_term term = s.terms[t];
                const isn_block_meta *blocks = a.blocks + term.first_block;
                uint32_t c0, c1;
                bool adds_first, adds_last;
                const uint32_t first = s.span_first[0][t];
                gpu_block_cells(blocks, first + rem, first, first + s.span_count[0][t], lo, hi, term.weight, &c0, &c1,
                                &adds_first, &adds_last);
                const double bound = (double)(term.weight * blocks[first + rem].max_tf_part);
                for (uint32_t c = c0 + lane; c <= c1; c += 32) {
                    if ((c == c0 && !adds_first) || (c == c1 && !adds_last)) continue;
                    atomicAdd(&cell_bound[c], bound);
                    if (t < ne_end) atomicAdd(&cell_ne[c], bound);
                }
            }
            __syncthreads();
            const uint32_t cells = (hi - lo + GPU_SUB_DOCS - 1) / GPU_SUB_DOCS;
            if (!__syncthreads_or(tid < cells && !gpu_bound_below(cell_bound[tid], prune))) return false;
        }
        if (!zeroed) {
            double2 *acc2 = reinterpret_cast<double2 *>(acc);
            if (touched == nullptr) // all of it: a fixed-point range's counters lie in both halves
                for (uint32_t i = tid; i < GPU_RANGE_DOCS / 2; i += kThreads) acc2[i] = make_double2(0.0, 0.0);
            if (query.and_mode)
                for (uint32_t i = tid; i < GPU_RANGE_DOCS / 4; i += kThreads) reinterpret_cast<uint32_t *>(matches)[i] = 0;
            zeroed = true;
            if (touched == nullptr || query.and_mode) __syncthreads(); // a disjunctive range's acc is zero already
        }
        uint32_t skipped = 0;
        // essential terms (all of them without pruning)
        for (uint32_t item = warp; item < essential_items; item += kWarps) {
            uint32_t rem;
            const uint32_t t = item_block(item, ne_end, lanes_hold_terms, lane_before, cn, s, rem);
            const range_term term = s.terms[t];
            const uint32_t b = s.span_first[0][t] + rem;
            if (grid) {
                uint32_t c0, c1;
                bool adds_first, adds_last;
                gpu_block_cells(a.blocks + term.first_block, b, s.span_first[0][t],
                                s.span_first[0][t] + s.span_count[0][t], lo, hi, term.weight, &c0, &c1, &adds_first,
                                &adds_last);
                double most = 0.0;
                for (uint32_t c = c0 + lane; c <= c1; c += 32) most = fmax(most, cell_bound[c]);
                if (gpu_bound_below(warp_max_d(most), prune)) {
                    skipped++;
                    continue;
                }
            } else if (prune) {
                const float block_bound = term.weight * __ldg(&a.blocks[term.first_block + b].max_tf_part);
                if (gpu_bound_below((double)block_bound + (total - s.range_max[t]), prune)) {
                    skipped++;
                    continue;
                }
            }
            scored += add_block<C>(a, query, term, b, lo, hi, scale, acc, matches, touched);
        }
        if (ne_end > 0) {
            __syncthreads(); // every essential block is in
            if (touched != nullptr) {
                // a thread per cell, over the slots its bitmap word marks
                for (uint32_t c = tid; c < kCells; c += kThreads) {
                    double v = 0.0;
                    for (uint32_t bits = touched[c]; bits; bits &= bits - 1u) {
                        v = fmax(v, acc_value<C>(acc, c * GPU_SUB_DOCS + (uint32_t)(__ffs(bits) - 1), inv_scale));
                    }
                    cell_max[c] = v;
                }
            } else {
                for (uint32_t c = warp; c < kCells; c += kWarps) {
                    const uint32_t i = c * GPU_SUB_DOCS + lane;
                    double v = 0.0;
                    if (i < hi - lo) v = acc_value<C>(acc, i, inv_scale);
                    v = warp_max_d(v);
                    if (lane == 0) cell_max[c] = v;
                }
            }
            __syncthreads();
            const uint32_t ne_items = items - essential_items;
            for (uint32_t item = warp; item < ne_items; item += kWarps) {
                uint32_t rem;
                const uint32_t t = item_block(item, 0, lanes_hold_terms, lane_before, cn, s, rem);
                const range_term term = s.terms[t];
                const uint32_t b = s.span_first[0][t] + rem;
                uint32_t c0, c1;
                bool adds_first, adds_last;
                gpu_block_cells(a.blocks + term.first_block, b, s.span_first[0][t],
                                s.span_first[0][t] + s.span_count[0][t], lo, hi, term.weight, &c0, &c1, &adds_first,
                                &adds_last);
                // a document here reaches theta only with essential score in its cell
                double most = 0.0;
                for (uint32_t c = c0 + lane; c <= c1; c += 32)
                    if (cell_max[c] > 0.0) most = fmax(most, cell_max[c] + cell_ne[c]);
                most = warp_max_d(most);
                if (most == 0.0 || gpu_bound_below(most, prune)) {
                    skipped++;
                    continue;
                }
                scored += add_block<C>(a, query, term, b, lo, hi, scale, acc, nullptr, touched);
            }
        }
        if (lane == 0 && skipped) atomicAdd(&s.skipped, skipped);
        __syncthreads();
        if (tid == 0 && s.skipped) atomicAdd(&a.results[q].blocks_skipped, s.skipped);
    }
    for (int d = 16; d > 0; d >>= 1) scored += __shfl_xor_sync(0xFFFFFFFFu, scored, d);
    if (lane == 0 && scored) atomicAdd((unsigned long long *)&a.results[q].postings_scored, (unsigned long long)scored);
    if (!zeroed) return false; // OR with no postings in any chunk
    if (query.and_mode) {
        for (uint32_t i = tid; i < hi - lo; i += kThreads)
            if (matches[i] < nt) acc_clear<C>(acc, i, query.fixed_shift != 0);
        __syncthreads();
    }
    return true;
}

// The slots a lane reads: warp w owns [512 w, 512 w + 512), lane l every 32nd of them.
template <int C = kWideAcc>
__device__ __forceinline__ uint64_t slot_key(const double *acc, uint32_t i, uint32_t lo, uint32_t n, double inv_scale) {
    if (i >= n) return GPU_NO_CANDIDATE;
    const double v = acc_value<C>(acc, i, inv_scale);
    return v > 0.0 ? gpu_candidate_key(gpu_float_key((float)v), lo + i) : GPU_NO_CANDIDATE;
}

// Keeps the two lowest keys offered, first < second.
__device__ __forceinline__ void keep_best_two(uint64_t key, uint64_t &first, uint64_t &second) {
    if (key < first) {
        second = first;
        first = key;
    } else if (key < second) {
        second = key;
    }
}

// The two lowest candidate keys among the lane's slots above `above` (0: all of them).
template <int C = kWideAcc>
__device__ __forceinline__ void lane_best_two(const double *acc, uint32_t lo, uint32_t n, uint64_t above,
                                              double inv_scale, uint64_t &first, uint64_t &second) {
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    first = GPU_NO_CANDIDATE;
    second = GPU_NO_CANDIDATE;
#pragma unroll 4
    for (int j = 0; j < kSlotsPerLane; j++) {
        const uint64_t c = slot_key<C>(acc, warp * (kSlotsPerLane * 32) + j * 32 + lane, lo, n, inv_scale);
        if (c > above) keep_best_two(c, first, second);
    }
}

// Merges the warps' sorted lists of m keys (lists[w * list_top ...]) into out; warp 0 only.
// Returns how many keys are documents (the rest is padding).
__device__ __forceinline__ uint32_t merge_warp_lists(const uint64_t *lists, uint32_t m, uint64_t *out,
                                                     uint32_t list_top = GPU_MAX_RANGE_TOP) {
    const uint32_t lane = threadIdx.x & 31u;
    uint32_t at = 0;
    for (uint32_t round = 0; round < m; round++) {
        const uint64_t v = lane < kWarps && at < m ? lists[lane * list_top + at] : GPU_NO_CANDIDATE;
        const uint64_t w = warp_min_u64(v);
        if (w == GPU_NO_CANDIDATE) { // the lists are exhausted: padding from here
            for (uint32_t rest = round + lane; rest < m; rest += 32) out[rest] = GPU_NO_CANDIDATE;
            return round;
        }
        if (lane == 0) out[round] = w;
        if (v == w) at++;
    }
    return m;
}

// A warp's m rounds of selection: each round the warp's lowest key goes to mine[round] (GPU_NO_CANDIDATE
// ends the list: the merge reads no further). A lane keeps its best two keys; when its best is taken the
// second moves up, and only when that one is taken too does rescan(taken, first, second) look at its
// slots again for the two best above the taken key.
template <typename Rescan>
__device__ __forceinline__ void warp_select(uint32_t m, uint64_t *mine, uint64_t first, uint64_t second, Rescan rescan) {
    const uint32_t lane = threadIdx.x & 31u;
    bool second_known = true; // else the lane's slots above first were not looked at
    for (uint32_t round = 0; round < m; round++) {
        const uint64_t w = warp_min_u64(first);
        if (lane == 0) mine[round] = w;
        if (w == GPU_NO_CANDIDATE) break;
        if (first == w && round + 1 < m) {
            if (second_known) {
                first = second;
                second_known = first == GPU_NO_CANDIDATE;
            } else {
                rescan(w, first, second);
                second_known = true;
            }
        }
    }
}

// Writes the range's m best documents (candidate keys ascending, GPU_NO_CANDIDATE padding) to out.
// Each warp selects its m best: a lane keeps its best two; when its best is taken the second moves up,
// and the lane rescans its slots only when that one is taken too. The m best of a warp's 1,024 slots
// seldom share a lane (slots are interleaved), so rescans are rare: rescanning after every take, as the
// first version did, cost most of the kernel's instructions at small k (ncu). Then warp 0 merges the
// warps' sorted lists.
template <int C = kWideAcc>
__device__ uint32_t report_range(const double *acc, uint32_t lo, uint32_t n, uint32_t m, double inv_scale, uint64_t *lists,
                                 uint64_t *out) {
    const uint32_t warp = threadIdx.x >> 5;
    uint64_t first, second;
    lane_best_two<C>(acc, lo, n, 0, inv_scale, first, second);
    warp_select(m, lists + warp * GPU_MAX_RANGE_TOP, first, second, [&](uint64_t above, uint64_t &f, uint64_t &sec) {
        lane_best_two<C>(acc, lo, n, above, inv_scale, f, sec);
    });
    __syncthreads();
    return warp == 0 ? merge_warp_lists(lists, m, out) : 0u;
}

// A disjunctive range's slots are visited through the touched bitmap: thread t owns word t (kCells ==
// kThreads), so each thread reads and clears only its own slots.
template <int C = kWideAcc>
__device__ __forceinline__ void zero_accumulator(double *acc, uint32_t *touched) {
    double2 *acc2 = reinterpret_cast<double2 *>(acc);
    for (uint32_t i = threadIdx.x; i < acc_layout<C>::kBytes / sizeof(double2); i += kThreads) acc2[i] = make_double2(0.0, 0.0);
    for (uint32_t c = threadIdx.x; c < kCells; c += kThreads) touched[c] = 0;
}

template <int C = kWideAcc>
__device__ __forceinline__ void clear_touched(double *acc, uint32_t *touched, bool fixed) {
    for (uint32_t c = threadIdx.x; c < kCells; c += kThreads) {
        for (uint32_t bits = touched[c]; bits; bits &= bits - 1u) acc_clear<C>(acc, c * GPU_SUB_DOCS + (uint32_t)(__ffs(bits) - 1), fixed);
        touched[c] = 0;
    }
}

// A range's report floor (gpu_query.floor_key) in its accumulator's units: a fixed-point slot below
// `fixed` (floor * 2^fixed_shift, rounded down), a double slot below `value`, is no answer. `low_room`:
// more than a slot's low counter can hold (one add below 2^kLow per term).
struct report_floor {
    unsigned long long fixed;
    double value;
    unsigned long long low_room;
    bool active;       // there is a floor
    bool fixed_point;  // and the accumulator is fixed point (else double)
};

template <int C = kWideAcc>
__device__ __forceinline__ report_floor floor_of(const gpu_query &query, uint32_t floor_key) {
    const double value = gpu_floor_value(floor_key);
    const double scale = query.fixed_shift ? __longlong_as_double((long long)(1023 + query.fixed_shift) << 52) : 0.0;
    return report_floor{query.fixed_shift ? (unsigned long long)(value * scale) : 0ull, value,
                        (unsigned long long)query.num_terms << acc_layout<C>::kLow, value > 0.0, query.fixed_shift != 0};
}

// Where a query's units are fine enough that the floor spans many high-counter steps, most slots a report
// visits are far below the floor and their high counter alone says so, one load instead of two.
template <int C = kWideAcc>
__device__ __forceinline__ bool slot_below_floor(const double *acc, uint32_t i, const report_floor &f) {
    if (!f.active) return false; // no floor: nothing to load
    if (C == kWideAcc && !f.fixed_point) return acc[i] < f.value;
    const uint32_t *low = reinterpret_cast<const uint32_t *>(acc);
    if (acc_layout<C>::kHighBits == 0) return low[i] < f.fixed;
    const unsigned long long high = acc_high<C>(acc, i) << acc_layout<C>::kLow;
    if (high + f.low_room <= f.fixed) return true;
    return high + low[i] < f.fixed;
}

// The two lowest candidate keys above `above` (0: all of them) among the thread's touched slots that
// reach the floor.
template <int C = kWideAcc>
__device__ __forceinline__ void thread_best_two(const double *acc, const uint32_t *touched, uint32_t lo, uint32_t n,
                                                uint64_t above, double inv_scale, const report_floor &answer_floor,
                                                uint64_t &first, uint64_t &second) {
    first = GPU_NO_CANDIDATE;
    second = GPU_NO_CANDIDATE;
    for (uint32_t c = threadIdx.x; c < kCells; c += kThreads)
        for (uint32_t bits = touched[c]; bits; bits &= bits - 1u) {
            const uint32_t i = c * GPU_SUB_DOCS + (uint32_t)(__ffs(bits) - 1);
            if (slot_below_floor<C>(acc, i, answer_floor)) continue;
            const uint64_t key = slot_key<C>(acc, i, lo, n, inv_scale);
            if (key > above) keep_best_two(key, first, second);
        }
}

// thread_best_two's first pass, which also clears the slots below the floor (no answers, and never looked
// at again) and drops their bits: clear_touched then visits only the few slots that reach the floor.
template <int C = kWideAcc>
__device__ __forceinline__ void thread_first_scan(double *acc, uint32_t *touched, uint32_t lo, uint32_t n,
                                                  double inv_scale, const report_floor &answer_floor, uint64_t &first,
                                                  uint64_t &second) {
    static_assert(kCells == kThreads, "a thread per bitmap word");
    first = GPU_NO_CANDIDATE;
    second = GPU_NO_CANDIDATE;
    const uint32_t c = threadIdx.x;
    uint32_t kept = 0;
    for (uint32_t bits = touched[c]; bits; bits &= bits - 1u) {
        const uint32_t bit = (uint32_t)(__ffs(bits) - 1), i = c * GPU_SUB_DOCS + bit;
        if (slot_below_floor<C>(acc, i, answer_floor)) {
            acc_clear<C>(acc, i, answer_floor.fixed_point);
            continue;
        }
        kept |= 1u << bit;
        keep_best_two(slot_key<C>(acc, i, lo, n, inv_scale), first, second);
    }
    touched[c] = kept;
}

// report_range over the touched slots. Thread t owns bitmap word t, so warp w owns slots [1024 w, 1024 w +
// 1024): each warp selects its own m best without the other warps (warp_select), and one barrier later
// warp 0 merges the warps' lists (lists[w * list_top ...]). A block-wide minimum per round, as the first
// version took, cost a barrier per reported document. Each thread clears its slots before that barrier,
// so the next range's adds may start right after it.
template <int C = kWideAcc>
__device__ uint32_t report_touched(double *acc, uint32_t *touched, uint32_t lo, uint32_t n, uint32_t m, double inv_scale,
                                   const report_floor &answer_floor, bool fixed, uint64_t *lists, uint32_t list_top,
                                   uint64_t *out) {
    const uint32_t warp = threadIdx.x >> 5;
    uint64_t first, second;
    thread_first_scan<C>(acc, touched, lo, n, inv_scale, answer_floor, first, second);
    warp_select(m, lists + warp * list_top, first, second, [&](uint64_t above, uint64_t &f, uint64_t &sec) {
        thread_best_two<C>(acc, touched, lo, n, above, inv_scale, answer_floor, f, sec);
    });
    clear_touched<C>(acc, touched, fixed);
    __syncthreads();
    return warp == 0 ? merge_warp_lists(lists, m, out, list_top) : 0u;
}

__device__ __forceinline__ uint32_t report_score_key(uint64_t c) {
    return c == GPU_NO_CANDIDATE ? 0u : ~(uint32_t)(c >> 32);
}

// Narrow ranges with a report floor are reported from a dense scan of the counters instead of a bitmap:
// with a floor almost no slot passes, and eight conflict-free 16-byte loads and their maximum tell a thread
// so for its 32 slots, fewer instructions than visiting the bitmap's bits one by one (and the adds mark
// nothing). Thread t owns the four slots of each 16-byte word t + kThreads j; it zeroes them after the
// report. at_least: the floor in counter units (at least 1: a zero slot is no document).
constexpr uint32_t kDenseWordsPerThread = GPU_RANGE_DOCS / 4 / kThreads;
static_assert(kDenseWordsPerThread * 4 * kThreads == GPU_RANGE_DOCS, "threads own whole words of counters");

__device__ __forceinline__ uint32_t dense_max(const double *acc) {
    const uint4 *words = reinterpret_cast<const uint4 *>(acc);
    uint32_t most = 0;
#pragma unroll
    for (uint32_t j = 0; j < kDenseWordsPerThread; j++) {
        const uint4 w = words[threadIdx.x + kThreads * j];
        most = max(most, max(max(w.x, w.y), max(w.z, w.w)));
    }
    return most;
}

// The two lowest candidate keys above `above` (0: all of them) among the thread's slots at or above at_least.
__device__ __forceinline__ void dense_best_two(const double *acc, uint32_t lo, uint32_t n, uint64_t above, double inv_scale,
                                               uint32_t at_least, uint64_t &first, uint64_t &second) {
    first = GPU_NO_CANDIDATE;
    second = GPU_NO_CANDIDATE;
    const uint32_t *counters = reinterpret_cast<const uint32_t *>(acc);
    for (uint32_t j = 0; j < kDenseWordsPerThread; j++)
        for (uint32_t e = 0; e < 4; e++) {
            const uint32_t i = 4u * (threadIdx.x + kThreads * j) + e;
            if (counters[i] < at_least) continue;
            const uint64_t key = slot_key<kNarrowAcc>(acc, i, lo, n, inv_scale);
            if (key > above) keep_best_two(key, first, second);
        }
}

// report_touched for a narrow range without its bitmap (with a floor, a warp whose slots all stay below it
// writes its empty list without a round).
__device__ uint32_t report_dense(double *acc, uint32_t lo, uint32_t n, uint32_t m, double inv_scale, uint32_t at_least,
                                 uint64_t *lists, uint32_t list_top, uint64_t *out) {
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    uint64_t *mine = lists + warp * list_top;
    uint64_t first = GPU_NO_CANDIDATE, second = GPU_NO_CANDIDATE;
    const bool passes = dense_max(acc) >= at_least;
    if (__any_sync(0xFFFFFFFFu, passes)) {
        if (passes) dense_best_two(acc, lo, n, 0, inv_scale, at_least, first, second);
        warp_select(m, mine, first, second, [&](uint64_t above, uint64_t &f, uint64_t &sec) {
            dense_best_two(acc, lo, n, above, inv_scale, at_least, f, sec);
        });
    } else if (lane == 0) {
        mine[0] = GPU_NO_CANDIDATE;
    }
    uint4 *words = reinterpret_cast<uint4 *>(acc);
#pragma unroll
    for (uint32_t j = 0; j < kDenseWordsPerThread; j++) words[threadIdx.x + kThreads * j] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();
    return warp == 0 ? merge_warp_lists(lists, m, out, list_top) : 0u;
}

// The report pass of the compact and narrow kernels: unpruned disjunctive queries of one chunk of terms
// (accumulator_kind). score_range's work for them, reordered: after its blocks of range r each warp finds
// its terms' spans in the next range, so their loads wait while other warps still score, and one barrier
// ends both; a range costs two barriers (its blocks, its report) instead of three. Term t's spans are the
// work of warp kWarps - 1 - t % kWarps: items go to warps from the first, so the warps that find spans are
// those with the fewest blocks to score. kDense: a narrow query with a report floor (report_dense).
template <int C, bool kDense, uint32_t kListTop>
__device__ void report_unpruned(const range_args &a, const gpu_query &query, uint32_t q, double *acc, uint32_t *touched,
                                uint64_t *lists, const report_floor &answer_floor, double inv_scale, range_shared &s) {
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const uint32_t nt = query.num_terms, m = query.range_top;
    const uint32_t stride = query.sample_stride ? query.sample_stride : 1;
    const uint32_t limit = query.doc_limit < a.num_docs ? query.doc_limit : a.num_docs;
    const double scale = __longlong_as_double((long long)(1023 + query.fixed_shift) << 52);
    const uint32_t v0 = blockIdx.x * a.ranges_per_block, v_end = v0 + a.ranges_per_block;
    // The step at or after v that scores a range (round 2 skips the sampled ones, one in `stride`), or
    // UINT32_MAX; its range is v * stride in round 1, v in round 2.
    auto next_step = [&](uint32_t v) -> uint32_t {
        if (a.round == 2 && v % stride == 0) v++;
        return v < v_end && (a.round == 1 ? v * stride : v) < a.num_ranges ? v : UINT32_MAX;
    };
    auto range_of = [&](uint32_t v) -> uint32_t { return a.round == 1 ? v * stride : v; };
    uint32_t v = next_step(v0);
    if (v == UINT32_MAX) return;
    span_prefetch pf;
    zero_accumulator<C>(acc, touched);
    uint32_t r = range_of(v), lo = r * GPU_RANGE_DOCS;
    uint32_t hi = lo + GPU_RANGE_DOCS < limit ? lo + GPU_RANGE_DOCS : limit;
    const uint32_t span_warp = kWarps - 1 - warp; // this warp's terms: span_warp, span_warp + kWarps, ...
    for (uint32_t t = span_warp; t < nt; t += kWarps) {
        const gpu_term g = a.terms[query.term_begin + t];
        const range_term term{g.first_block, g.num_blocks, g.df, g.weight};
        if (lane == 0) s.terms[t] = term;
        if (lo < hi) term_span(a, term, t, t == span_warp, false, lo, hi, false, s, pf, 0);
    }
    __syncthreads();
    uint32_t scored = 0, ranges_scored = 0, pruned = 0, reported = 0;
    const bool lanes_hold_terms = nt <= 32;
    for (uint32_t buffer = 0, shared_starts = 0;; buffer ^= 1u, shared_starts = lanes_hold_terms) {
        const uint32_t *first = s.span_first[buffer], *count = s.span_count[buffer];
        uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
        uint32_t items = 0, lane_before = 0;
        if (lo < hi && shared_starts) {
            lane_before = lane < nt ? s.item_start[buffer][lane] : 0u;
            items = s.item_total[buffer];
        } else if (lo < hi) {
            const uint32_t lane_count = lanes_hold_terms && lane < nt ? count[lane] : 0u;
            lane_before = warp_inclusive_sum(lane_count) - lane_count;
            if (lanes_hold_terms) items = __shfl_sync(0xFFFFFFFFu, lane_before + lane_count, 31);
            else
                for (uint32_t t = 0; t < nt; t++) items += count[t];
        }
        for (uint32_t item = warp; item < items; item += kWarps) {
            uint32_t t, rem;
            if (lanes_hold_terms) {
                t = (uint32_t)__popc(__ballot_sync(0xFFFFFFFFu, lane < nt && lane_before <= item)) - 1u;
                rem = item - __shfl_sync(0xFFFFFFFFu, lane_before, t);
            } else {
                t = 0;
                rem = item;
                while (rem >= count[t]) rem -= count[t++];
            }
            scored += add_block<C, kDense ? kMarksNever : kMarksAlways>(a, query, s.terms[t], first[t] + rem, lo, hi,
                                                                         scale, acc, nullptr, touched);
        }
        // the next range's spans, into the other buffers
        const uint32_t v_next = v + 1 < v_end ? next_step(v + 1) : UINT32_MAX;
        const uint32_t r_next = v_next == UINT32_MAX ? UINT32_MAX : range_of(v_next);
        const uint32_t lo_next = r_next == UINT32_MAX ? 0u : r_next * GPU_RANGE_DOCS;
        const uint32_t hi_next = r_next == UINT32_MAX              ? 0u
                                 : lo_next + GPU_RANGE_DOCS < limit ? lo_next + GPU_RANGE_DOCS
                                                                    : limit;
        if (lo_next < hi_next) {
            // the cursor carries over: this range was scored (its spans found) or r_next follows an empty one,
            // which only the end of the partition (limit) makes, so not here
            for (uint32_t t = span_warp; t < nt; t += kWarps)
                term_span(a, s.terms[t], t, t == span_warp, false, lo_next, hi_next, lo < hi, s, pf, buffer ^ 1u);
        }
        __syncthreads(); // this range's adds and the next range's spans are in
        // the next range's item starts, which the report's barrier (or the one below) orders before its reads
        if (lanes_hold_terms && warp == kWarps - 1) {
            const uint32_t c = lo_next < hi_next && lane < nt ? s.span_count[buffer ^ 1u][lane] : 0u;
            const uint32_t before = warp_inclusive_sum(c) - c;
            s.item_start[buffer ^ 1u][lane] = before;
            if (lane == 31) s.item_total[buffer ^ 1u] = before + c;
        }
        if (items) {
            if (kDense) {
                const unsigned long long floor = answer_floor.fixed;
                const uint32_t at_least = floor > UINT32_MAX ? UINT32_MAX : floor > 1u ? (uint32_t)floor : 1u;
                reported += report_dense(acc, lo, hi - lo, m, inv_scale, at_least, lists, kListTop, out);
            } else {
                reported += report_touched<C>(acc, touched, lo, hi - lo, m, inv_scale, answer_floor, true, lists, kListTop,
                                              out);
            }
            ranges_scored++;
        } else {
            for (uint32_t j = tid; j < m; j += kThreads) out[j] = GPU_NO_CANDIDATE;
            pruned++;
            __syncthreads(); // no report barrier: the item starts above must be in before the next range reads them
        }
        if (v_next == UINT32_MAX) break;
        v = v_next;
        r = r_next;
        lo = lo_next;
        hi = hi_next;
    }
    for (int d = 16; d > 0; d >>= 1) scored += __shfl_xor_sync(0xFFFFFFFFu, scored, d);
    if (lane == 0 && scored) atomicAdd((unsigned long long *)&a.results[q].postings_scored, (unsigned long long)scored);
    if (tid == 0) {
        if (ranges_scored) atomicAdd(&a.results[q].ranges_scored, ranges_scored);
        if (pruned) atomicAdd(&a.results[q].ranges_pruned, pruned);
        if (reported) atomicAdd(&a.results[q].reports, reported);
    }
}

// Report pass, in two rounds. Round 1: block (x, q) scores the sampled ranges r = v * sample_stride for
// v in [x * rpb, x * rpb + rpb), pruned at the query's seed. Round 2: the ranges [x * rpb, x * rpb + rpb)
// that were not sampled, pruned at the threshold the sample gave, carrying each term's block cursor
// from range to consecutive range. kMinBlocks trades registers for resident blocks (ISN_GPU_REPORT_BLOCKS
// picks one at run time, for measuring).
template <int kMinBlocks, int C>
__global__ void __launch_bounds__(kThreads, kMinBlocks) report_kernel(range_args a) {
    extern __shared__ double acc[];
    uint8_t *aux = reinterpret_cast<uint8_t *>(acc) + acc_layout<C>::kBytes;
    __shared__ range_shared s;
    const uint32_t q = a.query_index ? a.query_index[blockIdx.y] : blockIdx.y;
    const gpu_query query = a.queries[q];
    // the compact and narrow layouts' aux region holds the report lists and the touched bitmap only (accumulator_kind)
    if (C != kWideAcc && (query.and_mode || query.fixed_shift == 0 || a.dense_report || query.num_terms > GPU_MAX_TERMS))
        __trap();
    const uint32_t m = query.range_top;
    const uint32_t stride = query.sample_stride ? query.sample_stride : 1;
    if (a.round == 2 && stride == 1) return; // the first round scored every range
    const double inv_scale = query.fixed_shift ? __longlong_as_double((long long)(1023 - query.fixed_shift) << 52) : 0.0;
    // round 2 of an unpruned batch: the sample's k-th best report is a floor, not a pruning threshold
    const bool raise_floor = a.round == 2 && query.sampled_floor;
    const uint32_t theta = C != kWideAcc ? 0u : a.round == 1 ? query.seed_key : raise_floor ? 0u : a.prune[q];
    const report_floor answer_floor =
        floor_of<C>(query, raise_floor && a.prune[q] > query.floor_key ? a.prune[q] : query.floor_key);
    if constexpr (C != kWideAcc) {
        if (threadIdx.x == 0 && a.round == 1 && blockIdx.x == 0) a.results[q].accumulator = C;
        constexpr uint32_t kListTop = C == kNarrowAcc ? list_top_of(kMinBlocks) : GPU_MAX_RANGE_TOP;
        uint32_t *bitmap = reinterpret_cast<uint32_t *>(aux + kWarps * kListTop * sizeof(uint64_t));
        uint64_t *lists = reinterpret_cast<uint64_t *>(aux);
        // a narrow slot holds its whole sum, so the floor is one compare
        if (C == kNarrowAcc && answer_floor.active && a.dense_floor)
            report_unpruned<C, true, kListTop>(a, query, q, acc, bitmap, lists, answer_floor, inv_scale, s);
        else
            report_unpruned<C, false, kListTop>(a, query, q, acc, bitmap, lists, answer_floor, inv_scale, s);
        return;
    }
    uint32_t *touched = a.dense_report || query.and_mode
                            ? nullptr
                            : reinterpret_cast<uint32_t *>(aux + (C != kWideAcc ? kCompactTouchedOffset : kTouchedOffset));
    if (touched != nullptr) zero_accumulator<C>(acc, touched); // the first range's span barrier orders it
    const uint32_t v0 = blockIdx.x * a.ranges_per_block;
    uint32_t scored = 0, pruned = 0, reported = 0, previous = UINT32_MAX;
    span_prefetch pf;
    const uint32_t limit = query.doc_limit < a.num_docs ? query.doc_limit : a.num_docs;
    for (uint32_t v = v0; v < v0 + a.ranges_per_block; v++) {
        const uint32_t r = a.round == 1 ? v * stride : v;
        if (r >= a.num_ranges) break;
        if (a.round == 2 && r % stride == 0) continue;
        const uint32_t lo = r * GPU_RANGE_DOCS;
        const uint32_t hi = lo + GPU_RANGE_DOCS < limit ? lo + GPU_RANGE_DOCS : limit;
        uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
        // No barrier here: the previous range's spans were last read before its items barrier, its report
        // lists are merged by warp 0 before warp 0 reaches this range's span barrier, and each thread's
        // clear of its own slots is ordered before any add of this range by that same span barrier.
        const bool cursor = previous != UINT32_MAX && r > previous && query.num_terms <= GPU_MAX_TERMS;
        previous = lo < hi ? r : UINT32_MAX;
        if (lo >= hi || !score_range<C>(a, query, q, lo, hi, cursor, theta, acc, aux, touched, s, pf)) {
            for (uint32_t j = threadIdx.x; j < m; j += kThreads) out[j] = GPU_NO_CANDIDATE;
            pruned++;
            continue;
        }
        scored++;
        if (touched != nullptr) {
            reported += report_touched<C>(acc, touched, lo, hi - lo, m, inv_scale, answer_floor, query.fixed_shift != 0,
                                          reinterpret_cast<uint64_t *>(aux), GPU_MAX_RANGE_TOP, out);
        } else {
            reported += report_range<C>(acc, lo, hi - lo, m, inv_scale, reinterpret_cast<uint64_t *>(aux), out);
        }
    }
    if (threadIdx.x == 0) {
        if (a.round == 1 && blockIdx.x == 0) a.results[q].accumulator = C;
        if (scored) atomicAdd(&a.results[q].ranges_scored, scored);
        if (pruned) atomicAdd(&a.results[q].ranges_pruned, pruned);
        if (reported) atomicAdd(&a.results[q].reports, reported);
    }
}

// Rescore pass over the work list: every document whose key is at most the threshold key is a
// candidate (pruned at that key's score: no such document is skipped).
__global__ void __launch_bounds__(kThreads, 3) rescore_kernel(range_args a) {
    extern __shared__ double acc[];
    uint8_t *aux = reinterpret_cast<uint8_t *>(acc + GPU_RANGE_DOCS);
    __shared__ range_shared s;
    const uint32_t work = *a.work_count;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    bool dirty = true; // acc may hold a dense (AND) range's scores: zero it before a touched range
    for (uint32_t item = blockIdx.x; item < work; item += gridDim.x) {
        const uint2 w = a.work[item];
        const uint32_t q = w.x, r = w.y;
        const gpu_query query = a.queries[q];
        const uint32_t limit = query.doc_limit < a.num_docs ? query.doc_limit : a.num_docs;
        const uint32_t lo = r * GPU_RANGE_DOCS;
        const uint32_t hi = lo + GPU_RANGE_DOCS < limit ? lo + GPU_RANGE_DOCS : limit;
        const uint64_t theta_key = a.theta_key[q];
        uint32_t *touched =
            a.dense_report || query.and_mode ? nullptr : reinterpret_cast<uint32_t *>(aux + kTouchedOffset);
        __syncthreads();
        if (touched != nullptr && dirty) {
            zero_accumulator(acc, touched);
            __syncthreads();
        }
        dirty = touched == nullptr;
        span_prefetch pf;
        if (!score_range(a, query, q, lo, hi, false, report_score_key(theta_key), acc, aux, touched, s, pf)) continue;
        if (threadIdx.x == 0) atomicAdd(&a.results[q].ranges_rescored, 1u);
        const double inv_scale =
            query.fixed_shift ? __longlong_as_double((long long)(1023 - query.fixed_shift) << 52) : 0.0;
        uint64_t *cands = a.cands + query.cand_offset;
        if (touched != nullptr) {
            for (uint32_t c = threadIdx.x; c < kCells; c += kThreads)
                for (uint32_t bits = touched[c]; bits; bits &= bits - 1u) {
                    const uint64_t key =
                        slot_key(acc, c * GPU_SUB_DOCS + (uint32_t)(__ffs(bits) - 1), lo, hi - lo, inv_scale);
                    if (key == GPU_NO_CANDIDATE || key > theta_key) continue;
                    const uint32_t at = atomicAdd(&a.cand_count[q], 1u);
                    if (at < query.cand_cap) cands[at] = key;
                }
            clear_touched(acc, touched, query.fixed_shift != 0);
            continue;
        }
        for (int j = 0; j < kSlotsPerLane; j++) {
            const uint32_t i = warp * (kSlotsPerLane * 32) + j * 32 + lane;
            const uint64_t c = slot_key(acc, i, lo, hi - lo, inv_scale);
            const bool keep = c != GPU_NO_CANDIDATE && c <= theta_key;
            const uint32_t mask = __ballot_sync(0xFFFFFFFFu, keep);
            if (mask == 0) continue;
            uint32_t base = 0;
            if (lane == 0) base = atomicAdd(&a.cand_count[q], (uint32_t)__popc(mask));
            base = __shfl_sync(0xFFFFFFFFu, base, 0);
            if (keep) {
                const uint32_t at = base + __popc(mask & ((1u << lane) - 1u));
                if (at < query.cand_cap) cands[at] = c;
            }
        }
    }
}

// The radix digit (8 bits at `shift`) holding the remaining-th smallest of the keys counted in hist (bins
// ascending), and how many smaller keys it leaves: warp 0 scans the bins, eight a lane.
__device__ __forceinline__ void select_digit(const uint32_t *hist, uint32_t remaining, uint32_t &digit, uint32_t &left) {
    const uint32_t lane = threadIdx.x & 31u;
    uint32_t mine = 0;
#pragma unroll
    for (uint32_t b = 0; b < 8; b++) mine += hist[8 * lane + b];
    const uint32_t before = warp_inclusive_sum(mine) - mine;
    const uint32_t owner = __ffs(__ballot_sync(0xFFFFFFFFu, before + mine >= remaining)) - 1; // remaining <= total
    uint32_t bin = 8 * owner, rest = remaining - __shfl_sync(0xFFFFFFFFu, before, owner);
    while (hist[bin] < rest && bin < 8 * owner + 7) rest -= hist[bin++];
    digit = bin;
    left = rest;
}

// The rank-th smallest (from 1) of the n keys key_at(0..n-1), by the whole block: radix select, 8 bits a
// round, from the digit at top_shift (56 for 64-bit keys, 24 for 32-bit ones). rank must be 1..n.
struct select_shared {
    uint32_t hist[256];
    uint64_t prefix;
    uint32_t remaining;
};

template <typename KeyAt>
__device__ uint64_t block_select(KeyAt key_at, uint32_t n, uint32_t rank, select_shared &sh, int top_shift = 56) {
    if (threadIdx.x == 0) {
        sh.prefix = 0;
        sh.remaining = rank;
    }
    uint64_t mask = 0;
    for (int shift = top_shift; shift >= 0; shift -= 8) {
        for (uint32_t i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
        __syncthreads();
        const uint64_t prefix = sh.prefix;
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
            const uint64_t key = key_at(i);
            if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 0xFFu], 1u);
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            uint32_t digit, left;
            select_digit(sh.hist, sh.remaining, digit, left);
            if (threadIdx.x == 0) {
                sh.prefix = prefix | ((uint64_t)digit << shift);
                sh.remaining = left;
            }
        }
        mask |= (uint64_t)0xFF << shift;
        __syncthreads();
    }
    return sh.prefix;
}

// Between the rounds: the k-th best score among the sampled ranges' reports (real documents' scores,
// so a lower bound of the k-th), or the seed when higher, as the second round's pruning threshold. It is
// the k-th smallest of the reports' candidate keys' high words (~score key; padding's is the largest).
__global__ void __launch_bounds__(256) sample_threshold_kernel(const gpu_query *queries, const uint64_t *reports,
                                                               uint32_t num_ranges, uint32_t report_stride,
                                                               uint32_t *prune) {
    __shared__ select_shared sh;
    const uint32_t q = blockIdx.x;
    const gpu_query query = queries[q];
    const uint32_t m = query.range_top, stride = query.sample_stride ? query.sample_stride : 1;
    const uint32_t sampled = (num_ranges + stride - 1) / stride, total = sampled * m;
    if (stride == 1 || query.k > total) {
        if (threadIdx.x == 0) prune[q] = query.seed_key;
        return;
    }
    const uint64_t *mine = reports + (size_t)q * num_ranges * report_stride;
    const uint64_t kth = block_select(
        [&](uint32_t i) { return mine[(size_t)(i / m) * stride * report_stride + i % m] >> 32; }, total, query.k, sh, 24);
    const uint32_t key = ~(uint32_t)kth;
    if (threadIdx.x == 0) prune[q] = key > query.seed_key ? key : query.seed_key;
}

// Reports with keys at most the threshold key become candidates of query q; ranges whose every report is
// within it go on the rescore work list instead (their reports are not taken: the rescore gives all
// their candidates).
__device__ void collect_query(const gpu_query *queries, uint32_t q, const uint64_t *reports, uint32_t num_ranges,
                              uint32_t stride, uint64_t th, uint64_t *cands, uint32_t *cand_count, uint2 *work,
                              uint32_t *work_count, uint32_t &s_count) {
    const uint32_t m = queries[q].range_top;
    const uint32_t cand_cap = queries[q].cand_cap;
    if (threadIdx.x == 0) s_count = 0;
    __syncthreads();
    uint64_t *out = cands + queries[q].cand_offset;
    for (uint32_t r = threadIdx.x; r < num_ranges; r += blockDim.x) {
        const uint64_t *rep = reports + ((size_t)q * num_ranges + r) * stride;
        const uint64_t last = rep[m - 1];
        if (last != GPU_NO_CANDIDATE && last <= th) {
            uint32_t at = atomicAdd(work_count, 1u);
            work[at] = make_uint2(q, r);
            continue;
        }
        for (uint32_t j = 0; j < m; j++) {
            const uint64_t c = rep[j];
            if (c == GPU_NO_CANDIDATE || c > th) break;
            uint32_t at = atomicAdd(&s_count, 1u);
            if (at < cand_cap) out[at] = c;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) cand_count[q] = s_count;
}

// Per range query: the threshold key, then the collection (collect_query). The threshold is the k-th
// smallest report key (GPU_NO_CANDIDATE when fewer than k documents were reported): k real documents have
// keys at most this, so every answer's key is too; so is the floor's key (answers reach the floor), and
// the lower of the two is taken. The real reports (not padding) are first gathered into shared memory,
// where the radix rounds then read them, when they fit (kSelectKeys; with a floor a range reports only
// what reaches it, so most slots are padding).
constexpr uint32_t kSelectKeys = 8192;
__global__ void __launch_bounds__(256) select_collect_kernel(const gpu_query *queries, const uint64_t *reports,
                                                             uint32_t num_ranges, uint32_t report_stride,
                                                             uint64_t *theta_key, uint64_t *cands, uint32_t *cand_count,
                                                             uint2 *work, uint32_t *work_count) {
    extern __shared__ uint64_t kept_keys[]; // kSelectKeys
    __shared__ select_shared sh;
    __shared__ uint32_t s_kept, s_count;
    __shared__ uint64_t s_theta;
    const uint32_t q = blockIdx.x, lane = threadIdx.x & 31u;
    const gpu_query query = queries[q];
    const uint32_t m = query.range_top;
    const uint32_t total = num_ranges * m;
    const uint64_t floor_key = gpu_floor_candidate_key(query.floor_key);
    const uint64_t *mine = reports + (size_t)q * num_ranges * report_stride;
    if (threadIdx.x == 0) {
        s_kept = 0;
        s_theta = floor_key;
    }
    __syncthreads();
    if (query.k <= total) {
        for (uint32_t base = 0; base < total; base += blockDim.x) {
            const uint32_t i = base + threadIdx.x;
            const uint64_t key = i < total ? mine[(size_t)(i / m) * report_stride + i % m] : GPU_NO_CANDIDATE;
            const uint32_t real = __ballot_sync(0xFFFFFFFFu, key != GPU_NO_CANDIDATE);
            uint32_t at = 0;
            if (lane == 0 && real) at = atomicAdd(&s_kept, (uint32_t)__popc(real));
            at = __shfl_sync(0xFFFFFFFFu, at, 0) + (uint32_t)__popc(real & ((1u << lane) - 1u));
            if (key != GPU_NO_CANDIDATE && at < kSelectKeys) kept_keys[at] = key;
        }
        __syncthreads();
        const uint32_t kept = s_kept;
        // fewer than k documents reported: the k-th smallest key is padding, the floor's is lower
        if (kept >= query.k) {
            const uint64_t kth =
                kept <= kSelectKeys
                    ? block_select([&](uint32_t i) { return kept_keys[i]; }, kept, query.k, sh)
                    : block_select([&](uint32_t i) { return mine[(size_t)(i / m) * report_stride + i % m]; }, total,
                                   query.k, sh);
            if (threadIdx.x == 0 && kth < floor_key) s_theta = kth;
        }
    }
    __syncthreads();
    const uint64_t th = s_theta;
    if (threadIdx.x == 0) theta_key[q] = th;
    collect_query(queries, q, reports, num_ranges, report_stride, th, cands, cand_count, work, work_count, s_count);
}

// collect_query for every range query, or with `retry` only the flagged ones (after an overflow, with a
// tighter threshold key).
__global__ void __launch_bounds__(256) collect_kernel(const gpu_query *queries, const uint64_t *reports,
                                                      uint32_t num_ranges, uint32_t stride, const uint64_t *theta_key,
                                                      const uint32_t *retry, uint64_t *cands, uint32_t *cand_count,
                                                      uint2 *work, uint32_t *work_count) {
    __shared__ uint32_t s_count;
    const uint32_t q = blockIdx.x;
    if (retry != nullptr && retry[q] == 0) return;
    collect_query(queries, q, reports, num_ranges, stride, theta_key[q], cands, cand_count, work, work_count, s_count);
}

// After an overflow: the k-th smallest of the candidates kept (sorted; all real documents' keys, at most
// the old threshold key for a range query) is a tighter threshold key; such queries are flagged to be
// collected (range queries) or probed (conjunctive ones, their count restarted) again.
__global__ void tighten_kernel(const gpu_query *queries, uint32_t num_queries, uint32_t num_range_queries,
                               const uint64_t *sorted, uint32_t *cand_count, uint64_t *theta_key, uint32_t *retry) {
    const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= num_queries) return;
    const gpu_query query = queries[q];
    const bool over = cand_count[q] > query.cand_cap;
    retry[q] = over;
    if (over) {
        theta_key[q] = sorted[query.cand_offset + query.k - 1];
        if (q >= num_range_queries) cand_count[q] = 0;
    }
}

struct probe_args {
    const uint8_t *payload;
    const isn_block_meta *blocks;
    const gpu_query *queries; // the probe queries
    const gpu_term *terms;
    gpu_query_result *results;
    uint64_t *cands; // the pool
    uint32_t *cand_count;
    // a retry after an overflow: only the flagged queries, only documents with keys at most theta_key
    const uint32_t *retry;
    const uint64_t *theta_key;
};

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
            key[j] = gpu_candidate_key(gpu_float_key((float)score[j]), docs[j]);
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

__global__ void segments_kernel(const gpu_query *queries, const uint32_t *cand_count, uint32_t num_queries, int *begin,
                                int *end) {
    uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= num_queries) return;
    const uint32_t cap = queries[q].cand_cap;
    uint32_t n = cand_count[q] < cap ? cand_count[q] : cap;
    begin[q] = (int)queries[q].cand_offset;
    end[q] = (int)(queries[q].cand_offset + n);
}

// The final sort and gather of a batch whose k are at most kSortKeys, one block a query and one kernel
// for the batch (the segmented sort takes several and waits on the segments' sizes). A query's candidates
// (as many as its k, give or take the rescored ranges) are sorted in the block when they fit kSortKeys;
// when more, the block first selects the k smallest (block_select) and sorts those. Either way the sorted
// prefix is written back (the retry after an overflow reads the k-th) and the best k become hits.
constexpr int kSortThreads = 256, kSortItems = 8;
constexpr uint32_t kSortKeys = kSortThreads * kSortItems;
__global__ void __launch_bounds__(kSortThreads) sort_gather_kernel(const gpu_query *queries, const uint64_t *cands,
                                                                   const uint32_t *cand_count, uint64_t *sorted,
                                                                   gpu_query_result *results, isn_hit *hits) {
    using block_sort = cub::BlockRadixSort<unsigned long long, kSortThreads, kSortItems>;
    __shared__ typename block_sort::TempStorage sort_temp;
    __shared__ uint64_t picked[kSortKeys];
    __shared__ select_shared sh;
    __shared__ uint32_t s_picked;
    const uint32_t q = blockIdx.x;
    const gpu_query query = queries[q];
    const uint32_t count = cand_count[q];
    const uint32_t kept = count < query.cand_cap ? count : query.cand_cap;
    const uint32_t n = count > query.cand_cap ? 0 : (count < query.k ? count : query.k);
    const uint64_t *mine = cands + query.cand_offset;
    // the keys to sort: all kept ones, or the k smallest of them
    const uint32_t sorting = kept <= kSortKeys ? kept : query.k;
    if (kept > kSortKeys) {
        const uint64_t kth = block_select([&](uint32_t i) { return mine[i]; }, kept, query.k, sh);
        if (threadIdx.x == 0) s_picked = 0;
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < kept; i += kSortThreads)
            if (mine[i] <= kth) picked[atomicAdd(&s_picked, 1u)] = mine[i]; // keys are distinct: k of them
        __syncthreads();
    }
    unsigned long long keys[kSortItems];
#pragma unroll
    for (int j = 0; j < kSortItems; j++) {
        const uint32_t i = threadIdx.x * kSortItems + j;
        keys[j] = i >= sorting ? GPU_NO_CANDIDATE : kept <= kSortKeys ? mine[i] : picked[i];
    }
    block_sort(sort_temp).Sort(keys);
    uint64_t *out = sorted + query.cand_offset;
    isn_hit *hit = hits + query.hit_offset;
#pragma unroll
    for (int j = 0; j < kSortItems; j++) {
        const uint32_t i = threadIdx.x * kSortItems + j;
        if (i < sorting) out[i] = keys[j];
        if (i < n) hit[i] = isn_hit{(uint32_t)keys[j], __uint_as_float(~(uint32_t)(keys[j] >> 32))};
    }
    if (threadIdx.x == 0) {
        results[q].num_hits = n;
        results[q].candidates = count;
    }
}

__global__ void gather_kernel(const gpu_query *queries, const uint64_t *sorted, const uint32_t *cand_count,
                              gpu_query_result *results, isn_hit *hits) {
    const uint32_t q = blockIdx.x;
    const uint32_t count = cand_count[q];
    const uint32_t k = queries[q].k;
    const uint32_t cand_cap = queries[q].cand_cap;
    const uint32_t n = count > cand_cap ? 0 : (count < k ? count : k);
    if (threadIdx.x == 0) {
        results[q].num_hits = n;
        results[q].candidates = count;
    }
    const uint64_t *mine = sorted + queries[q].cand_offset;
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
    uint32_t num_ranges;
    uint32_t report_stride;
    uint32_t resident_blocks; // report/rescore blocks the device runs at once
    int report_blocks;        // 2 or 3: which report_kernel
    uint32_t dense_report;    // ISN_GPU_DENSE_REPORT=1: the dense zero and scan for every range (to compare)
    bool compact;             // compact accumulators where they fit (ISN_GPU_COMPACT=0: never, to compare)
    bool narrow;              // narrow accumulators where they fit (ISN_GPU_NARROW=0: never, to compare)
    bool segmented_sort;      // CUB's segmented sort for every batch (ISN_GPU_SEGMENTED_SORT=1, to compare and test)
    bool dense_floor;         // report_dense where a narrow range has a floor (ISN_GPU_DENSE_FLOOR=0: never, to compare)
    uint32_t resident_compact; // compact report blocks the device runs at once
    uint32_t resident_narrow;  // narrow ones
    uint32_t resident_short;   // narrow ones with short report lists (six a multiprocessor)
    uint32_t waves, max_ranges_per_block; // ranges_per_block's (ISN_GPU_WAVES, ISN_GPU_MAX_RANGES_PER_BLOCK: to measure)
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
        cudaFree(s->d_in);
        cudaFree(s->d_zeroed);
        cudaFree(s->d_reports);
        cudaFree(s->d_prune);
        cudaFree(s->d_theta_key);
        cudaFree(s->d_retry);
        cudaFree(s->d_work);
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
    delete d;
}

static size_t results_bytes(uint32_t queries) {
    return ((size_t)queries * sizeof(gpu_query_result) + 15) / 16 * 16;
}

// The work count (in 16 bytes, which keep what follows aligned) and the candidate counts before the results,
// in one region zeroed at launch.
constexpr size_t kWorkCountBytes = 16;
static size_t counts_bytes(uint32_t queries) {
    return kWorkCountBytes + ((size_t)queries * sizeof(uint32_t) + 15) / 16 * 16;
}

// A batch's queries, then its terms, then its variant list (range queries by report kernel), back to back.
static size_t stage_bytes(const gpu_upload *u) {
    return u->max_batch * sizeof(gpu_query) + u->max_terms * sizeof(gpu_term) + u->max_batch * sizeof(uint32_t);
}

static int open_stream(gpu_device *d, stream_buffers *s, char *err, size_t err_len) {
    const gpu_upload *u = &d->upload;
    CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    for (int e = 0; e < kEvents; e++) CHECK(cudaEventCreate(&s->events[e]));
    CHECK(cudaMalloc(&s->d_in, stage_bytes(u)));
    s->d_queries = reinterpret_cast<gpu_query *>(s->d_in);
    CHECK(cudaMalloc(&s->d_zeroed, counts_bytes(u->max_batch) + results_bytes(u->max_batch) +
                                       (size_t)u->max_batch * u->max_k * sizeof(isn_hit)));
    s->d_work_count = reinterpret_cast<uint32_t *>(s->d_zeroed);
    s->d_cand_count = reinterpret_cast<uint32_t *>(s->d_zeroed + kWorkCountBytes);
    s->d_results = reinterpret_cast<gpu_query_result *>(s->d_zeroed + counts_bytes(u->max_batch));
    CHECK(cudaMalloc(&s->d_reports, (size_t)u->max_batch * d->num_ranges * d->report_stride * sizeof(uint64_t)));
    CHECK(cudaMalloc(&s->d_prune, u->max_batch * sizeof(uint32_t)));
    CHECK(cudaMalloc(&s->d_theta_key, u->max_batch * sizeof(uint64_t)));
    CHECK(cudaMalloc(&s->d_retry, u->max_batch * sizeof(uint32_t)));
    CHECK(cudaMalloc(&s->d_work, (size_t)u->max_batch * d->num_ranges * sizeof(uint2)));
    size_t cand_items = (size_t)u->max_batch * u->max_candidates;
    if (cand_items > (size_t)INT32_MAX) {
        snprintf(err, err_len, "max_batch * max_candidates (%zu) is above the sort's 2^31 limit", cand_items);
        return -1;
    }
    CHECK(cudaMalloc(&s->d_cands, cand_items * sizeof(uint64_t)));
    CHECK(cudaMalloc(&s->d_cands_sorted, cand_items * sizeof(uint64_t)));
    CHECK(cudaMalloc(&s->d_seg_begin, u->max_batch * sizeof(int)));
    CHECK(cudaMalloc(&s->d_seg_end, u->max_batch * sizeof(int)));
    const uint32_t per_call = u->max_batch < kSortSegmentsPerCall ? u->max_batch : kSortSegmentsPerCall;
    CHECK(cub::DeviceSegmentedSort::SortKeys(nullptr, s->sort_temp_bytes, s->d_cands, s->d_cands_sorted,
                                             (int)cand_items, (int)per_call, s->d_seg_begin, s->d_seg_end,
                                             s->stream));
    CHECK(cudaMalloc(&s->d_sort_temp, s->sort_temp_bytes));
    CHECK(cudaMallocHost(&s->h_stage, stage_bytes(u) + u->max_batch));
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
    CHECK(cudaFuncSetAttribute(report_kernel<3, kWideAcc>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
    CHECK(cudaFuncSetAttribute(report_kernel<2, kWideAcc>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
    CHECK(cudaFuncSetAttribute(report_kernel<4, kCompactAcc>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)kCompactSharedBytes));
    CHECK(cudaFuncSetAttribute(report_kernel<5, kNarrowAcc>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)narrow_shared_bytes(5)));
    CHECK(cudaFuncSetAttribute(report_kernel<6, kNarrowAcc>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)narrow_shared_bytes(6)));
    const char *choice = getenv("ISN_GPU_REPORT_BLOCKS");
    d->report_blocks = choice && atoi(choice) == 2 ? 2 : 3;
    const char *compact = getenv("ISN_GPU_COMPACT");
    d->compact = !(compact && atoi(compact) == 0);
    const char *waves = getenv("ISN_GPU_WAVES"), *max_rpb = getenv("ISN_GPU_MAX_RANGES_PER_BLOCK");
    d->waves = waves && atoi(waves) > 0 ? (uint32_t)atoi(waves) : 4;
    d->max_ranges_per_block = max_rpb && atoi(max_rpb) > 0 ? (uint32_t)atoi(max_rpb) : 64;
    const char *narrow = getenv("ISN_GPU_NARROW");
    d->narrow = !(narrow && atoi(narrow) == 0);
    const char *segmented = getenv("ISN_GPU_SEGMENTED_SORT");
    d->segmented_sort = segmented && atoi(segmented) == 1;
    const char *dense_floor = getenv("ISN_GPU_DENSE_FLOOR");
    d->dense_floor = !(dense_floor && atoi(dense_floor) == 0);
    const char *dense = getenv("ISN_GPU_DENSE_REPORT");
    d->dense_report = dense && atoi(dense) == 1;
    CHECK(cudaFuncSetAttribute(select_collect_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)(kSelectKeys * sizeof(uint64_t))));
    CHECK(cudaFuncSetAttribute(rescore_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, report_kernel<3, kWideAcc>, kThreads, kSharedBytes));
    d->resident_blocks = (uint32_t)(per_sm > 0 ? per_sm : 1) * (uint32_t)d->prop.multiProcessorCount;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, report_kernel<4, kCompactAcc>, kThreads,
                                                        kCompactSharedBytes));
    d->resident_compact = (uint32_t)(per_sm > 0 ? per_sm : 1) * (uint32_t)d->prop.multiProcessorCount;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, report_kernel<5, kNarrowAcc>, kThreads,
                                                        narrow_shared_bytes(5)));
    d->resident_narrow = (uint32_t)(per_sm > 0 ? per_sm : 1) * (uint32_t)d->prop.multiProcessorCount;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, report_kernel<6, kNarrowAcc>, kThreads,
                                                        narrow_shared_bytes(6)));
    d->resident_short = (uint32_t)(per_sm > 0 ? per_sm : 1) * (uint32_t)d->prop.multiProcessorCount;
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
    d->report_stride = gpu_range_top(upload->max_k, upload->num_docs);
    if (upload->streams > 8 || open_device(d, err, err_len) != 0) {
        if (upload->streams > 8) snprintf(err, err_len, "CUDA device: at most 8 streams");
        cuda_close(d);
        return nullptr;
    }
    return d;
}

// Candidates sorted per query, the best k gathered, results and hits copied back (one region).
static int sort_and_copy_out(gpu_device *d, stream_buffers *s, uint32_t total_candidates, char *err, size_t err_len) {
    cudaStream_t st = s->stream;
    const uint32_t nq = s->num_queries;
    if (s->max_k <= kSortKeys && !d->segmented_sort) {
        sort_gather_kernel<<<nq, kSortThreads, 0, st>>>(s->d_queries, s->d_cands, s->d_cand_count, s->d_cands_sorted,
                                                         s->d_results, s->d_hits);
        CHECK(cudaGetLastError());
    } else {
        segments_kernel<<<(nq + 255) / 256, 256, 0, st>>>(s->d_queries, s->d_cand_count, nq, s->d_seg_begin,
                                                           s->d_seg_end);
        CHECK(cudaGetLastError());
        for (uint32_t first = 0; first < nq; first += kSortSegmentsPerCall) {
            const uint32_t count = nq - first < kSortSegmentsPerCall ? nq - first : kSortSegmentsPerCall;
            size_t temp = s->sort_temp_bytes;
            CHECK(cub::DeviceSegmentedSort::SortKeys(s->d_sort_temp, temp, s->d_cands, s->d_cands_sorted,
                                                     (int)total_candidates, (int)count, s->d_seg_begin + first,
                                                     s->d_seg_end + first, st));
        }
        gather_kernel<<<nq, 256, 0, st>>>(s->d_queries, s->d_cands_sorted, s->d_cand_count, s->d_results, s->d_hits);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(s->events[6], st));
    // One copy back: the results, then the hits of every query right after them (d_hits, set at launch).
    CHECK(cudaMemcpyAsync(s->h_out, s->d_results, results_bytes(nq) + (size_t)s->total_hits * sizeof(isn_hit),
                          cudaMemcpyDeviceToHost, st));
    return 0;
}

static probe_args probe_args_of(const gpu_device *d, const stream_buffers *s, bool retry) {
    const uint32_t nr = s->num_range_queries;
    probe_args p;
    p.payload = d->d_payload;
    p.blocks = d->d_blocks;
    p.queries = s->d_queries + nr;
    p.terms = s->d_terms;
    p.results = s->d_results + nr;
    p.cands = s->d_cands;
    p.cand_count = s->d_cand_count + nr;
    p.retry = retry ? s->d_retry + nr : nullptr;
    p.theta_key = s->d_theta_key + nr;
    return p;
}

static range_args range_args_of(const gpu_device *d, const stream_buffers *s) {
    range_args a;
    memset(&a, 0, sizeof a);
    a.payload = d->d_payload;
    a.blocks = d->d_blocks;
    a.num_docs = d->upload.num_docs;
    a.num_ranges = d->num_ranges;
    a.ranges_per_block = 1;
    a.queries = s->d_queries;
    a.terms = s->d_terms;
    a.results = s->d_results;
    a.reports = s->d_reports;
    a.report_stride = d->report_stride;
    a.prune = s->d_prune;
    a.theta_key = s->d_theta_key;
    a.cands = s->d_cands;
    a.cand_count = s->d_cand_count;
    a.work = s->d_work;
    a.work_count = s->d_work_count;
    a.dense_report = d->dense_report;
    a.dense_floor = d->dense_floor;
    return a;
}

// Consecutive ranges per report block: as many as four waves of the device leave (a block follows its
// lists' blocks from range to range with a cursor instead of searching them), at most 64. (Choosing the
// count whose last wave is fullest changed nothing measurable: a batch's blocks differ in cost.)
// Blocks of the rescore pass: four a range query, at most what the device runs at once.
static uint32_t rescore_blocks(const gpu_device *d, uint32_t range_queries) {
    const uint64_t want = (uint64_t)range_queries * 4 < 32 ? 32 : (uint64_t)range_queries * 4;
    return want < d->resident_blocks ? (uint32_t)want : d->resident_blocks;
}

static uint32_t ranges_per_block(const gpu_device *d, uint32_t ranges, uint32_t queries, uint32_t resident) {
    const uint64_t per = ((uint64_t)ranges * queries) / ((uint64_t)resident * d->waves);
    return per < 1 ? 1 : per > d->max_ranges_per_block ? d->max_ranges_per_block : (uint32_t)per;
}

// The accumulator a range query's report blocks use: the smallest whose counters hold its sums. Narrow and
// compact ones need an unpruned disjunctive query (their aux region has no room for bound grids or match
// counts), fixed point and one chunk of terms. A slot's total is at most the sum of the query's bounds in
// fixed-point units (one posting per list and document); the narrow layout's 32-bit counter needs that sum
// below 2^32, the compact one's 16-bit high counter below 2^(kLow + 16); each with a factor 2 to spare.
static acc_kind accumulator_kind(const gpu_device *d, const gpu_query *q, const gpu_term *terms) {
    if (d->dense_report || q->and_mode || q->fixed_shift == 0 || q->num_terms > GPU_MAX_TERMS || q->seed_key != 0)
        return kWideAcc;
    if (q->sample_stride > 1 && !q->sampled_floor) return kWideAcc; // its second round prunes
    double units = 0.0;
    for (uint32_t t = q->term_begin; t < q->term_begin + q->num_terms; t++)
        units += ldexp((double)terms[t].max_score, (int)q->fixed_shift) + 1.0; // + 1: the rounding of an add
    if (d->narrow && units < ldexp(1.0, 31)) return kNarrowAcc;
    if (d->compact && units < ldexp(1.0, (int)(acc_layout<kCompactAcc>::kLow + 16) - 1)) return kCompactAcc;
    return kWideAcc;
}

static int cuda_launch(gpu_device *d, uint32_t slot, const gpu_batch *batch, char *err, size_t err_len) {
    stream_buffers *s = &d->streams[slot];
    cudaStream_t st = s->stream;
    const uint32_t nq = batch->num_queries, nr = batch->num_range_queries, np = nq - nr;
    CHECK(cudaSetDevice(d->ordinal));
    s->num_queries = nq;
    s->num_range_queries = nr;
    s->total_hits = batch->total_hits;
    s->total_candidates = batch->total_candidates;
    s->max_k = 0;
    for (uint32_t q = 0; q < nq; q++) s->max_k = batch->queries[q].k > s->max_k ? batch->queries[q].k : s->max_k;
    size_t qbytes = nq * sizeof(gpu_query), tbytes = batch->num_terms * sizeof(gpu_term);
    memcpy(s->h_stage, batch->queries, qbytes);
    memcpy(s->h_stage + qbytes, batch->terms, tbytes);
    // the range queries by report kernel (accumulator_kind): the narrow ones with short report lists, the
    // other narrow ones, the compact ones, the wide ones
    enum { kShortKernel, kNarrowKernel, kCompactKernel, kWideKernel, kKernels };
    uint32_t *h_variant = reinterpret_cast<uint32_t *>(s->h_stage + qbytes + tbytes);
    uint8_t *h_kernel = reinterpret_cast<uint8_t *>(h_variant + d->upload.max_batch);
    uint32_t kernel_count[kKernels] = {0, 0, 0, 0};
    for (uint32_t q = 0; q < nr; q++) {
        const acc_kind kind = accumulator_kind(d, &batch->queries[q], batch->terms);
        const int kernel = kind == kWideAcc      ? kWideKernel
                           : kind == kCompactAcc ? kCompactKernel
                           : batch->queries[q].range_top <= kShortListTop ? kShortKernel
                                                                          : kNarrowKernel;
        kernel_count[h_kernel[q] = (uint8_t)kernel]++;
    }
    const uint32_t nshort = kernel_count[kShortKernel], nnarrow = kernel_count[kNarrowKernel],
                   ncompact = kernel_count[kCompactKernel];
    uint32_t kernel_at[kKernels];
    kernel_at[kShortKernel] = 0;
    kernel_at[kNarrowKernel] = nshort;
    kernel_at[kCompactKernel] = nshort + nnarrow;
    kernel_at[kWideKernel] = nshort + nnarrow + ncompact;
    for (uint32_t q = 0; q < nr; q++) h_variant[kernel_at[h_kernel[q]]++] = q;
    // one copy in and one memset: a batch of 16 is short enough on the device that each operation of the
    // stream's sequence shows
    s->d_terms = reinterpret_cast<gpu_term *>(s->d_in + qbytes);
    s->d_hits = reinterpret_cast<isn_hit *>(reinterpret_cast<uint8_t *>(s->d_results) + results_bytes(nq));
    s->d_variant = reinterpret_cast<uint32_t *>(s->d_in + qbytes + tbytes);
    CHECK(cudaEventRecord(s->events[0], st));
    CHECK(cudaMemcpyAsync(s->d_in, s->h_stage, qbytes + tbytes + nr * sizeof(uint32_t), cudaMemcpyHostToDevice, st));
    CHECK(cudaMemsetAsync(s->d_zeroed, 0, counts_bytes(d->upload.max_batch) + nq * sizeof(gpu_query_result), st));
    CHECK(cudaEventRecord(s->events[1], st));

    range_args a = range_args_of(d, s);
    if (nr) {
        // Ranges per block: enough blocks for four waves of the device, consecutive ranges otherwise (each
        // block then follows its lists' blocks with a cursor instead of searching them).
        uint32_t min_stride = GPU_MAX_SAMPLE_STRIDE, max_stride = 1;
        for (uint32_t q = 0; q < nr; q++) {
            const uint32_t st_q = batch->queries[q].sample_stride ? batch->queries[q].sample_stride : 1;
            min_stride = st_q < min_stride ? st_q : min_stride;
            max_stride = st_q > max_stride ? st_q : max_stride;
        }
        for (uint32_t round = 1; round <= 2; round++) {
            if (round == 2 && max_stride == 1) break;
            const uint32_t ranges = round == 1 ? (d->num_ranges + min_stride - 1) / min_stride : d->num_ranges;
            a.round = round;
            range_args short_args = a, narrow_args = a, compact_args = a, wide_args = a;
            short_args.query_index = s->d_variant;
            narrow_args.query_index = s->d_variant + nshort;
            compact_args.query_index = s->d_variant + nshort + nnarrow;
            wide_args.query_index = s->d_variant + nshort + nnarrow + ncompact;
            if (nshort) {
                short_args.ranges_per_block = ranges_per_block(d, ranges, nshort, d->resident_short);
                const uint32_t gx = (ranges + short_args.ranges_per_block - 1) / short_args.ranges_per_block;
                report_kernel<6, kNarrowAcc><<<dim3(gx, nshort), kThreads, narrow_shared_bytes(6), st>>>(short_args);
            }
            if (nnarrow) {
                narrow_args.ranges_per_block = ranges_per_block(d, ranges, nnarrow, d->resident_narrow);
                const uint32_t gx = (ranges + narrow_args.ranges_per_block - 1) / narrow_args.ranges_per_block;
                report_kernel<5, kNarrowAcc><<<dim3(gx, nnarrow), kThreads, narrow_shared_bytes(5), st>>>(narrow_args);
            }
            if (ncompact) {
                compact_args.ranges_per_block = ranges_per_block(d, ranges, ncompact, d->resident_compact);
                const uint32_t gx = (ranges + compact_args.ranges_per_block - 1) / compact_args.ranges_per_block;
                report_kernel<4, kCompactAcc><<<dim3(gx, ncompact), kThreads, kCompactSharedBytes, st>>>(compact_args);
            }
            const uint32_t nwide = nr - nshort - nnarrow - ncompact;
            if (nwide) {
                wide_args.ranges_per_block = ranges_per_block(d, ranges, nwide, d->resident_blocks);
                const uint32_t gx = (ranges + wide_args.ranges_per_block - 1) / wide_args.ranges_per_block;
                if (d->report_blocks == 2)
                    report_kernel<2, kWideAcc><<<dim3(gx, nwide), kThreads, kSharedBytes, st>>>(wide_args);
                else
                    report_kernel<3, kWideAcc><<<dim3(gx, nwide), kThreads, kSharedBytes, st>>>(wide_args);
            }
            CHECK(cudaGetLastError());
            if (round == 1) {
                sample_threshold_kernel<<<nr, 256, 0, st>>>(s->d_queries, s->d_reports, d->num_ranges,
                                                            d->report_stride, s->d_prune);
                CHECK(cudaGetLastError());
            }
        }
    }
    CHECK(cudaEventRecord(s->events[2], st));
    if (nr) {
        select_collect_kernel<<<nr, 256, kSelectKeys * sizeof(uint64_t), st>>>(
            s->d_queries, s->d_reports, d->num_ranges, d->report_stride, s->d_theta_key, s->d_cands, s->d_cand_count,
            s->d_work, s->d_work_count);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(s->events[3], st));
    if (nr) {
        // the work list is short when reports fit k (gpu_range_top): a few blocks a query take it
        rescore_kernel<<<rescore_blocks(d, nr), kThreads, kSharedBytes, st>>>(a);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(s->events[4], st));
    if (np) {
        uint32_t most = 0;
        for (uint32_t q = nr; q < nq; q++) {
            const gpu_query *query = &batch->queries[q];
            uint32_t blocks = batch->terms[query->term_begin + query->driver].num_blocks;
            most = blocks > most ? blocks : most;
        }
        uint32_t gx = (most + kProbeWarps - 1) / kProbeWarps;
        gx = gx < 1 ? 1 : gx > 1024 ? 1024 : gx;
        s->probe_grid_x = gx;
        probe_kernel<<<dim3(gx, np), kProbeThreads, 0, st>>>(probe_args_of(d, s, false));
        CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(s->events[5], st));
    if (sort_and_copy_out(d, s, batch->total_candidates, err, err_len) != 0) return -1;
    CHECK(cudaEventRecord(s->events[7], st));
    s->bytes_in = qbytes + tbytes + nr * sizeof(uint32_t);
    s->bytes_out = results_bytes(nq) + (size_t)batch->total_hits * sizeof(isn_hit);
    return 0;
}

// After a candidate overflow (more documents within the threshold key than a query's segment holds):
// the overflowing queries are collected or probed again with the k-th smallest key they kept, then
// sorted and copied back. Returns 1 when no query overflowed (nothing launched), 0 when a retry was launched.
static int launch_retry(gpu_device *d, stream_buffers *s, const gpu_batch *batch, char *err, size_t err_len) {
    const gpu_query_result *results = reinterpret_cast<const gpu_query_result *>(s->h_out);
    bool over = false;
    for (uint32_t q = 0; q < s->num_queries && !over; q++) over = results[q].candidates > batch->queries[q].cand_cap;
    if (!over) return 1;
    cudaStream_t st = s->stream;
    const uint32_t nq = s->num_queries, nr = s->num_range_queries;
    tighten_kernel<<<(nq + 255) / 256, 256, 0, st>>>(s->d_queries, nq, nr, s->d_cands_sorted, s->d_cand_count,
                                                      s->d_theta_key, s->d_retry);
    CHECK(cudaGetLastError());
    if (nr) {
        CHECK(cudaMemsetAsync(s->d_work_count, 0, sizeof(uint32_t), st));
        collect_kernel<<<nr, 256, 0, st>>>(s->d_queries, s->d_reports, d->num_ranges, d->report_stride,
                                           s->d_theta_key, s->d_retry, s->d_cands, s->d_cand_count, s->d_work,
                                           s->d_work_count);
        CHECK(cudaGetLastError());
        // the work list holds only the flagged queries' ranges
        range_args a = range_args_of(d, s);
        rescore_kernel<<<rescore_blocks(d, nr), kThreads, kSharedBytes, st>>>(a);
        CHECK(cudaGetLastError());
    }
    if (nq > nr) {
        probe_kernel<<<dim3(s->probe_grid_x, nq - nr), kProbeThreads, 0, st>>>(probe_args_of(d, s, true));
        CHECK(cudaGetLastError());
    }
    if (sort_and_copy_out(d, s, s->total_candidates, err, err_len) != 0) return -1;
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
    timing->ms_and_probe = ms[4];
    timing->ms_sort = ms[5];
    timing->ms_transfer_out = ms[6];
    timing->bytes_to_device = s->bytes_in;
    timing->bytes_from_device = s->bytes_out;
    timing->overflow_retries = 0;
    for (uint32_t round = 0; round < GPU_OVERFLOW_RETRIES; round++) {
        int launched = launch_retry(d, s, batch, err, err_len);
        if (launched < 0) return -1;
        if (launched == 1) break;
        CHECK(cudaStreamSynchronize(s->stream));
        CHECK(cudaGetLastError());
        timing->overflow_retries++;
    }
    memcpy(batch->results, s->h_out, s->num_queries * sizeof(gpu_query_result));
    // the hits stay in the pinned buffer (valid until this stream's next launch): the backend copies each
    // query's filled hits from there once, instead of all k slots of every query first
    batch->hits = reinterpret_cast<isn_hit *>(s->h_out + results_bytes(s->num_queries));
    return 0;
}

static const char *cuda_name(const gpu_device *d) { return d->prop.name; }

static const gpu_device_ops cuda_ops = {
    cuda_open, cuda_launch, cuda_finish, cuda_close, cuda_name,
};

extern "C" const gpu_device_ops *gpu_cuda_device_ops(void) { return &cuda_ops; }
