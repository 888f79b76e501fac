/* isnd configuration: defaults, INI file (libinih), "section.key=value" overrides, validation.
 * Every key is listed in conf/isnd.conf with its meaning and default. */
#ifndef ISN_CONF_H
#define ISN_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "ranking/ranking.h"

#define ISN_CONF_ADDR_MAX 272 /* host (up to 255) + ":" + port, or "[v6]:port" */
#define ISN_CONF_PATH_MAX 4096

/* A switch whose default depends on the node ("auto": each key that takes it says how isnd chooses). */
typedef enum { ISN_SWITCH_AUTO, ISN_SWITCH_ON, ISN_SWITCH_OFF } isn_switch;

/* [gpu] cache: what a device keeps of a partition larger than its index_memory (isn_gpu_options.admission).
 * AUTO: list prefixes chosen by the training log (by document frequency without one); WHOLE: whole lists only;
 * PRUNED: the log replayed with the early termination of an index in global order, lists grown to the depths its
 * queries need; TIER: every list of more than one block below one document cut, no log. */
enum { ISN_CONF_GPU_CACHE_AUTO, ISN_CONF_GPU_CACHE_WHOLE, ISN_CONF_GPU_CACHE_PRUNED, ISN_CONF_GPU_CACHE_TIER,
       ISN_CONF_GPU_CACHES };

