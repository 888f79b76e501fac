/* Stored fields end to end: two partitions built with --store title,body (even and odd documents),
 * an isnd on each and isn-agg in front. A Search asking for stored fields gets each hit's raw text
 * (UTF-8 and line breaks as the input had them) in the order asked, from isnd and through isn-agg, by
 * this project's client, the stock Python grpcio client and isn-query --fields; a field the index does
 * not keep is INVALID_ARGUMENT naming it, on both servers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/isnd_harness.h"
#include "grpc/client.h"

#define NUM_DOCS 400

static harness nodes[2], aggregator;
static isn_grpc_client *node_client, *agg_client;

static void title_of(uint32_t n, char *out, size_t len) { snprintf(out, len, "Stored title %u: café №%u", n, n * 7); }

static void body_of(uint32_t n, char *out, size_t len) {
    snprintf(out, len, "alpha body of %u%s\nsecond line\twith a tab %s", n, n % 3 ? " beta" : "", n % 5 ? "gamma" : "delta");
}

/* Partition p holds the documents n with n % 2 == p. */
static int build_partition(harness *h, uint32_t p) {
    isn_build_options options;
    isn_build_options_default(&options);
    options.progress = false;
    options.num_stored = 2;
    strcpy(options.stored[0], "body"); /* named out of order: stored in field order all the same */
    strcpy(options.stored[1], "title");
    isn_builder *builder = isn_builder_new(&options);
    if (!builder) return -1;
    char id[32], title[128], body[256], err[ISN_ERR_LEN];
    for (uint32_t n = p; n < NUM_DOCS; n += 2) {
        snprintf(id, sizeof id, "d%04u", n);
        title_of(n, title, sizeof title);
        body_of(n, body, sizeof body);
        const char *fields[2] = {title, body};
        size_t lens[2] = {strlen(title), strlen(body)};
        if (isn_builder_add(builder, id, fields, lens, 0.0f, err, sizeof err) != 0) return -1;
    }
    int rc = isn_builder_write(builder, h->index_dir, NULL, err, sizeof err);
    if (rc != 0) fprintf(stderr, "build: %s\n", err);
    isn_builder_free(builder);
    return rc;
}

static int setup(void **state) {
    (void)state;
    char err[256];
    const char *partitions[3] = {NULL, NULL, NULL};
    for (uint32_t p = 0; p < 2; p++) {
        harness_init(&nodes[p], getenv("ISN_TEST_ARGV0"));
        if (build_partition(&nodes[p], p) != 0) return -1;
        if (harness_start(&nodes[p], NULL, NULL) != 0) return -1;
        partitions[p] = nodes[p].grpc_address;
    }
    harness_init(&aggregator, getenv("ISN_TEST_ARGV0"));
    if (harness_start_agg(&aggregator, partitions, NULL) != 0) return -1;
    node_client = isn_grpc_connect(nodes[0].grpc_address, 5000, err, sizeof err);
    agg_client = isn_grpc_connect(aggregator.grpc_address, 5000, err, sizeof err);
    return node_client && agg_client ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    if (node_client) isn_grpc_close(node_client);
    if (agg_client) isn_grpc_close(agg_client);
    if (aggregator.pid > 0) harness_stop(&aggregator);
    harness_cleanup(&aggregator);
    for (int p = 0; p < 2; p++) {
        if (nodes[p].pid > 0) harness_stop(&nodes[p]);
        harness_cleanup(&nodes[p]);
    }
    return 0;
}

/* Searches `query` asking for `fields` and checks every hit's stored text; returns the parities seen
 * (bit 0: an even document, bit 1: an odd one). */
static unsigned check_search(isn_grpc_client *client, const char *query, const char *const *fields, uint32_t num_fields) {
    isn_grpc_search_request rq = {.query = query, .k = NUM_DOCS, .stored_fields = fields, .num_stored_fields = num_fields};
    isn_grpc_search_reply reply;
    char err[256], want[256];
    assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
    if (reply.status != 0) fail_msg("Search: status %d: %s", reply.status, reply.message);
    assert_true(reply.num_hits > 0);
    unsigned parities = 0;
    for (uint32_t i = 0; i < reply.num_hits; i++) {
        const isn_grpc_hit *hit = &reply.hits[i];
        uint32_t n = (uint32_t)atoi(hit->external_id + 1);
        parities |= 1u << (n % 2);
        assert_int_equal(hit->num_fields, num_fields);
        for (uint32_t j = 0; j < num_fields; j++) {
            assert_string_equal(hit->fields[j].name, fields[j]);
            if (!strcmp(fields[j], "title")) title_of(n, want, sizeof want);
            else body_of(n, want, sizeof want);
            assert_string_equal(hit->fields[j].value, want);
        }
    }
    isn_grpc_search_reply_free(&reply);
    return parities;
}

static void expect_invalid(isn_grpc_client *client, const char *const *fields, uint32_t num_fields, const char *named) {
    isn_grpc_search_request rq = {.query = "alpha", .k = 10, .stored_fields = fields, .num_stored_fields = num_fields};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, ISN_GRPC_STATUS_INVALID_ARGUMENT);
    if (!strstr(reply.message, named)) fail_msg("message '%s' does not name '%s'", reply.message, named);
    isn_grpc_search_reply_free(&reply);
}

