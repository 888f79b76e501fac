/* The aggregator's logic without a network (agg/): merge order and ties, replica choice and
 * ejection, the p95 that sets the hedge delay, the global statistics cache and the metric names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agg/agg_internal.h"

static agg *new_aggregator(uint32_t partitions, uint32_t replicas) {
    agg_config config;
    agg_config_default(&config);
    char err[256], list[512];
    for (uint32_t p = 0; p < partitions; p++) {
        size_t n = 0;
        for (uint32_t r = 0; r < replicas; r++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s127.0.0.1:%u", r ? "," : "", 1 + p * 10 + r);
        assert_int_equal(agg_config_set(&config, "partition", list, err, sizeof err), 0);
    }
    agg *a = agg_new(NULL, &config, err, sizeof err);
    assert_non_null(a);
    return a;
}

/* ------------------------------------------------------------------ merge */

static void set_hits(agg_part *part, const float *scores, const uint32_t *docs, uint32_t n) {
    part->state = PART_ANSWERED;
    part->reply.hits = calloc(n, sizeof *part->reply.hits);
    part->reply.num_hits = n;
    for (uint32_t i = 0; i < n; i++) part->reply.hits[i] = (isn_grpc_hit){.doc = docs[i], .score = scores[i]};
}

static void test_merge_by_score_then_partition_then_doc(void **state) {
    (void)state;
    agg_part parts[3];
    memset(parts, 0, sizeof parts);
    set_hits(&parts[0], (const float[]){2.0f, 1.0f}, (const uint32_t[]){7, 3}, 2);
    set_hits(&parts[1], (const float[]){3.0f, 2.0f, 2.0f}, (const uint32_t[]){9, 5, 4}, 3);
    set_hits(&parts[2], (const float[]){9.0f}, (const uint32_t[]){1}, 1);
    parts[2].state = PART_FAILED; /* a partition that did not answer adds nothing */
    agg_merged_hit out[6];
    uint32_t n = agg_merge_hits(parts, 3, out);
    assert_int_equal(n, 5);
    const struct {
        float score;
        uint32_t partition, doc;
    } want[] = {{3.0f, 1, 9}, {2.0f, 0, 7}, {2.0f, 1, 4}, {2.0f, 1, 5}, {1.0f, 0, 3}};
    for (uint32_t i = 0; i < n; i++) {
        assert_true(out[i].hit->score == want[i].score);
        assert_int_equal(out[i].partition, want[i].partition);
        assert_int_equal(out[i].hit->doc, want[i].doc);
    }
    for (int p = 0; p < 3; p++) free(parts[p].reply.hits);
}

/* ------------------------------------------------------------------ replicas */


static void test_choose_by_latency_and_load(void **state) {
    (void)state;
    agg *a = new_aggregator(1, 3);
    agg_partition *p = &a->partitions[0];
    p->replicas[0].ewma_us = 300;
    p->replicas[1].ewma_us = 100;
    p->replicas[2].ewma_us = 200;
    assert_int_equal(agg_choose_replica(p, 0), 1);
    p->replicas[1].inflight = 3; /* 100 x 4 = 400: now the slowest */
    assert_int_equal(agg_choose_replica(p, 0), 2);
    assert_int_equal(agg_choose_replica(p, 1u << 2), 0);
    assert_int_equal(agg_choose_replica(p, 1u << 0 | 1u << 2), 1);
    assert_int_equal(agg_choose_replica(p, 7), -1);
    agg_free(a);
}

/* Retries and hedges of a partition: at most its burst plus extra_requests_ratio of its first
 * requests, however many are asked for. */
static void test_extra_requests_are_budgeted(void **state) {
    (void)state;
    agg *a = new_aggregator(1, 2);
    agg_partition *p = &a->partitions[0];
    uint32_t extras = 0;
    for (int i = 0; i < 1000; i++) {
        assert_true(agg_take_extra_token(a, p, ATTEMPT_FIRST));
        /* every query asks for a hedge and a retry */
        extras += agg_take_extra_token(a, p, ATTEMPT_HEDGE);
        extras += agg_take_extra_token(a, p, ATTEMPT_RETRY);
    }
    fprintf(stderr, "test_agg: 1000 first requests allowed %u retries and hedges of 2000 asked\n", extras);
    assert_true(extras <= a->config.extra_requests_burst + 100 + 1);
    assert_true(extras >= 100);
    assert_int_equal(p->hedges_denied + p->retries_denied, 2000 - extras);
    agg_free(a);
}

