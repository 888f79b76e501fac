/* isn-agg as an operator runs it: readiness that means "can answer" and a reload that fails nothing.
 *  - with no reachable partition: /readyz 503, Health NOT_SERVING, Search UNAVAILABLE; once the
 *    partitions' replicas start on those addresses the health checks bring them in: /readyz 200,
 *    Health SERVING, answers complete;
 *  - a replica that goes away is noticed without any query (health checks): not ready again;
 *  - server reflection (v1, v1alpha) on isn-agg and isnd, and a Health/Watch stream that sees a
 *    partition go away and come back, with the stock Python grpcio client;
 *  - SIGHUP under load adds a replica from the configuration file with zero failed queries; the old
 *    replica then stops and every query still answers completely (through the new one);
 *  - SIGHUP with a broken file keeps the aggregator and its configuration;
 *  - a replica address that accepts connections and never answers does not hold isn-agg's start. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/tier.h"
#include "grpc/server.h"
#include "grpc/client.h"

#define PARTITIONS 2
#define NUM_DOCS 1500

static harness source;                 /* builds the index the replicas serve */
static harness nodes[PARTITIONS];      /* first replica of each partition, on a port chosen up front */
static harness added;                  /* the replica a reload adds to partition 0 */
static harness aggregator;
static int ports[PARTITIONS];
static char config_path[600];

static void write_config(const char *partition0, const char *partition1) {
    FILE *f = fopen(config_path, "w");
    assert_non_null(f);
    fprintf(f, "[agg]\nglobal_stats = true\nprobe_interval_ms = 100\nhedge = false\npartition = %s\npartition = %s\n",
            partition0, partition1);
    assert_int_equal(fclose(f), 0);
}

static int start_node(harness *h, int port) {
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(h->index_dir, sizeof h->index_dir, "%s", source.index_dir);
    const char *extra[] = {"--listen", listen, "--stats-listen", "", "--workers", "1", NULL};
    return harness_start(h, NULL, extra);
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&source, NUM_DOCS);
    const char *self = getenv("ISN_TEST_ARGV0");
    for (int p = 0; p < PARTITIONS; p++) harness_init(&nodes[p], self);
    if (support_free_ports(ports, PARTITIONS) != 0) return -1;
    harness_init(&added, self);
    harness_init(&aggregator, self);
    snprintf(config_path, sizeof config_path, "%s/isn-agg.conf", aggregator.work_dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (aggregator.pid > 0) harness_stop(&aggregator);
    harness_cleanup(&aggregator);
    harness_cleanup(&added);
    for (int p = 0; p < PARTITIONS; p++) harness_cleanup(&nodes[p]);
    harness_cleanup(&source);
    return 0;
}

static isn_grpc_client *connect_to(const char *address) {
    isn_grpc_client *c = support_connect(address);
    if (!c) fail_msg("cannot connect to %s", address);
    return c;
}

static int health(const char *address) {
    isn_grpc_client *c = connect_to(address);
    int serving = 0;
    char err[256];
    int status = isn_grpc_health_check(c, "", &serving, err, sizeof err);
    isn_grpc_close(c);
    if (status != 0) fail_msg("health check: status %d: %s", status, err);
    return serving;
}

static int readyz(char *body, size_t cap) { return harness_http_get(&aggregator, "/readyz", body, cap); }

/* Waits up to 10 s for /readyz to give `status`. */
static bool wait_readyz(int status) {
    char body[1024];
    for (int64_t end = harness_now_ms() + 10000; harness_now_ms() < end; harness_sleep_ms(20))
        if (readyz(body, sizeof body) == status) return true;
    fprintf(stderr, "test_tier_ops: /readyz still says: %s", body);
    return false;
}

/* ------------------------------------------------------------------ tests */

