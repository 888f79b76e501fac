/* grpc/'s server core and client on one libuv loop, in one process: a server with handlers that
 * echo, refuse, or hold a call and answer it later (as isnd's workers do); the client driven by
 * isn_grpc_client_watch. Checks replies, statuses, when the client saw each call done, per-call app
 * storage reuse, abandoned calls, that a drain ends with on_drained, and that a client keeping its finished
 * calls hands each over once, that a client asking for arrival times gets the kernel's, and how reads are
 * given to nghttp2 (their size, and refusals flushed inside one). */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/base.h"
#include "grpc/server.h"
#include "grpc/client.h"

typedef struct {
    uint8_t framed[64]; /* the reply, sent from here (zero copy) */
    uint32_t uses;      /* survives reuse of the pooled call */
    uv_timer_t *timer;
} echo_call;

typedef struct {
    uv_loop_t *loop;
    isn_grpc_server *server;
    uint32_t opened, requests, statuses[ISN_GRPC_STATUS_COUNT], abandoned, released, drained;
    uint32_t max_uses, ticks;
    isn_grpc_call *held;
    uv_timer_t later;
    uint64_t later_ms; /* when a held "Later" call is answered (as a worker would, later) */
    /* "Slow" calls: refused after this long at work each, and what the loop had done by then */
    uint64_t slow_ns;
    uint32_t slow_calls, flushed_inside_a_read;
    isn_grpc_loop_work last_slow;
} echo_app;

static void on_open(isn_grpc_call *call, void *app) {
    echo_app *a = app;
    echo_call *c = isn_grpc_call_app(call);
    c->uses++;
    if (c->uses > a->max_uses) a->max_uses = c->uses;
    a->opened++;
}

static void on_headers(isn_grpc_call *call, void *app) {
    (void)app;
    if (strncmp(isn_grpc_call_path(call), "/test.Echo/", 11))
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_UNIMPLEMENTED, "unknown method %s", isn_grpc_call_path(call));
}

static void answer_later(uv_timer_t *timer) {
    echo_app *a = timer->data;
    isn_grpc_call *call = a->held;
    a->held = NULL;
    if (!isn_grpc_call_unhold(call)) return; /* abandoned meanwhile: released by the core */
    echo_call *c = isn_grpc_call_app(call);
    isn_grpc_write_prefix(c->framed, 5);
    memcpy(c->framed + ISN_GRPC_PREFIX_BYTES, "later", 5);
    isn_grpc_call_reply_framed(call, c->framed, ISN_GRPC_PREFIX_BYTES + 5);
}

static void on_request(isn_grpc_call *call, void *app) {
    echo_app *a = app;
    a->requests++;
    size_t len;
    const uint8_t *message = isn_grpc_call_message(call, &len);
    const char *method = isn_grpc_call_path(call) + 11;
    if (!strcmp(method, "Echo")) {
        echo_call *c = isn_grpc_call_app(call);
        if (len > sizeof c->framed - ISN_GRPC_PREFIX_BYTES) {
            isn_grpc_call_fail(call, ISN_GRPC_STATUS_INVALID_ARGUMENT, "too long");
            return;
        }
        isn_grpc_write_prefix(c->framed, (uint32_t)len);
        memcpy(c->framed + ISN_GRPC_PREFIX_BYTES, message, len);
        isn_grpc_call_reply_framed(call, c->framed, ISN_GRPC_PREFIX_BYTES + len);
    } else if (!strcmp(method, "Slow")) {
        /* as a loop slower than its load would: each refusal made after a while at work */
        for (uint64_t began = isn_now_ns(); isn_now_ns() - began < a->slow_ns;) {
        }
        isn_grpc_loop_work work = isn_grpc_server_loop_work(a->server);
        if (a->slow_calls++ && work.reads == a->last_slow.reads && work.writes != a->last_slow.writes)
            a->flushed_inside_a_read++;
        a->last_slow = work;
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, "slow");
    } else if (!strcmp(method, "Later")) {
        isn_grpc_call_hold(call);
        a->held = call;
        uv_timer_start(&a->later, answer_later, a->later_ms, 0);
    } else {
        isn_grpc_call_fail(call, ISN_GRPC_STATUS_NOT_FOUND, "no such thing: %.*s", (int)len, (const char *)message);
    }
}

