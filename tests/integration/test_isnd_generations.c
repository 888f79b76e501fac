/* Index generations end to end (real isnd and isn-agg on loopback). Two generations of a small index
 * answer differently and checkably: generation A's documents are "a-N", B's "b-N".
 *  - 20 SIGHUP swaps alternating A and B (index.isn renamed into place) while a client thread
 *    queries without pause: no request fails, every reply's hits belong to the generation the reply
 *    names, every replaced generation is freed (log, /stats, one index mapping left), RSS near its
 *    baseline;
 *  - a corrupt and a wrong-version generation are refused with the section named, counted, and the
 *    old generation keeps serving (then a good one swaps in);
 *  - a `current` symlink flipped to another directory is noticed and swapped without a signal;
 *  - rankers reload against the new generation; with the (emulated) GPU, another generation's
 *    queries are answered on the CPU and a swap back to the GPU's content goes to the GPU again;
 *  - isn-agg with global statistics over 2 partitions: after both partitions swap, merged scores
 *    equal the unpartitioned new index's (the cached statistics of the old generation are dropped). */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/files.h"
#include "tests/support/generations.h"
#include "tests/support/isnd_harness.h"
#include "grpc/client.h"

#define DOCS 2000
#define SWAPS 20

static harness h; /* isnd on work/live (a directory: SIGHUP swaps) */
static char self_path[PATH_MAX];
static char gen_dir[2][PATH_MAX], corpus[2][PATH_MAX], parts_dir[2][PATH_MAX];
static char gen_id[2][24];
static const char PREFIX[2] = {'a', 'b'};

static const char *const QUERIES[] = {"search engine", "wind tunnel", "ranking score", "boundary layer pressure",
                                      "the running connection", "heat transfer", "partition server latency",
                                      "index query document", "supersonic wing flow", "t17 t42 aggregator"};
#define NUM_QUERIES (sizeof QUERIES / sizeof QUERIES[0])

static bool wait_log_count(const harness *p, const char *needle, unsigned count, int timeout_ms) {
    int64_t deadline = harness_now_ms() + timeout_ms;
    while (harness_now_ms() < deadline) {
        if (harness_log_count(p, needle) >= (int)count) return true;
        harness_sleep_ms(10);
    }
    return false;
}

/* Puts `data` in place as work/live/index.isn by rename, as a deploy tool replaces a file. */
static void install_bytes(const uint8_t *data, size_t len) {
    char next[PATH_MAX + 16], live[PATH_MAX + 16];
    snprintf(next, sizeof next, "%s/.index.isn.next", h.index_dir);
    snprintf(live, sizeof live, "%s/index.isn", h.index_dir);
    assert_int_equal(support_write_file(next, data, len), 0);
    assert_int_equal(rename(next, live), 0);
}

static uint8_t *generation_bytes(int g, size_t *len) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/index.isn", gen_dir[g]);
    uint8_t *data = support_read_file(path, len);
    assert_non_null(data);
    return data;
}

static void install_generation(int g) {
    size_t len;
    uint8_t *data = generation_bytes(g, &len);
    install_bytes(data, len);
    free(data);
}

static unsigned index_mappings(pid_t pid) {
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, "index.isn") != NULL;
    if (f) fclose(f);
    return n;
}

/* The cost model's learned updates on the CPU: it keeps learning across swaps (never reset). */
static long long cost_model_updates(const harness *p) {
    static char metrics[1 << 17];
    if (harness_http_get(p, "/metrics", metrics, sizeof metrics) != 200) return -1;
    const char *at = strstr(metrics, "isn_cost_model_updates_total{device=\"cpu\"} ");
    return at ? atoll(strchr(at, '}') + 2) : -1;
}

static int which_generation(const char *id) {
    for (int g = 0; g < 2; g++)
        if (!strcmp(id, gen_id[g])) return g;
    return -1;
}

