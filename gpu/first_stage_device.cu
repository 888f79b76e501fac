// The CUDA first-stage device, host side (the kernels: kernels.h): the partition resident in device memory
// (in the device layout, device.h), and per batch a fixed sequence on two streams (stream_buffers: 1, 2 and
// 5 on the bulk one, the rest on the finishing one):
//  1. copy the batch in;
//  2. report pass: every (query, range) is scored once into a shared-memory accumulator and reports
//     its range_top best documents (score desc, doc asc) at or above the query's floor, if it has one,
//     as candidate keys. A query without the CPU's floor scores a sample of its ranges first, and the
//     sample's k-th best report is the other ranges' floor (gpu_query.sampled_floor); a query with a static
//     prior in global order scores its leading ranges first and prunes the others at their k-th best report
//     (gpu_query.lead_ranges);
//  3. the k-th best report per query, or the floor if lower, is the threshold theta (a lower bound of
//     the answer's k-th score: reports are scores of distinct documents, and every answer reaches the
//     floor); the reports at or above theta are candidates, and a range whose every report reaches
//     theta (it may hold more such documents) goes on a work list;
//  4. rescore pass: only the ranges of the work list are scored again and give every document at or
//     above theta (almost none where a query's answers spread over the ranges, gpu_range_top; a
//     partition whose matches cluster in a few ranges scores those twice);
//  5. conjunctive queries with a short enough shortest list skip 2-4: their shortest list's documents
//     are probed into the other lists, skipping blocks by their metadata;
//  6. the candidates sorted per query (one block a query, or CUB's segmented sort for a k above kSortKeys), and
//     one copy of all results back.
// Decode is fused into the consumers: blocks are decoded by warps straight into the accumulator (or the
// probe), never into global memory.
//
// Why one range kernel serves OR, WAND, BMW and MaxScore: the answer does not depend on the algorithm,
// only the work does. On the CPU WAND/BMW skip postings one pivot at a time with a threshold that rises as
// the heap fills; on the GPU a whole range is decoded by a block's warps in the time one pivot step takes,
// and the report pass gives the threshold a finished WAND run would end with for the price of one pass,
// after which few ranges are scored twice. Skipping needs bounds that vary: where every range holds
// some block of each list whose maximum is near the list's (typical of logs whose queries mix a rare
// term with common ones), a range bound skips nothing, and skipping documents inside a range (MaxScore
// at the floor) costs the block a barrier and a pass more than the atomics it saves. The pruned path
// (sampling round, bound grid, MaxScore split) is kept for partitions where bounds do vary, and AUTO
// (backend.c) runs it only where it measures cheaper; per-posting pivoting inside a range would make
// lanes diverge and serialize on the cursor order. The block-max skip pays in AND probing and where a
// term has no block in a range.
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device_memory.h"
#include "gpu/filter_bitmaps.h"
#include "gpu/kernels.h"
#include "gpu/posting_decode.h"

using namespace first_stage;

namespace {

constexpr int kEvents = 8;
// Segments (queries) per call of CUB's segmented sort: above a few hundred it partitions the segments by
// size and waits on the host for the partition's sizes, so a launch of a large batch would block until
// the device finished the batch's kernels (no overlap with the next batch's host work). Every tuning's
// partitioning threshold is 300 or more.
constexpr uint32_t kSortSegmentsPerCall = 256;

// A batch's sequence runs on two streams of its slot. The bulk one (lowest priority) copies the batch in and
// runs the report and probe kernels, which fill the device; the finishing one (highest priority) waits for
// them and runs the short kernels after them (threshold and collection, rescore, sort) and the copy back.
// With several batches in flight, the block scheduler then starts a finishing kernel's blocks as soon as
// blocks of the other batches' report kernels leave, instead of after every block those kernels have yet to
// start: a batch's result no longer waits for the next batch's report pass.
struct stream_buffers {
    cudaStream_t stream, finish;
    cudaEvent_t events[kEvents];
    // d_in: the batch's queries, terms and variant list, laid out as h_stage (one copy in); d_zeroed: the
    // work count, the candidate counts, the bound pass's threshold keys, then the results and hits (one
    // memset, one copy back)
    uint8_t *d_in, *d_zeroed;
    gpu_query *d_queries;
    gpu_term *d_terms;
    gpu_filter *d_filters;      // the queries' filters and their stored values, after the variant list
    uint32_t *d_filter_values;
    gpu_query_result *d_results; // followed by the hits: one region, one copy back
    isn_hit *d_hits;
    uint64_t *d_reports;
    uint32_t *d_prune;     // per query: the pruning threshold of the second round (a score key)
    uint2 *d_next;         // per query: the second round's stop and whether it prunes (range_args.next)
    uint64_t *d_theta_key; // per query: candidates are the documents with keys at most this
    uint32_t *d_retry;     // per query: collected again after an overflow
    uint32_t *d_cand_count;
    uint64_t *d_preset_theta; // per query: the bound pass's threshold key (bound_select_kernel; 0: none)
    uint2 *d_work;
    uint32_t *d_work_count;
    uint64_t *d_cands, *d_cands_sorted;
    int *d_seg_begin, *d_seg_end;
    void *d_sort_temp;
    size_t sort_temp_bytes;
    uint32_t *d_variant; // range queries by report kernel (cuda_launch's kernel classes, in their order)
    uint8_t *h_stage; // pinned: queries, terms, then the variant list
    uint8_t *h_out;   // pinned: results then hits
    uint32_t num_queries, num_range_queries, total_hits, total_candidates;
    uint32_t prior_range_queries; // range queries with a static prior (rescore_prior_kernel runs for them)
    uint32_t max_k; // the batch's largest k (sort_and_copy_out)
    uint32_t probe_grid_x;
    uint64_t bytes_in, bytes_out;
    uint32_t *d_pass_bits; // GPU_PASS_SLOTS filter bitmaps of gpu_device.pass_stride words (null: none)
    uint32_t *d_pass_rank; // each bitmap's ranks (range_args.pass_rank)
    uint2 *d_pass_pairs;   // each bitmap's words beside their ranks (range_args.pass_pairs)
    void *d_rank_temp;     // cub's exclusive sum that makes them
    size_t rank_temp_bytes;
    gpu_pass_cache pass_cache; // what they hold (filter_bitmaps.h)
    uint32_t *pass_slot;       // a launch's gpu_pass_assign, max_batch entries
    uint32_t bitmaps_built, bitmap_queries; // the last launch's (gpu_batch_timing)
};

} // namespace

