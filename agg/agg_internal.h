/* The aggregator's state and the calls between its files (agg/ only, and its unit test). */
#ifndef ISN_AGG_INTERNAL_H
#define ISN_AGG_INTERNAL_H

#include "agg/agg.h"
#include "grpc/stats_endpoint.h"
#include "grpc/client.h"
#include "grpc/tls.h"
#include "proto/isn.pb-c.h"

#define AGG_LATENCY_WINDOW 256       /* recent answers per partition for its p95 */
#define AGG_P95_EVERY 32             /* recompute the p95 after this many new samples */
#define AGG_MIN_SAMPLES_FOR_P95 32
#define AGG_STATS_CACHE_SLOTS 16384
#define AGG_VERSION "0.1.0"
/* Health service name that says only "this process answers" (SERVING until the drain), for liveness
 * and startup probes: readiness ("" or isn.v1.Search) follows partition coverage, and an aggregator
 * whose partitions are down must not be restarted for it. */
#define AGG_HEALTH_LIVENESS "liveness"
/* A reload waits this long at most for the queries in progress; those still going then answer with
 * what they have (a partition that has not answered counts as missing). */
#define AGG_RELOAD_MAX_WAIT_NS 1000000000LL
/* Aggregators a request may pass (isn-via) before it is refused as a loop: a tier of tiers has a few. */
#define AGG_MAX_HOPS 8
/* how long isn-agg's start waits for a replica's Info: one that accepts connections and never answers must not
 * hold the start (and its "started:" line) */
#define AGG_START_INFO_TIMEOUT_MS 2000
/* A replica that answered RESOURCE_EXHAUSTED gets no retry or hedge for this long, doubled while it
 * keeps shedding, up to the maximum; an OK answer starts it over. */
#define AGG_SHED_BACKOFF_MIN_MS 50
#define AGG_SHED_BACKOFF_MAX_MS 2000
/* A new replica's in-flight limit: its partition's cap (max_inflight_per_replica) until its answers
 * say less (agg_replica_answered), so that a burst on an idle tier is not refused. */
#define AGG_INITIAL_INFLIGHT_LIMIT 1e9
/* How a refusal for a request loop begins (FAILED_PRECONDITION): the aggregator that sent the request
 * knows by it that the replica leads back. */
#define AGG_LOOP_PREFIX "request loop: "

/* The one clock, signed: deadlines are compared by subtraction. */
static inline int64_t agg_now_ns(void) { return (int64_t)isn_now_ns(); }

/* ------------------------------------------------------------------ replicas and partitions */

typedef struct {
    char address[AGG_ADDR_MAX];
    uint32_t partition, index;
    char connect_error[256]; /* why the last connection attempt failed ("" = it did not) */
    uint64_t serial;         /* names it to the connector across reloads (a kept replica keeps it) */
    bool connecting;         /* the connector is making its connection */
    isn_grpc_client *client;
    bool up;
    uint32_t consecutive_failures;
    int64_t probe_at_ns;
    isn_grpc_client_call *probe; /* health check in flight: brings a replica that is out back, takes one that is in out */
    bool unsent;          /* calls started since the last flush: one send per loop turn, not per call */
    double ewma_us;
    uint32_t inflight;
    uint64_t requests, failures, hedges, hedge_wins, ejections;
    /* The index generation its last Search or Info reply named ("" before the first, or from an
     * isnd without generations): during a rolling swap a partition's replicas differ here. */
    char generation[24];
    /* DNS no longer names it: no new calls; closed, and its slot freed (address ""), once the calls
     * in flight on it are answered */
    bool draining;
    /* It answered "request loop": it leads back to this isn-agg. Out of rotation, never probed back
     * in; a reload (or DNS naming it anew) gives it another chance. */
    bool leads_back;
    int64_t shed_until_ns;    /* it shed load (RESOURCE_EXHAUSTED): no retry or hedge to it before this */
    /* Requests it may have in flight now (agg_replica_answered adapts it): the partition's cap at most */
    double inflight_limit;
    uint32_t shed_backoff_ms; /* the last back-off (0: its last answer was not a shed) */
} agg_replica;

