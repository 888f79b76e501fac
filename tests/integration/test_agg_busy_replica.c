/* isn-agg in front of a replica that refuses streams unprocessed (REFUSED_STREAM: here its one request a
 * connection, server.max_requests_per_connection = 1, is held 300 ms by testing.inject_delay): four queries at
 * once, the replica takes one and refuses the other three streams. A refused stream says busy, as a shed does:
 * those queries are refused RESOURCE_EXHAUSTED, the replica stays in rotation (before, a refused stream was a
 * lost connection and took it out at once) and answers the next query. No time is asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/tier.h"

#define QUERIES 4

static tier t;

static int setup(void **state) {
    (void)state;
    tier_init(&t);
    if (tier_write_synthetic_corpus(&t, 11, 600) != 0 || tier_build(&t, 1, false, "") != 0) return -1;
    const char *extra[] = {"--stats-listen", "", "--set", "server.max_requests_per_connection=1", "--set",
                           "testing.inject_delay=300ms", "--set", "testing.inject_delay_percent=100", NULL};
    return tier_start_replicas(&t, 1, extra);
}

static int teardown(void **state) {
    (void)state;
    tier_cleanup(&t);
    return 0;
}

static void test_a_refused_stream_is_busy_not_broken(void **state) {
    (void)state;
    const char *extra[] = {"--set", "default_timeout_ms=5000", NULL};
    assert_int_equal(tier_start_agg(&t, extra), 0);
    isn_grpc_client *c = support_connect(t.aggregator.grpc_address);
    assert_non_null(c);
    char err[256];
    isn_grpc_client_call *calls[QUERIES];
    for (int i = 0; i < QUERIES; i++) {
        isn_grpc_search_request rq = {.query = "wind tunnel", .k = 10, .timeout_ms = 5000};
        calls[i] = isn_grpc_search_start(c, &rq, err, sizeof err);
        assert_non_null(calls[i]);
    }
    int complete = 0, busy = 0;
    for (int i = 0; i < QUERIES; i++) {
        assert_int_equal(isn_grpc_wait(c, calls[i], 10000, err, sizeof err), 0);
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
        if (reply.status == 0 && reply.complete) complete++;
        else if (reply.status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED) busy++;
        else fail_msg("query %d: status %d, complete %d: %s", i, reply.status, reply.complete, reply.message);
        isn_grpc_search_reply_free(&reply);
    }
    fprintf(stderr, "test_agg_busy_replica: %d queries at once: %d complete, %d refused as busy\n", QUERIES, complete, busy);
    assert_true(complete >= 1);
    assert_true(busy >= 1); /* the replica did refuse streams: the case under test happened */
    if (harness_log_has(&t.aggregator, "taken out")) {
        harness_dump_log(&t.aggregator);
        fail_msg("the busy replica was taken out of rotation");
    }
    /* still in rotation: the next query is answered by it */
    isn_grpc_search_request rq = {.query = "wind tunnel", .k = 10, .timeout_ms = 5000};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(c, &rq, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    assert_true(reply.complete);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(c);
    assert_int_equal(harness_stop_checked(&t.aggregator), 0);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_refused_stream_is_busy_not_broken),
    };
    return cmocka_run_group_tests_name("agg_busy_replica", tests, setup, teardown);
}
