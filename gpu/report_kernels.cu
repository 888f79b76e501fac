// The range passes of the first stage (kernels.h): the report pass, in which every (query, range) is scored
// into a shared-memory accumulator and reports its best documents, and the rescore pass over the ranges
// that may hold more candidates than they reported. first_stage_device.cu says how a batch runs them.
#include "gpu/range_blocks.cuh"

namespace first_stage {
namespace {

// The cells [c0, c1] of the range [lo, hi) that block b of term t (of the spans in buffer 0) covers.
__device__ __forceinline__ void block_cells(const range_args &a, const range_shared &s, const range_term &term,
                                            uint32_t t, uint32_t b, uint32_t lo, uint32_t hi, uint32_t &c0, uint32_t &c1) {
    bool adds_first, adds_last;
    gpu_block_cells(a.blocks + term.first_block, b, s.span_first[0][t], s.span_first[0][t] + s.span_count[0][t], lo, hi,
                    term.weight, &c0, &c1, &adds_first, &adds_last);
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
// was skipped (acc untouched); all threads agree. kPrior: theta is a score with the query's static prior, and
// every bound of BM25 here adds what the prior adds at most in the range (prior_add: range_prior_add).
template <int C = kWideAcc, int kFilter = kFilterNever, bool kPrior = false>
__device__ bool score_range(const range_args &a, const gpu_query &query, uint32_t q, uint32_t lo, uint32_t hi,
                            bool cursor, uint32_t theta, double *acc, uint8_t *matches, uint32_t *touched,
                            range_shared &s, span_prefetch &pf, double prior_add = 0.0) {
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const uint32_t nt = query.num_terms;
    bool zeroed = false;
    uint32_t scored = 0;
    const double scale = query.fixed_shift ? __longlong_as_double((long long)(1023 + query.fixed_shift) << 52) : 0.0;
    const double inv_scale = query.fixed_shift ? __longlong_as_double((long long)(1023 - query.fixed_shift) << 52) : 0.0;
    // pruning needs every term's range maximum at once: one chunk of terms; trees do not prune (gpu_query.tree)
    const uint32_t prune = nt <= GPU_MAX_TERMS && !query.tree ? theta : 0u;
    auto below = [&](double bound) {
        return kPrior ? gpu_prior_below(bound, prior_add, prune) : gpu_bound_below(bound, prune);
    };
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
            and_missing = __any_sync(0xFFFFFFFFu, lane < cn && lane_count == 0 && gpu_term_match(&query, c0 + lane) == 1);
        } else {
            for (uint32_t t = 0; t < cn; t++) {
                and_missing = and_missing || (s.span_count[0][t] == 0 && gpu_term_match(&query, c0 + t) == 1);
                items += s.span_count[0][t];
                total += s.range_max[t];
            }
            if (prune && !query.and_mode)
                while (ne_end < cn) {
                    const float bound = s.max_score[ne_end]; // prune: one chunk, c0 == 0
                    if (!below(prefix + bound)) break;
                    prefix += bound;
                    ne_end++;
                }
        }
        for (uint32_t t = ne_end; t < cn && prune; t++) essential_items += s.span_count[0][t];
        if (!prune) essential_items = items;
        // a disjunctive range is skipped only when no chunk has postings in it (decided below); AND, or
        // pruned: one chunk only, acc untouched
        // (a barrier before leaving: the caller's next range writes the spans this summary just read)
        if (((query.and_mode || query.tree) && (and_missing || items == 0)) ||
            (prune && (essential_items == 0 || below(total)))) {
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
            if (!__syncthreads_or(tid < cells && !below(cell_bound[tid]))) return false;
        }
        if (!zeroed) {
            double2 *acc2 = reinterpret_cast<double2 *>(acc);
            if (touched == nullptr) // all of it: a fixed-point range's counters lie in both halves
                for (uint32_t i = tid; i < GPU_RANGE_DOCS / 2; i += kThreads) acc2[i] = make_double2(0.0, 0.0);
            if (query.and_mode || query.tree)
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
                block_cells(a, s, term, t, b, lo, hi, c0, c1);
                double most = 0.0;
                for (uint32_t c = c0 + lane; c <= c1; c += 32) most = fmax(most, cell_bound[c]);
                if (below(warp_max_d(most))) {
                    skipped++;
                    continue;
                }
            } else if (prune) {
                const float block_bound = term.weight * __ldg(&a.blocks[term.first_block + b].max_tf_part);
                if (below((double)block_bound + (total - s.range_max[t]))) {
                    skipped++;
                    continue;
                }
            }
            scored += add_block<C, kMarksIfGiven, kFilter>(a, query, term, b, lo, hi, scale, acc, matches, touched,
                                                           crossing_log{}, gpu_term_match(&query, c0 + t));
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
                block_cells(a, s, term, t, b, lo, hi, c0, c1);
                // a document here reaches theta only with essential score in its cell
                double most = 0.0;
                for (uint32_t c = c0 + lane; c <= c1; c += 32)
                    if (cell_max[c] > 0.0) most = fmax(most, cell_max[c] + cell_ne[c]);
                most = warp_max_d(most);
                if (most == 0.0 || below(most)) {
                    skipped++;
                    continue;
                }
                scored += add_block<C, kMarksIfGiven, kFilter>(a, query, term, b, lo, hi, scale, acc, nullptr, touched);
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
    } else if (query.tree) {
        // the slots that miss a required term or hold an excluded one are no answers (the filters dropped
        // their documents' postings)
        for (uint32_t i = tid; i < hi - lo; i += kThreads)
            if (!gpu_tree_admits(&query, matches[i])) acc_clear<C>(acc, i, query.fixed_shift != 0);
        __syncthreads();
    }
    return true;
}

// The slots a lane reads: warp w owns [512 w, 512 w + 512), lane l every 32nd of them. A slot's key: its score
// (with the query's prior, when it has one: gpu_prior_score of the document's static score), its document; a
// slot with no BM25 is no match.
template <int C = kWideAcc>
__device__ __forceinline__ uint64_t slot_key(const double *acc, uint32_t i, uint32_t lo, uint32_t n, double inv_scale,
                                             slot_prior prior = slot_prior{}) {
    if (i >= n) return GPU_NO_CANDIDATE;
    const double v = acc_value<C>(acc, i, inv_scale);
    if (!(v > 0.0)) return GPU_NO_CANDIDATE;
    if (prior.scores == nullptr) return gpu_candidate_key(gpu_nonnegative_key((float)v), lo + i);
    const float score = gpu_prior_score((float)v, prior.weight, __ldg(prior.scores + lo + i));
    return gpu_candidate_key(gpu_float_key(score), lo + i);
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
                                              double inv_scale, uint64_t &first, uint64_t &second,
                                              slot_prior prior = slot_prior{}) {
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    first = GPU_NO_CANDIDATE;
    second = GPU_NO_CANDIDATE;
#pragma unroll 4
    for (int j = 0; j < kSlotsPerLane; j++) {
        const uint64_t c = slot_key<C>(acc, warp * (kSlotsPerLane * 32) + j * 32 + lane, lo, n, inv_scale, prior);
        if (c > above) keep_best_two(c, first, second);
    }
}

// Merges the warps' sorted lists of m keys (lists[w * list_top ...]) into out; warp kMergeWarp only.
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
// first version did, cost most of the kernel's instructions at small k (ncu). Then warp kMergeWarp merges the
// warps' sorted lists.
template <int C = kWideAcc>
__device__ uint32_t report_range(const double *acc, uint32_t lo, uint32_t n, uint32_t m, double inv_scale, uint64_t *lists,
                                 uint64_t *out, slot_prior prior = slot_prior{}) {
    const uint32_t warp = threadIdx.x >> 5;
    uint64_t first, second;
    lane_best_two<C>(acc, lo, n, 0, inv_scale, first, second, prior);
    warp_select(m, lists + warp * GPU_MAX_RANGE_TOP, first, second, [&](uint64_t above, uint64_t &f, uint64_t &sec) {
        lane_best_two<C>(acc, lo, n, above, inv_scale, f, sec, prior);
    });
    __syncthreads();
    return warp == kMergeWarp ? merge_warp_lists(lists, m, out) : 0u;
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

// value: the least accumulated BM25 an answer has (0: none).
template <int C = kWideAcc>
__device__ __forceinline__ report_floor floor_at(const gpu_query &query, double value) {
    const double scale = query.fixed_shift ? __longlong_as_double((long long)(1023 + query.fixed_shift) << 52) : 0.0;
    return report_floor{query.fixed_shift ? (unsigned long long)(value * scale) : 0ull, value,
                        (unsigned long long)query.num_terms << acc_layout<C>::kLow, value > 0.0, query.fixed_shift != 0};
}

template <int C = kWideAcc>
__device__ __forceinline__ report_floor floor_of(const gpu_query &query, uint32_t floor_key) {
    return floor_at<C>(query, gpu_floor_value(floor_key));
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
                                                uint64_t &first, uint64_t &second, slot_prior prior = slot_prior{}) {
    first = GPU_NO_CANDIDATE;
    second = GPU_NO_CANDIDATE;
    for (uint32_t c = threadIdx.x; c < kCells; c += kThreads)
        for (uint32_t bits = touched[c]; bits; bits &= bits - 1u) {
            const uint32_t i = c * GPU_SUB_DOCS + (uint32_t)(__ffs(bits) - 1);
            if (slot_below_floor<C>(acc, i, answer_floor)) continue;
            const uint64_t key = slot_key<C>(acc, i, lo, n, inv_scale, prior);
            if (key > above) keep_best_two(key, first, second);
        }
}

// thread_best_two's first pass, which also clears the slots below the floor (no answers, and never looked
// at again) and drops their bits: clear_touched then visits only the few slots that reach the floor.
template <int C = kWideAcc>
__device__ __forceinline__ void thread_first_scan(double *acc, uint32_t *touched, uint32_t lo, uint32_t n,
                                                  double inv_scale, const report_floor &answer_floor, uint64_t &first,
                                                  uint64_t &second, slot_prior prior = slot_prior{}) {
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
        keep_best_two(slot_key<C>(acc, i, lo, n, inv_scale, prior), first, second);
    }
    touched[c] = kept;
}

// report_range over the touched slots. Thread t owns bitmap word t, so warp w owns slots [1024 w, 1024 w +
// 1024): each warp selects its own m best without the other warps (warp_select), and one barrier later
// warp kMergeWarp merges the warps' lists (lists[w * list_top ...]). A block-wide minimum per round, as the first
// version took, cost a barrier per reported document. Each thread clears its slots before that barrier,
// so the next range's adds may start right after it.
template <int C = kWideAcc>
__device__ uint32_t report_touched(double *acc, uint32_t *touched, uint32_t lo, uint32_t n, uint32_t m, double inv_scale,
                                   const report_floor &answer_floor, bool fixed, uint64_t *lists, uint32_t list_top,
                                   uint64_t *out, slot_prior prior = slot_prior{}) {
    const uint32_t warp = threadIdx.x >> 5;
    uint64_t first, second;
    thread_first_scan<C>(acc, touched, lo, n, inv_scale, answer_floor, first, second, prior);
    warp_select(m, lists + warp * list_top, first, second, [&](uint64_t above, uint64_t &f, uint64_t &sec) {
        thread_best_two<C>(acc, touched, lo, n, above, inv_scale, answer_floor, f, sec, prior);
    });
    clear_touched<C>(acc, touched, fixed);
    __syncthreads();
    return warp == kMergeWarp ? merge_warp_lists(lists, m, out, list_top) : 0u;
}

__device__ __forceinline__ uint32_t report_score_key(uint64_t c) {
    return c == GPU_NO_CANDIDATE ? 0u : ~(uint32_t)(c >> 32);
}

// Narrow ranges with a report floor are reported without a bitmap: from the slots their adds took to the
// floor (report_crossed), or, where more did than its log holds, from a dense scan of the counters: with a
// floor almost no slot passes, and eight conflict-free 16-byte loads and their maximum tell a thread so for
// its 32 slots, fewer instructions than visiting the bitmap's bits one by one. Thread t owns the four slots
// of each 16-byte word t + kThreads j; it zeroes them after the report. at_least: the floor in counter units
// (at least 1: a zero slot is no document).
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

// The end of report_dense and report_crossed: each thread zeroes its own counters (the words it scans in
// dense_max), then after the barrier warp kMergeWarp merges the warps' lists into out (warp: the caller's).
__device__ __forceinline__ uint32_t zero_and_merge(double *acc, const uint64_t *lists, uint32_t m, uint64_t *out,
                                                   uint32_t list_top, uint32_t warp) {
    uint4 *words = reinterpret_cast<uint4 *>(acc);
#pragma unroll
    for (uint32_t j = 0; j < kDenseWordsPerThread; j++) words[threadIdx.x + kThreads * j] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();
    return warp == kMergeWarp ? merge_warp_lists(lists, m, out, list_top) : 0u;
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
    return zero_and_merge(acc, lists, m, out, list_top, warp);
}

// report_dense from the slots the adds took to the floor (kMarksCrossings) instead of a scan of the
// counters, which cost a third of the range's shared-memory traffic: thread t offers slot t of the log, read
// before a barrier where the log holds any (the slot may be another thread's to zero). When the log
// overflowed, report_dense. Either way each thread zeroes its own counters.
__device__ uint32_t report_crossed(double *acc, uint32_t lo, uint32_t n, uint32_t m, double inv_scale,
                                   const crossing_log &crossings, uint64_t *lists, uint32_t list_top, uint64_t *out,
                                   uint32_t *scanned) {
    const uint32_t crossed = *crossings.count;
    if (crossed > crossings.cap) {
        if (threadIdx.x == 0) atomicAdd(scanned, 1u); // rare (bench_gpu's ranges_scanned_per_query says how)
        return report_dense(acc, lo, n, m, inv_scale, crossings.at_least, lists, list_top, out);
    }
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    uint64_t *mine = lists + warp * list_top;
    static_assert(kCrossedSlots <= kThreads, "a thread per logged slot");
    uint64_t first = threadIdx.x < crossed ? slot_key<kNarrowAcc>(acc, crossings.slots[threadIdx.x], lo, n, inv_scale)
                                           : GPU_NO_CANDIDATE;
    // a logged slot may be another thread's to zero below (an empty log, as most are, needs no barrier)
    const bool any = crossed != 0 && __syncthreads_or(first != GPU_NO_CANDIDATE);
    if (any && __any_sync(0xFFFFFFFFu, first != GPU_NO_CANDIDATE)) {
        // a lane offers one slot: once taken it has no second, so no rescan
        warp_select(m, mine, first, GPU_NO_CANDIDATE, [](uint64_t, uint64_t &f, uint64_t &sec) {
            f = GPU_NO_CANDIDATE;
            sec = GPU_NO_CANDIDATE;
        });
    } else if (lane == 0) {
        mine[0] = GPU_NO_CANDIDATE;
    }
    return zero_and_merge(acc, lists, m, out, list_top, warp);
}

// Block b of a term added to a bound pass's counters (kernels.h; slot i of [lo, hi) is bound_count's): a
// posting adds ceil(c * scale) (rounded up twice: the product, then to a whole unit), so a count is at least
// its document's score times the scale and less than that plus one a term.
// The slots whose counts an add takes to the floor are logged as add_block's kMarksCrossings does. Every posting
// adds, whether the query's filters keep its document or not: a slot's count is its document's alone, so the
// documents they drop are dropped where a count crosses the floor (query_keeps), and the report's scan of an
// overflowed log tests them too (report_bounds). A test at each posting cost the filtered pass a fifth more
// instructions and a sixth block a multiprocessor; a crossing is rare.
template <int kFilter>
__device__ __forceinline__ uint32_t add_block_bounds(const range_args &a, const gpu_query &query, const range_term &rt,
                                                     uint32_t b, uint32_t lo, uint32_t hi, float scale, double *acc,
                                                     crossing_log crossings) {
    const float weight = rt.weight;
    uint32_t docs[4], scored = 0;
    float parts[4];
    bool valid[4];
    decode_valid<kFilterNever>(a, query, rt, b, lo, hi, docs, parts, valid);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (!valid[j]) continue;
        const float c = gpu_posting_contribution(weight, parts[j]);
        const uint32_t slot = docs[j] - lo, shift = bound_shift(slot);
        const uint32_t add = __float2uint_ru(__fmul_ru(c, scale));
        // counters never carry into each other: a count stays within kBoundMax (bound_scale_of)
        const uint32_t before =
            (atomicAdd(reinterpret_cast<uint32_t *>(acc) + bound_word(slot), add << shift) >> shift) & kBoundMax;
        if (crossings.crosses(before, add) && query_keeps<kFilter>(a, query, docs[j])) crossings.log(slot);
        scored++;
    }
    return scored;
}

