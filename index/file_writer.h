/* Writes an index file from sections given as lists of pieces (private to index/): the builder passes one
 * piece a section, the synthetic generator the chunks its threads produced. */
#ifndef ISN_INDEX_FILE_WRITER_H
#define ISN_INDEX_FILE_WRITER_H

#include "index/format.h"

typedef struct {
    const void *data;
    uint64_t bytes;
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

#endif
