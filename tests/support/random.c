#include "tests/support/random.h"

static uint64_t rng_state;

void support_rng_seed(uint64_t seed) { rng_state = seed; }

uint64_t support_rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint32_t support_rng_below(uint64_t bound) { return bound ? (uint32_t)(support_rng_next() % bound) : 0; }

double support_rng_unit(void) { return (double)(support_rng_next() >> 11) / 9007199254740992.0; }
