/* isnd's state and the parts it is built from. Everything here runs on the libuv loop thread,
 * except the search service (search_service.h), which touches only search jobs. */
#ifndef ISN_DAEMON_SERVER_H
#define ISN_DAEMON_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>
#include <uv.h>

#include "conf/conf.h"
#include "daemon/arena.h"
#include "base/base.h"
#include "daemon/grpc_framing.h"
#include "daemon/metrics.h"
#include "daemon/search_job.h"
#include "daemon/search_service.h"
#include "index/index.h"

#define ISND_VERSION "0.1.0"

typedef enum { SERVER_STARTING, SERVER_READY, SERVER_DRAINING, SERVER_STOPPING } server_state;

typedef struct isn_server isn_server;
typedef struct grpc_conn grpc_conn;
typedef struct grpc_stream grpc_stream;
typedef struct stats_conn stats_conn;

#define STREAM_INLINE_BODY 1024
#define STREAM_INLINE_ARENA 4096
#define STREAM_PATH_MAX 96

/* One request (HTTP/2 stream). Pooled: its arena chunk, body space and reply buffer are reused. */
struct grpc_stream {
    grpc_stream *prev, *next; /* in its connection's list, the orphan list, or the free list */
    grpc_conn *conn;          /* NULL once orphaned: the connection closed while a worker had it */
    isn_server *server;
    int32_t id;
    rpc_method method;
    bool post;
    bool content_type_ok;
    bool timeout_bad;
    bool request_complete; /* END_STREAM received */
    bool responded;        /* a reply (or error) was submitted to nghttp2 */
    bool job_in_flight;
    uint64_t opened_ns;
    uint64_t timeout_ns; /* grpc-timeout; 0 = none */
    char path[STREAM_PATH_MAX];
    grpc_reader reader;
    arena arena;
    search_job job; /* its reply buffer also carries Info and Health replies */
    size_t reply_sent;
    max_align_t arena_space[STREAM_INLINE_ARENA / sizeof(max_align_t)];
    uint8_t body_space[STREAM_INLINE_BODY];
};

struct grpc_conn {
    uv_tcp_t tcp;
    isn_server *server;
    grpc_conn *prev, *next;
    grpc_conn *next_dirty;
    nghttp2_session *session;
    grpc_stream *streams;
    uint32_t num_streams;
    byte_buffer pending; /* pulled from nghttp2, not yet handed to the kernel */
    byte_buffer sending; /* owned by the write in flight */
    uv_write_t write_req;
    bool writing;
    bool dirty;
    bool closing;
    bool preface_done;
    bool goaway_sent;
    bool close_when_flushed;
    uint64_t accepted_ns;
    uint64_t last_activity_ns;
    char peer[64];
};

#define STATS_REQUEST_MAX 8192

struct stats_conn {
    uv_tcp_t tcp;
    isn_server *server;
    stats_conn *prev, *next;
    uv_write_t write_req;
    byte_buffer out;
    bool writing;
    bool closing;
    bool close_after_write;
    uint64_t accepted_ns;
    uint64_t last_activity_ns;
    uint64_t request_started_ns; /* first byte of an unfinished request; 0 = none */
    size_t in_len;
    char in[STATS_REQUEST_MAX];
};

struct isn_server {
    uv_loop_t *loop;
    isn_conf conf;
    const char *config_path; /* NULL = defaults and flags only */
    const char *const *overrides; /* "section.key=value" from the command line, re-applied on SIGHUP */
    size_t num_overrides;
    server_state state;
    isn_index *index;
    const isn_index_info *info;
    isn_analyzer *analyzer; /* loop thread's own, for Info's analyze */
    search_service *pool;
    uint32_t num_workers;
    char load_error[512];

    uv_tcp_t grpc_listener, stats_listener;
    bool grpc_listening, stats_listening;
    char grpc_address[80], stats_address[80];
    uv_async_t completion_async;
    uv_check_t flush_check;
    uv_timer_t sweep_timer, drain_timer;
    uv_signal_t sigterm, sigint, sighup;
    uv_work_t load_work;
    bool stop_after_load;
    bool drain_forced;

