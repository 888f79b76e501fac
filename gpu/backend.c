/* The first-stage backend: residency planning, batch assembly, the device call, and the CPU answering
 * whatever the device does not (health, fallback). The device itself is behind gpu_device_ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "gpu/device.h"
#include "gpu/gpu.h"
#include "gpu/attribute_zones.h"
#include "gpu/cpu_crew.h"
#include "gpu/posting_decode.h"
#include "gpu/prefix_completion.h"
#include "gpu/prune_choice.h"
#include "gpu/query_tree.h"
#include "gpu/tail_bound.h"
#include "gpu/visit_admission.h"

#define MAX_STREAMS 8

typedef struct {
    bool busy;
    bool launched; /* the device holds part of this batch */
    isn_gpu_request *requests;
    uint32_t num_requests;
    uint32_t *device_request; /* batch query -> request */
    uint8_t *path_of;         /* request -> GPU_PATH_* */
    uint64_t *postings_in_lists; /* batch query -> postings of its resident lists */
    gpu_zone_cache zone_cache;   /* the kept ranges of the filters this slot staged last (attribute_zones.h) */
    uint32_t *cpu_tasks;         /* batch queries to complete, or requests to answer, on the CPU */
    /* The requests the device refused at submission (a list not resident, a budget), answered by the CPU crew
     * from then on while the device works on the rest, rather than after it on the completing thread: on a
     * cache their CPU time is most of a batch's. early[i]: request i is one of them. */
    uint32_t *early_tasks;
    uint32_t num_early;
    bool *early;
    cpu_run early_run;
    uint64_t *task_postings;     /* what each completion scored */
    gpu_tree_form *trees;        /* request -> its query tree as the device takes it (tree requests only) */
    gpu_query *queries;
    gpu_term *terms;
    /* batch query -> the documents its resident lists cover whole: below it the device answers, from it on
     * the CPU completes (gpu_query.doc_limit may end earlier, where the tail bound stops the query) */
    uint32_t *coverage;
    tail_term *tail_terms;       /* the batch's terms as the tail bound reads them (whole lists), as terms */
    uint32_t *ranges_bound_skipped; /* batch query -> ranges below its coverage the tail bound stopped it before */
    gpu_filter *filters;         /* the tree queries' filters, compiled (compile_filter) */
    uint32_t *filter_values;     /* and their stored values */
    gpu_query_result *results;
    isn_hit *hits;
    gpu_batch batch;
    double submitted_at;
    uint64_t bytes_staged;
    bool pruned; /* this batch prunes (choose_pruning) */
} stream_slot;

struct isn_gpu_backend {
    const isn_index *index;
    isn_gpu_options options;
    const gpu_device_ops *ops;
    gpu_device *device;
    cpu_crew *crew; /* the CPU's part of batches: completions on prefixes, fallbacks */
    tail_bounds tails; /* global order: early termination and settling on prefixes (tail_bound.h) */
    uint32_t *term_blocks;  /* per term: resident leading blocks (all of them, a prefix, or 0) */
    float *term_max_part;   /* per term: the largest max_tf_part of its resident blocks */
    const isn_block_meta *index_blocks;
    float k1_plus_1, max_norm; /* for gpu_fixed_shift */
    /* what is uploaded (device layout), until the device has its copy */
    uint8_t *device_payload;
    uint64_t device_payload_bytes;
    isn_block_meta *device_blocks;
    uint32_t max_terms;     /* gpu_term entries per batch */
    uint32_t max_filters, max_filter_values; /* gpu_filter entries and their values per batch */
    /* the attribute columns (gpu_attribute), until the device has its copy; the descriptors stay */
    uint32_t *attribute_words;
    uint64_t num_attribute_words;
    /* The static scores (the index's own array) and each range's largest, until the device has its copy
     * (gpu_upload); prior_resident: the device holds them, so it takes any prior weight but one for which the
     * largest magnitude (static_magnitude) overflows a float once weighted, which isn_search refuses too */
    const float *static_scores;
    float *range_prior_max;
    bool prior_resident;
    float static_magnitude;
    gpu_attribute attributes[ISN_MAX_ATTRIBUTES];
    uint32_t num_attributes;
    double last_completion_ms; /* of the latest batch (0 before the first), for learn_pruning */
    bool last_completed_pruned; /* and whether it pruned */
    prune_learning prune[PRUNE_CLASSES]; /* AUTO pruning, by batch size (prune_class) */
    bool fault_armed;
    bool no_probe; /* options.and_by_ranges */
    /* unpruned disjunctive queries with filters sample (gpu_query.sampled_floor) as those without a floor do;
     * ISN_GPU_FILTER_SAMPLING=0: they score every range in one round instead (top-10 and the like then take
     * the bound pass without a floor), to compare */
    bool filter_sampling;
    bool zone_maps; /* ISN_GPU_ZONE_MAPS=0: report lists sized for every range, filtered or not (to compare) */
    /* queries with a prior in global order score the leading ranges first (gpu_query.lead_ranges);
     * ISN_GPU_LEAD_RANGES=0: they sample as the others do, to compare */
    bool lead_ranges;
    /* their second round: pruned at the leading k-th best where the tail bound at it ends the query inside the
     * partition (gpu_lead_prunes; ISN_GPU_LEAD_PRUNE=0: never, that is then only its floor; 1: always), and ended
     * on the device where the tail bound falls below it (ISN_GPU_LEAD_STOP=0: every range visited); to compare */
    uint32_t lead_prune;
    bool lead_stop;
    gpu_zones zones; /* of the resident attribute columns (attribute_zones.h) */
    uint32_t report_stride; /* the devices' report slots a (query, range): gpu_upload.report_stride */
    isn_gpu_health health;
    stream_slot slots[MAX_STREAMS];
};

void isn_gpu_options_default(isn_gpu_options *o) {
    memset(o, 0, sizeof *o);
    o->max_batch = 1024;
    o->max_k = 1000;
    o->streams = 2;
    o->prefix_cap = 0.5;
    o->training_k = 10;
    o->training_mode = ISN_MODE_OR;
}

/* The texts requests carry in fallback_reason, and the metric labels, by isn_gpu_fallback_reason. */
static const char *const fallback_text[ISN_GPU_FALLBACK_REASONS] = {
    "device unhealthy",           "empty query",           "k above the device's max_k",
    "more terms than the device takes", "posting list not resident", "non-positive term weight",
    "batch term budget exhausted", "candidate overflow",   "device error",
    "the CPU's completion of resident prefixes failed",
    "a phrase or a field: clause (the GPU holds no positions)",
    "batch filter budget exhausted", "a filter on an attribute the GPU does not hold (values span over 32 bits)",
    "static prior: the partition on the GPU has no finite static scores, or the weight overflows them",
};
static const char *const fallback_label[ISN_GPU_FALLBACK_REASONS] = {
    "unhealthy", "empty_query", "k_above_max_k", "too_many_terms", "not_resident", "nonpositive_weight",
    "term_budget", "candidate_overflow", "device_error", "completion_error", "query_tree_positions",
    "filter_budget", "attribute_not_resident", "static_prior",
};

const char *isn_gpu_fallback_label(isn_gpu_fallback_reason reason) {
    return (unsigned)reason < ISN_GPU_FALLBACK_REASONS ? fallback_label[reason] : "unknown";
}

static isn_gpu_fallback_reason fallback_of(const char *text) {
    for (int i = 0; i < ISN_GPU_FALLBACK_REASONS; i++)
        if (text == fallback_text[i]) return (isn_gpu_fallback_reason)i;
    return ISN_GPU_FALLBACK_DEVICE_ERROR;
}

/* base/'s monotonic clock in milliseconds, the unit of the health and batch statistics. */
static double now_ms(void) { return (double)isn_now_ns() / 1e6; }

static void mark_unhealthy(isn_gpu_backend *b, const char *why) {
    b->health.device_errors++;
    if (!b->health.healthy) return;
    b->health.healthy = false;
    snprintf(b->health.reason, sizeof b->health.reason, "%s", why);
    fprintf(stderr, "isn gpu: device marked unhealthy, serving on the CPU: %s\n", why);
}

typedef struct {
    double value; /* block visits per byte (document frequency per byte for lists the log never names) */
    bool visited; /* named by the training log: admitted before every list it does not name */
    uint32_t term;
    uint32_t blocks; /* of the prefix to admit */
} term_value;

static int cmp_value_desc(const void *a, const void *b) {
    const term_value *x = a, *y = b;
    if (x->visited != y->visited) return x->visited ? -1 : 1;
    if (x->value != y->value) return x->value > y->value ? -1 : 1;
    return (x->term > y->term) - (x->term < y->term);
}

/* Lists shorter than this many blocks are admitted whole or not at all: cutting them saves little and
 * costs a CPU completion. */
#define PREFIX_MIN_BLOCKS 8u

/* Whether the index's queries with a prior may score their leading ranges first (gpu_query.lead_ranges): global
 * order (score bounds) and static scores (their suffix maxima). */
static bool leads_ranges(const isn_index *ix) { return isn_index_score_bounds(ix) && isn_index_prior_bounds(ix); }

