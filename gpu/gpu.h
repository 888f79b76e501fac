/* ISN GPU backend interface. The one public header of gpu/.
 * Built with CUDA (make CUDA=1, the default when nvcc is found) it talks to the devices; built without,
 * the no-GPU backend reports zero devices and everything runs on the CPU. */
#ifndef ISN_GPU_H
#define ISN_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "ranking/ranking.h"

typedef struct {
    int ordinal;
    char name[256];
    uint64_t memory_bytes;
    int compute_major;
    int compute_minor;
    int multiprocessors;
} isn_gpu_device_info;

/* "cuda" or "none". */
const char *isn_gpu_backend_name(void);

/* Number of usable devices; 0 without CUDA, without a driver or without a GPU (then err says why). */
int isn_gpu_device_count(char *err, size_t err_len);

/* 0, or -1 with err. */
int isn_gpu_device_info_get(int ordinal, isn_gpu_device_info *info, char *err, size_t err_len);

/* Runs a small kernel on the device and checks its result: proves the build, the driver and the device
 * work together. 0, or -1 with err. */
int isn_gpu_self_test(int ordinal, char *err, size_t err_len);

/* ------------------------------------------------------------------ first-stage backend
 *
 * A backend holds one partition's postings on one device and answers batches of first-stage queries
 * with the CPU's answers (same top-k, ties by lower doc id; scores are computed with the CPU's float
 * arithmetic and summed in double, so they are equal, not merely close). What the device cannot
 * answer exactly (a term not resident, too many terms, candidate overflow, a device error, an
 * unhealthy device) is answered by the CPU (on options.cpu_threads threads), so every request gets its
 * answer: what it refuses at isn_gpu_submit from then on, beside the device's part; the rest inside
 * isn_gpu_complete, which returns once all of the batch is answered. */

enum { ISN_GPU_PRUNE_AUTO = 0, ISN_GPU_PRUNE_ALWAYS = 1, ISN_GPU_PRUNE_NEVER = 2 };
enum { ISN_GPU_ADMIT_AUTO = 0, ISN_GPU_ADMIT_CAPPED = 1, ISN_GPU_ADMIT_VISITS = 2, ISN_GPU_ADMIT_QUERIES = 3,
       ISN_GPU_ADMIT_PREFIXES = 4, ISN_GPU_ADMIT_TIER = 5 };
#define ISN_GPU_PRUNE_EXPLORE 32

