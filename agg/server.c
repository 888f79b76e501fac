/* isn-agg's endpoints on grpc/: the gRPC server (Search, Info, health Check) and the stats
 * endpoint (/metrics /stats /healthz /readyz), and the drain on SIGTERM. */

#include <string.h>

#include "agg/agg_internal.h"

#define AGG_MAX_MESSAGE_BYTES (4u << 20)
#define AGG_DRAIN_GRACE_MS 2000 /* clients that do not read their last answers are not waited for longer */

/* ------------------------------------------------------------------ gRPC */

/* The call's storage holds its query while it has one. */
static void on_open(isn_grpc_call *call, void *app) {
    (void)app;
    *(agg_query **)isn_grpc_call_app(call) = NULL;
}

/* The streams: Health/Watch and server reflection; everything else is unary (on_request). */
static void on_headers(isn_grpc_call *call, void *app) {
    if (isn_grpc_reflection_serve(call)) return;
    if (!strcmp(isn_grpc_call_path(call), "/grpc.health.v1.Health/Watch")) agg_health_watch(app, call);
}

static void on_request(isn_grpc_call *call, void *app) {
    agg *a = app;
    agg_handle_call(a, call);
    agg_kick(a); /* what the call queued on the replicas goes out on this loop turn */
}

/* The client of a held call went away: its query is answered no more (on the next step). */
static void on_abandoned(isn_grpc_call *call, void *app) {
    agg_query *q = *(agg_query **)isn_grpc_call_app(call);
    if (q) q->abandoned = true;
    agg_kick(app);
}

static void close_everything(agg *a) {
    if (a->closed) return;
    a->closed = true;
    if (a->draining) log_info("drain: done (%llu calls answered since the start); closing", (unsigned long long)agg_answered(a));
    if (a->drain_timer.loop && !uv_is_closing((uv_handle_t *)&a->drain_timer))
        uv_close((uv_handle_t *)&a->drain_timer, NULL);
    agg_loop_stop(a);
    agg_discovery_stop(a);
    if (a->grpc_tls) isn_grpc_tls_unwatch(a->grpc_tls);
    if (a->stats_tls) isn_grpc_tls_unwatch(a->stats_tls);
    if (a->replica_tls) isn_grpc_tls_unwatch(a->replica_tls);
    agg_replicas_close(a);
    if (a->stats) isn_grpc_stats_server_close(a->stats);
    if (a->server) isn_grpc_server_close(a->server);
}

static void on_drained(isn_grpc_server *server, void *app) {
    (void)server;
    close_everything(app);
}

static const isn_grpc_server_handlers AGG_HANDLERS = {
    .on_open = on_open,
    .on_headers = on_headers,
    .on_request = on_request,
    .on_abandoned = on_abandoned,
    .on_drained = on_drained,
};

/* ------------------------------------------------------------------ stats endpoint */

static void render_json(void *app, byte_buffer *out) {
    const agg *a = app;
    const agg_metrics *m = &a->metrics;
    uint64_t answered = 0;
    for (int i = 0; i < ISN_GRPC_STATUS_COUNT; i++) answered += m->requests_by_status[i];
    char why[512];
    bool ready = agg_ready(a, why, sizeof why);
    buffer_printf(out, "{\"ready\":%s,\"readiness\":\"%s\",", ready ? "true" : "false", why);
    buffer_printf(out,
                  "\"partitions\":%u,\"inflight\":%u,\"requests\":%llu,\"ok\":%llu,\"partial\":%llu,\"hedges\":%llu,"
                  "\"hedge_wins\":%llu,\"retries\":%llu,\"upstream_requests\":%llu,\"upstream_failures\":%llu,"
                  "\"replicas\":[",
                  a->num_partitions, a->num_queries, (unsigned long long)answered,
                  (unsigned long long)m->requests_by_status[ISN_GRPC_STATUS_OK], (unsigned long long)m->partial,
                  (unsigned long long)m->hedges, (unsigned long long)m->hedge_wins, (unsigned long long)m->retries,
                  (unsigned long long)m->upstream_requests, (unsigned long long)m->upstream_failures);
    const char *sep = "";
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++) {
            const agg_replica *r = &a->partitions[pi].replicas[i];
            if (!r->address[0]) continue; /* a slot freed by DNS discovery */
            buffer_printf(out, "%s{\"partition\":%u,\"address\":\"%s\",\"up\":%s,\"draining\":%s,\"latency_ewma_seconds\":%.6f}",
                          sep, pi, r->address, r->up ? "true" : "false", r->draining ? "true" : "false", r->ewma_us / 1e6);
            sep = ",";
        }
    buffer_printf(out, "]}\n");
}

