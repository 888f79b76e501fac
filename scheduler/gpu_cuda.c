/* The scheduler's GPU device (isn_gpu_device) on top of the real first-stage backend (gpu/gpu.h), so
 * that isnd can dispatch batches to a CUDA device instead of the simulator. The daemon owns the query
 * of each job: it says how to build a backend request from a job, and gets each answer back.
 *
 * A batch whose device part failed was still answered exactly (the backend re-ran it on the CPU), but
 * run_batch reports the failure so that the scheduler rests the device and routes to the CPU workers;
 * an unhealthy backend refuses batches at once for the same reason. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "scheduler/scheduler_internal.h"

typedef struct {
    isn_gpu_backend *backend;
    isn_gpu_cuda_callbacks callbacks;
    uint32_t max_batch;
    isn_gpu_request *requests;
    /* The backend's health may not be read while a batch runs: /readyz and /metrics wait for it. */
    pthread_mutex_t lock;
    char name[300];
} gpu_cuda_state;

#define NO_BACKEND_REASON "no first-stage backend while the index generation is swapped: queries run on the CPU"

static int run_locked(gpu_cuda_state *s, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    if (!s->backend) {
        snprintf(err, err_len, NO_BACKEND_REASON);
        return -1;
    }
    isn_gpu_health health;
    isn_gpu_health_get(s->backend, &health);
    if (!health.healthy) {
        snprintf(err, err_len, "GPU unhealthy: %s", health.reason);
        return -1;
    }
    for (uint32_t at = 0; at < n; at += s->max_batch) {
        uint32_t count = n - at < s->max_batch ? n - at : s->max_batch;
        for (uint32_t i = 0; i < count; i++) {
            memset(&s->requests[i], 0, sizeof s->requests[i]);
            s->callbacks.request_of(s->callbacks.user, jobs[at + i], &s->requests[i]);
        }
        if (isn_gpu_search_batch(s->backend, s->requests, count, NULL, err, err_len) != 0) return -1;
        isn_gpu_health_get(s->backend, &health);
        if (!health.healthy) {
            snprintf(err, err_len, "GPU failed during the batch: %s", health.reason);
            return -1;
        }
        for (uint32_t i = 0; i < count; i++) s->callbacks.on_job_done(s->callbacks.user, jobs[at + i], &s->requests[i]);
    }
    return 0;
}

static int gpu_cuda_run_batch(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    gpu_cuda_state *s = state;
    pthread_mutex_lock(&s->lock);
    int rc = run_locked(s, jobs, n, err, err_len);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void isn_gpu_cuda_health(const isn_gpu_device *device, isn_gpu_health *health) {
    gpu_cuda_state *s = device->state;
    pthread_mutex_lock(&s->lock);
    if (s->backend) isn_gpu_health_get(s->backend, health);
    else {
        memset(health, 0, sizeof *health);
        health->ready = true; /* ready but unhealthy: /readyz says degraded, serving on the CPU */
        snprintf(health->reason, sizeof health->reason, NO_BACKEND_REASON);
        snprintf(health->device_name, sizeof health->device_name, "%s", s->name + strlen("cuda:"));
    }
    pthread_mutex_unlock(&s->lock);
}

isn_gpu_backend *isn_gpu_cuda_replace(isn_gpu_device *device, isn_gpu_backend *backend) {
    gpu_cuda_state *s = device->state;
    pthread_mutex_lock(&s->lock);
    isn_gpu_backend *old = s->backend;
    s->backend = backend;
    pthread_mutex_unlock(&s->lock);
    return old;
}

int isn_gpu_cuda_new(isn_gpu_backend *backend, const isn_gpu_cuda_callbacks *callbacks, uint32_t max_batch,
                     isn_gpu_device *device) {
    if (backend == NULL || callbacks == NULL || callbacks->request_of == NULL || callbacks->on_job_done == NULL ||
        max_batch == 0)
        return -1;
    gpu_cuda_state *s = calloc(1, sizeof *s);
    if (s == NULL) return -1;
    s->requests = calloc(max_batch, sizeof *s->requests);
    if (s->requests == NULL) {
        free(s);
        return -1;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->backend = backend;
    s->callbacks = *callbacks;
    s->max_batch = max_batch;
    isn_gpu_health health;
    isn_gpu_health_get(backend, &health);
    snprintf(s->name, sizeof s->name, "cuda:%s", health.device_name);
    memset(device, 0, sizeof *device);
    device->name = s->name;
    device->state = s;
    device->run_batch = gpu_cuda_run_batch;
    device->max_batch = max_batch;
    device->memory_budget = health.bytes_resident;
    return 0;
}

void isn_gpu_cuda_free(isn_gpu_device *device) {
    if (device == NULL || device->state == NULL) return;
    gpu_cuda_state *s = device->state;
    pthread_mutex_destroy(&s->lock);
    free(s->requests);
    free(s);
    device->state = NULL;
}
