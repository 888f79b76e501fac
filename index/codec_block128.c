/* Full 128-value blocks in four interleaved lanes (layout in codec_block128.h).
 *
 * The unpackers are one template, unpack_lanes(), instantiated per width with a constant `bits`;
 * the compiler unrolls its 32 steps and folds every word index, shift and mask into constants, so
 * each instance is straight-line code with no loop and no data-dependent branch.
 * The four lanes are a GCC/Clang generic vector (SSE2 on x86-64, NEON on ARM, scalar code elsewhere);
 * compilers without vector extensions, or a build with -DISN_CODEC_NO_VECTOR, get the same template
 * over a plain four-word struct. */
#include "index/codec_block128.h"

#include <string.h>

#if (defined(__GNUC__) || defined(__clang__)) && !defined(ISN_CODEC_NO_VECTOR)

typedef uint32_t lanes __attribute__((vector_size(16)));

static inline lanes lanes_load(const uint8_t *p) {
    lanes v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void lanes_store(uint32_t *p, lanes v) { memcpy(p, &v, sizeof v); }
static inline lanes lanes_shr(lanes v, unsigned s) { return v >> s; }
static inline lanes lanes_shl(lanes v, unsigned s) { return v << s; }
static inline lanes lanes_or(lanes a, lanes b) { return a | b; }
static inline lanes lanes_and_mask(lanes v, uint32_t mask) { return v & mask; }

#else

typedef struct {
    uint32_t lane[4];
} lanes;

static inline lanes lanes_load(const uint8_t *p) {
    lanes v;
    memcpy(v.lane, p, sizeof v.lane);
    return v;
}
static inline void lanes_store(uint32_t *p, lanes v) { memcpy(p, v.lane, sizeof v.lane); }
static inline lanes lanes_shr(lanes v, unsigned s) {
    for (int k = 0; k < 4; k++) v.lane[k] >>= s;
    return v;
}
static inline lanes lanes_shl(lanes v, unsigned s) {
    for (int k = 0; k < 4; k++) v.lane[k] <<= s;
    return v;
}
static inline lanes lanes_or(lanes a, lanes b) {
    for (int k = 0; k < 4; k++) a.lane[k] |= b.lane[k];
    return a;
}
static inline lanes lanes_and_mask(lanes v, uint32_t mask) {
    for (int k = 0; k < 4; k++) v.lane[k] &= mask;
    return v;
}

#endif

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* bits is 1..31 and a compile-time constant at every call site. */
static ALWAYS_INLINE void unpack_lanes(const uint8_t *restrict in, uint32_t *restrict out, const unsigned bits) {
    const uint32_t mask = (1u << bits) - 1;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 32
#elif defined(__clang__)
#pragma unroll
#endif
    for (unsigned field = 0; field < 32; field++) {
        const unsigned bit = field * bits, word = bit / 32, shift = bit % 32;
        lanes v = lanes_shr(lanes_load(in + 16 * word), shift);
        if (shift + bits > 32) v = lanes_or(v, lanes_shl(lanes_load(in + 16 * (word + 1)), 32 - shift));
        if (shift + bits != 32) v = lanes_and_mask(v, mask); /* a field ending at bit 31 has nothing above it */
        lanes_store(out + 4 * field, v);
    }
}

static void unpack128_0(const uint8_t *in, uint32_t *out) {
    (void)in;
    memset(out, 0, ISN_CODEC_BLOCK128_VALUES * sizeof *out);
}

/* At width 32 lane k's word w is value 4 * w + k: the layout is the plain array. */
static void unpack128_32(const uint8_t *in, uint32_t *out) { memcpy(out, in, ISN_CODEC_BLOCK128_VALUES * sizeof *out); }

#define UNPACKER(B)                                                   \
    static void unpack128_##B(const uint8_t *restrict in, uint32_t *restrict out) { \
        unpack_lanes(in, out, B);                                     \
    }

UNPACKER(1) UNPACKER(2) UNPACKER(3) UNPACKER(4) UNPACKER(5) UNPACKER(6) UNPACKER(7) UNPACKER(8)
UNPACKER(9) UNPACKER(10) UNPACKER(11) UNPACKER(12) UNPACKER(13) UNPACKER(14) UNPACKER(15) UNPACKER(16)
UNPACKER(17) UNPACKER(18) UNPACKER(19) UNPACKER(20) UNPACKER(21) UNPACKER(22) UNPACKER(23) UNPACKER(24)
UNPACKER(25) UNPACKER(26) UNPACKER(27) UNPACKER(28) UNPACKER(29) UNPACKER(30) UNPACKER(31)

const isn_codec_unpack128_fn isn_codec_unpack128[33] = {
    unpack128_0,  unpack128_1,  unpack128_2,  unpack128_3,  unpack128_4,  unpack128_5,  unpack128_6,
    unpack128_7,  unpack128_8,  unpack128_9,  unpack128_10, unpack128_11, unpack128_12, unpack128_13,
    unpack128_14, unpack128_15, unpack128_16, unpack128_17, unpack128_18, unpack128_19, unpack128_20,
    unpack128_21, unpack128_22, unpack128_23, unpack128_24, unpack128_25, unpack128_26, unpack128_27,
    unpack128_28, unpack128_29, unpack128_30, unpack128_31, unpack128_32,
};

void isn_codec_pack_block128(const uint32_t *values, unsigned bits, uint8_t *out) {
    if (bits == 0) return;
    const uint32_t mask = (uint32_t)((UINT64_C(1) << bits) - 1);
    uint32_t words[ISN_CODEC_BLOCK128_VALUES] = {0}; /* 4 lanes x at most 32 words */
    for (unsigned i = 0; i < ISN_CODEC_BLOCK128_VALUES; i++) {
        const unsigned lane = i % 4, bit = (i / 4) * bits, word = bit / 32, shift = bit % 32;
        const uint32_t v = values[i] & mask;
        words[4 * word + lane] |= v << shift;
        if (shift + bits > 32) words[4 * (word + 1) + lane] |= v >> (32 - shift);
    }
    memcpy(out, words, 16 * (size_t)bits); /* the words are little-endian in memory (index.h insists) */
}
