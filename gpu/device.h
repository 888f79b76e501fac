/* Private to gpu/: what the backend (backend.c) hands a device, and the two devices that take it:
 * the CUDA one (first_stage_device.cu) and the host emulation (emulated_device.c). Plain C, read by nvcc too. */
#ifndef ISN_GPU_DEVICE_H
#define ISN_GPU_DEVICE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Documents per range: one thread block scores one (query, range) pair in a shared-memory accumulator
 * of this many doubles (64 KB). */
#define GPU_RANGE_DOCS 8192u
/* Terms a range block holds at once; longer disjunctive queries are scored in chunks of this many
 * terms into the same dense range accumulator, up to GPU_MAX_OR_TERMS. Conjunctive queries take at
 * most GPU_MAX_TERMS (their match counts are 8-bit). */
#define GPU_MAX_TERMS 64u
#define GPU_MAX_OR_TERMS 1024u
/* Largest number of per-range best documents reported by the first pass. */
#define GPU_MAX_RANGE_TOP 64u
/* Documents per cell of the per-range bound grid that decides which non-essential blocks to decode. */
#define GPU_SUB_DOCS 32u
/* Most ranges between two sampled ones (gpu_sample_stride). */
#define GPU_MAX_SAMPLE_STRIDE 8u
/* Collection rounds after a candidate overflow, each with the k-th smallest key found so far, before
 * the CPU answers (counted as a fallback). */
#define GPU_OVERFLOW_RETRIES 8u
/* The bound pass (gpu/kernels.h, emulated_device.c): unpruned disjunctive queries of one round with
 * fixed-point scores, k at most GPU_BOUND_MAX_K and at most GPU_BOUND_RANGE_TOP reports a range score
 * groups of GPU_BOUND_RANGES ranges in upper-bound counters of 32 / GPU_BOUND_RANGES bits first, then
 * exactly only the ranges that can hold answers. gpu_bound_scale: the counters' scale, the same float on
 * the device and the host. */
#ifndef GPU_BOUND_RANGES
#define GPU_BOUND_RANGES 3u
#endif
#define GPU_BOUND_MAX_K 32u
#define GPU_BOUND_RANGE_TOP 16u
/* An empty report slot: sorts after every candidate key. */
#define GPU_NO_CANDIDATE UINT64_MAX

/* How the device answers a query. */
enum {
    GPU_PATH_RANGES = 0, /* every range scored into a dense accumulator (OR; AND with long shortest lists) */
    GPU_PATH_PROBE = 1,  /* AND: the shortest list's documents probed into the others */
};

typedef struct {
    uint32_t first_block; /* into the block metadata */
    uint32_t num_blocks;
    uint32_t df;
    float weight;         /* idf * count, computed on the host exactly as isn_search does */
    /* weight * the largest block maximum of the resident list (float multiplication rounds monotonically,
     * so no posting contributes more). A disjunctive query's terms come in ascending max_score order:
     * a leading run whose bounds sum below the threshold is non-essential (MaxScore). */
    float max_score;
} gpu_term;