static void on_status(isn_grpc_call *call, int status, void *app) {
    (void)call;
    echo_app *a = app;
    a->statuses[status]++;
}

/* The worker holding an abandoned call finishes at once, so the test sees the release without
 * waiting for the Later timer. */
static void on_abandoned(isn_grpc_call *call, void *app) {
    (void)call;
    echo_app *a = app;
    a->abandoned++;
    if (a->held) {
        uv_timer_stop(&a->later);
        answer_later(&a->later);
    }
}

static size_t on_release(isn_grpc_call *call, bool freeing, void *app) {
    (void)call, (void)freeing;
    ((echo_app *)app)->released++;
    return 0;
}

static void on_drained(isn_grpc_server *server, void *app) {
    echo_app *a = app;
    a->drained++;
    isn_grpc_server_close(server);
    uv_close((uv_handle_t *)&a->later, NULL);
}

static const isn_grpc_server_handlers HANDLERS = {
    .on_open = on_open,
    .on_headers = on_headers,
    .on_request = on_request,
    .on_status = on_status,
    .on_abandoned = on_abandoned,
    .on_release = on_release,
    .on_drained = on_drained,
};

/* ------------------------------------------------------------------ the client side */

#define NUM_CALLS 6

typedef struct {
    echo_app *app;
    isn_grpc_client *client;
    isn_grpc_client_call *calls[NUM_CALLS];
    bool finished;
    uint32_t activity;
} client_side;

static isn_grpc_client_call *start(isn_grpc_client *client, const char *path, const char *body) {
    char err[256];
    isn_grpc_request request = {.path = path, .body = (const uint8_t *)body, .body_len = strlen(body), .frame = true};
    isn_grpc_client_call *call = isn_grpc_start(client, &request, err, sizeof err);
    if (!call) fail_msg("isn_grpc_start: %s", err);
    return call;
}

static void on_activity(isn_grpc_client *client, void *user) {
    (void)client;
    client_side *side = user;
    side->activity++;
    if (side->finished) return;
    for (int i = 0; i < NUM_CALLS; i++)
        if (!isn_grpc_client_call_done(side->calls[i])) return;
    side->finished = true;
    isn_grpc_server_drain(side->app->server);
    isn_grpc_close(side->client); /* also unwatches: lets the connection close, so the drain ends */
    side->client = NULL;
}

static void expect(isn_grpc_client_call *call, int status, const char *message, const char *isn_grpc_message_part) {
    const isn_grpc_result *r = isn_grpc_client_call_result(call);
    assert_int_equal(r->grpc_status, status);
    if (message) {
        assert_int_equal(r->message_len, strlen(message));
        assert_memory_equal(r->message, message, r->message_len);
    }
    if (isn_grpc_message_part) assert_non_null(strstr(r->grpc_message, isn_grpc_message_part));
}

/* The echo server on a fresh loop, listening on an ephemeral loopback port (written to `bound`); at most
 * max_requests requests in flight a connection (0: no limit). */
static void echo_server_start_limited(echo_app *app, uv_loop_t *loop, isn_grpc_connection_limit *limit,
                                      uint32_t max_requests, char *bound, size_t bound_len) {
    uv_loop_init(loop);
    *app = (echo_app){.loop = loop, .later_ms = 20};
    uv_timer_init(loop, &app->later);
    app->later.data = app;
    isn_grpc_server_config config = {.max_concurrent_streams = 100, .max_message_bytes = 1024, .header_timeout_ms = 5000,
                                 .idle_timeout_ms = 5000, .call_app_bytes = sizeof(echo_call), .limit = limit,
                                 .max_requests_per_connection = max_requests};
    app->server = isn_grpc_server_new(loop, &config, &HANDLERS, app);
    assert_non_null(app->server);
    char err[256];
    assert_int_equal(isn_grpc_server_listen(app->server, "127.0.0.1:0", bound, bound_len, err, sizeof err), 0);
}

