/* The server core's state, shared by its files (server_conn.c: connections and timeouts,
 * server_session.c: nghttp2 callbacks, server_call.c: the call pool and replies, server.c: the
 * server's life, listen.c: sockets, stats_http.c: the HTTP/1.1 stats endpoint). */
#ifndef ISN_GRPC_SERVER_INTERNAL_H
#define ISN_GRPC_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include <pthread.h>

#include <nghttp2/nghttp2.h>
#include <uv.h>

#include "base/base.h"
#include "grpc/stats_endpoint.h"
#include "grpc/client.h"
#include "grpc/tls_internal.h"

typedef struct isn_grpc_conn isn_grpc_conn;

/* A counter of one server's: written only by its loop thread, read by any (a program with several
 * loops sums them): relaxed atomic stores, no locked instruction. */
#define COUNTER_ADD(field, n) __atomic_store_n(&(field), (field) + (n), __ATOMIC_RELAXED)
#define COUNTER_SUB(field, n) __atomic_store_n(&(field), (field) - (n), __ATOMIC_RELAXED)

/* What puts an open connection, gRPC or stats, on its server's list. It is the first member of both
 * connection structs, so a list walk casts its links to the connection. */
/* Marks of a connection's stream: by at_ns[i], every byte up to offset end[i] had reached the socket
 * (arrival_marks.c). Oldest first. */
#define ISN_GRPC_ARRIVAL_MARKS 8
typedef struct {
    uint64_t at_ns[ISN_GRPC_ARRIVAL_MARKS];
    uint64_t end[ISN_GRPC_ARRIVAL_MARKS];
    uint32_t count;
    uint64_t read_total; /* bytes read from the socket so far */
} isn_grpc_arrival_marks;

/* The earliest the bytes at the stream's read offset can have arrived: the time of the last mark at or
 * below it; unknown_ns when there is none (the connection's start). */
uint64_t isn_grpc_arrival_since(const isn_grpc_arrival_marks *marks, uint64_t unknown_ns);
/* A read of nread bytes; `queued` bytes were left in the socket at at_ns (0 for a read that did not
 * fill the buffer: it emptied the socket when it was made). */
void isn_grpc_arrival_note_read(isn_grpc_arrival_marks *marks, size_t nread, uint64_t queued, uint64_t at_ns);

/* The streams each connection may hold open, lowered while the loop is saturated (stream_limit.c). */
#define ISN_GRPC_STREAM_LIMIT_WINDOW_NS 50000000ull /* a window of the loop's idle time */
#define ISN_GRPC_STREAM_LIMIT_SATURATED 0.95        /* busy share at which, with a socket backlog, it lowers */
#define ISN_GRPC_STREAM_LIMIT_RELAXED 0.85          /* busy share under which it rises again */
#define ISN_GRPC_STREAM_LIMIT_DECREASE 0.75
#define ISN_GRPC_STREAM_LIMIT_MIN 4
typedef struct {
    uint32_t limit, max;
    uint64_t target_ns; /* a window's least wait from arrival to HEADERS above it: a queue */
    uint64_t window_start_ns, idle_at_start_ns;
    /* Signs that requests wait for the loop: a read this window left bytes in its socket, or every
     * request opened this window had waited past the target from its arrival to its HEADERS (a
     * standing queue, as CoDel tells one from a burst). */
    bool backlog;
    uint64_t min_wait_ns, opened;
    double busy;        /* the last window's busy share */
    uint64_t decreases; /* windows that lowered it */
} isn_grpc_stream_limit;
void isn_grpc_stream_limit_init(isn_grpc_stream_limit *limit, uint32_t max, uint64_t target_ns, uint64_t now_ns,
                                uint64_t idle_ns);
