/* isn-agg: the reference aggregator. Speaks isn.v1.Search itself; per query it fans out to one
 * replica of every partition with the remaining deadline minus a margin, hedges a partition that
 * has not answered by its recent p95 to another replica (the loser is cancelled), retries a
 * replica that fails on another, merges by score (ties by partition, then doc id) and reports
 * coverage. Replicas are chosen by recent latency and load; one that keeps failing is taken out
 * and probed back in with a health check. With global statistics it first asks every partition
 * for the query terms' df (Info, cached per query text) and sends N, df and the average length
 * with the query, so merged scores equal one unpartitioned index's. One thread, one poll() loop. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proto/health.pb-c.h"
#include "proto/isn.pb-c.h"
#include "tools/agg_config.h"
#include "tools/agg_server.h"
#include "grpc/grpc.h"

#define LATENCY_WINDOW 256   /* recent answers per partition for its p95 */
#define P95_EVERY 32         /* recompute the p95 after this many new samples */
#define MIN_SAMPLES_FOR_P95 32
#define MAX_POLLFDS 4096
#define STATS_CACHE_SLOTS 16384
#define STATUS_CODES 17

enum { GRPC_OK = 0, GRPC_INVALID_ARGUMENT = 3, GRPC_DEADLINE_EXCEEDED = 4, GRPC_RESOURCE_EXHAUSTED = 8,
       GRPC_UNIMPLEMENTED = 12, GRPC_INTERNAL = 13, GRPC_UNAVAILABLE = 14 };

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void agg_log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void agg_log_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "isn-agg: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ------------------------------------------------------------------ state */

typedef struct {
    char address[AGG_ADDR_MAX];
    uint32_t partition, index;
    isn_grpc_client *client;
    bool up;
    uint32_t consecutive_failures;
    int64_t probe_at_ns;
    isn_grpc_call *probe; /* health check in flight while out */
    bool unsent;          /* calls started since the last flush: one send per loop turn, not per call */
    double ewma_us;
    uint32_t inflight;
    uint64_t requests, failures, hedges, hedge_wins, ejections;
} agg_replica;

typedef struct {
    agg_replica replicas[AGG_MAX_REPLICAS];
    uint32_t num_replicas;
    uint32_t latency_us[LATENCY_WINDOW];
    uint32_t num_samples, next_sample, since_p95;
    uint32_t p95_us;
    bool have_info;
    uint64_t num_docs, total_doc_len;
    uint64_t answered, missing;
} agg_partition;

typedef struct {
    isn_grpc_call *call;
    uint32_t replica;
    int64_t sent_ns;
    bool hedge;
} agg_attempt;

typedef enum { PART_PENDING = 0, PART_ANSWERED, PART_FAILED } part_state;

typedef struct {
    part_state state;
    agg_attempt attempts[AGG_MAX_REPLICAS];
    uint32_t num_attempts;
    uint32_t tried; /* replica bit mask */
    int64_t first_sent_ns;
    bool hedged;
    int last_status;
    isn_grpc_search_reply reply;
    isn_grpc_call *info; /* global statistics phase */
} agg_part;

typedef struct agg_query agg_query;
struct agg_query {
    agg_query *prev, *next;
    agg_rpc *rpc;
    Isn__V1__SearchRequest *request;
    int64_t start_ns, deadline_ns, finish_at_ns;
    uint32_t k;
    bool searching; /* false while global statistics are being collected */
    char *stats_key;
    /* global statistics sent with the query */
    char **terms;
    uint64_t *dfs;
    uint32_t num_terms;
    uint64_t num_docs;
    double avg_doc_len;
    int64_t processing_ns; /* time this thread spent on the query (decode, fan-out, merge, encode) */
    agg_part parts[];
};

typedef struct {
    char *key;
    char **terms;
    uint64_t *dfs;
    uint32_t num_terms;
} stats_entry;

typedef struct {
    agg_config config;
    agg_partition partitions[AGG_MAX_PARTITIONS];
    uint32_t num_partitions;
    agg_server *server;
    int stats_fd;
    agg_query *queries;
    uint32_t num_queries;
    stats_entry *stats_cache;
    uint32_t stats_cache_used;
    /* metrics */
    uint64_t requests_by_status[STATUS_CODES];
    uint64_t partial, hedges, hedge_wins, retries, upstream_requests, upstream_failures;
    uint64_t stats_cache_hits, stats_cache_misses;
    uint64_t latency_buckets[16], latency_count;
    double latency_sum_s, processing_sum_s;
    uint64_t processing_count;
    /* Set when connections were flushed after the main poll (sending on one also processes what
     * came in): answers may be waiting, so the loop must not sleep before looking. */
    bool absorbed;
} agg_state;

static const double LATENCY_BOUNDS_S[16] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                            0.05,   0.1,     0.25,   0.5,   1,      2.5,    5,     10};

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

/* ------------------------------------------------------------------ replicas */

static bool replica_connect(agg_replica *r) {
    if (r->client && isn_grpc_usable(r->client)) return true;
    if (r->client && r->inflight) return false; /* draining: its calls finish first */
    if (r->client) isn_grpc_close(r->client);
    char err[256];
    r->client = isn_grpc_connect(r->address, 200, err, sizeof err);
    return r->client != NULL;
}

static void replica_eject(agg_state *s, agg_replica *r, const char *why) {
    if (!r->up) return;
    r->up = false;
    r->ejections++;
    r->probe_at_ns = now_ns() + (int64_t)s->config.probe_interval_ms * 1000000LL;
    agg_log_line("replica %s of partition %u taken out: %s", r->address, r->partition, why);
}

static void replica_failed(agg_state *s, agg_replica *r, bool connection_lost, const char *why) {
    r->failures++;
    s->upstream_failures++;
    r->consecutive_failures++;
    if (connection_lost || (r->client && !isn_grpc_usable(r->client)) ||
        r->consecutive_failures >= s->config.failures_to_eject)
        replica_eject(s, r, why);
}

/* Best replica not in `exclude` that is up: lowest recent latency times (1 + calls in flight).
 * When every replica of the partition is out, one that is out for errors but still connected is
 * used anyway (asking it beats dropping the partition); one that cannot be reached is not. */
static int choose_replica(agg_state *s, agg_partition *p, uint32_t exclude) {
    int best = -1;
    double best_score = 0;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (uint32_t i = 0; i < p->num_replicas; i++) {
            agg_replica *r = &p->replicas[i];
            if ((exclude >> i) & 1) continue;
            if (pass == 0 ? !r->up : !(r->client && isn_grpc_usable(r->client))) continue;
            double score = r->ewma_us * (1.0 + r->inflight) * (1.0 + r->consecutive_failures);
            if (best < 0 || score < best_score) best = (int)i, best_score = score;
        }
    (void)s;
    return best;
}

