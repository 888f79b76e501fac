#include <string.h>

#include "base/base.h"
#include "index/format.h"

uint64_t isn_index_header_checksum(const isn_file_header *header, const isn_section_entry *table) {
    /* Header and table are hashed as one run of bytes, as they lie at the start of the file. */
    uint8_t bytes[sizeof *header + SEC_COUNT * sizeof *table];
    uint32_t sections = header->num_sections < SEC_COUNT ? header->num_sections : SEC_COUNT;
    isn_file_header zeroed = *header;
    zeroed.header_checksum = 0;
    memcpy(bytes, &zeroed, sizeof zeroed);
    memcpy(bytes + sizeof zeroed, table, sections * sizeof *table);
    return isn_hash64(bytes, sizeof zeroed + sections * sizeof *table);
}
