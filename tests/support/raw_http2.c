#include "tests/support/raw_http2.h"

#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpc/framing.h"
#include "tests/support/isnd_harness.h"

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

size_t raw_h2_frame(uint8_t *out, int type, int flags, uint32_t stream, const void *payload, size_t len) {
    out[0] = (uint8_t)(len >> 16), out[1] = (uint8_t)(len >> 8), out[2] = (uint8_t)len;
    out[3] = (uint8_t)type, out[4] = (uint8_t)flags;
    out[5] = (uint8_t)(stream >> 24 & 0x7f), out[6] = (uint8_t)(stream >> 16), out[7] = (uint8_t)(stream >> 8),
    out[8] = (uint8_t)stream;
    if (len) memcpy(out + 9, payload, len);
    return 9 + len;
}

bool raw_h2_send_all(int fd, const void *data, size_t len) {
    const uint8_t *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0) return false;
        p += n, len -= (size_t)n;
    }
    return true;
}

/* HPACK: an integer with an N-bit prefix, and a literal field without indexing (no Huffman). */
static size_t hpack_int(uint8_t *out, uint8_t first, int prefix_bits, size_t value) {
    size_t max = (1u << prefix_bits) - 1, n = 0;
    if (value < max) {
        out[n++] = (uint8_t)(first | value);
        return n;
    }
    out[n++] = (uint8_t)(first | max);
    value -= max;
    while (value >= 128) {
        out[n++] = (uint8_t)(value % 128 + 128);
        value /= 128;
    }
    out[n++] = (uint8_t)value;
    return n;
}

/* A literal field: without indexing (first = 0x00), or with incremental indexing (0x40: the decoder
 * keeps it in its dynamic table). */
static size_t hpack_literal(uint8_t *out, uint8_t first, const char *name, const char *value, size_t value_len) {
    size_t n = 0, name_len = strlen(name);
    out[n++] = first;
    n += hpack_int(out + n, 0, 7, name_len);
    memcpy(out + n, name, name_len), n += name_len;
    n += hpack_int(out + n, 0, 7, value_len);
    memcpy(out + n, value, value_len), n += value_len;
    return n;
}

static size_t hpack_field(uint8_t *out, const char *name, const char *value, size_t value_len) {
    return hpack_literal(out, 0x00, name, value, value_len);
}

size_t raw_h2_get_headers_indexed(uint8_t *out, size_t pad) {
    static char padding[4096];
    if (pad > sizeof padding) pad = sizeof padding;
    memset(padding, 'y', pad);
    size_t n = 0;
    n += hpack_field(out + n, ":method", "GET", 3);
    n += hpack_field(out + n, ":scheme", "http", 4);
    n += hpack_field(out + n, ":path", "/", 1);
    n += hpack_field(out + n, ":authority", "attack", 6);
    n += hpack_literal(out + n, 0x40, "x-pad", padding, pad);
    return n;
}

size_t raw_h2_request_headers(uint8_t *out, size_t pad) {
    size_t n = 0;
    n += hpack_field(out + n, ":method", "POST", 4);
    n += hpack_field(out + n, ":scheme", "http", 4);
    n += hpack_field(out + n, ":path", "/isn.v1.Search/Search", 21);
    n += hpack_field(out + n, ":authority", "attack", 6);
    n += hpack_field(out + n, "content-type", "application/grpc", 16);
    n += hpack_field(out + n, "te", "trailers", 8);
    if (pad) {
        static char padding[1 << 16];
        memset(padding, 'x', sizeof padding);
        n += hpack_field(out + n, "x-pad", padding, pad);
    }
    return n;
}

/* Protobuf by hand: field 1 string, field 3 varint, field 30 string (tag 242 = 0xf2 0x01). */
size_t raw_h2_search_message(uint8_t *out, const char *query, uint32_t k, const char *field) {
    size_t q = strlen(query), n = ISN_GRPC_PREFIX_BYTES;
    out[n++] = 0x0a, out[n++] = (uint8_t)q;
    memcpy(out + n, query, q), n += q;
    out[n++] = 0x18;
    for (; k >= 128; k >>= 7) out[n++] = (uint8_t)(k | 128);
    out[n++] = (uint8_t)k;
    if (field) {
        size_t f = strlen(field);
        out[n++] = 0xf2, out[n++] = 0x01, out[n++] = (uint8_t)f;
        memcpy(out + n, field, f), n += f;
    }
    isn_grpc_write_prefix(out, (uint32_t)(n - ISN_GRPC_PREFIX_BYTES));
    return n;
}

size_t raw_h2_search_request(uint8_t *out, uint32_t stream, const char *query, uint32_t k, const char *field) {
    uint8_t block[512], message[300];
    size_t n = raw_h2_frame(out, FRAME_HEADERS, FLAG_END_HEADERS, stream, block, raw_h2_request_headers(block, 0));
    n += raw_h2_frame(out + n, FRAME_DATA, FLAG_END_STREAM, stream, message, raw_h2_search_message(message, query, k, field));
    return n;
}

int raw_h2_connect(int port, const uint32_t *settings, int num_settings) {
    int fd = harness_connect(port);
    if (fd < 0) return -1;
    uint8_t buf[128], payload[64];
    for (int i = 0; i < num_settings; i++) {
        uint8_t *p = payload + 6 * i;
        p[0] = (uint8_t)(settings[2 * i] >> 8), p[1] = (uint8_t)settings[2 * i];
        uint32_t v = settings[2 * i + 1];
        p[2] = (uint8_t)(v >> 24), p[3] = (uint8_t)(v >> 16), p[4] = (uint8_t)(v >> 8), p[5] = (uint8_t)v;
    }
    memcpy(buf, PREFACE, 24);
    size_t n = 24 + raw_h2_frame(buf + 24, FRAME_SETTINGS, 0, 0, payload, (size_t)num_settings * 6);
    if (!raw_h2_send_all(fd, buf, n)) {
        close(fd);
        return -1;
    }
    return fd;
}

int raw_h2_read_frame(int fd, raw_h2_frame_in *f, int timeout_ms) {
    uint8_t hd[9];
    size_t have = 0, need = 9;
    uint8_t *dst = hd;
    int64_t deadline = harness_now_ms() + timeout_ms;
    for (int part = 0; part < 2; part++) {
        while (have < need) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int wait = (int)(deadline - harness_now_ms());
            if (wait <= 0 || poll(&p, 1, wait) <= 0) return -2;
            ssize_t n = recv(fd, dst + have, need - have, 0);
            if (n <= 0) return -1;
            have += (size_t)n;
        }
        if (part == 0) {
            f->len = (uint32_t)hd[0] << 16 | (uint32_t)hd[1] << 8 | hd[2];
            f->type = hd[3], f->flags = hd[4];
            f->stream = ((uint32_t)hd[5] & 0x7f) << 24 | (uint32_t)hd[6] << 16 | (uint32_t)hd[7] << 8 | hd[8];
            if (f->len > sizeof f->payload) return -1;
            dst = f->payload, have = 0, need = f->len;
        }
    }
    return 0;
}
