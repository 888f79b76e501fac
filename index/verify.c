/* Deep structural verification: decodes every list and recomputes what the metadata claims. */
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "index/reader.h"

static int verify_lexicon(const isn_index *ix, char *err, size_t err_len) {
    char prev[ISN_MAX_TERM_BYTES + 1], cur[ISN_MAX_TERM_BYTES + 1];
    size_t prev_len = 0;
    for (uint32_t t = 0; t < ix->meta->num_terms; t++) {
        size_t len = isn_index_term_text(ix, t, cur, sizeof cur);
        if (len == 0 || len > ix->meta->analyzer_max_token_bytes)
            return isn_error(err, err_len, "section 'lex_data': term %u has length %zu", t, len);
        if (t) {
            int c = memcmp(prev, cur, prev_len < len ? prev_len : len);
            if (c > 0 || (c == 0 && prev_len >= len))
                return isn_error(err, err_len, "section 'lex_data': terms %u and %u are not in strictly increasing order", t - 1, t);
        }
        uint32_t found;
        if (!isn_index_find_term(ix, cur, len, &found) || found != t)
            return isn_error(err, err_len, "section 'lex_data': term %u (\"%s\") is not found by lookup", t, cur);
        memcpy(prev, cur, len);
        prev_len = len;
    }
    return 0;
}

/* The lists' pass, shared by the verifying threads: terms are handed out one at a time (their lengths are
 * Zipfian, so fixed shares would leave one thread with the longest lists); the documents' token counts
 * and largest frequencies add up atomically. Of the terms that fail, the lowest one's error is reported,
 * so that the message is the same on any number of threads. */
typedef struct {
    const isn_index *ix;
    uint64_t *doc_tokens;
    uint32_t *max_tfs;
    bool shared; /* more than one thread: atomic updates */
    _Atomic uint32_t next_term;
    _Atomic bool failed;
    pthread_mutex_t lock;
    uint32_t failed_term;
    char err[ISN_ERR_LEN];
} lists_pass;

