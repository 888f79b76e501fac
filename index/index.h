/* ISN index: analyzer, posting codec, index builder, mmap reader and posting cursors.
 * The one public header of index/; every other folder includes only this. */
#ifndef ISN_INDEX_H
#define ISN_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ISN index format is little-endian and is mapped in place"
#endif

#define ISN_BLOCK_SIZE 128
#define ISN_DOC_END UINT32_MAX
#define ISN_MAX_FIELDS 16
#define ISN_FIELD_NAME_MAX 32
#define ISN_ERR_LEN 256

/* ------------------------------------------------------------------ analyzer */

typedef struct {
    bool stem;                /* Snowball English stemming */
    bool stopwords;           /* drop Lucene's 33-word English stopword list */
    uint32_t max_token_bytes; /* longer tokens are cut (at a UTF-8 boundary); values below 4 act as 4 */
    /* Text that is already analysed elsewhere (an index imported from CIFF): tokens are the runs of
     * bytes between ASCII whitespace, each one a term exactly as written (no normalisation, case
     * folding, stemming or stopwords; only the max_token_bytes cut). stem and stopwords are ignored. */
    bool pretokenized;
} isn_analyzer_config;

/* Lucene EnglishAnalyzer-like: stemming on, stopwords on, tokens cut at 64 bytes. */
void isn_analyzer_config_default(isn_analyzer_config *config);

typedef struct isn_analyzer isn_analyzer;

/* One analyzer per thread: it owns a Snowball stemmer and scratch buffers. NULL on allocation failure. */
isn_analyzer *isn_analyzer_new(const isn_analyzer_config *config);
void isn_analyzer_free(isn_analyzer *analyzer);

/* Called once per emitted term. `term` is NUL-terminated, valid until the callback returns.
 * `position` counts tokens within the text (stopwords take a position but are not emitted). */
typedef void (*isn_term_fn)(void *ctx, const char *term, size_t len, uint32_t position);

/* Tokenizes UTF-8 text: NFKC + Unicode case folding, tokens are runs of letters and digits,
 * invalid UTF-8 becomes U+FFFD (a separator), then stopwords and stemming per the config.
 * Returns the number of positions used (emitted terms plus removed stopwords). */
uint32_t isn_analyze(isn_analyzer *analyzer, const char *text, size_t len, isn_term_fn emit, void *ctx);

/* ------------------------------------------------------------------ posting codec */

/* Upper bound of the bytes one encoded block of up to ISN_BLOCK_SIZE values takes. */
#define ISN_CODEC_MAX_BLOCK_BYTES (4 + ISN_BLOCK_SIZE * 4 + ISN_BLOCK_SIZE * 6)

/* Bit-packing with exceptions (PForDelta family): encodes n (1..128) 32-bit values, returns bytes written
 * (0 when n is out of range). */
size_t isn_codec_encode(const uint32_t *values, uint32_t n, uint8_t *out);

/* Decodes n values encoded by isn_codec_encode; returns the bytes consumed, or 0 for a malformed block.
 * `in` must be readable for ISN_CODEC_READ_SLACK bytes past the end of the encoding (the index pads
 * its payload so). */
#define ISN_CODEC_READ_SLACK 16
size_t isn_codec_decode(const uint8_t *in, uint32_t n, uint32_t *values);

/* Bytes the encoding at `in` (n values) occupies, without decoding it; 0 for a malformed block. */
size_t isn_codec_encoded_size(const uint8_t *in, uint32_t n);

/* ------------------------------------------------------------------ BM25 */

typedef struct {
    float k1;
    float b;
} isn_bm25_params;

#define ISN_BM25_DEFAULT_K1 1.2f
#define ISN_BM25_DEFAULT_B 0.75f

/* IDF as Lucene: ln(1 + (N - df + 0.5) / (df + 0.5)). */
float isn_bm25_idf(uint64_t num_docs, uint64_t df);

/* The document-length part of the BM25 denominator: k1 * (1 - b + b * len / avg_len). */
float isn_bm25_doc_norm(const isn_bm25_params *params, uint32_t doc_len, float avg_doc_len);

/* Score per unit of IDF: tf * (k1 + 1) / (tf + norm). The index's block maxima are maxima of this,
 * so one function computes it for the builder, the reader and every algorithm. */
