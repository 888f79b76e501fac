/* Opens an index file: maps it, validates every section, exposes documents and the lexicon. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/analyzer_internal.h"
#include "index/reader.h"

const char *const isn_section_names[SEC_COUNT] = {
    "meta", "doc_lens", "doc_static", "docid_text", "lex_index",
    "lex_data", "terms", "block_meta", "postings", "pos_blocks", "positions", "stored", "score_bounds",
};

static int check_size(const isn_section_entry *table, int s, uint64_t expected, char *err, size_t err_len) {
    if (table[s].bytes != expected)
        return isn_error(err, err_len, "section '%s' has %llu bytes, expected %llu", isn_section_names[s],
                    (unsigned long long)table[s].bytes, (unsigned long long)expected);
    return 0;
}

static int check_sections(isn_index *ix, const isn_section_entry *table, char *err, size_t err_len) {
    const isn_meta *m = ix->meta;
    uint64_t nd = m->num_docs, nf = m->num_fields, nt = m->num_terms, nb = m->num_blocks;
    if (nf == 0 || nf > ISN_MAX_FIELDS) return isn_error(err, err_len, "section 'meta': %u fields (1..%d allowed)", m->num_fields, ISN_MAX_FIELDS);
    for (uint64_t f = 0; f < nf; f++)
        if (memchr(m->fields[f], 0, ISN_FIELD_NAME_MAX) == NULL) return isn_error(err, err_len, "section 'meta': field name %llu is not terminated", (unsigned long long)f);
    if (m->num_lex_blocks != (nt + ISN_LEXICON_BLOCK - 1) / ISN_LEXICON_BLOCK)
        return isn_error(err, err_len, "section 'meta': %u lexicon blocks for %u terms", m->num_lex_blocks, m->num_terms);
    if (m->analyzer_max_token_bytes == 0 || m->analyzer_max_token_bytes > ISN_MAX_TERM_BYTES)
        return isn_error(err, err_len, "section 'meta': analyzer max token bytes %u out of range", m->analyzer_max_token_bytes);
    if (!(m->k1 >= 0.0f && m->k1 < 1000.0f && m->b >= 0.0f && m->b <= 1.0f))
        return isn_error(err, err_len, "section 'meta': BM25 parameters k1=%g b=%g out of range", m->k1, m->b);
    if (check_size(table, SEC_DOC_STATIC, (m->flags & ISN_META_HAS_STATIC) ? nd * 4 : 0, err, err_len) ||
        check_size(table, SEC_LEX_INDEX, ((uint64_t)m->num_lex_blocks + 1) * 8, err, err_len) ||
        (ix->version == 1 && (check_size(table, SEC_TERMS, nt * sizeof(isn_term_entry), err, err_len) ||
                              check_size(table, SEC_BLOCK_META, nb * sizeof(isn_block_meta), err, err_len))) ||
        check_size(table, SEC_POS_BLOCKS, (m->flags & ISN_META_HAS_POSITIONS) ? nb * 8 : 0, err, err_len))
        return -1;
    if (table[SEC_POSTINGS].bytes < ISN_CODEC_READ_SLACK)
        return isn_error(err, err_len, "section 'postings' is shorter than its padding");

    for (uint64_t i = 0; i <= m->num_lex_blocks; i++)
        if (ix->lex_index[i] > table[SEC_LEX_DATA].bytes || (i && ix->lex_index[i] < ix->lex_index[i - 1]))
            return isn_error(err, err_len, "section 'lex_index': block %llu offset out of order or range", (unsigned long long)i);
    if (ix->lex_index[m->num_lex_blocks] != table[SEC_LEX_DATA].bytes)
        return isn_error(err, err_len, "section 'lex_index' does not cover section 'lex_data'");

    uint64_t postings = 0, next_block = 0;
    uint64_t payload_end = table[SEC_POSTINGS].bytes - ISN_CODEC_READ_SLACK;
    for (uint64_t t = 0; t < nt; t++) {
        const isn_term_entry *e = &ix->terms[t];
        uint32_t num_blocks = isn_term_num_blocks(e);
        if (e->df == 0 || e->df > nd || e->first_block != next_block || (uint64_t)e->first_block + num_blocks > nb)
            return isn_error(err, err_len, "section 'terms': term %llu has inconsistent df/block counts", (unsigned long long)t);
        next_block += num_blocks;
        postings += e->df;
        uint32_t prev_last = 0;
        for (uint32_t k = 0; k < num_blocks; k++) {
            const isn_block_meta *bm = &ix->blocks[e->first_block + k];
            if (bm->last_doc >= nd || (k && bm->last_doc <= prev_last) || bm->offset >= payload_end ||
                (e->first_block + k && bm->offset <= ix->blocks[e->first_block + k - 1].offset))
                return isn_error(err, err_len, "section 'block_meta': block %llu of term %llu is out of order or range",
                            (unsigned long long)k, (unsigned long long)t);
            if (ix->pos_blocks && ix->pos_blocks[e->first_block + k] > table[SEC_POSITIONS].bytes)
                return isn_error(err, err_len, "section 'pos_blocks': block %llu points past the positions", (unsigned long long)(e->first_block + k));
            prev_last = bm->last_doc;
        }
    }
    if (next_block != nb || postings != m->num_postings)
        return isn_error(err, err_len, "section 'terms' does not account for all %llu blocks / %llu postings",
                    (unsigned long long)nb, (unsigned long long)m->num_postings);
    return 0;
}

/* Bytes of the block (doc gaps, then frequencies) at `offset`, 0 when it is malformed or does not end
 * before `payload_end`. */
