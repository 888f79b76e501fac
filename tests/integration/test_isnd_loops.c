/* isnd with several event loops (server.loops = 4): many clients on separate connections, handed
 * out over every loop, all get the offline engine's answers while their replies cross from the
 * workers back to the loop that owns each stream; SIGTERM with requests in flight on every loop
 * answers each one and exits 0; a SIGHUP is in force on every loop once logged; Health/Watch
 * streams on every loop see the drain; max_connections holds for the node, not per loop. Also run
 * under ThreadSanitizer (make tsan-test). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/base.h"
#include "conf/conf.h"
#include "grpc/client.h"
#include "tests/support/files.h"
#include "tests/support/isnd_harness.h"

#define LOOPS 4
#define CLIENTS 16
#define CALLS_PER_CLIENT 12
#define K 10

static harness h;
static isn_index *offline_index;
static isn_searcher *offline;

static const char *const QUERIES[] = {
    "wind tunnel", "search engine", "t7 flow", "running connection", "boundary layer pressure", "heat transfer",
    "supersonic wing", "latency throughput", "score t1", "t5 t17 t300 wind", "nonexistentword", "the flow of air",
};
#define NUM_QUERIES (sizeof QUERIES / sizeof QUERIES[0])

static const char *const LOOPS_ARGS[] = {"--set", "server.loops=4", "--workers", "2", NULL};

static void connect_all(isn_grpc_client **clients, int n) {
    char err[256];
    for (int c = 0; c < n; c++)
        if (!(clients[c] = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err))) fail_msg("connect: %s", err);
}

static void poll_all(isn_grpc_client **clients, int n) {
    char err[256];
    for (int c = 0; c < n; c++) isn_grpc_poll(clients[c], 1, err, sizeof err);
}

static void wait_done(isn_grpc_client **clients, int n, isn_grpc_client_call **calls, int num_calls) {
    int64_t deadline = harness_now_ms() + 60000;
    for (int i = 0; i < num_calls; i++)
        while (!isn_grpc_client_call_done(calls[i])) {
            if (harness_now_ms() > deadline) fail_msg("replies still missing after 60 s");
            poll_all(clients, n);
        }
}

static long long metric(const char *sample) { return harness_metric(&h, sample); }

static void test_many_clients_across_loops(void **state) {
    (void)state;
    int64_t started_ms = harness_now_ms();
    assert_int_equal(harness_start(&h, NULL, LOOPS_ARGS), 0);
    isn_grpc_client *clients[CLIENTS];
    connect_all(clients, CLIENTS);
    /* every connection is open (they are handed out in turn): each loop serves a quarter of them */
    int64_t deadline = harness_now_ms() + 5000;
    while (metric("isn_connections{protocol=\"grpc\"}") < CLIENTS && harness_now_ms() < deadline) harness_sleep_ms(5);
    assert_int_equal(metric("isn_event_loops"), LOOPS);
    for (int loop = 0; loop < LOOPS; loop++) {
        char sample[64];
        snprintf(sample, sizeof sample, "isn_loop_connections{loop=\"%d\"}", loop);
        assert_int_equal(metric(sample), CLIENTS / LOOPS);
    }

    static isn_hit want[NUM_QUERIES][K];
    uint32_t num_want[NUM_QUERIES];
    for (size_t q = 0; q < NUM_QUERIES; q++) {
        isn_search_options o;
        isn_search_options_default(&o);
        o.k = K;
        o.mode = ISN_MODE_OR;
        isn_query parsed;
        assert_int_equal(harness_offline_search(offline, QUERIES[q], &o, &parsed, want[q], &num_want[q]), 0);
    }
    char err[256];
    for (int round = 0; round < 3; round++) {
        static isn_grpc_client_call *calls[CLIENTS * CALLS_PER_CLIENT];
        int n = 0;
        for (int c = 0; c < CLIENTS; c++)
            for (int i = 0; i < CALLS_PER_CLIENT; i++, n++) {
                isn_grpc_search_request request = {
                    .query = QUERIES[(size_t)(n + round) % NUM_QUERIES], .k = K, .mode = ISN_GRPC_MODE_OR};
                if (!(calls[n] = isn_grpc_search_start(clients[c], &request, err, sizeof err))) fail_msg("start: %s", err);
            }
        poll_all(clients, CLIENTS);
        wait_done(clients, CLIENTS, calls, n);
        for (int i = 0; i < n; i++) {
            size_t q = (size_t)(i + round) % NUM_QUERIES;
            isn_grpc_search_reply reply;
            assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
            if (reply.status != 0) fail_msg("call %d (\"%s\"): status %d: %s", i, QUERIES[q], reply.status, reply.message);
            if (reply.num_hits != num_want[q])
                fail_msg("\"%s\": %u hits, %u offline", QUERIES[q], reply.num_hits, num_want[q]);
            for (uint32_t j = 0; j < reply.num_hits; j++)
                if (reply.hits[j].doc != want[q][j].doc || reply.hits[j].score != want[q][j].score)
                    fail_msg("\"%s\" hit %u: doc %u (%.9g), offline doc %u (%.9g)", QUERIES[q], j, reply.hits[j].doc,
                             (double)reply.hits[j].score, want[q][j].doc, (double)want[q][j].score);
            isn_grpc_search_reply_free(&reply);
        }
    }
    /* every loop read and answered requests, and told its working time apart: reading the requests, making the
     * replies, writing them. The parts are read first: each scrape is the first loop's work too, so the busy time
     * read after them holds all they counted. */
    double busy_all = 0, parts = 0;
    static const char *const PARTS[] = {"reads", "replies", "flushes", "other"};
    for (size_t i = 0; i < sizeof PARTS / sizeof *PARTS; i++) {
        char sample[64];
        snprintf(sample, sizeof sample, "isn_loop_work_seconds_total{part=\"%s\"}", PARTS[i]);
        double part = harness_metric_value(&h, sample);
        if (!(part >= 0)) fail_msg("%s is %g after serving requests", sample, part);
        if (i < 3 && !(part > 0)) fail_msg("%s is %g after serving requests", sample, part);
        parts += part;
    }
    for (int loop = 0; loop < LOOPS; loop++) {
        char sample[64];
        snprintf(sample, sizeof sample, "isn_loop_busy_seconds_total{loop=\"%d\"}", loop);
        double busy = harness_metric_value(&h, sample);
        if (!(busy > 0)) fail_msg("%s is %g after serving requests", sample, busy);
        busy_all += busy;
    }
    if (!(parts <= busy_all * 1.01 + 0.001)) fail_msg("the loops' parts sum to %g s, their busy time %g s", parts, busy_all);
    /* and counted the socket reads and writes that carried them, and every request begun (the scrapes' own are
     * HTTP/1.1, not counted) */
    long long searches = 3LL * CLIENTS * CALLS_PER_CLIENT, begun = metric("isn_loop_requests_total");
    if (begun < searches) fail_msg("isn_loop_requests_total is %lld after %lld searches", begun, searches);
    if (metric("isn_loop_reads_total") < 1 || metric("isn_loop_writes_total") < 1)
        fail_msg("the loops' socket reads %lld and writes %lld after %lld requests", metric("isn_loop_reads_total"),
                 metric("isn_loop_writes_total"), begun);
    /* where the kernel keeps run delays, each loop's wait for a CPU: some time, no more than isnd has lived */
    if (isn_thread_cpu_wait_ns(gettid()) >= 0) {
        double lived = (double)(harness_now_ms() - started_ms) / 1e3;
        for (int loop = 0; loop < LOOPS; loop++) {
            char sample[64];
            snprintf(sample, sizeof sample, "isn_loop_cpu_wait_seconds_total{loop=\"%d\"}", loop);
            double waited = harness_metric_value(&h, sample);
            if (!(waited >= 0 && waited <= lived)) fail_msg("%s is %g after %g s", sample, waited, lived);
        }
    }
    /* and counted its iterations: at least one each, every one in some bucket */
    long long iterations = metric("isn_loop_iteration_seconds_count");
    if (iterations < LOOPS) fail_msg("isn_loop_iteration_seconds_count is %lld after serving requests", iterations);
    assert_int_equal(metric("isn_loop_iteration_seconds_bucket{le=\"+Inf\"}") >= iterations, 1);
    /* every answer counted once, whichever loop sent it */
    assert_int_equal(metric("isn_requests_total{method=\"isn.v1.Search/Search\",code=\"OK\"}"),
                     3 * CLIENTS * CALLS_PER_CLIENT);
    for (int c = 0; c < CLIENTS; c++) isn_grpc_close(clients[c]);
    assert_int_equal(harness_stop_checked(&h), 0);
}

