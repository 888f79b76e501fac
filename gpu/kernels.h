// Private to gpu/: the CUDA first stage's kernels as the host side (first_stage_device.cu) launches them:
// their shapes (threads, shared memory), their arguments, and the accumulator layouts the host picks per
// query. The kernels live in report_kernels.cu (the range passes), candidate_kernels.cu (thresholds,
// collection, the final sort), probe_kernel.cu (conjunctive probing) and pass_bitmap_kernel.cu (the filters
// evaluated once for every document); range_blocks.cuh holds the device code they share. CUDA C++ only.
#ifndef ISN_GPU_KERNELS_H
#define ISN_GPU_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "gpu/device.h"
}

namespace first_stage {

#ifndef ISN_GPU_RANGE_THREADS
#define ISN_GPU_RANGE_THREADS 256
#endif
constexpr int kThreads = ISN_GPU_RANGE_THREADS;
constexpr int kWarps = kThreads / 32;
// The warp that merges the warps' report lists of a range (merge_warp_lists): the next range's adds wait for
// it, and items go to warps from the first, so the last warp has the fewest.
constexpr uint32_t kMergeWarp = kWarps - 1;
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
// The compact and narrow accumulators' report blocks (compact_, narrow_ and short_report_kernel):
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
// report_crossed's log of the slots whose sums reached a narrow range's floor: at most this many a range
constexpr uint32_t kCrossedSlots = 256;
__host__ __device__ constexpr uint32_t list_top_of(int blocks) { return blocks >= 6 ? kShortListTop : GPU_MAX_RANGE_TOP; }
constexpr size_t narrow_touched_offset(int blocks) { return kWarps * list_top_of(blocks) * sizeof(uint64_t); }
constexpr size_t narrow_shared_bytes(int blocks) {
    return GPU_RANGE_DOCS * sizeof(uint32_t) + narrow_touched_offset(blocks) + kCells * sizeof(uint32_t);
}
// The bound pass: unpruned narrow queries of one round whose report lists are short (the short kernel's) are
// scored first over groups of kBoundRanges ranges, each document's sum of its postings' contributions
// rounded up to whole units in a kBoundBits-bit counter (kBoundRanges of them a 32-bit word, so a group's
// documents fill the narrow kernel's accumulator) and reported by that upper bound. bound_select_kernel
// takes the k-th best bound of the query's reports: the k documents at or above it score more than it less
// one unit a term, so every answer's bound is above that cut. The ranges of the groups that hold a bound
// at the cut (in practice a few more than k) are scored exactly by the rescore pass, at the cut's score as
// the threshold; the others hold no answer. A group costs the range work of one range (its spans, barriers
// and report) for kBoundRanges times the documents; coarser counters cut more ranges but rescore more.
constexpr uint32_t kBoundRanges = GPU_BOUND_RANGES;
constexpr uint32_t kBoundBits = 32 / kBoundRanges;
constexpr uint32_t kBoundMax = (1u << kBoundBits) - 1u; // a count's largest value (gpu_bound_max)
static_assert(kBoundRanges >= 2 && kBoundRanges <= 3, "counters of 16 or 10 bits");
static_assert(kBoundMax > 8 * GPU_MAX_TERMS, "a query's maxima span many units (bound_scale_of)");
constexpr uint32_t kBoundSpan = kBoundRanges * GPU_RANGE_DOCS;
// The largest k the bound pass takes: past it the rescore of the ranges near the k-th bound (about k of them)
// costs more than the pass saves at small batches.
constexpr uint32_t kBoundMaxK = GPU_BOUND_MAX_K;
static_assert(GPU_BOUND_RANGE_TOP == kShortListTop, "the bound pass reports as the short kernel does");
constexpr int kProbeThreads = 256;
constexpr int kProbeWarps = kProbeThreads / 32;
// select_collect_kernel's keys in shared memory and its threads; sort_gather_kernel's block (threads, keys a thread)
constexpr uint32_t kSelectKeys = 8192, kSelectThreads = 1024;
constexpr int kSortThreads = 256, kSortItems = 8;
constexpr uint32_t kSortKeys = kSortThreads * kSortItems;

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
    // per query, from sample_threshold_kernel: x the range the second round stops at (gpu_query.lead_stop; the
    // partition's ranges for other queries), y nonzero where it prunes at prune[q] (else that is its floor)
    const uint2 *next;
    const uint64_t *theta_key;
    uint64_t *cands; // the pool: query q's segment at queries[q].cand_offset
    uint32_t *cand_count;
    uint2 *work; // (query, range) pairs for the rescore pass
    uint32_t *work_count;
    uint32_t dense_report; // nonzero: disjunctive ranges zero and scan every slot too (ISN_GPU_DENSE_REPORT, to compare)
    uint32_t dense_floor;  // nonzero: narrow ranges with a floor are reported without their bitmap (ISN_GPU_DENSE_FLOOR=0: never)
    uint32_t crossing_log; // such a range's slots that reached the floor kept for its report, at most (report_crossed)
    const uint32_t *query_index; // report blocks: the grid's query index's query (nullptr: that index itself)
    // report blocks: the grid's x is the query and y the block of ranges (else the other way round), so the
    // blocks that run at once are the batch's queries over the same ranges, which read the blocks of the
    // lists they share while those are still in L2
    uint32_t query_major;
    // the resident attribute columns and the batch's filters (gpu_query.filter_begin: filter_lane)
    const uint32_t *attribute_words;
    const gpu_filter *filters;
    const uint32_t *filter_values;
    // the stream's filter bitmaps (gpu_query.pass_slot), pass_stride words apart: pass_words of documents' bits, then
    // the ranges' (gpu_pass_stride)
    const uint32_t *pass_bits;
    uint32_t pass_words, pass_stride;
    // per filter bitmap, the documents it keeps before each of its words (pass_words a bitmap, pass_popcount_kernel),
    // and the ranges a ranked step of its queries covers at most (report_kernels.cu; 0 or 1: one range a step)
    const uint32_t *pass_rank;
    uint32_t ranked_ranges;
    // the same bitmaps' words beside their ranks (pass_words pairs a bitmap), which the bound pass's ranked steps read
    const uint2 *pass_pairs;
    // the static scores and each range's largest, then the ranges' tail bounds (gpu_upload's; null without them),
    // for the queries with a prior (gpu_query.prior_weight), which only prior_report_kernel and rescore_prior_kernel
    // serve
    const float *static_scores;
    const float *range_prior_max;
};

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
    // the driver's documents that fail the query's filters are dropped (range_args's)
    const uint32_t *attribute_words;
    const gpu_filter *filters;
    const uint32_t *filter_values;
    const float *static_scores; // a query with a prior keys its documents by their score with it (range_args's)
};


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


