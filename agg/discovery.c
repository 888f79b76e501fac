/* Replica discovery by DNS ("partition = dns:NAME:PORT"): NAME's A and AAAA records (the ready pods
 * of a Kubernetes headless Service) are the partition's replicas, resolved again every
 * dns_interval_ms. c-ares runs on the aggregator's loop (its sockets are uv_poll handles, its
 * timeouts a uv timer), so a slow or dead DNS server never blocks a query. An address that appears
 * joins the partition at once; one that disappears drains: it gets no new call, the calls in flight
 * on it are answered, then its connection closes. A failed lookup (timeout, SERVFAIL) keeps the
 * replicas there are; a name that does not exist, or has no address, leaves the partition none.
 * A name with more addresses than a partition has replica slots: all of them are read, and the
 * same AGG_MAX_REPLICAS are chosen whatever order the server gives (rendezvous hashing, seeded by
 * this host's name, so that a fleet of aggregators spreads over all of them). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ares.h>

#include "agg/agg_internal.h"

#define DNS_TIMEOUT_MS 1000 /* per try; c-ares tries each server DNS_TRIES times */
#define DNS_TRIES 2

typedef struct dns_socket dns_socket;
struct dns_socket {
    uv_poll_t poll;
    ares_socket_t fd;
    struct agg_discovery *owner;
    dns_socket *next;
};

struct agg_discovery {
    agg *aggregator;
    ares_channel channel;
    bool have_channel;
    char servers[AGG_ADDR_MAX];    /* the dns_servers the channel was made with */
    uint32_t interval_ms;
    uv_timer_t resolve_timer;      /* every dns_interval_ms */
    uv_timer_t ares_timer;         /* c-ares' own timeouts and retries */
    bool handles_open;
    dns_socket *sockets;
    bool resolving[AGG_MAX_PARTITIONS];
};

/* What a lookup answers to: the partition index, and the target it was asked for (a reload may have
 * changed it meanwhile; the answer is then dropped). */
typedef struct {
    struct agg_discovery *discovery;
    uint32_t partition;
    char name[AGG_ADDR_MAX];
    uint16_t port;
} lookup;

static bool is_dns_partition(const agg_partition *p) { return p->dns_name[0] != '\0'; }

/* ------------------------------------------------------------------ replica sets */

static int find_replica(const agg_partition *p, const char *address) {
    for (uint32_t i = 0; i < p->num_replicas; i++)
        if (p->replicas[i].address[0] && !strcmp(p->replicas[i].address, address)) return (int)i;
    return -1;
}

static void free_slot(agg *a, agg_partition *p, agg_replica *r) {
    if (r->probe) isn_grpc_client_call_free(r->probe);
    if (r->client) isn_grpc_close(r->client);
    if (r->draining && a->num_draining) a->num_draining--;
    memset(r, 0, sizeof *r);
    r->probe_at_ns = INT64_MAX; /* a free slot is never probed */
    while (p->num_replicas && !p->replicas[p->num_replicas - 1].address[0]) p->num_replicas--;
}

static void start_draining(agg *a, uint32_t pi, agg_replica *r) {
    agg_partition *p = &a->partitions[pi];
    r->draining = true;
    r->up = false;
    r->probe_at_ns = INT64_MAX;
    if (r->probe) isn_grpc_client_call_free(r->probe);
    r->probe = NULL;
    a->num_draining++;
    p->replicas_removed++;
    if (r->inflight) {
        log_info("replica %s of partition %u removed (DNS): draining %u calls in flight", r->address, pi, r->inflight);
    } else {
        log_info("replica %s of partition %u removed (DNS)", r->address, pi);
        free_slot(a, p, r);
    }
}

