/* isnd under bad input: random bytes, a truncated HTTP/2 preface, a protocol error after a good
 * preface, 1,000 connections opened and dropped, requests that stall halfway, oversized messages,
 * 1,000 streams on one connection, junk on the stats port. After each, the daemon keeps answering
 * other clients; after all of it, it holds no stream and its memory does not keep growing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/isnd_harness.h"
#include "grpc/server.h"
#include "grpc/client.h"

static harness h;

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define PREFACE_LEN 24

/* A plain TCP connection to the gRPC port, for bytes no client library would send. */
static int connect_raw(void) {
    int fd = harness_connect(h.grpc_port);
    assert_true(fd >= 0);
    return fd;
}

/* A new gRPC connection to the daemon under test. */
static isn_grpc_client *connect_client(void) {
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    if (!client) fail_msg("cannot connect: %s", err);
    return client;
}

/* The connection still answers a health check after what it went through; then closed. */
static void assert_healthy_then_close(isn_grpc_client *client) {
    char err[256];
    int serving;
    assert_int_equal(isn_grpc_health_check(client, "", &serving, err, sizeof err), 0);
    isn_grpc_close(client);
}

/* A fresh connection still gets Search answers. */
static void assert_still_serving(void) {
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    if (!client) fail_msg("cannot connect after abuse: %s", err);
    isn_grpc_search_reply reply;
    isn_grpc_search_request request = {.query = "wind tunnel", .k = 10, .timeout_ms = 5000};
    if (isn_grpc_search(client, &request, &reply, err, sizeof err) != 0) fail_msg("search after abuse: %s", err);
    assert_int_equal(reply.status, 0);
    assert_true(reply.num_hits > 0);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(client);
}

/* The daemon closes the connection within timeout_ms (it may send a GOAWAY first). */
static void assert_closed_by_server(int fd, int timeout_ms, const char *what) {
    char buf[4096];
    if (harness_read_until_close(fd, buf, sizeof buf, timeout_ms) < 0) fail_msg("%s: connection not closed", what);
    close(fd);
}

static void test_random_bytes(void **state) {
    (void)state;
    int fd = connect_raw();
    uint8_t junk[65536];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)harness_random(256);
    send(fd, junk, sizeof junk, MSG_NOSIGNAL);
    assert_closed_by_server(fd, 5000, "random bytes");
    assert_still_serving();
}

static void test_truncated_preface(void **state) {
    (void)state;
    int fd = connect_raw();
    assert_int_equal(send(fd, PREFACE, 10, MSG_NOSIGNAL), 10);
    int64_t start = harness_now_ms();
    assert_closed_by_server(fd, 5000, "truncated preface"); /* header_timeout is 500 ms */
    assert_true(harness_now_ms() - start >= 300);
    /* a connection that sends nothing at all is closed the same way */
    fd = harness_connect(h.grpc_port);
    assert_closed_by_server(fd, 5000, "silent connection");
    assert_still_serving();
}

static void test_protocol_error_after_preface(void **state) {
    (void)state;
    int fd = connect_raw();
    uint8_t bytes[PREFACE_LEN + 9 + 9 + 4];
    memcpy(bytes, PREFACE, PREFACE_LEN);
    const uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};                /* empty SETTINGS */
    const uint8_t data_on_stream0[13] = {0, 0, 4, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}; /* DATA on stream 0 */
    memcpy(bytes + PREFACE_LEN, settings, 9);
    memcpy(bytes + PREFACE_LEN + 9, data_on_stream0, 13);
    assert_int_equal(send(fd, bytes, sizeof bytes, MSG_NOSIGNAL), (ssize_t)sizeof bytes);
    char buf[4096];
    ssize_t n = harness_read_until_close(fd, buf, sizeof buf, 5000);
    close(fd);
    assert_true(n >= 9);
    /* somewhere in what came back is a GOAWAY frame (type 7) */
    bool goaway = false;
    for (ssize_t i = 0; i + 9 <= n;) {
        uint32_t len = (uint32_t)(uint8_t)buf[i] << 16 | (uint32_t)(uint8_t)buf[i + 1] << 8 | (uint8_t)buf[i + 2];
        if (buf[i + 3] == 7) goaway = true;
        i += 9 + (ssize_t)len;
    }
    assert_true(goaway);
    assert_still_serving();
}