static uint64_t block_bytes(const uint8_t *postings, uint64_t offset, uint64_t payload_end, uint32_t count) {
    if (offset >= payload_end) return 0;
    size_t docs = isn_codec_encoded_size(postings + offset, count);
    if (docs == 0 || docs >= payload_end - offset) return 0;
    size_t freqs = isn_codec_encoded_size(postings + offset + docs, count);
    if (freqs == 0 || freqs > payload_end - offset - docs) return 0;
    return docs + freqs;
}

/* Version 2 stores term entries compactly and leaves out the metadata of single-block lists (most
 * lists); both are rebuilt here into the arrays version 1 stored, so that everything after open
 * (cursors, isn_index_block_metas for the GPU) sees one layout. The lists lie in the payload one after
 * the other in term order, which is where a single block's offset comes from. */
static int expand_terms_and_blocks(isn_index *ix, const isn_section_entry *table, const uint8_t *terms,
                                   const isn_block_meta *stored, char *err, size_t err_len) {
    const isn_meta *m = ix->meta;
    uint64_t nt = m->num_terms, nb = m->num_blocks, nd = m->num_docs;
    uint64_t postings_bytes = table[SEC_POSTINGS].bytes;
    if (postings_bytes < ISN_CODEC_READ_SLACK) return isn_error(err, err_len, "section 'postings' is shorter than its padding");
    uint64_t payload_end = postings_bytes - ISN_CODEC_READ_SLACK;
    /* Bounds before allocating: an entry takes 6 bytes at least, a block 2. */
    if (nt > table[SEC_TERMS].bytes / 6 || nb > payload_end / 2 || nb < nt)
        return isn_error(err, err_len, "section 'meta': %llu terms and %llu blocks do not fit the sections", (unsigned long long)nt,
                         (unsigned long long)nb);
    if (table[SEC_BLOCK_META].bytes % sizeof(isn_block_meta))
        return isn_error(err, err_len, "section 'block_meta' is not a whole number of entries");
    uint64_t num_stored = table[SEC_BLOCK_META].bytes / sizeof(isn_block_meta);
    ix->terms_owned = malloc((nt ? nt : 1) * sizeof *ix->terms_owned);
    ix->blocks_owned = malloc((nb ? nb : 1) * sizeof *ix->blocks_owned);
    if (!ix->terms_owned || !ix->blocks_owned) return isn_error(err, err_len, "out of memory for %llu terms", (unsigned long long)nt);
    const uint8_t *p = terms, *end = terms + table[SEC_TERMS].bytes;
    uint64_t block = 0, used_stored = 0, pos = 0;
    uint32_t docs[ISN_BLOCK_SIZE];
    for (uint64_t t = 0; t < nt; t++) {
        uint32_t df, extra;
        if (!(p = isn_varint_get(p, end, &df)) || !(p = isn_varint_get(p, end, &extra)) || end - p < 4 || df == 0 ||
            df > nd || extra > UINT32_MAX - df)
            return isn_error(err, err_len, "section 'terms' is malformed at term %llu", (unsigned long long)t);
        isn_term_entry *e = &ix->terms_owned[t];
        e->df = df;
        e->cf = df + extra;
        memcpy(&e->max_tf_part, p, sizeof e->max_tf_part);
        p += sizeof e->max_tf_part;
        uint32_t num_blocks = isn_term_num_blocks(e);
        if (block + num_blocks > nb)
            return isn_error(err, err_len, "section 'terms': term %llu has more blocks than the index", (unsigned long long)t);
        e->first_block = (uint32_t)block;
        isn_block_meta *bm = &ix->blocks_owned[block];
        if (num_blocks == 1) {
            uint64_t bytes = block_bytes(ix->postings, pos, payload_end, df);
            if (bytes == 0 || isn_codec_decode(ix->postings + pos, df, docs) == 0)
                return isn_error(err, err_len, "section 'postings': the block of term %llu is malformed", (unsigned long long)t);
            uint64_t last = 0; /* gaps are doc - previous - 1, from -1 */
            for (uint32_t i = 0; i < df; i++) last += (uint64_t)docs[i] + 1;
            if (last == 0 || last - 1 >= nd)
                return isn_error(err, err_len, "section 'postings': term %llu has doc ids past %llu", (unsigned long long)t,
                                 (unsigned long long)nd);
            *bm = (isn_block_meta){.last_doc = (uint32_t)(last - 1), .max_tf_part = e->max_tf_part, .offset = pos};
            pos += bytes;
        } else {
            if (used_stored + num_blocks > num_stored)
                return isn_error(err, err_len, "section 'block_meta' has fewer blocks than the terms need");
            memcpy(bm, stored + used_stored, num_blocks * sizeof *bm);
            used_stored += num_blocks;
            const isn_block_meta *last = &bm[num_blocks - 1];
            uint64_t bytes = block_bytes(ix->postings, last->offset, payload_end, df - (num_blocks - 1) * ISN_BLOCK_SIZE);
            if (bm[0].offset != pos || bytes == 0)
                return isn_error(err, err_len, "section 'block_meta': the blocks of term %llu are not where its list lies",
                                 (unsigned long long)t);
            pos = last->offset + bytes;
        }
        block += num_blocks;
    }
    if (p != end || block != nb || used_stored != num_stored || pos != payload_end)
        return isn_error(err, err_len, "section 'terms' does not account for all %llu blocks and the postings", (unsigned long long)nb);
    ix->terms = ix->terms_owned;
    ix->blocks = ix->blocks_owned;
    return 0;
}

