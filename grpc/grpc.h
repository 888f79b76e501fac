/* gRPC over HTTP/2, written once for every program of the tree: message framing (5-byte prefix,
 * grpc-timeout, grpc-message encoding, status codes), a server core on a libuv loop that calls the
 * program's handlers (isnd, isn-agg), the HTTP/1.1 stats endpoint both servers share, and the
 * client (isn-query, isn-bench, isn-agg, tests). nghttp2 does the HTTP/2 framing. */
#ifndef ISN_GRPC_H
#define ISN_GRPC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>
#include <uv.h>

#include "base/base.h"

/* ================================================================== framing */
/* The parts of gRPC that are not HTTP/2. Pure functions and a byte-at-a-time reader, so they are
 * unit-tested without sockets. */

#define GRPC_PREFIX_BYTES 5

typedef enum {
    GRPC_STATUS_OK = 0,
    GRPC_STATUS_CANCELLED = 1,
    GRPC_STATUS_UNKNOWN = 2,
    GRPC_STATUS_INVALID_ARGUMENT = 3,
    GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    GRPC_STATUS_NOT_FOUND = 5,
    GRPC_STATUS_ALREADY_EXISTS = 6,
    GRPC_STATUS_PERMISSION_DENIED = 7,
    GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    GRPC_STATUS_FAILED_PRECONDITION = 9,
    GRPC_STATUS_ABORTED = 10,
    GRPC_STATUS_OUT_OF_RANGE = 11,
    GRPC_STATUS_UNIMPLEMENTED = 12,
    GRPC_STATUS_INTERNAL = 13,
    GRPC_STATUS_UNAVAILABLE = 14,
    GRPC_STATUS_DATA_LOSS = 15,
    GRPC_STATUS_UNAUTHENTICATED = 16,
    GRPC_STATUS_COUNT
} grpc_status_code;

/* "OK", "INVALID_ARGUMENT", ... ("UNKNOWN" for codes out of range). */
const char *grpc_status_name(int status);

/* Writes the prefix of an uncompressed message of `length` bytes. */
void grpc_write_prefix(uint8_t out[GRPC_PREFIX_BYTES], uint32_t length);

typedef enum {
    GRPC_READ_OK = 0,            /* consumed; more may follow */
    GRPC_READ_TOO_LARGE,         /* the prefix announces more than max_length */
    GRPC_READ_COMPRESSED,        /* compressed flag set: no compression is supported */
    GRPC_READ_BAD_FLAGS,         /* flag byte other than 0 or 1 */
    GRPC_READ_EXTRA_MESSAGE,     /* a second message on a unary call */
    GRPC_READ_OUT_OF_MEMORY,
    GRPC_READ_TRUNCATED,         /* (finish) stream ended inside a prefix or a body */
    GRPC_READ_NO_MESSAGE,        /* (finish) stream ended before any message */
    GRPC_READ_OVER_BUDGET,       /* the body would take the server past its memory budget */
} grpc_read_result;

/* Memory that requests and replies may hold across all connections of a server (or of the servers
 * of several loops that share it): a charge that would pass `limit` is refused (the caller answers
 * RESOURCE_EXHAUSTED) instead of growing. Its fields are read and written atomically (__atomic), so
 * threads may share it; read them the same way. */
typedef struct {
    uint64_t limit; /* 0 = no limit */
    uint64_t used;
    uint64_t peak;    /* most used at once; the owner may lower it to `used` */
    uint64_t refused; /* charges refused */
} grpc_memory_budget;

/* True (and charged) when `bytes` more fit; a NULL budget takes everything. */
bool grpc_budget_charge(grpc_memory_budget *budget, uint64_t bytes);
/* Charges `bytes` even past the limit: memory already taken that cannot be refused without breaking
 * what holds it (nghttp2's state, the rounding of a buffer to its capacity). The next charge that
 * would pass the limit is refused. */
void grpc_budget_add(grpc_memory_budget *budget, uint64_t bytes);
/* True when `bytes` more would fit now (nothing is charged). */
bool grpc_budget_has_room(const grpc_memory_budget *budget, uint64_t bytes);
void grpc_budget_release(grpc_memory_budget *budget, uint64_t bytes);

/* Reassembles the one message of a unary request from DATA chunks of any size. Bodies up to
 * `inline_cap` bytes land in caller-provided storage; larger ones in one malloc of exactly their
 * length (bounded by max_length), released by grpc_reader_reset. */
typedef struct {
    uint8_t prefix[GRPC_PREFIX_BYTES];
    uint32_t prefix_have;
    uint32_t length; /* announced by the prefix */
    uint32_t have;   /* body bytes received */
    uint32_t messages;
    uint32_t max_length;
    uint8_t *body;
    uint8_t *inline_buf;
    uint32_t inline_cap;
    grpc_memory_budget *budget; /* charged for a heap body; NULL = none */
} grpc_reader;

