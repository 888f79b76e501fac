/* Posting codec: bit-packing with exceptions (PForDelta family).
 *
 * One encoded block of n values (1..128), little-endian throughout:
 *   byte 0        bits 0-5: b, the packed width (0..32); bit 6: zero; bit 7: the block has exceptions
 *   byte 1        (exceptions only) e - 1, where e (1..n) is the number of exceptions
 *   byte 2        (exceptions only) hb, the width of the exceptions' high parts (1..32 - b)
 *   packed area   (n * b + 7) / 8 bytes holding the low b bits of every value:
 *                   n == 128: four interleaved lanes of 32-bit words (codec_block128.h), for fast unpacking;
 *                   n <  128: one bit stream, value i at stream bits [i * b, i * b + b), where stream bit
 *                             j is bit j % 8 of byte j / 8.
 *   positions     e bytes, ascending: the indexes of the values >= 2^b
 *   high parts    (e * hb + 7) / 8 bytes: value >> b of each exception, a bit stream of hb-bit fields.
 * The encoder picks the b that minimises the block's size (ties go to the larger b: fewer exceptions to
 * patch). The GPU decodes these same bytes, so the layout is part of the index format.
 *
 * Malformed input (a width over 32, a set bit 6, more exceptions than values, high parts that do not
 * fit in 32 bits, a position >= n) makes decode and encoded_size return 0; a real block is never
 * empty. The index checksums its payload, so this is a guard, not the error report. */
#include "index/codec_block128.h"
#include "index/codec_stream.h"
#include "index/index.h"

#include <stdbool.h>
#include <string.h>

_Static_assert(ISN_BLOCK_SIZE == ISN_CODEC_BLOCK128_VALUES, "the unrolled unpackers are for 128-value blocks");

#define HEADER_WIDTH_MASK 0x3Fu
#define HEADER_RESERVED 0x40u
#define HEADER_EXCEPTIONS 0x80u
#define HEADER_BYTES 1u
#define HEADER_BYTES_WITH_EXCEPTIONS 3u

static inline unsigned bit_length(uint32_t v) { return v ? 32u - (unsigned)__builtin_clz(v) : 0u; }

static inline size_t block_size(uint32_t n, unsigned bits, uint32_t exceptions, unsigned high_bits) {
    if (exceptions == 0) return HEADER_BYTES + isn_codec_stream_bytes(n, bits);
    return HEADER_BYTES_WITH_EXCEPTIONS + isn_codec_stream_bytes(n, bits) + exceptions +
           isn_codec_stream_bytes(exceptions, high_bits);
}