static void record_latency(agg_partition *p, agg_replica *r, uint32_t us) {
    r->ewma_us = r->ewma_us * 0.9 + 0.1 * us;
    p->latency_us[p->next_sample] = us;
    p->next_sample = (p->next_sample + 1) % LATENCY_WINDOW;
    if (p->num_samples < LATENCY_WINDOW) p->num_samples++;
    if (++p->since_p95 >= P95_EVERY) {
        uint32_t sorted[LATENCY_WINDOW], n = p->num_samples;
        memcpy(sorted, p->latency_us, n * sizeof *sorted);
        /* insertion sort: 256 values every 32 answers */
        for (uint32_t i = 1; i < n; i++) {
            uint32_t v = sorted[i], j = i;
            while (j && sorted[j - 1] > v) sorted[j] = sorted[j - 1], j--;
            sorted[j] = v;
        }
        p->p95_us = sorted[(n * 95 + 99) / 100 - 1];
        p->since_p95 = 0;
    }
}

/* Health checks bring replicas that were taken out back in. */
static void probe_replicas(agg_state *s, int64_t t) {
    for (uint32_t pi = 0; pi < s->num_partitions; pi++) {
        agg_partition *p = &s->partitions[pi];
        for (uint32_t i = 0; i < p->num_replicas; i++) {
            agg_replica *r = &p->replicas[i];
            if (r->up) continue;
            if (r->probe) {
                if (!isn_grpc_call_done(r->probe)) continue;
                const isn_grpc_result *res = isn_grpc_call_result(r->probe);
                bool serving = false;
                if (res->grpc_status == 0 && res->message) {
                    Grpc__Health__V1__HealthCheckResponse *h =
                        grpc__health__v1__health_check_response__unpack(NULL, res->message_len, res->message);
                    serving = h && h->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
                    if (h) grpc__health__v1__health_check_response__free_unpacked(h, NULL);
                }
                isn_grpc_call_free(r->probe);
                r->probe = NULL;
                if (serving) {
                    r->up = true;
                    r->consecutive_failures = 0;
                    agg_log_line("replica %s of partition %u is back", r->address, r->partition);
                }
                continue;
            }
            if (t < r->probe_at_ns) continue;
            r->probe_at_ns = t + (int64_t)s->config.probe_interval_ms * 1000000LL;
            if (!replica_connect(r)) continue;
            isn_grpc_request rq = {.path = "/grpc.health.v1.Health/Check", .body = (const uint8_t *)"", .body_len = 0,
                                   .frame = true, .timeout_ms = s->config.probe_interval_ms};
            char err[256];
            r->probe = isn_grpc_start(r->client, &rq, err, sizeof err);
            if (r->probe) r->unsent = true;
        }
    }
}

/* ------------------------------------------------------------------ global statistics cache */

static uint64_t hash_text(const char *text) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 1099511628211ull;
    return h;
}

static void stats_entry_clear(stats_entry *e) {
    for (uint32_t i = 0; i < e->num_terms; i++) free(e->terms[i]);
    free(e->terms);
    free(e->dfs);
    free(e->key);
    memset(e, 0, sizeof *e);
}

static stats_entry *stats_cache_find(agg_state *s, const char *key) {
    for (uint64_t i = hash_text(key) % STATS_CACHE_SLOTS;; i = (i + 1) % STATS_CACHE_SLOTS) {
        stats_entry *e = &s->stats_cache[i];
        if (!e->key || !strcmp(e->key, key)) return e;
    }
}

/* The cache only grows with distinct query texts; when half full it starts over. */
static void stats_cache_put(agg_state *s, agg_query *q) {
    if (s->stats_cache_used >= STATS_CACHE_SLOTS / 2) {
        for (uint32_t i = 0; i < STATS_CACHE_SLOTS; i++) stats_entry_clear(&s->stats_cache[i]);
        s->stats_cache_used = 0;
    }
    stats_entry *e = stats_cache_find(s, q->stats_key);
    if (e->key) return;
    e->key = strdup(q->stats_key);
    e->terms = calloc(q->num_terms ? q->num_terms : 1, sizeof *e->terms);
    e->dfs = calloc(q->num_terms ? q->num_terms : 1, sizeof *e->dfs);
    if (!e->key || !e->terms || !e->dfs) {
        stats_entry_clear(e);
        return;
    }
    for (uint32_t i = 0; i < q->num_terms; i++) {
        e->terms[i] = strdup(q->terms[i]);
        e->dfs[i] = q->dfs[i];
        e->num_terms = i + 1;
        if (!e->terms[i]) {
            stats_entry_clear(e);
            return;
        }
    }
    s->stats_cache_used++;
}

static void global_totals(agg_state *s, agg_query *q) {
    uint64_t docs = 0, len = 0;
    for (uint32_t i = 0; i < s->num_partitions; i++) {
        if (!s->partitions[i].have_info) continue;
        docs += s->partitions[i].num_docs;
        len += s->partitions[i].total_doc_len;
    }
    q->num_docs = docs;
    q->avg_doc_len = docs ? (double)len / (double)docs : 0;
}

static int add_term_df(agg_query *q, const char *term, uint64_t df) {
    for (uint32_t i = 0; i < q->num_terms; i++)
        if (!strcmp(q->terms[i], term)) {
            q->dfs[i] += df;
            return 0;
        }
    char **terms = realloc(q->terms, (q->num_terms + 1) * sizeof *terms);
    if (!terms) return -1;
    q->terms = terms;
    uint64_t *dfs = realloc(q->dfs, (q->num_terms + 1) * sizeof *dfs);
    if (!dfs) return -1;
    q->dfs = dfs;
    if (!(q->terms[q->num_terms] = strdup(term))) return -1;
    q->dfs[q->num_terms++] = df;
    return 0;
}

/* ------------------------------------------------------------------ queries */

static void query_free(agg_state *s, agg_query *q) {
    for (uint32_t pi = 0; pi < s->num_partitions; pi++) {
        agg_part *part = &q->parts[pi];
        for (uint32_t a = 0; a < part->num_attempts; a++) {
            agg_replica *r = &s->partitions[pi].replicas[part->attempts[a].replica];
            r->inflight--;
            isn_grpc_call_free(part->attempts[a].call);
        }
        if (part->info) {
            isn_grpc_call_free(part->info);
            /* Info calls are counted on the replica they went to as well. */
        }
        isn_grpc_search_reply_free(&part->reply);
    }
    for (uint32_t i = 0; i < q->num_terms; i++) free(q->terms[i]);
    free(q->terms);
    free(q->dfs);
    free(q->stats_key);
    if (q->request) isn__v1__search_request__free_unpacked(q->request, NULL);
    if (q->prev) q->prev->next = q->next;
    else s->queries = q->next;
    if (q->next) q->next->prev = q->prev;
    s->num_queries--;
    free(q);
}

static uint32_t remaining_ms(const agg_state *s, const agg_query *q, int64_t t) {
    int64_t left = q->deadline_ns - t - (int64_t)s->config.margin_ms * 1000000LL;
    return left <= 1000000 ? 1 : (uint32_t)(left / 1000000);
}