void grpc_reader_init(grpc_reader *reader, uint8_t *inline_buf, uint32_t inline_cap, uint32_t max_length);
/* Heap bodies are charged to `budget` (kept across resets). */
void grpc_reader_set_budget(grpc_reader *reader, grpc_memory_budget *budget);
/* Frees a heap body and starts over (max_length and budget kept). */
void grpc_reader_reset(grpc_reader *reader);
grpc_read_result grpc_reader_feed(grpc_reader *reader, const uint8_t *data, size_t len);
/* The request stream ended: GRPC_READ_OK when exactly one whole message arrived. */
grpc_read_result grpc_reader_finish(const grpc_reader *reader);
/* A sentence for the client about a failed result (names the sizes involved). */
void grpc_reader_describe(const grpc_reader *reader, grpc_read_result result, char *out, size_t out_len);

/* grpc-timeout: 1 to 8 digits and a unit H, M, S, m, u or n. Returns 0 and nanoseconds, or -1. */
int grpc_parse_timeout(const char *value, size_t len, uint64_t *ns);
/* The largest grpc-timeout value (8 digits), and room for a formatted header value with its NUL. */
#define GRPC_TIMEOUT_MAX_VALUE 99999999ull
#define GRPC_TIMEOUT_MAX_LEN 10
/* grpc-timeout for a timeout of ns nanoseconds, per the spec: at most 8 digits, in the finest unit
 * that holds them, rounded up (never a shorter deadline than asked). Writes a NUL-terminated value
 * (out_len >= GRPC_TIMEOUT_MAX_LEN) and returns its length. */
size_t grpc_format_timeout(uint64_t ns, char *out, size_t out_len);

/* protobuf-c unpacks a `string` as a C string, so one holding a NUL byte would be silently cut
 * there. True when a string field of the message (or of one nested in it) holds a NUL, with the
 * field's dotted name ("global_stats.terms.term") in `field`. Walks the wire form of a message that
 * has already unpacked. */
bool grpc_message_nul_string_field(const ProtobufCMessageDescriptor *descriptor, const uint8_t *data, size_t len,
                                   char *field, size_t field_len);

/* grpc-message encoding: bytes outside printable ASCII, and '%', become %XX. Always NUL-terminates;
 * cuts at a whole escape when out is too small. Returns the length written. */
size_t grpc_percent_encode(const char *in, char *out, size_t out_len);

/* ================================================================== server core */
/* A gRPC server on a libuv loop: listening socket, connections and their HTTP/2 sessions, limits
 * and timeouts, a pool of calls (one per request stream), replies and trailers, GOAWAY and drain.
 * The program supplies handlers; everything runs on the loop thread. Unary calls, and streaming
 * calls where the program asks for them (grpc_call_stream below). */

typedef struct grpc_server grpc_server;
typedef struct grpc_call grpc_call;
typedef struct grpc_stats_server grpc_stats_server;

/* Open connections counted against one maximum, shared by a gRPC server and a stats server (so a
 * flood on one port cannot starve the other of descriptors), and by the servers of several loops.
 * The program owns it and may change `max` at any time; the fields are read and written atomically
 * (__atomic), so set `max` with grpc_connection_limit_set when several loops share it. */
typedef struct {
    uint32_t max;      /* 0 = no limit */
    uint32_t open;
    uint64_t rejected; /* connections closed at once because `max` was reached */
} grpc_connection_limit;

void grpc_connection_limit_set(grpc_connection_limit *limit, uint32_t max);

/* Defaults of the protections below (a field left 0 takes its default). */
#define GRPC_DEFAULT_WRITE_TIMEOUT_MS 30000
#define GRPC_DEFAULT_MIN_SEND_RATE 1024 /* bytes per second */
#define GRPC_DEFAULT_MEMORY_BUDGET (256ull << 20)
#define GRPC_DEFAULT_MAX_HEADER_LIST_BYTES 16384
#define GRPC_DEFAULT_MAX_EARLY_RESETS_PER_SECOND 5000
#define GRPC_EARLY_RESET_BURST 1000.0
#define GRPC_DEFAULT_STATS_MAX_CONNECTIONS 64
#define GRPC_DEFAULT_STATS_WRITE_TIMEOUT_MS 10000

