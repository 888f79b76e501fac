/* The first-stage backend: residency planning, batch assembly, the device call, and the CPU answering
 * whatever the device does not (health, fallback). The device itself is behind gpu_device_ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/device.h"
#include "gpu/gpu.h"

#define MAX_STREAMS 8
#define NOT_RESIDENT INT64_MIN

typedef struct {
    bool busy;
    bool launched; /* the device holds part of this batch */
    isn_gpu_request *requests;
    uint32_t num_requests;
    uint32_t *device_request; /* batch query -> request */
    gpu_query *queries;
    gpu_term *terms;
    gpu_query_result *results;
    isn_hit *hits;
    gpu_batch batch;
    double submitted_at;
    uint64_t bytes_staged;
} stream_slot;

struct isn_gpu_backend {
    const isn_index *index;
    isn_gpu_options options;
    const gpu_device_ops *ops;
    gpu_device *device;
    isn_searcher *searcher; /* the CPU fallback */
    int64_t *term_delta;    /* per term; NOT_RESIDENT when its list is not on the device */
    uint8_t *packed_payload; /* the resident lists, when not all of them fit */
    uint32_t max_terms;     /* gpu_term entries per batch */
    bool fault_armed;
    isn_gpu_health health;
    stream_slot slots[MAX_STREAMS];
};

void isn_gpu_options_default(isn_gpu_options *o) {
    memset(o, 0, sizeof *o);
    o->max_batch = 1024;
    o->max_k = 1000;
    o->streams = 2;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void mark_unhealthy(isn_gpu_backend *b, const char *why) {
    b->health.device_errors++;
    if (!b->health.healthy) return;
    b->health.healthy = false;
    snprintf(b->health.reason, sizeof b->health.reason, "%s", why);
    fprintf(stderr, "isn gpu: device marked unhealthy, serving on the CPU: %s\n", why);
}

/* Bytes of each list in the payload: lists are stored one after the other in term order. */
static uint64_t list_bytes(const isn_index *ix, uint32_t term, const isn_block_meta *blocks, uint64_t num_blocks,
                           uint64_t payload_end) {
    isn_term_stats s;
    isn_index_term_stats(ix, term, &s);
    uint64_t next = s.first_block + s.num_blocks;
    uint64_t end = next < num_blocks ? blocks[next].offset : payload_end;
    return end - blocks[s.first_block].offset;
}

typedef struct {
    double value; /* visits per byte */
    uint32_t term;
} term_value;

static int cmp_value_desc(const void *a, const void *b) {
    const term_value *x = a, *y = b;
    if (x->value != y->value) return x->value > y->value ? -1 : 1;
    return (x->term > y->term) - (x->term < y->term);
}

/* Chooses the resident lists: all when they fit, else the most visited per byte (training log, or df).
 * Fills term_delta and, when packing, packed_payload. Returns the payload to upload. */
static const uint8_t *plan_residency(isn_gpu_backend *b, uint64_t payload_budget, uint64_t *upload_bytes, char *err,
                                     size_t err_len) {
    const isn_index *ix = b->index;
    const isn_index_info *info = isn_index_get_info(ix);
    uint64_t payload_bytes, num_blocks;
    const uint8_t *payload = isn_index_postings_payload(ix, &payload_bytes);
    const isn_block_meta *blocks = isn_index_block_metas(ix, &num_blocks);
    uint32_t nt = info->num_terms;
    b->term_delta = calloc(nt ? nt : 1, sizeof *b->term_delta);
    if (!b->term_delta) goto oom;
    b->health.terms_total = nt;
    if (payload_bytes <= payload_budget) {
        b->health.terms_resident = nt;
        *upload_bytes = payload_bytes;
        return payload;
    }
    uint64_t payload_end = payload_bytes - ISN_CODEC_READ_SLACK;
    term_value *values = calloc(nt ? nt : 1, sizeof *values);
    if (!values) goto oom;
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats s;
        isn_index_term_stats(ix, t, &s);
        values[t].term = t;
        values[t].value = b->options.training_terms ? 0.0 : (double)s.df;
    }
    for (uint64_t i = 0; i < b->options.num_training_terms; i++)
        if (b->options.training_terms[i] < nt) values[b->options.training_terms[i]].value += 1.0;
    for (uint32_t t = 0; t < nt; t++) values[t].value /= (double)list_bytes(ix, t, blocks, num_blocks, payload_end) + 1.0;
    qsort(values, nt, sizeof *values, cmp_value_desc);
    uint64_t used = 0;
    for (uint32_t i = 0; i < nt; i++) {
        uint32_t t = values[i].term;
        uint64_t bytes = list_bytes(ix, t, blocks, num_blocks, payload_end);
        if (values[i].value > 0 && used + bytes + ISN_CODEC_READ_SLACK <= payload_budget) {
            b->term_delta[t] = (int64_t)used; /* offset for now; delta below */
            used += bytes;
            b->health.terms_resident++;
        } else {
            b->term_delta[t] = NOT_RESIDENT;
        }
    }
    free(values);
    b->packed_payload = calloc(1, used + ISN_CODEC_READ_SLACK);
    if (!b->packed_payload) goto oom;
    for (uint32_t t = 0; t < nt; t++) {
        if (b->term_delta[t] == NOT_RESIDENT) continue;
        isn_term_stats s;
        isn_index_term_stats(ix, t, &s);
        uint64_t from = blocks[s.first_block].offset;
        memcpy(b->packed_payload + b->term_delta[t], payload + from, list_bytes(ix, t, blocks, num_blocks, payload_end));
        b->term_delta[t] -= (int64_t)from;
    }
    *upload_bytes = used + ISN_CODEC_READ_SLACK;
    return b->packed_payload;
oom:
    snprintf(err, err_len, "GPU backend: out of memory planning residency for %u terms", nt);
    return NULL;
}