typedef struct {
    int device;                /* ordinal to use; ignored by the emulated device */
    bool emulate;              /* run the device algorithm on the host instead (tests and CI, no GPU) */
    uint64_t memory_budget;    /* bytes of device memory for postings + metadata; 0 = 85% of free memory */
    /* In (0, 1): postings take at most this share of the partition's postings in the device layout
     * (isn_gpu_health.index_bytes less the block metadata), within memory_budget too (to compare caches
     * at a fraction of an index whose size the caller does not know); 0 = no such limit. */
    double memory_fraction;
    uint32_t max_batch;        /* queries per batch (default 1024) */
    uint32_t max_k;            /* largest k served on the device (default 1000, at most 10000) */
    uint32_t max_candidates;   /* per query, before the final sort (0 = max(4 * max_k, 16384)) */
    uint32_t streams;          /* batches in flight at once (default 2) */
    /* Conjunctive queries whose shortest list has at most max_candidates postings are answered by probing
     * that list's documents into the others; true sends them through the range passes too (measuring). */
    bool and_by_ranges;
    /* Range accumulators sum in 64-bit fixed point when that is provably exact for the query (device.h,
     * gpu_fixed_shift), else in double; true forces double (measuring). */
    bool double_accumulators;
    /* Pruning (seeded threshold, sampling round, bound grid; device.h): AUTO measures the device time per
     * list posting of pruned and of exhaustive batches and keeps using the cheaper, trying the other in
     * runs of streams + 1 batches (the middle ones measure it alone) every ISN_GPU_PRUNE_EXPLORE runs times
     * how much slower it was (answers are the same either way); ALWAYS and NEVER fix it. */
    int pruning; /* ISN_GPU_PRUNE_* */
    /* Pruned-prefix posting cache, when the partition does not fit the budget: block visits replayed
     * from this training query log (NULL: document frequency stands in) decide which lists' leading
     * blocks stay resident, by visits per byte, each list admitted up to prefix_cap of its blocks
     * (default 0.5; 1 = whole lists only). A query whose lists are resident only in part is answered by
     * the device below the point where its shortest resident prefix ends, and by the CPU from there. */
    const isn_query *training_queries;
    uint32_t num_training_queries;
    double prefix_cap;
    /* Which leading blocks a pruned-prefix cache admits first. ISN_GPU_ADMIT_CAPPED: each list the log names up
     * to prefix_cap of its blocks, by the queries naming it per byte (as above). ISN_GPU_ADMIT_VISITS: the log
     * replayed on the CPU (its exact top training_k in training_mode) with the device's early termination
     * (an index in global order: a query is settled from the first document where its bound cannot beat its
     * k-th score), each block counting the queries that visit it before they are settled; blocks by visits
     * per byte, each list a prefix (on an index without score bounds a query visits all its blocks).
     * ISN_GPU_ADMIT_QUERIES: the same replay, but first the training queries whole, cheapest first: each round
     * admits the blocks the query needing the fewest more bytes still lacks to be settled on the device, while
     * it fits; then blocks by visits per byte. ISN_GPU_ADMIT_PREFIXES: the same replay, each list grown to
     * the depth some query needs (the blocks below where it is settled) that completes the most such needs
     * per byte, best first: with no query settled early, the whole-list cache's order; then blocks by visits
     * per byte.
     * AUTO (default): CAPPED, until the device says which costs less. Where the bound settles few queries (the
     * synthetic partition fitted to Debian: none), a block's visits count every query naming its list, and by
     * visits per block byte the deep blocks of popular lists go in before the first blocks of others: at 8% of
     * a 2M-document partition 64% of held-out queries then had a list with no block resident, against 35% with
     * whole lists (PREFIXES: 32%, QUERIES, fitted to its log: 67%; CAPPED: 3.5%, and 90% completed on the CPU).
     * With ISN_GPU_UNNAMED_LISTS=1 the three replayed admissions also weigh the leading blocks of the lists the
     * log never names, by their expected namings (a Good-Turing estimate per df band: naming_rates.h) times the
     * share of the training queries a block would be visited by, against the logged lists' blocks: most held-out
     * queries of a real log name a term its training part never does. Off by default: with Debian's log
     * transplanted onto the 20M partition it answered more queries on the device and fewer a second. All then grow
     * the logged lists to whole lists and admit the lists the log never names, while the budget lasts.
     * ISN_GPU_ADMIT_TIER: no log; the blocks below one document cut of every list of more than one block, the
     * highest cut that fits (tier_admission.h), so that every query naming only such lists covers at least the cut;
     * a query naming a list of one block is answered on the CPU. */
    int admission;
    uint32_t training_k; /* default 10 (at most max_k) */
    isn_mode training_mode; /* default ISN_MODE_OR */
    /* The static prior's weight the replay scores with (isn_search_options.prior_weight; default 0: BM25 alone), and
     * its settle point: the tail bound with the prior's part (tail_bound.h). Queries that weight a prior settle where
     * it says, often far earlier than BM25 alone would (a dominant prior decides most of a top k), so the cache
     * then admits the shallower prefixes they visit. Must be a weight the index takes (isn_search refuses others:
     * isn_gpu_open fails, saying why). */
    float training_prior_weight;
    /* Streaming, for a partition larger than its cache: each stream keeps a staging region of stream_bytes of
     * device memory (beside memory_budget, which it does not count against), and a batch's queries whose lists are
     * not all resident whole get the missing lists copied into it, whole, from a host copy of every list laid out
     * for the device (as large as the partition's device layout, in pinned host memory), instead of being answered
     * or completed on the CPU; a query whose lists do not fit what is left of the region stays with the CPU.
     * 0 (default): none. */
    uint64_t stream_bytes;
    /* Threads for the CPU's part of a batch (completions on prefixes, fallbacks), the completing thread
     * included; 0 = one per online core, 1 = the completing thread alone (which then answers the requests
     * refused at submission only when it completes the batch). */
    uint32_t cpu_threads;
    /* The CPUs those threads run on (NULL: wherever the opening thread may); with cpu_threads 0, one thread
     * per CPU listed (read only while isn_gpu_open runs). isnd's server.pin_loops lists its workers' CPUs, keeping
     * the loops' to the loops. */
    const int *cpus;
    uint32_t num_cpus;
} isn_gpu_options;

void isn_gpu_options_default(isn_gpu_options *options);

/* Bytes of device memory the first `blocks` blocks of a term's list take once laid out for the device
 * (what memory_budget counts for postings; the layout trades some size for aligned, exception-free
 * blocks); 0 for an unknown term or a list that does not decode. */
uint64_t isn_gpu_list_bytes(const isn_index *index, uint32_t term_id, uint32_t blocks);

typedef struct isn_gpu_backend isn_gpu_backend;

/* Picks the device, checks it with isn_gpu_self_test, uploads the payload and block metadata (or the
 * lists that fit the budget), warms the kernels up. NULL with err when no device can be used; the
 * caller then serves on the CPU. */
isn_gpu_backend *isn_gpu_open(const isn_index *index, const isn_gpu_options *options, char *err, size_t err_len);
void isn_gpu_close(isn_gpu_backend *backend);

