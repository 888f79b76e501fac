/* Posting codec decode speed on realistic value distributions, against a plain LEB128 varint decode of
 * the same values. Each distribution is decoded as many 128-value blocks: once from a buffer far larger
 * than the caches ("memory") and once from 32 blocks decoded over and over ("cache"). Every figure is
 * the median of 7 repetitions. Prints one JSON object on stdout.
 *   usage: bench_codec [integers per distribution, default 16777216 (64 MB of uint32)] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"

#define REPETITIONS 7
#define CACHE_BLOCKS 32

static uint64_t rng_state = 42;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(void) { return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0; }

/* Geometric on 0, 1, 2... with the given mean. */
static uint32_t rng_geometric(double mean) {
    const double v = floor(log(rng_unit()) / log(mean / (mean + 1.0)));
    return v >= 4294967295.0 ? UINT32_MAX : (uint32_t)v;
}

/* Doc-id gaps of mean `mean_gap` are stored minus one. */
static uint32_t gap_value(double mean_gap) { return rng_geometric(mean_gap - 1.0); }

/* Term frequency minus one: mostly 0-2, a tail, and rare large counts (log-uniform up to 2^14). */
static uint32_t tf_value(void) {
    const double r = rng_unit();
    if (r < 0.70) return 0;
    if (r < 0.88) return 1;
    if (r < 0.95) return 2;
    if (r < 0.995) return 3 + rng_geometric(3.0);
    return (uint32_t)exp2(4.0 + 10.0 * rng_unit());
}

typedef struct {
    const char *name;
    double mean_gap; /* 0: term frequencies */
} distribution;

static size_t varint_encode(const uint32_t *values, size_t count, uint8_t *out) {
    uint8_t *p = out;
    for (size_t i = 0; i < count; i++) {
        uint32_t v = values[i];
        while (v >= 0x80) {
            *p++ = (uint8_t)(v | 0x80);
            v >>= 7;
        }
        *p++ = (uint8_t)v;
    }
    return (size_t)(p - out);
}

static const uint8_t *varint_decode_block(const uint8_t *in, uint32_t *values) {
    for (int i = 0; i < ISN_BLOCK_SIZE; i++) {
        uint32_t byte = *in++, v = byte & 0x7F;
        for (unsigned shift = 7; byte & 0x80; shift += 7) {
            byte = *in++;
            v |= (byte & 0x7F) << shift;
        }
        values[i] = v;
    }
    return in;
}

static volatile uint32_t sink; /* keeps the decoded values observable */

static const uint8_t *codec_decode_block(const uint8_t *in, uint32_t *values) {
    return in + isn_codec_decode(in, ISN_BLOCK_SIZE, values);
}

/* Decodes `blocks` consecutive blocks `passes` times; returns integers per second. Always inlined, so
 * each caller's decoder is a direct call, as if the loop were written out for it. */
static inline __attribute__((always_inline)) double time_decode(const uint8_t *(*decode_block)(const uint8_t *, uint32_t *),
                                                               const uint8_t *encoded, size_t blocks, size_t passes) {
    uint32_t values[ISN_BLOCK_SIZE], check = 0;
    const double start = isn_now_seconds();
    for (size_t pass = 0; pass < passes; pass++) {
        const uint8_t *p = encoded;
        for (size_t b = 0; b < blocks; b++) {
            p = decode_block(p, values);
            check ^= values[b % ISN_BLOCK_SIZE];
        }
    }
    const double seconds = isn_now_seconds() - start;
    sink = check;
    return (double)(blocks * passes * ISN_BLOCK_SIZE) / seconds;
}

static double time_codec(const uint8_t *encoded, size_t blocks, size_t passes) {
    return time_decode(codec_decode_block, encoded, blocks, passes);
}

static double time_varint(const uint8_t *encoded, size_t blocks, size_t passes) {
    return time_decode(varint_decode_block, encoded, blocks, passes);
}

