#include <time.h>

#include "base/base.h"

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t isn_now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

double isn_now_seconds(void) { return (double)isn_now_ns() / 1e9; }

uint64_t isn_thread_cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

double isn_wall_seconds(void) { return (double)clock_ns(CLOCK_REALTIME) / 1e9; }

uint64_t isn_wall_ns(void) { return clock_ns(CLOCK_REALTIME); }