typedef struct {
    uint32_t max_concurrent_streams; /* per connection (HTTP/2 SETTINGS) */
    uint32_t max_message_bytes;      /* largest request message accepted */
    uint32_t header_timeout_ms;      /* preface, and each request's headers and body, within this */
    /* A connection with no request in flight is closed (GOAWAY) this long after its last request
     * began or ended, whatever else it sends (PINGs, a frame a byte at a time do not extend it). */
    uint32_t idle_timeout_ms;
    size_t call_app_bytes;           /* per-call storage for the program (grpc_call_app), pooled with the call */
    /* Open gRPC connections (NULL = no limit). At the limit the connection idle longest is closed
     * to make room; only when none is idle is the new one refused. */
    grpc_connection_limit *limit;
    /* Requests in flight on one connection, those its client reset while the program still works on
     * them included: more streams are refused (REFUSED_STREAM). 0 = 2 x max_concurrent_streams. */
    uint32_t max_requests_per_connection;
    /* A connection that owes output (replies, frames) and takes less than min_send_rate bytes per
     * second of it over write_timeout_ms is closed: clients that do not read (or read a trickle)
     * hold nothing. 0 = GRPC_DEFAULT_WRITE_TIMEOUT_MS, GRPC_DEFAULT_MIN_SEND_RATE. */
    uint32_t write_timeout_ms;
    uint32_t min_send_rate;
    /* Node-wide memory for connections (nghttp2's sessions, streams and queued frames, output
     * buffers), calls (pooled ones too), request bodies and replies (grpc_memory_budget); past it a
     * new request, body or reply gets RESOURCE_EXHAUSTED naming the budget and a new connection
     * GOAWAY. 0 = GRPC_DEFAULT_MEMORY_BUDGET. */
    uint64_t memory_budget_bytes;
    /* The budget of several servers (one per loop) together; NULL = the server's own. The limit is
     * memory_budget_bytes of whichever server was made or reconfigured last. */
    grpc_memory_budget *shared_budget;
    /* SETTINGS_MAX_HEADER_LIST_SIZE, enforced: a request whose header list decodes to more (RFC 9113
     * size: name + value + 32 per field) is reset. 0 = GRPC_DEFAULT_MAX_HEADER_LIST_BYTES. */
    uint32_t max_header_list_bytes;
    /* Rapid reset: streams the client opened and reset before any reply, per second per connection,
     * with a burst of GRPC_EARLY_RESET_BURST (or two seconds' worth, if less) that every answered
     * stream of the connection refills by one; past it the connection gets GOAWAY ENHANCE_YOUR_CALM.
     * Resets of answered streams never count. 0 = GRPC_DEFAULT_MAX_EARLY_RESETS_PER_SECOND. */
    uint32_t max_early_resets_per_second;
} grpc_server_config;

typedef struct {
    /* A call was opened (request HEADERS began): set up its app storage. The storage is zeroed when
     * the call is first allocated, otherwise it holds what the previous use of it left. */
    void (*on_open)(grpc_call *call, void *app);
    /* Headers complete, the request is a POST with a gRPC content type (else the core has answered
     * HTTP 405 or 415): refuse what can be refused before the body (grpc_call_fail). */
    void (*on_headers)(grpc_call *call, void *app);
    /* The one request message arrived (grpc_call_message): answer now or later (grpc_call_hold). */
    void (*on_request)(grpc_call *call, void *app);
    /* A gRPC status was queued for the call (reply or failure): the place to count requests. */
    void (*on_status)(grpc_call *call, int status, void *app);
    /* A held call lost its client (stream reset, connection closed): the reply will be dropped. */
    void (*on_abandoned)(grpc_call *call, void *app);
    /* The call is done with: its storage goes back to the pool, or is freed (`freeing`: free what
     * the storage owns). A pooled call gets a second, freeing, call when it leaves the pool (trimmed,
     * freed, or no room in the memory budget to keep it). Returns the bytes the storage keeps for its
     * next use beyond call_app_bytes (buffers; 0 when freeing): charged to the memory budget while
     * the call is pooled and during its next use. */
    size_t (*on_release)(grpc_call *call, bool freeing, void *app);
    /* After grpc_server_drain: every call answered and every connection closed. */
    void (*on_drained)(grpc_server *server, void *app);
} grpc_server_handlers;

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
    uint64_t streams_refused;      /* requests in flight per connection, or memory budget, reached */
    uint64_t connections_over_budget; /* new connections sent GOAWAY: the memory budget had no room */
    uint64_t header_lists_too_large;
    uint64_t over_budget;          /* bodies and replies refused by the memory budget */
    uint64_t memory_used;          /* bytes charged to the budget now */
    uint64_t memory_pooled;        /* of which pooled calls keep (this server's; summed over loops) */
    uint64_t memory_budget;        /* its limit */
} grpc_server_counters;

grpc_server *grpc_server_new(uv_loop_t *loop, const grpc_server_config *config, const grpc_server_handlers *handlers,
                             void *app);
/* Binds and listens on HOST:PORT ([IPV6]:PORT; port 0 picks one); writes the bound address
 * ("127.0.0.1:41234") to `bound`. 0, or -1 with err. */
int grpc_server_listen(grpc_server *server, const char *host_port, char *bound, size_t bound_len, char *err,
                       size_t err_len);
/* Several loops, one server each (made with the same handlers, each on its loop): the connections
 * `front` accepts are handed in turn to it and to each peer, and then served wholly on the peer's
 * loop (its calls, replies and handlers run there). Call before the peer's loop runs. The
 * connection limit is checked by the server that takes the connection (it makes room among its own
 * idle connections). -1 when out of memory. */
int grpc_server_add_peer(grpc_server *front, grpc_server *peer);
/* Takes the new timeouts and limits (a reload); the stream settings apply to new connections. */
void grpc_server_reconfigure(grpc_server *server, const grpc_server_config *config);
/* Closes the listening socket. */
void grpc_server_stop_accepting(grpc_server *server);
/* GOAWAY on every connection (and on any accepted later): clients finish their calls and go. */
void grpc_server_goaway_all(grpc_server *server);
/* Stop accepting, GOAWAY everywhere; once no call is open, each connection closes after writing
 * what it has queued; then on_drained. */
