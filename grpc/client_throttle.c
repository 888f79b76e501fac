/* Client-side adaptive throttling (grpc/client.h): requests, accepts and refusals over a sliding window
 * of ISN_GRPC_THROTTLE_BUCKETS buckets, each reused once the window has passed it. */
#include <stdio.h>
#include <string.h>

#include "grpc/client.h"

int isn_grpc_throttle_init(isn_grpc_throttle *throttle, double accepts_multiplier, uint64_t window_ns, char *err,
                           size_t err_len) {
    if (!(accepts_multiplier == 0 || accepts_multiplier >= 1) || window_ns < ISN_GRPC_THROTTLE_BUCKETS) {
        snprintf(err, err_len, "client throttle: accepts multiplier %g (wants 0 for off, or at least 1) and window %llu ns "
                 "(wants at least %d)", accepts_multiplier, (unsigned long long)window_ns, ISN_GRPC_THROTTLE_BUCKETS);
        return -1;
    }
    memset(throttle, 0, sizeof *throttle);
    throttle->accepts_multiplier = accepts_multiplier;
    throttle->bucket_ns = window_ns / ISN_GRPC_THROTTLE_BUCKETS;
    return 0;
}

/* The bucket of now_ns, emptied first when it last held an older slot of time. */
static uint32_t bucket_of(isn_grpc_throttle *throttle, uint64_t now_ns) {
    uint64_t epoch = now_ns / throttle->bucket_ns;
    uint32_t i = (uint32_t)(epoch % ISN_GRPC_THROTTLE_BUCKETS);
    if (throttle->bucket_epoch[i] != epoch) {
        throttle->bucket_epoch[i] = epoch;
        throttle->requests[i] = throttle->accepts[i] = throttle->refusals[i] = 0;
    }
    return i;
}

double isn_grpc_throttle_refusal_probability(isn_grpc_throttle *throttle, uint64_t now_ns) {
    if (throttle->accepts_multiplier == 0) return 0;
    uint64_t epoch = now_ns / throttle->bucket_ns;
    double requests = 0, accepts = 0;
    for (uint32_t i = 0; i < ISN_GRPC_THROTTLE_BUCKETS; i++) {
        /* a slot the window has left behind counts for nothing, emptied or not; so does one in which the
         * server refused nothing */
        uint64_t held = throttle->bucket_epoch[i];
        if (held + ISN_GRPC_THROTTLE_BUCKETS <= epoch || held > epoch || throttle->refusals[i] == 0) continue;
        requests += (double)throttle->requests[i];
        accepts += (double)throttle->accepts[i];
    }
    double p = (requests - throttle->accepts_multiplier * accepts) / (requests + 1);
    return p > 0 ? p : 0;
}

bool isn_grpc_throttle_allow(isn_grpc_throttle *throttle, uint64_t now_ns, double uniform01) {
    if (throttle->accepts_multiplier == 0) return true;
    double p = isn_grpc_throttle_refusal_probability(throttle, now_ns);
    throttle->requests[bucket_of(throttle, now_ns)]++;
    if (uniform01 >= p) return true;
    throttle->refused_here++;
    return false;
}

bool isn_grpc_throttle_answered(isn_grpc_throttle *throttle, uint64_t now_ns, int grpc_status) {
    if (throttle->accepts_multiplier == 0) return false;
    uint32_t i = bucket_of(throttle, now_ns);
    if (grpc_status < 0 || grpc_status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED || grpc_status == ISN_GRPC_STATUS_UNAVAILABLE)
        throttle->refusals[i]++;
    else
        throttle->accepts[i]++;
    return true;
}
