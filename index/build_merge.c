/* The merge of the bounded-memory build: a partition's runs and document table into its index file, with
 * the bytes the in-memory builder (builder_write.c) writes for the same documents. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/build_runs.h"
#include "index/file_writer.h"
#include "index/format.h"
#include "index/list_encoder.h"
#include "index/section_buf.h"

#define MERGE_MIN_BUFFER (64u << 10)
#define MERGE_MAX_BUFFER (1u << 20)

static int term_cmp(const char *a, size_t la, const char *b, size_t lb) {
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* The merge threads' hold on memory for long lists: a term of many postings is gathered whole (and, in a
 * permuted order, sorted), so a thread takes what it needs from this allowance first and waits while
 * others hold it; a list larger than the allowance goes alone. */
#define GATED_DF (256u << 10)

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t freed;
    uint64_t in_use, allowance;
} list_gate;

static void gate_acquire(list_gate *g, uint64_t bytes) {
    pthread_mutex_lock(&g->lock);
    while (g->in_use > 0 && g->in_use + bytes > g->allowance) pthread_cond_wait(&g->freed, &g->lock);
    g->in_use += bytes;
    pthread_mutex_unlock(&g->lock);
}

static void gate_release(list_gate *g, uint64_t bytes) {
    if (!bytes) return;
    pthread_mutex_lock(&g->lock);
    g->in_use -= bytes;
    pthread_cond_broadcast(&g->freed);
    pthread_mutex_unlock(&g->lock);
}

/* A range of terms [lo, hi) (NULL: unbounded) merged by one thread. */
typedef struct {
    const char *lo, *hi;
    size_t lo_len, hi_len;
} term_range;

typedef struct {
    const merge_job *job;
    term_range range;
    run_cursor *cursors;
    uint32_t num_cursors;
    run_cursor **heap; /* cursors not done, least (term, run) first */
    uint32_t heap_len;
    /* the current term's postings gathered from its runs */
    uint32_t *triples, *merged, *positions;
    uint64_t triples_len, triples_cap, merged_cap, positions_len, positions_cap;
    uint64_t *fragment_start; /* [num_cursors + 1] */
    uint64_t *fragment_head;  /* [num_cursors] */
    list_gate *gate;          /* NULL: no bound */
    uint64_t held;            /* bytes held from the gate for the current term */
    char *err;
    size_t err_len;
} merger;

static int cursor_less(const run_cursor *a, const run_cursor *b) {
    int c = memcmp(a->term, b->term, a->term_len < b->term_len ? a->term_len : b->term_len);
    if (c) return c < 0;
    if (a->term_len != b->term_len) return a->term_len < b->term_len;
    return a->index < b->index;
}

static void heap_down(merger *m, uint32_t i) {
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, least = i;
        if (l < m->heap_len && cursor_less(m->heap[l], m->heap[least])) least = l;
        if (r < m->heap_len && cursor_less(m->heap[r], m->heap[least])) least = r;
        if (least == i) return;
        run_cursor *t = m->heap[i];
        m->heap[i] = m->heap[least];
        m->heap[least] = t;
        i = least;
    }
}

static int run_error(merger *m, const run_cursor *c) {
    const run_info *run = &m->job->part->runs[c->index];
    if (c->error == ENOMEM) return isn_error(m->err, m->err_len, "out of memory while merging the runs");
    if (c->error == EINVAL) return isn_error(m->err, m->err_len, "run file %s is malformed", run->path);
    return isn_error(m->err, m->err_len, "cannot read run file %s: %s", run->path, strerror(c->error));
}

/* True when the cursor is past the merger's range (or done). */
static bool past_range(const merger *m, const run_cursor *c) {
    return c->done || (m->range.hi && term_cmp(c->term, c->term_len, m->range.hi, m->range.hi_len) >= 0);
}

/* Where in run r to start reading for terms >= lo: the last sampled term below lo. */
static uint64_t range_start(const run_info *run, const term_range *range) {
    if (!range->lo) return 0;
    uint32_t a = 0, b = run->num_samples; /* the first sample >= lo */
    while (a < b) {
        uint32_t mid = (a + b) / 2;
        const char *t = run->sample_bytes + run->sample_text[mid];
        if (term_cmp(t, run->sample_text[mid + 1] - run->sample_text[mid], range->lo, range->lo_len) < 0) a = mid + 1;
        else b = mid;
    }
    return a ? run->sample_offsets[a - 1] : 0;
}

