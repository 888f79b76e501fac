/* Connections to replicas are made off the loop: a TCP connect to an unreachable replica, or a TLS
 * handshake with one that does not answer, would hold every query on the loop for up to the connect
 * timeout. One thread makes them, one at a time, and hands each made connection back to the loop
 * (uv_async), which watches it and gives it to its replica if that replica is still there (a reload
 * may have removed it meanwhile: replicas are found again by their serial number). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agg/agg_internal.h"

#define AGG_CONNECT_TIMEOUT_MS 200

typedef struct agg_connect_job {
    struct agg_connect_job *next;
    uint64_t serial; /* the replica's */
    char address[AGG_ADDR_MAX];
    isn_grpc_client *client; /* made; NULL when it failed (err) */
    char err[256];
} agg_connect_job;

struct agg_connector {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    agg_connect_job *todo, *done; /* under lock; todo in the order asked (appended) */
    bool stopping;
    uv_async_t async;
    agg *a;
    isn_grpc_tls *tls;        /* the replica connections' credentials (reloaded in place, never freed before us) */
    char server_name[AGG_ADDR_MAX];
};

static void *connector_main(void *arg) {
    agg_connector *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->todo && !c->stopping) pthread_cond_wait(&c->wake, &c->lock);
        if (c->stopping) break;
        agg_connect_job *job = c->todo;
        c->todo = job->next;
        pthread_mutex_unlock(&c->lock);
        job->client = isn_grpc_connect_tls(job->address, AGG_CONNECT_TIMEOUT_MS, c->tls, c->server_name, job->err,
                                           sizeof job->err);
        pthread_mutex_lock(&c->lock);
        job->next = c->done;
        c->done = job;
        uv_async_send(&c->async);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

static agg_replica *replica_by_serial(agg *a, uint64_t serial) {
    for (uint32_t pi = 0; pi < a->num_partitions; pi++)
        for (uint32_t i = 0; i < a->partitions[pi].num_replicas; i++)
            if (a->partitions[pi].replicas[i].serial == serial) return &a->partitions[pi].replicas[i];
    return NULL;
}

/* On the loop: connections made (or not) since the last call. */
static void on_connected(uv_async_t *async) {
    agg_connector *c = async->data;
    pthread_mutex_lock(&c->lock);
    agg_connect_job *done = c->done;
    c->done = NULL;
    pthread_mutex_unlock(&c->lock);
    while (done) {
        agg_connect_job *job = done;
        done = job->next;
        agg_replica *r = replica_by_serial(c->a, job->serial);
        if (r && r->connecting) agg_replica_connected(c->a, r, job->client, job->err);
        else if (job->client) isn_grpc_close(job->client);
        free(job);
    }
}

static void free_connector(uv_handle_t *handle) { free(handle->data); }

int agg_connector_start(agg *a, char *err, size_t err_len) {
    agg_connector *c = calloc(1, sizeof *c);
    if (!c) return isn_error(err, err_len, "out of memory for the replica connector");
    c->a = a;
    c->tls = a->replica_tls;
    snprintf(c->server_name, sizeof c->server_name, "%s", a->config.tls_server_name);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    int rc = uv_async_init(a->loop, &c->async, on_connected);
    if (rc < 0) {
        free(c);
        return isn_error(err, err_len, "cannot start the replica connector: %s", uv_strerror(rc));
    }
    c->async.data = c;
    rc = pthread_create(&c->thread, NULL, connector_main, c);
    if (rc != 0) {
        uv_close((uv_handle_t *)&c->async, free_connector);
        return isn_error(err, err_len, "cannot start the replica connector thread: %s", strerror(rc));
    }
    a->connector = c;
    return 0;
}

bool agg_connector_ask(agg *a, agg_replica *r) {
    agg_connector *c = a->connector;
    agg_connect_job *job = calloc(1, sizeof *job);
    if (!c || !job) {
        free(job);
        return false;
    }
    job->serial = r->serial;
    snprintf(job->address, sizeof job->address, "%s", r->address);
    pthread_mutex_lock(&c->lock);
    agg_connect_job **tail = &c->todo;
    while (*tail) tail = &(*tail)->next;
    *tail = job;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
    r->connecting = true;
    return true;
}

static void free_jobs(agg_connect_job *job) {
    while (job) {
        agg_connect_job *next = job->next;
        if (job->client) isn_grpc_close(job->client);
        free(job);
        job = next;
    }
}

void agg_connector_stop(agg *a) {
    agg_connector *c = a->connector;
    if (!c) return;
    a->connector = NULL;
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL); /* at most one connect's timeout */
    free_jobs(c->todo);
    free_jobs(c->done);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    uv_close((uv_handle_t *)&c->async, free_connector);
}
