/* isnd past its capacity: one worker whose every job takes 10 ms (testing.job_delay), measured on a
 * few requests one at a time, gets a burst of 200 searches with a 100 ms deadline. What it can finish in time is answered, the rest is refused
 * RESOURCE_EXHAUSTED, and the refusals that came while no device could start anything in time are
 * made at HEADERS, before the request is read or analysed (isn_shed_at_headers_total, and the
 * message says so). Once the burst is over, every request is admitted again: admission recovers
 * by itself when load drops. No time is asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "grpc/grpc.h"
#include "tests/support/isnd_harness.h"

#define CLIENTS 4
#define BURST 200

static harness h;

static const char *const OVERLOAD_ARGS[] = {"--workers", "1", "--set", "testing.job_delay=10ms", NULL};

static void poll_all(isn_grpc_client **clients) {
    char err[256];
    for (int c = 0; c < CLIENTS; c++) isn_grpc_poll(clients[c], 1, err, sizeof err);
}

static void test_burst_is_refused_early_and_admission_recovers(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, OVERLOAD_ARGS), 0);
    isn_grpc_client *clients[CLIENTS];
    char err[256];
    for (int c = 0; c < CLIENTS; c++)
        if (!(clients[c] = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err))) fail_msg("connect: %s", err);
    isn_grpc_search_request request = {.query = "wind tunnel", .k = 10, .timeout_ms = 100};
    /* One at a time first: the node measures what a job takes (10 ms, which no cost model predicts). */
    for (int i = 0; i < 30; i++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(clients[0], &request, &reply, err, sizeof err), 0);
        assert_int_equal(reply.status, 0);
        isn_grpc_search_reply_free(&reply);
    }
    static isn_grpc_call *calls[BURST];
    for (int i = 0; i < BURST; i++)
        if (!(calls[i] = isn_grpc_search_start(clients[i % CLIENTS], &request, err, sizeof err)))
            fail_msg("start: %s", err);
    int ok = 0, exhausted = 0, unread = 0, other = 0;
    int64_t give_up = harness_now_ms() + 60000;
    for (int i = 0; i < BURST; i++) {
        while (!isn_grpc_call_done(calls[i])) {
            if (harness_now_ms() > give_up) fail_msg("replies still missing after 60 s");
            poll_all(clients);
        }
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
        if (reply.status == 0) ok++;
        else if (reply.status == 8) {
            exhausted++;
            if (strstr(reply.message, "refused unread")) unread++;
        } else if (reply.status != 4) { /* DEADLINE_EXCEEDED: admitted, then late behind the delay */
            other++;
            print_message("unexpected status %d: %s\n", reply.status, reply.message);
        }
        isn_grpc_search_reply_free(&reply);
    }
    print_message("burst: %d ok, %d refused (%d at HEADERS), %d other\n", ok, exhausted, unread, other);
    assert_int_equal(other, 0);
    assert_true(ok >= 1);
    assert_true(exhausted >= BURST / 2);
    assert_true(unread >= 1);
    assert_true(harness_metric(&h, "isn_shed_at_headers_total") >= unread);

    /* The burst is over: one request at a time is admitted again, every one. */
    harness_sleep_ms(300);
    for (int i = 0; i < 5; i++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(clients[0], &request, &reply, err, sizeof err), 0);
        if (reply.status != 0) fail_msg("after the burst: status %d: %s", reply.status, reply.message);
        isn_grpc_search_reply_free(&reply);
    }
    for (int c = 0; c < CLIENTS; c++) isn_grpc_close(clients[c]);
    assert_int_equal(harness_stop(&h), 0);
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, 1000);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    harness_cleanup(&h);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_is_refused_early_and_admission_recovers),
    };
    return cmocka_run_group_tests_name("isnd_overload", tests, setup, teardown);
}
