/* isnd past its capacity: one worker whose every job takes 10 ms (testing.job_delay), measured on a
 * few requests one at a time, gets a burst of 200 searches with a 100 ms deadline. What it can finish in time is answered, the rest is refused
 * RESOURCE_EXHAUSTED, and the refusals that came while no device could start anything in time are
 * made at HEADERS, before the request is read or analysed (isn_shed_at_headers_total, and the
 * message says so). Once the burst is over, every request is admitted again: admission recovers
 * by itself when load drops. With the default settings, a rapid-reset flood (every stream opened
 * and reset at once) meets GOAWAY ENHANCE_YOUR_CALM after about a thousand streams, well within
 * 2,000 (a cancellation burst is bounded by a count, not by a rate that a fast flood outruns), and the
 * cut connection is held unread before its GOAWAY (server.reset_hold), a bounded number per loop. No
 * time is asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <poll.h>
#include <signal.h>

#include <cmocka.h>

#include <unistd.h>

#include "grpc/client.h"
#include "tests/support/isnd_harness.h"
#include "tests/support/raw_http2.h"

#define CLIENTS 4
#define BURST 200

static harness h;

static const char *const OVERLOAD_ARGS[] = {"--workers", "1", "--set", "testing.job_delay=10ms", NULL};

static void poll_all(isn_grpc_client **clients) {
    char err[256];
    for (int c = 0; c < CLIENTS; c++) isn_grpc_poll(clients[c], 1, err, sizeof err);
}

static void test_burst_is_refused_early_and_admission_recovers(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, OVERLOAD_ARGS), 0);
    isn_grpc_client *clients[CLIENTS];
    char err[256];
    for (int c = 0; c < CLIENTS; c++)
        if (!(clients[c] = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err))) fail_msg("connect: %s", err);
    isn_grpc_search_request request = {.query = "wind tunnel", .k = 10, .timeout_ms = 100};
    /* One at a time first: the node measures what a job takes (10 ms, which no cost model predicts). */
    for (int i = 0; i < 30; i++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(clients[0], &request, &reply, err, sizeof err), 0);
        assert_int_equal(reply.status, 0);
        isn_grpc_search_reply_free(&reply);
    }
    static isn_grpc_client_call *calls[BURST];
    for (int i = 0; i < BURST; i++)
        if (!(calls[i] = isn_grpc_search_start(clients[i % CLIENTS], &request, err, sizeof err)))
            fail_msg("start: %s", err);
    int ok = 0, exhausted = 0, unread = 0, other = 0;
    int64_t give_up = harness_now_ms() + 60000;
    for (int i = 0; i < BURST; i++) {
        while (!isn_grpc_client_call_done(calls[i])) {
            if (harness_now_ms() > give_up) fail_msg("replies still missing after 60 s");
            poll_all(clients);
        }
        if (i % 2) { /* as the load generator reads a reply: its status and completeness, not its hits */
            int status;
            bool complete;
            assert_int_equal(isn_grpc_search_finish_status(calls[i], &status, &complete), 0);
            if (status != 0 && complete) fail_msg("a refusal (status %d) read as a complete answer", status);
            ok += status == 0;
            exhausted += status == 8;
            if (status != 0 && status != 8 && status != 4) other++;
            continue;
        }
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
        if (reply.status == 0) ok++;
        else if (reply.status == 8) {
            exhausted++;
            if (strstr(reply.message, "refused unread")) unread++;
        } else if (reply.status != 4) { /* DEADLINE_EXCEEDED: admitted, then late behind the delay */
            other++;
            print_message("unexpected status %d: %s\n", reply.status, reply.message);
        }
        isn_grpc_search_reply_free(&reply);
    }
    print_message("burst: %d ok, %d refused (%d at HEADERS), %d other\n", ok, exhausted, unread, other);
    assert_int_equal(other, 0);
    assert_true(ok >= 1);
    assert_true(exhausted >= BURST / 2);
    assert_true(unread >= 1);
    assert_true(harness_metric(&h, "isn_shed_at_headers_total") >= unread);
    /* every refusal's time in the node is observed */
    assert_true(harness_metric(&h, "isn_shed_duration_seconds_count") >= exhausted);

    /* The burst is over: one request at a time is admitted again, every one. */
    harness_sleep_ms(300);
    for (int i = 0; i < 5; i++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(clients[0], &request, &reply, err, sizeof err), 0);
        if (reply.status != 0) fail_msg("after the burst: status %d: %s", reply.status, reply.message);
        assert_true(reply.complete);
        isn_grpc_search_reply_free(&reply);
        /* the load generator's read of the same answer */
        isn_grpc_client_call *call = isn_grpc_search_start(clients[0], &request, err, sizeof err);
        if (!call) fail_msg("start: %s", err);
        while (!isn_grpc_client_call_done(call)) {
            if (harness_now_ms() > give_up) fail_msg("reply still missing after 60 s");
            isn_grpc_poll(clients[0], 1, err, sizeof err);
        }
        int status;
        bool complete;
        assert_int_equal(isn_grpc_search_finish_status(call, &status, &complete), 0);
        if (status != 0 || !complete) fail_msg("after the burst, read by status: status %d, complete %d", status, complete);
    }
    for (int c = 0; c < CLIENTS; c++) isn_grpc_close(clients[c]);
    assert_int_equal(harness_stop(&h), 0);
}

