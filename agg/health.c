/* grpc.health.v1.Health for isn-agg: Check answers from agg_ready (service.c); Watch streams follow. */
#include "agg/agg_internal.h"

void agg_health_notify(agg *a) { (void)a; }

void agg_health_free(agg *a) { (void)a; }
