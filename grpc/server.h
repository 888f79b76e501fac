/* The gRPC server core of grpc/ (isnd, isn-agg) on a libuv loop: listening socket, connections and
 * their HTTP/2 sessions, limits and timeouts, a pool of calls (one per request stream), replies and trailers, GOAWAY and drain.
 * The program supplies handlers; everything runs on the loop thread. Unary calls, and streaming
 * calls where the program asks for them (isn_grpc_call_stream below). */
#ifndef ISN_GRPC_SERVER_H
#define ISN_GRPC_SERVER_H

#include <uv.h>

#include "grpc/framing.h"
#include "grpc/tls.h"

typedef struct isn_grpc_server isn_grpc_server;
typedef struct isn_grpc_call isn_grpc_call;
typedef struct isn_grpc_stats_server isn_grpc_stats_server;

/* Open connections counted against one maximum, shared by a gRPC server and a stats server (so a
 * flood on one port cannot starve the other of descriptors), and by the servers of several loops.
 * The program owns it and may change `max` at any time; the fields are read and written atomically
 * (__atomic), so set `max` with isn_grpc_connection_limit_set when several loops share it. */
typedef struct {
    uint32_t max;      /* 0 = no limit */
    uint32_t open;
    uint64_t rejected; /* connections closed at once because `max` was reached */
} isn_grpc_connection_limit;

void isn_grpc_connection_limit_set(isn_grpc_connection_limit *limit, uint32_t max);

/* Defaults of the protections below (a field left 0 takes its default). */
#define ISN_GRPC_DEFAULT_WRITE_TIMEOUT_MS 30000
#define ISN_GRPC_DEFAULT_MIN_SEND_RATE 1024 /* bytes per second */
#define ISN_GRPC_DEFAULT_MEMORY_BUDGET (256ull << 20)
#define ISN_GRPC_DEFAULT_MAX_HEADER_LIST_BYTES 16384
#define ISN_GRPC_DEFAULT_MAX_EARLY_RESETS_PER_SECOND 5000
#define ISN_GRPC_EARLY_RESET_BURST 1000.0
#define ISN_GRPC_DEFAULT_STATS_MAX_CONNECTIONS 64
#define ISN_GRPC_DEFAULT_STATS_WRITE_TIMEOUT_MS 10000
#define ISN_GRPC_DEFAULT_STREAM_LIMIT_TARGET_US 2000