/* Chooses what is resident and lays it out for the device (device.h, "Device layout"). When the whole
 * partition fits the budget, all of it. Otherwise a pruned-prefix cache: block visit counts are replayed
 * from the training query log (the device's range passes read every block of a query's lists below its
 * coverage, so a list's leading blocks are visited by every query that names it), each list is admitted
 * up to options.prefix_cap of its blocks, and prefixes go in by visits per byte while the budget lasts,
 * then grow to whole lists while it still lasts, then the lists the log never names (all of them without
 * a log) go in by document frequency per byte. Fills term_blocks, device_payload and device_blocks;
 * 0, or -1 with err. */
static int plan_residency(isn_gpu_backend *b, uint64_t payload_budget, uint32_t threads, char *err, size_t err_len) {
    const isn_index *ix = b->index;
    const isn_index_info *info = isn_index_get_info(ix);
    uint64_t num_blocks;
    const isn_block_meta *blocks = isn_index_block_metas(ix, &num_blocks);
    uint32_t nt = info->num_terms;
    term_value *values = NULL;
    uint8_t *widths = malloc(num_blocks ? num_blocks : 1);
    b->term_blocks = calloc(nt ? nt : 1, sizeof *b->term_blocks);
    if (!widths || !b->term_blocks) goto oom;
    if (gpu_layout_measure(ix, widths, threads, err, err_len) != 0) goto fail;
    b->health.terms_total = nt;
    uint64_t total = 0;
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        total += gpu_layout_list_bytes(ix, widths, t, st.num_blocks);
    }
    b->health.index_bytes += total;
    if (b->options.memory_fraction > 0.0 && b->options.memory_fraction < 1.0) {
        const uint64_t share = (uint64_t)((double)total * b->options.memory_fraction);
        payload_budget = share < payload_budget ? share : payload_budget;
    }
    uint64_t used = 0;
    if (total <= payload_budget) {
        for (uint32_t t = 0; t < nt; t++) {
            isn_term_stats st;
            isn_index_term_stats(ix, t, &st);
            b->term_blocks[t] = st.num_blocks;
        }
        used = total;
    } else {
        values = calloc(nt ? nt : 1, sizeof *values);
        if (!values) goto oom;
        double cap = b->options.prefix_cap;
        for (uint32_t t = 0; t < nt; t++) {
            isn_term_stats st;
            isn_index_term_stats(ix, t, &st);
            values[t].term = t;
            values[t].value = 0.0;
            uint32_t keep = (uint32_t)(cap * st.num_blocks + 0.999999);
            if (st.num_blocks <= PREFIX_MIN_BLOCKS || keep >= st.num_blocks) keep = st.num_blocks;
            if (keep < PREFIX_MIN_BLOCKS && st.num_blocks > PREFIX_MIN_BLOCKS) keep = PREFIX_MIN_BLOCKS;
            values[t].blocks = keep;
        }
        for (uint32_t i = 0; i < b->options.num_training_queries; i++) {
            const isn_query *q = &b->options.training_queries[i];
            for (uint32_t j = 0; j < q->num_terms; j++)
                if (q->terms[j].term_id < nt) values[q->terms[j].term_id].value += 1.0;
        }
        /* lists the log never names (all of them without a log) fill what budget is left, by df per byte */
        for (uint32_t t = 0; t < nt; t++) {
            values[t].visited = values[t].value > 0.0;
            if (!values[t].visited) {
                isn_term_stats st;
                isn_index_term_stats(ix, t, &st);
                values[t].value = (double)st.df;
            }
            values[t].value /= (double)gpu_layout_list_bytes(ix, widths, t, values[t].blocks) + 1.0;
        }
        qsort(values, nt, sizeof *values, cmp_value_desc);
        /* Admission in three rounds, each by value while the budget lasts: the logged lists' prefixes (up
         * to prefix_cap; or by visit frequency: visit_admission.h), then those prefixes grown to whole lists
         * (a cut list costs every query that names it a CPU completion, so a whole list is worth its bytes
         * once every logged prefix is in), then the lists the log never names. */
        const int admission = b->options.admission;
        const bool by_visits = admission == ISN_GPU_ADMIT_VISITS || admission == ISN_GPU_ADMIT_QUERIES ||
                               admission == ISN_GPU_ADMIT_PREFIXES;
        if (by_visits && visit_admission(ix, &b->options, &b->tails, b->crew, widths, payload_budget, b->term_blocks,
                                         &used, err, err_len) != 0)
            goto fail;
        for (int round = by_visits ? 1 : 0; round < 3; round++)
            for (uint32_t i = 0; i < nt; i++) {
                uint32_t t = values[i].term;
                if (values[i].visited != (round < 2)) continue;
                isn_term_stats st;
                isn_index_term_stats(ix, t, &st);
                uint32_t want = round == 1 ? (b->term_blocks[t] ? st.num_blocks : 0) : values[i].blocks;
                if (want <= b->term_blocks[t]) continue;
                uint64_t bytes = gpu_layout_list_bytes(ix, widths, t, want) -
                                 gpu_layout_list_bytes(ix, widths, t, b->term_blocks[t]);
                if (used + bytes > payload_budget) continue;
                b->term_blocks[t] = want;
                used += bytes;
            }
        free(values);
        values = NULL;
    }
    for (uint32_t t = 0; t < nt; t++) {
        if (b->term_blocks[t] == 0) continue;
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        if (b->term_blocks[t] == st.num_blocks) b->health.terms_resident++;
        else b->health.terms_prefix++;
    }
    if (used >> GPU_LAYOUT_OFFSET_BITS) {
        snprintf(err, err_len, "GPU backend: %llu bytes of postings are beyond the device layout's %u-bit offsets",
                 (unsigned long long)used, GPU_LAYOUT_OFFSET_BITS);
        goto fail;
    }
    b->device_payload_bytes = used;
    b->device_payload = malloc(used ? used : 1);
    b->device_blocks = malloc((num_blocks ? num_blocks : 1) * sizeof *b->device_blocks);
    if (!b->device_payload || !b->device_blocks) goto oom;
    memcpy(b->device_blocks, blocks, num_blocks * sizeof *blocks);
    if (gpu_layout_write(ix, widths, b->term_blocks, b->device_payload, b->device_blocks, threads, err, err_len) != 0)
        goto fail;
    free(widths);
    return 0;
oom:
    snprintf(err, err_len, "GPU backend: out of memory laying out the postings of %u terms for the device", nt);
fail:
    free(values);
    free(widths);
    return -1;
}

static void free_slot(stream_slot *s) {
    void *buffers[] = {s->device_request, s->path_of,  s->postings_in_lists, s->cpu_tasks,     s->early_tasks,
                       s->early,          s->task_postings, s->trees,       s->queries,       s->terms,
                       s->filters,        s->filter_values, s->results,     s->hits,          s->coverage,
                       s->tail_terms,     s->ranges_bound_skipped};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        free(buffers[i]);
}

void isn_gpu_close(isn_gpu_backend *b) {
    if (b == NULL) return;
    /* a batch submitted and never completed may still be answering its refused requests */
    for (uint32_t i = 0; b->crew && i < b->options.streams; i++)
        if (b->slots[i].busy) cpu_crew_finish(b->crew, &b->slots[i].early_run);
    if (b->device) b->ops->close(b->device);
    for (int i = 0; i < MAX_STREAMS; i++) free_slot(&b->slots[i]);
    cpu_crew_free(b->crew);
    tail_bounds_free(&b->tails);
    gpu_zones_free(&b->zones);
    void *buffers[] = {b->term_blocks,     b->term_max_part,  b->device_payload,
                       b->device_blocks,   b->attribute_words, b->range_prior_max};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        free(buffers[i]);
    free(b);
}

static int warm_up(isn_gpu_backend *b, char *err, size_t err_len);

/* The attribute columns for the device (gpu_attribute): each attribute's values bit-packed as offsets from its
 * smallest (keyword ids as they are), in as few bits as its span needs, one column after the other, and a
 * word of padding. An attribute whose span needs more than 32 bits is not resident (bits 0). 0, or -1 with
 * err (out of memory). */
