/* A small gRPC client for isnd (any isn.v1 server): one HTTP/2 connection over a plain socket,
 * nghttp2 for the framing, many calls in flight on it. Blocking helpers for simple tools
 * (isn-query), and start/poll/finish for tools that keep many calls going (isn-bench, isn-agg).
 * Not thread-safe: one client per thread. No protobuf types in this header. */
#ifndef ISN_TOOLS_GRPC_CLIENT_H
#define ISN_TOOLS_GRPC_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct isn_grpc_client isn_grpc_client;
typedef struct isn_grpc_call isn_grpc_call;

/* Connects to HOST:PORT ([IPV6]:PORT) and sends the HTTP/2 preface. NULL with err. */
isn_grpc_client *isn_grpc_connect(const char *host_port, uint32_t timeout_ms, char *err, size_t err_len);
void isn_grpc_close(isn_grpc_client *client);
/* The socket, for callers that poll() several clients at once; then call isn_grpc_poll(client, 0). */
int isn_grpc_fd(const isn_grpc_client *client);
/* False once the connection failed or the server sent GOAWAY (start no new calls on it). */
bool isn_grpc_usable(const isn_grpc_client *client);

/* ------------------------------------------------------------------ raw calls */

typedef struct {
    const char *path;      /* "/isn.v1.Search/Search" */
    const uint8_t *body;   /* request bytes */
    size_t body_len;
    bool frame;            /* prepend the 5-byte gRPC prefix to body (false: body is sent exactly as given) */
    bool leave_open;       /* do not end the request stream (tests of stalled clients) */
    uint32_t timeout_ms;   /* grpc-timeout header; 0 = none */
    const char *content_type; /* NULL = application/grpc */
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
} isn_grpc_search_request;

typedef struct {
    char *external_id;
    uint32_t doc;
    float score;
    float l1_score;
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

#endif