static void echo_server_start(echo_app *app, uv_loop_t *loop, isn_grpc_connection_limit *limit, char *bound,
                              size_t bound_len) {
    echo_server_start_limited(app, loop, limit, 0, bound, bound_len);
}

/* After the loop ran out: the server and then its loop. */
static void echo_server_free(echo_app *app) {
    isn_grpc_server_free(app->server);
    uv_loop_close(app->loop);
}

/* A client of it, serviced by the test itself (service_once). */
static isn_grpc_client *connect_client(const char *bound) {
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(bound, 1000, err, sizeof err);
    if (!client) fail_msg("isn_grpc_connect %s: %s", bound, err);
    return client;
}

/* A client of it, watched from the same loop. */
static isn_grpc_client *connect_watched(uv_loop_t *loop, const char *bound, isn_grpc_activity_cb activity,
                                        void *user) {
    char err[256];
    isn_grpc_client *client = connect_client(bound);
    assert_int_equal(isn_grpc_client_watch(loop, client, activity, user, err, sizeof err), 0);
    return client;
}

/* An idle callback that is done: it runs no more, and its handle closes. */
static void idle_done(uv_idle_t *idle) {
    uv_idle_stop(idle);
    uv_close((uv_handle_t *)idle, NULL);
}

static void test_server_core_and_watched_client(void **state) {
    (void)state;
    uv_loop_t loop;
    echo_app app;
    isn_grpc_connection_limit limit = {.max = 10};
    char bound[80], err[256];
    echo_server_start(&app, &loop, &limit, bound, sizeof bound);

    client_side side = {.app = &app};
    side.client = connect_watched(&loop, bound, on_activity, &side);
    uint64_t started_ns = isn_now_ns();
    side.calls[0] = start(side.client, "/test.Echo/Echo", "hello");
    side.calls[1] = start(side.client, "/test.Echo/Echo", "");
    side.calls[2] = start(side.client, "/test.Echo/Later", "x");
    side.calls[3] = start(side.client, "/test.Echo/Missing", "thing");
    side.calls[4] = start(side.client, "/other.Service/Call", "x");
    side.calls[5] = start(side.client, "/test.Echo/Echo", "0123456789012345678901234567890123456789012345678901234567890");
    assert_int_equal(isn_grpc_poll(side.client, 0, err, sizeof err), 0); /* send them */
    uv_run(&loop, UV_RUN_DEFAULT);

    assert_true(side.finished);
    assert_true(side.activity > 0);
    /* each call done when its reply was read: "Later" answered 20 ms after the others, not all at once
     * when looked at */
    uint64_t looked_ns = isn_now_ns();
    for (int i = 0; i < NUM_CALLS; i++) {
        assert_true(isn_grpc_client_call_done_ns(side.calls[i]) >= started_ns);
        assert_true(isn_grpc_client_call_done_ns(side.calls[i]) <= looked_ns);
    }
    assert_true(isn_grpc_client_call_done_ns(side.calls[2]) >= started_ns + app.later_ms * 1000000);
    assert_true(isn_grpc_client_call_done_ns(side.calls[0]) < isn_grpc_client_call_done_ns(side.calls[2]));
    expect(side.calls[0], ISN_GRPC_STATUS_OK, "hello", NULL);
    expect(side.calls[1], ISN_GRPC_STATUS_OK, "", NULL);
    expect(side.calls[2], ISN_GRPC_STATUS_OK, "later", NULL);
    expect(side.calls[3], ISN_GRPC_STATUS_NOT_FOUND, NULL, "no such thing: thing");
    expect(side.calls[4], ISN_GRPC_STATUS_UNIMPLEMENTED, NULL, "unknown method /other.Service/Call");
    expect(side.calls[5], ISN_GRPC_STATUS_INVALID_ARGUMENT, NULL, "too long");
    for (int i = 0; i < NUM_CALLS; i++) isn_grpc_client_call_free(side.calls[i]);

    assert_int_equal(app.drained, 1);
    assert_int_equal(app.opened, NUM_CALLS);
    assert_int_equal(app.requests, NUM_CALLS - 1); /* the unknown method was refused at its headers */
    assert_int_equal(app.statuses[ISN_GRPC_STATUS_OK], 3);
    assert_int_equal(app.abandoned, 0);
    const isn_grpc_server_counters counters = isn_grpc_server_read_counters(app.server);
    assert_int_equal(counters.connections_accepted, 1);
    assert_int_equal(counters.connections, 0);
    assert_int_equal(counters.open_calls, 0);
    assert_int_equal(limit.open, 0);
    assert_true(counters.bytes_sent > 0 && counters.bytes_received > 0);
    echo_server_free(&app);
    assert_true(app.released >= NUM_CALLS); /* each call once, and the pooled ones again when freed */
}