/* Document lengths and external ids are compressed on disk and expanded once here: every query needs
 * the lengths (norms) and every reply the ids, so random access must be cheap. */
static int decode_documents(isn_index *ix, const uint8_t *lens, uint64_t lens_bytes, const uint8_t *ids,
                            uint64_t ids_bytes, char *err, size_t err_len) {
    uint64_t nd = ix->meta->num_docs, nf = ix->meta->num_fields;
    /* Sizes come from the file: bound them by the sections before allocating (every length takes a
     * byte at least, every id two), so that a crafted count cannot ask for gigabytes. */
    if (nd * nf > lens_bytes || nd * 2 > ids_bytes)
        return isn_error(err, err_len, "section 'meta': %llu documents do not fit sections 'doc_lens' and 'docid_text'",
                         (unsigned long long)nd);
    ix->doc_lens = malloc((nd * nf + 1) * sizeof *ix->doc_lens);
    ix->docid_offs = malloc((nd + 1) * sizeof *ix->docid_offs);
    uint64_t text_cap = ids_bytes * 4 + 64, text_len = 0;
    ix->docid_text = malloc(text_cap);
    if (!ix->doc_lens || !ix->docid_offs || !ix->docid_text) return isn_error(err, err_len, "out of memory for %llu documents", (unsigned long long)nd);
    const uint8_t *p = lens, *end = lens + lens_bytes;
    uint64_t total = 0;
    for (uint64_t i = 0; i < nd * nf; i++) {
        if (!(p = isn_varint_get(p, end, &ix->doc_lens[i])))
            return isn_error(err, err_len, "section 'doc_lens' ends inside document %llu", (unsigned long long)(i / nf));
        total += ix->doc_lens[i];
    }
    if (p != end || total != ix->meta->total_doc_len)
        return isn_error(err, err_len, "section 'doc_lens' does not match %llu documents of total length %llu",
                    (unsigned long long)nd, (unsigned long long)ix->meta->total_doc_len);
    p = ids;
    end = ids + ids_bytes;
    ix->docid_offs[0] = 0;
    uint32_t prev_len = 0;
    for (uint64_t d = 0; d < nd; d++) {
        uint32_t shared, suffix;
        if (!(p = isn_varint_get(p, end, &shared)) || !(p = isn_varint_get(p, end, &suffix)) || shared > prev_len ||
            suffix > (uint64_t)(end - p) || (uint64_t)shared + suffix == 0)
            return isn_error(err, err_len, "section 'docid_text' is malformed at document %llu", (unsigned long long)d);
        /* Front coding can make ids grow without bound (each one the last plus a byte): no real set of
         * ids expands to more than 64 times its coded size. */
        if (text_len + shared + suffix > 64 * ids_bytes + 65536)
            return isn_error(err, err_len, "section 'docid_text' expands past 64 times its size at document %llu",
                             (unsigned long long)d);
        if (text_len + shared + suffix > text_cap) {
            while (text_len + shared + suffix > text_cap) text_cap *= 2;
            char *t = realloc(ix->docid_text, text_cap);
            if (!t) return isn_error(err, err_len, "out of memory for external ids");
            ix->docid_text = t;
        }
        memmove(ix->docid_text + text_len, ix->docid_text + text_len - prev_len, shared);
        memcpy(ix->docid_text + text_len + shared, p, suffix);
        p += suffix;
        prev_len = shared + suffix;
        text_len += prev_len;
        ix->docid_offs[d + 1] = text_len;
    }
    if (p != end) return isn_error(err, err_len, "section 'docid_text' has bytes past the last document");
    return 0;
}