/* Hedges that empty the bucket down to its reserve leave the retries of a replica that dies next their
 * tokens: half the burst. */
static void test_hedges_leave_retries_their_reserve(void **state) {
    (void)state;
    agg *a = new_aggregator(1, 2);
    agg_partition *p = &a->partitions[0];
    uint32_t burst = a->config.extra_requests_burst, hedges = 0, retries = 0;
    assert_true(burst >= 2);
    assert_true(p->extra_tokens >= burst);
    while (agg_take_extra_token(a, p, ATTEMPT_HEDGE)) hedges++;
    while (agg_take_extra_token(a, p, ATTEMPT_RETRY)) retries++;
    assert_int_equal(hedges, burst - burst / 2);
    assert_int_equal(retries, burst / 2);
    assert_int_equal(p->hedges_denied, 1);
    assert_int_equal(p->retries_denied, 1);
    agg_free(a);
}

/* A replica that shed load gets no retry or hedge within its back-off; first requests still go. */
static void test_no_extra_request_to_a_replica_that_shed(void **state) {
    (void)state;
    agg *a = new_aggregator(1, 2);
    agg_partition *p = &a->partitions[0];
    p->replicas[0].ewma_us = 100;
    p->replicas[1].ewma_us = 300;
    p->replicas[0].shed_until_ns = 2000;
    assert_int_equal(agg_choose_replica(p, 0), 0);
    assert_int_equal(agg_choose_extra_replica(p, 0, 1000), 1);
    assert_int_equal(agg_choose_extra_replica(p, 1u << 1, 1000), -1);
    assert_int_equal(agg_choose_extra_replica(p, 1u << 1, 2000), 0); /* its back-off is over */
    agg_free(a);
}

static void test_failures_eject_and_unreachable_is_not_chosen(void **state) {
    (void)state;
    agg *a = new_aggregator(1, 2);
    agg_partition *p = &a->partitions[0];
    agg_replica *r = &p->replicas[0];
    for (uint32_t i = 1; i < a->config.failures_to_eject; i++) {
        agg_replica_failed(a, r, false, "error status");
        assert_true(r->up);
    }
    agg_replica_failed(a, r, false, "error status");
    assert_false(r->up);
    assert_int_equal(r->ejections, 1);
    assert_int_equal(r->failures, a->config.failures_to_eject);
    assert_int_equal(a->metrics.upstream_failures, a->config.failures_to_eject);
    assert_int_equal(agg_choose_replica(p, 0), 1);
    /* A lost connection takes a replica out at once. */
    agg_replica_failed(a, &p->replicas[1], true, "transport error");
    assert_false(p->replicas[1].up);
    /* Both out and neither connected: nothing to ask. */
    assert_int_equal(agg_choose_replica(p, 0), -1);
    agg_free(a);
}

static void test_p95_sets_the_hedge_delay(void **state) {
    (void)state;
    agg *a = new_aggregator(1, 1);
    agg_partition *p = a->partitions; /* the only one */
    assert_int_equal(agg_hedge_delay_ns(a, p), (int64_t)a->config.hedge_initial_ms * 1000000);
    for (uint32_t us = 1; us <= AGG_MIN_SAMPLES_FOR_P95; us++) agg_record_latency(p, &p->replicas[0], us * 1000);
    assert_int_equal(p->p95_us, 31000);
    assert_int_equal(agg_hedge_delay_ns(a, p), 31000000);
    a->config.hedge_min_us = 50000; /* never sooner than the floor */
    assert_int_equal(agg_hedge_delay_ns(a, p), 50000000);
    assert_true(p->replicas[0].ewma_us > 1000);
    agg_free(a);
}

/* ------------------------------------------------------------------ deadlines */

static void test_saturating_helpers(void **state) {
    (void)state;
    assert_true(isn_add_sat_u64(1, 2) == 3);
    assert_true(isn_add_sat_u64(UINT64_MAX - 1, 1) == UINT64_MAX);
    assert_true(isn_add_sat_u64(UINT64_MAX - 1, 2) == UINT64_MAX);
    assert_true(isn_add_sat_u64(UINT64_MAX, UINT64_MAX) == UINT64_MAX);
}

