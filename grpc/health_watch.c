/* grpc.health.v1.Health/Watch on the server core: each Watch is a server stream that gets the
 * service's status at once and then every change, until the client leaves or the server drains
 * (NOT_SERVING, then the end of the stream). A service the server does not know gets
 * SERVICE_UNKNOWN and stays watched, as the health protocol says. */
#include <stdlib.h>
#include <string.h>

#include "grpc/server_internal.h"
#include "proto/health.pb-c.h"

#define WATCH_SERVICE_MAX 200

typedef struct watcher watcher;
struct watcher {
    watcher *prev, *next;
    isn_grpc_health_watchers *owner;
    isn_grpc_call *call;
    bool have_request;
    int last_sent; /* -1 = nothing sent yet */
    char service[WATCH_SERVICE_MAX];
};

struct isn_grpc_health_watchers {
    isn_grpc_health_status_fn status_of;
    void *app;
    watcher *list;
    uint32_t count;
    bool shut_down;
};

isn_grpc_health_watchers *isn_grpc_health_watchers_new(isn_grpc_health_status_fn status_of, void *app) {
    isn_grpc_health_watchers *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->status_of = status_of;
    w->app = app;
    return w;
}

static void send_status(watcher *w, int status) {
    Grpc__Health__V1__HealthCheckResponse response = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    response.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    w->last_sent = status;
    isn_grpc_call_stream_send(w->call, &response.base);
}

static void update(watcher *w) {
    if (!w->have_request) return;
    int status = w->owner->shut_down ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                                     : w->owner->status_of(w->service, w->owner->app);
    if (status != w->last_sent) send_status(w, status);
}

static void on_message(isn_grpc_call *call, const uint8_t *message, size_t len, void *user) {
    watcher *w = user;
    if (w->have_request) {
        isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "Health/Watch takes one request message");
        return;
    }
    Grpc__Health__V1__HealthCheckRequest *request = grpc__health__v1__health_check_request__unpack(NULL, len, message);
    if (!request) {
        isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_INVALID_ARGUMENT,
                                "request is not a valid grpc.health.v1.HealthCheckRequest message");
        return;
    }
    const char *service = request->service ? request->service : "";
    bool too_long = strlen(service) >= sizeof w->service;
    if (!too_long) memcpy(w->service, service, strlen(service) + 1);
    grpc__health__v1__health_check_request__free_unpacked(request, NULL);
    if (too_long) {
        isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "service name too long");
        return;
    }
    w->have_request = true;
    update(w);
    if (w->owner->shut_down) isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_OK, "");
}

static void on_half_close(isn_grpc_call *call, void *user) {
    watcher *w = user;
    if (!w->have_request) isn_grpc_call_stream_finish(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "Health/Watch without a request");
}

static void on_close(isn_grpc_call *call, void *user) {
    (void)call;
    watcher *w = user;
    isn_grpc_health_watchers *owner = w->owner;
    if (w->prev) w->prev->next = w->next;
    else owner->list = w->next;
    if (w->next) w->next->prev = w->prev;
    owner->count--;
    free(w);
}

static const isn_grpc_stream_handlers WATCH_HANDLERS = {on_message, on_half_close, on_close};

bool isn_grpc_health_watch(isn_grpc_health_watchers *watchers, isn_grpc_call *call) {
    watcher *w = calloc(1, sizeof *w);
    if (!w || isn_grpc_call_stream(call, &WATCH_HANDLERS, w) != 0) {
        free(w);
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for a Health/Watch stream");
        return false;
    }
    w->owner = watchers;
    w->call = call;
    w->last_sent = -1;
    w->next = watchers->list;
    if (watchers->list) watchers->list->prev = w;
    watchers->list = w;
    watchers->count++;
    return true;
}

void isn_grpc_health_changed(isn_grpc_health_watchers *watchers) {
    if (!watchers) return;
    for (watcher *w = watchers->list; w; w = w->next) update(w);
}

void isn_grpc_health_shutdown(isn_grpc_health_watchers *watchers) {
    if (!watchers || watchers->shut_down) return;
    watchers->shut_down = true;
    /* finishing may not free a watcher at once (its trailers go out first), but be safe either way */
    for (watcher *w = watchers->list, *next; w; w = next) {
        next = w->next;
        if (!w->have_request) continue;
        update(w);
        isn_grpc_call_stream_finish(w->call, ISN_GRPC_STATUS_OK, "");
    }
}

uint32_t isn_grpc_health_num_watchers(const isn_grpc_health_watchers *watchers) { return watchers ? watchers->count : 0; }

void isn_grpc_health_watchers_free(isn_grpc_health_watchers *watchers) {
    if (!watchers) return;
    /* normally empty: every stream closed with its server; unlink what is left without touching calls */
    while (watchers->list) {
        watcher *w = watchers->list;
        watchers->list = w->next;
        free(w);
    }
    free(watchers);
}