static void test_ready_only_while_it_can_answer(void **state) {
    (void)state;
    char p0[64], p1[64];
    snprintf(p0, sizeof p0, "127.0.0.1:%d", ports[0]);
    snprintf(p1, sizeof p1, "127.0.0.1:%d", ports[1]);
    write_config(p0, p1);
    const char *none[] = {NULL};
    const char *extra[] = {"--config", config_path, NULL};
    assert_int_equal(harness_start_agg(&aggregator, none, extra), 0);

    /* nothing reachable: the start line says so, as /readyz does */
    char body[1024];
    assert_true(harness_log_has(&aggregator, "; not ready (no healthy replica in partition 0,1"));
    assert_false(harness_log_has(&aggregator, "ready:"));
    assert_int_equal(readyz(body, sizeof body), 503);
    assert_non_null(strstr(body, "partition 0,1"));
    assert_int_equal(health(aggregator.grpc_address), 2 /* NOT_SERVING */);
    isn_grpc_client *c = connect_to(aggregator.grpc_address);
    isn_grpc_search_request rq = {.query = "t1 t2", .timeout_ms = 2000};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(c, &rq, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, ISN_GRPC_STATUS_UNAVAILABLE);

    /* one partition up: still not ready (every partition is needed by default) */
    assert_int_equal(start_node(&nodes[0], ports[0]), 0);
    harness_sleep_ms(400);
    assert_int_equal(readyz(body, sizeof body), 503);
    assert_non_null(strstr(body, "partition 1"));
    assert_int_equal(health(aggregator.grpc_address), 2);

    /* both up: ready, and answers are complete */
    assert_int_equal(start_node(&nodes[1], ports[1]), 0);
    assert_true(wait_readyz(200));
    assert_int_equal(health(aggregator.grpc_address), 1 /* SERVING */);
    assert_int_equal(isn_grpc_search(c, &rq, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    assert_true(reply.complete);
    assert_int_equal(reply.partitions_answered, PARTITIONS);
    isn_grpc_search_reply_free(&reply);

    /* a partition goes away while nothing is asked: health checks notice */
    assert_int_equal(harness_stop(&nodes[1]), 0);
    assert_true(wait_readyz(503));
    assert_int_equal(health(aggregator.grpc_address), 2);
    assert_int_equal(start_node(&nodes[1], ports[1]), 0);
    assert_true(wait_readyz(200));
    isn_grpc_close(c);
}

static const char *python3(void) { return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

/* Reads the next status line the Watch client prints (10 s at most: the client has its own timeout). */
static void expect_line(FILE *f, const char *want) {
    char line[256];
    if (!fgets(line, sizeof line, f)) fail_msg("Watch client: no line (wanted %s)", want);
    line[strcspn(line, "\r\n")] = '\0';
    if (strcmp(line, want)) fail_msg("Watch client said \"%s\", wanted %s", line, want);
}

/* Reflection (v1, v1alpha) on both servers, and a grpcio Health/Watch client that sees a partition
 * go away and come back, with the stock Python gRPC stack. */
static void test_grpcio_watch_and_reflection(void **state) {
    (void)state;
    assert_true(aggregator.pid > 0);
    char cmd[1024];
    const char *targets[] = {aggregator.grpc_address, nodes[0].grpc_address};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s tests/integration/grpcio_stream_check.py --server %s --reflection --work-dir %s",
                 python3(), targets[i], aggregator.work_dir);
        assert_int_equal(system(cmd), 0);
    }
    snprintf(cmd, sizeof cmd,
             "%s tests/integration/grpcio_stream_check.py --server %s --watch --expect SERVING,NOT_SERVING,SERVING "
             "--timeout 30 --work-dir %s",
             python3(), aggregator.grpc_address, aggregator.work_dir);
    FILE *watch = popen(cmd, "r");
    assert_non_null(watch);
    expect_line(watch, "SERVING");
    assert_int_equal(harness_stop(&nodes[1]), 0);
    expect_line(watch, "NOT_SERVING");
    assert_int_equal(start_node(&nodes[1], ports[1]), 0);
    expect_line(watch, "SERVING");
    assert_int_equal(pclose(watch), 0);
    fprintf(stderr, "test_tier_ops: grpcio Watch saw SERVING, NOT_SERVING (partition 1 gone), SERVING (back)\n");
    assert_true(wait_readyz(200));
}

#define LOAD_CALLS 8

/* Keeps LOAD_CALLS searches in flight until `until_ms`; counts answers and failures. */
typedef struct {
    isn_grpc_client *client;
    isn_grpc_client_call *calls[LOAD_CALLS];
    uint64_t answered, failed, partial;
} load;

static void load_run(load *l, int64_t until_ms) {
    static const char *const texts[] = {"t1 t2", "t3", "t5 t17 t300", "t8 t9", "t2 t40"};
    char err[256];
    for (;;) {
        bool going = harness_now_ms() < until_ms, any = false;
        for (int i = 0; i < LOAD_CALLS; i++) {
            if (l->calls[i] && isn_grpc_client_call_done(l->calls[i])) {
                isn_grpc_search_reply reply;
                if (isn_grpc_search_finish(l->calls[i], &reply, err, sizeof err) != 0 || reply.status != 0) {
                    l->failed++;
                    fprintf(stderr, "test_tier_ops: failed query: status %d %s %s\n", reply.status, reply.message, err);
                } else {
                    l->answered++;
                    if (!reply.complete || reply.partitions_answered != PARTITIONS) l->partial++;
                }
                isn_grpc_search_reply_free(&reply);
                l->calls[i] = NULL;
            }
            if (!l->calls[i] && going) {
                isn_grpc_search_request rq = {.query = texts[(l->answered + (uint64_t)i) % 5], .timeout_ms = 3000};
                l->calls[i] = isn_grpc_search_start(l->client, &rq, err, sizeof err);
                if (!l->calls[i]) fail_msg("start: %s", err);
            }
            if (l->calls[i]) any = true;
        }
        if (!any) return;
        if (isn_grpc_poll(l->client, 5, err, sizeof err) != 0) fail_msg("poll: %s", err);
    }
}

static long long replica_requests(const char *address) {
    static char buf[1 << 16];
    if (harness_http_get(&aggregator, "/metrics", buf, sizeof buf) != 200) return -1;
    char needle[160];
    snprintf(needle, sizeof needle, "isn_agg_replica_requests_total{partition=\"0\",replica=\"%s\"} ", address);
    const char *p = strstr(buf, needle);
    return p ? atoll(p + strlen(needle)) : -1;
}

static void test_sighup_adds_a_replica_under_load(void **state) {
    (void)state;
    assert_true(aggregator.pid > 0);
    int port = support_free_port();
    assert_true(port > 0);
    assert_int_equal(start_node(&added, port), 0);
    char p0[128], p1[64];
    snprintf(p0, sizeof p0, "127.0.0.1:%d,%s", ports[0], added.grpc_address);
    snprintf(p1, sizeof p1, "127.0.0.1:%d", ports[1]);
    assert_int_equal(replica_requests(added.grpc_address), -1); /* not configured yet */

    load l = {.client = connect_to(aggregator.grpc_address)};
    load_run(&l, harness_now_ms() + 300);
    write_config(p0, p1);
    assert_int_equal(kill(aggregator.pid, SIGHUP), 0);
    load_run(&l, harness_now_ms() + 500);
    assert_true(harness_log_has(&aggregator, "reloaded: 2 partitions, 3 replicas"));
    assert_true(replica_requests(added.grpc_address) >= 0);

    /* the old replica of partition 0 stops: the new one answers for it */
    assert_int_equal(harness_stop(&nodes[0]), 0);
    load_run(&l, harness_now_ms() + 700);
    fprintf(stderr, "test_tier_ops: %llu answered, %llu failed, %llu partial across the reload\n",
            (unsigned long long)l.answered, (unsigned long long)l.failed, (unsigned long long)l.partial);
    assert_int_equal(l.failed, 0);
    assert_true(l.answered > 50);
    assert_true(replica_requests(added.grpc_address) > 0);
    isn_grpc_close(l.client);
}

static void test_sighup_with_a_bad_file_keeps_everything(void **state) {
    (void)state;
    assert_true(aggregator.pid > 0);
    FILE *f = fopen(config_path, "w");
    assert_non_null(f);
    fprintf(f, "[agg]\npartition = 127.0.0.1:notaport\n");
    assert_int_equal(fclose(f), 0);
    assert_int_equal(kill(aggregator.pid, SIGHUP), 0);
    harness_sleep_ms(300);
    assert_true(harness_log_has(&aggregator, "reload refused"));
    assert_true(replica_requests(added.grpc_address) > 0); /* still the configuration before */
    isn_grpc_client *c = connect_to(aggregator.grpc_address);
    isn_grpc_search_request rq = {.query = "t1 t2", .timeout_ms = 2000};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(c, &rq, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    assert_true(reply.complete);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(c);
}

/* A replica address where something accepts connections and never answers (a listener that never accepts):
 * isn-agg's start gives up on its Info after AGG_START_INFO_TIMEOUT_MS, takes it out and starts with the other
 * partition. Without the limit its start waited for ever. */
static void test_a_replica_that_never_answers_does_not_hold_the_start(void **state) {
    (void)state;
    if (aggregator.pid > 0) assert_int_equal(harness_stop(&aggregator), 0);
    int silent = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(silent >= 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof at;
    assert_int_equal(bind(silent, (struct sockaddr *)&at, sizeof at), 0);
    assert_int_equal(listen(silent, 16), 0);
    assert_int_equal(getsockname(silent, (struct sockaddr *)&at, &len), 0);
    char p0[64], p1[64];
    snprintf(p0, sizeof p0, "127.0.0.1:%d", ntohs(at.sin_port));
    snprintf(p1, sizeof p1, "127.0.0.1:%d", ports[1]);
    write_config(p0, p1);
    const char *none[] = {NULL};
    const char *extra[] = {"--config", config_path, NULL};
    assert_int_equal(harness_start_agg(&aggregator, none, extra), 0);
    assert_true(harness_log_has(&aggregator, "taken out: no answer to Info at start"));
    assert_true(harness_log_has(&aggregator, "partition 1: "));
    close(silent);
}

int main(int argc, char **argv) {
    (void)argc;
    setenv("ISN_TEST_ARGV0", argv[0], 1);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_only_while_it_can_answer),
        cmocka_unit_test(test_grpcio_watch_and_reflection),
        cmocka_unit_test(test_sighup_adds_a_replica_under_load),
        cmocka_unit_test(test_sighup_with_a_bad_file_keeps_everything),
        cmocka_unit_test(test_a_replica_that_never_answers_does_not_hold_the_start),
    };
    return cmocka_run_group_tests_name("tier_ops", tests, setup, teardown);
}
