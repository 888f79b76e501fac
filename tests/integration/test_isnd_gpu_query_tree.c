/* Query trees on a node with a GPU first stage (gpu.route_all: everything the GPU can take goes there):
 * required and excluded terms are answered by the GPU itself, phrases and field: clauses (which read
 * positions, not resident on the GPU) are routed to the CPU, bags of words
 * keep going to the GPU, and every answer equals the offline engine's. (Filters on the GPU are checked
 * by tests/unit/test_gpu_trees.c: this harness's index has no attributes.) Runs on the emulated device
 * here; ISN_TEST_REAL_GPU=1 runs it on the machine's GPU (skipping, and saying so, where there is none). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gpu/gpu.h"
#include "tests/support/isnd_harness.h"

#define NUM_DOCS 3000

static harness h;
static isn_index *offline_index;
static isn_searcher *offline;
static isn_grpc_client *client;
static bool real_gpu;

/* need positions: the CPU */
static const char *const TREES[] = {
    "\"wind tunnel\"", "title:search engine", "+title:\"wind tunnel\" body:pressure",
    "heat transfer -\"boundary layer\"",
};
/* whole-document terms, required, optional and excluded: the GPU */
static const char *const GPU_TREES[] = {"+wind -tunnel flow", "+heat transfer", "pressure -wind -flow", "+boundary +layer heat"};
static const char *const BAGS[] = {"wind tunnel", "search engine ranking", "boundary layer pressure heat transfer"};

/* The reply equals the offline engine's hits; returns the device that answered. */
static const char *same_as_offline(const char *text, char *device, size_t device_len) {
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = 10;
    isn_query query;
    char err[ISN_ERR_LEN];
    static isn_hit want[10];
    uint32_t n = 0;
    assert_int_equal(isn_query_parse_syntax(offline, text, strlen(text), NULL, 0, &query, err, sizeof err), 0);
    assert_int_equal(isn_search(offline, &query, &options, want, &n, NULL, err, sizeof err), 0);
    isn_grpc_search_request request = {.query = text, .k = 10};
    isn_grpc_search_reply reply;
    if (isn_grpc_search(client, &request, &reply, err, sizeof err) != 0) fail_msg("search: %s", err);
    if (reply.status != 0) fail_msg("'%s': status %d %s", text, reply.status, reply.message);
    if (reply.num_hits != n || n == 0) fail_msg("'%s': %u hits, offline %u", text, reply.num_hits, n);
    for (uint32_t i = 0; i < n; i++)
        if (reply.hits[i].doc != want[i].doc || reply.hits[i].score != want[i].score)
            fail_msg("'%s' hit %u (device %s): doc %u %.9g, offline doc %u %.9g", text, i, reply.device,
                     reply.hits[i].doc, reply.hits[i].score, want[i].doc, want[i].score);
    snprintf(device, device_len, "%s", reply.device);
    isn_grpc_search_reply_free(&reply);
    return device;
}

static void test_trees_routed_by_positions(void **state) {
    (void)state;
    char device[32];
    for (size_t round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof TREES / sizeof *TREES; i++) {
            if (strcmp(same_as_offline(TREES[i], device, sizeof device), "cpu") != 0)
                fail_msg("'%s' was answered by %s; the GPU holds no positions", TREES[i], device);
        }
    /* required and excluded terms: the GPU itself, every time */
    for (size_t round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof GPU_TREES / sizeof *GPU_TREES; i++)
            if (strncmp(same_as_offline(GPU_TREES[i], device, sizeof device), "gpu", 3) != 0)
                fail_msg("'%s' was answered by %s, not the GPU", GPU_TREES[i], device);
    /* the routing still sends bags of words to the GPU */
    uint32_t on_gpu = 0;
    for (size_t i = 0; i < sizeof BAGS / sizeof *BAGS; i++)
        on_gpu += strncmp(same_as_offline(BAGS[i], device, sizeof device), "gpu", 3) == 0;
    if (on_gpu == 0) fail_msg("no bag of words went to the GPU (gpu.route_all)");
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, NUM_DOCS);
    if (harness_open_offline(&h, &offline_index, &offline) != 0) return -1;
    const char *extra[] = {"--set", "gpu.enable=true", "--set", real_gpu ? "gpu.emulate=false" : "gpu.emulate=true",
                           "--set", "gpu.route_all=true", "--set", "gpu.max_k=100", NULL};
    client = harness_start_connected(&h, extra, "gpu: ");
    /* ready on the CPU first; the GPU takes queries once its upload ends */
    if (client && !harness_wait_log(&h, "gpu: the first stage serves generation", 60000)) {
        harness_dump_log(&h);
        return -1;
    }
    return client ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return harness_finish(&h, client, offline_index, offline);
}

int main(void) {
    const char *want_real = getenv("ISN_TEST_REAL_GPU");
    real_gpu = want_real && strcmp(want_real, "1") == 0;
    if (real_gpu) {
        char err[256] = "";
        if (isn_gpu_device_count(err, sizeof err) <= 0) {
            printf("test_isnd_gpu_query_tree: SKIPPED: ISN_TEST_REAL_GPU=1 but no GPU here (%s)\n", err);
            return 0;
        }
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_trees_routed_by_positions)};
    return cmocka_run_group_tests_name(real_gpu ? "isnd_gpu_query_tree (GPU)" : "isnd_gpu_query_tree (emulated)", tests,
                                       setup, teardown);
}
