/* isnd's lifecycle: --check-config, SIGTERM with 200 requests in flight (none lost, exit 0),
 * the drain time limit, deadlines (grpc-timeout and the request's own field), shedding when the
 * queue is full, and SIGHUP reloads (applied, or refused for keys that need a restart). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include <cmocka.h>

#include "proto/isn.pb-c.h"
#include "tests/support/files.h"
#include "tests/support/isnd_harness.h"
#include "grpc/client.h"

static harness h;

static int run_isnd(const char *args, char *output, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/bin/isnd %.3000s 2>&1", h.build_dir, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(output, 1, cap - 1, p);
    output[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_check_config(void **state) {
    (void)state;
    char path[1024], text[2048], args[3000], out[8192];
    snprintf(path, sizeof path, "%s/good.conf", h.work_dir);
    snprintf(text, sizeof text, "[server]\nlisten = 127.0.0.1:0\n[index]\npath = %s\n[search]\nworkers = 2\n", h.index_dir);
    assert_int_equal(support_write_text(path, text), 0);
    snprintf(args, sizeof args, "--config %s --check-config", path);
    assert_int_equal(run_isnd(args, out, sizeof out), 0);
    assert_non_null(strstr(out, "configuration OK"));
    /* the example file with an index given on the command line */
    snprintf(args, sizeof args, "--config conf/isnd.conf --index %s --check-config", h.index_dir);
    assert_int_equal(run_isnd(args, out, sizeof out), 0);

    snprintf(path, sizeof path, "%s/bad.conf", h.work_dir);
    assert_int_equal(support_write_text(path, "[server]\nlisten = 127.0.0.1:0\nmax_connection = 5\n[search]\nmax_k = lots\n"), 0);
    snprintf(args, sizeof args, "--config %s --check-config", path);
    assert_int_equal(run_isnd(args, out, sizeof out), 2);
    char expect[1200];
    snprintf(expect, sizeof expect, "%s:3: unknown key \"max_connection\"", path);
    assert_non_null(strstr(out, expect));
    snprintf(expect, sizeof expect, "%s:5: search.max_k", path);
    assert_non_null(strstr(out, expect));
    assert_non_null(strstr(out, "2 problems"));

    snprintf(args, sizeof args, "--index %s/nowhere --check-config", h.work_dir);
    assert_int_equal(run_isnd(args, out, sizeof out), 2);
    assert_non_null(strstr(out, "no index.isn there"));
    assert_int_equal(run_isnd("--check-config", out, sizeof out), 2);
    assert_non_null(strstr(out, "--index"));
    assert_int_equal(run_isnd("--workers many --index /x", out, sizeof out), 2);
    assert_non_null(strstr(out, "search.workers"));
    assert_int_equal(run_isnd("--print-config --set log.level=debug", out, sizeof out), 0);
    assert_non_null(strstr(out, "[log]\nlevel = debug\n"));
}

/* ------------------------------------------------------------------ drain */

typedef struct {
    isn_grpc_client *clients[4];
    isn_grpc_client_call *calls[400];
    int num_calls;
} load;

static void start_load(load *l, int n, uint32_t timeout_ms) {
    char err[256];
    memset(l, 0, sizeof *l);
    for (int c = 0; c < 4; c++) {
        l->clients[c] = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
        if (!l->clients[c]) fail_msg("connect: %s", err);
    }
    static const char *const queries[] = {"wind tunnel", "search engine", "t7 flow", "running connection"};
    for (int i = 0; i < n; i++) {
        isn_grpc_search_request request = {.query = queries[i % 4], .k = 10, .timeout_ms = timeout_ms};
        l->calls[i] = isn_grpc_search_start(l->clients[i % 4], &request, err, sizeof err);
        if (!l->calls[i]) fail_msg("start: %s", err);
    }
    l->num_calls = n;
}

static void poll_load(load *l) {
    char err[256];
    for (int c = 0; c < 4; c++) isn_grpc_poll(l->clients[c], 0, err, sizeof err);
}

static bool load_done(const load *l) {
    for (int i = 0; i < l->num_calls; i++)
        if (!isn_grpc_client_call_done(l->calls[i])) return false;
    return true;
}

