/* The GPU set-up of isnd: the [gpu] first-stage backend (training log, upload, warm-up) and the
 * second stage's model cache. The search service hands what opens here to the scheduler. */
#include "daemon/gpu_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "base/base.h"
#include "daemon/search_job.h"

#define TRAINING_MAX_QUERIES 100000u

/* The [gpu] training log's queries (TSV "id<TAB>query", or a query per line: base's query-log reader
 * takes only the former), analysed as requests are. Only needed while the backend opens. 0, or -1
 * with err. */
static int load_training_log(isn_searcher *planner, const char *path, isn_query **queries, uint32_t *count, char *err,
                             size_t err_len) {
    *queries = NULL;
    *count = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len, "gpu.training_queries %s: cannot open: %m", path);
        return -1;
    }
    size_t terms_cap = 0, terms_len = 0, cap = 0;
    isn_query_term *terms = NULL;
    isn_query *list = NULL;
    char *line = NULL, why[ISN_ERR_LEN];
    size_t line_cap = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && *count < TRAINING_MAX_QUERIES && (len = getline(&line, &line_cap, f)) > 0) {
        char *text = memchr(line, '\t', (size_t)len);
        text = text ? text + 1 : line;
        isn_query q;
        if (isn_query_parse(planner, text, (size_t)(line + len - text), &q, why, sizeof why) < 0 ||
            q.num_terms == 0)
            continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 1024;
            isn_query *grown = realloc(list, cap * sizeof *list);
            if (!grown) rc = -1;
            else list = grown;
        }
        if (rc == 0 && terms_len + q.num_terms > terms_cap) {
            terms_cap = 2 * (terms_len + q.num_terms) + 4096;
            isn_query_term *grown = realloc(terms, terms_cap * sizeof *terms);
            if (!grown) rc = -1;
            else terms = grown;
        }
        if (rc != 0) break;
        memcpy(terms + terms_len, q.terms, q.num_terms * sizeof *q.terms);
        list[*count] = q;
        list[*count].terms = (isn_query_term *)(uintptr_t)terms_len; /* an offset until terms stop moving */
        terms_len += q.num_terms;
        (*count)++;
    }
    free(line);
    fclose(f);
    if (rc != 0) {
        snprintf(err, err_len, "gpu.training_queries %s: out of memory", path);
        free(list);
        free(terms);
        *count = 0;
        return -1;
    }
    for (uint32_t i = 0; i < *count; i++) list[i].terms = terms + (uintptr_t)list[i].terms;
    *queries = list;
    return 0;
}

static void free_training_log(isn_query *queries, uint32_t count) {
    if (queries && count) free(queries[0].terms);
    free(queries);
}

static char unusable[600]; /* why the last set-up opened no device ("" = it opened one, or was not asked) */

const char *gpu_setup_unusable(void) { return unusable; }

/* What [gpu] asks for that cannot work whatever the devices: 0, or -1 with err. */
static int check_gpu_conf(const isn_conf *conf, char *err, size_t err_len) {
    if (conf->gpu_sim_devices) {
        snprintf(err, err_len, "gpu.enable and scheduler.simulated_gpus_answer_without_hits are exclusive: "
                               "pick the real GPU or the simulator");
        return -1;
    }
    if (conf->gpu_devices == 0 || conf->gpu_devices > ISN_SCHED_MAX_GPUS) {
        snprintf(err, err_len, "gpu.devices must be 1..%d, got %u", ISN_SCHED_MAX_GPUS, conf->gpu_devices);
        return -1;
    }
    return 0;
}

uint32_t gpu_setup_devices_expected(const isn_conf *conf) {
    if (!conf->gpu_enable) return conf->gpu_sim_devices;
    uint32_t present = conf->gpu_devices;
    if (!conf->gpu_emulate) {
        char why[256];
        int count = isn_gpu_device_count(why, sizeof why);
        uint32_t beyond = count > (int)conf->gpu_device ? (uint32_t)count - conf->gpu_device : 0;
        if (beyond < present) present = beyond;
    }
    return present + conf->gpu_sim_devices;
}