static void test_thousand_connections_dropped(void **state) {
    (void)state;
    enum { N = 1000 };
    static int fds[N];
    long long accepted_before = harness_stat(&h, "accepted");
    for (int i = 0; i < N; i++) {
        fds[i] = harness_connect(h.grpc_port);
        if (fds[i] < 0) fail_msg("connect %d failed: %s", i, strerror(errno));
        if (i % 2 == 0) send(fds[i], PREFACE, PREFACE_LEN, MSG_NOSIGNAL);
        if (i % 3 == 0) send(fds[i], PREFACE, 7, MSG_NOSIGNAL);
    }
    assert_still_serving(); /* while all of them are open */
    for (int i = 0; i < N; i++) {
        if (i % 4 == 0) { /* abortive close: RST instead of FIN */
            struct linger linger = {1, 0};
            setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &linger, sizeof linger);
        }
        close(fds[i]);
    }
    int64_t deadline = harness_now_ms() + 10000;
    long long open;
    while ((open = harness_stat(&h, "grpc")) > 0 && harness_now_ms() < deadline) harness_sleep_ms(20);
    assert_int_equal(open, 0);
    assert_true(harness_stat(&h, "accepted") - accepted_before >= N);
    assert_still_serving();
}

static isn_grpc_result call_and_wait(isn_grpc_client *client, const isn_grpc_request *request, int timeout_ms) {
    char err[256];
    isn_grpc_client_call *call = isn_grpc_start(client, request, err, sizeof err);
    if (!call) fail_msg("start: %s", err);
    if (isn_grpc_wait(client, call, timeout_ms, err, sizeof err) != 0) fail_msg("wait: %s", err);
    isn_grpc_result result = *isn_grpc_client_call_result(call);
    result.message = NULL;
    isn_grpc_client_call_free(call);
    return result;
}

static void test_half_request_then_stall(void **state) {
    (void)state;
    char err[256];
    isn_grpc_client *staller = connect_client();
    /* a prefix announcing 100 bytes, 10 of them, then nothing: answered DEADLINE_EXCEEDED at header_timeout */
    uint8_t half[15] = {0, 0, 0, 0, 100};
    isn_grpc_client_call *stalled = isn_grpc_start(
        staller, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = half, .body_len = 15, .leave_open = true},
        err, sizeof err);
    /* headers only */
    isn_grpc_client_call *headers_only = isn_grpc_start(
        staller, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .leave_open = true}, err, sizeof err);
    assert_non_null(stalled);
    assert_non_null(headers_only);
    assert_int_equal(isn_grpc_poll(staller, 50, err, sizeof err), 0);
    assert_still_serving(); /* others are served meanwhile */
    assert_int_equal(isn_grpc_wait(staller, stalled, 5000, err, sizeof err), 0);
    assert_int_equal(isn_grpc_wait(staller, headers_only, 5000, err, sizeof err), 0);
    assert_int_equal(isn_grpc_client_call_result(stalled)->grpc_status, 4);
    assert_non_null(strstr(isn_grpc_client_call_result(stalled)->grpc_message, "header_timeout"));
    assert_int_equal(isn_grpc_client_call_result(headers_only)->grpc_status, 4);
    isn_grpc_client_call_free(stalled);
    isn_grpc_client_call_free(headers_only);
    /* the same connection still works */
    assert_healthy_then_close(staller);
}

static void test_oversized_and_invalid_messages(void **state) {
    (void)state;
    isn_grpc_client *client = connect_client();
    size_t big = 5u << 20;
    uint8_t *body = malloc(big);
    memset(body, 0x41, big);
    int64_t start = harness_now_ms();
    isn_grpc_result r = call_and_wait(
        client, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = body, .body_len = big, .frame = true},
        10000);
    assert_int_equal(r.grpc_status, 8);
    assert_true(harness_now_ms() - start < 5000);
    /* random bytes as a message: INVALID_ARGUMENT, never a crash */
    for (int round = 0; round < 200; round++) {
        size_t len = harness_random(300);
        for (size_t i = 0; i < len; i++) body[i] = (uint8_t)harness_random(256);
        r = call_and_wait(client,
                          &(isn_grpc_request){.path = round % 2 ? "/isn.v1.Search/Search" : "/isn.v1.Search/Info",
                                              .body = body, .body_len = len, .frame = true},
                          10000);
        assert_true(r.grpc_status >= 0);
        if (r.grpc_status != 0 && r.grpc_status != 3) fail_msg("random message: status %d (%s)", r.grpc_status, r.grpc_message);
    }
    free(body);
    assert_healthy_then_close(client);
}

