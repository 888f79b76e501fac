/* Replica sets and their health: which replica gets a partition's request (recent latency times
 * load), taking out a replica that keeps failing, and health checks that bring it back. */
#include <string.h>

#include "agg/agg_internal.h"
#include "proto/health.pb-c.h"

void agg_replica_init(agg_replica *r, const char *address, uint32_t partition, uint32_t index) {
    static uint64_t serials; /* the loop's thread only */
    memset(r, 0, sizeof *r);
    r->serial = ++serials;
    /* memcpy, not snprintf: both live in `a`, which gcc's -Wrestrict reads as an overlap */
    size_t address_len = strnlen(address, sizeof r->address - 1);
    memcpy(r->address, address, address_len);
    r->address[address_len] = 0;
    r->partition = partition;
    r->index = index;
    r->up = true; /* until it fails or its first health check says otherwise (checked at once) */
    r->ewma_us = 1000;
    r->inflight_limit = AGG_INITIAL_INFLIGHT_LIMIT;
}

void agg_partitions_init(agg *a) {
    a->num_partitions = a->config.num_partitions;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_partition *p = &a->partitions[pi];
        p->num_replicas = a->config.partitions[pi].num_replicas;
        p->extra_tokens = a->config.extra_requests_burst;
        p->max_inflight = a->config.max_inflight_per_replica;
        for (uint32_t i = 0; i < p->num_replicas; i++)
            agg_replica_init(&p->replicas[i], a->config.partitions[pi].replicas[i], pi, i);
        memcpy(p->dns_name, a->config.partitions[pi].dns_name, sizeof p->dns_name);
        p->dns_port = a->config.partitions[pi].dns_port;
    }
}

static void replica_close(agg_replica *r) {
    if (r->probe) isn_grpc_client_call_free(r->probe);
    r->probe = NULL;
    if (r->client) isn_grpc_close(r->client);
    r->client = NULL;
}

void agg_partitions_reload(agg *a) {
    static agg_partition old[AGG_MAX_PARTITIONS]; /* the loop's thread only */
    uint32_t old_count = a->num_partitions;
    memcpy(old, a->partitions, sizeof old);
    memset(a->partitions, 0, sizeof a->partitions);
    a->num_partitions = a->config.num_partitions;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_partition *p = &a->partitions[pi];
        const agg_partition_config *c = &a->config.partitions[pi];
        if (pi < old_count) {
            /* the same partition: its size and recent latency stay */
            *p = old[pi];
            memset(p->replicas, 0, sizeof p->replicas);
        } else
            p->extra_tokens = a->config.extra_requests_burst;
        p->max_inflight = a->config.max_inflight_per_replica;
        /* the replicas wanted: the configured list, or for the same dns: name what DNS named last (a
         * new name starts empty and is resolved at once) */
        static char wanted[AGG_MAX_REPLICAS][AGG_ADDR_MAX];
        uint32_t num_wanted = 0;
        bool same_dns = c->dns_name[0] && pi < old_count && !strcmp(old[pi].dns_name, c->dns_name) &&
                        old[pi].dns_port == c->dns_port;
        if (!c->dns_name[0])
            for (uint32_t i = 0; i < c->num_replicas; i++) memcpy(wanted[num_wanted++], c->replicas[i], AGG_ADDR_MAX);
        else if (same_dns)
            for (uint32_t j = 0; j < old[pi].num_replicas; j++)
                if (old[pi].replicas[j].address[0] && !old[pi].replicas[j].draining)
                    memcpy(wanted[num_wanted++], old[pi].replicas[j].address, AGG_ADDR_MAX);
        if (!same_dns) p->dns_addresses = 0;
        memcpy(p->dns_name, c->dns_name, sizeof p->dns_name);
        p->dns_port = c->dns_port;
        p->num_replicas = num_wanted;
        for (uint32_t i = 0; i < num_wanted; i++) {
            agg_replica *r = &p->replicas[i];
            agg_replica *kept = NULL;
            for (uint32_t j = 0; pi < old_count && j < old[pi].num_replicas && !kept; j++)
                if (old[pi].replicas[j].address[0] && !old[pi].replicas[j].draining &&
                    !strcmp(old[pi].replicas[j].address, wanted[i]))
                    kept = &old[pi].replicas[j];
            if (kept) {
                *r = *kept;
                r->index = i;
                if (r->leads_back) { /* the configuration may have changed where it leads: asked again */
                    r->leads_back = false;
                    r->probe_at_ns = 0;
                }
                kept->address[0] = '\0'; /* taken */
            } else {
                agg_replica_init(r, wanted[i], pi, i);
                log_info("replica %s of partition %u added", r->address, pi);
            }
        }
    }
    for (uint32_t pi = 0; pi < old_count; pi++)
        for (uint32_t j = 0; j < old[pi].num_replicas; j++)
            if (old[pi].replicas[j].address[0]) {
                if (!old[pi].replicas[j].draining) log_info("replica %s of partition %u removed", old[pi].replicas[j].address, pi);
                replica_close(&old[pi].replicas[j]);
            }
    a->num_draining = 0; /* no call is in flight during a reload: those draining are closed above */
}

