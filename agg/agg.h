/* The aggregator (isn-agg's logic): speaks isn.v1.Search itself; per query it fans out to one
 * replica of every partition with the remaining deadline minus a margin, hedges a partition that
 * has not answered by its recent p95 to another replica (the loser is cancelled), retries a
 * replica that fails on another, merges by score (ties by partition, then doc id) and reports
 * coverage. Replicas are chosen by recent latency and load; one that keeps failing is taken out
 * and probed back in with a health check. With global statistics it first asks every partition
 * for the query terms' df (Info, cached per query text) and sends N, df and the average length
 * with the query, so merged scores equal one unpartitioned index's.
 *
 * Single-threaded, on a libuv loop: every call below comes from the thread that runs it. */
#ifndef ISN_AGG_H
#define ISN_AGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "base/base.h"

/* ------------------------------------------------------------------ configuration */

#define AGG_MAX_PARTITIONS 64
#define AGG_MAX_REPLICAS 8
#define AGG_ADDR_MAX 272
#define AGG_PATH_MAX 1024

typedef struct {
    char replicas[AGG_MAX_REPLICAS][AGG_ADDR_MAX];
    uint32_t num_replicas;
    /* "partition = dns:NAME:PORT": no fixed replicas; every A/AAAA record of NAME (a Kubernetes headless
     * Service), at PORT, re-resolved every dns_interval_ms; replicas come and go live ("" = fixed list) */
    char dns_name[AGG_ADDR_MAX];
    uint16_t dns_port;
} agg_partition_config;

typedef struct {
    char listen[AGG_ADDR_MAX];
    char stats_listen[AGG_ADDR_MAX]; /* "" = none */
    agg_partition_config partitions[AGG_MAX_PARTITIONS];
    uint32_t num_partitions;
    uint32_t default_timeout_ms; /* when the request gives no deadline */
    uint32_t margin_ms;          /* partitions get the remaining deadline minus this */
    uint32_t drain_timeout_ms;   /* SIGTERM: queries in flight get at most this long to be answered */
    uint32_t default_k, max_k;
    bool hedge;
    uint32_t hedge_min_us;       /* never hedge sooner than this */
    uint32_t hedge_initial_ms;   /* hedge delay until a partition has enough latency samples */
    /* Retries and hedges per partition: each first request earns extra_requests_ratio of a token (up
     * to extra_requests_burst), each retry or hedge spends one (gRPC's retry throttling); hedges leave
     * half the burst to retries */
    double extra_requests_ratio;
    uint32_t extra_requests_burst;
    /* Requests in flight on one replica at most (isnd's max_concurrent_streams per connection, 256, by
     * default): a query that finds every replica of a partition at it, or answering later than the
     * query's remaining deadline, is refused at once (RESOURCE_EXHAUSTED, whole, before any partition
     * works on it) instead of queueing behind work that would finish late */
    uint32_t max_inflight_per_replica;
    bool global_stats;
    uint32_t probe_interval_ms;  /* a replica taken out is probed this often */
    uint32_t failures_to_eject;  /* consecutive failures that take a replica out */
    double ready_coverage;       /* ready (/readyz 200, Health SERVING) while at least this share of the
                                  * partitions has a healthy replica; 1 = every partition */
    bool log_json;               /* JSON Lines instead of text */
    bool access_log;             /* one line per Search: request id, trace id, status, coverage, time */
    uint32_t dns_interval_ms;    /* dns: partitions are resolved again this often */
    char dns_servers[AGG_ADDR_MAX]; /* "IP[:PORT],..." asked instead of /etc/resolv.conf's ("" = those) */
    /* The client-facing server's limits (isn_grpc_server_config, isn_grpc_stats_config; 0 = grpc's default). */
    uint32_t max_connections, max_concurrent_streams, max_requests_per_connection;
    uint32_t header_timeout_ms, idle_timeout_ms, write_timeout_ms, min_send_rate, memory_budget_mib;
    uint32_t max_header_list_size, max_early_resets_per_second, stats_max_connections, stats_write_timeout_ms;
    uint32_t reset_hold_ms; /* rapid reset's cut held before its GOAWAY (isn_grpc_server_config.reset_hold_ms) */
    /* TLS (grpc/tls.h), the same keys as isnd's: tls_cert/tls_key serve gRPC and HTTPS stats ("" =
     * plaintext) and identify isn-agg to replicas that want client certificates; tls_client_ca makes
     * clients present one (tls_allowed_peers: which); tls_ca turns on TLS to the replicas, verified
     * against it under tls_server_name (default: each replica's host). Paths are fixed at start, their
     * contents reload on SIGHUP and every tls_watch_interval_ms (0 = SIGHUP only). */
    char tls_cert[AGG_PATH_MAX], tls_key[AGG_PATH_MAX], tls_client_ca[AGG_PATH_MAX], tls_ca[AGG_PATH_MAX];
    char tls_allowed_peers[AGG_PATH_MAX], tls_server_name[AGG_ADDR_MAX];
    uint32_t tls_watch_interval_ms;
} agg_config;