static int merger_open(merger *m, const merge_job *job, const term_range *range, uint32_t threads, char *err,
                       size_t err_len) {
    memset(m, 0, sizeof *m);
    m->job = job;
    m->range = *range;
    m->err = err;
    m->err_len = err_len;
    uint32_t n = job->part->num_runs;
    m->cursors = calloc(n ? n : 1, sizeof *m->cursors);
    m->heap = calloc(n ? n : 1, sizeof *m->heap);
    m->fragment_start = calloc((size_t)n + 1, sizeof *m->fragment_start);
    m->fragment_head = calloc((size_t)n + 1, sizeof *m->fragment_head);
    if (!m->cursors || !m->heap || !m->fragment_start || !m->fragment_head)
        return isn_error(err, err_len, "out of memory while merging the runs");
    size_t buffer = MERGE_MAX_BUFFER;
    if (job->memory_bytes && n) {
        uint64_t share = job->memory_bytes / 8 / n / threads;
        buffer = share < MERGE_MIN_BUFFER ? MERGE_MIN_BUFFER : share > MERGE_MAX_BUFFER ? MERGE_MAX_BUFFER : (size_t)share;
    }
    for (uint32_t i = 0; i < n; i++) m->cursors[i].fd = -1;
    for (uint32_t i = 0; i < n; i++) {
        run_cursor *c = &m->cursors[i];
        const run_info *run = &job->part->runs[i];
        if (run_cursor_open(c, run, i, buffer, range_start(run, range)) != 0)
            return isn_error(err, err_len, "cannot open run file %s: %s", run->path, strerror(errno));
        m->num_cursors++;
        if (run_cursor_next_term(c) != 0) return run_error(m, c);
        while (!c->done && range->lo && term_cmp(c->term, c->term_len, range->lo, range->lo_len) < 0)
            if (run_cursor_skip_postings(c) != 0 || run_cursor_next_term(c) != 0) return run_error(m, c);
        if (!past_range(m, c)) m->heap[m->heap_len++] = c;
    }
    for (uint32_t i = m->heap_len; i-- > 0;) heap_down(m, i);
    return 0;
}

static void merger_close(merger *m) {
    if (m->gate) gate_release(m->gate, m->held);
    m->held = 0;
    for (uint32_t i = 0; i < m->num_cursors; i++) run_cursor_close(&m->cursors[i]);
    free(m->cursors);
    free(m->heap);
    free(m->fragment_start);
    free(m->fragment_head);
    free(m->triples);
    free(m->merged);
    free(m->positions);
}

/* Gathers the least term's postings from every run holding it: *done when no term is left. The fragments
 * (one per run, in run order) are each in doc order; fragment_start[i] is where fragment i begins in
 * triples (in uint32s) and *num_fragments counts them. The first fragment's cursor is *first (its term,
 * local id and the doc of its first posting say where the term first occurred). */
static int merger_next(merger *m, bool with_positions, bool *done, uint32_t *num_fragments, char *term, uint8_t *term_len,
                       uint32_t *first_local_id, uint32_t *first_doc_fragment) {
    *done = m->heap_len == 0;
    if (*done) return 0;
    run_cursor *top = m->heap[0];
    *term_len = top->term_len;
    memcpy(term, top->term, top->term_len);
    m->triples_len = m->positions_len = 0;
    if (m->gate) {
        /* the last long list's arrays go, and its hold */
        gate_release(m->gate, m->held);
        m->held = 0;
        if (m->triples_cap > 3 * (uint64_t)GATED_DF) {
            free(m->triples);
            free(m->merged);
            free(m->positions);
            m->triples = m->merged = m->positions = NULL;
            m->triples_cap = m->merged_cap = m->positions_cap = 0;
        }
        if (top->df >= GATED_DF / 8) {
            uint64_t df = 0, data = 0;
            for (uint32_t i = 0; i < m->heap_len; i++) {
                const run_cursor *c = m->heap[i];
                if (c->term_len == *term_len && memcmp(c->term, term, *term_len) == 0) {
                    df += c->df;
                    data += c->data_bytes;
                }
            }
            if (df >= GATED_DF) {
                m->held = df * 24 + (with_positions ? data * 4 : 0);
                gate_acquire(m->gate, m->held);
            }
        }
    }
    uint32_t f = 0;
    uint32_t best_doc = UINT32_MAX;
    while (m->heap_len && m->heap[0]->term_len == *term_len && memcmp(m->heap[0]->term, term, *term_len) == 0) {
        run_cursor *c = m->heap[0];
        m->fragment_start[f] = m->triples_len;
        uint64_t at = m->triples_len;
        if (run_cursor_read_postings(c, with_positions, &m->triples, &m->triples_len, &m->triples_cap, &m->positions,
                                     &m->positions_len, &m->positions_cap) != 0)
            return run_error(m, c);
        if (c->df && m->triples[at] < best_doc) {
            best_doc = m->triples[at];
            *first_local_id = c->local_id;
            *first_doc_fragment = f;
        }
        f++;
        if (run_cursor_next_term(c) != 0) return run_error(m, c);
        if (past_range(m, c)) m->heap[0] = m->heap[--m->heap_len];
        heap_down(m, 0);
    }
    m->fragment_start[f] = m->triples_len;
    *num_fragments = f;
    return 0;
}