int main(int argc, char **argv) {
    size_t total = (size_t)1 << 24;
    if (argc > 1) {
        char *end;
        const unsigned long long requested = strtoull(argv[1], &end, 10);
        if (*end != '\0' || requested < (unsigned long long)ISN_BLOCK_SIZE * CACHE_BLOCKS) {
            fprintf(stderr, "bench_codec: the integer count must be a number >= %d, got '%s'\n",
                    ISN_BLOCK_SIZE * CACHE_BLOCKS, argv[1]);
            return 2;
        }
        total = (size_t)requested;
    }
    const size_t blocks = total / ISN_BLOCK_SIZE;
    total = blocks * ISN_BLOCK_SIZE;
    const size_t cache_passes = blocks / CACHE_BLOCKS;

    static const distribution distributions[] = {
        {"dense", 2.0}, {"medium", 30.0}, {"sparse", 3000.0}, {"term_freqs", 0.0}};

    uint32_t *values = malloc(total * sizeof *values);
    /* sized for the worst case; the pages never written are never mapped */
    uint8_t *encoded = malloc(blocks * ISN_CODEC_MAX_BLOCK_BYTES + ISN_CODEC_READ_SLACK);
    uint8_t *varint = malloc(total * 5 + ISN_CODEC_READ_SLACK);
    if (!values || !encoded || !varint) {
        fprintf(stderr, "bench_codec: out of memory for %zu integers\n", total);
        return 1;
    }

    printf("{\"benchmark\":\"codec_decode\",\"integers_per_distribution\":%zu,\"repetitions\":%d,\"results\":[",
           total, REPETITIONS);
    for (size_t d = 0; d < sizeof distributions / sizeof distributions[0]; d++) {
        const distribution *dist = &distributions[d];
        for (size_t i = 0; i < total; i++)
            values[i] = dist->mean_gap > 0 ? gap_value(dist->mean_gap) : tf_value();

        const double encode_start = isn_now_seconds();
        size_t encoded_bytes = 0;
        for (size_t b = 0; b < blocks; b++) {
            encoded_bytes += isn_codec_encode(values + b * ISN_BLOCK_SIZE, ISN_BLOCK_SIZE, encoded + encoded_bytes);
        }
        const double encode_rate = (double)total / (isn_now_seconds() - encode_start);
        memset(encoded + encoded_bytes, 0, ISN_CODEC_READ_SLACK);
        const size_t varint_bytes = varint_encode(values, total, varint);

        /* The round trip is checked before anything is timed. */
        uint32_t check[ISN_BLOCK_SIZE];
        const uint8_t *p = encoded;
        for (size_t b = 0; b < blocks; b++) {
            p += isn_codec_decode(p, ISN_BLOCK_SIZE, check);
            if (memcmp(check, values + b * ISN_BLOCK_SIZE, sizeof check) != 0) {
                fprintf(stderr, "bench_codec: %s block %zu does not decode to its values\n", dist->name, b);
                return 1;
            }
        }

        double memory[REPETITIONS], cache[REPETITIONS], varint_memory[REPETITIONS], varint_cache[REPETITIONS];
        for (int r = 0; r < REPETITIONS; r++) {
            memory[r] = time_codec(encoded, blocks, 1);
            cache[r] = time_codec(encoded, CACHE_BLOCKS, cache_passes);
            varint_memory[r] = time_varint(varint, blocks, 1);
            varint_cache[r] = time_varint(varint, CACHE_BLOCKS, cache_passes);
        }
        printf("%s{\"distribution\":\"%s\",\"ints_per_s\":%.4g,\"ints_per_s_cache\":%.4g,\"bits_per_int\":%.3f,"
               "\"varint_ints_per_s\":%.4g,\"varint_ints_per_s_cache\":%.4g,\"varint_bits_per_int\":%.3f,"
               "\"encode_ints_per_s\":%.4g}",
               d ? "," : "", dist->name, bench_median(memory, REPETITIONS), bench_median(cache, REPETITIONS),
               8.0 * (double)encoded_bytes / (double)total, bench_median(varint_memory, REPETITIONS),
               bench_median(varint_cache, REPETITIONS), 8.0 * (double)varint_bytes / (double)total, encode_rate);
        fflush(stdout);
    }
    printf("]}\n");
    free(varint);
    free(encoded);
    free(values);
    return 0;
}