static int build_attribute_columns(isn_gpu_backend *b, char *err, size_t err_len) {
    const isn_index *ix = b->index;
    const uint32_t docs = isn_index_get_info(ix)->num_docs;
    b->num_attributes = isn_index_num_attributes(ix);
    uint64_t words = 0;
    for (uint32_t a = 0; a < b->num_attributes; a++) {
        int64_t least = INT64_MAX, most = INT64_MIN;
        for (uint32_t d = 0; d < docs; d++) {
            int64_t v = isn_index_attribute_value(ix, a, d);
            if (v == ISN_ATTRIBUTE_MISSING) continue;
            least = v < least ? v : least;
            most = v > most ? v : most;
        }
        gpu_attribute *column = &b->attributes[a];
        memset(column, 0, sizeof *column);
        column->base = least <= most ? least : 0;
        /* stored = v - base + 1, at most span + 1 */
        uint64_t top = least <= most ? (uint64_t)most - (uint64_t)least + 1u : 0u;
        uint32_t bits = 1;
        while (bits < 64 && (top >> bits)) bits++;
        if (bits > 32) continue; /* not resident: its filters go to the CPU */
        column->bits = bits;
        column->first_word = words;
        words += ((uint64_t)docs * bits + 31) / 32;
    }
    b->num_attribute_words = words + 1;
    b->attribute_words = calloc(b->num_attribute_words, sizeof *b->attribute_words);
    if (b->attribute_words == NULL) {
        snprintf(err, err_len, "GPU backend: out of memory for %llu words of attribute columns",
                 (unsigned long long)b->num_attribute_words);
        return -1;
    }
    for (uint32_t a = 0; a < b->num_attributes; a++) {
        const gpu_attribute *column = &b->attributes[a];
        if (column->bits == 0) continue;
        for (uint32_t d = 0; d < docs; d++) {
            int64_t v = isn_index_attribute_value(ix, a, d);
            uint64_t stored = v == ISN_ATTRIBUTE_MISSING ? 0u : (uint64_t)v - (uint64_t)column->base + 1u;
            uint64_t bit = (uint64_t)d * column->bits;
            uint32_t *at = b->attribute_words + column->first_word + (bit >> 5);
            at[0] |= (uint32_t)(stored << (bit & 31));
            if ((bit & 31) + column->bits > 32) at[1] |= (uint32_t)(stored >> (32 - (bit & 31)));
        }
    }
    b->health.attribute_bytes = b->num_attribute_words * sizeof *b->attribute_words;
    /* without memory for it, filtered queries' lists are sized as unfiltered ones' */
    if (b->zone_maps && gpu_zones_build(&b->zones, b->attribute_words, b->attributes, b->num_attributes, docs) != 0)
        fprintf(stderr, "isn gpu: no memory for the attribute columns' zone map: filtered queries' report lists are "
                        "sized for every range\n");
    return 0;
}

/* The set-up's background part (base.h: isn_run_lowered), after the CPU crew, which serves, has started:
 * bounds, residency and layout, attribute columns, batch buffers, the device's memory and the upload. */
typedef struct {
    isn_gpu_backend *b;
    const gpu_device_ops *ops;
    uint64_t budget, fixed;
    uint32_t threads;
    char *err;
    size_t err_len;
    int rc;
} set_up_job;

static int set_up_lists(isn_gpu_backend *b, const gpu_device_ops *ops, uint64_t budget, uint64_t fixed,
                        uint32_t threads, char *err, size_t err_len) {
    const isn_gpu_options o = b->options;
    const isn_index *index = b->index;
    const isn_index_info *info = isn_index_get_info(index);
    uint64_t num_blocks;
    const isn_block_meta *blocks = isn_index_block_metas(index, &num_blocks);
    if (tail_bounds_init(&b->tails, index, err, err_len) != 0) return -1;
    const double layout_from = now_ms();
    /* the attribute columns first: the postings get what they and the fixed part leave (planned after them, a
     * budget the postings filled to the byte was overrun by the columns' words) */
    if (build_attribute_columns(b, err, err_len) != 0) return -1;
    const uint64_t columns = b->health.attribute_bytes;
    if (budget < fixed + columns + 4096) {
        snprintf(err, err_len, "GPU backend: memory budget %llu bytes is below the %llu bytes of block metadata, static "
                 "scores and attribute columns", (unsigned long long)budget, (unsigned long long)(fixed + columns));
        return -1;
    }
    if (plan_residency(b, budget - fixed - columns, threads, err, err_len) != 0) return -1;
    /* report slots for the lists the zone map may size (more than an unfiltered query's), and the leading rounds' */
    b->report_stride = gpu_report_slots(o.max_k, info->num_docs, b->zones.num_ranges != 0, leads_ranges(index));
    b->health.layout_ms = now_ms() - layout_from;
    b->health.bytes_resident = b->device_payload_bytes + fixed + b->health.attribute_bytes;
    b->term_max_part = calloc(info->num_terms ? info->num_terms : 1, sizeof *b->term_max_part);
    if (b->term_max_part == NULL) {
        snprintf(err, err_len, "GPU backend: out of memory for %u term bounds", info->num_terms);
        return -1;
    }
    for (uint32_t t = 0; t < info->num_terms; t++) {
        isn_term_stats st;
        isn_index_term_stats(index, t, &st);
        float most = 0.0f;
        for (uint32_t k = 0; k < b->term_blocks[t]; k++)
            most = blocks[st.first_block + k].max_tf_part > most ? blocks[st.first_block + k].max_tf_part : most;
        b->term_max_part[t] = most;
    }
    for (uint32_t i = 0; i < o.streams; i++) {
        stream_slot *s = &b->slots[i];
        s->device_request = malloc(o.max_batch * sizeof *s->device_request);
        s->path_of = malloc(o.max_batch * sizeof *s->path_of);
        s->postings_in_lists = malloc(o.max_batch * sizeof *s->postings_in_lists);
        s->cpu_tasks = malloc(o.max_batch * sizeof *s->cpu_tasks);
        s->early_tasks = malloc(o.max_batch * sizeof *s->early_tasks);
        s->early = malloc(o.max_batch * sizeof *s->early);
        s->task_postings = malloc(o.max_batch * sizeof *s->task_postings);
        s->queries = malloc(o.max_batch * sizeof *s->queries);
        s->terms = malloc(b->max_terms * sizeof *s->terms);
        s->trees = malloc(o.max_batch * sizeof *s->trees);
        s->filters = malloc(b->max_filters * sizeof *s->filters);
        s->filter_values = malloc(b->max_filter_values * sizeof *s->filter_values);
        s->results = malloc(o.max_batch * sizeof *s->results);
        s->hits = malloc((size_t)o.max_batch * o.max_k * sizeof *s->hits);
        s->coverage = malloc(o.max_batch * sizeof *s->coverage);
        s->tail_terms = malloc(b->max_terms * sizeof *s->tail_terms);
        s->ranges_bound_skipped = malloc(o.max_batch * sizeof *s->ranges_bound_skipped);
        if (!s->device_request || !s->path_of || !s->postings_in_lists || !s->cpu_tasks || !s->early_tasks ||
            !s->early || !s->task_postings ||
            !s->queries || !s->terms || !s->results || !s->hits || !s->trees || !s->filters || !s->filter_values ||
            !s->coverage || !s->tail_terms || !s->ranges_bound_skipped) {
            snprintf(err, err_len, "GPU backend: out of memory for batch buffers");
            return -1;
        }
    }
    if (b->static_scores) {
        /* each range's largest static score: what the prior adds at most to the range's documents; then the
         * tail bounds from each range on (gpu_upload.range_prior_max) */
        const uint32_t ranges = gpu_num_ranges(info->num_docs);
        const float *part_bounds = isn_index_score_bounds(b->index), *prior_bounds = isn_index_prior_bounds(b->index);
        b->range_prior_max = malloc((size_t)GPU_RANGE_BOUNDS * ranges * sizeof *b->range_prior_max);
        if (b->range_prior_max == NULL) {
            snprintf(err, err_len, "GPU backend: out of memory for the static scores' maxima of %u ranges", ranges);
            return -1;
        }
        for (uint32_t r = 0; r < ranges; r++) {
            const uint32_t lo = r * GPU_RANGE_DOCS, hi = lo + GPU_RANGE_DOCS < info->num_docs ? lo + GPU_RANGE_DOCS
                                                                                             : info->num_docs;
            float most = lo < hi ? b->static_scores[lo] : 0.0f;
            for (uint32_t d = lo + 1; d < hi; d++) most = b->static_scores[d] > most ? b->static_scores[d] : most;
            b->range_prior_max[r] = most;
            /* both are suffix maxima: their value at the range's first document bounds the rest of the index */
            b->range_prior_max[ranges + r] = part_bounds && lo < hi ? part_bounds[lo] : lo < hi ? INFINITY : 0.0f;
            b->range_prior_max[2 * ranges + r] = prior_bounds && lo < hi ? prior_bounds[lo] : lo < hi ? INFINITY : 0.0f;
        }
    }
    gpu_upload up = {
        .payload = b->device_payload,
        .payload_bytes = b->device_payload_bytes,
        .blocks = b->device_blocks,
        .num_blocks = num_blocks,
        .num_docs = info->num_docs,
        .max_batch = o.max_batch,
        .max_terms = b->max_terms,
        .max_k = o.max_k,
        .max_candidates = o.max_candidates,
        .streams = o.streams,
        .attribute_words = b->attribute_words,
        .num_attribute_words = b->num_attribute_words,
        .report_stride = b->report_stride,
        .max_filters = b->max_filters,
        .max_filter_values = b->max_filter_values,
        .static_scores = b->static_scores,
        .range_prior_max = b->range_prior_max,
        .block_suffix_max = b->static_scores && leads_ranges(b->index) ? b->tails.suffix_max : NULL,
    };
    const double upload_from = now_ms();
    b->device = ops->open(o.device, &up, err, err_len);
    b->health.upload_ms = now_ms() - upload_from;
    if (b->device == NULL) return -1;
    /* uploaded: the device holds its own copy */
    free(b->device_payload);
    free(b->device_blocks);
    free(b->attribute_words);
    free(b->range_prior_max);
    b->device_payload = NULL;
    b->device_blocks = NULL;
    b->attribute_words = NULL;
    b->range_prior_max = NULL;
    b->prior_resident = b->static_scores != NULL;
    return 0;
}