static void fill_info(isn_index *ix, const isn_section_entry *table) {
    const isn_meta *m = ix->meta;
    isn_index_info *in = &ix->info;
    in->version = ix->version;
    in->num_docs = m->num_docs;
    in->num_terms = m->num_terms;
    in->num_fields = m->num_fields;
    memcpy(in->fields, m->fields, sizeof in->fields);
    in->num_postings = m->num_postings;
    in->num_blocks = m->num_blocks;
    in->total_doc_len = m->total_doc_len;
    in->avg_doc_len = isn_avg_len(m->total_doc_len, m->num_docs);
    for (uint32_t f = 0; f < m->num_fields; f++) in->avg_field_len[f] = isn_avg_len(m->total_field_len[f], m->num_docs);
    in->analyzer.stem = m->analyzer_stem != 0;
    in->analyzer.stopwords = m->analyzer_stopwords != 0;
    in->analyzer.max_token_bytes = m->analyzer_max_token_bytes;
    in->analyzer.pretokenized = (m->flags & ISN_META_PRETOKENIZED) != 0;
    in->external_terms = (m->flags & ISN_META_EXTERNAL_TERMS) != 0;
    in->bm25.k1 = m->k1;
    in->bm25.b = m->b;
    in->has_positions = (m->flags & ISN_META_HAS_POSITIONS) != 0;
    in->has_static_scores = (m->flags & ISN_META_HAS_STATIC) != 0;
    in->has_score_bounds = ix->score_bounds != NULL;
    in->file_bytes = ix->map_bytes;
    in->num_sections = ix->num_sections;
    for (uint32_t s = 0; s < ix->num_sections; s++) {
        snprintf(in->sections[s].name, sizeof in->sections[s].name, "%s", isn_section_names[s]);
        in->sections[s].bytes = table[s].bytes;
    }
}

