/* The simulated GPU backend: a batch costs what the latency model says (the dispatcher thread sleeps
 * that long), and fails now and then when asked to. It stands in for the CUDA backend in tests and
 * benchmarks; it computes no hits (complete() answers for it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "scheduler/scheduler_internal.h"

typedef struct {
    isn_gpu_sim_config config;
    uint64_t rng;
} gpu_sim;

void isn_gpu_sim_config_default(isn_gpu_sim_config *config) {
    *config = (isn_gpu_sim_config){
        .launch_ns = 8500,        /* launch + wait, H200 */
        .per_posting_ns = 0.04,   /* 25 G postings/s: within the measured 12-74 for decode + BM25 */
        .per_query_ns = 2000,     /* top-k selection and copy-back share per query (0.1-0.2 ms for
                                     8.8M scores; far less for a partition's candidates) */
        .failure_rate = 0,
        .seed = 1,
    };
}

double isn_gpu_sim_batch_ns(const isn_gpu_sim_config *config, isn_job *const *jobs, uint32_t n) {
    double postings = 0;
    for (uint32_t i = 0; i < n; i++) postings += (double)jobs[i]->features.total;
    return config->launch_ns + config->per_posting_ns * postings + config->per_query_ns * n;
}

double isn_gpu_sim_job_ns(const isn_job_features *features, const void *arg) {
    const isn_gpu_sim_config *config = arg;
    return config->per_query_ns + config->per_posting_ns * (double)features->total;
}

static double next_uniform(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (double)(*state >> 11) / 9007199254740992.0;
}

static int sim_run_batch(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    gpu_sim *sim = state;
    double late = sim->config.jitter_ns > 0 ? next_uniform(&sim->rng) * sim->config.jitter_ns : 0.0;
    uint64_t until = isn_now_ns() + (uint64_t)(isn_gpu_sim_batch_ns(&sim->config, jobs, n) + late);
    struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
    if (sim->config.failure_rate > 0 && next_uniform(&sim->rng) < sim->config.failure_rate) {
        snprintf(err, err_len, "simulated device failure (failure_rate %.3g)", sim->config.failure_rate);
        return -1;
    }
    return 0;
}

int isn_gpu_sim_new(const isn_gpu_sim_config *config, uint32_t max_batch, uint64_t memory_budget,
                    isn_gpu_device *device) {
    gpu_sim *sim = calloc(1, sizeof *sim);
    if (!sim) return -1;
    sim->config = *config;
    sim->rng = config->seed ? config->seed : 1;
    *device = (isn_gpu_device){.name = "gpu-sim",
                               .state = sim,
                               .run_batch = sim_run_batch,
                               .max_batch = max_batch ? max_batch : 1,
                               .memory_budget = memory_budget};
    return 0;
}

void isn_gpu_sim_free(isn_gpu_device *device) {
    free(device->state);
    device->state = NULL;
}