typedef struct {
    /* [server] */
    char listen[ISN_CONF_ADDR_MAX];       /* gRPC, HOST:PORT; port 0 = any free port */
    char stats_listen[ISN_CONF_ADDR_MAX]; /* HTTP/1.1 stats; "" = off */
    uint32_t loops; /* event loops serving connections; 0 = from the core count */
    uint32_t loop_slice_us; /* the loops' scheduler slice (base.h isn_set_this_thread_slice); 0 = the kernel's */
    uint32_t loop_realtime_priority; /* 1-99: the loops run SCHED_FIFO at it (isn_set_this_thread_realtime); 0 = no */
    bool pin_loops; /* each loop on a CPU of its own; workers and dispatchers on the others, spares beside loops */
    uint32_t reply_backlog_age_us;   /* a loop takes half its finished jobs only once the oldest is this old; 0 = always */
    uint32_t max_connections;
    uint32_t max_concurrent_streams; /* per connection */
    bool adaptive_stream_limit;      /* lowered while a loop is saturated (grpc/stream_limit.c) */
    uint32_t stream_limit_target_us; /* and a queue: requests that waited past this from arrival to HEADERS */
    uint32_t max_message_bytes;      /* largest gRPC request message accepted */
    uint32_t header_timeout_ms;      /* preface + a request's headers and body must arrive within this */
    uint32_t idle_timeout_ms;        /* a connection with no open stream is closed after this */
    uint32_t drain_timeout_ms;       /* SIGTERM: longest wait for in-flight requests */
    /* protections (grpc/server.h's isn_grpc_server_config and grpc/stats_endpoint.h's isn_grpc_stats_config say what each does) */
    uint32_t max_requests_per_connection;
    uint32_t memory_budget_mib;
    uint32_t write_timeout_ms;
    uint32_t min_send_rate_bytes;    /* per second */
    uint32_t max_header_list_bytes;
    uint32_t max_early_resets_per_second;
    uint32_t reset_hold_ms;
    uint32_t stats_max_connections;
    uint32_t stats_write_timeout_ms;
    /* TLS (grpc/tls.h): paths fixed at start, their contents rotate (SIGHUP, and the watch) */
    char tls_cert[ISN_CONF_PATH_MAX];          /* "" = plaintext */
    char tls_key[ISN_CONF_PATH_MAX];
    char tls_client_ca[ISN_CONF_PATH_MAX];     /* set: gRPC clients need a certificate from this CA */
    char tls_allowed_peers[ISN_CONF_PATH_MAX]; /* comma-separated subject CNs / URI SANs; "" = any of the CA's */
    uint32_t tls_watch_interval_ms;            /* 0 = only SIGHUP reloads */
    /* [index] */
    char index_path[ISN_CONF_PATH_MAX];
    uint32_t partition_id;
    bool warm_up;
    bool derive_field_data; /* the per-field data in the background once a generation is open */
    uint32_t index_watch_interval_ms; /* a symlinked index.path: how often its target is checked; 0 = only on change events */
    /* [search] */
    uint32_t workers; /* 0 = one per CPU isnd may use (base.h isn_cpus_available) */
    uint32_t spare_workers; /* more workers, each working only while enough event loops are idle */
    bool spare_idle_policy; /* spare workers of SCHED_IDLE */
    uint32_t max_queue;
    uint32_t default_k;
    uint32_t max_k;
    uint32_t default_timeout_ms; /* deadline when the request gives none; 0 = none */
    uint32_t max_timeout_ms;     /* cap on any requested deadline; 0 = no cap */
    isn_mode default_mode;
    isn_algo default_algo;
    /* the weight of the documents' static scores in the first-stage score (ranking.h
     * isn_search_options.prior_weight); 0 = BM25 alone */
    float prior_weight;
    /* [scheduler] (scheduler/scheduler.h) */
    uint32_t early_stop_percent;    /* a CPU job stops at this share of its budget with its best hits */
    uint32_t admit_percent;         /* admitted only when predicted to finish within this share of it */
    uint32_t degraded_stop_percent; /* degraded only if it can run this share of its predicted time */
    uint32_t route_margin_percent;  /* a device wins clearly when this much faster (completion time) */
    bool overload_degrade;          /* false: shed (RESOURCE_EXHAUSTED); true: run degraded when it can */
    bool codel_drop_waited;         /* refuse what waited past CoDel's target in a standing backlog */
    bool forgive_stalls;            /* a request a loop that keeps up read old: judged on what is left */
    uint32_t worker_nice;           /* CPU workers' nice value above the rest of the process (0..19) */
    isn_switch worker_idle_policy;  /* CPU workers of SCHED_IDLE (worker_nice then unused); auto: without gpu.enable */
    uint32_t worker_slice_us;       /* CPU workers' scheduler slice; 0 = the kernel's */
    uint32_t analysis_min_workers;  /* queries are analysed on the workers when there are this many */
    char cost_model_state[ISN_CONF_PATH_MAX]; /* "" = do not persist */
    uint32_t gpu_batch_max;
    uint32_t gpu_batch_memory_bytes;
    uint32_t gpu_batch_linger_us;
    uint32_t gpu_deadline_safety_us;
    uint32_t gpu_sim_devices; /* simulated_gpus_answer_without_hits: benchmarks and tests only; 0 = none */
    uint32_t gpu_sim_launch_ns;
    uint32_t gpu_sim_postings_per_us;
    uint32_t gpu_sim_query_ns;
    uint32_t gpu_sim_failure_permille;
    /* [gpu] (the real first-stage backend, gpu/gpu.h; second stage on the GPU) */
    bool gpu_enable;
    bool gpu_emulate;            /* tests and CI: the device algorithm on the host */
    uint32_t gpu_device;         /* ordinal (of the first device) */
    uint32_t gpu_devices;        /* devices from gpu_device on, each with the whole partition */
    uint32_t gpu_memory_budget_mib; /* postings + metadata on the device; 0 = 85% of free memory */
    uint32_t gpu_max_batch;      /* queries per launch */
    uint32_t gpu_max_k;          /* larger k is answered on the CPU */
    uint32_t gpu_streams;        /* batches on a device at once (isn_gpu_options.streams) */
    uint32_t gpu_cpu_threads;    /* a device's threads for its CPU part (isn_gpu_options.cpu_threads) */
    uint32_t gpu_pruning;        /* ISN_GPU_PRUNE_AUTO, _ALWAYS or _NEVER */
    char gpu_training_queries[ISN_CONF_PATH_MAX]; /* query log for the pruned-prefix cache; "" = none */
    uint32_t gpu_cache;          /* ISN_CONF_GPU_CACHE_*: what a partition larger than index_memory keeps resident */
    uint32_t gpu_stream_mib;     /* each stream's staging region for lists not resident (isn_gpu_options.stream_bytes) */
    bool gpu_route_all;          /* tests and benchmarks: every query the GPU can answer goes to it */
    bool gpu_upload_before_ready; /* false: ready on the CPU at once, the GPU takes queries once uploaded */
    bool gpu_rerank;             /* second stage may run on the GPU (learned crossover) */
    /* [rerank] (second stage) */
    char ranker_dir[ISN_CONF_PATH_MAX]; /* *.ranker files loaded at start, re-read on SIGHUP; "" = none */
    uint32_t default_n1;                /* first-stage candidates re-ranked when the request gives none */
    uint32_t max_n1;
    uint32_t gpu_model_memory_bytes; /* GPU model cache budget */
    /* [log] */
    isn_log_level log_level;
    bool log_json;   /* JSON Lines instead of text */
    bool log_access; /* one line per Search and Info: request id, trace id, status, time */
    /* [testing] */
    uint32_t job_delay_us; /* sleep added to every search job; for drain and overload tests only */
    uint32_t inject_delay_ms;      /* extra sleep on a random inject_delay_percent of search jobs: a slow */
    uint32_t inject_delay_percent; /* replica for the aggregator's hedging benchmark; 0 = off */
} isn_conf;

