// The first stage's candidate kernels (kernels.h): the thresholds from the range reports, the collection of
// candidates (and of the ranges to score again), the tightening after an overflow, and the final sort and
// gather of each query's best k.
#include <cub/block/block_radix_sort.cuh>

#include "gpu/range_blocks.cuh"

namespace first_stage {

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
// Then the second round's course (range_args.next): for a query with leading ranges, the first range whose tail
// bound cannot reach that threshold, where its passes stop (gpu_query.lead_stop), and whether they prune
// (gpu_lead_prunes); for the others, every range, pruned unless the sample's k-th best is only a floor.
// The first range in [from, to) whose tail bound is below theta_key (gpu_range_tail_stop's), by the whole block: the
// bound falls as ranges rise, so one range a thread at a stride of (to - from) / threads finds the stride the first
// lies in, and one a thread of that stride the range (a thread's bound searches each list's blocks: dependent loads
// that one thread's binary search would chain a dozen times over).
__device__ uint32_t block_tail_stop(const gpu_query &query, const gpu_term *terms, const gpu_tail_view &tails,
                                    uint32_t from, uint32_t to, uint32_t theta_key, uint32_t &s_first) {
    const uint32_t threads = blockDim.x;
    const uint32_t step = from < to ? (to - from + threads - 1) / threads : 1u;
    if (threadIdx.x == 0) s_first = to;
    __syncthreads();
    const uint32_t r = from + threadIdx.x * step;
    if (r < to && gpu_range_tail_below(&query, terms, &tails, r, theta_key)) atomicMin(&s_first, r);
    __syncthreads();
    const uint32_t first = s_first;
    // not below: the sampled range before `first` (or the last sampled one, when none is below)
    const uint32_t last_sampled = from < to ? from + (to - from - 1) / step * step : from;
    const uint32_t lo = first == to ? last_sampled + 1u : first > from ? first - step + 1u : from;
    __syncthreads();
    for (uint32_t x = lo + threadIdx.x; x < first; x += threads)
        if (gpu_range_tail_below(&query, terms, &tails, x, theta_key)) atomicMin(&s_first, x);
    __syncthreads();
    return s_first;
}

__global__ void __launch_bounds__(256) sample_threshold_kernel(const gpu_query *queries, const gpu_term *terms,
                                                               const uint64_t *reports, uint32_t num_docs,
                                                               uint32_t report_stride, gpu_tail_view tails,
                                                               gpu_query_result *results, uint32_t *prune,
                                                               uint2 *next) {
    __shared__ select_shared sh;
    __shared__ uint32_t s_first;
    const uint32_t q = blockIdx.x, num_ranges = tails.num_ranges;
    const gpu_query query = queries[q];
    // the sampled ranges all report as many: the leading ones lead_top, a strided sample's range_top
    const uint32_t m = gpu_range_reports(&query, 0), step = gpu_sampled_range(&query, 1);
    const uint32_t sampled = gpu_sampled_ranges(&query, num_ranges), total = sampled * m;
    uint32_t theta = query.seed_key;
    if (gpu_two_rounds(&query) && query.k <= total) {
        const uint64_t *mine = reports + (size_t)q * num_ranges * report_stride;
        const uint64_t kth = block_select(
            [&](uint32_t i) { return mine[(size_t)(i / m) * step * report_stride + i % m] >> 32; }, total, query.k, sh,
            24);
        const uint32_t key = ~(uint32_t)kth;
        theta = key > theta ? key : theta;
    }
    uint2 course = make_uint2(num_ranges, query.sampled_floor ? 0u : 1u);
    if (query.lead_ranges && query.lead_stop) { // (every thread: the block searches)
        const uint32_t limit = query.doc_limit < num_docs ? query.doc_limit : num_docs;
        const uint32_t covered = (limit + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
        course.x = block_tail_stop(query, terms, tails, query.lead_ranges, covered, gpu_lead_stop_key(&query, theta),
                                   s_first);
        if (threadIdx.x == 0) results[q].ranges_stopped = covered - course.x;
    }
    if (threadIdx.x != 0) return;
    if (query.lead_ranges) course.y = gpu_lead_prunes(&query, terms, &tails, theta);
    prune[q] = theta;
    next[q] = course;
}

// Reports with keys at most the threshold key become candidates of query q; ranges whose every report is
// within it go on the rescore work list instead (their reports are not taken: the rescore gives all
// their candidates).
// Only the ranges below the query's stop (range_args.next) were reported.
__device__ void collect_query(const gpu_query *queries, uint32_t q, const uint64_t *reports, uint32_t num_ranges,
                              uint32_t stride, uint32_t stop, uint64_t th, uint64_t *cands, uint32_t *cand_count,
                              uint2 *work, uint32_t *work_count, uint32_t &s_count) {
    const gpu_query *query = &queries[q];
    const uint32_t cand_cap = query->cand_cap;
    if (threadIdx.x == 0) s_count = 0;
    __syncthreads();
    uint64_t *out = cands + query->cand_offset;
    for (uint32_t r = threadIdx.x; r < stop; r += blockDim.x) {
        const uint32_t m = gpu_range_reports(query, r);
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

// How many of the n keys are below `key`: with distinct keys, its rank from 0 (block_rank_select and
// sort_gather_kernel's one-pass sort).
__device__ __forceinline__ uint32_t keys_below(const uint64_t *keys, uint32_t n, uint64_t key) {
    uint32_t below = 0;
    for (uint32_t j = 0; j < n; j++) below += keys[j] < key;
    return below;
}

// The rank-th smallest (from 1) of n distinct keys in shared memory, n at most the block's threads: each
// thread counts the keys below its own, one pass over them (a few microseconds where the radix rounds of
// block_select, each behind barriers, take several times that: this runs once per query per batch, on the
// batch's critical path). GPU_NO_CANDIDATE when no key has that rank.
__device__ uint64_t block_rank_select(const uint64_t *keys, uint32_t n, uint32_t rank, uint64_t &s_found) {
    if (threadIdx.x == 0) s_found = GPU_NO_CANDIDATE;
    __syncthreads();
    if (threadIdx.x < n) {
        const uint64_t mine = keys[threadIdx.x];
        if (keys_below(keys, n, mine) == rank - 1) s_found = mine;
    }
    __syncthreads();
    return s_found;
}

// Per range query: the threshold key, then the collection (collect_query). The threshold is the k-th
// smallest report key (GPU_NO_CANDIDATE when fewer than k documents were reported): k real documents have
// keys at most this, so every answer's key is too; so is the floor's key (answers reach the floor), and
// the lower of the two is taken. The real reports (not padding) are first gathered into shared memory,
// where the rank select (up to a key a thread) or the radix rounds then read them, when they fit
// (kSelectKeys; with a floor a range reports only what reaches it, so most slots are padding).
// A query of the bound pass comes with its threshold key (preset_theta, nonzero) and its reports marked
// (bound_select_kernel): only the collection.
__global__ void __launch_bounds__(kSelectThreads) select_collect_kernel(const gpu_query *queries, const uint64_t *reports,
                                                             uint32_t num_ranges, uint32_t report_stride,
                                                             const uint2 *next, const uint64_t *preset_theta,
                                                             uint64_t *theta_key, uint64_t *cands, uint32_t *cand_count,
                                                             uint2 *work, uint32_t *work_count) {
    extern __shared__ uint64_t kept_keys[]; // kSelectKeys
    __shared__ select_shared sh;
    __shared__ uint32_t s_kept, s_count;
    __shared__ uint64_t s_theta, s_found;
    const uint32_t q = blockIdx.x, lane = threadIdx.x & 31u;
    const uint32_t stop = next[q].x;
    if (preset_theta[q] != 0) {
        if (threadIdx.x == 0) theta_key[q] = preset_theta[q];
        collect_query(queries, q, reports, num_ranges, report_stride, stop, preset_theta[q], cands, cand_count, work,
                      work_count, s_count);
        return;
    }
    const gpu_query query = queries[q];
    // the reports of the ranges below the stop laid end to end, each range its count (gpu_report_place)
    const uint32_t total = gpu_reports_before(&query, stop);
    const uint64_t *mine = reports + (size_t)q * num_ranges * report_stride;
    auto report_at = [&](uint32_t i) {
        uint32_t r, j;
        gpu_report_place(&query, i, &r, &j);
        return mine[(size_t)r * report_stride + j];
    };
    const uint64_t floor_key = gpu_floor_candidate_key(query.floor_key);
    if (threadIdx.x == 0) {
        s_kept = 0;
        s_theta = floor_key;
    }
    __syncthreads();
    if (query.k <= total) {
        for (uint32_t base = 0; base < total; base += blockDim.x) {
            const uint32_t i = base + threadIdx.x;
            const uint64_t key = i < total ? report_at(i) : GPU_NO_CANDIDATE;
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
            const uint64_t kth = kept <= kSelectThreads ? block_rank_select(kept_keys, kept, query.k, s_found)
                                 : kept <= kSelectKeys
                                     ? block_select([&](uint32_t i) { return kept_keys[i]; }, kept, query.k, sh)
                                     : block_select(report_at, total, query.k, sh);
            if (threadIdx.x == 0 && kth < floor_key) s_theta = kth;
        }
    }
    __syncthreads();
    const uint64_t th = s_theta;
    if (threadIdx.x == 0) theta_key[q] = th;
    collect_query(queries, q, reports, num_ranges, report_stride, stop, th, cands, cand_count, work, work_count,
                  s_count);
}

// The bound pass's threshold (kernels.h), a block for each of its queries (query_index): T, the k-th best
// count among the groups' reports (reported into a group's first range), and the cut T - terms - 1. The k
// documents with counts at least T score more than T - terms units (each term's add exceeds its share by
// less than one), so the k-th best score is above that, and so is every answer's score and count: a range
// with no count at the cut holds no answer, and an answer scores at least the cut's score (cut / scale,
// rounded down). So the query's threshold key is that score's (or the floor's, when lower, or when fewer
// than k documents were reported), and its reports become marks: key 0 (saturated: the collection rescores
// the range exactly, collect_query) for each range of a group that may hold a count at the cut, the others
// empty. A group whose reports all reach the cut may hold more such counts than it reported, so all its
// ranges below the query's doc_limit; else exactly the ranges of its reports at the cut.
__global__ void __launch_bounds__(kSelectThreads) bound_select_kernel(const gpu_query *queries, const gpu_term *terms,
                                                                      const uint32_t *query_index, uint64_t *reports,
                                                                      uint32_t num_ranges, uint32_t report_stride,
                                                                      uint64_t *preset_theta) {
    extern __shared__ uint64_t kept_keys[]; // kSelectKeys
    __shared__ select_shared sh;
    __shared__ uint32_t s_kept;
    __shared__ uint64_t s_kth, s_found;
    const uint32_t q = query_index[blockIdx.x], lane = threadIdx.x & 31u;
    const gpu_query query = queries[q];
    const uint32_t m = query.range_top, groups = (num_ranges + kBoundRanges - 1) / kBoundRanges, total = groups * m;
    uint64_t *mine = reports + (size_t)q * num_ranges * report_stride;
    auto report_at = [&](uint32_t i) { return mine[(size_t)(i / m) * kBoundRanges * report_stride + i % m]; };
    auto count_of = [](uint64_t key) { return (uint32_t)gpu_candidate_score(key); };
    if (threadIdx.x == 0) {
        s_kept = 0;
        s_kth = GPU_NO_CANDIDATE;
    }
    __syncthreads();
    if (query.k <= total) {
        for (uint32_t base = 0; base < total; base += blockDim.x) {
            const uint32_t i = base + threadIdx.x;
            const uint64_t key = i < total ? report_at(i) : GPU_NO_CANDIDATE;
            const uint32_t real = __ballot_sync(0xFFFFFFFFu, key != GPU_NO_CANDIDATE);
            uint32_t at = 0;
            if (lane == 0 && real) at = atomicAdd(&s_kept, (uint32_t)__popc(real));
            at = __shfl_sync(0xFFFFFFFFu, at, 0) + (uint32_t)__popc(real & ((1u << lane) - 1u));
            if (key != GPU_NO_CANDIDATE && at < kSelectKeys) kept_keys[at] = key;
        }
        __syncthreads();
        const uint32_t kept = s_kept;
        if (kept >= query.k) {
            const uint64_t kth = kept <= kSelectThreads ? block_rank_select(kept_keys, kept, query.k, s_found)
                                 : kept <= kSelectKeys
                                     ? block_select([&](uint32_t i) { return kept_keys[i]; }, kept, query.k, sh)
                                     : block_select(report_at, total, query.k, sh);
            if (threadIdx.x == 0) s_kth = kth;
        }
    }
    __syncthreads();
    const uint64_t kth = s_kth;
    const uint32_t top = kth == GPU_NO_CANDIDATE ? 0u : count_of(kth);
    const uint32_t cut = top > query.num_terms + 1 ? top - query.num_terms - 1 : 0u;
    uint64_t theta = gpu_floor_candidate_key(query.floor_key);
    if (cut) {
        const float score = __double2float_rd(__ddiv_rd((double)cut, (double)bound_scale_of(query, terms)));
        const uint64_t key = gpu_candidate_key(gpu_float_key(score), UINT32_MAX);
        theta = key < theta ? key : theta;
    }
    if (threadIdx.x == 0) preset_theta[q] = theta; // never 0: a key of a score with document UINT32_MAX
    for (uint32_t g = threadIdx.x; g < groups; g += blockDim.x) {
        uint64_t *first = mine + (size_t)g * kBoundRanges * report_stride;
        const uint64_t last = first[m - 1];
        uint32_t marked = 0; // bit j: range j of the group
        if (last != GPU_NO_CANDIDATE && count_of(last) >= cut) {
            for (uint32_t r = 0; r < kBoundRanges; r++)
                if ((g * kBoundRanges + r) * GPU_RANGE_DOCS < query.doc_limit) marked |= 1u << r;
        } else {
            for (uint32_t j = 0; j < m; j++) {
                const uint64_t c = first[j];
                if (c == GPU_NO_CANDIDATE || count_of(c) < cut) break;
                marked |= 1u << ((uint32_t)c / GPU_RANGE_DOCS - g * kBoundRanges);
            }
        }
        for (uint32_t r = 0; r < kBoundRanges && g * kBoundRanges + r < num_ranges; r++) {
            const uint64_t mark = marked >> r & 1u ? 0u : GPU_NO_CANDIDATE;
            for (uint32_t j = 0; j < m; j++) first[(size_t)r * report_stride + j] = mark;
        }
    }
}

// collect_query for every range query, or with `retry` only the flagged ones (after an overflow, with a
// tighter threshold key).
__global__ void __launch_bounds__(256) collect_kernel(const gpu_query *queries, const uint64_t *reports,
                                                      uint32_t num_ranges, uint32_t stride, const uint2 *next,
                                                      const uint64_t *theta_key, const uint32_t *retry, uint64_t *cands,
                                                      uint32_t *cand_count, uint2 *work, uint32_t *work_count) {
    __shared__ uint32_t s_count;
    const uint32_t q = blockIdx.x;
    if (retry != nullptr && retry[q] == 0) return;
    collect_query(queries, q, reports, num_ranges, stride, next[q].x, theta_key[q], cands, cand_count, work, work_count,
                  s_count);
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
    uint64_t *out = sorted + query.cand_offset;
    isn_hit *hit = hits + query.hit_offset;
    if (threadIdx.x == 0) {
        results[q].num_hits = n;
        results[q].candidates = count;
    }
    if (kept <= kSortThreads) {
        // a thread a key, placed by its rank (keys are distinct): one pass where the radix sort takes eight
        if (threadIdx.x < kept) picked[threadIdx.x] = mine[threadIdx.x];
        __syncthreads();
        if (threadIdx.x < kept) {
            const uint64_t key = picked[threadIdx.x];
            const uint32_t rank = keys_below(picked, kept, key);
            out[rank] = key;
            if (rank < n) hit[rank] = isn_hit{(uint32_t)key, gpu_candidate_score(key)};
        }
        return;
    }
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
#pragma unroll
    for (int j = 0; j < kSortItems; j++) {
        const uint32_t i = threadIdx.x * kSortItems + j;
        if (i < sorting) out[i] = keys[j];
        if (i < n) hit[i] = isn_hit{(uint32_t)keys[j], gpu_candidate_score(keys[j])};
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
        h.score = gpu_candidate_score(key);
        out[i] = h;
    }
}

} // namespace first_stage
