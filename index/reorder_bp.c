/* Document reordering by recursive graph bisection (Dhulipala et al., KDD 2016; the BP of Lucene's
 * BPIndexReorderer and PISA): documents that share terms get close ids, so the gaps in the posting
 * lists shrink (smaller index) and each block's documents are alike (tighter block maxima, more
 * skipping).
 *
 * The documents are split in two halves; documents move between the halves while that lowers the
 * estimated cost of the gaps, sum over terms of d * log2(n / (d + 1)) per half (d: the term's
 * documents in that half, n: the half's size); then each half is split the same way, down to small
 * parts. The halves of a split are independent, so they run on separate threads. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/builder.h"

/* Parts of at most this many documents are left as they are. */
#define BP_MIN_PART 32
/* Move rounds per split (Lucene's maxIters); a split stops earlier once nothing moves. */
#define BP_MAX_ITERS 20
/* Splits whose halves run on threads of their own, down to this depth. */
#define BP_MAX_THREAD_DEPTH 6

typedef struct {
    const uint64_t *offsets; /* [num_docs + 1] into terms: each document's terms (dense ids) */
    const uint32_t *terms;
    const float *log2_of; /* log2_of[i] = log2(i), i <= num_docs + 1 */
    uint32_t num_terms;
    uint32_t threads; /* split depth to thread below: 2^depth <= threads */
    uint32_t thread_depth;
} bp_problem;

/* Per-thread scratch, sized for every term. */
typedef struct {
    uint32_t *deg_a, *deg_b; /* the term's documents in each half */
    float *gain_a, *gain_b;  /* gain of moving a document holding the term out of A / out of B */
    uint32_t *stamp;         /* gains computed for this round when == round */
    uint32_t round;
    struct doc_gain *gains;  /* per document of the split */
    uint32_t gains_cap;
} bp_scratch;

typedef struct doc_gain {
    float gain;
    uint32_t doc;
} doc_gain;

static int scratch_init(bp_scratch *s, uint32_t num_terms) {
    memset(s, 0, sizeof *s);
    size_t m = num_terms ? num_terms : 1;
    s->deg_a = calloc(m, sizeof *s->deg_a);
    s->deg_b = calloc(m, sizeof *s->deg_b);
    s->gain_a = calloc(m, sizeof *s->gain_a);
    s->gain_b = calloc(m, sizeof *s->gain_b);
    s->stamp = calloc(m, sizeof *s->stamp);
    return s->deg_a && s->deg_b && s->gain_a && s->gain_b && s->stamp ? 0 : -1;
}

static void scratch_free(bp_scratch *s) {
    free(s->deg_a);
    free(s->deg_b);
    free(s->gain_a);
    free(s->gain_b);
    free(s->stamp);
    free(s->gains);
}

/* d * log2(n / (d + 1)): the estimated bits of a term's gaps in a part of n documents. */
static inline float gap_cost(const float *log2_of, uint32_t d, uint32_t n) {
    return (float)d * (log2_of[n] - log2_of[d + 1]);
}

static int compare_gain_descending(const void *a, const void *b) {
    const doc_gain *x = a, *y = b;
    if (x->gain != y->gain) return x->gain > y->gain ? -1 : 1;
    return (x->doc > y->doc) - (x->doc < y->doc);
}

static void add_degrees(const bp_problem *p, uint32_t *deg, const uint32_t *docs, uint32_t n, int delta) {
    for (uint32_t i = 0; i < n; i++) {
        uint32_t d = docs[i];
        for (uint64_t j = p->offsets[d]; j < p->offsets[d + 1]; j++) deg[p->terms[j]] += (uint32_t)delta;
    }
}

/* Gains of the documents of one half, best first: the sum over their terms of the term's move gain.
 * Degrees come from `deg` (the split's); term gains are cached in `s` (its own, per thread). */