// The kernels. The report pass has one per accumulator: wide (three blocks a multiprocessor, or two with
// more registers each: ISN_GPU_REPORT_BLOCKS), compact (four), narrow (five) and narrow with short report
// lists (six, kShortListTop); and each again for the queries with filters (_filtered: they test each posting's
// document on the attribute columns, gpu_query.filter_begin) and for those with a filter bitmap (_bitmap: a bit a
// posting, gpu_query.pass_slot), so that the unfiltered kernels' code and registers stay as they were.
__global__ void wide_report_kernel(range_args a);
__global__ void wide_report_kernel_2(range_args a);
__global__ void compact_report_kernel(range_args a);
__global__ void narrow_report_kernel(range_args a);
__global__ void short_report_kernel(range_args a);
__global__ void bound_report_kernel(range_args a);
__global__ void wide_report_kernel_filtered(range_args a);
__global__ void wide_report_kernel_2_filtered(range_args a);
__global__ void compact_report_kernel_filtered(range_args a);
__global__ void narrow_report_kernel_filtered(range_args a);
__global__ void short_report_kernel_filtered(range_args a);
__global__ void bound_report_kernel_filtered(range_args a);
__global__ void wide_report_kernel_bitmap(range_args a);
__global__ void wide_report_kernel_2_bitmap(range_args a);
__global__ void compact_report_kernel_bitmap(range_args a);
__global__ void narrow_report_kernel_bitmap(range_args a);
__global__ void short_report_kernel_bitmap(range_args a);
// the short and narrow kernels of the queries with a filter bitmap, in ranked steps where a query has a floor
__global__ void short_report_kernel_ranked(range_args a);
__global__ void narrow_report_kernel_ranked(range_args a);
__global__ void bound_report_kernel_bitmap(range_args a);
// the bound pass's queries with a filter bitmap in ranked steps (ISN_GPU_RANKED, the default)
__global__ void bound_report_kernel_ranked(range_args a);
// The queries with a static prior (gpu_query.prior_weight) have report and rescore kernels of their own, so that
// the others' code and registers stay as they were: the wide accumulator, the filters tested as the query says
// (columns or its bitmap), every bound with the prior's part of the range added, every slot keyed by its score
// with the prior. rescore_kernel passes over their items of the work list, rescore_prior_kernel over the others'.
__global__ void prior_report_kernel(range_args a);
__global__ void rescore_kernel(range_args a);
__global__ void rescore_prior_kernel(range_args a);
__global__ void sample_threshold_kernel(const gpu_query *queries, const gpu_term *terms, const uint64_t *reports,
                                        uint32_t num_docs, uint32_t report_stride, gpu_tail_view tails,
                                        gpu_query_result *results, uint32_t *prune, uint2 *next);
