/* isnd's state and the parts it is built from. The node (isn_server) lives on the first libuv loop,
 * the main thread's: signals, the stats endpoint, the index load, drain and stop. Connections are
 * served by server.loops serving loops (the first is that same loop; the others have a thread each),
 * each with its own gRPC server, calls, deadline heap and metrics; what loops share is read
 * atomically or set before they run. The search service (search_service.h) touches only search
 * jobs. The gRPC transport and the stats endpoint are grpc/'s. */
#ifndef ISN_DAEMON_SERVER_H
#define ISN_DAEMON_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "base/base.h"
#include "conf/conf.h"
#include "daemon/arena.h"
#include "daemon/generation.h"
#include "daemon/metrics.h"
#include "daemon/search_job.h"
#include "daemon/search_service.h"
#include "grpc/stats_endpoint.h"
#include "grpc/client.h"
#include "index/index.h"

#define ISND_VERSION "0.1.0"

typedef enum { SERVER_STARTING, SERVER_READY, SERVER_DRAINING, SERVER_STOPPING } server_state;

typedef struct isn_server isn_server;

#define CALL_INLINE_ARENA 4096

/* What isnd keeps with each call (isn_grpc_call_app): the request's arena and its search job. Pooled
 * with the call by grpc/, so steady-state traffic allocates nothing. */
typedef struct {
    arena arena;
    isn_grpc_call *call;
    uint32_t deadline_slot;    /* 1 + its place in the server's deadline heap; 0 when not in it */
    bool answered_at_deadline; /* DEADLINE_EXCEEDED went out while it waited: its job's result is dropped */
    bool generation_lent;      /* job.generation is on its loop's lease (generation_lease_borrow) */
    bool shed;                 /* refused RESOURCE_EXHAUSTED: timed when the refusal leaves (rpc.c, on_sent) */
    search_job job; /* its reply buffer (the framed SearchResponse) is kept across uses */
    max_align_t arena_space[CALL_INLINE_ARENA / sizeof(max_align_t)];
} rpc_call;

/* What the node asks of a serving loop (serving_loop.commands, bits): done on the loop's thread. */
enum {
    LOOP_HEALTH_CHANGED = 1 << 0, /* tell its Health/Watch streams */
    LOOP_HEALTH_SHUTDOWN = 1 << 1, /* NOT_SERVING to its watchers, and their streams end */
    LOOP_DRAIN = 1 << 2,          /* GOAWAY; answer what is open; then report drained */
    LOOP_FAIL_WAITING = 1 << 3,   /* drain time is up: answer the calls no worker has */
    LOOP_RECONFIGURE = 1 << 4,    /* take next_conf (SIGHUP) */
    LOOP_CLOSE = 1 << 5,          /* close its connections and timers, then acknowledge */
    LOOP_FINISH = 1 << 6,         /* close its last handles: its uv_run returns */
    LOOP_ALL_DRAINED = 1 << 7,    /* (the first loop) every loop has drained: stop */
    LOOP_GENERATION_SWAPPED = 1 << 8, /* give back the replaced generation once no request uses it */
};

/* One event loop serving gRPC connections. Touched only by its own thread, except: `commands` and
 * `completions` (any thread), `next_conf` (under conf_lock), `metrics` (under metrics_lock: the stats
 * endpoint sums them) and inflight_jobs (read atomically). */
typedef struct serving_loop {
    isn_server *server;
    uint32_t id;
    uv_loop_t *loop;
    uv_loop_t own_loop; /* the loops after the first */
    pthread_t thread;
    bool has_thread;
    _Atomic pid_t tid; /* its thread's, once running (isn_loop_cpu_wait_seconds_total); 0 before */
    uint32_t slice_us; /* server.loop_slice, given to the thread when it starts (a SIGHUP may rewrite the conf) */
    uint32_t realtime_priority; /* server.loop_realtime_priority, likewise */
    isn_grpc_server *grpc;
    isn_grpc_health_watchers *watchers; /* Health/Watch streams */
    completion_queue completions;
    uv_poll_t completion_wake;     /* its eventfd: pushed to while this loop may block in its poll */
    uv_prepare_t completion_take;  /* takes what finished before each poll, once */
    uv_idle_t completion_more;     /* active while finished jobs wait after that take: the poll does not block */
    uv_check_t completion_polled;  /* after each poll: pushes no longer wake */
    uv_async_t control_async;
    atomic_uint commands;
    isn_conf conf; /* this loop's copy: a reload hands it next_conf */
    pthread_mutex_t conf_lock;
    isn_conf next_conf;
    /* Info's analyze: this loop's own, made on first use from the generation named beside it */
    isn_analyzer *analyzer;
    char analyzer_generation[17];
    uint64_t random_state;  /* testing.inject_delay_percent */
    atomic_uint inflight_jobs;
    /* Search calls waiting on a worker, by deadline (deadline_timer.c) */
    uv_timer_t deadline_timer;
    rpc_call **deadlines;
    uint32_t num_deadlines, deadline_cap;
    pthread_mutex_t metrics_lock;
    metrics metrics;
    uint64_t iteration_start_ns, iteration_idle_ns; /* the last poll's entry, and the loop's idle time then */
    uint64_t replies_ns; /* its time taking finished jobs and making their replies, so far */
    /* that, and its gRPC server's reads and flushes, when the iteration under way began (count_iteration) */
    uint64_t iteration_replies_ns;
    isn_grpc_loop_work iteration_work;
    uv_timer_t stall_watch;  /* stall_watch.c: bounds the poll's wait while Search requests come */
    uint64_t last_search_ns; /* the last Search request's HEADERS */
    double busy_share; /* of its time lately (count_iteration): near 1, it is the request path's bottleneck */
    generation_lease generations; /* what its Search requests are lent */
} serving_loop;

