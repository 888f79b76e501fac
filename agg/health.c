/* grpc.health.v1.Health for isn-agg: Check is answered from agg_ready (service.c); Watch streams
 * (grpc/'s registry of them) get every change of readiness: a partition losing its last healthy
 * replica, or getting one back, a reload, the drain. */
#include <string.h>

#include "agg/agg_internal.h"
#include "proto/health.pb-c.h"

static int health_status(const char *service, void *app) {
    const agg *a = app;
    if (!strcmp(service, AGG_HEALTH_LIVENESS))
        return a->draining ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                           : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    if (*service && strcmp(service, "isn.v1.Search")) return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
    return agg_ready(a, NULL, 0) ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                                 : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

bool agg_health_watch(agg *a, isn_grpc_call *call) {
    if (!a->watchers && !(a->watchers = isn_grpc_health_watchers_new(health_status, a))) {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for Health/Watch");
        return false;
    }
    return isn_grpc_health_watch(a->watchers, call);
}

void agg_health_notify(agg *a) {
    if (a->draining) isn_grpc_health_shutdown(a->watchers);
    else isn_grpc_health_changed(a->watchers);
}

void agg_health_free(agg *a) {
    isn_grpc_health_watchers_free(a->watchers);
    a->watchers = NULL;
}