/* The header's timeout, else the request's, else the default; a huge one saturates (the old
 * arithmetic overflowed an int64 for a grpc-timeout of 9999999H, and fell back to the request's
 * timeout for 99999999H). */
static void test_deadline_arithmetic(void **state) {
    (void)state;
    agg *a = new_aggregator(1, 1);
    const int64_t now = 5000000000LL;
    const int64_t default_ns = (int64_t)a->config.default_timeout_ms * 1000000;
    assert_true(agg_deadline_ns(a, 0, 0, now) == now + default_ns);
    assert_true(agg_deadline_ns(a, 0, 250, now) == now + 250000000);
    assert_true(agg_deadline_ns(a, 1500, 250, now) == now + 1500); /* the header wins, to the nanosecond */
    uint64_t ns;
    assert_int_equal(isn_grpc_parse_timeout("9999999H", 8, &ns), 0);
    assert_true(agg_deadline_ns(a, ns, 250, now) == INT64_MAX);
    assert_int_equal(isn_grpc_parse_timeout("99999999H", 9, &ns), 0);
    assert_true(agg_deadline_ns(a, ns, 250, now) == INT64_MAX);
    assert_true(agg_deadline_ns(a, UINT64_MAX, 0, INT64_MAX - 1) == INT64_MAX);
    /* 49.7 days of request timeout: representable, no wrap */
    assert_true(agg_deadline_ns(a, 0, UINT32_MAX, now) == now + (int64_t)UINT32_MAX * 1000000);

    /* What a partition is sent: the rest minus the margin, at least 1 ms, at most what a uint32 holds. */
    agg_query q = {.deadline_ns = INT64_MAX};
    assert_true(agg_remaining_ms(a, &q, now) == UINT32_MAX);
    q.deadline_ns = now + 100000000 + (int64_t)a->config.margin_ms * 1000000;
    assert_int_equal(agg_remaining_ms(a, &q, now), 100);
    q.deadline_ns = now;
    assert_int_equal(agg_remaining_ms(a, &q, now), 1);
    q.deadline_ns = now - 1000000000;
    assert_int_equal(agg_remaining_ms(a, &q, now), 1);
    agg_free(a);
}

/* ------------------------------------------------------------------ global statistics */

static void test_term_stats_sum_per_term(void **state) {
    (void)state;
    agg_term_stats stats = {0};
    assert_int_equal(agg_term_stats_add(&stats, "wing", 3), 0);
    assert_int_equal(agg_term_stats_add(&stats, "flow", 5), 0);
    assert_int_equal(agg_term_stats_add(&stats, "wing", 4), 0);
    assert_int_equal(stats.num_terms, 2);
    assert_string_equal(stats.terms[0], "wing");
    assert_int_equal(stats.dfs[0], 7);
    assert_int_equal(stats.dfs[1], 5);
    agg *a = new_aggregator(2, 1);
    a->partitions[0] = (agg_partition){.have_info = true, .num_docs = 10, .total_doc_len = 100};
    a->partitions[1] = (agg_partition){.have_info = true, .num_docs = 30, .total_doc_len = 500};
    agg_global_totals(a, &stats);
    assert_int_equal(stats.num_docs, 40);
    assert_true(stats.avg_doc_len == 15.0);
    agg_term_stats_free(&stats);
    agg_free(a);
}

static void test_stats_cache(void **state) {
    (void)state;
    agg_stats_cache cache;
    assert_int_equal(agg_stats_cache_init(&cache), 0);
    agg_term_stats stats = {0};
    agg_term_stats_add(&stats, "wing", 7);
    assert_null(agg_stats_cache_find(&cache, "wing")->key);
    agg_stats_cache_put(&cache, "wing", &stats);
    agg_stats_cache_put(&cache, "wing", &stats); /* a second answer for the same text changes nothing */
    assert_int_equal(cache.used, 1);
    agg_stats_entry *e = agg_stats_cache_find(&cache, "wing");
    assert_string_equal(e->key, "wing");
    assert_int_equal(e->num_terms, 1);
    assert_int_equal(e->dfs[0], 7);
    /* Half full: it starts over rather than grow. */
    char key[32];
    for (uint32_t i = 1; i < AGG_STATS_CACHE_SLOTS / 2; i++) {
        snprintf(key, sizeof key, "query %u", i);
        agg_stats_cache_put(&cache, key, &stats);
    }
    assert_int_equal(cache.used, AGG_STATS_CACHE_SLOTS / 2);
    agg_stats_cache_put(&cache, "one more", &stats);
    assert_int_equal(cache.used, 1);
    assert_null(agg_stats_cache_find(&cache, "wing")->key);
    assert_non_null(agg_stats_cache_find(&cache, "one more")->key);
    agg_term_stats_free(&stats);
    agg_stats_cache_free(&cache);
}

