/* isnd with the GPU first stage ([gpu] enable) on the emulated device (the device algorithm on the
 * host, so this runs without a GPU): queries routed to the GPU answer with the CPU engine's hits and
 * say device "gpu"; /readyz, /metrics and /stats show the GPU. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "scheduler/scheduler.h"
#include "tests/support/isnd_harness.h"
#include "grpc/client.h"

#define NUM_DOCS 3000
#define TIER_DOCS 40000 /* more than gpu.index_memory = 1MiB holds */

static harness h;
/* gpu.cache = tier in a device memory smaller than the partition; and with gpu.stream_memory */
static bool tier_cache_on, streaming_on;
static isn_index *offline_index;
static isn_searcher *offline;
static isn_grpc_client *client;
/* GPU devices the daemon under test runs (gpu.devices), each a replica of the partition */
static uint32_t devices = 1;

static const char *const QUERIES[] = {
    "wind tunnel", "search engine ranking", "running connection", "boundary layer pressure heat transfer",
    "t5 t17 t300 wind", "latency latency throughput", "score t1", "index query document partition",
};
#define NUM_QUERIES (sizeof QUERIES / sizeof QUERIES[0])

static uint32_t offline_search(const char *text, uint32_t k, isn_mode mode, isn_hit *out) {
    isn_search_options o;
    isn_search_options_default(&o);
    o.k = k;
    o.mode = mode;
    if (mode == ISN_MODE_AND) o.algo = ISN_ALGO_AUTO;
    isn_query q;
    uint32_t n;
    if (harness_offline_search(offline, text, &o, &q, out, &n) != 0) fail_msg("offline search failed");
    return n;
}

/* Every reply equals the CPU engine's top k; returns how many the GPU answered. */
static uint32_t check_queries(uint32_t k, isn_mode mode) {
    uint32_t on_gpu = 0;
    isn_hit *want = malloc(k * sizeof *want);
    for (uint32_t round = 0; round < 3; round++)
        for (uint32_t i = 0; i < NUM_QUERIES; i++) {
            uint32_t n = offline_search(QUERIES[i], k, mode, want);
            isn_grpc_search_request request = {.query = QUERIES[i], .k = k,
                                               .mode = mode == ISN_MODE_AND ? ISN_GRPC_MODE_AND : ISN_GRPC_MODE_OR};
            isn_grpc_search_reply reply;
            char err[256];
            if (isn_grpc_search(client, &request, &reply, err, sizeof err) != 0) fail_msg("search: %s", err);
            if (reply.status != 0) fail_msg("\"%s\": status %d: %s", QUERIES[i], reply.status, reply.message);
            if (reply.num_hits != n)
                fail_msg("\"%s\" k %u: %u hits served (device %s), %u offline", QUERIES[i], k, reply.num_hits,
                         reply.device, n);
            for (uint32_t j = 0; j < n; j++)
                if (reply.hits[j].doc != want[j].doc || reply.hits[j].score != want[j].score)
                    fail_msg("\"%s\" k %u hit %u (device %s): doc %u score %.9g, CPU engine doc %u score %.9g",
                             QUERIES[i], k, j, reply.device, reply.hits[j].doc, reply.hits[j].score, want[j].doc,
                             want[j].score);
            if (!strcmp(reply.device, "gpu")) on_gpu++;
            else if (strcmp(reply.device, "cpu")) fail_msg("unexpected device \"%s\"", reply.device);
            isn_grpc_search_reply_free(&reply);
        }
    free(want);
    return on_gpu;
}

/* What /stats says the devices answered, summed over first_stage_devices: with several devices, any one of them
 * (device 0, which first_stage shows, among them) may have answered none. */
static long long stats_queries_on_devices(void) {
    static char page[1 << 18];
    assert_int_equal(harness_http_get(&h, "/stats", page, sizeof page), 200);
    const char *p = strstr(page, "\"first_stage_devices\":[");
    if (!p) fail_msg("/stats has no first_stage_devices: %.300s", page);
    long long total = 0;
    uint32_t seen = 0;
    while ((p = strstr(p, "\"queries_device\":"))) {
        p += strlen("\"queries_device\":");
        total += atoll(p);
        seen++;
    }
    if (seen != devices) fail_msg("/stats' first_stage_devices lists %u devices, the daemon runs %u", seen, devices);
    return total;
}