/* The load generator's pool (isn-bench): a burst of calls stays on one connection (one write), the next burst
 * takes the next connection, and one wait over the pool (its own poll, then each ready connection serviced)
 * brings every answer in. */
#define POOL_SIZE 4
#define BURSTS 6
#define BURST_CALLS 5
static void test_pool_bursts_take_turns(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, LOOPS_ARGS), 0);
    char err[256];
    isn_grpc_pool *pool = isn_grpc_pool_new(h.grpc_address, POOL_SIZE, 5000, err, sizeof err);
    if (!pool) fail_msg("pool: %s", err);
    static isn_grpc_client_call *calls[BURSTS * BURST_CALLS];
    uint32_t slots[BURSTS * BURST_CALLS];
    int n = 0;
    for (int burst = 0; burst < BURSTS; burst++) {
        uint32_t last = UINT32_MAX;
        isn_grpc_client *client = NULL;
        for (int i = 0; i < BURST_CALLS; i++, n++) {
            client = isn_grpc_pool_pick_again(pool, last, &slots[n]);
            if (!client) fail_msg("burst %d call %d: no connection", burst, i);
            isn_grpc_search_request request = {.query = QUERIES[(size_t)n % NUM_QUERIES], .k = K, .mode = ISN_GRPC_MODE_OR};
            if (!(calls[n] = isn_grpc_search_start(client, &request, err, sizeof err))) fail_msg("start: %s", err);
            isn_grpc_pool_started(pool, slots[n]);
            if (i > 0 && slots[n] != last) fail_msg("burst %d: call %d on slot %u, the burst's is %u", burst, i, slots[n], last);
            last = slots[n];
            if (burst > 0 && i == 0 && slots[n] == slots[n - BURST_CALLS])
                fail_msg("burst %d on slot %u again: bursts take turns", burst, slots[n]);
        }
        /* the burst goes out (and nothing is read) */
        if (isn_grpc_service(client, 0, err, sizeof err) != 0) fail_msg("send: %s", err);
    }
    int64_t deadline = harness_now_ms() + 30000;
    for (int i = 0; i < n; i++)
        while (!isn_grpc_client_call_done(calls[i])) {
            if (harness_now_ms() > deadline) fail_msg("call %d still unanswered after 30 s", i);
            isn_grpc_pool_wait(pool, 10000000);
        }
    for (int i = 0; i < n; i++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
        if (reply.status != 0) fail_msg("call %d: status %d: %s", i, reply.status, reply.message);
        isn_grpc_search_reply_free(&reply);
        isn_grpc_pool_finished(pool, slots[i]);
    }
    /* every connection of the pool carried bursts */
    assert_int_equal(metric("isn_connections{protocol=\"grpc\"}"), POOL_SIZE);
    isn_grpc_pool_free(pool);
    assert_int_equal(harness_stop_checked(&h), 0);
}

