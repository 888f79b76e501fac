/* Global statistics: before the search, every partition is asked (Info) for the df of the query's
 * terms; the sums, N and the average length go out with the query, so merged scores equal one
 * unpartitioned index's. The answers are cached per query text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg/agg_internal.h"

/* ------------------------------------------------------------------ cache */

static void stats_entry_clear(agg_stats_entry *e) {
    for (uint32_t i = 0; i < e->num_terms; i++) free(e->terms[i]);
    free(e->terms);
    free(e->dfs);
    free(e->key);
    memset(e, 0, sizeof *e);
}

int agg_stats_cache_init(agg_stats_cache *cache) {
    cache->slots = calloc(AGG_STATS_CACHE_SLOTS, sizeof *cache->slots);
    cache->used = 0;
    return cache->slots ? 0 : -1;
}

void agg_stats_cache_free(agg_stats_cache *cache) {
    if (!cache->slots) return;
    for (uint32_t i = 0; i < AGG_STATS_CACHE_SLOTS; i++) stats_entry_clear(&cache->slots[i]);
    free(cache->slots);
    cache->slots = NULL;
    cache->used = 0;
}

/* The entry of `key`, or the empty slot where it would go. */
agg_stats_entry *agg_stats_cache_find(agg_stats_cache *cache, const char *key) {
    for (uint64_t i = isn_hash_string(key) % AGG_STATS_CACHE_SLOTS;; i = (i + 1) % AGG_STATS_CACHE_SLOTS) {
        agg_stats_entry *e = &cache->slots[i];
        if (!e->key || !strcmp(e->key, key)) return e;
    }
}

static void stats_cache_clear(agg_stats_cache *cache) {
    if (!cache->used) return; /* while a partition's replicas differ this is asked often, of an empty cache */
    for (uint32_t i = 0; cache->slots && i < AGG_STATS_CACHE_SLOTS; i++) stats_entry_clear(&cache->slots[i]);
    cache->used = 0;
}

/* The cache only grows with distinct query texts; when half full it starts over. */
void agg_stats_cache_put(agg_stats_cache *cache, const char *key, const agg_term_stats *stats) {
    if (!cache->slots) return;
    if (cache->used >= AGG_STATS_CACHE_SLOTS / 2) stats_cache_clear(cache);
    agg_stats_entry *e = agg_stats_cache_find(cache, key);
    if (e->key) return;
    e->key = strdup(key);
    e->terms = calloc(stats->num_terms ? stats->num_terms : 1, sizeof *e->terms);
    e->dfs = calloc(stats->num_terms ? stats->num_terms : 1, sizeof *e->dfs);
    if (!e->key || !e->terms || !e->dfs) {
        stats_entry_clear(e);
        return;
    }
    e->num_docs = stats->num_docs;
    e->avg_doc_len = stats->avg_doc_len;
    for (uint32_t i = 0; i < stats->num_terms; i++) {
        e->terms[i] = strdup(stats->terms[i]);
        e->dfs[i] = stats->dfs[i];
        e->num_terms = i + 1;
        if (!e->terms[i]) {
            stats_entry_clear(e);
            return;
        }
    }
    cache->used++;
}

bool agg_partition_settled(const agg *a, uint32_t pi) {
    const agg_partition *p = &a->partitions[pi];
    const char *seen = NULL;
    for (uint32_t i = 0; i < p->num_replicas; i++) {
        const agg_replica *r = &p->replicas[i];
        if (!r->up || r->draining || !r->generation[0]) continue;
        if (seen && strcmp(seen, r->generation)) return false;
        seen = r->generation;
    }
    return true;
}

