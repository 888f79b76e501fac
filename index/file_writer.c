#include "index/file_writer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* A section written in pieces: xxHash64 streamed over them equals isn_hash64 of the section as it
 * lies in the file (base/ hashes whole buffers only). */
static uint64_t section_checksum(const isn_section_pieces *s) {
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    for (uint32_t i = 0; i < s->num_pieces; i++)
        if (s->pieces[i].bytes) XXH64_update(st, s->pieces[i].data, s->pieces[i].bytes);
    uint64_t sum = XXH64_digest(st);
    XXH64_freeState(st);
    return sum;
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
    for (uint32_t s = 0; s < count; s++) {
        uint64_t bytes = section_size(&sections[s]);
        snprintf(table[s].name, sizeof table[s].name, "%s", isn_section_names[s]);
        table[s].offset = off;
        table[s].bytes = bytes;
        table[s].checksum = section_checksum(&sections[s]);
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
        return -1;
    }
    static const uint8_t zeros[ISN_SECTION_ALIGN];
    int ok = fwrite(&header, sizeof header, 1, f) == 1 && fwrite(table, table_bytes, 1, f) == 1;
    uint64_t at = sizeof header + table_bytes;
    for (uint32_t s = 0; ok && s < count; s++) {
        ok = fwrite(zeros, 1, table[s].offset - at, f) == table[s].offset - at;
        for (uint32_t i = 0; ok && i < sections[s].num_pieces; i++) {
            const isn_piece *p = &sections[s].pieces[i];
            if (p->bytes) ok = fwrite(p->data, 1, p->bytes, f) == p->bytes;
        }
        at = table[s].offset + table[s].bytes;
    }
    if (ok) ok = fwrite(zeros, 1, header.file_bytes - at, f) == header.file_bytes - at;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
