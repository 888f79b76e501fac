/* The serving loops (server.loops): each an event loop with its own gRPC server, calls, completion
 * queue, deadline heap and metrics. The first runs on the main thread, listens and hands each new
 * connection in turn to itself and the others (isn_grpc_server_add_peer); the others run a thread each.
 * The first loop steers them with commands (serving_loop.commands, a uv_async each): health changes,
 * drain, reloads and the stop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "daemon/gpu_setup.h"
#include "daemon/server.h"

static void do_commands(serving_loop *loop, unsigned commands);

static void on_control(uv_async_t *async) {
    serving_loop *loop = async->data;
    do_commands(loop, atomic_exchange(&loop->commands, 0));
}

static void close_if_open(uv_handle_t *handle) {
    if (handle->loop && !uv_is_closing(handle)) uv_close(handle, NULL);
}

static void reconfigure(serving_loop *loop) {
    pthread_mutex_lock(&loop->conf_lock);
    loop->conf = loop->next_conf;
    pthread_mutex_unlock(&loop->conf_lock);
    isn_grpc_server_config isn_grpc_config;
    isn_grpc_stats_config stats_config;
    server_transport_config(loop->server, &loop->conf, &isn_grpc_config, &stats_config);
    isn_grpc_server_reconfigure(loop->grpc, &isn_grpc_config);
}

/* Commands the first loop waits for every other loop to have done: a reload is in force on every
 * loop once it is logged, and no loop submits to the search service once it is closed. */
#define LOOP_ACKNOWLEDGED (LOOP_RECONFIGURE | LOOP_CLOSE)

static void acknowledge(isn_server *server, unsigned commands) {
    pthread_mutex_lock(&server->acks_lock);
    server->acks += (uint32_t)__builtin_popcount(commands & LOOP_ACKNOWLEDGED);
    pthread_cond_signal(&server->acks_cond);
    pthread_mutex_unlock(&server->acks_lock);
}

static void do_commands(serving_loop *loop, unsigned commands) {
    isn_server *server = loop->server;
    if (commands & LOOP_RECONFIGURE) reconfigure(loop);
    if (commands & LOOP_GENERATION_SWAPPED) generation_lease_tidy(&loop->generations, generations_slot(server));
    if (commands & LOOP_HEALTH_CHANGED) isn_grpc_health_changed(loop->watchers);
    if (commands & LOOP_HEALTH_SHUTDOWN) isn_grpc_health_shutdown(loop->watchers);
    if (commands & LOOP_DRAIN) isn_grpc_server_drain(loop->grpc); /* on_drained: serving_loops_drained */
    if (commands & LOOP_FAIL_WAITING)
        isn_grpc_server_fail_waiting(loop->grpc, ISN_GRPC_STATUS_UNAVAILABLE, "server is shutting down");
    if (commands & LOOP_ALL_DRAINED) {
        double seconds = (double)(isn_now_ns() - server->drain_start_ns) / 1e9;
        if (server->lost_requests) {
            log_warn("drained in %.3f s; %llu requests could not be answered", seconds,
                     (unsigned long long)server->lost_requests);
            server->exit_code = 1;
        } else {
            log_info("drained in %.3f s; every request answered", seconds);
        }
        server_stop(server);
    }
    if (commands & LOOP_CLOSE) {
        isn_grpc_server_close(loop->grpc);
        close_if_open((uv_handle_t *)&loop->deadline_timer);
        close_if_open((uv_handle_t *)&loop->stall_watch);
    }
    if (commands & LOOP_FINISH) {
        close_if_open((uv_handle_t *)&loop->completion_wake);
        close_if_open((uv_handle_t *)&loop->completion_take);
        close_if_open((uv_handle_t *)&loop->completion_more);
        close_if_open((uv_handle_t *)&loop->completion_polled);
        close_if_open((uv_handle_t *)&loop->control_async);
    }
    if (loop->id && (commands & LOOP_ACKNOWLEDGED)) acknowledge(server, commands);
}