/* SIGTERM with slow requests in flight on every loop: each is answered, every loop drains, exit 0. */
#define DRAIN_CALLS 160
static void test_drain_across_loops(void **state) {
    (void)state;
    /* 160 requests of 25 ms each on two workers: about 2 s of work, in flight when SIGTERM comes */
    const char *extra[] = {"--set", "server.loops=4", "--workers", "2", "--set", "testing.job_delay=25ms", NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    isn_grpc_client *clients[8];
    connect_all(clients, 8);
    static isn_grpc_client_call *calls[DRAIN_CALLS];
    char err[256];
    for (int i = 0; i < DRAIN_CALLS; i++) {
        isn_grpc_search_request request = {.query = QUERIES[i % NUM_QUERIES], .k = K};
        if (!(calls[i] = isn_grpc_search_start(clients[i % 8], &request, err, sizeof err))) fail_msg("start: %s", err);
    }
    /* every request has reached the server (open, or already answered) */
    int64_t deadline = harness_now_ms() + 10000;
    while (harness_stat(&h, "open_streams") + metric("isn_requests_total{method=\"isn.v1.Search/Search\",code=\"OK\"}") <
           DRAIN_CALLS) {
        if (harness_now_ms() > deadline) fail_msg("the requests did not all reach the server");
        poll_all(clients, 8);
    }
    assert_true(harness_stat(&h, "open_streams") > 0); /* some are in flight: the drain has work */
    kill(h.pid, SIGTERM);
    wait_done(clients, 8, calls, DRAIN_CALLS);
    for (int i = 0; i < DRAIN_CALLS; i++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[i], &reply, err, sizeof err), 0);
        if (reply.status != 0) fail_msg("call %d: status %d: %s", i, reply.status, reply.message);
        isn_grpc_search_reply_free(&reply);
    }
    for (int c = 0; c < 8; c++) isn_grpc_close(clients[c]);
    assert_int_equal(harness_wait_exit(&h, 10000), 0);
    assert_true(harness_log_has(&h, "every request answered"));
}