// A bound slot's candidate key: its count itself as the score (a whole number of at most kBoundMax, exact in
// float; bound_select_kernel reads it back).
__device__ __forceinline__ uint64_t bound_key(const double *acc, uint32_t slot, uint32_t lo, uint32_t n) {
    if (slot >= n) return GPU_NO_CANDIDATE;
    const uint32_t v = bound_count(acc, slot);
    return v ? gpu_candidate_key(gpu_nonnegative_key((float)v), lo + slot) : GPU_NO_CANDIDATE;
}

// report_crossed for a group of ranges in bound counters: from the log, or, where it overflowed, from a scan
// of the group's counts at or above the floor. The reports go to the group's first range. A thread scans the
// counters of the words it zeroes after the report (zero_and_merge's, as report_dense does): a rescan may come
// after another thread has zeroed its own. The scan reports only the documents the query's filters keep (the log
// holds no others: add_block_bounds).
template <int kFilter>
__device__ uint32_t report_bounds(const range_args &a, const gpu_query &query, double *acc, uint32_t lo, uint32_t n,
                                  uint32_t m, const crossing_log &crossings, uint64_t *lists, uint32_t list_top,
                                  uint64_t *out, uint32_t *scanned) {
    const uint32_t crossed = *crossings.count;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    uint64_t *mine = lists + warp * list_top;
    if (crossed > crossings.cap) {
        if (threadIdx.x == 0) atomicAdd(scanned, 1u);
        auto best_two = [&](uint64_t above, uint64_t &f, uint64_t &sec) {
            f = GPU_NO_CANDIDATE;
            sec = GPU_NO_CANDIDATE;
            for (uint32_t j = 0; j < kDenseWordsPerThread; j++)
                for (uint32_t w = 4u * (threadIdx.x + kThreads * j), e = 0; e < 4u * kBoundRanges; e++) {
                    const uint32_t i = kBoundRanges * w + e; // counter e % kBoundRanges of word w + e / kBoundRanges
                    if (bound_count(acc, i) < crossings.at_least || i >= n || !query_keeps<kFilter>(a, query, lo + i))
                        continue;
                    const uint64_t key = bound_key(acc, i, lo, n);
                    if (key > above) keep_best_two(key, f, sec);
                }
        };
        uint64_t first, second;
        best_two(0, first, second);
        warp_select(m, mine, first, second, best_two);
    } else {
        uint64_t first = threadIdx.x < crossed ? bound_key(acc, crossings.slots[threadIdx.x], lo, n) : GPU_NO_CANDIDATE;
        // a logged slot may be another thread's to zero below (an empty log, as most are, needs no barrier)
        const bool any = crossed != 0 && __syncthreads_or(first != GPU_NO_CANDIDATE);
        if (any && __any_sync(0xFFFFFFFFu, first != GPU_NO_CANDIDATE)) {
            warp_select(m, mine, first, GPU_NO_CANDIDATE, [](uint64_t, uint64_t &f, uint64_t &sec) {
                f = GPU_NO_CANDIDATE;
                sec = GPU_NO_CANDIDATE;
            });
        } else if (lane == 0) {
            mine[0] = GPU_NO_CANDIDATE;
        }
    }
    return zero_and_merge(acc, lists, m, out, list_top, warp);
}

