/* The device algorithm run on the host, one query at a time: the same pruned report passes over doc-id
 * ranges (sampling round, then the rest at the raised threshold), the same bound pass (device.h) for the
 * queries it takes, threshold key, collection and rescoring of saturated ranges, retries after an
 * overflow, the same AND probing, the same decode and arithmetic (posting_decode.h) and candidate rules
 * as the CUDA kernels. Tests and CI use it to check the algorithm and the backend's fallback paths
 * without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/filter_bitmaps.h"
#include "gpu/gpu.h"
#include "gpu/posting_decode.h"

#define EMULATED_SLOTS 64

struct gpu_device {
    gpu_upload upload; /* payload, blocks and attribute columns point at the copies below, as device memory would hold them */
    uint8_t *payload;
    isn_block_meta *blocks;
    uint32_t *attribute_words;
    float *static_scores, *range_prior_max; /* NULL without static scores (gpu_upload's) */
    float *block_suffix_max;                /* NULL without it (gpu_upload's) */
    const float *host_suffix_max;           /* the host's, which streamed lists' suffix maxima come from */
    double *acc;
    uint64_t *iacc; /* the integer accumulators of queries with a fixed_shift */
    uint8_t *matches;
    uint64_t *reports;
    uint64_t *report_keys;
    uint64_t *candidates;
    uint32_t candidates_cap;
    uint32_t first[GPU_MAX_OR_TERMS], end[GPU_MAX_OR_TERMS];
    float range_max[GPU_MAX_OR_TERMS];
    double cell_max[GPU_RANGE_DOCS / GPU_SUB_DOCS];      /* accumulated essential scores */
    double cell_bound[GPU_RANGE_DOCS / GPU_SUB_DOCS];    /* the bound grid, every list */
    double cell_ne_bound[GPU_RANGE_DOCS / GPU_SUB_DOCS]; /* and the non-essential lists alone */
    uint32_t *counts; /* the bound pass's counters of a group of ranges */
    gpu_bound_pass_switches bound_pass; /* as on the CUDA device */
    uint32_t retries;
    uint32_t num_ranges;
    const gpu_batch *pending[EMULATED_SLOTS];
    /* the filter bitmaps, as the CUDA device keeps them (filter_bitmaps.h): per stream, taken at its first batch
     * with filters, GPU_PASS_SLOTS bitmaps of pass_stride words (gpu_pass_stride) and what they hold;
     * ISN_GPU_FILTER_BITMAPS=0: none */
    bool filter_bitmaps;
    uint32_t pass_words, pass_stride; /* a bitmap's document words; its document and range words */
    gpu_pass_cache *pass_cache[EMULATED_SLOTS];
    uint32_t *pass_bits[EMULATED_SLOTS];
    /* the batch being run: its stream's bitmaps and its range queries' slots (gpu_query.pass_slot) */
    const uint32_t *run_bits;
    uint32_t *pass_slot;
    uint32_t pass_slot_cap;
};

static void emulated_close(gpu_device *d) {
    if (d == NULL) return;
    void *buffers[] = {d->acc,        d->iacc,       d->matches, d->reports, d->report_keys,
                       d->candidates, d->counts,     d->payload, d->blocks, d->attribute_words,
                       d->static_scores, d->range_prior_max, d->block_suffix_max};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        free(buffers[i]);
    for (uint32_t i = 0; i < EMULATED_SLOTS; i++) {
        free(d->pass_cache[i]);
        free(d->pass_bits[i]);
    }
    free(d->pass_slot);
    free(d);
}

static gpu_device *emulated_open(int ordinal, const gpu_upload *upload, char *err, size_t err_len) {
    (void)ordinal;
    gpu_device *d = calloc(1, sizeof *d);
    if (d == NULL) goto oom;
    d->upload = *upload;
    /* the device's own copy, as the CUDA device uploads one: the caller frees its buffers after open */
    /* with streaming, each stream's staging region past the resident lists (gpu_payload_room) */
    const uint64_t block_room = gpu_block_room(upload);
    d->payload = calloc(1, gpu_payload_room(upload));
    d->blocks = malloc((block_room ? block_room : 1) * sizeof *d->blocks);
    d->attribute_words = malloc((upload->num_attribute_words ? upload->num_attribute_words : 1) * sizeof(uint32_t));
    if (d->payload == NULL || d->blocks == NULL || d->attribute_words == NULL) goto oom;
    memcpy(d->payload, upload->payload, upload->payload_bytes);
    if (upload->num_attribute_words)
        memcpy(d->attribute_words, upload->attribute_words, upload->num_attribute_words * sizeof(uint32_t));
    d->upload.attribute_words = d->attribute_words;
    memcpy(d->blocks, upload->blocks, upload->num_blocks * sizeof *d->blocks);
    d->upload.payload = d->payload;
    d->upload.blocks = d->blocks;
    d->num_ranges = gpu_num_ranges(upload->num_docs);
    if (upload->static_scores) {
        d->static_scores = malloc((upload->num_docs ? upload->num_docs : 1) * sizeof *d->static_scores);
        d->range_prior_max = malloc((size_t)GPU_RANGE_BOUNDS * d->num_ranges * sizeof *d->range_prior_max);
        if (d->static_scores == NULL || d->range_prior_max == NULL) goto oom;
        memcpy(d->static_scores, upload->static_scores, upload->num_docs * sizeof *d->static_scores);
        memcpy(d->range_prior_max, upload->range_prior_max,
               (size_t)GPU_RANGE_BOUNDS * d->num_ranges * sizeof *d->range_prior_max);
    }
    if (upload->block_suffix_max) {
        d->host_suffix_max = upload->block_suffix_max;
        d->block_suffix_max = malloc((block_room ? block_room : 1) * sizeof *d->block_suffix_max);
        if (d->block_suffix_max == NULL) goto oom;
        memcpy(d->block_suffix_max, upload->block_suffix_max, upload->num_blocks * sizeof *d->block_suffix_max);
    }
    d->upload.block_suffix_max = d->block_suffix_max;
    d->upload.static_scores = d->static_scores;
    d->upload.range_prior_max = d->range_prior_max;
    d->acc = malloc(GPU_RANGE_DOCS * sizeof *d->acc);
    d->iacc = malloc(GPU_RANGE_DOCS * sizeof *d->iacc);
    d->matches = malloc(GPU_RANGE_DOCS);
    d->reports = malloc((size_t)d->num_ranges * GPU_MAX_RANGE_TOP * sizeof *d->reports);
    d->report_keys = malloc((size_t)d->num_ranges * GPU_MAX_RANGE_TOP * sizeof *d->report_keys);
    d->candidates = malloc((size_t)upload->max_candidates * sizeof *d->candidates);
    d->candidates_cap = upload->max_candidates;
    d->counts = malloc(GPU_BOUND_RANGES * GPU_RANGE_DOCS * sizeof *d->counts);
    d->bound_pass = gpu_bound_pass_switches_read();
    d->filter_bitmaps = upload->num_attribute_words > 0 && gpu_env_number("ISN_GPU_FILTER_BITMAPS", 1, 0) != 0;
    d->pass_words = gpu_pass_doc_words(upload->num_docs);
    d->pass_stride = gpu_pass_stride(upload->num_docs);
    if (d->acc && d->iacc && d->matches && d->reports && d->report_keys && d->candidates && d->counts) return d;
oom:
    emulated_close(d);
    snprintf(err, err_len, "emulated device: out of memory");
    return NULL;
}