static void run_set_up(void *arg) {
    set_up_job *job = arg;
    job->rc = set_up_lists(job->b, job->ops, job->budget, job->fixed, job->threads, job->err, job->err_len);
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
        char why[256] = "";
        int devices = isn_gpu_device_count(why, sizeof why);
        if (devices <= o.device || o.device < 0) {
            /* why is set only when no device could be counted */
            if (devices > 0) snprintf(why, sizeof why, "the machine has %d", devices);
            snprintf(err, err_len, "GPU backend: no GPU %d (%s)", o.device, why);
            return NULL;
        }
        if (isn_gpu_self_test(o.device, err, err_len) != 0) return NULL;
        if (budget == 0) {
            isn_gpu_device_info dev;
            if (isn_gpu_device_info_get(o.device, &dev, err, err_len) != 0) return NULL;
            /* candidates, their sort, and each (query, range)'s report slots (gpu_report_slots, zone maps or not) */
            const uint64_t ranges = ((uint64_t)info->num_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
            const uint32_t slots = gpu_report_slots(o.max_k, info->num_docs, true, leads_ranges(index));
            uint64_t per_stream = (uint64_t)o.max_batch * o.max_candidates * 16 + (uint64_t)o.max_batch * 4096 +
                                  (uint64_t)o.max_batch * ranges * slots * 8;
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
    b->max_filters = o.max_batch * 4 > ISN_MAX_QUERY_FILTERS ? o.max_batch * 4 : ISN_MAX_QUERY_FILTERS;
    b->max_filter_values = o.max_batch * 16 > 65536 ? o.max_batch * 16 : 65536;
    b->health.healthy = true;
    b->no_probe = o.and_by_ranges;
    b->filter_sampling = gpu_env_number("ISN_GPU_FILTER_SAMPLING", 1, 0) != 0;
    b->zone_maps = gpu_env_number("ISN_GPU_ZONE_MAPS", 1, 0) != 0;
    b->lead_ranges = gpu_env_number("ISN_GPU_LEAD_RANGES", 1, 0) != 0;
    b->lead_prune = gpu_env_number("ISN_GPU_LEAD_PRUNE", 2, 0);
    b->lead_prune = b->lead_prune > 2 ? 2 : b->lead_prune;
    b->lead_stop = gpu_env_number("ISN_GPU_LEAD_STOP", 1, 0) != 0;
    uint64_t num_blocks;
    const isn_block_meta *blocks = isn_index_block_metas(index, &num_blocks);
    b->index_blocks = blocks;
    b->k1_plus_1 = info->bm25.k1 + 1.0f;
    const float *norms = isn_index_doc_norms(index);
    for (uint32_t d = 0; d < info->num_docs; d++) b->max_norm = norms[d] > b->max_norm ? norms[d] : b->max_norm;
    uint64_t fixed = num_blocks * sizeof(isn_block_meta);
    b->health.index_bytes = fixed; /* plan_residency adds the postings */
    /* finite static scores go up beside the postings, for the queries that weight a prior, with their ranges'
     * maxima: counted in the budget as the block metadata is */
    if (isn_index_prior_bounds(index)) {
        b->static_scores = isn_index_static_scores(index);
        b->static_magnitude = isn_index_static_score_magnitude(index);
        b->health.static_score_bytes =
            ((uint64_t)info->num_docs + (uint64_t)GPU_RANGE_BOUNDS * gpu_num_ranges(info->num_docs)) * sizeof(float);
        /* and each block's suffix maximum, for the leading ranges' stop (gpu_upload.block_suffix_max) */
        if (leads_ranges(index)) b->health.static_score_bytes += num_blocks * sizeof(float);
        fixed += b->health.static_score_bytes;
    }
    if (budget < fixed + 4096) {
        snprintf(err, err_len,
                 "GPU backend: memory budget %llu bytes is below the %llu bytes of block metadata and static scores",
                 (unsigned long long)budget, (unsigned long long)fixed);
        isn_gpu_close(b);
        return NULL;
    }
    uint32_t threads = o.cpu_threads ? o.cpu_threads : isn_cpus_available();
    b->crew = cpu_crew_new(index, threads, o.max_k);
    if (b->crew == NULL) {
        snprintf(err, err_len, "GPU backend: cannot start %u CPU threads for completions and fallbacks", threads);
        isn_gpu_close(b);
        return NULL;
    }
    set_up_job job = {b, ops, budget, fixed, threads, err, err_len, 0};
    isn_run_lowered(run_set_up, &job);
    if (job.rc != 0) {
        isn_gpu_close(b);
        return NULL;
    }
    snprintf(b->health.device_name, sizeof b->health.device_name, "%s", ops->name(b->device));
    if (warm_up(b, err, err_len) != 0) {
        isn_gpu_close(b);
        return NULL;
    }
    return b;
}

/* One disjunctive and one probed conjunctive query through every kernel (module load, first launches,
 * pinned pages) before the backend is handed out, so that the node reports ready only when the first
 * real batch runs at speed. The counters start from zero afterwards. 0, or -1 with err. */
static int warm_up(isn_gpu_backend *b, char *err, size_t err_len) {
    uint32_t nt = isn_index_get_info(b->index)->num_terms, common = UINT32_MAX, rare = UINT32_MAX;
    uint32_t common_df = 0, rare_df = UINT32_MAX;
    for (uint32_t t = 0; t < nt && t < 100000; t++) {
        if (b->term_blocks[t] == 0) continue;
        isn_term_stats st;
        isn_index_term_stats(b->index, t, &st);
        if (st.df > common_df) common_df = st.df, common = t;
        if (st.df < rare_df) rare_df = st.df, rare = t;
    }
    double t0 = now_ms();
    if (common != UINT32_MAX) {
        isn_query_term terms[3] = {{.term_id = common, .count = 1, .df = common_df},
                                   {.term_id = rare, .count = 1, .df = rare_df},
                                   {.term_id = common, .count = 1, .df = common_df}};
        isn_query or_query = {.terms = terms, .num_terms = common == rare ? 1 : 2};
        isn_query and_query = {.terms = terms + 1, .num_terms = common == rare ? 1 : 2};
        isn_hit hits[2][10];
        uint32_t k = b->options.max_k < 10 ? b->options.max_k : 10;
        isn_gpu_request r[2] = {{.query = &or_query, .mode = ISN_MODE_OR, .k = k, .hits = hits[0]},
                                {.query = &and_query, .mode = ISN_MODE_AND, .k = k, .hits = hits[1]}};
        if (isn_gpu_search_batch(b, r, 2, NULL, err, err_len) != 0) return -1;
        if (!b->health.healthy) {
            snprintf(err, err_len, "GPU backend: warm-up failed: %s", b->health.reason);
            return -1;
        }
    }
    isn_gpu_health fresh = b->health;
    fresh.batches = fresh.queries_device = fresh.queries_cpu = fresh.queries_not_resident = 0;
    fresh.queries_prefix = fresh.bytes_transferred = fresh.completions_avoided = 0;
    memset(fresh.fallbacks, 0, sizeof fresh.fallbacks);
    fresh.ms_per_mposting_pruned = fresh.ms_per_mposting_exhaustive = 0.0;
    fresh.batches_pruned = fresh.batches_exhaustive = fresh.samples_pruned = fresh.samples_exhaustive = 0;
    fresh.seconds_submitting = fresh.seconds_device_wait = fresh.seconds_completing = 0.0;
    fresh.warmup_ms = now_ms() - t0;
    fresh.ready = true;
    b->health = fresh;
    return 0;
}

/* Why the device cannot answer this query tree exactly; NULL when it can (the tree then in *form). */
static const char *tree_refusal(const isn_gpu_backend *b, const isn_gpu_request *r, uint64_t num_docs,
                                gpu_tree_form *form) {
    int why = gpu_tree_read(b->index, r->query, r->mode, num_docs, form);
    if (why >= 0) return fallback_text[why];
    if (form->empty) return fallback_text[ISN_GPU_FALLBACK_EMPTY_QUERY];
    if (r->k > b->options.max_k) return fallback_text[ISN_GPU_FALLBACK_K_ABOVE_MAX];
    for (uint32_t t = 0; t < form->num_terms; t++) {
        if (b->term_blocks[form->term_ids[t]] == 0) return fallback_text[ISN_GPU_FALLBACK_NOT_RESIDENT];
        if (t + form->num_excluded < form->num_terms && !(form->weights[t] > 0.0f))
            return fallback_text[ISN_GPU_FALLBACK_NONPOSITIVE_WEIGHT];
    }
    for (uint32_t f = 0; f < form->num_filters; f++)
        if (form->filters[f].attribute >= b->num_attributes || b->attributes[form->filters[f].attribute].bits == 0)
            return fallback_text[ISN_GPU_FALLBACK_ATTRIBUTE_NOT_RESIDENT];
    return NULL;
}

/* Why the device cannot answer this request exactly; NULL when it can. */
static const char *device_refusal(const isn_gpu_backend *b, const isn_gpu_request *r, uint64_t num_docs,
                                  gpu_tree_form *form) {
    if (!b->health.healthy) return fallback_text[ISN_GPU_FALLBACK_UNHEALTHY];
    /* the CPU refuses such a weight too (isn_search), or weights scores the device does not hold */
    if (r->prior_weight != 0.0f && (!b->prior_resident || isinf(r->prior_weight * b->static_magnitude)))
        return fallback_text[ISN_GPU_FALLBACK_STATIC_PRIOR];
    if (r->query->structure) return tree_refusal(b, r, num_docs, form);
    if (r->query->num_terms == 0 || (r->mode == ISN_MODE_AND && r->query->num_unknown > 0))
        return fallback_text[ISN_GPU_FALLBACK_EMPTY_QUERY];
    if (r->k > b->options.max_k) return fallback_text[ISN_GPU_FALLBACK_K_ABOVE_MAX];
    if (r->query->num_terms > (r->mode == ISN_MODE_AND ? GPU_MAX_TERMS : GPU_MAX_OR_TERMS))
        return fallback_text[ISN_GPU_FALLBACK_TOO_MANY_TERMS];
    for (uint32_t t = 0; t < r->query->num_terms; t++) {
        const isn_query_term *qt = &r->query->terms[t];
        if (b->term_blocks[qt->term_id] == 0) return fallback_text[ISN_GPU_FALLBACK_NOT_RESIDENT];
        if (!(isn_bm25_idf(num_docs, qt->df) > 0.0f)) return fallback_text[ISN_GPU_FALLBACK_NONPOSITIVE_WEIGHT];
    }
    return NULL;
}

/* Insertion sort by ascending max_score (queries have few terms; stable, so equal bounds keep the
 * query's order). */
/* A value's stored form in a resident column (gpu_attribute): false when no document can hold it. */
static bool stored_of(const gpu_attribute *column, int64_t v, uint32_t *stored) {
    if (v == ISN_ATTRIBUTE_MISSING || v < column->base) return false;
    const uint64_t off = (uint64_t)v - (uint64_t)column->base, top = (1ull << column->bits) - 2u;
    if (off > top) return false;
    *stored = (uint32_t)(off + 1u);
    return true;
}

/* The tree's filter as the device tests it (gpu_filter) against its resident column: an equality with one
 * value the column can hold, and every comparison, as a range of stored values; an equality with several, as
 * the stored values it names (appended to values at *num_values); values no document holds are dropped, and
 * a filter left with none holds nothing ([1, 0]). */
static gpu_filter compile_filter(const gpu_attribute *column, const gpu_tree_filter *raw, const int64_t *raw_values,
                                 uint32_t *values, uint32_t *num_values) {
    gpu_filter f = {.first_word = column->first_word, .bits = column->bits, .negate = raw->negate, .least = 1, .most = 0};
    const int64_t *want = raw_values + raw->first_value;
    if (raw->op == ISN_FILTER_EQ) {
        uint32_t kept = 0, first = *num_values, stored;
        for (uint32_t i = 0; i < raw->num_values; i++)
            if (stored_of(column, want[i], &stored)) values[first + kept++] = stored;
        if (kept == 1) {
            f.least = f.most = values[first];
        } else if (kept > 1) {
            f.first_value = first;
            f.num_values = kept;
            *num_values += kept;
        }
        return f;
    }
    /* the values v with least <= v <= most, in int64, then clipped to the column's span */
    const int64_t v = want[0];
    int64_t least = INT64_MIN, most = INT64_MAX;
    switch (raw->op) {
    case ISN_FILTER_GE: least = v; break;
    case ISN_FILTER_GT:
        if (v == INT64_MAX) return f;
        least = v + 1;
        break;
    case ISN_FILTER_LE: most = v; break;
    default:
        if (v == INT64_MIN) return f;
        most = v - 1;
        break;
    }
    const uint64_t top = (1ull << column->bits) - 2u; /* the largest offset a stored value takes */
    if (most < column->base) return f;
    const uint64_t most_off = (uint64_t)most - (uint64_t)column->base;
    const uint64_t least_off = least <= column->base ? 0u : (uint64_t)least - (uint64_t)column->base;
    if (least_off > top || least_off > most_off) return f;
    f.least = (uint32_t)(least_off + 1u);
    f.most = (uint32_t)((most_off < top ? most_off : top) + 1u);
    return f;
}

static void sort_by_bound(gpu_term *terms, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) {
        gpu_term t = terms[i];
        uint32_t j = i;
        while (j > 0 && terms[j - 1].max_score > t.max_score) {
            terms[j] = terms[j - 1];
            j--;
        }
        terms[j] = t;
    }
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
    if (!(r->prior_weight >= 0.0f) || isinf(r->prior_weight)) {
        snprintf(err, err_len, "request %u: prior_weight must be a finite weight >= 0 (0 = no static prior), got %g", i,
                 (double)r->prior_weight);
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

static bool choose_pruning(isn_gpu_backend *b, uint32_t n) {
    if (b->options.pruning == ISN_GPU_PRUNE_ALWAYS) return true;
    if (b->options.pruning == ISN_GPU_PRUNE_NEVER) return false;
    return prune_choose(&b->prune[prune_class(n)], b->options.streams);
}

/* Folds a batch's time per million list postings into its size class's average for its mode; the health
 * shows the class of the latest batch. */
static void learn_pruning(isn_gpu_backend *b, uint32_t n, bool pruned, double ms, uint64_t postings, bool one_off) {
    prune_learning *l = &b->prune[prune_class(n)];
    if (!prune_learn(l, pruned, ms, postings, one_off)) return;
    b->health.ms_per_mposting_pruned = l->ms_per_mposting[1];
    b->health.ms_per_mposting_exhaustive = l->ms_per_mposting[0];
    if (pruned) b->health.samples_pruned++;
    else b->health.samples_exhaustive++;
}

static void start_early_answers(isn_gpu_backend *b, stream_slot *s);

static int submit_batch(isn_gpu_backend *b, isn_gpu_request *requests, uint32_t n, char *err, size_t err_len);

int isn_gpu_submit(isn_gpu_backend *b, isn_gpu_request *requests, uint32_t n, char *err, size_t err_len) {
    const double began = now_ms();
    int ticket = submit_batch(b, requests, n, err, err_len);
    if (b) b->health.seconds_submitting += (now_ms() - began) / 1e3;
    return ticket;
}

static int submit_batch(isn_gpu_backend *b, isn_gpu_request *requests, uint32_t n, char *err, size_t err_len) {
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
    s->pruned = choose_pruning(b, n);
    uint32_t nq = 0, nterms = 0, hits = 0, num_range = 0, nfilters = 0, nvalues = 0;
    uint32_t index_docs = isn_index_get_info(b->index)->num_docs;
    for (uint32_t i = 0; i < n; i++) {
        isn_gpu_request *r = &requests[i];
        r->num_hits = 0;
        r->answered_by = ISN_GPU_ANSWERED_CPU;
        uint64_t num_docs = r->num_docs ? r->num_docs : index_docs;
        r->fallback_reason = device_refusal(b, r, num_docs, &s->trees[i]);
    }
    /* range-path queries first, then the probed conjunctive ones (device.h). Each query takes a segment
     * of the candidate pool (max_batch * max_candidates): max_candidates, or a probed query's driver
     * list length when shorter (it cannot match more); a query that matches more than its segment holds
     * is collected or probed again on the device with a tighter key (GPU_OVERFLOW_RETRIES). */
    uint64_t pool_offset = 0;
    for (int path = GPU_PATH_RANGES; path <= GPU_PATH_PROBE; path++) {
        for (uint32_t i = 0; i < n; i++) {
            isn_gpu_request *r = &requests[i];
            if (r->fallback_reason != NULL) continue;
            /* the query's terms as the device takes them: a bag of words's, or a tree's (required, optional,
             * excluded; query_tree.c) */
            const gpu_tree_form *tree = r->query->structure ? &s->trees[i] : NULL;
            const uint32_t num_terms = tree ? tree->num_terms : r->query->num_terms;
            /* a tree without excluded clauses whose positive clauses are all optional (OR) or all required is
             * a bag of words with filters: the unfiltered query's paths, kernels and pruning (gpu_query);
             * only the others need match counts (gpu_query.tree) */
            const bool conjunctive = tree && tree->num_excluded == 0 && tree->num_required == num_terms;
            const bool counts_matches = tree && tree->num_excluded + tree->num_required > 0 && !conjunctive;
            const bool and_mode = tree ? conjunctive : r->mode == ISN_MODE_AND;
            uint64_t num_docs = r->num_docs ? r->num_docs : index_docs;
            /* resident postings per term, and the coverage: below it every resident prefix is whole */
            uint32_t driver = 0, driver_df = UINT32_MAX, limit = index_docs, match_end = index_docs;
            for (uint32_t t = 0; t < num_terms; t++) {
                uint32_t id = tree ? tree->term_ids[t] : r->query->terms[t].term_id;
                isn_term_stats st;
                isn_index_term_stats(b->index, id, &st);
                uint32_t df = st.df;
                if (st.num_blocks) { /* where the list ends, whole or not */
                    const uint32_t end = b->index_blocks[st.first_block + st.num_blocks - 1].last_doc + 1;
                    match_end = end < match_end ? end : match_end;
                }
                if (b->term_blocks[id] < st.num_blocks) {
                    df = b->term_blocks[id] * ISN_BLOCK_SIZE;
                    uint32_t covered = b->index_blocks[st.first_block + b->term_blocks[id] - 1].last_doc + 1;
                    limit = covered < limit ? covered : limit;
                }
                if (df < driver_df) {
                    driver_df = df;
                    driver = t;
                }
            }
            /* trees with match counts take the range passes (the counts live there) */
            if (path == GPU_PATH_RANGES)
                s->path_of[i] = and_mode && !b->no_probe ? GPU_PATH_PROBE : GPU_PATH_RANGES;
            int wanted = s->path_of[i];
            if (wanted != path) continue;
            if (nterms + num_terms > b->max_terms) {
                r->fallback_reason = fallback_text[ISN_GPU_FALLBACK_TERM_BUDGET];
                continue;
            }
            if (tree && (nfilters + tree->num_filters > b->max_filters ||
                         nvalues + tree->num_values > b->max_filter_values)) {
                r->fallback_reason = fallback_text[ISN_GPU_FALLBACK_FILTER_BUDGET];
                continue;
            }
            gpu_query *q = &s->queries[nq];
            memset(q, 0, sizeof *q);
            q->term_begin = nterms;
            q->num_terms = num_terms;
            q->k = r->k;
            q->and_mode = and_mode;
            q->prior_weight = r->prior_weight;
            q->range_top = gpu_range_top(r->k, index_docs);
            /* the ranges that can hold an answer: all, or those the query's filters keep (below) */
            uint32_t kept_ranges = (index_docs + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
            q->hit_offset = hits;
            q->path = (uint32_t)path;
            q->driver = driver;
            q->doc_limit = limit;
            /* a conjunctive match lies in every list, so none lies past the end of the list that ends first: when
             * that is below the coverage, the resident blocks hold every match and nothing is left to complete */
            s->coverage[nq] = and_mode && match_end <= limit ? index_docs : limit;
            q->cand_cap = path == GPU_PATH_PROBE && driver_df < b->options.max_candidates ? (driver_df ? driver_df : 1)
                                                                                        : b->options.max_candidates;
            q->cand_offset = (uint32_t)pool_offset;
            pool_offset += q->cand_cap;
            if (counts_matches) {
                q->tree = 1;
                q->num_required = tree->num_required;
                q->num_excluded = tree->num_excluded;
            }
            if (tree) {
                q->filter_begin = nfilters;
                q->num_filters = tree->num_filters;
                for (uint32_t f = 0; f < tree->num_filters; f++)
                    s->filters[nfilters + f] = compile_filter(&b->attributes[tree->filters[f].attribute],
                                                              &tree->filters[f], tree->values, s->filter_values, &nvalues);
                /* report lists for the ranges the filters can keep a document of (attribute_zones.h), as long as
                 * the device's report slots hold them; filters that keep none leave nothing to report */
                if (b->zones.num_ranges && tree->num_filters) {
                    const gpu_batch view = {.filters = s->filters, .filter_values = s->filter_values};
                    const uint32_t kept = gpu_zones_kept_ranges_cached(&b->zones, &s->zone_cache, &view, q);
                    const uint32_t top = gpu_range_top_of_ranges(r->k, kept);
                    if (kept) {
                        q->range_top = top < b->report_stride ? top : b->report_stride;
                        kept_ranges = kept;
                    }
                }
                nfilters += tree->num_filters;
            }
            float min_weight = INFINITY;
            double weight_sum = 0.0;
            uint64_t st_postings = 0;
            /* the CPU's probe scores under the index's own statistics (a tree's terms: their query dfs) */
            bool own_stats = num_docs == index_docs;
            for (uint32_t t = 0; tree && own_stats && t < r->query->num_terms; t++) {
                const uint32_t id = r->query->terms[t].term_id;
                isn_term_stats st;
                own_stats = id < isn_index_get_info(b->index)->num_terms;
                if (own_stats) isn_index_term_stats(b->index, id, &st);
                own_stats = own_stats && r->query->terms[t].df == st.df;
            }
            for (uint32_t t = 0; t < num_terms; t++) {
                const uint32_t id = tree ? tree->term_ids[t] : r->query->terms[t].term_id;
                isn_term_stats st;
                isn_index_term_stats(b->index, id, &st);
                uint32_t resident = b->term_blocks[id];
                float weight = tree ? tree->weights[t]
                                    : isn_bm25_idf(num_docs, r->query->terms[t].df) * (float)r->query->terms[t].count;
                own_stats = own_stats && (tree || r->query->terms[t].df == st.df);
                s->terms[nterms + t] = (gpu_term){
                    .first_block = (uint32_t)st.first_block,
                    .num_blocks = resident,
                    /* a cut list's resident blocks are all full */
                    .df = resident < st.num_blocks ? resident * ISN_BLOCK_SIZE : st.df,
                    .weight = weight,
                    .max_score = weight * b->term_max_part[id],
                };
                s->tail_terms[nterms + t] = (tail_term){(uint32_t)st.first_block, st.num_blocks, weight};
                if (weight > 0.0f) { /* an excluded term scores nothing */
                    min_weight = weight < min_weight ? weight : min_weight;
                    weight_sum += weight;
                }
                st_postings += s->terms[nterms + t].df;
            }
            /* ranges: ascending bounds, so that a leading run can be non-essential (gpu_term.max_score); a
             * tree with match counts keeps its roles' order (it does not prune) */
            if (path == GPU_PATH_RANGES && !counts_matches) sort_by_bound(s->terms + nterms, num_terms);
            nterms += num_terms;
            q->seed_key = 0;
            q->floor_key = 0;
            /* a bag of words with filters takes the probe's seed as the bag does: the probe scores only the
             * documents the filters keep (isn_threshold_probe), so its k-th best bounds the filtered answer's.
             * Trees with match counts do not prune, and conjunctive ones probe. */
            /* with a prior the threshold must bound the scores with it (isn_gpu_request.threshold_with_prior): a
             * BM25-only one is none when static scores may be negative */
            const bool bounds_scores = r->prior_weight == 0.0f || r->threshold_with_prior;
            if (r->mode == ISN_MODE_OR && own_stats && r->threshold > 0.0 && bounds_scores && path == GPU_PATH_RANGES &&
                !q->and_mode && !counts_matches) {
                /* a hair below the probe's score, whatever order the probe summed in */
                q->floor_key = gpu_float_key((float)(r->threshold * (1.0 - 1e-6)));
                if (s->pruned) q->seed_key = q->floor_key;
            }
            /* unpruned disjunctive queries without the CPU's floor (its probe stops at k = 64) sample: the
             * sample's k-th best report is the other ranges' report floor (gpu_query.sampled_floor); with
             * the probe's floor the sampling round costs more than it raises the floor. Trees with match counts
             * score every range in one round. */
            q->sampled_floor = !s->pruned && !and_mode && path == GPU_PATH_RANGES && q->floor_key == 0 && !counts_matches &&
                               (b->filter_sampling || q->num_filters == 0);
            q->sample_stride =
                !counts_matches && (s->pruned || q->sampled_floor) ? gpu_sample_stride(r->k, q->range_top, kept_ranges) : 1;
            /* global order: from the first id whose tail bound is below the floor (at most the final k-th score) no
             * document is an answer, so the query's passes stop there */
            s->ranges_bound_skipped[nq] = 0;
            if (q->floor_key && !counts_matches) {
                const uint32_t stop = tail_stop(&b->tails, s->tail_terms + q->term_begin, num_terms, 0, limit,
                                                q->floor_key, r->prior_weight);
                if (stop < limit) {
                    q->doc_limit = stop;
                    s->ranges_bound_skipped[nq] =
                        (limit + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS - (stop + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
                }
            }
            /* a prior on an index in global order: a sampling round over the leading ranges, which hold the
             * documents of the largest static scores, each reporting its share of k with room to spare
             * (gpu_lead_ranges_of: the query's k, not the device's max_k, within its slots; most of the answer lies
             * in the first), more than k in all (gpu_query.lead_ranges, lead_top). The ranges after them report their
             * usual few (range_top: the leading k-th best is their floor, and a range that fills its slots is
             * rescored), are pruned at that k-th best where it is high (gpu_lead_prunes), whether the batch prunes or
             * not (unless pruning is off), and end where its tail bound does (gpu_query.lead_stop). Slots sized by
             * the device's max_k instead made every range of a top-1000 query on 20M documents report up to 64 (its
             * threshold selection read them all), and slots of exactly k a range left the leading ranges' every
             * report at or above their k-th best: each one rescored. */
            if (r->prior_weight != 0.0f && leads_ranges(b->index) && !and_mode && path == GPU_PATH_RANGES &&
                !counts_matches && b->options.pruning != ISN_GPU_PRUNE_NEVER && b->lead_ranges) {
                uint32_t top;
                const uint32_t lead = gpu_lead_ranges_of(r->k, b->report_stride, &top);
                top = top > q->range_top ? top : q->range_top;
                const uint32_t covered = (q->doc_limit + GPU_RANGE_DOCS - 1) / GPU_RANGE_DOCS;
                if (lead < covered) {
                    q->lead_top = top;
                    q->lead_ranges = lead;
                    q->lead_prune = b->lead_prune;
                    q->lead_stop = b->lead_stop;
                    q->sample_stride = 1;
                    q->sampled_floor = 0;
                }
            }
            s->postings_in_lists[nq] = st_postings;
            q->fixed_shift = b->options.double_accumulators || !(weight_sum > 0.0)
                                 ? 0
                                 : gpu_fixed_shift(min_weight, weight_sum, b->k1_plus_1, b->max_norm);
            hits += r->k;
            s->device_request[nq++] = i;
        }
        if (path == GPU_PATH_RANGES) num_range = nq;
    }
    s->batch = (gpu_batch){.queries = s->queries, .num_queries = nq, .num_range_queries = num_range,
                           .terms = s->terms, .num_terms = nterms, .filters = s->filters,
                           .num_filters = nfilters, .filter_values = s->filter_values,
                           .num_filter_values = nvalues, .total_hits = hits,
                           .total_candidates = (uint32_t)pool_offset, .results = s->results,
                           .hits = s->hits};
    s->bytes_staged = nq * sizeof(gpu_query) + nterms * sizeof(gpu_term) + nfilters * sizeof(gpu_filter) +
                      nvalues * sizeof(uint32_t);
    start_early_answers(b, s);
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

/* The CPU's search for a request, as isn_search would run it without the device. */
static isn_search_options cpu_options_of(const isn_gpu_request *r) {
    isn_search_options so;
    isn_search_options_default(&so);
    so.mode = r->mode;
    so.algo = ISN_ALGO_AUTO;
    so.k = r->k;
    so.num_docs = r->num_docs;
    so.prior_weight = r->prior_weight;
    return so;
}

static void answer_on_cpu(isn_searcher *searcher, isn_gpu_request *r) {
    isn_search_options so = cpu_options_of(r);
    char why[256];
    r->answered_by = ISN_GPU_ANSWERED_CPU;
    if (isn_search(searcher, r->query, &so, r->hits, &r->num_hits, NULL, why, sizeof why) != 0) r->num_hits = 0;
}

typedef struct {
    isn_gpu_backend *backend;
    stream_slot *slot;
} crew_batch;

/* The CPU's part of a query answered on resident prefixes: the best k of the documents from the coverage
 * limit on, merged with the device's top k. The device's k-th score is a lower bound of the final k-th
 * (its documents are a subset), so the CPU's pruning starts from it: only documents that can still enter
 * are scored. */
static void complete_on_prefixes(void *context, uint32_t i, cpu_hand *hand) {
    crew_batch *cb = context;
    stream_slot *s = cb->slot;
    uint32_t q = s->cpu_tasks[i];
    isn_gpu_request *r = &s->requests[s->device_request[q]];
    isn_search_options so = cpu_options_of(r);
    so.first_doc = s->coverage[q];
    if (r->num_hits == r->k && r->hits[r->k - 1].score > 0.0f) so.initial_threshold = r->hits[r->k - 1].score;
    isn_search_stats stats;
    uint32_t n = 0;
    char why[256];
    s->task_postings[i] = 0;
    if (isn_search(hand->searcher, r->query, &so, hand->suffix_hits, &n, &stats, why, sizeof why) != 0) {
        /* out of memory for the query: the whole query goes to the CPU pass, counted as a fallback */
        r->answered_by = ISN_GPU_ANSWERED_CPU;
        r->fallback_reason = fallback_text[ISN_GPU_FALLBACK_COMPLETION_ERROR];
        return;
    }
    s->task_postings[i] = stats.postings_scored;
    r->num_hits = prefix_merge(r->hits, r->num_hits, hand->suffix_hits, n, r->k, hand->merge_scratch);
}

static void answer_fallback(void *context, uint32_t i, cpu_hand *hand) {
    crew_batch *cb = context;
    answer_on_cpu(hand->searcher, &cb->slot->requests[cb->slot->cpu_tasks[i]]);
}

static void answer_early(void *context, uint32_t i, cpu_hand *hand) {
    stream_slot *s = context;
    answer_on_cpu(hand->searcher, &s->requests[s->early_tasks[i]]);
}

/* The requests refused at submission go to the crew now (stream_slot.early_tasks), all but empty queries,
 * which need no search. */
static void start_early_answers(isn_gpu_backend *b, stream_slot *s) {
    s->num_early = 0;
    for (uint32_t i = 0; i < s->num_requests; i++) {
        const isn_gpu_request *r = &s->requests[i];
        s->early[i] = r->fallback_reason != NULL && fallback_of(r->fallback_reason) != ISN_GPU_FALLBACK_EMPTY_QUERY;
        if (s->early[i]) s->early_tasks[s->num_early++] = i;
    }
    cpu_crew_start(b->crew, &s->early_run, s->num_early, answer_early, s);
}

uint32_t isn_gpu_streams(const isn_gpu_backend *b) { return b ? b->options.streams : 0; }

void isn_gpu_adopt_learning(isn_gpu_backend *to, const isn_gpu_backend *from) {
    if (!to || !from || to == from) return;
    memcpy(to->prune, from->prune, sizeof to->prune);
}

/* A request answered on the CPU, counted by its reason. */
static void count_fallback(isn_gpu_backend *b, isn_gpu_batch_stats *st, isn_gpu_fallback_reason why) {
    if (why == ISN_GPU_FALLBACK_NOT_RESIDENT) b->health.queries_not_resident++;
    b->health.fallbacks[why]++;
    st->fallbacks[why]++;
    st->cpu_queries++;
}

int isn_gpu_complete(isn_gpu_backend *b, int ticket, isn_gpu_batch_stats *stats, char *err, size_t err_len) {
    if (b == NULL || ticket < 0 || (uint32_t)ticket >= b->options.streams || !b->slots[ticket].busy) {
        snprintf(err, err_len, "isn_gpu_complete: no batch with ticket %d", ticket);
        return -1;
    }
    stream_slot *s = &b->slots[ticket];
    const double completing_from = now_ms();
    isn_gpu_batch_stats st;
    memset(&st, 0, sizeof st);
    bool device_ok = s->launched;
    if (s->launched) {
        gpu_batch_timing timing;
        char why[256];
        const double waited_from = now_ms();
        const int finished = b->ops->finish(b->device, (uint32_t)ticket, &s->batch, &timing, why, sizeof why);
        st.ms_device_wait = now_ms() - waited_from;
        if (finished != 0) {
            mark_unhealthy(b, why);
            device_ok = false;
        } else {
            st.ms_transfer_in = timing.ms_transfer_in;
            st.ms_threshold_pass = timing.ms_threshold_pass;
            st.ms_select_threshold = timing.ms_select_threshold;
            st.ms_score_pass = timing.ms_score_pass;
            st.ms_and_probe = timing.ms_and_probe;
            st.ms_sort = timing.ms_sort;
            st.ms_transfer_out = timing.ms_transfer_out;
            st.bytes_to_device = timing.bytes_to_device;
            st.bytes_from_device = timing.bytes_from_device;
            st.overflow_retries = timing.overflow_retries;
            st.filter_bitmaps_built = timing.filter_bitmaps_built;
            st.filter_bitmap_queries = timing.filter_bitmap_queries;
        }
    }
    uint32_t prefix_tasks = 0;
    for (uint32_t q = 0; q < s->batch.num_queries; q++) {
        isn_gpu_request *r = &s->requests[s->device_request[q]];
        const gpu_query_result *res = &s->results[q];
        if (!device_ok) {
            r->fallback_reason = fallback_text[ISN_GPU_FALLBACK_DEVICE_ERROR];
            continue;
        }
        st.ranges_scored += res->ranges_scored;
        st.ranges_pruned += res->ranges_pruned;
        st.ranges_rescored += res->ranges_rescored;
        st.ranges_stopped += res->ranges_stopped;
        st.blocks_skipped += res->blocks_skipped;
        st.postings_scored += res->postings_scored;
        st.postings_decoded += res->postings_decoded;
        st.candidates += res->candidates;
        st.reports += res->reports;
        st.ranges_logged += res->ranges_floored - res->ranges_scanned;
        st.ranges_scanned += res->ranges_scanned;
        if (res->accumulator < ISN_GPU_ACC_KINDS) st.accumulator_queries[res->accumulator]++;
        if (res->candidates > s->queries[q].cand_cap) {
            r->fallback_reason = fallback_text[ISN_GPU_FALLBACK_CANDIDATE_OVERFLOW];
            continue;
        }
        memcpy(r->hits, s->batch.hits + s->queries[q].hit_offset, res->num_hits * sizeof(isn_hit));
        r->num_hits = res->num_hits;
        st.ranges_bound_skipped += s->ranges_bound_skipped[q];
        bool settled = s->ranges_bound_skipped[q] > 0;
        if (s->coverage[q] < isn_index_get_info(b->index)->num_docs) {
            /* resident prefixes answered the documents below the coverage. In global order, when no document
             * from there on can beat the device's k-th score, that is the answer; else the CPU scores the rest. */
            const uint32_t kth_key = r->num_hits == r->k ? gpu_float_key(r->hits[r->k - 1].score) : 0u;
            if (kth_key && gpu_bound_below(tail_bound(&b->tails, s->tail_terms + s->queries[q].term_begin,
                                                      s->queries[q].num_terms, s->coverage[q], r->prior_weight),
                                           kth_key)) {
                settled = true;
                st.completions_avoided++;
                b->health.completions_avoided++;
            } else {
                s->cpu_tasks[prefix_tasks++] = q;
                b->health.queries_prefix++;
                st.prefix_queries++;
            }
        }
        st.bound_settled += settled;
        r->answered_by = ISN_GPU_ANSWERED_DEVICE;
        r->fallback_reason = NULL;
        st.device_queries++;
        st.postings_in_lists += s->postings_in_lists[q];
    }
    crew_batch cb = {b, s};
    cpu_crew_run(b->crew, prefix_tasks, complete_on_prefixes, &cb);
    for (uint32_t i = 0; i < prefix_tasks; i++) {
        st.prefix_cpu_postings += s->task_postings[i];
        uint32_t q = s->cpu_tasks[i];
        if (s->requests[s->device_request[q]].answered_by != ISN_GPU_ANSWERED_DEVICE) {
            st.device_queries--;
            st.postings_in_lists -= s->postings_in_lists[q];
        }
    }
    uint32_t fallback_tasks = 0;
    for (uint32_t i = 0; i < s->num_requests; i++) {
        isn_gpu_request *r = &s->requests[i];
        /* (before answered_by, which the crew may be writing) */
        if (s->early[i]) { /* refused at submission: answered by the crew since (start_early_answers) */
            count_fallback(b, &st, fallback_of(r->fallback_reason));
            st.cpu_early++;
            continue;
        }
        if (r->answered_by == ISN_GPU_ANSWERED_DEVICE) continue;
        isn_gpu_fallback_reason why = fallback_of(r->fallback_reason);
        if (why == ISN_GPU_FALLBACK_EMPTY_QUERY) {
            /* no terms, or a conjunction with an unknown term: no document matches, nothing to search */
            r->num_hits = 0;
            r->answered_by = ISN_GPU_ANSWERED_DEVICE;
            r->fallback_reason = NULL;
            st.device_queries++;
            continue;
        }
        count_fallback(b, &st, why);
        s->cpu_tasks[fallback_tasks++] = i;
    }
    cpu_crew_run(b->crew, fallback_tasks, answer_fallback, &cb);
    cpu_crew_finish(b->crew, &s->early_run);
    st.queries = s->num_requests;
    const double now = now_ms();
    st.ms_total = now - s->submitted_at;
    b->health.seconds_device_wait += st.ms_device_wait / 1e3;
    b->health.seconds_completing += (now - completing_from - st.ms_device_wait) / 1e3;
    st.pruned = s->pruned;
    /* What the batch cost: the time since the later of its submission and the previous batch's completion.
     * Its own device events are no measure once batches overlap: they also count the other stream's
     * kernels, so a cheap batch beside a costly one looks as costly. The interval is no measure either when
     * the batch ran beside one of the other mode: the one that completed before it (whose interval then took
     * this batch's work done meanwhile) or one still in flight (choose_pruning). */
    const double since = now - (b->last_completion_ms > s->submitted_at ? b->last_completion_ms : s->submitted_at);
    bool alone = s->submitted_at >= b->last_completion_ms || b->last_completed_pruned == s->pruned;
    for (uint32_t i = 0; i < b->options.streams; i++)
        if (&b->slots[i] != s && b->slots[i].busy && b->slots[i].pruned != s->pruned) alone = false;
    b->last_completion_ms = now;
    b->last_completed_pruned = s->pruned;
    if (s->pruned) b->health.batches_pruned++;
    else b->health.batches_exhaustive++;
    /* a batch that built filter bitmaps, which later batches of either mode reuse, is a one-off sample */
    if (device_ok && st.cpu_queries == 0 && alone)
        learn_pruning(b, s->num_requests, s->pruned, since, st.postings_in_lists, st.filter_bitmaps_built > 0);
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

size_t isn_gpu_health_format_metrics(const isn_gpu_health *h, const char *labels, char *buf, size_t len) {
    const char *l = labels ? labels : "";
    int n = snprintf(buf, len,
                     "isn_gpu_ready{%s} %d\n"
                     "isn_gpu_healthy{%s} %d\n"
                     "isn_gpu_warmup_ms{%s} %.3f\n"
                     "isn_gpu_layout_ms{%s} %.3f\n"
                     "isn_gpu_upload_ms{%s} %.3f\n"
                     "isn_gpu_index_bytes{%s} %llu\n"
                     "isn_gpu_bytes_resident{%s} %llu\n"
                     "isn_gpu_terms_total{%s} %u\n"
                     "isn_gpu_terms_resident{%s} %u\n"
                     "isn_gpu_terms_prefix{%s} %u\n"
                     "isn_gpu_batches_total{%s} %llu\n"
                     "isn_gpu_queries_device_total{%s} %llu\n"
                     "isn_gpu_queries_cpu_total{%s} %llu\n"
                     "isn_gpu_queries_not_resident_total{%s} %llu\n"
                     "isn_gpu_queries_prefix_total{%s} %llu\n"
                     "isn_gpu_queries_prefix_settled_total{%s} %llu\n"
                     "isn_gpu_device_errors_total{%s} %llu\n"
                     "isn_gpu_bytes_transferred_total{%s} %llu\n",
                     l, h->ready, l, h->healthy, l, h->warmup_ms, l, h->layout_ms, l, h->upload_ms, l,
                     (unsigned long long)h->index_bytes, l,
                     (unsigned long long)h->bytes_resident, l, h->terms_total, l, h->terms_resident, l, h->terms_prefix, l,
                     (unsigned long long)h->batches, l, (unsigned long long)h->queries_device, l,
                     (unsigned long long)h->queries_cpu, l, (unsigned long long)h->queries_not_resident, l,
                     (unsigned long long)h->queries_prefix, l, (unsigned long long)h->completions_avoided, l,
                     (unsigned long long)h->device_errors, l,
                     (unsigned long long)h->bytes_transferred);
    if (n < 0) return 0;
    size_t used = (size_t)n;
    for (int i = 0; i < ISN_GPU_FALLBACK_REASONS; i++) {
        if (i == ISN_GPU_FALLBACK_EMPTY_QUERY) continue; /* answered with no hits, never on the CPU */
        int m = snprintf(used < len ? buf + used : NULL, used < len ? len - used : 0,
                         "isn_gpu_cpu_fallbacks_total{%s%sreason=\"%s\"} %llu\n", l, *l ? "," : "", fallback_label[i],
                         (unsigned long long)h->fallbacks[i]);
        if (m < 0) return 0;
        used += (size_t)m;
    }
    const char *sep = *l ? "," : "";
    int m = snprintf(used < len ? buf + used : NULL, used < len ? len - used : 0,
                     "isn_gpu_prune_batches_total{%s%smode=\"pruned\"} %llu\n"
                     "isn_gpu_prune_batches_total{%s%smode=\"exhaustive\"} %llu\n"
                     "isn_gpu_prune_cost_samples_total{%s%smode=\"pruned\"} %llu\n"
                     "isn_gpu_prune_cost_samples_total{%s%smode=\"exhaustive\"} %llu\n"
                     "isn_gpu_prune_ms_per_mposting{%s%smode=\"pruned\"} %.6f\n"
                     "isn_gpu_prune_ms_per_mposting{%s%smode=\"exhaustive\"} %.6f\n"
                     "isn_gpu_host_seconds_total{%s%sphase=\"submit\"} %.9g\n"
                     "isn_gpu_host_seconds_total{%s%sphase=\"device_wait\"} %.9g\n"
                     "isn_gpu_host_seconds_total{%s%sphase=\"complete\"} %.9g\n",
                     l, sep, (unsigned long long)h->batches_pruned, l, sep, (unsigned long long)h->batches_exhaustive, l,
                     sep, (unsigned long long)h->samples_pruned, l, sep, (unsigned long long)h->samples_exhaustive, l,
                     sep, h->ms_per_mposting_pruned, l, sep, h->ms_per_mposting_exhaustive, l, sep,
                     h->seconds_submitting, l, sep, h->seconds_device_wait, l, sep, h->seconds_completing);
    if (m < 0) return 0;
    return used + (size_t)m;
}

void isn_gpu_inject_fault(isn_gpu_backend *b) { b->fault_armed = true; }
