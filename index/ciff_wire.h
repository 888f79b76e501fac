/* The protobuf wire pieces that CIFF's framing needs beyond protobuf-c (private to index/): the varint
 * that prefixes each message (protobuf-c packs messages, not delimited streams), the wire types of the
 * fields walked one at a time, and the import's buffered reader of the file. */
#ifndef ISN_INDEX_CIFF_WIRE_H
#define ISN_INDEX_CIFF_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CIFF_WIRE_VARINT 0u
#define CIFF_WIRE_FIXED64 1u
#define CIFF_WIRE_LENGTH 2u
#define CIFF_WIRE_FIXED32 5u
#define CIFF_MAX_VARINT_BYTES 10

static inline size_t ciff_varint_put(uint8_t *p, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static inline size_t ciff_varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Decodes a varint from [p, end): bytes used, or 0 when it is cut off or longer than 10 bytes. */
static inline size_t ciff_varint_get(const uint8_t *p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (size_t i = 0; i < CIFF_MAX_VARINT_BYTES && p + i < end; i++) {
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* int32 fields hold negative values as 10-byte varints of their 64-bit two's complement. */
static inline int64_t ciff_as_int64(uint64_t v) { return (int64_t)v; }

/* A CIFF file read through a bounded buffer (ciff_stream.c), for the import: the position is tracked
 * as a file offset so that messages can be skipped by their length prefixes. */
#define CIFF_STREAM_BUFFER_BYTES (1u << 20)

typedef struct {
    int fd;
    uint8_t *buf;        /* CIFF_STREAM_BUFFER_BYTES */
    size_t pos, len;     /* unread bytes are buf[pos..len) */
    uint64_t offset;     /* file offset of buf[pos] */
    uint64_t file_bytes;
} ciff_stream;

/* Each false at the end of the file or on a read error. */
bool ciff_stream_seek(ciff_stream *s, uint64_t offset);
bool ciff_stream_varint(ciff_stream *s, uint64_t *v);
bool ciff_stream_bytes(ciff_stream *s, void *dst, size_t n);

#endif