static const char *emulated_name(const gpu_device *d) {
    (void)d;
    return "emulated device (host)";
}

/* Decodes block k of a list: docs and tf parts of its n postings (device layout, device.h). */
static uint32_t decode_block(const gpu_upload *u, const gpu_term *term, uint32_t k, uint32_t *docs, float *parts) {
    const isn_block_meta *blocks = u->blocks + term->first_block;
    uint32_t n = gpu_block_count(term->df, term->num_blocks, k);
    const uint64_t word = blocks[k].offset;
    const uint32_t doc_bits = gpu_layout_doc_bits(word);
    const uint8_t *in = u->payload + gpu_layout_offset(word), *part_in = in + gpu_layout_stream_bytes(n, doc_bits);
    const uint32_t base = k ? blocks[k - 1].last_doc : UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        docs[i] = gpu_layout_doc_of(base, gpu_layout_value(in, doc_bits, i));
        memcpy(&parts[i], part_in + 4 * i, sizeof parts[i]);
    }
    return n;
}

/* The accumulated score of slot i (fixed point converted back: exact). */
static inline double slot_value(const gpu_device *d, const gpu_query *q, double scale, uint32_t i) {
    return q->fixed_shift ? (double)d->iacc[i] / scale : d->acc[i];
}

/* Whether the query's filters (gpu_query.filter_begin) keep the document: the test every path makes where a
 * posting is added or a driver document taken, as the kernels make it. */
static inline bool filters_keep(const gpu_device *d, const gpu_batch *b, const gpu_query *q, uint32_t doc) {
    if (q->num_filters == 0) return true;
    const uint32_t qi = (uint32_t)(q - b->queries);
    if (d->run_bits && qi < b->num_range_queries && d->pass_slot[qi]) { /* the filters' bitmap, as the kernels read it */
        const uint32_t *bitmap = d->run_bits + (size_t)(d->pass_slot[qi] - 1u) * d->pass_stride;
        return (bitmap[doc >> 5] >> (doc & 31u)) & 1u;
    }
    return gpu_filters_accept(d->upload.attribute_words, b->filters + q->filter_begin, q->num_filters, b->filter_values, doc);
}

/* Whether the range passes skip ranges [r, r + count) for the query: its filter bitmap keeps none of their
 * documents (gpu_pass_keeps_ranges), as the kernels read it, which test no range's bits of a bitmap that keeps a
 * document of every range (its last word, gpu_pass_empty_ranges, is 0). */
static inline bool filters_skip_ranges(const gpu_device *d, const gpu_batch *b, const gpu_query *q, uint32_t r,
                                       uint32_t count) {
    const uint32_t qi = (uint32_t)(q - b->queries);
    if (q->num_filters == 0 || d->run_bits == NULL || qi >= b->num_range_queries || d->pass_slot[qi] == 0) return false;
    const uint32_t *bitmap = d->run_bits + (size_t)(d->pass_slot[qi] - 1u) * d->pass_stride;
    return bitmap[d->pass_stride - 1u] != 0u && !gpu_pass_keeps_ranges(bitmap, d->upload.num_docs, r, count);
}

/* What the query's prior adds at most to a document of range r (0 without a prior). */
static inline double range_prior_add(const gpu_device *d, const gpu_query *q, uint32_t r) {
    return q->prior_weight != 0.0f ? gpu_prior_bound(q->prior_weight, d->range_prior_max[r]) : 0.0;
}

/* Whether documents of a range whose BM25 is at most bound cannot reach theta (the prior's part in the range at
 * most prior_add), as the kernels decide it. */
static inline bool skips(const gpu_query *q, double prior_add, uint32_t theta, double bound) {
    return q->prior_weight != 0.0f ? gpu_prior_below(bound, prior_add, theta) : gpu_bound_below(bound, theta);
}