typedef enum {
    ISN_GPU_ANSWERED_DEVICE = 1,
    ISN_GPU_ANSWERED_CPU = 2, /* fallback: see isn_gpu_request.fallback_reason */
    /* ISN_GPU_ANSWERED_DEVICE also covers a query answered on resident prefixes and completed on the
     * CPU (isn_gpu_batch_stats.prefix_queries counts them), and an empty query (no hits, no search) */
} isn_gpu_answered_by;

typedef struct {
    /* in */
    const isn_query *query; /* terms with df (as isn_query_parse fills them) */
    isn_mode mode;
    uint32_t k;        /* 1..ISN_MAX_K; above options.max_k the CPU answers */
    uint64_t num_docs; /* collection size for IDF; 0 = the index's */
    /* A lower bound of the k-th best score under the index's own statistics (e.g. isn_threshold_probe,
     * which the scheduler's cost model computes anyway; 0 = none). OR mode only, ignored when num_docs
     * or a term's df is not the index's. The device skips what cannot reach it from the start. A query
     * tree's must bound the tree's own answer, filters included (isn_threshold_probe of the tree does);
     * the device uses it for bags of words with filters, and ignores it for other trees. With prior_weight
     * above 0 it is used only with threshold_with_prior. */
    double threshold;
    /* A static prior in the score (isn_search_options.prior_weight; 0 = none): every document scores
     * isn_prior_score(its BM25, prior_weight, its static score), on the device and in the CPU's part alike,
     * the same hits and float scores as isn_search with that weight. The device takes it where the partition
     * has finite static scores (resident beside the postings); else, or where the weight overflows them
     * (isn_search refuses that weight), the CPU answers (ISN_GPU_FALLBACK_STATIC_PRIOR). Finite and >= 0. */
    float prior_weight;
    /* threshold bounds the scores with the prior (isn_threshold_probe_prior with this prior_weight). Without
     * it a request with a prior ignores threshold: a BM25-only bound (isn_threshold_probe's) is none where
     * static scores may be negative. */
    bool threshold_with_prior;
    isn_hit *hits;     /* k entries, caller's */
    /* out */
    uint32_t num_hits;
    isn_gpu_answered_by answered_by;
    const char *fallback_reason; /* static text, NULL when the device answered */
} isn_gpu_request;

/* Why a request was answered on the CPU (every one is counted: isn_gpu_health.fallbacks). An empty
 * query (no terms, or a conjunction with an unknown term) is answered with no hits and searched nowhere;
 * ISN_GPU_FALLBACK_EMPTY_QUERY marks them inside the backend and stays at 0 (not exported). */
typedef enum {
    ISN_GPU_FALLBACK_UNHEALTHY = 0,
    ISN_GPU_FALLBACK_EMPTY_QUERY,
    ISN_GPU_FALLBACK_K_ABOVE_MAX,
    ISN_GPU_FALLBACK_TOO_MANY_TERMS,
    ISN_GPU_FALLBACK_NOT_RESIDENT,
    ISN_GPU_FALLBACK_NONPOSITIVE_WEIGHT,
    ISN_GPU_FALLBACK_TERM_BUDGET,
    ISN_GPU_FALLBACK_CANDIDATE_OVERFLOW,
    ISN_GPU_FALLBACK_DEVICE_ERROR,
    ISN_GPU_FALLBACK_COMPLETION_ERROR, /* the CPU's part of a partly resident query could not run */
    ISN_GPU_FALLBACK_QUERY_TREE,       /* a phrase or a field: clause (positions are not resident) */
    ISN_GPU_FALLBACK_FILTER_BUDGET,    /* the batch's room for filters and their values is taken */
    ISN_GPU_FALLBACK_ATTRIBUTE_NOT_RESIDENT, /* a filter on an attribute whose values span more than 32 bits */
    /* isn_gpu_request.prior_weight > 0 on a partition without finite static scores (isn_search refuses it too),
     * or a weight that overflows a weighted static score */
    ISN_GPU_FALLBACK_STATIC_PRIOR,
    ISN_GPU_FALLBACK_REASONS
} isn_gpu_fallback_reason;

/* Whether the device answers this query itself (where its lists are resident): a bag of words, or a query
 * tree of whole-document terms, required (+term), optional and excluded (-term), with any filters (the
 * attribute columns are resident beside the postings). Phrases and field: clauses read positions, which
 * the device does not hold: false, *why (static text, when why is not NULL) saying so. The scheduler's
 * routing asks this before it offers a query to the GPU. */
bool isn_gpu_takes_query(const isn_query *query, const char **why);
/* The same for a search with a static prior of this weight (isn_search_options.prior_weight): the device adds
 * the prior itself, so any finite weight >= 0 (false, *why saying so, for any other). The backend still answers
 * on the CPU a prior on a partition without finite static scores, which isn_search refuses as well
 * (ISN_GPU_FALLBACK_STATIC_PRIOR). What routing asks. */
