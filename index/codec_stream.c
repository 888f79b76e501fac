/* Bit streams of fixed-width fields (layout in codec_stream.h).
 * Unpacking is specialised per width: eight b-bit fields take exactly b bytes, so within a group of
 * eight every field's byte offset and shift is a constant and the group is straight-line code. */
#include "index/codec_stream.h"

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

void isn_codec_pack_stream(const uint32_t *values, uint32_t count, unsigned bits, uint8_t *out) {
    if (bits == 0) return;
    const uint32_t mask = isn_codec_width_mask(bits);
    uint64_t pending = 0; /* at most 7 + 32 bits wait here */
    unsigned pending_bits = 0;
    for (uint32_t i = 0; i < count; i++) {
        pending |= (uint64_t)(values[i] & mask) << pending_bits;
        pending_bits += bits;
        while (pending_bits >= 8) {
            *out++ = (uint8_t)pending;
            pending >>= 8;
            pending_bits -= 8;
        }
    }
    if (pending_bits > 0) *out = (uint8_t)pending;
}

/* bits is 1..32 and a compile-time constant at every call site. */
static ALWAYS_INLINE void unpack_fixed(const uint8_t *in, uint32_t count, const unsigned bits, uint32_t *out) {
    const uint32_t mask = isn_codec_width_mask(bits);
    uint32_t i = 0;
    for (; i + 8 <= count; i += 8, in += bits) {
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8
#elif defined(__clang__)
#pragma unroll
#endif
        for (unsigned field = 0; field < 8; field++) out[i + field] = isn_codec_stream_field(in, field, bits, mask);
    }
    for (unsigned field = 0; i < count; i++, field++) out[i] = isn_codec_stream_field(in, field, bits, mask);
}

#define UNPACK_CASE(B)                         \
    case B:                                    \
        unpack_fixed(in, count, B, out);       \
        return;

void isn_codec_unpack_stream(const uint8_t *in, uint32_t count, unsigned bits, uint32_t *out) {
    switch (bits) {
        UNPACK_CASE(1) UNPACK_CASE(2) UNPACK_CASE(3) UNPACK_CASE(4) UNPACK_CASE(5) UNPACK_CASE(6)
        UNPACK_CASE(7) UNPACK_CASE(8) UNPACK_CASE(9) UNPACK_CASE(10) UNPACK_CASE(11) UNPACK_CASE(12)
        UNPACK_CASE(13) UNPACK_CASE(14) UNPACK_CASE(15) UNPACK_CASE(16) UNPACK_CASE(17) UNPACK_CASE(18)
        UNPACK_CASE(19) UNPACK_CASE(20) UNPACK_CASE(21) UNPACK_CASE(22) UNPACK_CASE(23) UNPACK_CASE(24)
        UNPACK_CASE(25) UNPACK_CASE(26) UNPACK_CASE(27) UNPACK_CASE(28) UNPACK_CASE(29) UNPACK_CASE(30)
        UNPACK_CASE(31) UNPACK_CASE(32)
    default:
        memset(out, 0, count * sizeof *out); /* width 0 */
    }
}