/* Collects every reply: counts by status; fails on transport errors. */
static void finish_load(load *l, int *by_status) {
    char err[256];
    int64_t deadline = harness_now_ms() + 30000;
    while (!load_done(l)) {
        if (harness_now_ms() > deadline) fail_msg("replies still missing after 30 s");
        poll_load(l);
        harness_sleep_ms(1);
    }
    for (int i = 0; i < l->num_calls; i++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(l->calls[i], &reply, err, sizeof err), 0);
        if (reply.status < 0 || reply.status > 16) fail_msg("call %d: no gRPC status: %s", i, reply.message);
        by_status[reply.status]++;
        if (reply.status == 0) assert_true(reply.num_hits > 0);
        isn_grpc_search_reply_free(&reply);
    }
    for (int c = 0; c < 4; c++) isn_grpc_close(l->clients[c]);
}

/* Every one of n requests has reached the server: open there, or answered already (on a slow build
 * the first ones finish before the last ones arrive); some are still open. */
static void wait_for_open_streams(load *l, long long n) {
    int64_t deadline = harness_now_ms() + 10000;
    long long open = 0, answered = 0;
    while ((open = harness_stat(&h, "open_streams")) +
               (answered = harness_metric(&h, "isn_requests_total{method=\"isn.v1.Search/Search\",code=\"OK\"}")) <
           n) {
        if (harness_now_ms() > deadline)
            fail_msg("only %lld of %lld requests reached the server (%lld answered)", open + answered, n, answered);
        poll_load(l);
        harness_sleep_ms(2);
    }
    assert_true(open > 0);
}