bool isn_gpu_takes_search(const isn_query *query, float prior_weight, const char **why);

/* The reason's metric label ("candidate_overflow", ...). */
const char *isn_gpu_fallback_label(isn_gpu_fallback_reason reason);

/* The report pass's accumulator layouts on the CUDA device, 8, 6 and 4 bytes a document: each range query
 * gets the smallest whose counters hold its sums (the narrow one: fixed-point scores summing below 2^31).
 * UNREPORTED: the query ran no report pass, or the device does not say (the emulated one, which names only
 * the bound pass). */
typedef enum {
    ISN_GPU_ACC_UNREPORTED = 0,
    ISN_GPU_ACC_WIDE,
    ISN_GPU_ACC_COMPACT,
    ISN_GPU_ACC_NARROW,
    ISN_GPU_ACC_BOUNDS, /* the narrow layout's words as upper-bound counters of groups of ranges, then an exact
                         * rescore of the ranges near the k-th bound (the bound pass, gpu/kernels.h) */
    ISN_GPU_ACC_KINDS
} isn_gpu_accumulator;

typedef struct {
    uint32_t queries;
    uint32_t device_queries;
    uint32_t cpu_queries;
    uint32_t cpu_early; /* of those, refused at submission and answered by the CPU crew while the device worked */
    uint64_t bytes_to_device;
    uint64_t bytes_from_device;
    uint64_t ranges_scored;   /* (query, doc-id range) pairs decoded and scored by the report pass */
    uint64_t ranges_pruned;   /* skipped there without decoding: no postings, an AND term absent, or no document
                               * the query's filter bitmap keeps (a bound-pass group of ranges counts once) */
    uint64_t ranges_rescored; /* scored again: all their reports reached the threshold */
    /* below the queries' doc limits but past the device's stop (gpu_query.lead_stop): neither scored nor pruned,
     * no block visited them */
    uint64_t ranges_stopped;
    uint64_t postings_scored; /* every pass, AND probing included (those whose documents pass the filters) */
    uint64_t postings_decoded; /* every pass, filtered or not: counted by the emulated device only (0 on CUDA) */
    uint64_t postings_in_lists; /* of the device-answered queries' resident lists: what scoring every
                                   posting would read */
    uint64_t blocks_skipped;  /* blocks of scored ranges left undecoded by their bound */
    uint32_t overflow_retries; /* collection rounds repeated on the device after a candidate overflow */
    /* filter bitmaps built for the batch (the filters its queries share, evaluated once for every document) and
     * its queries whose range passes tested one instead of the attribute columns */
    uint32_t filter_bitmaps_built, filter_bitmap_queries;
    bool pruned;              /* this batch ran with pruning (isn_gpu_options.pruning) */
    uint32_t fallbacks[ISN_GPU_FALLBACK_REASONS]; /* requests answered on the CPU, by reason */
    uint64_t candidates;      /* entering the final sort */
    uint64_t reports;         /* documents the ranges reported in the first pass (at or above their floors) */
    /* narrow ranges with a floor reported from their crossing log, and those whose log overflowed (reported
     * from a scan of their counters) */
    uint64_t ranges_logged, ranges_scanned;
    /* steps of the report pass over several ranges at once: queries with a filter bitmap number their
     * accumulator's slots by the documents it keeps (the CUDA device; 0 on the emulated one) */
    uint64_t ranked_steps;
    uint32_t accumulator_queries[ISN_GPU_ACC_KINDS]; /* device-answered queries by their report pass's layout */
    uint32_t prefix_queries;  /* answered on resident prefixes, completed on the CPU */
    /* streaming (isn_gpu_options.stream_bytes): queries answered on the device with lists streamed for them, and the
     * distinct lists and bytes streamed */
    uint32_t queries_streamed, lists_streamed;
    uint64_t bytes_streamed;
    /* of those, conjunctive ones, which the CPU completes from their submission on, beside the device (a
     * conjunctive search takes no seed); the others are completed once the device has answered, seeded with its
     * k-th score */
    uint32_t prefix_started_early;
    uint64_t prefix_cpu_postings; /* postings the CPU scored to complete them */
    /* An index in global order (isn_index_score_bounds): no document from some id on can beat a query's
     * k-th score when the query's bound there (its terms' weights times the least of the index's bound and
     * each list's largest block maximum from there on) is below it. bound_settled: device-answered queries
     * the bound settled, their range passes stopped early (below the probe's floor, or on the device after leading
     * ranges below their k-th best: ranges_stopped) or their resident
     * prefixes complete (below the device's k-th score at the prefixes' end); completions_avoided: of these,
     * those answered on resident prefixes that the CPU need not complete (not in prefix_queries);
     * ranges_bound_skipped: ranges below the queries' coverage their passes stopped before. */
    uint32_t bound_settled;
    uint32_t completions_avoided;
    uint64_t ranges_bound_skipped;
    /* Device time per stage, from events (0 for the emulated device): copy in; report pass (every range
     * scored once, its best documents reported); threshold selection and collection of the reports;
     * rescoring of the saturated ranges; AND probing; sort and gather; copy out. */
    double ms_transfer_in, ms_threshold_pass, ms_select_threshold, ms_score_pass, ms_and_probe, ms_sort,
        ms_transfer_out;
    double ms_total;          /* submit to complete, wall clock, CPU fallback included */
    double ms_device_wait;    /* in complete: waiting for the device and taking its results */
} isn_gpu_batch_stats;

