/* Admission of the pruned-prefix cache by visit frequency (visit_admission.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/posting_decode.h"
#include "gpu/visit_admission.h"

typedef struct {
    const isn_index *index;
    const isn_gpu_options *options;
    const tail_bounds *tails;
    uint32_t k;
    uint32_t *settled_at; /* per training query: the document from which nothing can enter its top k */
    atomic_bool failed;
    char why[256]; /* the first failed search's error (written by the query that set failed first) */
} replay;

/* The training query's exact k-th score on the CPU, and where the tail bound settles it. */
static void replay_query(void *context, uint32_t i, cpu_hand *hand) {
    replay *rp = context;
    const isn_query *q = &rp->options->training_queries[i];
    const uint32_t num_docs = isn_index_get_info(rp->index)->num_docs;
    rp->settled_at[i] = num_docs;
    isn_search_options so;
    isn_search_options_default(&so);
    so.mode = rp->options->training_mode;
    so.k = rp->k;
    so.prior_weight = rp->options->training_prior_weight;
    uint32_t n = 0;
    char why[256];
    if (isn_search(hand->searcher, q, &so, hand->suffix_hits, &n, NULL, why, sizeof why) != 0) {
        if (!atomic_exchange(&rp->failed, true)) snprintf(rp->why, sizeof rp->why, "%s", why);
        return;
    }
    if (n < rp->k || !rp->tails->doc_bounds || q->num_terms > GPU_MAX_OR_TERMS) return;
    tail_term terms[GPU_MAX_OR_TERMS];
    for (uint32_t t = 0; t < q->num_terms; t++) {
        isn_term_stats st;
        isn_index_term_stats(rp->index, q->terms[t].term_id, &st);
        /* the weight as the device's (backend.c): the index's own statistics */
        terms[t] = (tail_term){(uint32_t)st.first_block, st.num_blocks,
                               isn_bm25_idf(num_docs, q->terms[t].df) * (float)q->terms[t].count};
    }
    rp->settled_at[i] = tail_stop(rp->tails, terms, q->num_terms, 0, num_docs,
                                  gpu_float_key(hand->suffix_hits[rp->k - 1].score), rp->options->training_prior_weight);
}

/* A list's next block as a candidate: its visits per byte. */
typedef struct {
    double value;
    uint32_t term;
} next_block;

static bool heap_above(const next_block *a, const next_block *b) {
    return a->value != b->value ? a->value > b->value : a->term < b->term;
}

static void heap_push(next_block *heap, uint32_t *n, next_block x) {
    uint32_t i = (*n)++;
    while (i > 0 && heap_above(&x, &heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = x;
}

static next_block heap_pop(next_block *heap, uint32_t *n) {
    next_block top = heap[0], x = heap[--(*n)];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_above(&heap[c + 1], &heap[c])) c++;
        if (!heap_above(&heap[c], &x)) break;
        heap[i] = heap[c];
        i = c;
    }
    if (*n) heap[i] = x;
    return top;
}

/* Bytes of a list's first n blocks: cum[first_block + j] holds those of blocks 0..j. */
static uint64_t prefix_bytes(const uint64_t *cum, uint64_t first_block, uint32_t n) {
    return n ? cum[first_block + n - 1] : 0;
}

/* The leading blocks of a list that a query settled at doc `settled_at` (> 0) needs: those below it. */
static uint32_t blocks_needed(const isn_block_meta *blocks, const isn_term_stats *st, uint32_t settled_at) {
    uint32_t need = gpu_lower_block(blocks + st->first_block, st->num_blocks, settled_at - 1) + 1;
    return need > st->num_blocks ? st->num_blocks : need;
}

/* The training queries whole, cheapest first: each round admits the blocks that the query needing the fewest
 * more bytes still lacks (its lists' blocks below where it is settled), while the cheapest fits. A query is
 * worth its blocks only once all are in (until then it still goes to the CPU), and queries sharing lists
 * grow cheaper as others go in. */
static void admit_queries(const isn_index *ix, const isn_gpu_options *o, const uint32_t *settled_at,
                          const isn_block_meta *blocks, const uint64_t *cum, uint64_t budget, uint32_t *term_blocks,
                          uint64_t *used, uint32_t *pending) {
    uint32_t np = 0;
    for (uint32_t i = 0; i < o->num_training_queries; i++)
        if (settled_at[i] > 0) pending[np++] = i;
    while (np) {
        uint64_t best_cost = UINT64_MAX;
        uint32_t best = 0;
        for (uint32_t p = 0; p < np; p++) {
            const isn_query *q = &o->training_queries[pending[p]];
            uint64_t cost = 0;
            for (uint32_t t = 0; t < q->num_terms; t++) {
                isn_term_stats st;
                isn_index_term_stats(ix, q->terms[t].term_id, &st);
                if (st.num_blocks == 0) continue;
                const uint32_t need = blocks_needed(blocks, &st, settled_at[pending[p]]);
                const uint32_t have = term_blocks[q->terms[t].term_id];
                if (need > have) cost += prefix_bytes(cum, st.first_block, need) - prefix_bytes(cum, st.first_block, have);
            }
            if (cost < best_cost) best_cost = cost, best = p;
        }
        if (*used + best_cost > budget) return; /* every other query costs at least as much */
        const isn_query *q = &o->training_queries[pending[best]];
        for (uint32_t t = 0; t < q->num_terms; t++) {
            isn_term_stats st;
            isn_index_term_stats(ix, q->terms[t].term_id, &st);
            if (st.num_blocks == 0) continue;
            const uint32_t need = blocks_needed(blocks, &st, settled_at[pending[best]]);
            if (need > term_blocks[q->terms[t].term_id]) term_blocks[q->terms[t].term_id] = need;
        }
        *used += best_cost;
        pending[best] = pending[--np];
    }
}

