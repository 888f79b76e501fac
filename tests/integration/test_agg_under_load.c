/* isn-agg with queries in flight: a tier of 2 partitions x 2 replicas whose every search takes
 * DELAY_MS more (testing.inject_delay), so that queries are surely in flight when something happens.
 * SIGTERM drains as isnd does: isn-bench sends load through isn-agg (hedging on) and the test sends
 * queries of its own:
 *  - SIGTERM while they are in flight: /readyz says "draining" at once, every query isn-agg had
 *    taken is answered OK and complete (the test's own, and every access-log line is code=OK;
 *    isn-bench sees no status but OK: what it sent after the GOAWAY was never taken), exit 0;
 *  - a second SIGTERM stops at once: what is in flight is answered UNAVAILABLE, exit 1;
 *  - with max_inflight_per_replica = 1, queries beyond what the replicas can hold are refused whole
 *    (RESOURCE_EXHAUSTED, "at capacity") while those taken are answered complete. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/tier.h"

#define DELAY_MS 200
#define OWN_QUERIES 4
#define BENCH_RATE 15
#define BENCH_SECONDS 4

static tier t;

static int setup(void **state) {
    (void)state;
    tier_init(&t);
    if (tier_write_synthetic_corpus(&t, 5, 1500) != 0 || tier_build(&t, 2, false, "") != 0) return -1;
    char delay[64];
    snprintf(delay, sizeof delay, "testing.inject_delay=%dms", DELAY_MS);
    const char *extra[] = {"--workers", "4", "--stats-listen", "", "--set", delay, "--set", "testing.inject_delay_percent=100", NULL};
    return tier_start_replicas(&t, 2, extra);
}

static int teardown(void **state) {
    (void)state;
    tier_cleanup(&t);
    return 0;
}

static int start_agg(void) {
    const char *extra[] = {"--set", "access_log=true", "--set", "hedge_initial_ms=100", "--set", "default_timeout_ms=5000", NULL};
    return tier_start_agg(&t, extra);
}

/* OWN_QUERIES searches sent on one connection and given time to reach isn-agg (not to be answered:
 * each takes DELAY_MS at the partitions). */
static isn_grpc_client *send_own_queries(isn_grpc_client_call **calls) {
    isn_grpc_client *c = support_connect(t.aggregator.grpc_address);
    assert_non_null(c);
    char err[256];
    static const char *const texts[OWN_QUERIES] = {"wind tunnel", "search engine", "heat transfer", "the boundary layer"};
    for (int i = 0; i < OWN_QUERIES; i++) {
        isn_grpc_search_request rq = {.query = texts[i], .k = 10, .timeout_ms = 5000};
        calls[i] = isn_grpc_search_start(c, &rq, err, sizeof err);
        assert_non_null(calls[i]);
    }
    assert_int_equal(isn_grpc_poll(c, 0, err, sizeof err), 0);
    harness_sleep_ms(DELAY_MS / 4);
    return c;
}

static void test_sigterm_answers_every_query_in_flight(void **state) {
    (void)state;
    assert_int_equal(start_agg(), 0);
    char queries[700], json_path[700], rate[16], seconds[16];
    snprintf(queries, sizeof queries, "%s/queries.tsv", t.whole.work_dir);
    snprintf(json_path, sizeof json_path, "%s/bench.json", t.whole.work_dir);
    assert_int_equal(support_write_text(queries, "1\twind tunnel\n2\tsearch\n3\tt5 t17 t300\n4\tflow layer\n5\tt2 index\n"), 0);
    snprintf(rate, sizeof rate, "%d", BENCH_RATE);
    snprintf(seconds, sizeof seconds, "%d", BENCH_SECONDS);
    const char *bench_args[] = {"--queries", queries, "--rate", rate, "--duration", seconds, "--warmup", "0",
                                "--deadline-ms", "3000", "--connections", "2", NULL};
    pid_t bench = support_bench_start(t.aggregator.build_dir, t.aggregator.grpc_address, bench_args, json_path);
    assert_true(bench > 0);
    harness_sleep_ms(1500);

    isn_grpc_client_call *calls[OWN_QUERIES];
    isn_grpc_client *c = send_own_queries(calls);
    assert_int_equal(kill(t.aggregator.pid, SIGTERM), 0);
    char body[512];
    int readyz = -1;
    for (int tries = 0; tries < 50 && readyz != 503; tries++, harness_sleep_ms(2))
        readyz = harness_http_get(&t.aggregator, "/readyz", body, sizeof body);
    assert_int_equal(readyz, 503);
    assert_non_null(strstr(body, "draining"));

    char err[256];
    for (int i = 0; i < OWN_QUERIES; i++) {
        assert_int_equal(isn_grpc_wait(c, calls[i], 10000, err, sizeof err), 0);
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
        if (reply.status != 0) fail_msg("query %d in flight at SIGTERM: status %d: %s", i, reply.status, reply.message);
        assert_true(reply.complete);
        assert_int_equal(reply.partitions_answered, 2);
        isn_grpc_search_reply_free(&reply);
    }
    isn_grpc_close(c);
    int status = harness_wait_exit(&t.aggregator, 20000);
    char *json = support_bench_finish(bench, json_path);
    assert_non_null(json);
    const char *search[] = {"access", "isn.v1.Search/Search", NULL}, *search_ok[] = {"access", "isn.v1.Search/Search", "code=OK", NULL};
    uint32_t taken = support_file_count(t.aggregator.log_path, search), ok = support_file_count(t.aggregator.log_path, search_ok);
    fprintf(stderr,
            "test_agg_under_load: isn-agg answered %u searches (%u OK), exit %d; isn-bench: %lld ok, %lld deadline exceeded, "
            "%lld shed, %lld unavailable, %lld other, %lld partial, %lld transport errors, %lld streams refused unprocessed, "
            "%lld not sent (after the GOAWAY)\n",
            taken, ok, status, support_json_number(json, "ok"), support_json_number(json, "deadline_exceeded"),
            support_json_number(json, "resource_exhausted"), support_json_number(json, "unavailable"),
            support_json_number(json, "other"), support_json_number(json, "partial"),
            support_json_number(json, "transport_error"), support_json_number(json, "refused_stream"),
            support_json_number(json, "not_sent"));
    assert_int_equal(status, 0);
    assert_true(taken >= OWN_QUERIES + 1);
    assert_int_equal(ok, taken);
    assert_true(support_json_number(json, "ok") > 0);
    assert_int_equal(support_json_number(json, "deadline_exceeded"), 0);
    assert_int_equal(support_json_number(json, "resource_exhausted"), 0);
    assert_int_equal(support_json_number(json, "unavailable"), 0);
    assert_int_equal(support_json_number(json, "other"), 0);
    assert_int_equal(support_json_number(json, "partial"), 0);
    assert_true(harness_log_has(&t.aggregator, "drain: done"));
    free(json);
}

