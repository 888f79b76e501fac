/* The first-stage backend serving batches: their assembly for the device, the device call, and the CPU
 * answering whatever the device does not (fallbacks, completions of resident prefixes), with the health it
 * reports. Opening and closing it (residency, the device layout, the warm-up): backend_open.c. The device
 * itself is behind gpu_device_ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend_internal.h"
#include "gpu/posting_decode.h"
#include "gpu/prefix_completion.h"

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

static void mark_unhealthy(isn_gpu_backend *b, const char *why) {
    b->health.device_errors++;
    if (!b->health.healthy) return;
    b->health.healthy = false;
    snprintf(b->health.reason, sizeof b->health.reason, "%s", why);
    fprintf(stderr, "isn gpu: device marked unhealthy, serving on the CPU: %s\n", why);
}

/* Whether the device may hold a term's list for a batch: some of it resident, or all of it streamed (an empty list
 * has nothing to stream). */
static bool may_reach(const isn_gpu_backend *b, uint32_t term) {
    if (b->term_blocks[term] > 0) return true;
    if (!b->stage_bytes) return false;
    isn_term_stats st;
    isn_index_term_stats(b->index, term, &st);
    return st.num_blocks > 0;
}

/* Bytes of a list in the host layout of every list (isn_gpu_backend.stream_payload): from its first block's offset to
 * its last block's end. */
static uint64_t streamed_list_bytes(const isn_gpu_backend *b, const isn_term_stats *st) {
    const isn_block_meta *first = &b->stream_blocks[st->first_block], *last = first + st->num_blocks - 1;
    const uint32_t n = gpu_block_count(st->df, st->num_blocks, st->num_blocks - 1);
    return gpu_layout_offset(last->offset) + gpu_layout_block_bytes(n, gpu_layout_doc_bits(last->offset)) -
           gpu_layout_offset(first->offset);
}

/* Streaming: every list of the query that the device does not hold whole goes into the batch's staging region
 * (stream_slot.stage), unless this batch streams it already; all of them, or (when they do not fit what is left of
 * the region) none: those this query added are taken back. Whether the device then holds all of the query's lists
 * whole. */
static bool stream_query_lists(isn_gpu_backend *b, stream_slot *s, const uint32_t *ids, const isn_query_term *terms,
                               uint32_t num_terms) {
    const uint32_t lists_before = s->batch.num_stage;
    const uint64_t used_before = s->stage_used;
    const uint32_t blocks_before = s->stage_blocks_used;
    for (uint32_t t = 0; t < num_terms; t++) {
        const uint32_t id = ids ? ids[t] : terms[t].term_id;
        isn_term_stats st;
        isn_index_term_stats(b->index, id, &st);
        if (b->term_blocks[id] == st.num_blocks || b->staged_term[id] == b->stage_epoch) continue;
        const uint64_t list_bytes = streamed_list_bytes(b, &st);
        if (s->stage_used + list_bytes + GPU_PAYLOAD_PAD > b->stage_bytes ||
            (uint64_t)s->stage_blocks_used + st.num_blocks > b->stage_blocks) {
            for (uint32_t i = lists_before; i < s->batch.num_stage; i++) /* none of this query's, then */
                b->staged_term[s->stage_term[i]] = 0;
            s->batch.num_stage = lists_before;
            s->stage_used = used_before;
            s->stage_blocks_used = blocks_before;
            return false;
        }
        gpu_stage_list *l = &s->stage[s->batch.num_stage];
        s->stage_term[s->batch.num_stage++] = id;
        *l = (gpu_stage_list){.host_block = st.first_block,
                              .host_offset = gpu_layout_offset(b->stream_blocks[st.first_block].offset),
                              .stage_offset = s->stage_payload_at + s->stage_used,
                              .bytes = list_bytes,
                              .stage_block = s->stage_block_at + s->stage_blocks_used,
                              .num_blocks = st.num_blocks};
        b->staged_term[id] = b->stage_epoch;
        b->staged_at[id] = l->stage_block;
        s->stage_used += list_bytes;
        s->stage_blocks_used += st.num_blocks;
    }
    return true;
}