static void half_gains(const bp_problem *p, const bp_scratch *deg, bp_scratch *s, const uint32_t *docs, uint32_t n,
                       uint32_t n_from, uint32_t n_to, bool from_a, doc_gain *out) {
    for (uint32_t i = 0; i < n; i++) {
        uint32_t d = docs[i];
        float g = 0.0f;
        for (uint64_t j = p->offsets[d]; j < p->offsets[d + 1]; j++) {
            uint32_t t = p->terms[j];
            if (s->stamp[t] != s->round) {
                s->stamp[t] = s->round;
                uint32_t da = deg->deg_a[t], db = deg->deg_b[t];
                uint32_t na = from_a ? n_from : n_to, nb = from_a ? n_to : n_from;
                float before = gap_cost(p->log2_of, da, na) + gap_cost(p->log2_of, db, nb);
                s->gain_a[t] = da ? before - gap_cost(p->log2_of, da - 1, na) - gap_cost(p->log2_of, db + 1, nb) : 0.0f;
                s->gain_b[t] = db ? before - gap_cost(p->log2_of, da + 1, na) - gap_cost(p->log2_of, db - 1, nb) : 0.0f;
            }
            g += from_a ? s->gain_a[t] : s->gain_b[t];
        }
        out[i] = (doc_gain){g, d};
    }
    qsort(out, n, sizeof *out, compare_gain_descending);
}

/* Half A's gains on a helper thread while the caller does half B's (the largest splits). */
typedef struct {
    const bp_problem *p;
    const bp_scratch *deg;
    bp_scratch *s;
    const uint32_t *docs;
    uint32_t n, n_from, n_to;
    doc_gain *out;
} gains_task;

static void *gains_thread(void *arg) {
    gains_task *g = arg;
    half_gains(g->p, g->deg, g->s, g->docs, g->n, g->n_from, g->n_to, true, g->out);
    return NULL;
}

static void next_round(const bp_problem *p, bp_scratch *s) {
    if (++s->round == 0) { /* the stamps wrapped: forget them all */
        memset(s->stamp, 0, (size_t)p->num_terms * sizeof *s->stamp);
        s->round = 1;
    }
}

static void bisect(const bp_problem *p, bp_scratch *s, uint32_t *docs, uint32_t n, uint32_t depth);

typedef struct {
    const bp_problem *p;
    uint32_t *docs;
    uint32_t n, depth;
} bp_task;

/* A half on a thread of its own. Out of memory, the half keeps its order: a worse order, not an error. */
static void *bisect_thread(void *arg) {
    bp_task *task = arg;
    bp_scratch s;
    if (scratch_init(&s, task->p->num_terms) == 0)
        bisect(task->p, &s, task->docs, task->n, task->depth);
    scratch_free(&s);
    return NULL;
}

static void bisect(const bp_problem *p, bp_scratch *s, uint32_t *docs, uint32_t n, uint32_t depth) {
    if (n <= BP_MIN_PART) return;
    if (s->gains_cap < n) {
        doc_gain *g = realloc(s->gains, (size_t)n * sizeof *g);
        if (!g) return; /* out of memory: this part keeps its order */
        s->gains = g;
        s->gains_cap = n;
    }
    uint32_t na = n / 2, nb = n - na;
    uint32_t *a = docs, *b = docs + na;
    add_degrees(p, s->deg_a, a, na, 1);
    add_degrees(p, s->deg_b, b, nb, 1);
    /* The splits above the threaded ones have threads to spare: the two halves' gains in parallel. */
    bp_scratch helper;
    memset(&helper, 0, sizeof helper);
    bool parallel = depth < p->thread_depth && scratch_init(&helper, p->num_terms) == 0;
    if (depth < p->thread_depth && !parallel) scratch_free(&helper);
    for (uint32_t iter = 0; iter < BP_MAX_ITERS; iter++) {
        next_round(p, s);
        doc_gain *ga = s->gains, *gb = s->gains + na;
        pthread_t thread;
        gains_task task = {p, s, &helper, a, na, na, nb, ga};
        bool threaded = parallel && (next_round(p, &helper), pthread_create(&thread, NULL, gains_thread, &task) == 0);
        if (!threaded) half_gains(p, s, s, a, na, na, nb, true, ga);
        half_gains(p, s, s, b, nb, nb, na, false, gb);
        if (threaded) pthread_join(thread, NULL);
        uint32_t swaps = 0;
        for (uint32_t i = 0; i < na && i < nb && ga[i].gain + gb[i].gain > 0.0f; i++) {
            uint32_t da = ga[i].doc, db = gb[i].doc;
            for (uint64_t j = p->offsets[da]; j < p->offsets[da + 1]; j++) {
                s->deg_a[p->terms[j]]--;
                s->deg_b[p->terms[j]]++;
            }
            for (uint64_t j = p->offsets[db]; j < p->offsets[db + 1]; j++) {
                s->deg_b[p->terms[j]]--;
                s->deg_a[p->terms[j]]++;
            }
            ga[i].doc = db;
            gb[i].doc = da;
            swaps++;
        }
        for (uint32_t i = 0; i < na; i++) a[i] = ga[i].doc;
        for (uint32_t i = 0; i < nb; i++) b[i] = gb[i].doc;
        if (swaps == 0) break;
    }
    add_degrees(p, s->deg_a, a, na, -1);
    add_degrees(p, s->deg_b, b, nb, -1);
    if (parallel) scratch_free(&helper);

    if (depth < p->thread_depth) {
        bp_task task = {p, a, na, depth + 1};
        pthread_t thread;
        if (pthread_create(&thread, NULL, bisect_thread, &task) == 0) {
            bisect(p, s, b, nb, depth + 1);
            pthread_join(thread, NULL);
            return;
        }
    }
    bisect(p, s, a, na, depth + 1);
    bisect(p, s, b, nb, depth + 1);
}

