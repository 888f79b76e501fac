/* The checks at open on several threads: a large partition's open is its checksums (every byte of the
 * file read once) and the decoding of every posting block's doc ids, each of which splits: checksums by
 * section, blocks by term range. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/reader.h"

/* At most this many threads (the machine's cores, fewer for a small file). */
#define OPEN_MAX_THREADS 16
/* Term ranges per thread, so that the head terms' long lists do not leave one thread last. */
#define RANGES_PER_THREAD 8
/* Below this much to check, one thread. */
#define OPEN_MIN_PARALLEL_BYTES (64u << 20)

typedef struct {
    void (*fn)(void *ctx, uint32_t task);
    void *ctx;
    uint32_t tasks;
    _Atomic uint32_t next;
} task_pool;

static void *pool_worker(void *arg) {
    task_pool *p = arg;
    for (uint32_t t; (t = atomic_fetch_add(&p->next, 1)) < p->tasks;) p->fn(p->ctx, t);
    return NULL;
}

static uint32_t open_threads(uint64_t bytes) {
    if (bytes < OPEN_MIN_PARALLEL_BYTES) return 1;
    uint32_t n = isn_cpus_available();
    return n > OPEN_MAX_THREADS ? OPEN_MAX_THREADS : n;
}

static void run_tasks(uint32_t threads, uint32_t tasks, void (*fn)(void *, uint32_t), void *ctx) {
    task_pool pool = {.fn = fn, .ctx = ctx, .tasks = tasks};
    atomic_init(&pool.next, 0);
    pthread_t ids[OPEN_MAX_THREADS];
    uint32_t started = 0;
    for (; started + 1 < threads && started + 1 < tasks; started++)
        if (pthread_create(&ids[started], NULL, pool_worker, &pool) != 0) break;
    pool_worker(&pool);
    for (uint32_t i = 0; i < started; i++) pthread_join(ids[i], NULL);
}

typedef struct {
    const void *const *sections;
    const isn_section_entry *table;
    bool *bad;
} hash_job;

static void hash_task(void *ctx, uint32_t s) {
    hash_job *j = ctx;
    j->bad[s] = isn_hash64(j->sections[s], j->table[s].bytes) != j->table[s].checksum;
}

int isn_index_hash_sections(const void *const *sections, const isn_section_entry *table, uint32_t num_sections,
                            uint32_t *bad_section) {
    bool bad[SEC_COUNT] = {false};
    uint64_t bytes = 0;
    for (uint32_t s = 0; s < num_sections; s++) bytes += table[s].bytes;
    hash_job j = {sections, table, bad};
    run_tasks(open_threads(bytes), num_sections, hash_task, &j);
    for (uint32_t s = 0; s < num_sections; s++)
        if (bad[s]) {
            *bad_section = s;
            return -1;
        }
    return 0;
}

typedef struct {
    const isn_index *ix;
    const uint32_t *first; /* [ranges + 1] terms */
    int *rc;
    char (*errs)[ISN_ERR_LEN];
} check_job;

static void check_task(void *ctx, uint32_t r) {
    check_job *j = ctx;
    j->rc[r] = isn_index_check_postings_range(j->ix, j->first[r], j->first[r + 1], j->errs[r], ISN_ERR_LEN);
}

int isn_index_check_postings_parallel(const isn_index *ix, char *err, size_t err_len) {
    uint32_t threads = open_threads(ix->postings_bytes), nt = ix->meta->num_terms;
    if (threads <= 1 || nt < 2) return isn_index_check_postings(ix, err, err_len);
    uint32_t ranges = threads * RANGES_PER_THREAD;
    uint32_t *first = malloc(((size_t)ranges + 1) * sizeof *first);
    int *rc = calloc(ranges, sizeof *rc);
    char(*errs)[ISN_ERR_LEN] = calloc(ranges, sizeof *errs);
    if (!first || !rc || !errs) {
        free(first);
        free(rc);
        free(errs);
        return isn_index_check_postings(ix, err, err_len);
    }
    /* ranges of about equal blocks */
    uint64_t per = ix->meta->num_blocks / ranges + 1, acc = 0;
    uint32_t r = 0;
    first[0] = 0;
    for (uint32_t t = 0; t < nt && r + 1 < ranges; t++) {
        acc += isn_term_num_blocks(&ix->terms[t]);
        if (acc >= per * (r + 1)) first[++r] = t + 1;
    }
    first[++r] = nt;
    check_job j = {ix, first, rc, errs};
    run_tasks(threads, r, check_task, &j);
    int result = 0;
    for (uint32_t k = 0; k < r && result == 0; k++)
        if (rc[k] != 0) result = isn_error(err, err_len, "%s", errs[k]);
    free(first);
    free(rc);
    free(errs);
    return result;
}