typedef struct {
    uint32_t max_concurrent_streams; /* per connection (HTTP/2 SETTINGS) */
    /* Lower the streams per connection while the loop is saturated with bytes left in its sockets,
     * and raise them back to max_concurrent_streams once it is not (stream_limit.c). */
    bool adaptive_stream_limit;
    /* a 50 ms window in which every request waited past this from its arrival to its HEADERS is a queue
     * the loop lowers the streams for (0: ISN_GRPC_DEFAULT_STREAM_LIMIT_TARGET_US) */
    uint32_t stream_limit_target_us;
    uint32_t max_message_bytes;      /* largest request message accepted */
    uint32_t header_timeout_ms;      /* preface, and each request's headers and body, within this */
    /* A connection with no request in flight is closed (GOAWAY) this long after its last request
     * began or ended, whatever else it sends (PINGs, a frame a byte at a time do not extend it). */
    uint32_t idle_timeout_ms;
    size_t call_app_bytes;           /* per-call storage for the program (isn_grpc_call_app), pooled with the call */
    /* Open gRPC connections (NULL = no limit). At the limit the connection idle longest is closed
     * to make room; only when none is idle is the new one refused. */
    isn_grpc_connection_limit *limit;
    /* Requests in flight on one connection, those its client reset while the program still works on
     * them included: more streams are refused (REFUSED_STREAM). 0 = 2 x max_concurrent_streams. */
    uint32_t max_requests_per_connection;
    /* A connection that owes output (replies, frames) and takes less than min_send_rate bytes per
     * second of it over write_timeout_ms is closed: clients that do not read (or read a trickle)
     * hold nothing. 0 = ISN_GRPC_DEFAULT_WRITE_TIMEOUT_MS, ISN_GRPC_DEFAULT_MIN_SEND_RATE. */
    uint32_t write_timeout_ms;
    uint32_t min_send_rate;
    /* Node-wide memory for connections (nghttp2's sessions, streams and queued frames, output
     * buffers), calls (pooled ones too), request bodies and replies (isn_grpc_memory_budget); past it a
     * new request, body or reply gets RESOURCE_EXHAUSTED naming the budget and a new connection
     * GOAWAY. 0 = ISN_GRPC_DEFAULT_MEMORY_BUDGET. */
    uint64_t memory_budget_bytes;
    /* The budget of several servers (one per loop) together; NULL = the server's own. The limit is
     * memory_budget_bytes of whichever server was made or reconfigured last. */
    isn_grpc_memory_budget *shared_budget;
    /* SETTINGS_MAX_HEADER_LIST_SIZE, enforced: a request whose header list decodes to more (RFC 9113
     * size: name + value + 32 per field) is reset. 0 = ISN_GRPC_DEFAULT_MAX_HEADER_LIST_BYTES. */
    uint32_t max_header_list_bytes;
    /* Rapid reset: streams the client opened and reset before any reply, per second per connection,
     * with a burst of ISN_GRPC_EARLY_RESET_BURST (or two seconds' worth, if less) that every answered
     * stream of the connection refills by one; past it the connection gets GOAWAY ENHANCE_YOUR_CALM.
     * Resets of streams answered OK never count (a refusal is no answer). 0 = ISN_GRPC_DEFAULT_MAX_EARLY_RESETS_PER_SECOND. */
    uint32_t max_early_resets_per_second;
    /* A connection cut for rapid reset is held before its GOAWAY goes out: nothing more read from it or
     * written to it for reset_hold_ms (released by the next sweep after that, or by a drain's first sweep).
     * A flood's client then waits on a full socket instead of reconnecting at once, which spares the
     * loop its next connections and the machine the flood's own work. At most ISN_GRPC_MAX_HELD_CONNECTIONS
     * a loop; past them a cut connection gets its GOAWAY at once. 0 = no hold. */
    uint32_t reset_hold_ms;
    /* TLS credentials (grpc/tls.h), NULL = plaintext. The handshake must finish within
     * header_timeout_ms like the preface after it, and each TLS connection is charged to the memory
     * budget. Read when a connection is accepted; set before listening (a reload keeps it). */
    isn_grpc_tls *tls;
    /* A poll that blocks this long past its timeout slept through a stall (the process, or the loop's
     * core, was stopped): on_stall tells the program. 0 = not watched. The program keeps the polls'
     * timeouts short while it wants stalls seen (a repeating timer): a poll that waits unbounded, or
     * longer than the stall, cannot tell. */
    uint64_t stall_seen_ns;
} isn_grpc_server_config;

typedef struct {
    /* A call was opened (request HEADERS began): set up its app storage. The storage is zeroed when
     * the call is first allocated, otherwise it holds what the previous use of it left. */
    void (*on_open)(isn_grpc_call *call, void *app);
    /* Headers complete, the request is a POST with a gRPC content type (else the core has answered
     * HTTP 405 or 415): refuse what can be refused before the body (isn_grpc_call_fail). */
    void (*on_headers)(isn_grpc_call *call, void *app);
    /* The one request message arrived (isn_grpc_call_message): answer now or later (isn_grpc_call_hold). */
    void (*on_request)(isn_grpc_call *call, void *app);
    /* A gRPC status was queued for the call (reply or failure): the place to count requests. */
    void (*on_status)(isn_grpc_call *call, int status, void *app);
    /* The call's last frame (the one ending its stream) was handed to the socket: the place to time what
     * an answer or a refusal took to leave, queued output and the rest of the loop's iteration included.
     * Not called for a call whose client left first, nor for one reset because the memory budget had no
     * room for its reply (that reset goes out after the call is released). May be NULL. */
    void (*on_sent)(isn_grpc_call *call, void *app);
    /* A held call lost its client (stream reset, connection closed): the reply will be dropped. */
    void (*on_abandoned)(isn_grpc_call *call, void *app);
    /* The call is done with: its storage goes back to the pool, or is freed (`freeing`: free what
     * the storage owns). A pooled call gets a second, freeing, call when it leaves the pool (trimmed,
     * freed, or no room in the memory budget to keep it). Returns the bytes the storage keeps for its
     * next use beyond call_app_bytes (buffers; 0 when freeing): charged to the memory budget while
     * the call is pooled and during its next use. */
    size_t (*on_release)(isn_grpc_call *call, bool freeing, void *app);
    /* After isn_grpc_server_drain: every call answered and every connection closed. */
    void (*on_drained)(isn_grpc_server *server, void *app);
    /* The loop's poll slept through a stall that ended about now_ns (config.stall_seen_ns). May be NULL. */
    void (*on_stall)(uint64_t now_ns, void *app);
} isn_grpc_server_handlers;