static int cmp_triple(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The gathered postings as one list in increasing doc order (new ids when new_of_old): a merge of the
 * fragments, or with a permutation a sort as the in-memory builder does. Returns the triples. */
static uint32_t *merged_list(merger *m, uint32_t num_fragments, const uint32_t *new_of_old, uint32_t *n_out) {
    uint64_t n = m->triples_len / 3;
    *n_out = (uint32_t)n;
    if (new_of_old) {
        for (uint64_t i = 0; i < n; i++) m->triples[3 * i] = new_of_old[m->triples[3 * i]];
        qsort(m->triples, n, 3 * sizeof(uint32_t), cmp_triple);
        return m->triples;
    }
    if (num_fragments <= 1) return m->triples;
    bool sorted = true;
    for (uint32_t f = 1; f < num_fragments && sorted; f++)
        sorted = m->triples[m->fragment_start[f] - 3] < m->triples[m->fragment_start[f]];
    if (sorted) return m->triples;
    if (m->merged_cap < m->triples_len) {
        uint32_t *p = realloc(m->merged, m->triples_len * sizeof *p);
        if (!p) return NULL;
        m->merged = p;
        m->merged_cap = m->triples_len;
    }
    /* Fragments interleave by whole input batches: take stretches from the fragment with the least head. */
    uint64_t *head = m->fragment_head;
    for (uint32_t f = 0; f < num_fragments; f++) head[f] = m->fragment_start[f];
    uint64_t out = 0;
    while (out < m->triples_len) {
        uint32_t best = UINT32_MAX, second = UINT32_MAX, bf = 0;
        for (uint32_t f = 0; f < num_fragments; f++) {
            if (head[f] == m->fragment_start[f + 1]) continue;
            uint32_t d = m->triples[head[f]];
            if (d < best) {
                second = best;
                best = d;
                bf = f;
            } else if (d < second) {
                second = d;
            }
        }
        while (head[bf] < m->fragment_start[bf + 1] && m->triples[head[bf]] < second) {
            memcpy(m->merged + out, m->triples + head[bf], 3 * sizeof(uint32_t));
            out += 3;
            head[bf] += 3;
        }
    }
    return m->merged;
}

/* ------------------------------------------------------------------ document order */

static int cmp_doc_by_static(const void *a, const void *b, void *ctx) {
    const part_table *p = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    float sx = part_score(p, x), sy = part_score(p, y);
    if (sx != sy) return sx > sy ? -1 : 1;
    return (x > y) - (x < y);
}

static int cmp_doc_by_id(const void *a, const void *b, void *ctx) {
    const part_table *p = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    size_t lx, ly;
    const char *ix = id_table_get(&p->ids, x, &lx);
    const char *iy = id_table_get(&p->ids, y, &ly);
    int c = memcmp(ix, iy, lx < ly ? lx : ly);
    return c ? c : (lx > ly) - (lx < ly);
}

/* A dense term of the BP forward index: where it first occurred, where its documents are. */
typedef struct {
    uint32_t first_doc, local_id;
    uint64_t start;
    uint32_t df;
} bp_term;

static int cmp_bp_term(const void *a, const void *b) {
    const bp_term *x = a, *y = b;
    if (x->first_doc != y->first_doc) return x->first_doc < y->first_doc ? -1 : 1;
    return (x->local_id > y->local_id) - (x->local_id < y->local_id);
}

/* BP over the runs: the forward index of the terms in ISN_BP_MIN_DF documents or more, numbered in order of
 * first occurrence as the in-memory builder numbers its terms (two terms first seen in one document were
 * first seen in the one run holding it, whose ids number them in token order). */
static uint32_t *bp_from_runs(const merge_job *job, char *err, size_t err_len) {
    uint32_t nd = job->part->num_docs;
    merger m;
    bp_term *terms = NULL;
    uint64_t num_terms = 0, terms_cap = 0;
    uint32_t *docs = NULL, *forward = NULL, *new_of_old = NULL;
    uint64_t docs_len = 0, docs_cap = 0, *offsets = NULL;
    term_range all = {0};
    if (merger_open(&m, job, &all, 1, err, err_len) != 0) goto done;
    for (;;) {
        bool done;
        uint32_t nf, local_id = 0, first_fragment = 0;
        char term[256];
        uint8_t term_len;
        if (merger_next(&m, job->options->positions, &done, &nf, term, &term_len, &local_id, &first_fragment) != 0) goto done;
        if (done) break;
        uint64_t n = m.triples_len / 3;
        if (n < ISN_BP_MIN_DF) continue;
        if (num_terms == terms_cap) {
            terms_cap = terms_cap ? terms_cap * 2 : 4096;
            bp_term *t = realloc(terms, terms_cap * sizeof *t);
            if (!t) goto oom;
            terms = t;
        }
        if (docs_len + n > docs_cap) {
            uint64_t cap = docs_cap ? docs_cap : 1 << 20;
            while (cap < docs_len + n) cap *= 2;
            uint32_t *d = realloc(docs, cap * sizeof *d);
            if (!d) goto oom;
            docs = d;
            docs_cap = cap;
        }
        terms[num_terms++] = (bp_term){m.triples[m.fragment_start[first_fragment]], local_id, docs_len, (uint32_t)n};
        for (uint64_t i = 0; i < n; i++) docs[docs_len++] = m.triples[3 * i];
    }
    if (num_terms > UINT32_MAX) goto oom;
    qsort(terms, num_terms, sizeof *terms, cmp_bp_term);
    offsets = calloc((size_t)nd + 1, sizeof *offsets);
    forward = malloc((docs_len ? docs_len : 1) * sizeof *forward);
    if (!offsets || !forward) goto oom;
    for (uint64_t i = 0; i < docs_len; i++) offsets[docs[i] + 1]++;
    for (uint32_t d = 0; d < nd; d++) offsets[d + 1] += offsets[d];
    /* Filled in dense order, each document's terms come out increasing, as isn_bp_order_forward wants. */
    for (uint64_t t = 0; t < num_terms; t++)
        for (uint64_t i = terms[t].start; i < terms[t].start + terms[t].df; i++) forward[offsets[docs[i]]++] = (uint32_t)t;
    for (uint32_t d = nd; d > 0; d--) offsets[d] = offsets[d - 1];
    offsets[0] = 0;
    free(docs);
    docs = NULL;
    free(terms);
    terms = NULL;
    merger_close(&m);
    memset(&m, 0, sizeof m);
    new_of_old = isn_bp_order_forward(nd, offsets, forward, (uint32_t)num_terms, 0);
    if (!new_of_old) goto oom;
    goto done;
oom:
    isn_error(err, err_len, "out of memory while ordering the documents (--order bp)");
done:
    merger_close(&m);
    free(terms);
    free(docs);
    free(offsets);
    free(forward);
    return new_of_old;
}

/* A document's length over all fields, as the index stores it. */
static uint32_t part_doc_len(const part_table *p, uint32_t doc, uint32_t nf) {
    const uint32_t *lens = part_lens(p, doc, nf);
    uint32_t dl = 0;
    for (uint32_t f = 0; f < nf; f++) dl += lens[f];
    return dl;
}

/* GS(d) of every document (input order) and new_of_old by it, as the in-memory build's global_permutation. */
static uint32_t *global_permutation(const merge_job *job) {
    const part_table *p = job->part;
    uint32_t n = p->num_docs, nf = job->options->num_fields;
    float *gs = malloc((size_t)(n ? n : 1) * sizeof *gs);
    if (!gs) return NULL;
    uint64_t total = 0;
    for (uint32_t d = 0; d < n; d++) total += part_doc_len(p, d, nf);
    float avg = isn_avg_len(total, n);
    bool prior = job->options->static_score_field[0] != 0;
    for (uint32_t d = 0; d < n; d++) {
        gs[d] = global_best_part(&job->options->bm25, *part_max_tf(p, d), part_doc_len(p, d, nf), avg);
        if (prior) gs[d] += job->options->prior_weight * part_score(p, d);
    }
    uint32_t *new_of_old = global_order_permutation(gs, n);
    free(gs);
    return new_of_old;
}

/* new_of_old for the options' order: NULL with err out of memory; *identity for input order. */
static uint32_t *doc_permutation(const merge_job *job, bool *identity, char *err, size_t err_len) {
    const part_table *p = job->part;
    uint32_t n = p->num_docs;
    *identity = job->options->order == ISN_ORDER_INPUT;
    if (*identity) return NULL;
    if (job->options->order == ISN_ORDER_BP) return bp_from_runs(job, err, err_len);
    if (job->options->order == ISN_ORDER_GLOBAL) {
        uint32_t *new_of_old = global_permutation(job);
        if (!new_of_old) isn_error(err, err_len, "out of memory while ordering the documents");
        return new_of_old;
    }
    uint32_t *old_of_new = malloc((size_t)(n ? n : 1) * sizeof *old_of_new);
    uint32_t *new_of_old = malloc((size_t)(n ? n : 1) * sizeof *new_of_old);
    if (!old_of_new || !new_of_old) {
        free(old_of_new);
        free(new_of_old);
        isn_error(err, err_len, "out of memory while ordering the documents");
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) old_of_new[i] = i;
    qsort_r(old_of_new, n, sizeof *old_of_new, job->options->order == ISN_ORDER_STATIC ? cmp_doc_by_static : cmp_doc_by_id,
            (void *)p);
    for (uint32_t i = 0; i < n; i++) new_of_old[old_of_new[i]] = i;
    free(old_of_new);
    return new_of_old;
}

/* ------------------------------------------------------------------ the index file */

enum { OUT_DOC_LENS, OUT_DOC_STATIC, OUT_DOCID_TEXT, OUT_STORED, OUT_COUNT };

typedef struct {
    section_out *out[OUT_COUNT];
    section_out doc_lens, doc_static, docid_text;
    stored_writer stored;
    out_buf lex_index, lex_data;
    uint32_t *new_of_old, *old_of_new;
    float *norms;
    float *score_bounds; /* --order global: section 'score_bounds' */
    uint8_t *doc_raw;
    uint64_t doc_raw_cap;
} partition_writer;

static int section_failed(const section_out *s, char *err, size_t err_len) {
    if (s->error) return isn_error(err, err_len, "cannot write a temporary file of the index: %s", strerror(s->error));
    return isn_error(err, err_len, "out of memory while writing the index");
}

/* Doc lengths, ids and static scores in index order; meta's totals; the norms by new doc id. */
static int write_documents(const merge_job *job, partition_writer *w, isn_meta *meta, char *err, size_t err_len) {
    const part_table *p = job->part;
    uint32_t nd = p->num_docs, nf = job->options->num_fields;
    const char *prev_id = "";
    size_t prev_id_len = 0;
    for (uint32_t nw = 0; nw < nd; nw++) {
        uint32_t old = w->old_of_new ? w->old_of_new[nw] : nw;
        const uint32_t *lens = part_lens(p, old, nf);
        uint32_t dl = 0;
        uint8_t v[ISN_MAX_FIELDS * 5], *o = v;
        for (uint32_t f = 0; f < nf; f++) {
            meta->total_field_len[f] += lens[f];
            dl += lens[f];
            o = isn_varint_put(o, lens[f]);
        }
        meta->total_doc_len += dl;
        if (section_out_put(&w->doc_lens, v, (uint64_t)(o - v)) != 0) return section_failed(&w->doc_lens, err, err_len);
        size_t il;
        const char *id = id_table_get(&p->ids, old, &il);
        if (put_external_id(&w->docid_text.buf, id, il, prev_id, prev_id_len) != 0 || section_out_spill(&w->docid_text) != 0)
            return section_failed(&w->docid_text, err, err_len);
        prev_id = id;
        prev_id_len = il;
        if (meta->flags & ISN_META_HAS_STATIC) {
            float score = part_score(p, old);
            if (section_out_put(&w->doc_static, &score, sizeof score) != 0) return section_failed(&w->doc_static, err, err_len);
        }
    }
    float avg = isn_avg_len(meta->total_doc_len, nd);
    for (uint32_t nw = 0; nw < nd; nw++) {
        const uint32_t *lens = part_lens(p, w->old_of_new ? w->old_of_new[nw] : nw, nf);
        uint32_t dl = 0;
        for (uint32_t f = 0; f < nf; f++) dl += lens[f];
        w->norms[nw] = isn_bm25_doc_norm(&job->options->bm25, dl, avg);
        if (w->score_bounds)
            w->score_bounds[nw] = global_best_part(&job->options->bm25, *part_max_tf(p, w->old_of_new ? w->old_of_new[nw] : nw), dl, avg);
    }
    if (w->score_bounds) global_suffix_maxima(w->score_bounds, nd);
    return 0;
}

/* One range's share of the postings: its sections (block and position offsets counted from the range's
 * own start until stitched), its terms' entries and texts. */
typedef struct {
    term_range range;
    list_encoder enc;
    out_buf terms, texts; /* texts: per term u8 length, bytes */
    uint32_t num_terms;
    uint64_t num_postings;
    int rc;
    char err[ISN_ERR_LEN];
} range_out;

typedef struct {
    const merge_job *job;
    const partition_writer *w;
    range_out *ranges;
    uint32_t num_ranges, threads;
    list_gate *gate;
    _Atomic uint32_t next;
} range_job;

static int merge_range(const merge_job *job, const partition_writer *w, range_out *r, uint32_t threads, list_gate *gate) {
    merger m;
    char *err = r->err;
    size_t err_len = sizeof r->err;
    int rc = -1;
    int opened = merger_open(&m, job, &r->range, threads, err, err_len);
    m.gate = gate;
    if (opened != 0) goto done;
    for (;;) {
        bool done;
        uint32_t nf, local_id, first_fragment, n;
        char term[256];
        uint8_t term_len;
        if (merger_next(&m, job->options->positions, &done, &nf, term, &term_len, &local_id, &first_fragment) != 0) goto done;
        if (done) break;
        uint32_t *list = merged_list(&m, nf, w->new_of_old, &n);
        isn_term_entry entry;
        if (!list) goto oom;
        if (list_encoder_add(&r->enc, list, n, m.positions, &entry) != 0) {
            section_out *outs[] = {&r->enc.postings, &r->enc.block_meta, &r->enc.pos_blocks, &r->enc.positions};
            for (int s = 0; s < 4; s++)
                if (outs[s]->error) {
                    section_failed(outs[s], err, err_len);
                    goto done;
                }
            if (r->enc.num_blocks > UINT32_MAX) {
                isn_error(err, err_len, "the partition has more than 2^32 posting blocks");
                goto done;
            }
            goto oom;
        }
        if (r->num_terms == UINT32_MAX) {
            isn_error(err, err_len, "the partition has more than 2^32 - 1 terms");
            goto done;
        }
        if (put_term_entry(&r->terms, &entry) != 0 || buf_put(&r->texts, &term_len, 1) != 0 || buf_put(&r->texts, term, term_len) != 0)
            goto oom;
        r->num_postings += entry.df;
        r->num_terms++;
    }
    for (section_out *o = &r->enc.postings; o <= &r->enc.positions; o++)
        if (section_out_finish(o) != 0) {
            section_failed(o, err, err_len);
            goto done;
        }
    rc = 0;
    goto done;
oom:
    isn_error(err, err_len, "out of memory while merging the runs");
done:
    merger_close(&m);
    return rc;
}

static void *range_worker(void *arg) {
    range_job *j = arg;
    for (uint32_t k; (k = atomic_fetch_add(&j->next, 1)) < j->num_ranges;)
        j->ranges[k].rc = merge_range(j->job, j->w, &j->ranges[k], j->threads, j->gate);
    return NULL;
}

typedef struct {
    const char *term;
    size_t len;
    uint64_t weight; /* run bytes from this sample to the next */
} range_sample;

static int cmp_sample(const void *a, const void *b) {
    const range_sample *x = a, *y = b;
    return term_cmp(x->term, x->len, y->term, y->len);
}

/* Up to `want` ranges of about equal run bytes, cut at sampled terms. */
static uint32_t split_terms(const part_table *p, uint32_t want, term_range *ranges) {
    uint64_t n = 0;
    for (uint32_t r = 0; r < p->num_runs; r++) n += p->runs[r].num_samples;
    range_sample *samples = want > 1 && n ? malloc(n * sizeof *samples) : NULL;
    memset(&ranges[0], 0, sizeof ranges[0]);
    if (!samples) return 1;
    uint64_t k = 0, total = 0;
    for (uint32_t r = 0; r < p->num_runs; r++) {
        const run_info *run = &p->runs[r];
        for (uint32_t i = 0; i < run->num_samples; i++) {
            uint64_t end = i + 1 < run->num_samples ? run->sample_offsets[i + 1] : run->bytes;
            samples[k++] = (range_sample){run->sample_bytes + run->sample_text[i], run->sample_text[i + 1] - run->sample_text[i],
                                          end - run->sample_offsets[i]};
            total += end - run->sample_offsets[i];
        }
    }
    qsort(samples, n, sizeof *samples, cmp_sample);
    uint32_t count = 1;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n && count < want; i++) {
        if (acc >= total / want * count) {
            const term_range *last = &ranges[count - 1];
            if (!last->lo || term_cmp(samples[i].term, samples[i].len, last->lo, last->lo_len) > 0) {
                ranges[count - 1].hi = samples[i].term;
                ranges[count - 1].hi_len = samples[i].len;
                ranges[count] = (term_range){samples[i].term, NULL, samples[i].len, 0};
                count++;
            }
        }
        acc += samples[i].weight;
    }
    free(samples);
    return count;
}