/* A replica's new index generation makes the cached df sums stale: they are dropped; the first
 * generation seen, the same one again, or none (an older isnd) keep them. */
static void test_new_generation_drops_cached_stats(void **state) {
    (void)state;
    agg *a = new_aggregator(2, 1);
    agg_term_stats stats = {0};
    agg_term_stats_add(&stats, "wing", 7);
    agg_stats_cache_put(&a->stats_cache, "wing", &stats);
    agg_replica_generation_seen(a, 0, 0, "00000000000000aa", "Info");
    agg_replica_generation_seen(a, 1, 0, "00000000000000bb", "Info");
    agg_replica_generation_seen(a, 1, 0, "", "a Search reply");
    agg_replica_generation_seen(a, 0, 0, "00000000000000aa", "a Search reply");
    assert_non_null(agg_stats_cache_find(&a->stats_cache, "wing")->key);
    assert_int_equal(a->metrics.generation_changes, 0);
    agg_replica_generation_seen(a, 1, 0, "00000000000000cc", "a Search reply");
    assert_null(agg_stats_cache_find(&a->stats_cache, "wing")->key);
    assert_int_equal(a->stats_cache.used, 0);
    assert_int_equal(a->metrics.generation_changes, 1);
    assert_string_equal(a->partitions[1].replicas[0].generation, "00000000000000cc");
    agg_term_stats_free(&stats);
    agg_free(a);
}

static void put_wing(agg *a) {
    agg_term_stats stats = {0};
    agg_term_stats_add(&stats, "wing", 7);
    agg_stats_cache_put(&a->stats_cache, "wing", &stats);
    agg_term_stats_free(&stats);
}

static bool wing_cached(agg *a) { return agg_stats_cache_find(&a->stats_cache, "wing")->key != NULL; }

/* A rolling swap of one partition's two replicas: while they serve different generations their
 * replies alternate without dropping anything again or counting a change per reply (the partition
 * was tracked as one generation, which flipped with every other reply: a cache clear and a log line
 * each time); the partition is settled again, and the statistics dropped, once both serve the new
 * one; a late reply of the old generation (a request in flight across the swap) unsettles it again;
 * a replica first heard from with another generation than its siblings' drops the cache too, and
 * one out of rotation does not count. */
static void test_rolling_swap_generations(void **state) {
    (void)state;
    const char *OLD = "00000000000000aa", *NEW = "00000000000000bb";
    agg *a = new_aggregator(2, 3);
    agg_replica_generation_seen(a, 0, 0, OLD, "Info");
    agg_replica_generation_seen(a, 0, 1, OLD, "a Search reply");
    agg_replica_generation_seen(a, 1, 0, OLD, "Info");
    assert_true(agg_partition_settled(a, 0) && agg_partition_settled(a, 1));
    put_wing(a);
    agg_replica_generation_seen(a, 0, 0, NEW, "a Search reply"); /* replica 0 swapped */
    assert_false(wing_cached(a));
    assert_int_equal(a->metrics.generation_changes, 1);
    assert_false(agg_partition_settled(a, 0));
    assert_true(agg_partition_settled(a, 1));
    put_wing(a); /* (agg_stats_done does not cache now; an entry here shows nothing drops it again) */
    for (int i = 0; i < 10; i++) {
        agg_replica_generation_seen(a, 0, 1, OLD, "a Search reply");
        agg_replica_generation_seen(a, 0, 0, NEW, "a Search reply");
        agg_replica_generation_seen(a, 0, 1, OLD, "Info");
    }
    assert_true(wing_cached(a));
    assert_int_equal(a->metrics.generation_changes, 1);
    assert_false(agg_partition_settled(a, 0));
    agg_replica_generation_seen(a, 0, 1, NEW, "a Search reply"); /* replica 1 swapped: settled */
    assert_false(wing_cached(a));
    assert_int_equal(a->metrics.generation_changes, 2);
    assert_true(agg_partition_settled(a, 0));
    put_wing(a);
    agg_replica_generation_seen(a, 0, 0, OLD, "a Search reply"); /* a late answer of the old generation */
    assert_false(wing_cached(a));
    assert_false(agg_partition_settled(a, 0));
    agg_replica_generation_seen(a, 0, 0, NEW, "a Search reply");
    assert_int_equal(a->metrics.generation_changes, 4);
    assert_true(agg_partition_settled(a, 0));
    put_wing(a);
    /* replica 2, never heard from, still serves the old generation */
    agg_replica_generation_seen(a, 0, 2, OLD, "a Search reply");
    assert_false(wing_cached(a));
    assert_int_equal(a->metrics.generation_changes, 4);
    assert_false(agg_partition_settled(a, 0));
    a->partitions[0].replicas[2].up = false; /* out of rotation: not asked, does not count */
    assert_true(agg_partition_settled(a, 0));
    agg_free(a);
}

