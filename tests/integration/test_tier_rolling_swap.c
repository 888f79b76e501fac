/* A rolling swap of a whole tier (real isnd and isn-agg on loopback): 3 partitions x 2 replicas, each
 * isnd serving a `current` link, behind isn-agg --global-stats, while two client threads query
 * through isn-agg without pause. Two generations of the corpus, both built with --partitions 3:
 * A's documents are "a-N", B's (another, smaller corpus) "b-N", so every hit names its generation and,
 * through the partition tables built here, its partition. The links are flipped replica by replica
 * (partition 0 replica 0, then its replica 1 once the first one serves B, then partition 1, ...).
 *  - no query fails: every reply is OK, complete, with all 3 partitions, its hits in score order;
 *  - every reply is a consistent mix: each partition's hits in it come from one generation (isn-agg
 *    merges one replica's answer per partition; a hedge's loser is dropped, never merged);
 *  - once every replica serves B, merged top-k through isn-agg equal those of one unpartitioned
 *    index of B's corpus (scores within 1e-5 relative, the float sums' rounding; ids equal but for
 *    ties at the k-th score). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/generations.h"
#include "tests/support/isnd_harness.h"

#define PARTITIONS 3
#define REPLICAS 2
#define QUERIERS 2
#define K 10
static const uint32_t DOCS[2] = {1500, 900}; /* B smaller: cached df of A would exceed B's N */
static const char PREFIX[2] = {'a', 'b'};

static const char *const QUERIES[] = {"search engine", "wind tunnel", "ranking score", "boundary layer pressure",
                                      "the running connection", "heat transfer", "partition server latency",
                                      "index query document", "supersonic wing flow", "t17 t42 aggregator",
                                      "tunnel heat throughput", "t3 t99 t250 wing"};
#define NUM_QUERIES (sizeof QUERIES / sizeof QUERIES[0])

static char self_path[PATH_MAX];
static harness work; /* the corpora and indexes */
static char parts_dir[2][PATH_MAX], whole_b[PATH_MAX];
static char part_id[2][PARTITIONS][24]; /* content hash of each generation's partitions */
static uint8_t *partition_of[2];        /* document number N of "a-N" / "b-N" -> its partition */

/* "a-17": generation 0, document 17; false when the id is neither generation's. */
static bool parse_id(const char *id, int *g, uint32_t *n) {
    *g = id[0] == PREFIX[0] ? 0 : id[0] == PREFIX[1] ? 1 : -1;
    if (*g < 0 || id[1] != '-' || !id[2]) return false;
    char *end;
    unsigned long number = strtoul(id + 2, &end, 10);
    *n = (uint32_t)number;
    return !*end && number < DOCS[*g];
}

static int build_generations(void) {
    for (int g = 0; g < 2; g++) {
        char corpus[PATH_MAX + 32];
        snprintf(corpus, sizeof corpus, "%s/corpus-%c.jsonl", work.work_dir, PREFIX[g]);
        snprintf(parts_dir[g], sizeof parts_dir[g], "%s/parts-%c", work.work_dir, PREFIX[g]);
        if (support_write_corpus(corpus, PREFIX[g], 31 + (uint64_t)g, DOCS[g]) != 0 ||
            support_run_command("'%s/bin/isn-index' build --quiet --input '%s' --out '%s' --partitions %d >/dev/null",
                                work.build_dir, corpus, parts_dir[g], PARTITIONS) != 0)
            return -1;
        if (g == 1) {
            snprintf(whole_b, sizeof whole_b, "%s/whole-b", work.work_dir);
            if (support_run_command("'%s/bin/isn-index' build --quiet --input '%s' --out '%s' >/dev/null", work.build_dir,
                                    corpus, whole_b) != 0)
                return -1;
        }
        if (!(partition_of[g] = malloc(DOCS[g]))) return -1;
        memset(partition_of[g], 0xff, DOCS[g]);
        for (int p = 0; p < PARTITIONS; p++) {
            char dir[PATH_MAX + 32], err[ISN_ERR_LEN];
            snprintf(dir, sizeof dir, "%s/part-%04d", parts_dir[g], p);
            if (support_content_hash(dir, part_id[g][p], sizeof part_id[g][p]) != 0) return -1;
            isn_index *index = isn_index_open(dir, err, sizeof err);
            if (!index) return -1;
            for (uint32_t d = 0; d < isn_index_get_info(index)->num_docs; d++) {
                size_t len;
                const char *id = isn_index_doc_id(index, d, &len);
                char text[32];
                snprintf(text, sizeof text, "%.*s", (int)(len < 31 ? len : 31), id);
                int gen;
                uint32_t n;
                if (!parse_id(text, &gen, &n) || gen != g) {
                    fprintf(stderr, "%s: document %u is \"%s\", not of generation %c\n", dir, d, text, PREFIX[g]);
                    return -1;
                }
                partition_of[g][n] = (uint8_t)p;
            }
            isn_index_close(index);
        }
        for (uint32_t n = 0; n < DOCS[g]; n++)
            if (partition_of[g][n] >= PARTITIONS) return -1;
    }
    return 0;
}

