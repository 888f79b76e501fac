#include "tests/support/isnd_harness.h"

#include <sys/resource.h>

#include "base/base.h"
#include "tests/support/files.h"

/* A child that did not start (or is no longer wanted) must not outlive the test. */
static void harness_kill(harness *h) {
    if (h->pid <= 0) return;
    kill(h->pid, SIGKILL);
    waitpid(h->pid, NULL, 0);
    h->pid = -1;
}

int64_t harness_now_ms(void) { return (int64_t)(isn_now_ns() / 1000000); }

void harness_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* The build directory is the test program's grandparent: BUILD/tests/test_x -> BUILD. */
void harness_init(harness *h, const char *argv0) {
    memset(h, 0, sizeof *h);
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", argv0);
    char *tests_dir = dirname(copy);
    snprintf(h->build_dir, sizeof h->build_dir, "%s", dirname(tests_dir));
    snprintf(h->work_dir, sizeof h->work_dir, "/tmp/isnd_test_XXXXXX");
    if (!mkdtemp(h->work_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(h->index_dir, sizeof h->index_dir, "%s/index", h->work_dir);
    h->pid = -1;
}

/* ------------------------------------------------------------------ test index */

static uint64_t harness_rng = 42;

void harness_seed(uint64_t seed) { harness_rng = seed; }
uint32_t harness_random(uint32_t bound) {
    uint64_t z = (harness_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) % bound);
}

static const char *const HARNESS_WORDS[] = {
    "search", "engine", "index", "query", "ranking", "document", "score", "partition", "wind", "tunnel",
    "flow", "boundary", "layer", "pressure", "wing", "supersonic", "heat", "transfer", "running", "runs",
    "connection", "connected", "connects", "aggregator", "server", "latency", "throughput", "the", "of", "and",
};
#define HARNESS_NUM_WORDS (sizeof HARNESS_WORDS / sizeof HARNESS_WORDS[0])

/* Zipf-like: low ranks much more frequent; many ties in scores, which tests tie order too. */
const char *harness_word(void) {
    uint32_t r = harness_random(1000);
    uint32_t rank = (uint32_t)((double)HARNESS_NUM_WORDS * (double)r * r / 1e6);
    if (rank >= HARNESS_NUM_WORDS) rank = HARNESS_NUM_WORDS - 1;
    static char synthetic[16];
    if (harness_random(4) == 0) { /* a long tail of rarer terms */
        snprintf(synthetic, sizeof synthetic, "t%u", harness_random(400));
        return synthetic;
    }
    return HARNESS_WORDS[rank];
}

void harness_build_index(harness *h, uint32_t num_docs) { harness_build_scored_index(h, num_docs, NULL); }

void harness_build_scored_index(harness *h, uint32_t num_docs, float (*static_score)(uint32_t doc)) {
    isn_build_options options;
    isn_build_options_default(&options);
    options.num_fields = 2;
    strcpy(options.fields[0], "title");
    strcpy(options.fields[1], "body");
    options.progress = false;
    if (static_score) {
        strcpy(options.static_score_field, "rank");
        options.order = ISN_ORDER_GLOBAL;
    }
    isn_builder *builder = isn_builder_new(&options);
    if (!builder) {
        fprintf(stderr, "harness: isn_builder_new failed\n");
        exit(1);
    }
    char err[ISN_ERR_LEN], id[32], title[256], body[4096];
    harness_rng = 42;
    for (uint32_t d = 0; d < num_docs; d++) {
        snprintf(id, sizeof id, "doc-%05u", d);
        size_t tn = 0, bn = 0;
        for (uint32_t i = 0, n = 2 + harness_random(4); i < n; i++)
            tn += (size_t)snprintf(title + tn, sizeof title - tn, "%s ", harness_word());
        for (uint32_t i = 0, n = 5 + harness_random(60); i < n && bn < sizeof body - 32; i++)
            bn += (size_t)snprintf(body + bn, sizeof body - bn, "%s ", harness_word());
        const char *fields[2] = {title, body};
        size_t lens[2] = {tn, bn};
        if (isn_builder_add(builder, id, fields, lens, static_score ? static_score(d) : 0.0f, err, sizeof err) != 0) {
            fprintf(stderr, "harness: isn_builder_add: %s\n", err);
            exit(1);
        }
    }
    isn_build_summary summary;
    if (isn_builder_write(builder, h->index_dir, &summary, err, sizeof err) != 0) {
        fprintf(stderr, "harness: isn_builder_write: %s\n", err);
        exit(1);
    }
    isn_builder_free(builder);
}

/* ------------------------------------------------------------------ the daemon */

void harness_dump_log(const harness *h) {
    FILE *f = fopen(h->log_path, "r");
    if (!f) return;
    char line[2048];
    fprintf(stderr, "---- isnd log (%s)\n", h->log_path);
    while (fgets(line, sizeof line, f)) fputs(line, stderr);
    fprintf(stderr, "----\n");
    fclose(f);
}

/* Whether the log contains `needle`. */
int harness_log_line(const harness *h, const char *needle) {
    FILE *f = fopen(h->log_path, "r");
    if (!f) return 0;
    char line[2048];
    int number = 0, found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        number++;
        if (strstr(line, needle)) found = number;
    }
    fclose(f);
    return found;
}