void agg_replica_generation_seen(agg *a, uint32_t pi, uint32_t ri, const char *generation, const char *source) {
    if (!generation || !generation[0] || pi >= a->num_partitions) return; /* an older isnd: no generations */
    agg_partition *p = &a->partitions[pi];
    if (ri >= p->num_replicas) return;
    agg_replica *r = &p->replicas[ri];
    if (!strcmp(r->generation, generation)) return; /* the same as its last reply: nothing new */
    bool changed = r->generation[0] != '\0';
    const char *other = NULL; /* another replica in rotation that serves another generation */
    for (uint32_t i = 0; i < p->num_replicas && !other; i++) {
        const agg_replica *s = &p->replicas[i];
        if (i != ri && s->up && !s->draining && s->generation[0] && strcmp(s->generation, generation)) other = s->generation;
    }
    if (changed) {
        a->metrics.generation_changes++;
        log_info("replica %s of partition %u: index generation %s -> %s (seen in %s)%s", r->address, pi, r->generation,
                 generation, source, other ? "; its partition's replicas serve different generations" : "");
    }
    if ((changed || other) && a->stats_cache.used) {
        log_info("partition %u: cached global statistics dropped (%u query texts): replica %s serves index generation "
                 "%s%s%s%s",
                 pi, a->stats_cache.used, r->address, generation, other ? ", another of its replicas " : "",
                 other ? other : "", other ? " (not cached until they agree)" : "");
        stats_cache_clear(&a->stats_cache);
    }
    snprintf(r->generation, sizeof r->generation, "%s", generation);
}

/* ------------------------------------------------------------------ one query's statistics */

int agg_term_stats_add(agg_term_stats *stats, const char *term, uint64_t df) {
    for (uint32_t i = 0; i < stats->num_terms; i++)
        if (!strcmp(stats->terms[i], term)) {
            stats->dfs[i] += df;
            return 0;
        }
    char **terms = realloc(stats->terms, (stats->num_terms + 1) * sizeof *terms);
    if (!terms) return -1;
    stats->terms = terms;
    uint64_t *dfs = realloc(stats->dfs, (stats->num_terms + 1) * sizeof *dfs);
    if (!dfs) return -1;
    stats->dfs = dfs;
    if (!(stats->terms[stats->num_terms] = strdup(term))) return -1;
    stats->dfs[stats->num_terms++] = df;
    return 0;
}

void agg_term_stats_free(agg_term_stats *stats) {
    for (uint32_t i = 0; i < stats->num_terms; i++) free(stats->terms[i]);
    free(stats->terms);
    free(stats->dfs);
    memset(stats, 0, sizeof *stats);
}

void agg_global_totals(const agg *a, agg_term_stats *stats) {
    uint64_t docs = 0, len = 0;
    for (uint32_t i = 0; i < a->num_partitions; i++) {
        if (!a->partitions[i].have_info) continue;
        docs += a->partitions[i].num_docs;
        len += a->partitions[i].total_doc_len;
    }
    stats->num_docs = docs;
    stats->avg_doc_len = docs ? (double)len / (double)docs : 0;
}

/* The cache key: the query text, or \x01 and the pre-analyzed terms separated by \x01. */
static char *stats_key(const Isn__V1__SearchRequest *request) {
    size_t key_len = 2 + (request->query ? strlen(request->query) : 0);
    for (size_t i = 0; i < request->n_terms; i++) key_len += strlen(request->terms[i]) + 1;
    char *key = malloc(key_len);
    if (!key) return NULL;
    if (request->query && request->query[0]) snprintf(key, key_len, "%s", request->query);
    else {
        size_t n = 0;
        key[n++] = '\x01';
        for (size_t i = 0; i < request->n_terms; i++)
            n += (size_t)snprintf(key + n, key_len - n, "%s\x01", request->terms[i]);
        key[n] = '\0';
    }
    return key;
}

bool agg_stats_lookup(agg *a, agg_query *q) {
    if (!a->stats_cache.slots) return false; /* no memory for the cache after a reload: ask every time */
    q->stats_key = stats_key(q->request);
    if (!q->stats_key) return false;
    agg_stats_entry *e = agg_stats_cache_find(&a->stats_cache, q->stats_key);
    if (!e->key) {
        a->metrics.stats_cache_misses++;
        return false;
    }
    a->metrics.stats_cache_hits++;
    for (uint32_t i = 0; i < e->num_terms; i++) agg_term_stats_add(&q->stats, e->terms[i], e->dfs[i]);
    q->stats.num_docs = e->num_docs;
    q->stats.avg_doc_len = e->avg_doc_len;
    return true;
}

/* ------------------------------------------------------------------ asking the partitions */

