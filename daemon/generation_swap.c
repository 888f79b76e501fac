/* isnd's index generations: which one serves, and the swap to the next. A swap starts on SIGHUP
 * (index.path names another index) or when a symlinked index.path points elsewhere (a change event
 * in the link's directory, or the periodic check of index.watch_interval). The next generation is
 * opened, fully verified, paged in and warmed on libuv's thread pool while the current one serves;
 * then it is published for new requests, and the old one is freed by its last request. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "daemon/generation.h"
#include "daemon/rankers.h"
#include "daemon/server.h"

/* Where index.path leads: the directory (symlinks resolved) and its index file's identity, so that
 * a link flip or an index.isn renamed into place is seen without opening anything. */
typedef struct {
    bool valid;
    char dir[PATH_MAX];
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} index_identity;

struct generation_state {
    isn_server *server;
    generation_slot slot;
    index_identity served, refused;
    /* the swap in progress (one at a time; a trigger meanwhile checks again when it ends) */
    uv_work_t work;
    bool loading, check_again, again_on_sighup;
    const char *why;
    char path[ISN_CONF_PATH_MAX];
    search_service_params params;
    isn_conf conf; /* as at the trigger: the GPU set-up of the next generation reads it */
    search_service *service;
    uv_work_t gpu_work; /* the GPU first stage's move, after the switch */
    /* a pool thread works with the search service: the stop waits for it before the service goes */
    atomic_bool using_service, stopping;
    index_identity loading_identity;
    index_generation *loaded;
    char error[2048];
    uint64_t started_ns;
    /* watching a symlinked index.path */
    bool watching;
    char watched_dir[PATH_MAX];
    uv_fs_event_t dir_event;
    uv_timer_t poll;
    bool handles_open;
    /* what /metrics and /stats show */
    uint64_t swaps_ok, swaps_refused;
    histogram swap_seconds;
    double last_swap_seconds;
    atomic_uint retired; /* replaced, still held by requests in flight */
    /* generations whose last request ended, to be freed on the thread pool (reaped) */
    _Atomic(index_generation *) reap_list;
    uv_async_t reap_async;
    atomic_bool reap_open;
    uint32_t reaping; /* free jobs queued */
    char last_refusal[2048];
};

static bool identity_of(const char *path, index_identity *identity) {
    memset(identity, 0, sizeof *identity);
    if (!realpath(path, identity->dir)) return false;
    char file[PATH_MAX + sizeof ISN_INDEX_FILE + 1];
    snprintf(file, sizeof file, "%s/%s", identity->dir, ISN_INDEX_FILE);
    struct stat st;
    if (stat(file, &st) != 0) return false;
    identity->dev = st.st_dev;
    identity->ino = st.st_ino;
    identity->size = st.st_size;
    identity->mtime = st.st_mtim;
    identity->valid = true;
    return true;
}

static bool identity_equal(const index_identity *a, const index_identity *b) {
    return a->valid && b->valid && !strcmp(a->dir, b->dir) && a->dev == b->dev && a->ino == b->ino &&
           a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static void format_time(uint64_t unix_seconds, char *out, size_t len) {
    time_t t = (time_t)unix_seconds;
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm)) snprintf(out, len, "%llu", (unsigned long long)unix_seconds);
}

static void on_reap(uv_async_t *async);

generation_state *generations_new(isn_server *server) {
    generation_state *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->server = server;
    generation_slot_init(&g->slot);
    atomic_init(&g->retired, 0);
    atomic_init(&g->reap_list, NULL);
    if (uv_async_init(server->loop, &g->reap_async, on_reap) < 0) {
        free(g);
        return NULL;
    }
    g->reap_async.data = g;
    g->reap_open = true;
    return g;
}

index_generation *generations_acquire(isn_server *server) { return generation_slot_acquire(&server->generations->slot); }

generation_slot *generations_slot(isn_server *server) { return server->generations ? &server->generations->slot : NULL; }

/* Thread pool (or the loop thread at exit). */
static void on_generation_freed(void *user, const char *id, uint64_t built, double seconds) {
    generation_state *g = user;
    atomic_fetch_sub(&g->retired, 1);
    char when[32];
    format_time(built, when, sizeof when);
    log_info("index generation %s (built %s): its last request ended; unmapped and freed in %.3f s", id, when, seconds);
}