/* Sends the query to one replica of partition pi (not yet tried). False when none is left. */
static bool send_attempt(agg_state *s, agg_query *q, uint32_t pi, bool hedge, int64_t t) {
    agg_partition *p = &s->partitions[pi];
    agg_part *part = &q->parts[pi];
    for (;;) {
        int ri = choose_replica(s, p, part->tried);
        if (ri < 0) return false;
        agg_replica *r = &p->replicas[ri];
        part->tried |= 1u << ri;
        if (!replica_connect(r)) {
            replica_failed(s, r, true, "cannot connect");
            continue;
        }
        const Isn__V1__SearchRequest *in = q->request;
        isn_grpc_search_request rq = {
            .query = in->query, .terms = (const char *const *)in->terms, .num_terms = (uint32_t)in->n_terms,
            .k = q->k, .mode = (isn_grpc_mode)in->mode, .algorithm = in->algorithm && in->algorithm[0] ? in->algorithm : NULL,
            .timeout_ms = remaining_ms(s, q, t), .request_id = in->request_id, .debug = false};
        if (in->global_stats) { /* the caller's own statistics pass through */
            const Isn__V1__GlobalStatistics *g = in->global_stats;
            rq.global_num_docs = g->num_docs;
            rq.global_avg_doc_len = g->avg_doc_len;
            if (g->n_terms) {
                /* rare: copied per attempt */
                const char **terms = calloc(g->n_terms, sizeof *terms);
                uint64_t *dfs = calloc(g->n_terms, sizeof *dfs);
                if (terms && dfs)
                    for (size_t i = 0; i < g->n_terms; i++) terms[i] = g->terms[i]->term, dfs[i] = g->terms[i]->df;
                rq.global_terms = terms;
                rq.global_dfs = dfs;
                rq.num_global_terms = terms && dfs ? (uint32_t)g->n_terms : 0;
            }
        } else if (s->config.global_stats && q->num_docs) {
            rq.global_num_docs = q->num_docs;
            rq.global_avg_doc_len = q->avg_doc_len;
            rq.global_terms = (const char *const *)q->terms;
            rq.global_dfs = q->dfs;
            rq.num_global_terms = q->num_terms;
        }
        char err[256];
        isn_grpc_call *call = isn_grpc_search_start(r->client, &rq, err, sizeof err);
        if (in->global_stats && in->global_stats->n_terms) {
            free((void *)rq.global_terms);
            free((void *)rq.global_dfs);
        }
        if (!call) {
            replica_failed(s, r, true, err);
            continue;
        }
        r->unsent = true;
        part->attempts[part->num_attempts++] = (agg_attempt){.call = call, .replica = (uint32_t)ri, .sent_ns = t, .hedge = hedge};
        if (!part->first_sent_ns) part->first_sent_ns = t;
        r->inflight++;
        r->requests++;
        s->upstream_requests++;
        if (hedge) {
            r->hedges++;
            s->hedges++;
        }
        return true;
    }
}

static void start_search(agg_state *s, agg_query *q, int64_t t) {
    q->searching = true;
    for (uint32_t pi = 0; pi < s->num_partitions; pi++) {
        agg_part *part = &q->parts[pi];
        part->tried = 0;
        if (!send_attempt(s, q, pi, false, t)) {
            part->state = PART_FAILED;
            part->last_status = GRPC_UNAVAILABLE;
        }
    }
}

/* Global statistics: asks one replica of every partition for the df of the query's terms. */
static void start_stats(agg_state *s, agg_query *q, int64_t t) {
    const Isn__V1__SearchRequest *in = q->request;
    Isn__V1__InfoRequest info = ISN__V1__INFO_REQUEST__INIT;
    char *text = in->query;
    if (in->query && in->query[0]) {
        info.n_terms = 1;
        info.terms = &text;
        info.analyze = true;
    } else {
        info.n_terms = in->n_terms;
        info.terms = in->terms;
    }
    size_t size = isn__v1__info_request__get_packed_size(&info);
    uint8_t *body = malloc(size ? size : 1);
    if (body) isn__v1__info_request__pack(&info, body);
    for (uint32_t pi = 0; body && pi < s->num_partitions; pi++) {
        agg_partition *p = &s->partitions[pi];
        for (uint32_t exclude = 0;;) {
            int ri = choose_replica(s, p, exclude);
            if (ri < 0) break;
            exclude |= 1u << ri;
            agg_replica *r = &p->replicas[ri];
            if (!replica_connect(r)) {
                replica_failed(s, r, true, "cannot connect");
                continue;
            }
            isn_grpc_request rq = {.path = "/isn.v1.Search/Info", .body = body, .body_len = size, .frame = true,
                                   .timeout_ms = remaining_ms(s, q, t)};
            char err[256];
            q->parts[pi].info = isn_grpc_start(r->client, &rq, err, sizeof err);
            if (q->parts[pi].info) {
                r->unsent = true;
                break;
            }
        }
    }
    free(body);
}

/* Collects the Info answers; true once every partition answered or failed. */
static bool stats_done(agg_state *s, agg_query *q) {
    for (uint32_t pi = 0; pi < s->num_partitions; pi++)
        if (q->parts[pi].info && !isn_grpc_call_done(q->parts[pi].info)) return false;
    bool all = true;
    for (uint32_t pi = 0; pi < s->num_partitions; pi++) {
        agg_part *part = &q->parts[pi];
        if (!part->info) {
            all = false;
            continue;
        }
        const isn_grpc_result *res = isn_grpc_call_result(part->info);
        Isn__V1__InfoResponse *info = res->grpc_status == 0 && res->message
                                          ? isn__v1__info_response__unpack(NULL, res->message_len, res->message)
                                          : NULL;
        if (!info) all = false;
        else {
            agg_partition *p = &s->partitions[pi];
            p->num_docs = info->num_docs;
            p->total_doc_len = info->total_doc_len;
            p->have_info = true;
            for (size_t i = 0; i < info->n_terms; i++) {
                const char *term = info->terms[i]->index_term;
                if (!term || !term[0]) continue;
                bool repeat = false; /* a term repeated in the query counts once per partition */
                for (size_t j = 0; j < i && !repeat; j++)
                    repeat = info->terms[j]->index_term && !strcmp(info->terms[j]->index_term, term);
                if (!repeat && add_term_df(q, term, info->terms[i]->df) != 0) all = false;
            }
            isn__v1__info_response__free_unpacked(info, NULL);
        }
        isn_grpc_call_free(part->info);
        part->info = NULL;
    }
    /* A term no partition holds needs no statistics (and df 0 would be refused). */
    for (uint32_t i = 0; i < q->num_terms;) {
        if (q->dfs[i]) {
            i++;
            continue;
        }
        free(q->terms[i]);
        q->terms[i] = q->terms[q->num_terms - 1];
        q->dfs[i] = q->dfs[--q->num_terms];
    }
    global_totals(s, q);
    if (all) stats_cache_put(s, q);
    return true;
}

/* ------------------------------------------------------------------ merge and reply */

typedef struct {
    const isn_grpc_hit *hit;
    uint32_t partition;
} merged_hit;

