/* The opened index (private to index/): pointers into the mapped file. */
#ifndef ISN_INDEX_READER_H
#define ISN_INDEX_READER_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/base.h"
#include "index/format.h"
#include "index/section_buf.h"

/* posting_positions' mark of a posting whose offset does not fit */
#define ISN_POS_OFFSET_FAR UINT16_MAX

struct isn_index {
    uint8_t *map;
    size_t map_bytes;
    const isn_meta *meta;
    uint32_t *doc_lens;   /* [doc][field], decoded at open */
    const float *static_scores; /* NULL without static scores */
    const float *score_bounds;  /* NULL without section 'score_bounds' (score_bounds.c) */
    /* prior_bounds.c: the static scores' suffix maxima (NULL without static scores, or with one not
     * finite: nonfinite_static_doc, else UINT32_MAX), and their largest magnitude. */
    float *prior_bounds;
    float static_magnitude;
    uint32_t nonfinite_static_doc;
    uint64_t *docid_offs; /* [num_docs + 1] into docid_text, decoded at open */
    char *docid_text;
    const uint64_t *lex_index;
    const uint8_t *lex_data;
    const isn_term_entry *terms;
    const isn_block_meta *blocks;
    const uint8_t *postings;
    uint64_t postings_bytes;
    const uint64_t *pos_blocks; /* NULL without positions */
    const uint8_t *positions;
    uint64_t positions_bytes;
    float *norms;
    isn_index_info info;
    uint32_t version;
    /* Version 2: the term entries and block metadata rebuilt at open (terms and blocks point here). */
    isn_term_entry *terms_owned;
    isn_block_meta *blocks_owned;
    /* The first 8 bytes of each lexicon block's first term, big-endian and zero-padded, so that the
     * lookup's binary search runs over this small array instead of the lexicon's scattered blocks. */
    uint64_t *lex_keys;
    uint32_t num_sections; /* in the file's table: SEC_STORED up to SEC_COUNT (optional sections at the end) */
    /* Stored fields (stored.c); stored is NULL without them. */
    const isn_stored_header *stored;
    const isn_stored_block *stored_blocks;
    const uint8_t *stored_data;
    /* Attributes (attributes.c): DIR/attributes.isn mapped, NULL without. */
    uint8_t *attributes_map;
    size_t attributes_bytes;
    const struct isn_attribute_entry_s *attributes;
    uint32_t num_attributes;
    /* Per keyword attribute, its documents grouped by keyword id (built at open): keyword k's are
     * keyword_docs[a][keyword_starts[a][k] .. keyword_starts[a][k + 1]). */
    uint32_t *keyword_starts[ISN_MAX_ATTRIBUTES];
    uint32_t *keyword_docs[ISN_MAX_ATTRIBUTES];
    /* Per-field term frequencies (positions.c), built at the first isn_index_field_tfs under the lock. */
    pthread_mutex_t field_tfs_lock;
    _Atomic(uint8_t *) field_tfs;
    bool field_tfs_tried;
    /* The background pass (isn_index_derive_field_data_in_background), stopped and joined at close. */
    pthread_t field_deriver;
    bool field_deriver_started;
    atomic_bool field_derive_stop;
    uint64_t *term_first_posting;
    /* Built in the same pass, by posting as field_tfs: the low 16 bits, the posting's positions as a
     * byte offset from its block's (pos_blocks), ISN_POS_OFFSET_FAR from 65535 bytes on (or in a
     * malformed block: a positions cursor then skips the postings before it instead); the high 16,
     * which positions mod 16 it has in any field (all where malformed). */
    uint32_t *posting_positions;
    /* Built in the same pass (field_postings.c), for field: clauses: per field its own posting lists
     * (payload, block metadata, an entry per term: df, first block, cf, maximum tf part), each
     * document's norm under the field's length, and the field's documents and average length. */
    uint8_t *field_payload[ISN_MAX_FIELDS];
    isn_block_meta *field_blocks[ISN_MAX_FIELDS];
    isn_term_entry *field_terms[ISN_MAX_FIELDS];
    float *field_norms[ISN_MAX_FIELDS]; /* [doc] */
    uint32_t field_doc_count[ISN_MAX_FIELDS];
    float field_avg_len[ISN_MAX_FIELDS];
};
/* Section 'score_bounds' (score_bounds.c): sized to the documents, finite, >= 0 and non-increasing, and
 * there exactly when meta says so. 0, or -1 with err. */