static void test_gpu_hits_equal_cpu(void **state) {
    (void)state;
    uint32_t on_gpu = 0;
    on_gpu += check_queries(10, ISN_MODE_OR);
    on_gpu += check_queries(100, ISN_MODE_OR);
    on_gpu += check_queries(10, ISN_MODE_AND);
    /* route_all sends every query the GPU can answer to it */
    if (on_gpu == 0) fail_msg("no reply came from the GPU");
    assert_true(stats_queries_on_devices() > 0);
}

/* Many queries at once: the GPU's batches are large, and idle workers pack answers beside the
 * dispatcher (each with its own search worker); every reply still equals the CPU engine's top 10. */
#define BURST 96
static void test_gpu_hits_equal_cpu_in_a_burst(void **state) {
    (void)state;
    isn_grpc_client_call *calls[BURST];
    char err[256];
    for (uint32_t i = 0; i < BURST; i++) {
        isn_grpc_search_request request = {.query = QUERIES[i % NUM_QUERIES], .k = 10};
        if (!(calls[i] = isn_grpc_search_start(client, &request, err, sizeof err))) fail_msg("search %u: %s", i, err);
    }
    for (uint32_t i = 0; i < BURST; i++)
        while (!isn_grpc_client_call_done(calls[i]))
            if (isn_grpc_poll(client, 1000, err, sizeof err) != 0) fail_msg("poll: %s", err);
    isn_hit want[10];
    uint32_t on_gpu = 0;
    for (uint32_t i = 0; i < BURST; i++) {
        const char *text = QUERIES[i % NUM_QUERIES];
        uint32_t n = offline_search(text, 10, ISN_MODE_OR, want);
        isn_grpc_search_reply reply;
        if (isn_grpc_search_finish(calls[i], &reply, err, sizeof err) != 0) fail_msg("search %u: %s", i, err);
        if (reply.status != 0) fail_msg("\"%s\": status %d: %s", text, reply.status, reply.message);
        if (reply.num_hits != n) fail_msg("\"%s\": %u hits served (device %s), %u offline", text, reply.num_hits, reply.device, n);
        for (uint32_t j = 0; j < n; j++)
            if (reply.hits[j].doc != want[j].doc || reply.hits[j].score != want[j].score)
                fail_msg("\"%s\" hit %u (device %s): doc %u, CPU engine doc %u", text, j, reply.device, reply.hits[j].doc,
                         want[j].doc);
        on_gpu += !strcmp(reply.device, "gpu");
        isn_grpc_search_reply_free(&reply);
    }
    if (on_gpu == 0) fail_msg("no reply of the burst came from the GPU");
    print_message("burst: %u of %u on the GPU, %lld packed by helping workers\n", on_gpu, BURST,
                  harness_metric(&h, "isn_scheduler_gpu_answers_helped_total"));
}

/* A query the GPU cannot answer as asked (k above gpu.max_k) is still answered, on the CPU. */
static void test_large_k_on_cpu(void **state) {
    (void)state;
    isn_grpc_search_request request = {.query = "wind tunnel", .k = 500};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    assert_string_equal(reply.device, "cpu");
    isn_grpc_search_reply_free(&reply);
}

