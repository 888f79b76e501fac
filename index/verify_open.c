/* Structural checks at open, so that no index file, however crafted, makes any reader of it (the
 * lexicon, CPU cursors, the threshold probe, the GPU upload and kernels) read out of bounds or loop
 * without end. Checksums catch accidents, not a file built to pass them.
 *
 * The lexicon: each front-coded block holds exactly its share of the terms, every entry inside the
 * block, no shared prefix longer than the term before it, no term longer than ISN_MAX_TERM_BYTES or
 * empty (isn_index_term_text and the lookups copy terms into fixed buffers).
 *
 * What every reader relies on, and is checked here for every block:
 *   - both encodings (doc gaps, then frequencies) are well-formed and end before the next block
 *     begins (the last one before the payload's padding), so decoding stays inside the section;
 *   - the decoded doc ids are strictly increasing, below num_docs, and the last one is the block's
 *     last_doc: a cursor's skip loop ("the block's last doc >= target bounds this") ends, and every
 *     doc indexes the norms, lengths and ids safely;
 *   - block and term score bounds are finite and not negative (WAND-style pivots compare them).
 * Frequencies are not decoded: any value is a valid frequency. The deep check of what the metadata
 * claims (cf, maxima, lengths) stays in isn_index_verify. */
#include <math.h>

#include "index/reader.h"

static bool valid_bound(float value) { return isfinite(value) && value >= 0.0f; }

/* One front-coded block holds exactly `terms` well-formed entries and nothing after them. */
static bool lexicon_block_ok(const uint8_t *p, const uint8_t *end, uint32_t terms) {
    size_t len = 0;
    for (uint32_t i = 0; i < terms; i++) {
        size_t shared = 0, suffix;
        if (i == 0) {
            if (p >= end) return false;
            suffix = *p++;
        } else {
            if (end - p < 2) return false;
            shared = p[0], suffix = p[1];
            p += 2;
        }
        if (shared > len || suffix > (size_t)(end - p) || shared + suffix == 0 || shared + suffix > ISN_MAX_TERM_BYTES)
            return false;
        p += suffix;
        len = shared + suffix;
    }
    return p == end;
}

int isn_index_check_lexicon(const isn_index *ix, char *err, size_t err_len) {
    const isn_meta *m = ix->meta;
    for (uint32_t block = 0; block < m->num_lex_blocks; block++) {
        uint32_t terms = block + 1 < m->num_lex_blocks ? ISN_LEXICON_BLOCK : m->num_terms - block * ISN_LEXICON_BLOCK;
        if (!lexicon_block_ok(ix->lex_data + ix->lex_index[block], ix->lex_data + ix->lex_index[block + 1], terms))
            return isn_error(err, err_len, "section 'lex_data': lexicon block %u is malformed", block);
    }
    return 0;
}

int isn_index_check_postings(const isn_index *ix, char *err, size_t err_len) {
    return isn_index_check_postings_range(ix, 0, ix->meta->num_terms, err, err_len);
}

int isn_index_check_postings_range(const isn_index *ix, uint32_t from, uint32_t to, char *err, size_t err_len) {
    const isn_meta *m = ix->meta;
    uint64_t payload_end = ix->postings_bytes - ISN_CODEC_READ_SLACK;
    uint32_t gaps[ISN_BLOCK_SIZE];
    for (uint32_t t = from; t < to; t++) {
        const isn_term_entry *e = &ix->terms[t];
        if (!valid_bound(e->max_tf_part))
            return isn_error(err, err_len, "section 'terms': term %u has score bound %g", t, e->max_tf_part);
        uint32_t num_blocks = isn_term_num_blocks(e);
        for (uint32_t b = 0; b < num_blocks; b++) {
            uint64_t global = (uint64_t)e->first_block + b;
            const isn_block_meta *bm = &ix->blocks[global];
            uint64_t end = global + 1 < m->num_blocks ? ix->blocks[global + 1].offset : payload_end;
            uint32_t count = b + 1 == num_blocks ? e->df - b * ISN_BLOCK_SIZE : ISN_BLOCK_SIZE;
            const uint8_t *start = ix->postings + bm->offset;
            size_t doc_bytes = isn_codec_encoded_size(start, count);
            /* the frequencies' header is read only once the docs are known to end inside the block */
            size_t freq_bytes = doc_bytes && bm->offset + doc_bytes < end ? isn_codec_encoded_size(start + doc_bytes, count) : 0;
            if (!doc_bytes || !freq_bytes || bm->offset + doc_bytes + freq_bytes > end)
                return isn_error(err, err_len, "section 'postings': block %u of term %u is malformed or overruns its space", b, t);
            if (!valid_bound(bm->max_tf_part))
                return isn_error(err, err_len, "section 'block_meta': block %u of term %u has score bound %g", b, t,
                                 bm->max_tf_part);
            if (isn_codec_decode(start, count, gaps) != doc_bytes)
                return isn_error(err, err_len, "section 'postings': block %u of term %u does not decode", b, t);
            uint64_t doc = b ? (uint64_t)ix->blocks[global - 1].last_doc : UINT64_MAX;
            for (uint32_t i = 0; i < count; i++) {
                doc += (uint64_t)gaps[i] + 1; /* from UINT64_MAX: wraps to the first gap, as the cursors read it */
                if (doc >= m->num_docs)
                    return isn_error(err, err_len, "section 'postings': block %u of term %u holds doc %llu of %u", b, t,
                                     (unsigned long long)doc, m->num_docs);
            }
            if (doc != bm->last_doc)
                return isn_error(err, err_len, "section 'postings': block %u of term %u ends at doc %llu, its metadata says %u",
                                 b, t, (unsigned long long)doc, bm->last_doc);
        }
    }
    return 0;
}