typedef struct {
    uint32_t term_begin; /* into the batch's gpu_term array */
    uint32_t num_terms;
    uint32_t k;
    uint32_t and_mode;
    uint32_t range_top;  /* best documents each range reports (1..GPU_MAX_RANGE_TOP) */
    uint32_t hit_offset; /* into the batch's hit array */
    uint32_t path;       /* GPU_PATH_* */
    uint32_t driver;     /* GPU_PATH_PROBE: the term (0..num_terms-1) whose list drives the probes */
    uint32_t doc_limit;  /* only documents below this are answered (a resident prefix ends there) */
    uint32_t cand_offset; /* its candidates' segment of the batch's pool */
    uint32_t cand_cap;    /* and that segment's size: more candidates is an overflow (the CPU answers) */
    /* Nonzero: range accumulators sum contributions as 64-bit integers in units of 2^-fixed_shift
     * (gpu_fixed_shift: exact, so equal to the CPU's double sums), else in double. */
    uint32_t fixed_shift;
    /* A lower bound of the k-th score as a float key (gpu_float_key; 0: none), e.g. the CPU's threshold
     * probe: ranges, blocks and non-essential lists that cannot reach it are skipped from the start. */
    uint32_t seed_key;
    /* Sampling round: ranges r with r % sample_stride == 0 are scored first; the k-th best of their
     * reports raises the pruning threshold for the others (1: one round). */
    uint32_t sample_stride;
    /* Nonzero in a batch that does not prune: the sampling round's k-th best report raises the other
     * ranges' report floor instead (they are scored whole, and report only what reaches it: at least k
     * documents do, so no answer is below it). */
    uint32_t sampled_floor;
    /* Nonzero: the sampling round scores the leading ranges [0, lead_ranges) instead of every sample_stride-th
     * (sample_stride is then 1), and the second round the ranges from lead_ranges on, pruned at the k-th best
     * of the leading ranges' reports (or seed_key, when higher) whether or not the batch prunes, which is also
     * their report floor (at least k documents reach it: no answer lies below it). For queries
     * with a static prior on an index in global order: there the leading ranges hold the documents of the
     * largest static scores, so their k-th best is near the final k-th score (a strided sample's is far below
     * it: its ranges' few reports each score little), and the ranges after them are mostly skipped whole by
     * their bounds (gpu_range_sampled). */
    uint32_t lead_ranges;
    /* With lead_ranges: the reports of each leading range (range_top is then the other ranges'), sized by the
     * query's k (at least range_top, at most the device's report slots), so that the leading ranges report k in
     * all while each other range reports only its usual few (gpu_range_reports); lead_prune: whether the second
     * round prunes at the leading k-th best (gpu_lead_prunes; else that is only its report floor); lead_stop: the second round ends at
     * the first range whose tail bound (gpu_range_tail_below) cannot reach it or floor_key (gpu_lead_stop_key), on
     * the device, so that the ranges after it cost no block visit and no report slot is read. */
    uint32_t lead_top, lead_prune, lead_stop;
    /* A lower bound of the k-th score as a float key, as seed_key but given whether or not the batch prunes
     * (0: none). Every answer scores at least this, so ranges report only documents that reach it (a hair
     * below: gpu_below_floor) and the candidate bound is never above its key (gpu_floor_candidate_key):
     * the report then skips the many documents that cannot be answers, for the price of one compare. */
    uint32_t floor_key;
    /* Filters (filter_begin, num_filters: the batch's gpu_filter array): every path tests them where a posting
     * is added (and the probe where a driver document is taken), so a document that fails them is never
     * scored, reported or counted toward a threshold; the block-max bounds stay bounds (a filter only removes
     * documents). A bag of words with filters (the common query tree) keeps every other choice of the
     * unfiltered query: accumulator, bound pass, sampling round, pruning, probing. */
    uint32_t filter_begin, num_filters;
    /* Nonzero: a query tree with required or excluded clauses (query_tree.c) in OR mode, and and_mode is 0. Its
     * terms are the required ones first (num_required: every one must hold an admitted document), then the
     * optional ones, then the excluded ones (num_excluded, weight 0: one of them in a document keeps it out).
     * These take the wide accumulator with match counts, no pruning, no sampling round and no bound pass
     * (gpu_tree_admits decides which scored slots count). A tree whose positive clauses are all required and
     * that excludes nothing is a conjunctive query (and_mode) with its filters. */
    uint32_t tree;
    uint32_t num_required, num_excluded;
    /* Set by the CUDA device's launch (gpu_pass_assign), 0 from the backend: 1 + the slot of the stream's filter
     * bitmaps that holds this query's filters evaluated for every document (gpu_pass_word), which its range passes
     * then test instead of the attribute columns; 0: they test the columns (filter_lane). */
    uint32_t pass_slot;
    /* The ranges its filters keep no document of by the zone maps (attribute_zones.h; 0: none, as without filters or
     * zones). The CUDA device gives the bound pass's ranked steps only to filters that leave none out, whose documents
     * lie all over the partition (a step then holds several groups of ranges), not to those that follow the doc ids:
     * dense where they keep, they fill a step with one group, and its postings cost more than unranked ones. */
    uint32_t ranges_zoned_out;
    /* A static prior (isn_gpu_request.prior_weight; 0: none): every path scores a document
     * gpu_prior_score(its BM25 as float, prior_weight, its static score) and keys it by that, and every bound that
     * decides to skip a range, a block or a document adds gpu_prior_bound(prior_weight, the largest static score
     * of the documents it passes over: gpu_upload.range_prior_max for a range). Such queries take the wide
     * accumulator (no bound pass, no compact or narrow counters: theirs bound BM25 alone); the CUDA device runs
     * their report and rescore passes in kernels of their own, so that the others' code is unchanged. */
    float prior_weight;
} gpu_query;

