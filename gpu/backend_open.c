/* Opening the first-stage backend: what is resident (the whole partition, or a pruned-prefix cache chosen by
 * replaying a training log), its device layout, the attribute columns and their zone map, the static scores,
 * the device's upload, and a warm-up batch through every kernel; and closing it. Serving: backend.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend_internal.h"
#include "gpu/naming_rates.h"
#include "gpu/tier_admission.h"
#include "gpu/visit_admission.h"

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

/* Page-aligned (the CUDA device maps it for its gather kernel), zeroed past `bytes`; NULL when out of memory. */
static void *alloc_pages(uint64_t bytes) {
    const uint64_t rounded = (bytes + 4095u) / 4096u * 4096u;
    void *p = aligned_alloc(4096, rounded ? rounded : 4096);
    if (p && rounded > bytes) memset((uint8_t *)p + bytes, 0, rounded - bytes);
    return p;
}

/* Streaming (isn_gpu_options.stream_bytes): every list laid out on the host as the device reads it (total bytes), with
 * its own copy of the block metadata and the blocks' suffix maxima, which the device copies batches' missing lists
 * from (gpu_stage_list); and each stream's staging region: stream_bytes of payload and metadata for as many blocks
 * as that payload holds at the layout's mean block size, twice over, within a quarter of its bytes. 0, or -1 with err. */
static int lay_out_streaming(isn_gpu_backend *b, const uint8_t *widths, uint64_t total, uint32_t threads, char *err,
                             size_t err_len) {
    const isn_index *ix = b->index;
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    uint64_t num_blocks;
    const isn_block_meta *blocks = isn_index_block_metas(ix, &num_blocks);
    uint32_t *whole = malloc((nt ? nt : 1) * sizeof *whole);
    b->stream_payload = alloc_pages(total);
    b->stream_blocks = alloc_pages(num_blocks * sizeof *b->stream_blocks);
    b->staged_term = malloc((nt ? nt : 1) * sizeof *b->staged_term);
    b->staged_at = malloc((nt ? nt : 1) * sizeof *b->staged_at);
    const bool suffixes = b->static_scores && gpu_backend_leads_ranges(ix);
    if (suffixes) b->stream_suffix = alloc_pages(num_blocks * sizeof *b->stream_suffix);
    if (!whole || !b->stream_payload || !b->stream_blocks || !b->staged_term || !b->staged_at ||
        (suffixes && !b->stream_suffix)) {
        free(whole);
        snprintf(err, err_len, "GPU backend: out of memory for the %llu-byte host layout that streaming copies from",
                 (unsigned long long)total);
        return -1;
    }
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        whole[t] = st.num_blocks;
        b->staged_term[t] = 0;
    }
    memcpy(b->stream_blocks, blocks, num_blocks * sizeof *blocks);
    const int rc = gpu_layout_write(ix, widths, whole, b->stream_payload, b->stream_blocks, threads, err, err_len);
    free(whole);
    if (rc != 0) return -1;
    if (suffixes) memcpy(b->stream_suffix, b->tails.suffix_max, num_blocks * sizeof *b->stream_suffix);
    b->stream_payload_bytes = total;
    b->stage_bytes = b->options.stream_bytes / 16u * 16u;
    const uint64_t mean_block = num_blocks ? (total + num_blocks - 1) / num_blocks : 1;
    uint64_t stage_blocks = 2u * b->stage_bytes / (mean_block ? mean_block : 1) + 1u;
    /* their metadata and suffix maxima within a quarter of the payload's bytes (what isn_gpu_open reserves) */
    const uint64_t most = b->stage_bytes / 4u / (sizeof(isn_block_meta) + sizeof(float));
    stage_blocks = stage_blocks < most ? stage_blocks : most ? most : 1u;
    b->stage_blocks = stage_blocks < UINT32_MAX / MAX_STREAMS ? (uint32_t)stage_blocks : UINT32_MAX / MAX_STREAMS;
    b->health.stream_bytes = b->options.streams * (b->stage_bytes + (uint64_t)b->stage_blocks *
                                                                         (sizeof(isn_block_meta) + (suffixes ? 4u : 0u)));
    return 0;
}

/* Chooses what is resident and lays it out for the device (device.h, "Device layout"). When the whole
 * partition fits the budget, all of it. Otherwise a pruned-prefix cache: block visit counts are replayed
 * from the training query log (the device's range passes read every block of a query's lists below its
 * coverage, so a list's leading blocks are visited by every query that names it), each list is admitted
 * up to options.prefix_cap of its blocks, and prefixes go in by visits per byte while the budget lasts,
 * then grow to whole lists while it still lasts, then the lists the log never names (all of them without
 * a log) go in by document frequency per byte, or by their expected namings per byte (ISN_GPU_UNNAMED_LISTS=1,
 * naming_rates.h). Fills term_blocks, device_payload and device_blocks; 0, or -1 with err. */
