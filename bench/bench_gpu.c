/* GPU first stage against the CPU on one index and query log: equality of every query's top-k
 * (GPU vs isn_search), GPU queries/s per batch size with the per-stage breakdown, postings rates and
 * CPU fallbacks by reason, and the CPU's queries/s on all cores (one searcher per thread, warmed up,
 * then whole passes over the log for at least --cpu-seconds). JSON lines on stdout.
 *   bench_gpu --index DIR --queries FILE.tsv [--ks 10,1000] [--batches 1,16,256,4096] [--modes or,and]
 *             [--threads N] [--max-queries N] [--emulate] [--label NAME] [--and-by-ranges] [--no-cpu-rate]
 *             [--inflight N] [--no-seed] [--exhaustive | --pruned] [--cpu-seconds S] [--min-batches N]
 *             [--filter F [--interleave N] [--no-filter-seed]] [--write-buckets N]
 *             [--budget-mb M | --budget-fraction F] [--cache whole|pruned|queries|visits|capped|tier] [--train-queries FILE]
 *             [--train-k K] [--train-mode or|and] [--prefix-cap C] [--prior-weight W] [--stream-mb M]
 * Disjunctive requests carry the CPU's threshold probe (isn_threshold_probe, k <= 64; a filtered query's
 * scores only the documents its filter keeps), as isnd's cost model hands it to the device; its time per query
 * is reported apart (isnd computes it anyway), and "seeded" counts the requests it gave a seed.
 * "postings_decoded" (the emulated device's count; 0 on a GPU) is every posting the passes decoded, whether its
 * document passes the filter or not ("postings_scored": those that did): the work to compare filtered and
 * unfiltered queries without a GPU (bench/gpu_filter_device.sh local).
 * --min-batches N runs at least N batches of each size, the log's queries over again where it is too short
 * (two batches of 4,096 from an 8,192-query log are mostly the first one's start and the last one's end).
 * --inflight N keeps N batches on N streams at once, as isnd's dispatcher does ([gpu] streams, default 2 in
 * both); every batch size runs over the whole log (or --min-batches of it); --exhaustive scores every
 * range and block (no seed, no sampling round) and --pruned always prunes (the default lets the backend
 * pick per batch, isn_gpu_options.pruning);
 * --budget-mb M gives the device M MiB (a pruned-prefix cache when the partition does not fit), its
 * blocks chosen by the measured log itself or by --train-queries FILE (held-out queries: the honest
 * setting), each list admitted up to --prefix-cap of its blocks (isn_gpu_options.prefix_cap);
 * --budget-fraction F gives the postings F of the partition's device bytes instead (or as well); --cache
 * whole|pruned|queries|visits|capped|tier picks the admission (isn_gpu_options.admission): whole lists (prefix cap 1), the
 * training log replayed under the early termination of an index in global order (at --train-k, default the
 * first of --ks, and --train-mode or|and, default the first mode) with lists grown to the depths its queries
 * need by needs completed per byte (pruned: ISN_GPU_ADMIT_PREFIXES), its queries' visited blocks whole and
 * cheapest first (queries) or blocks by visits per byte (visits); or the capped prefixes; or, with no log, every
 * list of more than one block below one document cut, the highest that fits (tier; the open line's tier_docs);
 * rows then count per
 * query the CPU completions, CPU fallbacks, queries answered on the device alone, those the tail bound
 * settled (bound_settled, completions_avoided) and the ranges it skipped;
 * --double-acc forces double range accumulators instead of exact fixed point (to compare);
 * --and-by-ranges sends conjunctive queries through the range passes instead of probing (to compare);
 * --no-cpu-rate still runs the CPU for the equality check, on all threads, but prints no rate line;
 * --filter 'ATTR=VALUE' (any filter isn-query --filter takes) gives every query that filter: each is then a
 * query tree (the GPU answers it with the attribute columns resident; the CPU's answers are the reference);
 * --interleave N (with --filter) runs the same queries without the filter too, on a backend of their own, the rows
 * of the two alternating for N rounds, and after each batch size a "gpu_filter_ratio" line: the best round's
 * rates and filtered/plain, each round's filtered/plain and their median, and the work per query of each
 * (bench/gpu_filter_device.sh); --no-filter-seed gives
 * the filtered queries no probe seed (the device's view before the probe read filters);
 * --write-buckets N adds to the index in --index two int attributes: `bucket`, each document's id hashed into
 * 0..N-1, and `era`, the documents' ids cut into N runs in order (writes DIR/buckets.jsonl and DIR/attributes.isn,
 * replacing the index's attributes), and exits: with `--write-buckets 10`, `--filter bucket=0` keeps about 10% of
 * the documents scattered over every range (issue 40, must-show 4) and `--filter era=0` the first tenth, as a date
 * filter keeps on a partition in crawl order.
 * --prior-weight W (default 0) weights the index's static prior in every score (isn_search_options.prior_weight):
 * every GPU request and the CPU's baseline carry it, the seeds are the prior's probe (isn_threshold_probe_prior,
 * threshold_with_prior), a pruned-prefix cache's replay weights it (isn_gpu_options.training_prior_weight), and
 * every JSON line says the weight.
 * --stream-mb M streams, with a cache, the lists a batch's queries need and the device does not hold whole into a
 * staging region of M MiB per stream (isn_gpu_options.stream_bytes; the open line's stream_bytes, beside the budget):
 * rows count per query those answered with streamed lists, and per batch the lists and bytes streamed. */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"

