/* Private to index/: bit streams of fixed-width fields, the layout of partial blocks (n < 128) and of
 * exception high parts. Field i of a b-bit stream is at stream bits [i * b, i * b + b); stream bit j is
 * bit j % 8 of byte j / 8. */
#ifndef ISN_CODEC_STREAM_H
#define ISN_CODEC_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline size_t isn_codec_stream_bytes(uint32_t count, unsigned bits) { return ((size_t)count * bits + 7) / 8; }

static inline uint32_t isn_codec_width_mask(unsigned bits) { return (uint32_t)((UINT64_C(1) << bits) - 1); }

/* Field `index` of a stream of `bits`-bit fields (bits 1..32, mask = isn_codec_width_mask(bits)).
 * Loads the 8 bytes at the field's first byte, which hold any field of up to 32 bits starting at bit
 * 0..7 of it: reads at most 7 bytes past the end of the stream. */
static inline uint32_t isn_codec_stream_field(const uint8_t *stream, uint32_t index, unsigned bits, uint32_t mask) {
    const size_t bit = (size_t)index * bits;
    uint64_t word;
    memcpy(&word, stream + bit / 8, sizeof word);
    return (uint32_t)(word >> (bit % 8)) & mask;
}

/* Writes the low `bits` (0..32) bits of each value: exactly isn_codec_stream_bytes(count, bits) bytes. */
void isn_codec_pack_stream(const uint32_t *values, uint32_t count, unsigned bits, uint8_t *out);

/* Reads `count` fields of `bits` (0..32) bits; may read 7 bytes past the stream. */
void isn_codec_unpack_stream(const uint8_t *in, uint32_t count, unsigned bits, uint32_t *out);

#endif