// A pass's start: the query's terms into s.terms, and where [lo, hi) holds documents, each term's blocks there into
// span buffer 0, found by the warps that find the spans (span_warp's terms: span_warp, span_warp + kWarps, ...).
template <uint32_t kSpan>
__device__ __forceinline__ void first_spans(const range_args &a, const gpu_query &query, uint32_t span_warp, uint32_t lo,
                                            uint32_t hi, range_shared &s, span_prefetch &pf) {
    const uint32_t lane = threadIdx.x & 31u;
    for (uint32_t t = span_warp; t < query.num_terms; t += kWarps) {
        const gpu_term g = a.terms[query.term_begin + t];
        const range_term term{g.first_block, g.num_blocks, g.df, g.weight};
        if (lane == 0) s.terms[t] = term;
        if (lo < hi) term_span<kSpan>(a, term, t, t == span_warp, false, lo, hi, false, s, pf, 0);
    }
}

// The spans of the next step [lo, hi) into span buffer `buffer`, each term's by the warp that finds it (first_spans),
// from its cursor where `cursor` (the step before held documents) or by a search.
template <uint32_t kSpan>
__device__ __forceinline__ void next_spans(const range_args &a, uint32_t nt, uint32_t span_warp, uint32_t lo, uint32_t hi,
                                           bool cursor, range_shared &s, span_prefetch &pf, uint32_t buffer) {
    for (uint32_t t = span_warp; t < nt; t += kWarps)
        term_span<kSpan>(a, s.terms[t], t, t == span_warp, false, lo, hi, cursor, s, pf, buffer);
}

// A step's items, its terms' blocks in the span buffer `count` term by term: their number, and with at most 32 terms
// (lanes_hold_terms) in lane t the items before term t's (all lanes of the warp call it).
__device__ __forceinline__ uint32_t step_items(const uint32_t *count, uint32_t nt, bool lanes_hold_terms,
                                               uint32_t &lane_before) {
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t lane_count = lanes_hold_terms && lane < nt ? count[lane] : 0u;
    lane_before = warp_inclusive_sum(lane_count) - lane_count;
    if (lanes_hold_terms) return __shfl_sync(0xFFFFFFFFu, lane_before + lane_count, 31);
    uint32_t items = 0;
    for (uint32_t t = 0; t < nt; t++) items += count[t];
    return items;
}

// Item `item` of those (step_items) as its term, returned, and its block's index in the term's span (rem).
__device__ __forceinline__ uint32_t step_item_term(uint32_t item, const uint32_t *count, uint32_t nt,
                                                   bool lanes_hold_terms, uint32_t lane_before, uint32_t &rem) {
    const uint32_t lane = threadIdx.x & 31u;
    if (lanes_hold_terms) {
        const uint32_t t = (uint32_t)__popc(__ballot_sync(0xFFFFFFFFu, lane < nt && lane_before <= item)) - 1u;
        rem = item - __shfl_sync(0xFFFFFFFFu, lane_before, t);
        return t;
    }
    uint32_t t = 0;
    rem = item;
    while (rem >= count[t]) rem -= count[t++];
    return t;
}

// The report pass of the compact and narrow kernels: unpruned disjunctive queries of one chunk of terms
// (accumulator_kind). score_range's work for them, reordered: after its blocks of range r each warp finds
// its terms' spans in the next range, so their loads wait while other warps still score, and one barrier
// ends both; a range costs two barriers (its blocks, its report) instead of three. Term t's spans are the
// work of warp kWarps - 1 - t % kWarps: items go to warps from the first, so the warps that find spans are
// those with the fewest blocks to score. kDense: a narrow query with a report floor (report_crossed). kBounds:
// the bound pass (kernels.h): a step covers the group of ranges v, v + 1, ... (v a multiple of kBoundRanges),
// reported into range v.
template <int C, bool kDense, uint32_t kListTop, bool kBounds = false, int kFilter = kFilterNever>
__device__ void report_unpruned(const range_args &a, const gpu_query &query, uint32_t q, uint32_t chunk, double *acc, uint32_t *touched,
                                uint64_t *lists, const report_floor &answer_floor, double inv_scale, range_shared &s) {
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const uint32_t nt = query.num_terms, m = query.range_top;
    const uint32_t limit = query.doc_limit < a.num_docs ? query.doc_limit : a.num_docs;
    const double scale = __longlong_as_double((long long)(1023 + query.fixed_shift) << 52);
    const uint32_t v0 = chunk * a.ranges_per_block, v_end = v0 + a.ranges_per_block;
    const uint32_t sampled = gpu_sampled_ranges(&query, a.num_ranges);
    // The step at or after v that scores a range (round 2 skips the sampled ones: one in sample_stride, or the
    // leading ones), or UINT32_MAX; its range is the v-th sampled one in round 1 (gpu_sampled_range), v in round 2.
    auto next_step = [&](uint32_t v) -> uint32_t {
        if (a.round == 2 && gpu_range_sampled(&query, v)) v = query.lead_ranges ? query.lead_ranges : v + 1;
        return v < v_end && v < (a.round == 1 ? sampled : a.num_ranges) ? v : UINT32_MAX;
    };
    auto range_of = [&](uint32_t v) -> uint32_t { return a.round == 1 ? gpu_sampled_range(&query, v) : v; };
    constexpr uint32_t kSpan = kBounds ? kBoundSpan : GPU_RANGE_DOCS, kStep = kBounds ? kBoundRanges : 1u;
    uint32_t v = next_step(v0);
    if (v == UINT32_MAX) return;
    span_prefetch pf;
    zero_accumulator<C>(acc, touched);
    uint32_t r = range_of(v), lo = r * GPU_RANGE_DOCS;
    uint32_t hi = lo + kSpan < limit ? lo + kSpan : limit;
    // a step whose ranges the query's filter bitmap keeps no document of is empty: no spans, no adds, no reports
    const bool skips = kFilter == kFilterBitmap && bitmap_skips_ranges(a, query);
    auto kept_end = [&](uint32_t from, uint32_t r_from, uint32_t to) -> uint32_t {
        return skips && from < to && !bitmap_keeps_ranges(a, query, r_from, kStep) ? from : to;
    };
    hi = kept_end(lo, r, hi);
    if (kBounds && tid == 0) s.bound_scale = bound_scale_of(query, a.terms);
    const uint32_t span_warp = kWarps - 1 - warp; // this warp's terms: span_warp, span_warp + kWarps, ...
    first_spans<kSpan>(a, query, span_warp, lo, hi, s, pf);
    __syncthreads();
    uint32_t scored = 0, ranges_scored = 0, pruned = 0, reported = 0;
    const bool lanes_hold_terms = nt <= 32;
    // kDense: the crossing log in the bitmap's words, which these ranges do not mark: the slots, then one count
    // per span buffer (zeroed with the bitmap above). A range's count is zeroed during the range before it.
    static_assert(kCrossedSlots * sizeof(uint16_t) + 2 * sizeof(uint32_t) <= kCells * sizeof(uint32_t),
                  "the crossing log fits the bitmap");
    uint32_t *crossed_counts = touched + kCrossedSlots * sizeof(uint16_t) / sizeof(uint32_t);
    const unsigned long long floor = answer_floor.fixed;
    uint32_t at_least = floor > UINT32_MAX ? UINT32_MAX : floor > 1u ? (uint32_t)floor : 1u;
    const float bound_scale = kBounds ? s.bound_scale : 0.0f;
    if (kBounds) {
        // an answer's count is at least its score times the scale, so at least the floor's product rounded down
        const double units = answer_floor.active ? ::floor(answer_floor.value * (double)bound_scale) : 0.0;
        at_least = units > 1.0 ? (uint32_t)units : 1u;
    }
    for (uint32_t buffer = 0, shared_starts = 0;; buffer ^= 1u, shared_starts = lanes_hold_terms) {
        const uint32_t *first = s.span_first[buffer], *count = s.span_count[buffer];
        const crossing_log crossings{at_least, a.crossing_log, crossed_counts + buffer,
                                     reinterpret_cast<uint16_t *>(touched)};
        uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
        uint32_t items = 0, lane_before = 0;
        if (lo < hi && shared_starts) {
            lane_before = lane < nt ? s.item_start[buffer][lane] : 0u;
            items = s.item_total[buffer];
        } else if (lo < hi) {
            items = step_items(count, nt, lanes_hold_terms, lane_before);
        }
        for (uint32_t item = warp; item < items; item += kWarps) {
            uint32_t rem;
            const uint32_t t = step_item_term(item, count, nt, lanes_hold_terms, lane_before, rem);
            if constexpr (kBounds)
                scored += add_block_bounds<kFilter>(a, query, s.terms[t], first[t] + rem, lo, hi, bound_scale, acc,
                                                    crossings);
            else
                scored += add_block<C, kDense ? kMarksCrossings : kMarksAlways, kFilter>(
                    a, query, s.terms[t], first[t] + rem, lo, hi, scale, acc, nullptr, touched, crossings);
        }
        // the next range's spans, into the other buffers
        const uint32_t v_next = v + kStep < v_end ? next_step(v + kStep) : UINT32_MAX;
        const uint32_t r_next = v_next == UINT32_MAX ? UINT32_MAX : range_of(v_next);
        const uint32_t lo_next = r_next == UINT32_MAX ? 0u : r_next * GPU_RANGE_DOCS;
        const uint32_t hi_next = r_next == UINT32_MAX              ? 0u
                                 : lo_next + kSpan < limit ? kept_end(lo_next, r_next, lo_next + kSpan)
                                                           : kept_end(lo_next, r_next, limit);
        if (lo_next < hi_next) {
            // the cursor carries over when this range's spans were found (lo < hi); after an empty step (the
            // partition's end, or one the filter bitmap keeps nothing of) the spans are searched for
            next_spans<kSpan>(a, nt, span_warp, lo_next, hi_next, lo < hi, s, pf, buffer ^ 1u);
        }
        __syncthreads(); // this range's adds and the next range's spans are in
        // the next range's item starts, which the report's barrier (or the one below) orders before its reads
        if (lanes_hold_terms && warp == kWarps - 1) {
            const uint32_t c = lo_next < hi_next && lane < nt ? s.span_count[buffer ^ 1u][lane] : 0u;
            const uint32_t before = warp_inclusive_sum(c) - c;
            s.item_start[buffer ^ 1u][lane] = before;
            if (lane == 31) s.item_total[buffer ^ 1u] = before + c;
        }
        if (kDense && tid == 0) crossed_counts[buffer ^ 1u] = 0; // read last in the previous range's report
        if (items) {
            if constexpr (kBounds) {
                reported += report_bounds<kFilter>(a, query, acc, lo, hi - lo, m, crossings, lists, kListTop, out,
                                                   &a.results[q].ranges_scanned);
            } else if (kDense) {
                reported += report_crossed(acc, lo, hi - lo, m, inv_scale, crossings, lists, kListTop, out,
                                           &a.results[q].ranges_scanned);
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
        if (kDense && !kBounds && ranges_scored) atomicAdd(&a.results[q].ranges_floored, ranges_scored);
    }
    if (tid == kMergeWarp * 32 && reported) atomicAdd(&a.results[q].reports, reported);
}

// Ranked steps (a query with a filter bitmap and a report floor, in the short and narrow kernels): a step covers up to
// a.ranked_ranges consecutive ranges whose documents the bitmap keeps fit the accumulator's slots, numbered by those
// documents alone (a document's rank, pass_rank's for its word plus the word's bits below it, plus its range's delta).
// With a tenth of the documents kept a step holds about eight ranges' postings, so what a step costs whatever its
// postings (the spans, two barriers, the report's) is paid once for eight ranges: a top-1,000 query visits every range,
// and with one range a step those costs made its filtered pass slower than the unfiltered one (about a block of
// postings a warp a range). The reports are the ranges' own (report_step), so nothing after the pass changes.

// Block b of a range's term added as add_block's crossing-log path does, in a ranked step [lo, hi): its documents the
// bitmap keeps in the step's ranges that this round scores (not `excluded`), each in its rank's slot.
__device__ __forceinline__ uint32_t add_block_ranked(const range_args &a, const gpu_query &query, const range_term &rt,
                                                     uint32_t b, uint32_t lo, uint32_t hi, const uint32_t *delta,
                                                     uint32_t excluded, uint32_t kept, double *acc,
                                                     const crossing_log &crossings) {
    uint32_t docs[4], words[4], deltas[4];
    bool valid[4];
    const float4 *lane_at = decode_block_docs(a, rt, b, lo, hi, docs, valid);
    const size_t slot_at = (size_t)(query.pass_slot - 1u);
    const uint32_t *bitmap = a.pass_bits + slot_at * a.pass_stride;
    const uint32_t *rank = a.pass_rank + slot_at * a.pass_words;
    const uint32_t last_word = a.pass_words - 1u;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint32_t in_step = valid[j] ? (docs[j] - lo) / GPU_RANGE_DOCS : 0u;
        valid[j] = valid[j] && !((excluded >> in_step) & 1u);
        deltas[j] = valid[j] ? delta[in_step] : 0u;
        words[j] = __ldg(&bitmap[min(docs[j] >> 5, last_word)]);
        valid[j] = valid[j] && ((words[j] >> (docs[j] & 31u)) & 1u);
    }
    float4 lane_parts = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    uint32_t ranks[4];
#pragma unroll
    for (int j = 0; j < 4; j++) ranks[j] = valid[j] ? __ldg(&rank[docs[j] >> 5]) : 0u;
    if (valid[0] || valid[1] || valid[2] || valid[3]) lane_parts = __ldg(lane_at);
    const float parts[4] = {lane_parts.x, lane_parts.y, lane_parts.z, lane_parts.w};
    const float to_narrow = __int_as_float((127 + (int)query.fixed_shift) << 23);
    uint32_t scored = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (!valid[j]) continue;
        const uint32_t slot = ranks[j] + deltas[j] + (uint32_t)__popc(words[j] & ((1u << (docs[j] & 31u)) - 1u));
        if (slot >= kept) continue; // never with the bitmap's ranks; a wrong one must not write past the slots
        const uint32_t add = __float2uint_rn(gpu_posting_contribution(rt.weight, parts[j]) * to_narrow);
        crossings.note(atomicAdd(reinterpret_cast<uint32_t *>(acc) + slot, add), add, slot);
        scored++;
    }
    return scored;
}