/* match: gpu_term_match's (1 counts the slot's matches, 2 marks it excluded). */
static void add_block(gpu_device *d, const gpu_batch *b, const gpu_query *q, const gpu_term *term, uint32_t k,
                      uint32_t lo, uint32_t hi, double scale, uint32_t match, uint64_t *scored, gpu_query_result *res) {
    const gpu_upload *u = &d->upload;
    uint32_t docs[ISN_BLOCK_SIZE];
    float parts[ISN_BLOCK_SIZE];
    uint32_t n = decode_block(u, term, k, docs, parts);
    res->postings_decoded += n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t doc = docs[i];
        if (doc < lo || doc >= hi || !filters_keep(d, b, q, doc)) continue;
        float c = gpu_posting_contribution(term->weight, parts[i]);
        if (q->fixed_shift) d->iacc[doc - lo] += (uint64_t)llrint((double)c * scale);
        else d->acc[doc - lo] += (double)c;
        if (match == 1) d->matches[doc - lo]++;
        else if (match == 2) d->matches[doc - lo] |= GPU_EXCLUDED_MARK;
        (*scored)++;
    }
}

/* Scores documents [lo, hi) of one query into d->acc (AND: documents missing a term cleared), skipping
 * what cannot reach the score key theta (0: nothing): the whole range when its block-max bound is below
 * it or no essential list has a block in it; an essential block whose maximum plus the other lists'
 * range maxima is below it; a non-essential block whose documents' accumulated essential scores plus
 * the non-essential range maxima are below it. A document left partly scored can then never reach
 * theta (its partial score is below it too). Returns postings scored, or UINT64_MAX when the range is
 * skipped. */
static uint64_t score_range(gpu_device *d, const gpu_batch *b, const gpu_query *q, uint32_t lo, uint32_t hi,
                            uint32_t theta, gpu_query_result *res) {
    const gpu_upload *u = &d->upload;
    /* every bound below is of BM25; with a prior each adds what the prior adds at most in the range */
    const double prior_add = range_prior_add(d, q, lo / GPU_RANGE_DOCS);
    const gpu_term *terms = &b->terms[q->term_begin];
    uint32_t nt = q->num_terms, ne_end = 0;
    double total = 0.0, prefix = 0.0;
    uint64_t essential_items = 0;
    if (q->tree) theta = 0; /* trees do not prune (gpu_query.tree) */
    for (uint32_t t = 0; t < nt; t++) {
        const isn_block_meta *blocks = u->blocks + terms[t].first_block;
        gpu_blocks_in_range(blocks, terms[t].num_blocks, lo, hi, &d->first[t], &d->end[t]);
        if (gpu_term_match(q, t) == 1 && d->first[t] == d->end[t]) return UINT64_MAX; /* a required term is absent */
        float most = 0.0f;
        for (uint32_t k = d->first[t]; k < d->end[t]; k++) {
            float bound = terms[t].weight * blocks[k].max_tf_part;
            most = bound > most ? bound : most;
        }
        d->range_max[t] = most;
        total += most;
    }
    if (theta && !q->and_mode && nt <= GPU_MAX_TERMS)
        while (ne_end < nt && skips(q, prior_add, theta, prefix + terms[ne_end].max_score))
            prefix += terms[ne_end++].max_score;
    for (uint32_t t = ne_end; t < nt; t++) essential_items += d->end[t] - d->first[t];
    if (essential_items == 0 || skips(q, prior_add, theta, total)) return UINT64_MAX;
    /* disjunctive queries: the bound grid (gpu_block_cells), all lists and the non-essential ones */
    const bool grid = theta && !q->and_mode && nt <= GPU_MAX_TERMS;
    const uint32_t cells = (hi - lo + GPU_SUB_DOCS - 1) / GPU_SUB_DOCS;
    if (grid) {
        memset(d->cell_bound, 0, cells * sizeof *d->cell_bound);
        memset(d->cell_ne_bound, 0, cells * sizeof *d->cell_ne_bound);
        for (uint32_t t = 0; t < nt; t++) {
            const isn_block_meta *blocks = u->blocks + terms[t].first_block;
            for (uint32_t k = d->first[t]; k < d->end[t]; k++) {
                uint32_t c0, c1;
                bool adds_first, adds_last;
                gpu_block_cells(blocks, k, d->first[t], d->end[t], lo, hi, terms[t].weight, &c0, &c1, &adds_first,
                                &adds_last);
                const double bound = terms[t].weight * blocks[k].max_tf_part;
                for (uint32_t c = c0; c <= c1; c++) {
                    if ((c == c0 && !adds_first) || (c == c1 && !adds_last)) continue;
                    d->cell_bound[c] += bound;
                    if (t < ne_end) d->cell_ne_bound[c] += bound;
                }
            }
        }
        bool any = false;
        for (uint32_t c = 0; c < cells && !any; c++) any = !skips(q, prior_add, theta, d->cell_bound[c]);
        if (!any) return UINT64_MAX;
    }
    memset(d->acc, 0, (hi - lo) * sizeof *d->acc);
    memset(d->iacc, 0, (hi - lo) * sizeof *d->iacc);
    memset(d->matches, 0, hi - lo);
    const double scale = ldexp(1.0, (int)q->fixed_shift);
    uint64_t scored = 0;
    for (uint32_t t = ne_end; t < nt; t++) {
        const isn_block_meta *blocks = u->blocks + terms[t].first_block;
        for (uint32_t k = d->first[t]; k < d->end[t]; k++) {
            bool below;
            if (grid) {
                uint32_t c0, c1;
                bool adds_first, adds_last;
                gpu_block_cells(blocks, k, d->first[t], d->end[t], lo, hi, terms[t].weight, &c0, &c1, &adds_first,
                                &adds_last);
                double most = 0.0;
                for (uint32_t c = c0; c <= c1; c++) most = d->cell_bound[c] > most ? d->cell_bound[c] : most;
                below = skips(q, prior_add, theta, most);
            } else {
                double others = total - d->range_max[t];
                below = skips(q, prior_add, theta, (double)(terms[t].weight * blocks[k].max_tf_part) + others);
            }
            if (below) {
                res->blocks_skipped++;
                continue;
            }
            add_block(d, b, q, &terms[t], k, lo, hi, scale, gpu_term_match(q, t), &scored, res);
        }
    }
    if (ne_end > 0) {
        for (uint32_t c = 0; c < cells; c++) {
            double most = 0.0;
            for (uint32_t i = c * GPU_SUB_DOCS; i < (c + 1) * GPU_SUB_DOCS && i < hi - lo; i++) {
                double v = slot_value(d, q, scale, i);
                most = v > most ? v : most;
            }
            d->cell_max[c] = most;
        }
        for (uint32_t t = 0; t < ne_end; t++) {
            const isn_block_meta *blocks = u->blocks + terms[t].first_block;
            for (uint32_t k = d->first[t]; k < d->end[t]; k++) {
                uint32_t c0, c1;
                bool adds_first, adds_last;
                gpu_block_cells(blocks, k, d->first[t], d->end[t], lo, hi, terms[t].weight, &c0, &c1, &adds_first,
                                &adds_last);
                /* a document here can reach theta only with essential score in its cell */
                double most = 0.0;
                for (uint32_t c = c0; c <= c1; c++)
                    if (d->cell_max[c] > 0.0) {
                        double v = d->cell_max[c] + d->cell_ne_bound[c];
                        most = v > most ? v : most;
                    }
                if (most == 0.0 || skips(q, prior_add, theta, most)) {
                    res->blocks_skipped++;
                    continue;
                }
                add_block(d, b, q, &terms[t], k, lo, hi, scale, 0, &scored, res);
            }
        }
    }
    if (q->fixed_shift)
        for (uint32_t i = 0; i < hi - lo; i++) d->acc[i] = (double)d->iacc[i] / scale;
    if (q->and_mode)
        for (uint32_t i = 0; i < hi - lo; i++)
            if (d->matches[i] < nt) d->acc[i] = 0.0;
    if (q->tree)
        for (uint32_t i = 0; i < hi - lo; i++)
            if (d->acc[i] > 0.0 && !gpu_tree_admits(q, d->matches[i]))
                d->acc[i] = 0.0;
    return scored;
}

