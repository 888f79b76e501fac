#include <stdatomic.h>

#include "base/base.h"

static _Atomic uint32_t next_stripe;
static _Thread_local uint32_t thread_stripe = UINT32_MAX;

uint32_t isn_counter_stripe_of_thread(void) {
    if (thread_stripe == UINT32_MAX)
        thread_stripe = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % ISN_COUNTER_STRIPES;
    return thread_stripe;
}

uint64_t isn_striped_sum(const isn_striped_counter *counter) {
    uint64_t sum = 0;
    for (int i = 0; i < ISN_COUNTER_STRIPES; i++) sum += __atomic_load_n(&counter->stripes[i].value, __ATOMIC_RELAXED);
    return sum;
}