/* Terms hold no NUL byte, so zero padding keeps the order of the bytes: a prefix sorts first. */
static inline uint64_t term_key(const uint8_t *s, size_t len) {
    uint64_t key = 0;
    for (size_t i = 0; i < 8; i++) key = key << 8 | (i < len ? s[i] : 0);
    return key;
}

static int build_lex_keys(isn_index *ix) {
    uint32_t nblocks = ix->meta->num_lex_blocks;
    ix->lex_keys = malloc((size_t)(nblocks ? nblocks : 1) * sizeof *ix->lex_keys);
    if (!ix->lex_keys) return -1;
    for (uint32_t b = 0; b < nblocks; b++) {
        const uint8_t *p = ix->lex_data + ix->lex_index[b];
        uint64_t bytes = ix->lex_index[b + 1] - ix->lex_index[b];
        ix->lex_keys[b] = bytes ? term_key(p + 1, p[0] < bytes ? p[0] : bytes - 1) : 0;
    }
    return 0;
}

static int map_and_check(isn_index *ix, const char *path, char *err, size_t err_len) {
    int fd = isn_open_regular(path);
    if (fd < 0) return isn_error(err, err_len, "cannot open %s: %s", path, isn_open_regular_strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return isn_error(err, err_len, "cannot stat %s: %s", path, strerror(errno));
    }
    size_t head = sizeof(isn_file_header) + SEC_STORED * sizeof(isn_section_entry);
    if ((uint64_t)st.st_size < head) {
        close(fd);
        return isn_error(err, err_len, "%s: section 'header' is truncated (%lld bytes)", path, (long long)st.st_size);
    }
    ix->map_bytes = (size_t)st.st_size;
    ix->map = mmap(NULL, ix->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (ix->map == MAP_FAILED) {
        ix->map = NULL;
        return isn_error(err, err_len, "cannot map %s: %s", path, strerror(errno));
    }
    madvise(ix->map, ix->map_bytes, MADV_WILLNEED);

    isn_file_header h;
    memcpy(&h, ix->map, sizeof h);
    if (memcmp(h.magic, ISN_MAGIC, 8) != 0) return isn_error(err, err_len, "%s: section 'header': not an ISN index (bad magic)", path);
    if (h.version != 1 && h.version != ISN_FORMAT_VERSION)
        return isn_error(err, err_len, "%s: section 'header': format version %u, this build reads versions 1 to %u", path,
                         h.version, ISN_FORMAT_VERSION);
    ix->version = h.version;
    if (h.num_sections < SEC_STORED || h.num_sections > SEC_COUNT)
        return isn_error(err, err_len, "%s: section 'header': %u sections, expected %d to %d", path, h.num_sections,
                         SEC_STORED, SEC_COUNT);
    ix->num_sections = h.num_sections;
    head = sizeof h + h.num_sections * sizeof(isn_section_entry);
    if ((uint64_t)st.st_size < head)
        return isn_error(err, err_len, "%s: section 'header' is truncated (%lld bytes)", path, (long long)st.st_size);
    if (isn_index_header_checksum(&h, (const isn_section_entry *)(ix->map + sizeof h)) != h.header_checksum)
        return isn_error(err, err_len, "%s: section 'header' is corrupt (checksum mismatch)", path);
    if (h.file_bytes != (uint64_t)st.st_size)
        return isn_error(err, err_len, "%s: file is truncated or padded: %lld bytes, header says %llu", path,
                    (long long)st.st_size, (unsigned long long)h.file_bytes);

    /* Optional sections the file leaves out read as empty. */
    isn_section_entry table[SEC_COUNT];
    memset(table, 0, sizeof table);
    memcpy(table, ix->map + sizeof h, h.num_sections * sizeof *table);
    const void *sec[SEC_COUNT] = {0};
    for (uint32_t s = 0; s < h.num_sections; s++) {
        const isn_section_entry *e = &table[s];
        if (strncmp(e->name, isn_section_names[s], sizeof e->name) != 0)
            return isn_error(err, err_len, "%s: section %u is named '%.16s', expected '%s'", path, s, e->name, isn_section_names[s]);
        if (e->offset % ISN_SECTION_ALIGN || e->offset < head || e->offset > h.file_bytes || e->bytes > h.file_bytes - e->offset)
            return isn_error(err, err_len, "%s: section '%s' lies outside the file", path, isn_section_names[s]);
        sec[s] = ix->map + e->offset;
    }
    uint32_t bad;
    if (isn_index_hash_sections(sec, table, h.num_sections, &bad) != 0)
        return isn_error(err, err_len, "%s: section '%s' is corrupt (checksum mismatch)", path, isn_section_names[bad]);
    if (table[SEC_META].bytes != sizeof(isn_meta) && table[SEC_META].bytes != ISN_META_BYTES_WITHOUT_BUILD_TIME)
        return isn_error(err, err_len, "%s: section 'meta' has %llu bytes, expected %zu", path, (unsigned long long)table[SEC_META].bytes, sizeof(isn_meta));
    ix->meta = sec[SEC_META];
    ix->info.content_hash = h.header_checksum;
    ix->info.built_from_mtime = table[SEC_META].bytes != sizeof(isn_meta);
    ix->info.built_unix_seconds = ix->info.built_from_mtime ? (uint64_t)st.st_mtime : ix->meta->built_unix_seconds;
    ix->static_scores = table[SEC_DOC_STATIC].bytes ? sec[SEC_DOC_STATIC] : NULL;
    ix->lex_index = sec[SEC_LEX_INDEX];
    ix->lex_data = sec[SEC_LEX_DATA];
    ix->terms = sec[SEC_TERMS];
    ix->blocks = sec[SEC_BLOCK_META];
    ix->postings = sec[SEC_POSTINGS];
    ix->postings_bytes = table[SEC_POSTINGS].bytes;
    ix->pos_blocks = table[SEC_POS_BLOCKS].bytes ? sec[SEC_POS_BLOCKS] : NULL;
    ix->positions = sec[SEC_POSITIONS];
    ix->positions_bytes = table[SEC_POSITIONS].bytes;
    char inner[ISN_ERR_LEN];
    if (ix->version >= 2 && expand_terms_and_blocks(ix, table, sec[SEC_TERMS], sec[SEC_BLOCK_META], inner, sizeof inner) != 0)
        return isn_error(err, err_len, "%s: %s", path, inner);
    if (check_sections(ix, table, inner, sizeof inner) != 0 || isn_index_check_lexicon(ix, inner, sizeof inner) != 0 ||
        isn_index_check_postings_parallel(ix, inner, sizeof inner) != 0 ||
        decode_documents(ix, sec[SEC_DOC_LENS], table[SEC_DOC_LENS].bytes, sec[SEC_DOCID_TEXT], table[SEC_DOCID_TEXT].bytes,
                         inner, sizeof inner) != 0)
        return isn_error(err, err_len, "%s: %s", path, inner);
    if (isn_index_check_stored(ix, sec[SEC_STORED], table[SEC_STORED].bytes, inner, sizeof inner) != 0 ||
        isn_index_check_score_bounds(ix, sec[SEC_SCORE_BOUNDS], table[SEC_SCORE_BOUNDS].bytes, inner, sizeof inner) != 0)
        return isn_error(err, err_len, "%s: %s", path, inner);
    if (build_lex_keys(ix) != 0) return isn_error(err, err_len, "%s: out of memory for the lexicon keys", path);
    fill_info(ix, table);
    return 0;
}

isn_index *isn_index_open(const char *dir, char *err, size_t err_len) {
    isn_index *ix = calloc(1, sizeof *ix);
    if (!ix) {
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&ix->field_tfs_lock, NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, ISN_INDEX_FILE);
    if (map_and_check(ix, path, err, err_len) != 0) {
        isn_index_close(ix);
        return NULL;
    }
    uint32_t nd = ix->meta->num_docs;
    ix->norms = malloc((size_t)(nd ? nd : 1) * sizeof *ix->norms);
    if (!ix->norms) {
        isn_error(err, err_len, "out of memory for %u document norms", nd);
        isn_index_close(ix);
        return NULL;
    }
    for (uint32_t d = 0; d < nd; d++) ix->norms[d] = isn_bm25_doc_norm(&ix->info.bm25, isn_index_doc_len(ix, d), ix->info.avg_doc_len);
    if (isn_index_derive_prior_bounds(ix, err, err_len) != 0 || isn_index_open_attributes(ix, dir, err, err_len) != 0) {
        isn_index_close(ix);
        return NULL;
    }
    return ix;
}

void isn_index_close(isn_index *ix) {
    if (!ix) return;
    isn_index_stop_deriving(ix);
    if (ix->map) munmap(ix->map, ix->map_bytes);
    if (ix->attributes_map) munmap(ix->attributes_map, ix->attributes_bytes);
    free(atomic_load(&ix->field_tfs));
    free(ix->term_first_posting);
    free(ix->posting_positions);
    for (uint32_t f = 0; f < ISN_MAX_FIELDS; f++) {
        free(ix->field_payload[f]);
        free(ix->field_blocks[f]);
        free(ix->field_terms[f]);
        free(ix->field_norms[f]);
    }
    pthread_mutex_destroy(&ix->field_tfs_lock);
    for (uint32_t a = 0; a < ISN_MAX_ATTRIBUTES; a++) {
        free(ix->keyword_starts[a]);
        free(ix->keyword_docs[a]);
    }
    free(ix->norms);
    free(ix->prior_bounds);
    free(ix->doc_lens);
    free(ix->docid_offs);
    free(ix->docid_text);
    free(ix->terms_owned);
    free(ix->blocks_owned);
    free(ix->lex_keys);
    free(ix);
}

const isn_index_info *isn_index_get_info(const isn_index *ix) { return &ix->info; }

const char *isn_index_doc_id(const isn_index *ix, uint32_t doc, size_t *len) {
    *len = (size_t)(ix->docid_offs[doc + 1] - ix->docid_offs[doc]);
    return ix->docid_text + ix->docid_offs[doc];
}

uint32_t isn_index_doc_len(const isn_index *ix, uint32_t doc) {
    uint32_t nf = ix->meta->num_fields, sum = 0;
    for (uint32_t f = 0; f < nf; f++) sum += ix->doc_lens[(size_t)doc * nf + f];
    return sum;
}

uint32_t isn_index_field_len(const isn_index *ix, uint32_t doc, uint32_t field) {
    return ix->doc_lens[(size_t)doc * ix->meta->num_fields + field];
}

float isn_index_static_score(const isn_index *ix, uint32_t doc) { return ix->static_scores ? ix->static_scores[doc] : 0.0f; }

const float *isn_index_static_scores(const isn_index *ix) { return ix->static_scores; }

const float *isn_index_doc_norms(const isn_index *ix) { return ix->norms; }

isn_analyzer *isn_index_new_analyzer(const isn_index *ix) {
    isn_analyzer *analyzer = isn_analyzer_new(&ix->info.analyzer);
    if (analyzer) analyzer_set_memo_owner(analyzer, ix);
    return analyzer;
}

void isn_index_term_stats(const isn_index *ix, uint32_t term_id, isn_term_stats *stats) {
    const isn_term_entry *e = &ix->terms[term_id];
    stats->df = e->df;
    stats->num_blocks = isn_term_num_blocks(e);
    stats->cf = e->cf;
    stats->first_block = e->first_block;
    stats->max_tf_part = e->max_tf_part;
}

/* ------------------------------------------------------------------ lexicon */

static int compare_bytes(const char *a, size_t la, const uint8_t *b, size_t lb) {
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}


bool isn_index_find_term(const isn_index *ix, const char *term, size_t len, uint32_t *term_id) {
    uint32_t nblocks = ix->meta->num_lex_blocks;
    if (nblocks == 0 || len > ISN_MAX_TERM_BYTES) return false;
    /* Last block whose first term <= term; the lexicon itself is read only where the first 8 bytes tie. */
    uint64_t key = term_key((const uint8_t *)term, len);
    uint32_t lo = 0, hi = nblocks;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        bool at_or_after;
        if (ix->lex_keys[mid] != key) {
            at_or_after = key > ix->lex_keys[mid];
        } else {
            const uint8_t *p = ix->lex_data + ix->lex_index[mid];
            at_or_after = compare_bytes(term, len, p + 1, p[0]) >= 0;
        }
        if (at_or_after) lo = mid;
        else hi = mid;
    }
    const uint8_t *p = ix->lex_data + ix->lex_index[lo];
    const uint8_t *end = ix->lex_data + ix->lex_index[lo + 1];
    uint8_t cur[ISN_MAX_TERM_BYTES];
    size_t cur_len = p[0];
    memcpy(cur, p + 1, cur_len);
    p += 1 + cur_len;
    for (uint32_t i = 0;; i++) {
        int c = compare_bytes(term, len, cur, cur_len);
        if (c == 0) {
            *term_id = lo * ISN_LEXICON_BLOCK + i;
            return true;
        }
        if (c < 0 || p + 2 > end) return false;
        size_t shared = p[0], suffix = p[1];
        if (shared > cur_len || p + 2 + suffix > end || shared + suffix > ISN_MAX_TERM_BYTES) return false;
        memcpy(cur + shared, p + 2, suffix);
        cur_len = shared + suffix;
        p += 2 + suffix;
    }
}