bool harness_log_has(const harness *h, const char *needle) { return harness_log_line(h, needle) != 0; }

int harness_log_count(const harness *h, const char *needle) {
    FILE *f = fopen(h->log_path, "r");
    if (!f) return 0;
    char line[2048];
    int count = 0;
    while (fgets(line, sizeof line, f)) count += strstr(line, needle) != NULL;
    fclose(f);
    return count;
}

void harness_log_last(const harness *h, const char *needle, char *out, size_t len) {
    FILE *f = fopen(h->log_path, "r");
    out[0] = '\0';
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) snprintf(out, len, "%s", line);
    fclose(f);
}

int harness_wait_log(const harness *h, const char *needle, int timeout_ms) {
    int64_t deadline = harness_now_ms() + timeout_ms;
    int line;
    while (!(line = harness_log_line(h, needle)) && harness_now_ms() < deadline) harness_sleep_ms(20);
    return line;
}

/* Runs argv[0] as a child with stdout and stderr to h->log_path; its pid (also in h->pid), or -1. */
static pid_t spawn_logged(harness *h, const char *const *argv) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(h->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "execv %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    h->pid = pid;
    return pid;
}

/* Starts isnd with the test index on ephemeral ports plus `extra` arguments (NULL-terminated) and
 * waits until it logs "ready:" (or `wait_for` when given). Returns 0, or -1 after dumping the log. */
