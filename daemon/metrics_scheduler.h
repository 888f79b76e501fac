/* The scheduler's and the GPU's metrics, for metrics_render.c. */
#ifndef ISN_DAEMON_METRICS_SCHEDULER_H
#define ISN_DAEMON_METRICS_SCHEDULER_H

#include <stdbool.h>

#include "base/base.h"
#include "daemon/search_service.h"

/* Prometheus text, or a JSON object's members ("scheduler":{...},"gpu":{...}). */
void metrics_render_scheduler(search_service *service, byte_buffer *out, bool json);

#endif