/* Input on a replica connection: its finished calls are collected on this loop turn. */
static void on_replica_activity(isn_grpc_client *client, void *user) {
    (void)client;
    agg_kick(user);
}

/* A connection made (or not) for r: watched by the loop and r's, or the reason kept. */
static bool take_connection(agg *a, agg_replica *r, isn_grpc_client *client, const char *err) {
    char watch_err[256];
    /* A TLS refusal is a configuration problem worth a line; said again only when it changes. */
    if (!client && a->replica_tls && strcmp(err, r->connect_error)) log_warn("replica %s: %s", r->address, err);
    snprintf(r->connect_error, sizeof r->connect_error, "%s", client ? "" : err);
    if (client && a->loop && isn_grpc_client_watch(a->loop, client, on_replica_activity, a, watch_err, sizeof watch_err) != 0) {
        log_warn("replica %s of partition %u: %s", r->address, r->partition, watch_err);
        isn_grpc_close(client);
        client = NULL;
    }
    r->client = client;
    return client != NULL;
}

bool agg_replica_connect_now(agg *a, agg_replica *r) {
    if (r->client && isn_grpc_usable(r->client)) return true;
    if (r->client && r->inflight) return false; /* draining: its calls finish first */
    if (r->client) isn_grpc_close(r->client);
    r->client = NULL;
    char err[256];
    isn_grpc_client *client = isn_grpc_connect_tls(r->address, 200, a->replica_tls, a->config.tls_server_name, err, sizeof err);
    return take_connection(a, r, client, err);
}

agg_connect_state agg_replica_connect(agg *a, agg_replica *r) {
    if (r->client && isn_grpc_usable(r->client)) return AGG_CONNECTED;
    if (r->connecting) return AGG_CONNECTING;
    if (r->client && r->inflight) return AGG_CONNECT_FAILED; /* draining: its calls finish first */
    if (!a->connector) return agg_replica_connect_now(a, r) ? AGG_CONNECTED : AGG_CONNECT_FAILED;
    if (r->client) isn_grpc_close(r->client);
    r->client = NULL;
    return agg_connector_ask(a, r) ? AGG_CONNECTING : AGG_CONNECT_FAILED;
}

void agg_replica_connected(agg *a, agg_replica *r, isn_grpc_client *client, const char *err) {
    r->connecting = false;
    if (take_connection(a, r, client, err)) {
        agg_kick(a); /* what waited for it can go now */
        return;
    }
    agg_replica_failed(a, r, true, "cannot connect");
}

void agg_replica_eject(agg *a, agg_replica *r, const char *why) {
    if (!r->up) return;
    r->up = false;
    r->ejections++;
    r->probe_at_ns = agg_now_ns() + (int64_t)a->config.probe_interval_ms * 1000000LL;
    log_warn("replica %s of partition %u taken out: %s", r->address, r->partition, why);
}

void agg_replica_leads_back(agg *a, agg_replica *r, const char *words) {
    if (r->leads_back) return;
    r->leads_back = true;
    r->failures++;
    a->metrics.upstream_failures++;
    if (r->up) r->ejections++;
    r->up = false;
    r->probe_at_ns = INT64_MAX; /* a health check would say SERVING: it is not the way back in */
    log_error("replica %s of partition %u leads back to an aggregator already on the request's path: taken out until "
              "a reload (%s)", r->address, r->partition, words);
}

void agg_replica_failed(agg *a, agg_replica *r, bool connection_lost, const char *why) {
    r->failures++;
    a->metrics.upstream_failures++;
    r->consecutive_failures++;
    if (connection_lost || (r->client && !isn_grpc_usable(r->client)) ||
        r->consecutive_failures >= a->config.failures_to_eject)
        agg_replica_eject(a, r, why);
}

/* The replica's in-flight limit now (at least 1, at most the partition's cap). */
static uint32_t inflight_limit(const agg_replica *r, const agg_partition *p) {
    uint32_t limit = r->inflight_limit >= 1 ? (uint32_t)r->inflight_limit : 1;
    return limit < p->max_inflight ? limit : p->max_inflight;
}

/* Lowest recent latency times (1 + calls in flight), among replicas that are up. When every
 * replica of the partition is out, one that is out for errors but still connected is used anyway
 * (asking it beats dropping the partition); one that cannot be reached is not. */
int agg_choose_replica(const agg_partition *p, uint32_t exclude) {
    int best = -1;
    double best_score = 0;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (uint32_t i = 0; i < p->num_replicas; i++) {
            const agg_replica *r = &p->replicas[i];
            if (((exclude >> i) & 1) || r->draining || r->leads_back || r->inflight >= inflight_limit(r, p)) continue;
            if (pass == 0 ? !r->up : !(r->client && isn_grpc_usable(r->client))) continue;
            double score = r->ewma_us * (1.0 + r->inflight) * (1.0 + r->consecutive_failures);
            if (best < 0 || score < best_score) best = (int)i, best_score = score;
        }
    return best;
}

