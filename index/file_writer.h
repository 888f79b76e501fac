/* Writes an index file from sections given as lists of pieces (private to index/): the builder passes one
 * piece a section, the synthetic generator the chunks its threads produced. */
#ifndef ISN_INDEX_FILE_WRITER_H
#define ISN_INDEX_FILE_WRITER_H

#include <stdio.h>

#include "index/format.h"

typedef struct {
    const void *data;
    uint64_t bytes;
    FILE *file; /* when set (data NULL): the first `bytes` bytes of this file, read in chunks, so that a
                   section larger than memory (the CIFF import's postings) is copied, never loaded */
} isn_piece;

typedef struct {
    const isn_piece *pieces;
    uint32_t num_pieces;
} isn_section_pieces;

/* Writes DIR/index.isn through a temporary file and a rename; section_bytes[s] receives each section's
 * size and *file_bytes the file's. An optional section (SEC_STORED on) given no bytes is left out of
 * the table. 0, or -1 with err. */
int isn_index_file_write(const char *dir, uint32_t version, const isn_section_pieces sections[SEC_COUNT],
                         uint64_t section_bytes[SEC_COUNT], uint64_t *file_bytes, char *err, size_t err_len);

/* A build summary's byte counts from what isn_index_file_write reported. */
void isn_build_summary_set_bytes(isn_build_summary *summary, const uint64_t section_bytes[SEC_COUNT],
                                 uint64_t file_bytes);

/* The build time an index's meta records: SOURCE_DATE_EPOCH (reproducible builds) when set and valid,
 * else now (Unix seconds). */
uint64_t isn_index_build_time(void);

#endif