/* Validates the requests and enqueues the device part of the batch (n <= max_batch). The requests and
 * their hit arrays must stay valid until isn_gpu_complete. Returns a ticket >= 0, or -1 with err (bad
 * request, or every stream busy). */
int isn_gpu_submit(isn_gpu_backend *backend, isn_gpu_request *requests, uint32_t n, char *err, size_t err_len);
/* Waits for the batch, fills every request (re-running on the CPU what the device did not answer,
 * the whole batch after a device error). 0, or -1 with err only for a bad ticket. */
int isn_gpu_complete(isn_gpu_backend *backend, int ticket, isn_gpu_batch_stats *stats, char *err, size_t err_len);
/* Submit + complete. */
int isn_gpu_search_batch(isn_gpu_backend *backend, isn_gpu_request *requests, uint32_t n, isn_gpu_batch_stats *stats,
                         char *err, size_t err_len);
/* Batches the backend holds at once (isn_gpu_options.streams): submits past these wait for a complete. */
uint32_t isn_gpu_streams(const isn_gpu_backend *backend);
/* What `from` learned of its traffic (AUTO pruning: each batch size's cost per posting pruned and
 * exhaustive, and where its runs stand) becomes `to`'s, for a backend that replaces `from` on a new
 * generation of the same partition: it need not relearn, first with runs of exhaustive batches, under
 * the load the old one carried. Neither may have a batch in flight. */
void isn_gpu_adopt_learning(isn_gpu_backend *to, const isn_gpu_backend *from);

/* What /readyz and the metrics need. ready: opened and warmed up (every kernel ran once); healthy:
 * no device error since. A node with ready && !healthy keeps serving, every query on the CPU: /readyz
 * should report it degraded, not down. */
typedef struct {
    bool ready;
    bool healthy;
    double warmup_ms;
    double layout_ms; /* the set-up's host part: residency planned, lists laid out as the device reads them */
    double upload_ms; /* the device's memory allocated and the layout copied in */
    char reason[256];      /* why not healthy (the first device error) */
    char device_name[256];
    uint64_t index_bytes;    /* postings (device layout) + block metadata of the whole partition */
    uint64_t bytes_resident; /* of those, on the device */
    uint64_t attribute_bytes; /* the attribute columns (filters), resident too (not in index_bytes) */
    /* the static scores and each doc-id range's largest (a static prior), resident too where the index has finite
     * ones (not in index_bytes; in bytes_resident and the budget) */
    uint64_t static_score_bytes;
    uint32_t terms_total;
    uint32_t terms_resident;   /* whole lists on the device */
    uint32_t terms_prefix;     /* lists whose leading blocks only are on the device */
    uint32_t tier_docs;        /* ISN_GPU_ADMIT_TIER: the cut, below which every list is resident (0 otherwise) */
    uint64_t batches;
    uint64_t queries_device;
    uint64_t queries_cpu;
    uint64_t queries_not_resident; /* answered on the CPU because a list was not resident */
    uint64_t queries_prefix;       /* answered on resident prefixes and completed on the CPU */
    uint64_t completions_avoided;  /* answered on resident prefixes and settled by the bound: no CPU completion */
    uint64_t queries_streamed;     /* answered on the device with lists streamed for them (isn_gpu_options.stream_bytes) */
    uint64_t bytes_streamed;       /* and the bytes streamed */
    uint64_t stream_bytes;         /* device memory of the streams' staging regions (0 without streaming) */
    uint64_t device_errors;
    uint64_t bytes_transferred;
    uint64_t fallbacks[ISN_GPU_FALLBACK_REASONS]; /* requests answered on the CPU, by reason */
    /* What AUTO pruning learned: milliseconds per million list postings, from a batch's completion to the
     * later of its submission and the previous completion, pruned and exhaustive (0 before the first such
     * batch); the batches run in each mode; and the batches each learned from: those that ran beside no
     * batch of the other mode (a costly batch beside a cheap one lends the cheap one its time, or takes
     * the cheap one's). */
    double ms_per_mposting_pruned, ms_per_mposting_exhaustive;
    uint64_t batches_pruned, batches_exhaustive;
    uint64_t samples_pruned, samples_exhaustive;
    /* The calling thread's time in the backend, seconds: staging batches (isn_gpu_submit), waiting for the
     * device in isn_gpu_complete, and the rest of isn_gpu_complete (answers copied out, CPU answers of what
     * the device did not take). A thread that sends every batch is the bound when these add up to its time. */
    double seconds_submitting, seconds_device_wait, seconds_completing;
} isn_gpu_health;

