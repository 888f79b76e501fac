/* The one-pass stage's gather on several threads (gpu.h isn_gpu_l2_gather): each query's candidates cut
 * into slices of neighbouring doc ids, each slice gathered into its own workspace on the crew. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cpu_crew.h"
#include "gpu/gpu.h"

#define DEFAULT_MIN_SLICE 256u
/* Doc-id buckets a query's candidates are counted in to find the slices' bounds. */
#define BUCKETS 4096u

typedef struct {
    const isn_query *query;
    uint64_t num_docs;
    const uint32_t *docs;
    uint32_t n;
    int rc;
    char err[ISN_ERR_LEN];
} slice_job;

struct isn_gpu_l2_gather_crew {
    const isn_index *index;
    cpu_crew *crew;
    uint32_t threads, min_slice;
    /* per slice, grown to the most slices a call has had */
    uint32_t slices_cap;
    isn_l2_workspace **workspaces;
    slice_job *jobs;
    isn_feature_hits *hits;
    const isn_feature_hits **list;
    /* per row of a call, grown likewise */
    size_t rows_cap;
    uint32_t *order, *slice_docs;
    uint32_t counts[BUCKETS + 1];
};

isn_gpu_l2_gather_crew *isn_gpu_l2_gather_crew_new(const isn_index *index, uint32_t threads, uint32_t min_slice) {
    isn_gpu_l2_gather_crew *g = calloc(1, sizeof *g);
    if (g == NULL) return NULL;
    g->index = index;
    g->threads = threads ? threads : 1;
    g->min_slice = min_slice ? min_slice : DEFAULT_MIN_SLICE;
    g->crew = cpu_crew_new(index, g->threads, 1, NULL, 0);
    if (g->crew == NULL) {
        free(g);
        return NULL;
    }
    return g;
}

void isn_gpu_l2_gather_crew_free(isn_gpu_l2_gather_crew *g) {
    if (g == NULL) return;
    cpu_crew_free(g->crew);
    for (uint32_t i = 0; i < g->slices_cap; i++) isn_l2_workspace_free(g->workspaces[i]);
    free(g->workspaces);
    free(g->jobs);
    free(g->hits);
    free(g->list);
    free(g->order);
    free(g->slice_docs);
    free(g);
}

static bool reserve_slices(isn_gpu_l2_gather_crew *g, uint32_t slices) {
    if (slices <= g->slices_cap) return true;
    isn_l2_workspace **ws = realloc(g->workspaces, slices * sizeof *ws);
    if (ws == NULL) return false;
    g->workspaces = ws;
    slice_job *jobs = realloc(g->jobs, slices * sizeof *jobs);
    if (jobs == NULL) return false;
    g->jobs = jobs;
    isn_feature_hits *hits = realloc(g->hits, slices * sizeof *hits);
    if (hits == NULL) return false;
    g->hits = hits;
    const isn_feature_hits **list = realloc(g->list, slices * sizeof *list);
    if (list == NULL) return false;
    g->list = list;
    while (g->slices_cap < slices) {
        if ((g->workspaces[g->slices_cap] = isn_l2_workspace_new(g->index)) == NULL) return false;
        g->slices_cap++;
    }
    return true;
}

static bool reserve_rows(isn_gpu_l2_gather_crew *g, size_t rows) {
    if (rows <= g->rows_cap) return true;
    uint32_t *order = realloc(g->order, rows * sizeof *order);
    if (order == NULL) return false;
    g->order = order;
    uint32_t *docs = realloc(g->slice_docs, rows * sizeof *docs);
    if (docs == NULL) return false;
    g->slice_docs = docs;
    g->rows_cap = rows;
    return true;
}

/* How many slices a query of n candidates is cut into. */
static uint32_t slices_of(const isn_gpu_l2_gather_crew *g, uint32_t n) {
    uint32_t s = n / g->min_slice;
    if (s > g->threads) s = g->threads;
    return s ? s : 1;
}