/* Whether the device's cache reads gpu.training_queries: the tier needs no log. */
static bool reads_training_log(const isn_conf *conf) {
    return conf->gpu_training_queries[0] && conf->gpu_cache != ISN_CONF_GPU_CACHE_TIER;
}

int gpu_setup_first_stage(const isn_index *index, const isn_conf *conf, isn_searcher *planner, const int *cpus,
                          uint32_t num_cpus, isn_gpu_backend **backends, uint32_t *num_backends, char *err, size_t err_len) {
    *num_backends = 0;
    if (!conf->gpu_enable) return 0;
    if (check_gpu_conf(conf, err, err_len) < 0) return -1;
    isn_gpu_options options;
    isn_gpu_options_default(&options);
    options.emulate = conf->gpu_emulate;
    options.memory_budget = (uint64_t)conf->gpu_memory_budget_mib << 20;
    options.stream_bytes = (uint64_t)conf->gpu_stream_mib << 20;
    options.max_batch = conf->gpu_max_batch;
    options.max_k = conf->gpu_max_k;
    options.streams = conf->gpu_streams;
    options.cpu_threads = conf->gpu_cpu_threads;
    options.pruning = (int)conf->gpu_pruning;
    switch (conf->gpu_cache) {
    case ISN_CONF_GPU_CACHE_WHOLE:
        options.admission = ISN_GPU_ADMIT_CAPPED;
        options.prefix_cap = 1.0;
        break;
    case ISN_CONF_GPU_CACHE_PRUNED: options.admission = ISN_GPU_ADMIT_PREFIXES; break;
    case ISN_CONF_GPU_CACHE_TIER: options.admission = ISN_GPU_ADMIT_TIER; break;
    default: options.admission = ISN_GPU_ADMIT_AUTO; break;
    }
    /* the pruned cache replays its training log as the tier searches: with the prior, whose settle points are
     * far shallower than BM25's alone */
    options.training_prior_weight = conf->prior_weight;
    options.cpus = cpus;
    options.num_cpus = num_cpus;
    isn_query *training = NULL;
    uint32_t num_training = 0;
    if (reads_training_log(conf)) {
        if (load_training_log(planner, conf->gpu_training_queries, &training, &num_training, err, err_len) < 0)
            return -1;
        options.training_queries = training;
        options.num_training_queries = num_training;
    } else if (conf->gpu_training_queries[0]) {
        log_info("gpu: gpu.training_queries %s is not read: gpu.cache = tier needs no log", conf->gpu_training_queries);
    }
    for (uint32_t d = 0; d < conf->gpu_devices; d++) {
        char why[512];
        uint64_t start = isn_now_ns();
        options.device = (int)(conf->gpu_device + d);
        isn_gpu_backend *backend = isn_gpu_open(index, &options, why, sizeof why);
        if (!backend) {
            log_warn("gpu: no GPU first stage on device %d: %s", options.device, why);
            snprintf(unusable, sizeof unusable, "device %d: %.500s", options.device, why);
            continue;
        }
        isn_gpu_health health; /* no batch runs yet: read directly */
        isn_gpu_health_get(backend, &health);
        log_info("gpu: device %d, %s%s ready in %.3f s (layout %.3f s, upload %.3f s, warm-up %.1f ms): %u of %u lists "
                 "resident (%u as prefixes), %.1f of %.1f MB%s",
                 options.device, health.device_name, conf->gpu_emulate ? " (EMULATED on the host: tests only)" : "",
                 (double)(isn_now_ns() - start) / 1e9, health.layout_ms / 1e3, health.upload_ms / 1e3, health.warmup_ms,
                 health.terms_resident + health.terms_prefix, health.terms_total, health.terms_prefix,
                 (double)health.bytes_resident / 1e6,
                 (double)health.index_bytes / 1e6, conf->gpu_route_all ? "; route_all: every eligible query to the GPU" : "");
        backends[(*num_backends)++] = backend;
    }
    free_training_log(training, num_training);
    if (*num_backends == 0)
        log_error("gpu: gpu.enable = true but no device can be used (%s): serving on the CPU only; /readyz says "
                  "degraded and isn_gpu_up is 0", unusable);
    else
        unusable[0] = '\0';
    if (*num_backends > 1) log_info("gpu: %u devices, each with the whole partition, a dispatcher each", *num_backends);
    return 0;
}

