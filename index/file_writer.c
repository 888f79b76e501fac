#include "index/file_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define FILE_PIECE_CHUNK (1u << 20)

/* Passes a file piece to fn chunk by chunk; 0, or -1 when the file is shorter or unreadable. */
static int each_file_chunk(const isn_piece *p, uint8_t *chunk, int (*fn)(void *ctx, const uint8_t *bytes, size_t n),
                           void *ctx) {
    if (fseek(p->file, 0, SEEK_SET) != 0) return -1;
    for (uint64_t done = 0; done < p->bytes;) {
        size_t want = p->bytes - done < FILE_PIECE_CHUNK ? (size_t)(p->bytes - done) : FILE_PIECE_CHUNK;
        if (fread(chunk, 1, want, p->file) != want || fn(ctx, chunk, want) != 0) return -1;
        done += want;
    }
    return 0;
}

static int hash_chunk(void *ctx, const uint8_t *bytes, size_t n) { return XXH64_update(ctx, bytes, n) == XXH_OK ? 0 : -1; }

static int write_chunk(void *ctx, const uint8_t *bytes, size_t n) { return fwrite(bytes, 1, n, ctx) == n ? 0 : -1; }

/* A section written in pieces: xxHash64 streamed over them equals isn_hash64 of the section as it
 * lies in the file (base/ hashes whole buffers only). */
static int section_checksum(const isn_section_pieces *s, uint8_t *chunk, uint64_t *sum) {
    XXH64_state_t *st = XXH64_createState();
    if (!st) return -1;
    XXH64_reset(st, 0);
    int rc = 0;
    for (uint32_t i = 0; i < s->num_pieces && rc == 0; i++) {
        const isn_piece *p = &s->pieces[i];
        if (p->file) rc = each_file_chunk(p, chunk, hash_chunk, st);
        else if (p->bytes) XXH64_update(st, p->data, p->bytes);
    }
    *sum = XXH64_digest(st);
    XXH64_freeState(st);
    return rc;
}

static uint64_t section_size(const isn_section_pieces *s) {
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < s->num_pieces; i++) bytes += s->pieces[i].bytes;
    return bytes;
}

int isn_index_file_write(const char *dir, uint32_t version, const isn_section_pieces sections[SEC_COUNT],
                         uint64_t section_bytes[SEC_COUNT], uint64_t *file_bytes, char *err, size_t err_len) {
    isn_file_header header;
    isn_section_entry table[SEC_COUNT];
    memset(&header, 0, sizeof header);
    memset(table, 0, sizeof table);
    memcpy(header.magic, ISN_MAGIC, 8);
    header.version = version;
    /* The optional sections go in only when they hold something (format.h). */
    uint32_t count = SEC_COUNT;
    while (count > SEC_STORED && section_size(&sections[count - 1]) == 0) count--;
    header.num_sections = count;
    size_t table_bytes = count * sizeof *table;
    uint64_t off = isn_align_up(sizeof header + table_bytes, ISN_SECTION_ALIGN);
    for (uint32_t s = 0; s < SEC_COUNT; s++) section_bytes[s] = 0;
    uint8_t *chunk = malloc(FILE_PIECE_CHUNK);
    if (!chunk) {
        snprintf(err, err_len, "out of memory while writing the index");
        return -1;
    }
    for (uint32_t s = 0; s < count; s++) {
        uint64_t bytes = section_size(&sections[s]);
        snprintf(table[s].name, sizeof table[s].name, "%s", isn_section_names[s]);
        table[s].offset = off;
        table[s].bytes = bytes;
        if (section_checksum(&sections[s], chunk, &table[s].checksum) != 0) {
            snprintf(err, err_len, "cannot read back section '%s': %s", isn_section_names[s], strerror(errno));
            free(chunk);
            return -1;
        }
        section_bytes[s] = bytes;
        off = isn_align_up(off + bytes, ISN_SECTION_ALIGN);
    }
    header.file_bytes = off;
    *file_bytes = off;
    header.header_checksum = isn_index_header_checksum(&header, table);

    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, ISN_INDEX_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, err_len, "cannot create %s: %s", tmp, strerror(errno));
        free(chunk);
        return -1;
    }
    static const uint8_t zeros[ISN_SECTION_ALIGN];
    int ok = fwrite(&header, sizeof header, 1, f) == 1 && fwrite(table, table_bytes, 1, f) == 1;
    uint64_t at = sizeof header + table_bytes;
    for (uint32_t s = 0; ok && s < count; s++) {
        ok = fwrite(zeros, 1, table[s].offset - at, f) == table[s].offset - at;
        for (uint32_t i = 0; ok && i < sections[s].num_pieces; i++) {
            const isn_piece *p = &sections[s].pieces[i];
            if (p->file) ok = each_file_chunk(p, chunk, write_chunk, f) == 0;
            else if (p->bytes) ok = fwrite(p->data, 1, p->bytes, f) == p->bytes;
        }
        at = table[s].offset + table[s].bytes;
    }
    if (ok) ok = fwrite(zeros, 1, header.file_bytes - at, f) == header.file_bytes - at;
    if (fclose(f) != 0) ok = 0;
    free(chunk);
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* SOURCE_DATE_EPOCH (reproducible builds) when set and valid, else now. */
uint64_t isn_index_build_time(void) {
    const char *epoch = getenv("SOURCE_DATE_EPOCH");
    if (epoch && *epoch) {
        char *end;
        errno = 0;
        unsigned long long seconds = strtoull(epoch, &end, 10);
        if (!*end && !errno) return seconds;
    }
    return (uint64_t)time(NULL);
}

void isn_build_summary_set_bytes(isn_build_summary *summary, const uint64_t section_bytes[SEC_COUNT],
                                 uint64_t file_bytes) {
    const uint64_t *b = section_bytes;
    summary->bytes_total = file_bytes;
    summary->bytes_postings = b[SEC_POSTINGS];
    summary->bytes_block_meta = b[SEC_BLOCK_META];
    summary->bytes_positions = b[SEC_POSITIONS] + b[SEC_POS_BLOCKS];
    summary->bytes_lexicon = b[SEC_LEX_INDEX] + b[SEC_LEX_DATA] + b[SEC_TERMS];
    summary->bytes_docs = b[SEC_DOC_LENS] + b[SEC_DOC_STATIC] + b[SEC_DOCID_TEXT];
    summary->bytes_stored = b[SEC_STORED];
}