struct gpu_device {
    int ordinal;
    cudaDeviceProp prop;
    gpu_upload upload;
    uint8_t *d_payload;
    isn_block_meta *d_blocks;
    uint32_t *d_attribute_words; // the attribute columns (gpu_attribute), for the queries' filters
    // the static scores, then each range's largest (gpu_upload's; null without them), for the queries with a prior
    float *d_static_scores, *d_range_prior_max;
    float *d_block_suffix; // the blocks' suffix maxima after them (gpu_upload.block_suffix_max; null without)
    gpu_region payload_region, blocks_region, attribute_region, prior_region; // the four above (device_memory.h)
    // streaming (gpu_upload.stage_bytes): the host's layout of every list and its suffix maxima, registered as mapped
    // host memory, as the gather kernel reads them (null without streaming)
    const uint8_t *d_host_payload;
    const isn_block_meta *d_host_blocks;
    const float *d_host_suffix;
    const void *registered[3];
    uint32_t num_ranges;
    uint32_t report_stride;
    uint32_t resident_blocks; // rescore blocks the device runs at once
    int report_blocks;        // 2 or 3: wide_report_kernel_2 or wide_report_kernel
    uint32_t dense_report;    // ISN_GPU_DENSE_REPORT=1: the dense zero and scan for every range (to compare)
    bool compact;             // compact accumulators where they fit (ISN_GPU_COMPACT=0: never, to compare)
    bool narrow;              // narrow accumulators where they fit (ISN_GPU_NARROW=0: never, to compare)
    bool segmented_sort;      // CUB's segmented sort for every batch (ISN_GPU_SEGMENTED_SORT=1, to compare and test)
    bool dense_floor;         // report_crossed where a narrow range has a floor (ISN_GPU_DENSE_FLOOR=0: never, to compare)
    uint32_t crossing_log;    // report_crossed's log of a range, at most kCrossedSlots (ISN_GPU_CROSSING_LOG: less, to test
                              // its overflow into report_dense)
    // report blocks of each kernel the device runs at once, by filter variant (kVariantPlain, ...): the filtered
    // twins run fewer a multiprocessor than the plain ones, and a grid sized for the plain kernel's waves leaves
    // theirs a last wave almost empty
    uint32_t resident_wide[3], resident_compact[3], resident_narrow[3], resident_short[3], resident_bound[3];
    uint32_t resident_bound_ranked, resident_short_ranked, resident_narrow_ranked;
    uint32_t resident_prior; // prior_report_kernel's (one variant: it tests filters as each query says)
    gpu_bound_pass_switches bound_pass; // which queries the pass may take get it (kernels.h; to compare, device.h)
    bool query_major;          // report grids with the query in x (ISN_GPU_QUERY_MAJOR=0: in y, to compare)
    uint32_t waves, max_ranges_per_block; // ranges_per_block's (ISN_GPU_WAVES, ISN_GPU_MAX_RANGES_PER_BLOCK: to measure)
    uint32_t min_ranges_per_block;        // and its least (ISN_GPU_MIN_RANGES_PER_BLOCK: so that a small index's
                                          // tests carry state from range to range)
    bool filter_bitmaps;  // filter bitmaps for the filters a batch's queries share (ISN_GPU_FILTER_BITMAPS=0: never, to compare)
    uint32_t pass_words;  // a filter bitmap's words of documents' bits (gpu_pass_doc_words)
    uint32_t pass_stride; // and with its ranges' bits (gpu_pass_stride): the bitmaps' distance
    uint32_t ranked_ranges; // ranges a ranked step covers at most (ISN_GPU_RANKED; 0 or 1: none)
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
        if (s->finish) cudaStreamSynchronize(s->finish);
        for (int e = 0; e < kEvents; e++)
            if (s->events[e]) cudaEventDestroy(s->events[e]);
        if (s->stream) cudaStreamDestroy(s->stream);
        if (s->finish) cudaStreamDestroy(s->finish);
        cudaFree(s->d_in);
        cudaFree(s->d_zeroed);
        cudaFree(s->d_reports);
        cudaFree(s->d_prune);
        cudaFree(s->d_next);
        cudaFree(s->d_theta_key);
        cudaFree(s->d_retry);
        cudaFree(s->d_work);
        cudaFree(s->d_cands);
        cudaFree(s->d_cands_sorted);
        cudaFree(s->d_seg_begin);
        cudaFree(s->d_seg_end);
        cudaFree(s->d_sort_temp);
        cudaFree(s->d_pass_bits);
        cudaFree(s->d_pass_rank);
        cudaFree(s->d_pass_pairs);
        cudaFree(s->d_rank_temp);
        free(s->pass_slot);
        cudaFreeHost(s->h_stage);
        cudaFreeHost(s->h_out);
    }
    for (const void *host : d->registered)
        if (host != nullptr) cudaHostUnregister(const_cast<void *>(host));
    gpu_region_free(&d->payload_region);
    gpu_region_free(&d->blocks_region);
    gpu_region_free(&d->attribute_region);
    gpu_region_free(&d->prior_region);
    delete d;
}

static size_t results_bytes(uint32_t queries) {
    return ((size_t)queries * sizeof(gpu_query_result) + 15) / 16 * 16;
}

// The work count (in 16 bytes, which keep what follows aligned), the candidate counts and the bound pass's
// threshold keys before the results, in one region zeroed at launch.
constexpr size_t kWorkCountBytes = 16;
static size_t cand_counts_bytes(uint32_t queries) { return ((size_t)queries * sizeof(uint32_t) + 15) / 16 * 16; }
static size_t counts_bytes(uint32_t queries) {
    return kWorkCountBytes + cand_counts_bytes(queries) + (size_t)queries * sizeof(uint64_t);
}

// A batch's queries, then its terms, then its variant list (range queries by report kernel), back to back;
// then, each from an 8-byte boundary, its filters and their values (filters_offset).
static size_t align8(size_t bytes) { return (bytes + 7) / 8 * 8; }
static size_t stage_bytes(const gpu_upload *u) {
    return align8(u->max_batch * sizeof(gpu_query) + u->max_terms * sizeof(gpu_term) + u->max_batch * sizeof(uint32_t)) +
           align8(u->max_filters * sizeof(gpu_filter)) + align8(u->max_filter_values * sizeof(uint32_t)) +
           (u->stage_bytes ? 16 + u->max_terms * sizeof(gpu_stage_list) : 0);
}