struct isn_server {
    uv_loop_t *loop;
    isn_conf conf;
    const char *config_path; /* NULL = defaults and flags only */
    const char *const *overrides; /* "section.key=value" from the command line, re-applied on SIGHUP */
    size_t num_overrides;
    _Atomic server_state state; /* written by the first loop, read by every one */
    /* The index generations (generation_swap.c); index and info are the current one's, for the first
     * loop (metrics, rankers). A request uses the generation it took a reference to
     * (generations_acquire), on any loop. */
    generation_state *generations;
    isn_index *index;
    const isn_index_info *info;
    search_service *pool;
    uint32_t num_workers;
    char load_error[512];

    serving_loop *loops; /* loops[0] runs on `loop`; its gRPC server listens and hands connections out */
    uint32_t num_loops;
    /* server.pin_loops: loops[i] runs alone on loop_cpus[i] (beside spare worker i + 1), the other workers
     * and the GPU dispatchers on the num_worker_cpus of worker_cpus; NULL and 0 when not pinned */
    int *loop_cpus, *worker_cpus;
    uint32_t num_worker_cpus;
    /* The GPU devices the default loop and worker counts leave room for (gpu_setup_devices_expected), counted
     * once when the loops are made: asking the driver initialises it. */
    uint32_t gpus_expected;
    isn_grpc_stats_server *stats; /* NULL without stats_listen */
    isn_grpc_tls *grpc_tls, *stats_tls; /* NULL: plaintext (server.tls_cert unset) */
    isn_grpc_connection_limit connection_limit; /* shared by every loop and the stats endpoint */
    isn_grpc_memory_budget memory_budget;       /* shared by every loop */
    char grpc_address[80], stats_address[80];
    atomic_uint loops_drained;
    pthread_mutex_t acks_lock;
    pthread_cond_t acks_cond;
    uint32_t acks; /* loops that did what serving_loops_tell waits for */
    uv_timer_t drain_timer;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t watchdog; /* systemd's WatchdogSec: pinged from the loop (data NULL when not asked for) */
    uv_work_t load_work;
    bool stop_after_load;
    bool drain_forced;

    uint64_t lost_requests;
    uint64_t start_ns, ready_ns, drain_start_ns;
    double start_time; /* Unix seconds */
    int exit_code;
};

/* ---- serving_loops.c */
/* Makes the loops (their gRPC servers, the first listening) before any runs. -1 with err. */
int serving_loops_make(isn_server *server, char *err, size_t err_len);
/* Starts the threads of the loops after the first. -1 with err. */
int serving_loops_start(isn_server *server, char *err, size_t err_len);
/* With server.pin_loops, binds the first loop (the main thread) to its CPU. Called once libuv's thread pool
 * has its threads (after the first uv_queue_work): they inherit the main thread's CPUs when started, and
 * the background work they do (index loads, GPU uploads) keeps every CPU isnd may use. */
void serving_loops_pin_first(isn_server *server);
/* From the first loop: asks every loop for `commands` (LOOP_*); the first does them at once. Returns
 * once each loop has done LOOP_RECONFIGURE and LOOP_CLOSE when asked for them. */
void serving_loops_tell(isn_server *server, unsigned commands);
/* From a loop's thread: its gRPC server drained; the last one tells the first loop. */
void serving_loops_drained(serving_loop *loop);
/* From the first loop (server_stop): every loop closes its connections (so that none submits to the
 * search service any more), then `between` runs (stopping the search service), then every loop
 * closes its last handles. */
