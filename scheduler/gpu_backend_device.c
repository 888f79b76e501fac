/* The scheduler's GPU device (isn_gpu_device) on top of a first-stage backend of gpu/gpu.h (a CUDA
 * device, or the emulated one), so that isnd can dispatch batches to it instead of the simulator. Each
 * job carries its request (isn_job.gpu_request, the submitter's): a batch sends copies of them, with
 * the threshold the job may prune from, and copies each answer back into the job's request before
 * the scheduler completes the job.
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

/* Batches in flight at once: the backend's streams (isn_gpu_streams, [gpu] streams), at most this many. */
#define BACKEND_MAX_IN_FLIGHT 8
#define DEVICE_NAME_PREFIX "backend:"

/* A batch between submit and complete: its jobs (the dispatcher keeps the array until complete) and
 * the requests the backend fills. */
typedef struct {
    bool busy;
    int ticket;
    isn_job *const *jobs;
    uint32_t n;
    isn_gpu_request *requests;
} backend_flight;

typedef struct {
    isn_gpu_backend *backend;
    uint32_t max_batch;
    isn_gpu_request *requests; /* run_batch's */
    backend_flight flights[BACKEND_MAX_IN_FLIGHT];
    uint32_t max_in_flight, in_flight;
    uint32_t flights_usable; /* the current backend's streams, at most max_in_flight (0 without one) */
    /* A backend swap waits until no batch is in flight; meanwhile no new one starts. */
    bool replace_pending;
    pthread_cond_t idle;
    /* The backend's state may not be read while it is submitting or completing a batch: /readyz and
     * /metrics wait for it (not for the device's work between the two). */
    pthread_mutex_t lock;
    char name[300];
} backend_device_state;

#define NO_BACKEND_REASON "no first-stage backend (an index generation is being uploaded, or could not be): queries run on the CPU"

/* Flights a backend can take: its streams, at most at_most (the flights made with the device). */
static uint32_t flights_of(const isn_gpu_backend *backend, uint32_t at_most) {
    if (!backend) return 0;
    const uint32_t streams = isn_gpu_streams(backend);
    return streams == 0 ? 1 : streams < at_most ? streams : at_most;
}

/* Under the lock: the backend is there and healthy, else -1 with err. */
static int usable(backend_device_state *s, char *err, size_t err_len) {
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
    return 0;
}

/* The batch's requests: each job's own, with the threshold it may prune from (GPU jobs are scored with
 * the index's own statistics). -1 with err for a job that carries none. */
static int requests_of(isn_job *const *jobs, uint32_t n, isn_gpu_request *requests, char *err, size_t err_len) {
    for (uint32_t i = 0; i < n; i++) {
        if (!jobs[i]->gpu_request) {
            snprintf(err, err_len, "a job without a GPU request reached the GPU");
            return -1;
        }
        requests[i] = *jobs[i]->gpu_request;
        requests[i].threshold = isn_job_seed_threshold(&jobs[i]->features, requests[i].mode, requests[i].k, false);
    }
    return 0;
}

/* Each answer into its job's request (the hits are already in the job's own array). */
static void answers_to(isn_job *const *jobs, uint32_t n, const isn_gpu_request *requests) {
    for (uint32_t i = 0; i < n; i++) *jobs[i]->gpu_request = requests[i];
}

static int run_locked(backend_device_state *s, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    if (usable(s, err, err_len) < 0) return -1;
    isn_gpu_health health;
    for (uint32_t at = 0; at < n; at += s->max_batch) {
        uint32_t count = n - at < s->max_batch ? n - at : s->max_batch;
        if (requests_of(jobs + at, count, s->requests, err, err_len) < 0) return -1;
        if (isn_gpu_search_batch(s->backend, s->requests, count, NULL, err, err_len) != 0) return -1;
        isn_gpu_health_get(s->backend, &health);
        if (!health.healthy) {
            snprintf(err, err_len, "GPU failed during the batch: %s", health.reason);
            return -1;
        }
        answers_to(jobs + at, count, s->requests);
    }
    return 0;
}