static int open_stream(gpu_device *d, stream_buffers *s, char *err, size_t err_len) {
    const gpu_upload *u = &d->upload;
    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CHECK(cudaStreamCreateWithPriority(&s->stream, cudaStreamNonBlocking, least));
    CHECK(cudaStreamCreateWithPriority(&s->finish, cudaStreamNonBlocking, greatest));
    for (int e = 0; e < kEvents; e++) CHECK(cudaEventCreate(&s->events[e]));
    CHECK(cudaMalloc(&s->d_in, stage_bytes(u)));
    s->d_queries = reinterpret_cast<gpu_query *>(s->d_in);
    CHECK(cudaMalloc(&s->d_zeroed, counts_bytes(u->max_batch) + results_bytes(u->max_batch) +
                                       (size_t)u->max_batch * u->max_k * sizeof(isn_hit)));
    s->d_work_count = reinterpret_cast<uint32_t *>(s->d_zeroed);
    s->d_cand_count = reinterpret_cast<uint32_t *>(s->d_zeroed + kWorkCountBytes);
    s->d_preset_theta = reinterpret_cast<uint64_t *>(s->d_zeroed + kWorkCountBytes + cand_counts_bytes(u->max_batch));
    s->d_results = reinterpret_cast<gpu_query_result *>(s->d_zeroed + counts_bytes(u->max_batch));
    CHECK(cudaMalloc(&s->d_reports, (size_t)u->max_batch * d->num_ranges * d->report_stride * sizeof(uint64_t)));
    CHECK(cudaMalloc(&s->d_prune, u->max_batch * sizeof(uint32_t)));
    CHECK(cudaMalloc(&s->d_next, u->max_batch * sizeof(uint2)));
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
    if (d->filter_bitmaps) {
        CHECK(cudaMalloc(&s->d_pass_bits, (size_t)GPU_PASS_SLOTS * d->pass_stride * sizeof(uint32_t)));
        CHECK(cudaMalloc(&s->d_pass_rank, (size_t)GPU_PASS_SLOTS * d->pass_words * sizeof(uint32_t)));
        CHECK(cudaMalloc(&s->d_pass_pairs, (size_t)GPU_PASS_SLOTS * d->pass_words * sizeof(uint2)));
        CHECK(cub::DeviceScan::ExclusiveSum(nullptr, s->rank_temp_bytes, s->d_pass_rank, (int)d->pass_words,
                                            s->stream));
        CHECK(cudaMalloc(&s->d_rank_temp, s->rank_temp_bytes));
        s->pass_slot = static_cast<uint32_t *>(calloc(u->max_batch ? u->max_batch : 1, sizeof(uint32_t)));
        if (s->pass_slot == nullptr) {
            snprintf(err, err_len, "CUDA device: out of memory");
            return -1;
        }
    }
    CHECK(cudaMallocHost(&s->h_stage, stage_bytes(u) + u->max_batch));
    CHECK(cudaMallocHost(&s->h_out, results_bytes(u->max_batch) + (size_t)u->max_batch * u->max_k * sizeof(isn_hit)));
    return 0;
}

// The index's bytes go up in pieces through two pinned buffers on a stream of their own: one synchronous
// copy of a partition's tens of gigabytes from pageable memory holds the driver for seconds, and a device
// already serving another generation (a swap uploads the next one beside it) could launch and complete
// nothing meanwhile. The pinned buffers are taken once and kept for the process: pinning and unpinning
// host memory goes through the driver too, and every swap would do it three times.
static const size_t kUploadChunk = 32u << 20;
static const uint8_t kPadding[64] = {0};
static pthread_mutex_t upload_staging_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *upload_staging; // 2 * kUploadChunk, portable (any device), under upload_staging_lock

static cudaError_t upload_in_chunks(void *device_dst, const void *host_src, size_t bytes) {
    if (bytes == 0) return cudaSuccess;
    int least = 0, greatest = 0;
    cudaStream_t stream = nullptr;
    cudaEvent_t copied[2] = {nullptr, nullptr};
    const size_t chunk = bytes < kUploadChunk ? bytes : kUploadChunk;
    pthread_mutex_lock(&upload_staging_lock);
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, least);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&copied[0], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&copied[1], cudaEventDisableTiming);
    if (e == cudaSuccess && upload_staging == nullptr)
        e = cudaHostAlloc(&upload_staging, 2 * kUploadChunk, cudaHostAllocPortable);
    for (size_t off = 0, i = 0; e == cudaSuccess && off < bytes; off += chunk, i++) {
        const size_t n = bytes - off < chunk ? bytes - off : chunk;
        uint8_t *buffer = upload_staging + (i % 2) * chunk;
        if (i >= 2) e = cudaEventSynchronize(copied[i % 2]); // the buffer's copy two pieces ago is done
        if (e != cudaSuccess) break;
        memcpy(buffer, (const uint8_t *)host_src + off, n);
        e = cudaMemcpyAsync((uint8_t *)device_dst + off, buffer, n, cudaMemcpyHostToDevice, stream);
        if (e == cudaSuccess) e = cudaEventRecord(copied[i % 2], stream);
    }
    if (stream) {
        const cudaError_t synced = cudaStreamSynchronize(stream);
        if (e == cudaSuccess) e = synced;
        cudaStreamDestroy(stream);
    }
    for (int i = 0; i < 2; i++)
        if (copied[i]) cudaEventDestroy(copied[i]);
    pthread_mutex_unlock(&upload_staging_lock);
    return e;
}

// Each report kernel in its three variants (kernels.h), by how it tests a query's filters: none, the attribute
// columns, a filter bitmap.
enum { kVariantPlain, kVariantColumns, kVariantBitmap, kFilterVariants };
using report_kernel = void (*)(range_args);
static const report_kernel kWideReport[] = {wide_report_kernel, wide_report_kernel_filtered, wide_report_kernel_bitmap};
static const report_kernel kWideReport2[] = {wide_report_kernel_2, wide_report_kernel_2_filtered,
                                             wide_report_kernel_2_bitmap};
static const report_kernel kCompactReport[] = {compact_report_kernel, compact_report_kernel_filtered,
                                               compact_report_kernel_bitmap};
static const report_kernel kNarrowReport[] = {narrow_report_kernel, narrow_report_kernel_filtered,
                                              narrow_report_kernel_bitmap};
static const report_kernel kShortReport[] = {short_report_kernel, short_report_kernel_filtered,
                                             short_report_kernel_bitmap};
static const report_kernel kBoundReport[] = {bound_report_kernel, bound_report_kernel_filtered,
                                             bound_report_kernel_bitmap};