static int setup(void **state) {
    (void)state;
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n < 0) return -1;
    self_path[n] = '\0';
    harness_init(&work, self_path);
    return build_generations();
}

static int teardown(void **state) {
    (void)state;
    for (int g = 0; g < 2; g++) free(partition_of[g]);
    harness_cleanup(&work);
    return 0;
}

/* ------------------------------------------------------------------ the querying clients */

typedef struct {
    const char *address;
    atomic_bool *stop;
    uint32_t seed;
    atomic_uint_fast64_t replies;
    uint64_t failures, mixed; /* mixed: replies with hits of both generations (each partition's of one) */
    char first_failure[600];
} querier;

static void record_failure(querier *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void record_failure(querier *q, const char *fmt, ...) {
    if (q->failures++) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->first_failure, sizeof q->first_failure, fmt, ap);
    va_end(ap);
}

/* The generation (0 = A, 1 = B) and partition of a hit, from its id; false when it names neither. */
static bool locate_hit(const char *id, int *g, int *p) {
    uint32_t n;
    if (!parse_id(id, g, &n)) return false;
    *p = partition_of[*g][n];
    return true;
}

/* What every reply must be, swap or not: complete, from every partition, in score order, and each
 * partition's hits of one generation. */
static void check_reply(querier *q, uint32_t i, const char *text, const isn_grpc_search_reply *reply) {
    if (reply->status != 0) {
        record_failure(q, "\"%s\" (query %u): status %d: %s", text, i, reply->status, reply->message);
        return;
    }
    if (!reply->complete || reply->partitions_answered != PARTITIONS || reply->partitions_total != PARTITIONS) {
        record_failure(q, "\"%s\" (query %u): incomplete (%s), %u/%u partitions", text, i, reply->incomplete_reason,
                       reply->partitions_answered, reply->partitions_total);
        return;
    }
    if (!reply->num_hits) record_failure(q, "\"%s\" (query %u): no hits", text, i);
    int generation_of[PARTITIONS] = {-1, -1, -1};
    bool seen[2] = {false, false};
    for (uint32_t k = 0; k < reply->num_hits; k++) {
        int g, p;
        if (!locate_hit(reply->hits[k].external_id, &g, &p)) {
            record_failure(q, "\"%s\" (query %u): hit %u is \"%s\", of neither generation", text, i, k,
                           reply->hits[k].external_id);
            return;
        }
        if (generation_of[p] >= 0 && generation_of[p] != g) {
            record_failure(q, "\"%s\" (query %u): partition %d's hits come from both generations (hit %u: %s)", text, i,
                           p, k, reply->hits[k].external_id);
            return;
        }
        generation_of[p] = g;
        seen[g] = true;
        if (k && reply->hits[k].score > reply->hits[k - 1].score) {
            record_failure(q, "\"%s\" (query %u): hit %u scores above hit %u", text, i, k, k - 1);
            return;
        }
    }
    if (seen[0] && seen[1]) q->mixed++;
}

static void *query_loop(void *arg) {
    querier *q = arg;
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(q->address, 5000, err, sizeof err);
    if (!client) {
        record_failure(q, "connect: %s", err);
        return NULL;
    }
    for (uint32_t i = 0; !atomic_load(q->stop); i++) {
        const char *text = QUERIES[(i + q->seed) % NUM_QUERIES];
        /* a generous deadline: a failure here is a failure, not a slow machine */
        isn_grpc_search_request rq = {.query = text, .k = K, .timeout_ms = 20000};
        isn_grpc_search_reply reply;
        if (isn_grpc_search(client, &rq, &reply, err, sizeof err) != 0) {
            record_failure(q, "\"%s\" (query %u): transport: %s", text, i, err);
            isn_grpc_close(client);
            if (!(client = isn_grpc_connect(q->address, 5000, err, sizeof err))) return NULL;
            continue;
        }
        check_reply(q, i, text, &reply);
        isn_grpc_search_reply_free(&reply);
        atomic_fetch_add(&q->replies, 1);
    }
    isn_grpc_close(client);
    return NULL;
}

static uint64_t total_replies(querier *queriers) {
    uint64_t n = 0;
    for (int t = 0; t < QUERIERS; t++) n += atomic_load(&queriers[t].replies);
    return n;
}