static uint32_t parse_list(const char *s, uint32_t *out, uint32_t cap) {
    uint32_t n = 0;
    while (*s && n < cap) {
        out[n++] = (uint32_t)strtoul(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

typedef struct {
    isn_query *queries;
    isn_query_term *terms;
    uint32_t n;
} query_log;

static int load_queries(const isn_index *ix, const char *path, uint32_t max, const isn_filter_spec *filter,
                        query_log *log) {
    char err[256];
    isn_query_log text;
    if (isn_query_log_read(path, false, 0, &text, err, sizeof err) != 0)
        return fprintf(stderr, "bench_gpu: %s\n", err), -1;
    isn_searcher *s = isn_searcher_new(ix);
    log->queries = calloc(max, sizeof *log->queries);
    log->terms = calloc((size_t)max * 64, sizeof *log->terms);
    for (size_t i = 0; i < text.count && log->n < max; i++) {
        const char *query_text = text.queries[i].text;
        isn_query q;
        int parsed = filter ? isn_query_parse_syntax(s, query_text, strlen(query_text), filter, 1, &q, err, sizeof err)
                            : isn_query_parse(s, query_text, strlen(query_text), &q, err, sizeof err);
        if (parsed != 0 && filter) {
            fprintf(stderr, "bench_gpu: --filter: %s\n", err);
            exit(2);
        }
        if (parsed != 0 || q.num_terms == 0 || q.num_terms > 64) continue;
        isn_query *dst = &log->queries[log->n];
        dst->structure = NULL;
        if (q.structure) { /* the tree lives in the searcher until the next parse: a copy of its own */
            void *tree = malloc(isn_query_structure_bytes(q.structure));
            if (!tree) return fprintf(stderr, "bench_gpu: out of memory for query trees\n"), -1;
            isn_query_structure_copy(tree, q.structure);
            dst->structure = tree;
        }
        dst->terms = log->terms + (size_t)log->n * 64;
        memcpy(dst->terms, q.terms, q.num_terms * sizeof *q.terms);
        dst->num_terms = q.num_terms;
        dst->num_unknown = q.num_unknown;
        log->n++;
    }
    isn_query_log_free(&text);
    isn_searcher_free(s);
    return 0;
}

typedef struct {
    const isn_index *ix;
    const query_log *log;
    uint32_t k, thread, threads;
    isn_mode mode;
    float prior_weight;
    isn_hit *hits; /* [n][k] when recording, else NULL */
    uint32_t *num_hits;
} cpu_job;

static void *cpu_worker(void *arg) {
    cpu_job *j = arg;
    isn_searcher *s = isn_searcher_new(j->ix);
    isn_hit *scratch = malloc(j->k * sizeof *scratch);
    isn_search_options o;
    isn_search_options_default(&o);
    o.k = j->k;
    o.mode = j->mode;
    o.prior_weight = j->prior_weight;
    char err[256];
    for (uint32_t q = j->thread; q < j->log->n; q += j->threads) {
        isn_hit *out = j->hits ? j->hits + (size_t)q * j->k : scratch;
        uint32_t n = 0;
        isn_search(s, &j->log->queries[q], &o, out, &n, NULL, err, sizeof err);
        if (j->num_hits) j->num_hits[q] = n;
    }
    free(scratch);
    isn_searcher_free(s);
    return NULL;
}

static double run_cpu(const isn_index *ix, const query_log *log, uint32_t k, isn_mode mode, float prior_weight,
                      uint32_t threads, isn_hit *hits, uint32_t *num_hits) {
    pthread_t ids[256];
    cpu_job jobs[256];
    double t0 = isn_now_seconds();
    for (uint32_t t = 0; t < threads; t++) {
        jobs[t] = (cpu_job){ix, log, k, t, threads, mode, prior_weight, hits, num_hits};
        pthread_create(&ids[t], NULL, cpu_worker, &jobs[t]);
    }
    for (uint32_t t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    return isn_now_seconds() - t0;
}

/* The CPU's rate: after a warm-up pass (the one that recorded the answers), whole passes over the log
 * on all threads until at least `seconds` have passed; queries per second over those passes. */
static double cpu_rate(const isn_index *ix, const query_log *log, uint32_t k, isn_mode mode, float prior_weight,
                       uint32_t threads, double seconds, uint32_t *passes) {
    double spent = 0.0;
    *passes = 0;
    while (spent < seconds) {
        spent += run_cpu(ix, log, k, mode, prior_weight, threads, NULL, NULL);
        (*passes)++;
    }
    return (double)*passes * log->n / spent;
}

/* --write-buckets: the int attributes `bucket` = a hash of the doc id into 0..n-1 and `era` = the doc id's run
 * of docs / n ids, for every document. */
static int write_buckets(const char *dir, uint32_t n) {
    char err[512], path[4096];
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) return fprintf(stderr, "bench_gpu: %s\n", err), 1;
    snprintf(path, sizeof path, "%s/buckets.jsonl", dir);
    FILE *f = fopen(path, "w");
    if (!f) return fprintf(stderr, "bench_gpu: %s: cannot write\n", path), 1;
    const uint32_t docs = isn_index_get_info(ix)->num_docs;
    for (uint32_t d = 0; d < docs; d++) {
        size_t len;
        const char *id = isn_index_doc_id(ix, d, &len);
        uint64_t h = (uint64_t)d * 0x9E3779B97F4A7C15ull;
        fprintf(f, "{\"id\": \"%.*s\", \"bucket\": %u, \"era\": %u}\n", (int)len, id, (uint32_t)((h >> 32) % n),
                (uint32_t)((uint64_t)d * n / docs));
    }
    if (fclose(f) != 0) return fprintf(stderr, "bench_gpu: %s: write failed\n", path), 1;
    isn_index_close(ix);
    isn_build_options o;
    isn_build_options_default(&o);
    o.num_attributes = 2;
    o.attributes[0] = (isn_attribute_spec){.name = "bucket", .kind = ISN_ATTRIBUTE_INT};
    o.attributes[1] = (isn_attribute_spec){.name = "era", .kind = ISN_ATTRIBUTE_INT};
    if (isn_attributes_build(path, dir, &o, err, sizeof err) != 0) return fprintf(stderr, "bench_gpu: %s\n", err), 1;
    printf("{\"bench\": \"gpu_buckets\", \"index\": \"%s\", \"docs\": %u, \"buckets\": %u}\n", dir, docs, n);
    return 0;
}

/* One side of the measurement: a query log (the plain one, or with --filter its filtered twin), its backend,
 * the CPU's answers and the probe seeds for the k at hand. */
typedef struct {
    char label[160];
    query_log log;
    isn_gpu_backend *gpu;
    isn_hit *cpu_hits;
    uint32_t *cpu_n;
    double *thresholds;
    double probe_s;
    float prior_weight; /* --prior-weight: every request's, and the CPU's */
} variant;

/* One row: the variant's log (or more of it, --min-batches) in batches of bs on the GPU, checked against the
 * CPU's answers, printed as a JSON line (round: the --interleave round, 0 without). *qps: its rate; *sum: its
 * batches' statistics summed. 0, or -1 after a GPU error. */
static int gpu_row(variant *v, isn_mode mode, uint32_t k, uint32_t bs, uint32_t min_batches, uint32_t inflight,
                   uint32_t round, isn_gpu_request *req, isn_hit *gpu_hits, double *qps, isn_gpu_batch_stats *summed) {
    char err[512];
    uint32_t n = v->log.n < bs * min_batches ? bs * min_batches : v->log.n;
    isn_gpu_batch_stats sum;
    memset(&sum, 0, sizeof sum);
    uint32_t mismatches = 0, on_device = 0, nbatches = 0, pruned_batches = 0, seeded = 0;
    double max_batch_ms = 0;
    for (uint32_t q = 0; q < n; q++) {
        req[q] = (isn_gpu_request){.query = &v->log.queries[q % v->log.n], .mode = mode, .k = k,
                                   .threshold = v->thresholds[q % v->log.n], .prior_weight = v->prior_weight,
                                   .threshold_with_prior = true, .hits = gpu_hits + (size_t)q * k};
        seeded += req[q].threshold > 0.0;
    }
    int tickets[8];
    uint32_t pending = 0, head = 0;
    /* the host's own time per batch: in submit, and in complete past the wait for the device */
    double host_submit_s = 0, host_complete_s = 0;
    double t0 = isn_now_seconds();
    for (uint32_t at = 0; at < n || pending > 0;) {
        if (at < n && pending < inflight) {
            uint32_t cnt = n - at < bs ? n - at : bs;
            double h0 = isn_now_seconds();
            int t = isn_gpu_submit(v->gpu, req + at, cnt, err, sizeof err);
            host_submit_s += isn_now_seconds() - h0;
            if (t < 0) return fprintf(stderr, "bench_gpu: %s\n", err), -1;
            tickets[(head + pending) % 8] = t;
            pending++;
            at += cnt;
            continue;
        }
        isn_gpu_batch_stats st;
        double h0 = isn_now_seconds();
        if (isn_gpu_complete(v->gpu, tickets[head], &st, err, sizeof err) != 0)
            return fprintf(stderr, "bench_gpu: %s\n", err), -1;
        host_complete_s += isn_now_seconds() - h0 - st.ms_device_wait / 1e3;
        head = (head + 1) % 8;
        pending--;
        nbatches++;
        sum.ms_transfer_in += st.ms_transfer_in;
        sum.ms_threshold_pass += st.ms_threshold_pass;
        sum.ms_select_threshold += st.ms_select_threshold;
        sum.ms_score_pass += st.ms_score_pass;
        sum.ms_and_probe += st.ms_and_probe;
        sum.ranges_rescored += st.ranges_rescored;
        sum.ranges_stopped += st.ranges_stopped;
        sum.ms_sort += st.ms_sort;
        sum.ms_transfer_out += st.ms_transfer_out;
        sum.ms_total += st.ms_total;
        sum.postings_scored += st.postings_scored;
        sum.postings_in_lists += st.postings_in_lists;
        sum.postings_decoded += st.postings_decoded;
        sum.blocks_skipped += st.blocks_skipped;
        sum.overflow_retries += st.overflow_retries;
        sum.filter_bitmaps_built += st.filter_bitmaps_built;
        sum.filter_bitmap_queries += st.filter_bitmap_queries;
        sum.ranges_scored += st.ranges_scored;
        sum.ranges_pruned += st.ranges_pruned;
        sum.candidates += st.candidates;
        sum.reports += st.reports;
        sum.ranges_logged += st.ranges_logged;
        sum.ranges_scanned += st.ranges_scanned;
        sum.ranked_steps += st.ranked_steps;
        sum.cpu_queries += st.cpu_queries;
        sum.cpu_early += st.cpu_early;
        sum.prefix_queries += st.prefix_queries;
        sum.queries_streamed += st.queries_streamed;
        sum.lists_streamed += st.lists_streamed;
        sum.bytes_streamed += st.bytes_streamed;
        sum.prefix_cpu_postings += st.prefix_cpu_postings;
        sum.bound_settled += st.bound_settled;
        sum.completions_avoided += st.completions_avoided;
        sum.ranges_bound_skipped += st.ranges_bound_skipped;
        for (int r = 0; r < ISN_GPU_FALLBACK_REASONS; r++) sum.fallbacks[r] += st.fallbacks[r];
        for (int a = 0; a < ISN_GPU_ACC_KINDS; a++) sum.accumulator_queries[a] += st.accumulator_queries[a];
        if (st.ms_total > max_batch_ms) max_batch_ms = st.ms_total;
        pruned_batches += st.pruned;
    }
    double wall = isn_now_seconds() - t0;
    for (uint32_t q = 0; q < n; q++) {
        const uint32_t lq = q % v->log.n; /* the log query this request repeats */
        on_device += req[q].answered_by == ISN_GPU_ANSWERED_DEVICE;
        bool same = req[q].num_hits == v->cpu_n[lq];
        for (uint32_t i = 0; same && i < v->cpu_n[lq]; i++)
            same = gpu_hits[(size_t)q * k + i].doc == v->cpu_hits[(size_t)lq * k + i].doc &&
                   gpu_hits[(size_t)q * k + i].score == v->cpu_hits[(size_t)lq * k + i].score;
        if (!same && mismatches++ < 3)
            fprintf(stderr, "bench_gpu: query %u k %u differs from the CPU (%u vs %u hits)\n", q, k,
                    req[q].num_hits, v->cpu_n[lq]);
    }
    char fallbacks[512];
    size_t used = 0;
    for (int r = 0; r < ISN_GPU_FALLBACK_REASONS; r++)
        used += (size_t)snprintf(fallbacks + used, sizeof fallbacks - used, "%s\"%s\": %u", r ? ", " : "",
                                 isn_gpu_fallback_label((isn_gpu_fallback_reason)r), sum.fallbacks[r]);
    double kernel_ms = sum.ms_threshold_pass + sum.ms_score_pass + sum.ms_and_probe;
    printf("{\"bench\": \"gpu\", \"label\": \"%s\", \"round\": %u, \"mode\": \"%s\", \"k\": %u, \"prior_weight\": %g, "
           "\"batch\": %u, \"inflight\": %u, "
           "\"queries\": %u, \"qps\": %.1f, \"mean_batch_ms\": %.3f, \"max_batch_ms\": %.3f, \"on_device\": %u, "
           "\"mismatches\": %u, \"ms_per_batch\": {\"transfer_in\": %.4f, \"threshold_pass\": %.4f, "
           "\"select_threshold\": %.4f, \"score_pass\": %.4f, \"and_probe\": %.4f, \"sort\": %.4f, \"transfer_out\": %.4f}, "
           "\"postings_scored\": %llu, \"postings_decoded\": %llu, \"seeded\": %u, \"postings_in_lists\": %llu, "
           "\"list_postings_per_s\": %.4g, "
           "\"scored_postings_per_s\": %.4g, \"decode_score_postings_per_s\": %.4g, "
           "\"blocks_skipped\": %llu, \"ranges_pruned_fraction\": %.4f, "
           "\"candidates_per_query\": %.1f, \"reports_per_query\": %.1f, \"ranges_rescored_per_query\": %.2f, "
           "\"ranges_visited_per_query\": %.2f, \"ranges_stopped_per_query\": %.2f, \"overflow_retries\": %u, "
           "\"filter_bitmaps_built\": %u, \"filter_bitmap_queries\": %u, "
           "\"ranges_logged_per_query\": %.2f, \"ranges_scanned_per_query\": %.2f, \"ranked_steps_per_query\": %.2f, "
           "\"cpu_answered\": %u, \"cpu_early\": %u, \"cpu_fallbacks\": {%s}, \"prefix_completed\": %u, "
           "\"prefix_cpu_postings\": %llu, \"bound_settled\": %u, \"completions_avoided\": %u, "
           "\"ranges_bound_skipped_per_query\": %.2f, \"per_query\": {\"cpu_completions\": %.4f, \"cpu_fallbacks\": %.4f, "
           "\"device_only\": %.4f, \"postings_decoded\": %.1f, \"postings_scored\": %.1f, \"cpu_postings\": %.1f, "
           "\"streamed\": %.4f}, \"streamed_per_batch\": {\"lists\": %.1f, \"mb\": %.3f}, "
           "\"probe_us_per_query\": %.2f, \"batches\": %u, \"pruned_batches\": %u, "
           "\"host_ms_per_batch\": {\"submit\": %.4f, \"complete\": %.4f}, "
           "\"accumulators\": {\"bounds\": %u, \"narrow\": %u, \"compact\": %u, \"wide\": %u, \"unreported\": %u}}\n",
           v->label, round, mode == ISN_MODE_AND ? "and" : "or", k, (double)v->prior_weight, bs, inflight, n, n / wall, sum.ms_total / nbatches, max_batch_ms,
           on_device, mismatches, sum.ms_transfer_in / nbatches, sum.ms_threshold_pass / nbatches,
           sum.ms_select_threshold / nbatches, sum.ms_score_pass / nbatches, sum.ms_and_probe / nbatches,
           sum.ms_sort / nbatches, sum.ms_transfer_out / nbatches, (unsigned long long)sum.postings_scored,
           (unsigned long long)sum.postings_decoded, seeded,
           (unsigned long long)sum.postings_in_lists, sum.postings_in_lists / wall,
           sum.postings_scored / wall, kernel_ms > 0 ? sum.postings_scored / (kernel_ms / 1e3) : 0.0,
           (unsigned long long)sum.blocks_skipped,
           sum.ranges_scored + sum.ranges_pruned
               ? (double)sum.ranges_pruned / (double)(sum.ranges_scored + sum.ranges_pruned)
               : 0.0,
           (double)sum.candidates / n, (double)sum.reports / n, (double)sum.ranges_rescored / n,
           (double)(sum.ranges_scored + sum.ranges_pruned) / n, (double)sum.ranges_stopped / n, sum.overflow_retries,
           sum.filter_bitmaps_built, sum.filter_bitmap_queries,
           (double)sum.ranges_logged / n, (double)sum.ranges_scanned / n, (double)sum.ranked_steps / n, sum.cpu_queries,
           sum.cpu_early, fallbacks,
           sum.prefix_queries, (unsigned long long)sum.prefix_cpu_postings, sum.bound_settled, sum.completions_avoided,
           (double)sum.ranges_bound_skipped / n, (double)sum.prefix_queries / n, (double)sum.cpu_queries / n,
           (double)(on_device - sum.prefix_queries) / n, (double)sum.postings_decoded / n, (double)sum.postings_scored / n,
           (double)sum.prefix_cpu_postings / n, (double)sum.queries_streamed / n, (double)sum.lists_streamed / nbatches,
           (double)sum.bytes_streamed / nbatches / 1048576.0,
           v->probe_s / v->log.n * 1e6, nbatches, pruned_batches, host_submit_s * 1e3 / nbatches,
           host_complete_s * 1e3 / nbatches, sum.accumulator_queries[ISN_GPU_ACC_BOUNDS],
           sum.accumulator_queries[ISN_GPU_ACC_NARROW],
           sum.accumulator_queries[ISN_GPU_ACC_COMPACT], sum.accumulator_queries[ISN_GPU_ACC_WIDE],
           sum.accumulator_queries[ISN_GPU_ACC_UNREPORTED]);
    fflush(stdout);
    *qps = n / wall;
    *summed = sum;
    return 0;
}

int main(int argc, char **argv) {
    const char *index_dir = NULL, *queries_path = NULL, *train_path = NULL, *label = "index";
    uint32_t ks[8] = {10, 1000}, nks = 2, batches[8] = {1, 16, 256, 4096}, nb = 4, max_queries = 4096, min_batches = 1;
    uint32_t threads = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN), inflight = 2;
    double budget_mb = 0, cpu_seconds = 2.0, prefix_cap = 0, budget_fraction = 0;
    const char *cache = NULL, *train_mode = NULL;
    uint32_t train_k = 0;
    bool emulate = false, modes[2] = {true, true}, and_by_ranges = false, want_cpu_rate = true, double_acc = false;
    bool seed = true, filter_seed = true;
    int pruning = ISN_GPU_PRUNE_AUTO;
    uint32_t buckets = 0, interleave = 0;
    float prior_weight = 0.0f;
    const char *stream_mb = NULL;
    char *filter_text = NULL;
    isn_filter_spec filter;
    const char *filter_values[64];
    static const struct option opts[] = {{"index", 1, 0, 'i'},   {"queries", 1, 0, 'q'}, {"ks", 1, 0, 'k'},
                                         {"batches", 1, 0, 'b'}, {"threads", 1, 0, 't'}, {"max-queries", 1, 0, 'm'},
                                         {"emulate", 0, 0, 'e'}, {"label", 1, 0, 'l'},   {"modes", 1, 0, 'M'},
                                         {"and-by-ranges", 0, 0, 'A'}, {"no-cpu-rate", 0, 0, 'N'},
                                         {"double-acc", 0, 0, 'D'},     {"budget-mb", 1, 0, 'B'},
                                         {"inflight", 1, 0, 'F'},       {"no-seed", 0, 0, 'S'},
                                         {"cpu-seconds", 1, 0, 'C'},    {"exhaustive", 0, 0, 'X'},
                                         {"pruned", 0, 0, 'P'},         {"train-queries", 1, 0, 'T'},
                                         {"prefix-cap", 1, 0, 'Q'},     {"min-batches", 1, 0, 'R'},
                                         {"filter", 1, 0, 'G'},         {"write-buckets", 1, 0, 'W'},
                                         {"interleave", 1, 0, 'I'},   {"no-filter-seed", 0, 0, 'Z'},
                                         {"cache", 1, 0, 'K'},          {"budget-fraction", 1, 0, 'Y'},
                                         {"train-k", 1, 0, 'J'},        {"train-mode", 1, 0, 'O'},
                                         {"prior-weight", 1, 0, 'V'},   {"stream-mb", 1, 0, 'U'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'i': index_dir = optarg; break;
        case 'q': queries_path = optarg; break;
        case 'k': nks = parse_list(optarg, ks, 8); break;
        case 'b': nb = parse_list(optarg, batches, 8); break;
        case 't': threads = (uint32_t)atoi(optarg); break;
        case 'm': max_queries = (uint32_t)atoi(optarg); break;
        case 'e': emulate = true; break;
        case 'A': and_by_ranges = true; break;
        case 'D': double_acc = true; break;
        case 'B': budget_mb = strtod(optarg, NULL); break;
        case 'N': want_cpu_rate = false; break;
        case 'F': inflight = (uint32_t)atoi(optarg); break;
        case 'S': seed = false; break;
        case 'X': pruning = ISN_GPU_PRUNE_NEVER; break;
        case 'P': pruning = ISN_GPU_PRUNE_ALWAYS; break;
        case 'C': cpu_seconds = strtod(optarg, NULL); break;
        case 'T': train_path = optarg; break;
        case 'Q': prefix_cap = strtod(optarg, NULL); break;
        case 'R': min_batches = (uint32_t)atoi(optarg); break;
        case 'l': label = optarg; break;
        case 'G': filter_text = strdup(optarg); break;
        case 'W': buckets = (uint32_t)atoi(optarg); break;
        case 'I': interleave = (uint32_t)atoi(optarg); break;
        case 'Z': filter_seed = false; break;
        case 'K': cache = optarg; break;
        case 'Y': budget_fraction = strtod(optarg, NULL); break;
        case 'J': train_k = (uint32_t)atoi(optarg); break;
        case 'O': train_mode = optarg; break;
        case 'V': prior_weight = strtof(optarg, NULL); break;
        case 'U': stream_mb = optarg; break;
        case 'M': modes[0] = strstr(optarg, "or") != NULL; modes[1] = strstr(optarg, "and") != NULL; break;
        default: return 2;
        }
    }
    if (index_dir && buckets) return write_buckets(index_dir, buckets);
    if (!index_dir || !queries_path) {
        fprintf(stderr, "usage: bench_gpu --index DIR --queries FILE.tsv [--ks ..] [--batches ..] [--threads N]\n");
        return 2;
    }
    if (threads == 0 || threads > 256) return fprintf(stderr, "bench_gpu: --threads must be 1..256\n"), 2;
    if (inflight == 0 || inflight > 8) return fprintf(stderr, "bench_gpu: --inflight must be 1..8\n"), 2;
    if (min_batches == 0 || min_batches > 4096) return fprintf(stderr, "bench_gpu: --min-batches must be 1..4096\n"), 2;
    if (interleave > 100) return fprintf(stderr, "bench_gpu: --interleave must be 1..100 rounds\n"), 2;
    if (interleave && !filter_text) return fprintf(stderr, "bench_gpu: --interleave compares with --filter: give one\n"), 2;
    if (cache && strcmp(cache, "whole") && strcmp(cache, "pruned") && strcmp(cache, "visits") && strcmp(cache, "queries") &&
        strcmp(cache, "capped") && strcmp(cache, "tier"))
        return fprintf(stderr, "bench_gpu: --cache must be whole, pruned, queries, visits, capped or tier, got '%s'\n",
                       cache), 2;
    if (budget_fraction < 0 || budget_fraction >= 1)
        return fprintf(stderr, "bench_gpu: --budget-fraction must be in (0, 1), got %g\n", budget_fraction), 2;
    if (train_mode && strcmp(train_mode, "or") && strcmp(train_mode, "and"))
        return fprintf(stderr, "bench_gpu: --train-mode must be or or and, got '%s'\n", train_mode), 2;
    char *stream_end = NULL;
    const unsigned long stream_mib = stream_mb ? strtoul(stream_mb, &stream_end, 10) : 0;
    if (stream_mb && (stream_end == stream_mb || *stream_end || stream_mib == 0 || stream_mib > 65536))
        return fprintf(stderr, "bench_gpu: --stream-mb must be a whole number of MiB in 1..65536, got '%s'\n", stream_mb), 2;
    if (!(prior_weight >= 0.0f) || isinf(prior_weight))
        return fprintf(stderr, "bench_gpu: --prior-weight must be a finite weight >= 0, got %g\n", (double)prior_weight), 2;
    char err[512];
    isn_index *ix = isn_index_open(index_dir, err, sizeof err);
    if (!ix) return fprintf(stderr, "bench_gpu: %s\n", err), 1;
    query_log log = {0};
    if (filter_text) {
        char *said = strdup(filter_text);
        if (isn_filter_parse(filter_text, &filter, filter_values, 64) != 0)
            return fprintf(stderr, "bench_gpu: --filter '%s' is none of ATTR=V, ATTR!=V, ATTR>=N (>, <=, <), "
                                   "ATTR in {a,b}\n", said), 2;
        filter_text = said;
    }
    if (load_queries(ix, queries_path, max_queries, filter_text ? &filter : NULL, &log) != 0 || log.n == 0)
        return fprintf(stderr, "bench_gpu: no usable query in %s\n", queries_path), 1;
    uint32_t max_k = 0, max_batch = 0;
    for (uint32_t i = 0; i < nks; i++) max_k = ks[i] > max_k ? ks[i] : max_k;
    for (uint32_t i = 0; i < nb; i++) max_batch = batches[i] > max_batch ? batches[i] : max_batch;
    isn_gpu_options go;
    isn_gpu_options_default(&go);
    go.emulate = emulate;
    go.max_batch = max_batch;
    go.max_k = max_k;
    go.and_by_ranges = and_by_ranges;
    go.double_accumulators = double_acc;
    go.streams = inflight;
    go.pruning = pruning;
    go.stream_bytes = (uint64_t)stream_mib << 20;
    query_log train = {0};
    if (train_path && (load_queries(ix, train_path, 65536, NULL, &train) != 0 || train.n == 0))
        return fprintf(stderr, "bench_gpu: no usable training query in %s\n", train_path), 1;
    if (budget_mb > 0 || budget_fraction > 0) { /* a pruned-prefix cache, trained on held-out queries or the log itself */
        go.memory_budget = (uint64_t)(budget_mb * 1048576.0);
        go.memory_fraction = budget_fraction;
        go.training_queries = train_path ? train.queries : log.queries;
        go.num_training_queries = train_path ? train.n : log.n;
        if (prefix_cap > 0) go.prefix_cap = prefix_cap;
        /* --cache: whole lists (the capped admission at prefix_cap 1), list prefixes by the training queries'
         * needs completed per byte, the training queries' visited blocks whole and cheapest first, blocks by
         * visits per byte alone, the capped prefixes (leading blocks up to --prefix-cap), or every list's blocks
         * below one document cut (tier: no training log) */
        if (cache && !strcmp(cache, "whole")) go.admission = ISN_GPU_ADMIT_CAPPED, go.prefix_cap = 1.0;
        if (cache && !strcmp(cache, "pruned")) go.admission = ISN_GPU_ADMIT_PREFIXES;
        if (cache && !strcmp(cache, "queries")) go.admission = ISN_GPU_ADMIT_QUERIES;
        if (cache && !strcmp(cache, "visits")) go.admission = ISN_GPU_ADMIT_VISITS;
        if (cache && !strcmp(cache, "capped")) go.admission = ISN_GPU_ADMIT_CAPPED;
        if (cache && !strcmp(cache, "tier")) go.admission = ISN_GPU_ADMIT_TIER;
        /* the replay's k and mode: the first measured unless given */
        go.training_k = train_k ? train_k : ks[0];
        go.training_mode = train_mode ? (!strcmp(train_mode, "and") ? ISN_MODE_AND : ISN_MODE_OR)
                                      : (modes[0] ? ISN_MODE_OR : ISN_MODE_AND);
        go.training_prior_weight = prior_weight; /* the replay settles queries as the measured ones weight the prior */
    }
    /* --interleave: the same queries without the filter too, on their own backend (each learns its own pruning
     * choice, as each would in a process of its own), rows of the two alternating */
    const uint32_t num_sides = interleave ? 2 : 1;
    variant sides[2];
    memset(sides, 0, sizeof sides);
    sides[0].log = log;
    snprintf(sides[0].label, sizeof sides[0].label, "%s%s", label, interleave ? "-filtered" : "");
    if (interleave) {
        if (load_queries(ix, queries_path, max_queries, NULL, &sides[1].log) != 0 || sides[1].log.n != log.n)
            return fprintf(stderr, "bench_gpu: --interleave: the plain log does not hold the filtered one's queries\n"), 1;
        snprintf(sides[1].label, sizeof sides[1].label, "%s-plain", label);
    }
    const isn_index_info *info = isn_index_get_info(ix);
    if (prior_weight > 0.0f && !isn_index_prior_bounds(ix))
        return fprintf(stderr, "bench_gpu: --prior-weight %g needs an index with finite static scores (isn-index build "
                               "--static-score FIELD)\n", (double)prior_weight), 2;
    for (uint32_t v = 0; v < num_sides; v++) {
        sides[v].prior_weight = prior_weight;
        double t_open = isn_now_seconds();
        sides[v].gpu = isn_gpu_open(ix, &go, err, sizeof err);
        if (!sides[v].gpu) return fprintf(stderr, "bench_gpu: %s\n", err), 1;
        t_open = isn_now_seconds() - t_open;
        isn_gpu_health h;
        isn_gpu_health_get(sides[v].gpu, &h);
        printf("{\"bench\": \"gpu_open\", \"label\": \"%s\", \"device\": \"%s\", \"docs\": %u, \"postings\": %llu, "
               "\"queries\": %u, \"index_bytes\": %llu, \"bytes_resident\": %llu, \"terms_resident\": %u, \"terms_prefix\": %u, "
               "\"terms\": %u, \"open_seconds\": %.3f, \"warmup_ms\": %.3f, \"attribute_bytes\": %llu, \"filter\": \"%s\", "
               "\"cache\": \"%s\", \"budget_fraction\": %.4f, \"train_k\": %u, \"train_mode\": \"%s\", \"prior_weight\": %g, "
               "\"static_score_bytes\": %llu, \"tier_docs\": %u, \"stream_bytes\": %llu}\n",
               sides[v].label, h.device_name, info->num_docs, (unsigned long long)info->num_postings, log.n,
               (unsigned long long)h.index_bytes, (unsigned long long)h.bytes_resident, h.terms_resident, h.terms_prefix,
               h.terms_total, t_open, h.warmup_ms, (unsigned long long)h.attribute_bytes,
               filter_text && v == 0 ? filter_text : "", cache ? cache : "default", budget_fraction, go.training_k,
               go.training_mode == ISN_MODE_AND ? "and" : "or", (double)prior_weight,
               (unsigned long long)h.static_score_bytes, h.tier_docs, (unsigned long long)h.stream_bytes);
        fflush(stdout);
        sides[v].cpu_hits = malloc((size_t)log.n * max_k * sizeof *sides[v].cpu_hits);
        sides[v].cpu_n = malloc(log.n * sizeof *sides[v].cpu_n);
        sides[v].thresholds = calloc(log.n, sizeof *sides[v].thresholds);
    }
    /* requests: the log, or more of it over again for --min-batches */
    const uint32_t requests = log.n > max_batch * min_batches ? log.n : max_batch * min_batches;
    if ((double)requests * max_k * sizeof(isn_hit) > 16.0 * 1073741824.0)
        return fprintf(stderr, "bench_gpu: --min-batches %u at batch %u and k %u needs over 16 GiB of answers\n",
                       min_batches, max_batch, max_k), 2;
    isn_hit *gpu_hits = malloc((size_t)requests * max_k * sizeof *gpu_hits);
    isn_gpu_request *req = calloc(requests, sizeof *req);
    for (int m = 0; m < 2; m++) {
        if (!modes[m]) continue;
        isn_mode mode = m ? ISN_MODE_AND : ISN_MODE_OR;
        for (uint32_t ki = 0; ki < nks; ki++) {
            uint32_t k = ks[ki];
            for (uint32_t v = 0; v < num_sides; v++) {
                variant *side = &sides[v];
                /* the answers, and the warm-up */
                run_cpu(ix, &side->log, k, mode, prior_weight, threads, side->cpu_hits, side->cpu_n);
                if (want_cpu_rate) {
                    uint32_t passes = 0;
                    double qps = cpu_rate(ix, &side->log, k, mode, prior_weight, threads, cpu_seconds, &passes);
                    printf("{\"bench\": \"cpu\", \"label\": \"%s\", \"mode\": \"%s\", \"k\": %u, \"prior_weight\": %g, "
                           "\"threads\": %u, \"queries\": %u, \"passes\": %u, \"qps\": %.1f}\n",
                           side->label, m ? "and" : "or", k, (double)prior_weight, threads, log.n, passes, qps);
                }
                fflush(stdout);
                /* the probe seeds, computed before timing as isnd's cost model does before dispatch */
                side->probe_s = isn_now_seconds();
                for (uint32_t q = 0; q < log.n; q++) {
                    uint32_t docs = 0;
                    /* --no-filter-seed: the filtered queries go without, as before the probe read filters */
                    const bool seeds = seed && (filter_seed || !filter_text || v != 0);
                    /* with a prior, the prior's probe: a bound of the scores the search ranks by */
                    side->thresholds[q] =
                        seeds && mode == ISN_MODE_OR
                            ? isn_threshold_probe_prior(ix, &side->log.queries[q], k, prior_weight, NULL, 0, NULL, &docs)
                            : 0.0;
                }
                side->probe_s = isn_now_seconds() - side->probe_s;
            }
            for (uint32_t bi = 0; bi < nb; bi++) {
                const uint32_t bs = batches[bi];
                double best[2] = {0.0, 0.0}, round_ratio[100];
                isn_gpu_batch_stats last[2];
                for (uint32_t round = 1; round <= (interleave ? interleave : 1); round++) {
                    double qps[2] = {0.0, 0.0};
                    for (uint32_t v = 0; v < num_sides; v++) {
                        if (gpu_row(&sides[v], mode, k, bs, min_batches, inflight, interleave ? round : 0, req, gpu_hits,
                                    &qps[v], &last[v]) != 0)
                            return 1;
                        best[v] = qps[v] > best[v] ? qps[v] : best[v];
                    }
                    if (interleave) round_ratio[round - 1] = qps[1] > 0 ? qps[0] / qps[1] : 0.0;
                }
                if (!interleave) continue;
                /* each round's filtered/plain (its two rows ran one after the other) and their median: the best
                 * rounds' ratio pairs rows of different rounds */
                char rounds_text[100 * 24];
                size_t used = 0;
                rounds_text[0] = '\0';
                for (uint32_t r = 0; r < interleave && used < sizeof rounds_text; r++)
                    used += (size_t)snprintf(rounds_text + used, sizeof rounds_text - used, "%s%.3f", r ? ", " : "",
                                             round_ratio[r]);
                const double median_ratio = bench_median(round_ratio, interleave);
                /* the comparison: best of the rounds each, and the work per query of the last round */
                const uint32_t n = log.n < bs * min_batches ? bs * min_batches : log.n;
                printf("{\"bench\": \"gpu_filter_ratio\", \"label\": \"%s\", \"filter\": \"%s\", \"mode\": \"%s\", "
                       "\"k\": %u, \"batch\": %u, \"rounds\": %u, \"plain_qps\": %.1f, \"filtered_qps\": %.1f, "
                       "\"filtered_over_plain\": %.3f, \"round_ratios\": [%s], \"median_round_ratio\": %.3f, "
                       "\"per_query\": {\"plain\": {\"postings_decoded\": %.0f, "
                       "\"postings_scored\": %.0f, \"blocks_skipped\": %.1f, \"reports\": %.1f}, \"filtered\": "
                       "{\"postings_decoded\": %.0f, \"postings_scored\": %.0f, \"blocks_skipped\": %.1f, \"reports\": %.1f}}}\n",
                       label, filter_text, m ? "and" : "or", k, bs, interleave, best[1], best[0],
                       best[1] > 0 ? best[0] / best[1] : 0.0, rounds_text, median_ratio, (double)last[1].postings_decoded / n,
                       (double)last[1].postings_scored / n, (double)last[1].blocks_skipped / n, (double)last[1].reports / n,
                       (double)last[0].postings_decoded / n, (double)last[0].postings_scored / n,
                       (double)last[0].blocks_skipped / n, (double)last[0].reports / n);
                fflush(stdout);
            }
        }
    }
    for (uint32_t v = 0; v < num_sides; v++) isn_gpu_close(sides[v].gpu);
    isn_index_close(ix);
    return 0;
}