/* Adds base to each uint64 at `stride` bytes (from `at` within each record) of a section file. */
static int shift_offsets(section_out *s, size_t record, size_t at, uint64_t base) {
    if (base == 0 || s->flushed == 0) return 0;
    int fd = fileno(s->file);
    uint8_t buf[1 << 16];
    size_t chunk = sizeof buf / record * record;
    for (uint64_t pos = 0; pos < s->flushed; pos += chunk) {
        size_t n = s->flushed - pos < chunk ? (size_t)(s->flushed - pos) : chunk;
        if (pread(fd, buf, n, (off_t)pos) != (ssize_t)n) return s->error = errno ? errno : EIO, -1;
        for (size_t i = 0; i + record <= n; i += record) {
            uint64_t v;
            memcpy(&v, buf + i + at, sizeof v);
            v += base;
            memcpy(buf + i + at, &v, sizeof v);
        }
        if (pwrite(fd, buf, n, (off_t)pos) != (ssize_t)n) return s->error = errno ? errno : EIO, -1;
    }
    return 0;
}

/* The postings, block metadata, positions, terms and lexicon, merged by range on the job's threads, then
 * stitched: each range's block and position offsets shifted by the ranges before it. */
static int write_postings(const merge_job *job, partition_writer *w, isn_meta *meta, uint32_t *num_ranges_out,
                          range_out **ranges_out, char *err, size_t err_len) {
    uint32_t want = job->threads > 1 ? job->threads * 4 : 1;
    term_range *bounds = calloc(want, sizeof *bounds);
    range_out *ranges = NULL;
    uint32_t n = 0;
    int rc = -1;
    if (!bounds) goto oom;
    n = split_terms(job->part, want, bounds);
    ranges = calloc(n, sizeof *ranges);
    if (!ranges) goto oom;
    *ranges_out = ranges;
    *num_ranges_out = n;
    for (uint32_t k = 0; k < n; k++) {
        range_out *r = &ranges[k];
        r->range = bounds[k];
        r->enc = (list_encoder){.num_fields = job->options->num_fields, .with_positions = job->options->positions,
                                .k1_plus_1 = job->options->bm25.k1 + 1.0f, .norms = w->norms};
        for (section_out *o = &r->enc.postings; o <= &r->enc.positions; o++)
            if (!(o->file = build_temp_file(job->tmp_dir, "section", err, err_len))) goto done;
    }
    list_gate gate = {.allowance = job->memory_bytes / 4};
    pthread_mutex_init(&gate.lock, NULL);
    pthread_cond_init(&gate.freed, NULL);
    range_job j = {.job = job, .w = w, .ranges = ranges, .num_ranges = n, .threads = job->threads ? job->threads : 1,
                   .gate = job->memory_bytes ? &gate : NULL};
    atomic_init(&j.next, 0);
    pthread_t ids[256];
    uint32_t started = 0;
    for (; started + 1 < j.threads && started + 1 < n && started < 256; started++)
        if (pthread_create(&ids[started], NULL, range_worker, &j) != 0) break;
    range_worker(&j);
    for (uint32_t i = 0; i < started; i++) pthread_join(ids[i], NULL);
    pthread_mutex_destroy(&gate.lock);
    pthread_cond_destroy(&gate.freed);
    for (uint32_t k = 0; k < n; k++)
        if (ranges[k].rc != 0) {
            snprintf(err, err_len, "%s", ranges[k].err);
            goto done;
        }

    uint64_t postings_base = 0, positions_base = 0, blocks = 0;
    uint32_t rank = 0;
    char prev[256];
    uint8_t prev_len = 0;
    for (uint32_t k = 0; k < n; k++) {
        range_out *r = &ranges[k];
        if (shift_offsets(&r->enc.block_meta, sizeof(isn_block_meta), offsetof(isn_block_meta, offset), postings_base) != 0) {
            section_failed(&r->enc.block_meta, err, err_len);
            goto done;
        }
        if (shift_offsets(&r->enc.pos_blocks, sizeof(uint64_t), 0, positions_base) != 0) {
            section_failed(&r->enc.pos_blocks, err, err_len);
            goto done;
        }
        postings_base += r->enc.postings.flushed;
        positions_base += r->enc.positions.flushed;
        blocks += r->enc.num_blocks;
        meta->num_postings += r->num_postings;
        if ((uint64_t)rank + r->num_terms > UINT32_MAX - 1) {
            isn_error(err, err_len, "the partition has more than 2^32 - 1 terms");
            goto done;
        }
        for (const uint8_t *t = r->texts.data, *end = t + r->texts.len; t < end; t += 1 + *t) {
            if (put_lexicon_term(&w->lex_index, &w->lex_data, rank, (const char *)t + 1, *t, prev, prev_len) != 0) goto oom;
            memcpy(prev, t + 1, *t);
            prev_len = *t;
            rank++;
        }
        free(r->texts.data);
        r->texts = (out_buf){0};
    }
    if (blocks > UINT32_MAX) {
        isn_error(err, err_len, "the partition has more than 2^32 posting blocks");
        goto done;
    }
    meta->num_blocks = blocks;
    meta->num_terms = rank;
    meta->num_lex_blocks = (rank + ISN_LEXICON_BLOCK - 1) / ISN_LEXICON_BLOCK;
    uint64_t lex_end = w->lex_data.len;
    if (buf_put(&w->lex_index, &lex_end, sizeof lex_end) != 0) goto oom;
    rc = 0;
    goto done;
oom:
    isn_error(err, err_len, "out of memory while merging the runs");
done:
    free(bounds);
    return rc;
}