void isn_conf_default(isn_conf *conf);

/* Reads an INI file over `conf`. Every problem (syntax, unknown section or key, bad value) is
 * reported as "FILE:LINE: message", one per line, into err. Returns the number of problems (0 = ok),
 * or -1 when the file cannot be read. */
int isn_conf_load_file(isn_conf *conf, const char *path, char *err, size_t err_len);

/* Sets one key, as the file would. 0, or -1 with err ("unknown key", "bad value ..."). */
int isn_conf_set(isn_conf *conf, const char *section, const char *key, const char *value, char *err,
                 size_t err_len);

/* "section.key=value" (the command line's --set). 0, or -1 with err. */
int isn_conf_set_option(isn_conf *conf, const char *option, char *err, size_t err_len);

/* Checks that hold between keys (default_k <= max_k, an index path is given, addresses parse...).
 * 0, or -1 with err. */
int isn_conf_validate(const isn_conf *conf, char *err, size_t err_len);

/* Writes the effective configuration as an INI file that isn_conf_load_file accepts. */
void isn_conf_write(const isn_conf *conf, FILE *out);
/* scheduler.worker_idle_policy as it applies to a node of `loops` event loops on `cpus` CPUs: auto puts the workers
 * in SCHED_IDLE on a node without a GPU that has at least ISN_IDLE_WORKERS_CPUS_PER_LOOP CPUs a loop. There the
 * workers only search, the loops then take a core from them at once, and the loops can hold at most a third of the
 * CPUs. Beside a GPU the workers also prepare and pack its batches and lose more than the loops gain; with fewer
 * CPUs a loop, a busy loop would leave the workers sharing its core almost nothing. */
#define ISN_IDLE_WORKERS_CPUS_PER_LOOP 3
bool isn_conf_worker_idle_policy(const isn_conf *conf, uint32_t cpus, uint32_t loops);

/* True when every key that differs between the two can change without a restart (SIGHUP reload).
 * Otherwise names the first key that cannot in `key` ("section.key"). */
bool isn_conf_reloadable(const isn_conf *old_conf, const isn_conf *new_conf, char *key, size_t key_len);

/* Value parsers, shared with the command line. Each returns 0, or -1 with err. */
/* "250ms", "10s", "5m", "1h", "0" (zero needs no unit). */
int isn_conf_parse_duration_ms(const char *text, uint32_t *ms, char *err, size_t err_len);
/* "4096", "64KiB", "4MiB", "1GiB" (also k/K/KB/M/MB/G/GB, all powers of 1024). */
int isn_conf_parse_size(const char *text, uint64_t *bytes, char *err, size_t err_len);
/* Addresses ("HOST:PORT", "[IPv6]:PORT") are parsed by base/'s isn_parse_host_port. */

#endif