/* The blocks of a term's list the device holds for this batch: streamed whole, or resident (all, a prefix). */
static void device_list(const isn_gpu_backend *b, uint32_t id, const isn_term_stats *st, uint32_t *first,
                        uint32_t *blocks) {
    if (b->stage_bytes && b->staged_term[id] == b->stage_epoch) {
        *first = b->staged_at[id];
        *blocks = st->num_blocks;
        return;
    }
    *first = (uint32_t)st->first_block;
    *blocks = b->term_blocks[id];
}

/* Why the device cannot answer this query tree exactly; NULL when it can (the tree then in *form). */
static const char *tree_refusal(const isn_gpu_backend *b, const isn_gpu_request *r, uint64_t num_docs,
                                gpu_tree_form *form) {
    int why = gpu_tree_read(b->index, r->query, r->mode, num_docs, form);
    if (why >= 0) return fallback_text[why];
    if (form->empty) return fallback_text[ISN_GPU_FALLBACK_EMPTY_QUERY];
    if (r->k > b->options.max_k) return fallback_text[ISN_GPU_FALLBACK_K_ABOVE_MAX];
    for (uint32_t t = 0; t < form->num_terms; t++) {
        if (!may_reach(b, form->term_ids[t])) return fallback_text[ISN_GPU_FALLBACK_NOT_RESIDENT];
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
        if (!may_reach(b, qt->term_id)) return fallback_text[ISN_GPU_FALLBACK_NOT_RESIDENT];
        if (!(isn_bm25_idf(num_docs, qt->df) > 0.0f)) return fallback_text[ISN_GPU_FALLBACK_NONPOSITIVE_WEIGHT];
    }
    return NULL;
}

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

/* Insertion sort by ascending max_score (queries have few terms; stable, so equal bounds keep the
 * query's order). */
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
static void complete_early(void *context, uint32_t i, cpu_hand *hand);

static int submit_batch(isn_gpu_backend *b, isn_gpu_request *requests, uint32_t n, char *err, size_t err_len);

