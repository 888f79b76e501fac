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

#include "tests/support/files.h"
#include "tests/support/isnd_harness.h"
#include "grpc/grpc.h"

#define PARTITIONS 3
#define REPLICAS 2
#define MAX_QUERIES 400
#define TOP 10

static harness full;                          /* the unpartitioned index, for reference */
static harness replicas[PARTITIONS][REPLICAS];
static harness aggregator;                    /* isn-agg in front of the replicas */
static char parts_dir[300];
static char *queries[MAX_QUERIES];
static uint32_t num_queries;

/* ------------------------------------------------------------------ setup */

/* Writes the corpus as JSON Lines and reads the queries; Cranfield when available. */
static void prepare_corpus(const char *jsonl) {
    const char *dir = getenv("ISN_CRANFIELD_DIR") ? getenv("ISN_CRANFIELD_DIR") : "build/data/cran";
    char docs[PATH_MAX], qpath[PATH_MAX];
    snprintf(docs, sizeof docs, "%s/cranfield.jsonl", dir);
    snprintf(qpath, sizeof qpath, "%s/cranfield.queries.tsv", dir);
    FILE *qf = fopen(qpath, "r");
    if (qf && access(docs, R_OK) == 0) {
        assert_int_equal(support_run_command("cp '%s' '%s'", docs, jsonl), 0);
        char line[4096];
        while (num_queries < MAX_QUERIES && fgets(line, sizeof line, qf)) {
            char *tab = strchr(line, '\t');
            if (!tab) continue;
            tab[strcspn(tab, "\r\n")] = '\0';
            queries[num_queries++] = strdup(tab + 1);
        }
        fclose(qf);
        fprintf(stderr, "test_cluster: Cranfield from %s, %u queries\n", dir, num_queries);
        return;
    }
    if (qf) fclose(qf);
    fprintf(stderr, "test_cluster: no Cranfield at %s: synthetic corpus\n", dir);
    FILE *f = fopen(jsonl, "w");
    assert_non_null(f);
    harness_seed(7);
    for (uint32_t d = 0; d < 3000; d++) {
        fprintf(f, "{\"id\":\"doc-%u\",\"title\":\"", d);
        for (uint32_t i = 0, n = 2 + harness_random(4); i < n; i++) fprintf(f, "%s ", harness_word());
        fprintf(f, "\",\"body\":\"");
        for (uint32_t i = 0, n = 5 + harness_random(60); i < n; i++) fprintf(f, "%s ", harness_word());
        fprintf(f, "\"}\n");
    }
    fclose(f);
    for (; num_queries < 100; num_queries++) {
        char text[256];
        size_t n = 0;
        for (uint32_t i = 0, words = 1 + harness_random(5); i < words; i++)
            n += (size_t)snprintf(text + n, sizeof text - n, "%s ", harness_word());
        queries[num_queries] = strdup(text);
    }
}

static int start_agg(const char *self) {
    char parts[PARTITIONS][128];
    const char *partitions[PARTITIONS + 1];
    for (int p = 0; p < PARTITIONS; p++) {
        snprintf(parts[p], sizeof parts[p], "%s,%s", replicas[p][0].grpc_address, replicas[p][1].grpc_address);
        partitions[p] = parts[p];
    }
    partitions[PARTITIONS] = NULL;
    harness_init(&aggregator, self);
    const char *extra[] = {"--stats-listen", "", "--global-stats", "--set", "probe_interval_ms=100", NULL};
    return harness_start_agg(&aggregator, partitions, extra);
}

static int setup(void **state) {
    (void)state;
    const char *self = getenv("ISN_TEST_ARGV0");
    harness_init(&full, self);
    char jsonl[PATH_MAX];
    snprintf(jsonl, sizeof jsonl, "%s/corpus.jsonl", full.work_dir);
    snprintf(parts_dir, sizeof parts_dir, "%s/parts", full.work_dir);
    prepare_corpus(jsonl);
    if (support_run_command("'%s/bin/isn-index' build --quiet --input '%s' --out '%s' >/dev/null 2>&1", full.build_dir, jsonl,
                    full.index_dir) ||
        support_run_command("'%s/bin/isn-index' build --quiet --input '%s' --out '%s' --partitions %d >/dev/null 2>&1",
                    full.build_dir, jsonl, parts_dir, PARTITIONS))
        return -1;
    if (harness_start(&full, NULL, NULL) != 0) return -1;
    for (int p = 0; p < PARTITIONS; p++)
        for (int r = 0; r < REPLICAS; r++) {
            harness *h = &replicas[p][r];
            harness_init(h, self);
            snprintf(h->index_dir, sizeof h->index_dir, "%s/part-%04d", parts_dir, p);
            char id[16];
            snprintf(id, sizeof id, "%d", p);
            const char *extra[] = {"--partition-id", id, "--workers", "1", NULL};
            if (harness_start(h, NULL, extra) != 0) return -1;
        }
    return start_agg(self);
}