/* A filter clause as the device tests it (gpu_filter_passes), compiled by the backend from the CPU's
 * (ranking/filters.c) against its attribute's resident column (gpu_attribute: first_word and bits copied, so
 * that a test needs nothing else): the document's stored value (0 when it has none) holds when it lies in
 * [least, most], or, with num_values, when it is one of the stored values first_value.. of the batch's filter
 * values; a missing value holds nothing (least >= 1, stored values >= 1); negate keeps the documents where it
 * does not hold. */
typedef struct {
    uint64_t first_word;
    uint32_t bits;
    uint32_t negate;
    uint32_t least, most;
    uint32_t first_value, num_values;
} gpu_filter;

/* A resident attribute column (gpu_column_stored): each document's value in `bits` bits (1..32) from bit 0
 * of word first_word of the column words, a document's bits at doc * bits, stored = value - base + 1 and 0
 * for a document without the attribute. bits 0: the attribute is not resident (its span needs more than 32
 * bits); queries that filter on it are answered by the CPU. */
typedef struct {
    uint64_t first_word;
    int64_t base;
    uint32_t bits;
    uint32_t pad;
} gpu_attribute;

/* The match-count byte of a tree query's slot (gpu_query.tree): required terms add one, an excluded term sets
 * this bit (at most GPU_MAX_TERMS required terms, so the count never reaches it). */
#define GPU_EXCLUDED_MARK 0x80u

/* What the device returns, per query. */
typedef struct {
    uint32_t num_hits;
    uint32_t candidates; /* above max_candidates: overflow, the CPU answers */
    uint64_t postings_scored;
    /* postings decoded, whether their documents pass the query's filters or not (the emulated device counts
     * them, to compare the work of filtered and unfiltered queries without a GPU; the CUDA device leaves 0) */
    uint64_t postings_decoded;
    uint32_t ranges_scored;   /* first pass, ranges with postings */
    /* ranges skipped without decoding: no postings, an AND term absent, no essential list, or a block-max
     * bound below the threshold */
    uint32_t ranges_pruned;
    uint32_t ranges_rescored; /* ranges with more documents at or above the threshold key than reported */
    /* ranges past the second round's stop (gpu_query.lead_stop) below the doc limit: never visited */
    uint32_t ranges_stopped;
    uint32_t blocks_skipped;  /* blocks of scored ranges left undecoded by their bound */
    uint32_t reports;         /* documents the first pass's ranges reported (at or above their floors) */
    uint32_t accumulator;     /* isn_gpu_accumulator: the report pass's layout */
    /* narrow ranges with a report floor (reported from the log of slots their adds took to the floor), and
     * those of them whose log overflowed (reported from a scan of their counters) */
    uint32_t ranges_floored, ranges_scanned;
    /* steps of the ranked report pass (report_kernels.cu: a filter bitmap's query, several ranges a step) */
    uint32_t ranked_steps;
} gpu_query_result;

/* A list the backend streams to the device for one batch (isn_gpu_options.stream_bytes): its blocks whole, from the
 * host's layout of every list (gpu_upload.host_payload, host_blocks), copied into the batch's stream's staging
 * region before its passes run; the batch's gpu_term then names stage_block, so the kernels read it as they read a
 * resident list. Its metadata's offsets move by stage_offset - host_offset (gpu_stage_meta_word). */