void isn_gpu_health_get(const isn_gpu_backend *backend, isn_gpu_health *health);
/* The health as Prometheus text lines (isn_gpu_ready, isn_gpu_healthy, isn_gpu_bytes_resident,
 * isn_gpu_queries_*_total, isn_gpu_cpu_fallbacks_total{reason}, ...), each with the given label set inside the braces (e.g. "device=\"0\"",
 * or NULL). Returns the length it needed (as snprintf: output truncated when >= len). Thread-safety:
 * call with the same lock that guards the backend's batches. */
size_t isn_gpu_health_format_metrics(const isn_gpu_health *health, const char *labels, char *buf, size_t len);

/* Test hook: the next batch's device work fails as a CUDA error would; the backend turns unhealthy and
 * that batch and every later one are answered on the CPU. */
void isn_gpu_inject_fault(isn_gpu_backend *backend);

/* ================================================================== second stage (L2) on the GPU
 * (gpu/l2_*.cu; separate from the first-stage backend above.) Scores the model inputs of the
 * candidates of many queries in one launch (rows as isn_ranker_transform writes them, the queries'
 * rows one after another): tree ensembles with complete trees staged in shared memory, one thread per
 * row walking every tree for models of up to 256 inputs, and for wider ones (to several thousand
 * inputs, the device's opt-in shared memory a block) warps sharing a block's rows and splitting the
 * trees; the trees split across thread blocks too when a batch has too few rows to fill the GPU;
 * MLP layers as matrix products; a stacked ranker (trees `then mlp`) runs its trees, then its MLP
 * reading each row's inputs and the trees' score, in the same launch sequence. Results equal the CPU's
 * (isn_ranker_predict: isn_forest_predict, isn_mlp_predict[_last]) bit for bit. Models are uploaded on
 * first use into a cache of several resident models within a memory budget (a stacked ranker's trees
 * and MLP as one entry), the least recently used evicted. isn_gpu_l2_score* calls on a handle are serialised;
 * isn_gpu_l2_pass calls from several threads overlap (options.pass_slots of them at once). */

typedef struct {
    int device;
    uint64_t model_memory_budget; /* bytes of device memory for resident models (default 512 MiB) */
    uint32_t max_rows;            /* rows per launch (default 262144); larger calls go in several */
    /* Trees are split across thread blocks when a call has fewer rows than this and its row blocks
     * alone would leave multiprocessors idle; 0 = whenever they would (default), 1 = never,
     * UINT32_MAX = always. */
    uint32_t split_below_rows;
    /* A call's rows go in this many chunks (at most 8) over two streams, so that one chunk's copy
     * overlaps another's kernels; 0 = automatic (default: one chunk, which measured fastest). */
    uint32_t overlap_chunks;
    /* One-pass second-stage calls (isn_gpu_l2_pass) in flight at once, from as many threads: each has
     * its own stream, page-locked host buffers and device buffers, kept from call to call (0: 4; at
     * most 64); a further caller waits for one to finish. */
    uint32_t pass_slots;
} isn_gpu_l2_options;

void isn_gpu_l2_options_default(isn_gpu_l2_options *options);

typedef struct isn_gpu_l2 isn_gpu_l2;

/* NULL with err when no GPU can be used (a build without CUDA, no device): score on the CPU then. */
isn_gpu_l2 *isn_gpu_l2_open(const isn_gpu_l2_options *options, char *err, size_t err_len);
void isn_gpu_l2_close(isn_gpu_l2 *l2);

typedef struct {
    bool cache_hit;          /* the model was resident */
    uint32_t evicted;        /* models evicted to make room for it */
    uint32_t tree_splits;    /* tree groups over thread blocks per row (1: one block walked every tree) */
    uint32_t launches;
    double ms_upload_model;  /* on a miss */
    double ms_pack;          /* isn_gpu_l2_pass: the batch packed into the page-locked buffer (host) */
    double ms_wait;          /* isn_gpu_l2_pass: waiting for a free in-flight slot */
    double ms_transfer;      /* rows in, scores out: the part not hidden behind kernels */
    double ms_kernels;       /* first kernel's start to last kernel's end */
    double ms_features, ms_transforms, ms_model; /* isn_gpu_l2_pass: the kernels' time split FE / MIT / model */
    double ms_total;         /* the call, wall clock */
} isn_gpu_l2_stats;

