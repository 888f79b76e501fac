/* Logs an operator can ship and search: JSON Lines on isnd and isn-agg (every line of both logs is a
 * JSON object), access lines with the request id, and W3C trace context end to end: a client's
 * traceparent reaches isn-agg, whose access line names the trace, its own span and the client's; each
 * isnd's access line carries the same trace id with isn-agg's span as its parent. Without a request id
 * isn-agg uses the trace id, and sends it on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/isnd_harness.h"
#include "grpc/client.h"

#define TRACE_ID "4bf92f3577b34da6a3ce929d0e0e4736"
#define CLIENT_SPAN "00f067aa0ba902b7"

static harness node, aggregator;

static int setup(void **state) {
    (void)state;
    harness_prepare(&node, 1000);
    const char *extra[] = {"--set", "log.json=true", "--set", "log.access=true", NULL};
    if (harness_start(&node, NULL, extra) != 0) return -1;
    harness_init(&aggregator, getenv("ISN_TEST_ARGV0"));
    const char *partitions[] = {node.grpc_address, NULL};
    const char *agg_extra[] = {"--set", "access_log=true", "--set", "log_json=true", NULL};
    return harness_start_agg(&aggregator, partitions, agg_extra);
}

static int teardown(void **state) {
    (void)state;
    if (aggregator.pid > 0) harness_stop(&aggregator);
    harness_cleanup(&aggregator);
    if (node.pid > 0) harness_stop(&node);
    harness_cleanup(&node);
    return 0;
}

/* Every line of the log parsed; the access lines of Search kept in `access` (a JSON array). */
static json_t *read_log(const harness *h, json_t *access) {
    FILE *f = fopen(h->log_path, "r");
    assert_non_null(f);
    char line[8192];
    json_t *all = json_array();
    while (fgets(line, sizeof line, f)) {
        json_error_t error;
        json_t *record = json_loads(line, 0, &error);
        if (!json_is_object(record)) fail_msg("%s: not a JSON object: %s (%s)", h->log_path, line, error.text);
        const char *event = json_string_value(json_object_get(record, "event"));
        const char *method = json_string_value(json_object_get(record, "method"));
        if (event && !strcmp(event, "access") && method && !strcmp(method, "isn.v1.Search/Search"))
            json_array_append(access, record);
        json_array_append_new(all, record);
    }
    fclose(f);
    return all;
}

static const char *field(json_t *record, const char *name) {
    const char *value = json_string_value(json_object_get(record, name));
    if (!value) fail_msg("access line lacks %s: %s", name, json_dumps(record, 0));
    return value;
}

static void test_trace_context_and_access_lines(void **state) {
    (void)state;
    char err[256];
    isn_grpc_client *c = isn_grpc_connect(aggregator.grpc_address, 5000, err, sizeof err);
    assert_non_null(c);
    isn_grpc_search_request traced = {.query = "t1 t2", .timeout_ms = 5000, .request_id = "req-42",
                                      .traceparent = "00-" TRACE_ID "-" CLIENT_SPAN "-01"};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(c, &traced, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_search_request plain = {.query = "t3", .timeout_ms = 5000};
    assert_int_equal(isn_grpc_search(c, &plain, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(c);
    harness_sleep_ms(100); /* the lines are written before the replies; the files are read as they are */

    json_t *agg_access = json_array(), *node_access = json_array();
    json_t *agg_all = read_log(&aggregator, agg_access), *node_all = read_log(&node, node_access);
    assert_int_equal(json_array_size(agg_access), 2);
    assert_int_equal(json_array_size(node_access), 2);

    json_t *a = json_array_get(agg_access, 0), *n = json_array_get(node_access, 0);
    assert_string_equal(field(a, "request_id"), "req-42");
    assert_string_equal(field(a, "trace_id"), TRACE_ID);
    assert_string_equal(field(a, "parent_span"), CLIENT_SPAN);
    assert_string_equal(field(a, "code"), "OK");
    assert_string_equal(field(a, "coverage"), "1/1");
    assert_string_equal(field(n, "request_id"), "req-42");
    assert_string_equal(field(n, "trace_id"), TRACE_ID);
    assert_string_equal(field(n, "parent_span"), field(a, "span")); /* isn-agg's span is isnd's parent */
    assert_string_not_equal(field(a, "span"), CLIENT_SPAN);

    /* no traceparent, no request id: a new trace, whose id is the request id everywhere */
    a = json_array_get(agg_access, 1), n = json_array_get(node_access, 1);
    assert_int_equal(strlen(field(a, "trace_id")), 32);
    assert_null(json_object_get(a, "parent_span"));
    assert_string_equal(field(a, "request_id"), field(a, "trace_id"));
    assert_string_equal(field(n, "trace_id"), field(a, "trace_id"));
    assert_string_equal(field(n, "request_id"), field(a, "trace_id"));
    fprintf(stderr, "test_tier_logs: %zu isn-agg and %zu isnd log lines, all JSON; trace %s through both\n",
            json_array_size(agg_all), json_array_size(node_all), TRACE_ID);
    json_decref(agg_access);
    json_decref(node_access);
    json_decref(agg_all);
    json_decref(node_all);
}

int main(int argc, char **argv) {
    (void)argc;
    setenv("ISN_TEST_ARGV0", argv[0], 1);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_trace_context_and_access_lines)};
    return cmocka_run_group_tests_name("tier_logs", tests, setup, teardown);
}
