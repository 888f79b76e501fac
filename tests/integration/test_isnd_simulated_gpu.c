/* A node with a simulated GPU (scheduler.simulated_gpus_answer_without_hits) and gpu.route_all sends every
 * query to the simulation, as a GPU-only node sends every query to its device: the benchmarks' GPU-only
 * node without a GPU. The simulation is made slow (50 ms a launch), so that the cost model alone would keep
 * the queries on the idle CPU worker; without route_all it does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/isnd_harness.h"

#define QUERIES 20

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

/* QUERIES searches one at a time; how many the replies say the simulated GPU answered. */
static int answered_by_simulation(const char *const *extra) {
    isn_grpc_client *c = harness_start_connected(&h, extra, NULL);
    assert_non_null(c);
    isn_grpc_search_request rq = {.query = "wind tunnel", .k = 10, .timeout_ms = 5000};
    char err[256];
    int simulated = 0;
    for (int i = 0; i < QUERIES; i++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(c, &rq, &reply, err, sizeof err), 0);
        assert_int_equal(reply.status, 0);
        simulated += strcmp(reply.device, "gpu-sim") == 0;
        isn_grpc_search_reply_free(&reply);
    }
    isn_grpc_close(c);
    return simulated;
}

static void test_route_all_sends_every_query_to_the_simulation(void **state) {
    (void)state;
    const char *extra[] = {"--workers", "1", "--set", "scheduler.simulated_gpus_answer_without_hits=1",
                           "--set", "scheduler.simulated_gpu_launch=50ms", "--set", "gpu.route_all=true", NULL};
    assert_int_equal(answered_by_simulation(extra), QUERIES);
    assert_int_equal(harness_metric(&h, "isn_scheduler_ran_total{device=\"cpu\"}"), 0);
    assert_int_equal(harness_metric(&h, "isn_scheduler_ran_total{device=\"gpu\"}"), QUERIES);
    assert_int_equal(harness_stop_checked(&h), 0);
}

static void test_without_route_all_the_cost_model_chooses(void **state) {
    (void)state;
    const char *extra[] = {"--workers", "1", "--set", "scheduler.simulated_gpus_answer_without_hits=1",
                           "--set", "scheduler.simulated_gpu_launch=50ms", NULL};
    int simulated = answered_by_simulation(extra);
    fprintf(stderr, "test_isnd_simulated_gpu: without route_all, %d of %d answered by the simulation\n", simulated,
            QUERIES);
    assert_true(simulated < QUERIES);
    assert_int_equal(harness_stop_checked(&h), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_route_all_sends_every_query_to_the_simulation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_route_all_the_cost_model_chooses, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
