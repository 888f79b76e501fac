/* Posting codec: round trips over many distributions and every n, size accounting, the read-slack
 * promise (decoded from buffers of exactly size + slack, so AddressSanitizer sees any overread),
 * compression, the on-disk layout, and refusal of malformed headers. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index/index.h"
#include "tests/support/random.h"

/* Geometric on 0, 1, 2... with the given mean, as doc-gap-minus-one values are (inverse transform). */
static uint32_t rng_geometric(double mean) {
    const double u = ((double)(support_rng_next() >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
    const double v = floor(log(u) / log(mean / (mean + 1.0)));
    return v >= 4294967295.0 ? UINT32_MAX : (uint32_t)v;
}

/* Encodes, checks every size promise, decodes from an exact-size heap copy into an exact-size heap
 * output, and compares. Returns the encoded size. */
static size_t round_trip(const uint32_t *values, uint32_t n) {
    uint8_t out[ISN_CODEC_MAX_BLOCK_BYTES + 64];
    memset(out, 0xA5, sizeof out);
    const size_t size = isn_codec_encode(values, n, out);
    assert_true(size >= 1);
    assert_true(size <= ISN_CODEC_MAX_BLOCK_BYTES);
    assert_true(size <= 1 + 4 * (size_t)n); /* never worse than the raw values plus a header byte */
    for (size_t i = size; i < sizeof out; i++) assert_int_equal(out[i], 0xA5); /* wrote nothing past size */
    assert_int_equal(isn_codec_encoded_size(out, n), size);

    uint8_t *in = malloc(size + ISN_CODEC_READ_SLACK);
    uint32_t *decoded = malloc(n * sizeof *decoded);
    assert_non_null(in);
    assert_non_null(decoded);
    memcpy(in, out, size);
    memset(in + size, 0xFF, ISN_CODEC_READ_SLACK); /* slack bytes must not leak into the values */
    assert_int_equal(isn_codec_decode(in, n, decoded), size);
    for (uint32_t i = 0; i < n; i++) {
        if (decoded[i] != values[i]) fail_msg("n=%u value %u: decoded %u, expected %u", n, i, decoded[i], values[i]);
    }
    free(decoded);
    free(in);
    return size;
}

/* Round-trips `rounds` passes over the block lengths 1..ISN_BLOCK_SIZE, each block filled by fill; in
 * pass r the length grows by 1 + r % step_cycle. */
static void round_trip_lengths(int rounds, uint32_t step_cycle, void (*fill)(uint32_t *values, uint32_t n)) {
    uint32_t values[ISN_BLOCK_SIZE];
    for (int r = 0; r < rounds; r++) {
        for (uint32_t n = 1; n <= ISN_BLOCK_SIZE; n += 1 + (uint32_t)r % step_cycle) {
            fill(values, n);
            round_trip(values, n);
        }
    }
}

static void test_constant_blocks(void **state) {
    (void)state;
    static const uint32_t constants[] = {0, 1, 2, 7, 255, 256, 65535, 1u << 31, UINT32_MAX - 1, UINT32_MAX};
    uint32_t values[ISN_BLOCK_SIZE];
    for (size_t c = 0; c < sizeof constants / sizeof constants[0]; c++) {
        for (uint32_t n = 1; n <= ISN_BLOCK_SIZE; n++) {
            for (uint32_t i = 0; i < n; i++) values[i] = constants[c];
            const size_t size = round_trip(values, n);
            if (constants[c] == 0) assert_int_equal(size, 1); /* all zeros: the header alone */
        }
    }
}

/* Every width 0..32 and every n: values of at most b bits, one of exactly b bits. Packing all of them
 * at width b is one of the encoder's choices, so the size can be no larger than that. */
static void test_every_width_and_count(void **state) {
    (void)state;
    support_rng_seed(1);
    uint32_t values[ISN_BLOCK_SIZE];
    for (unsigned bits = 0; bits <= 32; bits++) {
        const uint64_t bound = UINT64_C(1) << bits;
        for (uint32_t n = 1; n <= ISN_BLOCK_SIZE; n++) {
            for (uint32_t i = 0; i < n; i++) values[i] = support_rng_below(bound);
            values[support_rng_below(n)] = (uint32_t)(bound - 1);
            const size_t size = round_trip(values, n);
            assert_true(size <= 1 + ((size_t)n * bits + 7) / 8);
        }
    }
}

static double geometric_mean;

static void fill_geometric(uint32_t *values, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) values[i] = rng_geometric(geometric_mean);
}

static void test_geometric_gaps(void **state) {
    (void)state;
    support_rng_seed(2);
    static const double means[] = {0.05, 0.5, 1, 3, 30, 300, 3000, 100000};
    for (size_t m = 0; m < sizeof means / sizeof means[0]; m++) {
        geometric_mean = means[m];
        round_trip_lengths(4, 1, fill_geometric);
    }
}

/* Small values with a few huge ones: the exception path, including exceptions at the first and last
 * positions and high parts of every width. */
static void test_outliers(void **state) {
    (void)state;
    support_rng_seed(3);
    uint32_t values[ISN_BLOCK_SIZE];
    for (unsigned small_bits = 0; small_bits <= 8; small_bits++) {
        for (uint32_t n = 1; n <= ISN_BLOCK_SIZE; n++) {
            for (int rep = 0; rep < 3; rep++) {
                for (uint32_t i = 0; i < n; i++) values[i] = support_rng_below(UINT64_C(1) << small_bits);
                const uint32_t outliers = 1 + support_rng_below(4);
                for (uint32_t k = 0; k < outliers; k++) {
                    const uint32_t position = k == 0 ? 0 : k == 1 ? n - 1 : support_rng_below(n);
                    const unsigned big_bits = 9 + support_rng_below(24); /* 9..32 bits */
                    const uint64_t top = UINT64_C(1) << (big_bits - 1);
                    values[position] = (uint32_t)(top | support_rng_below(top));
                }
                if (rep == 2) values[n / 2] = UINT32_MAX;
                round_trip(values, n);
            }
        }
    }
}

static void fill_term_frequencies(uint32_t *values, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t r = support_rng_below(100);
        values[i] = r < 60   ? 0
                    : r < 85 ? 1
                    : r < 95 ? 2
                    : r < 99 ? 3 + support_rng_below(10)
                             : support_rng_below(1u << (support_rng_below(20) + 1));
    }
}