static void test_health_endpoints(void **state) {
    (void)state;
    static char buf[1 << 17];
    assert_int_equal(harness_http_get(&h, "/readyz", buf, sizeof buf), 200);
    assert_non_null(strstr(buf, "ready"));
    assert_null(strstr(buf, "degraded"));
    assert_int_equal(harness_http_get(&h, "/metrics", buf, sizeof buf), 200);
    assert_non_null(strstr(buf, "isn_gpu_healthy{device=\"0\"} 1"));
    /* the searches the GPU answered are timed under its label (they were all labelled cpu) */
    const char *gpu_total = strstr(buf, "isn_search_stage_duration_seconds_count{stage=\"total\",device=\"gpu\"} ");
    assert_non_null(gpu_total);
    assert_true(strtoull(strchr(gpu_total, '}') + 2, NULL, 10) > 0);
    assert_non_null(strstr(buf, "isn_rerank_device_total{device=\"gpu\"} 0")); /* no GPU model cache when emulated */
    /* where the dispatchers' and the backend's time went: the GPU's searches were launched and landed */
    assert_true(harness_metric_value(&h, "isn_scheduler_gpu_dispatcher_seconds_total{phase=\"launching\"}") > 0);
    assert_true(harness_metric_value(&h, "isn_scheduler_gpu_dispatcher_seconds_total{phase=\"landing\"}") > 0);
    assert_true(harness_metric_value(&h, "isn_gpu_host_seconds_total{device=\"0\",phase=\"submit\"}") > 0);
    char want[64];
    snprintf(want, sizeof want, "isn_gpu_healthy{device=\"%u\"} 1", devices - 1);
    assert_non_null(strstr(buf, want));
    assert_int_equal(harness_http_get(&h, "/stats", buf, sizeof buf), 200);
    snprintf(want, sizeof want, "\"gpus\":%u", devices);
    assert_non_null(strstr(buf, want));
    assert_non_null(strstr(buf, "\"healthy\":true"));
    assert_non_null(strstr(buf, "\"first_stage_devices\":["));
    assert_true(harness_log_has(&h, "EMULATED"));
}

/* search.workers = 0 beside a GPU: the CPUs less the loop and a dispatcher per device, at least one (a worker per
 * CPU would keep every core busy and the loop waiting for one), and the log says how it counted. The rest of the
 * CPU-only node's workers (one per CPU) stand by, and rest once the GPU holds the index. */
static void test_default_workers_leave_cores(void **state) {
    (void)state;
    static char buf[1 << 16];
    const uint32_t cpus = isn_cpus_available();
    const uint32_t want = cpus > 1 + devices ? cpus - 1 - devices : 1;
    const uint32_t standby = cpus > want ? cpus - want : 0;
    assert_int_equal(isn_scheduler_default_workers(cpus, 1, devices), want);
    assert_int_equal(harness_http_get(&h, "/stats", buf, sizeof buf), 200);
    char field[32];
    snprintf(field, sizeof field, "\"workers\":%u,", want + standby);
    if (!strstr(buf, field)) fail_msg("/stats has no %s (%u CPUs, 1 loop, %u devices): %.300s", field, cpus, devices, buf);
    char line[200];
    snprintf(line, sizeof line,
             "%u search workers (search.workers = 0: %u CPUs less 1 loops and %u GPU dispatchers) and %u standby workers",
             want, cpus, devices, standby);
    if (!harness_log_has(&h, line)) fail_msg("no log line \"%s\"", line);
    assert_int_equal(harness_metric(&h, "isn_scheduler_standby_workers"), standby);
    /* the GPU serves (setup waited for it): every standby worker rests within its next look (10 ms) */
    int resting = -1;
    for (int i = 0; i < 500 && resting != (int)standby; i++) {
        resting = harness_metric(&h, "isn_scheduler_standby_workers_resting");
        if (resting != (int)standby) harness_sleep_ms(10);
    }
    assert_int_equal(resting, standby);
}

/* The node is ready on the CPU before the index reaches the GPU (gpu.upload_before_ready = false): the
 * upload starts after the ready line, is logged and timed, and leaves /readyz plainly ready. */
static void test_gpu_uploads_after_ready(void **state) {
    (void)state;
    int ready = harness_log_line(&h, "ready: serving");
    char uploaded[96];
    snprintf(uploaded, sizeof uploaded, "on %u of %u devices (uploaded in", devices, devices);
    int upload = harness_log_line(&h, uploaded);
    if (!ready || !upload || upload < ready) {
        harness_dump_log(&h);
        fail_msg("ready at log line %d, the GPU's upload ended at line %d: expected it after", ready, upload);
    }
    assert_int_equal(harness_metric(&h, "isn_gpu_up"), 1);
    assert_int_equal(harness_metric(&h, "isn_gpu_loading"), 0);
    double gpu_start = harness_metric_value(&h, "isn_gpu_startup_seconds");
    double start = harness_metric_value(&h, "isn_startup_seconds");
    if (!(gpu_start >= start && gpu_start > 0)) fail_msg("isn_gpu_startup_seconds %f, isn_startup_seconds %f", gpu_start, start);
}