isn_gpu_l2 *gpu_setup_second_stage(const isn_conf *conf) {
    if (!conf->gpu_enable || !conf->gpu_rerank || conf->gpu_emulate) return NULL;
    isn_gpu_l2_options options;
    isn_gpu_l2_options_default(&options);
    options.device = (int)conf->gpu_device;
    options.model_memory_budget = conf->gpu_model_memory_bytes;
    char why[512];
    isn_gpu_l2 *l2 = isn_gpu_l2_open(&options, why, sizeof why);
    if (!l2) {
        log_warn("gpu: second stage on the CPU only: %s", why);
        return NULL;
    }
    log_info("gpu: second stage may run on the GPU (model cache %u MiB), one pass a call where it measures "
             "faster than the CPU",
             conf->gpu_model_memory_bytes >> 20);
    return l2;
}

int gpu_first_stage_open(gpu_first_stage *gpu, index_generation *first, const isn_conf *conf, isn_searcher *planner,
                         const int *cpus, uint32_t num_cpus, char *err, size_t err_len) {
    memset(gpu, 0, sizeof *gpu);
    if (cpus && num_cpus) {
        if (!(gpu->cpus = malloc(num_cpus * sizeof *cpus))) return isn_error(err, err_len, "out of memory for a CPU list");
        memcpy(gpu->cpus, cpus, num_cpus * sizeof *cpus);
        gpu->num_cpus = num_cpus;
    }
    if (conf->gpu_enable && !conf->gpu_upload_before_ready) {
        /* The devices get their backends from gpu_first_stage_move once the node serves on the CPU; what
         * would fail there whatever the device (the configuration, the training log) fails here. */
        if (check_gpu_conf(conf, err, err_len) < 0) return -1;
        if (reads_training_log(conf)) {
            isn_query *training = NULL;
            uint32_t num_training = 0;
            if (load_training_log(planner, conf->gpu_training_queries, &training, &num_training, err, err_len) < 0)
                return -1;
            free_training_log(training, num_training);
        }
        gpu->num_backends = conf->gpu_devices;
        atomic_store(&gpu->uploading, true);
        if (gpu->num_backends > 1)
            log_info("gpu: %u devices, each with the whole partition, a dispatcher each", gpu->num_backends);
    } else {
        if (gpu_setup_first_stage(first->index, conf, planner, gpu->cpus, gpu->num_cpus, gpu->backends,
                                  &gpu->num_backends, err, err_len) < 0)
            return -1;
        atomic_store(&gpu->attached, gpu->num_backends);
        /* The backends hold this generation's postings: it stays mapped while they serve it. */
        if (gpu->num_backends) gpu->generation = generation_acquire(first);
    }
    for (uint32_t d = 0; d < gpu->num_backends; d++)
        if (!(gpu->packers[d] = search_worker_new(first->index, UINT32_MAX, conf->gpu_max_k))) {
            snprintf(err, err_len, "out of memory for GPU device %u", d);
            return -1;
        }
    return 0;
}

/* By content: a generation with the same content hash (a swap back to the index the GPU holds) has
 * the same term and document ids, so the device answers its queries exactly. */
bool gpu_first_stage_holds(const gpu_first_stage *gpu, const index_generation *generation) {
    return gpu->generation && (gpu->generation == generation || !strcmp(gpu->generation->id, generation->id));
}

static bool enter_now(gpu_first_stage *gpu, const index_generation *generation) {
    /* counted first, then the move checked: a mover that set `moving` waits for this job */
    atomic_fetch_add(&gpu->jobs, 1);
    if (!atomic_load(&gpu->moving) && gpu_first_stage_holds(gpu, generation)) return true;
    gpu_first_stage_leave(gpu);
    return false;
}

