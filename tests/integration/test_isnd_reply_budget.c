/* Replies count against the node's memory budget while a worker builds them, not only once the loop
 * sends them: a reply that does not fit is refused by the worker with RESOURCE_EXHAUSTED naming the
 * budget (before, the worker built it outside the budget and the loop reset the stream), nothing of
 * its charge is left behind (the budget's use at rest is what it was, give or take the connection's
 * HTTP/2 state), and the node keeps answering. The budget (1 MiB) holds the calls and a small reply
 * but not 1,500 hits with a 2 KB stored body each. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc/client.h"
#include "tests/support/isnd_harness.h"

#define NUM_DOCS 1500
#define HTTP2_STATE_SLACK (16 * 1024)

static harness isnd;
static isn_grpc_client *client;

static int build_index(harness *h) {
    isn_build_options options;
    isn_build_options_default(&options);
    options.progress = false;
    options.num_fields = 1;
    strcpy(options.fields[0], "body");
    options.num_stored = 1;
    strcpy(options.stored[0], "body");
    isn_builder *builder = isn_builder_new(&options);
    if (!builder) return -1;
    static char body[2100];
    char id[32], err[ISN_ERR_LEN];
    int rc = 0;
    for (uint32_t n = 0; n < NUM_DOCS && rc == 0; n++) {
        size_t at = (size_t)snprintf(body, sizeof body, "alpha document %u", n);
        while (at + 16 < 2048) at += (size_t)snprintf(body + at, sizeof body - at, " filler%u", (n * 7 + (unsigned)at) % 97);
        snprintf(id, sizeof id, "d%04u", n);
        const char *fields[1] = {body};
        size_t lens[1] = {at};
        rc = isn_builder_add(builder, id, fields, lens, 0.0f, err, sizeof err);
    }
    if (rc == 0) rc = isn_builder_write(builder, h->index_dir, NULL, err, sizeof err);
    if (rc != 0) fprintf(stderr, "build: %s\n", err);
    isn_builder_free(builder);
    return rc;
}

static int setup(void **state) {
    (void)state;
    harness_init(&isnd, getenv("ISN_TEST_ARGV0"));
    if (build_index(&isnd) != 0) return -1;
    const char *args[] = {"--set", "server.memory_budget=1MiB", NULL};
    if (harness_start(&isnd, NULL, args) != 0) return -1;
    char err[256];
    client = isn_grpc_connect(isnd.grpc_address, 5000, err, sizeof err);
    return client ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    if (client) isn_grpc_close(client);
    if (isnd.pid > 0) harness_stop(&isnd);
    harness_cleanup(&isnd);
    return 0;
}

static int search(uint32_t k, bool body, isn_grpc_search_reply *reply) {
    static const char *const fields[] = {"body"};
    isn_grpc_search_request rq = {.query = "alpha", .k = k, .stored_fields = body ? fields : NULL,
                                  .num_stored_fields = body ? 1 : 0};
    char err[256];
    if (isn_grpc_search(client, &rq, reply, err, sizeof err) != 0) fail_msg("Search: %s", err);
    return reply->status;
}

/* What the budget holds once it settles (two readings 50 ms apart agree): at rest, the client's
 * connection and the pooled call with the buffers it kept. */
static long long settled_memory(void) {
    long long last = -1, now = harness_metric(&isnd, "isn_request_memory_bytes");
    for (int i = 0; i < 50 && now != last; i++) {
        harness_sleep_ms(50);
        last = now;
        now = harness_metric(&isnd, "isn_request_memory_bytes");
    }
    return now;
}

static void test_reply_over_budget_refused_by_the_worker(void **state) {
    (void)state;
    isn_grpc_search_reply reply;
    assert_int_equal(search(10, true, &reply), ISN_GRPC_STATUS_OK);
    assert_int_equal(reply.num_hits, 10);
    isn_grpc_search_reply_free(&reply);
    assert_int_equal(search(NUM_DOCS, false, &reply), ISN_GRPC_STATUS_OK);
    isn_grpc_search_reply_free(&reply);
    long long rest = settled_memory();
    assert_true(rest > 0);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(search(NUM_DOCS, true, &reply), ISN_GRPC_STATUS_RESOURCE_EXHAUSTED);
        if (!strstr(reply.message, "memory budget for replies"))
            fail_msg("refused with \"%s\": the worker should name the budget", reply.message);
        isn_grpc_search_reply_free(&reply);
    }
    /* the node keeps answering, and no refused reply left its charge behind */
    assert_int_equal(search(NUM_DOCS, false, &reply), ISN_GRPC_STATUS_OK);
    assert_int_equal(reply.num_hits, NUM_DOCS);
    isn_grpc_search_reply_free(&reply);
    /* the connection's HTTP/2 state (charged too) may grow a little: HPACK tables up to their 4 KiB */
    long long after = settled_memory();
    fprintf(stderr, "budget in use at rest: %lld bytes before the refusals, %lld after\n", rest, after);
    assert_true(after >= rest - HTTP2_STATE_SLACK && after <= rest + HTTP2_STATE_SLACK);
}

int main(int argc, char **argv) {
    (void)argc;
    setenv("ISN_TEST_ARGV0", argv[0], 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_over_budget_refused_by_the_worker),
    };
    return cmocka_run_group_tests_name("isnd_reply_budget", tests, setup, teardown);
}