static void free_slot(stream_slot *s) {
    free(s->device_request);
    free(s->queries);
    free(s->terms);
    free(s->results);
    free(s->hits);
}

void isn_gpu_close(isn_gpu_backend *b) {
    if (b == NULL) return;
    if (b->device) b->ops->close(b->device);
    for (int i = 0; i < MAX_STREAMS; i++) free_slot(&b->slots[i]);
    isn_searcher_free(b->searcher);
    free(b->term_delta);
    free(b->packed_payload);
    free(b);
}

isn_gpu_backend *isn_gpu_open(const isn_index *index, const isn_gpu_options *options, char *err, size_t err_len) {
    isn_gpu_options o;
    if (options) o = *options;
    else isn_gpu_options_default(&o);
    if (index == NULL) {
        snprintf(err, err_len, "GPU backend: no index");
        return NULL;
    }
    if (o.max_batch == 0 || o.max_batch > 65536) {
        snprintf(err, err_len, "GPU backend: max_batch must be 1..65536, got %u", o.max_batch);
        return NULL;
    }
    if (o.max_k == 0 || o.max_k > 10000) {
        snprintf(err, err_len, "GPU backend: max_k must be 1..10000, got %u", o.max_k);
        return NULL;
    }
    if (o.streams == 0 || o.streams > MAX_STREAMS) {
        snprintf(err, err_len, "GPU backend: streams must be 1..%d, got %u", MAX_STREAMS, o.streams);
        return NULL;
    }
    if (o.max_candidates == 0) o.max_candidates = 4 * o.max_k > 16384 ? 4 * o.max_k : 16384;
    if (o.max_candidates < o.max_k) {
        snprintf(err, err_len, "GPU backend: max_candidates (%u) must be at least max_k (%u)", o.max_candidates, o.max_k);
        return NULL;
    }
    const gpu_device_ops *ops = o.emulate ? &gpu_emulated_device : gpu_cuda_device_ops();
    if (ops == NULL) {
        snprintf(err, err_len, "GPU backend: built without CUDA");
        return NULL;
    }
    const isn_index_info *info = isn_index_get_info(index);
    uint64_t budget = o.memory_budget;
    if (!o.emulate) {
        char why[256];
        if (isn_gpu_device_count(why, sizeof why) <= o.device || o.device < 0) {
            snprintf(err, err_len, "GPU backend: no GPU %d (%s)", o.device, why);
            return NULL;
        }
        if (isn_gpu_self_test(o.device, err, err_len) != 0) return NULL;
        if (budget == 0) {
            isn_gpu_device_info dev;
            if (isn_gpu_device_info_get(o.device, &dev, err, err_len) != 0) return NULL;
            uint64_t per_stream = (uint64_t)o.max_batch * o.max_candidates * 16 + (uint64_t)o.max_batch * 4096;
            uint64_t reserve = per_stream * o.streams + ((uint64_t)1 << 30);
            budget = dev.memory_bytes * 85 / 100 > reserve ? dev.memory_bytes * 85 / 100 - reserve : 0;
        }
    } else if (budget == 0) {
        budget = UINT64_MAX;
    }

    isn_gpu_backend *b = calloc(1, sizeof *b);
    if (b == NULL) {
        snprintf(err, err_len, "GPU backend: out of memory");
        return NULL;
    }
    b->index = index;
    b->options = o;
    b->ops = ops;
    b->max_terms = o.max_batch * 16 > GPU_MAX_TERMS ? o.max_batch * 16 : GPU_MAX_TERMS;
    b->health.healthy = true;
    uint64_t num_blocks, payload_bytes;
    const isn_block_meta *blocks = isn_index_block_metas(index, &num_blocks);
    isn_index_postings_payload(index, &payload_bytes);
    uint64_t fixed = num_blocks * sizeof(isn_block_meta) + (uint64_t)info->num_docs * sizeof(float);
    b->health.index_bytes = payload_bytes + fixed;
    if (budget < fixed + 4096) {
        snprintf(err, err_len, "GPU backend: memory budget %llu bytes is below the %llu bytes of block metadata and norms",
                 (unsigned long long)budget, (unsigned long long)fixed);
        isn_gpu_close(b);
        return NULL;
    }
    uint64_t upload_bytes = 0;
    const uint8_t *payload = plan_residency(b, budget - fixed, &upload_bytes, err, err_len);
    if (payload == NULL) {
        isn_gpu_close(b);
        return NULL;
    }
    b->health.bytes_resident = upload_bytes + fixed;
    b->searcher = isn_searcher_new(index);
    for (uint32_t i = 0; i < o.streams; i++) {
        stream_slot *s = &b->slots[i];
        s->device_request = malloc(o.max_batch * sizeof *s->device_request);
        s->queries = malloc(o.max_batch * sizeof *s->queries);
        s->terms = malloc(b->max_terms * sizeof *s->terms);
        s->results = malloc(o.max_batch * sizeof *s->results);
        s->hits = malloc((size_t)o.max_batch * o.max_k * sizeof *s->hits);
        if (!s->device_request || !s->queries || !s->terms || !s->results || !s->hits) {
            snprintf(err, err_len, "GPU backend: out of memory for batch buffers");
            isn_gpu_close(b);
            return NULL;
        }
    }
    if (b->searcher == NULL) {
        snprintf(err, err_len, "GPU backend: out of memory for the CPU searcher");
        isn_gpu_close(b);
        return NULL;
    }
    gpu_upload up = {
        .payload = payload,
        .payload_bytes = upload_bytes,
        .blocks = blocks,
        .num_blocks = num_blocks,
        .norms = isn_index_doc_norms(index),
        .num_docs = info->num_docs,
        .k1_plus_1 = info->bm25.k1 + 1.0f,
        .max_batch = o.max_batch,
        .max_terms = b->max_terms,
        .max_k = o.max_k,
        .max_candidates = o.max_candidates,
        .streams = o.streams,
    };
    b->device = ops->open(o.device, &up, err, err_len);
    if (b->device == NULL) {
        isn_gpu_close(b);
        return NULL;
    }
    snprintf(b->health.device_name, sizeof b->health.device_name, "%s", ops->name(b->device));
    return b;
}