static int plan_residency(isn_gpu_backend *b, uint64_t payload_budget, uint32_t threads, char *err, size_t err_len) {
    const isn_index *ix = b->index;
    const isn_index_info *info = isn_index_get_info(ix);
    uint64_t num_blocks;
    const isn_block_meta *blocks = isn_index_block_metas(ix, &num_blocks);
    uint32_t nt = info->num_terms;
    term_value *values = NULL;
    double *rates = NULL; /* expected namings of each list, with a training log */
    bool *named = NULL;
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
    } else if (b->options.admission == ISN_GPU_ADMIT_TIER) {
        uint32_t cut = 0;
        if (tier_admission(ix, widths, payload_budget, b->term_blocks, &used, &cut, err, err_len) != 0) goto fail;
        b->health.tier_docs = cut;
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
        /* lists the log never names fill what budget is left, by df per byte (all of them without a log);
         * ISN_GPU_UNNAMED_LISTS=1: by their expected namings per byte (naming_rates.h), and the replayed
         * admissions weigh their leading blocks against the logged ones. Off by default: on the 20M partition
         * with Debian's log transplanted it sent fewer queries to the CPU and answered fewer a second. */
        const uint32_t logged = b->options.num_training_queries;
        const bool estimate = logged && gpu_env_number("ISN_GPU_UNNAMED_LISTS", 0, 0) != 0;
        if (logged && !(rates = malloc(nt * sizeof *rates))) goto oom;
        if (logged && !(named = malloc(nt * sizeof *named))) goto oom;
        if (logged) naming_rates(ix, b->options.training_queries, logged, rates, named);
        for (uint32_t t = 0; t < nt; t++) {
            isn_term_stats st;
            isn_index_term_stats(ix, t, &st);
            values[t].visited = logged && named[t];
            values[t].value = estimate || values[t].visited ? rates[t] : (double)st.df;
            values[t].value /= (double)gpu_layout_list_bytes(ix, widths, t, values[t].blocks) + 1.0;
        }
        free(named);
        named = NULL;
        qsort(values, nt, sizeof *values, cmp_value_desc);
        /* Admission in three rounds, each by value while the budget lasts: the logged lists' prefixes (up
         * to prefix_cap; or by visit frequency: visit_admission.h), then those prefixes grown to whole lists
         * (a cut list costs every query that names it a CPU completion, so a whole list is worth its bytes
         * once every logged prefix is in), then the lists the log never names. */
        const int admission = b->options.admission;
        const bool by_visits = admission == ISN_GPU_ADMIT_VISITS || admission == ISN_GPU_ADMIT_QUERIES ||
                               admission == ISN_GPU_ADMIT_PREFIXES;
        if (by_visits && visit_admission(ix, &b->options, &b->tails, b->crew, widths, estimate ? rates : NULL,
                                         payload_budget, b->term_blocks, &used, err, err_len) != 0)
            goto fail;
        free(rates);
        rates = NULL;
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
    if (b->options.stream_bytes && used < total && lay_out_streaming(b, widths, total, threads, err, err_len) != 0) goto fail;
    free(widths);
    return 0;
oom:
    snprintf(err, err_len, "GPU backend: out of memory laying out the postings of %u terms for the device", nt);
fail:
    free(values);
    free(rates);
    free(named);
    free(widths);
    return -1;
}

static void free_slot(stream_slot *s) {
    void *buffers[] = {s->device_request, s->path_of,  s->postings_in_lists, s->cpu_tasks,     s->early_tasks,
                       s->early,          s->task_postings, s->trees,       s->queries,       s->terms,
                       s->filters,        s->filter_values, s->results,     s->hits,          s->coverage,
                       s->tail_terms,     s->ranges_bound_skipped, s->early_completions, s->early_completion_of,
                       s->suffix_hits,    s->suffix_count, s->suffix_postings, s->suffix_failed, s->merge_scratch,
                       s->stage,          s->stage_term};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        free(buffers[i]);
}