/* A reload is in force on every loop once it is logged: k = 50 refused on each connection. */
static void test_sighup_on_every_loop(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/loops.conf", h.work_dir);
    assert_int_equal(support_write_text(path, "[server]\nloops = 4\n[search]\nmax_k = 100\n"), 0);
    const char *extra[] = {"--config", path, NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    isn_grpc_client *clients[LOOPS];
    connect_all(clients, LOOPS);
    assert_int_equal(support_write_text(path, "[server]\nloops = 4\n[search]\nmax_k = 20\n"), 0);
    kill(h.pid, SIGHUP);
    int64_t deadline = harness_now_ms() + 10000;
    while (!harness_log_has(&h, "configuration reloaded")) {
        if (harness_now_ms() > deadline) fail_msg("no reload logged");
        harness_sleep_ms(5);
    }
    char err[256];
    for (int c = 0; c < LOOPS; c++) {
        isn_grpc_search_request request = {.query = "wind", .k = 50};
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(clients[c], &request, &reply, err, sizeof err), 0);
        assert_int_equal(reply.status, ISN_GRPC_STATUS_INVALID_ARGUMENT);
        isn_grpc_search_reply_free(&reply);
        isn_grpc_close(clients[c]);
    }
    assert_int_equal(harness_stop_checked(&h), 0);
}

/* Health/Watch streams on every loop get SERVING, then NOT_SERVING and their end (status OK) when
 * the drain starts; the node then exits 0. */
static void test_watch_on_every_loop(void **state) {
    (void)state;
    assert_int_equal(harness_start(&h, NULL, LOOPS_ARGS), 0);
    isn_grpc_client *clients[LOOPS];
    connect_all(clients, LOOPS);
    isn_grpc_client_call *watches[LOOPS];
    char err[256];
    for (int c = 0; c < LOOPS; c++) {
        isn_grpc_request request = {.path = "/grpc.health.v1.Health/Watch", .frame = true}; /* service "" */
        if (!(watches[c] = isn_grpc_start(clients[c], &request, err, sizeof err))) fail_msg("start: %s", err);
    }
    int64_t deadline = harness_now_ms() + 10000;
    while (harness_stat(&h, "open_streams") < LOOPS) {
        if (harness_now_ms() > deadline) fail_msg("the Watch streams did not all open");
        poll_all(clients, LOOPS);
    }
    kill(h.pid, SIGTERM);
    for (int c = 0; c < LOOPS; c++) {
        assert_int_equal(isn_grpc_wait(clients[c], watches[c], 10000, err, sizeof err), 0);
        const isn_grpc_result *result = isn_grpc_client_call_result(watches[c]);
        assert_int_equal(result->grpc_status, 0);
        /* two HealthCheckResponse messages of 2 bytes each: SERVING, then NOT_SERVING */
        assert_int_equal(result->body_len, 2 * (ISN_GRPC_PREFIX_BYTES + 2));
        isn_grpc_client_call_free(watches[c]);
        isn_grpc_close(clients[c]);
    }
    assert_int_equal(harness_wait_exit(&h, 10000), 0);
}

/* Each thread of the running isnd: whether it runs a loop (the first loop's is isnd's main thread), and
 * what `setting` reads of it (a slice, a priority). Fails when a loop lacks `expected` or another thread
 * has it; returns the loops seen, and *others the other threads. */
