/* isn-agg never turns one query into a loop of nested calls. One isnd serves partition 1 (it counts
 * the Searches it gets); partition 0 leads back to an aggregator:
 *  - by static configuration, to isn-agg's own listening address (or, listening on every address,
 *    to any address of this host): isn-agg refuses to start, naming the replica;
 *  - by static configuration through a second aggregator (A's partition 0 is B, B's is A): the
 *    first query is refused FAILED_PRECONDITION with "request loop", and isnd saw at most 2 Searches
 *    for it (one from each aggregator); the replica that led back is out of rotation;
 *  - by DNS, a name whose address is isn-agg's own: the address is skipped, /readyz says why, and
 *    the first query is refused with "request loop"; isnd saw at most 2 Searches;
 *  - a Search whose isn-via already names AGG_MAX_HOPS (8) aggregators is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/dns_server.h"
#include "tests/support/tier.h"

static tier t; /* one partition of the corpus: the isnd that serves "partition 1" */
static harness agg_a, agg_b;

static int setup(void **state) {
    (void)state;
    tier_init(&t);
    if (tier_write_synthetic_corpus(&t, 3, 800) != 0 || tier_build(&t, 1, false, "") != 0) return -1;
    const char *extra[] = {"--partition-id", "1", NULL};
    if (tier_start_replicas(&t, 1, extra) != 0) return -1;
    harness_prepare_init(&agg_a);
    harness_prepare_init(&agg_b);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (agg_a.work_dir[0]) harness_cleanup(&agg_a);
    if (agg_b.work_dir[0]) harness_cleanup(&agg_b);
    tier_cleanup(&t);
    return 0;
}

/* Searches isnd has answered (every status). */
static long long isnd_searches(void) {
    static char page[1 << 17];
    if (harness_http_get(&t.replicas[0][0], "/metrics", page, sizeof page) != 200) return -1;
    long long sum = 0;
    const char *needle = "\nisn_requests_total{method=\"isn.v1.Search/Search\"";
    for (const char *p = strstr(page, needle); p; p = strstr(p + 1, needle)) sum += atoll(strchr(p, '}') + 2);
    return sum;
}

/* One Search through `target`: its reply (status and words). */
static isn_grpc_search_reply search_through(const harness *target, const char *via) {
    isn_grpc_client *c = support_connect(target->grpc_address);
    assert_non_null(c);
    isn_grpc_search_request rq = {.query = "wind tunnel", .timeout_ms = 1000, .via = via};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(c, &rq, &reply, err, sizeof err), 0);
    isn_grpc_close(c);
    return reply;
}

/* Starts agg_a listening on listen_host:PORT with partition 0's replicas "replica_host:PORT,<isnd>",
 * PORT a free port; it must refuse to start. A free port can be taken by another process's connection
 * before isn-agg binds it: then another port. */
static void start_with_own_address(const char *listen_host, const char *replica_host) {
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = support_free_port();
        char listen[64], own[160];
        snprintf(listen, sizeof listen, "%s:%d", listen_host, port);
        snprintf(own, sizeof own, "%s:%d,%s", replica_host, port, t.replicas[0][0].grpc_address);
        const char *partitions[] = {own, t.replicas[0][0].grpc_address, NULL};
        const char *extra[] = {"--listen", listen, NULL};
        assert_int_not_equal(harness_start_agg(&agg_a, partitions, extra), 0);
        if (!harness_log_has(&agg_a, "address already in use")) return;
    }
}

static void test_own_address_in_the_configuration_is_refused(void **state) {
    (void)state;
    start_with_own_address("127.0.0.1", "127.0.0.1");
    assert_true(harness_log_has(&agg_a, "partition 0: replica 127.0.0.1:"));
    assert_true(harness_log_has(&agg_a, "is this isn-agg's own listening address"));
    /* listening on every address: any address of this host at that port is its own */
    start_with_own_address("0.0.0.0", "127.0.0.2");
    assert_true(harness_log_has(&agg_a, "replica 127.0.0.2:"));
    assert_true(harness_log_has(&agg_a, "is this isn-agg's own listening address"));
}