static inline float isn_bm25_tf_part(float k1_plus_1, uint32_t tf, float doc_norm) {
    float f = (float)tf;
    return f * k1_plus_1 / (f + doc_norm);
}

/* ------------------------------------------------------------------ builder */

typedef enum {
    ISN_ORDER_INPUT = 0,  /* doc ids in input order */
    ISN_ORDER_STATIC = 1, /* by static score, highest first */
    ISN_ORDER_ID = 2,     /* by external id, bytewise */
    ISN_ORDER_BP = 3,     /* recursive graph bisection: documents sharing terms get near ids (smaller,
                             faster index); multi-threaded */
    ISN_ORDER_GLOBAL = 4, /* by decreasing global score GS(d) = P(d) + prior_weight * static score (the
                             prior only with static_score_field), P(d) the document's best BM25 term part
                             per unit of IDF; ties in input order. The index keeps score bounds
                             (isn_index_score_bound) so that a query can stop early. */
} isn_doc_order;

typedef enum {
    ISN_FORMAT_JSONL = 0,
    ISN_FORMAT_TSV = 1, /* id<TAB>text, one field named "body" */
} isn_input_format;

typedef enum {
    ISN_SPLIT_HASH = 0,       /* partition = xxh64(external id) % N */
    ISN_SPLIT_CONTIGUOUS = 1, /* input split into N consecutive runs */
} isn_partition_split;

/* Document attributes (isn-index build --attribute NAME:keyword|int): values a filter restricts on
 * without scoring. Keywords are stored as ids into a sorted dictionary, numbers as bit-packed offsets
 * from the smallest; both in DIR/attributes.isn beside the index file. */
#define ISN_MAX_ATTRIBUTES 16
#define ISN_ATTRIBUTES_FILE "attributes.isn"
#define ISN_ATTRIBUTE_MISSING INT64_MIN /* the value of a document without the attribute */

typedef enum {
    ISN_ATTRIBUTE_KEYWORD = 0,
    ISN_ATTRIBUTE_INT = 1,
} isn_attribute_kind;

typedef struct {
    char name[ISN_FIELD_NAME_MAX]; /* JSONL key */
    isn_attribute_kind kind;
} isn_attribute_spec;

typedef struct {
    isn_input_format format;
    uint32_t num_fields;
    char fields[ISN_MAX_FIELDS][ISN_FIELD_NAME_MAX]; /* JSONL keys indexed, in order */
    char id_field[ISN_FIELD_NAME_MAX];               /* JSONL key of the external id ("id") */
    char static_score_field[ISN_FIELD_NAME_MAX];     /* JSONL key of a numeric prior; "" for none */
    isn_analyzer_config analyzer;
    isn_bm25_params bm25;
    bool positions;
    isn_doc_order order;
    uint32_t partitions; /* 1 = one index in out_dir; N > 1 = out_dir/part-0000 ... */
    isn_partition_split split;
    /* Fields (among `fields`) whose raw text the index keeps, compressed, for replies to show. */
    uint32_t num_stored;
    char stored[ISN_MAX_FIELDS][ISN_FIELD_NAME_MAX];
    bool strict;   /* a bad record is fatal instead of skipped */
    bool progress; /* progress line on stderr (when it is a terminal) */
    /* threads <= 1 and memory_bytes 0: every document in memory until the index is written. Otherwise
     * records are parsed and analysed on `threads` threads, inverted in runs that fit memory_bytes (0: no
     * bound) written to temporary files in the output folder and merged: the same bytes either way. */
    uint32_t threads;
    uint64_t memory_bytes;
    /* Attributes to keep per document (JSONL only): a string or integer value (a keyword attribute
     * takes an integer as its text); absent or null = missing. A value of the wrong kind is reported
     * with its line number and left missing (fatal with strict). */
    uint32_t num_attributes;
    isn_attribute_spec attributes[ISN_MAX_ATTRIBUTES];
    /* ISN_ORDER_GLOBAL: the weight of the static score in GS(d) (default 1; finite, >= 0). */
    float prior_weight;
} isn_build_options;

void isn_build_options_default(isn_build_options *options);

typedef struct {
    uint64_t records_read;
    uint64_t records_skipped;
    uint64_t docs;
    uint64_t terms;
    uint64_t postings;
    uint64_t tokens;
    uint64_t bytes_total;
    uint64_t bytes_postings;
    uint64_t bytes_block_meta;
    uint64_t bytes_positions;
    uint64_t bytes_lexicon;
    uint64_t bytes_docs;
    uint64_t bytes_stored; /* section 'stored' (0 without stored fields) */
    uint64_t runs;         /* run files merged (0 for the in-memory build) */
    double seconds;
} isn_build_summary;