/* Rendezvous hashing: the address's score for this aggregator (its seed). */
static uint64_t rendezvous_score(uint64_t seed, const char *address) {
    uint64_t z = isn_hash_string(address) ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint32_t agg_discovery_choose(uint64_t seed, char (*addresses)[AGG_ADDR_MAX], uint32_t count, uint32_t cap) {
    if (count <= cap) return count;
    /* the cap highest scores, moved to the front (a partial selection: cap is small) */
    for (uint32_t i = 0; i < cap; i++) {
        uint32_t best = i;
        uint64_t best_score = rendezvous_score(seed, addresses[i]);
        for (uint32_t j = i + 1; j < count; j++) {
            uint64_t score = rendezvous_score(seed, addresses[j]);
            if (score > best_score || (score == best_score && strcmp(addresses[j], addresses[best]) < 0))
                best = j, best_score = score;
        }
        if (best != i) {
            char swap[AGG_ADDR_MAX];
            memcpy(swap, addresses[i], AGG_ADDR_MAX);
            memcpy(addresses[i], addresses[best], AGG_ADDR_MAX);
            memcpy(addresses[best], swap, AGG_ADDR_MAX);
        }
    }
    return cap;
}

void agg_discovery_apply(agg *a, uint32_t pi, char (*addresses)[AGG_ADDR_MAX], uint32_t count) {
    agg_partition *p = &a->partitions[pi];
    uint32_t added = 0, removed = 0;
    p->dns_addresses = count; /* all that came, this isn-agg's own address included */
    /* this isn-agg's own address is never a replica: every query would come back to it */
    char own[AGG_ADDR_MAX] = "";
    for (uint32_t j = 0; j < count;)
        if (agg_address_is_own(a, addresses[j])) {
            memcpy(own, addresses[j], sizeof own);
            memmove(addresses[j], addresses[j + 1], (size_t)(count - j - 1) * sizeof addresses[0]);
            count--;
        } else
            j++;
    if (strcmp(own, p->own_address)) {
        if (own[0])
            log_error("partition %u: DNS name %s names %s, this isn-agg's own listening address (a request loop): skipped",
                      pi, p->dns_name, own);
        memcpy(p->own_address, own, sizeof own);
    }
    /* More addresses than replica slots: the same AGG_MAX_REPLICAS of them whatever order the
     * answer had, and whatever it held beyond them (rendezvous hashing: an address that goes away
     * is replaced by one, and the others stay); another aggregator's seed picks others. */
    uint32_t used = agg_discovery_choose(a->discovery_seed, addresses, count, AGG_MAX_REPLICAS);
    if ((count > used) != (p->dns_beyond_cap > 0))
        log_info("partition %u: DNS name %s has %u addresses; %u of them are replicas (the cap, AGG_MAX_REPLICAS, per "
                 "partition; isn_agg_dns_addresses_beyond_cap counts the rest), chosen by rendezvous hashing",
                 pi, p->dns_name, count, used);
    p->dns_beyond_cap = count - used;
    count = used;
    for (uint32_t i = 0; i < p->num_replicas; i++) {
        agg_replica *r = &p->replicas[i];
        if (!r->address[0] || r->draining) continue;
        bool named = false;
        for (uint32_t j = 0; j < count && !named; j++) named = !strcmp(addresses[j], r->address);
        if (!named) {
            start_draining(a, pi, r);
            removed++;
        }
    }
    for (uint32_t j = 0; j < count; j++) {
        int found = find_replica(p, addresses[j]);
        if (found >= 0) {
            agg_replica *r = &p->replicas[found];
            if (r->draining) { /* named again before its calls finished: back in rotation */
                r->draining = false;
                r->up = true;
                r->probe_at_ns = 0;
                a->num_draining--;
                p->replicas_added++;
                added++;
                log_info("replica %s of partition %u is named again (DNS)", r->address, pi);
            }
            continue;
        }
        uint32_t slot = 0;
        while (slot < p->num_replicas && p->replicas[slot].address[0]) slot++;
        if (slot == AGG_MAX_REPLICAS) {
            log_warn("partition %u: DNS names more than %d replicas (with those draining); %s waits for a free slot", pi,
                     AGG_MAX_REPLICAS, addresses[j]);
            continue;
        }
        /* a new replica starts as fast as the fastest one there: the default guess would keep it
         * idle while the others answer quicker than that (a scaled-out tier would take no load) */
        double fastest = 0;
        for (uint32_t i = 0; i < p->num_replicas; i++)
            if (p->replicas[i].address[0] && !p->replicas[i].draining && (!fastest || p->replicas[i].ewma_us < fastest))
                fastest = p->replicas[i].ewma_us;
        if (slot == p->num_replicas) p->num_replicas++;
        agg_replica_init(&p->replicas[slot], addresses[j], pi, slot);
        if (fastest > 0) p->replicas[slot].ewma_us = fastest;
        p->replicas_added++;
        added++;
        log_info("replica %s of partition %u added (DNS)", addresses[j], pi);
    }
    if (added || removed) {
        p->dns_last_change = isn_wall_seconds();
        agg_readiness_changed(a);
        agg_kick(a);
    }
}

void agg_discovery_reap(agg *a) {
    if (!a->num_draining) return;
    for (uint32_t pi = 0; pi < a->num_partitions; pi++) {
        agg_partition *p = &a->partitions[pi];
        for (uint32_t i = 0; i < p->num_replicas; i++) {
            agg_replica *r = &p->replicas[i];
            if (!r->draining || r->inflight) continue;
            log_info("replica %s of partition %u drained: closed", r->address, pi);
            free_slot(a, p, r);
        }
    }
}

/* ------------------------------------------------------------------ c-ares on the loop */

static void on_ares_timer(uv_timer_t *timer);

static void arm_ares_timer(struct agg_discovery *d) {
    if (!d->handles_open) return;
    struct timeval tv, *next = ares_timeout(d->channel, NULL, &tv);
    if (!next) {
        uv_timer_stop(&d->ares_timer);
        return;
    }
    uint64_t ms = (uint64_t)next->tv_sec * 1000 + (uint64_t)(next->tv_usec + 999) / 1000;
    uv_timer_start(&d->ares_timer, on_ares_timer, ms, 0);
}

static void on_ares_timer(uv_timer_t *timer) {
    struct agg_discovery *d = timer->data;
    ares_process_fd(d->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    arm_ares_timer(d);
}

static void on_socket_ready(uv_poll_t *poll, int status, int events) {
    dns_socket *s = poll->data;
    struct agg_discovery *d = s->owner;
    ares_socket_t fd = s->fd;
    /* an error on the socket: c-ares finds out itself when it reads */
    bool readable = status < 0 || (events & UV_READABLE), writable = status < 0 || (events & UV_WRITABLE);
    ares_process_fd(d->channel, readable ? fd : ARES_SOCKET_BAD, writable ? fd : ARES_SOCKET_BAD);
    arm_ares_timer(d);
}

static void free_socket(uv_handle_t *handle) { free(handle->data); }

/* c-ares opens, watches and closes its sockets through this. */
static void on_socket_state(void *data, ares_socket_t fd, int readable, int writable) {
    struct agg_discovery *d = data;
    dns_socket **link = &d->sockets;
    while (*link && (*link)->fd != fd) link = &(*link)->next;
    dns_socket *s = *link;
    if (!readable && !writable) {
        if (!s) return;
        *link = s->next;
        uv_poll_stop(&s->poll);
        uv_close((uv_handle_t *)&s->poll, free_socket);
        return;
    }
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) {
            log_warn("DNS: out of memory for a socket");
            return;
        }
        if (uv_poll_init_socket(d->aggregator->loop, &s->poll, fd) != 0) {
            free(s);
            log_warn("DNS: cannot watch a socket");
            return;
        }
        s->fd = fd;
        s->owner = d;
        s->poll.data = s;
        s->next = d->sockets;
        d->sockets = s;
    }
    uv_poll_start(&s->poll, (readable ? UV_READABLE : 0) | (writable ? UV_WRITABLE : 0), on_socket_ready);
}