static void test_second_sigterm_stops_at_once(void **state) {
    (void)state;
    assert_int_equal(start_agg(), 0);
    isn_grpc_client_call *calls[OWN_QUERIES];
    isn_grpc_client *c = send_own_queries(calls);
    assert_int_equal(kill(t.aggregator.pid, SIGTERM), 0);
    harness_sleep_ms(5);
    assert_int_equal(kill(t.aggregator.pid, SIGTERM), 0);
    assert_int_equal(harness_wait_exit(&t.aggregator, 10000), 1);
    char err[256];
    int unavailable = 0;
    for (int i = 0; i < OWN_QUERIES; i++) {
        isn_grpc_wait(c, calls[i], 5000, err, sizeof err);
        isn_grpc_search_reply reply;
        if (isn_grpc_search_finish(calls[i], &reply, err, sizeof err) == 0) {
            unavailable += reply.status == ISN_GRPC_STATUS_UNAVAILABLE;
            isn_grpc_search_reply_free(&reply);
        }
    }
    isn_grpc_close(c);
    fprintf(stderr, "test_agg_under_load: second SIGTERM: %d of %d queries answered UNAVAILABLE, the rest lost with the connection\n",
            unavailable, OWN_QUERIES);
    assert_true(harness_log_has(&t.aggregator, "again: stopping at once"));
    assert_true(harness_log_has(&t.aggregator, "queries in flight were answered UNAVAILABLE"));
}

static void test_queries_beyond_capacity_are_refused_whole(void **state) {
    (void)state;
    const char *extra[] = {"--set", "max_inflight_per_replica=1", "--set", "default_timeout_ms=5000", NULL};
    assert_int_equal(tier_start_agg(&t, extra), 0);
    enum { QUERIES = 6 };
    isn_grpc_client *c = support_connect(t.aggregator.grpc_address);
    assert_non_null(c);
    isn_grpc_client_call *calls[QUERIES];
    char err[256];
    for (int i = 0; i < QUERIES; i++) {
        isn_grpc_search_request rq = {.query = "wind tunnel", .k = 10, .timeout_ms = 5000};
        calls[i] = isn_grpc_search_start(c, &rq, err, sizeof err);
        assert_non_null(calls[i]);
    }
    int complete = 0, refused = 0;
    for (int i = 0; i < QUERIES; i++) {
        assert_int_equal(isn_grpc_wait(c, calls[i], 10000, err, sizeof err), 0);
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
        if (reply.status == 0 && reply.complete) complete++;
        else if (reply.status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED && strstr(reply.message, "at capacity")) refused++;
        else fail_msg("query %d: status %d, complete %d: %s", i, reply.status, reply.complete, reply.message);
        isn_grpc_search_reply_free(&reply);
    }
    isn_grpc_close(c);
    long long shed = harness_metric(&t.aggregator, "isn_agg_shed_at_capacity_total");
    fprintf(stderr, "test_agg_under_load: %d queries at once, 1 request per replica at most: %d complete, %d refused whole\n",
            QUERIES, complete, refused);
    assert_true(complete >= 1);
    assert_true(refused >= 1);
    assert_int_equal(shed, refused);
    assert_int_equal(harness_stop_checked(&t.aggregator), 0);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_answers_every_query_in_flight),
        cmocka_unit_test(test_second_sigterm_stops_at_once),
        cmocka_unit_test(test_queries_beyond_capacity_are_refused_whole),
    };
    return cmocka_run_group_tests_name("agg_under_load", tests, setup, teardown);
}
