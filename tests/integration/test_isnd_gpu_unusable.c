/* A node whose configuration asks for a GPU (gpu.enable = true) that cannot be used (device 250, on
 * any machine, with or without CUDA) serves on the CPU and says so where monitoring looks: /readyz
 * is "ready (degraded: ...)" with the reason, /metrics has isn_gpu_up 0, the log an error line; the
 * searches still answer. A node that does not ask for a GPU exports no isn_gpu_up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "tests/support/isnd_harness.h"

static harness h;

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, 300);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    harness_cleanup(&h);
    return 0;
}

static void test_unusable_gpu_is_degraded_and_exported(void **state) {
    (void)state;
    const char *extra[] = {"--set", "gpu.enable=true", "--set", "gpu.device=250", NULL};
    isn_grpc_client *c = harness_start_connected(&h, extra, NULL);
    assert_non_null(c);
    /* the device is tried after the node is ready */
    assert_true(harness_wait_log(&h, "error gpu: gpu.enable = true but no device can be used", 30000));
    char body[2048];
    assert_int_equal(harness_http_get(&h, "/readyz", body, sizeof body), 200);
    fprintf(stderr, "test_isnd_gpu_unusable: /readyz: %s", body);
    assert_non_null(strstr(body, "degraded"));
    assert_non_null(strstr(body, "gpu.enable"));
    assert_non_null(strstr(body, "device 250"));
    assert_int_equal(harness_metric(&h, "isn_gpu_up"), 0);
    assert_true(harness_log_has(&h, "error gpu: gpu.enable = true but no device can be used"));
    isn_grpc_search_request rq = {.query = "wind tunnel", .timeout_ms = 5000};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(c, &rq, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(c);
    assert_int_equal(harness_stop_checked(&h), 0);
}

/* Not told how many loops and workers, a node asking for a device the machine does not have counts them as
 * the CPU-only node it will be (a worker per CPU), not as one beside a GPU (the CPUs less the loops and a
 * dispatcher: half its workers gone on a node that has only its CPUs). */
static void test_default_counts_without_the_device(void **state) {
    (void)state;
    static char buf[1 << 16];
    const char *extra[] = {"--set", "gpu.enable=true", "--set", "gpu.device=250", "--workers", "0", NULL};
    isn_grpc_client *c = harness_start_connected(&h, extra, NULL);
    assert_non_null(c);
    const uint32_t cpus = isn_cpus_available();
    assert_int_equal(harness_http_get(&h, "/stats", buf, sizeof buf), 200);
    char field[32];
    snprintf(field, sizeof field, "\"workers\":%u,", cpus);
    if (!strstr(buf, field)) fail_msg("/stats has no %s (%u CPUs, no device 250): %.300s", field, cpus, buf);
    char line[128];
    snprintf(line, sizeof line, "%u search workers (search.workers = 0: one per CPU, no device of gpu.enable on this machine)",
             cpus);
    if (!harness_log_has(&h, line)) fail_msg("no log line \"%s\"", line);
    assert_true(harness_log_has(&h, "(server.loops = 0: one per four CPUs from 8 on)"));
    isn_grpc_close(c);
    assert_int_equal(harness_stop_checked(&h), 0);
}

static void test_no_gpu_asked_for_exports_nothing(void **state) {
    (void)state;
    isn_grpc_client *c = harness_start_connected(&h, NULL, NULL);
    assert_non_null(c);
    char body[2048];
    assert_int_equal(harness_http_get(&h, "/readyz", body, sizeof body), 200);
    assert_string_equal(body, "ready\n");
    assert_int_equal(harness_metric(&h, "isn_gpu_up"), -1);
    isn_grpc_close(c);
    assert_int_equal(harness_stop_checked(&h), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unusable_gpu_is_degraded_and_exported),
        cmocka_unit_test(test_default_counts_without_the_device),
        cmocka_unit_test(test_no_gpu_asked_for_exports_nothing),
    };
    return cmocka_run_group_tests_name("isnd_gpu_unusable", tests, setup, teardown);
}