static void test_thousand_streams_on_one_connection(void **state) {
    (void)state;
    enum { N = 1000 };
    char err[256];
    isn_grpc_client *client = connect_client();
    static isn_grpc_client_call *calls[N];
    static const char *const queries[] = {"wind", "tunnel flow", "search engine", "t3 t4", "running"};
    for (int i = 0; i < N; i++) {
        calls[i] = isn_grpc_search_start(client, &(isn_grpc_search_request){.query = queries[i % 5], .k = 5}, err, sizeof err);
        assert_non_null(calls[i]);
    }
    int64_t deadline = harness_now_ms() + 30000;
    for (int i = 0; i < N; i++) {
        while (!isn_grpc_client_call_done(calls[i])) {
            if (harness_now_ms() > deadline) fail_msg("stream %d not answered", i);
            assert_int_equal(isn_grpc_poll(client, 100, err, sizeof err), 0);
        }
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
        if (reply.status != 0) fail_msg("stream %d: %d %s", i, reply.status, reply.message);
        isn_grpc_search_reply_free(&reply);
    }
    isn_grpc_close(client);
}

static void test_stats_port_junk(void **state) {
    (void)state;
    int fd = harness_connect(h.stats_port);
    const char *junk = "\x16\x03\x01\x02\x01garbage\r\n\r\n";
    send(fd, junk, strlen(junk), MSG_NOSIGNAL);
    char buf[4096];
    ssize_t n = harness_read_until_close(fd, buf, sizeof buf - 1, 5000);
    close(fd);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "400 Bad Request"));
    /* a request head that never ends */
    fd = harness_connect(h.stats_port);
    char big[9000];
    memset(big, 'a', sizeof big);
    memcpy(big, "GET /", 5);
    send(fd, big, sizeof big, MSG_NOSIGNAL);
    n = harness_read_until_close(fd, buf, sizeof buf - 1, 5000);
    close(fd);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "431"));
    /* a POST with a body */
    fd = harness_connect(h.stats_port);
    const char *post = "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
    send(fd, post, strlen(post), MSG_NOSIGNAL);
    n = harness_read_until_close(fd, buf, sizeof buf - 1, 5000);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    assert_non_null(strstr(buf, "413"));
    char page[256];
    assert_int_equal(harness_http_get(&h, "/healthz", page, sizeof page), 200);
}

/* The whole battery again must not grow the heap: what the first round allocated is reused or
 * freed. (Heap bytes from the allocator's statistics; resident memory lags behind frees.) */
static void test_memory_returns_to_baseline(void **state) {
    (void)state;
    long long heap_first = harness_stat(&h, "heap_allocated_bytes");
    long long rss_first = harness_stat(&h, "resident_memory_bytes");
    for (int round = 0; round < 2; round++) {
        test_random_bytes(NULL);
        test_protocol_error_after_preface(NULL);
        test_thousand_connections_dropped(NULL);
        test_half_request_then_stall(NULL);
        test_oversized_and_invalid_messages(NULL);
        test_thousand_streams_on_one_connection(NULL);
    }
    int64_t deadline = harness_now_ms() + 5000;
    while (harness_stat(&h, "open_streams") != 0 && harness_now_ms() < deadline) harness_sleep_ms(20);
    assert_int_equal(harness_stat(&h, "open_streams"), 0);
    assert_int_equal(harness_stat(&h, "inflight"), 0);
    long long heap_more = harness_stat(&h, "heap_allocated_bytes");
    long long rss_more = harness_stat(&h, "resident_memory_bytes");
    fprintf(stderr, "heap in use: %lld KiB after one round of abuse, %lld KiB after two more (resident %lld -> %lld KiB)\n",
            heap_first / 1024, heap_more / 1024, rss_first / 1024, rss_more / 1024);
    assert_true(heap_first > 0 && heap_more > 0);
    assert_true(heap_more <= heap_first + 1024 * 1024);
}

static int teardown(void **state) {
    (void)state;
    return harness_finish(&h, NULL, NULL, NULL);
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, 2000);
    harness_raise_open_files(4096);
    /* Queries are analysed on the workers: bad ones are refused through the completion path. */
    const char *extra[] = {"--set", "server.header_timeout=500ms", "--set", "server.idle_timeout=30s", "--set",
                           "scheduler.analysis_min_workers=0", NULL};
    return harness_start(&h, NULL, extra);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_truncated_preface),
        cmocka_unit_test(test_protocol_error_after_preface),
        cmocka_unit_test(test_thousand_connections_dropped),
        cmocka_unit_test(test_half_request_then_stall),
        cmocka_unit_test(test_oversized_and_invalid_messages),
        cmocka_unit_test(test_thousand_streams_on_one_connection),
        cmocka_unit_test(test_stats_port_junk),
        cmocka_unit_test(test_memory_returns_to_baseline),
    };
    return cmocka_run_group_tests_name("isnd_abuse", tests, setup, teardown);
}
