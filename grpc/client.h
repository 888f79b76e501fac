/* One HTTP/2 connection over a socket (plaintext or TLS), many calls in flight on it. Blocking helpers for simple
 * tools (isn-query), and start/poll/finish for programs that keep many calls going (isn-bench,
 * isn-agg), by poll() or from a libuv loop (isn_grpc_client_watch). Not thread-safe: one client per
 * thread. No protobuf types in the client's calls. */
#ifndef ISN_GRPC_CLIENT_H
#define ISN_GRPC_CLIENT_H

#include <uv.h>

#include "grpc/framing.h"
#include "grpc/tls.h"

typedef struct isn_grpc_client isn_grpc_client;
typedef struct isn_grpc_client_call isn_grpc_client_call;

/* Connects to HOST:PORT ([IPV6]:PORT) and sends the HTTP/2 preface. NULL with err. */
isn_grpc_client *isn_grpc_connect(const char *host_port, uint32_t timeout_ms, char *err, size_t err_len);
/* The same over TLS when `tls` (client credentials, grpc/tls.h) is not NULL: the handshake is done
 * here, within timeout_ms; the server's certificate must chain to the credentials' CA and name
 * server_name (NULL or "": the host of host_port, a name or an IP address), which is also sent as
 * SNI, and the server must agree to ALPN h2. NULL with err saying which of these failed. */
isn_grpc_client *isn_grpc_connect_tls(const char *host_port, uint32_t timeout_ms, isn_grpc_tls *tls,
                                      const char *server_name, char *err, size_t err_len);
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
    const char *via;            /* isn-via header (isn_grpc_call_via); NULL = none */
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
isn_grpc_client_call *isn_grpc_start(isn_grpc_client *client, const isn_grpc_request *request, char *err, size_t err_len);
/* Sends what is queued, waits up to timeout_ms for input (0 = do not wait), processes it.
 * 0, or -1 with err when the connection failed (every unfinished call is then done, with grpc_status -1). */
int isn_grpc_poll(isn_grpc_client *client, int timeout_ms, char *err, size_t err_len);
/* isn_grpc_poll for a caller that polls many connections itself: `revents` is what its poll reported for
 * this one (0: nothing to read, only send what is queued). It makes no poll call of its own, so a load
 * generator pays one poll per wait, not one per connection. 0, or -1 with err as isn_grpc_poll. */
int isn_grpc_service(isn_grpc_client *client, short revents, char *err, size_t err_len);
/* Queued bytes the socket has not taken yet: poll this connection for POLLOUT too. */
bool isn_grpc_wants_write(const isn_grpc_client *client);
bool isn_grpc_client_call_done(const isn_grpc_client_call *call);
/* When the call completed: the time (isn_now_ns) the client read the bytes that completed it, as it read
 * them and before it took in the rest of that read; for a call that failed, when it failed. 0 while not done. */
uint64_t isn_grpc_client_call_done_ns(const isn_grpc_client_call *call);
/* When the bytes that completed the call reached the client's socket: the kernel's receive time of the
 * newest segment of the read that held them (so never earlier than the reply's last byte), on the clock of
 * isn_now_ns, at most done_ns. A busy caller may read a reply long after it came; this time leaves that
 * wait out. 0 when unknown: the client was not asked (isn_grpc_stamp_arrivals), the kernel gave no time
 * (it starts to a moment after the first client asks), or the call failed. */
uint64_t isn_grpc_client_call_arrival_ns(const isn_grpc_client_call *call);
/* From now on the client asks the kernel when each read's bytes arrived (SO_TIMESTAMPNS), for
 * isn_grpc_client_call_arrival_ns. -1 with err when the socket refuses. */
int isn_grpc_stamp_arrivals(isn_grpc_client *client, char *err, size_t err_len);
const isn_grpc_result *isn_grpc_client_call_result(const isn_grpc_client_call *call);
/* The server reset the stream with REFUSED_STREAM: it did not process the request (a lowered stream limit,
 * a drain), which gRPC reports as UNAVAILABLE, safe to retry. */
bool isn_grpc_result_refused_unprocessed(const isn_grpc_result *result);
/* Frees the call; an unfinished one is cancelled (RST_STREAM CANCEL). */
void isn_grpc_client_call_free(isn_grpc_client_call *call);
/* A pointer of the caller's kept with the call (NULL until set). */
void isn_grpc_client_call_set_user(isn_grpc_client_call *call, void *user);
void *isn_grpc_client_call_user(const isn_grpc_client_call *call);
/* From now on the client keeps the calls that finish (answered, reset, or lost with the connection) on a
 * list, so that a caller with thousands in flight finds the few that finished without looking at every
 * one. isn_grpc_take_finished hands over that list and empties it: each call once, linked through
 * isn_grpc_client_call_next_finished (read it before finishing or freeing the call), followed by `onto`
 * (a list taken before from another client, or NULL). A finished call freed before it was taken leaves
 * the list; closing the client empties it (the calls stay their callers'). */