static void add_tokens(lists_pass *p, uint32_t doc, uint32_t tf) {
    if (!p->shared) {
        p->doc_tokens[doc] += tf;
        if (p->max_tfs && tf > p->max_tfs[doc]) p->max_tfs[doc] = tf;
        return;
    }
    __atomic_fetch_add(&p->doc_tokens[doc], tf, __ATOMIC_RELAXED);
    if (!p->max_tfs) return;
    uint32_t seen = __atomic_load_n(&p->max_tfs[doc], __ATOMIC_RELAXED);
    while (tf > seen && !__atomic_compare_exchange_n(&p->max_tfs[doc], &seen, tf, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static int verify_list(lists_pass *p, uint32_t t, char *err, size_t err_len) {
    const isn_index *ix = p->ix;
    const isn_meta *m = ix->meta;
    const uint32_t nd = m->num_docs;
    const float k1p1 = m->k1 + 1.0f;
    const isn_term_entry *e = &ix->terms[t];
    uint32_t docs[ISN_BLOCK_SIZE], freqs[ISN_BLOCK_SIZE];
    uint64_t cf = 0;
    float list_max = 0.0f;
    for (uint32_t b = 0; b < isn_term_num_blocks(e); b++) {
        const isn_block_meta *bm = &ix->blocks[e->first_block + b];
        uint32_t count;
        const uint8_t *fp = isn_block_decode_docs(ix, e, b, docs, &count);
        const uint8_t *next = fp + isn_codec_encoded_size(fp, count);
        uint64_t next_off = e->first_block + b + 1 < m->num_blocks ? ix->blocks[e->first_block + b + 1].offset
                                                                    : ix->postings_bytes - ISN_CODEC_READ_SLACK;
        if ((uint64_t)(next - ix->postings) != next_off)
            return isn_error(err, err_len, "section 'postings': block %u of term %u does not end where the next begins", b, t);
        isn_codec_decode(fp, count, freqs);
        float block_max = 0.0f;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t prev = i ? docs[i - 1] : (b ? ix->blocks[e->first_block + b - 1].last_doc : 0);
            if (docs[i] >= nd || ((i || b) && docs[i] <= prev))
                return isn_error(err, err_len, "section 'postings': term %u block %u: doc ids not strictly increasing below %u", t, b, nd);
            uint32_t tf = freqs[i] + 1;
            cf += tf;
            add_tokens(p, docs[i], tf);
            float part = isn_bm25_tf_part(k1p1, tf, ix->norms[docs[i]]);
            if (part > block_max) block_max = part;
        }
        if (docs[count - 1] != bm->last_doc)
            return isn_error(err, err_len, "section 'block_meta': term %u block %u last doc %u, postings end at %u", t, b, bm->last_doc, docs[count - 1]);
        if (block_max != bm->max_tf_part)
            return isn_error(err, err_len, "section 'block_meta': term %u block %u maximum %g, real maximum %g", t, b, bm->max_tf_part, block_max);
        if (block_max > list_max) list_max = block_max;
    }
    if (cf > UINT32_MAX) cf = UINT32_MAX;
    if (cf != e->cf)
        return isn_error(err, err_len, "section 'terms': term %u cf %llu, postings sum to %llu", t, (unsigned long long)e->cf, (unsigned long long)cf);
    if (list_max != e->max_tf_part)
        return isn_error(err, err_len, "section 'terms': term %u maximum %g, real maximum %g", t, e->max_tf_part, list_max);
    return 0;
}

static void *verify_lists(void *arg) {
    lists_pass *p = arg;
    char why[ISN_ERR_LEN];
    for (;;) {
        uint32_t t = atomic_fetch_add(&p->next_term, 1);
        if (t >= p->ix->meta->num_terms || atomic_load(&p->failed)) return NULL;
        if (verify_list(p, t, why, sizeof why) == 0) continue;
        pthread_mutex_lock(&p->lock);
        if (t < p->failed_term) {
            p->failed_term = t;
            snprintf(p->err, sizeof p->err, "%s", why);
        }
        pthread_mutex_unlock(&p->lock);
        /* lower terms still in other threads' hands finish (one of them may fail too); no new one starts */
        atomic_store(&p->failed, true);
        return NULL;
    }
}

int isn_index_verify(const isn_index *ix, char *err, size_t err_len) { return isn_index_verify_threads(ix, 1, err, err_len); }

int isn_index_verify_threads(const isn_index *ix, uint32_t threads, char *err, size_t err_len) {
    const isn_meta *m = ix->meta;
    uint32_t nd = m->num_docs;
    if (verify_lexicon(ix, err, err_len) != 0 || isn_index_verify_stored(ix, err, err_len) != 0) return -1;
    uint64_t *doc_tokens = calloc(nd ? nd : 1, sizeof *doc_tokens);
    uint32_t *max_tfs = ix->score_bounds ? calloc(nd ? nd : 1, sizeof *max_tfs) : NULL;
    if (!doc_tokens || (ix->score_bounds && !max_tfs)) {
        free(doc_tokens);
        free(max_tfs);
        return isn_error(err, err_len, "out of memory");
    }
    float k1p1 = m->k1 + 1.0f;
    if (threads == 0) threads = 1;
    if (threads > m->num_terms) threads = m->num_terms ? m->num_terms : 1;
    lists_pass pass = {.ix = ix, .doc_tokens = doc_tokens, .max_tfs = max_tfs, .shared = threads > 1,
                       .failed_term = UINT32_MAX};
    pthread_mutex_init(&pass.lock, NULL);
    pthread_t *ids = threads > 1 ? calloc(threads - 1, sizeof *ids) : NULL;
    uint32_t started = 0;
    if (ids)
        for (; started < threads - 1; started++)
            if (pthread_create(&ids[started], NULL, verify_lists, &pass) != 0) break;
    verify_lists(&pass); /* this thread too; with no other started, it does every list */
    for (uint32_t i = 0; i < started; i++) pthread_join(ids[i], NULL);
    free(ids);
    pthread_mutex_destroy(&pass.lock);
    int rc = 0;
    if (pass.failed_term != UINT32_MAX) rc = isn_error(err, err_len, "%s", pass.err);
    uint64_t total = 0;
    for (uint32_t d = 0; d < nd && rc == 0; d++) {
        uint32_t len = isn_index_doc_len(ix, d);
        total += len;
        if (doc_tokens[d] != len && !(m->flags & ISN_META_EXTERNAL_TERMS)) /* imported lengths are the source's */
            rc = isn_error(err, err_len, "section 'doc_lens': document %u has length %u but %llu postings tokens", d, len, (unsigned long long)doc_tokens[d]);
    }
    if (rc == 0 && total != m->total_doc_len)
        rc = isn_error(err, err_len, "section 'meta': total length %llu, documents sum to %llu", (unsigned long long)m->total_doc_len, (unsigned long long)total);
    /* the bounds: suffix maxima of each document's best term part, recomputed from its largest frequency */
    float suffix = 0.0f;
    for (uint32_t d = nd; max_tfs && rc == 0 && d-- > 0;) {
        float part = isn_bm25_tf_part(k1p1, max_tfs[d], ix->norms[d]);
        if (part > suffix) suffix = part;
        if (ix->score_bounds[d] != suffix)
            rc = isn_error(err, err_len, "section 'score_bounds': document %u has bound %g, real bound %g", d,
                           (double)ix->score_bounds[d], (double)suffix);
    }
    free(doc_tokens);
    free(max_tfs);
    return rc;
}