/* A scored slot's candidate key: its score (with the query's prior, gpu_prior_score), its document. A slot
 * with no BM25 is no match. */
static inline uint64_t slot_key(const gpu_device *d, const gpu_query *q, uint32_t lo, uint32_t i) {
    if (!(d->acc[i] > 0.0)) return GPU_NO_CANDIDATE;
    float score = (float)d->acc[i];
    if (q->prior_weight != 0.0f) score = gpu_prior_score(score, q->prior_weight, d->static_scores[lo + i]);
    return gpu_candidate_key(gpu_float_key(score), lo + i);
}

static inline uint32_t score_key(uint64_t c) { return c == GPU_NO_CANDIDATE ? 0u : ~(uint32_t)(c >> 32); }

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static inline uint32_t range_end(uint32_t r, uint32_t num_docs) {
    uint32_t lo = r * GPU_RANGE_DOCS;
    return lo + GPU_RANGE_DOCS < num_docs ? lo + GPU_RANGE_DOCS : num_docs;
}

/* Range r's m best documents (keys ascending) at or above the floor (a float key, 0: none) into its
 * report slots, pruned at theta. */
static void report_range(gpu_device *d, const gpu_batch *b, const gpu_query *q, uint32_t r, uint32_t num_docs,
                         uint32_t theta, uint32_t floor_key, gpu_query_result *res) {
    uint32_t m = gpu_range_reports(q, r), lo = r * GPU_RANGE_DOCS, hi = range_end(r, num_docs);
    uint64_t *rep = d->reports + gpu_reports_before(q, r);
    for (uint32_t j = 0; j < m; j++) rep[j] = GPU_NO_CANDIDATE;
    uint64_t scored = lo < hi && !filters_skip_ranges(d, b, q, r, 1) ? score_range(d, b, q, lo, hi, theta, res) : UINT64_MAX;
    if (scored == UINT64_MAX) {
        res->ranges_pruned++;
        return;
    }
    res->postings_scored += scored;
    res->ranges_scored++;
    /* m rounds of "lowest candidate key above the previous pick" */
    const double floor = q->prior_weight != 0.0f ? gpu_prior_floor_value(floor_key, range_prior_add(d, q, r))
                                                 : gpu_floor_value(floor_key);
    uint64_t previous = 0;
    for (uint32_t j = 0; j < m; j++) {
        uint64_t best = GPU_NO_CANDIDATE;
        for (uint32_t i = 0; i < hi - lo; i++) {
            if (d->acc[i] < floor) continue; /* no answer (gpu_below_floor) */
            uint64_t c = slot_key(d, q, lo, i);
            if ((j == 0 || c > previous) && c < best) best = c;
        }
        rep[j] = best;
        previous = best;
        if (best == GPU_NO_CANDIDATE) break;
        res->reports++;
    }
}

