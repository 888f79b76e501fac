/* Connection state counts against the memory budget (issue 16), on isnd and on isn-agg: idle HTTP/2
 * connections use up a 1 MiB budget with nothing but what nghttp2 holds for them: each session's
 * frame buffers, then a 4 KB header each connection's HPACK decoder must keep in its dynamic table
 * (one request answered at once, 405). New connections past the budget's room get GOAWAY saying why;
 * a request on a connection made before is answered RESOURCE_EXHAUSTED naming the budget; once the
 * idle connections go, the same client is answered again, and both servers still drain on SIGTERM
 * and exit 0. Without the nghttp2 allocator's charges the idle connections cost the budget nothing
 * and that request would be served.
 *
 * Many connections opened at once fill the budget only roughly: one refused while others were still
 * being set up leaves their room behind when they go. So the test then opens connections one at a
 * time, each answered before the next, until one is refused: the budget then has less room than a
 * connection's own struct, and the request sent after carries a message far larger than that. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "grpc/client.h"
#include "tests/support/isnd_harness.h"
#include "tests/support/raw_http2.h"

#define IDLE_CONNECTIONS 160    /* at about 30 KiB of nghttp2 state each, several times the budget */
#define INDEXED_HEADER_BYTES 4000 /* fits the default 4 KiB HPACK table (with its name and 32 bytes) */
#define MORE_CONNECTIONS 64     /* one at a time after those: each accepted one takes some 34 KiB */
#define LARGE_QUERY_BYTES 16384 /* a request message this large needs that much room in the budget */

static harness isnd, agg;

typedef struct {
    const char *name;
    harness *h;
    const char *metric_prefix;
} target;

static target targets[2];

static long long metric(const target *t, const char *name) {
    char full[128];
    snprintf(full, sizeof full, "%s_%s", t->metric_prefix, name);
    return harness_metric(t->h, full);
}

static int search_query(isn_grpc_client *client, const char *query, isn_grpc_search_reply *reply) {
    isn_grpc_search_request request = {.query = query, .k = 10, .timeout_ms = 5000};
    char err[256];
    if (isn_grpc_search(client, &request, reply, err, sizeof err) != 0) fail_msg("Search: %s", err);
    return reply->status;
}

static int search(isn_grpc_client *client, isn_grpc_search_reply *reply) { return search_query(client, "wind tunnel", reply); }

/* The server's first answer on a raw connection: false with its debug data in why when that is a GOAWAY,
 * true when it is the 405 HEADERS (the connection was let in); fails when neither comes. */
static bool let_in(const target *t, int fd, char *why, size_t why_len) {
    static raw_h2_frame_in f;
    while (raw_h2_read_frame(fd, &f, 5000) == 0) {
        if (f.type == FRAME_HEADERS) return true;
        if (f.type != FRAME_GOAWAY || f.len < 8) continue;
        size_t n = f.len - 8 < why_len - 1 ? f.len - 8 : why_len - 1;
        memcpy(why, f.payload + 8, n);
        why[n] = '\0';
        return false;
    }
    fail_msg("%s: a new connection got neither an answer nor GOAWAY", t->name);
    return false;
}