/* A client serviced by its caller's own poll (isn_grpc_service, as the load generator's pool does): revents 0
 * sends what is queued and reads nothing; the replies are taken in only when the caller's poll saw input. */
typedef struct {
    client_side side;
    uint32_t services, serviced_with_input;
} serviced_side;

/* One look at the client's socket, without waiting, and what it found handed to the client: the
 * revents of the caller's own poll. */
static short service_once(isn_grpc_client *client) {
    char err[256];
    struct pollfd pfd = {.fd = isn_grpc_fd(client), .events = POLLIN};
    if (isn_grpc_wants_write(client)) pfd.events |= POLLOUT;
    short revents = poll(&pfd, 1, 0) > 0 ? pfd.revents : 0;
    assert_int_equal(isn_grpc_service(client, revents, err, sizeof err), 0);
    return revents;
}

static void service_from_idle(uv_idle_t *idle) {
    serviced_side *s = idle->data;
    short revents = service_once(s->side.client);
    s->services++;
    if (revents & POLLIN) s->serviced_with_input++;
    for (int i = 0; i < NUM_CALLS; i++)
        if (!isn_grpc_client_call_done(s->side.calls[i])) return;
    s->side.finished = true;
    isn_grpc_server_drain(s->side.app->server);
    isn_grpc_close(s->side.client);
    s->side.client = NULL;
    idle_done(idle);
}

static void test_client_serviced_by_its_callers_poll(void **state) {
    (void)state;
    uv_loop_t loop;
    echo_app app;
    char bound[80], err[256];
    echo_server_start(&app, &loop, NULL, bound, sizeof bound);
    app.later_ms = 1;
    serviced_side s = {.side = {.app = &app}};
    s.side.client = connect_client(bound);
    for (int i = 0; i < NUM_CALLS; i++) s.side.calls[i] = start(s.side.client, "/test.Echo/Echo", i % 2 ? "odd" : "even");
    /* nothing is read here: no call can be done before the server ran */
    assert_int_equal(isn_grpc_service(s.side.client, 0, err, sizeof err), 0);
    assert_false(isn_grpc_wants_write(s.side.client)); /* the socket took the few requests at once */
    for (int i = 0; i < NUM_CALLS; i++) assert_false(isn_grpc_client_call_done(s.side.calls[i]));
    uv_idle_t idle;
    uv_idle_init(&loop, &idle);
    idle.data = &s;
    uv_idle_start(&idle, service_from_idle);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(s.side.finished);
    assert_true(s.serviced_with_input >= 1);
    for (int i = 0; i < NUM_CALLS; i++) {
        expect(s.side.calls[i], ISN_GRPC_STATUS_OK, i % 2 ? "odd" : "even", NULL);
        isn_grpc_client_call_free(s.side.calls[i]);
    }
    echo_server_free(&app);
}

/* A held call whose client goes away: on_abandoned, and unhold says so (and releases it). */
typedef struct {
    echo_app *app;
    isn_grpc_client *client;
    isn_grpc_client_call *call;
} abandon_side;

static void close_client_when_held(uv_idle_t *idle) {
    abandon_side *side = idle->data;
    if (!side->app->held || !side->client) return;
    isn_grpc_client_call_free(side->call); /* RST_STREAM CANCEL */
    char err[128];
    isn_grpc_poll(side->client, 0, err, sizeof err);
    isn_grpc_close(side->client);
    side->client = NULL;
    idle_done(idle);
}

static void on_nothing(isn_grpc_client *client, void *user) { (void)client, (void)user; }