/* The k-th smallest report key of `count` ranges 0, step, 2 step, ... (GPU_NO_CANDIDATE when fewer than k). */
static uint64_t kth_report(gpu_device *d, const gpu_query *q, uint32_t count, uint32_t step) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < count && (size_t)i * step < d->num_ranges; i++) {
        const uint32_t r = i * step, m = gpu_range_reports(q, r);
        for (uint32_t j = 0; j < m; j++) d->report_keys[n++] = d->reports[gpu_reports_before(q, r) + j];
    }
    qsort(d->report_keys, n, sizeof *d->report_keys, cmp_u64);
    return q->k <= n ? d->report_keys[q->k - 1] : GPU_NO_CANDIDATE;
}

/* Candidates: every document whose key is at most theta_key, of the first `ranges` ranges (the others were not
 * reported: past the query's stop). Reports of unsaturated ranges are taken as they are; a range whose every
 * report is within theta_key may hold more and is scored again. */
static uint32_t collect(gpu_device *d, const gpu_batch *b, const gpu_query *q, uint32_t num_docs, uint32_t ranges,
                        uint64_t theta_key, gpu_query_result *res) {
    uint32_t count = 0;
    for (uint32_t r = 0; r < ranges; r++) {
        const uint32_t m = gpu_range_reports(q, r);
        const uint64_t *rep = d->reports + gpu_reports_before(q, r);
        if (rep[m - 1] == GPU_NO_CANDIDATE || rep[m - 1] > theta_key) {
            for (uint32_t j = 0; j < m && rep[j] <= theta_key && rep[j] != GPU_NO_CANDIDATE; j++) {
                if (count < q->cand_cap) d->candidates[count] = rep[j];
                count++;
            }
            continue;
        }
        uint32_t lo = r * GPU_RANGE_DOCS, hi = range_end(r, num_docs);
        uint64_t scored = score_range(d, b, q, lo, hi, score_key(theta_key), res);
        if (scored == UINT64_MAX) continue;
        res->postings_scored += scored;
        res->ranges_rescored++;
        for (uint32_t i = 0; i < hi - lo; i++) {
            uint64_t c = slot_key(d, q, lo, i);
            if (c == GPU_NO_CANDIDATE || c > theta_key) continue;
            if (count < q->cand_cap) d->candidates[count] = c;
            count++;
        }
    }
    return count;
}

static inline uint32_t bound_count_of(uint64_t key) { return (uint32_t)gpu_candidate_score(key); }

/* The largest float at most cut / scale (the device's division and conversion, both rounded down). */
static float bound_score_floor(uint32_t cut, float scale) {
    float f = (float)((double)cut / (double)scale);
    /* products of two floats are exact in double */
    while (f > 0.0f && (double)f * (double)scale > (double)cut) f = nextafterf(f, 0.0f);
    while ((double)nextafterf(f, INFINITY) * (double)scale <= (double)cut) f = nextafterf(f, INFINITY);
    return f;
}

/* The bound pass (device.h, kernels.h), as bound_report_kernel and bound_select_kernel run it: each group of
 * GPU_BOUND_RANGES ranges counts every document's postings as ceil(c * scale) and reports its best counts at or
 * above the floor, of the documents the filters keep, into its first range; the k-th best report's count T gives
 * the cut T - terms - 1 and the threshold key (the cut's score, rounded down, or the floor's when lower); the
 * ranges that may hold a count at the cut are marked saturated (key 0) for the collection to score exactly, the
 * others empty.
 * Leaves the threshold key in *theta_key. */