static void test_isnd(void **state) {
    (void)state;
    static const char *const both[] = {"title", "body"}, *const reversed[] = {"body", "title"}, *const body[] = {"body"};
    assert_int_equal(check_search(node_client, "alpha", both, 2), 1u);
    check_search(node_client, "beta gamma", reversed, 2);
    check_search(node_client, "delta", body, 1);
    check_search(node_client, "alpha", NULL, 0); /* none asked, none sent */
    static const char *const unknown[] = {"title", "url"};
    expect_invalid(node_client, unknown, 2, "\"url\"");
    expect_invalid(node_client, unknown, 2, "title, body"); /* and says what it does keep */
}

static void test_through_isn_agg(void **state) {
    (void)state;
    static const char *const both[] = {"title", "body"}, *const title[] = {"title"};
    assert_int_equal(check_search(agg_client, "alpha", both, 2), 3u); /* hits of both partitions */
    assert_int_equal(check_search(agg_client, "beta", title, 1), 3u);
    check_search(agg_client, "alpha", NULL, 0);
    static const char *const unknown[] = {"summary"};
    expect_invalid(agg_client, unknown, 1, "\"summary\"");
}

static const char *python(void) {
    const char *env = getenv("ISN_PYTHON");
    if (env) return env;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

static void test_python_grpcio_client(void **state) {
    (void)state;
    char path[600], text[256];
    snprintf(path, sizeof path, "%s/expect.json", aggregator.work_dir);
    json_t *expect = json_object();
    for (uint32_t n = 0; n < NUM_DOCS; n++) {
        char id[32];
        snprintf(id, sizeof id, "d%04u", n);
        json_t *fields = json_object();
        title_of(n, text, sizeof text);
        json_object_set_new(fields, "title", json_string(text));
        body_of(n, text, sizeof text);
        json_object_set_new(fields, "body", json_string(text));
        json_object_set_new(expect, id, fields);
    }
    assert_int_equal(json_dump_file(expect, path, 0), 0);
    json_decref(expect);
    const char *servers[] = {nodes[1].grpc_address, aggregator.grpc_address};
    for (int s = 0; s < 2; s++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "%s tests/integration/grpcio_stored_check.py --server %s --expect %s --query 'alpha beta' "
                 "--proto-dir proto --work-dir %s%s",
                 python(), servers[s], path, aggregator.work_dir, s == 0 ? " --info-stored title,body" : "");
        int rc = system(cmd);
        if (rc != 0) fail_msg("the Python grpcio stored-field check failed (exit %d): %s", WEXITSTATUS(rc), cmd);
    }
}

/* Runs cmd, returns its stdout (static buffer). */
static const char *run_output(const char *cmd) {
    static char out[1 << 16];
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    return out;
}

/* isn-query --fields: the same lines from the index directly and through isn-agg; line breaks shown
 * as spaces; an unknown field is an error on both paths. */
static void test_isn_query_fields(void **state) {
    (void)state;
    char cmd[2048], want[256];
    snprintf(cmd, sizeof cmd, "%s/bin/isn-query --server %s -k 400 --fields title,body 'alpha' | grep -v '^#'",
             aggregator.build_dir, aggregator.grpc_address);
    const char *out = run_output(cmd);
    title_of(2, want, sizeof want);
    char line[300];
    snprintf(line, sizeof line, "\ttitle: %s\n", want);
    if (!strstr(out, line)) fail_msg("isn-query --server output lacks '%s':\n%.2000s", line, out);
    snprintf(line, sizeof line, "\tbody: alpha body of 7 beta second line with a tab gamma\n");
    if (!strstr(out, line)) fail_msg("isn-query --server output lacks '%s':\n%.2000s", line, out);

    snprintf(cmd, sizeof cmd, "%s/bin/isn-query --index %s -k 3 --fields body 'delta' | grep -v '^#'",
             aggregator.build_dir, nodes[0].index_dir);
    out = run_output(cmd);
    if (!strstr(out, "\tbody: alpha body of ") || !strstr(out, "delta\n")) fail_msg("isn-query --index output:\n%s", out);

    for (int side = 0; side < 2; side++) {
        snprintf(cmd, sizeof cmd, "%s/bin/isn-query %s %s --fields title,url 'alpha' 2>&1 >/dev/null; echo rc=$?",
                 aggregator.build_dir, side ? "--server" : "--index", side ? aggregator.grpc_address : nodes[0].index_dir);
        out = run_output(cmd);
        if (!strstr(out, "\"url\"") || strstr(out, "rc=0")) fail_msg("isn-query with an unknown field: %s", out);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    setenv("ISN_TEST_ARGV0", argv[0], 1);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_isnd), cmocka_unit_test(test_through_isn_agg),
                                       cmocka_unit_test(test_python_grpcio_client), cmocka_unit_test(test_isn_query_fields)};
    return cmocka_run_group_tests_name("stored_fields", tests, setup, teardown);
}