static unsigned check_loop_threads(uint64_t (*setting)(pid_t tid), uint64_t expected, const char *what,
                                   unsigned *others) {
    char dir[64], main_tid[16];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)h.pid);
    snprintf(main_tid, sizeof main_tid, "%d", (int)h.pid);
    DIR *tasks = opendir(dir);
    assert_non_null(tasks);
    unsigned loops = 0;
    *others = 0;
    for (struct dirent *e; (e = readdir(tasks));) {
        if (e->d_name[0] == '.') continue;
        char name[32];
        harness_thread_name(h.pid, e->d_name, name, sizeof name);
        if (!name[0]) continue;
        bool loop = strcmp(e->d_name, main_tid) == 0 || strncmp(name, "isnd-loop-", 10) == 0;
        uint64_t value = setting((pid_t)atoi(e->d_name));
        if (loop) {
            if (value != expected) fail_msg("loop thread %s (%s) has %s %llu, not %llu", e->d_name, name, what,
                                            (unsigned long long)value, (unsigned long long)expected);
            loops++;
        } else {
            if (value == expected) fail_msg("thread %s (%s) took the loops' %s", e->d_name, name, what);
            (*others)++;
        }
    }
    closedir(tasks);
    return loops;
}

static uint64_t slice_of(pid_t tid) { return isn_thread_slice_ns(tid); }
static uint64_t realtime_priority_of(pid_t tid) { return (uint64_t)isn_thread_realtime_priority(tid); }

/* server.loop_slice: every loop's thread takes the slice, and no other thread does: the workers and
 * dispatchers it would let the loops preempt keep the kernel's, and so do threads the main thread starts
 * after the loops (reset on fork). */
static void test_loop_slice_on_the_loops_alone(void **state) {
    (void)state;
    if (isn_thread_slice_ns(0) == 0) {
        printf("loop slice check skipped: this kernel does not report per-thread slices (Linux 6.12+)\n");
        skip();
    }
    static const char *const args[] = {"--set", "server.loops=3", "--set", "server.loop_slice=300us",
                                       "--set", "server.loop_realtime_priority=0", "--workers", "2", NULL};
    assert_int_equal(harness_start(&h, NULL, args), 0);
    unsigned others;
    assert_int_equal(check_loop_threads(slice_of, 300000, "slice (ns)", &others), 3);
    assert_true(others >= 2); /* the workers at least */
    assert_int_equal(harness_stop(&h), 0);
}

/* Whether this process may make a thread SCHED_FIFO (CAP_SYS_NICE or RLIMIT_RTPRIO), tried on a thread
 * of its own. */
static void *try_realtime(void *arg) {
    char err[256];
    *(bool *)arg = isn_set_this_thread_realtime(1, err, sizeof err) == 0;
    return NULL;
}

/* server.loop_realtime_priority: every loop's thread runs SCHED_FIFO at it; the workers, the dispatchers
 * and threads started later stay in the normal policy (reset on fork), or a loop that never sleeps would
 * have company that never yields. */
static void test_loop_realtime_priority_on_the_loops_alone(void **state) {
    (void)state;
    bool permitted = false;
    pthread_t probe;
    assert_int_equal(pthread_create(&probe, NULL, try_realtime, &permitted), 0);
    pthread_join(probe, NULL);
    if (!permitted) {
        printf("loop real-time check skipped: this process may not use SCHED_FIFO (no CAP_SYS_NICE, RLIMIT_RTPRIO 0)\n");
        skip();
    }
    static const char *const args[] = {"--set", "server.loops=3", "--set", "server.loop_realtime_priority=2",
                                       "--workers", "2", NULL};
    assert_int_equal(harness_start(&h, NULL, args), 0);
    unsigned others;
    assert_int_equal(check_loop_threads(realtime_priority_of, 2, "SCHED_FIFO priority", &others), 3);
    assert_true(others >= 2);
    assert_true(harness_log_count(&h, "event loops run SCHED_FIFO at priority 2") == 1);
    assert_int_equal(harness_stop(&h), 0);
}

/* How many of the running isnd's CPU workers (isn-cpu-N) run in SCHED_IDLE (*idle) and in the normal policy
 * (*normal); fails when a loop runs in SCHED_IDLE. */