// The best two keys above `above` among the slots [s_lo, s_hi) of a ranked step's unit (a range, or a bound group): from
// the step's crossing log, or where it overflowed (more slots crossed than it holds) from a scan of the unit's slots.
// key_of(slot, scanned): the slot's key, GPU_NO_CANDIDATE where it is below the floor (a logged slot never is).
template <typename KeyOf>
__device__ __forceinline__ void unit_best_two(const crossing_log &crossings, uint32_t crossed, bool overflow,
                                              uint32_t s_lo, uint32_t s_hi, uint64_t above, uint64_t &f, uint64_t &sec,
                                              KeyOf key_of) {
    const uint32_t lane = threadIdx.x & 31u;
    f = GPU_NO_CANDIDATE;
    sec = GPU_NO_CANDIDATE;
    if (!overflow) {
        for (uint32_t e = lane; e < crossed; e += 32) {
            const uint32_t slot = crossings.slots[e];
            if (slot < s_lo || slot >= s_hi) continue;
            const uint64_t key = key_of(slot, false);
            if (key > above) keep_best_two(key, f, sec);
        }
    } else {
        for (uint32_t slot = s_lo + lane; slot < s_hi; slot += 32) {
            const uint64_t key = key_of(slot, true);
            if (key > above) keep_best_two(key, f, sec);
        }
    }
}

// A ranked step's warp's selected list (warp_select's, in `mine`: keys of (score, slot)) written into the row `out` of
// its unit (a range, or a bound group) that starts at range r and spans `docs` documents: each slot's document found
// from its rank among the documents the bitmap keeps (the unit's first slot s_lo holds rank rank_start) by a search for
// the unit's last word whose rank is at most it, then that word's bit. Returns the list's length on lane 0, else 0.
__device__ __forceinline__ uint32_t write_ranked_row(const range_args &a, const uint64_t *mine, uint32_t m, uint64_t *out,
                                                     uint32_t s_lo, uint32_t rank_start, uint32_t r, uint32_t docs,
                                                     const uint32_t *rank, const uint32_t *bitmap) {
    const uint32_t lane = threadIdx.x & 31u;
    __syncwarp();
    uint32_t length = m;
    for (uint32_t j = lane; j < m; j += 32)
        if (mine[j] == GPU_NO_CANDIDATE && j < length) length = j;
    length = warp_min_u32(length);
    const uint32_t w_lo = (r * GPU_RANGE_DOCS) >> 5, w_hi = min(w_lo + docs / 32u, a.pass_words);
    for (uint32_t j = lane; j < m; j += 32) {
        if (j >= length) {
            out[j] = GPU_NO_CANDIDATE;
            continue;
        }
        const uint64_t key = mine[j];
        const uint32_t target = (uint32_t)key - s_lo + rank_start; // the document's rank among those kept
        uint32_t lo_w = w_lo, hi_w = w_hi; // the last word whose rank is at most target
        while (hi_w - lo_w > 1) {
            const uint32_t mid = (lo_w + hi_w) >> 1;
            if (__ldg(&rank[mid]) <= target) lo_w = mid;
            else hi_w = mid;
        }
        const uint32_t bit = __fns(__ldg(&bitmap[lo_w]), 0, (int)(target - __ldg(&rank[lo_w])) + 1);
        out[j] = (key & 0xFFFFFFFF00000000ull) | (lo_w * 32u + bit);
    }
    return lane == 0 ? length : 0u;
}

// A ranked step's unit reported by its warp into the unit's row `out`: its m best keys among its slots (unit_best_two),
// then their documents (write_ranked_row). Returns the row's length on lane 0, else 0.
template <typename KeyOf>
__device__ __forceinline__ uint32_t report_ranked_unit(const range_args &a, const crossing_log &crossings,
                                                       uint32_t crossed, bool overflow, uint32_t s_lo, uint32_t s_hi,
                                                       uint32_t m, uint64_t *mine, uint64_t *out, uint32_t rank_start,
                                                       uint32_t r, uint32_t docs, const uint32_t *rank,
                                                       const uint32_t *bitmap, KeyOf key_of) {
    auto best_two = [&](uint64_t above, uint64_t &f, uint64_t &sec) {
        unit_best_two(crossings, crossed, overflow, s_lo, s_hi, above, f, sec, key_of);
    };
    uint64_t first, second;
    best_two(0, first, second);
    warp_select(m, mine, first, second, best_two);
    return write_ranked_row(a, mine, m, out, s_lo, rank_start, r, docs, rank, bitmap);
}

// After a ranked step's reports: once every warp's reads of the counters are done, each thread zeroes its own.
__device__ __forceinline__ void zero_after_reports(double *acc) {
    __syncthreads();
    uint4 *words = reinterpret_cast<uint4 *>(acc);
#pragma unroll
    for (uint32_t j = 0; j < kDenseWordsPerThread; j++) words[threadIdx.x + kThreads * j] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();
}