static int make_channel(struct agg_discovery *d, const char *servers, char *err, size_t err_len) {
    struct ares_options options;
    memset(&options, 0, sizeof options);
    options.sock_state_cb = on_socket_state;
    options.sock_state_cb_data = d;
    options.timeout = DNS_TIMEOUT_MS;
    options.tries = DNS_TRIES;
    int rc = ares_init_options(&d->channel, &options, ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
    if (rc != ARES_SUCCESS) return isn_error(err, err_len, "DNS resolver: %s", ares_strerror(rc));
    if (servers[0] && (rc = ares_set_servers_ports_csv(d->channel, servers)) != ARES_SUCCESS) {
        ares_destroy(d->channel);
        return isn_error(err, err_len, "dns_servers \"%s\": %s", servers, ares_strerror(rc));
    }
    d->have_channel = true;
    snprintf(d->servers, sizeof d->servers, "%s", servers);
    return 0;
}

/* ------------------------------------------------------------------ lookups */

static int compare_addresses(const void *x, const void *y) { return strcmp(x, y); }

static void on_resolved(void *arg, int status, int timeouts, struct ares_addrinfo *result) {
    (void)timeouts;
    lookup *l = arg;
    struct agg_discovery *d = l->discovery;
    agg *a = d->aggregator;
    d->resolving[l->partition] = false;
    agg_partition *p = l->partition < a->num_partitions ? &a->partitions[l->partition] : NULL;
    bool current = p && status != ARES_EDESTRUCTION && !strcmp(p->dns_name, l->name) && p->dns_port == l->port;
    if (current) {
        p->dns_resolutions++;
        if (status == ARES_SUCCESS || status == ARES_ENOTFOUND || status == ARES_ENODATA) {
            if (p->dns_failing) log_info("partition %u: %s resolves again", l->partition, l->name);
            p->dns_failing = false;
            uint32_t count = 0, room = 0;
            for (struct ares_addrinfo_node *n = result ? result->nodes : NULL; n; n = n->ai_next) room++;
            char(*addresses)[AGG_ADDR_MAX] = calloc(room ? room : 1, sizeof *addresses);
            if (!addresses) {
                log_warn("partition %u: no memory for the %u addresses of %s; keeping its replicas", l->partition, room,
                         l->name);
                room = 0;
            }
            for (struct ares_addrinfo_node *n = result ? result->nodes : NULL; n && count < room; n = n->ai_next) {
                char ip[INET6_ADDRSTRLEN];
                const void *raw = n->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)n->ai_addr)->sin_addr
                                                          : (const void *)&((struct sockaddr_in6 *)n->ai_addr)->sin6_addr;
                if ((n->ai_family != AF_INET && n->ai_family != AF_INET6) || !inet_ntop(n->ai_family, raw, ip, sizeof ip))
                    continue;
                snprintf(addresses[count++], AGG_ADDR_MAX, n->ai_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, l->port);
            }
            /* one of each, in one order whatever order the server gave */
            qsort(addresses, count, sizeof addresses[0], compare_addresses);
            uint32_t unique = 0;
            for (uint32_t i = 0; i < count; i++)
                if (!unique || strcmp(addresses[unique - 1], addresses[i])) memmove(addresses[unique++], addresses[i], AGG_ADDR_MAX);
            count = unique;
            if (!count && (p->dns_addresses || p->num_replicas))
                log_warn("partition %u: %s has no address now (%s)", l->partition, l->name, ares_strerror(status));
            if (addresses) agg_discovery_apply(a, l->partition, addresses, count);
            free(addresses);
        } else {
            p->dns_failures++;
            if (!p->dns_failing)
                log_warn("partition %u: cannot resolve %s (%s); keeping its %u replicas until it resolves again",
                         l->partition, l->name, ares_strerror(status), p->dns_addresses);
            p->dns_failing = true;
        }
    }
    if (result) ares_freeaddrinfo(result);
    free(l);
}