/* Waits (bounded, not timed) until the clients have had `more` replies more: each step of the swap
 * happens under load. */
static void wait_replies(querier *queriers, uint64_t more) {
    uint64_t want = total_replies(queriers) + more;
    for (int64_t give_up = harness_now_ms() + 30000; total_replies(queriers) < want && harness_now_ms() < give_up;)
        harness_sleep_ms(5);
}

/* ------------------------------------------------------------------ the test */

static bool close_enough(float a, float b) {
    double diff = fabs((double)a - (double)b), scale = fmax(fabs((double)a), fabs((double)b));
    return diff <= 1e-5 * fmax(scale, 1e-6);
}

/* One query through isn-agg against the unpartitioned index of B: the same scores rank by rank, and
 * the same documents but among ties at the k-th score. */
static void expect_unpartitioned(isn_grpc_client *client, const isn_index *index, isn_searcher *reference,
                                 const char *text) {
    char err[256];
    isn_grpc_search_request rq = {.query = text, .k = K, .timeout_ms = 20000};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
    if (reply.status != 0) fail_msg("\"%s\": status %d: %s", text, reply.status, reply.message);
    assert_true(reply.complete);
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = K;
    isn_query query;
    isn_hit hits[K];
    uint32_t n = 0;
    assert_int_equal(harness_offline_search(reference, text, &options, &query, hits, &n), 0);
    if (reply.num_hits != n) fail_msg("\"%s\": %u merged hits, %u unpartitioned", text, reply.num_hits, n);
    for (uint32_t k = 0; k < n; k++) {
        if (reply.hits[k].external_id[0] != 'b') fail_msg("\"%s\" rank %u: %s after the swap", text, k, reply.hits[k].external_id);
        if (!close_enough(reply.hits[k].score, hits[k].score))
            fail_msg("\"%s\" rank %u: merged score %.9g, unpartitioned %.9g", text, k, (double)reply.hits[k].score,
                     (double)hits[k].score);
        bool listed = false;
        for (uint32_t j = 0; j < n && !listed; j++) {
            size_t len;
            const char *id = isn_index_doc_id(index, hits[j].doc, &len);
            listed = strlen(reply.hits[k].external_id) == len && !memcmp(id, reply.hits[k].external_id, len);
        }
        if (!listed && !close_enough(reply.hits[k].score, hits[n - 1].score))
            fail_msg("\"%s\" rank %u: %s is not in the unpartitioned top %u (and not tied at its last score)", text, k,
                     reply.hits[k].external_id, n);
    }
    isn_grpc_search_reply_free(&reply);
}

