#include "tests/support/random.h"

#include <math.h>

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

double support_rng_normal(void) {
    double u = support_rng_unit(), v = support_rng_unit();
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

uint32_t support_pick_cdf(const double *cdf, uint32_t n, double target) {
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
