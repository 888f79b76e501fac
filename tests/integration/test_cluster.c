/* A local cluster end to end: the corpus built as 3 partitions, each served by 2 isnd replicas,
 * isn-agg in front with global statistics, all on loopback.
 *  - merged top-10 of every query equals one unpartitioned index's (ids, scores within 1e-5 relative;
 *    documents tied at the cut may differ);
 *  - one replica killed while queries are in flight: every query still answers fully;
 *  - both replicas of a partition killed: answers are partial, coverage 2/3, before the deadline;
 *  - a replica restarted on its port is probed back in: coverage 3/3 again.
 * Corpus: Cranfield ($ISN_CRANFIELD_DIR, set by make test; default build/data/cran) when present, else a
 * synthetic one. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/tier.h"
#include "grpc/client.h"

#define PARTITIONS 3
#define REPLICAS 2
#define TOP 10

static tier t;          /* t.whole: the unpartitioned index, for reference; isn-agg in front of the replicas */
static tier_queries qs;

static int setup(void **state) {
    (void)state;
    tier_init(&t);
    if (tier_prepare_corpus(&t, &qs, TIER_MAX_QUERIES, 7, 3000, 100, 5) != 0 || tier_build(&t, PARTITIONS, true, "") != 0 ||
        harness_start(&t.whole, NULL, NULL) != 0 || tier_start_replicas(&t, REPLICAS, NULL) != 0)
        return -1;
    const char *extra[] = {"--global-stats", "--set", "probe_interval_ms=100", NULL};
    return tier_start_agg(&t, extra);
}

