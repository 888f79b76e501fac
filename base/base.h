/* What every part needs once: a monotonic clock, an error helper, HOST:PORT parsing, a hash, a
 * growable byte buffer, a line logger, the query-log and qrels readers, the Prometheus text writer
 * and a benchmark's latency tallies. Depends on nothing else in the tree; every folder may include
 * it. */
#ifndef ISN_BASE_H
#define ISN_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* ------------------------------------------------------------------ clock */

/* CLOCK_MONOTONIC in nanoseconds (what every deadline and latency is measured on). */
uint64_t isn_now_ns(void);
/* The same clock in seconds, for benchmarks. */
double isn_now_seconds(void);
/* CPU time of the calling thread in nanoseconds. */
uint64_t isn_thread_cpu_ns(void);
/* Wall-clock time (CLOCK_REALTIME) in Unix seconds. */
double isn_wall_seconds(void);
/* The same clock in nanoseconds: the clock of the kernel's socket timestamps (SO_TIMESTAMPNS). */
uint64_t isn_wall_ns(void);

/* The CPUs this process may use: those of its affinity mask (taskset, a cpuset), and no more than its
 * cgroup's CPU quota (cgroup v2 cpu.max or v1 cpu.cfs_quota_us over cpu.cfs_period_us, rounded up, the
 * least along the way to the root), at least 1. What default thread counts are sized by, rather than
 * the machine's online CPUs. */
uint32_t isn_cpus_available(void);
/* The CPUs of the calling thread's affinity mask, in increasing order: the first `max` into cpus; returns how
 * many it has (more than max when they did not fit), 0 when the kernel does not say. */
uint32_t isn_this_thread_cpus(int *cpus, uint32_t max);
/* Binds the calling thread to the n CPUs listed (sched_setaffinity); threads it starts later inherit them.
 * -1 with err when refused. */
int isn_bind_this_thread(const int *cpus, uint32_t n, char *err, size_t err_len);
/* A quota "QUOTA PERIOD" (cpu.max's form) as whole CPUs, rounded up; 0 for "max ..." or anything else. */
uint32_t isn_cpu_quota_cpus(const char *cpu_max);

/* Background work (an index's verification, a GPU's layout and upload) runs at the lowest priority, so
 * that it takes longer on a busy node instead of the queries. Linux gives each thread its own priority,
 * a thread inherits its creator's, and raising one back needs CAP_SYS_NICE: so a thread that goes on to
 * start threads that serve must not lower itself. isn_lower_this_thread lowers the calling thread (for
 * threads started for the work alone); isn_run_lowered runs work(arg) on a lowered thread of its own and
 * waits for it (on the caller's thread, at its priority, when no thread can be started). */
void isn_lower_this_thread(void);
void isn_run_lowered(void (*work)(void *), void *arg);

/* Threads that must answer at once when woken (the event loops) can ask the kernel for a short slice:
 * under EEVDF (Linux 6.12 and later) a woken thread with a shorter slice preempts one running a longer
 * one (a worker's) instead of waiting for that slice to end. isn_set_this_thread_slice sets the calling
 * thread's (ns, 100 us to 100 ms; 0 = the kernel's) and leaves threads it starts later at the kernel's;
 * -1 with err when the kernel refuses. isn_thread_slice_ns reads a thread's (tid, 0 = the caller), 0
 * where the kernel does not say (before 6.12) or the thread is not of the normal policy. */
int isn_set_this_thread_slice(uint64_t ns, char *err, size_t err_len);
uint64_t isn_thread_slice_ns(pid_t tid);
/* Or they can leave the normal policy for the real-time one: a SCHED_FIFO thread (priority 1-99) takes
 * a core from any normal thread the moment it is woken, slice or no slice. Needs CAP_SYS_NICE or an
 * RLIMIT_RTPRIO of at least the priority (systemd: LimitRTPRIO=); threads it starts later begin in the
 * normal policy. -1 with err when refused. isn_thread_realtime_priority reads a thread's (tid, 0 = the
 * caller): its SCHED_FIFO priority, 0 when it is of another policy. */
int isn_set_this_thread_realtime(int priority, char *err, size_t err_len);
int isn_thread_realtime_priority(pid_t tid);
/* The other way round, with no privilege: a thread of SCHED_IDLE gives its core at once to any thread of
 * the normal policy that wakes there, and the kernel counts a core running only such threads as idle
 * when it places a waking thread. Threads it starts later begin in the normal policy. -1 with err when
 * refused. isn_thread_has_idle_policy reads a thread's (tid, 0 = the caller). */