static void count_worker_policies(unsigned *idle, unsigned *normal) {
    char dir[64], main_tid[16];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)h.pid);
    snprintf(main_tid, sizeof main_tid, "%d", (int)h.pid);
    DIR *tasks = opendir(dir);
    assert_non_null(tasks);
    *idle = *normal = 0;
    for (struct dirent *e; (e = readdir(tasks));) {
        if (e->d_name[0] == '.') continue;
        char name[32];
        harness_thread_name(h.pid, e->d_name, name, sizeof name);
        bool idle_policy = isn_thread_has_idle_policy((pid_t)atoi(e->d_name));
        if (strcmp(e->d_name, main_tid) == 0 || strncmp(name, "isnd-loop-", 10) == 0) {
            if (idle_policy) fail_msg("loop thread %s (%s) runs in SCHED_IDLE", e->d_name, name);
        } else if (strncmp(name, "isn-cpu-", 8) == 0) {
            *(idle_policy ? idle : normal) += 1;
        }
    }
    closedir(tasks);
}

/* scheduler.worker_idle_policy: true puts the workers in SCHED_IDLE, false keeps them in the normal policy, and
 * auto (the default) chooses SCHED_IDLE on a node without a GPU that has three CPUs a loop or more (one loop here:
 * so on three CPUs or more, as isnd counts them) and the normal policy beside a GPU (here the emulated one); the
 * loops keep the normal policy always. */
static void test_worker_idle_policy(void **state) {
    (void)state;
    static const char *const idle_policy[] = {"--set", "server.loops=1", "--workers", "2",
                                              "--set", "scheduler.worker_idle_policy=true", NULL};
    static const char *const normal_policy[] = {"--set", "server.loops=1", "--workers", "2",
                                                "--set", "scheduler.worker_idle_policy=false", NULL};
    static const char *const cpu_only[] = {"--set", "server.loops=1", "--workers", "2", NULL};
    static const char *const beside_gpu[] = {"--set", "server.loops=1", "--workers", "2", "--set", "gpu.enable=true",
                                             "--set", "gpu.emulate=true", "--set", "gpu.upload_before_ready=true", NULL};
    const char *const *runs[] = {idle_policy, normal_policy, cpu_only, beside_gpu};
    const bool enough_cpus = isn_cpus_available() >= ISN_IDLE_WORKERS_CPUS_PER_LOOP;
    const unsigned idle_wanted[] = {2, 0, enough_cpus ? 2 : 0, 0};
    const char *const said[] = {"started in SCHED_IDLE", "started at nice +5", enough_cpus ? "started in SCHED_IDLE" : "started at nice +5",
                                "started at nice +5"};
    for (int run = 0; run < 4; run++) {
        assert_int_equal(harness_start(&h, NULL, runs[run]), 0);
        unsigned idle, normal;
        count_worker_policies(&idle, &normal);
        if (idle != idle_wanted[run] || idle + normal != 2)
            fail_msg("run %d: %u workers in SCHED_IDLE and %u in the normal policy, wanted %u of 2 in SCHED_IDLE", run,
                     idle, normal, idle_wanted[run]);
        if (!harness_log_has(&h, said[run])) {
            harness_dump_log(&h);
            fail_msg("run %d: isnd did not say its workers %s", run, said[run]);
        }
        assert_int_equal(harness_stop(&h), 0);
    }
}

/* The CPUs a thread of isnd may run on, as a bit mask (CPUs past 63 are not looked at); false when the
 * thread has exited since its directory was listed, which short-lived threads may do under a slow build
 * (ASan's). */
static bool cpus_of(pid_t tid, uint64_t *mask) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(tid, sizeof set, &set) != 0) {
        if (errno == ESRCH) return false;
        fail_msg("sched_getaffinity of thread %d: %s", (int)tid, strerror(errno));
    }
    *mask = 0;
    for (int c = 0; c < 64; c++)
        if (CPU_ISSET(c, &set)) *mask |= 1ull << c;
    return true;
}

/* The CPUs this process may use, when the pin checks can run here: 2-64 of them, each numbered below 64 (their
 * masks are 64-bit; a taskset of CPUs 100-101 would not fit). Skips, saying so, where not. */
static uint32_t pinnable_cpus(int cpus[64]) {
    uint32_t have = isn_this_thread_cpus(cpus, 64);
    if (have < 2 || have > 64 || cpus[have - 1] > 63) {
        printf("pin_loops check skipped: it needs 2-64 CPUs numbered below 64, and this process may use %u\n", have);
        skip();
    }
    return have;
}

