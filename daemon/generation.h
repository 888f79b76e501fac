/* Index generations: an opened, verified index and what isnd built from it for serving (a searcher
 * and a planner per worker), named by its content hash and build time. Requests hold a
 * reference to the generation they were admitted on, so a swap publishes the next generation for
 * new requests while those in flight finish on the old one, which is unmapped when its last
 * reference goes. The swap itself (triggers, off-loop loading, metrics) is generation_swap.c's. */
#ifndef ISN_DAEMON_GENERATION_H
#define ISN_DAEMON_GENERATION_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/search_job.h"
#include "daemon/search_service.h"
#include "index/index.h"

typedef struct index_generation index_generation;

/* Called once the generation is unmapped and freed (its last reference gone). */
typedef void generation_freed_fn(void *user, const char *id, uint64_t built_unix_seconds, double free_seconds);
/* Takes a generation whose last reference is gone, to free it elsewhere (generation_free): the
 * last release happens where a request ends, on a loop thread, which must not stall on an unmap. */
typedef void generation_reaper_fn(void *user, index_generation *generation);

struct index_generation {
    atomic_uint refs;
    isn_index *index;
    const isn_index_info *info;
    /* One per scheduler worker thread (its index), so searching never shares scratch; planners have
     * one more, at [num_workers], for analysis on the loop thread. */
    uint32_t num_workers;
    search_worker **workers;
    isn_searcher **planners;
    char id[17]; /* content hash, 16 hex digits */
    char dir[PATH_MAX]; /* the directory opened, symlinks resolved */
    double open_seconds; /* open, verify, page-in and warm-up */
    generation_freed_fn *freed;
    generation_reaper_fn *reaper;
    void *user; /* of freed and reaper */
    index_generation *reap_next; /* the reaper's list */
};

/* Opens DIR (resolving symlinks once, so a later flip of a `current` link cannot mix two indexes),
 * checks every section's checksum and structure and, with full_verify, runs index/'s full
 * verification; then asks the kernel to page the file in. One reference, the caller's. NULL with
 * err naming the section at fault. */
index_generation *generation_open(const char *dir, bool full_verify, char *err, size_t err_len);
/* The per-worker searchers (scratch for k up to max_k, the second stage's route) and planners;
 * with warm_up, a few queries over frequent and rare terms run on each searcher. 0, or -1 with err. */
int generation_add_workers(index_generation *generation, const search_service_params *params, char *err,
                           size_t err_len);
void generation_on_freed(index_generation *generation, generation_freed_fn *freed, generation_reaper_fn *reaper,
                         void *user);

index_generation *generation_acquire(index_generation *generation);
/* The last release frees the generation (searchers and the index, unmapped), or hands it
 * to its reaper. */
void generation_release(index_generation *generation);
void generation_free(index_generation *generation);

/* The generation new requests get. Any thread. */
typedef struct {
    pthread_mutex_t lock;
    index_generation *current;
} generation_slot;

void generation_slot_init(generation_slot *slot);
/* A reference to the current generation (the caller releases it); NULL before the first. */
index_generation *generation_slot_acquire(generation_slot *slot);
/* Makes `next` current, taking over the caller's reference to it; returns the previous one with the
 * slot's reference, which the caller releases (NULL when there was none). */
index_generation *generation_slot_publish(generation_slot *slot, index_generation *next);
void generation_slot_destroy(generation_slot *slot);

/* A serving loop's reference to the current generation, lent to its requests without the slot's lock
 * or the generation's shared count: taken from the slot once a generation, given back when the loop's
 * last request on it has ended and another is current. Each request took the lock and both counts
 * before, and at a million requests a second the loops passed those cache lines between them. A
 * loop borrows and returns on its own thread; a loan is returned to the lease it came from. */
#define GENERATION_LEASE_RETIRED 4
typedef struct {
    index_generation *generation;
    uint64_t lent; /* requests that use it now */
} generation_loan;
typedef struct {
    generation_loan current;
    generation_loan retired[GENERATION_LEASE_RETIRED]; /* replaced, with requests still on them */
} generation_lease;

/* The slot's current generation for a new request: lent (*lent = true) or, while the lease has no room
 * for another replaced generation, a reference of the request's own (*lent = false). NULL before the
 * first generation (or without a slot). */
index_generation *generation_lease_borrow(generation_lease *lease, generation_slot *slot, bool *lent);
/* What generation_lease_borrow gave, back (a reference of the request's own is released). */
void generation_lease_return(generation_lease *lease, generation_slot *slot, index_generation *generation, bool lent);
/* Gives back what no request uses and is not current (a swap happened; also when the loop ends, with
 * slot NULL: everything not lent). */
void generation_lease_tidy(generation_lease *lease, generation_slot *slot);

/* ---- generation_swap.c: isnd's generations, loop thread unless said otherwise */
struct isn_server;
typedef struct generation_state generation_state;

generation_state *generations_new(struct isn_server *server);
/* Load thread, at start: the first generation (index.path, opened as a swap opens one, but without
 * the full verification, as before), kept until generations_serve_first. NULL with err. */
index_generation *generations_open_first(struct isn_server *server, char *err, size_t err_len);
/* Once the service runs on it: the first generation is published and index.path watched. */
void generations_serve_first(struct isn_server *server);
/* Once the node is ready: uploads the serving generation to the GPU first stage when it opened without
 * one (gpu.upload_before_ready = false), off the loop; swaps asked for meanwhile wait for it. */
void generations_upload_gpu(struct isn_server *server);
/* SIGHUP (after the configuration was applied): swap when index.path now names another index. */
void generations_check(struct isn_server *server, const char *why);
/* A reference to the generation for a new request (released with generation_release). Any thread. */
index_generation *generations_acquire(struct isn_server *server);
/* The slot new requests take their generation from (a loop's lease borrows from it); NULL before there is one. */
generation_slot *generations_slot(struct isn_server *server);
/* Stops watching (server_stop, before the search service stops: waits for a pool thread that is
 * moving the GPU's residency); a load in flight is dropped when it returns. */
void generations_stop(struct isn_server *server);
/* After uv_run: releases the current generation and frees the state. */
void generations_free(struct isn_server *server);
void generations_render_prometheus(const struct isn_server *server, byte_buffer *out);
void generations_render_json(const struct isn_server *server, byte_buffer *out);

#endif
