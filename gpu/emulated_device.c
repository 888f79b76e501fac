/* The device algorithm run on the host, one query at a time: the same two passes over doc-id ranges,
 * the same decode and arithmetic (posting_decode.h), the same threshold and candidate rules as the
 * CUDA kernels. Tests and CI use it to check the algorithm and the backend's fallback paths without a
 * GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/posting_decode.h"

#define EMULATED_SLOTS 64

struct gpu_device {
    gpu_upload upload;
    double *acc;
    uint8_t *matches;
    uint32_t *range_keys;
    uint64_t *candidates;
    uint32_t num_ranges;
    const gpu_batch *pending[EMULATED_SLOTS];
};

static gpu_device *emulated_open(int ordinal, const gpu_upload *upload, char *err, size_t err_len) {
    (void)ordinal;
    gpu_device *d = calloc(1, sizeof *d);
    if (d == NULL) goto oom;
    d->upload = *upload;
    d->num_ranges = (upload->num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
    if (d->num_ranges == 0) d->num_ranges = 1;
    d->acc = malloc(GPU_RANGE_DOCS * sizeof *d->acc);
    d->matches = malloc(GPU_RANGE_DOCS);
    d->range_keys = malloc((size_t)d->num_ranges * GPU_MAX_RANGE_TOP * sizeof *d->range_keys);
    d->candidates = malloc((size_t)upload->max_candidates * sizeof *d->candidates);
    if (d->acc && d->matches && d->range_keys && d->candidates) return d;
oom:
    if (d) {
        free(d->acc);
        free(d->matches);
        free(d->range_keys);
        free(d->candidates);
        free(d);
    }
    snprintf(err, err_len, "emulated device: out of memory");
    return NULL;
}

static void emulated_close(gpu_device *d) {
    if (d == NULL) return;
    free(d->acc);
    free(d->matches);
    free(d->range_keys);
    free(d->candidates);
    free(d);
}

static const char *emulated_name(const gpu_device *d) {
    (void)d;
    return "emulated device (host)";
}

/* Scores documents [lo, hi) of one query into d->acc / d->matches; returns postings scored, or
 * UINT64_MAX when the range is pruned (by an AND term with no block here, or by the bound). */
static uint64_t score_range(gpu_device *d, const gpu_batch *b, const gpu_query *q, uint32_t lo, uint32_t hi,
                            double threshold) {
    const gpu_upload *u = &d->upload;
    uint32_t first[GPU_MAX_TERMS], end[GPU_MAX_TERMS];
    double bound = 0.0;
    for (uint32_t t = 0; t < q->num_terms; t++) {
        const gpu_term *term = &b->terms[q->term_begin + t];
        const isn_block_meta *blocks = u->blocks + term->first_block;
        gpu_blocks_in_range(blocks, term->num_blocks, lo, hi, &first[t], &end[t]);
        if (q->and_mode && first[t] == end[t]) return UINT64_MAX;
        float max_part = 0.0f;
        for (uint32_t k = first[t]; k < end[t]; k++)
            if (blocks[k].max_tf_part > max_part) max_part = blocks[k].max_tf_part;
        bound += (double)(term->weight * max_part);
    }
    if (bound * GPU_BOUND_SLACK < threshold) return UINT64_MAX;
    memset(d->acc, 0, (hi - lo) * sizeof *d->acc);
    memset(d->matches, 0, hi - lo);
    uint64_t scored = 0;
    for (uint32_t t = 0; t < q->num_terms; t++) {
        const gpu_term *term = &b->terms[q->term_begin + t];
        const isn_block_meta *blocks = u->blocks + term->first_block;
        for (uint32_t k = first[t]; k < end[t]; k++) {
            uint32_t n = gpu_block_count(term->df, term->num_blocks, k);
            const uint8_t *in = u->payload + (int64_t)blocks[k].offset + term->payload_delta;
            gpu_block_header dh = gpu_read_header(in);
            const uint8_t *freq_in = in + gpu_encoded_bytes(dh, n);
            gpu_block_header fh = gpu_read_header(freq_in);
            uint32_t gaps[ISN_BLOCK_SIZE], freqs[ISN_BLOCK_SIZE];
            for (uint32_t i = 0; i < n; i++) {
                gaps[i] = gpu_packed_value(in + dh.header_bytes, n, dh.bits, i);
                freqs[i] = gpu_packed_value(freq_in + fh.header_bytes, n, fh.bits, i);
            }
            for (uint32_t e = 0; e < dh.exceptions; e++)
                gaps[gpu_exception_position(in, dh, n, e)] |= gpu_exception_high(in, dh, n, e);
            for (uint32_t e = 0; e < fh.exceptions; e++)
                freqs[gpu_exception_position(freq_in, fh, n, e)] |= gpu_exception_high(freq_in, fh, n, e);
            uint32_t doc = k ? blocks[k - 1].last_doc : UINT32_MAX;
            for (uint32_t i = 0; i < n; i++) {
                doc += gaps[i] + 1;
                if (doc < lo || doc >= hi) continue;
                d->acc[doc - lo] += (double)gpu_term_contribution(term->weight, u->k1_plus_1, freqs[i] + 1, u->norms[doc]);
                d->matches[doc - lo]++;
                scored++;
            }
        }
    }
    return scored;
}