#define FLOOD_STREAMS 6000

/* `count` streams from *stream on, each a whole Search(k) reset at once (CANCEL), into out; the bytes
 * written, and *stream advanced past them. */
static size_t put_reset_streams(uint8_t *out, uint32_t *stream, int count, uint32_t k) {
    size_t n = 0;
    for (int i = 0; i < count; i++, *stream += 2) {
        n += raw_h2_search_request(out + n, *stream, "wind tunnel", k, NULL);
        uint8_t cancel[4] = {0, 0, 0, 8};
        n += raw_h2_frame(out + n, FRAME_RST_STREAM, 0, *stream, cancel, 4);
    }
    return n;
}

/* Opens FLOOD_STREAMS streams each with a Search(k) and its reset, as fast as the socket takes them;
 * returns how many streams the server took before its GOAWAY, whose code goes to *goaway (-1: none). */
static uint32_t rapid_reset_flood(uint32_t k, int *goaway) {
    int fd = raw_h2_connect(h.grpc_port, NULL, 0);
    assert_true(fd >= 0);
    static uint8_t buf[1 << 20];
    uint32_t stream = 1;
    for (int batch = 0; batch < FLOOD_STREAMS / 100; batch++) {
        size_t n = put_reset_streams(buf, &stream, 100, k);
        if (!raw_h2_send_all(fd, buf, n)) break; /* closed already */
    }
    static raw_h2_frame_in f;
    *goaway = -1;
    uint32_t last_stream = 0;
    int64_t give_up = harness_now_ms() + 10000;
    while (harness_now_ms() < give_up) {
        int rc = raw_h2_read_frame(fd, &f, (int)(give_up - harness_now_ms()));
        if (rc < 0) break;
        if (f.type == FRAME_GOAWAY && f.len >= 8) {
            last_stream = ((uint32_t)f.payload[0] << 24 | (uint32_t)f.payload[1] << 16 | (uint32_t)f.payload[2] << 8 |
                           f.payload[3]) & 0x7fffffffu;
            *goaway = (int)((uint32_t)f.payload[4] << 24 | (uint32_t)f.payload[5] << 16 | (uint32_t)f.payload[6] << 8 |
                            f.payload[7]);
        }
    }
    close(fd);
    return (last_stream + 1) / 2;
}

/* The flood meets GOAWAY once it has reset about the burst's worth of streams. The bucket also refills
 * with time (max_early_resets_per_second), and a loaded machine takes longer over the flood, so at the
 * default rate where the cut comes depends on the machine's speed. The tests set 100 per second (a burst
 * of 200): what they check is the count. */
static const char *const slow_refill[] = {"--set", "server.max_early_resets_per_second=100", NULL};

static void test_rapid_reset_cut_within_the_burst(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, slow_refill), 0);
    int goaway;
    uint32_t streams_taken = rapid_reset_flood(10, &goaway);
    print_message("rapid reset: GOAWAY %d after %u of %d streams\n", goaway, streams_taken, FLOOD_STREAMS);
    assert_int_equal(goaway, 11); /* ENHANCE_YOUR_CALM */
    assert_true(streams_taken <= 1000);
    assert_int_equal(harness_stop(&h), 0);
}

