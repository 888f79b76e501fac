/* Private to index/: packing of full 128-value blocks in four interleaved 32-bit lanes.
 * Value i is the (i / 4)-th b-bit field of lane i % 4; each lane fills its words from bit 0 upward
 * (a field may straddle two words) and word w of lane k is the little-endian word at byte
 * 16 * w + 4 * k. The layout lets one 16-byte load feed four values, so unpacking is a few vector
 * shifts and masks per four values; it takes exactly 16 * b bytes. */
#ifndef ISN_CODEC_BLOCK128_H
#define ISN_CODEC_BLOCK128_H

#include <stdint.h>

#define ISN_CODEC_BLOCK128_VALUES 128

/* Writes the low b bits (0..32) of the 128 values: 16 * b bytes. */
void isn_codec_pack_block128(const uint32_t *values, unsigned bits, uint8_t *out);

typedef void (*isn_codec_unpack128_fn)(const uint8_t *in, uint32_t *out);

/* One fully unrolled unpacker per width 0..32; each reads exactly 16 * b bytes and writes 128 values. */
extern const isn_codec_unpack128_fn isn_codec_unpack128[33];

#endif