/* Stops once the abandoned call was let go of (or after 5 s, and the test fails). */
static void stop_when_released(uv_timer_t *timer) {
    echo_app *a = timer->data;
    bool done = a->abandoned == 1 && !a->held && isn_grpc_server_read_counters(a->server).open_calls == 0;
    if (!done && ++a->ticks < 250) return;
    isn_grpc_server_close(a->server);
    uv_close((uv_handle_t *)timer, NULL);
}

static void test_abandoned_call(void **state) {
    (void)state;
    uv_loop_t loop;
    echo_app app;
    char bound[80], err[256];
    echo_server_start(&app, &loop, NULL, bound, sizeof bound);
    app.later_ms = 60000; /* the client goes away long before the call would be answered */
    abandon_side side = {.app = &app};
    side.client = connect_watched(&loop, bound, on_nothing, NULL);
    side.call = start(side.client, "/test.Echo/Later", "x");
    isn_grpc_poll(side.client, 0, err, sizeof err);
    uv_idle_t idle;
    uv_idle_init(&loop, &idle);
    idle.data = &side;
    uv_idle_start(&idle, close_client_when_held);
    uv_timer_t stop;
    uv_timer_init(&loop, &stop);
    stop.data = &app;
    uv_timer_start(&stop, stop_when_released, 20, 20);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&app.later, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(app.abandoned, 1);
    assert_int_equal(isn_grpc_server_read_counters(app.server).open_calls, 0); /* unhold released it */
    echo_server_free(&app);
}

/* A client that keeps its finished calls (isn_grpc_track_finished, as the load generator's pool does): each
 * call is handed over once, when it finished, and no call twice; the "Later" one comes in a later take. */
typedef struct {
    client_side side;
    uint32_t seen[NUM_CALLS], taken_calls, takes_with_later;
} tracked_side;

static void take_from_idle(uv_idle_t *idle) {
    tracked_side *t = idle->data;
    service_once(t->side.client);
    for (isn_grpc_client_call *call = isn_grpc_take_finished(t->side.client, NULL); call;
         call = isn_grpc_client_call_next_finished(call)) {
        uintptr_t i = (uintptr_t)isn_grpc_client_call_user(call);
        assert_true(i < NUM_CALLS);
        assert_ptr_equal(call, t->side.calls[i]);
        assert_true(isn_grpc_client_call_done(call));
        t->seen[i]++;
        t->taken_calls++;
        if (i == 2) t->takes_with_later++;
    }
    if (t->taken_calls < NUM_CALLS) return;
    assert_null(isn_grpc_take_finished(t->side.client, NULL)); /* nothing twice */
    t->side.finished = true;
    idle_done(idle);
}

/* Services the client from the loop until `awaited` is done; takes nothing. */
typedef struct {
    isn_grpc_client *client;
    isn_grpc_client_call *awaited;
} awaiting_side;

static void service_until_done(uv_idle_t *idle) {
    awaiting_side *a = idle->data;
    service_once(a->client);
    if (!isn_grpc_client_call_done(a->awaited)) return;
    idle_done(idle);
}