static void test_drain_loses_nothing(void **state) {
    (void)state;
    const char *extra[] = {"--set", "testing.job_delay=10ms", NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    load l;
    start_load(&l, 200, 0);
    wait_for_open_streams(&l, 200);
    kill(h.pid, SIGTERM);
    /* draining: not ready, no new connections, the in-flight ones are answered */
    char page[256];
    int64_t deadline = harness_now_ms() + 5000;
    int ready_status = 0;
    while ((ready_status = harness_http_get(&h, "/readyz", page, sizeof page)) == 200 && harness_now_ms() < deadline) {
        poll_load(&l);
        harness_sleep_ms(1);
    }
    assert_int_equal(ready_status, 503);
    assert_int_equal(harness_connect(h.grpc_port), -1);
    int by_status[17] = {0};
    finish_load(&l, by_status);
    assert_int_equal(by_status[0], 200);
    assert_int_equal(harness_wait_exit(&h, 10000), 0);
    assert_true(harness_log_has(&h, "every request answered"));
}

static void test_drain_time_limit(void **state) {
    (void)state;
    const char *extra[] = {"--set", "testing.job_delay=50ms", "--set", "server.drain_timeout=200ms", "--workers", "1",
                           NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    load l;
    start_load(&l, 40, 0);
    wait_for_open_streams(&l, 40);
    kill(h.pid, SIGTERM);
    int by_status[17] = {0};
    finish_load(&l, by_status);
    /* what ran finished; what was still queued when time ran out was answered UNAVAILABLE */
    assert_true(by_status[0] >= 1);
    assert_true(by_status[14] >= 1);
    assert_int_equal(by_status[0] + by_status[14], 40);
    assert_int_equal(harness_wait_exit(&h, 10000), 0);
    assert_true(harness_log_has(&h, "drain_timeout (200 ms) reached"));
}

/* ------------------------------------------------------------------ deadlines and overload */

static void test_deadlines(void **state) {
    (void)state;
    const char *extra[] = {"--set", "testing.job_delay=50ms", "--workers", "1", NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    load l;
    start_load(&l, 8, 30); /* grpc-timeout 30 ms; each job takes 50 ms, one at a time */
    int by_status[17] = {0};
    finish_load(&l, by_status);
    /* the queued ones are not worked on: they expire before a worker takes them, or admission, having measured a
     * job, refuses them at once as unable to finish in time (a busy CI machine once saw fewer than six expire) */
    if (by_status[4] + by_status[8] < 6 || by_status[0] + by_status[4] + by_status[8] != 8)
        fail_msg("OK %d, DEADLINE_EXCEEDED %d, RESOURCE_EXHAUSTED %d, UNAVAILABLE %d of 8", by_status[0], by_status[4],
                 by_status[8], by_status[14]);

    /* the request's own timeout_ms, no header */
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    isn_grpc_client_call *calls[6];
    for (int i = 0; i < 6; i++) {
        Isn__V1__SearchRequest request = ISN__V1__SEARCH_REQUEST__INIT;
        request.query = "wind";
        request.timeout_ms = 30;
        uint8_t body[64];
        size_t len = isn__v1__search_request__pack(&request, body);
        calls[i] = isn_grpc_start(client, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = body,
                                                              .body_len = len, .frame = true},
                                  err, sizeof err);
        assert_non_null(calls[i]);
    }
    int expired = 0;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(isn_grpc_wait(client, calls[i], 10000, err, sizeof err), 0);
        int status = isn_grpc_client_call_result(calls[i])->grpc_status;
        assert_true(status == 0 || status == 4 || status == 8);
        expired += status == 4 || status == 8;
        isn_grpc_client_call_free(calls[i]);
    }
    assert_true(expired >= 4);
    isn_grpc_close(client);
    assert_int_equal(harness_stop(&h), 0);
}

/* A reply written after its request's deadline is counted by the device that searched, and the time
 * from the job's end to its reply is observed: a worker that took the request in time but held it
 * 300 ms (testing.job_delay) against a 100 ms deadline answers late, on the CPU. */
static void test_late_replies_counted(void **state) {
    (void)state;
    const char *extra[] = {"--set", "testing.job_delay=300ms", "--workers", "1", NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    assert_int_equal(harness_metric(&h, "isn_answered_late_total{device=\"cpu\"}"), 0);
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    isn_grpc_search_request request = {.query = "wind", .timeout_ms = 100};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    if (reply.status != 0) {
        harness_dump_log(&h);
        fail_msg("status %d: %s", reply.status, reply.message);
    }
    isn_grpc_search_reply_free(&reply);
    assert_int_equal(harness_metric(&h, "isn_answered_late_total{device=\"cpu\"}"), 1);
    assert_int_equal(harness_metric(&h, "isn_answered_late_total{device=\"gpu\"}"), 0);
    assert_int_equal(harness_metric(&h, "isn_reply_wait_seconds_count{device=\"cpu\"}"), 1);
    isn_grpc_close(client);
    assert_int_equal(harness_stop(&h), 0);
}

/* A request queued behind a long one is answered DEADLINE_EXCEEDED at its deadline by the loop, not
 * when the worker reaches it: its answer arrives while the long one is still running (3 s of delay
 * against a 100 ms deadline: a margin, not a timing). */
static void test_expires_at_deadline(void **state) {
    (void)state;
    const char *extra[] = {"--set", "testing.job_delay=3s", "--workers", "1", NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    char err[256];
    isn_grpc_client *clients[2];
    isn_grpc_client_call *calls[2];
    for (int i = 0; i < 2; i++) {
        clients[i] = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
        assert_non_null(clients[i]);
        Isn__V1__SearchRequest request = ISN__V1__SEARCH_REQUEST__INIT;
        request.query = "wind";
        request.timeout_ms = i == 0 ? 10000 : 100;
        uint8_t body[64];
        size_t len = isn__v1__search_request__pack(&request, body);
        calls[i] = isn_grpc_start(clients[i], &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = body,
                                                                  .body_len = len, .frame = true},
                                  err, sizeof err);
        assert_non_null(calls[i]);
        /* sent, and the one worker has it, before the second is: no answer comes for 3 s */
        if (i == 0) assert_int_not_equal(isn_grpc_wait(clients[0], calls[0], 300, err, sizeof err), 0);
    }
    if (isn_grpc_wait(clients[1], calls[1], 2500, err, sizeof err) != 0) {
        harness_dump_log(&h);
        fail_msg("no answer 2.4 s after a 100 ms deadline: %s", err);
    }
    const isn_grpc_result *expired = isn_grpc_client_call_result(calls[1]);
    if (expired->grpc_status != 4) {
        harness_dump_log(&h);
        fail_msg("status %d: %s", expired->grpc_status, expired->grpc_message);
    }
    assert_non_null(strstr(expired->grpc_message, "in the queue"));
    static char page[1 << 18];
    assert_int_equal(harness_http_get(&h, "/metrics", page, sizeof page), 200);
    const char *count = strstr(page, "\nisn_expired_in_queue_total ");
    assert_non_null(count);
    assert_int_equal(atoi(count + strlen("\nisn_expired_in_queue_total ")), 1);
    assert_int_equal(isn_grpc_wait(clients[0], calls[0], 10000, err, sizeof err), 0);
    assert_int_equal(isn_grpc_client_call_result(calls[0])->grpc_status, 0);
    for (int i = 0; i < 2; i++) {
        isn_grpc_client_call_free(calls[i]);
        isn_grpc_close(clients[i]);
    }
    assert_int_equal(harness_stop(&h), 0);
}

/* A query that cannot finish before its deadline on an idle node (the worker's testing delay runs
 * past its stop point) answers partially: complete=false, reason "deadline". With forbid_partial it
 * is answered DEADLINE_EXCEEDED instead, directly and through isn-agg (which forwards the flag and
 * does not make a partial answer of the refusal either). Margins, not timings: 1.9 s of delay
 * against a 2 s deadline whose stop point is at 90%, and an exhaustive OR over most documents (the
 * search reads the clock every 256 candidates). */
static void test_partial_or_forbidden(void **state) {
    (void)state;
    const char *extra[] = {"--set", "testing.job_delay=1900ms", "--workers", "1", NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    harness agg_process = h; /* the same build and work directory; its own log and process */
    const char *partitions[] = {h.grpc_address, NULL};
    assert_int_equal(harness_start_agg(&agg_process, partitions, NULL), 0);
    char err[256];
    const char *targets[] = {h.grpc_address, agg_process.grpc_address};
    for (int t = 0; t < 2; t++) {
        isn_grpc_client *client = isn_grpc_connect(targets[t], 5000, err, sizeof err);
        assert_non_null(client);
        for (int forbid = 0; forbid < 2; forbid++) {
            isn_grpc_search_request request = {.query = "wind tunnel flow boundary layer pressure heat transfer",
                                               .k = 10, .algorithm = "or", .timeout_ms = 2000,
                                               .forbid_partial = forbid};
            isn_grpc_search_reply reply;
            assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
            if (!forbid) {
                if (reply.status != 0) fail_msg("%s: status %d: %s", targets[t], reply.status, reply.message);
                assert_false(reply.complete);
                assert_string_equal(reply.incomplete_reason, "deadline");
            } else {
                assert_int_equal(reply.status, ISN_GRPC_STATUS_DEADLINE_EXCEEDED);
                assert_non_null(strstr(reply.message, "forbids partial answers"));
            }
            isn_grpc_search_reply_free(&reply);
        }
        isn_grpc_close(client);
    }
    assert_int_equal(harness_stop(&agg_process), 0);
    assert_int_equal(harness_stop(&h), 0);
}

/* SIGTERM sent again and again while isnd drains and exits: it still exits 0, never killed by the
 * signal (the handlers gave the signal back its default action once closed). */
static void test_repeated_sigterm(void **state) {
    (void)state;
    for (int round = 0; round < 5; round++) {
        assert_int_equal(harness_start(&h, NULL, NULL), 0);
        pid_t pid = h.pid;
        for (int i = 0; i < 2000 && kill(pid, SIGTERM) == 0; i++) {
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid) {
                h.pid = -1;
                if (!WIFEXITED(status)) fail_msg("isnd killed by signal %d on SIGTERM number %d", WTERMSIG(status), i + 1);
                assert_int_equal(WEXITSTATUS(status), 0);
                break;
            }
            usleep(200);
        }
        if (h.pid > 0) assert_int_equal(harness_wait_exit(&h, 10000), 0);
    }
}

static void test_shed_when_queue_full(void **state) {
    (void)state;
    const char *extra[] = {"--set", "testing.job_delay=50ms", "--set", "search.max_queue=2", "--workers", "1", NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    load l;
    start_load(&l, 12, 0);
    int by_status[17] = {0};
    finish_load(&l, by_status);
    assert_true(by_status[8] >= 6); /* RESOURCE_EXHAUSTED */
    assert_true(by_status[0] >= 2);
    assert_int_equal(by_status[0] + by_status[8], 12);
    static char page[1 << 18];
    assert_int_equal(harness_http_get(&h, "/metrics", page, sizeof page), 200);
    const char *shed = strstr(page, "\nisn_shed_total ");
    assert_non_null(shed);
    assert_int_equal(atoi(shed + strlen("\nisn_shed_total ")), by_status[8]);
    assert_int_equal(harness_stop(&h), 0);
}

/* ------------------------------------------------------------------ SIGHUP */

static int search_status_for_k(uint32_t k) {
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(client, &(isn_grpc_search_request){.query = "wind", .k = k}, &reply, err, sizeof err), 0);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(client);
    return reply.status;
}

static void wait_for_log(const char *needle) {
    int64_t deadline = harness_now_ms() + 5000;
    while (!harness_log_has(&h, needle)) {
        if (harness_now_ms() > deadline) {
            harness_dump_log(&h);
            fail_msg("log line \"%s\" not seen", needle);
        }
        harness_sleep_ms(10);
    }
}

static void test_sighup_reload(void **state) {
    (void)state;
    char path[1024], arg[1024];
    snprintf(path, sizeof path, "%s/reload.conf", h.work_dir);
    assert_int_equal(support_write_text(path, "[search]\nmax_k = 100\n"), 0);
    snprintf(arg, sizeof arg, "%s", path);
    const char *extra[] = {"--config", arg, NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    assert_int_equal(search_status_for_k(50), 0);
    assert_int_equal(support_write_text(path, "[search]\nmax_k = 20\n[log]\nlevel = debug\n"), 0);
    kill(h.pid, SIGHUP);
    wait_for_log("configuration reloaded");
    assert_int_equal(search_status_for_k(50), 3);
    assert_int_equal(search_status_for_k(20), 0);

    /* (--listen on the command line would win over the file anyway: flags are re-applied) */
    assert_int_equal(support_write_text(path, "[server]\nmax_concurrent_streams = 10\n[search]\nmax_k = 1000\n"), 0);
    kill(h.pid, SIGHUP);
    wait_for_log("server.max_concurrent_streams changed, which needs a restart");
    assert_int_equal(search_status_for_k(50), 3); /* nothing of that reload applied */

    assert_int_equal(support_write_text(path, "[search]\nmax_k = nope\n"), 0);
    kill(h.pid, SIGHUP);
    wait_for_log("\"nope\" is not a non-negative integer"); /* the line above also says "not reloaded" */
    assert_int_equal(search_status_for_k(20), 0);
    assert_int_equal(harness_stop(&h), 0);
}

/* ------------------------------------------------------------------ systemd */

/* sd_notify: READY=1 once serving, STOPPING=1 when the drain starts, on $NOTIFY_SOCKET. */
static void test_sd_notify(void **state) {
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/notify.sock", h.work_dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof addr.sun_path);
    strcpy(addr.sun_path, path);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    setenv("NOTIFY_SOCKET", path, 1);
    int started = harness_start(&h, NULL, NULL);
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(started, 0);
    char all[4096] = "";
    size_t used = 0;
    bool stopping_sent = false;
    int64_t deadline = harness_now_ms() + 10000;
    while (!strstr(all, "STOPPING=1") && harness_now_ms() < deadline) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) == 1) {
            ssize_t n = recv(fd, all + used, sizeof all - used - 1, 0);
            if (n > 0) used += (size_t)n, all[used] = '\0';
        }
        if (strstr(all, "READY=1") && !stopping_sent) {
            kill(h.pid, SIGTERM);
            stopping_sent = true;
        }
    }
    close(fd);
    assert_non_null(strstr(all, "READY=1"));
    assert_non_null(strstr(all, "STOPPING=1"));
    assert_true(strstr(all, "READY=1") < strstr(all, "STOPPING=1"));
    assert_int_equal(harness_wait_exit(&h, 10000), 0);
}