// How a thread that waits for a batch (the scheduler's dispatcher, in cuda_finish) waits. CUDA's own choice on a
// host with more cores than contexts is to spin, which holds a core at the loops' priority for the whole of every
// batch; ISN_GPU_HOST_WAIT compares: 0 CUDA's choice, 1 spin, 2 yield, 3 block on an interrupt.
static const unsigned kHostWaitFlags[] = {cudaDeviceScheduleAuto, cudaDeviceScheduleSpin, cudaDeviceScheduleYield,
                                          cudaDeviceScheduleBlockingSync};

static int open_device(gpu_device *d, char *err, size_t err_len) {
    const gpu_upload *u = &d->upload;
    CHECK(cudaSetDevice(d->ordinal));
    const uint32_t host_wait = gpu_env_number("ISN_GPU_HOST_WAIT", 0, 0);
    if (host_wait > 0 && host_wait < sizeof kHostWaitFlags / sizeof kHostWaitFlags[0])
        CHECK(cudaSetDeviceFlags(kHostWaitFlags[host_wait]));
    CHECK(cudaGetDeviceProperties(&d->prop, d->ordinal));
    // The same bytes as on disk, padded so that two-word unaligned loads stay inside the allocation; with streaming,
    // each stream's staging region after them (gpu_stage_payload_base, gpu_stage_block_base).
    const uint64_t block_room = gpu_block_room(u);
    CHECK(gpu_region_alloc(&d->payload_region, gpu_payload_room(u), d->ordinal));
    d->d_payload = static_cast<uint8_t *>(d->payload_region.base);
    CHECK(upload_in_chunks(d->d_payload + u->payload_bytes, kPadding, GPU_PAYLOAD_PAD));
    CHECK(upload_in_chunks(d->d_payload, u->payload, u->payload_bytes));
    if (u->stage_bytes) {
        // the host's layout, read in place by the gather kernel (page-aligned allocations: backend_open.c)
        const void *hosts[3] = {u->host_payload, u->host_blocks, u->block_suffix_max};
        const size_t sizes[3] = {u->host_payload_bytes, u->num_blocks * sizeof(isn_block_meta),
                                 u->block_suffix_max ? u->num_blocks * sizeof(float) : 0};
        const void **device_views[3] = {reinterpret_cast<const void **>(&d->d_host_payload),
                                        reinterpret_cast<const void **>(&d->d_host_blocks),
                                        reinterpret_cast<const void **>(&d->d_host_suffix)};
        for (int i = 0; i < 3; i++) {
            if (hosts[i] == nullptr || sizes[i] == 0) continue;
            CHECK(cudaHostRegister(const_cast<void *>(hosts[i]), sizes[i], cudaHostRegisterMapped));
            d->registered[i] = hosts[i];
            void *view = nullptr;
            CHECK(cudaHostGetDevicePointer(&view, const_cast<void *>(hosts[i]), 0));
            *device_views[i] = view;
        }
    }
    CHECK(gpu_region_alloc(&d->blocks_region, (block_room ? block_room : 1) * sizeof(isn_block_meta), d->ordinal));
    d->d_blocks = static_cast<isn_block_meta *>(d->blocks_region.base);
    CHECK(upload_in_chunks(d->d_blocks, u->blocks, u->num_blocks * sizeof(isn_block_meta)));
    CHECK(gpu_region_alloc(&d->attribute_region, (u->num_attribute_words ? u->num_attribute_words : 1) * sizeof(uint32_t),
                           d->ordinal));
    d->d_attribute_words = static_cast<uint32_t *>(d->attribute_region.base);
    CHECK(upload_in_chunks(d->d_attribute_words, u->attribute_words, u->num_attribute_words * sizeof(uint32_t)));
    if (u->static_scores != nullptr) {
        const size_t suffixes = u->block_suffix_max != nullptr ? block_room : 0;
        CHECK(gpu_region_alloc(&d->prior_region,
                               ((size_t)u->num_docs + GPU_RANGE_BOUNDS * d->num_ranges + suffixes) * sizeof(float),
                               d->ordinal));
        d->d_static_scores = static_cast<float *>(d->prior_region.base);
        d->d_range_prior_max = d->d_static_scores + u->num_docs;
        CHECK(upload_in_chunks(d->d_static_scores, u->static_scores, (size_t)u->num_docs * sizeof(float)));
        CHECK(upload_in_chunks(d->d_range_prior_max, u->range_prior_max,
                               (size_t)GPU_RANGE_BOUNDS * d->num_ranges * sizeof(float)));
        if (suffixes) {
            d->d_block_suffix = d->d_range_prior_max + GPU_RANGE_BOUNDS * d->num_ranges;
            CHECK(upload_in_chunks(d->d_block_suffix, u->block_suffix_max, u->num_blocks * sizeof(float)));
        }
    }
    for (int variant = 0; variant < kFilterVariants; variant++) {
        CHECK(cudaFuncSetAttribute(kWideReport[variant], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
        CHECK(cudaFuncSetAttribute(kWideReport2[variant], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
        CHECK(cudaFuncSetAttribute(kCompactReport[variant], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)kCompactSharedBytes));
        CHECK(cudaFuncSetAttribute(kNarrowReport[variant], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)narrow_shared_bytes(5)));
        CHECK(cudaFuncSetAttribute(kShortReport[variant], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)narrow_shared_bytes(6)));
        CHECK(cudaFuncSetAttribute(kBoundReport[variant], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)narrow_shared_bytes(6)));
    }
    CHECK(cudaFuncSetAttribute(short_report_kernel_ranked, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)narrow_shared_bytes(6)));
    CHECK(cudaFuncSetAttribute(narrow_report_kernel_ranked, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)narrow_shared_bytes(5)));
    CHECK(cudaFuncSetAttribute(bound_report_kernel_ranked, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)narrow_shared_bytes(6)));
    // the switches that exist to compare and measure (bench/gpu_device.sh)
    d->report_blocks = gpu_env_number("ISN_GPU_REPORT_BLOCKS", 3, 0) == 2 ? 2 : 3;
    d->compact = gpu_env_number("ISN_GPU_COMPACT", 1, 0) != 0;
    d->query_major = gpu_env_number("ISN_GPU_QUERY_MAJOR", 1, 0) != 0;
    d->waves = gpu_env_number("ISN_GPU_WAVES", 4, 1);
    d->max_ranges_per_block = gpu_env_number("ISN_GPU_MAX_RANGES_PER_BLOCK", 64, 1);
    d->min_ranges_per_block = gpu_env_number("ISN_GPU_MIN_RANGES_PER_BLOCK", 1, 1);
    d->narrow = gpu_env_number("ISN_GPU_NARROW", 1, 0) != 0;
    d->segmented_sort = gpu_env_number("ISN_GPU_SEGMENTED_SORT", 0, 0) == 1;
    d->dense_floor = gpu_env_number("ISN_GPU_DENSE_FLOOR", 1, 0) != 0;
    const uint32_t crossing_log = gpu_env_number("ISN_GPU_CROSSING_LOG", kCrossedSlots, 0);
    d->crossing_log = crossing_log < kCrossedSlots ? crossing_log : kCrossedSlots;
    d->dense_report = gpu_env_number("ISN_GPU_DENSE_REPORT", 0, 0) == 1;
    d->filter_bitmaps = u->num_attribute_words > 0 && gpu_env_number("ISN_GPU_FILTER_BITMAPS", 1, 0) != 0;
    // every document's word (a field past a list's count is clamped to the last), then the ranges' bits
    d->pass_words = gpu_pass_doc_words(u->num_docs);
    d->pass_stride = gpu_pass_stride(u->num_docs);
    d->ranked_ranges = gpu_env_number("ISN_GPU_RANKED", kMaxRankedRanges, 0);
    if (d->ranked_ranges > kMaxRankedRanges) d->ranked_ranges = kMaxRankedRanges;
    CHECK(cudaFuncSetAttribute(select_collect_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)(kSelectKeys * sizeof(uint64_t))));
    CHECK(cudaFuncSetAttribute(bound_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)(kSelectKeys * sizeof(uint64_t))));
    d->bound_pass = gpu_bound_pass_switches_read();
    CHECK(cudaFuncSetAttribute(rescore_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
    CHECK(cudaFuncSetAttribute(rescore_prior_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
    CHECK(cudaFuncSetAttribute(prior_report_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSharedBytes));
    const uint32_t sms = (uint32_t)d->prop.multiProcessorCount;
    auto resident = [&](report_kernel kernel, size_t shared_bytes, uint32_t &out) -> cudaError_t {
        int per_sm = 0;
        const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, shared_bytes);
        out = (uint32_t)(per_sm > 0 ? per_sm : 1) * sms;
        return e;
    };
    static_assert(kFilterVariants == 3, "resident_* hold one count a variant");
    for (int v = 0; v < kFilterVariants; v++) {
        const report_kernel wide = d->report_blocks == 2 ? kWideReport2[v] : kWideReport[v];
        CHECK(resident(wide, kSharedBytes, d->resident_wide[v]));
        CHECK(resident(kCompactReport[v], kCompactSharedBytes, d->resident_compact[v]));
        CHECK(resident(kNarrowReport[v], narrow_shared_bytes(5), d->resident_narrow[v]));
        CHECK(resident(kShortReport[v], narrow_shared_bytes(6), d->resident_short[v]));
        CHECK(resident(kBoundReport[v], narrow_shared_bytes(6), d->resident_bound[v]));
    }
    CHECK(resident(bound_report_kernel_ranked, narrow_shared_bytes(6), d->resident_bound_ranked));
    CHECK(resident(short_report_kernel_ranked, narrow_shared_bytes(6), d->resident_short_ranked));
    CHECK(resident(narrow_report_kernel_ranked, narrow_shared_bytes(5), d->resident_narrow_ranked));
    CHECK(resident(prior_report_kernel, kSharedBytes, d->resident_prior));
    // the rescore pass runs wide_report_kernel's accumulator at its three blocks a multiprocessor
    {
        int per_sm = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, wide_report_kernel, kThreads, kSharedBytes));
        d->resident_blocks = (uint32_t)(per_sm > 0 ? per_sm : 1) * sms;
    }
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
    d->report_stride = upload->report_stride;
    if (upload->streams > 8 || open_device(d, err, err_len) != 0) {
        if (upload->streams > 8) snprintf(err, err_len, "CUDA device: at most 8 streams");
        cuda_close(d);
        return nullptr;
    }
    return d;
}