int isn_index_check_score_bounds(isn_index *index, const void *section, uint64_t bytes, char *err, size_t err_len);

/* Derives prior_bounds and static_magnitude from the static scores (prior_bounds.c): 0, or -1 with err. */
int isn_index_derive_prior_bounds(isn_index *index, char *err, size_t err_len);

/* Stops the background pass of the per-field data, if one runs, and joins its thread (positions.c). */
void isn_index_stop_deriving(isn_index *index);

/* Writing the per-field lists (field_postings.c): start, then per term the postings of each field
 * appended to docs[f] / tfs[f] (count[f]) and end_term, then finish hands them to the index. */
typedef struct {
    uint32_t num_fields;
    float k1_plus_1;
    uint32_t *docs[ISN_MAX_FIELDS], *tfs[ISN_MAX_FIELDS];
    uint32_t count[ISN_MAX_FIELDS];
    isn_term_entry *terms[ISN_MAX_FIELDS];
    out_buf payload[ISN_MAX_FIELDS], blocks[ISN_MAX_FIELDS];
} isn_field_postings_writer;
int isn_field_postings_start(isn_field_postings_writer *w, const isn_index *index);
int isn_field_postings_end_term(isn_field_postings_writer *w, const isn_index *index, uint32_t term);
int isn_field_postings_finish(isn_field_postings_writer *w, isn_index *index);
void isn_field_postings_free(isn_field_postings_writer *w);
/* A cursor over a list given by its payload, block metadata and length (df 0: exhausted at once). */
void isn_cursor_open_list(isn_cursor *cursor, const uint8_t *payload, const isn_block_meta *blocks, uint32_t df);

/* DIR/attributes.isn when there is one, validated against the index (attributes.c): 0, or -1 with err. */
int isn_index_open_attributes(isn_index *index, const char *dir, char *err, size_t err_len);


/* Decodes the doc ids of one block into docs (absolute ids); returns where its frequencies start. */
const uint8_t *isn_block_decode_docs(const isn_index *index, const isn_term_entry *term, uint32_t block, uint32_t *docs,
                                     uint32_t *count);

/* Structural checks at open (verify_open.c) of the lexicon and of every posting block: 0, or -1 with err. */
int isn_index_check_lexicon(const isn_index *index, char *err, size_t err_len);
int isn_index_check_postings(const isn_index *index, char *err, size_t err_len);
/* The same for terms [from, to). */
int isn_index_check_postings_range(const isn_index *index, uint32_t from, uint32_t to, char *err, size_t err_len);

/* Open's checks on several threads (open_parallel.c): each section's checksum (in table order, the first
 * bad one reported), then the posting blocks by term ranges. 0, or -1 with err naming what is wrong. */
int isn_index_hash_sections(const void *const *sections, const isn_section_entry *table, uint32_t num_sections,
                            uint32_t *bad_section);
int isn_index_check_postings_parallel(const isn_index *index, char *err, size_t err_len);
/* Section 'stored' at open (stored.c): header, fields, block table in bounds and monotone; an empty
 * section is none. Fills the index's stored pointers and its info's stored field names. */
int isn_index_check_stored(isn_index *index, const uint8_t *section, uint64_t bytes, char *err, size_t err_len);
/* Every stored block decompressed and parsed (isn_index_verify's deep check). */
int isn_index_verify_stored(const isn_index *index, char *err, size_t err_len);

#endif