static int setup(void **state) {
    (void)state;
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n < 0) return -1;
    self_path[n] = '\0';
    harness_init(&h, self_path);
    for (int g = 0; g < 2; g++) {
        snprintf(corpus[g], sizeof corpus[g], "%s/corpus-%c.jsonl", h.work_dir, PREFIX[g]);
        snprintf(gen_dir[g], sizeof gen_dir[g], "%s/gen-%c", h.work_dir, PREFIX[g]);
        snprintf(parts_dir[g], sizeof parts_dir[g], "%s/parts-%c", h.work_dir, PREFIX[g]);
        /* different documents and sizes: different answers, statistics and content hashes */
        if (support_write_corpus(corpus[g], PREFIX[g], 11 + (uint64_t)g, DOCS + 500 * (uint32_t)g) != 0 ||
            support_run_command("'%s/bin/isn-index' build --quiet --input '%s' --out '%s' >/dev/null", h.build_dir, corpus[g],
                        gen_dir[g]) ||
            support_run_command("'%s/bin/isn-index' build --quiet --input '%s' --out '%s' --partitions 2 >/dev/null", h.build_dir,
                        corpus[g], parts_dir[g]))
            return -1;
        if (support_content_hash(gen_dir[g], gen_id[g], sizeof gen_id[g]) != 0) return -1;
    }
    if (!strcmp(gen_id[0], gen_id[1])) return -1;
    snprintf(h.index_dir, sizeof h.index_dir, "%s/live", h.work_dir);
    if (mkdir(h.index_dir, 0755) != 0) return -1;
    install_generation(0);
    const char *extra[] = {"--set", "log.level=info", NULL};
    return harness_start(&h, NULL, extra);
}

static int teardown(void **state) {
    (void)state;
    int status = h.pid > 0 ? harness_stop(&h) : 0;
    if (status != 0) harness_dump_log(&h);
    harness_cleanup(&h);
    return status == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ the querying client */

typedef struct {
    const char *address;
    atomic_bool stop;
    atomic_int moving_to; /* the generation the GPU moves to (-1: none): its replies must come from the GPU */
    uint64_t replies[2], failures, wrong_generation, moving_to_on_cpu;
    char first_failure[600];
} querier;

static void record_failure(querier *q, const char *fmt, ...) {
    if (q->failures++ || q->wrong_generation) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->first_failure, sizeof q->first_failure, fmt, ap);
    va_end(ap);
}

static void *query_loop(void *arg) {
    querier *q = arg;
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(q->address, 5000, err, sizeof err);
    if (!client) {
        record_failure(q, "connect: %s", err);
        return NULL;
    }
    for (uint32_t i = 0; !atomic_load(&q->stop); i++) {
        isn_grpc_search_request rq = {.query = QUERIES[i % NUM_QUERIES], .k = 10, .timeout_ms = 5000};
        isn_grpc_search_reply reply;
        if (isn_grpc_search(client, &rq, &reply, err, sizeof err) != 0) {
            record_failure(q, "query %u: transport: %s", i, err);
            isn_grpc_close(client);
            client = isn_grpc_connect(q->address, 5000, err, sizeof err);
            if (!client) return NULL;
            continue;
        }
        int g = which_generation(reply.generation);
        if (reply.status != 0) record_failure(q, "query %u: status %d: %s", i, reply.status, reply.message);
        else if (g < 0) record_failure(q, "query %u: reply names generation \"%s\"", i, reply.generation);
        else {
            q->replies[g]++;
            q->moving_to_on_cpu += g == atomic_load(&q->moving_to) && !strcmp(reply.device, "cpu");
            for (uint32_t k = 0; k < reply.num_hits; k++)
                if (reply.hits[k].external_id[0] != PREFIX[g]) {
                    if (!q->wrong_generation++)
                        snprintf(q->first_failure, sizeof q->first_failure,
                                 "query %u names generation %s but hit %u is %s", i, reply.generation, k,
                                 reply.hits[k].external_id);
                    break;
                }
        }
        isn_grpc_search_reply_free(&reply);
    }
    isn_grpc_close(client);
    return NULL;
}

static void info_generation(isn_grpc_client *client, char *out, size_t len) {
    isn_grpc_info_reply info;
    char err[256];
    if (isn_grpc_info(client, NULL, 0, false, -1, &info, err, sizeof err) != 0 || info.status != 0)
        fail_msg("Info: %s", err);
    snprintf(out, len, "%s", info.generation);
    if (!info.generation_built_unix) fail_msg("Info carries no generation build time");
    isn_grpc_info_reply_free(&info);
}

/* ------------------------------------------------------------------ the tests */