typedef struct {
    uint64_t host_block;   /* its first block: the index's block id, into host_blocks (and block_suffix_max) */
    uint64_t host_offset;  /* its first byte in host_payload */
    uint64_t stage_offset; /* where that byte goes in the device payload (gpu_stage_payload_base on) */
    uint64_t bytes;
    uint32_t stage_block;  /* where its first block's metadata goes (gpu_stage_block_base on) */
    uint32_t num_blocks;
} gpu_stage_list;

typedef struct {
    const gpu_query *queries; /* GPU_PATH_RANGES queries first, then GPU_PATH_PROBE ones */
    uint32_t num_queries;
    uint32_t num_range_queries;
    const gpu_term *terms;
    uint32_t num_terms;
    const gpu_filter *filters; /* of the queries with filters (gpu_query.filter_begin) */
    uint32_t num_filters;
    const uint32_t *filter_values; /* stored values (gpu_filter) */
    uint32_t num_filter_values;
    uint32_t total_hits; /* sum of k */
    uint32_t total_candidates; /* sum of cand_cap: at most max_batch * max_candidates */
    /* the lists streamed for this batch into its stream's staging region (gpu_stage_list; none without) */
    const gpu_stage_list *stage;
    uint32_t num_stage;
    /* out, valid after finish */
    gpu_query_result *results;
    /* total_hits entries; finish may point it at the device's own buffer instead of filling the caller's,
     * valid until the next launch on that stream */
    isn_hit *hits;
} gpu_batch;

typedef struct {
    double ms_transfer_in, ms_threshold_pass, ms_select_threshold, ms_score_pass, ms_and_probe, ms_sort,
        ms_transfer_out;
    uint64_t bytes_to_device, bytes_from_device;
    uint32_t overflow_retries; /* collection rounds repeated with a tighter key after a candidate overflow */
    /* filter bitmaps (gpu_query.pass_slot) the batch built, and its queries that tested one */
    uint32_t filter_bitmaps_built, filter_bitmap_queries;
} gpu_batch_timing;

typedef struct {
    const uint8_t *payload; /* host bytes to upload */
    uint64_t payload_bytes;
    const isn_block_meta *blocks;
    uint64_t num_blocks;
    uint32_t num_docs;
    uint32_t max_batch, max_terms, max_k, max_candidates, streams;
    /* the attribute columns (gpu_attribute; the filters name theirs: gpu_filter), resident beside the postings */
    const uint32_t *attribute_words;
    uint64_t num_attribute_words; /* one more word past the last column: a value is read as two words */
    uint32_t max_filters, max_filter_values; /* per batch */
    /* the report slots a (query, range) has: no query's range_top is above it (gpu_report_stride with zone maps,
     * gpu_range_top(max_k, num_docs) without) */
    uint32_t report_stride;
    /* The static scores (num_docs, isn_index_static_scores) and each range's largest (gpu_num_ranges of them:
     * range r holds documents [r * GPU_RANGE_DOCS, (r + 1) * GPU_RANGE_DOCS)), resident beside the postings for
     * the queries with a prior (gpu_query.prior_weight); both NULL when the index has no finite static scores. */
    const float *static_scores;
    /* gpu_num_ranges x GPU_RANGE_BOUNDS floats: each range's largest static score, then for every range r the
     * index's score bound at its first document (isn_index_score_bounds: the largest best tf part from it on;
     * +inf without score bounds), then the static scores' suffix maximum there (isn_index_prior_bounds): what
     * gpu_range_tail_below reads */
    const float *range_prior_max;
    /* num_blocks floats, with range_prior_max on an index in global order (NULL otherwise): each block's largest
     * max_tf_part from it to its list's end (tail_bounds.suffix_max), for gpu_range_tail_below */
    const float *block_suffix_max;
    /* Streaming (gpu_stage_list; stage_bytes 0: none): every list laid out on the host (host_payload, with
     * host_blocks: a copy of the index's metadata whose offsets point into it), which the device reads from for
     * each batch; each stream's staging region holds stage_bytes of payload and stage_blocks blocks' metadata
     * (and suffix maxima), past the resident ones (gpu_stage_payload_base, gpu_stage_block_base). */
    const uint8_t *host_payload;
    uint64_t host_payload_bytes;
    const isn_block_meta *host_blocks;
    uint64_t stage_bytes;
    uint32_t stage_blocks;
} gpu_upload;

