/* The aggregator (isn-agg's logic): speaks isn.v1.Search itself; per query it fans out to one
 * replica of every partition with the remaining deadline minus a margin, hedges a partition that
 * has not answered by its recent p95 to another replica (the loser is cancelled), retries a
 * replica that fails on another, merges by score (ties by partition, then doc id) and reports
 * coverage. Replicas are chosen by recent latency and load; one that keeps failing is taken out
 * and probed back in with a health check. With global statistics it first asks every partition
 * for the query terms' df (Info, cached per query text) and sends N, df and the average length
 * with the query, so merged scores equal one unpartitioned index's.
 *
 * Single-threaded: every call below comes from the one thread that runs the event loop. */
#ifndef ISN_AGG_H
#define ISN_AGG_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ------------------------------------------------------------------ configuration */

#define AGG_MAX_PARTITIONS 64
#define AGG_MAX_REPLICAS 8
#define AGG_ADDR_MAX 272

typedef struct {
    char replicas[AGG_MAX_REPLICAS][AGG_ADDR_MAX];
    uint32_t num_replicas;
} agg_partition_config;

typedef struct {
    char listen[AGG_ADDR_MAX];
    char stats_listen[AGG_ADDR_MAX]; /* "" = none */
    agg_partition_config partitions[AGG_MAX_PARTITIONS];
    uint32_t num_partitions;
    uint32_t default_timeout_ms; /* when the request gives no deadline */
    uint32_t margin_ms;          /* partitions get the remaining deadline minus this */
    uint32_t default_k, max_k;
    bool hedge;
    uint32_t hedge_min_us;       /* never hedge sooner than this */
    uint32_t hedge_initial_ms;   /* hedge delay until a partition has enough latency samples */
    bool global_stats;
    uint32_t probe_interval_ms;  /* a replica taken out is probed this often */
    uint32_t failures_to_eject;  /* consecutive failures that take a replica out */
} agg_config;

void agg_config_default(agg_config *config);
/* "partition = ADDR,ADDR,..." adds a partition; every other key sets one value. 0, or -1 with err. */
int agg_config_set(agg_config *config, const char *key, const char *value, char *err, size_t err_len);
/* Reads an INI file (section [agg] or none). 0, or -1 with err naming the line. */
int agg_config_load(agg_config *config, const char *path, char *err, size_t err_len);
int agg_config_validate(const agg_config *config, char *err, size_t err_len);

/* ------------------------------------------------------------------ the aggregator */

typedef struct agg agg;
/* An incoming gRPC call of the server the aggregator answers on (the server owns it). */
typedef struct agg_rpc agg_rpc;

/* Replica state for every configured partition; connects lazily. NULL with err (out of memory). */
agg *agg_new(const agg_config *config, char *err, size_t err_len);
/* Answers every query still in flight with UNAVAILABLE (drain), closes the replica connections. */
void agg_free(agg *aggregator);
const agg_config *agg_get_config(const agg *aggregator);

/* At start: partition sizes (Info, blocking) for global statistics; a partition that does not
 * answer now is asked again per query. */
void agg_fetch_partition_info(agg *aggregator);

/* The server's handler: Search, Info and health Check; answers every call exactly once (now, or
 * later from agg_advance). */
void agg_handle_call(agg *aggregator, agg_rpc *rpc);
/* Queries in progress. */
uint32_t agg_inflight(const agg *aggregator);
/* Answers every query in progress with `grpc_status` (SIGTERM drain). */
void agg_fail_all(agg *aggregator, int grpc_status, const char *message);

/* Prometheus text for /metrics (names isn_agg_*). */
void agg_render_metrics(const agg *aggregator, byte_buffer *out);

/* ------------------------------------------------------------------ driving it from a poll() loop */

/* Appends the descriptors of the replica connections (at most max); returns how many. */
size_t agg_pollfds(agg *aggregator, struct pollfd *fds, size_t max);
/* Reads what arrived on the descriptors agg_pollfds added (same order, same count). */
void agg_process(agg *aggregator, const struct pollfd *fds, size_t count);
/* When the aggregator next needs agg_advance without any input (hedge, deadline, probe);
 * now when answers may already be waiting. */
uint64_t agg_next_wakeup_ns(agg *aggregator, uint64_t now_ns);
/* Moves every query on (answers, hedges, retries, deadlines), probes replicas that are out and
 * sends what that queued. */
void agg_advance(agg *aggregator);

#endif