size_t isn_codec_encode(const uint32_t *values, uint32_t n, uint8_t *out) {
    if (n == 0 || n > ISN_BLOCK_SIZE) return 0;

    /* Four partial histograms: runs of equal lengths would otherwise chain every increment through
     * one memory cell. */
    uint32_t partial_counts[4][33] = {{0}};
    unsigned max_length = 0;
    for (uint32_t i = 0; i < n; i++) {
        const unsigned length = bit_length(values[i]);
        partial_counts[i % 4][length]++;
        if (length > max_length) max_length = length;
    }
    uint32_t count_of_length[33];
    for (unsigned length = 0; length <= 32; length++)
        count_of_length[length] = partial_counts[0][length] + partial_counts[1][length] + partial_counts[2][length] +
                                  partial_counts[3][length];

    /* Width b leaves as exceptions the values longer than b bits, and their high parts need
     * max_length - b bits; scanning b downward accumulates the exception count. */
    unsigned best_bits = max_length;
    size_t best_size = block_size(n, max_length, 0, 0);
    uint32_t exceptions = 0;
    for (unsigned bits = max_length; bits-- > 0;) {
        exceptions += count_of_length[bits + 1];
        const size_t size = block_size(n, bits, exceptions, max_length - bits);
        if (size < best_size) {
            best_size = size;
            best_bits = bits;
        }
    }

    uint32_t exception_count = 0;
    uint8_t positions[ISN_BLOCK_SIZE];
    uint32_t high_parts[ISN_BLOCK_SIZE];
    if (best_bits < max_length) { /* so best_bits < 32 */
        for (uint32_t i = 0; i < n; i++) { /* branch-free: exceptions fall at random */
            const uint32_t high = values[i] >> best_bits;
            positions[exception_count] = (uint8_t)i;
            high_parts[exception_count] = high;
            exception_count += high != 0;
        }
    }

    uint8_t *p = out;
    *p++ = (uint8_t)(best_bits | (exception_count ? HEADER_EXCEPTIONS : 0));
    if (exception_count) {
        *p++ = (uint8_t)(exception_count - 1);
        *p++ = (uint8_t)(max_length - best_bits);
    }
    if (n == ISN_BLOCK_SIZE)
        isn_codec_pack_block128(values, best_bits, p);
    else
        isn_codec_pack_stream(values, n, best_bits, p);
    p += isn_codec_stream_bytes(n, best_bits);
    if (exception_count) {
        memcpy(p, positions, exception_count);
        p += exception_count;
        isn_codec_pack_stream(high_parts, exception_count, max_length - best_bits, p);
        p += isn_codec_stream_bytes(exception_count, max_length - best_bits);
    }
    return (size_t)(p - out);
}

typedef struct {
    unsigned bits;
    uint32_t exceptions;
    unsigned high_bits;
    size_t header_bytes;
} block_header;

static inline bool read_header(const uint8_t *in, uint32_t n, block_header *header) {
    if (n == 0 || n > ISN_BLOCK_SIZE) return false;
    const uint8_t first = in[0];
    header->bits = first & HEADER_WIDTH_MASK;
    if (header->bits > 32 || (first & HEADER_RESERVED)) return false;
    if (!(first & HEADER_EXCEPTIONS)) {
        header->exceptions = 0;
        header->high_bits = 0;
        header->header_bytes = HEADER_BYTES;
        return true;
    }
    header->exceptions = (uint32_t)in[1] + 1;
    header->high_bits = in[2];
    header->header_bytes = HEADER_BYTES_WITH_EXCEPTIONS;
    return header->exceptions <= n && header->high_bits >= 1 && header->bits + header->high_bits <= 32;
}

size_t isn_codec_encoded_size(const uint8_t *in, uint32_t n) {
    block_header header;
    if (!read_header(in, n, &header)) return 0;
    return block_size(n, header.bits, header.exceptions, header.high_bits);
}

size_t isn_codec_decode(const uint8_t *in, uint32_t n, uint32_t *values) {
    block_header header;
    if (!read_header(in, n, &header)) return 0;
    const uint8_t *packed = in + header.header_bytes;
    if (n == ISN_BLOCK_SIZE)
        isn_codec_unpack128[header.bits](packed, values);
    else
        isn_codec_unpack_stream(packed, n, header.bits, values);
    const size_t packed_bytes = isn_codec_stream_bytes(n, header.bits);
    if (header.exceptions == 0) return HEADER_BYTES + packed_bytes;

    const uint8_t *positions = packed + packed_bytes;
    const uint8_t *high_parts = positions + header.exceptions;
    const uint32_t high_mask = isn_codec_width_mask(header.high_bits);
    const uint32_t scale = UINT32_C(1) << header.bits; /* multiply: shifts by %cl are slow without BMI2 */
    for (uint32_t i = 0; i < header.exceptions; i++) {
        const uint32_t position = positions[i];
        if (position >= n) return 0;
        values[position] |= isn_codec_stream_field(high_parts, i, header.high_bits, high_mask) * scale;
    }
    return HEADER_BYTES_WITH_EXCEPTIONS + packed_bytes + header.exceptions +
           isn_codec_stream_bytes(header.exceptions, header.high_bits);
}