// A ranked step's reports: warp i reports the step's range v + i (kWarps ranges at most) into its own row, as
// report_crossed would have for that range alone: its m best slots at or above the floor among the log's (or, where
// the log overflowed, among all of the range's), keyed by (score, slot), which sorts as (score, document) since a
// range's slots follow its documents; then each kept slot's document, found from its rank (the word whose rank
// holds it, then the bit). Every thread then zeroes its own counters.
__device__ uint32_t report_step(const range_args &a, const gpu_query &query, uint32_t q, double *acc, uint32_t v,
                                uint32_t nr, const uint32_t *offset, const uint32_t *rank_start, uint32_t excluded,
                                uint32_t kept, double inv_scale, const crossing_log &crossings, uint64_t *lists,
                                uint32_t list_top, const uint32_t *rank, const uint32_t *bitmap) {
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const uint32_t crossed = *crossings.count;
    const bool overflow = crossed > crossings.cap;
    if (overflow && threadIdx.x == 0) atomicAdd(&a.results[q].ranges_scanned, 1u);
    const uint32_t *counters = reinterpret_cast<const uint32_t *>(acc);
    uint32_t reported = 0;
    if (warp < nr && !((excluded >> warp) & 1u)) {
        const uint32_t r = v + warp, s_lo = offset[warp], s_hi = offset[warp + 1], m = gpu_range_reports(&query, r);
        uint64_t *mine = lists + warp * list_top;
        auto key_of = [&](uint32_t slot, bool scanned) { // a logged slot reached the floor
            return scanned && counters[slot] < crossings.at_least ? GPU_NO_CANDIDATE
                                                                  : slot_key<kNarrowAcc>(acc, slot, 0, kept, inv_scale);
        };
        uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
        reported = report_ranked_unit(a, crossings, crossed, overflow, s_lo, s_hi, m, mine, out, rank_start[warp], r,
                                      GPU_RANGE_DOCS, rank, bitmap, key_of);
    }
    zero_after_reports(acc);
    return reported;
}

// A ranked pass's counts into the query's results: each warp's postings scored and documents reported (summed over its
// lanes), and thread 0's units scored and pruned, ranges floored and steps.
__device__ __forceinline__ void add_ranked_results(const range_args &a, uint32_t q, uint32_t scored, uint32_t reported,
                                                   uint32_t units_scored, uint32_t pruned, uint32_t floored,
                                                   uint32_t steps) {
    const uint32_t lane = threadIdx.x & 31u;
    for (int d = 16; d > 0; d >>= 1) scored += __shfl_xor_sync(0xFFFFFFFFu, scored, d);
    for (int d = 16; d > 0; d >>= 1) reported += __shfl_xor_sync(0xFFFFFFFFu, reported, d);
    if (lane == 0 && scored) atomicAdd((unsigned long long *)&a.results[q].postings_scored, (unsigned long long)scored);
    if (lane == 0 && reported) atomicAdd(&a.results[q].reports, reported);
    if (threadIdx.x == 0) {
        if (units_scored) atomicAdd(&a.results[q].ranges_scored, units_scored);
        if (pruned) atomicAdd(&a.results[q].ranges_pruned, pruned);
        if (floored) atomicAdd(&a.results[q].ranges_floored, floored);
        if (steps) atomicAdd(&a.results[q].ranked_steps, steps);
    }
}

// A ranked step's extent, computed alike by every warp: from range v, at most `most_units` units of kUnit ranges (and
// the chunk's end) whose documents this round scores and the bitmap keeps number at most kSlots, the accumulator's
// slots (a unit alone always fits). Lane i gets unit i's rank at its start (rank_start) and its first slot (offset),
// lane nr the step's total; excluded: the step's units the round does not score (round 2's sampled ranges). The
// narrow kernels' units are ranges; the bound pass's are its groups of kBoundRanges ranges (report_bounds_ranked).
struct ranked_step {
    uint32_t lo, hi, nr, kept, excluded;
    uint32_t holding;            // of the nr units, those this round scores that hold a document the bitmap keeps
    uint32_t rank_start, offset; // this lane's
};

template <uint32_t kUnit = 1, uint32_t kSlots = GPU_RANGE_DOCS>
__device__ __forceinline__ ranked_step plan_ranked_step(const range_args &a, const gpu_query &query, uint32_t v,
                                                       uint32_t v_end, uint32_t limit, bool round2,
                                                       const uint32_t *rank, const uint32_t *bitmap,
                                                       uint32_t most_units) {
    constexpr uint32_t kUnitDocs = kUnit * GPU_RANGE_DOCS;
    const uint32_t lane = threadIdx.x & 31u;
    ranked_step st;
    st.lo = v * GPU_RANGE_DOCS;
    const uint32_t in_limit = st.lo < limit ? (limit - st.lo + kUnitDocs - 1) / kUnitDocs : 0u;
    const uint32_t most = v < v_end ? min(min(most_units, (v_end - v + kUnit - 1) / kUnit), in_limit) : 0u;
    const uint32_t doc = min(st.lo + min(lane, most) * kUnitDocs, limit);
    const uint32_t word = (doc + 31u) >> 5;
    uint32_t at = 0;
    if (lane <= most)
        at = word < a.pass_words ? __ldg(&rank[word])
                                 : __ldg(&rank[a.pass_words - 1u]) + __popc(__ldg(&bitmap[a.pass_words - 1u]));
    const uint32_t next = __shfl_down_sync(0xFFFFFFFFu, at, 1);
    const bool excluded = kUnit == 1 && lane < most && round2 && gpu_range_sampled(&query, v + lane);
    const uint32_t here = lane < most && !excluded ? next - at : 0u;
    const uint32_t inclusive = warp_inclusive_sum(here);
    const bool fits = lane < most && (lane == 0 || inclusive <= kSlots);
    st.nr = (uint32_t)__popc(__ballot_sync(0xFFFFFFFFu, fits));
    if constexpr (kUnit > 1) {
        // a step of groups ends at the last that holds a kept document, and leading groups that hold none are a step
        // of their own (empty: no spans, no adds): a filter that follows the documents' order (a date on a partition
        // in crawl order) keeps a run of groups, and a step that ran past it would decode postings it drops
        const uint32_t holds = __ballot_sync(0xFFFFFFFFu, lane < st.nr && here > 0);
        st.nr = holds == 0 ? st.nr : (holds & 1u) ? 32u - (uint32_t)__clz(holds) : (uint32_t)(__ffs(holds) - 1);
    }
    st.kept = st.nr ? __shfl_sync(0xFFFFFFFFu, inclusive, st.nr - 1u) : 0u;
    st.hi = st.kept ? min(st.lo + st.nr * kUnitDocs, limit) : st.lo;
    st.excluded = __ballot_sync(0xFFFFFFFFu, excluded);
    st.holding = (uint32_t)__popc(__ballot_sync(0xFFFFFFFFu, lane < st.nr && here > 0));
    st.rank_start = at;
    st.offset = lane < st.nr ? inclusive - here : st.kept;
    return st;
}

// report_unpruned's dense path (kDense, the crossing log) in ranked steps, for a query with a filter bitmap: each
// step's extent from plan_ranked_step (every warp alike), its deltas, offsets and ranks published by warp 0 a step
// ahead into the other buffer, and its ranges reported by report_step.
template <uint32_t kListTop>
__device__ void report_ranked(const range_args &a, const gpu_query &query, uint32_t q, uint32_t chunk, double *acc,
                              uint32_t *touched, uint64_t *lists, const report_floor &answer_floor, double inv_scale,
                              range_shared &s) {
    constexpr uint32_t kSpan = kMaxRankedRanges * GPU_RANGE_DOCS;
    static_assert(kMaxRankedRanges <= kWarps, "a warp reports each range of a step");
    __shared__ uint32_t step_delta[2][kMaxRankedRanges], step_offset[2][kMaxRankedRanges + 1];
    __shared__ uint32_t step_rank[2][kMaxRankedRanges];
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const uint32_t nt = query.num_terms;
    const uint32_t limit = query.doc_limit < a.num_docs ? query.doc_limit : a.num_docs;
    const bool round2 = a.round == 2;
    const uint32_t v_end = min(chunk * a.ranges_per_block + a.ranges_per_block, a.num_ranges);
    const uint32_t *rank = a.pass_rank + (size_t)(query.pass_slot - 1u) * a.pass_words;
    const uint32_t *bitmap = a.pass_bits + (size_t)(query.pass_slot - 1u) * a.pass_stride;
    // the first range at or after v this round scores, or v_end
    auto start_at = [&](uint32_t v) -> uint32_t {
        while (v < v_end && round2 && gpu_range_sampled(&query, v)) v++;
        return v;
    };
    auto publish = [&](const ranked_step &st, uint32_t b) { // warp 0
        if (lane < st.nr) {
            step_delta[b][lane] = st.offset - st.rank_start;
            step_rank[b][lane] = st.rank_start;
        }
        if (lane <= st.nr) step_offset[b][lane] = st.offset;
    };
    span_prefetch pf;
    uint32_t v = start_at(chunk * a.ranges_per_block);
    if (v >= v_end) return;
    ranked_step st = plan_ranked_step(a, query, v, v_end, limit, round2, rank, bitmap, a.ranked_ranges);
    zero_accumulator<kNarrowAcc>(acc, touched);
    if (warp == 0) publish(st, 0);
    const uint32_t span_warp = kWarps - 1 - warp;
    first_spans<kSpan>(a, query, span_warp, st.lo, st.hi, s, pf);
    __syncthreads();
    uint32_t scored = 0, ranges_scored = 0, pruned = 0, reported = 0, steps = 0;
    uint32_t *crossed_counts = touched + kCrossedSlots * sizeof(uint16_t) / sizeof(uint32_t);
    const unsigned long long floor = answer_floor.fixed;
    const uint32_t at_least = floor > UINT32_MAX ? UINT32_MAX : floor > 1u ? (uint32_t)floor : 1u;
    for (uint32_t buffer = 0;; buffer ^= 1u) {
        const uint32_t *first = s.span_first[buffer], *count = s.span_count[buffer];
        const crossing_log crossings{at_least, a.crossing_log, crossed_counts + buffer,
                                     reinterpret_cast<uint16_t *>(touched)};
        uint32_t items = 0, lane_before = 0;
        if (st.lo < st.hi) {
            const uint32_t lane_count = lane < nt ? count[lane] : 0u;
            lane_before = warp_inclusive_sum(lane_count) - lane_count;
            items = __shfl_sync(0xFFFFFFFFu, lane_before + lane_count, 31);
        }
        for (uint32_t item = warp; item < items; item += kWarps) {
            const uint32_t t = (uint32_t)__popc(__ballot_sync(0xFFFFFFFFu, lane < nt && lane_before <= item)) - 1u;
            const uint32_t rem = item - __shfl_sync(0xFFFFFFFFu, lane_before, t);
            scored += add_block_ranked(a, query, s.terms[t], first[t] + rem, st.lo, st.hi, step_delta[buffer],
                                       st.excluded, st.kept, acc, crossings);
        }
        const uint32_t v_next = start_at(v + st.nr);
        const ranked_step next = plan_ranked_step(a, query, v_next, v_end, limit, round2, rank, bitmap, a.ranked_ranges);
        if (warp == 0 && next.nr) publish(next, buffer ^ 1u);
        if (next.lo < next.hi) next_spans<kSpan>(a, nt, span_warp, next.lo, next.hi, st.lo < st.hi, s, pf, buffer ^ 1u);
        __syncthreads();
        if (tid == 0) crossed_counts[buffer ^ 1u] = 0;
        const uint32_t counted = st.nr - (uint32_t)__popc(st.excluded & ((1u << st.nr) - 1u));
        if (items) {
            reported += report_step(a, query, q, acc, v, st.nr, step_offset[buffer], step_rank[buffer], st.excluded,
                                    st.kept, inv_scale, crossings, lists, kListTop, rank, bitmap);
            ranges_scored += st.holding;
            pruned += counted - st.holding;
            steps++;
        } else {
            if (warp < st.nr && !((st.excluded >> warp) & 1u)) {
                const uint32_t r = v + warp, m = gpu_range_reports(&query, r);
                uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
                for (uint32_t j = lane; j < m; j += 32) out[j] = GPU_NO_CANDIDATE;
            }
            pruned += counted;
            __syncthreads();
        }
        if (next.nr == 0) {
            // ranges past the query's last document report nothing (their rows still say so)
            for (uint32_t r = v_next; r < v_end; r = start_at(r + 1)) {
                uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
                for (uint32_t j = tid; j < gpu_range_reports(&query, r); j += kThreads) out[j] = GPU_NO_CANDIDATE;
                pruned++;
            }
            break;
        }
        v = v_next;
        st = next;
    }
    add_ranked_results(a, q, scored, reported, ranges_scored, pruned, ranges_scored, steps);
}