typedef struct {
    agg_replica replicas[AGG_MAX_REPLICAS];
    uint32_t num_replicas;
    uint32_t latency_us[AGG_LATENCY_WINDOW];
    uint32_t num_samples, next_sample, since_p95;
    uint32_t p95_us;
    bool have_info;
    uint64_t num_docs, total_doc_len;
    uint64_t answered, missing;
    /* discovery by DNS (partition = dns:NAME:PORT): the name, the last answer, what it changed */
    char dns_name[AGG_ADDR_MAX];
    uint16_t dns_port;
    uint32_t dns_addresses;
    uint64_t dns_resolutions, dns_failures, replicas_added, replicas_removed;
    bool dns_failing; /* the last lookup failed (logged once, and again when one succeeds) */
    double dns_last_change; /* Unix seconds of the last replica added or removed by DNS */
    char own_address[AGG_ADDR_MAX]; /* DNS named this isn-agg's own address (skipped); "" = not */
    uint32_t dns_beyond_cap; /* addresses of the last answer that are not replicas (AGG_MAX_REPLICAS) */
    double extra_tokens; /* retry and hedge budget (fanout.c's take_extra_token) */
    uint32_t max_inflight; /* per replica (config.max_inflight_per_replica): one at it gets no new request */
    uint64_t hedges_denied, retries_denied; /* for want of a token */
} agg_partition;

/* ------------------------------------------------------------------ queries */

typedef struct {
    isn_grpc_client_call *call;
    uint32_t replica;
    int64_t sent_ns;
    uint32_t timeout_ms; /* what the replica was given */
    bool hedge;
} agg_attempt;

typedef enum { PART_PENDING = 0, PART_ANSWERED, PART_FAILED } agg_part_state;

/* One partition's share of one query. */
typedef struct {
    agg_part_state state;
    agg_attempt attempts[AGG_MAX_REPLICAS];
    uint32_t num_attempts;
    uint32_t tried; /* replica bit mask */
    int64_t first_sent_ns;
    bool hedged;
    int last_status;
    char last_message[320]; /* the partition's own words for last_status */
    isn_grpc_search_reply reply;
    bool loop; /* failed because its replicas lead back to this isn-agg: the query is refused */
    bool caller_error; /* the partition refused the request itself (every replica would): so is the query */
    isn_grpc_client_call *info; /* global statistics phase */
    uint32_t info_replica; /* which replica `info` went to (counted in its inflight) */
} agg_part;

/* Global statistics of one query: its terms' df summed over partitions, N and the average length. */
typedef struct {
    char **terms;
    uint64_t *dfs;
    uint32_t num_terms;
    uint64_t num_docs;
    double avg_doc_len;
} agg_term_stats;

typedef struct agg_query agg_query;
struct agg_query {
    agg_query *prev, *next;
    isn_grpc_call *call; /* held until answered; NULL once answered */
    bool abandoned;  /* the client went away: the call is released, not answered */
    Isn__V1__SearchRequest *request;
    int64_t start_ns, deadline_ns, finish_at_ns;
    uint32_t k;
    bool searching; /* false while global statistics are being collected */
    bool parked;    /* arrived while a reload waits for the queries in progress: not started yet */
    uint32_t full_partition; /* 1 + the partition whose every replica was at its in-flight cap: refused */
    char *stats_key;
    agg_term_stats stats; /* sent with the query */
    uint8_t *forward;     /* the request as the partitions get it, packed once (fanout.c) */
    size_t forward_len;
    int64_t processing_ns; /* time this thread spent on the query (decode, fan-out, merge, encode) */
    uint64_t charged;      /* bytes of the aggregator's memory budget it holds (itself, its request, replies) */
    agg_part *parts;       /* one per partition of the configuration the query started on */
    uint32_t num_parts;
    /* what every partition gets and the access line says: the caller's request id, else the trace
     * id; the trace context as a child of the caller's traceparent (a new trace when none came) */
    char request_id[80];
    char traceparent[ISN_GRPC_TRACEPARENT_LEN + 1];
    char via[ISN_GRPC_VIA_MAX + 1]; /* isn-via as the partitions get it: the caller's, this isn-agg's id appended */
    isn_grpc_trace trace;       /* this aggregator's span */
    char parent_span[17];   /* the caller's span ("" = none) */
};

/* ------------------------------------------------------------------ global statistics cache */

/* One query text's statistics, N and the average length included: all from the same Info answers,
 * so df never exceeds the N it goes out with. */