/* Several devices, each a replica of the partition: every device's queries add up to what the GPU
 * answered, each is exported under its own label, and the metric families stay grouped. */
static void test_devices_share_the_work(void **state) {
    (void)state;
    static char buf[1 << 17];
    assert_int_equal(harness_http_get(&h, "/metrics", buf, sizeof buf), 200);
    long long total = 0;
    for (uint32_t d = 0; d < devices; d++) {
        char name[64];
        snprintf(name, sizeof name, "isn_gpu_queries_device_total{device=\"%u\"} ", d);
        const char *at = strstr(buf, name);
        if (!at) fail_msg("no %s in /metrics", name);
        total += atoll(at + strlen(name));
    }
    assert_true(total > 0);
    /* device 1's batches line follows device 0's: one group per metric */
    const char *first = strstr(buf, "isn_gpu_batches_total{device=\"0\"}");
    const char *second = strstr(buf, "isn_gpu_batches_total{device=\"1\"}");
    assert_non_null(first);
    assert_non_null(second);
    assert_true(second > first && memchr(first, '\n', (size_t)(second - first)) == strchr(first, '\n'));
    assert_true(harness_log_has(&h, "2 devices, each with the whole partition"));
}

/* gpu.cache = tier with less device memory than the partition takes: /stats says how far every list is resident
 * (tier_docs) and that lists are cut, and every answer is still the CPU engine's, some given by the device. */
static void test_tier_cache(void **state) {
    (void)state;
    static char buf[1 << 16];
    assert_int_equal(harness_http_get(&h, "/stats", buf, sizeof buf), 200);
    const char *cut_at = strstr(buf, "\"tier_docs\":"), *prefix = strstr(buf, "\"terms_prefix\":");
    if (!cut_at || !prefix) fail_msg("/stats has no tier_docs or terms_prefix: %.300s", buf);
    const long cut = atol(cut_at + strlen("\"tier_docs\":"));
    if (cut <= 0 || cut >= TIER_DOCS || atol(prefix + strlen("\"terms_prefix\":")) <= 0)
        fail_msg("tier_docs %ld of %u documents, terms_prefix %ld", cut, TIER_DOCS,
                 atol(prefix + strlen("\"terms_prefix\":")));
    assert_true(check_queries(10, ISN_MODE_OR) > 0);
    assert_true(check_queries(10, ISN_MODE_AND) > 0);
    assert_true(check_queries(100, ISN_MODE_OR) > 0);
    assert_true(harness_log_has(&h, "gpu.cache = tier needs no log"));
}

/* gpu.stream_memory on the tier of test_tier_cache: the lists the tier holds a prefix of, or none of, are streamed to
 * the device with the batches, so the device answers every query, each the CPU engine's answer; /metrics counts the
 * queries and bytes streamed and the staging regions' device memory, and /stats the queries streamed. */
static void test_streaming(void **state) {
    (void)state;
    assert_true(check_queries(10, ISN_MODE_OR) > 0);
    assert_true(check_queries(10, ISN_MODE_AND) > 0);
    assert_true(check_queries(100, ISN_MODE_OR) > 0);
    static char buf[1 << 17];
    assert_int_equal(harness_http_get(&h, "/metrics", buf, sizeof buf), 200);
    static const char *const names[] = {"isn_gpu_queries_streamed_total{device=\"0\"} ",
                                        "isn_gpu_bytes_streamed_total{device=\"0\"} ", "isn_gpu_stream_bytes{device=\"0\"} "};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *at = strstr(buf, names[i]);
        if (!at) fail_msg("no %s in /metrics", names[i]);
        if (atoll(at + strlen(names[i])) <= 0) fail_msg("%s is %lld", names[i], atoll(at + strlen(names[i])));
    }
    static char stats[1 << 16];
    assert_int_equal(harness_http_get(&h, "/stats", stats, sizeof stats), 200);
    const char *streamed = strstr(stats, "\"queries_streamed\":");
    if (!streamed || atoll(streamed + strlen("\"queries_streamed\":")) <= 0)
        fail_msg("/stats shows no queries streamed: %.300s", stats);
    const char *cpu = strstr(buf, "isn_gpu_queries_not_resident_total{device=\"0\"} ");
    if (!cpu) fail_msg("no isn_gpu_queries_not_resident_total in /metrics");
    assert_int_equal(atoll(cpu + strlen("isn_gpu_queries_not_resident_total{device=\"0\"} ")), 0);
}