static void test_twenty_swaps_under_load(void **state) {
    (void)state;
    querier q = {.address = h.grpc_address};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, query_loop, &q), 0);
    harness_sleep_ms(300); /* warm: the baseline is the serving process, not a cold one */
    long long rss_before = harness_rss_kib(h.pid), heap_before = harness_stat(&h, "heap_allocated_bytes");
    long long updates_before = cost_model_updates(&h);
    uint64_t replies_before = q.replies[0] + q.replies[1];
    for (int s = 1; s <= SWAPS; s++) {
        int g = s % 2;
        install_generation(g);
        assert_int_equal(kill(h.pid, SIGHUP), 0);
        if (!wait_log_count(&h, "serves new requests", (unsigned)s, 20000)) {
            harness_dump_log(&h);
            fail_msg("swap %d did not happen", s);
        }
        uint64_t seen = q.replies[g];
        for (int waited = 0; q.replies[g] < seen + 5 && waited < 2000; waited += 5) harness_sleep_ms(5);
    }
    harness_sleep_ms(100);
    atomic_store(&q.stop, true);
    pthread_join(thread, NULL);
    fprintf(stderr, "test_isnd_generations: %d swaps; replies %llu from A, %llu from B; %llu failed, %llu wrong\n", SWAPS,
            (unsigned long long)q.replies[0], (unsigned long long)q.replies[1], (unsigned long long)q.failures,
            (unsigned long long)q.wrong_generation);
    if (q.failures || q.wrong_generation) fail_msg("%s", q.first_failure);
    assert_true(q.replies[0] > 0 && q.replies[1] > 0);
    long long updates_after = cost_model_updates(&h);
    uint64_t replies_during = q.replies[0] + q.replies[1] - replies_before;
    fprintf(stderr, "test_isnd_generations: cost model updates %lld -> %lld over %llu replies\n", updates_before,
            updates_after, (unsigned long long)replies_during);
    /* The model goes on learning across swaps: from a spaced sample of the jobs (sched_learn_spaced),
     * so how many depends on the machine's speed, not the replies' count. */
    assert_true(updates_before > 0 && updates_after > updates_before);
    /* every replaced generation freed (the first one included), one index file mapped */
    if (!wait_log_count(&h, "unmapped and freed", SWAPS, 5000)) {
        harness_dump_log(&h);
        fail_msg("only %d of %d replaced generations were freed", harness_log_count(&h, "unmapped and freed"), SWAPS);
    }
    assert_int_equal(harness_stat(&h, "retiring"), 0);
    assert_int_equal(harness_stat(&h, "swaps_ok"), SWAPS);
    assert_int_equal(index_mappings(h.pid), 1);
    long long rss_after = harness_rss_kib(h.pid), heap_after = harness_stat(&h, "heap_allocated_bytes");
    fprintf(stderr, "test_isnd_generations: RSS %lld KiB before, %lld KiB after %d swaps; heap %lld -> %lld bytes\n",
            rss_before, rss_after, SWAPS, heap_before, heap_after);
    /* A generation of this index holds about 2 MB of heap (searchers sized for max_k, norms,
     * lexicon keys): twenty kept would be far past these bounds. */
    assert_true(heap_before > 0 && heap_after <= heap_before + 4 * 1024 * 1024);
#ifndef __SANITIZE_ADDRESS__ /* AddressSanitizer keeps freed memory in quarantine: RSS says nothing there */
    assert_true(rss_after <= rss_before + 16 * 1024);
#endif
    static char metrics[1 << 17];
    assert_int_equal(harness_http_get(&h, "/metrics", metrics, sizeof metrics), 200);
    char sample[128];
    snprintf(sample, sizeof sample, "isn_index_generation_info{generation=\"%s\"", gen_id[SWAPS % 2]);
    if (!strstr(metrics, sample)) fail_msg("/metrics lacks %s", sample);
    assert_non_null(strstr(metrics, "isn_index_swaps_total{result=\"ok\"} 20"));
    assert_non_null(strstr(metrics, "isn_index_swap_duration_seconds_count 20"));
}

