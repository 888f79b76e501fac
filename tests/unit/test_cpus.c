/* base/cpus.c: the CPUs a process may use, from its affinity mask and its cgroup's quota, and binding a thread
 * to some of them. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"

static void test_quota_text(void **state) {
    (void)state;
    assert_int_equal(isn_cpu_quota_cpus("max 100000\n"), 0);
    assert_int_equal(isn_cpu_quota_cpus("200000 100000\n"), 2);
    assert_int_equal(isn_cpu_quota_cpus("150000 100000"), 2); /* a part of a CPU counts as one */
    assert_int_equal(isn_cpu_quota_cpus("50000 100000"), 1);
    assert_int_equal(isn_cpu_quota_cpus("-1 100000"), 0); /* v1's "no quota" */
    assert_int_equal(isn_cpu_quota_cpus("100000"), 0);
    assert_int_equal(isn_cpu_quota_cpus(""), 0);
    assert_int_equal(isn_cpu_quota_cpus(NULL), 0);
}

/* Pinned to one CPU (as taskset -c 0 does), the process may use one, whatever the machine has. */
static void test_affinity_counts(void **state) {
    (void)state;
    cpu_set_t before;
    assert_int_equal(sched_getaffinity(0, sizeof before, &before), 0);
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &before)) first = c;
    assert_true(first >= 0);
    const uint32_t all = isn_cpus_available();
    assert_true(all >= 1 && all <= (uint32_t)CPU_COUNT(&before));
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    const uint32_t pinned = isn_cpus_available();
    assert_int_equal(sched_setaffinity(0, sizeof before, &before), 0);
    assert_int_equal(pinned, 1);
}

/* A thread bound to its last CPU lists that one alone; bound back to all, it lists them all again, in order.
 * Binding to none is an error that says so. */
static void test_bind_and_list(void **state) {
    (void)state;
    int cpus[CPU_SETSIZE];
    const uint32_t have = isn_this_thread_cpus(cpus, CPU_SETSIZE);
    assert_true(have >= 1 && have <= CPU_SETSIZE);
    assert_int_equal(isn_this_thread_cpus(NULL, 0), have); /* counted without room */
    for (uint32_t i = 1; i < have; i++) assert_true(cpus[i] > cpus[i - 1]);
    char err[128];
    assert_int_equal(isn_bind_this_thread(&cpus[have - 1], 1, err, sizeof err), 0);
    int now[CPU_SETSIZE];
    assert_int_equal(isn_this_thread_cpus(now, CPU_SETSIZE), 1);
    assert_int_equal(now[0], cpus[have - 1]);
    assert_int_equal(isn_bind_this_thread(cpus, have, err, sizeof err), 0);
    assert_int_equal(isn_this_thread_cpus(now, CPU_SETSIZE), have);
    assert_memory_equal(now, cpus, have * sizeof *cpus);
    assert_int_equal(isn_bind_this_thread(cpus, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "no CPU"));
}

/* Two threads bound to one CPU, each spinning until both have spun a while: one of them waited, ready to
 * run, while the other had the CPU, and the kernel's run delay says so. */
typedef struct {
    int cpu;
    int bound; /* isn_bind_this_thread's result: cmocka's asserts belong to the main thread */
    pid_t tid;
    int64_t waited_ns;
} spinner;

static _Atomic int spinners_ready;

static void *spin(void *arg) {
    spinner *me = arg;
    char err[128];
    me->bound = isn_bind_this_thread(&me->cpu, 1, err, sizeof err);
    me->tid = gettid();
    atomic_fetch_add(&spinners_ready, 1);
    while (atomic_load(&spinners_ready) < 2) {}
    /* spin on CPU time, not wall time: each needs the CPU for this long, so the other waits meanwhile */
    struct timespec t;
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    while (t.tv_sec == 0 && t.tv_nsec < 50 * 1000 * 1000);
    me->waited_ns = isn_thread_cpu_wait_ns(me->tid);
    return NULL;
}

static void test_cpu_wait_of_threads_sharing_a_cpu(void **state) {
    (void)state;
    unsigned long long on_cpu = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    bool accounted = f && fscanf(f, "%llu", &on_cpu) == 1 && on_cpu > 0;
    if (f) fclose(f);
    if (!accounted) {
        printf("cpu wait check skipped: this kernel keeps no run delays (/proc/thread-self/schedstat)\n");
        skip();
    }
    assert_true(isn_thread_cpu_wait_ns(gettid()) >= 0);
    assert_int_equal(isn_thread_cpu_wait_ns(0x7ffffff0), -1); /* no such thread */
    int cpu;
    assert_true(isn_this_thread_cpus(&cpu, 1) >= 1);
    spinner a = {.cpu = cpu}, b = {.cpu = cpu};
    pthread_t ta, tb;
    atomic_store(&spinners_ready, 0);
    assert_int_equal(pthread_create(&ta, NULL, spin, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, spin, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.bound, 0);
    assert_int_equal(b.bound, 0);
    assert_true(a.waited_ns >= 0 && b.waited_ns >= 0);
    assert_true(a.waited_ns + b.waited_ns > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quota_text),
        cmocka_unit_test(test_affinity_counts),
        cmocka_unit_test(test_bind_and_list),
        cmocka_unit_test(test_cpu_wait_of_threads_sharing_a_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
