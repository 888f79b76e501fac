/* Private to gpu/: reading the device layout's posting blocks (device.h) one value at a time, and the
 * per-range block lookups. Shared by the CUDA kernels and the host emulation, so the host tests
 * check the same arithmetic the device runs. */
#ifndef ISN_GPU_POSTING_DECODE_H
#define ISN_GPU_POSTING_DECODE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gpu/device.h"

#ifdef __CUDACC__
#define GPU_HD __host__ __device__ __forceinline__
#else
#define GPU_HD static inline
#endif

/* Little-endian 32-bit load at any byte address. On the device: two aligned loads and a funnel shift
 * (the payload buffer is padded so the second load stays inside it). */
GPU_HD uint32_t gpu_load_u32(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    uintptr_t address = (uintptr_t)p;
    const uint32_t *word = (const uint32_t *)(address & ~(uintptr_t)3);
    return __funnelshift_r(__ldg(word), __ldg(word + 1), (unsigned)(address & 3) * 8u);
#else
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}

GPU_HD uint32_t gpu_width_mask(uint32_t bits) { return bits >= 32 ? 0xFFFFFFFFu : (1u << bits) - 1u; }

/* The device layout (device.h): a block's offset and field width in its metadata's offset field. A field
 * holds doc - base - 1, base being the previous block's last doc (UINT32_MAX for a list's first block, so
 * its fields are the docs themselves). */
GPU_HD uint64_t gpu_layout_meta_word(uint64_t offset, uint32_t doc_bits) {
    return offset | (uint64_t)doc_bits << GPU_LAYOUT_OFFSET_BITS;
}
/* A streamed block's metadata offset word (gpu_stage_list): the host layout's, moved to its staged copy (the field
 * width above GPU_LAYOUT_OFFSET_BITS stays: the offset part never leaves [0, 2^GPU_LAYOUT_OFFSET_BITS)). */
GPU_HD uint64_t gpu_stage_meta_word(uint64_t host_word, uint64_t host_offset, uint64_t stage_offset) {
    return host_word - host_offset + stage_offset;
}
GPU_HD uint64_t gpu_layout_offset(uint64_t word) { return word & (((uint64_t)1 << GPU_LAYOUT_OFFSET_BITS) - 1u); }
GPU_HD uint32_t gpu_layout_doc_bits(uint64_t word) { return (uint32_t)(word >> GPU_LAYOUT_OFFSET_BITS) & 0xFFu; }
/* A stream of n fields: each of the four lanes holds ceil(n / 4) of them. */
GPU_HD uint32_t gpu_layout_stream_bytes(uint32_t n, uint32_t bits) { return 16u * ((((n + 3u) >> 2) * bits + 31u) >> 5); }
/* n tf parts (floats), padded to a multiple of four */
GPU_HD uint32_t gpu_layout_parts_bytes(uint32_t n) { return 4u * ((n + 3u) & ~3u); }
GPU_HD uint64_t gpu_layout_block_bytes(uint32_t n, uint32_t doc_bits) {
    return (uint64_t)gpu_layout_stream_bytes(n, doc_bits) + gpu_layout_parts_bytes(n);
}

GPU_HD uint32_t gpu_layout_offset_of(uint32_t base, uint32_t doc) { return doc - base - 1u; }
GPU_HD uint32_t gpu_layout_doc_of(uint32_t base, uint32_t field) { return base + field + 1u; }

/* Field i of a device-layout stream of `bits`-bit fields. */
GPU_HD uint32_t gpu_layout_value(const uint8_t *stream, uint32_t bits, uint32_t i) {
    if (bits == 0) return 0;
    const uint32_t bit = (i >> 2) * bits, word = bit >> 5, shift = bit & 31u, lane = i & 3u;
    uint64_t v = gpu_load_u32(stream + 16u * word + 4u * lane);
    if (shift + bits > 32u) v |= (uint64_t)gpu_load_u32(stream + 16u * (word + 1u) + 4u * lane) << 32;
    return (uint32_t)(v >> shift) & gpu_width_mask(bits);
}

