/* What isnd shows on the stats endpoint (grpc/'s HTTP/1.1 server, which dispatches the paths):
 * Prometheus and JSON renderings of its metrics, and readiness. */
#include "base/base.h"
#include "daemon/gpu_setup.h"
#include "daemon/server.h"

static void render_metrics(void *app, byte_buffer *body) { metrics_render_prometheus(app, body); }
static void render_json(void *app, byte_buffer *body) { metrics_render_json(app, body); }

static int readiness(void *app, byte_buffer *body) {
    const isn_server *server = app;
    char reason[300];
    int gpu = server_ready(server) && server->pool ? search_service_gpu_state(server->pool, reason, sizeof reason)
                                                   : SEARCH_SERVICE_NO_GPU;
    if (gpu == SEARCH_SERVICE_GPU_LOADING) {
        buffer_printf(body, "ready (GPU loading: %s; the CPU workers serve meanwhile)\n", reason);
        return 200;
    }
    if (gpu == SEARCH_SERVICE_GPU_DEGRADED) {
        buffer_printf(body, "ready (degraded: GPU unhealthy, serving on the CPU: %s)\n", reason);
        return 200;
    }
    if (server_ready(server) && server->conf.gpu_enable && server->pool && !search_service_has_gpu(server->pool)) {
        buffer_printf(body, "ready (degraded: gpu.enable = true but no GPU can be used, serving on the CPU: %s)\n",
                      gpu_setup_unusable()[0] ? gpu_setup_unusable() : "see the log");
        return 200;
    }
    if (server_ready(server)) {
        buffer_printf(body, "ready\n");
        return 200;
    }
    buffer_printf(body, "%s", server->state == SERVER_STARTING ? "starting: index loading\n" : "draining\n");
    return 503;
}

const isn_grpc_stats_pages stats_pages = {render_metrics, render_json, readiness};