/* Builds an index (or N partitions) from a JSONL or TSV file ("-": standard input, with --threads or
 * --memory). Bad records are reported on stderr with their line number. Returns 0, or -1 with a message
 * in err; on error no index is left behind (nor any temporary file). */
int isn_build_from_file(const char *input_path, const char *out_dir, const isn_build_options *options,
                        isn_build_summary *summary, char *err, size_t err_len);

/* The least memory_bytes the bounded build takes for these options (threads, partitions). */
uint64_t isn_build_memory_floor(const isn_build_options *options);

/* In-memory builder, for tests and for programs that produce documents themselves. */
typedef struct isn_builder isn_builder;
/* NULL when out of memory or the options are invalid (see isn_build_options_check). */
isn_builder *isn_builder_new(const isn_build_options *options);
/* The options a builder refuses, said plainly (a stored field that is not indexed...): 0, or -1 with err. */
int isn_build_options_check(const isn_build_options *options, char *err, size_t err_len);
/* fields[i] is the text of options->fields[i] (NULL = empty). Returns 0, or -1 with err (duplicate id...). */
int isn_builder_add(isn_builder *builder, const char *external_id, const char *const *fields,
                    const size_t *field_lens, float static_score, char *err, size_t err_len);
int isn_builder_write(isn_builder *builder, const char *out_dir, isn_build_summary *summary, char *err,
                      size_t err_len);
void isn_builder_free(isn_builder *builder);

/* ------------------------------------------------------------------ reader */

typedef struct isn_index isn_index;

/* The name of the single index file inside an index directory. */
#define ISN_INDEX_FILE "index.isn"
/* The version written. Version 1 (16-byte term entries, metadata for every block) is still read. */
#define ISN_FORMAT_VERSION 2

/* Maps DIR/index.isn and validates header, section table and every section checksum. A damaged or
 * wrong-version file is refused with a message naming the section. */
isn_index *isn_index_open(const char *dir, char *err, size_t err_len);
void isn_index_close(isn_index *index);

typedef struct {
    uint32_t version;
    uint32_t num_docs;
    uint32_t num_terms;
    uint32_t num_fields;
    char fields[ISN_MAX_FIELDS][ISN_FIELD_NAME_MAX];
    uint64_t num_postings;
    uint64_t num_blocks;
    uint64_t total_doc_len; /* sum of document lengths, all fields */
    float avg_doc_len;
    float avg_field_len[ISN_MAX_FIELDS];
    isn_analyzer_config analyzer;
    isn_bm25_params bm25; /* the parameters the block maxima were computed with */
    bool has_positions;
    bool has_static_scores;
    bool has_score_bounds; /* built with --order global: isn_index_score_bound answers */
    /* The terms were analysed outside ISN (imported from CIFF); `analyzer` says how queries are
     * analysed: pretokenized, or an analyzer declared at import to match the exporter's. Document
     * lengths are the source's BM25 lengths, which need not equal the sum of the term frequencies. */
    bool external_terms;
    uint32_t num_stored_fields; /* fields whose text the index keeps (isn_index_stored_get) */
    char stored_fields[ISN_MAX_FIELDS][ISN_FIELD_NAME_MAX];
    uint64_t file_bytes;
    /* The generation's identity: the header's xxHash64 over the header and section table, which
     * holds every section's checksum (so any change of content changes it), and the build time. */
    uint64_t content_hash;
    uint64_t built_unix_seconds;
    bool built_from_mtime; /* the file predates the build time in meta: the file's mtime stands in */
    uint32_t num_sections;
    struct {
        char name[16];
        uint64_t bytes;
    } sections[16];
} isn_index_info;

const isn_index_info *isn_index_get_info(const isn_index *index);

/* Structural checks beyond checksums: doc ids strictly increasing within lists, block last ids and
 * offsets consistent, block maxima equal to the real maxima, lengths consistent. 0 or -1 with err. */
int isn_index_verify(const isn_index *index, char *err, size_t err_len);
/* The same on `threads` threads (the caller's among them): the lists are checked in parallel, and an
 * index that fails reports the same error on any number of threads. */
