/* Load generation for any isn.v1.Search server (isn-bench): a generator thread drives its requests
 * through the non-blocking gRPC client over a few HTTP/2 connections and poll(); config.threads such
 * generators (each with its own connections) offer a share of the rate each, and their tallies are
 * summed. The requests due at once (a burst) go on one connection in one write, and each burst on the
 * next connection: a write per request would cost the generator the server's TCP work on loopback for
 * each, and it is the generator that would then fall behind. Open loop: Poisson arrivals, latency
 * measured from each request's scheduled send time, so a server (or client) that falls behind is
 * charged for the wait (no coordinated omission), to its reply's arrival at the socket (the kernel's
 * time), so a generator near its limit, reading late, is not; a request
 * that finds no connection with a stream to spare (the server's concurrent-stream limit) is counted
 * as not sent rather than queued inside the client, unless the client throttles itself
 * (config.client_throttle: isn_grpc_throttle), which refuses it at once, as it refuses requests while the
 * server is refusing. Closed loop: N clients, each sends its next query
 * when the last one is answered. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/client.h"

#define MAX_CONNECTIONS ISN_LOAD_MAX_CONNECTIONS
#define MAX_THREADS ISN_LOAD_MAX_THREADS
#define CLIENT_GRACE_MS 1000    /* wait this long past a deadline before the client gives up */
#define MAX_WAIT_NS 2000000LL   /* poll at least this often while requests are in flight */
#define GIVE_UP_SCAN_NS 10000000LL /* look for calls past their client-side limit this often */

typedef struct {
    isn_grpc_client_call *call;
    uint32_t conn;
    uint32_t closed_client; /* closed loop: which client sent it */
    int64_t scheduled_ns;
    int64_t sent_ns; /* when it was handed to its connection (its send lag after scheduled_ns) */
    bool measured;
} load_slot;

/* Every query of the log as the Search body it is sent as, packed once for all runs and threads: a
 * generator that packs each request again spends on it time it then lacks for sending. */
typedef struct {
    uint8_t **bodies;
    size_t *lens;
    char timeout_header[ISN_GRPC_TIMEOUT_MAX_LEN]; /* "" = none */
} packed_queries;

typedef struct {
    const isn_load_config *config;
    const packed_queries *packed;
    isn_grpc_pool *pool;
    load_slot *active; /* calls in flight, at most config->max_inflight */
    uint32_t num_active;
    uint64_t rng;
    bench_stats stats;
    uint32_t concurrency;  /* closed loop: its clients */
    double spike_factor;   /* open loop: the spike's rate over the run's */
    int64_t measure_from_ns, measure_to_ns;
    /* connections with requests started but not yet sent: one send each after a burst of requests */
    isn_grpc_client *unsent[MAX_CONNECTIONS];
    uint32_t num_unsent;
    uint32_t burst_slot; /* the connection this burst's requests go on (UINT32_MAX: the burst has none yet) */
    int64_t next_give_up_scan_ns;
    isn_grpc_throttle throttle; /* config->client_throttle: off when 0 */
} load_run;

struct isn_load {
    isn_load_config config;
    packed_queries packed;
    load_run runs[MAX_THREADS];
};

static int64_t now_ns(void) { return (int64_t)isn_now_ns(); }

