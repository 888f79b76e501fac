#include "daemon/metrics.h"

const double HISTOGRAM_BOUNDS[HISTOGRAM_BUCKETS] = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,     0.1,     0.25,   0.5,     1.0,    2.5,   5.0,    10.0,
};

static const char *const METHOD_LABELS[RPC_COUNT] = {
    "isn.v1.Search/Search", "isn.v1.Search/Info", "grpc.health.v1.Health/Check",
    "grpc.health.v1.Health/Watch", "unknown",
};

static const char *const STAGE_LABELS[STAGE_COUNT] = {"queue", "retrieval", "total"};

const char *rpc_method_label(rpc_method method) {
    return (unsigned)method < RPC_COUNT ? METHOD_LABELS[method] : "unknown";
}

const char *search_stage_label(search_stage stage) {
    return (unsigned)stage < STAGE_COUNT ? STAGE_LABELS[stage] : "?";
}

void histogram_observe(histogram *h, double seconds) {
    int lo = 0, hi = HISTOGRAM_BUCKETS; /* first bound >= seconds, or HISTOGRAM_BUCKETS for +Inf */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (HISTOGRAM_BOUNDS[mid] >= seconds) hi = mid;
        else lo = mid + 1;
    }
    h->buckets[lo]++;
    h->count++;
    h->sum += seconds;
}

void metrics_count_request(metrics *m, rpc_method method, int status, double seconds) {
    if ((unsigned)method >= RPC_COUNT) method = RPC_UNKNOWN;
    if (status < 0 || status >= GRPC_STATUS_COUNT) status = GRPC_STATUS_UNKNOWN;
    m->requests[method][status]++;
    histogram_observe(&m->request_seconds[method], seconds);
}
