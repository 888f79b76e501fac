/* isnd's pages on the stats endpoint (grpc/'s HTTP/1.1 server): /metrics, /stats, /healthz and
 * /readyz. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "daemon/server.h"

static int text(byte_buffer *body, int code, const char *message) {
    buffer_append(body, message, strlen(message));
    return code;
}

int stats_page(void *app, const char *path, byte_buffer *body, const char **content_type) {
    const isn_server *server = app;
    if (!strcmp(path, "/metrics")) {
        metrics_render_prometheus(server, body);
        *content_type = "text/plain; version=0.0.4; charset=utf-8";
        return 200;
    }
    if (!strcmp(path, "/stats")) {
        metrics_render_json(server, body);
        *content_type = "application/json";
        return 200;
    }
    if (!strcmp(path, "/healthz")) return text(body, 200, "ok\n");
    if (!strcmp(path, "/readyz")) {
        char reason[300];
        if (server_ready(server) && server->pool &&
            worker_pool_gpu_state(server->pool, reason, sizeof reason) == WORKER_POOL_GPU_DEGRADED) {
            buffer_printf(body, "ready (degraded: GPU unhealthy, serving on the CPU: %s)\n", reason);
            return 200;
        }
        if (server_ready(server)) return text(body, 200, "ready\n");
        return text(body, 503, server->state == SERVER_STARTING ? "starting: index loading\n" : "draining\n");
    }
    return text(body, 404, "not found; try /metrics, /stats, /healthz or /readyz\n");
}