static inline uint32_t range_key(const gpu_device *d, const gpu_query *q, uint32_t i) {
    uint32_t need = q->and_mode ? q->num_terms : 1;
    return d->matches[i] >= need ? gpu_float_key((float)d->acc[i]) : 0;
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void run_query(gpu_device *d, const gpu_batch *b, uint32_t qi) {
    const gpu_query *q = &b->queries[qi];
    gpu_query_result *res = &b->results[qi];
    memset(res, 0, sizeof *res);
    uint32_t num_docs = d->upload.num_docs, m = q->range_top;

    /* Pass 1: every range reports its m best scores; the k-th best of all of them bounds the answer's
     * k-th score from below (they are scores of distinct documents). */
    uint32_t reported = 0;
    for (uint32_t r = 0; r < d->num_ranges; r++) {
        uint32_t lo = r * GPU_RANGE_DOCS, hi = lo + GPU_RANGE_DOCS < num_docs ? lo + GPU_RANGE_DOCS : num_docs;
        uint32_t *keys = d->range_keys + (size_t)r * m;
        for (uint32_t j = 0; j < m; j++) keys[j] = 0;
        uint64_t scored = score_range(d, b, q, lo, hi, 0.0);
        if (scored == UINT64_MAX) continue;
        res->postings_scored += scored;
        res->ranges_scored++;
        /* m rounds of "best below the previous pick" by (key desc, position asc), as the kernel does */
        uint64_t previous = UINT64_MAX;
        for (uint32_t j = 0; j < m; j++) {
            uint64_t best = 0;
            for (uint32_t i = 0; i < hi - lo; i++) {
                uint32_t key = range_key(d, q, i);
                uint64_t composite = key ? ((uint64_t)key << 32) | (0xFFFFFFFFu - i) : 0;
                if (composite < previous && composite > best) best = composite;
            }
            keys[j] = (uint32_t)(best >> 32);
            previous = best;
            if (best == 0) break;
        }
    }
    reported = d->num_ranges * m;
    qsort(d->range_keys, reported, sizeof *d->range_keys, cmp_u32_desc);
    uint32_t theta_key = q->k <= reported ? d->range_keys[q->k - 1] : 0;
    float theta;
    memcpy(&theta, &theta_key, sizeof theta);

    /* Pass 2: ranges whose block-max bound cannot reach the threshold are skipped; documents at or above
     * it are candidates. */
    uint32_t count = 0;
    for (uint32_t r = 0; r < d->num_ranges; r++) {
        uint32_t lo = r * GPU_RANGE_DOCS, hi = lo + GPU_RANGE_DOCS < num_docs ? lo + GPU_RANGE_DOCS : num_docs;
        uint64_t scored = score_range(d, b, q, lo, hi, theta_key ? (double)theta : 0.0);
        if (scored == UINT64_MAX) {
            res->ranges_pruned++;
            continue;
        }
        res->postings_scored += scored;
        res->ranges_scored++;
        for (uint32_t i = 0; i < hi - lo; i++) {
            uint32_t key = range_key(d, q, i);
            if (key == 0 || key < theta_key) continue;
            if (count < d->upload.max_candidates) d->candidates[count] = gpu_candidate_key(key, lo + i);
            count++;
        }
    }
    res->candidates = count;
    if (count > d->upload.max_candidates) return;
    qsort(d->candidates, count, sizeof *d->candidates, cmp_u64);
    uint32_t n = count < q->k ? count : q->k;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t key = ~(uint32_t)(d->candidates[i] >> 32);
        isn_hit *hit = &b->hits[q->hit_offset + i];
        hit->doc = (uint32_t)d->candidates[i];
        memcpy(&hit->score, &key, sizeof hit->score);
    }
    res->num_hits = n;
}

static int emulated_launch(gpu_device *d, uint32_t slot, const gpu_batch *batch, char *err, size_t err_len) {
    if (slot >= EMULATED_SLOTS) {
        snprintf(err, err_len, "emulated device: stream %u out of range", slot);
        return -1;
    }
    d->pending[slot] = batch;
    return 0;
}

static int emulated_finish(gpu_device *d, uint32_t slot, gpu_batch *batch, gpu_batch_timing *timing, char *err,
                           size_t err_len) {
    if (slot >= EMULATED_SLOTS || d->pending[slot] != batch) {
        snprintf(err, err_len, "emulated device: no batch pending on stream %u", slot);
        return -1;
    }
    memset(timing, 0, sizeof *timing);
    for (uint32_t q = 0; q < batch->num_queries; q++) run_query(d, batch, q);
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