int isn_gpu_submit(isn_gpu_backend *b, isn_gpu_request *requests, uint32_t n, char *err, size_t err_len) {
    const double began = gpu_backend_now_ms();
    int ticket = submit_batch(b, requests, n, err, err_len);
    if (b) b->health.seconds_submitting += (gpu_backend_now_ms() - began) / 1e3;
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
    s->submitted_at = gpu_backend_now_ms();
    s->pruned = choose_pruning(b, n);
    s->num_early_completions = 0;
    s->batch.num_stage = 0;
    s->stage_used = 0;
    s->stage_blocks_used = 0;
    s->queries_streamed = 0;
    if (b->stage_bytes && ++b->stage_epoch == 0) { /* a new number for this batch's streamed lists */
        memset(b->staged_term, 0, isn_index_get_info(b->index)->num_terms * sizeof *b->staged_term);
        b->stage_epoch = 1;
    }
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
            /* streaming: the lists not resident whole come with the batch, when they fit; a query with a list not
             * resident at all is the CPU's otherwise, one with prefixes is completed on the CPU as without streaming */
            if (b->stage_bytes) {
                const bool whole = stream_query_lists(b, s, tree ? tree->term_ids : NULL, r->query->terms, num_terms);
                bool absent = false, streamed = false;
                for (uint32_t t = 0; t < num_terms; t++) {
                    const uint32_t id = tree ? tree->term_ids[t] : r->query->terms[t].term_id;
                    absent = absent || b->term_blocks[id] == 0;
                    streamed = streamed || b->staged_term[id] == b->stage_epoch;
                }
                if (!whole && absent) {
                    r->fallback_reason = fallback_text[ISN_GPU_FALLBACK_NOT_RESIDENT];
                    continue;
                }
                s->queries_streamed += whole && streamed;
            }
            /* resident postings per term, and the coverage: below it every resident prefix is whole */
            uint32_t driver = 0, driver_df = UINT32_MAX, limit = index_docs, match_end = index_docs;
            for (uint32_t t = 0; t < num_terms; t++) {
                uint32_t id = tree ? tree->term_ids[t] : r->query->terms[t].term_id;
                isn_term_stats st;
                isn_index_term_stats(b->index, id, &st);
                uint32_t df = st.df, first, held;
                device_list(b, id, &st, &first, &held);
                if (st.num_blocks) { /* where the list ends, whole or not */
                    const uint32_t end = b->index_blocks[st.first_block + st.num_blocks - 1].last_doc + 1;
                    match_end = end < match_end ? end : match_end;
                }
                if (held < st.num_blocks) {
                    df = held * ISN_BLOCK_SIZE;
                    uint32_t covered = b->index_blocks[st.first_block + held - 1].last_doc + 1;
                    limit = covered < limit ? covered : limit;
                }
                if (df < driver_df) {
                    driver_df = df;
                    driver = t;
                }
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
            s->early_completion_of[nq] = 0;
            if (and_mode && s->coverage[nq] < index_docs && s->early_completions) {
                s->early_completions[s->num_early_completions++] = nq;
                s->early_completion_of[nq] = s->num_early_completions;
            }
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
                        q->ranges_zoned_out = kept < kept_ranges ? kept_ranges - kept : 0u;
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
                uint32_t first, resident;
                device_list(b, id, &st, &first, &resident);
                float weight = tree ? tree->weights[t]
                                    : isn_bm25_idf(num_docs, r->query->terms[t].df) * (float)r->query->terms[t].count;
                own_stats = own_stats && (tree || r->query->terms[t].df == st.df);
                s->terms[nterms + t] = (gpu_term){
                    .first_block = first,
                    .num_blocks = resident,
                    /* a cut list's resident blocks are all full */
                    .df = resident < st.num_blocks ? resident * ISN_BLOCK_SIZE : st.df,
                    .weight = weight,
                    /* a streamed list is whole: its bound is the list's */
                    .max_score = weight * (resident == b->term_blocks[id] ? b->term_max_part[id] : st.max_tf_part),
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
            /* a prior on an index in global order: a query may take leading ranges (below) */
            const bool may_lead = r->prior_weight != 0.0f && gpu_backend_leads_ranges(b->index) && !and_mode &&
                                  path == GPU_PATH_RANGES && !counts_matches &&
                                  b->options.pruning != ISN_GPU_PRUNE_NEVER && b->lead_ranges;
            uint32_t lead_top = 0;
            const uint32_t lead = may_lead ? gpu_lead_ranges_of(r->k, b->report_stride, &lead_top) : 0u;
            /* global order: from the first id whose tail bound is below the floor (at most the final k-th score) no
             * document is an answer, so the query's passes stop there. The device finds that stop itself after the
             * leading ranges (gpu_query.lead_stop, at the floor or the leading k-th best, whichever is higher), so
             * the host seeks it only where it would lie among them, after one bound says it does (the stop's
             * bisection, on this thread for every query of a batch, was most of a batch's submission) */
            s->ranges_bound_skipped[nq] = 0;
            if (q->floor_key && !counts_matches) {
                const uint64_t lead_end = (uint64_t)lead * GPU_RANGE_DOCS;
                const tail_term *tterms = s->tail_terms + q->term_begin;
                uint32_t stop = limit;
                if (!(lead && b->lead_stop && lead_end < limit))
                    stop = tail_stop(&b->tails, tterms, num_terms, 0, limit, q->floor_key, r->prior_weight);
                else if (gpu_bound_below(tail_bound(&b->tails, tterms, num_terms, (uint32_t)lead_end, r->prior_weight),
                                         q->floor_key))
                    stop = tail_stop(&b->tails, tterms, num_terms, 0, (uint32_t)lead_end, q->floor_key, r->prior_weight);
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
            if (may_lead) {
                const uint32_t top = lead_top > q->range_top ? lead_top : q->range_top;
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
                           .hits = s->hits, .stage = s->stage, .num_stage = s->batch.num_stage};
    s->bytes_staged = nq * sizeof(gpu_query) + nterms * sizeof(gpu_term) + nfilters * sizeof(gpu_filter) +
                      nvalues * sizeof(uint32_t);
    start_early_answers(b, s);
    cpu_crew_start(b->crew, &s->completion_run, s->num_early_completions, complete_early, s);
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

/* A conjunctive query's CPU part (stream_slot.early_completions), from its submission on: the best k of its
 * matches from the coverage on, into its place in suffix_hits. */
static void complete_early(void *context, uint32_t i, cpu_hand *hand) {
    stream_slot *s = context;
    const uint32_t q = s->early_completions[i];
    const isn_gpu_request *r = &s->requests[s->device_request[q]];
    isn_search_options so = cpu_options_of(r);
    so.first_doc = s->coverage[q];
    isn_search_stats stats;
    char why[256];
    s->suffix_count[i] = 0;
    s->suffix_postings[i] = 0;
    s->suffix_failed[i] =
        isn_search(hand->searcher, r->query, &so, s->suffix_hits + (size_t)i * s->suffix_stride, &s->suffix_count[i],
                   &stats, why, sizeof why) != 0;
    if (!s->suffix_failed[i]) s->suffix_postings[i] = stats.postings_scored;
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
    const double completing_from = gpu_backend_now_ms();
    isn_gpu_batch_stats st;
    memset(&st, 0, sizeof st);
    bool device_ok = s->launched;
    if (s->launched) {
        gpu_batch_timing timing;
        char why[256];
        const double waited_from = gpu_backend_now_ms();
        const int finished = b->ops->finish(b->device, (uint32_t)ticket, &s->batch, &timing, why, sizeof why);
        st.ms_device_wait = gpu_backend_now_ms() - waited_from;
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
    /* the conjunctive completions started at submission (stream_slot.early_completions) */
    cpu_crew_finish(b->crew, &s->completion_run);
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
        st.ranked_steps += res->ranked_steps;
        if (res->accumulator < ISN_GPU_ACC_KINDS) st.accumulator_queries[res->accumulator]++;
        if (res->candidates > s->queries[q].cand_cap) {
            r->fallback_reason = fallback_text[ISN_GPU_FALLBACK_CANDIDATE_OVERFLOW];
            continue;
        }
        memcpy(r->hits, s->batch.hits + s->queries[q].hit_offset, res->num_hits * sizeof(isn_hit));
        r->num_hits = res->num_hits;
        st.ranges_bound_skipped += s->ranges_bound_skipped[q];
        bool settled = s->ranges_bound_skipped[q] > 0 || res->ranges_stopped > 0; /* the host's stop or the device's */
        if (s->early_completion_of[q]) { /* completed by the crew since its submission: merged here */
            const uint32_t i = s->early_completion_of[q] - 1;
            if (s->suffix_failed[i]) { /* out of memory for the query: the whole query goes to the CPU pass */
                r->fallback_reason = fallback_text[ISN_GPU_FALLBACK_COMPLETION_ERROR];
                continue;
            }
            r->num_hits = prefix_merge(r->hits, r->num_hits, s->suffix_hits + (size_t)i * s->suffix_stride,
                                       s->suffix_count[i], r->k, s->merge_scratch);
            st.prefix_cpu_postings += s->suffix_postings[i];
            b->health.queries_prefix++;
            st.prefix_queries++;
            st.prefix_started_early++;
        } else if (s->coverage[q] < isn_index_get_info(b->index)->num_docs) {
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
    st.queries_streamed = device_ok ? s->queries_streamed : 0;
    st.lists_streamed = s->batch.num_stage;
    st.bytes_streamed = s->stage_used;
    b->health.queries_streamed += st.queries_streamed;
    b->health.bytes_streamed += st.bytes_streamed;
    const double now = gpu_backend_now_ms();
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
                     "isn_gpu_queries_streamed_total{%s} %llu\n"
                     "isn_gpu_bytes_streamed_total{%s} %llu\n"
                     "isn_gpu_stream_bytes{%s} %llu\n"
                     "isn_gpu_device_errors_total{%s} %llu\n"
                     "isn_gpu_bytes_transferred_total{%s} %llu\n",
                     l, h->ready, l, h->healthy, l, h->warmup_ms, l, h->layout_ms, l, h->upload_ms, l,
                     (unsigned long long)h->index_bytes, l,
                     (unsigned long long)h->bytes_resident, l, h->terms_total, l, h->terms_resident, l, h->terms_prefix, l,
                     (unsigned long long)h->batches, l, (unsigned long long)h->queries_device, l,
                     (unsigned long long)h->queries_cpu, l, (unsigned long long)h->queries_not_resident, l,
                     (unsigned long long)h->queries_prefix, l, (unsigned long long)h->completions_avoided, l,
                     (unsigned long long)h->queries_streamed, l, (unsigned long long)h->bytes_streamed, l,
                     (unsigned long long)h->stream_bytes, l, (unsigned long long)h->device_errors, l,
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