__global__ void select_collect_kernel(const gpu_query *queries, const uint64_t *reports, uint32_t num_ranges,
                                      uint32_t report_stride, const uint2 *next, const uint64_t *preset_theta,
                                      uint64_t *theta_key, uint64_t *cands, uint32_t *cand_count, uint2 *work,
                                      uint32_t *work_count);
__global__ void bound_select_kernel(const gpu_query *queries, const gpu_term *terms, const uint32_t *query_index,
                                    uint64_t *reports, uint32_t num_ranges, uint32_t report_stride,
                                    uint64_t *preset_theta);
__global__ void collect_kernel(const gpu_query *queries, const uint64_t *reports, uint32_t num_ranges, uint32_t stride,
                               const uint2 *next, const uint64_t *theta_key, const uint32_t *retry, uint64_t *cands,
                               uint32_t *cand_count, uint2 *work, uint32_t *work_count);
__global__ void tighten_kernel(const gpu_query *queries, uint32_t num_queries, uint32_t num_range_queries,
                               const uint64_t *sorted, uint32_t *cand_count, uint64_t *theta_key, uint32_t *retry);
__global__ void probe_kernel(probe_args a);
// A batch's streamed lists (stage_kernel.cu): lists[blockIdx.y] from the host's layout (mapped host memory: host_*)
// into the device's payload, block metadata and suffix maxima (suffix and host_suffix null without them).
struct stage_args {
    const gpu_stage_list *lists;
    const uint8_t *host_payload;
    const isn_block_meta *host_blocks;
    const float *host_suffix;
    uint8_t *payload;
    isn_block_meta *blocks;
    float *suffix;
};
constexpr uint32_t kStageThreads = 256;
constexpr uint32_t kStageBlocksPerList = 64;
__global__ void stage_gather_kernel(stage_args a);
// A filter bitmap (gpu_pass_word), a word a thread: words [0, num_words) of out for the filters of one query.
__global__ void pass_bitmap_kernel(const uint32_t *attribute_words, const gpu_filter *filters, uint32_t num_filters,
                                   const uint32_t *values, uint32_t num_docs, uint32_t num_words, uint32_t *out);
// Its range bits (gpu_pass_range_word), a block a word of them, a warp a range: word blockIdx.x of out; and into
// *empty, zeroed before, how many ranges keep nothing (gpu_pass_empty_ranges).
__global__ void pass_ranges_kernel(const uint32_t *doc_words, uint32_t num_doc_words, uint32_t num_ranges, uint32_t *out,
                                   uint32_t *empty);
// The ranges a ranked step covers at most (a warp reports each; ISN_GPU_RANKED, the default): more only when the
// documents the bitmap keeps in them fit an accumulator's slots.
constexpr uint32_t kMaxRankedRanges = 8;
// Each word's popcount, which cub's exclusive sum in place turns into the bitmap's ranks (range_args.pass_rank): the
// documents it keeps before each word.
__global__ void pass_popcount_kernel(const uint32_t *doc_words, uint32_t num_words, uint32_t *out);
// Each word of a bitmap beside its rank (range_args.pass_pairs), so that a posting's test and its rank are one load.
__global__ void pass_pairs_kernel(const uint32_t *doc_words, const uint32_t *rank, uint32_t num_words, uint2 *out);
__global__ void segments_kernel(const gpu_query *queries, const uint32_t *cand_count, uint32_t num_queries, int *begin,
                                int *end);
__global__ void sort_gather_kernel(const gpu_query *queries, const uint64_t *cands, const uint32_t *cand_count,
                                   uint64_t *sorted, gpu_query_result *results, isn_hit *hits);
__global__ void gather_kernel(const gpu_query *queries, const uint64_t *sorted, const uint32_t *cand_count,
                              gpu_query_result *results, isn_hit *hits);

} // namespace first_stage

#endif
