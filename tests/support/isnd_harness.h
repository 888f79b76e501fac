/* Shared by the integration tests (tests/integration/test_*.c): a deterministic test index, an isnd
 * child process on ephemeral loopback ports (found from its log), an isn-agg child in front of
 * such daemons, HTTP GETs to a stats port, and the offline engine for comparison. */
#ifndef ISN_TESTS_ISND_HARNESS_H
#define ISN_TESTS_ISND_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "grpc/client.h"
#include "index/index.h"
#include "ranking/ranking.h"

typedef struct {
    char build_dir[512];      /* build or build-asan */
    char work_dir[256];       /* temp dir: index, logs */
    char index_dir[512];
    char log_path[512];
    pid_t pid;
    int grpc_port, stats_port;
    char grpc_address[64];
} harness;

int64_t harness_now_ms(void);
void harness_sleep_ms(int ms);
void harness_init(harness *h, const char *argv0);
/* The deterministic generator behind harness_random and harness_word (seed 42 at start). */
void harness_seed(uint64_t seed);
uint32_t harness_random(uint32_t bound);
const char *harness_word(void);
void harness_build_index(harness *h, uint32_t num_docs);
/* The same documents with static_score(doc) as each one's static score, in global order (isn-index build
 * --static-score rank --order global); NULL: harness_build_index's index. */
void harness_build_scored_index(harness *h, uint32_t num_docs, float (*static_score)(uint32_t doc));
void harness_dump_log(const harness *h);
bool harness_log_has(const harness *h, const char *needle);
/* Waits up to timeout_ms for a log line with `needle`: its line number (from 1), or 0 when none came. */
int harness_wait_log(const harness *h, const char *needle, int timeout_ms);
/* The number (from 1) of the first log line with `needle`, or 0. */
int harness_log_line(const harness *h, const char *needle);
/* How many lines of the log contain `needle`. */
int harness_log_count(const harness *h, const char *needle);
/* The last line of the log that contains `needle`, into out ("" when none). */
void harness_log_last(const harness *h, const char *needle, char *out, size_t len);
int harness_start(harness *h, const char *wait_for, const char *const *extra);
int harness_start_agg(harness *h, const char *const *partitions, const char *const *extra);
int harness_wait_exit(harness *h, int timeout_ms);
int harness_stop(harness *h);
void harness_cleanup(harness *h);
int harness_connect(int port);
ssize_t harness_read_until_close(int fd, char *buf, size_t cap, int timeout_ms);
int harness_http_get(const harness *h, const char *path, char *buf, size_t cap);
long long harness_stat(const harness *h, const char *field);
/* A process's resident set (VmRSS) in KiB, or -1. */
long long harness_rss_kib(pid_t pid);
/* The name of thread tid (a /proc/PID/task entry) of process pid, "" when it has ended. */
void harness_thread_name(pid_t pid, const char *tid, char *name, size_t len);
/* One sample of the stats endpoint's /metrics ("isn_event_loops", "isn_requests_total{...}"), or -1. */
long long harness_metric(const harness *h, const char *sample);
/* The same for a sample that is not a whole number ("isn_loop_busy_seconds_total{loop=\"0\"}"), or -1. */
double harness_metric_value(const harness *h, const char *sample);


/* Start-up and shut-down the isnd tests share (built on the calls above, which stay as they are). */
/* harness_init for the running test program (found through /proc/self/exe, so a group setup can
 * call it). */
void harness_prepare_init(harness *h);
/* harness_prepare_init and harness_build_index. */
void harness_prepare(harness *h, uint32_t num_docs);
/* Raises this process's open-file limit to `want` (or its hard limit, if lower) when it is below: tests
 * that hold many connections open, and the daemons they start, inherit it. */
void harness_raise_open_files(uint32_t want);
/* Opens the test index for the offline engine: 0, or -1 with the reason on stderr. */
int harness_open_offline(const harness *h, isn_index **index, isn_searcher **searcher);
/* Parses `text` into `query` and runs the offline engine on it: 0, or -1 with the reason on stderr. */
int harness_offline_search(isn_searcher *searcher, const char *text, const isn_search_options *options,
                           isn_query *query, isn_hit *hits, uint32_t *num_hits);
/* Starts isnd with `extra`, waits up to HARNESS_LOG_NEEDLE_MS for its log to say `log_needle` (dumping
 * the log when it does not: a line a thread writes just after "ready:", as the GPU upload's first, may
 * not be there yet when isnd is ready), and connects a gRPC client. NULL on failure. */
#define HARNESS_LOG_NEEDLE_MS 10000
isn_grpc_client *harness_start_connected(harness *h, const char *const *extra, const char *log_needle);
/* SIGTERM, and on an exit status other than 0 says so and dumps the log. Returns the status. */
int harness_stop_checked(harness *h);
/* A test group's teardown: closes the client and the offline engine (any may be NULL), stops isnd
 * (harness_stop_checked) and removes the work directory. 0 when isnd exited with status 0. */
int harness_finish(harness *h, isn_grpc_client *client, isn_index *index, isn_searcher *searcher);

#endif