/* Ends the window when it is over (the loop's idle time so far in idle_ns): true when the limit changed. */
bool isn_grpc_stream_limit_window(isn_grpc_stream_limit *limit, uint64_t now_ns, uint64_t idle_ns);
/* A request's HEADERS came wait_ns after its bytes can have arrived. */
void isn_grpc_stream_limit_note_wait(isn_grpc_stream_limit *limit, uint64_t wait_ns);
void isn_grpc_stream_limit_set_max(isn_grpc_stream_limit *limit, uint32_t max);

typedef struct conn_links conn_links;
struct conn_links {
    conn_links *prev, *next;
};

#define CALL_INLINE_BODY 1024
#define CALL_PATH_MAX 96

/* One request (HTTP/2 stream). Pooled: its body space, reply buffer and the program's storage
 * (allocated right after it) are reused. */
struct isn_grpc_call {
    isn_grpc_call *prev, *next; /* in its connection's list, the abandoned list, or the free list */
    isn_grpc_conn *conn;        /* NULL once abandoned: the client left while the program held it */
    isn_grpc_conn *owner;       /* the connection it counts against (abandoned too), until that closes */
    isn_grpc_server *server;
    int32_t id;
    int tag;
    bool post;
    bool content_type_ok;
    bool timeout_bad;
    bool timeout_sent;     /* a valid grpc-timeout came (timeout_ns may be 0: already expired) */
    bool request_complete; /* END_STREAM received */
    bool responded;        /* a reply (or error) was submitted to nghttp2 */
    bool answered_ok;      /* that reply was an answer (grpc-status 0), not a refusal or an error */
    bool held;
    bool dropped; /* refused by the memory budget: reset, and released at the next flush */
    uint32_t header_list_bytes; /* RFC 9113 size of the request's header list so far */
    uint64_t charged;           /* to the server's budget: the call itself, its reply (capacity) and app_kept */
    uint64_t app_kept;          /* bytes the program's storage kept from the last use (on_release) */
    uint64_t opened_ns;
    uint64_t arrived_ns; /* the earliest its HEADERS can have reached the socket (isn_grpc_call_arrived_ns) */
    uint64_t timeout_ns; /* grpc-timeout; 0 = none */
    char path[CALL_PATH_MAX];
    isn_grpc_reader reader;
    const uint8_t *reply_data; /* framed reply being sent */
    size_t reply_len, reply_sent;
    byte_buffer reply; /* isn_grpc_call_reply_message's buffer; kept across uses */
    isn_grpc_stream *stream; /* a streaming call's state (stream.c); NULL for a unary call */
    char traceparent[ISN_GRPC_TRACEPARENT_LEN + 1]; /* as sent; "" = none (trace.c) */
    char via[ISN_GRPC_VIA_MAX + 1]; /* the isn-via header as sent; "" = none (trace.c) */
    bool via_too_long;
    uint8_t body_space[CALL_INLINE_BODY];
    max_align_t app[]; /* config.call_app_bytes */
};

/* Peers cut for rapid reset (reset_penalty.c). A flood that reconnects after each GOAWAY costs its loop
 * the HPACK decoding of a whole burst of streams per connection; so an address cut lately gets a small
 * burst and a slow refill on the connections it opens next, for ISN_GRPC_RESET_PENALTY_NS after its last
 * cut. Clients that do not reset streams early lose nothing (a normal client behind the same address),
 * nor do connections opened before the cut (an aggregator's cancelling its hedges). Keyed by address,
 * not port; a fixed table shared by a listening server's loops (relaxed atomics: a lost update only
 * lets one more connection have the whole burst). */
