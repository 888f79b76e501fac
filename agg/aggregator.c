/* The aggregator's life: replica state from the configuration, partition sizes at start, drain. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agg/agg_internal.h"

agg *agg_new(uv_loop_t *loop, const agg_config *config, char *err, size_t err_len) {
    agg *a = calloc(1, sizeof *a);
    if (!a) {
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    a->loop = loop;
    a->config = *config;
    a->budget.limit = (uint64_t)config->memory_budget_mib << 20;
    a->start_time = isn_wall_seconds();
    agg_loops_init(a);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    a->discovery_seed = isn_hash_string(host);
    agg_partitions_init(a);
    if (config->tls_ca[0]) {
        isn_grpc_tls_config replicas = {.ca_file = config->tls_ca, .cert_file = config->tls_cert, .key_file = config->tls_key};
        if (!(a->replica_tls = isn_grpc_tls_client_new(&replicas, err, err_len))) {
            free(a);
            return NULL;
        }
    }
    if (agg_stats_cache_init(&a->stats_cache) != 0) {
        isn_grpc_tls_free(a->replica_tls);
        free(a);
        isn_error(err, err_len, "out of memory");
        return NULL;
    }
    return a;
}

/* The loop's handles of the aggregator must be closed (agg_drain, then uv_run returned). */
void agg_free(agg *a) {
    if (!a) return;
    agg_queries_fail_all(a, ISN_GRPC_STATUS_UNAVAILABLE, "aggregator stopping");
    agg_replicas_close(a);
    if (a->server) isn_grpc_server_free(a->server);
    if (a->stats) isn_grpc_stats_server_free(a->stats);
    agg_stats_cache_free(&a->stats_cache);
    agg_health_free(a);
    agg_discovery_free(a);
    isn_grpc_tls_free(a->grpc_tls); /* after the connections that held their contexts */
    isn_grpc_tls_free(a->stats_tls);
    isn_grpc_tls_free(a->replica_tls);
    free(a->pending);
    free(a);
}

const agg_config *agg_get_config(const agg *a) { return &a->config; }

void agg_tls_reload(agg *a) {
    char err[400];
    isn_grpc_tls *sets[3] = {a->grpc_tls, a->stats_tls, a->replica_tls};
    static const char *const names[3] = {"gRPC port", "stats port", "replica connections"};
    for (int i = 0; i < 3; i++) {
        if (!sets[i]) continue;
        if (isn_grpc_tls_reload(sets[i], err, sizeof err) == 0)
            log_info("SIGHUP: TLS credentials of the %s reloaded (new connections use them)", names[i]);
        else
            log_warn("SIGHUP: TLS credentials of the %s not reloaded: %s; the ones in use stay", names[i], err);
    }
}

uint32_t agg_inflight(const agg *a) { return a->num_queries; }

void agg_fetch_partition_info(agg *a) {
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_partition *p = &a->partitions[pi];
        for (uint32_t i = 0; i < p->num_replicas && !p->have_info; i++) {
            agg_replica *r = &p->replicas[i];
            if (!agg_replica_connect_now(a, r)) { /* at start, before the loop serves */
                agg_replica_eject(a, r, "cannot connect at start");
                continue;
            }
            isn_grpc_info_reply info;
            char err[256];
            if (isn_grpc_info(r->client, NULL, 0, false, AGG_START_INFO_TIMEOUT_MS, &info, err, sizeof err) == 0 &&
                info.status == 0) {
                p->num_docs = info.num_docs;
                p->total_doc_len = info.total_doc_len;
                p->have_info = true;
                agg_replica_generation_seen(a, pi, i, info.generation, "Info");
                log_info("partition %u: %llu documents (from %s)", pi, (unsigned long long)info.num_docs, r->address);
            } else {
                agg_replica_eject(a, r, "no answer to Info at start");
                /* a peer that did not answer in time may never: the probes connect again */
                isn_grpc_close(r->client);
                r->client = NULL;
            }
            isn_grpc_info_reply_free(&info);
        }
        if (!p->have_info) log_warn("partition %u: no replica answered Info yet", pi);
        /* the other replicas too, so that the first queries find them connected (later connections
         * are made off the loop, and a query skips a replica while its connection is being made) */
        for (uint32_t i = 0; i < p->num_replicas; i++)
            if (!p->replicas[i].client && p->replicas[i].up && !agg_replica_connect_now(a, &p->replicas[i]))
                agg_replica_eject(a, &p->replicas[i], "cannot connect at start");
    }
    agg_readiness_changed(a);
}

/* ------------------------------------------------------------------ readiness */