/* Why the device cannot answer this request exactly; NULL when it can. */
static const char *device_refusal(const isn_gpu_backend *b, const isn_gpu_request *r, uint64_t num_docs) {
    if (!b->health.healthy) return "device unhealthy";
    if (r->query->num_terms == 0 || (r->mode == ISN_MODE_AND && r->query->num_unknown > 0)) return "empty query";
    if (r->k > b->options.max_k) return "k above the device's max_k";
    if (r->query->num_terms > GPU_MAX_TERMS) return "more terms than the device takes";
    for (uint32_t t = 0; t < r->query->num_terms; t++) {
        const isn_query_term *qt = &r->query->terms[t];
        if (b->term_delta[qt->term_id] == NOT_RESIDENT) return "posting list not resident";
        if (!(isn_bm25_idf(num_docs, qt->df) > 0.0f)) return "non-positive term weight";
    }
    return NULL;
}

static int validate(const isn_gpu_backend *b, const isn_gpu_request *r, uint32_t i, char *err, size_t err_len) {
    if (r->query == NULL || r->hits == NULL) {
        snprintf(err, err_len, "request %u: query and hits must not be NULL", i);
        return -1;
    }
    if (r->k == 0 || r->k > ISN_MAX_K) {
        snprintf(err, err_len, "request %u: k must be between 1 and %d, got %u", i, ISN_MAX_K, r->k);
        return -1;
    }
    if (r->mode != ISN_MODE_OR && r->mode != ISN_MODE_AND) {
        snprintf(err, err_len, "request %u: unknown mode %d", i, (int)r->mode);
        return -1;
    }
    uint32_t nt = isn_index_get_info(b->index)->num_terms;
    if (r->query->num_terms > 0 && r->query->terms == NULL) {
        snprintf(err, err_len, "request %u: %u terms but no term array", i, r->query->num_terms);
        return -1;
    }
    for (uint32_t t = 0; t < r->query->num_terms; t++)
        if (r->query->terms[t].term_id >= nt || r->query->terms[t].count == 0) {
            snprintf(err, err_len, "request %u: term %u has id %u (index has %u terms) and count %u", i, t,
                     r->query->terms[t].term_id, nt, r->query->terms[t].count);
            return -1;
        }
    return 0;
}

