/* The bounded-memory build (private to index/): documents are inverted by several threads into runs, each
 * run a partition's postings sorted by term, written to a file (build_run_file.c) and merged at the end
 * into the index (build_merge.c) with the document table the threads filled (build_pipeline.c). */
#ifndef ISN_INDEX_BUILD_RUNS_H
#define ISN_INDEX_BUILD_RUNS_H

#include <pthread.h>
#include <stdio.h>

#include "base/base.h"
#include "index/builder.h"
#include "index/id_table.h"
#include "index/strtab.h"

/* Document tables grow in chunks of this many documents, so that a thread writes its documents' entries
 * while others are added. */
#define DOC_CHUNK_BITS 16
#define DOC_CHUNK (1u << DOC_CHUNK_BITS)
#define MAX_DOC_CHUNKS ((UINT32_MAX >> DOC_CHUNK_BITS) + 1)

/* Where a document's stored text lies: raw_bytes at offset of thread `file`'s spill file, as section
 * 'stored' keeps it (per stored field a varint length and the text), text_bytes of it text. */
typedef struct {
    uint64_t offset;
    uint64_t raw_bytes;
    uint64_t text_bytes;
    uint32_t file;
} stored_ref;

/* Every RUN_SAMPLE_TERMS-th term of a run is kept in memory with where its record starts, so that the
 * merge can split the terms into ranges merged on separate threads. */
#define RUN_SAMPLE_TERMS 256

typedef struct {
    char path[4200];
    uint64_t bytes;
    uint32_t num_samples;
    uint64_t *sample_offsets; /* [num_samples]: where the sampled term's record starts */
    uint32_t *sample_text;    /* [num_samples + 1] into sample_bytes */
    char *sample_bytes;
} run_info;

void run_info_free(run_info *run);

/* One partition's documents (in doc id order) and runs. */
typedef struct {
    id_table ids;
    uint32_t num_docs;
    uint32_t num_chunks;
    uint32_t **lens;      /* [chunk][doc % DOC_CHUNK * num_fields + f] */
    float **scores;       /* [chunk][doc % DOC_CHUNK] */
    uint32_t **max_tfs;   /* [chunk][doc % DOC_CHUNK], --order global: the document's largest term frequency */
    stored_ref **stored;  /* [chunk][doc % DOC_CHUNK], with stored fields */
    uint64_t tokens;
    pthread_mutex_t runs_lock;
    run_info *runs;
    uint32_t num_runs, runs_cap;
} part_table;

static inline uint32_t *part_lens(const part_table *p, uint32_t doc, uint32_t num_fields) {
    return p->lens[doc >> DOC_CHUNK_BITS] + (size_t)(doc & (DOC_CHUNK - 1)) * num_fields;
}
static inline float part_score(const part_table *p, uint32_t doc) {
    return p->scores[doc >> DOC_CHUNK_BITS][doc & (DOC_CHUNK - 1)];
}
static inline uint32_t *part_max_tf(const part_table *p, uint32_t doc) {
    return &p->max_tfs[doc >> DOC_CHUNK_BITS][doc & (DOC_CHUNK - 1)];
}
static inline stored_ref *part_stored(const part_table *p, uint32_t doc) {
    return &p->stored[doc >> DOC_CHUNK_BITS][doc & (DOC_CHUNK - 1)];
}

/* ------------------------------------------------------------------ run files (build_run_file.c)
 * A run file: per term in byte order, u8 length (0 ends the file), the term, varint the term's id in the
 * run (ids number terms in order of first occurrence), varint df, varint bytes of posting data, then per
 * posting varint doc (the first) or doc gap, varint tf and, with positions, tf varints: the first position
 * code, then each one's increase over the one before. */

/* Writes the builder's run (its terms and lists) to path; scratch is the caller's. 0, or -1 with err. */
int run_write(const isn_builder *b, run_info *run, byte_buffer *scratch, char *err, size_t err_len);
/* An unnamed temporary file in dir, named from `prefix` while it is made (gone when closed, or when
 * the process dies): a section being written, stored text spilled. NULL with err. */
FILE *build_temp_file(const char *dir, const char *prefix, char *err, size_t err_len);

typedef struct {
    int fd;
    uint64_t file_pos, file_bytes; /* next byte to read from the file; its size */
    uint8_t *buf;
    size_t len, at, cap;
    uint32_t index; /* the run's index among the partition's runs */
    bool done;
    int error; /* errno of a failed read; EINVAL for a malformed run */
    /* the term the cursor is at (its posting data next) */
    uint8_t term_len;
    char term[256];
    uint32_t local_id, df;
    uint64_t data_bytes;
} run_cursor;

/* A cursor from the record at offset (0: the first). 0, or -1 with errno. */
int run_cursor_open(run_cursor *c, const run_info *run, uint32_t index, size_t buffer_bytes, uint64_t offset);
void run_cursor_close(run_cursor *c);
/* Moves to the next term (c->done after the last). 0, or -1 on a read error or a malformed run (c->error). */
int run_cursor_next_term(run_cursor *c);
/* Passes over the current term's postings. 0, or -1 (c->error). */
int run_cursor_skip_postings(run_cursor *c);
/* Appends the current term's postings: (doc, tf, start in *positions) triples to *triples, position codes
 * to *positions (when with_positions). 0, or -1 out of memory or on a read error (c->error). */
int run_cursor_read_postings(run_cursor *c, bool with_positions, uint32_t **triples, uint64_t *triples_len,
                             uint64_t *triples_cap, uint32_t **positions, uint64_t *positions_len,
                             uint64_t *positions_cap);

/* ------------------------------------------------------------------ the merge (build_merge.c) */

typedef struct {
    const isn_build_options *options; /* effective options */
    const uint32_t *stored_slots;     /* indexed field of each stored field */
    part_table *part;
    FILE **stored_files; /* the threads' spill files of stored text */
    uint32_t threads;
    uint64_t memory_bytes; /* for read buffers (0: no bound) */
    const char *tmp_dir;   /* the build's temporary folder: section files go here */
    const char *index_dir; /* where index.isn is written */
} merge_job;

/* Writes the partition's index from its runs and documents. 0, or -1 with err. */
int merge_partition(const merge_job *job, isn_build_summary *summary, char *err, size_t err_len);

#endif