int isn_index_verify_threads(const isn_index *index, uint32_t threads, char *err, size_t err_len);

/* Lexicon lookup of an analyzed term. */
bool isn_index_find_term(const isn_index *index, const char *term, size_t len, uint32_t *term_id);
/* The same for the term an analyzer made by isn_index_new_analyzer(index) has just emitted, called from
 * its emit callback: a word that analyzer met before answers from its stem cache (the id, or that the
 * index lacks it) without the lexicon search (a few cache misses a term on a large lexicon). With any
 * other analyzer, a plain isn_index_find_term. */
bool isn_index_find_emitted_term(const isn_index *index, isn_analyzer *analyzer, const char *term, size_t len,
                                 uint32_t *term_id);
/* Copies the text of a term id into buf (NUL-terminated, cut to buf_len); returns its full length. */
size_t isn_index_term_text(const isn_index *index, uint32_t term_id, char *buf, size_t buf_len);

typedef struct {
    uint32_t df;
    uint32_t num_blocks;
    uint64_t cf;          /* collection frequency */
    uint64_t first_block; /* index into the block metadata array */
    float max_tf_part;    /* maximum of isn_bm25_tf_part over the list */
} isn_term_stats;

void isn_index_term_stats(const isn_index *index, uint32_t term_id, isn_term_stats *stats);

/* External id of a document (not NUL-terminated). */
const char *isn_index_doc_id(const isn_index *index, uint32_t doc, size_t *len);
uint32_t isn_index_doc_len(const isn_index *index, uint32_t doc);       /* all fields */
uint32_t isn_index_field_len(const isn_index *index, uint32_t doc, uint32_t field);
float isn_index_static_score(const isn_index *index, uint32_t doc);
/* Every document's static score, by doc id; NULL without static scores. */
const float *isn_index_static_scores(const isn_index *index);
/* Per-document isn_bm25_doc_norm for the index's parameters, precomputed at open. */
const float *isn_index_doc_norms(const isn_index *index);

/* The raw posting payload (ISN_CODEC_READ_SLACK padding included in *bytes) and the block metadata
 * array, exactly as stored: the GPU backend uploads these bytes unchanged. */
const uint8_t *isn_index_postings_payload(const isn_index *index, uint64_t *bytes);
const struct isn_block_meta_s *isn_index_block_metas(const isn_index *index, uint64_t *count);

/* Stored fields: the raw text of the fields the index was built to keep (isn-index build --store).
 * Documents lie in LZ4-compressed blocks of about 4 KiB; one fetch decompresses one block into the
 * caller's scratch (no allocation). */
typedef struct {
    const char *text; /* inside the scratch; not NUL-terminated */
    uint32_t len;
} isn_stored_text;

/* The position of a stored field among info.stored_fields, or -1 when the index does not keep it. */
int isn_index_stored_slot(const isn_index *index, const char *name);
/* Bytes of scratch isn_index_stored_get needs (0 without stored fields). */
size_t isn_index_stored_scratch_bytes(const isn_index *index);
/* The stored fields of doc, out[slot] for every stored field, pointing into scratch. 0, or -1 with err
 * (no stored fields, doc out of range, or a damaged block). */
int isn_index_stored_get(const isn_index *index, uint32_t doc, void *scratch, isn_stored_text *out, char *err,
                         size_t err_len);

/* Score bounds for safe early termination (indexes built, synthesised or imported from CIFF with
 * --order global; NULL / false for any other).
 *
 * P(d) is the document's best BM25 term part per unit of IDF: isn_bm25_tf_part(k1 + 1, max_tf(d),
 * norm(d)) with the index's k1, b and average length, max_tf(d) the largest term frequency in d (the
 * tf part grows with tf, so no other term of d has a larger one). The index stores the suffix maxima
 * bounds[d] = max(P(d), P(d + 1), ...), non-increasing; under --order global without a prior,
 * bounds[d] = P(d). A plain BM25 query (terms over all fields, each term's weight w_t its IDF, local or
 * global, times its repeat count: any weights >= 0) scores a document e as sum_t w_t * tf_part(t, e)
 * <= (sum_t w_t) * P(e), so every document with id >= d scores at most (sum_t w_t) * bounds[d]. Field:
 * clauses (their own norms) and phrases are not bounded by it. */