static void bound_pass(gpu_device *d, const gpu_batch *b, const gpu_query *q, uint32_t num_docs, gpu_query_result *res,
                       uint64_t *theta_key) {
    const gpu_upload *u = &d->upload;
    const gpu_term *terms = &b->terms[q->term_begin];
    const uint32_t m = q->range_top, groups = (d->num_ranges + GPU_BOUND_RANGES - 1) / GPU_BOUND_RANGES;
    const float scale = gpu_bound_scale(q, b->terms);
    const double floor_value = gpu_floor_value(q->floor_key);
    const double units = floor_value > 0.0 ? floor(floor_value * (double)scale) : 0.0;
    const uint32_t at_least = units > 1.0 ? (uint32_t)units : 1u;
    uint32_t docs[ISN_BLOCK_SIZE];
    float parts[ISN_BLOCK_SIZE];
    for (uint32_t g = 0; g < groups; g++) {
        const uint32_t span = GPU_BOUND_RANGES * GPU_RANGE_DOCS, lo = g * span;
        const uint32_t hi = lo + span < num_docs ? lo + span : num_docs;
        uint64_t *rep = d->reports + (size_t)g * GPU_BOUND_RANGES * m;
        for (uint32_t j = 0; j < m; j++) rep[j] = GPU_NO_CANDIDATE;
        if (lo >= hi) continue;
        if (filters_skip_ranges(d, b, q, g * GPU_BOUND_RANGES, GPU_BOUND_RANGES)) {
            res->ranges_pruned++;
            continue;
        }
        memset(d->counts, 0, (hi - lo) * sizeof *d->counts);
        for (uint32_t t = 0; t < q->num_terms; t++) {
            uint32_t first, end;
            gpu_blocks_in_range(u->blocks + terms[t].first_block, terms[t].num_blocks, lo, hi, &first, &end);
            for (uint32_t k = first; k < end; k++) {
                const uint32_t n = decode_block(u, &terms[t], k, docs, parts);
                res->postings_decoded += n;
                for (uint32_t i = 0; i < n; i++) {
                    /* every posting adds, as on the device: the filters drop documents at the report below */
                    if (docs[i] < lo || docs[i] >= hi) continue;
                    /* the product of two floats is exact in double, so this is the device's rounded-up add */
                    d->counts[docs[i] - lo] +=
                        (uint32_t)ceil((double)gpu_posting_contribution(terms[t].weight, parts[i]) * (double)scale);
                    res->postings_scored++;
                }
            }
        }
        res->ranges_scored++;
        uint64_t previous = 0;
        for (uint32_t j = 0; j < m; j++) {
            uint64_t best = GPU_NO_CANDIDATE;
            for (uint32_t i = 0; i < hi - lo; i++) {
                if (d->counts[i] < at_least || !filters_keep(d, b, q, lo + i)) continue;
                const uint64_t c = gpu_candidate_key(gpu_float_key((float)d->counts[i]), lo + i);
                if ((j == 0 || c > previous) && c < best) best = c;
            }
            rep[j] = best;
            previous = best;
            if (best == GPU_NO_CANDIDATE) break;
            res->reports++;
        }
    }
    const uint64_t kth = kth_report(d, q, UINT32_MAX, GPU_BOUND_RANGES);
    const uint32_t top = kth == GPU_NO_CANDIDATE ? 0u : bound_count_of(kth);
    const uint32_t cut = top > q->num_terms + 1 ? top - q->num_terms - 1 : 0u;
    *theta_key = gpu_floor_candidate_key(q->floor_key);
    if (cut) {
        const uint64_t key = gpu_candidate_key(gpu_float_key(bound_score_floor(cut, scale)), UINT32_MAX);
        if (key < *theta_key) *theta_key = key;
    }
    for (uint32_t g = 0; g < groups; g++) {
        uint64_t *first = d->reports + (size_t)g * GPU_BOUND_RANGES * m;
        const uint64_t last = first[m - 1];
        uint32_t marked = 0; /* bit r: range r of the group */
        if (last != GPU_NO_CANDIDATE && bound_count_of(last) >= cut) {
            for (uint32_t r = 0; r < GPU_BOUND_RANGES; r++)
                if ((g * GPU_BOUND_RANGES + r) * GPU_RANGE_DOCS < q->doc_limit) marked |= 1u << r;
        } else {
            for (uint32_t j = 0; j < m; j++) {
                if (first[j] == GPU_NO_CANDIDATE || bound_count_of(first[j]) < cut) break;
                marked |= 1u << ((uint32_t)first[j] / GPU_RANGE_DOCS - g * GPU_BOUND_RANGES);
            }
        }
        for (uint32_t r = 0; r < GPU_BOUND_RANGES && g * GPU_BOUND_RANGES + r < d->num_ranges; r++)
            for (uint32_t j = 0; j < m; j++) first[(size_t)r * m + j] = marked >> r & 1u ? 0u : GPU_NO_CANDIDATE;
    }
    res->accumulator = ISN_GPU_ACC_BOUNDS;
}

/* The collection at theta_key, and after an overflow the collection again with the k-th smallest key among
 * the candidates kept (all real documents' keys, so still a bound). Returns the candidates' count. */
static uint32_t collect_with_retries(gpu_device *d, const gpu_batch *b, const gpu_query *q, uint32_t num_docs,
                                     uint32_t ranges, uint64_t theta_key, gpu_query_result *res, uint32_t *retries) {
    uint32_t count = collect(d, b, q, num_docs, ranges, theta_key, res);
    for (uint32_t round = 0; round < GPU_OVERFLOW_RETRIES && count > q->cand_cap; round++) {
        qsort(d->candidates, q->cand_cap, sizeof *d->candidates, cmp_u64);
        theta_key = d->candidates[q->k - 1];
        count = collect(d, b, q, num_docs, ranges, theta_key, res);
        (*retries)++;
    }
    return count;
}

/* The sampling round, the other ranges at the raised threshold, the k-th smallest report key as the
 * candidate bound, the collection, and after an overflow the collection again with the k-th smallest
 * key among the candidates kept (all real documents' keys, so still a bound), as the kernels do them
 * (first_stage_device.cu). Leaves candidates in d->candidates; returns their count. */