static uint64_t next_random(load_run *run) {
    uint64_t z = (run->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(load_run *run) { return (double)(next_random(run) >> 11) / 9007199254740992.0; }

/* Exponential inter-arrival gap of a Poisson process at `rate` per second. */
static int64_t poisson_gap_ns(load_run *run, double rate) {
    double u = ((double)(next_random(run) >> 11) + 0.5) / 9007199254740992.0;
    return (int64_t)(-log(u) / rate * 1e9);
}


/* Sends one query scheduled at `scheduled_ns`. False when it could not be sent (counted). */
static bool issue(load_run *run, int64_t scheduled_ns, uint32_t closed_client) {
    bool measured = scheduled_ns >= run->measure_from_ns && scheduled_ns < run->measure_to_ns;
    if (measured) run->stats.scheduled++;
    /* the client's own refusal is its answer at once: neither a call nor a wait for one (off, it draws no
     * random number, so that the queries and gaps of a seed stay those of a client without it) */
    if (run->throttle.accepts_multiplier > 0 && !isn_grpc_throttle_allow(&run->throttle, (uint64_t)now_ns(), uniform01(run))) {
        if (measured) run->stats.client_refused++;
        return false;
    }
    uint32_t conn_index;
    bool room = run->num_active < run->config->max_inflight;
    isn_grpc_client *client = room ? isn_grpc_pool_pick_again(run->pool, run->burst_slot, &conn_index) : NULL;
    const isn_load_config *a = run->config;
    isn_grpc_client_call *call = NULL;
    if (client) {
        size_t q = next_random(run) % a->queries->count;
        const packed_queries *packed = run->packed;
        char err[256];
        call = isn_grpc_search_start_packed(client, packed->bodies[q], packed->lens[q],
                                            packed->timeout_header[0] ? packed->timeout_header : NULL, err, sizeof err);
        uint32_t i = 0;
        while (call && i < run->num_unsent && run->unsent[i] != client) i++;
        if (call && i == run->num_unsent && run->num_unsent < MAX_CONNECTIONS) run->unsent[run->num_unsent++] = client;
        if (call) run->burst_slot = conn_index;
    }
    if (!call) {
        /* No room: the server's stream limit, or max_inflight. A throttling client takes it as the
         * server's refusal and refuses the request itself at once, as a circuit breaker does; any other
         * counts it not sent. */
        bool throttling = isn_grpc_throttle_answered(&run->throttle, (uint64_t)now_ns(), -1);
        if (measured && throttling) run->stats.client_refused++, run->stats.client_refused_no_room++;
        else if (measured) run->stats.not_sent++;
        return false;
    }
    int64_t sent_ns = now_ns();
    int64_t lag_ns = sent_ns - scheduled_ns;
    if (measured) bench_stats_add_send_lag(&run->stats, lag_ns > 0 ? (uint64_t)lag_ns / 1000 : 0);
    isn_grpc_client_call_set_user(call, (void *)(uintptr_t)run->num_active); /* its slot, for collect */
    run->active[run->num_active++] = (load_slot){.call = call, .conn = conn_index, .closed_client = closed_client,
                                                  .scheduled_ns = scheduled_ns, .sent_ns = sent_ns, .measured = measured};
    isn_grpc_pool_started(run->pool, conn_index);
    return true;
}

/* Sends what issue() started: now, not at the next wait; once per connection for a burst of them. */
static void send_started(load_run *run) {
    char err[256];
    for (uint32_t i = 0; i < run->num_unsent; i++) isn_grpc_service(run->unsent[i], 0, err, sizeof err);
    run->num_unsent = 0;
    run->burst_slot = UINT32_MAX; /* the next burst on the next connection: each has its turn */
}

static void release_slot(load_run *run, uint32_t active_pos) {
    isn_grpc_pool_finished(run->pool, run->active[active_pos].conn);
    run->active[active_pos] = run->active[--run->num_active];
    if (active_pos < run->num_active) isn_grpc_client_call_set_user(run->active[active_pos].call, (void *)(uintptr_t)active_pos);
}

/* Tallies a done call and frees it, and its slot. Closed loop: its client is no longer busy. */
static void finish_slot(load_run *run, uint32_t pos, bool *client_busy) {
    load_slot *slot = &run->active[pos];
    /* to when its reply reached the socket, not to when the generator got to it: a generator near its
     * limit reads replies late, and that wait is its own, not the server's (the replies of one read are
     * also taken in before any is looked at). How long they waited is kept apart (receive lag); a reply the
     * kernel gave no time for ends when it was read. Both before finish frees the call. */
    int64_t read_at = (int64_t)isn_grpc_client_call_done_ns(slot->call);
    int64_t arrived = (int64_t)isn_grpc_client_call_arrival_ns(slot->call);
    int64_t done = arrived ? arrived : read_at;
    int status;
    bool complete;
    /* a stream refused unprocessed is UNAVAILABLE to the call, and an answer: counted apart from a server
     * that answered UNAVAILABLE (a request it took and failed) */
    bool refused = isn_grpc_result_refused_unprocessed(isn_grpc_client_call_result(slot->call));
    if (isn_grpc_search_finish_status(slot->call, &status, &complete) != 0) status = -1;
    isn_grpc_throttle_answered(&run->throttle, (uint64_t)(read_at ? read_at : now_ns()), status);
    if (slot->measured) {
        int64_t took = (done ? done : now_ns()) - slot->scheduled_ns;
        uint64_t latency_us = took > 0 ? (uint64_t)took / 1000 : 0;
        uint64_t deadline_us = (uint64_t)run->config->deadline_ms * 1000;
        if (refused) run->stats.refused_streams++;
        else bench_stats_record(&run->stats, status, status == 0 && complete, latency_us, deadline_us);
        if (!refused && status == ISN_GRPC_STATUS_RESOURCE_EXHAUSTED) {
            int64_t from_send = (done ? done : now_ns()) - slot->sent_ns;
            bench_stats_add_shed_from_send(&run->stats, from_send > 0 ? (uint64_t)from_send / 1000 : 0);
        }
        if (arrived) bench_stats_add_receive_lag(&run->stats, (uint64_t)(read_at - arrived) / 1000);
        else if (status >= 0) run->stats.arrivals_unknown++; /* a reply came, its time did not */
        if (status == 0 && complete && latency_us <= deadline_us)
            bench_stats_timeline_add(&run->stats, slot->scheduled_ns - run->measure_from_ns);
    }
    if (client_busy) client_busy[slot->closed_client] = false;
    release_slot(run, pos);
}

/* Finishes the calls that finished since the last look (the pool's list of them: at hundreds of
 * thousands a second with thousands in flight, looking at every call in flight at every turn cost the
 * generator as much as sending), and, every GIVE_UP_SCAN_NS, those past their client-side limit;
 * returns how many. */
static uint32_t collect(load_run *run, bool *client_busy) {
    uint32_t finished = 0;
    isn_grpc_client_call *next;
    for (isn_grpc_client_call *call = isn_grpc_pool_take_finished(run->pool); call; call = next) {
        next = isn_grpc_client_call_next_finished(call); /* before finish_slot frees it */
        finish_slot(run, (uint32_t)(uintptr_t)isn_grpc_client_call_user(call), client_busy);
        finished++;
    }
    int64_t t = now_ns();
    if (t < run->next_give_up_scan_ns) return finished;
    run->next_give_up_scan_ns = t + GIVE_UP_SCAN_NS;
    int64_t give_up_ns = ((int64_t)run->config->deadline_ms + CLIENT_GRACE_MS) * 1000000LL;
    for (uint32_t i = 0; i < run->num_active;) {
        load_slot *slot = &run->active[i];
        /* a call done since the take above is on the next take's list: left for it */
        if (isn_grpc_client_call_done(slot->call) || t - slot->scheduled_ns <= give_up_ns) {
            i++;
            continue;
        }
        isn_grpc_client_call_free(slot->call);
        if (slot->measured) run->stats.client_timeouts++;
        if (client_busy) client_busy[slot->closed_client] = false;
        release_slot(run, i);
        finished++;
    }
    return finished;
}

/* One measured run: rate > 0 open loop, else closed loop with run->concurrency clients. */
static void run_load(load_run *run, double rate) {
    const isn_load_config *a = run->config;
    int64_t start = now_ns();
    uint64_t cpu_start = isn_thread_cpu_ns();
    char err[128];
    /* each run on its own: the last run's refusals are not this one's (valid: checked at isn_load_new) */
    (void)isn_grpc_throttle_init(&run->throttle, a->client_throttle, ISN_LOAD_THROTTLE_WINDOW_NS, err, sizeof err);
    run->measure_from_ns = start + (int64_t)(a->warmup_s * 1e9);
    run->measure_to_ns = run->measure_from_ns + (int64_t)(a->duration_s * 1e9);
    int64_t give_up_at = run->measure_to_ns + ((int64_t)a->deadline_ms + 2 * CLIENT_GRACE_MS) * 1000000LL;
    int64_t *client_ready = NULL;
    bool *client_busy = NULL;
    if (rate <= 0) {
        client_ready = calloc(run->concurrency, sizeof *client_ready);
        client_busy = calloc(run->concurrency, sizeof *client_busy);
        if (!client_ready || !client_busy) {
            free(client_ready);
            free(client_busy);
            return;
        }
        for (uint32_t i = 0; i < run->concurrency; i++) client_ready[i] = start;
    }
    int64_t next_send = start + (rate > 0 ? poisson_gap_ns(run, rate) : 0);
    /* --spike: the first seconds of the measured run at the spike's rate instead */
    int64_t spike_end = run->measure_from_ns + (int64_t)(a->spike_s * 1e9);
    double spike_factor = run->spike_factor;
    for (;;) {
        int64_t t = now_ns();
        int64_t next_event = give_up_at;
        if (rate > 0) {
            while (next_send <= t && next_send < run->measure_to_ns) {
                issue(run, next_send, 0);
                bool spiking = next_send >= run->measure_from_ns && next_send < spike_end;
                next_send += poisson_gap_ns(run, spiking ? rate * spike_factor : rate);
            }
            send_started(run);
            if (next_send < run->measure_to_ns) next_event = next_send;
        } else if (t < run->measure_to_ns) {
            for (uint32_t i = 0; i < run->concurrency; i++) {
                if (client_busy[i]) continue;
                if (client_ready[i] <= t) {
                    int64_t sched = now_ns();
                    /* A client that cannot send (no connection) retries a little later. */
                    if (issue(run, sched, i)) client_busy[i] = true;
                    else client_ready[i] = sched + 10000000LL;
                }
                if (!client_busy[i] && client_ready[i] < next_event) next_event = client_ready[i];
            }
            send_started(run);
        }
        bool sending_done = t >= run->measure_to_ns;
        if (!sending_done && run->measure_to_ns < next_event) next_event = run->measure_to_ns;
        if (sending_done && run->num_active == 0) break;
        if (t >= give_up_at) break;
        /* Sending also reads what has arrived: look before sleeping, or those answers wait. */
        if (collect(run, client_busy)) continue;
        int64_t wait = next_event - now_ns(); /* input on any connection, or the next event */
        if (run->num_active && wait > MAX_WAIT_NS) wait = MAX_WAIT_NS;
        isn_grpc_pool_wait(run->pool, wait > 0 ? (uint64_t)wait : 0);
        collect(run, client_busy);
    }
    /* Whatever is still in flight past the last grace period is abandoned. */
    while (run->num_active) {
        load_slot *slot = &run->active[0];
        isn_grpc_client_call_free(slot->call);
        if (slot->measured) run->stats.client_timeouts++;
        release_slot(run, 0);
    }
    free(client_ready);
    free(client_busy);
    run->stats.generator_cpu_ns = isn_thread_cpu_ns() - cpu_start;
    run->stats.generator_wall_ns = (uint64_t)(now_ns() - start);
}

/* ------------------------------------------------------------------ several generator threads */

typedef struct {
    load_run *run;
    double rate;
} load_share;

static void *load_thread(void *arg) {
    load_share *share = arg;
    run_load(share->run, share->rate);
    return NULL;
}

/* One run at `rate` over the config->threads generators of runs[] (rate <= 0: closed loop with
 * `concurrency` clients, one thread); their tallies end up in runs[0].stats. -1 when out of memory or
 * out of threads. */
static int load_all(load_run *runs, double rate, uint32_t concurrency) {
    const isn_load_config *config = runs[0].config;
    uint32_t n = rate > 0 ? config->threads : 1;
    for (uint32_t i = 0; i < n; i++) { /* the first holds every thread's latencies in the end */
        double expected = rate > 0 ? rate * (config->duration_s + 1) * 1.2 / (i ? n : 1) + 1000 : 2e6;
        if (bench_stats_init(&runs[i].stats, (size_t)(expected < 5e7 ? expected : 5e7)) != 0) {
            for (uint32_t j = 0; j <= i; j++) bench_stats_free(&runs[j].stats);
            return -1;
        }
        runs[i].concurrency = concurrency;
        runs[i].spike_factor = rate > 0 && config->spike_rate > 0 ? config->spike_rate / rate : 1.0;
    }
    if (n == 1) {
        run_load(&runs[0], rate);
        return 0;
    }
    pthread_t threads[MAX_THREADS];
    load_share shares[MAX_THREADS];
    uint32_t started = 0;
    for (uint32_t i = 0; i < n; i++) {
        shares[i] = (load_share){&runs[i], rate / n};
        if (pthread_create(&threads[i], NULL, load_thread, &shares[i]) != 0) break;
        started++;
    }
    for (uint32_t i = 0; i < started; i++) pthread_join(threads[i], NULL);
    bench_stats *sum = &runs[0].stats;
    for (uint32_t i = 1; i < n; i++) {
        bench_stats_merge(sum, &runs[i].stats);
        bench_stats_free(&runs[i].stats);
    }
    if (started == n) return 0;
    bench_stats_free(sum);
    return -1;
}

static int pack_queries(const isn_load_config *a, packed_queries *packed) {
    size_t n = a->queries->count;
    packed->bodies = calloc(n, sizeof *packed->bodies);
    packed->lens = calloc(n, sizeof *packed->lens);
    if (!packed->bodies || !packed->lens) return -1;
    for (size_t i = 0; i < n; i++) {
        isn_grpc_search_request rq = {.query = a->queries->queries[i].text, .k = a->k, .mode = a->mode, .algorithm = a->algo,
                                      .ranker = a->ranker, .n1 = a->n1};
        if (!(packed->bodies[i] = isn_grpc_search_request_pack(&rq, &packed->lens[i]))) return -1;
    }
    if (a->deadline_ms) isn_grpc_format_timeout((uint64_t)a->deadline_ms * 1000000ull, packed->timeout_header,
                                                sizeof packed->timeout_header);
    return 0;
}

isn_load *isn_load_new(const isn_load_config *config, char *err, size_t err_len) {
    if (!config->queries || config->queries->count == 0) {
        snprintf(err, err_len, "no queries to send");
        return NULL;
    }
    if (config->client_throttle > 0 && config->spike_rate > 0) {
        /* a spike is there to show the server's own recovery, which the client's memory would blur */
        snprintf(err, err_len, "a client throttle and a spike together: the spike measures the server alone");
        return NULL;
    }
    if (config->threads < 1 || config->threads > MAX_THREADS || config->connections < 1 ||
        config->connections > MAX_CONNECTIONS) {
        snprintf(err, err_len, "1..%d threads and 1..%d connections each", MAX_THREADS, MAX_CONNECTIONS);
        return NULL;
    }
    isn_load *load = calloc(1, sizeof *load);
    if (!load) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    load->config = *config;
    if (pack_queries(config, &load->packed) != 0) {
        snprintf(err, err_len, "out of memory");
        isn_load_free(load);
        return NULL;
    }
    for (uint32_t i = 0; i < config->threads; i++) {
        load_run *run = &load->runs[i];
        run->config = &load->config;
        run->packed = &load->packed;
        run->rng = config->seed + i * 0x9E3779B97F4A7C15ull;
        run->burst_slot = UINT32_MAX;
        if (isn_grpc_throttle_init(&run->throttle, config->client_throttle, ISN_LOAD_THROTTLE_WINDOW_NS, err, err_len) != 0) {
            isn_load_free(load);
            return NULL;
        }
        if (!(run->active = calloc(config->max_inflight, sizeof *run->active))) {
            snprintf(err, err_len, "out of memory");
            isn_load_free(load);
            return NULL;
        }
        /* Fail early with a clear message when the target is not there. */
        if (!(run->pool = isn_grpc_pool_new_tls(config->target, config->connections, 2000, config->tls, config->server_name, err, err_len))) {
            isn_load_free(load);
            return NULL;
        }
        isn_grpc_pool_track_finished(run->pool);
        isn_grpc_pool_stamp_arrivals(run->pool);
    }
    return load;
}

void isn_load_free(isn_load *load) {
    if (!load) return;
    for (uint32_t i = 0; i < load->config.threads; i++) {
        isn_grpc_pool_free(load->runs[i].pool);
        free(load->runs[i].active);
    }
    for (size_t i = 0; load->packed.bodies && i < load->config.queries->count; i++) free(load->packed.bodies[i]);
    free(load->packed.bodies);
    free(load->packed.lens);
    free(load);
}

const isn_load_config *isn_load_config_of(const isn_load *load) { return &load->config; }

int isn_load_run(isn_load *load, double rate, uint32_t concurrency, bench_stats *stats) {
    if (load_all(load->runs, rate, concurrency) != 0) return -1;
    *stats = load->runs[0].stats;
    memset(&load->runs[0].stats, 0, sizeof load->runs[0].stats);
    return 0;
}