const float *isn_index_score_bounds(const isn_index *index);
/* An upper bound on the score of every document with id >= doc for a bag-of-words query whose term
 * weights sum to weight_sum (each weight >= 0, as ranking multiplies tf parts by them), scored with the
 * index's k1 and b and the average document length avg_doc_len (0: the index's own; an aggregator's
 * global average otherwise). Safe whatever order ranking sums the terms in: the float rounding of the
 * tf parts, their products and the sum stays below the relative margin of 2^-20 included. A global
 * average above the index's shrinks every norm: the bound grows by their ratio (for norms n' <= n,
 * tf part' / tf part = (tf + n) / (tf + n') <= n / n' <= global / local average); one below only
 * lowers the scores. Returns false without bounds in the index; *bound is 0 for doc >= num_docs. */
bool isn_index_score_bound(const isn_index *index, uint32_t doc, double weight_sum, float avg_doc_len, double *bound);
/* The factor that isn_index_score_bound multiplies isn_index_score_bounds()[doc] by, for a search that
 * checks many documents' bounds: weight_sum stretched and with the margin as there. 0 without bounds. */
double isn_index_score_bound_scale(const isn_index *index, double weight_sum, float avg_doc_len);

/* Bounds for a search that adds a weighted static prior to BM25 (isn_search_options.prior_weight): the
 * suffix maxima of the static scores, prior_bounds[d] = max(static_score(d), static_score(d + 1), ...),
 * non-increasing, derived at open (4 bytes a document). No document from id d on has a prior above
 * prior_bounds[d], whatever the order the index was built in. NULL without static scores, or when one
 * of them is not finite (isn_index_static_scores_finite names it). */
const float *isn_index_prior_bounds(const isn_index *index);
/* The largest |static score| (0 without static scores): a prior weight W keeps every W x score finite in
 * float when W x this is. */
float isn_index_static_score_magnitude(const isn_index *index);
/* False when a static score is NaN or infinite (*bad_doc the first such document, else UINT32_MAX). */
bool isn_index_static_scores_finite(const isn_index *index, uint32_t *bad_doc);

/* A fresh analyzer configured exactly as the index's (caller frees). */
isn_analyzer *isn_index_new_analyzer(const isn_index *index);

/* Attributes of the documents (none unless built with them). */
uint32_t isn_index_num_attributes(const isn_index *index);
/* The attribute's slot, or -1 when the index has none of that name; *kind its kind. */
int isn_index_attribute_find(const isn_index *index, const char *name, isn_attribute_kind *kind);
const char *isn_index_attribute_name(const isn_index *index, uint32_t attribute);
/* A keyword's id in the attribute's dictionary; false when no document has it. */
bool isn_index_keyword_id(const isn_index *index, uint32_t attribute, const char *value, size_t len, int64_t *id);
/* The documents whose keyword attribute has this id, ascending (count in *count; NULL for a numeric
 * attribute): what lets a selective filter lead a search instead of testing every candidate. */
const uint32_t *isn_index_keyword_docs(const isn_index *index, uint32_t attribute, int64_t id, uint32_t *count);
/* The document's value: a keyword id or a number; ISN_ATTRIBUTE_MISSING when it has none. */
int64_t isn_index_attribute_value(const isn_index *index, uint32_t attribute, uint32_t doc);
/* Writes DIR/attributes.isn for the index in DIR from the input it was built from (JSONL), matching
 * records to documents by external id. Called by isn_build_from_file; 0, or -1 with err. */
int isn_attributes_build(const char *input_path, const char *index_dir, const isn_build_options *options, char *err,
                         size_t err_len);

/* ------------------------------------------------------------------ cursors */

typedef struct isn_block_meta_s {
    uint32_t last_doc;  /* last doc id of the block */
    float max_tf_part;  /* block maximum of isn_bm25_tf_part */
    uint64_t offset;    /* byte offset of the block in the postings section */
} isn_block_meta;

/* A cursor over one posting list. Decodes one block at a time into its own buffers; term frequencies
 * are decoded only when asked for. Lives in caller memory (per-query arenas); no allocation. */