static void free_ranges(range_out *ranges, uint32_t n) {
    for (uint32_t k = 0; ranges && k < n; k++) {
        range_out *r = &ranges[k];
        for (section_out *o = &r->enc.postings; o <= &r->enc.positions; o++) {
            if (o->file) fclose(o->file);
            free(o->buf.data);
        }
        free(r->terms.data);
        free(r->texts.data);
    }
    free(ranges);
}

static int write_stored(const merge_job *job, partition_writer *w, char *err, size_t err_len) {
    const part_table *p = job->part;
    for (uint32_t nw = 0; nw < p->num_docs; nw++) {
        uint32_t old = w->old_of_new ? w->old_of_new[nw] : nw;
        const stored_ref *ref = part_stored(p, old);
        if (ref->raw_bytes > w->doc_raw_cap) {
            uint8_t *q = realloc(w->doc_raw, ref->raw_bytes);
            if (!q) return isn_error(err, err_len, "out of memory while writing the stored fields");
            w->doc_raw = q;
            w->doc_raw_cap = ref->raw_bytes;
        }
        int fd = fileno(job->stored_files[ref->file]);
        for (uint64_t got = 0; got < ref->raw_bytes;) {
            ssize_t r = pread(fd, w->doc_raw + got, ref->raw_bytes - got, (off_t)(ref->offset + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return isn_error(err, err_len, "cannot read back the stored fields: %s", r < 0 ? strerror(errno) : "short file");
            got += (uint64_t)r;
        }
        size_t il;
        const char *id = id_table_get(&p->ids, old, &il);
        if (stored_writer_add(&w->stored, w->doc_raw, ref->raw_bytes, ref->text_bytes, id, il, err, err_len) != 0) return -1;
    }
    return stored_writer_finish(&w->stored, err, err_len);
}

int merge_partition(const merge_job *job, isn_build_summary *summary, char *err, size_t err_len) {
    double start = isn_now_seconds();
    const isn_build_options *o = job->options;
    const part_table *p = job->part;
    uint32_t nd = p->num_docs, nf = o->num_fields;
    partition_writer w;
    memset(&w, 0, sizeof w);
    w.out[OUT_DOC_LENS] = &w.doc_lens;
    w.out[OUT_DOC_STATIC] = &w.doc_static;
    w.out[OUT_DOCID_TEXT] = &w.docid_text;
    w.out[OUT_STORED] = &w.stored.data;
    int rc = -1;
    bool identity;
    range_out *ranges = NULL;
    uint32_t num_ranges = 0;
    isn_piece *range_pieces = NULL;
    w.new_of_old = doc_permutation(job, &identity, err, err_len);
    if (!identity && !w.new_of_old) return -1;
    w.norms = malloc((size_t)(nd ? nd : 1) * sizeof *w.norms);
    if (!w.norms) goto oom;
    if (o->order == ISN_ORDER_GLOBAL && !(w.score_bounds = malloc((size_t)(nd ? nd : 1) * sizeof *w.score_bounds))) goto oom;
    if (w.new_of_old) {
        w.old_of_new = malloc((size_t)(nd ? nd : 1) * sizeof *w.old_of_new);
        if (!w.old_of_new) goto oom;
        for (uint32_t old = 0; old < nd; old++) w.old_of_new[w.new_of_old[old]] = old;
    }
    stored_writer_init(&w.stored, job->stored_slots, o->num_stored, NULL);
    for (int s = 0; s < OUT_COUNT; s++)
        if (!(w.out[s]->file = build_temp_file(job->tmp_dir, "section", err, err_len))) goto done;

    isn_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.num_docs = nd;
    meta.num_fields = nf;
    meta.built_unix_seconds = isn_index_build_time();
    meta.flags = (o->positions ? ISN_META_HAS_POSITIONS : 0) | (o->static_score_field[0] ? ISN_META_HAS_STATIC : 0) |
                 (o->order == ISN_ORDER_GLOBAL ? ISN_META_SCORE_BOUNDS : 0);
    meta.k1 = o->bm25.k1;
    meta.b = o->bm25.b;
    meta.analyzer_stem = o->analyzer.stem;
    meta.analyzer_stopwords = o->analyzer.stopwords;
    meta.analyzer_max_token_bytes = o->analyzer.max_token_bytes == 0 || o->analyzer.max_token_bytes > ISN_MAX_TERM_BYTES
                                        ? ISN_MAX_TERM_BYTES
                                        : o->analyzer.max_token_bytes;
    for (uint32_t f = 0; f < nf; f++) memcpy(meta.fields[f], o->fields[f], ISN_FIELD_NAME_MAX);

    if (write_documents(job, &w, &meta, err, err_len) != 0) goto done;
    if (write_postings(job, &w, &meta, &num_ranges, &ranges, err, err_len) != 0) goto done;
    /* the runs are merged: their disk goes before the index file is written */
    for (uint32_t r = 0; r < p->num_runs; r++) unlink(p->runs[r].path);
    if (o->num_stored && write_stored(job, &w, err, err_len) != 0) goto done;
    for (int s = 0; s < OUT_COUNT; s++)
        if (section_out_finish(w.out[s]) != 0) {
            section_failed(w.out[s], err, err_len);
            goto done;
        }

    isn_piece pieces[SEC_COUNT][2];
    isn_section_pieces lists[SEC_COUNT];
    static const int file_of[SEC_COUNT] = {
        [SEC_META] = -1,      [SEC_DOC_LENS] = OUT_DOC_LENS, [SEC_DOC_STATIC] = OUT_DOC_STATIC, [SEC_DOCID_TEXT] = OUT_DOCID_TEXT,
        [SEC_LEX_INDEX] = -1, [SEC_LEX_DATA] = -1,           [SEC_TERMS] = -1,                  [SEC_BLOCK_META] = -1,
        [SEC_POSTINGS] = -1,  [SEC_POS_BLOCKS] = -1,         [SEC_POSITIONS] = -1,              [SEC_STORED] = OUT_STORED,
        [SEC_SCORE_BOUNDS] = -1,
    };
    for (int s = 0; s < SEC_COUNT; s++) {
        lists[s] = (isn_section_pieces){pieces[s], 1};
        if (file_of[s] >= 0) pieces[s][0] = (isn_piece){.file = w.out[file_of[s]]->file, .bytes = w.out[file_of[s]]->flushed};
    }
    pieces[SEC_META][0] = (isn_piece){.data = &meta, .bytes = sizeof meta};
    pieces[SEC_LEX_INDEX][0] = (isn_piece){.data = w.lex_index.data, .bytes = w.lex_index.len};
    pieces[SEC_LEX_DATA][0] = (isn_piece){.data = w.lex_data.data, .bytes = w.lex_data.len};
    pieces[SEC_SCORE_BOUNDS][0] = (isn_piece){.data = w.score_bounds, .bytes = w.score_bounds ? (uint64_t)nd * sizeof(float) : 0};
    if (o->num_stored) {
        pieces[SEC_STORED][1] = pieces[SEC_STORED][0];
        pieces[SEC_STORED][0] = (isn_piece){.data = w.stored.table.data, .bytes = w.stored.table.len};
        lists[SEC_STORED].num_pieces = 2;
    }
    /* the ranges' pieces, in order; the postings end with the decoder's slack */
    static const uint8_t slack[ISN_CODEC_READ_SLACK];
    range_pieces = malloc(((size_t)num_ranges * 5 + 1) * sizeof *range_pieces);
    if (!range_pieces) goto oom;
    isn_piece *rp = range_pieces;
    lists[SEC_TERMS] = (isn_section_pieces){rp, num_ranges};
    for (uint32_t k = 0; k < num_ranges; k++) *rp++ = (isn_piece){.data = ranges[k].terms.data, .bytes = ranges[k].terms.len};
    lists[SEC_BLOCK_META] = (isn_section_pieces){rp, num_ranges};
    for (uint32_t k = 0; k < num_ranges; k++) *rp++ = (isn_piece){.file = ranges[k].enc.block_meta.file, .bytes = ranges[k].enc.block_meta.flushed};
    lists[SEC_POSTINGS] = (isn_section_pieces){rp, num_ranges + 1};
    for (uint32_t k = 0; k < num_ranges; k++) *rp++ = (isn_piece){.file = ranges[k].enc.postings.file, .bytes = ranges[k].enc.postings.flushed};
    *rp++ = (isn_piece){.data = slack, .bytes = sizeof slack};
    lists[SEC_POS_BLOCKS] = (isn_section_pieces){rp, num_ranges};
    for (uint32_t k = 0; k < num_ranges; k++) *rp++ = (isn_piece){.file = ranges[k].enc.pos_blocks.file, .bytes = ranges[k].enc.pos_blocks.flushed};
    lists[SEC_POSITIONS] = (isn_section_pieces){rp, num_ranges};
    for (uint32_t k = 0; k < num_ranges; k++) *rp++ = (isn_piece){.file = ranges[k].enc.positions.file, .bytes = ranges[k].enc.positions.flushed};
    uint64_t bytes[SEC_COUNT], file_bytes;
    if (isn_index_file_write(job->index_dir, ISN_FORMAT_VERSION, lists, bytes, &file_bytes, err, err_len) != 0) goto done;
    summary->docs = nd;
    summary->terms = meta.num_terms;
    summary->postings = meta.num_postings;
    summary->tokens = p->tokens;
    isn_build_summary_set_bytes(summary, bytes, file_bytes);
    summary->runs = p->num_runs;
    summary->seconds = isn_now_seconds() - start;
    rc = 0;
    goto done;
oom:
    isn_error(err, err_len, "out of memory while writing the index");
done:
    for (int s = 0; s < OUT_COUNT; s++) {
        if (w.out[s]->file) fclose(w.out[s]->file);
        w.out[s]->file = NULL;
        if (s != OUT_STORED) free(w.out[s]->buf.data);
    }
    stored_writer_free(&w.stored);
    free_ranges(ranges, num_ranges);
    free(range_pieces);
    free(w.lex_index.data);
    free(w.lex_data.data);
    free(w.new_of_old);
    free(w.old_of_new);
    free(w.norms);
    free(w.score_bounds);
    free(w.doc_raw);
    return rc;
}