static void test_two_aggregators_that_send_to_each_other(void **state) {
    (void)state;
    int ports[2];
    assert_int_equal(support_free_ports(ports, 2), 0);
    const int port_a = ports[0], port_b = ports[1];
    char listen_a[64], listen_b[64];
    snprintf(listen_a, sizeof listen_a, "127.0.0.1:%d", port_a);
    snprintf(listen_b, sizeof listen_b, "127.0.0.1:%d", port_b);
    const char *partitions_a[] = {listen_b, t.replicas[0][0].grpc_address, NULL};
    const char *partitions_b[] = {listen_a, t.replicas[0][0].grpc_address, NULL};
    /* ready with half the partitions: each then tells the other's health check SERVING */
    const char *extra_a[] = {"--listen", listen_a, "--set", "ready_coverage=0.5", "--set", "probe_interval_ms=50", NULL};
    const char *extra_b[] = {"--listen", listen_b, "--set", "ready_coverage=0.5", "--set", "probe_interval_ms=50", NULL};
    assert_int_equal(harness_start_agg(&agg_a, partitions_a, extra_a), 0);
    assert_int_equal(harness_start_agg(&agg_b, partitions_b, extra_b), 0);
    char series_a[128], series_b[128];
    snprintf(series_a, sizeof series_a, "isn_agg_replica_up{partition=\"0\",replica=\"%s\"}", listen_b);
    snprintf(series_b, sizeof series_b, "isn_agg_replica_up{partition=\"0\",replica=\"%s\"}", listen_a);
    for (int64_t end = harness_now_ms() + 10000;
         harness_now_ms() < end && (harness_metric(&agg_a, series_a) != 1 || harness_metric(&agg_b, series_b) != 1);)
        harness_sleep_ms(20);
    assert_int_equal(harness_metric(&agg_a, series_a), 1);
    assert_int_equal(harness_metric(&agg_b, series_b), 1);

    long long before = isnd_searches();
    isn_grpc_search_reply reply = search_through(&agg_a, NULL);
    long long searches = isnd_searches() - before;
    fprintf(stderr, "test_agg_loops: A <-> B: status %d \"%s\"; isnd saw %lld Searches\n", reply.status, reply.message,
            searches);
    assert_int_equal(reply.status, ISN_GRPC_STATUS_FAILED_PRECONDITION);
    assert_non_null(strstr(reply.message, "request loop"));
    assert_true(searches <= 2);
    snprintf(series_a, sizeof series_a, "isn_agg_replica_leads_back{partition=\"0\",replica=\"%s\"}", listen_b);
    assert_int_equal(harness_metric(&agg_a, series_a), 1);
    assert_true(harness_metric(&agg_a, "isn_agg_loop_refusals_total") + harness_metric(&agg_b, "isn_agg_loop_refusals_total") >= 1);
    /* the next query is refused too, without a call to B */
    reply = search_through(&agg_a, NULL);
    assert_int_equal(reply.status, ISN_GRPC_STATUS_FAILED_PRECONDITION);
    assert_non_null(strstr(reply.message, "request loop"));
    assert_int_equal(harness_stop(&agg_a), 0);
    assert_int_equal(harness_stop(&agg_b), 0);
}

static void test_dns_name_of_its_own_address(void **state) {
    (void)state;
    dns_server *dns = dns_server_start();
    assert_non_null(dns);
    dns_server_set(dns, "self.isn.test", "127.0.0.1");
    int port = support_free_port();
    char listen[64], partition[128], servers[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(partition, sizeof partition, "dns:self.isn.test:%d", port);
    snprintf(servers, sizeof servers, "dns_servers=127.0.0.1:%d", dns_server_port(dns));
    const char *partitions[] = {partition, t.replicas[0][0].grpc_address, NULL};
    const char *extra[] = {"--listen", listen, "--set", servers, "--set", "dns_interval_ms=100", NULL};
    assert_int_equal(harness_start_agg(&agg_a, partitions, extra), 0);
    for (int64_t end = harness_now_ms() + 10000; harness_now_ms() < end && !harness_log_has(&agg_a, "own listening address");)
        harness_sleep_ms(20);
    assert_true(harness_log_has(&agg_a, "(a request loop): skipped"));
    char body[1024];
    assert_int_equal(harness_http_get(&agg_a, "/readyz", body, sizeof body), 503);
    assert_non_null(strstr(body, "own address"));

    long long before = isnd_searches();
    isn_grpc_search_reply reply = search_through(&agg_a, NULL);
    long long searches = isnd_searches() - before;
    fprintf(stderr, "test_agg_loops: DNS names isn-agg itself: status %d \"%s\"; isnd saw %lld Searches\n", reply.status,
            reply.message, searches);
    assert_int_equal(reply.status, ISN_GRPC_STATUS_FAILED_PRECONDITION);
    assert_non_null(strstr(reply.message, "request loop"));
    assert_true(searches <= 2);

    /* a request that already went through 8 aggregators */
    reply = search_through(&agg_a, "a1,a2,a3,a4,a5,a6,a7,a8");
    assert_int_equal(reply.status, ISN_GRPC_STATUS_FAILED_PRECONDITION);
    assert_non_null(strstr(reply.message, "went through 8 aggregators"));
    assert_int_equal(harness_stop(&agg_a), 0);
    dns_server_stop(dns);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_address_in_the_configuration_is_refused),
        cmocka_unit_test(test_two_aggregators_that_send_to_each_other),
        cmocka_unit_test(test_dns_name_of_its_own_address),
    };
    return cmocka_run_group_tests_name("agg_loops", tests, setup, teardown);
}
