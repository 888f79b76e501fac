/* The query syntax over gRPC, through isnd and through isn-agg in front of it: phrases, required,
 * excluded and field: clauses give the offline engine's hits; a malformed query and an unknown field
 * are INVALID_ARGUMENT naming the byte offset (and the index's fields), and the server keeps serving;
 * a stock Python grpcio client sends the same query as a structured_query tree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "tests/support/isnd_harness.h"

#define NUM_DOCS 3000

static harness h, agg_process;
static isn_grpc_client *isnd_client, *agg_client;
static isn_index *offline_index;
static isn_searcher *offline;

static const char *const queries[] = {
    "\"wind tunnel\"",
    "+wind -tunnel flow",
    "title:search engine",
    "+title:\"wind tunnel\" body:pressure -\"boundary layer\"",
    "heat transfer +\"supersonic flow\"",
    "wind tunnel:flow", /* no field 'tunnel': the words wind, tunnel and flow */
    "-wind",
};

static uint32_t same_hits_as_offline(isn_grpc_client *client, const char *text, const char *via) {
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse_syntax(offline, text, strlen(text), NULL, 0, &query, err, sizeof err), 0);
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = 100;
    static isn_hit hits[100];
    uint32_t n = 0;
    assert_int_equal(isn_search(offline, &query, &options, hits, &n, NULL, err, sizeof err), 0);
    isn_grpc_search_request request = {.query = text, .k = 100};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    if (reply.status != 0) fail_msg("%s '%s': status %d %s", via, text, reply.status, reply.message);
    if (reply.num_hits != n) fail_msg("%s '%s': %u hits, offline %u", via, text, reply.num_hits, n);
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *id = isn_index_doc_id(offline_index, hits[i].doc, &len);
        if (strlen(reply.hits[i].external_id) != len || memcmp(reply.hits[i].external_id, id, len) != 0 ||
            reply.hits[i].score != hits[i].score)
            fail_msg("%s '%s' rank %u: %s %.9g, offline %.*s %.9g", via, text, i, reply.hits[i].external_id,
                     reply.hits[i].score, (int)len, id, hits[i].score);
    }
    isn_grpc_search_reply_free(&reply);
    return n;
}

static void expect_invalid(isn_grpc_client *client, const char *text, const char *needle, const char *via) {
    isn_grpc_search_request request = {.query = text, .k = 10};
    isn_grpc_search_reply reply;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    if (reply.status != 3) fail_msg("%s '%s': status %d, expected INVALID_ARGUMENT (3)", via, text, reply.status);
    if (!strstr(reply.message, needle)) fail_msg("%s '%s': message '%s' lacks '%s'", via, text, reply.message, needle);
    isn_grpc_search_reply_free(&reply);
}

static void check_server(isn_grpc_client *client, const char *via) {
    expect_invalid(client, "wind \"tunnel flow", "quote at byte 5", via);
    expect_invalid(client, "wind file:\"line no\"",
                   "unknown field 'file' at byte 5: this index has the fields title, body", via);
    expect_invalid(client, "x title:(a b)", "at byte 8", via);
    /* every query but the last (excluded clauses alone match nothing) finds documents */
    size_t last = sizeof queries / sizeof *queries - 1;
    for (size_t i = 0; i <= last; i++) {
        uint32_t n = same_hits_as_offline(client, queries[i], via);
        if ((n == 0) != (i == last)) fail_msg("%s '%s': %u hits", via, queries[i], n);
    }
}

static void test_isnd(void **state) {
    (void)state;
    check_server(isnd_client, "isnd");
}

static void test_through_isn_agg(void **state) {
    (void)state;
    check_server(agg_client, "isn-agg");
}

static void python_check(const harness *server, const char *extra) {
    const char *py = getenv("ISN_PYTHON") ? getenv("ISN_PYTHON") : access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "%s tests/integration/grpcio_query_check.py --server %s --proto-dir proto --work-dir %s %s",
             py, server->grpc_address, h.work_dir, extra);
    int rc = system(cmd);
    if (rc != 0) fail_msg("the Python grpcio query check failed (exit %d): %s", WEXITSTATUS(rc), cmd);
}

static void test_python_grpcio_structured_query(void **state) {
    (void)state;
    python_check(&h, "");
}

/* isn-agg forwards the caller's request message itself: query trees and their errors pass through it. */
static void test_python_grpcio_through_isn_agg(void **state) {
    (void)state;
    python_check(&agg_process, "");
}

static int setup(void **state) {
    (void)state;
    if (harness_open_offline(&h, &offline_index, &offline) != 0) return -1;
    if (harness_start(&h, NULL, NULL) != 0) return -1;
    const char *partitions[] = {h.grpc_address, NULL};
    if (harness_start_agg(&agg_process, partitions, NULL) != 0) return -1;
    char err[256];
    isnd_client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    agg_client = isn_grpc_connect(agg_process.grpc_address, 5000, err, sizeof err);
    if (!isnd_client || !agg_client) {
        fprintf(stderr, "connect: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    isn_grpc_close(agg_client);
    isn_grpc_close(isnd_client);
    int status = harness_stop(&agg_process) == 0 ? 0 : -1;
    harness_cleanup(&agg_process);
    if (harness_finish(&h, NULL, offline_index, offline) != 0) status = -1;
    return status;
}

int main(int argc, char **argv) {
    (void)argc;
    harness_init(&h, argv[0]);
    harness_init(&agg_process, argv[0]);
    harness_build_index(&h, NUM_DOCS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isnd),
        cmocka_unit_test(test_through_isn_agg),
        cmocka_unit_test(test_python_grpcio_structured_query),
        cmocka_unit_test(test_python_grpcio_through_isn_agg),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
