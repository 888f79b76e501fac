/* isn-bench tallies: nearest-rank percentiles, rates, and the JSON it prints (parsed back).
 * (base/bench_stats.c, linked from libisn_base.a.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/base.h"

static void test_percentiles_nearest_rank(void **state) {
    (void)state;
    bench_stats s;
    assert_int_equal(bench_stats_init(&s, 2000), 0);
    for (uint64_t v = 1000; v >= 1; v--) bench_stats_add_latency(&s, v); /* unsorted on purpose */
    bench_percentiles p;
    bench_stats_percentiles(&s, &p);
    assert_true(p.p50 == 500 && p.p90 == 900 && p.p99 == 990 && p.p999 == 999 && p.max == 1000);
    assert_true(p.mean > 500.49 && p.mean < 500.51);
    bench_stats_free(&s);

    assert_int_equal(bench_stats_init(&s, 3), 0);
    bench_stats_add_latency(&s, 7);
    bench_stats_percentiles(&s, &p);
    assert_true(p.p50 == 7 && p.p999 == 7);
    for (int i = 0; i < 5; i++) bench_stats_add_latency(&s, 1);
    assert_true(s.latency_overflow); /* capped, and says so */
    assert_int_equal(s.num_latencies, 3);
    bench_stats_free(&s);
}

static void test_json(void **state) {
    (void)state;
    bench_stats s;
    assert_int_equal(bench_stats_init(&s, 100), 0);
    s.scheduled = 100;
    s.not_sent = 4;
    s.ok = 90;
    s.deadline_exceeded = 3;
    s.shed = 2;
    s.transport_errors = 1;
    s.partial = 9;
    s.late = 6;
    for (int i = 0; i < 90; i++) bench_stats_add_latency(&s, 100 + (uint64_t)i);
    for (int i = 0; i < 100; i++) bench_stats_add_send_lag(&s, (uint64_t)i); /* 0..99 us behind schedule */
    for (int i = 0; i < 80; i++) bench_stats_add_receive_lag(&s, 1000 + (uint64_t)i); /* read 1.0-1.079 ms late */
    for (int i = 0; i < 2; i++) bench_stats_add_shed_from_send(&s, 300 + 100 * (uint64_t)i); /* the two refusals */
    s.generator_cpu_ns = 3000;
    s.generator_wall_ns = 4000;
    /* a second thread, whose client throttle refused all it was asked (5 for want of a stream): asked, not sent */
    bench_stats other = {.generator_cpu_ns = 1000, .generator_wall_ns = 4000, .arrivals_unknown = 10, .scheduled = 20,
                         .client_refused = 20, .client_refused_no_room = 5, .refused_streams = 3};
    bench_stats_merge(&s, &other);
    bench_stats_record(&s, 3, true, 50, 25000); /* INVALID_ARGUMENT: counted apart, not as another status */
    s.scheduled++;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    bench_stats_write_json(out, &s, 50.0, 0, 2.0, 25);
    fclose(out);
    json_error_t error;
    json_t *j = json_loads(text, 0, &error);
    if (!j) fail_msg("not JSON (%s): %s", error.text, text);
    assert_true(json_real_value(json_object_get(j, "target_rate")) == 50.0);
    assert_true(json_real_value(json_object_get(j, "throughput")) == 45.0);
    assert_int_equal(json_integer_value(json_object_get(j, "sent")), 97);
    assert_int_equal(json_integer_value(json_object_get(j, "scheduled")), 121); /* 101 here, 20 there */
    assert_int_equal(json_integer_value(json_object_get(j, "client_refused")), 20);
    assert_int_equal(json_integer_value(json_object_get(j, "client_refused_no_room")), 5);
    json_t *st = json_object_get(j, "status");
    assert_int_equal(json_integer_value(json_object_get(st, "resource_exhausted")), 2);
    assert_int_equal(json_integer_value(json_object_get(st, "transport_error")), 1);
    assert_int_equal(json_integer_value(json_object_get(st, "refused_stream")), 3); /* answers, not transport errors */
    assert_int_equal(json_integer_value(json_object_get(st, "invalid_argument")), 1);
    assert_int_equal(json_integer_value(json_object_get(st, "other")), 0);
    assert_int_equal(json_integer_value(json_object_get(j, "deadline_miss")), 9); /* late + DEADLINE_EXCEEDED */
    assert_true(fabs(json_real_value(json_object_get(j, "partial_rate")) - 0.1) < 1e-6);
    assert_true(fabs(json_real_value(json_object_get(j, "error_rate")) - 7.0 / 97) < 1e-6);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "latency_us"), "p50")), 144);
    json_t *lag = json_object_get(j, "send_lag_us");
    assert_int_equal(json_integer_value(json_object_get(lag, "p99")), 98);
    assert_int_equal(json_integer_value(json_object_get(lag, "max")), 99);
    assert_int_equal(json_integer_value(json_object_get(lag, "samples")), 100);
    json_t *shed_from_send = json_object_get(j, "shed_from_send_us");
    assert_int_equal(json_integer_value(json_object_get(shed_from_send, "p50")), 300);
    assert_int_equal(json_integer_value(json_object_get(shed_from_send, "max")), 400);
    assert_int_equal(json_integer_value(json_object_get(shed_from_send, "samples")), 2);
    json_t *receive = json_object_get(j, "receive_lag_us");
    assert_int_equal(json_integer_value(json_object_get(receive, "p50")), 1039);
    assert_int_equal(json_integer_value(json_object_get(receive, "max")), 1079);
    assert_int_equal(json_integer_value(json_object_get(receive, "samples")), 80);
    assert_int_equal(json_integer_value(json_object_get(j, "arrivals_unknown")), 10); /* the other thread's */
    /* the threads' CPU over their wall time, summed: (3 + 1) / (4 + 4) */
    assert_true(fabs(json_real_value(json_object_get(j, "generator_busy")) - 0.5) < 1e-6);
    json_decref(j);
    bench_stats_free(&s);
    free(text);
}

static void test_worst_bucket(void **state) {
    (void)state;
    bench_stats s;
    assert_int_equal(bench_stats_init(&s, 10), 0);
    assert_true(bench_stats_worst_bucket_share(&s) == 1.0); /* nothing measured: nothing to say */
    for (int bucket = 0; bucket < 5; bucket++) /* 100 a bucket, the third stalled at 10; a partial last one */
        for (int i = 0; i < (bucket == 2 ? 10 : bucket == 4 ? 3 : 100); i++)
            bench_stats_timeline_add(&s, bucket * BENCH_TIMELINE_NS + i);
    double share = bench_stats_worst_bucket_share(&s);
    assert_true(share > 10.0 / 77.5 - 1e-9 && share < 10.0 / 77.5 + 1e-9);
    bench_stats_free(&s);
}

static void test_median(void **state) {
    (void)state;
    double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2}, one[] = {7};
    assert_true(bench_median(odd, 3) == 3.0);
    assert_true(bench_median(even, 4) == 2.5);
    assert_true(bench_median(one, 1) == 7.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentiles_nearest_rank),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_worst_bucket),
    };
    return cmocka_run_group_tests_name("bench_stats", tests, NULL, NULL);
}