void isn_grpc_track_finished(isn_grpc_client *client);
isn_grpc_client_call *isn_grpc_take_finished(isn_grpc_client *client, isn_grpc_client_call *onto);
isn_grpc_client_call *isn_grpc_client_call_next_finished(const isn_grpc_client_call *call);
/* Polls until the call is done or timeout_ms passes (-1 = no limit). 0, or -1 with err. */
int isn_grpc_wait(isn_grpc_client *client, isn_grpc_client_call *call, int timeout_ms, char *err, size_t err_len);

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
    const char *via;         /* sent as the isn-via header (isn_grpc_call_via); NULL = none */
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
/* Non-blocking form: start, poll (isn_grpc_poll) until isn_grpc_client_call_done, then finish (frees the call). */
isn_grpc_client_call *isn_grpc_search_start(isn_grpc_client *client, const isn_grpc_search_request *request, char *err,
                                     size_t err_len);
/* The same in two steps, for a caller that sends one request many times (a load generator): the
 * request's protobuf body, malloc'd (NULL when out of memory), then a Search with that body and
 * grpc-timeout header (isn_grpc_format_timeout; NULL = none). The body is copied: free it when done. */
uint8_t *isn_grpc_search_request_pack(const isn_grpc_search_request *request, size_t *len);
isn_grpc_client_call *isn_grpc_search_start_packed(isn_grpc_client *client, const uint8_t *body, size_t len,
                                                   const char *timeout_header, char *err, size_t err_len);
int isn_grpc_search_finish(isn_grpc_client_call *call, isn_grpc_search_reply *reply, char *err, size_t err_len);
void isn_grpc_search_reply_free(isn_grpc_search_reply *reply);
/* What a load generator tallies of a finished Search, without decoding its hits (decoding and copying
 * every hit was time the generator then lacked for sending, and a generator that falls behind is
 * charged to the server): the gRPC status in *status (-1 when there is none: the transport failed or
 * the stream was reset) and, for an OK reply, its `complete` flag. -1 when an OK reply's top level is
 * not a message; the hits are not checked. Frees the call. */
int isn_grpc_search_finish_status(isn_grpc_client_call *call, int *status, bool *complete);

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

/* Blocking Info; statistics of `terms` too (analyzed first when `analyze`). Waits up to timeout_ms for the
 * answer (-1: no limit); past it the call is cancelled and -1 returned with err. */
