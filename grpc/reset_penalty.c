/* The rapid-reset penalty box (server_internal.h, isn_grpc_reset_penalties): addresses whose connections
 * were cut lately, in a small open-addressed table; an expired entry is free. */
#include <string.h>
#include <xxhash.h>

#include "grpc/server_internal.h"

uint64_t isn_grpc_peer_key(const struct sockaddr_storage *addr) {
    uint64_t key;
    if (addr->ss_family == AF_INET)
        key = XXH3_64bits(&((const struct sockaddr_in *)addr)->sin_addr, sizeof(struct in_addr));
    else if (addr->ss_family == AF_INET6)
        key = XXH3_64bits(&((const struct sockaddr_in6 *)addr)->sin6_addr, sizeof(struct in6_addr));
    else
        return 0;
    return key ? key : 1;
}

#define PROBES 4

void isn_grpc_reset_penalty_note(isn_grpc_reset_penalties *p, uint64_t key, uint64_t now_ns) {
    if (!key) return;
    uint32_t home = (uint32_t)(key % ISN_GRPC_RESET_PENALTY_SLOTS), slot = home;
    uint64_t soonest = UINT64_MAX;
    for (uint32_t i = 0; i < PROBES; i++) {
        uint32_t s = (home + i) % ISN_GRPC_RESET_PENALTY_SLOTS;
        uint64_t until = atomic_load_explicit(&p->until_ns[s], memory_order_relaxed);
        if (atomic_load_explicit(&p->key[s], memory_order_relaxed) == key || until <= now_ns) {
            slot = s;
            break;
        }
        if (until < soonest) soonest = until, slot = s; /* full: the entry that expires first makes room */
    }
    atomic_store_explicit(&p->key[slot], key, memory_order_relaxed);
    atomic_store_explicit(&p->until_ns[slot], now_ns + ISN_GRPC_RESET_PENALTY_NS, memory_order_relaxed);
}

bool isn_grpc_reset_penalized(isn_grpc_reset_penalties *p, uint64_t key, uint64_t now_ns) {
    if (!key) return false;
    uint32_t home = (uint32_t)(key % ISN_GRPC_RESET_PENALTY_SLOTS);
    for (uint32_t i = 0; i < PROBES; i++) {
        uint32_t s = (home + i) % ISN_GRPC_RESET_PENALTY_SLOTS;
        if (atomic_load_explicit(&p->key[s], memory_order_relaxed) == key)
            return atomic_load_explicit(&p->until_ns[s], memory_order_relaxed) > now_ns;
    }
    return false;
}