void isn_gpu_close(isn_gpu_backend *b) {
    if (b == NULL) return;
    /* a batch submitted and never completed may still be answering its refused requests */
    for (uint32_t i = 0; b->crew && i < b->options.streams; i++)
        if (b->slots[i].busy) {
            cpu_crew_finish(b->crew, &b->slots[i].early_run);
            cpu_crew_finish(b->crew, &b->slots[i].completion_run);
        }
    if (b->device) b->ops->close(b->device);
    for (int i = 0; i < MAX_STREAMS; i++) free_slot(&b->slots[i]);
    cpu_crew_free(b->crew);
    tail_bounds_free(&b->tails);
    gpu_zones_free(&b->zones);
    void *buffers[] = {b->term_blocks,     b->term_max_part,   b->device_payload, b->device_blocks,
                       b->attribute_words, b->range_prior_max, b->stream_payload, b->stream_blocks,
                       b->stream_suffix,   b->staged_term,     b->staged_at};
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
    const double layout_from = gpu_backend_now_ms();
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
    b->report_stride = gpu_report_slots(o.max_k, info->num_docs, b->zones.num_ranges != 0, gpu_backend_leads_ranges(index));
    b->health.layout_ms = gpu_backend_now_ms() - layout_from;
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
        s->early_completion_of = calloc(o.max_batch, sizeof *s->early_completion_of);
        if (b->stage_bytes) s->stage = malloc(b->max_terms * sizeof *s->stage);
        if (b->stage_bytes) s->stage_term = malloc(b->max_terms * sizeof *s->stage_term);
        if (!s->early_completion_of || (b->stage_bytes && (!s->stage || !s->stage_term))) {
            snprintf(err, err_len, "GPU backend: out of memory for batch buffers");
            return -1;
        }
        if (b->health.terms_prefix) { /* lists only partly resident: conjunctive completions */
            s->early_completions = malloc(o.max_batch * sizeof *s->early_completions);
            s->suffix_stride = o.max_k;
            s->suffix_hits = malloc((size_t)o.max_batch * o.max_k * sizeof *s->suffix_hits);
            s->suffix_count = malloc(o.max_batch * sizeof *s->suffix_count);
            s->suffix_postings = malloc(o.max_batch * sizeof *s->suffix_postings);
            s->suffix_failed = malloc(o.max_batch * sizeof *s->suffix_failed);
            s->merge_scratch = malloc(o.max_k * sizeof *s->merge_scratch);
            if (!s->early_completions || !s->suffix_hits || !s->suffix_count || !s->suffix_postings ||
                !s->suffix_failed || !s->merge_scratch) {
                snprintf(err, err_len, "GPU backend: out of memory for the conjunctive completions' hits");
                return -1;
            }
        }
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
        .block_suffix_max = b->static_scores && gpu_backend_leads_ranges(b->index) ? b->tails.suffix_max : NULL,
        .host_payload = b->stream_payload,
        .host_payload_bytes = b->stream_payload_bytes,
        .host_blocks = b->stream_blocks,
        .stage_bytes = b->stage_bytes,
        .stage_blocks = b->stage_blocks,
    };
    /* the suffix maxima the device maps come from the page-aligned copy streaming keeps */
    if (b->stream_suffix) up.block_suffix_max = b->stream_suffix;
    for (uint32_t i = 0; b->stage_bytes && i < o.streams; i++) {
        b->slots[i].stage_payload_at = gpu_stage_payload_base(&up, i);
        b->slots[i].stage_block_at = (uint32_t)gpu_stage_block_base(&up, i);
    }
    const double upload_from = gpu_backend_now_ms();
    b->device = ops->open(o.device, &up, err, err_len);
    b->health.upload_ms = gpu_backend_now_ms() - upload_from;
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
            const uint32_t slots = gpu_report_slots(o.max_k, info->num_docs, true, gpu_backend_leads_ranges(index));
            uint64_t per_stream = (uint64_t)o.max_batch * o.max_candidates * 16 + (uint64_t)o.max_batch * 4096 +
                                  (uint64_t)o.max_batch * ranges * slots * 8;
            /* and streaming's staging regions, their block metadata and suffix maxima a quarter more at most for
             * any block size the layout gives (lay_out_streaming) */
            per_stream += o.stream_bytes + o.stream_bytes / 4;
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
        if (gpu_backend_leads_ranges(index)) b->health.static_score_bytes += num_blocks * sizeof(float);
        fixed += b->health.static_score_bytes;
    }
    if (budget < fixed + 4096) {
        snprintf(err, err_len,
                 "GPU backend: memory budget %llu bytes is below the %llu bytes of block metadata and static scores",
                 (unsigned long long)budget, (unsigned long long)fixed);
        isn_gpu_close(b);
        return NULL;
    }
    const uint32_t num_cpus = o.cpus ? o.num_cpus : 0;
    uint32_t threads = o.cpu_threads ? o.cpu_threads : num_cpus ? num_cpus : isn_cpus_available();
    b->crew = cpu_crew_new(index, threads, o.max_k, o.cpus, num_cpus);
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
    double t0 = gpu_backend_now_ms();
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
    fresh.queries_streamed = fresh.bytes_streamed = 0;
    memset(fresh.fallbacks, 0, sizeof fresh.fallbacks);
    fresh.ms_per_mposting_pruned = fresh.ms_per_mposting_exhaustive = 0.0;
    fresh.batches_pruned = fresh.batches_exhaustive = fresh.samples_pruned = fresh.samples_exhaustive = 0;
    fresh.seconds_submitting = fresh.seconds_device_wait = fresh.seconds_completing = 0.0;
    fresh.warmup_ms = gpu_backend_now_ms() - t0;
    fresh.ready = true;
    b->health = fresh;
    return 0;
}
