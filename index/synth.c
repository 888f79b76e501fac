/* Synthetic partitions for scale tests (isn-index synth): documents are never materialised; each term's
 * posting list is drawn directly (geometric gaps at the term's document rate, frequencies growing with
 * document length), encoded with the index codec and written in the normal file format, in parallel
 * over terms. Document-frequency curve: Zipf, or a real index's curve rescaled; query log: term counts
 * and document-frequency fractions of a real query log, or log-uniform ranks. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "index/builder.h"
#include "index/file_writer.h"
#include "index/format.h"

#define TERM_NAME_FORMAT "t%08u"
#define DOC_NAME_FORMAT "d%09u"
#define MAX_QUERY_TERMS 8
#define MAX_TF 1000u

void isn_synth_options_default(isn_synth_options *o) {
    *o = (isn_synth_options){
        .seed = 1,
        .zipf_exponent = 1.0,
        .postings_per_doc = 40.0,
        .mean_doc_len = 80.0,
        .doc_len_sigma = 0.6,
        .queries = 10000,
        .prior_weight = 1.0f,
    };
}

/* The static prior's options, which a partition and its text share: 0, or -1 with err. */
static int check_prior(const isn_synth_options *o, char *err, size_t err_len) {
    if (!(o->prior_sigma >= 0 && o->prior_sigma <= 8) || !(o->prior_weight >= 0.0f) || isinf(o->prior_weight))
        return isn_error(err, err_len, "synth: the prior's sigma must be in [0, 8] (got %g) and its weight finite and >= 0 "
                                       "(got %g)", o->prior_sigma, (double)o->prior_weight);
    return 0;
}

/* The query log's options, which a partition and its text share: 0, or -1 with err. */
static int check_query_log(const isn_synth_options *o, char *err, size_t err_len) {
    if (o->fit_queries && !o->fit_index)
        return isn_error(err, err_len, "synth: --fit-queries needs --fit (the index the query log was run on)");
    if (o->transplant_queries && !o->fit_queries)
        return isn_error(err, err_len, "synth: --transplant-queries needs --fit-queries (the log it transplants)");
    return 0;
}

static uint64_t mix(uint64_t z) { /* splitmix64 finaliser */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    uint64_t state;
} rng;

static inline uint64_t rng_next(rng *r) { return mix(r->state += 0x9E3779B97F4A7C15ull); }
/* (0, 1]: never 0, so log() is finite */
static inline double rng_open_unit(rng *r) { return ((double)(rng_next(r) >> 11) + 1.0) / 9007199254740992.0; }
static inline rng rng_for(uint64_t seed, uint64_t stream) { return (rng){mix(seed * 0x2545F4914F6CDD1Dull + stream)}; }

/* ------------------------------------------------------------------ parallel for */

typedef struct {
    void (*fn)(void *ctx, uint32_t task);
    void *ctx;
    uint32_t tasks;
    _Atomic uint32_t next;
} parallel_job;

static void *parallel_worker(void *arg) {
    parallel_job *job = arg;
    for (uint32_t t; (t = atomic_fetch_add(&job->next, 1)) < job->tasks;) job->fn(job->ctx, t);
    return NULL;
}

static void parallel_for(uint32_t threads, uint32_t tasks, void (*fn)(void *, uint32_t), void *ctx) {
    parallel_job job = {.fn = fn, .ctx = ctx, .tasks = tasks};
    atomic_init(&job.next, 0);
    pthread_t ids[256];
    uint32_t started = 0;
    for (; started + 1 < threads && started < 256; started++)
        if (pthread_create(&ids[started], NULL, parallel_worker, &job) != 0) break;
    parallel_worker(&job);
    for (uint32_t i = 0; i < started; i++) pthread_join(ids[i], NULL);
}

/* ------------------------------------------------------------------ the generator */

typedef struct {
    uint8_t *payload;
    uint64_t payload_len, payload_cap;
    isn_block_meta *blocks;
    uint64_t num_blocks, blocks_cap;
    uint64_t postings;
    uint64_t *gathered; /* --order global: the list's (new doc << 32 | tf) before it is sorted */
    uint64_t gathered_cap;
    int oom;
} chunk_out;

typedef struct {
    const isn_synth_options *o;
    uint32_t num_docs, vocabulary;
    uint32_t *target_lens; /* drawn lengths, which set term frequencies */
    uint32_t *doc_lens;    /* sums of the term frequencies drawn: the index's lengths */
    bool counting;         /* first run over the lists: only sum lengths (the second draws the same lists) */
    uint32_t *max_tfs;     /* --order global: each document's largest frequency, from the first run */
    uint32_t *new_of_old;  /* --order global: set before the second run, which writes lists in new ids */
    float *statics;        /* by drawn number: the static scores (NULL without a prior) */
    float *norms;          /* by the ids the lists are written in */
    double avg_len;
    float k1_plus_1;
    const double *rate; /* per term rank: probability that a document holds it */
    isn_term_entry *terms;
    uint32_t *chunk_first; /* [chunks + 1] term ranges */
    chunk_out *chunks;
} synth;

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return 0;
    uint64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static void doc_lens_task(void *ctx, uint32_t task);

/* The documents' static scores (by drawn number), log-normal with median 1, from a stream of their own. */
static void static_scores_task(void *ctx, uint32_t task) {
    synth *s = ctx;
    uint32_t from = task * 65536u, to = from + 65536u < s->num_docs ? from + 65536u : s->num_docs;
    rng r = rng_for(s->o->seed, 0x40000000000ull + task);
    for (uint32_t d = from; d < to; d++) {
        double z = sqrt(-2.0 * log(rng_open_unit(&r))) * cos(6.283185307179586 * rng_open_unit(&r));
        s->statics[d] = (float)exp(s->o->prior_sigma * z);
    }
}

/* The documents' lengths, and their static scores with a prior: 0, or -1 out of memory. */
static int draw_documents(synth *s, uint32_t threads) {
    parallel_for(threads, (s->num_docs + 65535) / 65536, doc_lens_task, s);
    if (!(s->o->prior_sigma > 0)) return 0;
    if (!(s->statics = malloc((size_t)s->num_docs * sizeof *s->statics))) return -1;
    parallel_for(threads, (s->num_docs + 65535) / 65536, static_scores_task, s);
    return 0;
}

static void doc_lens_task(void *ctx, uint32_t task) {
    synth *s = ctx;
    const isn_synth_options *o = s->o;
    double mu = log(o->mean_doc_len) - o->doc_len_sigma * o->doc_len_sigma / 2;
    uint32_t from = task * 65536u, to = from + 65536u < s->num_docs ? from + 65536u : s->num_docs;
    rng r = rng_for(o->seed, 0x10000000000ull + task);
    for (uint32_t d = from; d < to; d++) {
        /* Box-Muller: one normal per document is plenty */
        double z = sqrt(-2.0 * log(rng_open_unit(&r))) * cos(6.283185307179586 * rng_open_unit(&r));
        double len = exp(mu + o->doc_len_sigma * z);
        s->target_lens[d] = len < 1.0 ? 1u : len > 1e6 ? 1000000u : (uint32_t)(len + 0.5);
    }
}