static int compare_merged(const void *a, const void *b) {
    const merged_hit *x = a, *y = b;
    if (x->hit->score != y->hit->score) return x->hit->score > y->hit->score ? -1 : 1;
    if (x->partition != y->partition) return x->partition < y->partition ? -1 : 1;
    return x->hit->doc < y->hit->doc ? -1 : x->hit->doc > y->hit->doc;
}

static void count_status(agg_state *s, int status) {
    s->requests_by_status[status >= 0 && status < STATUS_CODES ? status : GRPC_INTERNAL]++;
}

static void finish_query(agg_state *s, agg_query *q, int64_t t) {
    uint32_t answered = 0, total_hits = 0;
    bool complete = true, any_deadline = false, any_shed = false;
    const char *reason = "";
    uint64_t matched = 0, slowest_us = 0;
    for (uint32_t pi = 0; pi < s->num_partitions; pi++) {
        agg_part *part = &q->parts[pi];
        if (part->state == PART_ANSWERED) {
            answered++;
            total_hits += part->reply.num_hits;
            matched += part->reply.matched_lower_bound;
            if (part->reply.total_us > slowest_us) slowest_us = part->reply.total_us;
            if (!part->reply.complete) {
                complete = false;
                if (!reason[0]) reason = part->reply.incomplete_reason;
            }
            s->partitions[pi].answered++;
        } else {
            s->partitions[pi].missing++;
            if (part->last_status == GRPC_DEADLINE_EXCEEDED || part->state == PART_PENDING) any_deadline = true;
            if (part->last_status == GRPC_RESOURCE_EXHAUSTED) any_shed = true;
        }
    }
    if (!answered) {
        int status = any_deadline ? GRPC_DEADLINE_EXCEEDED : any_shed ? GRPC_RESOURCE_EXHAUSTED : GRPC_UNAVAILABLE;
        count_status(s, status);
        agg_rpc_fail(q->rpc, status,
                     any_deadline ? "no partition answered before the deadline"
                     : any_shed   ? "every partition that could be reached shed the query (overloaded)"
                                  : "no partition could be reached");
        q->rpc = NULL;
        return;
    }
    merged_hit *all = malloc((total_hits ? total_hits : 1) * sizeof *all);
    uint32_t n = 0;
    for (uint32_t pi = 0; all && pi < s->num_partitions; pi++)
        if (q->parts[pi].state == PART_ANSWERED)
            for (uint32_t i = 0; i < q->parts[pi].reply.num_hits; i++)
                all[n++] = (merged_hit){.hit = &q->parts[pi].reply.hits[i], .partition = pi};
    if (!all) {
        count_status(s, GRPC_RESOURCE_EXHAUSTED);
        agg_rpc_fail(q->rpc, GRPC_RESOURCE_EXHAUSTED, "aggregator out of memory");
        q->rpc = NULL;
        return;
    }
    qsort(all, n, sizeof *all, compare_merged);
    if (n > q->k) n = q->k;
    Isn__V1__Hit *hits = calloc(n ? n : 1, sizeof *hits);
    Isn__V1__Hit **hit_ptrs = calloc(n ? n : 1, sizeof *hit_ptrs);
    Isn__V1__SearchResponse response = ISN__V1__SEARCH_RESPONSE__INIT;
    Isn__V1__StageTimes times = ISN__V1__STAGE_TIMES__INIT;
    for (uint32_t i = 0; hits && hit_ptrs && i < n; i++) {
        isn__v1__hit__init(&hits[i]);
        hits[i].external_id = all[i].hit->external_id;
        hits[i].doc = all[i].hit->doc;
        hits[i].score = all[i].hit->score;
        hits[i].l1_score = all[i].hit->l1_score;
        hit_ptrs[i] = &hits[i];
    }
    response.n_hits = hits && hit_ptrs ? n : 0;
    response.hits = hit_ptrs;
    if (answered < s->num_partitions) {
        complete = false;
        reason = "partition_missing";
    }
    if (!complete) s->partial++;
    response.complete = complete;
    response.incomplete_reason = (char *)reason;
    response.matched_lower_bound = matched;
    response.device = "agg";
    times.retrieval_us = slowest_us;
    times.total_us = (uint64_t)((t - q->start_ns) / 1000);
    response.times = &times;
    response.request_id = q->request->request_id;
    response.partitions_answered = answered;
    response.partitions_total = s->num_partitions;
    size_t size = isn__v1__search_response__get_packed_size(&response);
    uint8_t *body = malloc(size ? size : 1);
    if (body) {
        isn__v1__search_response__pack(&response, body);
        agg_rpc_reply(q->rpc, body, size);
        count_status(s, GRPC_OK);
        double seconds = (double)(t - q->start_ns) / 1e9;
        s->latency_sum_s += seconds;
        s->latency_count++;
        for (int b = 0; b < 16; b++)
            if (seconds <= LATENCY_BOUNDS_S[b]) s->latency_buckets[b]++;
    } else {
        count_status(s, GRPC_RESOURCE_EXHAUSTED);
        agg_rpc_fail(q->rpc, GRPC_RESOURCE_EXHAUSTED, "aggregator out of memory");
    }
    q->rpc = NULL;
    free(body);
    free(hits);
    free(hit_ptrs);
    free(all);
}

/* ------------------------------------------------------------------ query progress */

static void drop_attempt(agg_state *s, agg_query *q, uint32_t pi, uint32_t a) {
    agg_part *part = &q->parts[pi];
    s->partitions[pi].replicas[part->attempts[a].replica].inflight--;
    isn_grpc_call_free(part->attempts[a].call);
    part->attempts[a] = part->attempts[--part->num_attempts];
}