typedef struct {
    char *key;
    char **terms;
    uint64_t *dfs;
    uint32_t num_terms;
    uint64_t num_docs;
    double avg_doc_len;
} agg_stats_entry;

/* Open addressing over AGG_STATS_CACHE_SLOTS; starts over when half full. */
typedef struct {
    agg_stats_entry *slots;
    uint32_t used;
} agg_stats_cache;

/* ------------------------------------------------------------------ metrics */

typedef struct {
    uint64_t requests_by_status[ISN_GRPC_STATUS_COUNT];
    uint64_t partial, hedges, hedge_wins, retries, upstream_requests, upstream_failures;
    uint64_t stats_cache_hits, stats_cache_misses;
    uint64_t generation_changes; /* a replica's replies named another index generation */
    histogram latency;    /* answered queries */
    histogram processing; /* the aggregator thread's own time per query */
    double send_seconds;  /* handing queued calls to the replica connections (not per query) */
    uint64_t reloads;
    uint64_t loop_refusals; /* Searches refused: this isn-agg was already on their path */
    uint64_t over_budget;   /* queries or partition answers refused: the memory budget was full */
    uint64_t shed_at_capacity; /* queries refused whole: a partition's every replica had max_inflight_per_replica */
} agg_metrics;

struct agg {
    agg_config config;
    char id[17]; /* random, per process: what isn-via names it by */
    uint64_t discovery_seed; /* rendezvous hashing of DNS addresses: this host's name */
    /* the event loop and the servers on it */
    uv_loop_t *loop;
    isn_grpc_server *server;
    isn_grpc_stats_server *stats;
    /* TLS credentials (NULL: plaintext): the gRPC port's, the stats port's, and the replica
     * connections' (tls_ca; isn-agg's certificate with it when it has one) */
    isn_grpc_tls *grpc_tls, *stats_tls, *replica_tls;
    isn_grpc_connection_limit connection_limit;
    /* memory_budget_mib: the gRPC server's connections, calls and replies, and every query's own
     * memory (the query, its request, the partitions' answers, the merge), together */
    isn_grpc_memory_budget budget;
    char grpc_address[AGG_ADDR_MAX], stats_address[AGG_ADDR_MAX];
    uv_timer_t wakeup;    /* hedges, deadlines and probes */
    uv_check_t step;      /* after each loop turn's input: moves the queries on */
    uv_idle_t keep_going; /* while a step is due: the loop must not sleep */
    uv_timer_t drain_timer; /* after SIGTERM: how long clients get to take their last answers */
    bool handles_started, dirty, draining, closed;
    uint32_t lost_queries; /* in flight when stopped at once (a second SIGTERM) */
    agg_partition partitions[AGG_MAX_PARTITIONS];
    uint32_t num_partitions;
    agg_query *queries;
    uint32_t num_queries;
    agg_stats_cache stats_cache;
    agg_metrics metrics;
    agg_config *pending; /* a reload waiting for the queries in progress (NULL = none) */
    int64_t pending_since_ns;
    isn_grpc_health_watchers *watchers; /* Health/Watch streams (made on the first) */
    bool was_ready;      /* readiness as last logged */
    struct agg_discovery *discovery; /* resolver of the dns: partitions (NULL = none started) */
    struct agg_connector *connector; /* makes replica connections off the loop (NULL: made in place) */
    uint32_t num_draining;           /* replicas draining, over every partition */
    double start_time;   /* Unix seconds */
};

/* replicas.c */
/* A new replica: in rotation until it fails or its first health check (at once) says otherwise. */
void agg_replica_init(agg_replica *r, const char *address, uint32_t partition, uint32_t index);
void agg_partitions_init(agg *a);
/* After a reload (no query in progress): the partitions and replicas of a->config; a replica kept
 * (same partition, same address) keeps its connection, health and latency. */
void agg_partitions_reload(agg *a);
/* A usable connection to r (a new one is watched by the loop). With the loop running the connection
 * is made off it (connector.c): AGG_CONNECTING until it is, and a failure is counted then. */
typedef enum { AGG_CONNECTED, AGG_CONNECTING, AGG_CONNECT_FAILED } agg_connect_state;
agg_connect_state agg_replica_connect(agg *a, agg_replica *r);
/* The same, made in place (start-up, before the loop serves). */
bool agg_replica_connect_now(agg *a, agg_replica *r);
/* The connector's outcome for r, on the loop: client made, or NULL and why. */
void agg_replica_connected(agg *a, agg_replica *r, isn_grpc_client *client, const char *err);