/* systemd/isnd.service passes `systemd-analyze verify` (with ExecStart pointing at this build). */
static void test_systemd_unit_verifies(void **state) {
    (void)state;
    if (system("command -v systemd-analyze >/dev/null 2>&1") != 0) {
        fprintf(stderr, "note: systemd-analyze not installed: systemd/isnd.service not verified\n");
        return;
    }
    char isnd[600], real[PATH_MAX], cmd[PATH_MAX + 1024];
    snprintf(isnd, sizeof isnd, "%s/bin/isnd", h.build_dir);
    assert_non_null(realpath(isnd, real));
    snprintf(cmd, sizeof cmd,
             "sed 's|/usr/local/bin/isnd|%s|' systemd/isnd.service > %s/isnd.service && "
             "systemd-analyze verify %s/isnd.service",
             real, h.work_dir, h.work_dir);
    if (system(cmd) != 0) fail_msg("systemd-analyze verify reported problems in systemd/isnd.service");
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
        cmocka_unit_test(test_check_config),
        cmocka_unit_test(test_drain_loses_nothing),
        cmocka_unit_test(test_drain_time_limit),
        cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_expires_at_deadline),
        cmocka_unit_test(test_late_replies_counted),
        cmocka_unit_test(test_partial_or_forbidden),
        cmocka_unit_test(test_repeated_sigterm),
        cmocka_unit_test(test_shed_when_queue_full),
        cmocka_unit_test(test_sighup_reload),
        cmocka_unit_test(test_sd_notify),
        cmocka_unit_test(test_systemd_unit_verifies),
    };
    return cmocka_run_group_tests_name("isnd_lifecycle", tests, setup, teardown);
}