void serving_loops_tell(isn_server *server, unsigned commands) {
    if (commands & LOOP_RECONFIGURE)
        for (uint32_t i = 0; i < server->num_loops; i++) {
            pthread_mutex_lock(&server->loops[i].conf_lock);
            server->loops[i].next_conf = server->conf;
            pthread_mutex_unlock(&server->loops[i].conf_lock);
        }
    pthread_mutex_lock(&server->acks_lock);
    server->acks = 0;
    pthread_mutex_unlock(&server->acks_lock);
    for (uint32_t i = 1; i < server->num_loops; i++) {
        serving_loop *loop = &server->loops[i];
        atomic_fetch_or(&loop->commands, commands);
        uv_async_send(&loop->control_async);
    }
    do_commands(&server->loops[0], commands);
    uint32_t wanted = (server->num_loops - 1) * (uint32_t)__builtin_popcount(commands & LOOP_ACKNOWLEDGED);
    pthread_mutex_lock(&server->acks_lock);
    while (server->acks < wanted) pthread_cond_wait(&server->acks_cond, &server->acks_lock);
    pthread_mutex_unlock(&server->acks_lock);
}

void serving_loops_drained(serving_loop *loop) {
    isn_server *server = loop->server;
    if (atomic_fetch_add(&server->loops_drained, 1) + 1 < server->num_loops) return;
    if (loop->id == 0) {
        do_commands(loop, LOOP_ALL_DRAINED);
        return;
    }
    atomic_fetch_or(&server->loops[0].commands, LOOP_ALL_DRAINED);
    uv_async_send(&server->loops[0].control_async);
}

void serving_loops_close(isn_server *server, void (*between)(isn_server *server)) {
    serving_loops_tell(server, LOOP_CLOSE); /* waits until every loop has closed its connections */
    between(server);
    serving_loops_tell(server, LOOP_FINISH);
}

/* ------------------------------------------------------------------ finished jobs (completion_queue.c) */

/* Its work is take_before_poll's; being active is what keeps the poll from blocking. */
static void take_next_iteration(uv_idle_t *idle) { (void)idle; }

/* A loop's busy share is over about this long: long enough that the iteration working off a stall's
 * backlog does not make a loop that keeps up look saturated. */
#define BUSY_SHARE_WINDOW_NS 100e6

bool serving_loop_forgives_stalls(const serving_loop *loop) {
    return loop->conf.forgive_stalls && loop->busy_share < SERVING_LOOP_SATURATED;
}

/* The iteration that ends at this poll: the time since the last poll began, less the poll's wait (the
 * loop measures its idle time: grpc/server.c configures UV_METRICS_IDLE_TIME). */
static void count_iteration(serving_loop *loop, uint64_t now) {
    uint64_t idle = uv_metrics_idle_time(loop->loop);
    isn_grpc_loop_work work = isn_grpc_server_loop_work(loop->grpc);
    if (loop->iteration_start_ns && now > loop->iteration_start_ns) {
        uint64_t waited = idle - loop->iteration_idle_ns, span = now - loop->iteration_start_ns;
        uint64_t busy = span > waited ? span - waited : 0;
        uint64_t parts[LOOP_PARTS] = {[LOOP_PART_READS] = work.read_ns - loop->iteration_work.read_ns,
                                      [LOOP_PART_REPLIES] = loop->replies_ns - loop->iteration_replies_ns,
                                      [LOOP_PART_FLUSHES] = work.flush_ns - loop->iteration_work.flush_ns};
        uint64_t counted = parts[LOOP_PART_READS] + parts[LOOP_PART_REPLIES] + parts[LOOP_PART_FLUSHES];
        parts[LOOP_PART_OTHER] = busy > counted ? busy - counted : 0;
        bool long_one = busy > LOOP_LONG_ITERATION_NS;
        LOOP_METRICS(loop, {
            histogram_observe(&m->loop_iteration_seconds, (double)busy / 1e9);
            for (int part = 0; part < LOOP_PARTS; part++) m->loop_work_ns[part] += parts[part];
            m->loop_reads += work.reads - loop->iteration_work.reads;
            m->loop_writes += work.writes - loop->iteration_work.writes;
            m->loop_requests += work.requests - loop->iteration_work.requests;
            if (long_one) {
                for (int part = 0; part < LOOP_PARTS; part++) m->long_iteration_ns[part] += parts[part];
                m->long_iterations++;
                m->long_iteration_reads += work.reads - loop->iteration_work.reads;
                m->long_iteration_requests += work.requests - loop->iteration_work.requests;
            }
        });
        /* weighted by time: iterations are microseconds apart when idle and milliseconds when saturated */
        double weight = (double)span / ((double)span + BUSY_SHARE_WINDOW_NS);
        loop->busy_share += weight * ((double)busy / (double)span - loop->busy_share);
    }
    loop->iteration_start_ns = now;
    loop->iteration_idle_ns = idle;
    loop->iteration_work = work;
    loop->iteration_replies_ns = loop->replies_ns;
}

