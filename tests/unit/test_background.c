/* base/background.c: background work runs lowered, on a thread of its own, and leaves the caller's
 * priority as it was. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/base.h"

static int own_nice(void) { return getpriority(PRIO_PROCESS, (id_t)gettid()); }

typedef struct {
    pid_t tid;
    int nice, policy;
} seen;

static void note_thread(void *arg) {
    seen *s = arg;
    s->tid = gettid();
    s->nice = own_nice();
    s->policy = sched_getscheduler(0);
}

static void test_run_lowered(void **state) {
    (void)state;
    const int before = own_nice();
    seen s = {0};
    isn_run_lowered(note_thread, &s);
    assert_int_not_equal(s.tid, 0);
    assert_int_not_equal(s.tid, gettid()); /* a thread of its own, whose priority ends with it */
    assert_int_equal(s.nice, 19);
    assert_int_equal(s.policy, SCHED_IDLE);
    assert_int_equal(own_nice(), before);
    assert_int_equal(sched_getscheduler(0), SCHED_OTHER);
}

static void *lower_and_report(void *arg) {
    isn_lower_this_thread();
    note_thread(arg);
    return NULL;
}

static void test_lower_this_thread(void **state) {
    (void)state;
    const int before = own_nice();
    seen s = {0};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, lower_and_report, &s), 0);
    pthread_join(thread, NULL);
    assert_int_equal(s.nice, 19);
    assert_int_equal(s.policy, SCHED_IDLE);
    assert_int_equal(own_nice(), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_lowered),
        cmocka_unit_test(test_lower_this_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