    grpc_conn *grpc_conns;
    uint32_t num_grpc_conns;
    stats_conn *stats_conns;
    uint32_t num_stats_conns;
    grpc_conn *dirty;
    grpc_stream *free_streams;
    uint32_t num_free_streams;
    grpc_stream *orphans;
    uint32_t open_streams; /* allocated streams, orphans included */
    uint32_t inflight_jobs;
    uint64_t lost_requests;

    metrics metrics;
    uint64_t start_ns, ready_ns, drain_start_ns;
    double start_time; /* Unix seconds */
    int exit_code;
    uint8_t read_buffer[65536];
};

/* ---- listen.c */
/* Binds and listens on HOST:PORT; writes the bound address ("127.0.0.1:41234") to `bound`. */
int listen_tcp(isn_server *server, uv_tcp_t *tcp, const char *host_port, uv_connection_cb on_connection,
               char *bound, size_t bound_len, char *err, size_t err_len);
/* Accepts one pending connection into `tcp` (data = owner), or closes it at once when over
 * max_connections. 0 = accepted, -1 = rejected: the handle is closed and `owner` freed. */
int accept_or_reject(isn_server *server, uv_stream_t *listener, uv_tcp_t *tcp, void *owner);

/* ---- grpc_stream.c */
grpc_stream *grpc_stream_new(grpc_conn *conn, int32_t id);
/* Unlinks the stream from its connection; frees it, or orphans it while a worker holds its job. */
void grpc_stream_detach(grpc_conn *conn, grpc_stream *stream);

/* ---- grpc_session.c */
int grpc_session_new(grpc_conn *conn);

/* ---- grpc_conn.c */
void grpc_on_connection(uv_stream_t *listener, int status);
void grpc_conn_schedule_flush(grpc_conn *conn);
void grpc_flush_dirty(uv_check_t *check);
void grpc_conn_close(grpc_conn *conn);
void grpc_conn_goaway(grpc_conn *conn);
/* Closes the connection once what is queued for it has been written. */
void grpc_conn_close_when_flushed(grpc_conn *conn);
void grpc_sweep(isn_server *server, uint64_t now);
/* Success: the framed message in stream->job.reply, then trailers with grpc-status 0. */
void grpc_stream_reply(grpc_stream *stream);
/* Failure: a trailers-only response with the status and message. */
void grpc_stream_fail(grpc_stream *stream, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Not gRPC at all (wrong method or content type): a bare HTTP status. */
void grpc_stream_http_error(grpc_stream *stream, int http_status);
void grpc_stream_release(isn_server *server, grpc_stream *stream);
void grpc_free_stream_pool(isn_server *server);

/* ---- rpc.c */
rpc_method rpc_method_from_path(const char *path, size_t len);
void rpc_on_headers(grpc_stream *stream);
void rpc_on_request(grpc_stream *stream);
void rpc_on_completions(uv_async_t *async);

/* ---- stats_http.c */
void stats_on_connection(uv_stream_t *listener, int status);
void stats_sweep(isn_server *server, uint64_t now);
void stats_conn_close(stats_conn *conn);

/* ---- metrics_render.c */
void metrics_render_prometheus(const isn_server *server, byte_buffer *out);
void metrics_render_json(const isn_server *server, byte_buffer *out);
uint64_t process_resident_bytes(void);
uint64_t process_heap_bytes(void);

/* ---- signals.c */
void signals_start(isn_server *server);

/* ---- lifecycle.c */
int server_start(isn_server *server, char *err, size_t err_len);
void server_begin_drain(isn_server *server, const char *why);
/* Closes every handle so uv_run returns (after a drain, or at once). */
void server_stop(isn_server *server);
/* Called whenever a stream or connection goes away while draining. */
void server_check_drained(isn_server *server);
bool server_ready(const isn_server *server);

#endif