/* Once per iteration, not until the queue is empty, and a bounded number (rpc_take_completions): while
 * a GPU batch lands its answers arrive one after another, and a loop that kept taking them would leave
 * its sockets unread for as long as the landing lasts. What waits goes out in the next iteration,
 * which comes at once: an active idle handle makes the poll not block. */
static void take_before_poll(uv_prepare_t *prepare) {
    serving_loop *loop = prepare->data;
    uint64_t now = isn_now_ns();
    count_iteration(loop, now);
    bool took = rpc_take_completions(loop);
    if (took) loop->replies_ns += isn_now_ns() - now;
    if (completion_queue_may_poll(&loop->completions)) uv_idle_stop(&loop->completion_more);
    else uv_idle_start(&loop->completion_more, take_next_iteration);
    /* the replies go out now: the poll may block, and the flush that follows it is the poll's */
    if (took) isn_grpc_server_flush(loop->grpc);
}

static void after_poll(uv_check_t *check) {
    serving_loop *loop = check->data;
    completion_queue_polled(&loop->completions);
}

static void on_completion_wake(uv_poll_t *poll, int status, int events) {
    (void)status;
    (void)events;
    serving_loop *loop = poll->data;
    completion_queue_clear_wake(&loop->completions);
    uint64_t began = isn_now_ns();
    rpc_take_completions(loop); /* their replies go out with the iteration's flush */
    loop->replies_ns += isn_now_ns() - began;
}

static int completion_wake_init(serving_loop *loop, char *err, size_t err_len) {
    if (completion_queue_init(&loop->completions, err, err_len) < 0) return -1;
    int rc = uv_poll_init(loop->loop, &loop->completion_wake, loop->completions.wake_fd);
    if (rc < 0) return isn_error(err, err_len, "cannot poll loop %u's wake-up eventfd: %s", loop->id, uv_strerror(rc));
    loop->completion_wake.data = loop;
    uv_poll_start(&loop->completion_wake, UV_READABLE, on_completion_wake);
    uv_prepare_init(loop->loop, &loop->completion_take);
    loop->completion_take.data = loop;
    uv_prepare_start(&loop->completion_take, take_before_poll);
    uv_idle_init(loop->loop, &loop->completion_more);
    uv_check_init(loop->loop, &loop->completion_polled);
    loop->completion_polled.data = loop;
    uv_check_start(&loop->completion_polled, after_poll);
    return 0;
}

/* ------------------------------------------------------------------ making and running them */

static uint32_t loops_wanted(const isn_conf *conf, uint32_t gpus) {
    if (conf->loops) return conf->loops;
    /* the CPUs the workers' default counts too: a container's quota or a taskset, not the host's */
    return isn_scheduler_default_loops(isn_cpus_available(), gpus);
}

static int loop_init(isn_server *server, serving_loop *loop, uint32_t id, const isn_grpc_server_config *isn_grpc_config,
                     char *err, size_t err_len) {
    loop->server = server;
    loop->id = id;
    loop->conf = server->conf;
    loop->random_state = 0x2545F4914F6CDD1Dull + id;
    loop->completions.wake_fd = -1;
    pthread_mutex_init(&loop->conf_lock, NULL);
    pthread_mutex_init(&loop->metrics_lock, NULL);
    if (id == 0) loop->loop = server->loop;
    else {
        int rc = uv_loop_init(&loop->own_loop);
        if (rc < 0) return isn_error(err, err_len, "cannot make event loop %u: %s", id, uv_strerror(rc));
        loop->loop = &loop->own_loop;
    }
    loop->grpc = isn_grpc_server_new(loop->loop, isn_grpc_config, &rpc_handlers, loop);
    if (!loop->grpc) return isn_error(err, err_len, "out of memory for the gRPC server");
    loop->watchers = isn_grpc_health_watchers_new(rpc_health_status, server);
    if (!loop->watchers) return isn_error(err, err_len, "out of memory for Health/Watch");
    if (completion_wake_init(loop, err, err_len) < 0) return -1;
    uv_async_init(loop->loop, &loop->control_async, on_control);
    loop->control_async.data = loop;
    deadline_timer_init(loop);
    stall_watch_init(loop);
    if (id && isn_grpc_server_add_peer(server->loops[0].grpc, loop->grpc) < 0)
        return isn_error(err, err_len, "out of memory for the gRPC server");
    return 0;
}

/* server.pin_loops: the first n CPUs of isnd's affinity mask go to the loops, one each, and the rest to the
 * workers. Too few CPUs for that is a configuration error, not a silent fallback to unpinned loops. */