/* connector.c */
typedef struct agg_connector agg_connector;
int agg_connector_start(agg *a, char *err, size_t err_len);
/* Asks for r's connection (r->connecting set); false when there is no connector or no memory. */
bool agg_connector_ask(agg *a, agg_replica *r);
/* Joins the thread (at most one connect's timeout) and closes what it made that no replica took. */
void agg_connector_stop(agg *a);
void agg_replica_eject(agg *a, agg_replica *r, const char *why);
void agg_replica_failed(agg *a, agg_replica *r, bool connection_lost, const char *why);
/* r refused a Search as a request loop (its words): out of rotation until a reload. */
void agg_replica_leads_back(agg *a, agg_replica *r, const char *words);
/* Best replica of p not in `exclude` (bit mask); -1 when none. */
int agg_choose_replica(const agg_partition *p, uint32_t exclude);
/* Whether partition p can take a request now: a replica in rotation under its in-flight limit, or none
 * in rotation at all (then the fan-out says it is unreachable, not busy). */
bool agg_partition_has_room(const agg_partition *p);
/* An answer of r came `us` after it was sent with `timeout_ms`, `in_time` or not (late, shed, past
 * the deadline): its in-flight limit grows by one per limit's worth of answers in time within half
 * their timeout, and shrinks by a tenth on each other (AIMD, as TCP's window), between 1 and the
 * partition's cap; so a replica gets as much in flight as it answers in time, and no queue beyond. */
void agg_replica_answered(agg_replica *r, const agg_partition *p, uint64_t us, uint32_t timeout_ms, bool in_time);
/* The same for a retry or a hedge: none that shed load within its back-off. */
int agg_choose_extra_replica(const agg_partition *p, uint32_t exclude, int64_t now);
void agg_record_latency(agg_partition *p, agg_replica *r, uint32_t us);
/* How long one attempt of partition p waits before it is hedged. */
int64_t agg_hedge_delay_ns(const agg *a, const agg_partition *p);
void agg_probe_replicas(agg *a, int64_t now);
void agg_replicas_close(agg *a);

/* global_stats.c */
int agg_stats_cache_init(agg_stats_cache *cache);
void agg_stats_cache_free(agg_stats_cache *cache);
agg_stats_entry *agg_stats_cache_find(agg_stats_cache *cache, const char *key);
void agg_stats_cache_put(agg_stats_cache *cache, const char *key, const agg_term_stats *stats);
/* Adds df to term (a new term is appended). 0, or -1 when out of memory. */
int agg_term_stats_add(agg_term_stats *stats, const char *term, uint64_t df);
void agg_term_stats_free(agg_term_stats *stats);
/* N and the average length from every partition's Info. */
void agg_global_totals(const agg *a, agg_term_stats *stats);
/* Looks the query's statistics up in the cache; false when they must be asked for. */
bool agg_stats_lookup(agg *a, agg_query *q);
/* A reply of replica ri of partition pi named its index generation (from `source`, for the log).
 * The cached global statistics are dropped when the replica's generation changed, or when it
 * differs from another in-rotation replica's of the partition (a rolling swap under way, or a
 * replica first heard from after its partition swapped). Counted and logged once per replica
 * change, not per reply: two replicas of a partition that serve different generations at once
 * answer alternately without dropping anything again. */
void agg_replica_generation_seen(agg *a, uint32_t pi, uint32_t ri, const char *generation, const char *source);
/* Whether every replica in rotation of partition pi that named a generation named the same one;
 * while one does not, queries' statistics are asked for every time and never cached. */
bool agg_partition_settled(const agg *a, uint32_t pi);
/* Asks one replica of every partition for the df of the query's terms. */
void agg_stats_start(agg *a, agg_query *q, int64_t now);
/* Collects the Info answers; true once every partition answered or failed. */
bool agg_stats_done(agg *a, agg_query *q);
/* Lets go of partition pi's Info call of the query (its replica may then finish draining). */
void agg_stats_info_free(agg *a, agg_part *part, uint32_t pi);