uint32_t *isn_bp_order_forward(uint32_t nd, const uint64_t *offsets, const uint32_t *terms, uint32_t num_dense,
                               uint32_t threads) {
    if (threads == 0) threads = isn_cpus_available();
    float *log2_of = malloc(((size_t)nd + 2) * sizeof *log2_of);
    uint32_t *docs = malloc((size_t)(nd ? nd : 1) * sizeof *docs);
    uint32_t *new_of_old = malloc((size_t)(nd ? nd : 1) * sizeof *new_of_old);
    bp_scratch s;
    if (!log2_of || !docs || !new_of_old || scratch_init(&s, num_dense) != 0) {
        if (log2_of && docs && new_of_old) scratch_free(&s);
        free(log2_of);
        free(docs);
        free(new_of_old);
        return NULL;
    }
    log2_of[0] = 0.0f;
    for (size_t i = 1; i < (size_t)nd + 2; i++) log2_of[i] = (float)log2((double)i);
    for (uint32_t d = 0; d < nd; d++) docs[d] = d;
    uint32_t thread_depth = 0;
    while (thread_depth < BP_MAX_THREAD_DEPTH && (2u << thread_depth) <= threads) thread_depth++;
    bp_problem p = {offsets, terms, log2_of, num_dense, threads, thread_depth};
    bisect(&p, &s, docs, nd, 0);
    scratch_free(&s);
    for (uint32_t i = 0; i < nd; i++) new_of_old[docs[i]] = i;
    free(log2_of);
    free(docs);
    return new_of_old;
}

uint32_t *isn_bp_order(const isn_builder *b, uint32_t threads) {
    uint32_t nd = b->num_docs, nt = isn_strtab_count(&b->terms);
    uint32_t *dense = malloc((size_t)(nt ? nt : 1) * sizeof *dense);
    uint64_t *offsets = calloc((size_t)nd + 1, sizeof *offsets);
    uint32_t *terms = NULL, *new_of_old = NULL;
    if (!dense || !offsets) goto done;

    /* The forward index over the terms worth it, with dense ids. */
    uint32_t num_dense = 0;
    for (uint32_t t = 0; t < nt; t++) {
        const isn_build_list *l = &b->lists[t];
        dense[t] = l->num_postings >= ISN_BP_MIN_DF ? num_dense++ : UINT32_MAX;
        if (dense[t] == UINT32_MAX) continue;
        for (uint32_t i = 0; i < l->num_postings; i++) offsets[l->postings[2 * i] + 1]++;
    }
    for (uint32_t d = 0; d < nd; d++) offsets[d + 1] += offsets[d];
    terms = malloc((size_t)(offsets[nd] ? offsets[nd] : 1) * sizeof *terms);
    uint64_t *fill = malloc(((size_t)nd + 1) * sizeof *fill);
    if (!terms || !fill) {
        free(fill);
        goto done;
    }
    memcpy(fill, offsets, ((size_t)nd + 1) * sizeof *fill);
    for (uint32_t t = 0; t < nt; t++) {
        if (dense[t] == UINT32_MAX) continue;
        const isn_build_list *l = &b->lists[t];
        for (uint32_t i = 0; i < l->num_postings; i++) terms[fill[l->postings[2 * i]]++] = dense[t];
    }
    free(fill);
    new_of_old = isn_bp_order_forward(nd, offsets, terms, num_dense, threads);
done:
    free(dense);
    free(offsets);
    free(terms);
    return new_of_old;
}