int harness_start(harness *h, const char *wait_for, const char *const *extra) {
    static int run = 0;
    snprintf(h->log_path, sizeof h->log_path, "%s/isnd-%d.log", h->work_dir, run++);
    char isnd[PATH_MAX + 16];
    snprintf(isnd, sizeof isnd, "%s/bin/isnd", h->build_dir);
    const char *argv[64] = {isnd, "--index", h->index_dir, "--listen", "127.0.0.1:0", "--stats-listen", "127.0.0.1:0",
                            "--workers", "2"};
    int argc = 9;
    for (int i = 0; extra && extra[i] && argc < 62; i++) argv[argc++] = extra[i];
    /* ISN_TEST_ISND_ARGS="--log-level debug": more arguments for every daemon the tests start. */
    static char env_args[1024];
    const char *env = getenv("ISN_TEST_ISND_ARGS");
    if (env) {
        snprintf(env_args, sizeof env_args, "%s", env);
        char *save = NULL;
        for (char *arg = strtok_r(env_args, " ", &save); arg && argc < 62; arg = strtok_r(NULL, " ", &save))
            argv[argc++] = arg;
    }
    argv[argc] = NULL;
    pid_t pid = spawn_logged(h, argv);
    if (pid < 0) return -1;
    h->grpc_port = h->stats_port = 0;
    const char *ready = wait_for ? wait_for : "ready:";
    int64_t deadline = harness_now_ms() + 30000;
    while (harness_now_ms() < deadline) {
        FILE *f = fopen(h->log_path, "r");
        char line[2048];
        bool is_ready = false;
        while (f && fgets(line, sizeof line, f)) {
            const char *p;
            if ((p = strstr(line, "gRPC listening on 127.0.0.1:"))) h->grpc_port = atoi(p + strlen("gRPC listening on 127.0.0.1:"));
            if ((p = strstr(line, "stats listening on http://127.0.0.1:")))
                h->stats_port = atoi(p + strlen("stats listening on http://127.0.0.1:"));
            if ((p = strstr(line, "stats listening on https://127.0.0.1:")))
                h->stats_port = atoi(p + strlen("stats listening on https://127.0.0.1:"));
            if (strstr(line, ready)) is_ready = true;
        }
        if (f) fclose(f);
        if (is_ready && h->grpc_port) {
            snprintf(h->grpc_address, sizeof h->grpc_address, "127.0.0.1:%d", h->grpc_port);
            return 0;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "harness: isnd exited early (status %d)\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            h->pid = -1;
            harness_dump_log(h);
            return -1;
        }
        harness_sleep_ms(20);
    }
    fprintf(stderr, "harness: isnd not ready within 30 s\n");
    harness_dump_log(h);
    harness_kill(h);
    return -1;
}

/* Starts isn-agg (h from harness_init; its log goes to h's work dir) on ephemeral ports in front of
 * `partitions` (NULL-terminated, one "HOST:PORT[,HOST:PORT...]" each) plus `extra` arguments, and
 * waits for its "started:" line, which names both ports (and its readiness, as /readyz says it). 0, or -1 after dumping the log. The other
 * harness calls (stop, wait, HTTP GETs, log) work on it as on isnd. */
int harness_start_agg(harness *h, const char *const *partitions, const char *const *extra) {
    snprintf(h->log_path, sizeof h->log_path, "%s/isn-agg.log", h->work_dir);
    char isn_agg[PATH_MAX + 16];
    snprintf(isn_agg, sizeof isn_agg, "%s/bin/isn-agg", h->build_dir);
    const char *argv[64] = {isn_agg, "--listen", "127.0.0.1:0", "--stats-listen", "127.0.0.1:0"};
    int argc = 5;
    for (int i = 0; partitions[i] && argc < 60; i++) {
        argv[argc++] = "--partition";
        argv[argc++] = partitions[i];
    }
    for (int i = 0; extra && extra[i] && argc < 62; i++) argv[argc++] = extra[i];
    argv[argc] = NULL;
    unlink(h->log_path); /* a harness started before: its ready line must not be read as this one's */
    if (spawn_logged(h, argv) < 0) return -1;
    h->grpc_port = h->stats_port = 0;
    for (int64_t deadline = harness_now_ms() + 30000; harness_now_ms() < deadline; harness_sleep_ms(20)) {
        FILE *f = fopen(h->log_path, "r");
        char line[2048];
        const char *p;
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, "started:") && (p = strstr(line, "gRPC port "))) {
                h->grpc_port = atoi(p + strlen("gRPC port "));
                if ((p = strstr(line, "stats port "))) h->stats_port = atoi(p + strlen("stats port "));
            }
        if (f) fclose(f);
        if (h->grpc_port) {
            snprintf(h->grpc_address, sizeof h->grpc_address, "127.0.0.1:%d", h->grpc_port);
            return 0;
        }
        int status;
        if (waitpid(h->pid, &status, WNOHANG) == h->pid) {
            fprintf(stderr, "harness: isn-agg exited early (status %d)\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            h->pid = -1;
            break;
        }
    }
    if (h->pid > 0) fprintf(stderr, "harness: isn-agg not started within 30 s\n");
    harness_dump_log(h);
    harness_kill(h);
    return -1;
}