static uint32_t range_query(gpu_device *d, const gpu_batch *b, const gpu_query *q, gpu_query_result *res,
                            uint32_t *retries) {
    uint32_t num_docs = q->doc_limit < d->upload.num_docs ? q->doc_limit : d->upload.num_docs;
    uint64_t theta_key;
    if (gpu_bound_pass_for(&d->bound_pass, q)) {
        bound_pass(d, b, q, num_docs, res, &theta_key);
        return collect_with_retries(d, b, q, num_docs, d->num_ranges, theta_key, res, retries);
    }
    const uint32_t sampled = gpu_sampled_ranges(q, d->num_ranges);
    for (uint32_t i = 0; i < sampled; i++)
        report_range(d, b, q, gpu_sampled_range(q, i), num_docs, q->seed_key, q->floor_key, res);
    uint32_t stop = d->num_ranges; /* the ranges reported (sample_threshold_kernel's stop) */
    if (gpu_two_rounds(q)) {
        uint32_t theta = score_key(kth_report(d, q, sampled, gpu_sampled_range(q, 1)));
        theta = theta > q->seed_key ? theta : q->seed_key;
        /* unpruned: the sample's k-th best report is the others' floor (gpu_query.sampled_floor); the leading ranges'
         * is their floor and their pruning threshold (gpu_query.lead_ranges, lead_prune) */
        uint32_t floor_key = (q->sampled_floor || q->lead_ranges) && theta > q->floor_key ? theta : q->floor_key;
        const gpu_tail_view tails = {d->range_prior_max, d->upload.blocks, d->block_suffix_max, d->num_ranges};
        const bool prunes = q->lead_ranges ? gpu_lead_prunes(q, b->terms, &tails, theta) : !q->sampled_floor;
        const uint32_t prune = prunes ? theta : 0u;
        if (q->lead_ranges && q->lead_stop) {
            /* the ranges from the first whose tail bound is below the leading k-th best (or the floor, when higher)
             * hold no answer */
            const uint32_t covered = (num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
            stop = gpu_range_tail_stop(q, b->terms, &tails, q->lead_ranges, covered, gpu_lead_stop_key(q, theta));
            res->ranges_stopped = covered - stop;
        }
        for (uint32_t r = 0; r < stop; r++)
            if (!gpu_range_sampled(q, r)) report_range(d, b, q, r, num_docs, prune, floor_key, res);
    }
    theta_key = kth_report(d, q, stop, 1);
    if (gpu_floor_candidate_key(q->floor_key) < theta_key) theta_key = gpu_floor_candidate_key(q->floor_key);
    return collect_with_retries(d, b, q, num_docs, stop, theta_key, res, retries);
}

/* AND by probing: the driver list's documents looked up in the other lists, block by block; only keys
 * at most theta_key are candidates (GPU_NO_CANDIDATE: all). */
static uint32_t probe_pass(gpu_device *d, const gpu_batch *b, const gpu_query *q, gpu_query_result *res,
                           uint64_t theta_key) {
    const gpu_upload *u = &d->upload;
    const gpu_term *driver = &b->terms[q->term_begin + q->driver];
    uint32_t count = 0;
    uint32_t docs[ISN_BLOCK_SIZE], bdocs[ISN_BLOCK_SIZE];
    float parts[ISN_BLOCK_SIZE], bparts[ISN_BLOCK_SIZE];
    for (uint32_t db = 0; db < driver->num_blocks; db++) {
        uint32_t n = decode_block(u, driver, db, docs, parts);
        res->postings_decoded += n;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t doc = docs[i];
            if (doc >= q->doc_limit || !filters_keep(d, b, q, doc)) continue;
            res->postings_scored++;
            double score = (double)gpu_posting_contribution(driver->weight, parts[i]);
            bool alive = true;
            for (uint32_t t = 0; t < q->num_terms && alive; t++) {
                if (t == q->driver) continue;
                const gpu_term *term = &b->terms[q->term_begin + t];
                const isn_block_meta *blocks = u->blocks + term->first_block;
                uint32_t k = gpu_lower_block(blocks, term->num_blocks, doc);
                alive = false;
                if (k == term->num_blocks) break;
                uint32_t bn = decode_block(u, term, k, bdocs, bparts);
                res->postings_decoded += bn;
                for (uint32_t j = 0; j < bn; j++)
                    if (bdocs[j] == doc) {
                        score += (double)gpu_posting_contribution(term->weight, bparts[j]);
                        res->postings_scored++;
                        alive = true;
                        break;
                    }
            }
            if (!alive) continue;
            float final = (float)score;
            if (q->prior_weight != 0.0f) final = gpu_prior_score(final, q->prior_weight, d->static_scores[doc]);
            uint64_t key = gpu_candidate_key(gpu_float_key(final), doc);
            if (key > theta_key) continue;
            if (count < q->cand_cap) d->candidates[count] = key;
            count++;
        }
    }
    return count;
}

/* Probing, and after an overflow probing again with the k-th smallest key kept (as the kernels do). */
static uint32_t probe_query(gpu_device *d, const gpu_batch *b, const gpu_query *q, gpu_query_result *res,
                            uint32_t *retries) {
    uint32_t count = probe_pass(d, b, q, res, GPU_NO_CANDIDATE);
    for (uint32_t round = 0; round < GPU_OVERFLOW_RETRIES && count > q->cand_cap; round++) {
        qsort(d->candidates, q->cand_cap, sizeof *d->candidates, cmp_u64);
        count = probe_pass(d, b, q, res, d->candidates[q->k - 1]);
        (*retries)++;
    }
    return count;
}

static void run_query(gpu_device *d, const gpu_batch *b, uint32_t qi) {
    const gpu_query *q = &b->queries[qi];
    gpu_query_result *res = &b->results[qi];
    memset(res, 0, sizeof *res);
    if (q->cand_cap > d->candidates_cap) {
        /* the device has one pool per batch; here one query's segment at a time */
        uint64_t *grown = realloc(d->candidates, (size_t)q->cand_cap * sizeof *grown);
        if (grown == NULL) {
            res->candidates = UINT32_MAX; /* answered on the CPU as an overflow */
            return;
        }
        d->candidates = grown;
        d->candidates_cap = q->cand_cap;
    }
    uint32_t count = q->path == GPU_PATH_PROBE ? probe_query(d, b, q, res, &d->retries) : range_query(d, b, q, res, &d->retries);
    res->candidates = count;
    if (count > q->cand_cap) return;
    qsort(d->candidates, count, sizeof *d->candidates, cmp_u64);
    uint32_t n = count < q->k ? count : q->k;
    for (uint32_t i = 0; i < n; i++) {
        isn_hit *hit = &b->hits[q->hit_offset + i];
        hit->doc = (uint32_t)d->candidates[i];
        hit->score = gpu_candidate_score(d->candidates[i]);
    }
    res->num_hits = n;
}

/* The batch's streamed lists (gpu_stage_list) copied from the host's layout into the stream's staging region, as
 * the CUDA device's gather does. -1 with err for a list outside the region. */