static void render_metrics(void *app, byte_buffer *body) { agg_render_metrics(app, body); }

static int readiness(void *app, byte_buffer *body) {
    const agg *a = app;
    char why[512];
    bool ready = agg_ready(a, why, sizeof why);
    buffer_printf(body, "%s: %s\n", ready ? "ready" : "not ready", why);
    return ready ? 200 : 503;
}

static const isn_grpc_stats_pages STATS_PAGES = {render_metrics, render_json, readiness};

/* ------------------------------------------------------------------ life */

/* The TLS credentials of the ports, and the watch of every set's files. */
static int tls_start(agg *a, char *err, size_t err_len) {
    const agg_config *c = &a->config;
    char host[AGG_ADDR_MAX], why[160];
    uint16_t port;
    if (!c->tls_cert[0] && isn_parse_host_port(c->listen, host, sizeof host, &port, why, sizeof why) == 0 &&
        strcmp(host, "127.0.0.1") && strcmp(host, "::1") && strcmp(host, "localhost"))
        log_warn("gRPC on %s is plaintext: set tls_cert and tls_key for a port reached over a network", c->listen);
    if (c->tls_cert[0]) {
        isn_grpc_tls_config grpc = {.cert_file = c->tls_cert, .key_file = c->tls_key, .client_ca_file = c->tls_client_ca,
                                    .allowed_peers = c->tls_allowed_peers};
        isn_grpc_tls_config stats = {.cert_file = c->tls_cert, .key_file = c->tls_key, .alpn = "http/1.1"};
        if (!(a->grpc_tls = isn_grpc_tls_server_new(&grpc, err, err_len))) return -1;
        if (c->stats_listen[0] && !(a->stats_tls = isn_grpc_tls_server_new(&stats, err, err_len))) return -1;
    }
    isn_grpc_tls *sets[3] = {a->grpc_tls, a->stats_tls, a->replica_tls};
    for (int i = 0; i < 3 && c->tls_watch_interval_ms; i++)
        if (sets[i] && isn_grpc_tls_watch(sets[i], a->loop, c->tls_watch_interval_ms, err, err_len) != 0) return -1;
    return 0;
}