/* Installs damaged bytes, SIGHUPs, and expects the refusal to name `section`; the old generation serves. */
static void expect_refused(isn_grpc_client *client, const uint8_t *data, size_t len, const char *section,
                           unsigned refusals) {
    char before[24], after[24];
    info_generation(client, before, sizeof before);
    install_bytes(data, len);
    assert_int_equal(kill(h.pid, SIGHUP), 0);
    if (!wait_log_count(&h, "index generation refused", refusals, 10000)) {
        harness_dump_log(&h);
        fail_msg("the damaged generation (%s) was not refused", section);
    }
    char line[4096];
    harness_log_last(&h, "index generation refused", line, sizeof line);
    if (!strstr(line, section)) fail_msg("the refusal does not name %s: %s", section, line);
    if (!strstr(line, "keeps serving")) fail_msg("the refusal does not say the old generation serves: %s", line);
    info_generation(client, after, sizeof after);
    assert_string_equal(before, after);
    isn_grpc_search_request rq = {.query = "search engine", .k = 10};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    assert_string_equal(reply.generation, before);
    assert_true(reply.num_hits > 0);
    isn_grpc_search_reply_free(&reply);
    char ready[64];
    assert_int_equal(harness_http_get(&h, "/readyz", ready, sizeof ready), 200);
}

static void test_bad_generations_refused(void **state) {
    (void)state;
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    char serving[24];
    info_generation(client, serving, sizeof serving);
    int other = 1 - which_generation(serving);
    size_t len;
    uint8_t *data = generation_bytes(other, &len);
    /* header (32 bytes), then 40-byte section entries: name[16], offset, bytes, checksum; postings is the 9th */
    uint64_t offset, bytes;
    memcpy(&offset, data + 32 + 8 * 40 + 16, 8);
    memcpy(&bytes, data + 32 + 8 * 40 + 24, 8);
    assert_true(bytes > 0 && offset + bytes <= len);
    data[offset + bytes / 2] ^= 0x5a;
    unsigned refused = (unsigned)harness_log_count(&h, "index generation refused");
    expect_refused(client, data, len, "section 'postings'", refused + 1);
    data[offset + bytes / 2] ^= 0x5a;
    uint32_t version = 99;
    memcpy(data + 8, &version, 4);
    expect_refused(client, data, len, "section 'header': format version 99", refused + 2);
    assert_int_equal(harness_stat(&h, "swaps_refused"), refused + 2);
    free(data);
    /* and a good one still swaps in */
    unsigned swaps = (unsigned)harness_log_count(&h, "serves new requests");
    install_generation(other);
    assert_int_equal(kill(h.pid, SIGHUP), 0);
    assert_true(wait_log_count(&h, "serves new requests", swaps + 1, 10000));
    char now[24];
    info_generation(client, now, sizeof now);
    assert_string_equal(now, gen_id[other]);
    isn_grpc_close(client);
}

static void assert_flip_link(const char *link, const char *target) {
    assert_int_equal(support_flip_link(link, target), 0);
}

static bool wait_generation(isn_grpc_client *client, const char *want, int timeout_ms) {
    return support_wait_generation(client, want, timeout_ms);
}

/* A harness whose index.path is work/current, a symbolic link to target (as a deploy tool keeps it). */
static void init_linked(harness *p, const char *target) { assert_int_equal(support_init_linked(p, self_path, target), 0); }