/* aggregator.c */
/* A pending reload is applied once no query is in progress but parked ones; they then start. */
void agg_reload_step(agg *a, int64_t now);
/* Logs a change of readiness (and tells Health watchers). */
void agg_readiness_changed(agg *a);

/* query.c: a query's whole life; the files below return outcomes to it and answer no client. */
/* A new query in the list, holding the call (whose storage points back at it), with its deadline:
 * the call's grpc-timeout, else the request's timeout_ms, else the default. Its memory is charged to the
 * aggregator's budget: NULL with *over_budget when that is full, NULL alone when out of memory. */
agg_query *agg_query_new(agg *a, isn_grpc_call *call, Isn__V1__SearchRequest *request, uint32_t k, const char *via,
                         int64_t now, bool *over_budget);
/* Starts a query that may start now: its global statistics phase, or its fan-out. */
void agg_query_begin(agg *a, agg_query *q, int64_t now);
/* A query parked during a reload starts on the new partitions (out of memory: answered and freed). */
void agg_query_start_parked(agg *a, agg_query *q, int64_t now);
/* Moves the query on (statistics, fan-out, deadline); once answered, or its client gone, frees it. */
void agg_query_step(agg *a, agg_query *q, int64_t now);
/* Answers with what the partitions gave so far (a reload or a drain cannot wait) and frees it. */
void agg_query_answer_now(agg *a, agg_query *q, int64_t now);
/* Answers with `status` (unless answered) and frees it. */
void agg_query_fail_now(agg *a, agg_query *q, int status, const char *message);
void agg_queries_fail_all(agg *a, int status, const char *message);
/* When this query next needs attention without any input (hedge or deadline). */
int64_t agg_query_next_timer(const agg *a, const agg_query *q);

/* fanout.c */
/* What a partition may still take: the remaining deadline minus the margin, at least 1 ms. */
uint32_t agg_remaining_ms(const agg *a, const agg_query *q, int64_t now);
/* A query's deadline at `now`: the grpc-timeout (ns, 0 = none), else the request's timeout_ms, else
 * the default; saturates at INT64_MAX. */
int64_t agg_deadline_ns(const agg *a, uint64_t header_timeout_ns, uint32_t request_timeout_ms, int64_t now);
typedef enum { ATTEMPT_FIRST, ATTEMPT_RETRY, ATTEMPT_HEDGE } agg_attempt_kind;
/* Retries and hedges spend the partition's tokens, which its first attempts earn (extra_requests_ratio
 * each, up to extra_requests_burst), as gRPC's retry throttling does: at most about that share of
 * extra requests, however many fail or are slow. A first attempt earns and is always allowed; a retry
 * or hedge is false (and counted) when the bucket has less than one token. */
bool agg_take_extra_token(const agg *a, agg_partition *p, agg_attempt_kind kind);
/* One attempt per partition (a partition with no replica to send to fails at once). */
void agg_fanout_start(agg *a, agg_query *q, int64_t now);
typedef enum {
    AGG_FANOUT_PENDING, /* a partition may still answer */
    AGG_FANOUT_DONE,    /* every partition answered or failed */
    AGG_FANOUT_REFUSED, /* a partition refused the request itself, or leads back here: no answer helps */
} agg_fanout_state;
typedef struct {
    int status;
    char message[400];
} agg_refusal;
/* Collects finished attempts, retries and hedges; REFUSED fills `refusal` with the client's answer. */
agg_fanout_state agg_fanout_step(agg *a, agg_query *q, int64_t now, agg_refusal *refusal);
/* Bytes a partition's answer holds (charged to the memory budget while the query keeps it). */
uint64_t agg_reply_bytes(const isn_grpc_search_reply *reply);
/* The next hedge of the query (INT64_MAX: none). */
int64_t agg_fanout_next_timer(const agg *a, const agg_query *q);
/* Cancels what is in flight and lets go of the partitions' replies. */
void agg_fanout_release(agg *a, agg_query *q);

/* merge.c */
typedef struct {
    const isn_grpc_hit *hit;
    uint32_t partition;
} agg_merged_hit;

/* By score, then partition, then doc id: the order one unpartitioned index would give. */
int agg_merged_hit_compare(const void *a, const void *b);
/* Gathers the hits of every answered partition into `out` (room for all) and sorts them. */
uint32_t agg_merge_hits(const agg_part *parts, uint32_t num_parts, agg_merged_hit *out);
/* A query's answer: status OK and the merged response (pointing into the partitions' replies and
 * the arrays here), or the status and words that say why there is none. */