/* Handles finished upstream calls of partition pi; hedges and retries. */
static void progress_part(agg_state *s, agg_query *q, uint32_t pi, int64_t t) {
    agg_part *part = &q->parts[pi];
    agg_partition *p = &s->partitions[pi];
    for (uint32_t a = 0; a < part->num_attempts && part->state == PART_PENDING;) {
        agg_attempt *at = &part->attempts[a];
        if (!isn_grpc_call_done(at->call)) {
            a++;
            continue;
        }
        agg_replica *r = &p->replicas[at->replica];
        r->inflight--;
        isn_grpc_search_reply reply;
        char err[256];
        bool hedge = at->hedge;
        int64_t sent = at->sent_ns;
        bool bad = isn_grpc_search_finish(at->call, &reply, err, sizeof err) != 0;
        part->attempts[a] = part->attempts[--part->num_attempts];
        int status = bad ? -1 : reply.status;
        if (status == GRPC_OK) {
            r->consecutive_failures = 0;
            record_latency(p, r, (uint32_t)((t - sent) / 1000));
            part->reply = reply;
            part->state = PART_ANSWERED;
            if (hedge) {
                r->hedge_wins++;
                s->hedge_wins++;
            }
            while (part->num_attempts) drop_attempt(s, q, pi, 0); /* cancel the loser */
            return;
        }
        if (!bad) isn_grpc_search_reply_free(&reply);
        part->last_status = status;
        if (status == GRPC_INVALID_ARGUMENT) {
            /* Every partition would refuse it alike: the caller's error. */
            part->state = PART_FAILED;
            for (uint32_t i = 0; i < s->num_partitions; i++) q->parts[i].state = q->parts[i].state == PART_PENDING ? PART_FAILED : q->parts[i].state;
            count_status(s, GRPC_INVALID_ARGUMENT);
            agg_rpc_fail(q->rpc, GRPC_INVALID_ARGUMENT, bad ? err : reply.message);
            q->rpc = NULL;
            return;
        }
        if (status == -1 || status == GRPC_UNAVAILABLE || status == GRPC_RESOURCE_EXHAUSTED ||
            status == GRPC_INTERNAL) {
            /* Shedding (RESOURCE_EXHAUSTED) says busy, not broken: retried elsewhere, but it takes
             * no replica out, or overload would turn into an outage. */
            if (status == GRPC_RESOURCE_EXHAUSTED) s->upstream_failures++, r->failures++;
            else replica_failed(s, r, status == -1, status == -1 ? "transport error" : "error status");
            /* Another replica may still make it in time. */
            if (part->num_attempts == 0 && t < q->finish_at_ns) {
                if (send_attempt(s, q, pi, false, t)) s->retries++;
            }
        }
    }
    if (part->state != PART_PENDING) return;
    if (part->num_attempts == 0) {
        part->state = PART_FAILED;
        return;
    }
    /* Hedge: one attempt out for longer than this partition's recent p95. */
    if (s->config.hedge && !part->hedged && part->num_attempts == 1) {
        int64_t delay_ns = p->num_samples >= MIN_SAMPLES_FOR_P95 ? (int64_t)p->p95_us * 1000
                                                                 : (int64_t)s->config.hedge_initial_ms * 1000000;
        if (delay_ns < (int64_t)s->config.hedge_min_us * 1000) delay_ns = (int64_t)s->config.hedge_min_us * 1000;
        if (t - part->attempts[0].sent_ns >= delay_ns && t < q->finish_at_ns) {
            part->hedged = true;
            send_attempt(s, q, pi, true, t);
        }
    }
}

/* When this query next needs attention without any input (hedge or deadline). */
static int64_t query_next_timer(const agg_state *s, const agg_query *q) {
    int64_t next = q->finish_at_ns;
    if (!q->searching || !s->config.hedge) return next;
    for (uint32_t pi = 0; pi < s->num_partitions; pi++) {
        const agg_part *part = &q->parts[pi];
        if (part->state != PART_PENDING || part->hedged || part->num_attempts != 1) continue;
        const agg_partition *p = &s->partitions[pi];
        int64_t delay_ns = p->num_samples >= MIN_SAMPLES_FOR_P95 ? (int64_t)p->p95_us * 1000
                                                                 : (int64_t)s->config.hedge_initial_ms * 1000000;
        if (delay_ns < (int64_t)s->config.hedge_min_us * 1000) delay_ns = (int64_t)s->config.hedge_min_us * 1000;
        if (part->attempts[0].sent_ns + delay_ns < next) next = part->attempts[0].sent_ns + delay_ns;
    }
    return next;
}

/* Advances one query; frees it once answered. */
static void progress_query(agg_state *s, agg_query *q, int64_t t) {
    int64_t work_start = now_ns();
    if (q->rpc && agg_rpc_cancelled(q->rpc)) {
        agg_rpc_fail(q->rpc, 1, "cancelled"); /* releases it; the client is gone */
        q->rpc = NULL;
        count_status(s, 1);
    }
    if (q->rpc && !q->searching) {
        if (t >= q->finish_at_ns || stats_done(s, q)) start_search(s, q, t);
    }
    if (q->rpc && q->searching) {
        bool pending = false;
        for (uint32_t pi = 0; pi < s->num_partitions && q->rpc; pi++) {
            if (q->parts[pi].state != PART_PENDING) continue;
            progress_part(s, q, pi, t);
            if (q->parts[pi].state == PART_PENDING) pending = true;
        }
        if (q->rpc && (!pending || t >= q->finish_at_ns)) finish_query(s, q, t);
    }
    if (!q->rpc) {
        q->processing_ns += now_ns() - work_start;
        s->processing_sum_s += (double)q->processing_ns / 1e9;
        s->processing_count++;
        query_free(s, q);
        return;
    }
    q->processing_ns += now_ns() - work_start;
}

/* ------------------------------------------------------------------ incoming calls */