void serving_loops_close(isn_server *server, void (*between)(isn_server *server));
/* After the first loop's uv_run: joins the threads, frees the loops. */
void serving_loops_free(isn_server *server);
/* Summed over the loops: gRPC counters, metrics, Search calls with a worker. Any thread. */
void serving_loops_counters(const isn_server *server, isn_grpc_server_counters *sum);
void serving_loops_metrics(isn_server *server, metrics *sum);
uint32_t serving_loops_inflight(const isn_server *server);
/* The loops idle now (each may block in its poll, nothing left to take): what spare workers count
 * (search.spare_workers). `server` is the isn_server; any thread, a load per loop. */
uint32_t serving_loops_idle(void *server);
/* Whether loops[loop] is idle now, as serving_loops_idle counts them: what a spare beside it (server.pin_loops)
 * looks at. */
bool serving_loop_idle(void *server, uint32_t loop);
uint32_t serving_loops_open_calls(const isn_server *server);
/* From the loop's thread: with scheduler.forgive_stalls, whether it keeps up with its sockets (its busy
 * share lately under SERVING_LOOP_SATURATED), so that a request it reads old grew old in a stall of the
 * node, not in its sockets' backlog (isn_job's reader_keeps_up); false without. */
#define SERVING_LOOP_SATURATED 0.8
bool serving_loop_forgives_stalls(const serving_loop *loop);
/* A metric update on the loop's own metrics (they are summed by the stats endpoint's thread). */
#define LOOP_METRICS(l, statement)                                                                                      \
    do {                                                                                                               \
        pthread_mutex_lock(&(l)->metrics_lock);                                                                        \
        metrics *m = &(l)->metrics;                                                                                    \
        statement;                                                                                                     \
        pthread_mutex_unlock(&(l)->metrics_lock);                                                                      \
    } while (0)

/* ---- deadline_timer.c */
void deadline_timer_init(serving_loop *loop);
void deadline_timer_free(serving_loop *loop);
void deadline_timer_fire(uv_timer_t *timer);
/* Answer the call DEADLINE_EXCEEDED at its job's deadline unless a worker has started it by then.
 * False when out of memory (then the worker refuses it once the deadline has passed, as before). */
bool deadline_watch(serving_loop *loop, rpc_call *rc);
void deadline_forget(serving_loop *loop, rpc_call *rc);

/* ---- stall_watch.c */
void stall_watch_init(serving_loop *loop);
/* A Search request's HEADERS were read now: keep the polls short for a while. */
void stall_watch_search_seen(serving_loop *loop, uint64_t now_ns);

/* ---- rpc.c */
rpc_method rpc_method_from_path(const char *path, size_t len);
/* The handlers isnd gives the gRPC server core (app: the serving_loop). */
extern const isn_grpc_server_handlers rpc_handlers;
/* Answers finished jobs of this loop's calls, LOOP_REPLIES_PER_ITERATION of them or half of those
 * waiting (completion_queue_take); false when there were none. A GPU batch lands hundreds of answers
 * at once: a loop that wrote them all before reading its sockets again would leave the requests there
 * (those it refuses at once among them) waiting as long. The rest go out in the next iterations,
 * whose polls do not block. */
#define LOOP_REPLIES_PER_ITERATION 32
bool rpc_take_completions(serving_loop *loop);
/* Health/Watch's status of a service (isn_grpc_health_status_fn; app: the isn_server). */
int rpc_health_status(const char *service, void *app);

/* ---- stats_pages.c */
/* What isnd shows on the stats endpoint's /metrics, /stats and /readyz. */
extern const isn_grpc_stats_pages stats_pages;

/* ---- metrics_render.c */
void metrics_render_prometheus(isn_server *server, byte_buffer *out);
void metrics_render_json(isn_server *server, byte_buffer *out);
uint64_t process_resident_bytes(void);
uint64_t process_heap_bytes(void);

/* ---- signals.c */
void signals_start(isn_server *server);
/* After the loop: the termination signals are ignored while the process tears down and exits. */
void signals_ignore(void);

/* ---- lifecycle.c */
int server_start(isn_server *server, char *err, size_t err_len);
void server_begin_drain(isn_server *server, const char *why);
/* Closes every handle so uv_run returns (after a drain, or at once). */
void server_stop(isn_server *server);
/* The transport's settings from a configuration (at start and after a reload). */
/* The TLS credentials of server.tls_*, and their watch; 0 or -1 with err naming the file and the problem. */
int server_tls_start(isn_server *server, char *err, size_t err_len);
/* SIGHUP: rereads the certificate files (a refused set is logged and the one in use stays). */
void server_tls_reload(isn_server *server);
void server_transport_config(isn_server *server, const isn_conf *conf, isn_grpc_server_config *grpc,
                             isn_grpc_stats_config *stats);
bool server_ready(const isn_server *server);

#endif