typedef struct {
    int status;
    char message[400];
    Isn__V1__SearchResponse response;
    Isn__V1__StageTimes times;
    Isn__V1__SearchDebug debug;
    Isn__V1__Hit *hits, **hit_ptrs;
    Isn__V1__StoredField *fields, **field_ptrs;
    uint32_t answered;
    bool complete;
} agg_answer;
/* Merges what the query's partitions answered, or says why there is no answer (none answered; the
 * request forbids a partial one; out of memory). */
void agg_merge_answer(const agg_query *q, int64_t now, agg_answer *out);
void agg_answer_free(agg_answer *answer);
/* Bytes the answer's own arrays hold. */
uint64_t agg_answer_bytes(const agg_answer *answer);

/* service.c */
/* on_request of the gRPC server: Search, Info and health Check. */
void agg_handle_call(agg *a, isn_grpc_call *call);

/* loop.c */
/* Asks for a step (agg_advance) on this loop turn. */
void agg_kick(agg *a);
int agg_loop_start(agg *a, char *err, size_t err_len);
void agg_loop_stop(agg *a);
/* Moves every query on (answers, hedges, retries, deadlines), probes replicas that are out and
 * sends what that queued. */
void agg_advance(agg *a);

/* health.c */
/* From on_headers of Health/Watch: the call streams the aggregator's readiness. */
bool agg_health_watch(agg *a, isn_grpc_call *call);
/* Readiness changed: Health watchers get the new status (draining: NOT_SERVING, and their end). */
void agg_health_notify(agg *a);
void agg_health_free(agg *a);

/* discovery.c */
/* Starts resolving the dns: partitions (now, then every dns_interval_ms) on the loop. 0, or -1 with err. */
int agg_discovery_start(agg *a, char *err, size_t err_len);
/* After a reload: the resolver follows the new settings and resolves every dns: partition at once. */
void agg_discovery_reloaded(agg *a);
/* Closes the resolver's handles (drain); agg_discovery_free after uv_run returned. */
void agg_discovery_stop(agg *a);
void agg_discovery_free(agg *a);
/* The addresses ("IP:PORT", "[IPv6]:PORT", one of each) DNS gave for partition pi: this isn-agg's own
 * is skipped, and of the rest AGG_MAX_REPLICAS (agg_discovery_choose) become its replicas: new ones
 * join, missing ones drain (their calls in flight still answer), one that comes back stops draining.
 * `addresses` is reordered. */
void agg_discovery_apply(agg *a, uint32_t pi, char (*addresses)[AGG_ADDR_MAX], uint32_t count);
/* Moves the `cap` addresses of highest rendezvous score (hash of seed and address) to the front: the
 * same ones for the same set in any order. The number chosen (count when it is at most cap). */
uint32_t agg_discovery_choose(uint64_t seed, char (*addresses)[AGG_ADDR_MAX], uint32_t count, uint32_t cap);
/* Frees the slots of draining replicas with nothing left in flight. */
void agg_discovery_reap(agg *a);

/* loops.c */
/* A random id for isn-via. */
void agg_loops_init(agg *a);
/* A message that refuses a request loop (AGG_LOOP_PREFIX). */
bool agg_is_loop_message(const char *message);
/* The incoming isn-via (NULL: too long): true with the header to send on in `forward`, or false with
 * the refusal's words in `why` (this isn-agg already on the path, or AGG_MAX_HOPS aggregators). */
bool agg_via_forward(const agg *a, const char *via, char *forward, size_t forward_len, char *why, size_t why_len);
/* Whether HOST:PORT is where this isn-agg listens (its bound address; any address of this host when it
 * listens on all of them). A name is resolved now (blocking): for the configuration only. */
bool agg_address_is_own(const agg *a, const char *address);
/* -1 with err naming the first replica of `config` that is this isn-agg's own address. */
int agg_check_own_replicas(const agg *a, const agg_config *config, char *err, size_t err_len);

/* metrics.c */
void agg_count_status(agg *a, int status);
/* Search, Info and Health calls answered so far. */
uint64_t agg_answered(const agg *a);
void agg_observe_answer(agg *a, double seconds);

#endif
