/* The client's adaptive throttle (grpc/client_throttle.c) on a fake clock against a simulated server
 * that accepts at most `capacity` requests per 100 ms and refuses the rest: offered three times that, the
 * client lets through about K times what the server accepts and refuses the rest itself; after a stall in
 * which the server accepted nothing it opens again within a window, where SRE's rule (every bucket counted)
 * would take dozens; off, it lets everything through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "grpc/client.h"

#define WINDOW_NS 1000000000ull
#define BUCKET_NS (WINDOW_NS / ISN_GRPC_THROTTLE_BUCKETS)

typedef struct {
    uint64_t offered, sent, accepted, refused_by_server, refused_here;
} tally;

static uint64_t rng_state = 42;
static double uniform(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* One bucket's time: `offered` requests evenly spread, each answered at once by a server that accepts the
 * first `capacity` of the bucket (accepting_nothing: none). */
static void one_bucket(isn_grpc_throttle *t, uint64_t *now, uint64_t offered, uint64_t capacity, tally *out) {
    uint64_t accepted = 0;
    for (uint64_t i = 0; i < offered; i++) {
        uint64_t at = *now + i * BUCKET_NS / offered;
        out->offered++;
        if (!isn_grpc_throttle_allow(t, at, uniform())) {
            out->refused_here++;
            continue;
        }
        out->sent++;
        bool accept = accepted < capacity;
        accepted += accept;
        isn_grpc_throttle_answered(t, at, accept ? ISN_GRPC_STATUS_OK : ISN_GRPC_STATUS_RESOURCE_EXHAUSTED);
        if (accept) out->accepted++;
        else out->refused_by_server++;
    }
    *now += BUCKET_NS;
}

static void at_three_times_capacity_sends_about_k_times_the_accepts(void **state) {
    (void)state;
    isn_grpc_throttle t;
    char err[256];
    assert_int_equal(isn_grpc_throttle_init(&t, 1.1, WINDOW_NS, err, sizeof err), 0);
    uint64_t now = 5 * WINDOW_NS;
    tally warm = {0}, measured = {0};
    for (int b = 0; b < 20; b++) one_bucket(&t, &now, 3000, 1000, &warm);
    for (int b = 0; b < 50; b++) one_bucket(&t, &now, 3000, 1000, &measured);
    /* the server answers at its capacity, nearly all of it accepted... */
    assert_true(measured.accepted >= 50 * 1000 * 95 / 100);
    /* ...and sees about 1.1 times that, not 3: the rest the client refused itself */
    assert_true(measured.sent <= measured.accepted * 125 / 100);
    assert_true(measured.refused_here >= measured.offered * 55 / 100);
    assert_true(t.refused_here == warm.refused_here + measured.refused_here);
}

static void opens_within_a_window_after_the_server_stalled(void **state) {
    (void)state;
    isn_grpc_throttle t;
    char err[256];
    assert_int_equal(isn_grpc_throttle_init(&t, 1.1, WINDOW_NS, err, sizeof err), 0);
    uint64_t now = 5 * WINDOW_NS;
    tally stall = {0}, after = {0}, settled = {0};
    /* a window in which the server refused everything */
    for (int b = 0; b < ISN_GRPC_THROTTLE_BUCKETS; b++) one_bucket(&t, &now, 1000, 0, &stall);
    assert_true(isn_grpc_throttle_refusal_probability(&t, now) > 0.9);
    /* the server is back, with room for all: within one more window the client refuses nothing */
    for (int b = 0; b < ISN_GRPC_THROTTLE_BUCKETS; b++) one_bucket(&t, &now, 1000, 2000, &after);
    assert_true(isn_grpc_throttle_refusal_probability(&t, now) == 0);
    for (int b = 0; b < 5; b++) one_bucket(&t, &now, 1000, 2000, &settled);
    assert_int_equal(settled.refused_here, 0);
    assert_int_equal(settled.sent, 5000);
}

static void below_capacity_refuses_nothing(void **state) {
    (void)state;
    isn_grpc_throttle t;
    char err[256];
    assert_int_equal(isn_grpc_throttle_init(&t, 1.1, WINDOW_NS, err, sizeof err), 0);
    uint64_t now = 0; /* the clock's very start too */
    tally all = {0};
    for (int b = 0; b < 30; b++) one_bucket(&t, &now, 900, 1000, &all);
    assert_int_equal(all.refused_here, 0);
    /* late answers and unknown ones: a late answer was taken on, no status is a refusal */
    assert_true(isn_grpc_throttle_answered(&t, now, ISN_GRPC_STATUS_DEADLINE_EXCEEDED));
    assert_true(isn_grpc_throttle_answered(&t, now, -1));
    assert_int_equal(t.refusals[(now / BUCKET_NS) % ISN_GRPC_THROTTLE_BUCKETS], 1);
    assert_int_equal(t.accepts[(now / BUCKET_NS) % ISN_GRPC_THROTTLE_BUCKETS], 1);
}

static void off_lets_everything_through(void **state) {
    (void)state;
    isn_grpc_throttle t;
    char err[256];
    assert_int_equal(isn_grpc_throttle_init(&t, 0, WINDOW_NS, err, sizeof err), 0);
    uint64_t now = WINDOW_NS;
    tally all = {0};
    for (int b = 0; b < 20; b++) one_bucket(&t, &now, 3000, 100, &all);
    assert_int_equal(all.refused_here, 0);
    assert_int_equal(all.sent, all.offered);
    assert_false(isn_grpc_throttle_answered(&t, now, ISN_GRPC_STATUS_OK));
}

static void bad_settings_are_named(void **state) {
    (void)state;
    isn_grpc_throttle t;
    char err[256];
    assert_int_equal(isn_grpc_throttle_init(&t, 0.5, WINDOW_NS, err, sizeof err), -1);
    assert_non_null(strstr(err, "accepts multiplier 0.5"));
    assert_int_equal(isn_grpc_throttle_init(&t, 2, 3, err, sizeof err), -1);
    assert_non_null(strstr(err, "window 3 ns"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(at_three_times_capacity_sends_about_k_times_the_accepts),
        cmocka_unit_test(opens_within_a_window_after_the_server_stalled),
        cmocka_unit_test(below_capacity_refuses_nothing),
        cmocka_unit_test(off_lets_everything_through),
        cmocka_unit_test(bad_settings_are_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