// Candidates sorted per query, the best k gathered, results and hits copied back (one region).
static int sort_and_copy_out(gpu_device *d, stream_buffers *s, uint32_t total_candidates, char *err, size_t err_len) {
    cudaStream_t st = s->finish;
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
    p.attribute_words = d->d_attribute_words;
    p.filters = s->d_filters;
    p.filter_values = s->d_filter_values;
    p.static_scores = d->d_static_scores;
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
    a.next = s->d_next;
    a.theta_key = s->d_theta_key;
    a.cands = s->d_cands;
    a.cand_count = s->d_cand_count;
    a.work = s->d_work;
    a.work_count = s->d_work_count;
    a.dense_report = d->dense_report;
    a.dense_floor = d->dense_floor;
    a.crossing_log = d->crossing_log;
    a.attribute_words = d->d_attribute_words;
    a.filters = s->d_filters;
    a.filter_values = s->d_filter_values;
    a.pass_bits = s->d_pass_bits;
    a.pass_words = d->pass_words;
    a.pass_stride = d->pass_stride;
    a.pass_rank = s->d_pass_rank;
    a.pass_pairs = s->d_pass_pairs;
    a.ranked_ranges = d->ranked_ranges;
    a.static_scores = d->d_static_scores;
    a.range_prior_max = d->d_range_prior_max;
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

// The report grid of `chunks` blocks of ranges for each of `queries` queries, in the order
// range_args.query_major says (set here). Query-major from kQueryMajorFrom queries, where a wave of blocks is
// a few ranges of every query, which then share their common lists' blocks in L2 (below it range-major
// measured a little faster).
constexpr uint32_t kQueryMajorFrom = 128;
static dim3 report_grid(const gpu_device *d, uint32_t chunks, uint32_t queries, range_args *a) {
    a->query_major = d->query_major && queries >= kQueryMajorFrom && chunks <= 65535u; // a grid's y is at most 65535
    return a->query_major ? dim3(queries, chunks) : dim3(chunks, queries);
}

static uint32_t ranges_per_block(const gpu_device *d, uint32_t ranges, uint32_t queries, uint32_t resident) {
    const uint64_t per = ((uint64_t)ranges * queries) / ((uint64_t)resident * d->waves);
    const uint64_t least = d->min_ranges_per_block;
    return per < least ? (uint32_t)least : per > d->max_ranges_per_block ? d->max_ranges_per_block : (uint32_t)per;
}

// The accumulator a range query's report blocks use: the smallest whose counters hold its sums. Narrow and
// compact ones need an unpruned disjunctive query (their aux region has no room for bound grids or match
// counts), fixed point, one chunk of terms and no static prior (prior_report_kernel is wide). A slot's total
// is at most the sum of the query's bounds in fixed-point units (one posting per list and document); the narrow
// layout's 32-bit counter needs that sum below 2^32, the compact one's 16-bit high counter below 2^(kLow + 16);
// each with a factor 2 to spare.
static acc_kind accumulator_kind(const gpu_device *d, const gpu_query *q, const gpu_term *terms) {
    if (d->dense_report || q->and_mode || q->tree || q->fixed_shift == 0 || q->num_terms > GPU_MAX_TERMS ||
        q->seed_key != 0 || q->prior_weight != 0.0f)
        return kWideAcc;
    if (gpu_two_rounds(q) && !q->sampled_floor) return kWideAcc; // its second round prunes
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
    for (uint32_t q = 0; q < nq; q++) {
        s->max_k = batch->queries[q].k > s->max_k ? batch->queries[q].k : s->max_k;
        // its reports would run into the next range's
        const gpu_query &query = batch->queries[q];
        const uint32_t most = query.lead_ranges && query.lead_top > query.range_top ? query.lead_top : query.range_top;
        if (most > d->report_stride) {
            snprintf(err, err_len, "CUDA device: query %u reports %u a range, past the %u slots a range has", q, most,
                     d->report_stride);
            return -1;
        }
    }
    size_t qbytes = nq * sizeof(gpu_query), tbytes = batch->num_terms * sizeof(gpu_term);
    memcpy(s->h_stage, batch->queries, qbytes);
    memcpy(s->h_stage + qbytes, batch->terms, tbytes);
    // the range queries' filter bitmaps (the staged copy's pass_slot, 0 from the backend)
    uint32_t build_query[GPU_PASS_SLOTS], build_slot[GPU_PASS_SLOTS], builds = 0;
    s->bitmap_queries = 0;
    if (s->d_pass_bits != nullptr) {
        builds = gpu_pass_assign(&s->pass_cache, batch, d->upload.num_docs, s->pass_slot, build_query, build_slot,
                                 &s->bitmap_queries);
        gpu_query *staged_queries = reinterpret_cast<gpu_query *>(s->h_stage);
        for (uint32_t q = 0; q < batch->num_range_queries; q++) staged_queries[q].pass_slot = s->pass_slot[q];
    }
    s->bitmaps_built = builds;
    // the range queries by report kernel (accumulator_kind): the bound pass's (narrow, short report lists, one
    // round, k at most kBoundMaxK), then those of its queries with a filter bitmap that may take it in ranked
    // steps (bound_report_kernel_ranked: the bitmap variant only), the other narrow ones with short report lists,
    // the other narrow ones, the compact ones, the wide ones; each first without filters, then with them on the
    // columns (the _filtered kernels), then with a filter bitmap (the _bitmap ones); last the queries with a static
    // prior, all in prior_report_kernel (its first variant's slot), which tests each one's filters as it says
    enum { kBoundKernel, kBoundRankedKernel, kShortKernel, kNarrowKernel, kCompactKernel, kWideKernel, kPriorKernel,
           kKinds, kKernels = kFilterVariants * kKinds };
    const gpu_query *staged = reinterpret_cast<const gpu_query *>(s->h_stage);
    uint32_t *h_variant = reinterpret_cast<uint32_t *>(s->h_stage + qbytes + tbytes);
    uint8_t *h_kernel = reinterpret_cast<uint8_t *>(h_variant + d->upload.max_batch);
    uint32_t kernel_count[kKernels] = {0};
    s->prior_range_queries = 0;
    for (uint32_t q = 0; q < nr; q++) {
        const gpu_query &query = batch->queries[q];
        const acc_kind kind = accumulator_kind(d, &query, batch->terms);
        const bool bounds = gpu_bound_pass_for(&d->bound_pass, &query);
        const bool prior = query.prior_weight != 0.0f;
        s->prior_range_queries += prior;
        // a kernel's queries lie together in the variant list: kind by kind, the unfiltered ones first
        const int variant = prior || query.num_filters == 0 ? kVariantPlain
                            : staged[q].pass_slot               ? kVariantBitmap
                                                                : kVariantColumns;
        // the bound pass's ranked steps: a filter bitmap's queries whose filters leave no range out (gpu_query)
        const bool ranked_bounds = variant == kVariantBitmap && d->ranked_ranges > 1 && query.ranges_zoned_out == 0;
        const int kernel = prior                                 ? kPriorKernel
                           : kind == kWideAcc                    ? kWideKernel
                           : kind == kCompactAcc                 ? kCompactKernel
                           : query.range_top > kShortListTop ? kNarrowKernel
                           : bounds && ranked_bounds             ? kBoundRankedKernel
                           : bounds                              ? kBoundKernel
                                                                 : kShortKernel;
        const int slot = kFilterVariants * kernel + variant;
        kernel_count[h_kernel[q] = (uint8_t)slot]++;
    }
    uint32_t kernel_at[kKernels], kernel_first[kKernels];
    for (int k = 0, at = 0; k < kKernels; at += kernel_count[k], k++) kernel_first[k] = kernel_at[k] = at;
    for (uint32_t q = 0; q < nr; q++) h_variant[kernel_at[h_kernel[q]]++] = q;
    // the queries' filters and values after the variant list (h_kernel, which lies there, is read above)
    const size_t filters_at = align8(qbytes + tbytes + nr * sizeof(uint32_t));
    const size_t fbytes = batch->num_filters * sizeof(gpu_filter);
    const size_t values_at = align8(filters_at + fbytes);
    const size_t vbytes = batch->num_filter_values * sizeof(uint32_t);
    if (fbytes) memcpy(s->h_stage + filters_at, batch->filters, fbytes);
    if (vbytes) memcpy(s->h_stage + values_at, batch->filter_values, vbytes);
    // the streamed lists (gpu_stage_list) last, from a 16-byte boundary
    const size_t lists_at = (values_at + vbytes + 15) / 16 * 16;
    const size_t lbytes = batch->num_stage * sizeof(gpu_stage_list);
    for (uint32_t i = 0; i < batch->num_stage; i++)
        if (gpu_stage_list_outside(&d->upload, slot, &batch->stage[i]) || d->d_host_payload == nullptr) {
            snprintf(err, err_len, "CUDA device: streamed list %u lies outside stream %u's staging region", i, slot);
            return -1;
        }
    if (lbytes) memcpy(s->h_stage + lists_at, batch->stage, lbytes);
    const size_t in_bytes = lbytes                 ? lists_at + lbytes
                            : fbytes || vbytes ? values_at + vbytes
                                               : qbytes + tbytes + nr * sizeof(uint32_t);
    s->d_filters = reinterpret_cast<gpu_filter *>(s->d_in + filters_at);
    s->d_filter_values = reinterpret_cast<uint32_t *>(s->d_in + values_at);
    // one copy in and one memset: a batch of 16 is short enough on the device that each operation of the
    // stream's sequence shows
    s->d_terms = reinterpret_cast<gpu_term *>(s->d_in + qbytes);
    s->d_hits = reinterpret_cast<isn_hit *>(reinterpret_cast<uint8_t *>(s->d_results) + results_bytes(nq));
    s->d_variant = reinterpret_cast<uint32_t *>(s->d_in + qbytes + tbytes);
    CHECK(cudaEventRecord(s->events[0], st));
    CHECK(cudaMemcpyAsync(s->d_in, s->h_stage, in_bytes, cudaMemcpyHostToDevice, st));
    CHECK(cudaMemsetAsync(s->d_zeroed, 0, counts_bytes(d->upload.max_batch) + nq * sizeof(gpu_query_result), st));
    // the streamed lists into the stream's staging region, counted as the batch's copy in
    for (uint32_t from = 0; from < batch->num_stage; from += 65535u) {
        const uint32_t lists = batch->num_stage - from < 65535u ? batch->num_stage - from : 65535u;
        const stage_args a = {reinterpret_cast<const gpu_stage_list *>(s->d_in + lists_at) + from, d->d_host_payload,
                              d->d_host_blocks, d->d_host_suffix, d->d_payload, d->d_blocks,
                              d->d_host_suffix != nullptr ? d->d_block_suffix : nullptr};
        stage_gather_kernel<<<dim3(kStageBlocksPerList, lists), kStageThreads, 0, st>>>(a);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(s->events[1], st));

    for (uint32_t i = 0; i < builds; i++) {
        const gpu_query &query = batch->queries[build_query[i]];
        const uint32_t blocks = (d->pass_words + 255u) / 256u;
        uint32_t *bitmap = s->d_pass_bits + (size_t)build_slot[i] * d->pass_stride;
        pass_bitmap_kernel<<<blocks < 4096u ? blocks : 4096u, 256, 0, st>>>(
            d->d_attribute_words, s->d_filters + query.filter_begin, query.num_filters, s->d_filter_values,
            d->upload.num_docs, d->pass_words, bitmap);
        CHECK(cudaGetLastError());
        uint32_t *empty = bitmap + d->pass_stride - 1u; // gpu_pass_empty_ranges
        CHECK(cudaMemsetAsync(empty, 0, sizeof *empty, st));
        pass_ranges_kernel<<<gpu_pass_range_words(d->upload.num_docs), kThreads, 0, st>>>(bitmap, d->pass_words,
                                                                                          d->num_ranges,
                                                                                          bitmap + d->pass_words, empty);
        CHECK(cudaGetLastError());
        if (d->ranked_ranges > 1) {
            uint32_t *rank = s->d_pass_rank + (size_t)build_slot[i] * d->pass_words;
            pass_popcount_kernel<<<blocks < 4096u ? blocks : 4096u, 256, 0, st>>>(bitmap, d->pass_words, rank);
            CHECK(cudaGetLastError());
            CHECK(cub::DeviceScan::ExclusiveSum(s->d_rank_temp, s->rank_temp_bytes, rank, (int)d->pass_words, st));
            pass_pairs_kernel<<<blocks < 4096u ? blocks : 4096u, 256, 0, st>>>(
                bitmap, rank, d->pass_words, s->d_pass_pairs + (size_t)build_slot[i] * d->pass_words);
            CHECK(cudaGetLastError());
        }
    }
    range_args a = range_args_of(d, s);
    if (nr) {
        // Ranges per block: enough blocks for four waves of the device, consecutive ranges otherwise (each
        // block then follows its lists' blocks with a cursor instead of searching them).
        // the first round's steps: the most sampled ranges of a query (all of them for a query of one round)
        uint32_t sampled = 0;
        bool two_rounds = false;
        for (uint32_t q = 0; q < nr; q++) {
            const uint32_t n = gpu_sampled_ranges(&batch->queries[q], d->num_ranges);
            sampled = n > sampled ? n : sampled;
            two_rounds = two_rounds || gpu_two_rounds(&batch->queries[q]);
        }
        for (uint32_t round = 1; round <= 2; round++) {
            if (round == 2 && !two_rounds) break;
            const uint32_t ranges = round == 1 ? sampled : d->num_ranges;
            a.round = round;
            for (int slot = 0; slot < kKernels; slot++) {
                const uint32_t count = kernel_count[slot];
                const int kernel = slot / kFilterVariants, variant = slot % kFilterVariants;
                const bool bound_pass = kernel == kBoundKernel || kernel == kBoundRankedKernel;
                if (count == 0 || (bound_pass && round != 1)) continue;
                range_args ka = a;
                ka.query_index = s->d_variant + kernel_first[slot];
                if (bound_pass) {
                    // a block's ranges are whole groups; ranked steps where a block's groups fill a step (in small
                    // batches a block has a few groups, and a ranked step's dearer postings then cost more than its
                    // fewer steps save)
                    const uint32_t groups = (ranges + kBoundRanges - 1) / kBoundRanges;
                    const uint32_t ranked_groups =
                        kernel == kBoundRankedKernel ? ranges_per_block(d, groups, count, d->resident_bound_ranked) : 0u;
                    const bool ranked = ranked_groups >= kWarps;
                    ka.ranges_per_block =
                        (ranked ? ranked_groups : ranges_per_block(d, groups, count, d->resident_bound[variant])) *
                        kBoundRanges;
                    const uint32_t gx = (ranges + ka.ranges_per_block - 1) / ka.ranges_per_block;
                    const dim3 grid = report_grid(d, gx, count, &ka);
                    const report_kernel report = ranked ? bound_report_kernel_ranked : kBoundReport[variant];
                    report<<<grid, kThreads, narrow_shared_bytes(6), st>>>(ka);
                    CHECK(cudaGetLastError());
                    bound_select_kernel<<<count, kSelectThreads, kSelectKeys * sizeof(uint64_t), st>>>(
                        s->d_queries, s->d_terms, ka.query_index, s->d_reports, d->num_ranges, d->report_stride,
                        s->d_preset_theta);
                } else if (kernel == kShortKernel || kernel == kNarrowKernel) {
                    const bool six = kernel == kShortKernel;
                    const bool ranked = variant == kVariantBitmap && d->ranked_ranges > 1;
                    // the grid sized by the blocks a multiprocessor holds of the kernel that runs (the ranked ones
                    // hold fewer than their unranked twins)
                    const uint32_t resident = ranked ? (six ? d->resident_short_ranked : d->resident_narrow_ranked)
                                                     : (six ? d->resident_short[variant] : d->resident_narrow[variant]);
                    ka.ranges_per_block = ranges_per_block(d, ranges, count, resident);
                    const uint32_t gx = (ranges + ka.ranges_per_block - 1) / ka.ranges_per_block;
                    const dim3 grid = report_grid(d, gx, count, &ka);
                    const report_kernel report = ranked ? (six ? short_report_kernel_ranked : narrow_report_kernel_ranked)
                                                        : six ? kShortReport[variant] : kNarrowReport[variant];
                    report<<<grid, kThreads, narrow_shared_bytes(six ? 6 : 5), st>>>(ka);
                } else if (kernel == kPriorKernel) {
                    ka.ranges_per_block = ranges_per_block(d, ranges, count, d->resident_prior);
                    const uint32_t gx = (ranges + ka.ranges_per_block - 1) / ka.ranges_per_block;
                    const dim3 grid = report_grid(d, gx, count, &ka);
                    prior_report_kernel<<<grid, kThreads, kSharedBytes, st>>>(ka);
                } else if (kernel == kCompactKernel) {
                    ka.ranges_per_block = ranges_per_block(d, ranges, count, d->resident_compact[variant]);
                    const uint32_t gx = (ranges + ka.ranges_per_block - 1) / ka.ranges_per_block;
                    const dim3 grid = report_grid(d, gx, count, &ka);
                    kCompactReport[variant]<<<grid, kThreads, kCompactSharedBytes, st>>>(ka);
                } else {
                    ka.ranges_per_block = ranges_per_block(d, ranges, count, d->resident_wide[variant]);
                    const uint32_t gx = (ranges + ka.ranges_per_block - 1) / ka.ranges_per_block;
                    const dim3 grid = report_grid(d, gx, count, &ka);
                    const report_kernel report = d->report_blocks == 2 ? kWideReport2[variant] : kWideReport[variant];
                    report<<<grid, kThreads, kSharedBytes, st>>>(ka);
                }
                CHECK(cudaGetLastError());
            }
            CHECK(cudaGetLastError());
            if (round == 1) {
                const gpu_tail_view tails = {d->d_range_prior_max, d->d_blocks, d->d_block_suffix, d->num_ranges};
                sample_threshold_kernel<<<nr, 256, 0, st>>>(s->d_queries, s->d_terms, s->d_reports, d->upload.num_docs,
                                                            d->report_stride, tails, s->d_results, s->d_prune,
                                                            s->d_next);
                CHECK(cudaGetLastError());
            }
        }
    }
    CHECK(cudaEventRecord(s->events[2], st));
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
    CHECK(cudaEventRecord(s->events[3], st));
    // the rest on the finishing stream (stream_buffers)
    CHECK(cudaStreamWaitEvent(s->finish, s->events[3], 0));
    st = s->finish;
    if (nr) {
        select_collect_kernel<<<nr, kSelectThreads, kSelectKeys * sizeof(uint64_t), st>>>(
            s->d_queries, s->d_reports, d->num_ranges, d->report_stride, s->d_next, s->d_preset_theta, s->d_theta_key,
            s->d_cands,
            s->d_cand_count,
            s->d_work, s->d_work_count);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(s->events[4], st));
    if (nr) {
        // the work list is short when reports fit k (gpu_range_top): a few blocks a query take it
        rescore_kernel<<<rescore_blocks(d, nr), kThreads, kSharedBytes, st>>>(a);
        CHECK(cudaGetLastError());
    }
    if (s->prior_range_queries) {
        rescore_prior_kernel<<<rescore_blocks(d, s->prior_range_queries), kThreads, kSharedBytes, st>>>(a);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(s->events[5], st));
    if (sort_and_copy_out(d, s, batch->total_candidates, err, err_len) != 0) return -1;
    CHECK(cudaEventRecord(s->events[7], st));
    s->bytes_in = in_bytes;
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
    cudaStream_t st = s->finish;
    const uint32_t nq = s->num_queries, nr = s->num_range_queries;
    tighten_kernel<<<(nq + 255) / 256, 256, 0, st>>>(s->d_queries, nq, nr, s->d_cands_sorted, s->d_cand_count,
                                                      s->d_theta_key, s->d_retry);
    CHECK(cudaGetLastError());
    if (nr) {
        CHECK(cudaMemsetAsync(s->d_work_count, 0, sizeof(uint32_t), st));
        collect_kernel<<<nr, 256, 0, st>>>(s->d_queries, s->d_reports, d->num_ranges, d->report_stride, s->d_next,
                                           s->d_theta_key, s->d_retry, s->d_cands, s->d_cand_count, s->d_work,
                                           s->d_work_count);
        CHECK(cudaGetLastError());
        // the work list holds only the flagged queries' ranges
        range_args a = range_args_of(d, s);
        rescore_kernel<<<rescore_blocks(d, nr), kThreads, kSharedBytes, st>>>(a);
        CHECK(cudaGetLastError());
        if (s->prior_range_queries) {
            rescore_prior_kernel<<<rescore_blocks(d, s->prior_range_queries), kThreads, kSharedBytes, st>>>(a);
            CHECK(cudaGetLastError());
        }
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
    CHECK(cudaStreamSynchronize(s->finish));
    CHECK(cudaGetLastError());
    float ms[kEvents - 1];
    for (int e = 0; e + 1 < kEvents; e++) CHECK(cudaEventElapsedTime(&ms[e], s->events[e], s->events[e + 1]));
    timing->ms_transfer_in = ms[0];
    timing->ms_threshold_pass = ms[1];
    timing->ms_and_probe = ms[2];
    timing->ms_select_threshold = ms[3];
    timing->ms_score_pass = ms[4];
    timing->ms_sort = ms[5];
    timing->ms_transfer_out = ms[6];
    timing->bytes_to_device = s->bytes_in;
    timing->bytes_from_device = s->bytes_out;
    timing->overflow_retries = 0;
    timing->filter_bitmaps_built = s->bitmaps_built;
    timing->filter_bitmap_queries = s->bitmap_queries;
    for (uint32_t round = 0; round < GPU_OVERFLOW_RETRIES; round++) {
        int launched = launch_retry(d, s, batch, err, err_len);
        if (launched < 0) return -1;
        if (launched == 1) break;
        CHECK(cudaStreamSynchronize(s->finish));
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