int isn_set_this_thread_idle_policy(char *err, size_t err_len);
bool isn_thread_has_idle_policy(pid_t tid);
/* How long thread tid of this process has waited, ready to run, for a CPU (the kernel's run delay, in
 * /proc/self/task/TID/schedstat), in ns; -1 where the kernel does not say. */
int64_t isn_thread_cpu_wait_ns(pid_t tid);

/* Saturating addition for deadlines: a huge timeout means "far away", never a
 * wrap to the past. */
static inline uint64_t isn_add_sat_u64(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* ------------------------------------------------------------------ errors */

/* Formats a message into err (when err_len > 0) and returns -1, so error paths read
 * `return isn_error(err, err_len, "...", ...);`. */
int isn_error(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int isn_verror(char *err, size_t err_len, const char *fmt, va_list ap);

/* ------------------------------------------------------------------ files */

/* Opens `path` read-only only when it is a regular file: with O_NONBLOCK, so that a FIFO or a
 * device cannot block the open (nor SIGTERM after it), then fstat. Returns the descriptor (blocking
 * again), or -1 with errno set: EISDIR for a directory, EINVAL for anything else not regular. */
int isn_open_regular(const char *path);
/* The same as a stdio stream (mode "r" or "rb"); NULL with errno set as above. */
FILE *isn_fopen_regular(const char *path, const char *mode);
/* A sentence for the errno of a failed isn_open_regular ("not a regular file" for EINVAL). */
const char *isn_open_regular_strerror(int error);

/* ------------------------------------------------------------------ addresses */

/* Splits HOST:PORT or [IPV6]:PORT (an IPv6 host must be in brackets; port 0 to 65535). 0, or -1
 * with err naming the address. */
int isn_parse_host_port(const char *text, char *host, size_t host_len, uint16_t *port, char *err, size_t err_len);

/* ------------------------------------------------------------------ hashing */

/* xxHash64 (seed 0): the one hash of the tree, also the index format's checksum. */
uint64_t isn_hash64(const void *data, size_t len);
uint64_t isn_hash_string(const char *text);

/* ------------------------------------------------------------------ memory */

/* calloc(count, size), with every page written now (one byte of each). A table that is probed (read) before it is
 * written maps the shared zero page at the first read and takes a copy-on-write fault at the first
 * write, which flushes that page from the TLB of every core the process runs on: with the index
 * builder's threads it cost several percent of the build. NULL when out of memory or on overflow. */
void *isn_calloc_written(size_t count, size_t size);

/* ------------------------------------------------------------------ striped counters */

/* A counter that many threads add to at once, each to a stripe on a cache line of its own (a thread
 * keeps the stripe it was first given), summed when read. Adding to one shared atomic from every
 * serving loop made each addition wait for the line to come from the core that added last. */
#define ISN_COUNTER_STRIPES 16
typedef struct {
    uint64_t value; /* read and written with __atomic builtins (this header is C++ too, in gpu/) */
    char pad[64 - sizeof(uint64_t)];
} isn_counter_stripe;
typedef struct {
    isn_counter_stripe stripes[ISN_COUNTER_STRIPES];
} isn_striped_counter;

/* The calling thread's stripe, 0..ISN_COUNTER_STRIPES-1 (threads take them in turn). */
uint32_t isn_counter_stripe_of_thread(void);
static inline void isn_striped_add(isn_striped_counter *counter, uint64_t n) {
    __atomic_fetch_add(&counter->stripes[isn_counter_stripe_of_thread()].value, n, __ATOMIC_RELAXED);
}
uint64_t isn_striped_sum(const isn_striped_counter *counter);

/* ------------------------------------------------------------------ byte buffer */

/* A growable byte buffer kept across uses, so steady-state traffic allocates nothing. */
typedef struct {
    uint8_t *data;
    size_t len;
    size_t cap;
} byte_buffer;

/* Makes room for `extra` more bytes; false when out of memory. */
bool buffer_reserve(byte_buffer *buffer, size_t extra);
bool buffer_append(byte_buffer *buffer, const void *data, size_t len);
bool buffer_printf(byte_buffer *buffer, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the storage when it grew beyond `keep` bytes (one huge reply must not pin memory). */
void buffer_clear(byte_buffer *buffer, size_t keep);
void buffer_free(byte_buffer *buffer);

/* ------------------------------------------------------------------ logging */

typedef enum {
    ISN_LOG_ERROR = 0,
    ISN_LOG_WARN = 1,
    ISN_LOG_INFO = 2,
    ISN_LOG_DEBUG = 3,
} isn_log_level;

/* "error", "warn", "info", "debug" ("?" out of range). */
const char *isn_log_level_name(isn_log_level level);
/* 0 and the level for one of those names, -1 otherwise. */
int isn_log_level_parse(const char *name, isn_log_level *level);

/* One line per event on stderr: "2025-01-31T12:00:00.123Z info  message". Safe from any thread. */
void log_set_level(isn_log_level level);
bool log_enabled(isn_log_level level);
void log_line(isn_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* JSON Lines instead of text, for log shippers: {"time":"...","level":"info","msg":"..."} per line. */
void log_set_json(bool json);
/* One record of named fields (an access log line, say): text "EVENT key=value key=\"two words\"",
 * or JSON {"time":...,"level":...,"event":EVENT,"key":"value",...}. `fields` holds n key, value pairs;
 * a NULL value is left out. */
void log_record(isn_log_level level, const char *event, const char *const *fields, size_t n);

#define log_error(...) log_line(ISN_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_line(ISN_LOG_WARN, __VA_ARGS__)
#define log_info(...) log_line(ISN_LOG_INFO, __VA_ARGS__)
#define log_debug(...) \
    do { \
        if (log_enabled(ISN_LOG_DEBUG)) log_line(ISN_LOG_DEBUG, __VA_ARGS__); \
    } while (0)

/* A warning that a peer can cause at will (a flood's every connection) is written at most once per
 * ISN_LOG_LIMIT_NS, saying how many of its kind were left out since the last one written; the counters
 * keep the full count. One limiter per kind of line and per thread that writes it (no locking). */
#define ISN_LOG_LIMIT_NS 1000000000ull
typedef struct {
    uint64_t written_ns; /* when the last line went out; 0: never */
    uint64_t left_out;   /* lines not written since then */
} isn_log_limiter;

/* Whether the line for an event at now_ns is written; when it is, *left_out is how many were not since
 * the last one written (else it is untouched). */
bool isn_log_limiter_allows(isn_log_limiter *limiter, uint64_t now_ns, uint64_t *left_out);

/* ------------------------------------------------------------------ query logs */

/* One query of a log: the text after the first TAB of a line, the id before it. Both lie in one
 * allocation, owned by `id`. */
typedef struct {
    char *id;
    char *text;
    size_t line; /* 1-based line number in the file */
} isn_logged_query;

typedef struct {
    isn_logged_query *queries;
    size_t count;
    size_t skipped;           /* non-empty lines without "id TAB text" (only when not strict) */
    size_t first_skipped_line; /* 1-based line number of the first of them; 0 = none */
} isn_query_log;

/* Reads "id<TAB>text" lines (CR/LF trimmed, empty lines ignored). A line without a TAB or with an
 * empty text is an error naming the file and line when `strict`, else counted in `skipped`.
 * `max` > 0 stops after that many queries. 0, or -1 with err. */
int isn_query_log_read(const char *path, bool strict, size_t max, isn_query_log *log, char *err, size_t err_len);
void isn_query_log_free(isn_query_log *log);

/* ------------------------------------------------------------------ TREC files and relevance judgements */

/* A TREC text file (qrels, run) read whole. Lines split into fields at blanks (space, TAB, CR, VT,
 * FF), each NUL-terminated in place: a field stays valid until isn_trec_file_free. `path` is the
 * caller's string, kept for messages. */
typedef struct {
    const char *path;
    char *data;
    size_t size;
    size_t offset;
    size_t line; /* 1-based number of the line last split */
} isn_trec_file;

/* 0, or -1 with err ("cannot open PATH: reason", "cannot read PATH: reason", "out of memory"). */
int isn_trec_file_read(const char *path, isn_trec_file *file, char *err, size_t err_len);
/* Splits the next line, storing at most max_fields fields; *num_fields is the true count (0 for a
 * blank line). 1 for a line, 0 at the end of the file, -1 with err ("PATH:LINE: ...") for a line
 * holding a NUL byte. */
int isn_trec_file_next_line(isn_trec_file *file, char **fields, size_t max_fields, size_t *num_fields, char *err,
                            size_t err_len);
void isn_trec_file_free(isn_trec_file *file);

/* Where a TREC line names a (query, document) pair: fields 0 and 2 of a qrels or run line. */
typedef struct {
    const char *query_id; /* into the file */
    const char *doc_id;
    size_t line; /* 1-based line number in the file */
} isn_trec_key;

#define ISN_TREC_MAX_FIELDS 8
/* Fills the rest of `record` (its key is set) from a line's fields; 0, or -1 with err. */
typedef int (*isn_trec_parse_fn)(char **fields, void *record, const isn_trec_file *file, char *err, size_t err_len);

/* Reads the rest of `file` into a malloc'ed array of records of record_size bytes, each starting with
 * its isn_trec_key. Blank lines are skipped; any other line must have num_fields fields (3 to
 * ISN_TREC_MAX_FIELDS), else "PATH:LINE: expected N fields 'FORMAT', found M". Stops at the first
 * bad line with -1 and err, keeping the records before it (free *records either way). */
int isn_trec_read_records(isn_trec_file *file, size_t num_fields, const char *format, size_t record_size,
                          isn_trec_parse_fn parse, void **records, size_t *count, char *err, size_t err_len);
/* Sorts records (as read above) by query id, doc id and line. When a pair occurs twice, returns its
 * second occurrence that comes first in the file (where a reader checking line by line stops), with
 * *first the earlier one; NULL when none repeats. */
const isn_trec_key *isn_trec_sort_find_repeat(void *records, size_t count, size_t record_size,
                                              const isn_trec_key **first);

/* One line of a TREC qrels file: "query_id iteration doc_id relevance" (the iteration is ignored). */
typedef struct {
    isn_trec_key key; /* first: the record isn_trec_read_records fills */
    long relevance;
} isn_judgement;

typedef struct {
    isn_judgement *judgements; /* sorted by key: query id, then doc id (strcmp order) */
    size_t count;
    isn_trec_file file; /* holds the ids */
} isn_qrels;

/* Reads every judgement, with trec_eval's checks: blank lines are skipped; a line without exactly 4
 * fields, a relevance that is not an integer and a (query, doc) pair judged twice are errors naming
 * "PATH:LINE:", the first in the file being reported. 0, or -1 with err. */
int isn_qrels_read(const char *path, isn_qrels *qrels, char *err, size_t err_len);
/* The judged relevance of a document for a query; 0 when not judged. */
long isn_qrels_relevance(const isn_qrels *qrels, const char *query_id, const char *doc_id, size_t doc_id_len);
/* Also fine on a zeroed isn_qrels. */
void isn_qrels_free(isn_qrels *qrels);

/* ------------------------------------------------------------------ Prometheus text */

/* "# HELP name help" and "# TYPE name type" lines, once per metric family. */
void prom_family(byte_buffer *out, const char *name, const char *type, const char *help);
/* A family with one unlabelled sample. */
void prom_u64(byte_buffer *out, const char *name, const char *type, const char *help, uint64_t value);

/* A latency histogram over fixed bounds, 10 us to 10 s in seconds, plus +Inf. */
#define HISTOGRAM_BUCKETS 19
extern const double HISTOGRAM_BOUNDS[HISTOGRAM_BUCKETS];

typedef struct {
    uint64_t buckets[HISTOGRAM_BUCKETS + 1]; /* not cumulative; the last is +Inf */
    uint64_t count;
    double sum;
} histogram;

void histogram_observe(histogram *h, double seconds);
/* Adds h's counts and sum to sum's. */
void histogram_add(histogram *sum, const histogram *h);
/* The _bucket (cumulative), _sum and _count samples; `labels` is "" or `key="value",...` without
 * braces. The family line is the caller's (several label sets share one). */
void prom_histogram(byte_buffer *out, const char *name, const char *labels, const histogram *h);


/* ------------------------------------------------------------------ load-run statistics */

/* Latency and outcome tallies of one benchmark run (isn-bench), nearest-rank percentiles, and their
 * JSON form. */
#define BENCH_TIMELINE_NS 100000000LL /* the timeline's bucket: 100 ms */
#define BENCH_TIMELINE_BUCKETS 1200
typedef struct {
    /* outcomes of measured requests (scheduled after the warmup, before the end) */
    uint64_t scheduled;          /* requests the schedule asked for */
    uint64_t not_sent;           /* the client had no room (in-flight cap) or no connection */
    /* refused by a throttling client itself (isn-bench --client-throttle), answered at once, not sent;
     * client_refused_no_room of them found no room (the server's stream limit), not the throttle */
    uint64_t client_refused, client_refused_no_room;
    uint64_t ok, deadline_exceeded, shed, unavailable, other_status;
    /* INVALID_ARGUMENT: the query itself is malformed (a log line such as `micro:bit` names a field the
     * index lacks): an answer, not a failure of the node, so no miss of a capacity measurement */
    uint64_t invalid_argument;
    uint64_t transport_errors;   /* no gRPC status: reset stream, lost connection */
    uint64_t refused_streams;    /* reset REFUSED_STREAM: refused unprocessed (UNAVAILABLE to gRPC), an answer */
    uint64_t client_timeouts;    /* no reply by deadline + grace: cancelled by the client */
    uint64_t partial;            /* OK with complete=false */
    uint64_t late;               /* OK but after the deadline */
    /* latencies of OK replies, microseconds */
    uint64_t *latency_us;
    size_t num_latencies, latency_cap;
    bool latency_overflow;       /* more answers than the cap: the tail of the array was dropped */
    /* latencies of RESOURCE_EXHAUSTED replies (how cheaply load is shed), microseconds; same cap */
    uint64_t *shed_latency_us;
    size_t num_shed_latencies;
    /* the same refusals' latencies from when the client handed each to its connection, not from its scheduled
     * time (microseconds; same cap): a generator that stalls sends late, and the refusals it sent late carry its
     * stall in shed_latency_us; here only the server's and the network's part, ended at the reply's arrival */
    uint64_t *shed_from_send_us;
    size_t num_shed_from_send;
    /* how late the client handed each measured request to its connection after its scheduled time,
     * microseconds (same cap): when these grow, the load generator, not the server, sets the latency */
    uint64_t *send_lag_us;
    size_t num_send_lags;
    /* how long each measured reply waited in the client's socket before the generator read it,
     * microseconds (same cap): the latencies end at a reply's arrival (the kernel's receive time), so
     * this is the generator's own delay, left out of them. arrivals_unknown counts the replies the kernel
     * gave no time for, whose latencies end when they were read. */
    uint64_t *receive_lag_us;
    size_t num_receive_lags;
    uint64_t arrivals_unknown;
    /* the generator threads' CPU time and wall time over the run, summed over the threads: a share near
     * 1 says the generator never waited for input, so it sends late (send_lag_us, in the latencies) and
     * reads late (receive_lag_us, left out of them) */
    uint64_t generator_cpu_ns, generator_wall_ns;
    /* on-time complete answers per BENCH_TIMELINE_NS of scheduled time from the measured start */
    uint32_t timeline[BENCH_TIMELINE_BUCKETS];
    size_t timeline_len;
} bench_stats;

int bench_stats_init(bench_stats *stats, size_t latency_cap);
void bench_stats_free(bench_stats *stats);
void bench_stats_add_latency(bench_stats *stats, uint64_t us);
void bench_stats_add_send_lag(bench_stats *stats, uint64_t us);
void bench_stats_add_shed_from_send(bench_stats *stats, uint64_t us);
void bench_stats_add_receive_lag(bench_stats *stats, uint64_t us);

typedef struct {
    double p50, p90, p99, p999, mean, max; /* microseconds; 0 when nothing was answered */
} bench_percentiles;

/* One measured answer: status < 0 = no gRPC status (reset stream, lost connection), 0 = OK (its
 * latency kept; partial when !complete, late past deadline_us), 3 INVALID_ARGUMENT, 4
 * DEADLINE_EXCEEDED, 8 RESOURCE_EXHAUSTED (shed), 14 UNAVAILABLE, any other status together. */
void bench_stats_record(bench_stats *stats, int status, bool complete, uint64_t latency_us, uint64_t deadline_us);
/* An on-time complete answer to a request scheduled `since_start_ns` after the measured start. */
void bench_stats_timeline_add(bench_stats *stats, int64_t since_start_ns);
/* Adds another generator's tallies (latencies, timeline) to *sum. */
void bench_stats_merge(bench_stats *sum, const bench_stats *other);
/* On-time complete answers: OK, neither late nor partial. */
uint64_t bench_stats_on_time(const bench_stats *stats);
/* The fewest on-time answers in one timeline bucket, as a share of the buckets' mean (the last bucket,
 * which may be partial, left out): near 1 for steady service, near 0 when the server stalled for a
 * bucket. 1 with fewer than two whole buckets. */
double bench_stats_worst_bucket_share(const bench_stats *stats);

/* Sorts the latencies in place. */
void bench_stats_percentiles(bench_stats *stats, bench_percentiles *out);

/* The median of n > 0 values (the mean of the middle two when n is even); sorts them in place. */
double bench_median(double *values, size_t n);

/* One JSON object (no newline). target_rate <= 0 for closed loop (concurrency is given instead). */
void bench_stats_write_json(FILE *out, bench_stats *stats, double target_rate, uint32_t concurrency,
                            double duration_s, uint32_t deadline_ms);

#endif