typedef struct {
    const uint8_t *payload;      /* postings section */
    const isn_block_meta *blocks; /* this list's block metadata */
    uint32_t num_blocks;
    uint32_t df;
    uint32_t block;       /* current block (num_blocks when exhausted) */
    uint32_t pos;         /* index of the current posting within the decoded block */
    uint32_t count;       /* postings in the decoded block */
    uint32_t decoded_block; /* which block docs[] holds; UINT32_MAX for none */
    uint32_t doc;         /* current doc id, ISN_DOC_END when exhausted */
    bool freqs_ready;
    const uint8_t *freq_bytes; /* where the current block's frequencies start */
    uint32_t shallow_block;    /* block found by isn_cursor_shallow_next_geq */
    const float *norms;        /* the norms its list's maxima were taken under: the documents', or a field's */
    uint32_t docs[ISN_BLOCK_SIZE];
    uint32_t freqs[ISN_BLOCK_SIZE];
} isn_cursor;

/* Positions the cursor on the first posting of the term's list. */
void isn_cursor_open(isn_cursor *cursor, const isn_index *index, uint32_t term_id);
/* Advances to the next posting; returns its doc id or ISN_DOC_END. */
uint32_t isn_cursor_next(isn_cursor *cursor);
/* Advances to the first posting with doc >= target (never backwards); skips blocks by metadata.
 * Inline for the common move within the decoded block; a move to a later block goes out of line. */
static inline uint32_t isn_cursor_next_geq(isn_cursor *cursor, uint32_t target);
/* Term frequency of the current posting. */
static inline uint32_t isn_cursor_freq(isn_cursor *cursor);

/* Bulk access for algorithms that score whole blocks: the current block's postings are
 * docs[pos..count) of the cursor; this returns their term frequencies minus one, freqs[0..count)
 * (decoded on first use). */
const uint32_t *isn_cursor_block_freqs(isn_cursor *cursor);
/* Moves to the first posting of the next block, decoding it; returns its doc id or ISN_DOC_END. */
uint32_t isn_cursor_next_block(isn_cursor *cursor);

/* The out-of-line parts of the inline cursor moves (call the inline functions instead). */
uint32_t isn_cursor_next_geq_other_block(isn_cursor *cursor, uint32_t target);
const uint32_t *isn_cursor_decode_freqs(isn_cursor *cursor);

static inline uint32_t isn_cursor_next_geq(isn_cursor *cursor, uint32_t target) {
    if (target <= cursor->doc)
        return cursor->doc; /* also once exhausted: ISN_DOC_END */
    if (target > cursor->blocks[cursor->block].last_doc)
        return isn_cursor_next_geq_other_block(cursor, target);
    uint32_t pos = cursor->pos;
    while (cursor->docs[pos] < target) /* the block's last doc >= target bounds this */
        pos++;
    cursor->pos = pos;
    return cursor->doc = cursor->docs[pos];
}

static inline uint32_t isn_cursor_freq(isn_cursor *cursor) {
    const uint32_t *freqs = cursor->freqs_ready ? cursor->freqs : isn_cursor_decode_freqs(cursor);
    return freqs[cursor->pos] + 1;
}

/* Block-max support: moves only the metadata pointer to the block that may hold `target`, decoding
 * nothing. Returns that block's last doc id (ISN_DOC_END past the end of the list). */
uint32_t isn_cursor_shallow_next_geq(isn_cursor *cursor, uint32_t target);
/* max_tf_part of the block found by the last shallow move (0 past the end). */
float isn_cursor_shallow_max(const isn_cursor *cursor);

/* Positions (token offsets within the field) of `term_id` in `doc` for one field, ascending.
 * Writes at most `cap` and returns how many there are (0 when the doc lacks the term or the index
 * has no positions). Reads the positions section only; L1 never calls it. */
uint32_t isn_index_positions(const isn_index *index, uint32_t term_id, uint32_t doc, uint32_t field,
                             uint32_t *out, uint32_t cap);

/* Positions read alongside a posting cursor, for phrase matching in the first stage: the cursor walks
 * the doc ids, this walks the same list's positions forward with it, so a phrase costs a pass over
 * the positions of the postings it lands on, never a search from the block's start. Caller memory. */
typedef struct {
    const isn_index *index;
    uint64_t first_block; /* the term's first block among all blocks */
    uint32_t block;       /* block whose positions `at` points into; UINT32_MAX for none */
    uint32_t posting;     /* index within that block of the posting `at` starts */
    const uint8_t *at;    /* NULL once the section proved malformed: no positions from then on */
    /* Once the index has derived them (isn_index_field_tfs), per posting of the term: where its
     * positions start in its block's, so that a read jumps to them (else it skips the postings before
     * them in the block), and which positions mod 16 it has; else NULL. */
    const uint32_t *postings;
} isn_positions_cursor;