/* An analyzer's memo word for its index: 0 unknown, the term id + 1, or TERM_MEMO_ABSENT. */
#define TERM_MEMO_ABSENT UINT32_MAX

bool isn_index_find_emitted_term(const isn_index *ix, isn_analyzer *analyzer, const char *term, size_t len,
                                 uint32_t *term_id) {
    uint32_t *memo = analyzer && analyzer_memo_owner(analyzer) == ix ? analyzer_emitted_memo(analyzer) : NULL;
    if (memo && *memo) {
        if (*memo == TERM_MEMO_ABSENT) return false;
        *term_id = *memo - 1;
        return true;
    }
    bool found = isn_index_find_term(ix, term, len, term_id);
    if (memo && (!found || *term_id < TERM_MEMO_ABSENT - 1)) *memo = found ? *term_id + 1 : TERM_MEMO_ABSENT;
    return found;
}

size_t isn_index_term_text(const isn_index *ix, uint32_t term_id, char *buf, size_t buf_len) {
    uint32_t block = term_id / ISN_LEXICON_BLOCK;
    const uint8_t *p = ix->lex_data + ix->lex_index[block];
    uint8_t cur[ISN_MAX_TERM_BYTES + 1];
    size_t cur_len = p[0];
    memcpy(cur, p + 1, cur_len);
    p += 1 + cur_len;
    for (uint32_t i = 0; i < term_id % ISN_LEXICON_BLOCK; i++) {
        size_t shared = p[0], suffix = p[1];
        memcpy(cur + shared, p + 2, suffix);
        cur_len = shared + suffix;
        p += 2 + suffix;
    }
    if (buf_len) {
        size_t n = cur_len < buf_len - 1 ? cur_len : buf_len - 1;
        memcpy(buf, cur, n);
        buf[n] = 0;
    }
    return cur_len;
}