static int split_cpus(isn_server *server, uint32_t n, char *err, size_t err_len) {
    uint32_t have = isn_this_thread_cpus(NULL, 0);
    if (have <= n)
        return isn_error(err, err_len,
                         "server.pin_loops needs a CPU for each of the %u event loops and at least one more for the "
                         "workers, and isnd may use %u (its affinity mask): lower server.loops or turn pin_loops off",
                         n, have);
    int *cpus = malloc(have * sizeof *cpus);
    if (!cpus || isn_this_thread_cpus(cpus, have) != have) {
        free(cpus);
        return isn_error(err, err_len, "server.pin_loops: cannot read isnd's CPUs (sched_getaffinity)");
    }
    server->loop_cpus = cpus;
    server->worker_cpus = cpus + n;
    server->num_worker_cpus = have - n;
    return 0;
}

int serving_loops_make(isn_server *server, char *err, size_t err_len) {
    const isn_conf *conf = &server->conf;
    server->gpus_expected = conf->loops && conf->workers ? 0 : gpu_setup_devices_expected(conf);
    uint32_t n = loops_wanted(conf, server->gpus_expected);
    if (conf->pin_loops && split_cpus(server, n, err, err_len) < 0) return -1;
    server->loops = calloc(n, sizeof *server->loops);
    if (!server->loops) return isn_error(err, err_len, "out of memory for %u serving loops", n);
    pthread_mutex_init(&server->acks_lock, NULL);
    pthread_cond_init(&server->acks_cond, NULL);
    isn_grpc_server_config isn_grpc_config;
    isn_grpc_stats_config stats_config;
    server_transport_config(server, &server->conf, &isn_grpc_config, &stats_config);
    for (uint32_t i = 0; i < n; i++) {
        server->num_loops = i + 1;
        if (loop_init(server, &server->loops[i], i, &isn_grpc_config, err, err_len) < 0) return -1;
    }
    return 0;
}

/* server.loop_realtime_priority, else server.loop_slice, on the calling loop's thread. A real-time
 * priority refused (no CAP_SYS_NICE nor RLIMIT_RTPRIO: a container's usual lot) is warned about, since it
 * was asked for, and the loop takes the slice instead. A kernel that refuses the slice (before 6.12:
 * Debian 12's, for one) is said once at info, not warned about: the default asks for it everywhere, and
 * the loops serve with the kernel's slice as they did before. */
static void take_loop_scheduling(uint32_t us, uint32_t realtime, uint32_t id) {
    char err[256];
    if (realtime) {
        if (isn_set_this_thread_realtime((int)realtime, err, sizeof err) == 0) {
            if (id == 0) log_info("event loops run SCHED_FIFO at priority %u (server.loop_realtime_priority)", realtime);
            return;
        }
        if (id == 0) log_warn("server.loop_realtime_priority = %u not applied, the loops stay in the normal policy: %s",
                              realtime, err);
    }
    if (!us) return;
    if (isn_set_this_thread_slice((uint64_t)us * 1000, err, sizeof err) < 0) {
        if (id == 0) log_info("server.loop_slice = %u us not applied, the loops keep the kernel's slice: %s", us, err);
    } else if (id == 0) {
        log_info("event loops run with a %u us scheduler slice (server.loop_slice)", us);
    }
}

/* The loop's own CPU (server.pin_loops), on the calling loop's thread. */
static void pin_loop(const isn_server *server, uint32_t id) {
    if (!server->loop_cpus) return;
    char err[200];
    if (isn_bind_this_thread(&server->loop_cpus[id], 1, err, sizeof err) < 0)
        log_warn("server.pin_loops: event loop %u runs on any CPU: %s", id, err);
}

static void *loop_thread(void *arg) {
    serving_loop *loop = arg;
    char name[16];
    snprintf(name, sizeof name, "isnd-loop-%u", loop->id);
    pthread_setname_np(pthread_self(), name);
    atomic_store(&loop->tid, gettid());
    pin_loop(loop->server, loop->id);
    take_loop_scheduling(loop->slice_us, loop->realtime_priority, loop->id);
    uv_run(loop->loop, UV_RUN_DEFAULT);
    return NULL;
}