static void test_symlink_flip(void **state) {
    (void)state;
    harness linked;
    init_linked(&linked, gen_dir[0]);
    const char *extra[] = {"--set", "index.watch_interval=100ms", NULL};
    assert_int_equal(harness_start(&linked, NULL, extra), 0);
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(linked.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    assert_true(wait_generation(client, gen_id[0], 1000));
    for (int flip = 1; flip <= 4; flip++) {
        int g = flip % 2;
        assert_flip_link(linked.index_dir, gen_dir[g]);
        if (!wait_generation(client, gen_id[g], 5000)) {
            harness_dump_log(&linked);
            fail_msg("flip %d: the link's new target was not swapped in", flip);
        }
        isn_grpc_search_request rq = {.query = "wind tunnel", .k = 5};
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
        assert_int_equal(reply.status, 0);
        assert_string_equal(reply.generation, gen_id[g]);
        for (uint32_t k = 0; k < reply.num_hits; k++) assert_int_equal(reply.hits[k].external_id[0], PREFIX[g]);
        isn_grpc_search_reply_free(&reply);
    }
    assert_true(harness_log_has(&linked, "index.path watch: index generation"));
    isn_grpc_close(client);
    assert_int_equal(harness_stop(&linked), 0);
    harness_cleanup(&linked);
}

/* Rankers are bound to the index's fields: after a swap (and the old generation freed) a SIGHUP
 * reloads them against the new generation, and re-ranked queries answer from it. */
static void test_rankers_follow_the_swap(void **state) {
    (void)state;
    harness ranked;
    init_linked(&ranked, gen_dir[0]);
    char rankers[PATH_MAX + 32], examples[PATH_MAX];
    snprintf(rankers, sizeof rankers, "%s/../examples/rankers", ranked.build_dir);
    if (!realpath(rankers, examples)) fail_msg("%s: %s", rankers, strerror(errno));
    snprintf(rankers, sizeof rankers, "rerank.ranker_dir=%s", examples);
    const char *extra[] = {"--set", rankers, "--set", "index.watch_interval=0", NULL};
    assert_int_equal(harness_start(&ranked, NULL, extra), 0);
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(ranked.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    assert_flip_link(ranked.index_dir, gen_dir[1]);
    assert_int_equal(kill(ranked.pid, SIGHUP), 0);
    assert_true(wait_log_count(&ranked, "unmapped and freed", 1, 10000));
    assert_int_equal(kill(ranked.pid, SIGHUP), 0); /* rankers reloaded: against the new generation */
    assert_true(wait_log_count(&ranked, "SIGHUP: 1 rankers serving", 2, 10000));
    isn_grpc_search_request rq = {.query = "wind tunnel", .k = 5, .ranker = "linear", .n1 = 50};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
    if (reply.status != 0) fail_msg("re-ranked query after the swap: %d %s", reply.status, reply.message);
    assert_string_equal(reply.generation, gen_id[1]);
    assert_true(reply.num_hits > 0);
    for (uint32_t k = 0; k < reply.num_hits; k++) assert_int_equal(reply.hits[k].external_id[0], 'b');
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(client);
    assert_int_equal(harness_stop(&ranked), 0);
    harness_cleanup(&ranked);
}

/* [gpu] enable (the emulated device): the next generation is uploaded beside the current one before
 * the switch, and its queries wait for the GPU's move (held open 20 ms by ISN_GPU_MOVE_PAUSE_MS) rather
 * than run on the CPU workers, which on a large partition answer a small share of the GPU's rate;
 * every reply's hits are the generation's it names. */
static void expect_answer(isn_grpc_client *client, int g, const char *device) {
    char err[256];
    isn_grpc_search_request rq = {.query = "search engine", .k = 10};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
    if (reply.status != 0) fail_msg("status %d: %s", reply.status, reply.message);
    assert_string_equal(reply.generation, gen_id[g]);
    if (device && strcmp(reply.device, device))
        fail_msg("generation %s answered on %s, expected %s", reply.generation, reply.device, device);
    assert_true(reply.num_hits > 0);
    for (uint32_t k = 0; k < reply.num_hits; k++) assert_int_equal(reply.hits[k].external_id[0], PREFIX[g]);
    isn_grpc_search_reply_free(&reply);
}

/* A thread's nice value from /proc/PID/task/TID/stat (the 19th field, counted past the name's closing
 * parenthesis, since a name may hold spaces); INT_MIN when it cannot be read. */
static int thread_nice(pid_t pid, const char *tid) {
    char path[300], line[1024];
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, tid);
    FILE *f = fopen(path, "r");
    if (!f) return INT_MIN;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *at = strrchr(line, ')');
    int nice = INT_MIN;
    /* after ") ": state, ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt, majflt, cmajflt, utime,
     * stime, cutime, cstime, priority, nice */
    if (at && sscanf(at + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %d", &nice) != 1)
        nice = INT_MIN;
    return nice;
}

/* After swaps, every thread of isnd at the priority isnd started with (with scheduler.worker_nice 0, the
 * workers' too): a swap lowers only threads it starts for the open and the GPU's layout, which end with
 * it, never the threads that serve. */
static void assert_no_thread_lowered(pid_t pid) {
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    char main_tid[16];
    snprintf(main_tid, sizeof main_tid, "%d", (int)pid);
    const int started_with = thread_nice(pid, main_tid);
    assert_int_not_equal(started_with, INT_MIN);
    DIR *tasks = opendir(dir);
    assert_non_null(tasks);
    unsigned lowered = 0, threads = 0;
    char first[400] = "";
    for (struct dirent *e; (e = readdir(tasks));) {
        if (e->d_name[0] == '.') continue;
        int nice = thread_nice(pid, e->d_name);
        if (nice == INT_MIN) continue; /* ended meanwhile */
        threads++;
        if (nice == started_with) continue;
        if (!lowered++) {
            char comm[32];
            harness_thread_name(pid, e->d_name, comm, sizeof comm);
            snprintf(first, sizeof first, "thread %s (%s) at nice %d", e->d_name, comm, nice);
        }
    }
    closedir(tasks);
    if (lowered)
        fail_msg("after the swaps %u of isnd's %u threads run at another priority than isnd's %d, e.g. %s", lowered,
                 threads, started_with, first);
}

static void test_gpu_keeps_answering(void **state) {
    (void)state;
    harness gpu;
    init_linked(&gpu, gen_dir[0]);
    const char *extra[] = {"--set", "gpu.enable=true", "--set", "gpu.emulate=true", "--set", "gpu.route_all=true",
                           "--set", "index.watch_interval=100ms", "--set", "scheduler.worker_nice=0", NULL};
    setenv("ISN_GPU_MOVE_PAUSE_MS", "20", 1);
    assert_int_equal(harness_start(&gpu, NULL, extra), 0);
    unsetenv("ISN_GPU_MOVE_PAUSE_MS");
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(gpu.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    char uploaded[120]; /* the first upload comes after ready */
    snprintf(uploaded, sizeof uploaded, "gpu: the first stage serves generation %s on 1 of 1 devices", gen_id[0]);
    if (!harness_wait_log(&gpu, uploaded, 30000)) {
        harness_dump_log(&gpu);
        fail_msg("the GPU first stage did not upload generation %s", gen_id[0]);
    }
    expect_answer(client, 0, "gpu");
    querier q = {.address = gpu.grpc_address, .moving_to = -1}; /* queries all along: each reply's hits its generation's */
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, query_loop, &q), 0);
    for (int flip = 1; flip <= 4; flip++) {
        int g = flip % 2;
        atomic_store(&q.moving_to, g);
        assert_flip_link(gpu.index_dir, gen_dir[g]);
        assert_true(wait_generation(client, gen_id[g], 5000));
        expect_answer(client, g, "gpu");
        char moved[80];
        snprintf(moved, sizeof moved, "gpu: the first stage serves generation %s (", gen_id[g]);
        if (!wait_log_count(&gpu, moved, (unsigned)(flip + 1) / 2, 10000)) {
            harness_dump_log(&gpu);
            fail_msg("flip %d: the GPU did not move to generation %s", flip, gen_id[g]);
        }
        expect_answer(client, g, "gpu");
    }
    assert_int_equal(harness_log_count(&gpu, "uploaded before the switch"), 4);
    atomic_store(&q.stop, true);
    pthread_join(thread, NULL);
    fprintf(stderr,
            "test_isnd_generations: GPU swaps: replies %llu from A, %llu from B; %llu failed, %llu wrong, %llu of the "
            "generation moved to answered on the CPU\n",
            (unsigned long long)q.replies[0], (unsigned long long)q.replies[1], (unsigned long long)q.failures,
            (unsigned long long)q.wrong_generation, (unsigned long long)q.moving_to_on_cpu);
    if (q.failures || q.wrong_generation) fail_msg("%s", q.first_failure);
    if (q.moving_to_on_cpu) fail_msg("%llu queries of the generation the GPU moved to ran on the CPU workers",
                                     (unsigned long long)q.moving_to_on_cpu);
    assert_no_thread_lowered(gpu.pid);
    isn_grpc_close(client);
    assert_int_equal(harness_stop(&gpu), 0);
    harness_cleanup(&gpu);
}

static bool close_enough(float a, float b) {
    double diff = fabs((double)a - (double)b), scale = fmax(fabs((double)a), fabs((double)b));
    return diff <= 1e-5 * fmax(scale, 1e-6);
}

static void test_agg_refreshes_global_stats(void **state) {
    (void)state;
    harness nodes[2], aggregator;
    char addresses[2][80];
    const char *partitions[3] = {addresses[0], addresses[1], NULL};
    for (int p = 0; p < 2; p++) {
        char target[PATH_MAX + 32];
        snprintf(target, sizeof target, "%s/part-%04d", parts_dir[0], p);
        init_linked(&nodes[p], target);
        char id[16];
        snprintf(id, sizeof id, "%d", p);
        const char *extra[] = {"--partition-id", id, "--workers", "1", "--set", "index.watch_interval=100ms", NULL};
        assert_int_equal(harness_start(&nodes[p], NULL, extra), 0);
        snprintf(addresses[p], sizeof addresses[p], "%s", nodes[p].grpc_address);
    }
    harness_init(&aggregator, self_path);
    const char *agg_extra[] = {"--stats-listen", "", "--global-stats", NULL};
    assert_int_equal(harness_start_agg(&aggregator, partitions, agg_extra), 0);
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(aggregator.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    /* the old generation's statistics go into isn-agg's cache */
    for (uint32_t i = 0; i < NUM_QUERIES; i++) {
        isn_grpc_search_request rq = {.query = QUERIES[i], .k = 10};
        isn_grpc_search_reply reply;
        assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
        assert_int_equal(reply.status, 0);
        isn_grpc_search_reply_free(&reply);
    }
    /* a rolling swap: one partition, then the other */
    for (int p = 0; p < 2; p++) {
        char target[PATH_MAX + 32], want[24];
        snprintf(target, sizeof target, "%s/part-%04d", parts_dir[1], p);
        assert_int_equal(support_content_hash(target, want, sizeof want), 0);
        assert_flip_link(nodes[p].index_dir, target);
        isn_grpc_client *node = isn_grpc_connect(nodes[p].grpc_address, 5000, err, sizeof err);
        assert_non_null(node);
        if (!wait_generation(node, want, 5000)) fail_msg("partition %d did not swap", p);
        isn_grpc_close(node);
    }
    char reference_err[ISN_ERR_LEN];
    isn_index *reference = isn_index_open(gen_dir[1], reference_err, sizeof reference_err);
    assert_non_null(reference);
    isn_searcher *searcher = isn_searcher_new(reference);
    /* The first reply of each partition's new generation drops the cache: from the next query on,
     * merged scores equal the unpartitioned new index's. */
    for (int round = 0; round < 2; round++)
        for (uint32_t i = 0; i < NUM_QUERIES; i++) {
            isn_grpc_search_request rq = {.query = QUERIES[i], .k = 10};
            isn_grpc_search_reply reply;
            assert_int_equal(isn_grpc_search(client, &rq, &reply, err, sizeof err), 0);
            assert_int_equal(reply.status, 0);
            if (round == 0) {
                isn_grpc_search_reply_free(&reply);
                continue;
            }
            isn_search_options options;
            isn_search_options_default(&options);
            options.k = 10;
            isn_query query;
            isn_hit hits[10];
            uint32_t n = 0;
            assert_int_equal(harness_offline_search(searcher, QUERIES[i], &options, &query, hits, &n), 0);
            if (reply.num_hits != n) fail_msg("\"%s\": %u merged hits, %u unpartitioned", QUERIES[i], reply.num_hits, n);
            for (uint32_t k = 0; k < n; k++) {
                assert_int_equal(reply.hits[k].external_id[0], 'b');
                if (!close_enough(reply.hits[k].score, hits[k].score))
                    fail_msg("\"%s\" rank %u: merged score %.9g, unpartitioned %.9g", QUERIES[i], k,
                             (double)reply.hits[k].score, (double)hits[k].score);
            }
            isn_grpc_search_reply_free(&reply);
        }
    isn_searcher_free(searcher);
    isn_index_close(reference);
    isn_grpc_close(client);
    assert_int_equal(harness_stop(&aggregator), 0);
    harness_cleanup(&aggregator);
    for (int p = 0; p < 2; p++) {
        assert_int_equal(harness_stop(&nodes[p]), 0);
        harness_cleanup(&nodes[p]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_twenty_swaps_under_load),
        cmocka_unit_test(test_bad_generations_refused),
        cmocka_unit_test(test_symlink_flip),
        cmocka_unit_test(test_rankers_follow_the_swap),
        cmocka_unit_test(test_gpu_keeps_answering),
        cmocka_unit_test(test_agg_refreshes_global_stats),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