bool agg_partition_has_room(const agg_partition *p) {
    bool any_in_rotation = false;
    for (uint32_t i = 0; i < p->num_replicas; i++) {
        const agg_replica *r = &p->replicas[i];
        if (!r->address[0] || r->draining || r->leads_back || !r->up) continue;
        any_in_rotation = true;
        if (r->inflight < inflight_limit(r, p)) return true;
    }
    return !any_in_rotation;
}

void agg_replica_answered(agg_replica *r, const agg_partition *p, uint64_t us, uint32_t timeout_ms, bool in_time) {
    if (in_time && us * 2 <= (uint64_t)timeout_ms * 1000) r->inflight_limit += 1.0 / (r->inflight_limit >= 1 ? r->inflight_limit : 1);
    else r->inflight_limit *= 0.9;
    if (r->inflight_limit < 1) r->inflight_limit = 1;
    if (r->inflight_limit > p->max_inflight) r->inflight_limit = p->max_inflight;
}

int agg_choose_extra_replica(const agg_partition *p, uint32_t exclude, int64_t now) {
    for (uint32_t i = 0; i < p->num_replicas; i++)
        if (p->replicas[i].shed_until_ns > now) exclude |= 1u << i;
    return agg_choose_replica(p, exclude);
}

void agg_record_latency(agg_partition *p, agg_replica *r, uint32_t us) {
    r->ewma_us = r->ewma_us * 0.9 + 0.1 * us;
    p->latency_us[p->next_sample] = us;
    p->next_sample = (p->next_sample + 1) % AGG_LATENCY_WINDOW;
    if (p->num_samples < AGG_LATENCY_WINDOW) p->num_samples++;
    if (++p->since_p95 >= AGG_P95_EVERY) {
        uint32_t sorted[AGG_LATENCY_WINDOW], n = p->num_samples;
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

/* The partition's recent p95 once it has enough samples, never below hedge_min_us. */
int64_t agg_hedge_delay_ns(const agg *a, const agg_partition *p) {
    int64_t delay_ns = p->num_samples >= AGG_MIN_SAMPLES_FOR_P95 ? (int64_t)p->p95_us * 1000
                                                                 : (int64_t)a->config.hedge_initial_ms * 1000000;
    if (delay_ns < (int64_t)a->config.hedge_min_us * 1000) delay_ns = (int64_t)a->config.hedge_min_us * 1000;
    return delay_ns;
}

static bool probe_says_serving(const isn_grpc_result *res) {
    if (res->grpc_status != 0 || !res->message) return false;
    Grpc__Health__V1__HealthCheckResponse *h =
        grpc__health__v1__health_check_response__unpack(NULL, res->message_len, res->message);
    bool serving = h && h->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    if (h) grpc__health__v1__health_check_response__free_unpacked(h, NULL);
    return serving;
}

/* Health checks, every probe interval: bring replicas that were taken out back in, and take out
 * one in rotation that says NOT_SERVING or does not answer, so that readiness tells the truth even
 * while no query comes. A probe whose stream the replica refused unprocessed says neither. */
void agg_probe_replicas(agg *a, int64_t now) {
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_partition *p = &a->partitions[pi];
        for (uint32_t i = 0; i < p->num_replicas; i++) {
            agg_replica *r = &p->replicas[i];
            if (r->leads_back) continue;
            if (r->up && r->client && !isn_grpc_usable(r->client)) {
                agg_replica_eject(a, r, "connection lost or closed by the replica");
                continue;
            }
            if (r->probe) {
                if (!isn_grpc_client_call_done(r->probe)) continue;
                const isn_grpc_result *res = isn_grpc_client_call_result(r->probe);
                bool serving = probe_says_serving(res);
                if (isn_grpc_result_refused_unprocessed(res)) {
                    /* a busy replica refused the probe's stream (its requests in flight at their limit): no
                     * verdict either way; the next interval asks again */
                } else if (serving && !r->up) {
                    r->up = true;
                    r->consecutive_failures = 0;
                    log_info("replica %s of partition %u is back", r->address, r->partition);
                } else if (!serving && r->up)
                    agg_replica_eject(a, r, res->grpc_status == 0 ? "health check: not serving" : "health check failed");
                isn_grpc_client_call_free(r->probe);
                r->probe = NULL;
                continue;
            }
            if (now < r->probe_at_ns) continue;
            r->probe_at_ns = now + (int64_t)a->config.probe_interval_ms * 1000000LL;
            agg_connect_state connected = agg_replica_connect(a, r);
            if (connected == AGG_CONNECTING) continue; /* the outcome counts when it comes */
            if (connected == AGG_CONNECT_FAILED) {
                if (r->up) agg_replica_eject(a, r, "cannot connect");
                continue;
            }
            isn_grpc_request rq = {.path = "/grpc.health.v1.Health/Check", .body = (const uint8_t *)"", .body_len = 0,
                                   .frame = true, .timeout_ms = a->config.probe_interval_ms};
            char err[256];
            r->probe = isn_grpc_start(r->client, &rq, err, sizeof err);
            if (r->probe) r->unsent = true;
        }
    }
}

void agg_replicas_close(agg *a) {
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++) replica_close(&a->partitions[pi].replicas[i]);
}