/* Any thread: the generation's last release. Freed off the loop (the async's callback queues it). */
static void reap(void *user, index_generation *generation) {
    generation_state *g = user;
    index_generation *head = atomic_load_explicit(&g->reap_list, memory_order_relaxed);
    do generation->reap_next = head;
    while (!atomic_compare_exchange_weak_explicit(&g->reap_list, &head, generation, memory_order_release,
                                                  memory_order_relaxed));
    if (g->reap_open) uv_async_send(&g->reap_async);
}

typedef struct {
    uv_work_t work;
    generation_state *state;
    index_generation *list;
} reap_job;

static void free_list(index_generation *list) {
    while (list) {
        index_generation *next = list->reap_next;
        generation_free(list);
        list = next;
    }
}

static void reap_work(uv_work_t *work) { free_list(((reap_job *)work->data)->list); }

static void reap_done(uv_work_t *work, int status) {
    reap_job *job = work->data;
    if (status < 0) free_list(job->list); /* cancelled at exit: freed here */
    job->state->reaping--;
    free(job);
}

static void on_reap(uv_async_t *async) {
    generation_state *g = async->data;
    index_generation *list = atomic_exchange_explicit(&g->reap_list, NULL, memory_order_acquire);
    if (!list) return;
    reap_job *job = malloc(sizeof *job);
    if (job) {
        *job = (reap_job){.state = g, .list = list};
        job->work.data = job;
        if (uv_queue_work(g->server->loop, &job->work, reap_work, reap_done) == 0) {
            g->reaping++;
            return;
        }
        free(job);
    }
    free_list(list); /* no thread pool: here, late rather than never */
}

/* The server's shortcuts (metrics, rankers) follow the generation new requests get. */
static void point_server_at(isn_server *server, index_generation *generation) {
    server->index = generation->index;
    server->info = generation->info;
}

/* ------------------------------------------------------------------ watching a symlinked index.path */

static void on_dir_event(uv_fs_event_t *handle, const char *filename, int events, int status) {
    (void)filename, (void)events, (void)status;
    generation_state *g = handle->data;
    generations_check(g->server, "watch");
}

static void on_poll(uv_timer_t *timer) {
    generation_state *g = timer->data;
    generations_check(g->server, "watch");
}

static void stop_watching(generation_state *g) {
    if (!g->watching) return;
    uv_fs_event_stop(&g->dir_event);
    uv_timer_stop(&g->poll);
    g->watching = false;
}