void agg_stats_start(agg *a, agg_query *q, int64_t now) {
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
    for (uint32_t pi = 0; body && pi < a->num_partitions; pi++) {
        agg_partition *p = &a->partitions[pi];
        for (uint32_t exclude = 0;;) {
            int ri = agg_choose_replica(p, exclude);
            if (ri < 0) break;
            exclude |= 1u << ri;
            agg_replica *r = &p->replicas[ri];
            agg_connect_state connected = agg_replica_connect(a, r);
            if (connected == AGG_CONNECTING) continue;
            if (connected == AGG_CONNECT_FAILED) {
                agg_replica_failed(a, r, true, "cannot connect");
                continue;
            }
            isn_grpc_request rq = {.path = "/isn.v1.Search/Info", .body = body, .body_len = size, .frame = true,
                                   .timeout_ms = agg_remaining_ms(a, q, now), .traceparent = q->traceparent};
            char err[256];
            q->parts[pi].info = isn_grpc_start(r->client, &rq, err, sizeof err);
            if (q->parts[pi].info) {
                q->parts[pi].info_replica = (uint32_t)ri;
                r->inflight++; /* a replica that DNS drops meanwhile stays until this is answered */
                r->unsent = true;
                break;
            }
        }
    }
    free(body);
}

/* Adds one partition's Info answer; false when it brought no usable answer. */
static bool add_partition_info(agg *a, agg_query *q, uint32_t pi, const isn_grpc_result *res) {
    Isn__V1__InfoResponse *info = res->grpc_status == 0 && res->message
                                      ? isn__v1__info_response__unpack(NULL, res->message_len, res->message)
                                      : NULL;
    if (!info) return false;
    bool all = true;
    agg_partition *p = &a->partitions[pi];
    p->num_docs = info->num_docs;
    p->total_doc_len = info->total_doc_len;
    p->have_info = true;
    agg_replica_generation_seen(a, pi, q->parts[pi].info_replica, info->generation, "Info");
    for (size_t i = 0; i < info->n_terms; i++) {
        const char *term = info->terms[i]->index_term;
        if (!term || !term[0]) continue;
        bool repeat = false; /* a term repeated in the query counts once per partition */
        for (size_t j = 0; j < i && !repeat; j++)
            repeat = info->terms[j]->index_term && !strcmp(info->terms[j]->index_term, term);
        if (!repeat && agg_term_stats_add(&q->stats, term, info->terms[i]->df) != 0) all = false;
    }
    isn__v1__info_response__free_unpacked(info, NULL);
    return all;
}

void agg_stats_info_free(agg *a, agg_part *part, uint32_t pi) {
    if (!part->info) return;
    isn_grpc_client_call_free(part->info);
    part->info = NULL;
    agg_replica *r = pi < a->num_partitions && part->info_replica < a->partitions[pi].num_replicas
                         ? &a->partitions[pi].replicas[part->info_replica]
                         : NULL;
    if (r && r->inflight) r->inflight--;
}

bool agg_stats_done(agg *a, agg_query *q) {
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        if (q->parts[pi].info && !isn_grpc_client_call_done(q->parts[pi].info)) return false;
    bool all = true;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_part *part = &q->parts[pi];
        if (!part->info) {
            all = false;
            continue;
        }
        if (!add_partition_info(a, q, pi, isn_grpc_client_call_result(part->info))) all = false;
        agg_stats_info_free(a, part, pi);
    }
    /* A term no partition holds needs no statistics (and df 0 would be refused). */
    agg_term_stats *stats = &q->stats;
    for (uint32_t i = 0; i < stats->num_terms;) {
        if (stats->dfs[i]) {
            i++;
            continue;
        }
        free(stats->terms[i]);
        stats->terms[i] = stats->terms[stats->num_terms - 1];
        stats->dfs[i] = stats->dfs[--stats->num_terms];
    }
    agg_global_totals(a, stats);
    /* Cached only while every partition's replicas agree on their generation: during a rolling swap
     * the next query may be asked of the other generation (the statistics then follow each query's
     * own Info answers), and a stale entry could outlive the swap. */
    for (uint32_t pi = 0; all && pi < a->num_partitions; pi++) all = agg_partition_settled(a, pi);
    if (all && q->stats_key) agg_stats_cache_put(&a->stats_cache, q->stats_key, stats);
    return true;
}