void grpc_server_drain(grpc_server *server);
/* Answers every call that has no reply and is not held with this status (drain time is up). */
void grpc_server_fail_waiting(grpc_server *server, int status, const char *message);
/* Closes the listener and every connection now (held calls become abandoned). */
void grpc_server_close(grpc_server *server);
/* Frees abandoned calls, the pool and the server; after uv_run returned (the handles are closed),
 * and once nothing holds a call any more (workers joined). */
void grpc_server_free(grpc_server *server);
/* Adds the server's counters to *sum; any thread (each is read atomically; the set is not one
 * snapshot). The memory gauges are its budget's, not added: servers may share one. */
void grpc_server_add_counters(const grpc_server *server, grpc_server_counters *sum);
/* The server's counters alone (grpc_server_add_counters onto zeroes). */
grpc_server_counters grpc_server_read_counters(const grpc_server *server);
/* The protections' counters in Prometheus text, each name starting with `prefix` ("isn",
 * "isn_agg"): connections evicted, write timeouts, reset floods, streams refused, header lists
 * too large, requests over the memory budget, and the budget's use; the stats server's own when
 * `stats` is not NULL. */
void grpc_render_protection_metrics(const grpc_server *server, const grpc_stats_server *stats, const char *prefix,
                                    byte_buffer *out);
/* The same from counters summed over several servers (grpc_server_add_counters). */
void grpc_render_protection_counters(const grpc_server_counters *counters, const grpc_stats_server *stats,
                                     const char *prefix, byte_buffer *out);

/* ---- one call */

/* ":path" as sent ("/isn.v1.Search/Search"), cut at 95 bytes. */
const char *grpc_call_path(const grpc_call *call);
/* A small integer the program keeps with the call (e.g. which method); 0 at open. */
void grpc_call_set_tag(grpc_call *call, int tag);
int grpc_call_tag(const grpc_call *call);
/* The program's storage (config.call_app_bytes, max_align_t-aligned). */
void *grpc_call_app(const grpc_call *call);
/* The call that owns this app storage. */
grpc_call *grpc_call_from_app(void *app_storage);
/* The request message without its prefix (valid until the call is released). */
const uint8_t *grpc_call_message(const grpc_call *call, size_t *len);
/* The request message unpacked with `allocator` (an arena, say; NULL = malloc). NULL when it is not
 * a valid message of that type: the call has then been answered INVALID_ARGUMENT. */
void *grpc_call_unpack(grpc_call *call, const ProtobufCMessageDescriptor *descriptor, ProtobufCAllocator *allocator);
/* grpc-timeout in nanoseconds; 0 = none sent. */
uint64_t grpc_call_timeout_ns(const grpc_call *call);
/* The grpc-timeout header was present but malformed (answer INVALID_ARGUMENT). */
bool grpc_call_timeout_malformed(const grpc_call *call);
/* The grpc-timeout header was a zero ("0m"): the deadline had passed when the call came (answer
 * DEADLINE_EXCEEDED; grpc_call_timeout_ns says 0 = none for it). */
bool grpc_call_timeout_expired(const grpc_call *call);
/* When the request's HEADERS arrived (isn_now_ns). */
uint64_t grpc_call_opened_ns(const grpc_call *call);
/* The earliest its HEADERS can have reached the server's socket: a loop that is behind reads bytes
 * that waited in the kernel meanwhile, and that wait spent part of the request's deadline. */
uint64_t grpc_call_arrived_ns(const grpc_call *call);

/* The program keeps the call past the handler (a worker has it): if the client goes away meanwhile
 * the call is abandoned (on_abandoned), not freed. */
void grpc_call_hold(grpc_call *call);
/* Drops the hold. True when the call is still open: reply now. False when it was abandoned: it has
 * been released and must not be touched again. */
bool grpc_call_unhold(grpc_call *call);

/* Success: `framed` (5-byte prefix and message) then trailers with grpc-status 0. Not copied: it
 * must stay valid and unchanged until the call is released (keep it in the app storage). */
void grpc_call_reply_framed(grpc_call *call, const uint8_t *framed, size_t len);
/* The same for a reply whose `charged` bytes the caller already charged to the server's memory budget
 * (a worker that built it: replies being built count against the budget too, so that clients that do
 * not read cannot make the node hold more than the budget). The call takes the charge over (released
 * with it); a call already answered or closed gives it back at once. */
void grpc_call_reply_framed_charged(grpc_call *call, const uint8_t *framed, size_t len, uint64_t charged);
/* Success: packs the message into the call's own reply buffer (kept across uses) and replies.
 * Returns the status the client gets: OK, or RESOURCE_EXHAUSTED when the reply found no memory. */