static void test_finished_calls_handed_over_once(void **state) {
    (void)state;
    uv_loop_t loop;
    echo_app app;
    char bound[80];
    echo_server_start(&app, &loop, NULL, bound, sizeof bound);
    tracked_side t = {.side = {.app = &app}};
    t.side.client = connect_client(bound);
    isn_grpc_track_finished(t.side.client);
    const char *paths[NUM_CALLS] = {"/test.Echo/Echo", "/test.Echo/Echo", "/test.Echo/Later",
                                    "/test.Echo/Missing", "/other.Service/Call", "/test.Echo/Echo"};
    for (uintptr_t i = 0; i < NUM_CALLS; i++) {
        t.side.calls[i] = start(t.side.client, paths[i], "x");
        isn_grpc_client_call_set_user(t.side.calls[i], (void *)i);
    }
    assert_null(isn_grpc_take_finished(t.side.client, NULL)); /* none finished before the server ran */
    uv_idle_t idle;
    uv_idle_init(&loop, &idle);
    idle.data = &t;
    uv_idle_start(&idle, take_from_idle);
    while (!t.side.finished) uv_run(&loop, UV_RUN_ONCE); /* the idle keeps each turn from blocking */
    uv_run(&loop, UV_RUN_NOWAIT);                          /* the idle's close */
    for (int i = 0; i < NUM_CALLS; i++) assert_int_equal(t.seen[i], 1);
    assert_int_equal(t.takes_with_later, 1);
    expect(t.side.calls[2], ISN_GRPC_STATUS_OK, "later", NULL);
    expect(t.side.calls[3], ISN_GRPC_STATUS_NOT_FOUND, NULL, "no such thing: x");
    for (int i = 0; i < NUM_CALLS; i++) isn_grpc_client_call_free(t.side.calls[i]);

    /* A finished call freed before anyone took it leaves the list (under ASan a later take that handed it
     * over would read freed memory); one the client's closing finished stays its caller's to free. */
    app.later_ms = 60000; /* kept is never answered: the client's close finishes it */
    isn_grpc_client_call *freed = start(t.side.client, "/test.Echo/Echo", "y");
    isn_grpc_client_call *kept = start(t.side.client, "/test.Echo/Later", "z");
    awaiting_side a = {.client = t.side.client, .awaited = freed};
    uv_idle_init(&loop, &idle);
    idle.data = &a;
    uv_idle_start(&idle, service_until_done);
    while (!isn_grpc_client_call_done(freed)) uv_run(&loop, UV_RUN_ONCE);
    uv_run(&loop, UV_RUN_NOWAIT);
    isn_grpc_client_call_free(freed);
    assert_null(isn_grpc_take_finished(t.side.client, NULL));
    isn_grpc_close(t.side.client); /* kept: finished by the close, lost with the connection */
    assert_true(isn_grpc_client_call_done(kept));
    assert_int_equal(isn_grpc_client_call_result(kept)->grpc_status, -1);
    isn_grpc_client_call_free(kept);
    /* the server sees the connection go and lets the held call go (on_abandoned answers it at once) */
    uv_timer_t stop;
    uv_timer_init(&loop, &stop);
    stop.data = &app;
    uv_timer_start(&stop, stop_when_released, 20, 20);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(app.abandoned, 1);
    uv_close((uv_handle_t *)&app.later, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    echo_server_free(&app);
}

/* A hang guard for the loops below that spin the client and the server by turns: a wall-clock bound, far
 * beyond any wait a test sets up. A count of turns is no such bound: on a fast machine it ran out before the
 * held call's delay had passed. */
#define SPIN_GIVE_UP_NS 10000000000ull

static void give_up_after(uint64_t started_ns, const char *what) {
    if (isn_now_ns() - started_ns > SPIN_GIVE_UP_NS) fail_msg("%s within %.0f s", what, SPIN_GIVE_UP_NS / 1e9);
}

/* Runs the server's loop until the client's socket holds input, without reading it; then the time. */
static uint64_t reply_waiting(uv_loop_t *loop, isn_grpc_client *client) {
    char err[256];
    assert_int_equal(isn_grpc_service(client, 0, err, sizeof err), 0); /* the request out */
    struct pollfd pfd = {.fd = isn_grpc_fd(client), .events = POLLIN};
    for (uint64_t started = isn_now_ns(); poll(&pfd, 1, 0) <= 0;) {
        give_up_after(started, "no reply reached the client's socket");
        uv_run(loop, UV_RUN_NOWAIT);
    }
    return isn_now_ns();
}

/* Services the client and runs the server's loop by turns until the call is done. */
static void drive_until_done(uv_loop_t *loop, isn_grpc_client *client, isn_grpc_client_call *call) {
    for (uint64_t started = isn_now_ns(); !isn_grpc_client_call_done(call);) {
        give_up_after(started, "the call was not answered");
        service_once(client);
        uv_run(loop, UV_RUN_NOWAIT);
    }
}

/* The client's connection closed, then the server and its loop. */
static void echo_end(echo_app *app, uv_loop_t *loop, isn_grpc_client *client) {
    isn_grpc_close(client);
    isn_grpc_server_close(app->server);
    uv_close((uv_handle_t *)&app->later, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    echo_server_free(app);
}

/* The echo server and a client of it whose connection's settings are exchanged, so that requests the test
 * starts at once go out together. */
static isn_grpc_client *echo_connected(echo_app *app, uv_loop_t *loop) {
    char bound[80];
    echo_server_start(app, loop, NULL, bound, sizeof bound);
    isn_grpc_client *client = connect_client(bound);
    isn_grpc_client_call *first = start(client, "/test.Echo/Echo", "settings");
    drive_until_done(loop, client, first);
    isn_grpc_client_call_free(first);
    return client;
}

/* n calls of `path` with bodies of 1,000 bytes, started at once. */
static void start_thousand_byte_calls(isn_grpc_client *client, const char *path, isn_grpc_client_call **calls, int n) {
    static char body[1001];
    memset(body, 'x', 1000);
    for (int i = 0; i < n; i++) calls[i] = start(client, path, body);
}

/* A call's arrival time (isn_grpc_stamp_arrivals, as the load generator's pool asks) is when its reply
 * reached the client's socket, before a busy caller got round to reading it: never after the reply was
 * seen waiting there, and done_ns is when it was read. A client that did not ask has none. */
static void test_arrival_times_leave_out_the_readers_wait(void **state) {
    (void)state;
    uv_loop_t loop;
    echo_app app;
    char bound[80], err[256];
    echo_server_start(&app, &loop, NULL, bound, sizeof bound);
    isn_grpc_client *client = connect_client(bound);
    isn_grpc_client_call *call = start(client, "/test.Echo/Echo", "plain");
    drive_until_done(&loop, client, call); /* and the connection's settings exchanged */
    expect(call, ISN_GRPC_STATUS_OK, "plain", NULL);
    assert_true(isn_grpc_client_call_done_ns(call) > 0);
    assert_int_equal(isn_grpc_client_call_arrival_ns(call), 0); /* not asked for */
    isn_grpc_client_call_free(call);

    assert_int_equal(isn_grpc_stamp_arrivals(client, err, sizeof err), 0);
    /* The kernel starts stamping a moment after the first socket of the machine asks (it turns its
     * timestamps on from a work queue): until then a read carries no time, and the call none. */
    uint64_t arrived = 0;
    for (int attempt = 0; attempt < 200 && !arrived; attempt++) {
        if (attempt) usleep(10000);
        call = start(client, "/test.Echo/Echo", "stamped");
        uint64_t seen = reply_waiting(&loop, client);
        service_once(client);
        /* what waited was the whole reply (the server writes it at once): its time is known, and is
         * no later than when it was seen waiting, which is no later than its reading */
        bool whole = isn_grpc_client_call_done(call);
        drive_until_done(&loop, client, call);
        expect(call, ISN_GRPC_STATUS_OK, "stamped", NULL);
        if (whole && (arrived = isn_grpc_client_call_arrival_ns(call)) != 0) {
            assert_true(arrived <= seen);
            assert_true(seen <= isn_grpc_client_call_done_ns(call));
        }
        isn_grpc_client_call_free(call);
    }
    assert_true(arrived > 0);
    echo_end(&app, &loop, client);
}

/* A stream the server refuses unprocessed (RST_STREAM REFUSED_STREAM: here its one request a connection is
 * taken by a held call) is UNAVAILABLE to the isn.v1 client, as gRPC maps it: an answer that says "retry",
 * not a transport error (which isn-agg takes for a lost replica, and isn-bench for a request left unanswered). */
static void test_a_refused_stream_is_unavailable(void **state) {
    (void)state;
    uv_loop_t loop;
    echo_app app;
    char bound[80];
    echo_server_start_limited(&app, &loop, NULL, 1, bound, sizeof bound);
    app.later_ms = 200;
    isn_grpc_client *client = connect_client(bound);
    isn_grpc_client_call *held = start(client, "/test.Echo/Later", "");
    for (uint64_t started = isn_now_ns(); !app.held;) {
        give_up_after(started, "the held call never reached the server");
        service_once(client);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    isn_grpc_client_call *refused = start(client, "/test.Echo/Echo", "refused");
    drive_until_done(&loop, client, refused);
    const isn_grpc_result *r = isn_grpc_client_call_result(refused);
    assert_true(r->reset);
    assert_int_equal(r->grpc_status, -1); /* the raw result keeps what came: a reset, no status */
    int status;
    bool complete;
    isn_grpc_search_finish_status(refused, &status, &complete); /* frees it */
    assert_int_equal(status, ISN_GRPC_STATUS_UNAVAILABLE);
    drive_until_done(&loop, client, held);
    expect(held, ISN_GRPC_STATUS_OK, "later", NULL);
    isn_grpc_client_call_free(held);
    echo_end(&app, &loop, client);
}

/* A read is 16 KiB at most (ISN_GRPC_READ_CHUNK_BYTES): requests of a thousand bytes written at once reach the
 * server in at least one read for each 16 KiB of their bodies. */
static void test_a_read_is_16_kib_at_most(void **state) {
    (void)state;
    uv_loop_t loop;
    echo_app app;
    isn_grpc_client *client = echo_connected(&app, &loop);
    enum { CALLS = 96 };
    isn_grpc_client_call *calls[CALLS];
    start_thousand_byte_calls(client, "/test.Echo/Echo", calls, CALLS);
    isn_grpc_loop_work before = isn_grpc_server_loop_work(app.server);
    uint64_t received = isn_grpc_server_read_counters(app.server).bytes_received;
    for (int i = 0; i < CALLS; i++) drive_until_done(&loop, client, calls[i]);
    isn_grpc_loop_work after = isn_grpc_server_loop_work(app.server);
    uint64_t bodies = isn_grpc_server_read_counters(app.server).bytes_received - received;
    assert_true(bodies >= CALLS * 1000);
    if (after.reads - before.reads < bodies / 16384)
        fail_msg("%llu bytes of request bodies came in %llu reads", (unsigned long long)bodies,
                 (unsigned long long)(after.reads - before.reads));
    assert_int_equal(after.requests - before.requests, CALLS);
    for (int i = 0; i < CALLS; i++) isn_grpc_client_call_free(calls[i]);
    echo_end(&app, &loop, client);
}

/* A read's requests are given to nghttp2 a slice at a time, and output that has waited past the flush wait
 * goes out between slices: a refusal does not wait for the rest of its read to be processed. Each "Slow"
 * request is refused after a while at work, so a 16 KiB read of them takes longer than the flush wait; its
 * refusals must be flushed while the read is still being processed (the loop's reads unchanged between
 * two requests, its socket writes not). */
static void test_refusals_leave_while_their_read_is_processed(void **state) {
    (void)state;
    uv_loop_t loop;
    echo_app app;
    isn_grpc_client *client = echo_connected(&app, &loop);
    app.slow_ns = 150000;
    enum { CALLS = 24 };
    isn_grpc_client_call *calls[CALLS];
    start_thousand_byte_calls(client, "/test.Echo/Slow", calls, CALLS);
    for (int i = 0; i < CALLS; i++) {
        drive_until_done(&loop, client, calls[i]);
        expect(calls[i], ISN_GRPC_STATUS_RESOURCE_EXHAUSTED, NULL, "slow");
    }
    assert_int_equal(app.slow_calls, CALLS);
    if (!app.flushed_inside_a_read) fail_msg("%d refusals of 1,000-byte requests, none flushed inside a read", CALLS);
    for (int i = 0; i < CALLS; i++) isn_grpc_client_call_free(calls[i]);
    echo_end(&app, &loop, client);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_refused_stream_is_unavailable),
        cmocka_unit_test(test_arrival_times_leave_out_the_readers_wait),
        cmocka_unit_test(test_server_core_and_watched_client),
        cmocka_unit_test(test_abandoned_call),
        cmocka_unit_test(test_client_serviced_by_its_callers_poll),
        cmocka_unit_test(test_finished_calls_handed_over_once),
        cmocka_unit_test(test_a_read_is_16_kib_at_most),
        cmocka_unit_test(test_refusals_leave_while_their_read_is_processed),
    };
    return cmocka_run_group_tests_name("grpc_core", tests, NULL, NULL);
}