// The bound pass in ranked steps, for a query with a filter bitmap (bound_report_kernel_ranked): a step covers up to
// kWarps groups of kBoundRanges ranges whose documents the bitmap keeps fit the bound counters (kBoundSpan of them),
// numbered by those documents alone as report_ranked numbers its slots. A filter keeping a scattered tenth of the
// documents puts about eight groups in a step, so what a step costs whatever its postings (its spans, two barriers,
// its report and the counters' zeroing) is paid once for eight groups, and a posting of a document the bitmap drops
// adds nothing. Each group is reported by a warp into its first range's row as report_bounds reports it, so
// bound_select_kernel and the rescore pass read what they read after the unranked pass.

// Block b of a range's term added to a ranked step's bound counters, as add_block_bounds adds: its documents in
// [lo, hi) that the bitmap keeps, each in its rank's slot less `base`, the rank of the step's first document.
__device__ __forceinline__ uint32_t add_block_bounds_ranked(const range_args &a, const range_term &rt, uint32_t b,
                                                            uint32_t lo, uint32_t hi, uint32_t base, uint32_t kept,
                                                            float scale, double *acc, const crossing_log &crossings,
                                                            const uint2 *pairs) {
    uint32_t docs[4], words[4], ranks[4];
    bool valid[4];
    const float4 *lane_at = decode_block_docs(a, rt, b, lo, hi, docs, valid);
    const uint32_t last_word = a.pass_words - 1u;
    // a document's word and its rank in one load: as two, the rank's waiting on the word's test, the step's postings
    // cost what its fewer steps saved
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint2 pair = __ldg(&pairs[min(docs[j] >> 5, last_word)]);
        words[j] = pair.x;
        ranks[j] = pair.y;
        valid[j] = valid[j] && ((words[j] >> (docs[j] & 31u)) & 1u);
    }
    float4 lane_parts = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (valid[0] || valid[1] || valid[2] || valid[3]) lane_parts = __ldg(lane_at);
    const float parts[4] = {lane_parts.x, lane_parts.y, lane_parts.z, lane_parts.w};
    uint32_t scored = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (!valid[j]) continue;
        const uint32_t slot = ranks[j] - base + (uint32_t)__popc(words[j] & ((1u << (docs[j] & 31u)) - 1u));
        if (slot >= kept) continue; // never with the bitmap's ranks; a wrong one must not write past the counters
        const uint32_t add = __float2uint_ru(__fmul_ru(gpu_posting_contribution(rt.weight, parts[j]), scale));
        const uint32_t shift = bound_shift(slot);
        const uint32_t before =
            (atomicAdd(reinterpret_cast<uint32_t *>(acc) + bound_word(slot), add << shift) >> shift) & kBoundMax;
        crossings.note(before, add, slot);
        scored++;
    }
    return scored;
}

// A ranked bound step's reports: warp i reports group i of the step (its slots [s_lo, s_hi), its first range r) into
// range r's row, as report_bounds would have for that group alone: its m best counts at or above the floor among the
// log's slots (or, where the log overflowed, among all of the group's), keyed by (count, slot), which sorts as
// (count, document); then each kept slot's document, found from its rank as report_step finds it. Every thread then
// zeroes its own counters.
__device__ uint32_t report_bounds_step(const range_args &a, const gpu_query &query, uint32_t q, double *acc,
                                       uint32_t r, bool reports, uint32_t s_lo, uint32_t s_hi, uint32_t rank_start,
                                       const crossing_log &crossings, uint64_t *lists, uint32_t list_top,
                                       const uint32_t *rank, const uint32_t *bitmap) {
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const uint32_t crossed = *crossings.count;
    const bool overflow = crossed > crossings.cap;
    if (overflow && threadIdx.x == 0) atomicAdd(&a.results[q].ranges_scanned, 1u);
    uint32_t reported = 0;
    if (reports) {
        const uint32_t m = query.range_top;
        uint64_t *mine = lists + warp * list_top;
        auto key_of = [&](uint32_t slot, bool) -> uint64_t {
            const uint32_t count = bound_count(acc, slot);
            return count >= crossings.at_least ? gpu_candidate_key(gpu_nonnegative_key((float)count), slot)
                                               : GPU_NO_CANDIDATE;
        };
        uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
        reported = report_ranked_unit(a, crossings, crossed, overflow, s_lo, s_hi, m, mine, out, rank_start, r,
                                      kBoundSpan, rank, bitmap, key_of);
    }
    zero_after_reports(acc);
    return reported;
}

// The bound pass in ranked steps (above): each step's extent from plan_ranked_step over groups (every warp alike, so
// that warp i reads group i's offsets and rank from its own lane i), its spans found a step ahead, its groups reported
// by report_bounds_step.
template <uint32_t kListTop>
__device__ void report_bounds_ranked(const range_args &a, const gpu_query &query, uint32_t q, uint32_t chunk,
                                     double *acc, uint32_t *touched, uint64_t *lists, const report_floor &answer_floor,
                                     range_shared &s) {
    constexpr uint32_t kSpan = kWarps * kBoundSpan;
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const uint32_t nt = query.num_terms;
    const uint32_t limit = query.doc_limit < a.num_docs ? query.doc_limit : a.num_docs;
    const uint32_t v_end = min(chunk * a.ranges_per_block + a.ranges_per_block, a.num_ranges);
    const uint32_t most_groups = min(a.ranked_ranges, (uint32_t)kWarps);
    const uint32_t *rank = a.pass_rank + (size_t)(query.pass_slot - 1u) * a.pass_words;
    const uint32_t *bitmap = a.pass_bits + (size_t)(query.pass_slot - 1u) * a.pass_stride;
    const uint2 *pairs = a.pass_pairs + (size_t)(query.pass_slot - 1u) * a.pass_words;
    auto plan = [&](uint32_t v) {
        return plan_ranked_step<kBoundRanges, kBoundSpan>(a, query, v, v_end, limit, false, rank, bitmap, most_groups);
    };
    auto empty_row = [&](uint32_t r, uint32_t from, uint32_t step) {
        uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
        for (uint32_t j = from; j < query.range_top; j += step) out[j] = GPU_NO_CANDIDATE;
    };
    span_prefetch pf;
    uint32_t v = chunk * a.ranges_per_block;
    if (v >= v_end) return;
    ranked_step st = plan(v);
    zero_accumulator<kNarrowAcc>(acc, touched);
    if (tid == 0) s.bound_scale = bound_scale_of(query, a.terms);
    const uint32_t span_warp = kWarps - 1 - warp;
    first_spans<kSpan>(a, query, span_warp, st.lo, st.hi, s, pf);
    __syncthreads();
    const float bound_scale = s.bound_scale;
    // an answer's count is at least its score times the scale, so at least the floor's product rounded down
    const double units = answer_floor.active ? ::floor(answer_floor.value * (double)bound_scale) : 0.0;
    const uint32_t at_least = units > 1.0 ? (uint32_t)units : 1u;
    uint32_t scored = 0, groups_scored = 0, pruned = 0, reported = 0, steps = 0;
    uint32_t *crossed_counts = touched + kCrossedSlots * sizeof(uint16_t) / sizeof(uint32_t);
    for (uint32_t buffer = 0;; buffer ^= 1u) {
        const uint32_t *first = s.span_first[buffer], *count = s.span_count[buffer];
        const crossing_log crossings{at_least, a.crossing_log, crossed_counts + buffer,
                                     reinterpret_cast<uint16_t *>(touched)};
        const uint32_t base = __shfl_sync(0xFFFFFFFFu, st.rank_start, 0);
        const bool lanes_hold_terms = nt <= 32;
        uint32_t lane_before = 0;
        const uint32_t items = st.lo < st.hi ? step_items(count, nt, lanes_hold_terms, lane_before) : 0u;
        for (uint32_t item = warp; item < items; item += kWarps) {
            uint32_t rem;
            const uint32_t t = step_item_term(item, count, nt, lanes_hold_terms, lane_before, rem);
            scored += add_block_bounds_ranked(a, s.terms[t], first[t] + rem, st.lo, st.hi, base, st.kept, bound_scale,
                                              acc, crossings, pairs);
        }
        const uint32_t v_next = v + st.nr * kBoundRanges;
        const ranked_step next = plan(v_next);
        if (next.lo < next.hi) next_spans<kSpan>(a, nt, span_warp, next.lo, next.hi, st.lo < st.hi, s, pf, buffer ^ 1u);
        __syncthreads();
        if (tid == 0) crossed_counts[buffer ^ 1u] = 0;
        // warp i's group: its slots and first rank from lane i, which planned the same step
        const uint32_t s_lo = __shfl_sync(0xFFFFFFFFu, st.offset, warp & 31u);
        const uint32_t s_hi = __shfl_sync(0xFFFFFFFFu, st.offset, (warp + 1u) & 31u);
        const uint32_t rank_start = __shfl_sync(0xFFFFFFFFu, st.rank_start, warp & 31u);
        if (items) {
            reported += report_bounds_step(a, query, q, acc, v + warp * kBoundRanges, warp < st.nr, s_lo, s_hi,
                                           rank_start, crossings, lists, kListTop, rank, bitmap);
            groups_scored += st.holding;
            pruned += st.nr - st.holding;
            steps++;
        } else {
            if (warp < st.nr) empty_row(v + warp * kBoundRanges, lane, 32);
            pruned += st.nr;
            __syncthreads();
        }
        if (next.nr == 0) {
            // groups past the query's last document report nothing (their rows still say so)
            for (uint32_t r = v_next; r < v_end; r += kBoundRanges) {
                empty_row(r, tid, kThreads);
                pruned++;
            }
            break;
        }
        v = v_next;
        st = next;
    }
    add_ranked_results(a, q, scored, reported, groups_scored, pruned, 0u, steps);
}

} // namespace