int serving_loops_start(isn_server *server, char *err, size_t err_len) {
    for (uint32_t i = 1; i < server->num_loops; i++) {
        serving_loop *loop = &server->loops[i];
        loop->slice_us = server->conf.loop_slice_us;
        loop->realtime_priority = server->conf.loop_realtime_priority;
        int rc = pthread_create(&loop->thread, NULL, loop_thread, loop);
        if (rc) return isn_error(err, err_len, "cannot start the thread of event loop %u: %s", i, strerror(rc));
        loop->has_thread = true;
    }
    if (server->num_loops > 1 || !server->conf.loops) {
        log_info("%u event loops serve connections%s", server->num_loops,
                 server->conf.loops      ? ""
                 : server->gpus_expected ? " (server.loops = 0: half the CPUs the GPU dispatchers leave)"
                                         : " (server.loops = 0: one per four CPUs from 8 on)");
    }
    /* the first loop's is the main thread: after it has started the others */
    atomic_store(&server->loops[0].tid, gettid());
    take_loop_scheduling(server->conf.loop_slice_us, server->conf.loop_realtime_priority, 0);
    return 0;
}

/* "0,1,2" or, past what `text` holds, "0,1,...". */
static const char *cpu_list(const int *cpus, uint32_t n, char *text, size_t len) {
    size_t used = 0;
    uint32_t i = 0;
    text[0] = '\0';
    for (; i < n && used + 16 < len; i++) /* room for ",INT" and ",..." */
        used += (size_t)snprintf(text + used, len - used, "%s%d", i ? "," : "", cpus[i]);
    if (i < n) snprintf(text + used, len - used, ",...");
    return text;
}

void serving_loops_pin_first(isn_server *server) {
    if (!server->loop_cpus) return;
    pin_loop(server, 0);
    char loops[160], workers[160];
    log_info("event loops pinned (server.pin_loops): loops on CPUs %s, one each; workers on CPUs %s",
             cpu_list(server->loop_cpus, server->num_loops, loops, sizeof loops),
             cpu_list(server->worker_cpus, server->num_worker_cpus, workers, sizeof workers));
}

void serving_loops_free(isn_server *server) {
    for (uint32_t i = 0; i < server->num_loops; i++) {
        serving_loop *loop = &server->loops[i];
        if (loop->has_thread) pthread_join(loop->thread, NULL);
        isn_grpc_server_free(loop->grpc); /* abandoned calls: their on_release still uses the loop */
        generation_lease_tidy(&loop->generations, NULL); /* every call has returned its loan */
        deadline_timer_free(loop);
        isn_grpc_health_watchers_free(loop->watchers);
        if (loop->analyzer) isn_analyzer_free(loop->analyzer);
        if (i) uv_loop_close(&loop->own_loop);
        completion_queue_close(&loop->completions); /* the workers that wrote it are joined */
        pthread_mutex_destroy(&loop->conf_lock);
        pthread_mutex_destroy(&loop->metrics_lock);
    }
    free(server->loops);
    server->loops = NULL;
    server->num_loops = 0;
    free(server->loop_cpus); /* worker_cpus lies in it */
    server->loop_cpus = server->worker_cpus = NULL;
    server->num_worker_cpus = 0;
}

/* ------------------------------------------------------------------ sums for the stats endpoint */

void serving_loops_counters(const isn_server *server, isn_grpc_server_counters *sum) {
    memset(sum, 0, sizeof *sum);
    for (uint32_t i = 0; i < server->num_loops; i++)
        if (server->loops[i].grpc) isn_grpc_server_add_counters(server->loops[i].grpc, sum);
}

void serving_loops_metrics(isn_server *server, metrics *sum) {
    memset(sum, 0, sizeof *sum);
    for (uint32_t i = 0; i < server->num_loops; i++) {
        serving_loop *loop = &server->loops[i];
        pthread_mutex_lock(&loop->metrics_lock);
        metrics_add(sum, &loop->metrics);
        pthread_mutex_unlock(&loop->metrics_lock);
    }
}

uint32_t serving_loops_inflight(const isn_server *server) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < server->num_loops; i++)
        n += atomic_load_explicit(&server->loops[i].inflight_jobs, memory_order_relaxed);
    return n;
}

uint32_t serving_loops_idle(void *server) {
    isn_server *node = server;
    uint32_t n = 0;
    for (uint32_t i = 0; i < node->num_loops; i++) n += completion_queue_loop_idle(&node->loops[i].completions);
    return n;
}

bool serving_loop_idle(void *server, uint32_t loop) {
    isn_server *node = server;
    return loop < node->num_loops && completion_queue_loop_idle(&node->loops[loop].completions);
}

uint32_t serving_loops_open_calls(const isn_server *server) {
    isn_grpc_server_counters sum;
    serving_loops_counters(server, &sum);
    return sum.open_calls;
}