static int teardown(void **state) {
    (void)state;
    if (aggregator.pid > 0) harness_stop(&aggregator); /* SIGTERM: isn-agg drains */
    harness_cleanup(&aggregator);
    for (int p = 0; p < PARTITIONS; p++)
        for (int r = 0; r < REPLICAS; r++) harness_cleanup(&replicas[p][r]);
    harness_cleanup(&full);
    for (uint32_t i = 0; i < num_queries; i++) free(queries[i]);
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static isn_grpc_client *connect_to(const char *address) {
    char err[256];
    isn_grpc_client *c = isn_grpc_connect(address, 5000, err, sizeof err);
    if (!c) fail_msg("connect %s: %s", address, err);
    return c;
}

static bool close_enough(float a, float b) {
    double diff = fabs((double)a - (double)b), scale = fmax(fabs((double)a), fabs((double)b));
    return diff <= 1e-5 * scale || diff < 1e-9;
}

/* ------------------------------------------------------------------ tests */

static void test_global_stats_equal_unpartitioned(void **state) {
    (void)state;
    isn_grpc_client *agg = connect_to(aggregator.grpc_address), *ref = connect_to(full.grpc_address);
    uint32_t compared = 0;
    for (uint32_t q = 0; q < num_queries; q++) {
        isn_grpc_search_request rq = {.query = queries[q], .k = TOP, .timeout_ms = 5000};
        isn_grpc_search_reply a, b;
        char err[256];
        if (isn_grpc_search(agg, &rq, &a, err, sizeof err) != 0) fail_msg("query %u via isn-agg: %s", q, err);
        if (isn_grpc_search(ref, &rq, &b, err, sizeof err) != 0) fail_msg("query %u unpartitioned: %s", q, err);
        if (a.status != 0 || b.status != 0)
            fail_msg("query %u \"%s\": status %d (%s) via isn-agg, %d unpartitioned", q, queries[q], a.status, a.message,
                     b.status);
        assert_true(a.complete);
        assert_int_equal(a.partitions_answered, PARTITIONS);
        assert_int_equal(a.partitions_total, PARTITIONS);
        if (a.num_hits != b.num_hits)
            fail_msg("query %u \"%s\": %u hits via isn-agg, %u unpartitioned", q, queries[q], a.num_hits, b.num_hits);
        for (uint32_t i = 0; i < a.num_hits; i++) {
            if (!close_enough(a.hits[i].score, b.hits[i].score))
                fail_msg("query %u \"%s\" rank %u: score %.9g via isn-agg, %.9g unpartitioned", q, queries[q], i,
                         (double)a.hits[i].score, (double)b.hits[i].score);
            if (strcmp(a.hits[i].external_id, b.hits[i].external_id)) {
                /* Only documents tied in score may trade places (ties break by partition, then local id). */
                bool tied = false;
                for (uint32_t j = 0; j < b.num_hits && !tied; j++)
                    tied = !strcmp(a.hits[i].external_id, b.hits[j].external_id) &&
                           close_enough(b.hits[j].score, a.hits[i].score);
                if (!tied && close_enough(a.hits[i].score, b.hits[b.num_hits - 1].score)) tied = true; /* at the cut */
                if (!tied)
                    fail_msg("query %u \"%s\" rank %u: %s via isn-agg, %s unpartitioned", q, queries[q], i,
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
    isn_grpc_client *c = connect_to(aggregator.grpc_address);
    isn_grpc_call *calls[64] = {0};
    int64_t sent_at[64];
    int64_t start = harness_now_ms(), end = start + duration_ms;
    bool midway_done = midway == NULL;
    uint32_t next_query = 0;
    for (;;) {
        int64_t t = harness_now_ms();
        if (!midway_done && t - start >= midway_ms) {
            midway();
            midway_done = true;
        }
        bool any = false;
        for (uint32_t i = 0; i < inflight; i++) {
            if (!calls[i] && t < end) {
                isn_grpc_search_request rq = {.query = queries[next_query++ % num_queries], .k = TOP,
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
            if (!calls[i] || !isn_grpc_call_done(calls[i])) continue;
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
    kill(replicas[1][0].pid, SIGKILL);
    waitpid(replicas[1][0].pid, NULL, 0);
    replicas[1][0].pid = -1;
}

static void test_kill_one_replica_loses_no_query(void **state) {
    (void)state;
    load_result r = run_load(8, 2000, 600, kill_replica_1_0, 2000);
    fprintf(stderr, "test_cluster: one replica killed: %u sent, %u answered fully, %u failed\n", r.sent,
            r.full_coverage, r.failed);
    assert_true(r.sent > 0);
    assert_int_equal(r.failed, 0);
    assert_int_equal(r.full_coverage, r.sent);
}

static void test_kill_partition_gives_partial_answers(void **state) {
    (void)state;
    /* partition 1 has lost replica 0 already; now the other one */
    kill(replicas[1][1].pid, SIGKILL);
    waitpid(replicas[1][1].pid, NULL, 0);
    replicas[1][1].pid = -1;
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
    harness *h = &replicas[1][0];
    const char *extra[] = {"--partition-id", "1", "--workers", "1", "--listen", h->grpc_address, NULL};
    char address[64];
    snprintf(address, sizeof address, "%s", h->grpc_address);
    assert_int_equal(harness_start(h, NULL, extra), 0);
    assert_string_equal(h->grpc_address, address);
    isn_grpc_client *c = connect_to(aggregator.grpc_address);
    bool back = false;
    for (int64_t deadline = harness_now_ms() + 10000; !back && harness_now_ms() < deadline; harness_sleep_ms(50)) {
        isn_grpc_search_request rq = {.query = queries[0], .k = TOP, .timeout_ms = 1000};
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
    (void)argc;
    setenv("ISN_TEST_ARGV0", argv[0], 1);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_global_stats_equal_unpartitioned),
        cmocka_unit_test(test_kill_one_replica_loses_no_query),
        cmocka_unit_test(test_kill_partition_gives_partial_answers),
        cmocka_unit_test(test_restarted_replica_is_probed_back),
    };
    return cmocka_run_group_tests_name("cluster", tests, setup, teardown);
}