/* Bytes past a payload's last block that a device may read (two-word loads at its end). */
#define GPU_PAYLOAD_PAD 64u

/* Where stream `slot`'s staging region starts: in the device payload (16-byte aligned, past the resident
 * payload's padding) and in the device block metadata (past the index's blocks). A region holds lists of at most
 * stage_bytes - GPU_PAYLOAD_PAD bytes in all, so that their last block's padding stays inside it. */
static inline uint64_t gpu_stage_payload_base(const gpu_upload *u, uint32_t slot) {
    return (u->payload_bytes + GPU_PAYLOAD_PAD + 15u) / 16u * 16u + (uint64_t)slot * u->stage_bytes;
}
static inline uint64_t gpu_stage_block_base(const gpu_upload *u, uint32_t slot) {
    return u->num_blocks + (uint64_t)slot * u->stage_blocks;
}
/* A device's payload and block metadata, with every stream's staging region when streaming. */
static inline uint64_t gpu_payload_room(const gpu_upload *u) {
    return u->stage_bytes ? gpu_stage_payload_base(u, u->streams) : u->payload_bytes + GPU_PAYLOAD_PAD;
}
static inline uint64_t gpu_block_room(const gpu_upload *u) {
    return u->stage_bytes ? gpu_stage_block_base(u, u->streams) : u->num_blocks;
}
/* Whether a streamed list would lie outside stream `slot`'s staging region (a backend's error: devices refuse it). */
static inline bool gpu_stage_list_outside(const gpu_upload *u, uint32_t slot, const gpu_stage_list *l) {
    const uint64_t base = gpu_stage_payload_base(u, slot), block_base = gpu_stage_block_base(u, slot);
    return slot >= u->streams || l->stage_offset < base || l->stage_offset % 16u != 0 ||
           l->stage_offset + l->bytes + GPU_PAYLOAD_PAD > base + u->stage_bytes || l->stage_block < block_base ||
           (uint64_t)l->stage_block + l->num_blocks > block_base + u->stage_blocks ||
           l->host_offset + l->bytes > u->host_payload_bytes || l->host_offset % 16u != 0 ||
           l->host_block + l->num_blocks > u->num_blocks;
}

/* The bounds gpu_range_tail_below (posting_decode.h) reads, a device's copies of gpu_upload's: the ranges'
 * (range_prior_max, num_ranges of them), the blocks' metadata and their suffix maxima (block_suffix_max). */
typedef struct {
    const float *ranges;
    const isn_block_meta *blocks;
    const float *block_suffix;
    uint32_t num_ranges;
} gpu_tail_view;

/* The per-range floats of gpu_upload.range_prior_max: largest static score, tf-part bound from the range on,
 * static score bound from the range on. */
#define GPU_RANGE_BOUNDS 3u