static void test_term_frequencies(void **state) {
    (void)state;
    support_rng_seed(4);
    round_trip_lengths(64, 3, fill_term_frequencies);
}

static void fill_uniform_32_bit(uint32_t *values, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) values[i] = (uint32_t)support_rng_next();
}

static void test_uniform_random_32_bit(void **state) {
    (void)state;
    support_rng_seed(5);
    round_trip_lengths(20, 1, fill_uniform_32_bit);
}

/* Values that each take a random width, so the chosen width and the exception count vary widely. */
static void fill_mixed_widths(uint32_t *values, uint32_t n) {
    const unsigned low = support_rng_below(33), span = support_rng_below(33 - low);
    for (uint32_t i = 0; i < n; i++) values[i] = support_rng_below(UINT64_C(1) << (low + support_rng_below(span + 1)));
}

static void test_mixed_widths(void **state) {
    (void)state;
    support_rng_seed(6);
    round_trip_lengths(40, 1, fill_mixed_widths);
}

static void test_compression(void **state) {
    (void)state;
    support_rng_seed(7);
    uint8_t out[ISN_CODEC_MAX_BLOCK_BYTES];
    uint32_t values[ISN_BLOCK_SIZE];

    for (uint32_t i = 0; i < ISN_BLOCK_SIZE; i++) values[i] = support_rng_below(8);
    assert_true(isn_codec_encode(values, ISN_BLOCK_SIZE, out) <= 50);

    /* One huge outlier must not widen the whole block: 3-bit packing plus one exception. */
    values[77] = UINT32_MAX;
    assert_true(isn_codec_encode(values, ISN_BLOCK_SIZE, out) <= 60);

    for (uint32_t i = 0; i < ISN_BLOCK_SIZE; i++) values[i] = rng_geometric(1.0);
    assert_true(isn_codec_encode(values, ISN_BLOCK_SIZE, out) <= 1 + 128 * 4 / 8 + 3 + 12 + 12);

    for (uint32_t i = 0; i < 10; i++) values[i] = 1;
    assert_true(isn_codec_encode(values, 10, out) <= 3);
}

/* The layout is part of the index format (the GPU reads the same bytes): pin it down. */
static void test_layout(void **state) {
    (void)state;
    uint8_t out[ISN_CODEC_MAX_BLOCK_BYTES];

    /* n < 128: one bit stream, lowest bits first. */
    const uint32_t four[4] = {0, 1, 2, 3};
    assert_int_equal(isn_codec_encode(four, 4, out), 2);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 0xE4); /* 11 10 01 00 */

    /* One exception: 1-bit packing (5 bytes) beats 2-bit packing (10 bytes); value 3 = 2 has low bit 0
     * and high part 1. */
    uint32_t with_exception[40];
    for (int i = 0; i < 40; i++) with_exception[i] = 1;
    with_exception[3] = 2;
    assert_int_equal(isn_codec_encode(with_exception, 40, out), 3 + 5 + 1 + 1);
    assert_int_equal(out[0], 0x80 | 1);
    assert_int_equal(out[1], 0); /* one exception */
    assert_int_equal(out[2], 1); /* high parts of 1 bit */
    const uint8_t packed[5] = {0xF7, 0xFF, 0xFF, 0xFF, 0xFF};
    assert_memory_equal(out + 3, packed, 5);
    assert_int_equal(out[8], 3); /* position */
    assert_int_equal(out[9], 1); /* high part */

    /* n == 128: four lanes; value i is field i / 4 of lane i % 4. */
    uint32_t block[ISN_BLOCK_SIZE];
    for (uint32_t i = 0; i < ISN_BLOCK_SIZE; i++) block[i] = i % 4 == 1 ? 1 : 0;
    block[4 * 31 + 2] = 1;
    assert_int_equal(isn_codec_encode(block, ISN_BLOCK_SIZE, out), 1 + 16);
    assert_int_equal(out[0], 1);
    const uint8_t lanes[16] = {0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0x80, 0, 0, 0, 0};
    assert_memory_equal(out + 1, lanes, 16);
}