bool gpu_first_stage_enter(gpu_first_stage *gpu, const index_generation *generation, uint64_t wait_until_ns) {
    if (enter_now(gpu, generation)) return true;
    if (!wait_until_ns || atomic_load(&gpu->awaited) != generation) return false;
    /* not counted while it waits: the move drains the jobs of the generation it leaves */
    while (atomic_load(&gpu->awaited) == generation && isn_now_ns() < wait_until_ns) {
        struct timespec pause = {0, 100000};
        nanosleep(&pause, NULL);
    }
    return enter_now(gpu, generation);
}

void gpu_first_stage_leave(gpu_first_stage *gpu) { atomic_fetch_sub(&gpu->jobs, 1); }

void gpu_first_stage_close(gpu_first_stage *gpu) {
    for (uint32_t d = 0; d < gpu->num_staged; d++) isn_gpu_close(gpu->staged[d]);
    for (uint32_t d = 0; d < gpu->num_backends; d++) {
        isn_gpu_close(gpu->backends[d]);
        search_worker_free(gpu->packers[d]);
    }
    generation_release(gpu->generation);
    free(gpu->cpus);
    memset(gpu, 0, sizeof *gpu);
}

/* ------------------------------------------------------------------ the first stage's generation */

int gpu_first_stage_stage(gpu_first_stage *gpu, const isn_conf *conf, index_generation *next) {
    if (!gpu->num_backends || !atomic_load(&gpu->attached) || gpu_first_stage_holds(gpu, next)) return 0;
    isn_searcher *planner = isn_searcher_new(next->index);
    char err[512];
    uint32_t n = 0;
    if (!planner ||
        gpu_setup_first_stage(next->index, conf, planner, gpu->cpus, gpu->num_cpus, gpu->staged, &n, err, sizeof err) < 0)
        n = 0;
    isn_searcher_free(planner);
    if (n == gpu->num_backends) {
        gpu->num_staged = n;
        atomic_store(&gpu->awaited, next);
        return 1;
    }
    for (uint32_t d = 0; d < n; d++) isn_gpu_close(gpu->staged[d]);
    log_warn("gpu: %u of %u devices could hold generation %s beside the one they serve: every device frees its "
             "residency before uploading the new one, and the node answers on the CPU workers meanwhile (/readyz "
             "degraded, isn_gpu_healthy 0)",
             n, gpu->num_backends, next->id);
    return 0;
}

/* A device's residency replaced by the next generation's when it could not hold both: freed first,
 * then uploaded (the device has no backend in between). */
static isn_gpu_backend *reload_device(const gpu_first_stage *gpu, isn_scheduler *scheduler, const isn_conf *conf,
                                      index_generation *next, uint32_t d) {
    isn_gpu_close(isn_scheduler_gpu_replace(scheduler, d, NULL));
    isn_conf one = *conf;
    one.gpu_device = conf->gpu_device + d;
    one.gpu_devices = 1;
    isn_searcher *planner = isn_searcher_new(next->index);
    isn_gpu_backend *backend = NULL;
    uint32_t n = 0;
    char err[512];
    if (planner &&
        gpu_setup_first_stage(next->index, &one, planner, gpu->cpus, gpu->num_cpus, &backend, &n, err, sizeof err) == 0 &&
        n == 1)
        isn_scheduler_gpu_replace(scheduler, d, backend);
    else {
        backend = NULL;
        log_error("gpu: device %u cannot upload generation %s: it stays without a first stage (queries on the CPU)",
                  one.gpu_device, next->id);
    }
    isn_searcher_free(planner);
    return backend;
}

/* ISN_GPU_MOVE_PAUSE_MS (tests): the move's window held open that long, so that a test sees where the
 * queries that arrive meanwhile go. */