/* A cache hit goes out with the N and average length of the Info answers that made the entry, not
 * the partitions' latest (which a swap to a smaller generation could put below a cached df). */
static void test_cache_hit_keeps_its_totals(void **state) {
    (void)state;
    agg *a = new_aggregator(2, 1);
    agg_term_stats stats = {0};
    agg_term_stats_add(&stats, "wing", 70);
    stats.num_docs = 100;
    stats.avg_doc_len = 7.5;
    agg_stats_cache_put(&a->stats_cache, "wing", &stats);
    agg_term_stats_free(&stats);
    a->partitions[0] = (agg_partition){.have_info = true, .num_docs = 20, .total_doc_len = 100};
    a->partitions[1] = (agg_partition){.have_info = true, .num_docs = 30, .total_doc_len = 500};
    Isn__V1__SearchRequest request = ISN__V1__SEARCH_REQUEST__INIT;
    request.query = "wing";
    agg_query q = {.request = &request};
    assert_true(agg_stats_lookup(a, &q));
    assert_int_equal(q.stats.num_terms, 1);
    assert_int_equal(q.stats.dfs[0], 70);
    assert_int_equal(q.stats.num_docs, 100);
    assert_true(q.stats.avg_doc_len == 7.5);
    agg_term_stats_free(&q.stats);
    free(q.stats_key);
    agg_free(a);
}

/* ------------------------------------------------------------------ readiness and reload */

/* Ready while enough partitions have a replica in rotation; the reason names the ones that do not. */
static void test_readiness_follows_coverage(void **state) {
    (void)state;
    agg *a = new_aggregator(3, 2);
    char why[256];
    assert_true(agg_ready(a, why, sizeof why));
    assert_string_equal(why, "coverage 3/3, 3 needed");
    a->partitions[1].replicas[0].up = false;
    assert_true(agg_ready(a, why, sizeof why)); /* the other replica still covers it */
    a->partitions[1].replicas[1].up = false;
    assert_false(agg_ready(a, why, sizeof why));
    assert_string_equal(why, "no healthy replica in partition 1; coverage 2/3, 3 needed");
    a->config.ready_coverage = 0.5; /* 2 of 3, rounded up */
    assert_true(agg_ready(a, why, sizeof why));
    a->partitions[2].replicas[0].up = a->partitions[2].replicas[1].up = false;
    assert_false(agg_ready(a, why, sizeof why));
    assert_string_equal(why, "no healthy replica in partition 1,2; coverage 1/3, 2 needed");
    a->config.ready_coverage = 1;
    a->partitions[1].replicas[1].up = a->partitions[2].replicas[0].up = true;
    a->draining = true;
    assert_false(agg_ready(a, why, sizeof why));
    assert_string_equal(why, "draining");
    agg_free(a);
}