/* Blocks back to back, as a posting list lays them out: sizes alone walk the stream. */
static void test_concatenated_blocks(void **state) {
    (void)state;
    support_rng_seed(8);
    enum { BLOCKS = 200 };
    uint32_t *values = malloc(BLOCKS * ISN_BLOCK_SIZE * sizeof *values);
    uint32_t counts[BLOCKS];
    uint8_t *stream = malloc(BLOCKS * ISN_CODEC_MAX_BLOCK_BYTES + ISN_CODEC_READ_SLACK);
    assert_non_null(values);
    assert_non_null(stream);
    size_t total = 0;
    for (int b = 0; b < BLOCKS; b++) {
        counts[b] = b == BLOCKS - 1 ? 1 + support_rng_below(127) : ISN_BLOCK_SIZE;
        const double mean = (double)(1u << support_rng_below(14));
        for (uint32_t i = 0; i < counts[b]; i++) values[b * ISN_BLOCK_SIZE + i] = rng_geometric(mean);
        total += isn_codec_encode(values + b * ISN_BLOCK_SIZE, counts[b], stream + total);
    }
    size_t offset = 0;
    for (int b = 0; b < BLOCKS; b++) offset += isn_codec_encoded_size(stream + offset, counts[b]);
    assert_int_equal(offset, total);
    offset = 0;
    uint32_t decoded[ISN_BLOCK_SIZE];
    for (int b = 0; b < BLOCKS; b++) {
        offset += isn_codec_decode(stream + offset, counts[b], decoded);
        assert_memory_equal(decoded, values + b * ISN_BLOCK_SIZE, counts[b] * sizeof *decoded);
    }
    assert_int_equal(offset, total);
    free(stream);
    free(values);
}

static void test_malformed_headers(void **state) {
    (void)state;
    uint8_t block[ISN_CODEC_MAX_BLOCK_BYTES + ISN_CODEC_READ_SLACK] = {0};
    uint32_t values[ISN_BLOCK_SIZE];

    block[0] = 33; /* width over 32 */
    assert_int_equal(isn_codec_encoded_size(block, 128), 0);
    assert_int_equal(isn_codec_decode(block, 128, values), 0);
    block[0] = 0x40 | 3; /* reserved bit */
    assert_int_equal(isn_codec_encoded_size(block, 8), 0);
    assert_int_equal(isn_codec_decode(block, 8, values), 0);
    block[0] = 0x80 | 30; /* high parts of 3 bits on a 30-bit width overflow 32 bits */
    block[1] = 0;
    block[2] = 3;
    assert_int_equal(isn_codec_encoded_size(block, 8), 0);
    assert_int_equal(isn_codec_decode(block, 8, values), 0);
    block[0] = 0x80 | 1; /* 9 exceptions in 8 values */
    block[1] = 8;
    block[2] = 1;
    assert_int_equal(isn_codec_encoded_size(block, 8), 0);
    block[0] = 0x80 | 1; /* an exception at position 8 of 8 values */
    block[1] = 0;
    block[2] = 1;
    block[3 + 1] = 8;
    assert_int_equal(isn_codec_encoded_size(block, 8), 3 + 1 + 1 + 1);
    assert_int_equal(isn_codec_decode(block, 8, values), 0);
    block[3 + 1] = 7; /* the same block with a valid position decodes */
    block[3 + 2] = 1;
    assert_int_equal(isn_codec_decode(block, 8, values), 6);
    assert_int_equal(values[7], 2);

    assert_int_equal(isn_codec_encode(values, 0, block), 0); /* n out of range */
    assert_int_equal(isn_codec_encode(values, ISN_BLOCK_SIZE + 1, block), 0);
    assert_int_equal(isn_codec_decode(block, 0, values), 0);
    assert_int_equal(isn_codec_encoded_size(block, ISN_BLOCK_SIZE + 1), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant_blocks),   cmocka_unit_test(test_every_width_and_count),
        cmocka_unit_test(test_geometric_gaps),    cmocka_unit_test(test_outliers),
        cmocka_unit_test(test_term_frequencies),  cmocka_unit_test(test_uniform_random_32_bit),
        cmocka_unit_test(test_mixed_widths),      cmocka_unit_test(test_compression),
        cmocka_unit_test(test_layout),            cmocka_unit_test(test_concatenated_blocks),
        cmocka_unit_test(test_malformed_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