static void test_idle_connections_use_up_the_budget(void **state) {
    (void)state;
    static char large_query[LARGE_QUERY_BYTES + 1];
    for (size_t i = 0; i < LARGE_QUERY_BYTES; i++) large_query[i] = "wind tunnel "[i % 12];
    for (int i = 0; i < 2; i++) {
        const target *t = &targets[i];
        char err[256];
        isn_grpc_client *client = isn_grpc_connect(t->h->grpc_address, 5000, err, sizeof err);
        if (!client) fail_msg("%s: connect: %s", t->name, err);
        isn_grpc_search_reply reply;
        assert_int_equal(search(client, &reply), ISN_GRPC_STATUS_OK);
        isn_grpc_search_reply_free(&reply);
        long long refused_before = metric(t, "connections_over_budget_total");

        int fds[IDLE_CONNECTIONS + MORE_CONNECTIONS], open_fds = 0;
        static uint8_t block[8192], frame[8192];
        size_t block_len = raw_h2_get_headers_indexed(block, INDEXED_HEADER_BYTES);
        size_t frame_len = raw_h2_frame(frame, FRAME_HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 1, block, block_len);
        for (; open_fds < IDLE_CONNECTIONS; open_fds++) {
            fds[open_fds] = raw_h2_connect(t->h->grpc_port, NULL, 0);
            assert_true(fds[open_fds] >= 0);
            raw_h2_send_all(fds[open_fds], frame, frame_len); /* refused connections may be gone already */
        }
        harness_sleep_ms(300);
        long long held = metric(t, "request_memory_bytes"), budget = metric(t, "request_memory_budget_bytes");
        fprintf(stderr, "%s: %d idle connections (%lld refused): %lld bytes charged of a %lld-byte budget\n", t->name,
                IDLE_CONNECTIONS, metric(t, "connections_over_budget_total") - refused_before, held, budget);
        assert_true(metric(t, "connections_over_budget_total") > refused_before);

        /* new connections, one at a time: let in while there is room, then GOAWAY, saying why */
        char why[256] = "";
        int let_in_after = 0;
        for (;;) {
            if (open_fds == IDLE_CONNECTIONS + MORE_CONNECTIONS)
                fail_msg("%s: %d more idle connections let in: none was refused", t->name, let_in_after);
            int fd = fds[open_fds++] = raw_h2_connect(t->h->grpc_port, NULL, 0);
            assert_true(fd >= 0);
            raw_h2_send_all(fd, frame, frame_len);
            if (!let_in(t, fd, why, sizeof why)) break;
            let_in_after++;
        }
        if (!strstr(why, "memory budget")) fail_msg("%s: GOAWAY says \"%s\": it should name the budget", t->name, why);
        fprintf(stderr, "%s: %d more let in one at a time, then GOAWAY; %lld bytes charged\n", t->name, let_in_after,
                metric(t, "request_memory_bytes"));

        /* a request on a connection made before: refused, naming the budget */
        assert_int_equal(search_query(client, large_query, &reply), ISN_GRPC_STATUS_RESOURCE_EXHAUSTED);
        if (!strstr(reply.message, "memory budget"))
            fail_msg("%s: refused with \"%s\": the message should name the memory budget", t->name, reply.message);
        isn_grpc_search_reply_free(&reply);

        for (int c = 0; c < open_fds; c++) close(fds[c]);
        int status = -1;
        for (int attempt = 0; attempt < 50 && status != ISN_GRPC_STATUS_OK; attempt++) {
            harness_sleep_ms(100);
            status = search_query(client, large_query, &reply);
            isn_grpc_search_reply_free(&reply);
        }
        if (status != ISN_GRPC_STATUS_OK) fail_msg("%s: still refused after the idle connections closed", t->name);
        isn_grpc_close(client);
    }
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&isnd, 500);
    harness_raise_open_files(1024);
    const char *isnd_args[] = {"--set", "server.memory_budget=1MiB", NULL};
    if (harness_start(&isnd, NULL, isnd_args) != 0) return -1;
    agg = isnd;
    agg.pid = 0;
    const char *partitions[] = {isnd.grpc_address, NULL};
    const char *agg_args[] = {"--no-hedge", "--set", "memory_budget_mib=1", NULL};
    if (harness_start_agg(&agg, partitions, agg_args) != 0) return -1;
    targets[0] = (target){.name = "isnd", .h = &isnd, .metric_prefix = "isn"};
    targets[1] = (target){.name = "isn-agg", .h = &agg, .metric_prefix = "isn_agg"};
    return 0;
}

static int teardown(void **state) {
    (void)state;
    int agg_status = harness_stop_checked(&agg);
    int isnd_status = harness_finish(&isnd, NULL, NULL, NULL);
    return agg_status == 0 && isnd_status == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_connections_use_up_the_budget),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