/* Waits for the daemon to exit (after a signal); returns its exit status, or -1 on timeout/crash. */
int harness_wait_exit(harness *h, int timeout_ms) {
    int64_t deadline = harness_now_ms() + timeout_ms;
    while (h->pid > 0) {
        int status;
        pid_t r = waitpid(h->pid, &status, WNOHANG);
        if (r == h->pid) {
            h->pid = -1;
            if (WIFEXITED(status)) return WEXITSTATUS(status);
            fprintf(stderr, "harness: isnd died by signal %d\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
            harness_dump_log(h);
            return -1;
        }
        if (harness_now_ms() > deadline) {
            fprintf(stderr, "harness: isnd did not exit within %d ms\n", timeout_ms);
            harness_dump_log(h);
            return -1;
        }
        harness_sleep_ms(10);
    }
    return -1;
}

/* SIGTERM and wait: the exit status (0 = drained cleanly). */
int harness_stop(harness *h) {
    if (h->pid <= 0) return -1;
    kill(h->pid, SIGTERM);
    return harness_wait_exit(h, 30000);
}

/* A daemon the test still counted as running must not have exited on its own: when it did (a crash,
 * a sanitizer's report), its log is the only account of why, and the work dir is about to go. */
static void report_unexpected_exit(harness *h) {
    int status;
    if (h->pid <= 0 || waitpid(h->pid, &status, WNOHANG) != h->pid) return;
    h->pid = -1;
    if (WIFSIGNALED(status))
        fprintf(stderr, "harness: %s had died by signal %d before the test ended\n", h->log_path, WTERMSIG(status));
    else
        fprintf(stderr, "harness: %s had exited (status %d) before the test ended\n", h->log_path,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    harness_dump_log(h);
}

void harness_cleanup(harness *h) {
    report_unexpected_exit(h);
    harness_kill(h);
    if (!getenv("ISN_KEEP_TEST_DIR") && support_remove_tree(h->work_dir) != 0)
        fprintf(stderr, "harness: could not remove %s\n", h->work_dir);
}

/* ------------------------------------------------------------------ sockets */

int harness_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads until EOF or timeout; returns bytes read, or -1 on timeout without EOF. */
ssize_t harness_read_until_close(int fd, char *buf, size_t cap, int timeout_ms) {
    size_t n = 0;
    int64_t deadline = harness_now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(deadline - harness_now_ms());
        if (left <= 0) return -1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, left) <= 0) continue;
        char scratch[4096];
        char *dst = n < cap ? buf + n : scratch;
        size_t room = n < cap ? cap - n : sizeof scratch;
        ssize_t r = recv(fd, dst, room, 0);
        if (r == 0) return (ssize_t)n;
        if (r < 0) return errno == ECONNRESET ? (ssize_t)n : -1;
        if (dst != scratch) n += (size_t)r;
    }
}

/* GET http://127.0.0.1:stats_port/path; body (NUL-terminated) into buf. Returns the HTTP status or -1. */
int harness_http_get(const harness *h, const char *path, char *buf, size_t cap) {
    int fd = harness_connect(h->stats_port);
    if (fd < 0) return -1;
    char request[512];
    int n = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
    if (send(fd, request, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return -1;
    }
    ssize_t got = harness_read_until_close(fd, buf, cap - 1, 10000);
    close(fd);
    if (got < 0) return -1;
    buf[got] = '\0';
    int status = -1;
    if (sscanf(buf, "HTTP/1.1 %d", &status) != 1) return -1;
    char *body = strstr(buf, "\r\n\r\n");
    if (body) memmove(buf, body + 4, strlen(body + 4) + 1);
    return status;
}

/* The number right after `needle` in the stats page at `path`, or -1. */
static long long number_after(const harness *h, const char *path, const char *needle) {
    static char page[1 << 18];
    if (harness_http_get(h, path, page, sizeof page) != 200) return -1;
    const char *p = strstr(page, needle);
    return p ? atoll(p + strlen(needle)) : -1;
}

/* A numeric field of /stats ("open_streams", "resident_memory_bytes"...), or -1. */
long long harness_stat(const harness *h, const char *field) {
    char needle[80];
    snprintf(needle, sizeof needle, "\"%s\":", field);
    return number_after(h, "/stats", needle);
}

long long harness_rss_kib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = atoll(line + 6);
    if (f) fclose(f);
    return kib;
}

