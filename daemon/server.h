/* isnd's state and the parts it is built from. Everything here runs on the libuv loop thread,
 * except the search service (search_service.h), which touches only search jobs. The gRPC transport and
 * the stats endpoint are grpc/'s. */
#ifndef ISN_DAEMON_SERVER_H
#define ISN_DAEMON_SERVER_H

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
#include "grpc/grpc.h"
#include "index/index.h"

#define ISND_VERSION "0.1.0"

typedef enum { SERVER_STARTING, SERVER_READY, SERVER_DRAINING, SERVER_STOPPING } server_state;

typedef struct isn_server isn_server;

#define CALL_INLINE_ARENA 4096

/* What isnd keeps with each call (grpc_call_app): the request's arena and its search job. Pooled
 * with the call by grpc/, so steady-state traffic allocates nothing. */
typedef struct {
    arena arena;
    grpc_call *call;
    uint32_t deadline_slot;    /* 1 + its place in the server's deadline heap; 0 when not in it */
    bool answered_at_deadline; /* DEADLINE_EXCEEDED went out while it waited: its job's result is dropped */
    search_job job; /* its reply buffer (the framed SearchResponse) is kept across uses */
    max_align_t arena_space[CALL_INLINE_ARENA / sizeof(max_align_t)];
} rpc_call;

struct isn_server {
    uv_loop_t *loop;
    isn_conf conf;
    const char *config_path; /* NULL = defaults and flags only */
    const char *const *overrides; /* "section.key=value" from the command line, re-applied on SIGHUP */
    size_t num_overrides;
    server_state state;
    /* The index generations (generation_swap.c); index, info and analyzer are the current one's
     * (loop thread). A request uses the generation it took a reference to (generations_acquire). */
    generation_state *generations;
    isn_index *index;
    const isn_index_info *info;
    isn_analyzer *analyzer;
    search_service *pool;
    uint32_t num_workers;
    char load_error[512];

    grpc_server *grpc;
    grpc_health_watchers *watchers; /* Health/Watch streams */
    grpc_stats_server *stats; /* NULL without stats_listen */
    grpc_connection_limit connection_limit; /* shared by both */
    char grpc_address[80], stats_address[80];
    uv_async_t completion_async;
    uv_timer_t drain_timer;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t watchdog; /* systemd's WatchdogSec: pinged from the loop (data NULL when not asked for) */
    uv_work_t load_work;
    bool stop_after_load;
    bool drain_forced;

    uint32_t inflight_jobs;
    uint64_t lost_requests;
    /* Search calls waiting on a worker, by deadline (deadline_timer.c) */
    uv_timer_t deadline_timer;
    rpc_call **deadlines;
    uint32_t num_deadlines, deadline_cap;

    metrics metrics;
    uint64_t start_ns, ready_ns, drain_start_ns;
    double start_time; /* Unix seconds */
    int exit_code;
};

/* ---- deadline_timer.c */
void deadline_timer_init(isn_server *server, uv_loop_t *loop);
void deadline_timer_free(isn_server *server);
void deadline_timer_fire(uv_timer_t *timer);
/* Answer the call DEADLINE_EXCEEDED at its job's deadline unless a worker has started it by then.
 * False when out of memory (then the worker refuses it once the deadline has passed, as before). */
bool deadline_watch(isn_server *server, rpc_call *rc);
void deadline_forget(isn_server *server, rpc_call *rc);

/* ---- rpc.c */
rpc_method rpc_method_from_path(const char *path, size_t len);
/* The handlers isnd gives the gRPC server core. */
extern const grpc_server_handlers rpc_handlers;
void rpc_on_completions(uv_async_t *async);
/* Health/Watch's status of a service (grpc_health_status_fn). */
int rpc_health_status(const char *service, void *app);

/* ---- stats_pages.c */
/* What isnd shows on the stats endpoint's /metrics, /stats and /readyz. */
extern const grpc_stats_pages stats_pages;

/* ---- metrics_render.c */
void metrics_render_prometheus(const isn_server *server, byte_buffer *out);
void metrics_render_json(const isn_server *server, byte_buffer *out);
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
/* The transport's settings from the configuration (at start and after a reload). */
void server_transport_config(isn_server *server, grpc_server_config *grpc, grpc_stats_config *stats);
bool server_ready(const isn_server *server);

#endif