int grpc_call_reply_message(grpc_call *call, const ProtobufCMessage *message);
/* Failure: a trailers-only response with the status and the (percent-encoded) message. */
void grpc_call_fail(grpc_call *call, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void grpc_call_vfail(grpc_call *call, int status, const char *fmt, va_list ap);

/* ---- streaming calls (grpc/stream.c) */
/* A call streams when the program says so from on_headers: its request messages then come one by
 * one to on_message as they arrive (on_request is not called), and it answers with any number of
 * messages (grpc_call_stream_send) and then trailers (grpc_call_stream_finish). A streaming call
 * needs no hold: on_close tells the program when it is gone, however it ends (finished, reset by
 * the client, connection lost, server closed), after which it must not be touched. */
typedef struct grpc_stream grpc_stream;
typedef struct {
    void (*on_message)(grpc_call *call, const uint8_t *message, size_t len, void *user);
    void (*on_half_close)(grpc_call *call, void *user); /* the client sent its last message */
    void (*on_close)(grpc_call *call, void *user);
} grpc_stream_handlers;
#define GRPC_STREAM_MESSAGE_MAX 256 /* longest grpc-message of a finish */
/* From on_headers. 0, or -1 (out of memory, or the call was already answered). */
int grpc_call_stream(grpc_call *call, const grpc_stream_handlers *handlers, void *user);
bool grpc_call_is_stream(const grpc_call *call);
/* Queues one reply message (the response headers go out before the first). 0, or -1 when the
 * call is finishing or gone, or the message did not fit (then the call is finished with
 * RESOURCE_EXHAUSTED). */
int grpc_call_stream_send(grpc_call *call, const ProtobufCMessage *message);
/* Trailers with `status` after what is queued (counted through on_status). */
void grpc_call_stream_finish(grpc_call *call, int status, const char *message);

/* ---- standard services on any server core (grpc/health_watch.c, grpc/reflection.c) */
/* grpc.health.v1.Health/Watch: a registry of the server's Watch streams. `status_of` gives a
 * service's status now: 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN. */
typedef struct grpc_health_watchers grpc_health_watchers;
typedef int (*grpc_health_status_fn)(const char *service, void *app);
grpc_health_watchers *grpc_health_watchers_new(grpc_health_status_fn status_of, void *app);
/* From on_headers of "/grpc.health.v1.Health/Watch": streams the call. False when it could not
 * (the call has then been answered). */
bool grpc_health_watch(grpc_health_watchers *watchers, grpc_call *call);
/* The status may have changed: each watcher whose service's status differs from what it was last
 * sent gets the new one. */
void grpc_health_changed(grpc_health_watchers *watchers);
/* Draining: every watcher gets NOT_SERVING and its stream ends (OK). */
void grpc_health_shutdown(grpc_health_watchers *watchers);
uint32_t grpc_health_num_watchers(const grpc_health_watchers *watchers);
/* After the server is freed (the streams are gone). */
void grpc_health_watchers_free(grpc_health_watchers *watchers);

/* grpc.reflection.v1 and v1alpha ServerReflection/ServerReflectionInfo: the services of every
 * .proto of the project (isn.v1.Search, grpc.health.v1.Health and reflection itself), with their
 * file descriptors. True when `path` is a reflection call: it then streams (or has been answered). */
bool grpc_reflection_serve(grpc_call *call);

/* process_cpu_seconds_total, process_open_fds, process_max_fds, process_virtual_memory_bytes,
 * process_resident_memory_bytes and process_start_time_seconds, as Prometheus' client libraries name
 * them (grpc/process_metrics.c), for a program's /metrics. */
void grpc_render_process_metrics(byte_buffer *out, double start_time_seconds);

/* ---- W3C trace context (grpc/trace.c) */
#define GRPC_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */
typedef struct {
    char trace_id[33]; /* 32 lowercase hex */
    char span_id[17];  /* 16 lowercase hex: the parent-id field */
    uint8_t flags;     /* 1 = sampled */
} grpc_trace;
/* The traceparent header the call came with, as sent ("" when none, or longer than one can be). */
const char *grpc_call_traceparent(const grpc_call *call);
/* A valid traceparent (version 00, or a later version's first four fields). */
bool grpc_trace_parse(const char *traceparent, grpc_trace *trace);
/* The traceparent for a call made on behalf of `incoming` (NULL or invalid: a new trace): the same
 * trace id and flags, a new span id. *trace (may be NULL) gets what was sent. */
void grpc_trace_child(const char *incoming, grpc_trace *trace, char out[GRPC_TRACEPARENT_LEN + 1]);
/* The isn-via header (the aggregators a request went through, which isn-agg reads to refuse a request
 * loop) as sent: "" when none, NULL when longer than GRPC_VIA_MAX. */
#define GRPC_VIA_MAX 255
const char *grpc_call_via(const grpc_call *call);

/* ================================================================== stats endpoint */
/* A deliberately small HTTP/1.1 server (GET and HEAD, keep-alive, pipelining, no request bodies)
 * for Prometheus, curl and load balancers. It answers the four pages every server shows: /metrics
 * (Prometheus text), /stats (JSON), /healthz ("ok" while the process runs) and /readyz; the
 * program fills in what only it knows. Any other path is a 404. */

typedef struct {
    void (*render_metrics)(void *app, byte_buffer *body); /* Prometheus text format */
    void (*render_json)(void *app, byte_buffer *body);
    /* Writes a one-line reason into `body` and returns 200 (ready) or 503 (not ready). */
    int (*readiness)(void *app, byte_buffer *body);
} grpc_stats_pages;

typedef struct {
    const char *server_name;   /* the Server header: "isnd/0.1.0" */
    uint32_t header_timeout_ms; /* a request head must arrive within this */
    uint32_t idle_timeout_ms;
    /* The stats port's own connection limit, apart from the gRPC port's so that neither starves the
     * other; at it the connection idle longest is closed to make room.
     * 0 = GRPC_DEFAULT_STATS_MAX_CONNECTIONS. */
    uint32_t max_connections;
    /* A page not taken by the client within this is dropped with its connection.
     * 0 = GRPC_DEFAULT_STATS_WRITE_TIMEOUT_MS. */
    uint32_t write_timeout_ms;
} grpc_stats_config;

typedef struct {
    uint32_t connections;
    uint64_t requests;
    uint64_t connections_timed_out; /* slow request head, idle, or a page not read in time */
    uint64_t connections_rejected;  /* max_connections reached with none idle */
    uint64_t connections_evicted;
} grpc_stats_counters;

grpc_stats_server *grpc_stats_server_new(uv_loop_t *loop, const grpc_stats_config *config,
                                         const grpc_stats_pages *pages, void *app);
int grpc_stats_server_listen(grpc_stats_server *server, const char *host_port, char *bound, size_t bound_len,
                             char *err, size_t err_len);
void grpc_stats_server_reconfigure(grpc_stats_server *server, const grpc_stats_config *config);
/* Closes the listener and every connection. */
void grpc_stats_server_close(grpc_stats_server *server);
/* After uv_run returned. */
void grpc_stats_server_free(grpc_stats_server *server);
const grpc_stats_counters *grpc_stats_server_get_counters(const grpc_stats_server *server);

/* ================================================================== client */
/* One HTTP/2 connection over a plain socket, many calls in flight on it. Blocking helpers for simple
 * tools (isn-query), and start/poll/finish for programs that keep many calls going (isn-bench,
 * isn-agg), by poll() or from a libuv loop (isn_grpc_client_watch). Not thread-safe: one client per
 * thread. No protobuf types in the client's calls. */

typedef struct isn_grpc_client isn_grpc_client;
typedef struct isn_grpc_call isn_grpc_call;

/* Connects to HOST:PORT ([IPV6]:PORT) and sends the HTTP/2 preface. NULL with err. */
isn_grpc_client *isn_grpc_connect(const char *host_port, uint32_t timeout_ms, char *err, size_t err_len);
void isn_grpc_close(isn_grpc_client *client);
/* The socket, for callers that poll() several clients at once; then call isn_grpc_poll(client, 0). */
int isn_grpc_fd(const isn_grpc_client *client);
/* False once the connection failed or the server sent GOAWAY (start no new calls on it). */
bool isn_grpc_usable(const isn_grpc_client *client);
/* The streams the server lets this connection have open at once (its SETTINGS_MAX_CONCURRENT_STREAMS;
 * nghttp2's assumption before the server's SETTINGS came). */
uint32_t isn_grpc_max_streams(const isn_grpc_client *client);

/* ------------------------------------------------------------------ raw calls */

typedef struct {
    const char *path;      /* "/isn.v1.Search/Search" */
    const uint8_t *body;   /* request bytes */
    size_t body_len;
    bool frame;            /* prepend the 5-byte gRPC prefix to body (false: body is sent exactly as given) */
    bool leave_open;       /* do not end the request stream (tests of stalled clients) */
    uint32_t timeout_ms;   /* grpc-timeout header; 0 = none */
    const char *content_type; /* NULL = application/grpc */
    const char *timeout_header; /* sent as grpc-timeout exactly as given, instead of timeout_ms (tests) */
    const char *traceparent;    /* W3C trace context header; NULL = none */
    const char *via;            /* isn-via header (grpc_call_via); NULL = none */
} isn_grpc_request;

typedef struct {
    int http_status;          /* 0 when no response headers came */
    int grpc_status;          /* -1 when no grpc-status came (reset stream, HTTP error, lost connection) */
    char grpc_message[512];   /* percent-decoded */
    uint32_t reset_code;      /* HTTP/2 error code when the server reset the stream */
    bool reset;
    uint8_t *message;         /* the reply message without its prefix (malloc'd; NULL when none) */
    size_t message_len;
    size_t body_len;          /* all response body bytes received, prefixes included */
} isn_grpc_result;

/* Queues a call; bytes go out on the next poll. NULL with err (connection unusable, out of memory). */
isn_grpc_call *isn_grpc_start(isn_grpc_client *client, const isn_grpc_request *request, char *err, size_t err_len);
/* Sends what is queued, waits up to timeout_ms for input (0 = do not wait), processes it.
 * 0, or -1 with err when the connection failed (every unfinished call is then done, with grpc_status -1). */
int isn_grpc_poll(isn_grpc_client *client, int timeout_ms, char *err, size_t err_len);
bool isn_grpc_call_done(const isn_grpc_call *call);
const isn_grpc_result *isn_grpc_call_result(const isn_grpc_call *call);
/* Frees the call; an unfinished one is cancelled (RST_STREAM CANCEL). */
void isn_grpc_call_free(isn_grpc_call *call);
/* Polls until the call is done or timeout_ms passes (-1 = no limit). 0, or -1 with err. */
int isn_grpc_wait(isn_grpc_client *client, isn_grpc_call *call, int timeout_ms, char *err, size_t err_len);

/* ------------------------------------------------------------------ isn.v1 */

typedef enum { ISN_GRPC_MODE_DEFAULT = 0, ISN_GRPC_MODE_OR = 1, ISN_GRPC_MODE_AND = 2 } isn_grpc_mode;

typedef struct {
    const char *query;             /* text; or NULL/"" and terms */
    const char *const *terms;      /* pre-analyzed terms */
    uint32_t num_terms;
    uint32_t k;                    /* 0 = server default */
    isn_grpc_mode mode;
    const char *algorithm;         /* NULL = server default */
    uint32_t timeout_ms;           /* sent as grpc-timeout; 0 = none */
    const char *request_id;
    bool debug;
    /* Global statistics (0 / NULL = none). */
    uint64_t global_num_docs;
    double global_avg_doc_len;
    const char *const *global_terms;
    const uint64_t *global_dfs;
    uint32_t num_global_terms;
    /* Second stage: re-rank the best n1 (0 = server default) with the server's ranker of this name. */
    const char *ranker;
    uint32_t n1;
    const char *traceparent; /* sent as the traceparent header (W3C trace context); NULL = none */
    const char *via;         /* sent as the isn-via header (grpc_call_via); NULL = none */
    /* Stored fields each hit should carry (the index must keep them). */
    const char *const *stored_fields;
    uint32_t num_stored_fields;
    bool forbid_partial;     /* DEADLINE_EXCEEDED instead of a partial answer */
} isn_grpc_search_request;

typedef struct {
    char *name;
    char *value;
} isn_grpc_stored_field;

typedef struct {
    char *external_id;
    uint32_t doc;
    float score;
    float l1_score;
    uint32_t partition;            /* from an aggregator: the partition whose index `doc` is of */
    isn_grpc_stored_field *fields; /* the request's stored_fields, in its order */
    uint32_t num_fields;
} isn_grpc_hit;

typedef struct {
    int status;             /* gRPC status; 0 = OK (-1: no status, e.g. the stream was reset) */
    char message[512];      /* grpc-message when status != 0 */
    isn_grpc_hit *hits;
    uint32_t num_hits;
    bool complete;
    char incomplete_reason[32];
    uint64_t matched_lower_bound;
    char device[16];
    uint32_t partition_id;
    uint64_t queue_us, retrieval_us, total_us, rerank_us;
    uint32_t partitions_answered, partitions_total; /* from an aggregator; 0 from an ISN */
    char generation[24];            /* the index generation that answered ("" from an aggregator) */
    uint64_t generation_built_unix;
    /* when debug was asked: */
    char algorithm_used[16];
    uint32_t num_terms, num_unknown_terms;
    uint64_t postings_scored, docs_evaluated, blocks_decoded;
} isn_grpc_search_reply;

/* Blocking Search. 0 when the server answered (reply->status tells how), -1 with err on transport
 * failure. Free the reply with isn_grpc_search_reply_free. */
int isn_grpc_search(isn_grpc_client *client, const isn_grpc_search_request *request, isn_grpc_search_reply *reply,
                    char *err, size_t err_len);
/* Non-blocking form: start, poll (isn_grpc_poll) until isn_grpc_call_done, then finish (frees the call). */
isn_grpc_call *isn_grpc_search_start(isn_grpc_client *client, const isn_grpc_search_request *request, char *err,
                                     size_t err_len);
int isn_grpc_search_finish(isn_grpc_call *call, isn_grpc_search_reply *reply, char *err, size_t err_len);
void isn_grpc_search_reply_free(isn_grpc_search_reply *reply);

typedef struct {
    char *term;
    char *index_term;
    bool found;
    uint64_t df, cf;
} isn_grpc_term_info;

typedef struct {
    int status;
    char message[512];
    uint32_t partition_id;
    uint64_t num_docs;
    uint32_t index_version;
    uint64_t num_terms, num_postings, index_bytes, total_doc_len;
    double avg_doc_len;
    float bm25_k1, bm25_b;
    bool stem, stopwords;
    char server_version[32];
    char generation[24]; /* the index generation serving new requests, and its build time */
    uint64_t generation_built_unix;
    isn_grpc_term_info *terms;
    uint32_t num_term_infos;
} isn_grpc_info_reply;

/* Blocking Info; statistics of `terms` too (analyzed first when `analyze`). */
int isn_grpc_info(isn_grpc_client *client, const char *const *terms, uint32_t num_terms, bool analyze,
                  isn_grpc_info_reply *reply, char *err, size_t err_len);
void isn_grpc_info_reply_free(isn_grpc_info_reply *reply);

/* grpc.health.v1.Health/Check: *serving = 1 SERVING, 2 NOT_SERVING. Returns the gRPC status, -1 on
 * transport failure (err). */
int isn_grpc_health_check(isn_grpc_client *client, const char *service, int *serving, char *err, size_t err_len);

/* ------------------------------------------------------------------ a pool of connections */

/* Up to `size` connections to one server, used round robin (load generators). The first is opened
 * at once (NULL with err when the server is not there); the others on demand. A connection that
 * failed or got GOAWAY is replaced once its calls are finished. */
typedef struct isn_grpc_pool isn_grpc_pool;
isn_grpc_pool *isn_grpc_pool_new(const char *host_port, uint32_t size, uint32_t timeout_ms, char *err, size_t err_len);
void isn_grpc_pool_free(isn_grpc_pool *pool);
/* A usable connection with a stream to spare (the server's concurrent-stream limit: a call past it would
 * wait inside the client, unseen by the server, with a grpc-timeout that no longer tells its age);
 * NULL when none can be had now. *slot names it for started/finished. */
isn_grpc_client *isn_grpc_pool_pick(isn_grpc_pool *pool, uint32_t *slot);
/* Calls in flight per connection: a connection with none is not waited on, and may be replaced. */
void isn_grpc_pool_started(isn_grpc_pool *pool, uint32_t slot);
void isn_grpc_pool_finished(isn_grpc_pool *pool, uint32_t slot);
/* Waits up to wait_ns for input on the connections with calls in flight, then lets each process it. */
void isn_grpc_pool_wait(isn_grpc_pool *pool, uint64_t wait_ns);

/* ------------------------------------------------------------------ load generation (isn-bench) */

#define ISN_LOAD_MAX_CONNECTIONS 64
#define ISN_LOAD_MAX_THREADS 64

/* Load for any isn.v1.Search server (grpc/load_generator.c): open loop with Poisson arrivals,
 * latency from each request's scheduled time (no coordinated omission), or closed loop; threads
 * generators with `connections` connections each. A request that finds no connection with a stream to
 * spare, or max_inflight requests already out, is counted not sent. */
typedef struct {
    const char *target;
    const isn_query_log *queries; /* the caller keeps it */
    const char *algo;             /* NULL or "": the server's */
    isn_grpc_mode mode;
    uint32_t k, deadline_ms, connections, max_inflight, threads;
    double duration_s, warmup_s;  /* measured seconds, after warmup_s sent but not measured */
    double spike_rate, spike_s;   /* open loop, spike_rate > 0: the first spike_s measured seconds at it */
    uint64_t seed;
} isn_load_config;

typedef struct isn_load isn_load;
/* Opens the first connection of every generator (NULL with err when the target is not there). */
isn_load *isn_load_new(const isn_load_config *config, char *err, size_t err_len);
void isn_load_free(isn_load *load);
const isn_load_config *isn_load_config_of(const isn_load *load);
/* One run: open loop at `rate` per second, or (rate <= 0) closed loop with `concurrency` clients.
 * *stats gets its tallies (bench_stats_free it). -1 when out of memory or threads. */
int isn_load_run(isn_load *load, double rate, uint32_t concurrency, bench_stats *stats);

typedef struct {
    double max_rate, resolution, max_misses; /* resolution: relative */
    uint32_t repeats;
    const char *label;
} isn_load_search;
/* The sustained rate (DESIGN.md section 7) at most search->max_rate: one JSON object to `out`, a
 * table of every run to `table`. -1 when out of memory. */
int isn_load_sustained(isn_load *load, const isn_load_search *search, FILE *out, FILE *table);

/* 1 when every address HOST:PORT resolves to is a loopback address, 0 when not, -1 with err. */
int isn_grpc_is_loopback(const char *host_port, char *err, size_t err_len);

/* ------------------------------------------------------------------ on a libuv loop */

/* Drives the client from `loop` (uv_poll on its socket): whenever it is readable (or writable with
 * output queued) the client polls itself and then calls `on_activity`, where finished calls can be
 * collected. After starting calls from outside the callback, call isn_grpc_poll(client, 0, ...)
 * to send them. When the connection fails the watch stops after a last on_activity. -1 with err. */
typedef void (*isn_grpc_activity_cb)(isn_grpc_client *client, void *user);
int isn_grpc_client_watch(uv_loop_t *loop, isn_grpc_client *client, isn_grpc_activity_cb on_activity, void *user,
                          char *err, size_t err_len);
/* Stops watching (isn_grpc_close does it too). */
void isn_grpc_client_unwatch(isn_grpc_client *client);

#endif
