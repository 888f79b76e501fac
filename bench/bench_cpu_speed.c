/* How fast the core it runs on is right now: nanoseconds per step of a fixed chain of dependent
 * integer operations (multiply, add, shift, xor), whose time depends on nothing but the core's clock:
 * no memory beyond registers, no system calls. On a virtual machine whose host shares its cores with
 * other guests the clock moves by several percent over minutes, and a CPU-bound node's capacity moves
 * with it; bench/overload_device.sh runs this beside each sustained-rate search so that two searches
 * can be told apart from two speeds of the machine (bench/overload_verdicts.py, must-show 3).
 *
 *   bench_cpu_speed [--seconds S]     (default 1; pin it with taskset to the core to measure)
 *
 * Prints one JSON line: the median, 10th and 90th percentile of the per-slice ns per step (slices of
 * about 5 ms), the slices, and the seconds measured; then what two machines of the same step speed may still
 * differ in, and what a serving loop does for every request: the median ns of one monotonic clock read
 * (a few ns where the kernel's clocksource is read in user space, a system call where it is not) and of one
 * system call that does nothing (the kernel's entry and exit, which its speculation mitigations lengthen). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STEPS_PER_SLICE 2000000
#define MAX_SLICES 20000

static double monotonic_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One slice of the chain; the state goes in and out so that no step can be skipped or hoisted. */
static uint64_t chain(uint64_t state) {
    for (int i = 0; i < STEPS_PER_SLICE; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        state ^= state >> 29;
    }
    return state;
}

#define CALLS_PER_SLICE 20000
#define CALL_SLICES 25

/* The median over CALL_SLICES slices of ns per call of one clock read (syscalls false) or one getppid. */
static double ns_per_call(int syscalls) {
    double per_call[CALL_SLICES];
    struct timespec sink;
    for (int s = 0; s < CALL_SLICES; s++) {
        double before = monotonic_seconds();
        for (int i = 0; i < CALLS_PER_SLICE; i++) {
            if (syscalls) syscall(SYS_getppid);
            else clock_gettime(CLOCK_MONOTONIC, &sink);
        }
        per_call[s] = (monotonic_seconds() - before) * 1e9 / CALLS_PER_SLICE;
    }
    qsort(per_call, CALL_SLICES, sizeof *per_call, by_value);
    return per_call[CALL_SLICES / 2];
}

int main(int argc, char **argv) {
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            char *end;
            seconds = strtod(argv[++i], &end);
            if (*end || !(seconds > 0 && seconds <= 600)) {
                fprintf(stderr, "bench_cpu_speed: --seconds wants a number of seconds in (0, 600], got \"%s\"\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_cpu_speed [--seconds S]\n");
            return 2;
        }
    }
    static double ns_per_step[MAX_SLICES];
    int slices = 0;
    uint64_t state = 88172645463325252ull;
    state = chain(state); /* a first slice to wake the core from a low-power state; not counted */
    double start = monotonic_seconds(), now = start;
    while (now - start < seconds && slices < MAX_SLICES) {
        double before = monotonic_seconds();
        state = chain(state);
        now = monotonic_seconds();
        ns_per_step[slices++] = (now - before) * 1e9 / STEPS_PER_SLICE;
    }
    qsort(ns_per_step, (size_t)slices, sizeof *ns_per_step, by_value);
    /* the state is printed so that the compiler must compute it */
    const double clock_read_ns = ns_per_call(0), syscall_ns = ns_per_call(1);
    printf("{\"ns_per_step\": %.4f, \"p10\": %.4f, \"p90\": %.4f, \"slices\": %d, \"seconds\": %.3f, \"state\": %llu, "
           "\"clock_read_ns\": %.1f, \"syscall_ns\": %.1f}\n",
           ns_per_step[slices / 2], ns_per_step[slices / 10], ns_per_step[slices * 9 / 10], slices, now - start,
           (unsigned long long)(state & 0xffff), clock_read_ns, syscall_ns);
    return 0;
}