void isn_positions_cursor_open(isn_positions_cursor *positions, const isn_index *index, uint32_t term_id);
/* Which positions mod 16 the posting `cursor` sits on has, in any field (bit p % 16 for each position
 * p): a phrase can only match where its terms' masks, rotated by their offsets, meet. All 16 bits when
 * unknown (the masks are derived with isn_index_field_tfs). */
static inline uint32_t isn_positions_cursor_mask(const isn_positions_cursor *positions, const isn_cursor *cursor) {
    if (!positions->postings || cursor->doc == ISN_DOC_END) return 0xffffu;
    return positions->postings[(uint64_t)cursor->block * ISN_BLOCK_SIZE + cursor->pos] >> 16;
}
/* Positions in `field` of the posting `cursor` sits on (a cursor over the same term that only moves
 * forward between calls), ascending; writes at most cap, returns how many there are (0 without
 * positions in the index). */
uint32_t isn_positions_cursor_read(isn_positions_cursor *positions, isn_cursor *cursor, uint32_t field,
                                   uint32_t *out, uint32_t cap);

/* Every posting's term frequency in each field, derived from the positions at the first call (then
 * shared and read-only; safe from any thread): field_tfs[posting * num_fields + field], where posting
 * counts all postings in term order (isn_index_term_first_posting, then block * ISN_BLOCK_SIZE + pos
 * of a cursor), capped at ISN_FIELD_TF_CAP (read the positions then). NULL without positions or when
 * memory is short: a field: clause then reads the positions of every posting. */
#define ISN_FIELD_TF_CAP 255
const uint8_t *isn_index_field_tfs(const isn_index *index);
/* The same if they are derived already; NULL otherwise, never deriving them (nor waiting for a pass). */
const uint8_t *isn_index_field_tfs_if_ready(const isn_index *index);
/* Derives them on a thread of its own at background priority, so that no query pays the pass (a
 * whole pass over the positions: seconds to minutes, and about 11 bytes a posting): field: clauses
 * need them (a query that asks before the pass ends waits for it), and phrases run faster with them
 * (positions cursors opened once they exist). isn_index_close stops the pass and joins the thread.
 * No-op without positions or when started already; -1 when no thread could be started. */
int isn_index_derive_field_data_in_background(isn_index *index);
uint64_t isn_index_term_first_posting(const isn_index *index, uint32_t term_id);

/* Derived with the field frequencies (valid once isn_index_field_tfs returned non-NULL), what a field:
 * clause scores and prunes with, as Lucene keeps them per field: the field's documents (those where it
 * is not empty) and their average length; per document the field's isn_bm25_doc_norm under that
 * average; and per term and field a posting list of its own (the documents where the term is in the
 * field, its frequency there, block maxima under the field's norms), its df and maximum tf part. */
void isn_index_field_doc_stats(const isn_index *index, uint32_t field, uint32_t *doc_count, float *avg_len);
void isn_index_field_term_stats(const isn_index *index, uint32_t term_id, uint32_t field, uint32_t *df,
                                float *max_tf_part);
const float *isn_index_field_norms(const isn_index *index, uint32_t field);
/* A cursor over the term's list in one field (exhausted at once when the field never holds it). */
void isn_cursor_open_field(isn_cursor *cursor, const isn_index *index, uint32_t term_id, uint32_t field);

/* ------------------------------------------------------------------ synthetic partitions */

typedef struct {
    uint32_t docs;             /* documents (required) */
    uint64_t seed;
    uint32_t vocabulary;       /* distinct terms; 0 = by Heaps' law from docs (or from the fitted corpus) */
    double zipf_exponent;      /* document-frequency curve without a fitted corpus (default 1.0) */
    double postings_per_doc;   /* mean distinct terms per document (default 40) */
    double mean_doc_len;       /* log-normal document lengths, in tokens (default 80, sigma 0.6) */
    double doc_len_sigma;
    const char *fit_index;     /* an index whose df curve is rescaled to `docs` (NULL: Zipf) */
    const char *fit_queries;   /* a TSV query log (id<TAB>text) over fit_index whose term df profile the
                                  synthetic log follows (NULL: log-uniform ranks) */
    uint32_t queries;          /* queries written to DIR/queries.tsv (default 10000) */
    /* With fit_queries: the log's own queries, in its order (at most `queries` of them, each once), every
     * distinct term of the log its own synthetic term; false: `queries` draws of the log's queries, each
     * term the synthetic term nearest its df fraction (terms of a similar df then merge into one). */
    bool transplant_queries;
    uint32_t threads;          /* 0 = one per CPU this process may use (isn_cpus_available) */
    isn_doc_order order;       /* the partition's: ISN_ORDER_INPUT (as drawn) or ISN_ORDER_GLOBAL (score bounds) */
    /* A static score per document (a partition's only), log-normal with median 1: exp(prior_sigma x N(0, 1)),
     * drawn from the seed; 0 (the default): none. In global order GS(d) = P(d) + prior_weight x it, as
     * isn-index build --static-score --order global orders (prior_weight default 1, finite and >= 0). */
    double prior_sigma;
    float prior_weight;
} isn_synth_options;