#define ISN_GRPC_RESET_PENALTY_SLOTS 64
#define ISN_GRPC_RESET_PENALTY_NS 10000000000ull
#define ISN_GRPC_PENALIZED_RESET_BURST 16.0
#define ISN_GRPC_PENALIZED_RESET_RATE_DIVISOR 64.0
typedef struct {
    _Atomic uint64_t key[ISN_GRPC_RESET_PENALTY_SLOTS];
    _Atomic uint64_t until_ns[ISN_GRPC_RESET_PENALTY_SLOTS];
} isn_grpc_reset_penalties;
/* The peer's address as a key (its bytes hashed; the port left out), 0 when not IPv4 or IPv6. */
uint64_t isn_grpc_peer_key(const struct sockaddr_storage *addr);
void isn_grpc_reset_penalty_note(isn_grpc_reset_penalties *p, uint64_t key, uint64_t now_ns);
bool isn_grpc_reset_penalized(isn_grpc_reset_penalties *p, uint64_t key, uint64_t now_ns);
/* A loop holds at most this many connections cut for rapid reset (config.reset_hold_ms), each with its
 * receive buffer shrunk to ISN_GRPC_HELD_RECEIVE_BUFFER: a flood over many connections holds a bounded
 * amount of kernel memory, and the ones past the limit get their GOAWAY at once, as without a hold. */
#define ISN_GRPC_MAX_HELD_CONNECTIONS 32
#define ISN_GRPC_HELD_RECEIVE_BUFFER 4096

struct isn_grpc_conn {
    conn_links links; /* first: see conn_links */
    uv_tcp_t tcp;
    isn_grpc_server *server;
    isn_grpc_conn *next_dirty;
    nghttp2_session *session;
    isn_grpc_call *calls;
    uint32_t num_calls;
    uint32_t in_flight;  /* calls it owns, abandoned ones included */
    uint32_t replying;   /* calls answered whose answer is not all sent yet */
    uint32_t dropped;    /* calls to release at the next flush */
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
    uint64_t last_activity_ns; /* a request began or ended (reads alone do not count) */
    uint64_t read_ns;          /* while a read is processed: when it was made (the time its calls open at) */
    /* The call whose HEADERS nghttp2 is delivering (on_header), so that each header finds it without
     * a lookup of its stream. */
    int32_t headers_stream;
    isn_grpc_call *headers_call;
    /* Reads are bounded per loop iteration (ISN_GRPC_READ_BYTES_PER_ITERATION): past it the connection
     * pauses until the next iteration, so that one client's flood or a 4 MiB request holds neither
     * the other connections nor the replies waiting to go out. */
    uint64_t read_iteration;   /* the loop iteration of its last read */
    size_t iteration_bytes;    /* read in that iteration */
    bool read_paused;          /* on the server's paused list */
    isn_grpc_arrival_marks arrival; /* when the bytes it reads can have arrived (arrival_marks.c) */
    uint32_t stream_limit_sent;     /* SETTINGS_MAX_CONCURRENT_STREAMS last sent to it */
    isn_grpc_conn *next_paused;
    uint64_t bytes_since_ns;   /* the earliest the bytes being processed can have arrived */
    uint64_t bytes_written;    /* handed to the kernel and written */
    uint64_t owing_since_ns;   /* start of the current write-timeout window; 0 = owes nothing */
    uint64_t owing_mark;       /* bytes_written then */
    double reset_tokens;       /* early resets still allowed (token bucket) */
    uint64_t reset_tokens_ns;  /* last refill */
    uint64_t peer_key;         /* its peer's address (isn_grpc_peer_key), 0 unknown */
    bool reset_penalized;      /* accepted while its peer's address was in the penalty box */
    uint64_t held_until_ns;    /* cut for rapid reset and held (isn_grpc_conn_cut); 0 = not held */
    char peer[64];
    nghttp2_mem mem;          /* the session's allocator (conn_memory.c) */
    uint64_t charged;         /* the connection, its buffers, nghttp2's blocks */
    uint64_t reserved;        /* of the server's budget, for them (conn_memory.c): charged or a little more */
    uint64_t buffers_charged; /* of which pending and sending */
    tls_session tls;          /* ssl NULL: plaintext */
};