/* A reload keeps the replicas it still lists (their state with them), adds new ones, drops the rest. */
static void test_reload_keeps_known_replicas(void **state) {
    (void)state;
    agg *a = new_aggregator(2, 2); /* 127.0.0.1:1,2 and 127.0.0.1:11,12 */
    a->partitions[0].replicas[1].up = false;
    a->partitions[0].replicas[1].requests = 7;
    a->partitions[0].num_docs = 100;
    agg_config next;
    agg_config_default(&next);
    char err[256];
    assert_int_equal(agg_config_set(&next, "partition", "127.0.0.1:2,127.0.0.1:3", err, sizeof err), 0);
    assert_int_equal(agg_config_set(&next, "partition", "127.0.0.1:11", err, sizeof err), 0);
    assert_int_equal(agg_config_set(&next, "partition", "127.0.0.1:21", err, sizeof err), 0);
    assert_int_equal(agg_reload(a, &next, err, sizeof err), 0); /* no loop, no query: applied at once */
    assert_null(a->pending);
    assert_int_equal(a->num_partitions, 3);
    const agg_replica *kept = &a->partitions[0].replicas[0];
    assert_string_equal(kept->address, "127.0.0.1:2");
    assert_false(kept->up);
    assert_int_equal(kept->requests, 7);
    assert_int_equal(kept->index, 0);
    assert_string_equal(a->partitions[0].replicas[1].address, "127.0.0.1:3");
    assert_true(a->partitions[0].replicas[1].up);
    assert_int_equal(a->partitions[0].num_docs, 100);
    assert_int_equal(a->partitions[1].num_replicas, 1);
    assert_string_equal(a->partitions[2].replicas[0].address, "127.0.0.1:21");
    assert_int_equal(a->metrics.reloads, 1);
    agg_config_default(&next); /* no partition: refused, nothing changes */
    assert_int_equal(agg_reload(a, &next, err, sizeof err), -1);
    assert_int_equal(a->num_partitions, 3);
    agg_free(a);
}

/* ------------------------------------------------------------------ metrics */

static void test_metric_names(void **state) {
    (void)state;
    agg *a = new_aggregator(2, 2);
    agg_count_status(a, ISN_GRPC_STATUS_OK);
    agg_count_status(a, ISN_GRPC_STATUS_UNAVAILABLE);
    agg_count_status(a, 99); /* out of range counts as INTERNAL */
    agg_observe_answer(a, 0.002);
    a->metrics.hedges = 5;
    byte_buffer out = {0};
    agg_render_metrics(a, &out);
    assert_true(buffer_append(&out, "", 1));
    const char *text = (const char *)out.data;
    const char *want[] = {"isn_agg_requests_total{code=\"OK\"} 1\n", "isn_agg_requests_total{code=\"UNAVAILABLE\"} 1\n",
                          "isn_agg_requests_total{code=\"INTERNAL\"} 1\n", "\nisn_agg_hedges_total 5\n",
                          "# TYPE isn_agg_latency_seconds histogram\n", "isn_agg_latency_seconds_count 1\n",
                          "# TYPE isn_agg_processing_seconds histogram\n", "isn_agg_processing_seconds_bucket{le=\"+Inf\"} ",
                          "\nprocess_cpu_seconds_total ", "\nprocess_open_fds ", "isn_build_info{program=\"isn-agg\"",
                          "isn_agg_upstream_requests_total 0\n",
                          "isn_agg_global_stats_cache_total{result=\"hit\"} 0\n", "isn_agg_inflight 0\n",
                          "isn_agg_partition_p95_seconds{partition=\"1\"} ",
                          "isn_agg_replica_up{partition=\"1\",replica=\"127.0.0.1:12\"} 1\n",
                          "# HELP isn_agg_replica_ejections_total Times the replica was taken out of rotation.\n"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(text, want[i])) fail_msg("/metrics lacks \"%s\":\n%s", want[i], text);
    buffer_free(&out);
    agg_free(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readiness_follows_coverage),
        cmocka_unit_test(test_reload_keeps_known_replicas),
        cmocka_unit_test(test_merge_by_score_then_partition_then_doc),
        cmocka_unit_test(test_choose_by_latency_and_load),
        cmocka_unit_test(test_failures_eject_and_unreachable_is_not_chosen),
        cmocka_unit_test(test_p95_sets_the_hedge_delay),
        cmocka_unit_test(test_extra_requests_are_budgeted),
        cmocka_unit_test(test_hedges_leave_retries_their_reserve),
        cmocka_unit_test(test_no_extra_request_to_a_replica_that_shed),
        cmocka_unit_test(test_saturating_helpers),
        cmocka_unit_test(test_deadline_arithmetic),
        cmocka_unit_test(test_term_stats_sum_per_term),
        cmocka_unit_test(test_stats_cache),
        cmocka_unit_test(test_new_generation_drops_cached_stats),
        cmocka_unit_test(test_rolling_swap_generations),
        cmocka_unit_test(test_cache_hit_keeps_its_totals),
        cmocka_unit_test(test_metric_names),
    };
    return cmocka_run_group_tests_name("agg", tests, NULL, NULL);
}