/* Streams refused at once (k above the server's limit: INVALID_ARGUMENT, as an overloaded node's
 * RESOURCE_EXHAUSTED at HEADERS) and reset: a refusal is no answer, so their resets count. Counted as
 * answered, they let a flood through for as long as the node refused its requests. */
static void test_rapid_reset_of_refused_streams_is_cut(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, slow_refill), 0);
    int goaway;
    uint32_t streams_taken = rapid_reset_flood(1000000, &goaway);
    print_message("rapid reset of refused streams: GOAWAY %d after %u of %d streams\n", goaway, streams_taken,
                  FLOOD_STREAMS);
    assert_int_equal(goaway, 11);
    assert_true(streams_taken <= 1000);
    assert_int_equal(harness_stop(&h), 0);
}

/* A cut flood is held (server.reset_hold): nothing more is read from it or written to it, so its client
 * stalls on a full socket instead of reconnecting at once. The hold here (60 s) cannot end during the
 * test; one loop, so that its limit of held connections (32) is the node's. */
#define HELD_AT_MOST 32 /* ISN_GRPC_MAX_HELD_CONNECTIONS */
#define HOLD_FLOODS (HELD_AT_MOST + 8)
static const char *const long_hold[] = {"--set", "server.max_early_resets_per_second=100", "--set",
                                        "server.reset_hold=60s", "--set", "server.loops=1", "--workers", "1", NULL};

/* A connection that opens 300 streams and resets each (past the burst of 200, or of 16 for an address cut
 * lately), in one write the socket takes whole: the writer does not stall when the node stops reading. */
static int flood_once(void) {
    int fd = raw_h2_connect(h.grpc_port, NULL, 0);
    assert_true(fd >= 0);
    static uint8_t buf[1 << 17];
    uint32_t stream = 1;
    size_t n = put_reset_streams(buf, &stream, 300, 10);
    assert_true(raw_h2_send_all(fd, buf, n));
    return fd;
}

/* Reads the connections together for up to timeout_ms: codes[i] becomes the first GOAWAY's error code
 * of fds[i], -1 if it closed without one, and stays -2 while nothing ended it. The GOAWAYs seen. */