struct isn_grpc_server {
    uv_loop_t *loop;
    isn_grpc_server_config config;
    isn_grpc_server_handlers handlers;
    void *app;
    uv_tcp_t listener;
    bool listening;
    bool draining;  /* isn_grpc_server_drain called: GOAWAY new connections, check for the end */
    bool goaway;    /* GOAWAY new connections */
    bool closing;   /* isn_grpc_server_close called: free calls instead of pooling them */
    bool drained;   /* on_drained called */
    uv_check_t flush_check;
    /* When bytes read now reached the socket at the earliest (arrival_floor_ns): the loop notes
     * when it enters each poll, its first read after it and the end of its I/O (flush_check); the
     * first read after a poll that blocked came with new bytes, and one after a poll that returned at
     * once came after the previous poll returned. */
    uv_prepare_t poll_watch;
    uint64_t poll_entered_ns, first_read_ns, check_ns, previous_return_ns, arrival_floor_ns;
    uint64_t poll_timeout_ns;      /* the poll's timeout as it began; 0 unbounded, not blocking, or checked */
    uint64_t poll_idle_entered_ns; /* the loop's idle time then */
    uint64_t flushed_ns; /* the last flush of waiting output (the check, or a read's: ISN_GRPC_FLUSH_WAIT_NS) */
    uint64_t started_ns; /* when the loop began keeping its idle time: loop_busy_ns counts from here */
    /* While a read or the flush is processed, the clock as read when it began or, inside a read, after its
     * last slice (0 otherwise): the time calls released meanwhile give their connection's last activity,
     * without a clock read each. */
    uint64_t recent_ns;
    uint64_t iteration;  /* loop iterations (polls entered) */
    isn_grpc_loop_work work; /* the loop's time in reads and flushes (isn_grpc_server_loop_work) */
    isn_grpc_stream_limit stream_limit;
    bool idle_time_unknown; /* libuv keeps no idle time for this loop: the stream limit stays fixed */
    isn_grpc_conn *paused;   /* connections that read their share of an iteration: resumed before the next poll */
    uv_timer_t sweep_timer;
    conn_links *conns;
    isn_grpc_conn *dirty;
    isn_grpc_call *free_calls;
    uint32_t num_free_calls;
    uint32_t free_calls_low; /* fewest pooled calls since the last sweep: the ones not needed */
    isn_grpc_memory_budget own_budget;
    isn_grpc_memory_budget *budget; /* own_budget, or config.shared_budget */
    isn_grpc_reset_penalties own_penalties;
    isn_grpc_reset_penalties *penalties; /* own_penalties, or the listening server's (a peer's) */
    isn_log_limiter reset_flood_log;      /* a flood cuts thousands of connections a second: one line a second */
    uint32_t num_held;                    /* connections held after a rapid-reset cut (isn_grpc_conn_cut) */
    isn_grpc_call *abandoned;
    isn_grpc_server_counters counters;
    /* Several loops (isn_grpc_server_add_peer): the listening server hands each accepted connection in
     * turn to itself and to its peers; a peer adopts the ones in its inbox on its own loop. */
    isn_grpc_server **peers;
    uint32_t num_peers, next_peer;
    pthread_mutex_t inbox_lock;
    uv_async_t inbox_async; /* data NULL until the server is someone's peer */
    bool inbox_open;
    int *inbox;
    uint32_t inbox_len, inbox_cap;
    uint8_t read_buffer[65536];
    uint8_t tls_plain[TLS_RECORD_MAX];   /* one connection's decrypted bytes, on their way to nghttp2 */
    uint8_t tls_staging[TLS_RECORD_MAX]; /* one connection's frames, gathered into a record */
};

/* ---- listen.c */
/* Binds and listens; `tcp->data` = owner. */
int listen_tcp(uv_loop_t *loop, uv_tcp_t *tcp, void *owner, const char *host_port, uv_connection_cb on_connection,
               char *bound, size_t bound_len, char *err, size_t err_len);
/* Makes room at the connection limit: closes the connection idle longest; false when none is. */
typedef bool (*conn_evict_cb)(void *server);
/* Accepts one pending connection into `tcp` (data = owner). At `limit` it first asks `evict` to
 * close an idle connection, and closes the new one at once when none could be. 0 = accepted
 * (counted in limit->open), -1 = rejected: the handle is closed and `owner` freed. */