void harness_thread_name(pid_t pid, const char *tid, char *name, size_t len) {
    char path[300];
    snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, tid);
    name[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fgets(name, (int)len, f)) name[strcspn(name, "\n")] = '\0';
    fclose(f);
}

long long harness_metric(const harness *h, const char *sample) {
    char needle[256];
    snprintf(needle, sizeof needle, "\n%s ", sample);
    return number_after(h, "/metrics", needle);
}

double harness_metric_value(const harness *h, const char *sample) {
    static char page[1 << 18];
    char needle[256];
    snprintf(needle, sizeof needle, "\n%s ", sample);
    if (harness_http_get(h, "/metrics", page, sizeof page) != 200) return -1;
    const char *p = strstr(page, needle);
    return p ? strtod(p + strlen(needle), NULL) : -1;
}

void harness_raise_open_files(uint32_t want) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= want) return;
    limit.rlim_cur = limit.rlim_max < want ? limit.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &limit);
}

void harness_prepare_init(harness *h) {
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len < 0) {
        perror("readlink /proc/self/exe");
        exit(1);
    }
    self[len] = '\0';
    harness_init(h, self);
}

void harness_prepare(harness *h, uint32_t num_docs) {
    harness_prepare_init(h);
    harness_build_index(h, num_docs);
}

int harness_open_offline(const harness *h, isn_index **index, isn_searcher **searcher) {
    char err[ISN_ERR_LEN];
    if (!(*index = isn_index_open(h->index_dir, err, sizeof err))) {
        fprintf(stderr, "open: %s\n", err);
        return -1;
    }
    *searcher = isn_searcher_new(*index);
    return 0;
}

int harness_offline_search(isn_searcher *searcher, const char *text, const isn_search_options *options,
                           isn_query *query, isn_hit *hits, uint32_t *num_hits) {
    char err[ISN_ERR_LEN];
    isn_search_stats stats;
    if (isn_query_parse(searcher, text, strlen(text), query, err, sizeof err) != 0 ||
        isn_search(searcher, query, options, hits, num_hits, &stats, err, sizeof err) != 0) {
        fprintf(stderr, "offline search for \"%s\": %s\n", text, err);
        return -1;
    }
    return 0;
}

isn_grpc_client *harness_start_connected(harness *h, const char *const *extra, const char *log_needle) {
    if (harness_start(h, NULL, extra) != 0) return NULL;
    if (log_needle && !harness_wait_log(h, log_needle, HARNESS_LOG_NEEDLE_MS)) {
        harness_dump_log(h);
        return NULL;
    }
    char err[ISN_ERR_LEN];
    isn_grpc_client *client = isn_grpc_connect(h->grpc_address, 5000, err, sizeof err);
    if (!client) fprintf(stderr, "connect to %s: %s\n", h->grpc_address, err);
    return client;
}

int harness_stop_checked(harness *h) {
    int status = harness_stop(h);
    if (status != 0) {
        fprintf(stderr, "isnd exit status %d after SIGTERM (expected 0)\n", status);
        harness_dump_log(h);
    }
    return status;
}

int harness_finish(harness *h, isn_grpc_client *client, isn_index *index, isn_searcher *searcher) {
    if (client) isn_grpc_close(client);
    if (searcher) isn_searcher_free(searcher);
    if (index) isn_index_close(index);
    int status = harness_stop_checked(h);
    harness_cleanup(h);
    return status == 0 ? 0 : -1;
}