typedef struct {
    uint32_t connections;          /* open now */
    uint32_t open_calls;           /* calls allocated: receiving, held, replying, abandoned */
    uint64_t connections_accepted;
    uint64_t connections_timed_out; /* no preface in time, or idle */
    uint64_t protocol_errors;      /* HTTP/2 errors that ended a connection */
    uint64_t http_rejects;         /* streams that were not gRPC: HTTP 405 or 415 */
    uint64_t bytes_received;       /* request body bytes */
    uint64_t bytes_sent;           /* reply message bytes (framed) */
    uint64_t connections_evicted;  /* idle connections closed to make room at the connection limit */
    uint64_t write_timeouts;       /* connections closed: their client did not read */
    uint64_t reset_floods;         /* connections closed: too many streams reset before a reply */
    uint64_t reset_floods_held;    /* of those, held unread before their GOAWAY (reset_hold_ms) */
    uint64_t streams_refused;      /* requests in flight per connection, or memory budget, reached */
    uint64_t stream_limit_lowered; /* windows in which a saturated loop lowered its streams per connection */
    uint64_t stream_limit;         /* streams per connection the loops allow now (summed over loops) */
    uint64_t connections_over_budget; /* new connections sent GOAWAY: the memory budget had no room */
    uint64_t header_lists_too_large;
    uint64_t over_budget;          /* bodies and replies refused by the memory budget */
    uint64_t memory_used;          /* bytes charged to the budget now */
    uint64_t memory_pooled;        /* of which pooled calls keep (this server's; summed over loops) */
    uint64_t memory_budget;        /* its limit */
    uint64_t loop_busy_ns;         /* the loop's time outside its poll since the server began (0: not measured) */
} isn_grpc_server_counters;

isn_grpc_server *isn_grpc_server_new(uv_loop_t *loop, const isn_grpc_server_config *config, const isn_grpc_server_handlers *handlers,
                             void *app);
/* Binds and listens on HOST:PORT ([IPV6]:PORT; port 0 picks one); writes the bound address
 * ("127.0.0.1:41234") to `bound`. 0, or -1 with err. */
int isn_grpc_server_listen(isn_grpc_server *server, const char *host_port, char *bound, size_t bound_len, char *err,
                       size_t err_len);
/* Several loops, one server each (made with the same handlers, each on its loop): the connections
 * `front` accepts are handed in turn to it and to each peer, and then served wholly on the peer's
 * loop (its calls, replies and handlers run there). Call before the peer's loop runs. The
 * connection limit is checked by the server that takes the connection (it makes room among its own
 * idle connections). -1 when out of memory. */
int isn_grpc_server_add_peer(isn_grpc_server *front, isn_grpc_server *peer);
/* Takes the new timeouts and limits (a reload); the stream settings apply to new connections. */
void isn_grpc_server_reconfigure(isn_grpc_server *server, const isn_grpc_server_config *config);
/* Writes now what replies wait to go out; the loop's thread. Replies made outside the server's
 * callbacks otherwise go out after the next poll. */
void isn_grpc_server_flush(isn_grpc_server *server);
/* What the loop's thread did for the server so far: its time inside reads (frames decoded, requests
 * begun, refused or handed to the program, and what the program did with them there) and inside flushes
 * of waiting output (writes), the socket reads that brought bytes, the requests begun, and the socket
 * writes (those made between a read's slices included). The loop's thread only; the program takes the
 * difference over an iteration of its loop to tell what a long one was spent on. */
typedef struct {
    uint64_t read_ns, flush_ns, reads, requests, writes;
} isn_grpc_loop_work;
isn_grpc_loop_work isn_grpc_server_loop_work(const isn_grpc_server *server);
/* Closes the listening socket. */
void isn_grpc_server_stop_accepting(isn_grpc_server *server);
/* GOAWAY on every connection (and on any accepted later): clients finish their calls and go. */
void isn_grpc_server_goaway_all(isn_grpc_server *server);
/* Stop accepting, GOAWAY everywhere; once no call is open, each connection closes after writing
 * what it has queued; then on_drained. */
void isn_grpc_server_drain(isn_grpc_server *server);
/* Answers every call that has no reply and is not held with this status (drain time is up). */
void isn_grpc_server_fail_waiting(isn_grpc_server *server, int status, const char *message);
/* Closes the listener and every connection now (held calls become abandoned). */
void isn_grpc_server_close(isn_grpc_server *server);
/* Frees abandoned calls, the pool and the server; after uv_run returned (the handles are closed),
 * and once nothing holds a call any more (workers joined). */
void isn_grpc_server_free(isn_grpc_server *server);
/* Adds the server's counters to *sum; any thread (each is read atomically; the set is not one
 * snapshot). The memory gauges are its budget's, not added: servers may share one. */