static int goaways_within(const int *fds, int *codes, int n, int timeout_ms) {
    static raw_h2_frame_in f;
    struct pollfd polled[HOLD_FLOODS];
    int seen = 0;
    int64_t deadline = harness_now_ms() + timeout_ms;
    for (;;) {
        int open = 0;
        for (int i = 0; i < n; i++)
            if (codes[i] == -2) polled[open++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        int wait = (int)(deadline - harness_now_ms());
        if (!open || wait <= 0 || poll(polled, (nfds_t)open, wait) <= 0) return seen;
        for (int p = 0; p < open; p++) {
            if (!(polled[p].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int i = 0;
            while (fds[i] != polled[p].fd) i++;
            int rc = raw_h2_read_frame(fds[i], &f, 1000);
            if (rc == -1) codes[i] = -1;
            if (rc == 0 && f.type == FRAME_GOAWAY && f.len >= 8) {
                codes[i] = (int)((uint32_t)f.payload[4] << 24 | (uint32_t)f.payload[5] << 16 |
                                 (uint32_t)f.payload[6] << 8 | f.payload[7]);
                seen++;
            }
        }
    }
}

static void test_rapid_reset_cut_is_held(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, long_hold), 0);
    int fds[HOLD_FLOODS], codes[HOLD_FLOODS];
    for (int i = 0; i < HOLD_FLOODS; i++) fds[i] = flood_once(), codes[i] = -2;
    int64_t give_up = harness_now_ms() + 10000;
    while (harness_metric(&h, "isn_reset_floods_total") < HOLD_FLOODS && harness_now_ms() < give_up)
        harness_sleep_ms(20);
    assert_int_equal(harness_metric(&h, "isn_reset_floods_total"), HOLD_FLOODS);
    /* Every connection is cut; the loop's first 32 are held, the rest got GOAWAY at once. */
    assert_int_equal(harness_metric(&h, "isn_reset_floods_held_total"), HELD_AT_MOST);
    int seen = goaways_within(fds, codes, HOLD_FLOODS, 2000);
    print_message("rapid reset held: %d of %d cut connections got their GOAWAY at once\n", seen, HOLD_FLOODS);
    assert_int_equal(seen, HOLD_FLOODS - HELD_AT_MOST);
    for (int i = 0; i < HOLD_FLOODS; i++)
        if (codes[i] != -2) assert_int_equal(codes[i], 11); /* ENHANCE_YOUR_CALM */
    /* A drain ends the hold: each held connection gets its GOAWAY now, not when the hold ends. */
    kill(h.pid, SIGTERM);
    seen += goaways_within(fds, codes, HOLD_FLOODS, 10000);
    for (int i = 0; i < HOLD_FLOODS; i++) {
        assert_int_equal(codes[i], 11);
        close(fds[i]);
    }
    assert_int_equal(seen, HOLD_FLOODS);
    assert_int_equal(harness_wait_exit(&h, 30000), 0);
}

/* A query log of one query, "wind tunnel", for the load generator. */
static const isn_query_log *wind_tunnel_log(void) {
    static char id[] = "1", text[] = "wind tunnel";
    static isn_logged_query query = {.id = id, .text = text, .line = 1};
    static isn_query_log log = {.queries = &query, .count = 1};
    return &log;
}

/* One open-loop run of the load generator at `rate` against the started node. */
static bench_stats load_once(double rate, double client_throttle) {
    isn_load_config config = {.target = h.grpc_address, .queries = wind_tunnel_log(), .k = 10, .deadline_ms = 100, .connections = 2,
                              .max_inflight = 20000, .threads = 1, .duration_s = 1.0, .warmup_s = 0.5, .seed = 7,
                              .client_throttle = client_throttle};
    char err[256];
    isn_load *load = isn_load_new(&config, err, sizeof err);
    if (!load) fail_msg("isn_load_new: %s", err);
    bench_stats stats;
    assert_int_equal(isn_load_run(load, rate, 0, &stats), 0);
    isn_load_free(load);
    return stats;
}

/* Ten times what the node can do (one worker, 10 ms a job): a plain client has the node refuse the excess;
 * one that throttles itself (isn-bench --client-throttle) refuses most of it before sending, and the node
 * then refuses less than the client did. Counts, not times. */
static void test_a_throttling_client_refuses_the_excess_itself(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, OVERLOAD_ARGS), 0);
    bench_stats plain = load_once(1000, 0), throttled = load_once(1000, 1.1);
    print_message("plain: %llu asked, %llu shed by the node, %llu not sent; throttled: %llu asked, %llu refused by the "
                  "client, %llu shed by the node\n", (unsigned long long)plain.scheduled, (unsigned long long)plain.shed,
                  (unsigned long long)plain.not_sent, (unsigned long long)throttled.scheduled,
                  (unsigned long long)throttled.client_refused, (unsigned long long)throttled.shed);
    assert_int_equal(plain.client_refused, 0);
    assert_true(plain.shed + plain.not_sent > plain.scheduled / 2);
    /* each refusal's latency also from its sending, which follows its scheduled time: never the longer */
    assert_true(plain.num_shed_from_send > 0);
    assert_int_equal(plain.num_shed_from_send, plain.num_shed_latencies);
    uint64_t from_schedule = 0, from_send = 0;
    for (size_t i = 0; i < plain.num_shed_latencies; i++) from_schedule += plain.shed_latency_us[i];
    for (size_t i = 0; i < plain.num_shed_from_send; i++) from_send += plain.shed_from_send_us[i];
    assert_true(from_send <= from_schedule);
    assert_true(throttled.client_refused > throttled.scheduled / 2);
    assert_true(throttled.shed < throttled.client_refused);
    assert_true(throttled.ok > 0);
    bench_stats_free(&plain);
    bench_stats_free(&throttled);
    assert_int_equal(harness_stop(&h), 0);
}