void isn_synth_options_default(isn_synth_options *options);

/* Writes a synthetic partition DIR/index.isn (one field "body", terms "t00000000"..., no stemming or
 * stopwords, no positions) and DIR/queries.tsv. Returns 0, or -1 with err. */
int isn_synth_build(const char *out_dir, const isn_synth_options *options, isn_build_summary *summary, char *err,
                    size_t err_len);

typedef struct {
    uint64_t docs, vocabulary, postings, tokens, bytes;
    double seconds;
} isn_synth_text_summary;

/* Writes options->docs documents as JSON Lines to out_path ("-": standard output), {"id", "title",
 * "body"}, drawn from the synthetic partition's model: the same vocabulary, document-frequency curve
 * (fitted to options->fit_index when set), lengths and term frequencies; the same seed gives the same
 * text whatever the threads. Terms are named by rank in base 30 (digits and consonants: no stopword, no
 * stem), so the English analyzer indexes each as it is. With queries_path (and options->queries), a query
 * log over those names as isn_synth_build writes. Returns 0, or -1 with err. */
int isn_synth_jsonl(const char *out_path, const char *queries_path, const isn_synth_options *options,
                    isn_synth_text_summary *summary, char *err, size_t err_len);

/* ------------------------------------------------------------------ CIFF */

/* The Common Index File Format (Lin et al., SIGIR 2020; proto/ciff.proto): the index interchange of
 * Anserini, PISA, Terrier and others. */

typedef struct {
    /* How queries against the imported terms are analysed: pretokenized (the default), or ISN's
     * English analyzer (stem and stopwords as set) when the exporter's analyzer matches it. */
    isn_analyzer_config analyzer;
    isn_bm25_params bm25;
    /* ISN_ORDER_INPUT: the file's doc ids; ISN_ORDER_GLOBAL: by decreasing best BM25 term part, with score
     * bounds (one more pass over the lists; memory O(documents + terms) still). */
    isn_doc_order order;
} isn_ciff_import_options;

void isn_ciff_import_options_default(isn_ciff_import_options *options);

typedef struct {
    uint64_t postings_lists;
    uint64_t docs;
    uint64_t postings;
    uint64_t ciff_bytes;  /* of the CIFF file read or written */
    uint64_t index_bytes; /* of the index file written or read */
    double seconds;
    char description[512]; /* the CIFF header's description, cut */
} isn_ciff_summary;

/* Imports a CIFF file as one index DIR/index.isn, streaming: the file is read a message at a time
 * through a bounded buffer (twice: the document records, which come last, are needed before any
 * posting list can be scored), and posting blocks go to temporary files in DIR as they are encoded.
 * Memory: O(documents + terms), never O(postings). Terms must come in increasing byte order (as
 * Anserini, PISA and Terrier write them) and doc records in doc id order 0, 1, ... A malformed file is
 * refused with the message number, its byte offset and what is wrong. 0, or -1 with err. */
int isn_ciff_import(const char *ciff_path, const char *out_dir, const isn_ciff_import_options *options,
                    isn_ciff_summary *summary, char *err, size_t err_len);

/* Writes the index in DIR as a CIFF file: its terms in lexicon order with d-gap postings, then one
 * doc record per document (collection_docid = the external id, doclength = the length BM25 uses).
 * Memory is bounded: each list is read twice through a cursor (its size, then its bytes). */
int isn_ciff_export(const char *index_dir, const char *ciff_path, isn_ciff_summary *summary, char *err,
                    size_t err_len);

#endif

