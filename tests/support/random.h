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

#endif