/* Encodes one block of a list (docs increasing, after prev_last) into the chunk. */
static void put_block(synth *s, chunk_out *out, isn_term_entry *e, const uint32_t *docs, const uint32_t *tfs, uint32_t n,
                      uint32_t *prev_last) {
    uint32_t values[ISN_BLOCK_SIZE] = {0}; /* n >= 1, which the compiler cannot see */
    uint8_t enc[2 * ISN_CODEC_MAX_BLOCK_BYTES];
    isn_block_meta meta = {.offset = out->payload_len, .last_doc = docs[n - 1], .max_tf_part = 0.0f};
    uint32_t prev = *prev_last;
    for (uint32_t i = 0; i < n; i++) {
        values[i] = docs[i] - prev - 1;
        prev = docs[i];
    }
    size_t bytes = isn_codec_encode(values, n, enc);
    for (uint32_t i = 0; i < n; i++) {
        values[i] = tfs[i] - 1;
        e->cf = tfs[i] > UINT32_MAX - e->cf ? UINT32_MAX : e->cf + tfs[i];
        float part = isn_bm25_tf_part(s->k1_plus_1, tfs[i], s->norms[docs[i]]);
        if (part > meta.max_tf_part) meta.max_tf_part = part;
    }
    bytes += isn_codec_encode(values, n, enc + bytes);
    if (grow((void **)&out->payload, &out->payload_cap, out->payload_len + bytes, 1) ||
        grow((void **)&out->blocks, &out->blocks_cap, out->num_blocks + 1, sizeof meta)) {
        out->oom = 1;
        return;
    }
    memcpy(out->payload + out->payload_len, enc, bytes);
    out->payload_len += bytes;
    out->blocks[out->num_blocks++] = meta;
    if (meta.max_tf_part > e->max_tf_part) e->max_tf_part = meta.max_tf_part;
    e->df += n;
    *prev_last = docs[n - 1];
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* --order global: the gathered list in new doc order, in blocks. */
static void put_gathered(synth *s, chunk_out *out, isn_term_entry *e, uint64_t n) {
    qsort(out->gathered, n, sizeof *out->gathered, cmp_u64);
    uint32_t docs[ISN_BLOCK_SIZE], tfs[ISN_BLOCK_SIZE], prev_last = UINT32_MAX;
    for (uint64_t i = 0; i < n && !out->oom; i += ISN_BLOCK_SIZE) {
        uint32_t m = n - i < ISN_BLOCK_SIZE ? (uint32_t)(n - i) : ISN_BLOCK_SIZE;
        for (uint32_t k = 0; k < m; k++) {
            docs[k] = (uint32_t)(out->gathered[i + k] >> 32);
            tfs[k] = (uint32_t)out->gathered[i + k];
        }
        put_block(s, out, e, docs, tfs, m, &prev_last);
    }
}

static void note_max_tf(uint32_t *slot, uint32_t tf) {
    uint32_t seen = __atomic_load_n(slot, __ATOMIC_RELAXED);
    while (tf > seen && !__atomic_compare_exchange_n(slot, &seen, tf, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void write_list(synth *s, chunk_out *out, uint32_t t, rng *r) {
    double p = s->rate[t];
    double log_miss = log1p(-p);
    uint32_t docs[ISN_BLOCK_SIZE], tfs[ISN_BLOCK_SIZE];
    isn_term_entry *e = &s->terms[t];
    memset(e, 0, sizeof *e);
    e->first_block = (uint32_t)out->num_blocks; /* chunk-relative until stitched */
    uint64_t doc = 0, gathered = 0;
    uint32_t prev_last = UINT32_MAX, n = 0;
    /* A term holds at least one document: start from one drawn uniformly when the first gap overshoots. */
    bool first = true;
    for (;;) {
        double gap = floor(log(rng_open_unit(r)) / log_miss);
        doc = first ? (uint64_t)gap : doc + 1 + (uint64_t)gap;
        if (first && doc >= s->num_docs) doc = rng_next(r) % s->num_docs;
        first = false;
        bool end = doc >= s->num_docs;
        if (!end) {
            double lambda = 0.35 * (double)s->target_lens[doc] / s->avg_len;
            uint32_t extra = (uint32_t)floor(-log(rng_open_unit(r)) * lambda);
            docs[n] = (uint32_t)doc;
            tfs[n] = 1 + (extra < MAX_TF ? extra : MAX_TF);
            n++;
        }
        if (s->counting) {
            if (!end) {
                n--;
                __atomic_fetch_add(&s->doc_lens[docs[n]], tfs[n], __ATOMIC_RELAXED);
                if (s->max_tfs) note_max_tf(&s->max_tfs[docs[n]], tfs[n]);
            }
            if (end) break;
            continue;
        }
        if (s->new_of_old) {
            if (!end) {
                n--;
                if (grow((void **)&out->gathered, &out->gathered_cap, gathered + 1, sizeof *out->gathered)) {
                    out->oom = 1;
                    return;
                }
                out->gathered[gathered++] = (uint64_t)s->new_of_old[docs[n]] << 32 | tfs[n];
                continue;
            }
            put_gathered(s, out, e, gathered);
            break;
        }
        if (n == ISN_BLOCK_SIZE || (end && n > 0)) {
            put_block(s, out, e, docs, tfs, n, &prev_last);
            if (out->oom) return;
            n = 0;
        }
        if (end) break;
    }
    out->postings += e->df;
}

static void chunk_task(void *ctx, uint32_t task) {
    synth *s = ctx;
    rng r = rng_for(s->o->seed, task);
    for (uint32_t t = s->chunk_first[task]; t < s->chunk_first[task + 1] && !s->chunks[task].oom; t++)
        write_list(s, &s->chunks[task], t, &r);
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

/* Document rates by term rank, summing to postings_per_doc: a real index's curve when fitting, else Zipf. */
static int term_rates(const isn_synth_options *o, uint32_t vocabulary, const uint32_t *fit_dfs, uint32_t fit_terms,
                      uint32_t fit_docs, double *rate) {
    for (uint32_t t = 0; t < vocabulary; t++) {
        if (fit_dfs) {
            uint64_t at = (uint64_t)t * fit_terms / vocabulary;
            rate[t] = (double)fit_dfs[at] / fit_docs;
        } else {
            rate[t] = pow(t + 1.0, -o->zipf_exponent);
        }
    }
    /* scale (rates capped at 0.9) so that the expected postings per document is the target */
    double lo = 0, hi = 1e12;
    for (int it = 0; it < 200; it++) {
        double mid = (lo + hi) / 2, sum = 0;
        for (uint32_t t = 0; t < vocabulary; t++) sum += fmin(0.9, rate[t] * mid);
        if (sum < o->postings_per_doc) lo = mid;
        else hi = mid;
    }
    for (uint32_t t = 0; t < vocabulary; t++) {
        rate[t] = fmin(0.9, rate[t] * lo);
        if (rate[t] < 1e-12) rate[t] = 1e-12;
    }
    return 0;
}

typedef struct {
    float fractions[MAX_QUERY_TERMS];
    uint32_t terms[MAX_QUERY_TERMS]; /* the fitted index's term ids */
    uint32_t n;
} query_profile;

typedef struct {
    const isn_index *ix;
    query_profile *q;
} analyze_ctx;

static void collect_term(void *ctx, const char *term, size_t len, uint32_t position) {
    (void)position;
    analyze_ctx *a = ctx;
    uint32_t id;
    if (a->q->n >= MAX_QUERY_TERMS || !isn_index_find_term(a->ix, term, len, &id)) return;
    isn_term_stats st;
    isn_index_term_stats(a->ix, id, &st);
    a->q->terms[a->q->n] = id;
    a->q->fractions[a->q->n++] = (float)((double)st.df / isn_index_get_info(a->ix)->num_docs);
}

/* Per real query ("id TAB text" lines): its known terms' df / N. */
static query_profile *read_query_profiles(const char *path, const isn_index *ix, uint32_t *count, char *err,
                                          size_t err_len) {
    isn_query_log log;
    if (isn_query_log_read(path, false, 0, &log, err, err_len) < 0) return NULL;
    isn_analyzer *an = isn_index_new_analyzer(ix);
    query_profile *out = log.count ? malloc(log.count * sizeof *out) : NULL;
    uint64_t n = 0;
    for (size_t i = 0; an && out && i < log.count; i++) {
        query_profile *q = &out[n];
        q->n = 0;
        analyze_ctx ctx = {ix, q};
        isn_analyze(an, log.queries[i].text, strlen(log.queries[i].text), collect_term, &ctx);
        if (q->n) n++;
    }
    isn_analyzer_free(an);
    isn_query_log_free(&log);
    if (n == 0) {
        free(out);
        snprintf(err, err_len, "query log %s has no query with a term of the fitted index", path);
        return NULL;
    }
    *count = (uint32_t)n;
    return out;
}

/* Term rank whose rate is closest to `fraction` (rates decrease with rank). */
static uint32_t rank_of_rate(const double *rate, uint32_t vocabulary, double fraction) {
    uint32_t lo = 0, hi = vocabulary;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (rate[mid] > fraction) lo = mid + 1;
        else hi = mid;
    }
    if (lo >= vocabulary) return vocabulary - 1;
    if (lo > 0 && fabs(rate[lo - 1] - fraction) < fabs(rate[lo] - fraction)) return lo - 1;
    return lo;
}

typedef struct {
    uint32_t term; /* the fitted index's */
    float fraction;
    uint32_t rank; /* the synthetic term it becomes */
} transplanted_term;

static int cmp_fraction_desc(const void *a, const void *b) {
    const transplanted_term *x = a, *y = b;
    if (x->fraction != y->fraction) return x->fraction < y->fraction ? 1 : -1;
    return (x->term > y->term) - (x->term < y->term);
}

static int cmp_fitted_term(const void *a, const void *b) {
    const transplanted_term *x = a, *y = b;
    return (x->term > y->term) - (x->term < y->term);
}

/* The rank not yet taken whose rate is nearest `fraction`; UINT32_MAX when every rank is taken. */
static uint32_t nearest_free_rank(const double *rate, uint32_t vocabulary, const uint8_t *taken, double fraction) {
    int64_t below = rank_of_rate(rate, vocabulary, fraction), above = below + 1;
    while (below >= 0 && taken[below]) below--;
    while (above < vocabulary && taken[above]) above++;
    if (below < 0) return above < vocabulary ? (uint32_t)above : UINT32_MAX;
    if (above >= vocabulary) return (uint32_t)below;
    return fabs(rate[below] - fraction) <= fabs(rate[above] - fraction) ? (uint32_t)below : (uint32_t)above;
}

/* A transplanted log keeps which of its queries share a term: each distinct term of the fitted log becomes a
 * synthetic term of its own (the free rank nearest its df fraction, the most frequent placed first, as they have
 * the fewest ranks near them). Mapping by df alone would merge every term of a similar df into one, and a cache
 * trained on one part of the log would then find the other part's terms far more often than the real log's do.
 * Returns the distinct terms sorted by fitted id, or NULL with err. */
static transplanted_term *transplant_terms(const double *rate, uint32_t vocabulary, const query_profile *profiles,
                                           uint32_t num_profiles, uint32_t *count, char *err, size_t err_len) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < num_profiles; i++) total += profiles[i].n;
    transplanted_term *terms = malloc((total ? total : 1) * sizeof *terms);
    uint8_t *taken = calloc(vocabulary ? vocabulary : 1, 1);
    if (!terms || !taken) {
        free(terms);
        free(taken);
        isn_error(err, err_len, "synth: out of memory for the transplanted log's terms");
        return NULL;
    }
    uint64_t n = 0;
    for (uint32_t i = 0; i < num_profiles; i++)
        for (uint32_t j = 0; j < profiles[i].n; j++)
            terms[n++] = (transplanted_term){profiles[i].terms[j], profiles[i].fractions[j], 0};
    qsort(terms, n, sizeof *terms, cmp_fitted_term);
    uint64_t distinct = 0;
    for (uint64_t i = 0; i < n; i++)
        if (distinct == 0 || terms[distinct - 1].term != terms[i].term) terms[distinct++] = terms[i];
    qsort(terms, distinct, sizeof *terms, cmp_fraction_desc);
    for (uint64_t i = 0; i < distinct; i++) {
        uint32_t rank = nearest_free_rank(rate, vocabulary, taken, terms[i].fraction);
        if (rank == UINT32_MAX) {
            free(terms);
            free(taken);
            isn_error(err, err_len, "synth: the vocabulary's %u terms are fewer than the query log's %llu distinct terms "
                                    "(--transplant-queries gives each its own)", vocabulary, (unsigned long long)distinct);
            return NULL;
        }
        taken[rank] = 1;
        terms[i].rank = rank;
    }
    free(taken);
    qsort(terms, distinct, sizeof *terms, cmp_fitted_term);
    *count = (uint32_t)distinct;
    return terms;
}

static uint32_t transplanted_rank(const transplanted_term *terms, uint32_t count, uint32_t fitted_term) {
    transplanted_term key = {fitted_term, 0, 0};
    const transplanted_term *found = bsearch(&key, terms, count, sizeof *terms, cmp_fitted_term);
    return found->rank; /* every term of a profile was placed */
}

/* A term's name in the synthetic partition. */
static int partition_term_name(char *out, uint32_t rank) { return sprintf(out, TERM_NAME_FORMAT, rank); }

static int write_queries(const char *path, const isn_synth_options *o, const double *rate, uint32_t vocabulary,
                         const query_profile *profiles, uint32_t num_profiles, int (*name)(char *, uint32_t), char *err,
                         size_t err_len) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, err_len, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    rng r = rng_for(o->seed, 0x20000000000ull);
    static const double length_cdf[MAX_QUERY_TERMS] = {0.22, 0.50, 0.72, 0.85, 0.93, 0.97, 0.99, 1.0};
    if (profiles && o->transplant_queries) {
        uint32_t num_terms = 0;
        transplanted_term *terms = transplant_terms(rate, vocabulary, profiles, num_profiles, &num_terms, err, err_len);
        if (!terms) {
            fclose(f);
            return -1;
        }
        for (uint32_t q = 0; q < num_profiles && q < o->queries; q++) {
            fprintf(f, "q%u\t", q);
            for (uint32_t i = 0; i < profiles[q].n; i++) {
                char term[16];
                name(term, transplanted_rank(terms, num_terms, profiles[q].terms[i]));
                fprintf(f, "%s%s", i ? " " : "", term);
            }
            fputc('\n', f);
        }
        free(terms);
    }
    for (uint32_t q = 0; q < o->queries && !(profiles && o->transplant_queries); q++) {
        fprintf(f, "q%u\t", q);
        if (profiles) {
            const query_profile *p = &profiles[rng_next(&r) % num_profiles];
            for (uint32_t i = 0; i < p->n; i++) {
                char term[16];
                name(term, rank_of_rate(rate, vocabulary, p->fractions[i]));
                fprintf(f, "%s%s", i ? " " : "", term);
            }
        } else {
            double u = rng_open_unit(&r);
            uint32_t n = 1;
            while (n < MAX_QUERY_TERMS && u > length_cdf[n - 1]) n++;
            for (uint32_t i = 0; i < n; i++) {
                /* log-uniform over ranks 5 .. vocabulary / 4: queries favour mid-frequency terms */
                double hi = fmax(6.0, vocabulary / 4.0);
                uint32_t rank = (uint32_t)exp(log(5.0) + rng_open_unit(&r) * (log(hi) - log(5.0)));
                char term[16];
                name(term, rank < vocabulary ? rank : vocabulary - 1);
                fprintf(f, "%s%s", i ? " " : "", term);
            }
        }
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the file */

static int put_varint_buf(uint8_t **buf, uint64_t *len, uint64_t *cap, uint32_t v) {
    if (grow((void **)buf, cap, *len + 5, 1)) return -1;
    *len = (uint64_t)(isn_varint_put(*buf + *len, v) - *buf);
    return 0;
}

/* old_of_new and bounds: --order global (NULL otherwise), the documents' original numbers, which name them.
 * statics: each document's static score in the partition's order (NULL for none). */
static int write_index(const char *dir, synth *s, uint32_t num_chunks, const uint32_t *old_of_new, const float *bounds,
                       const float *statics, char *err, size_t err_len, isn_build_summary *summary) {
    int rc = -1;
    uint32_t nd = s->num_docs, nt = s->vocabulary;
    isn_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.num_docs = nd;
    meta.num_terms = nt;
    meta.num_fields = 1;
    meta.k1 = ISN_BM25_DEFAULT_K1;
    meta.b = ISN_BM25_DEFAULT_B;
    meta.analyzer_max_token_bytes = 64;
    meta.num_lex_blocks = (nt + ISN_LEXICON_BLOCK - 1) / ISN_LEXICON_BLOCK;
    meta.flags = (bounds ? ISN_META_SCORE_BOUNDS : 0) | (statics ? ISN_META_HAS_STATIC : 0);
    snprintf(meta.fields[0], sizeof meta.fields[0], "body");

    uint8_t *lens = NULL, *ids = NULL, *lex = NULL;
    uint64_t lens_len = 0, lens_cap = 0, ids_len = 0, ids_cap = 0, lex_len = 0, lex_cap = 0;
    uint64_t *lex_index = malloc(((uint64_t)meta.num_lex_blocks + 1) * sizeof *lex_index);
    if (!lex_index) goto oom;
    for (uint32_t d = 0; d < nd; d++) {
        meta.total_doc_len += s->doc_lens[d];
        char id[16];
        int il = snprintf(id, sizeof id, DOC_NAME_FORMAT, old_of_new ? old_of_new[d] : d);
        /* front coding against the previous id: in input order ids differ only in their last digits */
        uint32_t shared = 0;
        if (d > 0) {
            char prev[16];
            snprintf(prev, sizeof prev, DOC_NAME_FORMAT, old_of_new ? old_of_new[d - 1] : d - 1);
            while (shared < (uint32_t)il && id[shared] == prev[shared]) shared++;
        }
        if (put_varint_buf(&lens, &lens_len, &lens_cap, s->doc_lens[d]) ||
            put_varint_buf(&ids, &ids_len, &ids_cap, shared) ||
            put_varint_buf(&ids, &ids_len, &ids_cap, (uint32_t)il - shared) ||
            grow((void **)&ids, &ids_cap, ids_len + (uint64_t)il, 1))
            goto oom;
        memcpy(ids + ids_len, id + shared, (size_t)il - shared);
        ids_len += (uint64_t)il - shared;
    }
    meta.total_field_len[0] = meta.total_doc_len;
    for (uint32_t t = 0; t < nt; t++) {
        char name[16], prev[16];
        int len = snprintf(name, sizeof name, TERM_NAME_FORMAT, t);
        if (grow((void **)&lex, &lex_cap, lex_len + 2 + (uint64_t)len, 1)) goto oom;
        if (t % ISN_LEXICON_BLOCK == 0) {
            lex_index[t / ISN_LEXICON_BLOCK] = lex_len;
            lex[lex_len++] = (uint8_t)len;
            memcpy(lex + lex_len, name, (size_t)len);
            lex_len += (uint64_t)len;
        } else {
            snprintf(prev, sizeof prev, TERM_NAME_FORMAT, t - 1);
            uint32_t shared = 0;
            while (shared < (uint32_t)len && name[shared] == prev[shared]) shared++;
            lex[lex_len++] = (uint8_t)shared;
            lex[lex_len++] = (uint8_t)(len - (int)shared);
            memcpy(lex + lex_len, name + shared, (size_t)len - shared);
            lex_len += (uint64_t)len - shared;
        }
    }
    lex_index[meta.num_lex_blocks] = lex_len;

    /* stitch the chunks: block offsets and first blocks become global */
    uint64_t payload_base = 0, block_base = 0;
    for (uint32_t c = 0; c < num_chunks; c++) {
        chunk_out *ch = &s->chunks[c];
        if (ch->oom) goto oom;
        for (uint64_t b = 0; b < ch->num_blocks; b++) ch->blocks[b].offset += payload_base;
        for (uint32_t t = s->chunk_first[c]; t < s->chunk_first[c + 1]; t++) s->terms[t].first_block += (uint32_t)block_base;
        payload_base += ch->payload_len;
        block_base += ch->num_blocks;
        meta.num_postings += ch->postings;
    }
    if (block_base > UINT32_MAX) {
        snprintf(err, err_len, "synthetic partition has %llu blocks, above the format's 2^32",
                 (unsigned long long)block_base);
        goto done;
    }
    meta.num_blocks = block_base;

    static const uint8_t slack[ISN_CODEC_READ_SLACK];
    isn_piece *block_pieces = malloc(((size_t)num_chunks + 1) * sizeof *block_pieces);
    isn_piece *payload_pieces = malloc(((size_t)num_chunks + 1) * sizeof *payload_pieces);
    if (!block_pieces || !payload_pieces) {
        free(block_pieces);
        free(payload_pieces);
        goto oom;
    }
    for (uint32_t c = 0; c < num_chunks; c++) {
        block_pieces[c] = (isn_piece){.data = s->chunks[c].blocks, .bytes = s->chunks[c].num_blocks * sizeof(isn_block_meta)};
        payload_pieces[c] = (isn_piece){.data = s->chunks[c].payload, .bytes = s->chunks[c].payload_len};
    }
    payload_pieces[num_chunks] = (isn_piece){.data = slack, .bytes = sizeof slack};
    isn_piece plain[SEC_COUNT] = {
        [SEC_META] = {.data = &meta, .bytes = sizeof meta},
        [SEC_DOC_LENS] = {.data = lens, .bytes = lens_len},
        [SEC_DOC_STATIC] = {.data = statics, .bytes = statics ? (uint64_t)nd * sizeof(float) : 0},
        [SEC_DOCID_TEXT] = {.data = ids, .bytes = ids_len},
        [SEC_LEX_INDEX] = {.data = lex_index, .bytes = ((uint64_t)meta.num_lex_blocks + 1) * 8},
        [SEC_LEX_DATA] = {.data = lex, .bytes = lex_len},
        [SEC_TERMS] = {.data = s->terms, .bytes = (uint64_t)nt * sizeof(isn_term_entry)},
        [SEC_SCORE_BOUNDS] = {.data = bounds, .bytes = bounds ? (uint64_t)nd * sizeof(float) : 0},
    };
    isn_section_pieces lists[SEC_COUNT];
    for (int sec = 0; sec < SEC_COUNT; sec++) lists[sec] = (isn_section_pieces){&plain[sec], 1};
    lists[SEC_BLOCK_META] = (isn_section_pieces){block_pieces, num_chunks};
    lists[SEC_POSTINGS] = (isn_section_pieces){payload_pieces, num_chunks + 1};
    uint64_t bytes[SEC_COUNT], file_bytes;
    /* Version 1: fixed-size term entries and metadata for every block, which its threads write in chunks. */
    int written = isn_index_file_write(dir, 1, lists, bytes, &file_bytes, err, err_len);
    free(block_pieces);
    free(payload_pieces);
    if (written != 0) goto done;
    if (summary) {
        summary->docs = nd;
        summary->terms = nt;
        summary->postings = meta.num_postings;
        summary->tokens = meta.total_doc_len;
        isn_build_summary_set_bytes(summary, bytes, file_bytes); /* sections it does not write count 0 */
    }
    rc = 0;
    goto done;
oom:
    snprintf(err, err_len, "out of memory while writing the synthetic partition");
done:
    free(lens);
    free(ids);
    free(lex);
    free(lex_index);
    return rc;
}

/* The fitted index's document frequencies, largest first, and the query log's profiles when given. */
static int load_fit(const isn_synth_options *o, isn_index **fit, uint32_t **fit_dfs, uint32_t *fit_terms,
                    uint32_t *fit_docs, query_profile **profiles, uint32_t *num_profiles, char *err, size_t err_len) {
    *fit = isn_index_open(o->fit_index, err, err_len);
    if (!*fit) return -1;
    *fit_terms = isn_index_get_info(*fit)->num_terms;
    *fit_docs = isn_index_get_info(*fit)->num_docs;
    if (*fit_terms == 0 || *fit_docs == 0) {
        snprintf(err, err_len, "synth: the fitted index %s is empty", o->fit_index);
        return -1;
    }
    *fit_dfs = malloc(*fit_terms * sizeof **fit_dfs);
    if (!*fit_dfs) {
        snprintf(err, err_len, "synth: out of memory for the fitted index's terms");
        return -1;
    }
    for (uint32_t t = 0; t < *fit_terms; t++) {
        isn_term_stats st;
        isn_index_term_stats(*fit, t, &st);
        (*fit_dfs)[t] = st.df;
    }
    qsort(*fit_dfs, *fit_terms, sizeof **fit_dfs, cmp_u32_desc);
    if (o->fit_queries && !(*profiles = read_query_profiles(o->fit_queries, *fit, num_profiles, err, err_len))) return -1;
    return 0;
}

/* Vocabulary when --vocab is not given: the fitted index's grown as the square root of the documents
 * (Heaps' law with exponent 1/2), else 30 sqrt(tokens). */
static uint32_t default_vocabulary(const isn_synth_options *o, uint32_t fit_terms, uint32_t fit_docs) {
    double tokens = (double)o->docs * o->mean_doc_len;
    return fit_docs ? (uint32_t)fmin(2e7, fit_terms * sqrt((double)o->docs / fit_docs) + 1)
                    : (uint32_t)fmin(2e7, 30.0 * sqrt(tokens) + 1);
}

int isn_synth_build(const char *out_dir, const isn_synth_options *o, isn_build_summary *summary, char *err,
                    size_t err_len) {
    double start = isn_now_seconds();
    if (o->docs == 0) {
        snprintf(err, err_len, "synth: --docs must be at least 1");
        return -1;
    }
    if (!(o->postings_per_doc > 0 && o->postings_per_doc <= 10000) || !(o->mean_doc_len >= 1) ||
        !(o->doc_len_sigma >= 0 && o->doc_len_sigma <= 3) || !(o->zipf_exponent > 0 && o->zipf_exponent <= 4)) {
        snprintf(err, err_len, "synth: postings per doc must be in (0, 10000], mean length >= 1, sigma in [0, 3], "
                               "Zipf exponent in (0, 4]");
        return -1;
    }
    if (check_query_log(o, err, err_len) != 0 || check_prior(o, err, err_len) != 0) return -1;
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "cannot create directory %s: %s", out_dir, strerror(errno));
        return -1;
    }
    uint32_t threads = o->threads ? o->threads : isn_cpus_available();
    int rc = -1;
    uint32_t *fit_dfs = NULL, fit_terms = 0, fit_docs = 0, num_profiles = 0;
    query_profile *profiles = NULL;
    isn_index *fit = NULL;
    synth s;
    memset(&s, 0, sizeof s);
    double *rate = NULL;
    uint32_t *old_of_new = NULL;
    float *bounds = NULL, *statics = NULL;
    if (o->order != ISN_ORDER_INPUT && o->order != ISN_ORDER_GLOBAL) {
        snprintf(err, err_len, "synth: a synthetic partition is in input or global order");
        return -1;
    }
    uint32_t num_chunks = 0;
    if (o->fit_index && load_fit(o, &fit, &fit_dfs, &fit_terms, &fit_docs, &profiles, &num_profiles, err, err_len) != 0)
        goto done;
    s.o = o;
    s.num_docs = o->docs;
    s.vocabulary = o->vocabulary;
    if (s.vocabulary == 0) s.vocabulary = default_vocabulary(o, fit_terms, fit_docs);
    s.k1_plus_1 = ISN_BM25_DEFAULT_K1 + 1.0f;
    s.doc_lens = calloc(s.num_docs, sizeof *s.doc_lens);
    s.target_lens = malloc((size_t)s.num_docs * sizeof *s.target_lens);
    s.norms = malloc((size_t)s.num_docs * sizeof *s.norms);
    rate = malloc((size_t)s.vocabulary * sizeof *rate);
    s.terms = calloc(s.vocabulary, sizeof *s.terms);
    if (!s.doc_lens || !s.target_lens || !s.norms || !rate || !s.terms) goto oom;
    if (o->order == ISN_ORDER_GLOBAL && !(s.max_tfs = calloc(s.num_docs, sizeof *s.max_tfs))) goto oom;
    if (draw_documents(&s, threads) != 0) goto oom;
    uint64_t total_len = 0;
    for (uint32_t d = 0; d < s.num_docs; d++) total_len += s.target_lens[d];
    s.avg_len = (double)total_len / s.num_docs;
    term_rates(o, s.vocabulary, fit_dfs, fit_terms, fit_docs, rate);
    s.rate = rate;

    /* chunks of about equal expected postings, so that the head terms spread over the threads */
    double expected = 0;
    for (uint32_t t = 0; t < s.vocabulary; t++) expected += rate[t];
    double per_chunk = expected / (threads * 8.0);
    s.chunk_first = malloc(((size_t)s.vocabulary + 1) * sizeof *s.chunk_first);
    if (!s.chunk_first) goto oom;
    double acc = 0;
    s.chunk_first[0] = 0;
    for (uint32_t t = 0; t < s.vocabulary; t++) {
        acc += rate[t];
        if (acc >= per_chunk || t + 1 == s.vocabulary) {
            s.chunk_first[++num_chunks] = t + 1;
            acc = 0;
        }
    }
    s.chunks = calloc(num_chunks, sizeof *s.chunks);
    if (!s.chunks) goto oom;
    /* Lengths are the sums of the frequencies (as the builder's are), and the block maxima need the
     * norms of those lengths: one run over the lists sums them, a second draws the same lists again. */
    s.counting = true;
    parallel_for(threads, num_chunks, chunk_task, &s);
    total_len = 0;
    for (uint32_t d = 0; d < s.num_docs; d++) total_len += s.doc_lens[d];
    float avg = isn_avg_len(total_len, s.num_docs);
    isn_bm25_params params = {ISN_BM25_DEFAULT_K1, ISN_BM25_DEFAULT_B};
    if (s.max_tfs) {
        /* --order global: P(d) by the drawn frequencies, the documents renumbered by it, then lengths and
         * norms taken in the new ids that the second run writes the lists in */
        float *parts = malloc((size_t)s.num_docs * sizeof *parts);
        old_of_new = malloc((size_t)s.num_docs * sizeof *old_of_new);
        bounds = malloc((size_t)s.num_docs * sizeof *bounds);
        if (!parts || !old_of_new || !bounds) {
            free(parts);
            goto oom;
        }
        for (uint32_t d = 0; d < s.num_docs; d++) parts[d] = global_best_part(&params, s.max_tfs[d], s.doc_lens[d], avg);
        /* with a prior the order is by GS = P + weight x prior (in bounds for a moment), the bounds P's alone */
        if (s.statics)
            for (uint32_t d = 0; d < s.num_docs; d++) bounds[d] = parts[d] + o->prior_weight * s.statics[d];
        s.new_of_old = global_order_permutation(s.statics ? bounds : parts, s.num_docs);
        if (!s.new_of_old) {
            free(parts);
            goto oom;
        }
        for (uint32_t d = 0; d < s.num_docs; d++) old_of_new[s.new_of_old[d]] = d;
        for (uint32_t nw = 0; nw < s.num_docs; nw++) bounds[nw] = parts[old_of_new[nw]];
        global_suffix_maxima(bounds, s.num_docs);
        free(parts);
        uint32_t *lens = malloc((size_t)s.num_docs * sizeof *lens);
        if (!lens) goto oom;
        for (uint32_t nw = 0; nw < s.num_docs; nw++) lens[nw] = s.doc_lens[old_of_new[nw]];
        free(s.doc_lens);
        s.doc_lens = lens;
    }
    for (uint32_t d = 0; d < s.num_docs; d++) s.norms[d] = isn_bm25_doc_norm(&params, s.doc_lens[d], avg);
    s.counting = false;
    parallel_for(threads, num_chunks, chunk_task, &s);
    if (s.statics) { /* in the partition's order */
        if (!(statics = malloc((size_t)s.num_docs * sizeof *statics))) goto oom;
        for (uint32_t d = 0; d < s.num_docs; d++) statics[d] = s.statics[old_of_new ? old_of_new[d] : d];
    }
    if (write_index(out_dir, &s, num_chunks, old_of_new, bounds, statics, err, err_len, summary) != 0) goto done;
    char queries_path[4200];
    snprintf(queries_path, sizeof queries_path, "%s/queries.tsv", out_dir);
    if (write_queries(queries_path, o, rate, s.vocabulary, profiles, num_profiles, partition_term_name, err, err_len) != 0)
        goto done;
    if (summary) summary->seconds = isn_now_seconds() - start;
    rc = 0;
    goto done;
oom:
    snprintf(err, err_len, "synth: out of memory for %u documents", o->docs);
done:
    if (s.chunks)
        for (uint32_t c = 0; c < num_chunks; c++) {
            free(s.chunks[c].payload);
            free(s.chunks[c].blocks);
        }
    if (s.chunks)
        for (uint32_t c = 0; c < num_chunks; c++) free(s.chunks[c].gathered);
    free(s.chunks);
    free(s.chunk_first);
    free(s.max_tfs);
    free(s.new_of_old);
    free(old_of_new);
    free(bounds);
    free(statics);
    free(s.statics);
    free(s.doc_lens);
    free(s.target_lens);
    free(s.norms);
    free(s.terms);
    free(rate);
    free(fit_dfs);
    free(profiles);
    isn_index_close(fit);
    return rc;
}

/* ------------------------------------------------------------------ JSON Lines text */

/* Documents are drawn in chunks of this many, each chunk's postings drawn term by term as the partition's
 * lists are (geometric gaps at the term's rate), then turned around into text. */
#define JSONL_CHUNK_DOCS (1u << 18)
/* Term names: the rank in base 30 over digits and consonants, so that no name is a stopword or changes
 * under stemming (Snowball touches only words with a vowel), and the frequent terms are short. */
static const char NAME_DIGITS[] = "0123456789bcdfghjklmnpqrstvwxz";

static int text_term_name(char *out, uint32_t rank) {
    char rev[8];
    int n = 0;
    do {
        rev[n++] = NAME_DIGITS[rank % 30];
        rank /= 30;
    } while (rank);
    for (int i = 0; i < n; i++) out[i] = rev[n - 1 - i];
    out[n] = 0;
    return n;
}

typedef struct {
    uint32_t doc; /* within the chunk */
    uint32_t term;
    uint32_t tf;
} text_posting;

typedef struct {
    byte_buffer text;
    text_posting *postings, *sorted;
    uint64_t num_postings, postings_cap;
    uint32_t *tokens;
    uint64_t tokens_cap;
    int oom;
} text_chunk;

typedef struct {
    const isn_synth_options *o;
    uint32_t num_docs, vocabulary, num_chunks;
    const uint32_t *target_lens;
    const float *statics; /* written as "prior" (NULL: none) */
    double avg_len;
    const double *rate, *log_miss;
    uint32_t threads;
    text_chunk *slots; /* one per thread: chunk c uses slot c % threads */
    FILE *out;
    /* chunks are written in order */
    pthread_mutex_t lock;
    pthread_cond_t turn;
    uint32_t next_to_write;
    int write_error;
    uint64_t postings, tokens, bytes;
    _Atomic uint32_t next_chunk;
} text_job;

static int draw_chunk(text_job *j, text_chunk *c, uint32_t chunk) {
    uint32_t first = chunk * JSONL_CHUNK_DOCS, n = j->num_docs - first < JSONL_CHUNK_DOCS ? j->num_docs - first : JSONL_CHUNK_DOCS;
    rng r = rng_for(j->o->seed, 0x30000000000ull + chunk);
    c->num_postings = 0;
    for (uint32_t t = 0; t < j->vocabulary; t++) {
        double log_miss = j->log_miss[t];
        for (uint64_t doc = (uint64_t)floor(log(rng_open_unit(&r)) / log_miss); doc < n;
             doc += 1 + (uint64_t)floor(log(rng_open_unit(&r)) / log_miss)) {
            double lambda = 0.35 * (double)j->target_lens[first + doc] / j->avg_len;
            uint32_t extra = (uint32_t)floor(-log(rng_open_unit(&r)) * lambda);
            if (c->num_postings == c->postings_cap) {
                uint64_t cap = c->postings_cap ? c->postings_cap * 2 : 1 << 20;
                text_posting *p = realloc(c->postings, cap * sizeof *p);
                if (!p) return -1;
                c->postings = p;
                c->postings_cap = cap;
            }
            c->postings[c->num_postings++] = (text_posting){(uint32_t)doc, t, 1 + (extra < MAX_TF ? extra : MAX_TF)};
        }
    }
    /* by document (counting sort), each document's terms in rank order */
    uint32_t *start = calloc((size_t)n + 1, sizeof *start);
    text_posting *sorted = malloc((c->num_postings ? c->num_postings : 1) * sizeof *sorted);
    if (!start || !sorted) {
        free(start);
        free(sorted);
        return -1;
    }
    for (uint64_t i = 0; i < c->num_postings; i++) start[c->postings[i].doc + 1]++;
    for (uint32_t d = 0; d < n; d++) start[d + 1] += start[d];
    for (uint64_t i = 0; i < c->num_postings; i++) sorted[start[c->postings[i].doc]++] = c->postings[i];
    for (uint32_t d = n; d > 0; d--) start[d] = start[d - 1];
    start[0] = 0;
    c->text.len = 0;
    for (uint32_t d = 0; d < n; d++) {
        /* the document's tokens: each term tf times, in a random order */
        uint64_t count = 0;
        for (uint32_t i = start[d]; i < start[d + 1]; i++) count += sorted[i].tf;
        if (count == 0) count = 1;
        if (count > c->tokens_cap) {
            uint32_t *tk = realloc(c->tokens, count * sizeof *tk);
            if (!tk) goto oom;
            c->tokens = tk;
            c->tokens_cap = count;
        }
        uint64_t k = 0;
        for (uint32_t i = start[d]; i < start[d + 1]; i++)
            for (uint32_t x = 0; x < sorted[i].tf; x++) c->tokens[k++] = sorted[i].term;
        if (k == 0) c->tokens[k++] = (uint32_t)(rng_next(&r) % j->vocabulary); /* no empty documents */
        for (uint64_t i = k - 1; i > 0; i--) {
            uint64_t o = rng_next(&r) % (i + 1);
            uint32_t tmp = c->tokens[i];
            c->tokens[i] = c->tokens[o];
            c->tokens[o] = tmp;
        }
        uint64_t title = 1 + k / 16;
        if (!buffer_reserve(&c->text, 128 + (size_t)k * 8)) goto oom;
        char *o = (char *)c->text.data + c->text.len;
        o += sprintf(o, "{\"id\":\"" DOC_NAME_FORMAT "\",\"title\":\"", first + d);
        for (uint64_t i = 0; i < k; i++) {
            if (i == title) o += sprintf(o, "\",\"body\":\"");
            else if (i) *o++ = ' ';
            o += text_term_name(o, c->tokens[i]);
        }
        if (k <= title) o += sprintf(o, "\",\"body\":\"");
        if (j->statics) o += sprintf(o, "\",\"prior\":%.9g}\n", (double)j->statics[first + d]);
        else o += sprintf(o, "\"}\n");
        c->text.len = (size_t)(o - (char *)c->text.data);
        __atomic_fetch_add(&j->tokens, k, __ATOMIC_RELAXED);
    }
    __atomic_fetch_add(&j->postings, c->num_postings, __ATOMIC_RELAXED);
    free(start);
    free(sorted);
    return 0;
oom:
    free(start);
    free(sorted);
    return -1;
}

static void *text_worker(void *arg) {
    text_job *j = arg;
    for (uint32_t chunk; (chunk = atomic_fetch_add(&j->next_chunk, 1)) < j->num_chunks;) {
        /* a thread's slot is free again once its last chunk was written */
        text_chunk *c = &j->slots[chunk % j->threads];
        int rc = draw_chunk(j, c, chunk);
        pthread_mutex_lock(&j->lock);
        while (j->next_to_write != chunk && !j->write_error) pthread_cond_wait(&j->turn, &j->lock);
        if (!j->write_error) {
            if (rc != 0) j->write_error = ENOMEM;
            else if (fwrite(c->text.data, 1, c->text.len, j->out) != c->text.len) j->write_error = errno ? errno : EIO;
            else j->bytes += c->text.len;
        }
        j->next_to_write++;
        pthread_cond_broadcast(&j->turn);
        pthread_mutex_unlock(&j->lock);
    }
    return NULL;
}

int isn_synth_jsonl(const char *out_path, const char *queries_path, const isn_synth_options *o, isn_synth_text_summary *summary,
                    char *err, size_t err_len) {
    double start = isn_now_seconds();
    memset(summary, 0, sizeof *summary);
    if (o->docs == 0) return isn_error(err, err_len, "synth: --docs must be at least 1");
    if (!(o->postings_per_doc > 0 && o->postings_per_doc <= 10000) || !(o->mean_doc_len >= 1) ||
        !(o->doc_len_sigma >= 0 && o->doc_len_sigma <= 3) || !(o->zipf_exponent > 0 && o->zipf_exponent <= 4))
        return isn_error(err, err_len, "synth: postings per doc must be in (0, 10000], mean length >= 1, sigma in [0, 3], "
                                       "Zipf exponent in (0, 4]");
    if (check_query_log(o, err, err_len) != 0 || check_prior(o, err, err_len) != 0) return -1;
    uint32_t threads = o->threads ? o->threads : isn_cpus_available();
    int rc = -1;
    uint32_t *fit_dfs = NULL, fit_terms = 0, fit_docs = 0, num_profiles = 0;
    query_profile *profiles = NULL;
    isn_index *fit = NULL;
    double *rate = NULL, *log_miss = NULL;
    synth s;
    memset(&s, 0, sizeof s);
    text_job j;
    memset(&j, 0, sizeof j);
    pthread_mutex_init(&j.lock, NULL);
    pthread_cond_init(&j.turn, NULL);
    FILE *out = NULL;
    if (o->fit_index && load_fit(o, &fit, &fit_dfs, &fit_terms, &fit_docs, &profiles, &num_profiles, err, err_len) != 0)
        goto done;
    s.o = o;
    s.num_docs = o->docs;
    s.vocabulary = o->vocabulary ? o->vocabulary : default_vocabulary(o, fit_terms, fit_docs);
    s.target_lens = malloc((size_t)s.num_docs * sizeof *s.target_lens);
    rate = malloc((size_t)s.vocabulary * sizeof *rate);
    log_miss = malloc((size_t)s.vocabulary * sizeof *log_miss);
    if (!s.target_lens || !rate || !log_miss) goto oom;
    if (draw_documents(&s, threads) != 0) goto oom;
    uint64_t total_len = 0;
    for (uint32_t d = 0; d < s.num_docs; d++) total_len += s.target_lens[d];
    term_rates(o, s.vocabulary, fit_dfs, fit_terms, fit_docs, rate);
    for (uint32_t t = 0; t < s.vocabulary; t++) log_miss[t] = log1p(-rate[t]);
    out = strcmp(out_path, "-") == 0 ? stdout : fopen(out_path, "w");
    if (!out) {
        isn_error(err, err_len, "cannot create %s: %s", out_path, strerror(errno));
        goto done;
    }
    j = (text_job){.o = o, .num_docs = s.num_docs, .vocabulary = s.vocabulary, .target_lens = s.target_lens, .statics = s.statics,
                   .avg_len = (double)total_len / s.num_docs, .rate = rate, .log_miss = log_miss, .threads = threads,
                   .out = out, .num_chunks = (s.num_docs + JSONL_CHUNK_DOCS - 1) / JSONL_CHUNK_DOCS};
    pthread_mutex_init(&j.lock, NULL);
    pthread_cond_init(&j.turn, NULL);
    atomic_init(&j.next_chunk, 0);
    j.slots = calloc(threads, sizeof *j.slots);
    if (!j.slots) goto oom;
    pthread_t ids[256];
    uint32_t started = 0;
    for (; started + 1 < threads && started < 256; started++)
        if (pthread_create(&ids[started], NULL, text_worker, &j) != 0) break;
    text_worker(&j);
    for (uint32_t i = 0; i < started; i++) pthread_join(ids[i], NULL);
    if (!j.write_error && fflush(out) != 0) j.write_error = errno ? errno : EIO;
    if (j.write_error == ENOMEM) goto oom;
    if (j.write_error) {
        isn_error(err, err_len, "cannot write %s: %s", out_path, strerror(j.write_error));
        goto done;
    }
    if (queries_path && o->queries &&
        write_queries(queries_path, o, rate, s.vocabulary, profiles, num_profiles, text_term_name, err, err_len) != 0)
        goto done;
    summary->docs = s.num_docs;
    summary->vocabulary = s.vocabulary;
    summary->postings = j.postings;
    summary->tokens = j.tokens;
    summary->bytes = j.bytes;
    summary->seconds = isn_now_seconds() - start;
    rc = 0;
    goto done;
oom:
    isn_error(err, err_len, "synth: out of memory for %u documents", o->docs);
done:
    if (out && out != stdout && fclose(out) != 0 && rc == 0) rc = isn_error(err, err_len, "cannot write %s: %s", out_path, strerror(errno));
    for (uint32_t i = 0; j.slots && i < threads; i++) {
        buffer_free(&j.slots[i].text);
        free(j.slots[i].postings);
        free(j.slots[i].tokens);
    }
    free(j.slots);
    pthread_mutex_destroy(&j.lock);
    pthread_cond_destroy(&j.turn);
    free(s.target_lens);
    free(s.statics);
    free(rate);
    free(log_miss);
    free(fit_dfs);
    free(profiles);
    isn_index_close(fit);
    return rc;
}