static void resolve(struct agg_discovery *d, uint32_t pi) {
    agg_partition *p = &d->aggregator->partitions[pi];
    if (!is_dns_partition(p) || d->resolving[pi]) return;
    lookup *l = calloc(1, sizeof *l);
    if (!l) return;
    l->discovery = d;
    l->partition = pi;
    memcpy(l->name, p->dns_name, sizeof l->name);
    l->port = p->dns_port;
    d->resolving[pi] = true;
    struct ares_addrinfo_hints hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = ARES_AI_NOSORT; /* sorted by address above; no connect() probes */
    ares_getaddrinfo(d->channel, l->name, NULL, &hints, on_resolved, l);
}

static void resolve_all(struct agg_discovery *d) {
    for (uint32_t pi = 0; pi < d->aggregator->num_partitions; pi++) resolve(d, pi);
    arm_ares_timer(d);
}

static void on_resolve_timer(uv_timer_t *timer) { resolve_all(timer->data); }

/* ------------------------------------------------------------------ life */

static bool any_dns_partition(const agg *a) {
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        if (is_dns_partition(&a->partitions[pi])) return true;
    return false;
}

int agg_discovery_start(agg *a, char *err, size_t err_len) {
    if (a->discovery || !any_dns_partition(a)) return 0;
    static bool library_ready;
    if (!library_ready && ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS)
        return isn_error(err, err_len, "cannot initialise c-ares");
    library_ready = true;
    struct agg_discovery *d = calloc(1, sizeof *d);
    if (!d) return isn_error(err, err_len, "out of memory");
    d->aggregator = a;
    if (make_channel(d, a->config.dns_servers, err, err_len) != 0) {
        free(d);
        return -1;
    }
    a->discovery = d;
    uv_timer_init(a->loop, &d->resolve_timer);
    uv_timer_init(a->loop, &d->ares_timer);
    d->resolve_timer.data = d->ares_timer.data = d;
    d->handles_open = true;
    d->interval_ms = a->config.dns_interval_ms;
    uv_timer_start(&d->resolve_timer, on_resolve_timer, 0, d->interval_ms);
    log_info("DNS discovery: every %u ms, servers %s", d->interval_ms,
             a->config.dns_servers[0] ? a->config.dns_servers : "of /etc/resolv.conf");
    return 0;
}

