/* The import's view of a CIFF file: bytes and varints through a bounded buffer, and seeks. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "index/ciff_wire.h"

static bool stream_fill(ciff_stream *s) {
    if (s->pos < s->len) return true;
    ssize_t n;
    do n = read(s->fd, s->buf, CIFF_STREAM_BUFFER_BYTES);
    while (n < 0 && errno == EINTR);
    s->pos = 0;
    s->len = n > 0 ? (size_t)n : 0;
    return n > 0;
}

bool ciff_stream_seek(ciff_stream *s, uint64_t offset) {
    if (offset >= s->offset && offset - s->offset <= s->len - s->pos) {
        s->pos += (size_t)(offset - s->offset);
    } else {
        if (lseek(s->fd, (off_t)offset, SEEK_SET) < 0) return false;
        s->pos = s->len = 0;
    }
    s->offset = offset;
    return true;
}

static bool stream_byte(ciff_stream *s, uint8_t *byte) {
    if (!stream_fill(s)) return false;
    *byte = s->buf[s->pos++];
    s->offset++;
    return true;
}

bool ciff_stream_varint(ciff_stream *s, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < CIFF_MAX_VARINT_BYTES; i++) {
        uint8_t b;
        if (!stream_byte(s, &b)) return false;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

bool ciff_stream_bytes(ciff_stream *s, void *dst, size_t n) {
    uint8_t *d = dst;
    while (n > 0) {
        if (!stream_fill(s)) return false;
        size_t take = s->len - s->pos < n ? s->len - s->pos : n;
        memcpy(d, s->buf + s->pos, take);
        s->pos += take;
        s->offset += take;
        d += take;
        n -= take;
    }
    return true;
}
