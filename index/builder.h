/* Builder state shared by builder.c (inversion) and builder_write.c (the file). Private to index/. */
#ifndef ISN_INDEX_BUILDER_H
#define ISN_INDEX_BUILDER_H

#include "base/base.h"
#include "index/index.h"
#include "index/strtab.h"

#include "index/list_encoder.h"

#define SHORT_TERM_TWO_BYTES 65536

typedef struct {
    uint32_t *postings; /* (doc, tf) pairs in input doc order */
    uint32_t *positions; /* tf entries per posting, in posting order */
    uint32_t num_postings, postings_cap;
    uint32_t num_positions, positions_cap;
    uint32_t last_doc; /* doc of the last posting + 1; 0 = none yet */
} isn_build_list;

struct isn_builder {
    isn_build_options options;
    isn_analyzer *analyzer;
    isn_strtab terms;
    isn_build_list *lists; /* one per term id of `terms` */
    uint32_t lists_cap;
    isn_strtab ids; /* external ids; id order = input doc order */
    uint32_t *field_lens; /* [doc][num_fields] */
    float *static_scores;
    uint32_t *max_tfs; /* [doc]: the largest term frequency in the document (--order global) */
    uint32_t num_docs, docs_cap;
    uint64_t tokens;
    /* Stored fields (stored_write.c): the raw text of each document's stored fields, one after the
     * other; stored_offs[doc * num_stored + slot] is where a field's text starts (one more entry ends it). */
    uint32_t stored_slots[ISN_MAX_FIELDS]; /* indexed field of each stored slot, increasing */
    byte_buffer stored_text;
    uint64_t *stored_offs;
    uint64_t stored_offs_cap;
    /* current document while analyzing */
    uint32_t cur_doc;
    uint32_t cur_field;
    uint32_t cur_field_len;
    /* The current document's tokens (term id, and position code when positions are kept), appended to
     * their posting lists once the whole document is analyzed: see append_document in builder.c. */
    uint32_t *doc_terms, *doc_positions;
    /* id + 1 of each term of two bytes (at b0 | b1 << 8) and of one byte (at SHORT_TERM_TWO_BYTES + b0);
     * 0 = not seen yet */
    uint32_t *short_term_ids;
    uint32_t doc_len, doc_cap;
    uint32_t doc_max_tf; /* of the document last analyzed */
    uint64_t list_bytes; /* postings and positions arrays allocated */
    int oom;
};

/* What isn_builder_add refuses before it looks at the id table (a missing id, no text), or NULL. */
const char *isn_builder_record_error(const isn_build_options *o, const char *external_id, const char *const *fields,
                                     const size_t *field_lens);
/* For the bounded-memory build (build_pipeline.c), where the caller keeps the document table: inverts one
 * document as doc id `doc` (each call's above the last since the run began), its field lengths into
 * lens_out. 0, or -1 out of memory. */
int isn_builder_invert(isn_builder *b, uint32_t doc, const char *const *fields, const size_t *field_lens,
                       uint32_t *lens_out);
/* Bytes the builder's current run holds: its posting lists and its term table. */
uint64_t isn_builder_run_bytes(const isn_builder *b);
/* Forgets the run's terms and lists (once written to a run file): 0, or -1 out of memory. */
int isn_builder_reset_run(isn_builder *b);

/* Keeps the stored fields of the document being added (its id is b->num_docs): 0, or -1 out of memory. */
int isn_builder_store(isn_builder *b, const char *const *fields, const size_t *field_lens);
/* Section 'stored' for the documents in new order (old_of_new): 0, or -1 out of memory or with a
 * document whose stored text exceeds ISN_STORED_MAX_BLOCK (err). An index without stored fields gets an
 * empty section. */
int isn_builder_write_stored(const isn_builder *b, const uint32_t *old_of_new, void **section, uint64_t *bytes,
                             char *err, size_t err_len);

/* Section 'stored' written document by document in index order (stored_write.c); its data goes to
 * data.file when given one. After stored_writer_finish, the section is `table` (header, block table,
 * sentinel) followed by the data. */
typedef struct {
    isn_stored_header header;
    byte_buffer raw;   /* the block being filled */
    byte_buffer table; /* isn_stored_block entries */
    section_out data;  /* compressed blocks */
    uint32_t block_first, num_docs;
} stored_writer;

void stored_writer_init(stored_writer *w, const uint32_t *slots, uint32_t num_stored, FILE *data_file);
/* The next document's stored text as the section keeps it (per stored field a varint length and the text),
 * text_bytes of it text. 0, or -1 with err (naming the document by id when its text is too long). */
int stored_writer_add(stored_writer *w, const uint8_t *raw_doc, uint64_t raw_bytes, uint64_t text_bytes, const char *id,
                      size_t id_len, char *err, size_t err_len);
int stored_writer_finish(stored_writer *w, char *err, size_t err_len);
void stored_writer_free(stored_writer *w);

/* --order global (global_order.c). P(d), the document's best BM25 term part per unit of IDF, exactly as the
 * reader's norms and ranking's tf parts compute it: the same functions on the same floats. */
float global_best_part(const isn_bm25_params *bm25, uint32_t max_tf, uint32_t doc_len, float avg_doc_len);
/* new_of_old ordering the documents by decreasing gs[old] (ties: lower old id first); NULL out of memory. */
uint32_t *global_order_permutation(const float *gs, uint32_t num_docs);
/* Turns P(d) in index order into the section 'score_bounds': each entry the maximum of itself and those after. */
void global_suffix_maxima(float *parts, uint32_t num_docs);

/* Recursive graph bisection (reorder_bp.c): new_of_old for the builder's documents, or NULL when out
 * of memory. threads = 0: one per CPU this process may use (isn_cpus_available). */
uint32_t *isn_bp_order(const isn_builder *b, uint32_t threads);
/* Terms in fewer documents tell nothing about neighbours (Lucene's minDocFreq). */
#define ISN_BP_MIN_DF 4
/* The same from a forward index: document d's terms are terms[offsets[d] .. offsets[d + 1]), dense ids
 * below num_dense, increasing within a document; the builder numbers them in order of first occurrence. */
uint32_t *isn_bp_order_forward(uint32_t nd, const uint64_t *offsets, const uint32_t *terms, uint32_t num_dense,
                               uint32_t threads);

#endif