int accept_or_reject(uv_loop_t *loop, isn_grpc_connection_limit *limit, uv_stream_t *listener, uv_tcp_t *tcp, void *owner,
                     conn_evict_cb evict, void *server);
/* The limit's check for a connection already accepted into `tcp` (by uv_accept, or adopted from
 * another loop): the same outcome as accept_or_reject. */
int admit_or_reject(isn_grpc_connection_limit *limit, uv_tcp_t *tcp, conn_evict_cb evict, void *server);
void connection_limit_release(isn_grpc_connection_limit *limit);
/* Lists an accepted connection first and counts it in *open. */
void conn_list_add(conn_links **list, conn_links *conn, uint32_t *open);
/* Takes a closed connection off the list and the count, and gives its place under `limit` back. */
void conn_list_remove(conn_links **list, conn_links *conn, uint32_t *open, isn_grpc_connection_limit *limit);
/* What a sweep does to one connection, given the time now and the timeouts in ns; it may close it. */
typedef void (*conn_sweep_cb)(conn_links *conn, uint64_t now, uint64_t header_ns, uint64_t idle_ns, void *owner);
/* Calls `check` on each listed connection (from the sweep timer). */
void conn_list_sweep(conn_links *list, uint32_t header_timeout_ms, uint32_t idle_timeout_ms, conn_sweep_cb check,
                     void *owner);
/* The timer that closes slow and idle connections: every quarter of the shorter timeout (10 ms ..
 * 1 s), not keeping the loop alive. _set_timeouts after a reload. */
void sweep_timer_start(uv_loop_t *loop, uv_timer_t *timer, void *data, uv_timer_cb on_sweep, uint32_t header_timeout_ms,
                       uint32_t idle_timeout_ms);
void sweep_timer_set_timeouts(uv_timer_t *timer, uint32_t header_timeout_ms, uint32_t idle_timeout_ms);

/* ---- server_call.c */
/* NULL when out of memory or (*over_budget) when the memory budget has no room for another call. */
isn_grpc_call *isn_grpc_call_new(isn_grpc_conn *conn, int32_t id, bool *over_budget);
/* Frees the pooled calls that were not needed since the last call of this (the sweep); returns
 * how many. */
uint32_t isn_grpc_trim_call_pool(isn_grpc_server *server);
/* The connection goes: abandoned calls it owned no longer count against it. */
void isn_grpc_calls_disown(isn_grpc_server *server, isn_grpc_conn *conn);
/* Unlinks the call from its connection; releases it, or abandons it while the program holds it. */
void isn_grpc_call_detach(isn_grpc_conn *conn, isn_grpc_call *call);
void isn_grpc_call_release(isn_grpc_server *server, isn_grpc_call *call);
/* Releases the connection's dropped calls (its stream has a reset queued and no longer names them). */
void isn_grpc_conn_release_dropped(isn_grpc_conn *conn);
/* Not gRPC at all (wrong method or content type): a bare HTTP status. */
void isn_grpc_call_http_error(isn_grpc_call *call, int http_status);
void isn_grpc_free_call_pool(isn_grpc_server *server);

/* ---- stream.c: a streaming call's request bytes, request end, and release */
int isn_grpc_stream_on_data(isn_grpc_call *call, const uint8_t *data, size_t len);
void isn_grpc_stream_on_end(isn_grpc_call *call);
void isn_grpc_stream_release(isn_grpc_call *call);