void isn_grpc_server_add_counters(const isn_grpc_server *server, isn_grpc_server_counters *sum);
/* The server's counters alone (isn_grpc_server_add_counters onto zeroes). */
isn_grpc_server_counters isn_grpc_server_read_counters(const isn_grpc_server *server);
/* The protections' counters in Prometheus text, each name starting with `prefix` ("isn",
 * "isn_agg"): connections evicted, write timeouts, reset floods, streams refused, header lists
 * too large, requests over the memory budget, and the budget's use; the stats server's own when
 * `stats` is not NULL. */
void isn_grpc_render_protection_metrics(const isn_grpc_server *server, const isn_grpc_stats_server *stats, const char *prefix,
                                    byte_buffer *out);
/* The same from counters summed over several servers (isn_grpc_server_add_counters). */
void isn_grpc_render_protection_counters(const isn_grpc_server_counters *counters, const isn_grpc_stats_server *stats,
                                     const char *prefix, byte_buffer *out);

/* ---- one call */

/* ":path" as sent ("/isn.v1.Search/Search"), cut at 95 bytes. */
const char *isn_grpc_call_path(const isn_grpc_call *call);
/* A small integer the program keeps with the call (e.g. which method); 0 at open. */
void isn_grpc_call_set_tag(isn_grpc_call *call, int tag);
int isn_grpc_call_tag(const isn_grpc_call *call);
/* The program's storage (config.call_app_bytes, max_align_t-aligned). */
void *isn_grpc_call_app(const isn_grpc_call *call);
/* The call that owns this app storage. */
isn_grpc_call *isn_grpc_call_from_app(void *app_storage);
/* The request message without its prefix (valid until the call is released). */
const uint8_t *isn_grpc_call_message(const isn_grpc_call *call, size_t *len);
/* The request message unpacked with `allocator` (an arena, say; NULL = malloc). NULL when it is not
 * a valid message of that type: the call has then been answered INVALID_ARGUMENT. */
void *isn_grpc_call_unpack(isn_grpc_call *call, const ProtobufCMessageDescriptor *descriptor, ProtobufCAllocator *allocator);
/* grpc-timeout in nanoseconds; 0 = none sent. */
uint64_t isn_grpc_call_timeout_ns(const isn_grpc_call *call);
/* The grpc-timeout header was present but malformed (answer INVALID_ARGUMENT). */
bool isn_grpc_call_timeout_malformed(const isn_grpc_call *call);
/* The grpc-timeout header was a zero ("0m"): the deadline had passed when the call came (answer
 * DEADLINE_EXCEEDED; isn_grpc_call_timeout_ns says 0 = none for it). */
bool isn_grpc_call_timeout_expired(const isn_grpc_call *call);
/* When the request's HEADERS arrived (isn_now_ns). */
uint64_t isn_grpc_call_opened_ns(const isn_grpc_call *call);
/* The earliest its HEADERS can have reached the server's socket: a loop that is behind reads bytes
 * that waited in the kernel meanwhile, and that wait spent part of the request's deadline. */
uint64_t isn_grpc_call_arrived_ns(const isn_grpc_call *call);

/* The program keeps the call past the handler (a worker has it): if the client goes away meanwhile
 * the call is abandoned (on_abandoned), not freed. */
void isn_grpc_call_hold(isn_grpc_call *call);
/* Drops the hold. True when the call is still open: reply now. False when it was abandoned: it has
 * been released and must not be touched again. */
bool isn_grpc_call_unhold(isn_grpc_call *call);

/* Success: `framed` (5-byte prefix and message) then trailers with grpc-status 0. Not copied: it
 * must stay valid and unchanged until the call is released (keep it in the app storage). */
void isn_grpc_call_reply_framed(isn_grpc_call *call, const uint8_t *framed, size_t len);
/* The same for a reply whose `charged` bytes the caller already charged to the server's memory budget
 * (a worker that built it: replies being built count against the budget too, so that clients that do
 * not read cannot make the node hold more than the budget). The call takes the charge over (released
 * with it); a call already answered or closed gives it back at once. */
void isn_grpc_call_reply_framed_charged(isn_grpc_call *call, const uint8_t *framed, size_t len, uint64_t charged);
/* Success: packs the message into the call's own reply buffer (kept across uses) and replies.
 * Returns the status the client gets: OK, or RESOURCE_EXHAUSTED when the reply found no memory. */
