/* isn-agg finds its replicas by DNS ("--partition dns:NAME:PORT"), as in Kubernetes where a headless
 * Service's name resolves to the ready pods of a partition. A small DNS server on loopback
 * (tests/support/dns_server.c) names the replicas; isnd replicas listen on 127.0.0.2, .3 and .4
 * (the same port per partition, as pods do). While isn-bench sends load through isn-agg:
 *  - before the names exist: not ready (Health NOT_SERVING) yet alive (health service "liveness");
 *  - a replica is added to partition 0's name: isn-agg's metrics show it, and it takes queries;
 *  - the first replica is removed from the name (then stopped, as Kubernetes stops a pod): it
 *    drains and disappears from the metrics;
 *  - the DNS server fails for a while: the replicas are kept, the failed lookups counted;
 *  - SIGHUP reloads the configuration: the replicas DNS named stay;
 * and isn-bench sees zero failed and zero partial queries. The time from each DNS change to the
 * metrics showing it is printed (a bound of a few intervals is asserted, not a timing).
 * A name with 3,000 A records that the server shuffles in every answer, resolved again 20 times and
 * more: the replicas are chosen from all of them (8, the cap) and never change after the first
 * answer; the log and the metrics say how many came. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "agg/agg.h"
#include "tests/support/dns_server.h"
#include "tests/support/tier.h"

#define NUM_DOCS 1500
#define INTERVAL_MS 200
#define BENCH_SECONDS 5
#define BENCH_RATE 400

static harness source;     /* builds the index every replica serves */
static harness aggregator;
static dns_server *dns;
static int ports[2];       /* one port per partition, as a headless Service's pods share theirs */

typedef struct {
    const char *ip;
    int partition;
    pid_t pid;
    char log[600], address[64];
} replica;

static replica replicas[] = {{"127.0.0.2", 0, -1, "", ""}, {"127.0.0.3", 0, -1, "", ""}, {"127.0.0.4", 1, -1, "", ""}};
#define NUM_REPLICAS (sizeof replicas / sizeof replicas[0])

/* isnd on IP:port of its partition (the harness' start-up looks for 127.0.0.1 only). */
static int start_replica(replica *r) {
    snprintf(r->address, sizeof r->address, "%s:%d", r->ip, ports[r->partition]);
    snprintf(r->log, sizeof r->log, "%s/isnd-%s.log", source.work_dir, r->ip);
    char isnd[600];
    snprintf(isnd, sizeof isnd, "%s/bin/isnd", source.build_dir);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(r->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, STDERR_FILENO), dup2(fd, STDOUT_FILENO), close(fd);
        execl(isnd, isnd, "--index", source.index_dir, "--listen", r->address, "--stats-listen", "", "--workers", "1",
              (char *)NULL);
        _exit(127);
    }
    r->pid = pid;
    for (int64_t end = harness_now_ms() + 30000; harness_now_ms() < end; harness_sleep_ms(20)) {
        if (support_file_has(r->log, "ready:")) return 0;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) break;
    }
    fprintf(stderr, "test_agg_dns: isnd on %s did not start; its log:\n", r->address);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cat %s >&2", r->log);
    if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
    return -1;
}

static int stop_replica(replica *r) {
    if (r->pid <= 0) return 0;
    kill(r->pid, SIGTERM);
    int status = -1;
    waitpid(r->pid, &status, 0);
    r->pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&source, NUM_DOCS);
    harness_init(&aggregator, getenv("ISN_TEST_ARGV0"));
    if (!(dns = dns_server_start())) return -1;
    return support_free_ports(ports, 2);
}

static int teardown(void **state) {
    (void)state;
    if (aggregator.pid > 0) harness_stop(&aggregator);
    for (size_t i = 0; i < NUM_REPLICAS; i++) stop_replica(&replicas[i]);
    dns_server_stop(dns);
    harness_cleanup(&aggregator);
    harness_cleanup(&source);
    return 0;
}

static char metrics[1 << 17];

static bool metrics_have(const char *needle) {
    return harness_http_get(&aggregator, "/metrics", metrics, sizeof metrics) == 200 && strstr(metrics, needle);
}

