/* base/log.c's limiter: a line a peer can cause at will is written at most once per ISN_LOG_LIMIT_NS, the
 * next one saying how many were left out (a fake clock: no time is waited). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/base.h"

static void test_one_line_per_period_with_the_count_left_out(void **state) {
    (void)state;
    isn_log_limiter limiter = {0};
    uint64_t left_out = 99;
    const uint64_t t0 = 5 * ISN_LOG_LIMIT_NS;
    assert_true(isn_log_limiter_allows(&limiter, t0, &left_out)); /* the first ever */
    assert_int_equal(left_out, 0);
    for (uint64_t i = 1; i <= 1000; i++) assert_false(isn_log_limiter_allows(&limiter, t0 + i * 1000, &left_out));
    assert_int_equal(left_out, 0); /* untouched while nothing is written */
    assert_false(isn_log_limiter_allows(&limiter, t0 + ISN_LOG_LIMIT_NS - 1, &left_out));
    assert_true(isn_log_limiter_allows(&limiter, t0 + ISN_LOG_LIMIT_NS, &left_out));
    assert_int_equal(left_out, 1001);
    /* the period runs from the last line written, and a quiet spell writes the next event at once */
    assert_false(isn_log_limiter_allows(&limiter, t0 + 2 * ISN_LOG_LIMIT_NS - 1, &left_out));
    assert_true(isn_log_limiter_allows(&limiter, t0 + 10 * ISN_LOG_LIMIT_NS, &left_out));
    assert_int_equal(left_out, 1);
}

/* A clock that reads 0 (a test's, or a caller's first instant) still starts a period. */
static void test_time_zero_starts_a_period(void **state) {
    (void)state;
    isn_log_limiter limiter = {0};
    uint64_t left_out = 0;
    assert_true(isn_log_limiter_allows(&limiter, 0, &left_out));
    assert_false(isn_log_limiter_allows(&limiter, 1, &left_out));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_line_per_period_with_the_count_left_out),
        cmocka_unit_test(test_time_zero_starts_a_period),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