int isn_grpc_call_reply_message(isn_grpc_call *call, const ProtobufCMessage *message);
/* Failure: a trailers-only response with the status and the (percent-encoded) message. */
void isn_grpc_call_fail(isn_grpc_call *call, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void isn_grpc_call_vfail(isn_grpc_call *call, int status, const char *fmt, va_list ap);
/* The same with a fixed message, already percent-encoded as grpc-message needs (plain ASCII without
 * '%' is), that outlives the call (a literal): the cheapest refusal there is. */
void isn_grpc_call_fail_static(isn_grpc_call *call, int status, const char *message);

/* ---- streaming calls (grpc/stream.c) */
/* A call streams when the program says so from on_headers: its request messages then come one by
 * one to on_message as they arrive (on_request is not called), and it answers with any number of
 * messages (isn_grpc_call_stream_send) and then trailers (isn_grpc_call_stream_finish). A streaming call
 * needs no hold: on_close tells the program when it is gone, however it ends (finished, reset by
 * the client, connection lost, server closed), after which it must not be touched. */
typedef struct isn_grpc_stream isn_grpc_stream;
typedef struct {
    void (*on_message)(isn_grpc_call *call, const uint8_t *message, size_t len, void *user);
    void (*on_half_close)(isn_grpc_call *call, void *user); /* the client sent its last message */
    void (*on_close)(isn_grpc_call *call, void *user);
} isn_grpc_stream_handlers;
#define ISN_GRPC_STREAM_MESSAGE_MAX 256 /* longest grpc-message of a finish */
/* From on_headers. 0, or -1 (out of memory, or the call was already answered). */
int isn_grpc_call_stream(isn_grpc_call *call, const isn_grpc_stream_handlers *handlers, void *user);
bool isn_grpc_call_is_stream(const isn_grpc_call *call);
/* Queues one reply message (the response headers go out before the first). 0, or -1 when the
 * call is finishing or gone, or the message did not fit (then the call is finished with
 * RESOURCE_EXHAUSTED). */
int isn_grpc_call_stream_send(isn_grpc_call *call, const ProtobufCMessage *message);
/* Trailers with `status` after what is queued (counted through on_status). */
void isn_grpc_call_stream_finish(isn_grpc_call *call, int status, const char *message);

/* ---- standard services on any server core (grpc/health_watch.c, grpc/reflection.c) */
/* grpc.health.v1.Health/Watch: a registry of the server's Watch streams. `status_of` gives a
 * service's status now: 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN. */
typedef struct isn_grpc_health_watchers isn_grpc_health_watchers;
typedef int (*isn_grpc_health_status_fn)(const char *service, void *app);
isn_grpc_health_watchers *isn_grpc_health_watchers_new(isn_grpc_health_status_fn status_of, void *app);
/* From on_headers of "/grpc.health.v1.Health/Watch": streams the call. False when it could not
 * (the call has then been answered). */
bool isn_grpc_health_watch(isn_grpc_health_watchers *watchers, isn_grpc_call *call);
/* The status may have changed: each watcher whose service's status differs from what it was last
 * sent gets the new one. */
void isn_grpc_health_changed(isn_grpc_health_watchers *watchers);
/* Draining: every watcher gets NOT_SERVING and its stream ends (OK). */
void isn_grpc_health_shutdown(isn_grpc_health_watchers *watchers);
uint32_t isn_grpc_health_num_watchers(const isn_grpc_health_watchers *watchers);
/* After the server is freed (the streams are gone). */
void isn_grpc_health_watchers_free(isn_grpc_health_watchers *watchers);

/* grpc.reflection.v1 and v1alpha ServerReflection/ServerReflectionInfo: the services of every
 * .proto of the project (isn.v1.Search, grpc.health.v1.Health and reflection itself), with their
 * file descriptors. True when `path` is a reflection call: it then streams (or has been answered). */
bool isn_grpc_reflection_serve(isn_grpc_call *call);

/* process_cpu_seconds_total, process_open_fds, process_max_fds, process_virtual_memory_bytes,
 * process_resident_memory_bytes and process_start_time_seconds, as Prometheus' client libraries name
 * them (grpc/process_metrics.c), for a program's /metrics. */
void isn_grpc_render_process_metrics(byte_buffer *out, double start_time_seconds);

/* ---- trace context and request-loop header of a call */
/* The traceparent header the call came with, as sent ("" when none, or longer than one can be). */
const char *isn_grpc_call_traceparent(const isn_grpc_call *call);
/* The isn-via header (the aggregators a request went through, which isn-agg reads to refuse a request
 * loop) as sent: "" when none, NULL when longer than ISN_GRPC_VIA_MAX. */
const char *isn_grpc_call_via(const isn_grpc_call *call);

#endif