/* Waits until /metrics contains (or, with `present` false, lacks) `needle`; the milliseconds it
 * took, or -1 after 10 s. */
static int64_t wait_metrics(const char *needle, bool present) {
    int64_t start = harness_now_ms();
    for (int64_t end = start + 10000; harness_now_ms() < end; harness_sleep_ms(5))
        if (metrics_have(needle) == present) return harness_now_ms() - start;
    fprintf(stderr, "test_agg_dns: /metrics still %s \"%s\":\n%s\n", present ? "lacks" : "has", needle, metrics);
    return -1;
}

static long long metric_value(const char *series) {
    if (harness_http_get(&aggregator, "/metrics", metrics, sizeof metrics) != 200) return -1;
    char needle[300];
    snprintf(needle, sizeof needle, "%s ", series);
    const char *p = strstr(metrics, needle);
    return p ? atoll(p + strlen(needle)) : -1;
}

static double metric_double(const char *series) {
    if (harness_http_get(&aggregator, "/metrics", metrics, sizeof metrics) != 200) return -1;
    char needle[300];
    snprintf(needle, sizeof needle, "%s ", series);
    const char *p = strstr(metrics, needle);
    return p ? atof(p + strlen(needle)) : -1;
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* How long after `changed_at` (Unix seconds) isn-agg applied partition 0's last DNS change, in ms. */
static int64_t applied_after_ms(double changed_at) {
    double applied = metric_double("isn_agg_dns_last_change_timestamp_seconds{partition=\"0\"}");
    return (int64_t)((applied - changed_at) * 1000);
}

static void test_replicas_follow_dns_under_load(void **state) {
    (void)state;
    for (size_t i = 0; i < NUM_REPLICAS; i++) assert_int_equal(start_replica(&replicas[i]), 0);

    char p0[128], p1[128], servers[64], interval[64];
    snprintf(p0, sizeof p0, "dns:part0.isn.test:%d", ports[0]);
    snprintf(p1, sizeof p1, "dns:part1.isn.test.:%d", ports[1]); /* fully qualified, as deploy/kubernetes writes it */
    snprintf(servers, sizeof servers, "dns_servers=127.0.0.1:%d", dns_server_port(dns));
    snprintf(interval, sizeof interval, "dns_interval_ms=%d", INTERVAL_MS);
    const char *partitions[] = {p0, p1, NULL};
    /* global statistics: Info calls go to the replicas too, and count as in flight on them */
    const char *extra[] = {"--set", servers, "--set", interval, "--set", "probe_interval_ms=100", "--global-stats", NULL};
    assert_int_equal(harness_start_agg(&aggregator, partitions, extra), 0);

    /* no name resolves yet (NXDOMAIN): not ready, yet alive (the "liveness" health service of the
     * Kubernetes liveness and startup probes) */
    char body[1024], err[256];
    int serving = -1;
    harness_sleep_ms(3 * INTERVAL_MS);
    assert_int_equal(harness_http_get(&aggregator, "/readyz", body, sizeof body), 503);
    isn_grpc_client *c = isn_grpc_connect(aggregator.grpc_address, 5000, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(isn_grpc_health_check(c, "", &serving, err, sizeof err), 0);
    assert_int_equal(serving, 2 /* NOT_SERVING */);
    assert_int_equal(isn_grpc_health_check(c, "liveness", &serving, err, sizeof err), 0);
    assert_int_equal(serving, 1 /* SERVING */);
    isn_grpc_close(c);
    assert_int_equal(metric_value("isn_agg_partition_replicas{partition=\"0\"}"), 0);

    dns_server_set(dns, "part0.isn.test", "127.0.0.2");
    dns_server_set(dns, "part1.isn.test", "127.0.0.4");
    int64_t ready_by = harness_now_ms() + 10000;
    while (harness_http_get(&aggregator, "/readyz", body, sizeof body) != 200 && harness_now_ms() < ready_by)
        harness_sleep_ms(10);
    assert_int_equal(harness_http_get(&aggregator, "/readyz", body, sizeof body), 200);

    /* isn-bench: open loop at BENCH_RATE for BENCH_SECONDS, every query measured */
    char queries[600], bench_out[600], rate[16], seconds[16];
    snprintf(queries, sizeof queries, "%s/queries.tsv", aggregator.work_dir);
    snprintf(bench_out, sizeof bench_out, "%s/bench.json", aggregator.work_dir);
    snprintf(rate, sizeof rate, "%d", BENCH_RATE);
    snprintf(seconds, sizeof seconds, "%d", BENCH_SECONDS);
    assert_int_equal(support_write_text(queries, "1\tt1 t2\n2\tt3\n3\tt5 t17 t300\n4\tt8 t9\n5\tt2 t40\n"), 0);
    const char *bench_args[] = {"--queries", queries, "--rate", rate, "--duration", seconds, "--warmup", "0",
                                "--deadline-ms", "3000", "--connections", "2", NULL};
    pid_t bench_pid = support_bench_start(aggregator.build_dir, aggregator.grpc_address, bench_args, bench_out);
    assert_true(bench_pid > 0);
    harness_sleep_ms(1000);

    /* a replica added: DNS names .2 and .3 for partition 0 */
    char series[256];
    double changed_at = wall_seconds();
    dns_server_set(dns, "part0.isn.test", "127.0.0.2,127.0.0.3");
    snprintf(series, sizeof series, "isn_agg_replica_up{partition=\"0\",replica=\"%s\"} 1", replicas[1].address);
    int64_t added_ms = wait_metrics(series, true);
    assert_true(added_ms >= 0);
    int64_t added_applied_ms = applied_after_ms(changed_at);
    harness_sleep_ms(700);
    snprintf(series, sizeof series, "isn_agg_replica_requests_total{partition=\"0\",replica=\"%s\"}", replicas[1].address);
    long long new_replica_requests = metric_value(series);

    /* a replica removed: DNS names only .3; then it stops, as a deleted pod does */
    changed_at = wall_seconds();
    dns_server_set(dns, "part0.isn.test", "127.0.0.3");
    snprintf(series, sizeof series, "replica=\"%s\"", replicas[0].address);
    int64_t removed_ms = wait_metrics(series, false);
    assert_true(removed_ms >= 0);
    int64_t removed_applied_ms = applied_after_ms(changed_at);
    assert_int_equal(metric_value("isn_agg_dns_replica_changes_total{partition=\"0\",change=\"removed\"}"), 1);
    assert_int_equal(stop_replica(&replicas[0]), 0);

    /* the DNS server fails for a while: the replicas stay */
    long long failed_before = metric_value("isn_agg_dns_lookups_total{partition=\"0\",result=\"failed\"}");
    dns_server_fail(dns, true);
    harness_sleep_ms(INTERVAL_MS * 3);
    dns_server_fail(dns, false);
    long long failed_lookups = metric_value("isn_agg_dns_lookups_total{partition=\"0\",result=\"failed\"}") - failed_before;
    assert_true(failed_lookups > 0);
    assert_int_equal(metric_value("isn_agg_partition_replicas{partition=\"0\"}"), 1);
    assert_int_equal(metric_value("isn_agg_ready"), 1);

    /* SIGHUP (the same names): the replicas DNS named are kept, connections and all, under load */
    assert_int_equal(kill(aggregator.pid, SIGHUP), 0);
    harness_sleep_ms(300);
    assert_true(harness_log_has(&aggregator, "reloaded: 2 partitions, 2 replicas"));
    assert_int_equal(metric_value("isn_agg_partition_replicas{partition=\"0\"}"), 1);

    char *json = support_bench_finish(bench_pid, bench_out);
    assert_non_null(json);
    long long sent = support_json_number(json, "sent"), ok = support_json_number(json, "ok"),
              partial = support_json_number(json, "partial"), not_sent = support_json_number(json, "not_sent");
    free(json);
    fprintf(stderr,
            "test_agg_dns: isn-bench %lld sent, %lld ok, %lld partial, not_sent %lld; replica added: applied %lld ms after "
            "the DNS change, seen in /metrics by the test's polling after %lld ms; replica removed: applied after %lld ms, "
            "drained and gone from /metrics after %lld ms (re-resolve interval %d ms); the added replica had %lld "
            "requests 700 ms later; %lld failed lookups kept the replicas; %llu DNS queries answered\n",
            sent, ok, partial, not_sent, (long long)added_applied_ms, (long long)added_ms,
            (long long)removed_applied_ms, (long long)removed_ms, INTERVAL_MS,
            new_replica_requests, failed_lookups, (unsigned long long)dns_server_queries(dns));
    assert_true(sent >= BENCH_RATE * BENCH_SECONDS / 2);
    assert_int_equal(ok, sent);
    assert_int_equal(partial, 0);
    assert_int_equal(not_sent, 0);
    assert_true(new_replica_requests > 0);
    /* visible within the interval, plus the lookup and a scrape; 5 intervals is a bound, not a timing */
    assert_true(added_ms <= 5 * INTERVAL_MS + 1000);
    assert_true(removed_ms <= 5 * INTERVAL_MS + 1000);
    assert_true(added_applied_ms >= -50 && added_applied_ms <= 5 * INTERVAL_MS + 1000); /* clocks of two processes */
    assert_true(removed_applied_ms >= -50 && removed_applied_ms <= 5 * INTERVAL_MS + 1000);
    assert_true(harness_log_has(&aggregator, "added (DNS)"));
    assert_true(harness_log_has(&aggregator, "removed (DNS)"));
    /* SIGTERM: the resolver's handles close with the rest, so isn-agg exits 0 (and leak-free under ASan) */
    assert_int_equal(harness_stop_checked(&aggregator), 0);
    aggregator.pid = -1;
}

static void test_many_shuffled_addresses_give_stable_replicas(void **state) {
    (void)state;
    dns_server_set_range(dns, "many.isn.test", "127.1.0.1", 3000);
    dns_server_shuffle(dns, true);
    char partition[128], servers[64];
    snprintf(partition, sizeof partition, "dns:many.isn.test:%d", ports[0]); /* nothing listens there: refused at once */
    snprintf(servers, sizeof servers, "dns_servers=127.0.0.1:%d", dns_server_port(dns));
    const char *partitions[] = {partition, NULL};
    const char *extra[] = {"--set", servers, "--set", "dns_interval_ms=50", "--set", "probe_interval_ms=60000", NULL};
    assert_int_equal(harness_start_agg(&aggregator, partitions, extra), 0);
    const char *lookups = "isn_agg_dns_lookups_total{partition=\"0\",result=\"ok\"}";
    for (int64_t end = harness_now_ms() + 20000; harness_now_ms() < end && metric_value(lookups) < 21;) harness_sleep_ms(20);
    long long resolved = metric_value(lookups);
    long long added = metric_value("isn_agg_dns_replica_changes_total{partition=\"0\",change=\"added\"}");
    long long removed = metric_value("isn_agg_dns_replica_changes_total{partition=\"0\",change=\"removed\"}");
    long long addresses = metric_value("isn_agg_dns_addresses{partition=\"0\",name=\"many.isn.test\"}");
    long long beyond = metric_value("isn_agg_dns_addresses_beyond_cap{partition=\"0\"}");
    fprintf(stderr,
            "test_agg_dns: 3000 shuffled A records resolved %lld times: %lld replicas added, %lld removed; %lld addresses "
            "in the last answer, %lld beyond the cap\n",
            resolved, added, removed, addresses, beyond);
    assert_true(resolved >= 21);
    assert_int_equal(added, AGG_MAX_REPLICAS);
    assert_int_equal(removed, 0);
    assert_int_equal(addresses, 3000);
    assert_int_equal(beyond, 3000 - AGG_MAX_REPLICAS);
    assert_true(harness_log_has(&aggregator, "has 3000 addresses; 8 of them are replicas"));
    assert_int_equal(harness_stop_checked(&aggregator), 0);
    aggregator.pid = -1;
}

int main(int argc, char **argv) {
    (void)argc;
    setenv("ISN_TEST_ARGV0", argv[0], 1);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_follow_dns_under_load),
        cmocka_unit_test(test_many_shuffled_addresses_give_stable_replicas),
    };
    return cmocka_run_group_tests_name("agg_dns", tests, setup, teardown);
}