/* The doc-id ranges of a partition of num_docs documents (at least one). */
static inline uint32_t gpu_num_ranges(uint32_t num_docs) {
    const uint32_t ranges = (num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
    return ranges ? ranges : 1u;
}

typedef struct gpu_device gpu_device;

typedef struct {
    /* Uploads (keeps its own copy of what `upload` points at) and allocates per-stream buffers. NULL with err. */
    gpu_device *(*open)(int ordinal, const gpu_upload *upload, char *err, size_t err_len);
    /* Enqueues a batch on stream `slot`; copies what it needs from the batch before returning, except
     * results and hits, written by finish. 0, or -1 with err (the device is then unhealthy). */
    int (*launch)(gpu_device *device, uint32_t slot, const gpu_batch *batch, char *err, size_t err_len);
    int (*finish)(gpu_device *device, uint32_t slot, gpu_batch *batch, gpu_batch_timing *timing, char *err,
                  size_t err_len);
    void (*close)(gpu_device *device);
    const char *(*name)(const gpu_device *device);
} gpu_device_ops;

extern const gpu_device_ops gpu_emulated_device;
/* An ISN_GPU_* switch's number (env_switches.c), or `otherwise` when it is unset, not a whole number, or
 * outside [least, 2^31). */
uint32_t gpu_env_number(const char *name, uint32_t otherwise, uint32_t least);
/* Which queries a device gives the bound pass, beside what the pass itself can take (gpu_bound_pass_takes):
 * ISN_GPU_BOUND_PASS=0 none, ISN_GPU_BOUND_PASS_FILTERED=0 none with filters, ISN_GPU_BOUND_MAX_K their largest
 * k. Read once per device (gpu_bound_pass_switches_read), tested per query (gpu_bound_pass_for). */
typedef struct {
    bool on;
    bool filtered;
    uint32_t max_k;
} gpu_bound_pass_switches;
gpu_bound_pass_switches gpu_bound_pass_switches_read(void);
/* NULL in a build without CUDA. */
const gpu_device_ops *gpu_cuda_device_ops(void);

/* Device layout of the resident postings (device_layout.c). Each block holds its postings' doc offsets from
 * the block's base (doc - base - 1, base the previous block's last doc: gpu_layout_offset_of) as a stream
 * of fields of one width in four interleaved 32-bit lanes (field i in lane i % 4 at bit (i / 4) * width, 16
 * bytes per 32 bits of a lane, gpu_layout_stream_bytes), then each posting's isn_bm25_tf_part as a float
 * (gpu_layout_parts_bytes): the part a term's weight multiplies, so the device needs neither the tf nor the
 * document's norm (a random load per posting) nor a division. Offsets rather than gaps: a lane decodes its
 * postings on its own, without a prefix sum across the warp, for a few more bits a field. Blocks start on
 * 16-byte boundaries and have no exceptions. The offset field of the metadata the device gets holds the
 * block's byte offset and the field width (gpu_layout_meta_word), so one load of it is all a warp needs
 * before the values.
 * gpu_layout_measure fills widths[b] for every block b of the index; 0, or -1 with err for a block that
 * does not decode. gpu_layout_list_bytes: device bytes of a list's first `upto` blocks. gpu_layout_write
 * lays out each term's first term_blocks[t] blocks, one list after the other in term order, into payload
 * (sized by gpu_layout_list_bytes) and sets their offset fields in metas (a copy of the index's metadata);
 * 0, or -1 with err. Measuring and writing spread the terms over `threads` threads. */
#define GPU_LAYOUT_OFFSET_BITS 40 /* of the offset field: the rest holds the field width */
int gpu_layout_measure(const isn_index *ix, uint8_t *widths, uint32_t threads, char *err, size_t err_len);
uint64_t gpu_layout_list_bytes(const isn_index *ix, const uint8_t *widths, uint32_t term, uint32_t upto);
int gpu_layout_write(const isn_index *ix, const uint8_t *widths, const uint32_t *term_blocks, uint8_t *payload,
                     isn_block_meta *metas, uint32_t threads, char *err, size_t err_len);

/* Best documents each range reports in the first pass. The k-th best report is the threshold; a range
 * is scored again only when all its reports reach it (it may hold more). Documents fall into ranges
 * about evenly, so with lambda = k / ranges expected answers per range, lambda + 3 sqrt(lambda) + 1
 * reports leave almost no range to score again. `ranges`: those that can hold an answer (a filtered query's
 * answers lie in the ranges its filters keep a document of: attribute_zones.h). */
/* lambda + 3 sqrt(lambda) + 1, uncapped */
static inline double gpu_range_share_top(double lambda) { return 1.0 + lambda + 3.0 * sqrt(lambda); }
static inline uint32_t gpu_range_top_of_ranges(uint32_t k, uint32_t ranges) {
    if (ranges == 0) ranges = 1;
    double m = gpu_range_share_top((double)k / ranges);
    if (m > GPU_MAX_RANGE_TOP) m = GPU_MAX_RANGE_TOP;
    return (uint32_t)m + (m < GPU_MAX_RANGE_TOP && m > (uint32_t)m ? 1u : 0u);
}

/* The leading ranges of a query with a prior in global order (gpu_query.lead_ranges): the fewest whose share of
 * the top k each reports with room to spare (gpu_range_top_of_ranges over them) within `slots` a range, so that
 * the k-th best of their reports lies inside each one's list and the collection rescores few of them. A range
 * whose every report reaches the k-th best may hold more and is scored again: reporting k exactly, or a share
 * of it, saturates it. *top: each one's reports. */
static inline uint32_t gpu_lead_ranges_of(uint32_t k, uint32_t slots, uint32_t *top) {
    uint32_t lead = 1;
    while (gpu_range_share_top((double)k / lead) > (double)slots && lead < k) lead++;
    *top = gpu_range_top_of_ranges(k, lead);
    if (*top > slots) *top = slots;
    return lead;
}
static inline uint32_t gpu_range_top(uint32_t k, uint32_t num_docs) {
    return gpu_range_top_of_ranges(k, (num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS);
}

/* The report slots a device keeps a (query, range) where filtered queries size their lists by the ranges they
 * keep (attribute_zones.h): room for k up to max_k over every range, and over a sixteenth of them (fewer ranges
 * still take this many). Without zone maps, gpu_range_top(max_k, num_docs) is enough. */
#define GPU_ZONE_RANGE_SHARE 16u
static inline uint32_t gpu_report_stride(uint32_t max_k, uint32_t num_docs) {
    const uint32_t ranges = (num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
    return gpu_range_top_of_ranges(max_k, ranges / GPU_ZONE_RANGE_SHARE);
}

/* The report slots of a (query, range) on a device: gpu_report_stride with zone maps, gpu_range_top without; on an
 * index whose queries may score their leading ranges first (gpu_query.lead_ranges: static scores in global order), at
 * least a top max_k's over one range (GPU_MAX_RANGE_TOP at most), so that the first range alone can report a top k
 * with room to spare (gpu_lead_ranges_of), where most of it lies. */
static inline uint32_t gpu_report_slots(uint32_t max_k, uint32_t num_docs, bool zones, bool leads) {
    const uint32_t stride = zones ? gpu_report_stride(max_k, num_docs) : gpu_range_top(max_k, num_docs);
    const uint32_t lead = gpu_range_top_of_ranges(max_k, 1);
    return leads && lead > stride ? lead : stride;
}

/* Sampled ranges hold at least 2k reports when they can: the sampling round's k-th best report is then
 * a threshold near the final one (GPU_MAX_SAMPLE_STRIDE at most; 1 scores every range in one round).
 * `ranges`: those that can hold an answer (gpu_range_top_of_ranges). */
static inline uint32_t gpu_sample_stride(uint32_t k, uint32_t range_top, uint32_t ranges) {
    uint64_t stride = ((uint64_t)ranges * range_top) / (2ull * (k ? k : 1));
    if (stride < 1) stride = 1;
    if (stride > GPU_MAX_SAMPLE_STRIDE) stride = GPU_MAX_SAMPLE_STRIDE;
    return (uint32_t)stride;
}

/* Shift for exact integer accumulation, or 0. Every contribution is a float of at least 2^-e (e from
 * the smallest: the lowest weight times the tf part of tf = 1 at the longest document), so a multiple
 * of 2^-(e + 23); sums of such multiples below 2^(53 - e - 23) are exact in double (the CPU's sums) and
 * in a 64-bit integer scaled by 2^(e + 23) alike, whatever the order. */
static inline uint32_t gpu_fixed_shift(float min_weight, double weight_sum, float k1_plus_1, float max_norm) {
    double smallest = (double)min_weight * k1_plus_1 / (1.0 + max_norm) * 0.999;
    if (!(smallest > 0.0)) return 0;
    int e = 0;
    while (e < 64 && smallest < 1.0 / (double)((uint64_t)1 << (e < 63 ? e : 63))) e++;
    /* 2^-e <= smallest */
    int shift = e + 23;
    if (e >= 64 || shift > 60 || shift < 1) return 0;
    double largest = weight_sum * k1_plus_1 * 1.001;
    if (largest * (double)((uint64_t)1 << shift) >= 9007199254740992.0) return 0; /* 2^53 */
    return (uint32_t)shift;
}

#ifdef __cplusplus
}
#endif

#endif