/* Scores n rows (row i at inputs + i * stride, stride >= the model's inputs) into out[0..n). 0, or -1
 * with err, nothing written: no GPU form for this model (trees deeper than 10 levels, LightGBM
 * zero-as-missing splits, more inputs than the device's shared memory holds for 8 rows: 6,752 on an
 * H200), the model alone above the budget, or a device error; the caller then
 * scores on the CPU. stats may be NULL. */
int isn_gpu_l2_score_forest(isn_gpu_l2 *l2, const isn_forest *forest, const float *inputs, uint32_t n, uint32_t stride,
                            float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len);
int isn_gpu_l2_score_mlp(isn_gpu_l2 *l2, const isn_mlp *mlp, const float *inputs, uint32_t n, uint32_t stride,
                         float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len);
/* The ranker's model, whichever it is. */
int isn_gpu_l2_score(isn_gpu_l2 *l2, const isn_ranker *ranker, const float *inputs, uint32_t n, uint32_t stride,
                     float *out, isn_gpu_l2_stats *stats, char *err, size_t err_len);

/* ------------------------------------------------------------------ the whole second stage in one pass
 * Feature extraction, model-input transforms and the model for every candidate of a batch of queries
 * in one device pass (gpu/l2_pass*.{c,cu}): the hits isn_feature_hits_gather gathered on the CPU
 * (queries[q] for query q; every query of the batch from one index) go to the device in one copy; a
 * thread per candidate computes its feature row with the CPU's own code (isn_feature_row, built
 * without fused multiply-add), a thread per model input its transform, the trees or MLP layers run on
 * the rows where they lie, and one copy brings the scores back (and the feature rows, when features is
 * not NULL: for checks). scores[r] and features[r * isn_feature_count] follow the queries' rows in
 * order. The numbers equal the CPU's bit for bit (isn_features_extract, isn_ranker_transform, the model:
 * feature_rows.h says why). The ranker's model is cached as
 * isn_gpu_l2_score's. 0, or -1 with err (no GPU form for the model, a device error, the model budget
 * taken by models other passes are using): then re-rank on the CPU. Safe from many threads at once:
 * each call holds one of the handle's in-flight slots (options.pass_slots) for its whole flight, so
 * one thread's packing and copies overlap other threads' kernels; the lock they share covers only the
 * model cache's lookup. */
int isn_gpu_l2_pass(isn_gpu_l2 *l2, const isn_ranker *ranker, const isn_feature_hits *const *queries,
                    uint32_t num_queries, float *scores, float *features, isn_gpu_l2_stats *stats, char *err,
                    size_t err_len);
/* The same pass run on the host as the device runs it: the same packed buffer, read through the
 * device addresses written into it; the row and transform steps thread by thread; the CPU's model
 * evaluators (whose numbers the GPU's equal, test_gpu_l2). What tests check without a GPU. */
int isn_gpu_l2_pass_emulated(const isn_ranker *ranker, const isn_feature_hits *const *queries, uint32_t num_queries,
                             float *scores, float *features, char *err, size_t err_len);
/* An emulated device with in-flight slots as a GPU handle has (gpu/l2_pass_slots.h): each slot's
 * buffers (the packed copy on both sides, feature rows, inputs, scores) its own and reused from call to
 * call, results copied to the caller at the end, so that concurrent passes are checked without a GPU.
 * slots: 0 for the default (4). NULL when out of memory. */
typedef struct isn_gpu_l2_emulated isn_gpu_l2_emulated;
isn_gpu_l2_emulated *isn_gpu_l2_emulated_new(uint32_t slots);
void isn_gpu_l2_emulated_free(isn_gpu_l2_emulated *emulated);
/* isn_gpu_l2_pass_emulated in one of the handle's slots (waiting for one while all are taken); safe
 * from many threads at once. */
int isn_gpu_l2_pass_on_emulated(isn_gpu_l2_emulated *emulated, const isn_ranker *ranker,
                                const isn_feature_hits *const *queries, uint32_t num_queries, float *scores,
                                float *features, char *err, size_t err_len);

/* ------------------------------------------------------------------ the pass's gather on several threads
 * The hits of a batch's candidates gathered on a crew of threads (gpu/l2_gather_crew.c): each query's
 * candidates are cut into slices of neighbouring doc ids (each slice's term cursors then read only its
 * own part of the postings), every slice gathered by isn_feature_hits_gather into its own workspace,
 * all at once. A candidate's hits, its feature row and its score depend on that candidate alone, so
 * the pass over the slices computes the numbers of one gather, in another row order: order says where
 * each of its rows belongs. For a GPU pass whose gather would otherwise take one thread (the CPU side
 * of the one-pass stage); one run at a time per crew. */