int isn_grpc_info(isn_grpc_client *client, const char *const *terms, uint32_t num_terms, bool analyze, int timeout_ms,
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
/* The same over TLS (isn_grpc_connect_tls) when `tls` is not NULL; the pool keeps the pointers. */
isn_grpc_pool *isn_grpc_pool_new_tls(const char *host_port, uint32_t size, uint32_t timeout_ms, isn_grpc_tls *tls,
                                     const char *server_name, char *err, size_t err_len);
void isn_grpc_pool_free(isn_grpc_pool *pool);
/* A usable connection with a stream to spare (the server's concurrent-stream limit: a call past it would
 * wait inside the client, unseen by the server, with a grpc-timeout that no longer tells its age);
 * NULL when none can be had now. *slot names it for started/finished. */
isn_grpc_client *isn_grpc_pool_pick(isn_grpc_pool *pool, uint32_t *slot);
/* The connection of slot `last` again while it has a stream to spare, else isn_grpc_pool_pick's: a burst of
 * calls goes out in one write on one connection rather than one write on each (a write on loopback costs the
 * writer the reader's TCP work too). */
isn_grpc_client *isn_grpc_pool_pick_again(isn_grpc_pool *pool, uint32_t last, uint32_t *slot);
/* Calls in flight per connection: a connection with none is not waited on, and may be replaced. */
void isn_grpc_pool_started(isn_grpc_pool *pool, uint32_t slot);
void isn_grpc_pool_finished(isn_grpc_pool *pool, uint32_t slot);
/* Waits up to wait_ns for input on the connections with calls in flight, then lets each process it. */
void isn_grpc_pool_wait(isn_grpc_pool *pool, uint64_t wait_ns);
/* Every connection of the pool, those it opens later too, keeps its finished calls (isn_grpc_track_finished);
 * isn_grpc_pool_take_finished takes them from all of them, as one list. */
void isn_grpc_pool_track_finished(isn_grpc_pool *pool);
/* Every connection of the pool, those it opens later too, asks when its replies arrive
 * (isn_grpc_stamp_arrivals); one whose socket refuses leaves its calls' arrival_ns 0. */
void isn_grpc_pool_stamp_arrivals(isn_grpc_pool *pool);
isn_grpc_client_call *isn_grpc_pool_take_finished(isn_grpc_pool *pool);

/* ------------------------------------------------------------------ adaptive throttling, client side */

/* A client's own refusal of requests that its server is refusing anyway (Google SRE's client-side
 * throttling, as Envoy's admission control does it): while the server refuses requests for load, the
 * client refuses each new one itself with probability (requests - K * accepts) / (requests + 1), so that
 * about K times what the server accepts reaches it. A refusal made here costs the server nothing, where
 * even its cheapest refusal costs it a share of an answer; with K near 1 a server that can no longer
 * afford its refusals keeps its answering rate.
 * The counts are those of the last window's buckets (ISN_GRPC_THROTTLE_BUCKETS of it) in which the server
 * refused something. SRE's rule counts every bucket, and its own refusals as requests: after a stretch
 * with few accepts (a start, a stall) it then lets through only K times more each window, which with K
 * near 1 takes dozens of windows to open. A bucket without a refusal says the server took all it was
 * sent, so it is left out, and a client whose window holds no refusal refuses nothing. Under overload the
 * server keeps refusing about (K - 1) / K of what it is sent, so its buckets keep counting. One owner
 * thread; the clock is the caller's (isn_now_ns). */
#define ISN_GRPC_THROTTLE_BUCKETS 10
typedef struct {
    double accepts_multiplier; /* K; 0 = off: every request may go */
    uint64_t bucket_ns;        /* the window / ISN_GRPC_THROTTLE_BUCKETS */
    uint64_t bucket_epoch[ISN_GRPC_THROTTLE_BUCKETS]; /* which bucket_ns-long slot of time each holds */
    uint64_t requests[ISN_GRPC_THROTTLE_BUCKETS], accepts[ISN_GRPC_THROTTLE_BUCKETS];
    uint64_t refusals[ISN_GRPC_THROTTLE_BUCKETS]; /* the server's, or no room to send */
    uint64_t refused_here;     /* over its life */
} isn_grpc_throttle;

/* K >= 1 (K < 1 would refuse what the server accepts) or 0 for off; window_ns > 0. -1 with err. */
int isn_grpc_throttle_init(isn_grpc_throttle *throttle, double accepts_multiplier, uint64_t window_ns, char *err,
                           size_t err_len);
/* One request at now_ns: counted, and true when it may go to the server; false when the client refuses it
 * itself. uniform01: a random number in [0, 1) of the caller's. */
bool isn_grpc_throttle_allow(isn_grpc_throttle *throttle, uint64_t now_ns, double uniform01);
/* The server's answer to a request that went (grpc_status -1: none: the stream reset, as a stream the
 * server refused (REFUSED_STREAM) is, or the connection lost, or no room to send it): a refusal when -1,
 * RESOURCE_EXHAUSTED or UNAVAILABLE, else accepted (a late answer, DEADLINE_EXCEEDED, was taken on). False
 * when the throttle is off (nothing counted). */
bool isn_grpc_throttle_answered(isn_grpc_throttle *throttle, uint64_t now_ns, int grpc_status);
/* The probability the next request is refused here, at now_ns. */
double isn_grpc_throttle_refusal_probability(isn_grpc_throttle *throttle, uint64_t now_ns);

/* ------------------------------------------------------------------ load generation (isn-bench) */

#define ISN_LOAD_MAX_CONNECTIONS 64
#define ISN_LOAD_MAX_THREADS 64
#define ISN_LOAD_THROTTLE_WINDOW_NS 1000000000ull /* the client throttle's memory: recovers within a second */

/* Load for any isn.v1.Search server (grpc/load_generator.c): open loop with Poisson arrivals,
 * latency from each request's scheduled time (no coordinated omission), or closed loop; threads
 * generators with `connections` connections each. A request that finds no connection with a stream to
 * spare, or max_inflight requests already out, is counted not sent. */
typedef struct {
    const char *target;
    const isn_query_log *queries; /* the caller keeps it */
    const char *algo;             /* NULL or "": the server's */
    const char *ranker;           /* NULL: no second stage; else re-ranked by the server's ranker of this name */
    uint32_t n1;                  /* with ranker: candidates re-ranked (0: the server's default) */
    isn_grpc_mode mode;
    uint32_t k, deadline_ms, connections, max_inflight, threads;
    double duration_s, warmup_s;  /* measured seconds, after warmup_s sent but not measured */
    double spike_rate, spike_s;   /* open loop, spike_rate > 0: the first spike_s measured seconds at it */
    uint64_t seed;
    /* open loop: each generator refuses requests itself as isn_grpc_throttle does with this K, over
     * ISN_LOAD_THROTTLE_WINDOW_NS (0: off, every request goes), and refuses at once a request that finds no
     * room (a circuit breaker's overflow) instead of counting it not sent: both count as client_refused */
    double client_throttle;
    isn_grpc_tls *tls;       /* NULL = plaintext; else client credentials (and server_name, see isn_grpc_connect_tls) */
    const char *server_name;
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
    uint32_t searches; /* independent searches whose probes take turns (0 or 1: one) */
    const char *label;
} isn_load_search;
/* The sustained rate (DESIGN.md section 7) at most search->max_rate: one JSON object per search to
 * `out` (searches > 1: each probes a rate in turn, so that the machine's drift over the minutes they take
 * falls on all of them alike), a table of every run to `table`. -1 when out of memory. */
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