/* ------------------------------------------------------------------ setup */


static int teardown(void **state) {
    (void)state;
    return harness_finish(&h, client, offline_index, offline);
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, tier_cache_on ? TIER_DOCS : NUM_DOCS);
    if (harness_open_offline(&h, &offline_index, &offline) != 0) return -1;
    char count[32];
    snprintf(count, sizeof count, "gpu.devices=%u", devices);
    /* without the tier, the NULL in its place ends the options there; without streaming, the one after it */
    const char *extra[] = {"--set", "gpu.enable=true", "--set", "gpu.emulate=true", "--set", "gpu.route_all=true",
                           "--set", "gpu.max_k=100", "--set", count, "--workers", "0", "--set", "server.loops=1",
                           tier_cache_on ? "--set" : NULL, "gpu.cache=tier", "--set", "gpu.index_memory=1MiB",
                           /* the tier reads no log: a path that does not exist must not stop the node */
                           "--set", "gpu.training_queries=/nonexistent/isn-tier-training.tsv",
                           streaming_on ? "--set" : NULL, "gpu.stream_memory=16MiB", NULL};
    client = harness_start_connected(&h, extra, "gpu: ");
    /* ready on the CPU first; the GPU takes queries once its upload ends */
    if (client && !harness_wait_log(&h, "gpu: the first stage serves generation", 60000)) {
        harness_dump_log(&h);
        return -1;
    }
    return client ? 0 : -1;
}

static int setup_two(void **state) {
    devices = 2;
    return setup(state);
}

static int setup_tier(void **state) {
    devices = 1;
    tier_cache_on = true;
    return setup(state);
}

static int setup_streaming(void **state) {
    devices = 1;
    tier_cache_on = true;
    streaming_on = true;
    return setup(state);
}

int main(void) {
    const struct CMUnitTest daemon[] = {
        cmocka_unit_test(test_gpu_uploads_after_ready),
        cmocka_unit_test(test_gpu_hits_equal_cpu),
        cmocka_unit_test(test_gpu_hits_equal_cpu_in_a_burst),
        cmocka_unit_test(test_large_k_on_cpu),
        cmocka_unit_test(test_health_endpoints),
        cmocka_unit_test(test_default_workers_leave_cores),
    };
    const struct CMUnitTest two_devices[] = {
        cmocka_unit_test(test_gpu_uploads_after_ready),
        cmocka_unit_test(test_gpu_hits_equal_cpu),
        cmocka_unit_test(test_gpu_hits_equal_cpu_in_a_burst),
        cmocka_unit_test(test_health_endpoints),
        cmocka_unit_test(test_devices_share_the_work),
        cmocka_unit_test(test_default_workers_leave_cores),
    };
    const struct CMUnitTest tier_cache[] = {
        cmocka_unit_test(test_tier_cache),
    };
    int failed = cmocka_run_group_tests_name("isnd_gpu", daemon, setup, teardown);
    failed += cmocka_run_group_tests_name("isnd_gpu_two_devices", two_devices, setup_two, teardown);
    const struct CMUnitTest streaming[] = {
        cmocka_unit_test(test_streaming),
    };
    failed += cmocka_run_group_tests_name("isnd_gpu_tier", tier_cache, setup_tier, teardown);
    return failed + cmocka_run_group_tests_name("isnd_gpu_stream", streaming, setup_streaming, teardown);
}