static void hold_move_open(void) {
    const char *value = getenv("ISN_GPU_MOVE_PAUSE_MS");
    long ms = value ? strtol(value, NULL, 10) : 0;
    if (ms <= 0 || ms > 10000) return;
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

void gpu_first_stage_move(gpu_first_stage *gpu, isn_scheduler *scheduler, const isn_conf *conf, index_generation *next) {
    if (!gpu->num_backends || gpu_first_stage_holds(gpu, next)) return;
    if (!atomic_load(&gpu->attached) && !atomic_load(&gpu->uploading)) return; /* no device could be used */
    /* While `moving`, no query enters the GPU: the next generation's wait for the move when it was
     * staged (`awaited`), else go to the CPU workers, which on a large partition answer a small share
     * of the GPU's rate. So what can be done outside that window is: the packers made before, the
     * replaced backends closed (their device memory freed) after. */
    search_worker *packers[ISN_SCHED_MAX_GPUS], *old_packers[ISN_SCHED_MAX_GPUS];
    isn_gpu_backend *old_backends[ISN_SCHED_MAX_GPUS] = {0};
    bool packers_made = true;
    for (uint32_t d = 0; d < gpu->num_backends; d++)
        packers_made &= (packers[d] = search_worker_new(next->index, UINT32_MAX, conf->gpu_max_k)) != NULL;
    if (!packers_made) {
        for (uint32_t d = 0; d < gpu->num_backends; d++) search_worker_free(packers[d]);
        log_error("gpu: out of memory for the packers of generation %s: its queries run on the CPU workers", next->id);
        atomic_store(&gpu->uploading, false);
        atomic_store(&gpu->awaited, NULL);
        return;
    }
    uint64_t start = isn_now_ns();
    atomic_store(&gpu->moving, true);
    hold_move_open();
    /* Jobs bound for the GPU end by their deadlines; one still counted after this long was lost
     * to the count, not queued. */
    uint64_t give_up = start + (uint64_t)(conf->max_timeout_ms ? conf->max_timeout_ms : 60000) * 1000000ull + 1000000000ull;
    while (atomic_load(&gpu->jobs) && isn_now_ns() < give_up) {
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
    if (atomic_load(&gpu->jobs))
        log_error("gpu: %u jobs still counted as bound for the GPU after their longest deadline; moving on",
                  atomic_load(&gpu->jobs));
    double drained = (double)(isn_now_ns() - start) / 1e9;
    bool staged = gpu->num_staged == gpu->num_backends;
    for (uint32_t d = 0; d < gpu->num_backends; d++) {
        isn_gpu_backend *backend = staged ? gpu->staged[d] : reload_device(gpu, scheduler, conf, next, d);
        if (staged) {
            old_backends[d] = isn_scheduler_gpu_replace(scheduler, d, backend);
            isn_gpu_adopt_learning(backend, old_backends[d]); /* idle both: no query enters while moving */
        }
        gpu->backends[d] = backend;
        old_packers[d] = gpu->packers[d];
        gpu->packers[d] = packers[d];
    }
    gpu->num_staged = 0;
    uint32_t attached = 0;
    for (uint32_t d = 0; d < gpu->num_backends; d++) attached += gpu->backends[d] != NULL;
    index_generation *old = gpu->generation;
    gpu->generation = attached ? generation_acquire(next) : NULL;
    atomic_store(&gpu->attached, attached);
    bool first_upload = atomic_load(&gpu->uploading);
    if (first_upload && attached) atomic_store(&gpu->attached_ns, isn_now_ns());
    atomic_store(&gpu->uploading, false);
    atomic_store(&gpu->moving, false);
    atomic_store(&gpu->awaited, NULL);
    double moved = (double)(isn_now_ns() - start) / 1e9;
    for (uint32_t d = 0; d < gpu->num_backends; d++) {
        isn_gpu_close(old_backends[d]);
        search_worker_free(old_packers[d]);
    }
    if (first_upload && attached) /* with none, gpu_setup_first_stage logged why */
        log_info("gpu: the first stage serves generation %s on %u of %u devices (uploaded in %.3f s while the CPU "
                 "workers served)",
                 next->id, attached, gpu->num_backends, moved);
    else if (!first_upload)
        log_info("gpu: the first stage serves generation %s (%s; its GPU-bound queries drained in %.3f s, moved in "
                 "%.3f s, the replaced generation's device memory freed in %.3f s)",
                 next->id, staged ? "uploaded before the switch" : "freed, then uploaded", drained, moved,
                 (double)(isn_now_ns() - start) / 1e9 - moved);
    generation_release(old);
}

