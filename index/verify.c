/* Deep structural verification: decodes every list and recomputes what the metadata claims. */
#include <stdio.h>
#include <stdlib.h>
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

int isn_index_verify(const isn_index *ix, char *err, size_t err_len) {
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
    uint32_t docs[ISN_BLOCK_SIZE], freqs[ISN_BLOCK_SIZE];
    int rc = 0;
    for (uint32_t t = 0; t < m->num_terms && rc == 0; t++) {
        const isn_term_entry *e = &ix->terms[t];
        uint64_t cf = 0;
        float list_max = 0.0f;
        for (uint32_t b = 0; b < isn_term_num_blocks(e) && rc == 0; b++) {
            const isn_block_meta *bm = &ix->blocks[e->first_block + b];
            uint32_t count;
            const uint8_t *fp = isn_block_decode_docs(ix, e, b, docs, &count);
            const uint8_t *next = fp + isn_codec_encoded_size(fp, count);
            uint64_t next_off = e->first_block + b + 1 < m->num_blocks ? ix->blocks[e->first_block + b + 1].offset
                                                                        : ix->postings_bytes - ISN_CODEC_READ_SLACK;
            if ((uint64_t)(next - ix->postings) != next_off) {
                rc = isn_error(err, err_len, "section 'postings': block %u of term %u does not end where the next begins", b, t);
                break;
            }
            isn_codec_decode(fp, count, freqs);
            float block_max = 0.0f;
            for (uint32_t i = 0; i < count; i++) {
                uint32_t prev = i ? docs[i - 1] : (b ? ix->blocks[e->first_block + b - 1].last_doc : 0);
                if (docs[i] >= nd || ((i || b) && docs[i] <= prev)) {
                    rc = isn_error(err, err_len, "section 'postings': term %u block %u: doc ids not strictly increasing below %u", t, b, nd);
                    break;
                }
                uint32_t tf = freqs[i] + 1;
                cf += tf;
                doc_tokens[docs[i]] += tf;
                if (max_tfs && tf > max_tfs[docs[i]]) max_tfs[docs[i]] = tf;
                float part = isn_bm25_tf_part(k1p1, tf, ix->norms[docs[i]]);
                if (part > block_max) block_max = part;
            }
            if (rc) break;
            if (docs[count - 1] != bm->last_doc)
                rc = isn_error(err, err_len, "section 'block_meta': term %u block %u last doc %u, postings end at %u", t, b, bm->last_doc, docs[count - 1]);
            else if (block_max != bm->max_tf_part)
                rc = isn_error(err, err_len, "section 'block_meta': term %u block %u maximum %g, real maximum %g", t, b, bm->max_tf_part, block_max);
            if (block_max > list_max) list_max = block_max;
        }
        if (cf > UINT32_MAX) cf = UINT32_MAX;
        if (rc == 0 && cf != e->cf) rc = isn_error(err, err_len, "section 'terms': term %u cf %llu, postings sum to %llu", t, (unsigned long long)e->cf, (unsigned long long)cf);
        if (rc == 0 && list_max != e->max_tf_part) rc = isn_error(err, err_len, "section 'terms': term %u maximum %g, real maximum %g", t, e->max_tf_part, list_max);
    }
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