void agg_discovery_reloaded(agg *a) {
    struct agg_discovery *d = a->discovery;
    if (!d) {
        char err[256];
        if (a->handles_started && agg_discovery_start(a, err, sizeof err) != 0) log_warn("reload: %s", err);
        return;
    }
    if (!d->handles_open) return;
    if (strcmp(d->servers, a->config.dns_servers)) {
        /* lookups in flight end with ARES_EDESTRUCTION (dropped); the new channel asks again at once */
        ares_channel old = d->channel;
        char err[256];
        if (make_channel(d, a->config.dns_servers, err, sizeof err) != 0) {
            log_warn("reload: %s; keeping the DNS servers %s", err, d->servers[0] ? d->servers : "of /etc/resolv.conf");
            d->channel = old;
        } else
            ares_destroy(old);
    }
    d->interval_ms = a->config.dns_interval_ms;
    uv_timer_start(&d->resolve_timer, on_resolve_timer, 0, d->interval_ms);
}

void agg_discovery_stop(agg *a) {
    struct agg_discovery *d = a->discovery;
    if (!d || !d->handles_open) return;
    d->handles_open = false;
    uv_close((uv_handle_t *)&d->resolve_timer, NULL);
    uv_close((uv_handle_t *)&d->ares_timer, NULL);
    /* ends every lookup (ARES_EDESTRUCTION) and closes its sockets through on_socket_state */
    ares_destroy(d->channel);
    d->have_channel = false;
}

void agg_discovery_free(agg *a) {
    if (!a->discovery) return;
    if (a->discovery->have_channel) ares_destroy(a->discovery->channel);
    free(a->discovery);
    a->discovery = NULL;
}
