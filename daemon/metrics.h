/* Counters and histograms of isnd. Updated and read on the loop thread only, so plain integers. */
#ifndef ISN_DAEMON_METRICS_H
#define ISN_DAEMON_METRICS_H

#include <stdint.h>

#include "base/base.h"
#include "daemon/grpc_framing.h"

typedef enum { RPC_SEARCH, RPC_INFO, RPC_HEALTH_CHECK, RPC_HEALTH_WATCH, RPC_UNKNOWN, RPC_COUNT } rpc_method;

/* "isn.v1.Search/Search", ... as they appear in the metrics' method label. */
const char *rpc_method_label(rpc_method method);

typedef enum { STAGE_QUEUE, STAGE_RETRIEVAL, STAGE_TOTAL, STAGE_COUNT } search_stage;
const char *search_stage_label(search_stage stage);

typedef struct {
    uint64_t requests[RPC_COUNT][GRPC_STATUS_COUNT];
    histogram request_seconds[RPC_COUNT]; /* headers received to reply submitted */
    histogram search_stage_seconds[STAGE_COUNT];
    uint64_t http_rejects;          /* not a gRPC request: 405 / 415 */
    uint64_t connections_accepted;
    uint64_t connections_rejected;  /* over max_connections */
    uint64_t connections_timed_out; /* preface or request too slow, or idle */
    uint64_t protocol_errors;       /* HTTP/2 errors that closed a connection */
    uint64_t stats_requests;
    uint64_t shed;                  /* queue full */
    uint64_t cancelled;             /* client left while a worker had the request */
    uint64_t hits_returned;
    uint64_t bytes_received, bytes_sent;
    uint64_t reloads, reload_failures;
} metrics;

void metrics_count_request(metrics *m, rpc_method method, int status, double seconds);

#endif