/* Watches index.path's directory when index.path is a symbolic link (and stops otherwise). */
static void watch_index_path(generation_state *g) {
    isn_server *server = g->server;
    stop_watching(g);
    struct stat st;
    if (lstat(server->conf.index_path, &st) != 0 || !S_ISLNK(st.st_mode)) return;
    if (!g->handles_open) {
        uv_fs_event_init(server->loop, &g->dir_event);
        uv_timer_init(server->loop, &g->poll);
        g->dir_event.data = g->poll.data = g;
        g->handles_open = true;
    }
    char copy[ISN_CONF_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", server->conf.index_path);
    snprintf(g->watched_dir, sizeof g->watched_dir, "%s", dirname(copy));
    int rc = uv_fs_event_start(&g->dir_event, on_dir_event, g->watched_dir, 0);
    if (rc < 0) log_warn("index.path %s is a symbolic link, but its directory %s cannot be watched (%s): checking every %u ms only",
                         server->conf.index_path, g->watched_dir, uv_strerror(rc), server->conf.index_watch_interval_ms);
    uint32_t every = server->conf.index_watch_interval_ms;
    if (every) uv_timer_start(&g->poll, on_poll, every, every);
    g->watching = true;
    log_info("index.path %s is a symbolic link: watching %s%s, swapping when it points elsewhere", server->conf.index_path,
             g->watched_dir, every ? " and checking it periodically" : "");
}

/* ------------------------------------------------------------------ the swap */

/* Opening the next generation (verification above all) is background work beside the workers that
 * serve: it runs on a lowered thread of its own, which its verify threads inherit. The pool thread
 * keeps its priority for the GPU set-up that follows, which starts threads that serve (a backend's CPU
 * crew) and lowers its own background work (base.h: isn_run_lowered). */
static void open_next(void *arg) {
    generation_state *g = arg;
    index_generation *next = generation_open(g->path, true, g->error, sizeof g->error);
    if (next && generation_add_workers(next, &g->params, g->error, sizeof g->error) < 0) {
        generation_release(next);
        next = NULL;
    }
    g->loaded = next;
}

static void load_next(uv_work_t *work) {
    generation_state *g = work->data;
    g->loaded = NULL;
    g->error[0] = '\0';
    identity_of(g->path, &g->loading_identity);
    isn_run_lowered(open_next, g);
    index_generation *next = g->loaded;
    atomic_store(&g->using_service, true);
    if (next && !atomic_load(&g->stopping))
        search_service_gpu_stage(g->service, &g->conf, next); /* its residency before the switch */
    atomic_store(&g->using_service, false);
}

static void log_swapped(generation_state *g, index_generation *next, index_generation *old, double seconds) {
    char built[32];
    format_time(next->info->built_unix_seconds, built, sizeof built);
    log_info("%s: index generation %s (built %s%s, %u documents, from %s) serves new requests after %.3f s "
             "(opened, verified, paged in and warmed in %.3f s); generation %s retires when its requests in flight end",
             g->why, next->id, built, next->info->built_from_mtime ? ": the file's mtime, the index predates build times" : "",
             next->info->num_docs, next->dir, seconds, next->open_seconds, old ? old->id : "-");
}

static void finish_swap(generation_state *g);

static void move_gpu(uv_work_t *work) {
    generation_state *g = work->data;
    atomic_store(&g->using_service, true);
    if (!atomic_load(&g->stopping)) search_service_gpu_move(g->service, &g->conf, g->loaded);
    atomic_store(&g->using_service, false);
}

static void on_gpu_moved(uv_work_t *work, int status) {
    (void)status;
    generation_state *g = work->data;
    generation_release(g->loaded);
    g->loaded = NULL;
    finish_swap(g);
}

/* The swap is over (the GPU's move included): a trigger that came meanwhile checks again. */
static void finish_swap(generation_state *g) {
    g->loading = false;
    if (g->check_again && g->server->state == SERVER_READY) {
        g->check_again = false;
        generations_check(g->server, g->again_on_sighup ? "SIGHUP" : "watch");
    }
}

static void on_loaded_next(uv_work_t *work, int status) {
    generation_state *g = work->data;
    isn_server *server = g->server;
    index_generation *next = g->loaded;
    g->loaded = NULL;
    if (server->state != SERVER_READY) { /* draining or stopped meanwhile: nothing to swap to */
        generation_release(next);
        g->loading = false;
        return;
    }
    double seconds = (double)(isn_now_ns() - g->started_ns) / 1e9;
    if (status < 0 || !next) {
        g->swaps_refused++;
        g->refused = g->loading_identity;
        snprintf(g->last_refusal, sizeof g->last_refusal, "%s", status < 0 ? uv_strerror(status) : g->error);
        index_generation *current = generation_slot_acquire(&g->slot);
        log_error("%s: index generation refused: %s; generation %s keeps serving", g->why, g->last_refusal,
                  current ? current->id : "-");
        generation_release(current);
    } else {
        g->swaps_ok++;
        g->last_swap_seconds = seconds;
        histogram_observe(&g->swap_seconds, seconds);
        g->served = g->loading_identity;
        generation_on_freed(next, on_generation_freed, reap, g);
        atomic_fetch_add(&g->retired, 1);
        index_generation *old = generation_slot_publish(&g->slot, next);
        point_server_at(server, next);
        if (rankers_set_index(next->info) > 0) LOOP_METRICS(&server->loops[0], m->reload_failures++);
        log_swapped(g, next, old, seconds);
        generation_release(old);
        serving_loops_tell(server, LOOP_GENERATION_SWAPPED); /* loops idle since keep the old one lent */
        if (search_service_has_gpu(server->pool) && !search_service_gpu_holds(server->pool, next)) {
            log_info("%s: generation %s's queries run on the CPU workers until the GPU first stage has moved to it",
                     g->why, next->id);
            g->loaded = generation_acquire(next);
            g->gpu_work.data = g;
            if (uv_queue_work(server->loop, &g->gpu_work, move_gpu, on_gpu_moved) == 0) return; /* still loading */
            generation_release(g->loaded);
            g->loaded = NULL;
            log_error("%s: cannot start the GPU's move to generation %s: its queries stay on the CPU", g->why, next->id);
        }
    }
    finish_swap(g);
}

void generations_check(isn_server *server, const char *why) {
    generation_state *g = server->generations;
    if (!g || server->state != SERVER_READY || !server->pool) return;
    bool sighup = strcmp(why, "watch") != 0;
    if (sighup) watch_index_path(g); /* index.path may have become a link, or another one */
    if (g->loading) {
        g->check_again = true;
        g->again_on_sighup |= sighup;
        return;
    }
    index_identity now;
    bool found = identity_of(server->conf.index_path, &now);
    if (found && identity_equal(&now, &g->served)) {
        if (sighup) log_info("%s: index.path %s still names the serving generation's index (%s): no swap", why,
                             server->conf.index_path, now.dir);
        return;
    }
    /* A target already refused is tried again when it changes or on SIGHUP, not at every check. */
    if (!sighup && (!found || identity_equal(&now, &g->refused))) return;
    snprintf(g->path, sizeof g->path, "%s", server->conf.index_path);
    g->why = sighup ? "SIGHUP" : "index.path watch";
    g->again_on_sighup = false;
    search_service_params_of(server->pool, &g->params);
    g->conf = server->conf;
    g->service = server->pool;
    g->started_ns = isn_now_ns();
    g->work.data = g;
    int rc = uv_queue_work(server->loop, &g->work, load_next, on_loaded_next);
    if (rc < 0) {
        g->swaps_refused++;
        log_error("%s: cannot load index %s: %s", g->why, g->path, uv_strerror(rc));
        return;
    }
    g->loading = true;
    log_info("%s: loading index generation from %s (%s) while the current one serves", g->why, g->path,
             found ? now.dir : "not found yet");
}

/* ------------------------------------------------------------------ start and stop */

index_generation *generations_open_first(isn_server *server, char *err, size_t err_len) {
    generation_state *g = server->generations;
    identity_of(server->conf.index_path, &g->served);
    g->loaded = generation_open(server->conf.index_path, false, err, err_len);
    if (g->loaded) point_server_at(server, g->loaded);
    return g->loaded;
}

void generations_serve_first(isn_server *server) {
    generation_state *g = server->generations;
    index_generation *first = g->loaded;
    g->loaded = NULL;
    generation_on_freed(first, on_generation_freed, reap, g);
    atomic_fetch_add(&g->retired, 1); /* balanced when it is freed; counts as serving below */
    generation_release(generation_slot_publish(&g->slot, first));
    point_server_at(server, first);
    char built[32];
    format_time(first->info->built_unix_seconds, built, sizeof built);
    log_info("index generation %s (built %s%s) from %s", first->id, built,
             first->info->built_from_mtime ? ": the file's mtime, the index predates build times" : "", first->dir);
    watch_index_path(g);
}

void generations_upload_gpu(isn_server *server) {
    generation_state *g = server->generations;
    if (!search_service_gpu_uploading(server->pool)) return;
    index_generation *first = generation_slot_acquire(&g->slot);
    if (!first) return;
    /* The GPU's first upload runs as a swap's move does, so a swap asked for meanwhile waits for it. */
    g->why = "start";
    g->conf = server->conf;
    g->service = server->pool;
    g->loaded = first;
    g->gpu_work.data = g;
    g->loading = true;
    log_info("gpu: uploading generation %s to the GPU first stage while the CPU workers serve", first->id);
    if (uv_queue_work(server->loop, &g->gpu_work, move_gpu, on_gpu_moved) == 0) return;
    g->loading = false;
    g->loaded = NULL;
    log_error("gpu: cannot start the upload of generation %s: every query runs on the CPU", first->id);
    generation_release(first);
}

void generations_stop(isn_server *server) {
    generation_state *g = server->generations;
    if (!g) return;
    atomic_store(&g->stopping, true);
    while (atomic_load(&g->using_service)) { /* a GPU upload in progress: seconds at most */
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    stop_watching(g);
    if (g->reap_open) {
        g->reap_open = false; /* what is released from now on is freed after the loop (generations_free) */
        uv_close((uv_handle_t *)&g->reap_async, NULL);
    }
    if (g->handles_open) {
        uv_close((uv_handle_t *)&g->dir_event, NULL);
        uv_close((uv_handle_t *)&g->poll, NULL);
        g->handles_open = false;
    }
}

void generations_free(isn_server *server) {
    generation_state *g = server->generations;
    if (!g) return;
    server->index = NULL;
    server->info = NULL;
    generation_release(g->loaded); /* the first, when the service never started on it */
    generation_slot_destroy(&g->slot);
    free_list(atomic_exchange(&g->reap_list, NULL));
    free(g);
    server->generations = NULL;
}

/* ------------------------------------------------------------------ metrics */

/* Generations replaced but still held by requests in flight (the serving one is not counted). */
static unsigned retired_in_flight(const generation_state *g) {
    unsigned held = atomic_load(&((generation_state *)g)->retired);
    return held ? held - 1 : 0;
}

void generations_render_prometheus(const isn_server *server, byte_buffer *out) {
    const generation_state *g = server->generations;
    if (!g) return;
    index_generation *current = generation_slot_acquire((generation_slot *)&g->slot);
    prom_family(out, "isn_index_generation_info", "gauge",
                "The index generation new requests get: content hash and build time (value 1).");
    if (current) {
        char built[32];
        format_time(current->info->built_unix_seconds, built, sizeof built);
        buffer_printf(out, "isn_index_generation_info{generation=\"%s\",built=\"%s\",built_from_mtime=\"%s\"} 1\n",
                      current->id, built, current->info->built_from_mtime ? "true" : "false");
    }
    generation_release(current);
    prom_family(out, "isn_index_swaps_total", "counter", "Index generation swaps, by result (refused: a check failed).");
    buffer_printf(out, "isn_index_swaps_total{result=\"ok\"} %llu\n", (unsigned long long)g->swaps_ok);
    buffer_printf(out, "isn_index_swaps_total{result=\"refused\"} %llu\n", (unsigned long long)g->swaps_refused);
    prom_family(out, "isn_index_swap_duration_seconds", "histogram",
                "From the trigger to the new generation serving: open, verify, page in, warm up.");
    prom_histogram(out, "isn_index_swap_duration_seconds", "", &g->swap_seconds);
    prom_u64(out, "isn_index_generations_retiring", "gauge",
             "Replaced generations still mapped for requests in flight.", retired_in_flight(g));
    prom_u64(out, "isn_index_swap_in_progress", "gauge", "1 while a new generation loads.", g->loading);
}

void generations_render_json(const isn_server *server, byte_buffer *out) {
    const generation_state *g = server->generations;
    if (!g) return;
    index_generation *current = generation_slot_acquire((generation_slot *)&g->slot);
    char built[32] = "";
    if (current) format_time(current->info->built_unix_seconds, built, sizeof built);
    buffer_printf(out,
                  "\"generation\":{\"id\":\"%s\",\"built\":\"%s\",\"built_unix\":%llu,\"built_from_mtime\":%s,"
                  "\"dir\":\"%s\",\"swaps_ok\":%llu,\"swaps_refused\":%llu,\"last_swap_seconds\":%.6f,"
                  "\"retiring\":%u,\"loading\":%s}",
                  current ? current->id : "", built,
                  (unsigned long long)(current ? current->info->built_unix_seconds : 0),
                  current && current->info->built_from_mtime ? "true" : "false", current ? current->dir : "",
                  (unsigned long long)g->swaps_ok, (unsigned long long)g->swaps_refused, g->last_swap_seconds,
                  retired_in_flight(g), g->loading ? "true" : "false");
    generation_release(current);
}
