/* Request loops: a replica address that leads back to this isn-agg (its own listening address in the
 * configuration or in DNS, or another aggregator that sends to it) would turn one query into as
 * many nested calls as its deadline allows. Two guards:
 *  - every Search isn-agg sends carries the isn-via header: the ids of the aggregators it went
 *    through, this one's appended. A Search whose isn-via already holds this isn-agg's id, or
 *    AGG_MAX_HOPS ids, is refused (FAILED_PRECONDITION, "request loop: ..."); the aggregator that
 *    sent it takes that replica out for good (until a reload) and answers its own caller with the
 *    loop's words, so the client sees it on its first query;
 *  - a replica whose address is isn-agg's own listening address is refused: in the configuration at
 *    start and on reload, and skipped (and said) when DNS names it. */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agg/agg_internal.h"

void agg_loops_init(agg *a) {
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
        id = isn_now_ns() ^ ((uint64_t)getpid() << 32); /* still unique among the aggregators of one host */
    snprintf(a->id, sizeof a->id, "%016llx", (unsigned long long)id);
}

bool agg_is_loop_message(const char *message) {
    return message && !strncmp(message, AGG_LOOP_PREFIX, strlen(AGG_LOOP_PREFIX));
}

bool agg_via_forward(const agg *a, const char *via, char *forward, size_t forward_len, char *why, size_t why_len) {
    if (!via) {
        snprintf(why, why_len, AGG_LOOP_PREFIX "the isn-via header is longer than %d bytes: more aggregators on the "
                 "request's path than a loop-free tier has", ISN_GRPC_VIA_MAX);
        return false;
    }
    uint32_t hops = 0;
    bool seen = false;
    for (const char *p = via; *p;) {
        size_t n = strcspn(p, ",");
        hops += n > 0;
        seen |= n == strlen(a->id) && !memcmp(p, a->id, n);
        p += n + (p[n] == ',');
    }
    if (seen) {
        snprintf(why, why_len,
                 AGG_LOOP_PREFIX "isn-agg %s (id %s) is already on the request's path (isn-via: %.120s): a replica "
                 "address of it, or of an aggregator it sends to, leads back to it",
                 a->grpc_address, a->id, via);
        return false;
    }
    if (hops >= AGG_MAX_HOPS) {
        snprintf(why, why_len, AGG_LOOP_PREFIX "the request went through %u aggregators already (isn-via: %.120s), the "
                 "most a tier has is %d", hops, via, AGG_MAX_HOPS);
        return false;
    }
    snprintf(forward, forward_len, "%s%s%s", via, via[0] ? "," : "", a->id);
    return true;
}

/* ------------------------------------------------------------------ own addresses */

typedef struct {
    struct sockaddr_storage addr;
    socklen_t len;
} ip_address;

/* HOST (a literal, or a name resolved now) into its first address; false when it resolves to none. */
static bool resolve_host(const char *host, ip_address *out) {
    struct addrinfo hints, *found = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &found) != 0 || !found) return false;
    memcpy(&out->addr, found->ai_addr, found->ai_addrlen);
    out->len = found->ai_addrlen;
    freeaddrinfo(found);
    return true;
}

static bool is_wildcard(const ip_address *ip) {
    if (ip->addr.ss_family == AF_INET) return ((const struct sockaddr_in *)&ip->addr)->sin_addr.s_addr == htonl(INADDR_ANY);
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)&ip->addr)->sin6_addr;
    return IN6_IS_ADDR_UNSPECIFIED(a6);
}

static bool same_ip(const ip_address *x, const ip_address *y) {
    if (x->addr.ss_family != y->addr.ss_family) return false;
    if (x->addr.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&x->addr)->sin_addr.s_addr == ((const struct sockaddr_in *)&y->addr)->sin_addr.s_addr;
    return !memcmp(&((const struct sockaddr_in6 *)&x->addr)->sin6_addr, &((const struct sockaddr_in6 *)&y->addr)->sin6_addr,
                   sizeof(struct in6_addr));
}

/* An address of this host: a socket can be bound to it. */
static bool is_local(const ip_address *ip) {
    int fd = socket(ip->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    struct sockaddr_storage any = ip->addr;
    if (any.ss_family == AF_INET) ((struct sockaddr_in *)&any)->sin_port = 0;
    else ((struct sockaddr_in6 *)&any)->sin6_port = 0;
    bool local = bind(fd, (struct sockaddr *)&any, ip->len) == 0;
    close(fd);
    return local;
}

bool agg_address_is_own(const agg *a, const char *address) {
    char own_host[AGG_ADDR_MAX], host[AGG_ADDR_MAX], why[160];
    uint16_t own_port, port;
    if (!a->grpc_address[0] ||
        isn_parse_host_port(a->grpc_address, own_host, sizeof own_host, &own_port, why, sizeof why) != 0 ||
        isn_parse_host_port(address, host, sizeof host, &port, why, sizeof why) != 0 || port != own_port)
        return false;
    ip_address own, other;
    if (!resolve_host(own_host, &own) || !resolve_host(host, &other)) return false;
    if (is_wildcard(&own)) return is_local(&other); /* listening on every address of the host */
    return same_ip(&own, &other);
}

int agg_check_own_replicas(const agg *a, const agg_config *config, char *err, size_t err_len) {
    for (uint32_t pi = 0; pi < config->num_partitions; pi++)
        for (uint32_t i = 0; i < config->partitions[pi].num_replicas; i++)
            if (agg_address_is_own(a, config->partitions[pi].replicas[i]))
                return isn_error(err, err_len,
                                 "partition %u: replica %s is this isn-agg's own listening address %s (a request loop)",
                                 pi, config->partitions[pi].replicas[i], a->grpc_address);
    return 0;
}