/* isn-bench --sustained --searches 2: two searches whose probes take turns, a JSON line each. */
static void test_searches_take_turns(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, OVERLOAD_ARGS), 0);
    isn_load_config config = {.target = h.grpc_address, .queries = wind_tunnel_log(), .k = 10, .deadline_ms = 200, .connections = 1,
                              .max_inflight = 1000, .threads = 1, .duration_s = 0.3, .warmup_s = 0.1, .seed = 3};
    char err[256];
    isn_load *load = isn_load_new(&config, err, sizeof err);
    if (!load) fail_msg("isn_load_new: %s", err);
    isn_load_search search = {.max_rate = 20, .resolution = 0.5, .max_misses = 0.5, .repeats = 1, .searches = 2,
                              .label = "turns"};
    char *out_text = NULL, *table_text = NULL;
    size_t out_len = 0, table_len = 0;
    FILE *out = open_memstream(&out_text, &out_len), *table = open_memstream(&table_text, &table_len);
    assert_int_equal(isn_load_sustained(load, &search, out, table), 0);
    fclose(out);
    fclose(table);
    isn_load_free(load);
    char *second = strchr(out_text, '\n');
    assert_non_null(second);
    assert_non_null(strstr(out_text, "\"search\":1,\"searches\":2"));
    assert_non_null(strstr(second, "\"search\":2,\"searches\":2"));
    int lines = 0;
    for (const char *c = out_text; *c; c++) lines += *c == '\n';
    assert_int_equal(lines, 2);
    /* the table names whose turn each probe was: search 1, then 2 */
    char *first_turn = strstr(table_text, "search 1 of 2"), *second_turn = strstr(table_text, "search 2 of 2");
    assert_non_null(first_turn);
    assert_non_null(second_turn);
    assert_true(first_turn < second_turn);
    free(out_text);
    free(table_text);
    assert_int_equal(harness_stop(&h), 0);
}

/* The node stopped while its loop waited in its poll (SIGSTOP, as a VM's host taking the CPUs): nothing
 * it reads tells of the stop, but while Search requests come its polls time out within 2 ms, and one
 * that blocks 60 ms tells the scheduler that the node resumed, counted as a stall seen. The request sent
 * into the stop is answered after it. */
static void test_a_stall_of_the_node_is_seen_by_its_loop(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, NULL), 0);
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    if (!client) fail_msg("connect: %s", err);
    assert_int_equal(harness_metric(&h, "isn_scheduler_stalls_seen_total"), 0);
    isn_grpc_search_request request = {.query = "wind tunnel", .k = 10, .timeout_ms = 1000};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    isn_grpc_search_reply_free(&reply);
    harness_sleep_ms(20); /* the loop back in its poll: stopped in an iteration, it would count the stop as work */
    assert_int_equal(kill(h.pid, SIGSTOP), 0);
    isn_grpc_client_call *call = isn_grpc_search_start(client, &request, err, sizeof err);
    if (!call) fail_msg("start: %s", err);
    harness_sleep_ms(60);
    assert_int_equal(kill(h.pid, SIGCONT), 0);
    for (int64_t give_up = harness_now_ms() + 5000; !isn_grpc_client_call_done(call) && harness_now_ms() < give_up;)
        if (isn_grpc_poll(client, 100, err, sizeof err) < 0) fail_msg("poll: %s", err);
    assert_int_equal(isn_grpc_search_finish(call, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    isn_grpc_search_reply_free(&reply);
    assert_true(harness_metric(&h, "isn_scheduler_stalls_seen_total") >= 1);
    isn_grpc_close(client);
    assert_int_equal(harness_stop(&h), 0);
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, 1000);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    harness_cleanup(&h);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_is_refused_early_and_admission_recovers),
        cmocka_unit_test(test_rapid_reset_cut_within_the_burst),
        cmocka_unit_test(test_rapid_reset_of_refused_streams_is_cut),
        cmocka_unit_test(test_rapid_reset_cut_is_held),
        cmocka_unit_test(test_a_throttling_client_refuses_the_excess_itself),
        cmocka_unit_test(test_searches_take_turns),
        cmocka_unit_test(test_a_stall_of_the_node_is_seen_by_its_loop),
    };
    return cmocka_run_group_tests_name("isnd_overload", tests, setup, teardown);
}
