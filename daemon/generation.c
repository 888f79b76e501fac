/* A generation's parts and their reference count (see generation.h). */
#include "daemon/generation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

/* jemalloc's control when it is the allocator (absent in the sanitizer builds). */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) __attribute__((weak));

/* A generation's heap (norms, document table, lexicon keys, searchers) is tens of MB on a large
 * partition; jemalloc would keep the freed pages for seconds, so a node that swaps daily would hold
 * two generations' worth. Give them back now: swaps are rare, the purge is cheap next to one. */
static void return_freed_memory(void) {
    if (mallctl) mallctl("arena.4096.purge", NULL, NULL, NULL, 0); /* 4096: MALLCTL_ARENAS_ALL */
}

index_generation *generation_open(const char *dir, bool full_verify, char *err, size_t err_len) {
    uint64_t start = isn_now_ns();
    index_generation *generation = calloc(1, sizeof *generation);
    if (!generation) {
        isn_error(err, err_len, "out of memory for an index generation");
        return NULL;
    }
    atomic_init(&generation->refs, 1);
    if (!realpath(dir, generation->dir)) {
        isn_error(err, err_len, "index %s: %s", dir, strerror(errno));
        free(generation);
        return NULL;
    }
    generation->index = isn_index_open(generation->dir, err, err_len);
    if (!generation->index) {
        free(generation);
        return NULL;
    }
    generation->info = isn_index_get_info(generation->index);
    char why[ISN_ERR_LEN];
    /* on every core: a swap verifies while the current generation serves, at the loader's low priority,
     * which its threads inherit (the lists of a 100M-document partition take minutes on one) */
    if (full_verify && isn_index_verify_threads(generation->index, isn_cpus_available(), why, sizeof why) < 0) {
        isn_error(err, err_len, "%s/%s: %s", generation->dir, ISN_INDEX_FILE, why);
        generation_release(generation);
        return NULL;
    }
    snprintf(generation->id, sizeof generation->id, "%016llx", (unsigned long long)generation->info->content_hash);
    generation->open_seconds = (double)(isn_now_ns() - start) / 1e9;
    return generation;
}

int generation_add_workers(index_generation *generation, const search_service_params *params, char *err,
                           size_t err_len) {
    uint64_t start = isn_now_ns();
    uint32_t bad_doc = 0;
    if (params->prior_weight > 0 && !generation->info->has_static_scores)
        return isn_error(err, err_len, "search.prior_weight = %g weights the documents' static scores, and %s has none "
                         "(build it with isn-index build --static-score FIELD)", (double)params->prior_weight, generation->dir);
    if (params->prior_weight > 0 && !isn_index_static_scores_finite(generation->index, &bad_doc))
        return isn_error(err, err_len, "search.prior_weight = %g: document %u of %s has a static score that is not a "
                         "finite number", (double)params->prior_weight, bad_doc, generation->dir);
    uint32_t workers = params->workers;
    generation->workers = calloc(workers ? workers : 1, sizeof *generation->workers);
    generation->planners = calloc((size_t)workers + 1, sizeof *generation->planners);
    if (!generation->workers || !generation->planners)
        return isn_error(err, err_len, "out of memory for %u workers' searchers", workers);
    generation->num_workers = workers;
    for (uint32_t w = 0; w <= workers; w++) {
        generation->planners[w] = isn_searcher_new(generation->index);
        if (!generation->planners[w]) return isn_error(err, err_len, "out of memory for query planner %u", w);
        if (w == workers) break;
        generation->workers[w] = search_worker_new(generation->index, w, params->max_k);
        if (!generation->workers[w]) return isn_error(err, err_len, "out of memory for worker %u's searcher", w);
        search_worker_set_l2_route(generation->workers[w], params->route);
        if (params->warm_up) search_worker_warm_up(generation->workers[w]);
    }
    generation->open_seconds += (double)(isn_now_ns() - start) / 1e9;
    /* once it will serve: the pass must not run on a query's worker, nor hold the node's readiness
     * (minutes on a large partition); it yields to every serving thread */
    if (params->derive_field_data && isn_index_derive_field_data_in_background(generation->index) != 0)
        log_warn("index %s: no thread to derive its per-field data in: the first field: clause will", generation->dir);
    return 0;
}

void generation_on_freed(index_generation *generation, generation_freed_fn *freed, generation_reaper_fn *reaper,
                         void *user) {
    generation->freed = freed;
    generation->reaper = reaper;
    generation->user = user;
}

