#include "daemon/metrics.h"

static const char *const METHOD_LABELS[RPC_COUNT] = {
    "isn.v1.Search/Search", "isn.v1.Search/Info", "grpc.health.v1.Health/Check",
    "grpc.health.v1.Health/Watch", "grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "unknown",
};

static const char *const STAGE_LABELS[STAGE_COUNT] = {"queue", "retrieval", "total"};

const char *rpc_method_label(rpc_method method) {
    return (unsigned)method < RPC_COUNT ? METHOD_LABELS[method] : "unknown";
}

const char *search_stage_label(search_stage stage) {
    return (unsigned)stage < STAGE_COUNT ? STAGE_LABELS[stage] : "?";
}

void metrics_count_request(metrics *m, rpc_method method, int status, double seconds) {
    if ((unsigned)method >= RPC_COUNT) method = RPC_UNKNOWN;
    if (status < 0 || status >= GRPC_STATUS_COUNT) status = GRPC_STATUS_UNKNOWN;
    m->requests[method][status]++;
    histogram_observe(&m->request_seconds[method], seconds);
}