/* Postings in block b of a list of df postings. */
GPU_HD uint32_t gpu_block_count(uint32_t df, uint32_t num_blocks, uint32_t b) {
    return b + 1 == num_blocks ? df - b * ISN_BLOCK_SIZE : ISN_BLOCK_SIZE;
}

/* First block of the list whose last doc >= target (num_blocks when none). */
GPU_HD uint32_t gpu_lower_block(const isn_block_meta *blocks, uint32_t num_blocks, uint32_t target) {
    uint32_t lo = 0, hi = num_blocks;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (blocks[mid].last_doc < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The blocks of a list that may hold documents of [lo, hi): [*first, *end). */
GPU_HD void gpu_blocks_in_range(const isn_block_meta *blocks, uint32_t num_blocks, uint32_t lo, uint32_t hi,
                                uint32_t *first, uint32_t *end) {
    uint32_t f = gpu_lower_block(blocks, num_blocks, lo);
    uint32_t last = gpu_lower_block(blocks, num_blocks, hi - 1);
    *first = f;
    *end = last < num_blocks ? last + 1 : num_blocks;
    if (*end < f) *end = f;
}

/* The CPU's per-posting contribution: the weight times isn_bm25_tf_part, both in float. The device layout
 * holds isn_bm25_tf_part itself, computed at upload by that function. */
GPU_HD float gpu_posting_contribution(float weight, float tf_part) { return weight * tf_part; }

/* A score's key: keys order as the scores do, negative ones included (a static prior can take a score to 0 or
 * below, isn_prior_score): a positive float's bits with the sign bit set, a negative one's bits inverted, so
 * that no score's key is 0, which stands for "none" wherever a key is optional (seed_key, floor_key, theta).
 * -0 keys as +0, the same score. */
GPU_HD uint32_t gpu_float_key(float score) {
    uint32_t bits;
    memcpy(&bits, &score, sizeof bits);
    if (bits == 0x80000000u) bits = 0u;
    return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

/* gpu_float_key of a score known to be >= 0 (every score without a static prior: BM25 sums positive weights
 * times positive tf parts), in one operation: the kernels that never see a prior key their slots with it, so
 * that their code stays as short as it was before keys took negative scores (the narrow ones run at 40-48
 * registers, where one more live value spills). */
GPU_HD uint32_t gpu_nonnegative_key(float score) {
    uint32_t bits;
    memcpy(&bits, &score, sizeof bits);
    return bits | 0x80000000u;
}

/* The score whose key is `key` (gpu_float_key's inverse). */
GPU_HD float gpu_key_float(uint32_t key) {
    const uint32_t bits = key & 0x80000000u ? key & 0x7FFFFFFFu : ~key;
    float score;
    memcpy(&score, &bits, sizeof score);
    return score;
}

/* The score of a candidate key (gpu_candidate_key's). */
GPU_HD float gpu_candidate_score(uint64_t key) { return gpu_key_float(~(uint32_t)(key >> 32)); }

/* True when a sum of contributions bounded by `bound` (a double sum of float bounds, any order) cannot
 * reach the score whose float key is theta_key: the final score is (float) of a double sum of at most
 * GPU_MAX_OR_TERMS floats, off by far less than the 1e-12 margin (taken toward +inf: a bound with a static
 * prior may be negative), and float rounding is monotone. */
GPU_HD bool gpu_bound_below(double bound, uint32_t theta_key) {
    if (theta_key == 0) return false;
    return gpu_float_key((float)(bound * (bound >= 0.0 ? 1.0 + 1e-12 : 1.0 - 1e-12))) < theta_key;
}

/* ------------------------------------------------------------------ the static prior (gpu_query.prior_weight)
 * A document's score with a prior is isn_prior_score's: its BM25 rounded to float, then the weighted static
 * score added in float, two roundings and no fused multiply-add, as the CPU computes it (built for x86-64-v2,
 * which has none). */
GPU_HD float gpu_prior_score(float bm25, float weight, float static_score) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(bm25, __fmul_rn(weight, static_score));
#else
    return isn_prior_score(bm25, weight, static_score);
#endif
}

/* What the prior adds at most to a document whose static score is at most static_bound: isn_prior_bound's
 * number (W x the bound, exact in double, rounded up by 2^-20 of its magnitude). */
GPU_HD double gpu_prior_bound(float weight, float static_bound) {
    const double part = (double)weight * (double)static_bound;
#ifdef __CUDA_ARCH__
    return __dadd_rn(part, __dmul_rn(fabs(part), ISN_PRIOR_BOUND_MARGIN));
#else
    return part + fabs(part) * ISN_PRIOR_BOUND_MARGIN;
#endif
}

/* True when documents whose BM25 is at most bm25_bound (a double sum of float bounds, as gpu_bound_below
 * takes) and whose prior adds at most prior_add (gpu_prior_bound) cannot reach theta_key. With the prior the
 * BM25 part's own float rounding counts at the score's magnitude, which the prior may have taken near 0: the
 * BM25 bound takes 2^-20 of itself for it (its float rounding, the product's and the prior's sum's, 2^-24
 * each), as the CPU's bounds do (ranking_bound_fails). */
GPU_HD bool gpu_prior_below(double bm25_bound, double prior_add, uint32_t theta_key) {
    return gpu_bound_below(bm25_bound * (1.0 + 1.0 / 1048576.0) + prior_add, theta_key);
}

/* The bound grid of a range [lo, hi): cells of GPU_SUB_DOCS documents, each holding the sum over the
 * query's lists of the largest block maximum among the list's blocks meeting the cell. Blocks tile the
 * doc ids ([previous last doc + 1, last doc]) and span at least as many documents as postings, so a
 * cell meets at most two blocks of a list, and the larger bound of the two (the earlier on a tie) is
 * the one added there. This gives the cells [*c0, *c1] block b (of the blocks [first, end) meeting
 * the range) covers, and whether its bound goes into its first and its last cell. */
GPU_HD void gpu_block_cells(const isn_block_meta *blocks, uint32_t b, uint32_t first, uint32_t end, uint32_t lo,
                            uint32_t hi, float weight, uint32_t *c0, uint32_t *c1, bool *adds_first, bool *adds_last) {
    const uint32_t start = b ? blocks[b - 1].last_doc + 1 : 0, last = blocks[b].last_doc;
    const uint32_t from = start > lo ? start : lo, to = last < hi - 1 ? last : hi - 1;
    const float bound = weight * blocks[b].max_tf_part;
    *c0 = (from - lo) / GPU_SUB_DOCS;
    *c1 = (to - lo) / GPU_SUB_DOCS;
    /* the previous block meets the first cell when this block starts inside it, past the range start */
    const bool previous = b > first && start > lo && (start - lo) % GPU_SUB_DOCS != 0;
    *adds_first = !(previous && weight * blocks[b - 1].max_tf_part >= bound);
    const bool next = b + 1 < end && last + 1 < hi && (last + 1 - lo) % GPU_SUB_DOCS != 0;
    *adds_last = !(next && weight * blocks[b + 1].max_tf_part > bound);
}

/* The sampling round (gpu_query.sample_stride, lead_ranges): the ranges it scores (of num_ranges), its i-th
 * range, whether range r is one of them, and whether a second round scores the others. */
GPU_HD uint32_t gpu_sampled_ranges(const gpu_query *q, uint32_t num_ranges) {
    if (q->lead_ranges) return q->lead_ranges < num_ranges ? q->lead_ranges : num_ranges;
    const uint32_t stride = q->sample_stride ? q->sample_stride : 1u;
    return (num_ranges + stride - 1u) / stride;
}
GPU_HD uint32_t gpu_sampled_range(const gpu_query *q, uint32_t i) {
    return q->lead_ranges ? i : i * (q->sample_stride ? q->sample_stride : 1u);
}
GPU_HD bool gpu_range_sampled(const gpu_query *q, uint32_t r) {
    return q->lead_ranges ? r < q->lead_ranges : r % (q->sample_stride ? q->sample_stride : 1u) == 0;
}
GPU_HD bool gpu_two_rounds(const gpu_query *q) { return q->lead_ranges != 0 || q->sample_stride > 1; }

/* Report slots: range r's count (gpu_query.lead_top for a leading range, range_top for the others), and its
 * first report's place among the query's reports laid end to end (ranges in order, each its count). */
GPU_HD uint32_t gpu_range_reports(const gpu_query *q, uint32_t r) {
    return r < q->lead_ranges ? q->lead_top : q->range_top;
}
GPU_HD uint32_t gpu_reports_before(const gpu_query *q, uint32_t r) {
    const uint32_t lead = r < q->lead_ranges ? r : q->lead_ranges;
    return lead * q->lead_top + (r - lead) * q->range_top;
}
/* The range and slot of report i of those laid end to end (gpu_reports_before). */
GPU_HD void gpu_report_place(const gpu_query *q, uint32_t i, uint32_t *range, uint32_t *slot) {
    const uint32_t leading = q->lead_ranges * q->lead_top;
    if (i < leading) {
        *range = i / q->lead_top;
        *slot = i % q->lead_top;
    } else {
        *range = q->lead_ranges + (i - leading) / q->range_top;
        *slot = (i - leading) % q->range_top;
    }
}

/* True when no document of range r or after it can reach theta_key (gpu_query.lead_stop), as tail_bound.h bounds
 * them: each term adds at most its weight times the lesser of the index's tf-part bound from the range on and its
 * resident list's suffix maximum from the block holding the range's first document (nothing when no resident block
 * reaches it), and the prior at most gpu_prior_bound of the static scores' bound from the range on. Every part only
 * falls as r rises, so the first such range ends the query's passes. Float products and a double sum, as
 * gpu_prior_below takes them. */
GPU_HD bool gpu_range_tail_below(const gpu_query *q, const gpu_term *terms, const gpu_tail_view *v, uint32_t r,
                                 uint32_t theta_key) {
    const float part = v->ranges[v->num_ranges + r], prior = v->ranges[2u * v->num_ranges + r];
    double sum = 0.0;
    for (uint32_t t = 0; t < q->num_terms; t++) {
        const gpu_term *term = &terms[q->term_begin + t];
        const uint32_t k = gpu_lower_block(v->blocks + term->first_block, term->num_blocks, r * GPU_RANGE_DOCS);
        if (k == term->num_blocks) continue;
        const float suffix = v->block_suffix[term->first_block + k];
        sum += (double)(term->weight * (suffix < part ? suffix : part));
    }
    return gpu_prior_below(sum, gpu_prior_bound(q->prior_weight, prior), theta_key);
}

/* Whether the second round of a query with leading ranges prunes at their k-th best, theta_key (gpu_query.lead_prune:
 * 0 never, 1 always, 2 where the first range alone reports the top k or the tail bound at that k-th best ends the
 * query inside the partition). The first range of a dominant prior holds most of a top k, so a k it reports whole
 * has a k-th best near the final one, and so has one that the tail bound ends the query at: most ranges' bounds
 * are below such a k-th best. A k spread over many leading ranges has the k-th best of the weakest of them, which
 * few ranges' bounds are below, and there pruned passes cost more a posting than unpruned ones and skip little. */
GPU_HD bool gpu_lead_prunes(const gpu_query *q, const gpu_term *terms, const gpu_tail_view *v, uint32_t theta_key) {
    if (q->lead_prune != 2u) return q->lead_prune != 0u;
    return q->lead_ranges == 1u || gpu_range_tail_below(q, terms, v, v->num_ranges - 1u, theta_key);
}

/* The key a query's second round stops at (gpu_query.lead_stop): the leading k-th best (theta_key, the seed's when
 * higher) or the probe's floor, whichever is higher; both bound the final k-th score from below (the host then
 * leaves the stop to the device: backend.c). */
GPU_HD uint32_t gpu_lead_stop_key(const gpu_query *q, uint32_t theta_key) {
    return theta_key > q->floor_key ? theta_key : q->floor_key;
}

/* The first range in [from, to) whose tail is below theta_key (gpu_range_tail_below), or `to`. */
GPU_HD uint32_t gpu_range_tail_stop(const gpu_query *q, const gpu_term *terms, const gpu_tail_view *v, uint32_t from,
                                    uint32_t to, uint32_t theta_key) {
    uint32_t lo = from, hi = to;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2u;
        if (gpu_range_tail_below(q, terms, v, mid, theta_key)) hi = mid;
        else lo = mid + 1u;
    }
    return lo;
}

/* The bound pass (device.h) counts each posting's contribution c as ceil(c * scale) in a counter of at most
 * gpu_bound_max(): each term adds less than its maximum times the scale plus one, so a scale of
 * (gpu_bound_max() - terms - 1) / (the query's summed term maxima) keeps a document's count within it (the
 * spare unit covers the float sum's rounding). The float is the same on the device and the host. */
GPU_HD uint32_t gpu_bound_max(void) { return (1u << (32u / GPU_BOUND_RANGES)) - 1u; }
GPU_HD float gpu_bound_scale(const gpu_query *query, const gpu_term *terms) {
    float most = 0.0f;
    for (uint32_t t = 0; t < query->num_terms; t++) most += terms[query->term_begin + t].max_score;
    return (float)(gpu_bound_max() - query->num_terms - 1u) / most;
}

/* Whether the bound pass may take a query: an unpruned, unseeded disjunctive query of one round with
 * fixed-point scores, one chunk of terms, short report lists, k at most max_k and no static prior (its
 * counters bound BM25 alone; a query with a prior takes the wide accumulator's passes). The CUDA device also asks
 * that its sums fit the narrow kernel's counters (accumulator_kind), which the pass itself does not need. */
GPU_HD bool gpu_bound_pass_takes(const gpu_query *q, uint32_t max_k) {
    return !q->and_mode && !q->tree && q->fixed_shift != 0 && q->seed_key == 0 && !gpu_two_rounds(q) &&
           q->num_terms <= GPU_MAX_TERMS && q->range_top <= GPU_BOUND_RANGE_TOP && q->k <= max_k &&
           q->prior_weight == 0.0f;
}

/* Whether a device whose switches are `on` gives a query the bound pass. */
GPU_HD bool gpu_bound_pass_for(const gpu_bound_pass_switches *on, const gpu_query *q) {
    return on->on && (on->filtered || q->num_filters == 0) && gpu_bound_pass_takes(q, on->max_k);
}

/* ------------------------------------------------------------------ query trees and filters */

/* What a tree query's term t does to a slot's match-count byte: 1 adds one (required; every term of an AND
 * query), 2 sets GPU_EXCLUDED_MARK (excluded), 0 nothing (optional). */
GPU_HD uint32_t gpu_term_match(const gpu_query *q, uint32_t t) {
    if (q->and_mode) return 1u;
    if (!q->tree) return 0u;
    return t < q->num_required ? 1u : t + q->num_excluded >= q->num_terms ? 2u : 0u;
}

/* A document's stored value in a resident attribute column of `bits` bits a document starting at `column`
 * (gpu_attribute): 0 when it has none. The second word is read only where the value straddles two (never for
 * widths that divide 32). */
GPU_HD uint32_t gpu_column_stored(const uint32_t *column, uint32_t bits, uint32_t doc) {
    const uint64_t bit = (uint64_t)doc * bits;
    const uint32_t *at = column + (bit >> 5);
    const uint32_t shift = (uint32_t)(bit & 31u);
#ifdef __CUDA_ARCH__ /* the columns never change while a kernel runs: the read-only path */
    uint64_t pair = __ldg(at);
    if (shift + bits > 32u) pair |= (uint64_t)__ldg(at + 1) << 32;
#else
    uint64_t pair = at[0];
    if (shift + bits > 32u) pair |= (uint64_t)at[1] << 32;
#endif
    const uint32_t mask = bits >= 32u ? 0xFFFFFFFFu : (1u << bits) - 1u;
    return (uint32_t)(pair >> shift) & mask;
}

/* Whether a stored value holds a filter's test before its negation (gpu_filter): it lies in [least, most], or,
 * with num_values, is one of values[0..num_values). The range kernels call it with the filter's fields loaded
 * one at a time (filter_lane), everything else through gpu_filter_passes. */
GPU_HD bool gpu_stored_holds(uint32_t stored, uint32_t least, uint32_t most, const uint32_t *values, uint32_t num_values) {
    if (num_values == 0) return stored >= least && stored <= most;
    bool holds = false;
#ifdef __CUDA_ARCH__
    for (uint32_t i = 0; i < num_values && !holds; i++) holds = __ldg(&values[i]) == stored;
#else
    for (uint32_t i = 0; i < num_values && !holds; i++) holds = values[i] == stored;
#endif
    return holds;
}

/* Whether a document whose stored value is `stored` passes the filter (gpu_filter; values: the batch's). */
GPU_HD bool gpu_filter_passes(const gpu_filter *f, const uint32_t *values, uint32_t stored) {
    return gpu_stored_holds(stored, f->least, f->most, values + f->first_value, f->num_values) != (f->negate != 0);
}

/* Whether the document passes every one of the filters (the CPU's ranking_filters_accept over the resident
 * columns). */
GPU_HD bool gpu_filters_accept(const uint32_t *words, const gpu_filter *filters, uint32_t num_filters,
                               const uint32_t *values, uint32_t doc) {
    for (uint32_t f = 0; f < num_filters; f++)
        if (!gpu_filter_passes(&filters[f], values,
                               gpu_column_stored(words + filters[f].first_word, filters[f].bits, doc)))
            return false;
    return true;
}

/* Bit i of a filter bitmap's word w: whether document 32 w + i, below num_docs, passes every one of the filters
 * (gpu_filters_accept). The devices build a bitmap (the CUDA one a word a thread) for the filters many of a batch's
 * queries share (filter_bitmaps.h); their range passes then read one bit a posting instead of a stored value and
 * the filters' fields. */
GPU_HD uint32_t gpu_pass_word(const uint32_t *words, const gpu_filter *filters, uint32_t num_filters,
                              const uint32_t *values, uint32_t w, uint32_t num_docs) {
    uint32_t bits = 0;
    for (uint32_t i = 0; i < 32u && 32u * w + i < num_docs; i++)
        if (gpu_filters_accept(words, filters, num_filters, values, 32u * w + i)) bits |= 1u << i;
    return bits;
}

/* A filter bitmap's layout: a bit a document in gpu_pass_doc_words words, then a bit a range of GPU_RANGE_DOCS
 * documents, set where the filters keep at least one of its documents (gpu_pass_range_word), so that the range
 * passes skip the ranges they keep none of. A random filter keeps some document of every range; one that follows
 * the documents' order (a date on a partition in crawl order, a site on one in URL order) keeps few ranges, and
 * its queries decode only those. */
GPU_HD uint32_t gpu_pass_doc_words(uint32_t num_docs) { return num_docs / 32u + 1u; }
GPU_HD uint32_t gpu_pass_range_words(uint32_t num_docs) {
    return (num_docs + GPU_RANGE_DOCS - 1u) / GPU_RANGE_DOCS / 32u + 1u;
}
/* After the range words, one word: how many of the partition's ranges the bitmap keeps no document of
 * (gpu_pass_empty_ranges). The range passes read it once a block: a bitmap that keeps a document of every range (a
 * scattered filter's) has no step to skip, and testing each step's range bits cost its steps' instructions. */
GPU_HD uint32_t gpu_pass_stride(uint32_t num_docs) {
    return gpu_pass_doc_words(num_docs) + gpu_pass_range_words(num_docs) + 1u;
}

/* Word w of the range bits of the bitmap whose document words are `doc_words` (doc_word_count of them): bit i
 * for range 32 w + i. The CUDA device builds them a warp a range; this is the emulated device's. */
GPU_HD uint32_t gpu_pass_range_word(const uint32_t *doc_words, uint32_t doc_word_count, uint32_t w) {
    const uint32_t per_range = GPU_RANGE_DOCS / 32u;
    uint32_t bits = 0;
    for (uint32_t i = 0; i < 32u; i++)
        for (uint32_t at = (32u * w + i) * per_range, end = at + per_range; at < end && at < doc_word_count; at++)
            if (doc_words[at]) {
                bits |= 1u << i;
                break;
            }
    return bits;
}

/* How many of ranges [0, num_ranges) the range words `range_words` mark as holding no kept document: the
 * bitmap's last word (gpu_pass_stride). */
GPU_HD uint32_t gpu_pass_empty_ranges(const uint32_t *range_words, uint32_t num_ranges) {
    uint32_t empty = 0;
    for (uint32_t r = 0; r < num_ranges; r++) empty += (range_words[r / 32u] >> (r & 31u) & 1u) == 0u;
    return empty;
}

/* Whether the bitmap (gpu_pass_stride words for num_docs documents) keeps a document of ranges [r, r + count). */
GPU_HD bool gpu_pass_keeps_ranges(const uint32_t *bitmap, uint32_t num_docs, uint32_t r, uint32_t count) {
    const uint32_t *ranges = bitmap + gpu_pass_doc_words(num_docs);
    for (uint32_t i = r; i < r + count; i++)
        if (ranges[i / 32u] >> (i & 31u) & 1u) return true;
    return false;
}

/* Whether a scored slot of a tree query (gpu_query.tree) counts: every required term, no excluded one (its
 * filters were tested where its postings were added). */
GPU_HD bool gpu_tree_admits(const gpu_query *q, uint32_t matches) {
    return (matches & ~GPU_EXCLUDED_MARK) == q->num_required && !(matches & GPU_EXCLUDED_MARK);
}

/* The report floor (gpu_query.floor_key): a slot whose accumulated score is below this reaches no answer.
 * The margin (2^-20, far above the float rounding of a sum of at most GPU_MAX_OR_TERMS terms) keeps every
 * document at or above the floor; which documents just below it are reported does not matter. */
GPU_HD double gpu_floor_value(uint32_t floor_key) {
    if (floor_key == 0) return 0.0;
    const double floor = (double)gpu_key_float(floor_key);
    return floor * (floor >= 0.0 ? 1.0 - 1.0 / 1048576.0 : 1.0 + 1.0 / 1048576.0);
}

/* The report floor of a query with a static prior, as its range's accumulated BM25 meets it: a slot whose BM25
 * is below this reaches no answer, since with the prior's part at most prior_add (gpu_prior_bound of the
 * range's largest static score) its score stays below the floor (gpu_prior_below's margin, taken from the
 * BM25 side). 0: no floor (none given, or one the prior alone may reach). */
GPU_HD double gpu_prior_floor_value(uint32_t floor_key, double prior_add) {
    if (floor_key == 0) return 0.0;
    const double bm25 = gpu_floor_value(floor_key) - prior_add;
    return bm25 > 0.0 ? bm25 * (1.0 - 1.0 / 524288.0) : 0.0;
}

GPU_HD bool gpu_below_floor(double score, uint32_t floor_key) { return score < gpu_floor_value(floor_key); }

/* Candidates sort ascending as (score descending, doc ascending). */
GPU_HD uint64_t gpu_candidate_key(uint32_t score_key, uint32_t doc) {
    return ((uint64_t)(~score_key) << 32) | doc;
}

/* The largest candidate key an answer can have given the floor (GPU_NO_CANDIDATE without one): answers
 * score at least the floor, whatever their document. */
GPU_HD uint64_t gpu_floor_candidate_key(uint32_t floor_key) {
    return floor_key ? gpu_candidate_key(floor_key, UINT32_MAX) : UINT64_MAX;
}

#endif