int isn_gpu_submit(isn_gpu_backend *b, isn_gpu_request *requests, uint32_t n, char *err, size_t err_len) {
    if (b == NULL || (requests == NULL && n > 0)) {
        snprintf(err, err_len, "isn_gpu_submit: backend and requests must not be NULL");
        return -1;
    }
    if (n > b->options.max_batch) {
        snprintf(err, err_len, "batch of %u queries is above max_batch %u", n, b->options.max_batch);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        if (validate(b, &requests[i], i, err, err_len) != 0) return -1;
    int ticket = -1;
    for (uint32_t i = 0; i < b->options.streams; i++)
        if (!b->slots[i].busy) {
            ticket = (int)i;
            break;
        }
    if (ticket < 0) {
        snprintf(err, err_len, "all %u GPU streams are busy: complete a batch first", b->options.streams);
        return -1;
    }
    stream_slot *s = &b->slots[ticket];
    s->busy = true;
    s->launched = false;
    s->requests = requests;
    s->num_requests = n;
    s->submitted_at = now_ms();
    uint32_t nq = 0, nterms = 0, hits = 0;
    uint32_t index_docs = isn_index_get_info(b->index)->num_docs;
    for (uint32_t i = 0; i < n; i++) {
        isn_gpu_request *r = &requests[i];
        r->num_hits = 0;
        r->answered_by = ISN_GPU_ANSWERED_CPU;
        uint64_t num_docs = r->num_docs ? r->num_docs : index_docs;
        r->fallback_reason = device_refusal(b, r, num_docs);
        if (r->fallback_reason == NULL && nterms + r->query->num_terms > b->max_terms)
            r->fallback_reason = "batch term budget exhausted";
        if (r->fallback_reason != NULL) continue;
        gpu_query *q = &s->queries[nq];
        q->term_begin = nterms;
        q->num_terms = r->query->num_terms;
        q->k = r->k;
        q->and_mode = r->mode == ISN_MODE_AND;
        q->range_top = gpu_range_top(r->k, index_docs);
        q->hit_offset = hits;
        for (uint32_t t = 0; t < r->query->num_terms; t++) {
            const isn_query_term *qt = &r->query->terms[t];
            isn_term_stats st;
            isn_index_term_stats(b->index, qt->term_id, &st);
            s->terms[nterms++] = (gpu_term){
                .first_block = (uint32_t)st.first_block,
                .num_blocks = st.num_blocks,
                .df = st.df,
                .weight = isn_bm25_idf(num_docs, qt->df) * (float)qt->count,
                .payload_delta = b->term_delta[qt->term_id],
            };
        }
        hits += r->k;
        s->device_request[nq++] = i;
    }
    s->batch = (gpu_batch){.queries = s->queries, .num_queries = nq, .terms = s->terms, .num_terms = nterms,
                           .total_hits = hits, .results = s->results, .hits = s->hits};
    s->bytes_staged = nq * sizeof(gpu_query) + nterms * sizeof(gpu_term);
    if (nq == 0) return ticket;
    if (b->fault_armed) {
        b->fault_armed = false;
        mark_unhealthy(b, "injected CUDA error (test)");
        return ticket;
    }
    char why[256];
    if (b->ops->launch(b->device, (uint32_t)ticket, &s->batch, why, sizeof why) != 0) {
        mark_unhealthy(b, why);
        return ticket;
    }
    s->launched = true;
    return ticket;
}

static void answer_on_cpu(isn_gpu_backend *b, isn_gpu_request *r) {
    isn_search_options so;
    isn_search_options_default(&so);
    so.mode = r->mode;
    so.algo = ISN_ALGO_AUTO;
    so.k = r->k;
    so.num_docs = r->num_docs;
    char why[256];
    r->answered_by = ISN_GPU_ANSWERED_CPU;
    if (isn_search(b->searcher, r->query, &so, r->hits, &r->num_hits, NULL, why, sizeof why) != 0) r->num_hits = 0;
}

int isn_gpu_complete(isn_gpu_backend *b, int ticket, isn_gpu_batch_stats *stats, char *err, size_t err_len) {
    if (b == NULL || ticket < 0 || (uint32_t)ticket >= b->options.streams || !b->slots[ticket].busy) {
        snprintf(err, err_len, "isn_gpu_complete: no batch with ticket %d", ticket);
        return -1;
    }
    stream_slot *s = &b->slots[ticket];
    isn_gpu_batch_stats st;
    memset(&st, 0, sizeof st);
    bool device_ok = s->launched;
    if (s->launched) {
        gpu_batch_timing timing;
        char why[256];
        if (b->ops->finish(b->device, (uint32_t)ticket, &s->batch, &timing, why, sizeof why) != 0) {
            mark_unhealthy(b, why);
            device_ok = false;
        } else {
            st.ms_transfer_in = timing.ms_transfer_in;
            st.ms_threshold_pass = timing.ms_threshold_pass;
            st.ms_select_threshold = timing.ms_select_threshold;
            st.ms_score_pass = timing.ms_score_pass;
            st.ms_sort = timing.ms_sort;
            st.ms_transfer_out = timing.ms_transfer_out;
            st.bytes_to_device = timing.bytes_to_device;
            st.bytes_from_device = timing.bytes_from_device;
        }
    }
    for (uint32_t q = 0; q < s->batch.num_queries; q++) {
        isn_gpu_request *r = &s->requests[s->device_request[q]];
        const gpu_query_result *res = &s->results[q];
        if (!device_ok) {
            r->fallback_reason = "device error";
            continue;
        }
        st.ranges_scored += res->ranges_scored;
        st.ranges_pruned += res->ranges_pruned;
        st.postings_scored += res->postings_scored;
        st.candidates += res->candidates;
        if (res->candidates > b->options.max_candidates) {
            r->fallback_reason = "candidate overflow";
            continue;
        }
        memcpy(r->hits, s->hits + s->queries[q].hit_offset, res->num_hits * sizeof(isn_hit));
        r->num_hits = res->num_hits;
        r->answered_by = ISN_GPU_ANSWERED_DEVICE;
        r->fallback_reason = NULL;
        st.device_queries++;
    }
    for (uint32_t i = 0; i < s->num_requests; i++) {
        isn_gpu_request *r = &s->requests[i];
        if (r->answered_by == ISN_GPU_ANSWERED_DEVICE) continue;
        if (r->fallback_reason && strcmp(r->fallback_reason, "posting list not resident") == 0)
            b->health.queries_not_resident++;
        answer_on_cpu(b, r);
        st.cpu_queries++;
    }
    st.queries = s->num_requests;
    st.ms_total = now_ms() - s->submitted_at;
    b->health.batches++;
    b->health.queries_device += st.device_queries;
    b->health.queries_cpu += st.cpu_queries;
    b->health.bytes_transferred += st.bytes_to_device + st.bytes_from_device;
    s->busy = false;
    s->launched = false;
    if (stats) *stats = st;
    return 0;
}

int isn_gpu_search_batch(isn_gpu_backend *b, isn_gpu_request *requests, uint32_t n, isn_gpu_batch_stats *stats,
                         char *err, size_t err_len) {
    int ticket = isn_gpu_submit(b, requests, n, err, err_len);
    if (ticket < 0) return -1;
    return isn_gpu_complete(b, ticket, stats, err, err_len);
}

void isn_gpu_health_get(const isn_gpu_backend *b, isn_gpu_health *health) { *health = b->health; }

void isn_gpu_inject_fault(isn_gpu_backend *b) { b->fault_armed = true; }