void agg_config_default(agg_config *config);
/* "partition = ADDR,ADDR,..." (or "partition = dns:NAME:PORT") adds a partition; every other key sets
 * one value. 0, or -1 with err. */
int agg_config_set(agg_config *config, const char *key, const char *value, char *err, size_t err_len);
/* Reads an INI file (section [agg] or none). 0, or -1 with err naming the line. */
int agg_config_load(agg_config *config, const char *path, char *err, size_t err_len);
int agg_config_validate(const agg_config *config, char *err, size_t err_len);

/* ------------------------------------------------------------------ the aggregator */

typedef struct agg agg;

/* Replica state for every configured partition, on `loop` (the replica connections, its servers
 * and timers run there). Connects lazily. NULL with err (out of memory). */
agg *agg_new(uv_loop_t *loop, const agg_config *config, char *err, size_t err_len);
const agg_config *agg_get_config(const agg *aggregator);

/* Listens: gRPC (Search, Info, health Check) on config.listen, the stats endpoint (/metrics
 * /stats /healthz /readyz) on config.stats_listen unless it is "". 0, or -1 with err. */
int agg_serve(agg *aggregator, char *err, size_t err_len);
/* The bound addresses ("127.0.0.1:41234"; "" for a stats endpoint not served). */
const char *agg_grpc_address(const agg *aggregator);
const char *agg_stats_address(const agg *aggregator);

/* At start: partition sizes (Info, blocking) for global statistics; a partition that does not
 * answer now is asked again per query. */
void agg_fetch_partition_info(agg *aggregator);

/* SIGHUP: rereads the TLS certificate files (a set that is refused is logged; the one in use stays). */
void agg_tls_reload(agg *aggregator);
/* SIGHUP: takes a new configuration (partitions, replicas, every setting but the listen addresses)
 * without failing a request: queries that arrive meanwhile wait until those in progress are answered,
 * then start on the new replica sets. Replicas kept keep their connections and state. 0, or -1 with
 * err (the configuration is invalid; the old one stays). */
int agg_reload(agg *aggregator, const agg_config *config, char *err, size_t err_len);

/* Ready: not draining, and enough partitions (config.ready_coverage) have a replica in rotation.
 * When not, `why` says which partitions lack one. */
bool agg_ready(const agg *aggregator, char *why, size_t why_len);

/* SIGTERM: stops accepting (the listener closes, every connection gets GOAWAY: the streams it
 * already took are still answered), Health says NOT_SERVING at once; every query in flight is
 * answered from the partitions by its own deadline (at most drain_timeout_ms, then with what it
 * has); once the clients have their answers everything of the aggregator on the loop closes, so
 * uv_run returns. */
void agg_drain(agg *aggregator);
/* A second SIGTERM: what is still in flight is answered UNAVAILABLE and everything closes now. */
void agg_stop_now(agg *aggregator);
/* Queries that were in flight when agg_stop_now stopped them (the exit status says so). */
uint32_t agg_lost_queries(const agg *aggregator);
/* After uv_run returned. When agg_serve failed, exit instead: handles it opened are still on the loop. */
void agg_free(agg *aggregator);

/* Queries in progress. */
uint32_t agg_inflight(const agg *aggregator);
/* Prometheus text for /metrics (names isn_agg_*). */
void agg_render_metrics(const agg *aggregator, byte_buffer *out);

#endif
