// Private to gpu/: device code the first stage's kernels share (kernels.h): warp reductions, the
// accumulator slots' adds and reads, decoding a device-layout block by a warp, and a term's block span in
// a range (with the cursor that carries it from range to range). Helpers only, in each kernel file's own
// unnamed namespace. CUDA C++ only.
#ifndef ISN_GPU_RANGE_BLOCKS_CUH
#define ISN_GPU_RANGE_BLOCKS_CUH

#include "gpu/kernels.h"
#include "gpu/posting_decode.h"

namespace first_stage {
namespace {

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
    float bound_scale; // report_unpruned's bound pass (bound_scale_of)
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
// compact and narrow kernels with the bitmap), never; or, narrow ranges with a report floor (report_crossed),
// instead of bits the slots whose sum an add takes to the floor: each such slot once, as sums only grow.
enum bitmap_marks { kMarksIfGiven, kMarksAlways, kMarksNever, kMarksCrossings };

// The slots of a narrow range whose sums reached its report floor (kMarksCrossings), as its adds found them.
// count may pass cap (at most kCrossedSlots); the slots past it are not kept (report_crossed then scans the
// range).
struct crossing_log {
    uint32_t at_least; // the floor in counter units
    uint32_t cap;
    uint32_t *count;
    uint16_t *slots;
    // whether a count that went from `before` to before + add crossed the floor
    __device__ __forceinline__ bool crosses(uint32_t before, uint32_t add) const {
        return before < at_least && before + add >= at_least;
    }
    __device__ __forceinline__ void log(uint32_t slot) const {
        const uint32_t at = atomicAdd(count, 1u);
        if (at < cap) slots[at] = (uint16_t)slot;
    }
    // slot's count went from `before` to before + add: logged when that crossed the floor
    __device__ __forceinline__ void note(uint32_t before, uint32_t add, uint32_t slot) const {
        if (crosses(before, add)) log(slot);
    }
};

// Block b of a range's term decoded by the warp (warp_decode_block); returns its posting count.
__device__ __forceinline__ uint32_t decode_range_block(const range_args &a, const range_term &rt, uint32_t b,
                                                       uint32_t docs[4], float parts[4]) {
    gpu_term term;
    term.first_block = rt.first_block;
    term.num_blocks = rt.num_blocks;
    term.df = rt.df;
    term.weight = rt.weight;
    return warp_decode_block(a.payload, a.blocks + term.first_block, term, b, docs, parts);
}
// How the range passes test a query's filters (gpu_query.filter_begin): the kernels of unfiltered queries never
// (their code stays as it was); those of filtered ones on the attribute columns (kFilterAlways: filter_lane) or,
// for the queries given a filter bitmap (gpu_query.pass_slot), on it (kFilterBitmap), each kernel with one of the
// two only, as the narrow kernels' registers hold no more; and the rescore pass, which serves every query, as the
// query says (kFilterIfAny).
enum filter_test { kFilterNever, kFilterAlways, kFilterIfAny, kFilterBitmap };

// The lane's decoded documents that fail one of the query's filters are no longer valid. A filter's fields are
// loaded where they are used (the column's first, then the test's), read-only, rather than the whole gpu_filter
// at once: the narrow kernels run in 40 or 48 registers, and a filter held whole beside the lane's documents
// spilled the posting loop's state to local memory (ptxas: the short kernel's filtered twin stored 332 bytes).
__device__ __forceinline__ void filter_lane(const range_args &a, const gpu_query &query, const uint32_t docs[4],
                                            bool valid[4]) {
    const gpu_filter *filters = a.filters + query.filter_begin;
    for (uint32_t f = 0; f < query.num_filters; f++) {
        const gpu_filter *filter = filters + f;
        const uint32_t *column =
            a.attribute_words + __ldg(reinterpret_cast<const unsigned long long *>(&filter->first_word));
        const uint32_t bits = __ldg(&filter->bits);
        uint32_t stored[4];
#pragma unroll
        for (int j = 0; j < 4; j++) stored[j] = valid[j] ? gpu_column_stored(column, bits, docs[j]) : 0u;
        const uint32_t least = __ldg(&filter->least), most = __ldg(&filter->most);
        const uint32_t num_values = __ldg(&filter->num_values);
        const bool negate = __ldg(&filter->negate) != 0;
        if (num_values == 0) { // a range (an equality of one value is one): no loop
#pragma unroll
            for (int j = 0; j < 4; j++) valid[j] = valid[j] && (stored[j] >= least && stored[j] <= most) != negate;
            continue;
        }
        const uint32_t *values = a.filter_values + __ldg(&filter->first_value);
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (valid[j]) valid[j] = gpu_stored_holds(stored[j], least, most, values, num_values) != negate;
    }
}

// The lane's decoded documents whose bits in the query's filter bitmap (gpu_query.pass_slot) are clear are no
// longer valid: a word's load a document (a lane's four documents are consecutive postings, so the loads mostly
// meet in one or two words, and the blocks running at once are the batch's queries over the same ranges, which
// share their filters' bitmap). Loading the lane's words as one 8-byte pair instead measured slower:
// the narrow kernels, at 40 registers, spilled more of the posting loop. A field past the list's count holds any
// value: its word is clamped into the bitmap, and its bit unused.
__device__ __forceinline__ void bitmap_lane(const range_args &a, const gpu_query &query, const uint32_t docs[4],
                                            bool valid[4]) {
    const uint32_t *bitmap = a.pass_bits + (size_t)(query.pass_slot - 1u) * a.pass_stride;
    const uint32_t last_word = a.pass_words - 1u;
#pragma unroll
    for (int j = 0; j < 4; j++)
        valid[j] = valid[j] && ((__ldg(&bitmap[min(docs[j] >> 5, last_word)]) >> (docs[j] & 31u)) & 1u);
}

// Whether the query's filters keep document `doc`, tested as kFilter says (kFilterBitmap: its bitmap, else the
// attribute columns): for the passes that test a document only where it may be reported, not at each posting.
template <int kFilter>
__device__ __forceinline__ bool query_keeps(const range_args &a, const gpu_query &query, uint32_t doc) {
    const uint32_t docs[4] = {doc, doc, doc, doc};
    bool valid[4] = {true, false, false, false};
    if (kFilter == kFilterNever) return true;
    if (kFilter == kFilterBitmap || (kFilter == kFilterIfAny && query.pass_slot != 0)) bitmap_lane(a, query, docs, valid);
    else filter_lane(a, query, docs, valid);
    return valid[0];
}

// Whether the query's filter bitmap keeps a document of ranges [r, r + count) (gpu_pass_keeps_ranges): the
// kernels that read it skip the ranges it keeps none of, as they skip ranges without postings.
__device__ __forceinline__ bool bitmap_keeps_ranges(const range_args &a, const gpu_query &query, uint32_t r,
                                                    uint32_t count) {
    const uint32_t *ranges = a.pass_bits + (size_t)(query.pass_slot - 1u) * a.pass_stride + a.pass_words;
    for (uint32_t i = r; i < r + count; i++)
        if (__ldg(&ranges[i >> 5]) >> (i & 31u) & 1u) return true;
    return false;
}

// Whether the query's filter bitmap keeps no document of some range of the partition (its last word,
// gpu_pass_stride): only then may a step's range bits skip it.
__device__ __forceinline__ bool bitmap_skips_ranges(const range_args &a, const gpu_query &query) {
    return __ldg(&a.pass_bits[(size_t)query.pass_slot * a.pass_stride - 1u]) != 0u;
}

// Block b of a range's term decoded by the warp, lane l's postings 4l..4l+3 valid where they lie in [lo, hi)
// and pass the query's filters as kFilter tests them (filter_test). The filters are tested before the tf parts
// are loaded: a lane whose four documents all fail them loads none (with a filter that keeps a tenth of the
// documents, two thirds of the lanes), for a longer chain of dependent loads (offsets, column, parts). Loading
// the parts beside the offsets instead, as an unfiltered block does, measured no faster on an H200, twice. An
// invalid posting's part is 0.
// Block b of a range's term, its documents alone: lane l's postings 4l..4l+3 (docs), valid where they lie in [lo, hi)
// within the block's count; returns where the lane's four tf parts lie (loaded by the caller, after its own tests).
__device__ __forceinline__ const float4 *decode_block_docs(const range_args &a, const range_term &rt, uint32_t b,
                                                           uint32_t lo, uint32_t hi, uint32_t docs[4], bool valid[4]) {
    const uint32_t lane = threadIdx.x & 31u;
    const isn_block_meta *blocks = a.blocks + rt.first_block;
    const uint32_t n = gpu_block_count(rt.df, rt.num_blocks, b);
    const uint64_t word = __ldg(reinterpret_cast<const unsigned long long *>(&blocks[b].offset));
    const uint32_t base = block_base(blocks, b);
    const uint32_t doc_bits = gpu_layout_doc_bits(word);
    const uint8_t *in = a.payload + gpu_layout_offset(word);
    uint32_t offsets[4];
    lane_fields(in, doc_bits, n, lane, offsets);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        docs[j] = gpu_layout_doc_of(base, offsets[j]);
        valid[j] = 4 * lane + j < n && docs[j] >= lo && docs[j] < hi;
    }
    return reinterpret_cast<const float4 *>(in + gpu_layout_stream_bytes(n, doc_bits)) + lane;
}

template <int kFilter>
__device__ __forceinline__ void decode_valid(const range_args &a, const gpu_query &query, const range_term &rt,
                                             uint32_t b, uint32_t lo, uint32_t hi, uint32_t docs[4], float parts[4],
                                             bool valid[4]) {
    const uint32_t lane = threadIdx.x & 31u;
    if (kFilter == kFilterNever || (kFilter == kFilterIfAny && query.num_filters == 0)) {
        const uint32_t n = decode_range_block(a, rt, b, docs, parts);
#pragma unroll
        for (int j = 0; j < 4; j++) valid[j] = 4 * lane + j < n && docs[j] >= lo && docs[j] < hi;
        return;
    }
    const float4 *lane_at = decode_block_docs(a, rt, b, lo, hi, docs, valid);
    // the parts land in registers whichever way they load (a conditional load into parts[] kept them in local
    // memory)
    float4 lane_parts = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (kFilter == kFilterBitmap || (kFilter == kFilterIfAny && query.pass_slot != 0))
        bitmap_lane(a, query, docs, valid);
    else
        filter_lane(a, query, docs, valid);
    if (valid[0] || valid[1] || valid[2] || valid[3]) lane_parts = __ldg(lane_at);
    parts[0] = lane_parts.x;
    parts[1] = lane_parts.y;
    parts[2] = lane_parts.z;
    parts[3] = lane_parts.w;
}

template <int C = kWideAcc, int kMarks = kMarksIfGiven, int kFilter = kFilterNever>
__device__ __forceinline__ uint32_t add_block(const range_args &a, const gpu_query &query, const range_term &rt,
                                              uint32_t b, uint32_t lo, uint32_t hi, double scale, double *acc,
                                              uint8_t *matches, uint32_t *touched,
                                              crossing_log crossings = crossing_log{}, uint32_t match = 0) {
    const float weight = rt.weight;
    uint32_t docs[4], scored = 0;
    float parts[4];
    bool valid[4];
    // a document the filters drop is never added: no score, no mark, no match count
    decode_valid<kFilter>(a, query, rt, b, lo, hi, docs, parts, valid);
    constexpr bool kNarrowed = C != kWideAcc; // the compact and narrow kernels: unpruned OR queries, fixed point
    uint32_t word = UINT32_MAX, bits = 0;
    // narrow counters: c * 2^shift is a whole number below 2^31 (accumulator_kind), exact in float too
    const float to_narrow = __int_as_float((127 + (int)query.fixed_shift) << 23);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (!valid[j]) continue;
        const float c = gpu_posting_contribution(weight, parts[j]);
        const uint32_t slot = docs[j] - lo;
        if (C == kNarrowAcc && kMarks == kMarksCrossings) {
            const uint32_t add = __float2uint_rn(c * to_narrow);
            crossings.note(atomicAdd(reinterpret_cast<uint32_t *>(acc) + slot, add), add, slot);
        } else if (C == kNarrowAcc)
            acc_add_fixed<C>(acc, slot, __float2uint_rn(c * to_narrow));
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
        // match (gpu_term_match): 1 counts a required term (every term of an AND query), 2 marks an excluded one
        if (!kNarrowed && match == 1)
            atomicAdd(reinterpret_cast<uint32_t *>(matches) + (slot >> 2), 1u << (8u * (slot & 3u)));
        else if (!kNarrowed && match == 2)
            atomicOr(reinterpret_cast<uint32_t *>(matches) + (slot >> 2), GPU_EXCLUDED_MARK << (8u * (slot & 3u)));
        scored++;
    }
    if (kMarks != kMarksNever && kMarks != kMarksCrossings && bits) atomicOr(&touched[word], bits);
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

// The block span of term t (the warp's) in [lo, hi) (at most kSpanDocs documents) into span buffer `buffer`,
// from the cursor s.lb[t] (the previous range's last block) or by a search; with `prune`, the largest block
// bound among the span's blocks (weight * max_tf_part), else 0. `prefetched`: the warp keeps term t's next cursor window loaded
// ahead (span_prefetch), so its latency passes while this range is scored and reported.
template <uint32_t kSpanDocs = GPU_RANGE_DOCS>
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
        // kSpanDocs docs meet at most kSpanDocs / 128 + 2 blocks
        const uint32_t reach = first + kSpanDocs / ISN_BLOCK_SIZE + 2, window = reach < nb ? reach : nb;
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

// A query's static prior as the slots of its ranges are keyed (gpu_query.prior_weight): scores null for a query
// without one (every kernel but the prior ones, where it is a constant and compiles away).
struct slot_prior {
    const float *scores = nullptr;
    float weight = 0.0f;
};

// What the query's prior adds at most to a document of range r (gpu_prior_bound of the range's largest static
// score).
__device__ __forceinline__ double range_prior_add(const range_args &a, const gpu_query &query, uint32_t r) {
    return gpu_prior_bound(query.prior_weight, __ldg(a.range_prior_max + r));
}

// The bound pass's counter scale (gpu_bound_scale): bound_report_kernel and bound_select_kernel both take it
// from here, so both get the same float.
__device__ __forceinline__ float bound_scale_of(const gpu_query &query, const gpu_term *terms) {
    return gpu_bound_scale(&query, terms);
}

// A bound counter's word and its place in it: slot i of a group is counter i % kBoundRanges of word i / kBoundRanges.
__device__ __forceinline__ uint32_t bound_word(uint32_t slot) { return slot / kBoundRanges; }
__device__ __forceinline__ uint32_t bound_shift(uint32_t slot) { return kBoundBits * (slot % kBoundRanges); }
__device__ __forceinline__ uint32_t bound_count(const double *acc, uint32_t slot) {
    return (reinterpret_cast<const uint32_t *>(acc)[bound_word(slot)] >> bound_shift(slot)) & kBoundMax;
}

} // namespace
} // namespace first_stage

#endif