/* Starts isnd with server.pin_loops, `loops` loops (one spare beside each) and 2 workers, and checks where each
 * of its threads runs: each loop alone on one of isnd's CPUs, its first ones; the workers, GPU dispatchers
 * (isn-gpu-N) and the GPU backends' CPU threads (isn-crew-N) never on those; spare k beside loop k; any other
 * thread on every CPU. Returns how many crew threads it saw. */
static unsigned check_pinned_threads(const int *cpus, uint32_t have, uint32_t loops, const char *const *more) {
    char loops_arg[32], spares_arg[48];
    snprintf(loops_arg, sizeof loops_arg, "server.loops=%u", loops);
    snprintf(spares_arg, sizeof spares_arg, "search.spare_workers=%u", loops);
    const char *args[32] = {"--set", loops_arg, "--set", "server.pin_loops=true", "--set", spares_arg, "--workers", "2"};
    size_t n = 8;
    for (; more && *more && n < 31; more++) args[n++] = *more;
    args[n] = NULL;
    assert_int_equal(harness_start(&h, NULL, args), 0);
    uint64_t loop_mask = 0, all = 0;
    for (uint32_t i = 0; i < loops; i++) loop_mask |= 1ull << cpus[i];
    for (uint32_t i = 0; i < have; i++) all |= 1ull << cpus[i];
    char dir[64], main_tid[16];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)h.pid);
    snprintf(main_tid, sizeof main_tid, "%d", (int)h.pid);
    DIR *tasks = opendir(dir);
    assert_non_null(tasks);
    uint64_t loops_seen = 0, spares_seen = 0;
    unsigned workers = 0, crew = 0;
    for (struct dirent *e; (e = readdir(tasks));) {
        if (e->d_name[0] == '.') continue;
        char name[32];
        harness_thread_name(h.pid, e->d_name, name, sizeof name);
        uint64_t mask;
        if (!name[0] || !cpus_of((pid_t)atoi(e->d_name), &mask)) continue; /* exited meanwhile */
        unsigned id = 0;
        if (strcmp(e->d_name, main_tid) == 0 || sscanf(name, "isnd-loop-%u", &id) == 1) {
            if (mask != 1ull << cpus[id]) fail_msg("loop %u runs on %#llx, not CPU %d alone", id, (unsigned long long)mask, cpus[id]);
            loops_seen |= mask;
        } else if (sscanf(name, "isn-cpu-%u", &id) == 1 && id >= 2) { /* the spares follow the 2 workers */
            if (mask != 1ull << cpus[(id - 2) % loops]) fail_msg("spare %s runs on %#llx, not beside its loop", name, (unsigned long long)mask);
            spares_seen |= mask;
        } else if (sscanf(name, "isn-cpu-%u", &id) == 1 || sscanf(name, "isn-gpu-%u", &id) == 1 ||
                   sscanf(name, "isn-crew-%u", &id) == 1) {
            if (mask != (all & ~loop_mask)) fail_msg("%s runs on %#llx, not on the CPUs the loops leave", name, (unsigned long long)mask);
            workers += name[4] == 'c' && name[5] == 'p';
            crew += name[4] == 'c' && name[5] == 'r';
        } else if (mask != all) {
            fail_msg("thread %s (%s) runs on %#llx, not on every CPU", e->d_name, name, (unsigned long long)mask);
        }
    }
    closedir(tasks);
    assert_true(loops_seen == loop_mask && spares_seen == loop_mask);
    assert_int_equal(workers, 2);
    assert_int_equal(harness_log_count(&h, "event loops pinned (server.pin_loops)"), 1);
    assert_int_equal(harness_stop(&h), 0);
    return crew;
}

/* server.pin_loops: each loop alone on a CPU of its own (check_pinned_threads). With no more CPUs than loops
 * isnd refuses to start and says why. */
static void test_pin_loops_gives_each_loop_a_cpu_of_its_own(void **state) {
    (void)state;
    int cpus[64];
    uint32_t have = pinnable_cpus(cpus);
    check_pinned_threads(cpus, have, have > 3 ? 3 : have - 1, NULL);

    char loops_arg[32];
    snprintf(loops_arg, sizeof loops_arg, "server.loops=%u", have);
    const char *const too_many[] = {"--set", loops_arg, "--set", "server.pin_loops=true", "--workers", "1", NULL};
    assert_int_equal(harness_start(&h, NULL, too_many), -1);
    if (!harness_log_has(&h, "server.pin_loops needs a CPU for each of")) {
        harness_dump_log(&h);
        fail_msg("isnd did not say why it cannot pin its loops");
    }
}