index_generation *generation_acquire(index_generation *generation) {
    if (generation) atomic_fetch_add_explicit(&generation->refs, 1, memory_order_relaxed);
    return generation;
}

void generation_release(index_generation *generation) {
    if (!generation || atomic_fetch_sub_explicit(&generation->refs, 1, memory_order_acq_rel) != 1) return;
    if (generation->reaper) generation->reaper(generation->user, generation);
    else generation_free(generation);
}

void generation_free(index_generation *generation) {
    uint64_t start = isn_now_ns();
    if (generation->workers)
        for (uint32_t w = 0; w < generation->num_workers; w++) search_worker_free(generation->workers[w]);
    if (generation->planners)
        for (uint32_t w = 0; w <= generation->num_workers; w++) isn_searcher_free(generation->planners[w]);
    free(generation->workers);
    free(generation->planners);
    uint64_t built = generation->info ? generation->info->built_unix_seconds : 0;
    isn_index_close(generation->index);
    generation_freed_fn *freed = generation->freed;
    void *user = generation->user;
    char id[sizeof generation->id];
    memcpy(id, generation->id, sizeof id);
    free(generation);
    return_freed_memory();
    if (freed) freed(user, id, built, (double)(isn_now_ns() - start) / 1e9);
}

void generation_slot_init(generation_slot *slot) {
    pthread_mutex_init(&slot->lock, NULL);
    slot->current = NULL;
}

index_generation *generation_slot_acquire(generation_slot *slot) {
    pthread_mutex_lock(&slot->lock);
    index_generation *generation = generation_acquire(slot->current);
    pthread_mutex_unlock(&slot->lock);
    return generation;
}

/* Read without the lock, only to compare with a generation the reader holds (it cannot be freed and
 * its address reused meanwhile). */
static index_generation *slot_current_unlocked(generation_slot *slot) {
    return __atomic_load_n(&slot->current, __ATOMIC_ACQUIRE);
}

index_generation *generation_slot_publish(generation_slot *slot, index_generation *next) {
    pthread_mutex_lock(&slot->lock);
    index_generation *previous = slot->current;
    __atomic_store_n(&slot->current, next, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&slot->lock);
    return previous;
}

/* The lease's current generation is replaced: kept among the retired while requests use it. False when
 * there is no room for it (the caller keeps it current). */
static bool retire_current(generation_lease *lease) {
    if (!lease->current.generation) return true;
    if (!lease->current.lent) {
        generation_release(lease->current.generation);
        lease->current = (generation_loan){0};
        return true;
    }
    for (int i = 0; i < GENERATION_LEASE_RETIRED; i++)
        if (!lease->retired[i].generation) {
            lease->retired[i] = lease->current;
            lease->current = (generation_loan){0};
            return true;
        }
    return false;
}

index_generation *generation_lease_borrow(generation_lease *lease, generation_slot *slot, bool *lent) {
    *lent = false;
    if (!slot) return NULL;
    index_generation *now = slot_current_unlocked(slot);
    if (now && now == lease->current.generation) {
        lease->current.lent++;
        *lent = true;
        return now;
    }
    index_generation *fresh = generation_slot_acquire(slot);
    if (!fresh || !retire_current(lease)) return fresh; /* none yet, or requests on too many replaced ones */
    lease->current = (generation_loan){.generation = fresh, .lent = 1};
    *lent = true;
    return fresh;
}

void generation_lease_return(generation_lease *lease, generation_slot *slot, index_generation *generation, bool lent) {
    if (!generation) return;
    if (!lent) {
        generation_release(generation);
        return;
    }
    if (generation == lease->current.generation) {
        lease->current.lent--;
        if (!lease->current.lent && slot && slot_current_unlocked(slot) != generation) retire_current(lease);
        return;
    }
    for (int i = 0; i < GENERATION_LEASE_RETIRED; i++)
        if (lease->retired[i].generation == generation) {
            if (--lease->retired[i].lent == 0) {
                generation_release(generation); /* the last request of a replaced generation frees it */
                lease->retired[i] = (generation_loan){0};
            }
            return;
        }
}

void generation_lease_tidy(generation_lease *lease, generation_slot *slot) {
    if (!lease->current.lent && (!slot || slot_current_unlocked(slot) != lease->current.generation))
        retire_current(lease);
}

void generation_slot_destroy(generation_slot *slot) {
    generation_release(generation_slot_publish(slot, NULL));
    pthread_mutex_destroy(&slot->lock);
}