/* ---- conn_memory.c: what a connection holds outside its calls, charged to the budget */
/* Charges the connection itself and sets up conn->mem, the allocator its nghttp2 session uses. */
void isn_grpc_conn_memory_init(isn_grpc_conn *conn);
/* Charges a TLS session (TLS_CONN_BYTES); given back with the rest when the connection goes. */
void isn_grpc_conn_memory_charge_tls(isn_grpc_conn *conn);
/* Charges (or gives back) the change in the capacity of conn->pending and conn->sending. */
void isn_grpc_conn_memory_track_buffers(isn_grpc_conn *conn);
/* Gives back what is still charged: the connection is freed (its session and buffers first). */
void isn_grpc_conn_memory_release(isn_grpc_conn *conn);

/* ---- server_session.c */
int isn_grpc_session_new(isn_grpc_conn *conn);

/* ---- server_conn.c */
#ifndef ISN_GRPC_READ_BYTES_PER_ITERATION
#define ISN_GRPC_READ_BYTES_PER_ITERATION 65536
#endif
/* A read's bytes at most; a connection's share of an iteration is several reads. */
#ifndef ISN_GRPC_READ_CHUNK_BYTES
#define ISN_GRPC_READ_CHUNK_BYTES 16384
#endif
/* nghttp2 takes what it is given whole, and what that brought about (refusals) can be flushed only after
 * it: a read is given to it in slices of this much, with the flush check (ISN_GRPC_FLUSH_WAIT_NS) between
 * them. Short requests come twenty or so to 2 KiB. */
#ifndef ISN_GRPC_RECV_SLICE_BYTES
#define ISN_GRPC_RECV_SLICE_BYTES 2048
#endif
/* Output a read brings about waits for the iteration's flush at most this long after the last flush
 * (server_conn.c): one write per connection per iteration, without holding refusals back. */
#define ISN_GRPC_FLUSH_WAIT_NS 200000ull
void isn_grpc_on_connection(uv_stream_t *listener, int status);
/* Reading again on the connections paused in the last iteration (before the loop polls). */
void isn_grpc_resume_paused(isn_grpc_server *server);
/* A peer's inbox: takes on the connections the listening server handed to this loop. */
void isn_grpc_adopt_handed_over(uv_async_t *async);
void isn_grpc_conn_schedule_flush(isn_grpc_conn *conn);
void isn_grpc_flush_dirty(uv_check_t *check);
/* At the iteration's check: its poll blocked config.stall_seen_ns past its timeout, on_stall. */
void isn_grpc_poll_check_stall(isn_grpc_server *server, uint64_t now);
/* ---- server.c */
/* The earliest the bytes read in this loop iteration (now: the time of this read) can have reached a
 * socket (see poll_watch). */
uint64_t isn_grpc_read_arrival_floor(isn_grpc_server *server, uint64_t now);
void isn_grpc_conn_close(isn_grpc_conn *conn);
void isn_grpc_conn_goaway(isn_grpc_conn *conn);
/* GOAWAY with `error_code`; stops reading and closes once what is queued is written. */
void isn_grpc_conn_terminate(isn_grpc_conn *conn, uint32_t error_code);
/* Rapid reset's cut: isn_grpc_conn_terminate, its output held back for config.reset_hold_ms while the loop
 * holds fewer than ISN_GRPC_MAX_HELD_CONNECTIONS (the sweep releases it, at once when the server drains). */
void isn_grpc_conn_cut(isn_grpc_conn *conn, uint32_t error_code);
bool isn_grpc_evict_idle(void *server);
/* Closes the connection once what is queued for it has been written. */
void isn_grpc_conn_close_when_flushed(isn_grpc_conn *conn);
void isn_grpc_sweep(uv_timer_t *timer);
/* After a burst (the budget's use fell well below its peak, or the call pool shrank by many): the
 * allocator gives its unused pages back. */
void isn_grpc_release_after_burst(isn_grpc_server *server, uint32_t calls_trimmed);

/* ---- server.c */
/* The config with every 0 meaning "default" replaced by the default. */
void isn_grpc_server_resolve_config(isn_grpc_server_config *config);
/* Called whenever a call or a connection goes away: while draining, finishes the drain. */
void isn_grpc_server_check_drained(isn_grpc_server *server);

#endif