static void test_rolling_swap_across_the_tier(void **state) {
    (void)state;
    harness nodes[PARTITIONS][REPLICAS], aggregator;
    char lists[PARTITIONS][200];
    const char *partitions[PARTITIONS + 1] = {lists[0], lists[1], lists[2], NULL};
    for (int p = 0; p < PARTITIONS; p++) {
        size_t used = 0;
        for (int r = 0; r < REPLICAS; r++) {
            char target[PATH_MAX + 32], id[16];
            snprintf(target, sizeof target, "%s/part-%04d", parts_dir[0], p);
            assert_int_equal(support_init_linked(&nodes[p][r], self_path, target), 0);
            snprintf(id, sizeof id, "%d", p);
            const char *extra[] = {"--partition-id", id, "--workers", "1", "--set", "index.watch_interval=50ms", NULL};
            assert_int_equal(harness_start(&nodes[p][r], NULL, extra), 0);
            used += (size_t)snprintf(lists[p] + used, sizeof lists[p] - used, "%s%s", r ? "," : "",
                                     nodes[p][r].grpc_address);
        }
    }
    harness_init(&aggregator, self_path);
    const char *agg_extra[] = {"--global-stats", NULL};
    assert_int_equal(harness_start_agg(&aggregator, partitions, agg_extra), 0);

    atomic_bool stop = false;
    querier queriers[QUERIERS];
    pthread_t threads[QUERIERS];
    for (int t = 0; t < QUERIERS; t++) {
        memset(&queriers[t], 0, sizeof queriers[t]);
        queriers[t].address = aggregator.grpc_address;
        queriers[t].stop = &stop;
        queriers[t].seed = (uint32_t)t * 5;
        assert_int_equal(pthread_create(&threads[t], NULL, query_loop, &queriers[t]), 0);
    }
    wait_replies(queriers, 50); /* generation A everywhere, statistics cached */

    /* the rolling swap, one replica at a time */
    char err[256];
    for (int p = 0; p < PARTITIONS; p++)
        for (int r = 0; r < REPLICAS; r++) {
            char target[PATH_MAX + 32];
            snprintf(target, sizeof target, "%s/part-%04d", parts_dir[1], p);
            assert_int_equal(support_flip_link(nodes[p][r].index_dir, target), 0);
            isn_grpc_client *node = isn_grpc_connect(nodes[p][r].grpc_address, 5000, err, sizeof err);
            assert_non_null(node);
            if (!support_wait_generation(node, part_id[1][p], 30000)) {
                harness_dump_log(&nodes[p][r]);
                fail_msg("partition %d replica %d did not swap to generation %s", p, r, part_id[1][p]);
            }
            isn_grpc_close(node);
            wait_replies(queriers, 30); /* both replicas of the partition serve, with different generations */
        }
    wait_replies(queriers, 50);
    atomic_store(&stop, true);
    uint64_t failures = 0, mixed = 0;
    for (int t = 0; t < QUERIERS; t++) {
        pthread_join(threads[t], NULL);
        failures += queriers[t].failures;
        mixed += queriers[t].mixed;
    }
    fprintf(stderr, "test_tier_rolling_swap: %llu replies during the rolling swap, %llu failed, %llu with hits of both "
            "generations\n", (unsigned long long)total_replies(queriers), (unsigned long long)failures,
            (unsigned long long)mixed);
    for (int t = 0; t < QUERIERS; t++)
        if (queriers[t].failures) fail_msg("client %d: %llu failed, the first: %s", t, (unsigned long long)queriers[t].failures,
                                           queriers[t].first_failure);

    /* every replica serves B: merged scores are the unpartitioned B's (the first round may still
     * have been scored with statistics isn-agg cached before it heard of a partition's change) */
    isn_grpc_client *client = isn_grpc_connect(aggregator.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    char reference_err[ISN_ERR_LEN];
    isn_index *reference = isn_index_open(whole_b, reference_err, sizeof reference_err);
    assert_non_null(reference);
    isn_searcher *searcher = isn_searcher_new(reference);
    assert_non_null(searcher);
    for (uint32_t i = 0; i < NUM_QUERIES; i++) {
        isn_grpc_search_request rq = {.query = QUERIES[i], .k = K, .timeout_ms = 20000};
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
        assert_int_equal(reply.status, 0);
        isn_grpc_search_reply_free(&reply);
    }
    for (int round = 0; round < 2; round++) /* the second from the statistics cache, where cached */
        for (uint32_t i = 0; i < NUM_QUERIES; i++) expect_unpartitioned(client, reference, searcher, QUERIES[i]);
    static char metrics[1 << 17];
    assert_int_equal(harness_http_get(&aggregator, "/metrics", metrics, sizeof metrics), 200);
    const char *changes = strstr(metrics, "\nisn_agg_partition_generation_changes_total ");
    const char *hedges = strstr(metrics, "\nisn_agg_hedges_total ");
    fprintf(stderr, "test_tier_rolling_swap: isn-agg counted %lld replica generation changes, %lld hedges\n",
            changes ? atoll(changes + strlen("\nisn_agg_partition_generation_changes_total ")) : -1LL,
            hedges ? atoll(hedges + strlen("\nisn_agg_hedges_total ")) : -1LL);
    /* isn-agg knows every partition serves B: a replica it heard from since it swapped says so (one it
     * did not hear from again may still be listed with A) */
    for (int p = 0; p < PARTITIONS; p++) {
        bool on_b = false;
        for (int r = 0; r < REPLICAS; r++) {
            char sample[256];
            snprintf(sample, sizeof sample, "isn_agg_replica_generation_info{partition=\"%d\",replica=\"%s\",generation=\"",
                     p, nodes[p][r].grpc_address);
            const char *at = strstr(metrics, sample);
            if (!at) continue;
            at += strlen(sample);
            if (strncmp(at, part_id[1][p], 16) && strncmp(at, part_id[0][p], 16))
                fail_msg("isn-agg says replica %s of partition %d serves %.16s, of neither generation", nodes[p][r].grpc_address,
                         p, at);
            on_b |= !strncmp(at, part_id[1][p], 16);
        }
        if (!on_b) fail_msg("isn-agg names no replica of partition %d with generation %s", p, part_id[1][p]);
    }
    isn_searcher_free(searcher);
    isn_index_close(reference);
    isn_grpc_close(client);
    assert_int_equal(harness_stop(&aggregator), 0);
    harness_cleanup(&aggregator);
    for (int p = 0; p < PARTITIONS; p++)
        for (int r = 0; r < REPLICAS; r++) {
            assert_int_equal(harness_stop(&nodes[p][r]), 0);
            harness_cleanup(&nodes[p][r]);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rolling_swap_across_the_tier),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