// Report pass, in two rounds. Round 1: block (x, q) scores the sampled ranges r = v * sample_stride (or the
// leading ones r = v, gpu_query.lead_ranges) for v in [x * rpb, x * rpb + rpb), pruned at the query's seed. Round 2: the ranges [x * rpb, x * rpb + rpb)
// that were not sampled, pruned at the threshold the sample gave, carrying each term's block cursor
// from range to consecutive range. kMinBlocks: the blocks a multiprocessor runs at once (the kernel's
// launch bounds), which also sizes the narrow kernels' report lists. kBounds: the bound pass (kernels.h). kPrior:
// the queries with a static prior (prior_report_kernel): each range's bounds and floor take the prior's part in
// it, and its slots are keyed by their scores with the prior. kRanked: the narrow bitmap queries with a report floor
// in ranked steps (report_ranked), and with kBounds the bound pass's bitmap queries (report_bounds_ranked).
template <int kMinBlocks, int C, bool kBounds = false, int kFilter = kFilterNever, bool kPrior = false,
          bool kRanked = false>
__device__ __forceinline__ void report_pass(range_args a) {
    extern __shared__ double acc[];
    uint8_t *aux = reinterpret_cast<uint8_t *>(acc) + acc_layout<C>::kBytes;
    __shared__ range_shared s;
    const uint32_t chunk = a.query_major ? blockIdx.y : blockIdx.x, qi = a.query_major ? blockIdx.x : blockIdx.y;
    const uint32_t q = a.query_index ? a.query_index[qi] : qi;
    const gpu_query query = a.queries[q];
    // the compact and narrow layouts' aux region holds the report lists and the touched bitmap only (accumulator_kind)
    if (C != kWideAcc && (query.and_mode || query.tree || query.fixed_shift == 0 || a.dense_report || query.num_terms > GPU_MAX_TERMS))
        __trap();
    // a query with filters in a kernel that does not test them would get documents they drop, and one without a
    // bitmap in a kernel that reads one would read another query's (cuda_launch)
    if (kFilter == kFilterNever && query.num_filters != 0) __trap();
    if (kFilter == kFilterBitmap && query.pass_slot == 0) __trap();
    // a query with a prior anywhere else would get scores without it (cuda_launch)
    if (kPrior != (query.prior_weight != 0.0f)) __trap();
    if (a.round == 2 && !gpu_two_rounds(&query)) return; // the first round scored every range
    const double inv_scale = query.fixed_shift ? __longlong_as_double((long long)(1023 - query.fixed_shift) << 52) : 0.0;
    // round 2 of an unpruned batch: the sample's k-th best report is a floor, not a pruning threshold; the leading
    // ranges' is their floor, and their pruning threshold where it is high (gpu_lead_prunes). Round 2 ends at the
    // query's stop (range_args.next: the leading ranges' tail bound, gpu_query.lead_stop).
    const uint2 course = a.round == 2 ? a.next[q] : make_uint2(a.num_ranges, 0u);
    const bool raise_floor = a.round == 2 && (query.sampled_floor || query.lead_ranges);
    const uint32_t theta = C != kWideAcc ? 0u : a.round == 1 ? query.seed_key : course.y ? a.prune[q] : 0u;
    const uint32_t floor_key = raise_floor && a.prune[q] > query.floor_key ? a.prune[q] : query.floor_key;
    // (a prior's floor may be a negative score: its ranges take theirs from gpu_prior_floor_value instead)
    const report_floor answer_floor = floor_of<C>(query, kPrior ? 0u : floor_key);
    if constexpr (C != kWideAcc) {
        if (threadIdx.x == 0 && a.round == 1 && chunk == 0)
            a.results[q].accumulator = kBounds ? ISN_GPU_ACC_BOUNDS : C;
        constexpr uint32_t kListTop = C == kNarrowAcc ? list_top_of(kMinBlocks) : GPU_MAX_RANGE_TOP;
        uint32_t *bitmap = reinterpret_cast<uint32_t *>(aux + kWarps * kListTop * sizeof(uint64_t));
        uint64_t *lists = reinterpret_cast<uint64_t *>(aux);
        if constexpr (C == kNarrowAcc && kBounds) {
            if constexpr (kRanked && kFilter == kFilterBitmap) {
                if (a.ranked_ranges <= 1) __trap(); // one range a step: bound_report_kernel_bitmap (cuda_launch)
                report_bounds_ranked<kListTop>(a, query, q, chunk, acc, bitmap, lists, answer_floor, s);
            } else {
                report_unpruned<C, true, kListTop, true, kFilter>(a, query, q, chunk, acc, bitmap, lists, answer_floor,
                                                                  inv_scale, s);
            }
            return;
        }
        if constexpr (kRanked && C == kNarrowAcc && kFilter == kFilterBitmap) { // ranked steps where it has a floor
            if (a.ranked_ranges > 1 && answer_floor.active && a.dense_floor && query.num_terms <= 32 &&
                (a.round == 2 || !gpu_two_rounds(&query))) {
                report_ranked<kListTop>(a, query, q, chunk, acc, bitmap, lists, answer_floor, inv_scale, s);
                return;
            }
        }
        // a narrow slot holds its whole sum, so the floor is one compare
        if (C == kNarrowAcc && answer_floor.active && a.dense_floor)
            report_unpruned<C, true, kListTop, false, kFilter>(a, query, q, chunk, acc, bitmap, lists, answer_floor,
                                                               inv_scale, s);
        else
            report_unpruned<C, false, kListTop, false, kFilter>(a, query, q, chunk, acc, bitmap, lists, answer_floor,
                                                                inv_scale, s);
        return;
    }
    uint32_t *touched = a.dense_report || query.and_mode || query.tree
                            ? nullptr
                            : reinterpret_cast<uint32_t *>(aux + (C != kWideAcc ? kCompactTouchedOffset : kTouchedOffset));
    if (touched != nullptr) zero_accumulator<C>(acc, touched); // the first range's span barrier orders it
    const uint32_t v0 = chunk * a.ranges_per_block;
    uint32_t scored = 0, pruned = 0, reported = 0, previous = UINT32_MAX;
    span_prefetch pf;
    const uint32_t limit = query.doc_limit < a.num_docs ? query.doc_limit : a.num_docs;
    for (uint32_t v = v0; v < v0 + a.ranges_per_block; v++) {
        if (a.round == 1 && v >= gpu_sampled_ranges(&query, a.num_ranges)) break;
        const uint32_t r = a.round == 1 ? gpu_sampled_range(&query, v) : v;
        if (r >= course.x) break; // (round 2's ranges ascend)
        if (a.round == 2 && gpu_range_sampled(&query, r)) continue;
        const uint32_t m = gpu_range_reports(&query, r);
        const uint32_t lo = r * GPU_RANGE_DOCS;
        const uint32_t hi = lo + GPU_RANGE_DOCS < limit ? lo + GPU_RANGE_DOCS : limit;
        uint64_t *out = a.reports + ((size_t)q * a.num_ranges + r) * a.report_stride;
        // No barrier here: the previous range's spans were last read before its items barrier, its report
        // lists are merged by warp kMergeWarp before it reaches this range's span barrier, and each thread's
        // clear of its own slots is ordered before any add of this range by that same span barrier.
        const bool cursor = previous != UINT32_MAX && r > previous && query.num_terms <= GPU_MAX_TERMS;
        // a range the query's filter bitmap keeps no document of is skipped as one without postings is
        const bool bitmap = kFilter == kFilterBitmap || (kFilter == kFilterIfAny && query.pass_slot != 0);
        const bool kept = !bitmap || lo >= hi || bitmap_keeps_ranges(a, query, r, 1);
        previous = lo < hi && kept ? r : UINT32_MAX;
        const double prior_add = kPrior && lo < hi ? range_prior_add(a, query, r) : 0.0;
        if (lo >= hi || !kept ||
            !score_range<C, kFilter, kPrior>(a, query, q, lo, hi, cursor, theta, acc, aux, touched, s, pf, prior_add)) {
            for (uint32_t j = threadIdx.x; j < m; j += kThreads) out[j] = GPU_NO_CANDIDATE;
            pruned++;
            continue;
        }
        scored++;
        // with a prior a slot's score adds its document's, and the floor its BM25 must reach falls by the most the
        // prior adds in the range
        const slot_prior prior = kPrior ? slot_prior{a.static_scores, query.prior_weight} : slot_prior{};
        const report_floor range_floor =
            kPrior ? floor_at<C>(query, gpu_prior_floor_value(floor_key, prior_add)) : answer_floor;
        if (touched != nullptr) {
            reported += report_touched<C>(acc, touched, lo, hi - lo, m, inv_scale, range_floor, query.fixed_shift != 0,
                                          reinterpret_cast<uint64_t *>(aux), GPU_MAX_RANGE_TOP, out, prior);
        } else {
            reported += report_range<C>(acc, lo, hi - lo, m, inv_scale, reinterpret_cast<uint64_t *>(aux), out, prior);
        }
    }
    if (threadIdx.x == 0) {
        if (a.round == 1 && chunk == 0) a.results[q].accumulator = C;
        if (scored) atomicAdd(&a.results[q].ranges_scored, scored);
        if (pruned) atomicAdd(&a.results[q].ranges_pruned, pruned);
    }
    if (threadIdx.x == kMergeWarp * 32 && reported) atomicAdd(&a.results[q].reports, reported);
}