static int backend_device_run_batch(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    backend_device_state *s = state;
    pthread_mutex_lock(&s->lock);
    while (s->in_flight) pthread_cond_wait(&s->idle, &s->lock);
    int rc = run_locked(s, jobs, n, err, err_len);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int backend_device_submit(void *state, isn_job *const *jobs, uint32_t n, char *err, size_t err_len) {
    backend_device_state *s = state;
    if (n > s->max_batch) {
        snprintf(err, err_len, "batch of %u jobs is above the device's %u", n, s->max_batch);
        return -1;
    }
    pthread_mutex_lock(&s->lock);
    /* With nothing in flight a pending swap can finish: wait for it rather than start a batch on the
     * backend that is going away. With batches in flight, they must be completed first. */
    while (s->replace_pending && !s->in_flight) pthread_cond_wait(&s->idle, &s->lock);
    if (!s->backend) { /* no flight is usable: the batch goes back to the CPU, not to a wait for one */
        snprintf(err, err_len, NO_BACKEND_REASON);
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    backend_flight *f = NULL;
    for (uint32_t i = 0; i < s->flights_usable && !f; i++)
        if (!s->flights[i].busy) f = &s->flights[i];
    if (s->replace_pending || !f) {
        pthread_mutex_unlock(&s->lock);
        return GPU_DEVICE_BUSY;
    }
    if (usable(s, err, err_len) < 0) {
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    if (requests_of(jobs, n, f->requests, err, err_len) < 0) {
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    int ticket = isn_gpu_submit(s->backend, f->requests, n, err, err_len);
    if (ticket >= 0) {
        *f = (backend_flight){.busy = true, .ticket = ticket, .jobs = jobs, .n = n, .requests = f->requests};
        s->in_flight++;
    }
    pthread_mutex_unlock(&s->lock);
    return ticket >= 0 ? (int)(f - s->flights) : -1;
}

static int backend_device_complete(void *state, int flight, char *err, size_t err_len) {
    backend_device_state *s = state;
    if (flight < 0 || (uint32_t)flight >= s->max_in_flight || !s->flights[flight].busy) {
        snprintf(err, err_len, "no GPU batch in flight with ticket %d", flight);
        return -1;
    }
    backend_flight *f = &s->flights[flight];
    pthread_mutex_lock(&s->lock);
    /* Answered exactly either way (a device error is answered on the CPU inside complete), but a
     * failure rests the device. */
    int rc = isn_gpu_complete(s->backend, f->ticket, NULL, err, err_len);
    isn_gpu_health health;
    isn_gpu_health_get(s->backend, &health);
    if (rc == 0 && !health.healthy) {
        snprintf(err, err_len, "GPU failed during the batch: %s", health.reason);
        rc = -1;
    }
    if (rc == 0) answers_to(f->jobs, f->n, f->requests);
    f->busy = false;
    s->in_flight--;
    if (!s->in_flight) pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void isn_gpu_backend_device_health(const isn_gpu_device *device, isn_gpu_health *health) {
    backend_device_state *s = device->state;
    pthread_mutex_lock(&s->lock);
    if (s->backend) isn_gpu_health_get(s->backend, health);
    else {
        memset(health, 0, sizeof *health);
        health->ready = true; /* ready but unhealthy: /readyz says degraded, serving on the CPU */
        snprintf(health->reason, sizeof health->reason, NO_BACKEND_REASON);
        snprintf(health->device_name, sizeof health->device_name, "%s", s->name + strlen(DEVICE_NAME_PREFIX));
    }
    pthread_mutex_unlock(&s->lock);
}

isn_gpu_backend *isn_gpu_backend_device_replace(isn_gpu_device *device, isn_gpu_backend *backend) {
    backend_device_state *s = device->state;
    pthread_mutex_lock(&s->lock);
    s->replace_pending = true;
    while (s->in_flight) pthread_cond_wait(&s->idle, &s->lock);
    isn_gpu_backend *old = s->backend;
    s->backend = backend;
    s->flights_usable = flights_of(backend, s->max_in_flight);
    s->replace_pending = false;
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return old;
}

bool isn_gpu_backend_device_replace_pending(const isn_gpu_device *device) {
    backend_device_state *s = device->state;
    pthread_mutex_lock(&s->lock);
    bool pending = s->replace_pending;
    pthread_mutex_unlock(&s->lock);
    return pending;
}

int isn_gpu_backend_device_new(isn_gpu_backend *backend, uint32_t streams, uint32_t max_batch, uint32_t ordinal,
                               isn_gpu_device *device) {
    if (max_batch == 0) return -1;
    backend_device_state *s = calloc(1, sizeof *s);
    if (s == NULL) return -1;
    if (backend) streams = isn_gpu_streams(backend);
    s->max_in_flight = streams == 0 ? 1 : streams < BACKEND_MAX_IN_FLIGHT ? streams : BACKEND_MAX_IN_FLIGHT;
    s->flights_usable = flights_of(backend, s->max_in_flight);
    s->requests = calloc((size_t)max_batch * (1 + s->max_in_flight), sizeof *s->requests);
    if (s->requests == NULL) {
        free(s);
        return -1;
    }
    for (uint32_t i = 0; i < s->max_in_flight; i++) s->flights[i].requests = s->requests + (size_t)max_batch * (1 + i);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->backend = backend;
    s->max_batch = max_batch;
    isn_gpu_health health = {0};
    if (backend) {
        isn_gpu_health_get(backend, &health);
        snprintf(s->name, sizeof s->name, DEVICE_NAME_PREFIX "%s", health.device_name);
    } else
        snprintf(s->name, sizeof s->name, DEVICE_NAME_PREFIX "GPU %u", ordinal);
    memset(device, 0, sizeof *device);
    device->name = s->name;
    device->state = s;
    device->run_batch = backend_device_run_batch;
    device->submit = backend_device_submit;
    device->complete = backend_device_complete;
    device->max_in_flight = s->max_in_flight;
    device->max_batch = max_batch;
    device->memory_budget = health.bytes_resident;
    return 0;
}

void isn_gpu_backend_device_free(isn_gpu_device *device) {
    if (device == NULL || device->state == NULL) return;
    backend_device_state *s = device->state;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->idle);
    free(s->requests);
    free(s);
    device->state = NULL;
}
