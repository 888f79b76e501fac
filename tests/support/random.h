/* Reproducible random numbers for tests: splitmix64 on one process-wide state, so a test that seeds
 * it gets the same data on every run and machine. */
#ifndef ISN_TESTS_SUPPORT_RANDOM_H
#define ISN_TESTS_SUPPORT_RANDOM_H

#include <stdint.h>

void support_rng_seed(uint64_t seed);
uint64_t support_rng_next(void);
/* Uniform in [0, bound); 0 when bound is 0. */
uint32_t support_rng_below(uint64_t bound);
/* Uniform in [0, 1), 53 random bits. */
double support_rng_unit(void);
/* Standard normal (Box-Muller over two support_rng_unit draws). */
double support_rng_normal(void);
/* The first i in [0, n) with cdf[i] >= target (cdf non-decreasing; n - 1 when none): a draw from the
 * distribution whose running sums cdf holds, with target uniform in [0, cdf[n - 1]). */
uint32_t support_pick_cdf(const double *cdf, uint32_t n, double target);

#endif