bool agg_ready(const agg *a, char *why, size_t why_len) {
    if (why && why_len) why[0] = '\0';
    if (a->draining) {
        if (why) snprintf(why, why_len, "draining");
        return false;
    }
    uint32_t covered = 0;
    size_t n = 0;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        const agg_partition *p = &a->partitions[pi];
        bool any = false;
        for (uint32_t i = 0; i < p->num_replicas && !any; i++) any = p->replicas[i].up;
        if (any) covered++;
        else if (why && n < why_len)
            n += (size_t)snprintf(why + n, why_len - n, "%s%u%s%s%s", n ? "," : "no healthy replica in partition ", pi,
                                  p->own_address[0] ? " (DNS names only this isn-agg's own address " : "", p->own_address,
                                  p->own_address[0] ? ": a request loop)" : "");
    }
    /* the share asked for, rounded up: 1.0 of 3 partitions is 3, 0.5 of 3 is 2 */
    uint32_t needed = (uint32_t)ceil(a->config.ready_coverage * a->num_partitions - 1e-9);
    if (needed < 1) needed = 1;
    bool ready = covered >= needed;
    if (why && n < why_len)
        snprintf(why + n, why_len - n, "%scoverage %u/%u, %u needed", n ? "; " : "", covered, a->num_partitions, needed);
    return ready;
}

void agg_readiness_changed(agg *a) {
    char why[512];
    bool ready = agg_ready(a, why, sizeof why);
    if (ready == a->was_ready) return;
    a->was_ready = ready;
    if (ready) log_info("readiness: serving (%s)", why);
    else log_warn("readiness: not serving (%s)", why);
    agg_health_notify(a);
}

/* ------------------------------------------------------------------ reload */

int agg_reload(agg *a, const agg_config *config, char *err, size_t err_len) {
    if (agg_config_validate(config, err, err_len) != 0 || agg_check_own_replicas(a, config, err, err_len) != 0) return -1;
    if (strcmp(config->listen, a->config.listen) || strcmp(config->stats_listen, a->config.stats_listen))
        log_warn("reload: listen addresses change only with a restart (keeping %s and %s)", a->config.listen,
                 a->config.stats_listen[0] ? a->config.stats_listen : "no stats endpoint");
    if (!a->pending) {
        if (!(a->pending = malloc(sizeof *a->pending))) return isn_error(err, err_len, "out of memory");
        a->pending_since_ns = agg_now_ns();
    }
    *a->pending = *config;
    /* keep what cannot change without a restart */
    memcpy(a->pending->listen, a->config.listen, sizeof a->config.listen);
    memcpy(a->pending->stats_listen, a->config.stats_listen, sizeof a->config.stats_listen);
    agg_config *next = a->pending;
    if (strcmp(next->tls_cert, a->config.tls_cert) || strcmp(next->tls_key, a->config.tls_key) ||
        strcmp(next->tls_client_ca, a->config.tls_client_ca) || strcmp(next->tls_ca, a->config.tls_ca) ||
        strcmp(next->tls_allowed_peers, a->config.tls_allowed_peers) ||
        strcmp(next->tls_server_name, a->config.tls_server_name) ||
        next->tls_watch_interval_ms != a->config.tls_watch_interval_ms)
        log_warn("reload: TLS settings change only with a restart (the files' contents reload; keeping the paths)");
    memcpy(next->tls_cert, a->config.tls_cert, sizeof next->tls_cert);
    memcpy(next->tls_key, a->config.tls_key, sizeof next->tls_key);
    memcpy(next->tls_client_ca, a->config.tls_client_ca, sizeof next->tls_client_ca);
    memcpy(next->tls_ca, a->config.tls_ca, sizeof next->tls_ca);
    memcpy(next->tls_allowed_peers, a->config.tls_allowed_peers, sizeof next->tls_allowed_peers);
    memcpy(next->tls_server_name, a->config.tls_server_name, sizeof next->tls_server_name);
    next->tls_watch_interval_ms = a->config.tls_watch_interval_ms;
    agg_kick(a);
    if (!a->handles_started) agg_reload_step(a, agg_now_ns());
    return 0;
}

void agg_reload_step(agg *a, int64_t now) {
    if (!a->pending) return;
    bool waited_enough = now - a->pending_since_ns >= AGG_RELOAD_MAX_WAIT_NS;
    for (agg_query *q = a->queries, *following; q; q = following) {
        following = q->next;
        if (q->parked) continue;
        if (!waited_enough) return; /* a query in progress still uses the old replica sets */
        agg_query_answer_now(a, q, now); /* with what it has */
    }
    uint32_t old_partitions = a->num_partitions;
    a->config = *a->pending;
    __atomic_store_n(&a->budget.limit, (uint64_t)a->config.memory_budget_mib << 20, __ATOMIC_RELAXED);
    free(a->pending);
    a->pending = NULL;
    agg_partitions_reload(a);
    agg_discovery_reloaded(a);
    a->metrics.reloads++;
    if (a->num_partitions != old_partitions) {
        /* summed document frequencies of another partitioning */
        agg_stats_cache_free(&a->stats_cache);
        if (agg_stats_cache_init(&a->stats_cache) != 0) log_warn("reload: no memory for the statistics cache");
    }
    uint32_t replicas = 0;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) replicas += a->partitions[pi].num_replicas;
    log_info("reloaded: %u partitions, %u replicas, hedging %s, global statistics %s", a->num_partitions, replicas,
             a->config.hedge ? "on" : "off", a->config.global_stats ? "on" : "off");
    /* the waiting queries start on the new partitions */
    for (agg_query *q = a->queries, *following; q; q = following) {
        following = q->next;
        if (q->parked) agg_query_start_parked(a, q, now);
    }
    agg_readiness_changed(a);
    agg_kick(a);
}