static int stage_lists(gpu_device *d, uint32_t slot, const gpu_batch *batch, char *err, size_t err_len) {
    const gpu_upload *u = &d->upload;
    for (uint32_t i = 0; i < batch->num_stage; i++) {
        const gpu_stage_list *l = &batch->stage[i];
        if (gpu_stage_list_outside(u, slot, l)) {
            snprintf(err, err_len, "emulated device: streamed list %u lies outside stream %u's staging region", i, slot);
            return -1;
        }
        memcpy(d->payload + l->stage_offset, u->host_payload + l->host_offset, l->bytes);
        for (uint32_t b = 0; b < l->num_blocks; b++) {
            isn_block_meta m = u->host_blocks[l->host_block + b];
            m.offset = gpu_stage_meta_word(m.offset, l->host_offset, l->stage_offset);
            d->blocks[l->stage_block + b] = m;
        }
        if (d->block_suffix_max)
            memcpy(d->block_suffix_max + l->stage_block, d->host_suffix_max + l->host_block,
                   l->num_blocks * sizeof *d->block_suffix_max);
    }
    return 0;
}

static int emulated_launch(gpu_device *d, uint32_t slot, const gpu_batch *batch, char *err, size_t err_len) {
    if (slot >= EMULATED_SLOTS) {
        snprintf(err, err_len, "emulated device: stream %u out of range", slot);
        return -1;
    }
    /* the CUDA device's report slots (gpu_upload.report_stride): the same limit here, so the host tests find a query
     * that would overrun them */
    const uint32_t stride = d->upload.report_stride;
    for (uint32_t q = 0; q < batch->num_queries; q++) {
        const gpu_query *query = &batch->queries[q];
        const uint32_t most = query->lead_ranges && query->lead_top > query->range_top ? query->lead_top : query->range_top;
        if (most > stride) {
            snprintf(err, err_len, "emulated device: query %u reports %u a range, past the %u slots a range has", q, most,
                     stride);
            return -1;
        }
    }
    if (stage_lists(d, slot, batch, err, err_len) != 0) return -1;
    d->pending[slot] = batch;
    return 0;
}

/* The batch's filter bitmaps as the CUDA device's launch gives them (gpu_pass_assign), built here on the host from
 * the same words (gpu_pass_word); d->run_bits and d->pass_slot then serve filters_keep. */
static int assign_filter_bitmaps(gpu_device *d, uint32_t slot, const gpu_batch *batch, gpu_batch_timing *timing) {
    d->run_bits = NULL;
    bool filtered = false;
    for (uint32_t q = 0; q < batch->num_range_queries && !filtered; q++) filtered = batch->queries[q].num_filters != 0;
    if (!d->filter_bitmaps || (d->pass_cache[slot] == NULL && !filtered)) return 0;
    if (d->pass_cache[slot] == NULL) {
        d->pass_cache[slot] = calloc(1, sizeof *d->pass_cache[slot]);
        d->pass_bits[slot] = malloc((size_t)GPU_PASS_SLOTS * d->pass_stride * sizeof(uint32_t));
        if (d->pass_cache[slot] == NULL || d->pass_bits[slot] == NULL) { /* both or neither: a later batch retries */
            free(d->pass_cache[slot]);
            free(d->pass_bits[slot]);
            d->pass_cache[slot] = NULL;
            d->pass_bits[slot] = NULL;
            return -1;
        }
    }
    if (batch->num_range_queries > d->pass_slot_cap) {
        uint32_t *grown = realloc(d->pass_slot, batch->num_range_queries * sizeof *grown);
        if (grown == NULL) return -1;
        d->pass_slot = grown;
        d->pass_slot_cap = batch->num_range_queries;
    }
    uint32_t build_query[GPU_PASS_SLOTS], build_slot[GPU_PASS_SLOTS];
    const uint32_t builds = gpu_pass_assign(d->pass_cache[slot], batch, d->upload.num_docs, d->pass_slot, build_query,
                                            build_slot, &timing->filter_bitmap_queries);
    for (uint32_t i = 0; i < builds; i++) {
        const gpu_query *q = &batch->queries[build_query[i]];
        uint32_t *bitmap = d->pass_bits[slot] + (size_t)build_slot[i] * d->pass_stride;
        for (uint32_t w = 0; w < d->pass_words; w++)
            bitmap[w] = gpu_pass_word(d->upload.attribute_words, batch->filters + q->filter_begin, q->num_filters,
                                      batch->filter_values, w, d->upload.num_docs);
        for (uint32_t w = 0; w < gpu_pass_range_words(d->upload.num_docs); w++)
            bitmap[d->pass_words + w] = gpu_pass_range_word(bitmap, d->pass_words, w);
        bitmap[d->pass_stride - 1u] = gpu_pass_empty_ranges(bitmap + d->pass_words, d->num_ranges);
    }
    timing->filter_bitmaps_built = builds;
    d->run_bits = d->pass_bits[slot];
    return 0;
}

static int emulated_finish(gpu_device *d, uint32_t slot, gpu_batch *batch, gpu_batch_timing *timing, char *err,
                           size_t err_len) {
    if (slot >= EMULATED_SLOTS || d->pending[slot] != batch) {
        snprintf(err, err_len, "emulated device: no batch pending on stream %u", slot);
        return -1;
    }
    memset(timing, 0, sizeof *timing);
    d->retries = 0;
    if (assign_filter_bitmaps(d, slot, batch, timing) != 0) {
        snprintf(err, err_len, "emulated device: out of memory");
        return -1;
    }
    for (uint32_t q = 0; q < batch->num_queries; q++) run_query(d, batch, q);
    d->run_bits = NULL;
    timing->overflow_retries = d->retries;
    d->pending[slot] = NULL;
    return 0;
}

const gpu_device_ops gpu_emulated_device = {
    .open = emulated_open,
    .launch = emulated_launch,
    .finish = emulated_finish,
    .close = emulated_close,
    .name = emulated_name,
};