typedef struct isn_gpu_l2_gather_crew isn_gpu_l2_gather_crew;

/* threads: the calling thread included. min_slice: fewest candidates a slice is cut to (0: 256).
 * NULL when out of memory or a thread cannot start. */
isn_gpu_l2_gather_crew *isn_gpu_l2_gather_crew_new(const isn_index *index, uint32_t threads, uint32_t min_slice);
void isn_gpu_l2_gather_crew_free(isn_gpu_l2_gather_crew *crew);

typedef struct {
    const isn_query *query;
    uint64_t num_docs; /* as isn_feature_hits_gather's */
    const uint32_t *docs;
    uint32_t n;
} isn_gpu_l2_candidates;

/* Gathers the candidates of num_queries queries: *slices[0..*num_slices) for isn_gpu_l2_pass (or
 * isn_gpu_l2_pass_emulated) as its batch, the slices of query q before those of q + 1; the pass's row r
 * is row (*order)[r] of the rows the queries' candidates make one after another (query q's docs[i] at
 * the sum of the earlier queries' n, plus i). Valid until the crew's next call. 0, or -1 with err. */
int isn_gpu_l2_gather(isn_gpu_l2_gather_crew *crew, const isn_gpu_l2_candidates *queries, uint32_t num_queries,
                      const isn_feature_hits *const **slices, uint32_t *num_slices, const uint32_t **order, char *err,
                      size_t err_len);

/* ------------------------------------------------------------------ the re-ranking device choice
 * One object per node (gpu/rerank_choice.c): a worker re-ranks with one call,
 *     isn_rerank_stage(workspace, ranker, query, num_docs, hits, n, k, isn_gpu_rerank_score, rerank, ...)
 * and the whole second stage runs on the CPU or as one GPU pass, whichever measured faster for calls
 * of that many candidates and that model's size on this node (learned online; every 32nd call of a
 * size tries the other device). A GPU failure re-runs the call on the CPU inside and is counted. Safe
 * from every worker at once. l2 may be NULL: CPU only. */
typedef struct isn_gpu_rerank isn_gpu_rerank;
isn_gpu_rerank *isn_gpu_rerank_new(isn_gpu_l2 *l2);
void isn_gpu_rerank_free(isn_gpu_rerank *rerank);
/* An isn_stage_scorer (ranking.h); context: the isn_gpu_rerank. */
int isn_gpu_rerank_score(void *context, isn_l2_workspace *workspace, const isn_ranker *ranker,
                         const isn_feature_hits *hits, float *scores, char *err, size_t err_len);
/* The device that scored the calling thread's last isn_gpu_rerank_score: 0 the CPU (a failed GPU pass
 * included), 1 the GPU. */
int isn_gpu_rerank_last_device(void);
/* The device the next call of this size would run on: 0 the CPU, 1 the GPU. */
int isn_gpu_rerank_choose(isn_gpu_rerank *rerank, const isn_ranker *ranker, uint32_t candidates);
/* What a call of this size is expected to take, in milliseconds: the faster device's measured average
 * (the one calls of the size run on); 0 before either was measured. What isnd's scheduler adds to a
 * re-ranked query's predicted run. */
double isn_gpu_rerank_expected_ms(const isn_gpu_rerank *rerank, const isn_ranker *ranker, uint32_t candidates);
/* A measured time of a call of this size on device (0 CPU, 1 GPU), as a call records it (for a warm-up
 * or a benchmark that measures outside). */
void isn_gpu_rerank_record(isn_gpu_rerank *rerank, const isn_ranker *ranker, uint32_t candidates, int device,
                           double ms);

typedef struct {
    uint64_t cpu_calls, gpu_calls; /* calls scored on each (a failed GPU call counts as a CPU call) */
    uint64_t gpu_failures;         /* GPU passes that failed and were re-run on the CPU */
    uint64_t explored;             /* calls sent to the slower device to re-measure it */
} isn_gpu_rerank_stats;
void isn_gpu_rerank_stats_get(const isn_gpu_rerank *rerank, isn_gpu_rerank_stats *stats);

typedef struct {
    uint32_t resident_models;
    uint64_t resident_bytes;
    uint64_t budget_bytes;
    uint64_t hits, misses, evictions;
} isn_gpu_l2_cache_info;

void isn_gpu_l2_cache_get(const isn_gpu_l2 *l2, isn_gpu_l2_cache_info *info);

/* Page-locked host memory for the rows (copies to the device at full speed); plain malloc without a
 * GPU. NULL when out of memory. */
void *isn_gpu_l2_host_alloc(size_t bytes);
void isn_gpu_l2_host_free(void *p);

#endif
