/* isnd past its capacity: one worker whose every job takes 10 ms (testing.job_delay), measured on a
 * few requests one at a time, gets a burst of 200 searches with a 100 ms deadline. What it can finish in time is answered, the rest is refused
 * RESOURCE_EXHAUSTED, and the refusals that came while no device could start anything in time are
 * made at HEADERS, before the request is read or analysed (isn_shed_at_headers_total, and the
 * message says so). Once the burst is over, every request is admitted again: admission recovers
 * by itself when load drops. With the default settings, a rapid-reset flood (every stream opened
 * and reset at once) meets GOAWAY ENHANCE_YOUR_CALM after about a thousand streams, well within
 * 2,000 (a cancellation burst is bounded by a count, not by a rate that a fast flood outruns). No
 * time is asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
        isn_grpc_search_reply_free(&reply);
    }
    for (int c = 0; c < CLIENTS; c++) isn_grpc_close(clients[c]);
    assert_int_equal(harness_stop(&h), 0);
}

#define FLOOD_STREAMS 6000

/* Opens FLOOD_STREAMS streams each with a Search(k) and its reset, as fast as the socket takes them;
 * returns how many streams the server took before its GOAWAY, whose code goes to *goaway (-1: none). */
static uint32_t rapid_reset_flood(uint32_t k, int *goaway) {
    int fd = raw_h2_connect(h.grpc_port, NULL, 0);
    assert_true(fd >= 0);
    static uint8_t buf[1 << 20];
    uint32_t stream = 1;
    for (int batch = 0; batch < FLOOD_STREAMS / 100; batch++) {
        size_t n = 0;
        for (int i = 0; i < 100; i++, stream += 2) {
            n += raw_h2_search_request(buf + n, stream, "wind tunnel", k, NULL);
            uint8_t cancel[4] = {0, 0, 0, 8};
            n += raw_h2_frame(buf + n, FRAME_RST_STREAM, 0, stream, cancel, 4);
        }
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
    };
    return cmocka_run_group_tests_name("isnd_overload", tests, setup, teardown);
}
