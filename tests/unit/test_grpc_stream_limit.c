/* The loop's stream limit (grpc/stream_limit.c) on a fake clock: a loop saturated with bytes left
 * in its sockets lowers the streams per connection window after window, down to a floor; saturated
 * without a backlog (busy with replies, or its own work) it keeps them; with time to spare it raises
 * them back to the configured maximum, a quarter at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grpc/server_internal.h"

#define W ISN_GRPC_STREAM_LIMIT_WINDOW_NS
#define TARGET_NS (ISN_GRPC_DEFAULT_STREAM_LIMIT_TARGET_US * 1000ull) /* server.stream_limit_target's default */

/* One window whose idle share is `idle` (0..1), with or without a socket backlog. */
static bool window(isn_grpc_stream_limit *l, uint64_t *now, uint64_t *idle_total, double idle, bool backlog) {
    l->backlog = backlog;
    *now += W;
    *idle_total += (uint64_t)(idle * (double)W);
    return isn_grpc_stream_limit_window(l, *now, *idle_total);
}

static void saturated_with_a_backlog_lowers_then_recovers(void **state) {
    (void)state;
    isn_grpc_stream_limit l;
    uint64_t now = 1000, idle = 0;
    isn_grpc_stream_limit_init(&l, 256, TARGET_NS, now, idle);
    /* within a window nothing changes */
    assert_false(isn_grpc_stream_limit_window(&l, now + W / 2, idle));
    assert_true(window(&l, &now, &idle, 0.01, true));
    assert_int_equal(l.limit, 192);
    for (int i = 0; i < 40; i++) window(&l, &now, &idle, 0.0, true);
    assert_int_equal(l.limit, ISN_GRPC_STREAM_LIMIT_MIN);
    assert_true(l.decreases >= 10);
    /* busy, but nothing waits in the sockets, and requests are read at once: kept */
    isn_grpc_stream_limit_note_wait(&l, TARGET_NS / 2);
    isn_grpc_stream_limit_note_wait(&l, 3 * TARGET_NS);
    assert_false(window(&l, &now, &idle, 0.02, false));
    assert_int_equal(l.limit, ISN_GRPC_STREAM_LIMIT_MIN);
    /* between the two thresholds: kept */
    assert_false(window(&l, &now, &idle, 0.10, true));
    /* time to spare: back up to the maximum, never past it */
    int windows = 0;
    while (l.limit < 256 && windows < 100) {
        window(&l, &now, &idle, 0.5, false);
        windows++;
    }
    assert_int_equal(l.limit, 256);
    assert_true(windows > 5);
    assert_false(window(&l, &now, &idle, 0.9, false));
    assert_int_equal(l.limit, 256);
}

/* Requests that all waited past the target between arrival and HEADERS are a queue in the loop, even
 * with no bytes left in the sockets (small requests on many connections); one read at once is not. */
static void a_standing_wait_at_headers_is_a_backlog(void **state) {
    (void)state;
    isn_grpc_stream_limit l;
    uint64_t now = 0, idle = 0;
    isn_grpc_stream_limit_init(&l, 256, TARGET_NS, now, idle);
    for (int i = 0; i < 100; i++) isn_grpc_stream_limit_note_wait(&l, 3 * TARGET_NS + i);
    assert_true(window(&l, &now, &idle, 0.0, false));
    assert_int_equal(l.limit, 192);
    for (int i = 0; i < 100; i++) isn_grpc_stream_limit_note_wait(&l, 3 * TARGET_NS);
    isn_grpc_stream_limit_note_wait(&l, 0);
    assert_false(window(&l, &now, &idle, 0.0, false));
    assert_int_equal(l.limit, 192);
}

/* The target is the loop's (server.stream_limit_target): the same waits are a queue under a shorter one, and
 * not under the default; a reload's new target applies from the next window. */
static void the_target_is_configured(void **state) {
    (void)state;
    isn_grpc_stream_limit l;
    uint64_t now = 0, idle = 0;
    isn_grpc_stream_limit_init(&l, 256, TARGET_NS, now, idle);
    for (int i = 0; i < 100; i++) isn_grpc_stream_limit_note_wait(&l, TARGET_NS / 2 + 1000);
    assert_false(window(&l, &now, &idle, 0.0, false));
    assert_int_equal(l.limit, 256);
    l.target_ns = TARGET_NS / 4;
    for (int i = 0; i < 100; i++) isn_grpc_stream_limit_note_wait(&l, TARGET_NS / 2 + 1000);
    assert_true(window(&l, &now, &idle, 0.0, false));
    assert_int_equal(l.limit, 192);
}

static void the_maximum_can_change(void **state) {
    (void)state;
    isn_grpc_stream_limit l;
    uint64_t now = 0, idle = 0;
    isn_grpc_stream_limit_init(&l, 100, TARGET_NS, now, idle);
    isn_grpc_stream_limit_set_max(&l, 10);
    assert_int_equal(l.limit, 10);
    /* a maximum under the floor is the floor */
    isn_grpc_stream_limit_set_max(&l, 2);
    for (int i = 0; i < 5; i++) window(&l, &now, &idle, 0.0, true);
    assert_int_equal(l.limit, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(saturated_with_a_backlog_lowers_then_recovers),
        cmocka_unit_test(a_standing_wait_at_headers_is_a_backlog),
        cmocka_unit_test(the_target_is_configured),
        cmocka_unit_test(the_maximum_can_change),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
