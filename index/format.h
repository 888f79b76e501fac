/* On-disk layout of an ISN index file (private to index/).
 *
 * One file, DIR/index.isn: a header, a section table, then sections each aligned to 64 bytes.
 * Every section has an xxHash64 checksum in the table; the header checks itself. All integers are
 * little-endian and every structure is naturally aligned, so sections are used in place after mmap. */
#ifndef ISN_INDEX_FORMAT_H
#define ISN_INDEX_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"

#define ISN_MAGIC "ISNINDEX"
#define ISN_SECTION_ALIGN 64
#define ISN_LEXICON_BLOCK 16 /* terms per front-coded lexicon block */
#define ISN_MAX_TERM_BYTES 255

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t num_sections;
    uint64_t file_bytes;
    uint64_t header_checksum; /* xxh64 of header + section table, with this field zero */
} isn_file_header;

typedef struct {
    char name[16];
    uint64_t offset;
    uint64_t bytes;
    uint64_t checksum;
} isn_section_entry;

/* Section order in the table. The reader requires the first SEC_STORED (empty ones have 0 bytes); the
 * optional sections after them are written only when they hold something, so a file without stored
 * fields has SEC_STORED sections and reads as before. */
enum {
    SEC_META = 0,
    SEC_DOC_LENS,    /* varint field lengths, document by document; decoded into memory at open */
    SEC_DOC_STATIC,  /* float [num_docs], or empty when the index has no static scores */
    SEC_DOCID_TEXT,  /* external ids front-coded: varint shared prefix, varint suffix length, suffix */
    SEC_LEX_INDEX,   /* uint64 [num_lex_blocks + 1] into SEC_LEX_DATA */
    SEC_LEX_DATA,    /* front-coded term blocks */
    SEC_TERMS,       /* v1: isn_term_entry [num_terms]; v2: per term varint df, varint cf - df, float
                        max_tf_part (4 bytes); in lexicon order, first_block implied (blocks in order) */
    SEC_BLOCK_META,  /* v1: isn_block_meta [num_blocks]; v2: only the blocks of lists of 2+ blocks: a
                        single-block list's one block starts where the previous list ends, ends at its
                        last posting and has the list's maximum, so the reader rebuilds it at open */
    SEC_POSTINGS,    /* per block: codec(doc gaps - 1) then codec(tf - 1); padded for decode slack */
    SEC_POS_BLOCKS,  /* uint64 [num_blocks] into SEC_POSITIONS, or empty without positions */
    SEC_POSITIONS,   /* per posting, per field: varint count, varint position gaps */
    SEC_STORED,      /* optional: stored fields' raw text (isn_stored_header below) */
    SEC_SCORE_BOUNDS, /* optional: float [num_docs], bounds[d] = max over e >= d of the document's best BM25
                         term part per unit of IDF (isn_index_score_bounds); with ISN_META_SCORE_BOUNDS */
    SEC_COUNT
};

extern const char *const isn_section_names[SEC_COUNT];

#define ISN_META_HAS_POSITIONS 1u
#define ISN_META_HAS_STATIC 2u
#define ISN_META_PRETOKENIZED 4u   /* the analyzer splits at whitespace only (isn_analyzer_config) */
#define ISN_META_EXTERNAL_TERMS 8u /* terms and lengths come from outside ISN (CIFF import) */
#define ISN_META_SCORE_BOUNDS 16u  /* section 'score_bounds' is there (--order global) */

typedef struct {
    uint32_t num_docs;
    uint32_t num_terms;
    uint32_t num_fields;
    uint32_t flags;
    uint64_t num_postings;
    uint64_t num_blocks;
    uint64_t total_doc_len;
    uint64_t total_field_len[ISN_MAX_FIELDS];
    float k1;
    float b;
    uint32_t analyzer_stem;
    uint32_t analyzer_stopwords;
    uint32_t analyzer_max_token_bytes;
    uint32_t num_lex_blocks;
    char fields[ISN_MAX_FIELDS][ISN_FIELD_NAME_MAX];
    /* When the builder wrote it (Unix seconds; SOURCE_DATE_EPOCH when set, for reproducible builds).
     * Files written before this field existed end their meta just before it: still read. */
    uint64_t built_unix_seconds;
} isn_meta;

#define ISN_META_BYTES_WITHOUT_BUILD_TIME offsetof(isn_meta, built_unix_seconds)
/* Section "stored": isn_stored_header, isn_stored_block [num_blocks + 1], then the blocks' data. A
 * block holds consecutive documents, about ISN_STORED_BLOCK_TARGET bytes of text, LZ4-compressed
 * (small blocks: each hit of a reply decompresses its whole block, so larger ones, which compress
 * better, cost every hit more);
 * decompressed it is, document by document and stored field by stored field, a varint length and the
 * text. The last block entry is a sentinel: first_doc = num_docs, offset = the data's size. Offsets
 * count from the start of the data. */
#define ISN_STORED_CODEC_LZ4 1u
#define ISN_STORED_BLOCK_TARGET (4u << 10)
#define ISN_STORED_MAX_BLOCK (64u << 20) /* the largest decompressed block (one document's text) */

typedef struct {
    uint32_t num_fields;      /* stored fields */
    uint32_t num_blocks;
    uint32_t max_block_bytes; /* largest decompressed block: the scratch one fetch needs */
    uint32_t codec;           /* ISN_STORED_CODEC_LZ4 */
    uint8_t fields[ISN_MAX_FIELDS]; /* indexes into isn_meta.fields, strictly increasing */
} isn_stored_header;

typedef struct {
    uint32_t first_doc;
    uint32_t raw_bytes; /* decompressed size */
    uint64_t offset;
} isn_stored_block;

/* A term as the reader serves it (and as version 1 stored it, 16 bytes a term). */
typedef struct {
    uint32_t df;
    uint32_t first_block;
    uint32_t cf; /* collection frequency, saturating at UINT32_MAX */
    float max_tf_part;
} isn_term_entry;

static inline uint32_t isn_term_num_blocks(const isn_term_entry *e) { return (e->df + ISN_BLOCK_SIZE - 1) / ISN_BLOCK_SIZE; }

/* Lexicon block: first term as (len u8, bytes); each following term as (shared prefix u8, suffix
 * len u8, suffix bytes). */

/* Average length as both builder and reader compute it, so block maxima match query-time scores. */
static inline float isn_avg_len(uint64_t total, uint32_t n) { return n ? (float)((double)total / n) : 0.0f; }

static inline uint64_t isn_align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Little-endian base-128 varints, used for positions only (L1 never reads them). */
static inline uint8_t *isn_varint_put(uint8_t *p, uint32_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Returns NULL when the varint runs past end or is longer than 5 bytes. */
static inline const uint8_t *isn_varint_get(const uint8_t *p, const uint8_t *end, uint32_t *v) {
    uint32_t x = 0;
    for (int shift = 0; shift < 35 && p < end; shift += 7) {
        uint8_t byte = *p++;
        x |= (uint32_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return p;
        }
    }
    return NULL;
}

/* The header's self-check: isn_hash64 of the header, its header_checksum read as zero, followed by
 * the section table of header->num_sections entries (as laid out in the file). */
uint64_t isn_index_header_checksum(const isn_file_header *header, const isn_section_entry *table);

#endif