/* Cuts one query's candidates (its rows from base) into slices of neighbouring doc ids: counted by
 * doc-id bucket, laid out bucket by bucket into slice_docs[base..] with order[] saying where each came
 * from, and cut at bucket bounds near equal shares. Returns the jobs added at jobs[*num_jobs..]. */
static void cut_query(isn_gpu_l2_gather_crew *g, const isn_gpu_l2_candidates *c, uint32_t base, uint32_t *num_jobs) {
    const uint32_t n = c->n, want = slices_of(g, n);
    if (want == 1) {
        for (uint32_t i = 0; i < n; i++) g->order[base + i] = base + i;
        g->jobs[(*num_jobs)++] = (slice_job){.query = c->query, .num_docs = c->num_docs, .docs = c->docs, .n = n};
        return;
    }
    uint32_t highest = 0;
    for (uint32_t i = 0; i < n; i++) highest = c->docs[i] > highest ? c->docs[i] : highest;
    uint32_t shift = 0;
    while ((highest >> shift) >= BUCKETS) shift++;
    memset(g->counts, 0, sizeof g->counts);
    for (uint32_t i = 0; i < n; i++) g->counts[(c->docs[i] >> shift) + 1]++;
    /* counts[b] becomes bucket b's first place; a slice ends after the bucket that reaches its share */
    uint32_t start = 0, made = 0;
    for (uint32_t b = 0; b < BUCKETS; b++) {
        g->counts[b + 1] += g->counts[b];
        const uint32_t end = g->counts[b + 1];
        const bool last = b + 1 == BUCKETS;
        if (end > start && (last || (uint64_t)end * want >= (uint64_t)(made + 1) * n)) {
            g->jobs[*num_jobs + made] = (slice_job){.query = c->query, .num_docs = c->num_docs,
                                                    .docs = g->slice_docs + base + start, .n = end - start};
            made++;
            start = end;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t at = g->counts[c->docs[i] >> shift]++;
        g->slice_docs[base + at] = c->docs[i];
        g->order[base + at] = base + i;
    }
    *num_jobs += made;
}

static void gather_slice(void *context, uint32_t index, cpu_hand *hand) {
    (void)hand;
    isn_gpu_l2_gather_crew *g = context;
    slice_job *j = &g->jobs[index];
    j->rc = isn_feature_hits_gather(g->workspaces[index], j->query, j->num_docs, j->docs, j->n, &g->hits[index], j->err,
                                    sizeof j->err);
}

int isn_gpu_l2_gather(isn_gpu_l2_gather_crew *g, const isn_gpu_l2_candidates *queries, uint32_t num_queries,
                      const isn_feature_hits *const **slices, uint32_t *num_slices, const uint32_t **order, char *err,
                      size_t err_len) {
    *slices = NULL;
    *num_slices = 0;
    *order = NULL;
    size_t rows = 0;
    uint32_t most = 0;
    for (uint32_t q = 0; q < num_queries; q++) {
        rows += queries[q].n;
        most += queries[q].n ? slices_of(g, queries[q].n) : 0;
    }
    if (rows > UINT32_MAX / 2) {
        snprintf(err, err_len, "second-stage gather: %zu candidates in one batch", rows);
        return -1;
    }
    if (!reserve_slices(g, most) || !reserve_rows(g, rows)) {
        snprintf(err, err_len, "second-stage gather: out of memory for %zu candidates in %u slices", rows, most);
        return -1;
    }
    uint32_t jobs = 0, base = 0;
    for (uint32_t q = 0; q < num_queries; q++) {
        if (queries[q].n) cut_query(g, &queries[q], base, &jobs);
        base += queries[q].n;
    }
    cpu_crew_run(g->crew, jobs, gather_slice, g);
    for (uint32_t i = 0; i < jobs; i++) {
        if (g->jobs[i].rc != 0) {
            snprintf(err, err_len, "%s", g->jobs[i].err);
            return -1;
        }
        g->list[i] = &g->hits[i];
    }
    *slices = g->list;
    *num_slices = jobs;
    *order = g->order;
    return 0;
}