// Rescore pass over the work list: every document whose key is at most the threshold key is a
// candidate (pruned at that key's score: no such document is skipped). kPrior: the items of the queries with a
// static prior, else the others'.
template <bool kPrior>
__device__ __forceinline__ void rescore_pass(range_args a) {
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
        if ((query.prior_weight != 0.0f) != kPrior) continue; // the other kernel's (the whole block skips it)
        const uint32_t limit = query.doc_limit < a.num_docs ? query.doc_limit : a.num_docs;
        const uint32_t lo = r * GPU_RANGE_DOCS;
        const uint32_t hi = lo + GPU_RANGE_DOCS < limit ? lo + GPU_RANGE_DOCS : limit;
        if (lo >= hi) __trap(); // the collection lists ranges with documents only (bound_select_kernel too)
        const uint64_t theta_key = a.theta_key[q];
        uint32_t *touched =
            a.dense_report || query.and_mode || query.tree ? nullptr : reinterpret_cast<uint32_t *>(aux + kTouchedOffset);
        __syncthreads();
        if (touched != nullptr && dirty) {
            zero_accumulator(acc, touched);
            __syncthreads();
        }
        dirty = touched == nullptr;
        span_prefetch pf;
        const double prior_add = kPrior ? range_prior_add(a, query, r) : 0.0;
        if (!score_range<kWideAcc, kFilterIfAny, kPrior>(a, query, q, lo, hi, false, report_score_key(theta_key), acc,
                                                         aux, touched, s, pf, prior_add))
            continue;
        const slot_prior prior = kPrior ? slot_prior{a.static_scores, query.prior_weight} : slot_prior{};
        if (threadIdx.x == 0) atomicAdd(&a.results[q].ranges_rescored, 1u);
        const double inv_scale =
            query.fixed_shift ? __longlong_as_double((long long)(1023 - query.fixed_shift) << 52) : 0.0;
        uint64_t *cands = a.cands + query.cand_offset;
        if (touched != nullptr) {
            for (uint32_t c = threadIdx.x; c < kCells; c += kThreads)
                for (uint32_t bits = touched[c]; bits; bits &= bits - 1u) {
                    const uint64_t key =
                        slot_key(acc, c * GPU_SUB_DOCS + (uint32_t)(__ffs(bits) - 1), lo, hi - lo, inv_scale, prior);
                    if (key == GPU_NO_CANDIDATE || key > theta_key) continue;
                    const uint32_t at = atomicAdd(&a.cand_count[q], 1u);
                    if (at < query.cand_cap) cands[at] = key;
                }
            clear_touched(acc, touched, query.fixed_shift != 0);
            continue;
        }
        for (int j = 0; j < kSlotsPerLane; j++) {
            const uint32_t i = warp * (kSlotsPerLane * 32) + j * 32 + lane;
            const uint64_t c = slot_key(acc, i, lo, hi - lo, inv_scale, prior);
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


__global__ void __launch_bounds__(kThreads, 3) rescore_kernel(range_args a) { rescore_pass<false>(a); }
__global__ void __launch_bounds__(kThreads, 3) rescore_prior_kernel(range_args a) { rescore_pass<true>(a); }

// The report pass's kernels, by accumulator and by the blocks a multiprocessor runs at once (the register
// budget each gets).
__global__ void __launch_bounds__(kThreads, 3) wide_report_kernel(range_args a) { report_pass<3, kWideAcc>(a); }
__global__ void __launch_bounds__(kThreads, 2) wide_report_kernel_2(range_args a) { report_pass<2, kWideAcc>(a); }
__global__ void __launch_bounds__(kThreads, 4) compact_report_kernel(range_args a) { report_pass<4, kCompactAcc>(a); }
__global__ void __launch_bounds__(kThreads, 5) narrow_report_kernel(range_args a) { report_pass<5, kNarrowAcc>(a); }
__global__ void __launch_bounds__(kThreads, 6) short_report_kernel(range_args a) { report_pass<6, kNarrowAcc>(a); }
// the bound pass (kernels.h): six blocks a multiprocessor, as the short kernel, with its short report lists
__global__ void __launch_bounds__(kThreads, 6) bound_report_kernel(range_args a) { report_pass<6, kNarrowAcc, true>(a); }
// and for the queries with filters (kernels.h); their short kernels five blocks a multiprocessor, not six: a
// filter's test holds more of the posting loop in registers, which at six blocks' 40 spilled (measured faster at
// five on an H200, filtered top-10 on the 20M partition; the unfiltered ones measured the same at five). The bound
// kernels test no posting (add_block_bounds), so they run six as the plain one.
__global__ void __launch_bounds__(kThreads, 3) wide_report_kernel_filtered(range_args a) {
    report_pass<3, kWideAcc, false, kFilterAlways>(a);
}
__global__ void __launch_bounds__(kThreads, 2) wide_report_kernel_2_filtered(range_args a) {
    report_pass<2, kWideAcc, false, kFilterAlways>(a);
}
__global__ void __launch_bounds__(kThreads, 4) compact_report_kernel_filtered(range_args a) {
    report_pass<4, kCompactAcc, false, kFilterAlways>(a);
}
__global__ void __launch_bounds__(kThreads, 5) narrow_report_kernel_filtered(range_args a) {
    report_pass<5, kNarrowAcc, false, kFilterAlways>(a);
}
__global__ void __launch_bounds__(kThreads, 5) short_report_kernel_filtered(range_args a) {
    report_pass<6, kNarrowAcc, false, kFilterAlways>(a);
}
__global__ void __launch_bounds__(kThreads, 6) bound_report_kernel_filtered(range_args a) {
    report_pass<6, kNarrowAcc, true, kFilterAlways>(a);
}
// and for those with a filter bitmap (gpu_query.pass_slot), the short one at six blocks as the plain one: its test is
// one bit, and since the bound pass took top-k up to kBoundMaxK it serves larger k (top 1,000), where six blocks in
// 40 registers, spilling a little, measured faster on an H200 than five in 48 without spills
__global__ void __launch_bounds__(kThreads, 3) wide_report_kernel_bitmap(range_args a) {
    report_pass<3, kWideAcc, false, kFilterBitmap>(a);
}
__global__ void __launch_bounds__(kThreads, 2) wide_report_kernel_2_bitmap(range_args a) {
    report_pass<2, kWideAcc, false, kFilterBitmap>(a);
}
__global__ void __launch_bounds__(kThreads, 4) compact_report_kernel_bitmap(range_args a) {
    report_pass<4, kCompactAcc, false, kFilterBitmap>(a);
}
__global__ void __launch_bounds__(kThreads, 5) narrow_report_kernel_bitmap(range_args a) {
    report_pass<5, kNarrowAcc, false, kFilterBitmap>(a);
}
__global__ void __launch_bounds__(kThreads, 6) short_report_kernel_bitmap(range_args a) {
    report_pass<6, kNarrowAcc, false, kFilterBitmap>(a);
}
// and the same with ranked steps (report_ranked) for those of them with a floor (round 2, or a single round): five
// blocks a multiprocessor in 48 registers, which the rank, the word and the delta of a lane's documents take
__global__ void __launch_bounds__(kThreads, 5) short_report_kernel_ranked(range_args a) {
    report_pass<6, kNarrowAcc, false, kFilterBitmap, false, true>(a);
}
__global__ void __launch_bounds__(kThreads, 5) narrow_report_kernel_ranked(range_args a) {
    report_pass<5, kNarrowAcc, false, kFilterBitmap, false, true>(a);
}
__global__ void __launch_bounds__(kThreads, 6) bound_report_kernel_bitmap(range_args a) {
    report_pass<6, kNarrowAcc, true, kFilterBitmap>(a);
}
// and the same in ranked steps (report_bounds_ranked)
__global__ void __launch_bounds__(kThreads, 6) bound_report_kernel_ranked(range_args a) {
    report_pass<6, kNarrowAcc, true, kFilterBitmap, false, true>(a);
}
// the queries with a static prior, filtered or not, each tested as it says (its bitmap or the columns)
__global__ void __launch_bounds__(kThreads, 3) prior_report_kernel(range_args a) {
    report_pass<3, kWideAcc, false, kFilterIfAny, true>(a);
}

} // namespace first_stage