static void handle_search(agg_state *s, agg_rpc *rpc) {
    int64_t t = now_ns();
    size_t len;
    const uint8_t *message = agg_rpc_message(rpc, &len);
    Isn__V1__SearchRequest *request = isn__v1__search_request__unpack(NULL, len, message);
    if (!request) {
        count_status(s, GRPC_INVALID_ARGUMENT);
        agg_rpc_fail(rpc, GRPC_INVALID_ARGUMENT, "request is not a valid isn.v1.SearchRequest message");
        return;
    }
    uint32_t k = request->k ? request->k : s->config.default_k;
    if (k > s->config.max_k) {
        count_status(s, GRPC_INVALID_ARGUMENT);
        char why[128];
        snprintf(why, sizeof why, "k = %u is above the aggregator's max_k %u", k, s->config.max_k);
        agg_rpc_fail(rpc, GRPC_INVALID_ARGUMENT, why);
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    agg_query *q = calloc(1, sizeof *q + s->num_partitions * sizeof(agg_part));
    if (!q) {
        count_status(s, GRPC_RESOURCE_EXHAUSTED);
        agg_rpc_fail(rpc, GRPC_RESOURCE_EXHAUSTED, "aggregator out of memory");
        isn__v1__search_request__free_unpacked(request, NULL);
        return;
    }
    q->rpc = rpc;
    q->request = request;
    q->k = k;
    q->start_ns = t;
    uint64_t timeout_ms = agg_rpc_timeout_ms(rpc);
    if (!timeout_ms) timeout_ms = request->timeout_ms;
    if (!timeout_ms) timeout_ms = s->config.default_timeout_ms;
    q->deadline_ns = t + (int64_t)timeout_ms * 1000000LL;
    /* Answer with what there is a little before the caller's deadline. */
    int64_t margin = (int64_t)s->config.margin_ms * 1000000LL / 2;
    q->finish_at_ns = q->deadline_ns - margin;
    q->next = s->queries;
    if (s->queries) s->queries->prev = q;
    s->queries = q;
    s->num_queries++;

    bool want_stats = s->config.global_stats && !request->global_stats;
    if (want_stats) {
        size_t key_len = 2 + (request->query ? strlen(request->query) : 0);
        for (size_t i = 0; i < request->n_terms; i++) key_len += strlen(request->terms[i]) + 1;
        q->stats_key = malloc(key_len);
        if (q->stats_key) {
            /* query text, or \x01 and the pre-analyzed terms separated by \x01 */
            if (request->query && request->query[0]) snprintf(q->stats_key, key_len, "%s", request->query);
            else {
                size_t n = 0;
                q->stats_key[n++] = '\x01';
                for (size_t i = 0; i < request->n_terms; i++)
                    n += (size_t)snprintf(q->stats_key + n, key_len - n, "%s\x01", request->terms[i]);
                q->stats_key[n] = '\0';
            }
            stats_entry *e = stats_cache_find(s, q->stats_key);
            if (e->key) {
                s->stats_cache_hits++;
                for (uint32_t i = 0; i < e->num_terms; i++) add_term_df(q, e->terms[i], e->dfs[i]);
                global_totals(s, q);
                want_stats = false;
            } else {
                s->stats_cache_misses++;
            }
        }
    }
    if (want_stats) start_stats(s, q, t);
    else start_search(s, q, t);
    q->processing_ns += now_ns() - t;
    progress_query(s, q, now_ns()); /* every partition may have failed at once */
}

static void handle_info(agg_state *s, agg_rpc *rpc) {
    Isn__V1__InfoResponse response = ISN__V1__INFO_RESPONSE__INIT;
    uint64_t docs = 0, len = 0;
    for (uint32_t i = 0; i < s->num_partitions; i++) {
        docs += s->partitions[i].num_docs;
        len += s->partitions[i].total_doc_len;
    }
    response.num_docs = docs;
    response.total_doc_len = len;
    response.avg_doc_len = docs ? (double)len / (double)docs : 0;
    response.server_version = "isn-agg 0.1";
    size_t size = isn__v1__info_response__get_packed_size(&response);
    uint8_t body[256];
    if (size > sizeof body) {
        agg_rpc_fail(rpc, GRPC_INTERNAL, "Info reply too large");
        return;
    }
    isn__v1__info_response__pack(&response, body);
    count_status(s, GRPC_OK);
    agg_rpc_reply(rpc, body, size);
}

static void handle_health(agg_state *s, agg_rpc *rpc) {
    Grpc__Health__V1__HealthCheckResponse response = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    response.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    uint8_t body[16];
    size_t size = grpc__health__v1__health_check_response__pack(&response, body);
    (void)s;
    agg_rpc_reply(rpc, body, size);
}

static void on_rpc(void *user, agg_rpc *rpc) {
    agg_state *s = user;
    const char *path = agg_rpc_path(rpc);
    if (!strcmp(path, "/isn.v1.Search/Search")) handle_search(s, rpc);
    else if (!strcmp(path, "/isn.v1.Search/Info")) handle_info(s, rpc);
    else if (!strcmp(path, "/grpc.health.v1.Health/Check")) handle_health(s, rpc);
    else {
        char why[200];
        snprintf(why, sizeof why, "unknown method %.150s", path);
        count_status(s, GRPC_UNIMPLEMENTED);
        agg_rpc_fail(rpc, GRPC_UNIMPLEMENTED, why);
    }
}

/* ------------------------------------------------------------------ /metrics */

static size_t render_metrics(agg_state *s, char *out, size_t cap) {
    size_t n = 0;
#define EMIT(...) (n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, __VA_ARGS__))
    EMIT("# HELP isn_agg_requests_total Search/Info calls answered, by gRPC status.\n# TYPE isn_agg_requests_total counter\n");
    for (int i = 0; i < STATUS_CODES; i++)
        if (s->requests_by_status[i] || i == 0)
            EMIT("isn_agg_requests_total{code=\"%d\"} %llu\n", i, (unsigned long long)s->requests_by_status[i]);
    EMIT("# HELP isn_agg_partial_total Answers with complete=false (a partition missing or partial).\n"
         "# TYPE isn_agg_partial_total counter\nisn_agg_partial_total %llu\n", (unsigned long long)s->partial);
    EMIT("# HELP isn_agg_hedges_total Hedged requests sent.\n# TYPE isn_agg_hedges_total counter\nisn_agg_hedges_total %llu\n",
         (unsigned long long)s->hedges);
    EMIT("# HELP isn_agg_hedge_wins_total Hedged requests that answered first.\n# TYPE isn_agg_hedge_wins_total counter\n"
         "isn_agg_hedge_wins_total %llu\n", (unsigned long long)s->hedge_wins);
    EMIT("# HELP isn_agg_retries_total Requests resent to another replica after a failure.\n"
         "# TYPE isn_agg_retries_total counter\nisn_agg_retries_total %llu\n", (unsigned long long)s->retries);
    EMIT("# HELP isn_agg_upstream_requests_total Search requests sent to partitions.\n"
         "# TYPE isn_agg_upstream_requests_total counter\nisn_agg_upstream_requests_total %llu\n",
         (unsigned long long)s->upstream_requests);
    EMIT("# HELP isn_agg_upstream_failures_total Upstream requests that failed (transport, UNAVAILABLE, shed).\n"
         "# TYPE isn_agg_upstream_failures_total counter\nisn_agg_upstream_failures_total %llu\n",
         (unsigned long long)s->upstream_failures);
    EMIT("# HELP isn_agg_global_stats_cache_total Global statistics lookups by result.\n"
         "# TYPE isn_agg_global_stats_cache_total counter\n"
         "isn_agg_global_stats_cache_total{result=\"hit\"} %llu\nisn_agg_global_stats_cache_total{result=\"miss\"} %llu\n",
         (unsigned long long)s->stats_cache_hits, (unsigned long long)s->stats_cache_misses);
    EMIT("# HELP isn_agg_inflight Queries in progress.\n# TYPE isn_agg_inflight gauge\nisn_agg_inflight %u\n", s->num_queries);
    EMIT("# HELP isn_agg_latency_seconds Search latency seen by the aggregator (answered queries).\n"
         "# TYPE isn_agg_latency_seconds histogram\n");
    for (int b = 0; b < 16; b++)
        EMIT("isn_agg_latency_seconds_bucket{le=\"%g\"} %llu\n", LATENCY_BOUNDS_S[b], (unsigned long long)s->latency_buckets[b]);
    EMIT("isn_agg_latency_seconds_bucket{le=\"+Inf\"} %llu\nisn_agg_latency_seconds_sum %.6f\nisn_agg_latency_seconds_count %llu\n",
         (unsigned long long)s->latency_count, s->latency_sum_s, (unsigned long long)s->latency_count);
    EMIT("# HELP isn_agg_processing_seconds Time the aggregator thread itself spent per query (decode, fan-out, "
         "merge, encode).\n# TYPE isn_agg_processing_seconds summary\nisn_agg_processing_seconds_sum %.6f\n"
         "isn_agg_processing_seconds_count %llu\n", s->processing_sum_s, (unsigned long long)s->processing_count);
    EMIT("# HELP isn_agg_partition_p95_seconds Recent p95 answer time per partition (the hedge delay).\n"
         "# TYPE isn_agg_partition_p95_seconds gauge\n");
    for (uint32_t pi = 0; pi < s->num_partitions; pi++)
        EMIT("isn_agg_partition_p95_seconds{partition=\"%u\"} %.6f\n", pi, s->partitions[pi].p95_us / 1e6);
    EMIT("# HELP isn_agg_partition_missing_total Answers that lacked this partition.\n"
         "# TYPE isn_agg_partition_missing_total counter\n");
    for (uint32_t pi = 0; pi < s->num_partitions; pi++)
        EMIT("isn_agg_partition_missing_total{partition=\"%u\"} %llu\n", pi, (unsigned long long)s->partitions[pi].missing);
    static const char *const replica_metrics[][3] = {
        {"isn_agg_replica_up", "gauge", "1 while the replica is in rotation"},
        {"isn_agg_replica_requests_total", "counter", "Search requests sent to the replica (hedges included)"},
        {"isn_agg_replica_failures_total", "counter", "Failed requests of the replica"},
        {"isn_agg_replica_hedges_total", "counter", "Hedged requests sent to the replica"},
        {"isn_agg_replica_latency_ewma_seconds", "gauge", "Moving average of the replica's answer time"},
        {"isn_agg_replica_ejections_total", "counter", "Times the replica was taken out of rotation"},
    };
    for (int m = 0; m < 6; m++) {
        EMIT("# HELP %s %s.\n# TYPE %s %s\n", replica_metrics[m][0], replica_metrics[m][2], replica_metrics[m][0],
             replica_metrics[m][1]);
        for (uint32_t pi = 0; pi < s->num_partitions; pi++)
            for (uint32_t i = 0; i < s->partitions[pi].num_replicas; i++) {
                const agg_replica *r = &s->partitions[pi].replicas[i];
                double v = m == 0 ? r->up : m == 1 ? (double)r->requests : m == 2 ? (double)r->failures
                         : m == 3 ? (double)r->hedges : m == 4 ? r->ewma_us / 1e6 : (double)r->ejections;
                EMIT("%s{partition=\"%u\",replica=\"%s\"} %.9g\n", replica_metrics[m][0], pi, r->address, v);
            }
    }
#undef EMIT
    return n < cap ? n : cap;
}

/* One short HTTP/1.1 exchange per connection: the request line is read with a short timeout. */
static void serve_stats(agg_state *s) {
    int fd = accept4(s->stats_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    struct timeval tv = {0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char request[2048];
    ssize_t got = recv(fd, request, sizeof request - 1, 0);
    if (got <= 0) {
        close(fd);
        return;
    }
    request[got] = '\0';
    static char body[1 << 18];
    size_t len;
    const char *status = "200 OK", *type = "text/plain; version=0.0.4";
    if (!strncmp(request, "GET /metrics", 12)) len = render_metrics(s, body, sizeof body);
    else if (!strncmp(request, "GET /healthz", 12) || !strncmp(request, "GET /readyz", 11))
        len = (size_t)snprintf(body, sizeof body, "ok\n");
    else {
        status = "404 Not Found";
        len = (size_t)snprintf(body, sizeof body, "not found: try /metrics or /healthz\n");
    }
    char head[256];
    int hn = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                      status, type, len);
    if (send(fd, head, (size_t)hn, MSG_NOSIGNAL) == hn) {
        for (size_t sent = 0; sent < len;) {
            ssize_t w = send(fd, body + sent, len - sent, MSG_NOSIGNAL);
            if (w <= 0) break;
            sent += (size_t)w;
        }
    }
    close(fd);
}

static int listen_stats(const char *address, char *err, size_t err_len) {
    char host[256];
    const char *colon = strrchr(address, ':');
    size_t hlen = (size_t)(colon - address);
    if (hlen >= sizeof host) hlen = sizeof host - 1;
    memcpy(host, address, hlen);
    host[hlen] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) {
        snprintf(err, err_len, "cannot resolve stats address %s", address);
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        snprintf(err, err_len, "cannot listen on %s: %s", address, strerror(errno));
        if (fd >= 0) close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* ------------------------------------------------------------------ startup and loop */

static void usage(FILE *out) {
    fputs("usage: isn-agg [--config FILE] [--listen HOST:PORT] [--stats-listen HOST:PORT|\"\"]\n"
          "               --partition HOST:PORT[,HOST:PORT...] (once per partition, its replicas)\n"
          "               [--global-stats] [--no-hedge] [--set KEY=VALUE ...]\n"
          "Aggregates isn.v1.Search over partitions. Keys (file: KEY = VALUE, optional [agg] section;\n"
          "command line: --set KEY=VALUE): listen, stats_listen, partition (repeat), default_timeout_ms (1000),\n"
          "margin_ms (2), default_k (10), max_k (10000), hedge (true), hedge_min_us (500),\n"
          "hedge_initial_ms (20), global_stats (false), probe_interval_ms (500), failures_to_eject (3).\n"
          "The log names the ports (port 0 = any free port). SIGTERM/SIGINT stop it.\n",
          out);
}

static int parse_args(int argc, char **argv, agg_config *config) {
    agg_config_default(config);
    char err[512];
    /* The file first, so the command line overrides it (partitions from both add up). */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config") && agg_config_load(config, argv[i + 1], err, sizeof err) != 0) {
            fprintf(stderr, "isn-agg: %s\n", err);
            return -1;
        }
    static const struct option opts[] = {{"config", 1, 0, 'c'},    {"listen", 1, 0, 'l'}, {"stats-listen", 1, 0, 'S'},
                                         {"partition", 1, 0, 'p'}, {"global-stats", 0, 0, 'g'},
                                         {"no-hedge", 0, 0, 'n'},  {"set", 1, 0, 's'},   {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'c': break;
        case 'l': rc = agg_config_set(config, "listen", optarg, err, sizeof err); break;
        case 'S': rc = agg_config_set(config, "stats_listen", optarg, err, sizeof err); break;
        case 'p': rc = agg_config_set(config, "partition", optarg, err, sizeof err); break;
        case 'g': config->global_stats = true; break;
        case 'n': config->hedge = false; break;
        case 's': {
            char key[64];
            const char *eq = strchr(optarg, '=');
            if (!eq || (size_t)(eq - optarg) >= sizeof key) {
                snprintf(err, sizeof err, "--set wants KEY=VALUE, got \"%s\"", optarg);
                rc = -1;
                break;
            }
            memcpy(key, optarg, (size_t)(eq - optarg));
            key[eq - optarg] = '\0';
            rc = agg_config_set(config, key, eq + 1, err, sizeof err);
            break;
        }
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (rc != 0) {
            fprintf(stderr, "isn-agg: %s\n", err);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "isn-agg: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    if (agg_config_validate(config, err, sizeof err) != 0) {
        fprintf(stderr, "isn-agg: %s\n", err);
        return -1;
    }
    return 0;
}

/* Partition sizes for global statistics; a partition not reachable now is asked again per query. */
static void fetch_partition_info(agg_state *s) {
    for (uint32_t pi = 0; pi < s->num_partitions; pi++) {
        agg_partition *p = &s->partitions[pi];
        for (uint32_t i = 0; i < p->num_replicas && !p->have_info; i++) {
            agg_replica *r = &p->replicas[i];
            if (!replica_connect(r)) {
                replica_eject(s, r, "cannot connect at start");
                continue;
            }
            isn_grpc_info_reply info;
            char err[256];
            if (isn_grpc_info(r->client, NULL, 0, false, &info, err, sizeof err) == 0 && info.status == 0) {
                p->num_docs = info.num_docs;
                p->total_doc_len = info.total_doc_len;
                p->have_info = true;
                agg_log_line("partition %u: %llu documents (from %s)", pi, (unsigned long long)info.num_docs, r->address);
            }
            isn_grpc_info_reply_free(&info);
        }
        if (!p->have_info) agg_log_line("partition %u: no replica answered Info yet", pi);
    }
}

/* Sends what this loop turn queued, one write per replica connection. */
static void flush_replicas(agg_state *s) {
    int64_t start = now_ns();
    bool any = false;
    char err[256];
    for (uint32_t pi = 0; pi < s->num_partitions; pi++)
        for (uint32_t i = 0; i < s->partitions[pi].num_replicas; i++) {
            agg_replica *r = &s->partitions[pi].replicas[i];
            if (!r->unsent) continue;
            r->unsent = false;
            if (r->client) isn_grpc_poll(r->client, 0, err, sizeof err);
            any = true;
        }
    if (any) {
        s->absorbed = true;
        s->processing_sum_s += (double)(now_ns() - start) / 1e9;
    }
}

static void run_loop(agg_state *s) {
    static struct pollfd fds[MAX_POLLFDS];
    static agg_replica *fd_replicas[MAX_POLLFDS];
    while (!stop_requested) {
        size_t n = agg_server_pollfds(s->server, fds, MAX_POLLFDS - 1);
        size_t server_fds = n, stats_index = SIZE_MAX;
        if (s->stats_fd >= 0) {
            stats_index = n;
            fds[n++] = (struct pollfd){.fd = s->stats_fd, .events = POLLIN};
        }
        size_t replica_start = n;
        for (uint32_t pi = 0; pi < s->num_partitions; pi++)
            for (uint32_t i = 0; i < s->partitions[pi].num_replicas && n < MAX_POLLFDS; i++) {
                agg_replica *r = &s->partitions[pi].replicas[i];
                if (r->client && !isn_grpc_usable(r->client) && !r->inflight &&
                    (!r->probe || isn_grpc_call_done(r->probe))) {
                    isn_grpc_close(r->client); /* a dead connection would wake poll() forever */
                    r->client = NULL;
                }
                if (!r->client) continue;
                fd_replicas[n] = r;
                fds[n++] = (struct pollfd){.fd = isn_grpc_fd(r->client), .events = POLLIN};
            }
        int64_t t = now_ns(), next = t + 100000000LL;
        for (agg_query *q = s->queries; q; q = q->next) {
            int64_t qt = query_next_timer(s, q);
            if (qt < next) next = qt;
        }
        int64_t wait = s->absorbed ? 0 : next - t;
        s->absorbed = false;
        if (wait < 0) wait = 0;
        struct timespec ts = {(time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL)};
        if (ppoll(fds, n, &ts, NULL) < 0 && errno != EINTR) break;
        char err[256];
        for (size_t i = replica_start; i < n; i++)
            if (fds[i].revents) isn_grpc_poll(fd_replicas[i]->client, 0, err, sizeof err);
        agg_server_process(s->server, fds, server_fds);
        if (stats_index != SIZE_MAX && (fds[stats_index].revents & POLLIN)) serve_stats(s);
        t = now_ns();
        for (agg_query *q = s->queries, *following; q; q = following) {
            following = q->next;
            progress_query(s, q, t);
        }
        probe_replicas(s, t);
        flush_replicas(s);
        agg_server_flush(s->server);
    }
}

int main(int argc, char **argv) {
    static agg_state s;
    if (parse_args(argc, argv, &s.config) != 0) return 2;
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    s.num_partitions = s.config.num_partitions;
    for (uint32_t pi = 0; pi < s.num_partitions; pi++) {
        agg_partition *p = &s.partitions[pi];
        p->num_replicas = s.config.partitions[pi].num_replicas;
        for (uint32_t i = 0; i < p->num_replicas; i++) {
            agg_replica *r = &p->replicas[i];
            /* memcpy, not snprintf: both live in `s`, which gcc's -Wrestrict reads as an overlap */
            const char *address = s.config.partitions[pi].replicas[i];
            size_t address_len = strnlen(address, sizeof r->address - 1);
            memcpy(r->address, address, address_len);
            r->address[address_len] = 0;
            r->partition = pi;
            r->index = i;
            r->up = true;
            r->ewma_us = 1000;
        }
    }
    s.stats_cache = calloc(STATS_CACHE_SLOTS, sizeof *s.stats_cache);
    char err[512];
    s.server = agg_server_new(s.config.listen, 4u << 20, on_rpc, &s, err, sizeof err);
    if (!s.stats_cache || !s.server) {
        fprintf(stderr, "isn-agg: %s\n", s.server ? "out of memory" : err);
        return 1;
    }
    s.stats_fd = -1;
    if (s.config.stats_listen[0] && (s.stats_fd = listen_stats(s.config.stats_listen, err, sizeof err)) < 0) {
        fprintf(stderr, "isn-agg: %s\n", err);
        return 1;
    }
    fetch_partition_info(&s);
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    int stats_port = 0;
    if (s.stats_fd >= 0 && getsockname(s.stats_fd, (struct sockaddr *)&bound, &bound_len) == 0) {
        char port[16];
        getnameinfo((struct sockaddr *)&bound, bound_len, NULL, 0, port, sizeof port, NI_NUMERICSERV);
        stats_port = atoi(port);
    }
    agg_log_line("ready: %u partitions, gRPC port %d, stats port %d, hedging %s, global statistics %s", s.num_partitions,
             agg_server_port(s.server), stats_port, s.config.hedge ? "on" : "off", s.config.global_stats ? "on" : "off");
    run_loop(&s);
    agg_log_line("stopping");
    agg_server_stop_accepting(s.server);
    while (s.queries) {
        agg_rpc_fail(s.queries->rpc, GRPC_UNAVAILABLE, "aggregator stopping");
        s.queries->rpc = NULL;
        query_free(&s, s.queries);
    }
    agg_server_flush(s.server);
    agg_server_free(s.server);
    for (uint32_t pi = 0; pi < s.num_partitions; pi++)
        for (uint32_t i = 0; i < s.partitions[pi].num_replicas; i++) {
            agg_replica *r = &s.partitions[pi].replicas[i];
            if (r->probe) isn_grpc_call_free(r->probe);
            isn_grpc_close(r->client);
        }
    for (uint32_t i = 0; i < STATS_CACHE_SLOTS; i++) stats_entry_clear(&s.stats_cache[i]);
    free(s.stats_cache);
    if (s.stats_fd >= 0) close(s.stats_fd);
    return 0;
}