int agg_serve(agg *a, char *err, size_t err_len) {
    const agg_config *c = &a->config;
    if (tls_start(a, err, err_len) != 0) return -1;
    a->connection_limit.max = c->max_connections;
    isn_grpc_server_config config = {
        .max_concurrent_streams = c->max_concurrent_streams,
        .adaptive_stream_limit = true,
        .max_message_bytes = AGG_MAX_MESSAGE_BYTES,
        .header_timeout_ms = c->header_timeout_ms,
        .idle_timeout_ms = c->idle_timeout_ms,
        .call_app_bytes = sizeof(agg_query *),
        .limit = &a->connection_limit,
        .max_requests_per_connection = c->max_requests_per_connection,
        .write_timeout_ms = c->write_timeout_ms,
        .min_send_rate = c->min_send_rate,
        .memory_budget_bytes = (uint64_t)c->memory_budget_mib << 20,
        .shared_budget = &a->budget, /* the queries' memory is charged to it too */
        .max_header_list_bytes = c->max_header_list_size,
        .max_early_resets_per_second = c->max_early_resets_per_second,
        .reset_hold_ms = c->reset_hold_ms,
        .tls = a->grpc_tls,
    };
    a->server = isn_grpc_server_new(a->loop, &config, &AGG_HANDLERS, a);
    if (!a->server) return isn_error(err, err_len, "out of memory for the gRPC server");
    if (isn_grpc_server_listen(a->server, a->config.listen, a->grpc_address, sizeof a->grpc_address, err, err_len) != 0 ||
        agg_check_own_replicas(a, &a->config, err, err_len) != 0)
        return -1;
    if (a->config.stats_listen[0]) {
        isn_grpc_stats_config stats_config = {
            .server_name = "isn-agg/0.1",
            .header_timeout_ms = c->header_timeout_ms,
            .idle_timeout_ms = c->idle_timeout_ms,
            .max_connections = c->stats_max_connections,
            .write_timeout_ms = c->stats_write_timeout_ms,
            .tls = a->stats_tls,
        };
        a->stats = isn_grpc_stats_server_new(a->loop, &stats_config, &STATS_PAGES, a);
        if (!a->stats) return isn_error(err, err_len, "out of memory for the stats endpoint");
        if (isn_grpc_stats_server_listen(a->stats, a->config.stats_listen, a->stats_address, sizeof a->stats_address, err,
                                     err_len) != 0)
            return -1;
    }
    if (agg_loop_start(a, err, err_len) != 0) return -1;
    return agg_discovery_start(a, err, err_len);
}

/* The clients had their answers this long ago and some still did not take them: they are not waited for. */
static void on_drain_grace_over(uv_timer_t *timer) {
    log_warn("drain: clients did not take their last answers within %d ms; closing", AGG_DRAIN_GRACE_MS);
    close_everything(timer->data);
}

/* drain_timeout_ms passed with queries still going (a caller gave a longer deadline): they answer with
 * what the partitions gave so far, and the clients get AGG_DRAIN_GRACE_MS to read it. */
static void on_drain_timeout(uv_timer_t *timer) {
    agg *a = timer->data;
    log_warn("drain: drain_timeout_ms (%u) reached with %u queries in flight; they answer with what they have",
             a->config.drain_timeout_ms, a->num_queries);
    int64_t now = agg_now_ns();
    while (a->queries) agg_query_answer_now(a, a->queries, now);
    isn_grpc_server_fail_waiting(a->server, ISN_GRPC_STATUS_UNAVAILABLE, "aggregator stopping");
    uv_timer_start(&a->drain_timer, on_drain_grace_over, AGG_DRAIN_GRACE_MS, 0);
}

const char *agg_grpc_address(const agg *a) { return a->grpc_address; }
const char *agg_stats_address(const agg *a) { return a->stats_address; }

void agg_drain(agg *a) {
    if (a->draining) return;
    a->draining = true;
    agg_readiness_changed(a);
    agg_health_notify(a); /* watchers get NOT_SERVING and their streams end, whatever readiness was */
    if (!a->server) {
        close_everything(a);
        return;
    }
    log_info("drain: %u queries in flight are answered from the partitions, each by its own deadline (at most "
             "drain_timeout_ms %u); no new connection or stream is taken",
             a->num_queries, a->config.drain_timeout_ms);
    uv_timer_init(a->loop, &a->drain_timer);
    a->drain_timer.data = a;
    uv_timer_start(&a->drain_timer, on_drain_timeout, a->config.drain_timeout_ms, 0);
    /* Stops accepting and sends GOAWAY: streams the connections already took are answered; once no
     * call is open, on_drained closes the rest. */
    isn_grpc_server_drain(a->server);
}

void agg_stop_now(agg *a) {
    a->lost_queries += a->num_queries;
    log_warn("stopping now: %u queries in flight answered UNAVAILABLE", a->num_queries);
    agg_queries_fail_all(a, ISN_GRPC_STATUS_UNAVAILABLE, "aggregator stopping (stopped at once)");
    a->draining = true;
    close_everything(a);
}

uint32_t agg_lost_queries(const agg *a) { return a->lost_queries; }