/* A list's best extension from its resident depth: to the depth n (one a training query needs) with the most
 * (query, list) needs completed per byte, (visits[depth] - visits[n]) / (bytes of the blocks between), among
 * those within `room` bytes; visits[j] counts the needs deeper than j. false when none fits. */
static bool best_extension(const isn_term_stats *st, const uint32_t *visits, const uint64_t *cum, uint32_t depth,
                           uint64_t room, uint32_t *to, double *value) {
    const uint64_t first = st->first_block, base = prefix_bytes(cum, first, depth);
    bool found = false;
    for (uint32_t n = depth + 1; n <= st->num_blocks; n++) {
        const uint32_t deeper = n < st->num_blocks ? visits[first + n] : 0;
        if (visits[first + n - 1] == deeper) continue; /* no query needs exactly n blocks */
        const uint64_t bytes = prefix_bytes(cum, first, n) - base;
        if (bytes > room) break;
        const double v = (double)(visits[first + depth] - deeper) / (double)(bytes ? bytes : 1);
        if (!found || v > *value) *value = v, *to = n, found = true;
    }
    return found;
}

/* Lists grown by their best extensions (best_extension), best first, while any fits: per list what the
 * whole-list cache does per list (queries naming it per byte of it) when no query is settled early, and
 * the leading blocks that settle queries when some are. */
static void admit_prefixes(const isn_index *ix, uint32_t nt, const uint32_t *visits, const uint64_t *cum, uint64_t budget,
                           uint32_t *term_blocks, uint64_t *used, next_block *heap, uint32_t *target) {
    uint32_t heap_n = 0;
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        double value;
        if (term_blocks[t] < st.num_blocks && visits[st.first_block + term_blocks[t]] &&
            best_extension(&st, visits, cum, term_blocks[t], budget - *used, &target[t], &value))
            heap_push(heap, &heap_n, (next_block){value, t});
    }
    while (heap_n) {
        const uint32_t t = heap_pop(heap, &heap_n).term;
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        const uint64_t bytes =
            prefix_bytes(cum, st.first_block, target[t]) - prefix_bytes(cum, st.first_block, term_blocks[t]);
        double value;
        if (*used + bytes <= budget) {
            *used += bytes;
            term_blocks[t] = target[t];
        }
        /* its next extension, or a shorter one that still fits */
        if (term_blocks[t] < st.num_blocks && visits[st.first_block + term_blocks[t]] &&
            best_extension(&st, visits, cum, term_blocks[t], budget - *used, &target[t], &value))
            heap_push(heap, &heap_n, (next_block){value, t});
    }
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* What a block's expected visits are counted from. */
typedef struct {
    const isn_block_meta *blocks;
    const uint32_t *visits; /* per block: the training queries visiting it */
    const uint8_t *widths;
    const double *rates;    /* per list: its expected namings (naming_rates.h) */
    const uint32_t *settled_sorted; /* the training queries' settle documents, ascending */
    uint32_t num_queries;
} block_visits;

/* The share of the training queries that a block starting at `doc` would be visited by: those settled after it. */
static double unsettled_share(const block_visits *bv, uint32_t doc) {
    uint32_t lo = 0, hi = bv->num_queries; /* the first settled beyond doc */
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (bv->settled_sorted[mid] > doc) hi = mid;
        else lo = mid + 1;
    }
    return bv->num_queries ? (double)(bv->num_queries - lo) / bv->num_queries : 0.0;
}

/* Block j of list t as the next candidate: its visits per byte. A list the log names: the training queries that
 * visit the block; one it does not: its expected namings times the share of queries that a block starting there
 * would be visited by. false when none is expected. */
static bool next_block_value(const block_visits *bv, uint32_t t, const isn_term_stats *st, uint32_t j, double *value) {
    if (j >= st->num_blocks) return false;
    double visits = bv->visits[st->first_block + j];
    if (bv->visits[st->first_block] == 0 && bv->rates)
        visits = bv->rates[t] * unsettled_share(bv, j ? bv->blocks[st->first_block + j - 1].last_doc + 1 : 0);
    if (!(visits > 0.0)) return false;
    *value = visits / (double)gpu_layout_block_bytes(gpu_block_count(st->df, st->num_blocks, j),
                                                     bv->widths[st->first_block + j]);
    return true;
}