static int teardown(void **state) {
    (void)state;
    if (t.aggregator.pid > 0) harness_stop(&t.aggregator); /* SIGTERM: isn-agg drains */
    tier_cleanup(&t);
    tier_queries_free(&qs);
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static isn_grpc_client *connect_to(const char *address) {
    isn_grpc_client *c = support_connect(address);
    if (!c) fail_msg("cannot connect to %s", address);
    return c;
}

static bool close_enough(float a, float b) {
    double diff = fabs((double)a - (double)b), scale = fmax(fabs((double)a), fabs((double)b));
    return diff <= 1e-5 * scale || diff < 1e-9;
}

/* ------------------------------------------------------------------ tests */

static void test_global_stats_equal_unpartitioned(void **state) {
    (void)state;
    isn_grpc_client *agg = connect_to(t.aggregator.grpc_address), *ref = connect_to(t.whole.grpc_address);
    uint32_t compared = 0;
    for (uint32_t q = 0; q < qs.count; q++) {
        isn_grpc_search_request rq = {.query = qs.texts[q], .k = TOP, .timeout_ms = 5000};
        isn_grpc_search_reply a, b;
        char err[256];
        if (isn_grpc_search(agg, &rq, &a, err, sizeof err) != 0) fail_msg("query %u via isn-agg: %s", q, err);
        if (isn_grpc_search(ref, &rq, &b, err, sizeof err) != 0) fail_msg("query %u unpartitioned: %s", q, err);
        if (a.status != 0 || b.status != 0)
            fail_msg("query %u \"%s\": status %d (%s) via isn-agg, %d (%s) unpartitioned", q, qs.texts[q], a.status,
                     a.message, b.status, b.message);
        assert_true(a.complete);
        assert_int_equal(a.partitions_answered, PARTITIONS);
        assert_int_equal(a.partitions_total, PARTITIONS);
        if (a.num_hits != b.num_hits)
            fail_msg("query %u \"%s\": %u hits via isn-agg, %u unpartitioned", q, qs.texts[q], a.num_hits, b.num_hits);
        for (uint32_t i = 0; i < a.num_hits; i++) {
            if (!close_enough(a.hits[i].score, b.hits[i].score))
                fail_msg("query %u \"%s\" rank %u: score %.9g via isn-agg, %.9g unpartitioned", q, qs.texts[q], i,
                         (double)a.hits[i].score, (double)b.hits[i].score);
            if (strcmp(a.hits[i].external_id, b.hits[i].external_id)) {
                /* Only documents tied in score may trade places (ties break by partition, then local id). */
                bool tied = false;
                for (uint32_t j = 0; j < b.num_hits && !tied; j++)
                    tied = !strcmp(a.hits[i].external_id, b.hits[j].external_id) &&
                           close_enough(b.hits[j].score, a.hits[i].score);
                if (!tied && close_enough(a.hits[i].score, b.hits[b.num_hits - 1].score)) tied = true; /* at the cut */
                if (!tied)
                    fail_msg("query %u \"%s\" rank %u: %s via isn-agg, %s unpartitioned", q, qs.texts[q], i,
                             a.hits[i].external_id, b.hits[i].external_id);
            }
        }
        compared++;
        isn_grpc_search_reply_free(&a);
        isn_grpc_search_reply_free(&b);
    }
    fprintf(stderr, "test_cluster: %u queries: merged top-%d equals the unpartitioned index's\n", compared, TOP);
    isn_grpc_close(agg);
    isn_grpc_close(ref);
}

typedef struct {
    uint32_t sent, ok, full_coverage, partial, two_of_three, failed, late;
} load_result;

/* Keeps `inflight` queries going for duration_ms; calls `midway` once after midway_ms. */
static load_result run_load(uint32_t inflight, int duration_ms, int midway_ms, void (*midway)(void),
                            uint32_t deadline_ms) {
    load_result res = {0};
    isn_grpc_client *c = connect_to(t.aggregator.grpc_address);
    isn_grpc_client_call *calls[64] = {0};
    int64_t sent_at[64];
    int64_t start = harness_now_ms(), end = start + duration_ms;
    bool midway_done = midway == NULL;
    uint32_t next_query = 0;
    for (;;) {
        int64_t now = harness_now_ms();
        if (!midway_done && now - start >= midway_ms) {
            midway();
            midway_done = true;
        }
        bool any = false;
        for (uint32_t i = 0; i < inflight; i++) {
            if (!calls[i] && now < end) {
                isn_grpc_search_request rq = {.query = qs.texts[next_query++ % qs.count], .k = TOP,
                                              .timeout_ms = deadline_ms};
                char err[256];
                calls[i] = isn_grpc_search_start(c, &rq, err, sizeof err);
                if (!calls[i]) fail_msg("start: %s", err);
                sent_at[i] = harness_now_ms();
                res.sent++;
            }
            if (calls[i]) any = true;
        }
        if (!any) break;
        char err[256];
        if (isn_grpc_poll(c, 5, err, sizeof err) != 0) fail_msg("connection to isn-agg: %s", err);
        for (uint32_t i = 0; i < inflight; i++) {
            if (!calls[i] || !isn_grpc_client_call_done(calls[i])) continue;
            isn_grpc_search_reply reply;
            if (isn_grpc_search_finish(calls[i], &reply, err, sizeof err) != 0) fail_msg("reply: %s", err);
            calls[i] = NULL;
            if (harness_now_ms() - sent_at[i] > deadline_ms) res.late++;
            if (reply.status != 0) {
                res.failed++;
                fprintf(stderr, "test_cluster: status %d: %s\n", reply.status, reply.message);
            } else {
                res.ok++;
                if (reply.partitions_answered == PARTITIONS && reply.complete) res.full_coverage++;
                if (!reply.complete) res.partial++;
                if (reply.partitions_answered == PARTITIONS - 1 && reply.partitions_total == PARTITIONS) res.two_of_three++;
            }
            isn_grpc_search_reply_free(&reply);
        }
    }
    isn_grpc_close(c);
    return res;
}

static void kill_replica_1_0(void) {
    kill(t.replicas[1][0].pid, SIGKILL);
    waitpid(t.replicas[1][0].pid, NULL, 0);
    t.replicas[1][0].pid = -1;
}

static void test_kill_one_replica_loses_no_query(void **state) {
    (void)state;
    load_result r = run_load(8, 2000, 600, kill_replica_1_0, 2000);
    fprintf(stderr, "test_cluster: one replica killed: %u sent, %u answered fully, %u failed\n", r.sent,
            r.full_coverage, r.failed);
    if (r.full_coverage != r.sent) /* which rule lost it: a retry without a token, or no replica to try */
        fprintf(stderr, "test_cluster: partition 1: retries denied %lld, hedges denied %lld, retries %lld, hedges %lld\n",
                harness_metric(&t.aggregator, "isn_agg_partition_extra_denied_total{partition=\"1\",kind=\"retry\"}"),
                harness_metric(&t.aggregator, "isn_agg_partition_extra_denied_total{partition=\"1\",kind=\"hedge\"}"),
                harness_metric(&t.aggregator, "isn_agg_retries_total"), harness_metric(&t.aggregator, "isn_agg_hedges_total"));
    assert_true(r.sent > 0);
    assert_int_equal(r.failed, 0);
    assert_int_equal(r.full_coverage, r.sent);
}

static void test_kill_partition_gives_partial_answers(void **state) {
    (void)state;
    /* partition 1 has lost replica 0 already; now the other one */
    kill(t.replicas[1][1].pid, SIGKILL);
    waitpid(t.replicas[1][1].pid, NULL, 0);
    t.replicas[1][1].pid = -1;
    load_result r = run_load(4, 1000, 0, NULL, 500);
    fprintf(stderr, "test_cluster: partition down: %u sent, %u partial with coverage 2/3, %u late, %u failed\n",
            r.sent, r.two_of_three, r.late, r.failed);
    assert_true(r.sent > 0);
    assert_int_equal(r.failed, 0);
    assert_int_equal(r.two_of_three, r.sent);
    assert_int_equal(r.partial, r.sent);
    assert_int_equal(r.late, 0);
}

static void test_restarted_replica_is_probed_back(void **state) {
    (void)state;
    harness *h = &t.replicas[1][0];
    const char *extra[] = {"--partition-id", "1", "--workers", "1", "--listen", h->grpc_address, NULL};
    char address[64];
    snprintf(address, sizeof address, "%s", h->grpc_address);
    assert_int_equal(harness_start(h, NULL, extra), 0);
    assert_string_equal(h->grpc_address, address);
    isn_grpc_client *c = connect_to(t.aggregator.grpc_address);
    bool back = false;
    for (int64_t deadline = harness_now_ms() + 10000; !back && harness_now_ms() < deadline; harness_sleep_ms(50)) {
        isn_grpc_search_request rq = {.query = qs.texts[0], .k = TOP, .timeout_ms = 1000};
        isn_grpc_search_reply reply;
        char err[256];
        if (isn_grpc_search(c, &rq, &reply, err, sizeof err) != 0) fail_msg("%s", err);
        back = reply.status == 0 && reply.partitions_answered == PARTITIONS;
        isn_grpc_search_reply_free(&reply);
    }
    isn_grpc_close(c);
    assert_true(back);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_global_stats_equal_unpartitioned),
        cmocka_unit_test(test_kill_one_replica_loses_no_query),
        cmocka_unit_test(test_kill_partition_gives_partial_answers),
        cmocka_unit_test(test_restarted_replica_is_probed_back),
    };
    return cmocka_run_group_tests_name("cluster", tests, setup, teardown);
}
