/* The packed buffer of a second-stage pass (l2_pass.h): one copy to the device carries every query's
 * hits and the ranker's transforms, pointers already set to where they will lie there. */
#include <stdio.h>
#include <string.h>

#include "gpu/l2_pass.h"

#define PART_ALIGN 16u

static size_t align_up(size_t x) { return (x + PART_ALIGN - 1) & ~(size_t)(PART_ALIGN - 1); }

/* The bytes of each part of one query's hits, in packing order. */
typedef struct {
    size_t terms, docs, tf, field_len, field_tf, pos_count, pos_start, positions;
} query_parts;

static query_parts parts_of(const isn_feature_hits *h) {
    const isn_feature_query *q = &h->query;
    size_t n = h->n;
    return (query_parts){
        .terms = q->num_terms * sizeof(isn_feature_term),
        .docs = n * sizeof(isn_feature_doc),
        .tf = n * q->num_terms * sizeof(uint32_t),
        .field_len = n * q->num_fields * sizeof(uint32_t),
        .field_tf = n * q->num_fields * q->num_terms * sizeof(uint32_t),
        .pos_count = n * q->num_fields * q->prox_terms * sizeof(uint32_t),
        .pos_start = n * q->num_fields * q->prox_terms * sizeof(uint32_t),
        .positions = (size_t)h->num_positions * sizeof(uint32_t),
    };
}

static size_t query_bytes(const query_parts *p) {
    return align_up(p->terms) + align_up(p->docs) + align_up(p->tf) + align_up(p->field_len) +
           align_up(p->field_tf) + align_up(p->pos_count) + align_up(p->pos_start) + align_up(p->positions);
}

int l2_pass_plan(const isn_ranker *ranker, const isn_feature_hits *const *queries, uint32_t num_queries,
                 l2_pass_layout *L, char *err, size_t err_len) {
    memset(L, 0, sizeof *L);
    if (num_queries == 0) {
        snprintf(err, err_len, "second-stage pass: a batch of no queries");
        return -1;
    }
    L->num_queries = num_queries;
    L->num_inputs = isn_ranker_num_inputs(ranker);
    uint32_t fields = queries[0]->query.num_fields;
    L->num_features = ISN_L2_DOC_FEATURES + ISN_L2_FIELD_FEATURES * fields;
    uint64_t rows = 0;
    size_t at = align_up((size_t)num_queries * sizeof(isn_feature_hits));
    L->queries = 0;
    L->row_start = at;
    at += align_up(((size_t)num_queries + 1) * sizeof(uint32_t));
    for (uint32_t i = 0; i < num_queries; i++) {
        const isn_feature_hits *h = queries[i];
        if (h->query.num_fields != fields || fields > ISN_L2_MAX_FIELDS) {
            snprintf(err, err_len, "second-stage pass: query %u of the batch has %u fields, query 0 has %u (one index a batch)",
                     i, h->query.num_fields, fields);
            return -1;
        }
        if (h->query.prox_terms > ISN_L2_PROX_TERMS || h->query.prox_terms > h->query.num_terms) {
            snprintf(err, err_len, "second-stage pass: query %u has %u proximity terms (at most %u and its %u terms)", i,
                     h->query.prox_terms, ISN_L2_PROX_TERMS, h->query.num_terms);
            return -1;
        }
        rows += h->n;
        query_parts p = parts_of(h);
        at += query_bytes(&p);
    }
    if (rows > UINT32_MAX / 2) {
        snprintf(err, err_len, "second-stage pass: %llu candidates in one batch", (unsigned long long)rows);
        return -1;
    }
    L->num_rows = (uint32_t)rows;
    L->transforms = at;
    at += align_up((size_t)L->num_inputs * sizeof(isn_transform_view));
    for (uint32_t j = 0; j < L->num_inputs; j++) {
        isn_transform_view v;
        isn_ranker_transform_get(ranker, j, &v);
        if (v.kind != ISN_TRANSFORM_TREE && v.feature >= L->num_features) {
            snprintf(err, err_len, "second-stage pass: input %u reads feature %u of %u", j, v.feature, L->num_features);
            return -1;
        }
        at += align_up(v.num_bounds * sizeof(float)) + align_up(v.num_lines * sizeof(isn_transform_tree_line));
    }
    L->bytes = at;
    return 0;
}

/* Copies bytes to host + *at and returns the device address they will have; advances *at. */
static const void *put(uint8_t *host, uintptr_t device_base, size_t *at, const void *src, size_t bytes) {
    if (bytes)
        memcpy(host + *at, src, bytes);
    const void *device = (const void *)(device_base + *at);
    *at += align_up(bytes);
    return device;
}

void l2_pass_pack(const isn_ranker *ranker, const isn_feature_hits *const *queries, uint32_t num_queries,
                  const l2_pass_layout *L, uint8_t *host, uintptr_t device_base) {
    isn_feature_hits *table = (isn_feature_hits *)(host + L->queries);
    uint32_t *row_start = (uint32_t *)(host + L->row_start);
    size_t at = L->row_start + align_up(((size_t)num_queries + 1) * sizeof(uint32_t));
    uint32_t rows = 0;
    for (uint32_t i = 0; i < num_queries; i++) {
        const isn_feature_hits *h = queries[i];
        query_parts p = parts_of(h);
        isn_feature_hits d = *h;
        d.terms = put(host, device_base, &at, h->terms, p.terms);
        d.docs = put(host, device_base, &at, h->docs, p.docs);
        d.tf = put(host, device_base, &at, h->tf, p.tf);
        d.field_len = put(host, device_base, &at, h->field_len, p.field_len);
        d.field_tf = put(host, device_base, &at, h->field_tf, p.field_tf);
        d.pos_count = put(host, device_base, &at, h->pos_count, p.pos_count);
        d.pos_start = put(host, device_base, &at, h->pos_start, p.pos_start);
        d.positions = put(host, device_base, &at, h->positions, p.positions);
        memcpy(&table[i], &d, sizeof d);
        row_start[i] = rows;
        rows += h->n;
    }
    row_start[num_queries] = rows;
    isn_transform_view *views = (isn_transform_view *)(host + L->transforms);
    at = L->transforms + align_up((size_t)L->num_inputs * sizeof(isn_transform_view));
    for (uint32_t j = 0; j < L->num_inputs; j++) {
        isn_transform_view v;
        isn_ranker_transform_get(ranker, j, &v);
        v.bounds = put(host, device_base, &at, v.bounds, v.num_bounds * sizeof(float));
        v.lines = put(host, device_base, &at, v.lines, v.num_lines * sizeof(isn_transform_tree_line));
        memcpy(&views[j], &v, sizeof v);
    }
}