int visit_admission(const isn_index *ix, const isn_gpu_options *o, const tail_bounds *tails, cpu_crew *crew,
                    const uint8_t *widths, const double *rates, uint64_t budget, uint32_t *term_blocks, uint64_t *used,
                    char *err, size_t err_len) {
    const isn_index_info *info = isn_index_get_info(ix);
    uint64_t num_blocks;
    const isn_block_meta *blocks = isn_index_block_metas(ix, &num_blocks);
    const uint32_t nq = o->num_training_queries, nt = info->num_terms;
    int rc = -1;
    replay rp = {ix, o, tails, o->training_k ? o->training_k : 10, NULL, false, ""};
    if (rp.k > o->max_k) rp.k = o->max_k;
    rp.settled_at = malloc((nq ? nq : 1) * sizeof *rp.settled_at);
    /* visits[first_block + j]: the training queries that visit block j of a list */
    uint32_t *visits = calloc(num_blocks ? num_blocks : 1, sizeof *visits);
    next_block *heap = malloc((nt ? nt : 1) * sizeof *heap);
    const bool by_queries = o->admission == ISN_GPU_ADMIT_QUERIES, by_prefixes = o->admission == ISN_GPU_ADMIT_PREFIXES;
    uint64_t *cum = by_queries || by_prefixes ? calloc(num_blocks ? num_blocks : 1, sizeof *cum) : NULL;
    uint32_t *pending = by_queries ? malloc((nq ? nq : 1) * sizeof *pending) : NULL;
    uint32_t *target = by_prefixes ? malloc((nt ? nt : 1) * sizeof *target) : NULL;
    if (!rp.settled_at || !visits || !heap || ((by_queries || by_prefixes) && !cum) || (by_queries && !pending) ||
        (by_prefixes && !target)) {
        snprintf(err, err_len, "GPU backend: out of memory replaying %u training queries", nq);
        goto fail;
    }
    cpu_crew_run(crew, nq, replay_query, &rp);
    if (rp.failed) {
        snprintf(err, err_len, "GPU backend: a training query's search failed: %s", rp.why);
        goto fail;
    }
    /* a query visits each of its lists' blocks that start below where it is settled: count it at the last
     * of them, then sum from each list's end */
    for (uint32_t i = 0; i < nq; i++) {
        const isn_query *q = &o->training_queries[i];
        if (rp.settled_at[i] == 0) continue;
        for (uint32_t t = 0; t < q->num_terms; t++) {
            isn_term_stats st;
            isn_index_term_stats(ix, q->terms[t].term_id, &st);
            if (st.num_blocks == 0) continue;
            uint32_t last = gpu_lower_block(blocks + st.first_block, st.num_blocks, rp.settled_at[i] - 1);
            if (last >= st.num_blocks) last = st.num_blocks - 1;
            visits[st.first_block + last]++;
        }
    }
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        for (uint32_t j = st.num_blocks; j-- > 1;) visits[st.first_block + j - 1] += visits[st.first_block + j];
        /* by queries: the byte sums of the prefixes of the lists the log names */
        if (!cum || st.num_blocks == 0 || visits[st.first_block] == 0) continue;
        uint64_t sum = 0;
        for (uint32_t j = 0; j < st.num_blocks; j++)
            cum[st.first_block + j] = sum +=
                gpu_layout_block_bytes(gpu_block_count(st.df, st.num_blocks, j), widths[st.first_block + j]);
    }
    if (by_queries) admit_queries(ix, o, rp.settled_at, blocks, cum, budget, term_blocks, used, pending);
    if (by_prefixes) admit_prefixes(ix, nt, visits, cum, budget, term_blocks, used, heap, target);
    /* then blocks by visits per byte, the lists the log never names by their expected visits */
    qsort(rp.settled_at, nq, sizeof *rp.settled_at, cmp_u32);
    const block_visits bv = {blocks, visits, widths, rates, rp.settled_at, nq};
    uint32_t heap_n = 0;
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        double value;
        if (next_block_value(&bv, t, &st, term_blocks[t], &value)) heap_push(heap, &heap_n, (next_block){value, t});
    }
    /* the most visited bytes first; a list whose next block does not fit stops growing */
    while (heap_n) {
        const next_block top = heap_pop(heap, &heap_n);
        const uint32_t t = top.term, j = term_blocks[t];
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        const uint64_t bytes = gpu_layout_block_bytes(gpu_block_count(st.df, st.num_blocks, j), widths[st.first_block + j]);
        if (*used + bytes > budget) continue;
        *used += bytes;
        term_blocks[t] = j + 1;
        double value;
        if (next_block_value(&bv, t, &st, j + 1, &value)) heap_push(heap, &heap_n, (next_block){value, t});
    }
    rc = 0;
fail:
    free(rp.settled_at);
    free(visits);
    free(heap);
    free(cum);
    free(pending);
    free(target);
    return rc;
}