/* With a GPU (the emulated device) the dispatcher and the backend's CPU threads stay off the loops' CPUs too:
 * the backend opens on a thread of libuv's pool, which may run anywhere, so its threads must be told. */
static void test_pin_loops_keeps_the_gpu_threads_off_the_loops(void **state) {
    (void)state;
    int cpus[64];
    uint32_t have = pinnable_cpus(cpus);
    static const char *const gpu[] = {"--set", "gpu.enable=true", "--set", "gpu.emulate=true", "--set",
                                      "gpu.cpu_threads=3", "--set", "gpu.upload_before_ready=true", NULL};
    assert_int_equal(check_pinned_threads(cpus, have, have > 3 ? 3 : have - 1, gpu), 2); /* the dispatcher is the third */
}

/* max_connections is node-wide: six connections with a request in flight each (none idle to make
 * room), spread over four loops, leave no place for a seventh, whichever loop it is handed to. */
static void test_connection_limit_across_loops(void **state) {
    (void)state;
    const char *extra[] = {"--set", "server.loops=4", "--workers", "1", "--set", "server.max_connections=6",
                           "--set", "testing.job_delay=300ms", NULL};
    assert_int_equal(harness_start(&h, NULL, extra), 0);
    isn_grpc_client *clients[6];
    connect_all(clients, 6);
    isn_grpc_client_call *calls[6];
    char err[256];
    for (int c = 0; c < 6; c++) {
        isn_grpc_search_request request = {.query = "wind", .k = K};
        if (!(calls[c] = isn_grpc_search_start(clients[c], &request, err, sizeof err))) fail_msg("start: %s", err);
    }
    int64_t deadline = harness_now_ms() + 10000;
    while (harness_stat(&h, "open_streams") < 6) {
        if (harness_now_ms() > deadline) fail_msg("the six requests did not all reach the server");
        poll_all(clients, 6);
    }
    for (int loop = 0; loop < LOOPS; loop++) {
        char sample[64];
        snprintf(sample, sizeof sample, "isn_loop_connections{loop=\"%d\"}", loop);
        assert_true(harness_metric(&h, sample) >= 1);
    }
    /* the seventh is closed at once: its request gets no answer */
    isn_grpc_client *seventh = isn_grpc_connect(h.grpc_address, 2000, err, sizeof err);
    if (seventh) {
        isn_grpc_search_request request = {.query = "wind", .k = K};
        isn_grpc_search_reply reply;
        int rc = isn_grpc_search(seventh, &request, &reply, err, sizeof err);
        assert_true(rc != 0 || reply.status != 0);
        if (rc == 0) isn_grpc_search_reply_free(&reply);
        isn_grpc_close(seventh);
    }
    assert_int_equal(harness_metric(&h, "isn_connections_rejected_total"), 1);
    wait_done(clients, 6, calls, 6);
    for (int c = 0; c < 6; c++) {
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search_finish(calls[c], &reply, err, sizeof err), 0);
        assert_int_equal(reply.status, 0);
        isn_grpc_search_reply_free(&reply);
        isn_grpc_close(clients[c]);
    }
    assert_int_equal(harness_stop_checked(&h), 0);
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, 1000);
    return harness_open_offline(&h, &offline_index, &offline);
}

static int teardown(void **state) {
    (void)state;
    isn_searcher_free(offline);
    isn_index_close(offline_index);
    harness_cleanup(&h);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_clients_across_loops),
        cmocka_unit_test(test_drain_across_loops),
        cmocka_unit_test(test_pool_bursts_take_turns),
        cmocka_unit_test(test_sighup_on_every_loop),
        cmocka_unit_test(test_watch_on_every_loop),
        cmocka_unit_test(test_connection_limit_across_loops),
        cmocka_unit_test(test_loop_slice_on_the_loops_alone),
        cmocka_unit_test(test_pin_loops_gives_each_loop_a_cpu_of_its_own),
        cmocka_unit_test(test_pin_loops_keeps_the_gpu_threads_off_the_loops),
        cmocka_unit_test(test_loop_realtime_priority_on_the_loops_alone),
        cmocka_unit_test(test_worker_idle_policy),
    };
    return cmocka_run_group_tests_name("isnd_loops", tests, setup, teardown);
}
