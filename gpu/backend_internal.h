/* Private to gpu/: the first-stage backend's state (gpu.h's isn_gpu_backend), which its two files share:
 * backend_open.c opens it (residency, the device layout, the attribute columns, the warm-up) and closes it;
 * backend.c serves batches (assembly, the device call, the CPU's answers, health). */
#ifndef ISN_GPU_BACKEND_INTERNAL_H
#define ISN_GPU_BACKEND_INTERNAL_H

#include "base/base.h"
#include "gpu/attribute_zones.h"
#include "gpu/cpu_crew.h"
#include "gpu/device.h"
#include "gpu/gpu.h"
#include "gpu/prune_choice.h"
#include "gpu/query_tree.h"
#include "gpu/tail_bound.h"

#define MAX_STREAMS 8

typedef struct {
    bool busy;
    bool launched; /* the device holds part of this batch */
    isn_gpu_request *requests;
    uint32_t num_requests;
    uint32_t *device_request; /* batch query -> request */
    uint8_t *path_of;         /* request -> GPU_PATH_* */
    uint64_t *postings_in_lists; /* batch query -> postings of its resident lists */
    gpu_zone_cache zone_cache;   /* the kept ranges of the filters this slot staged last (attribute_zones.h) */
    uint32_t *cpu_tasks;         /* batch queries to complete, or requests to answer, on the CPU */
    /* The requests the device refused at submission (a list not resident, a budget), answered by the CPU crew
     * from then on while the device works on the rest, rather than after it on the completing thread: on a
     * cache their CPU time is most of a batch's. early[i]: request i is one of them. */
    uint32_t *early_tasks;
    uint32_t num_early;
    bool *early;
    cpu_run early_run;
    uint64_t *task_postings;     /* what each completion scored */
    /* Conjunctive queries answered on resident prefixes (batch queries, early_completion_of: 1 + their place
     * here, 0 for the rest): the crew completes them from the submission on, beside the device. A conjunctive
     * search takes no seed (isn_search_options.initial_threshold), so waiting for the device's k-th score only put
     * the CPU's part after the device's. Their hits (suffix_hits, suffix_stride = max_k apart, at their places) are merged once the device
     * has answered. */
    uint32_t *early_completions, num_early_completions, *early_completion_of;
    isn_hit *suffix_hits;
    uint32_t suffix_stride;
    uint32_t *suffix_count;
    uint64_t *suffix_postings;
    uint8_t *suffix_failed;
    isn_hit *merge_scratch; /* max_k */
    cpu_run completion_run;
    gpu_tree_form *trees;        /* request -> its query tree as the device takes it (tree requests only) */
    gpu_query *queries;
    gpu_term *terms;
    /* batch query -> the documents its resident lists cover whole: below it the device answers, from it on
     * the CPU completes (gpu_query.doc_limit may end earlier, where the tail bound stops the query) */
    uint32_t *coverage;
    tail_term *tail_terms;       /* the batch's terms as the tail bound reads them (whole lists), as terms */
    uint32_t *ranges_bound_skipped; /* batch query -> ranges below its coverage the tail bound stopped it before */
    gpu_filter *filters;         /* the tree queries' filters, compiled (compile_filter) */
    uint32_t *filter_values;     /* and their stored values */
    gpu_query_result *results;
    isn_hit *hits;
    gpu_batch batch;
    gpu_stage_list *stage; /* the lists streamed for this batch (max_terms entries with streaming) */
    uint32_t *stage_term;  /* and their terms */
    /* where this stream's staging region starts in the device payload and block metadata (gpu_stage_payload_base,
     * gpu_stage_block_base) */
    uint64_t stage_payload_at;
    uint32_t stage_block_at;
    uint64_t stage_used;   /* bytes of the staging region they take */
    uint32_t stage_blocks_used;
    uint32_t queries_streamed;
    double submitted_at;
    uint64_t bytes_staged;
    bool pruned; /* this batch prunes (choose_pruning) */
} stream_slot;

struct isn_gpu_backend {
    const isn_index *index;
    isn_gpu_options options;
    const gpu_device_ops *ops;
    gpu_device *device;
    cpu_crew *crew; /* the CPU's part of batches: completions on prefixes, fallbacks */
    tail_bounds tails; /* global order: early termination and settling on prefixes (tail_bound.h) */
    uint32_t *term_blocks;  /* per term: resident leading blocks (all of them, a prefix, or 0) */
    float *term_max_part;   /* per term: the largest max_tf_part of its resident blocks */
    const isn_block_meta *index_blocks;
    float k1_plus_1, max_norm; /* for gpu_fixed_shift */
    /* what is uploaded (device layout), until the device has its copy */
    uint8_t *device_payload;
    uint64_t device_payload_bytes;
    isn_block_meta *device_blocks;
    uint32_t max_terms;     /* gpu_term entries per batch */
    uint32_t max_filters, max_filter_values; /* gpu_filter entries and their values per batch */
    /* the attribute columns (gpu_attribute), until the device has its copy; the descriptors stay */
    uint32_t *attribute_words;
    uint64_t num_attribute_words;
    /* The static scores (the index's own array) and each range's largest, until the device has its copy
     * (gpu_upload); prior_resident: the device holds them, so it takes any prior weight but one for which the
     * largest magnitude (static_magnitude) overflows a float once weighted, which isn_search refuses too */
    const float *static_scores;
    float *range_prior_max;
    bool prior_resident;
    float static_magnitude;
    gpu_attribute attributes[ISN_MAX_ATTRIBUTES];
    uint32_t num_attributes;
    double last_completion_ms; /* of the latest batch (0 before the first), for learn_pruning */
    bool last_completed_pruned; /* and whether it pruned */
    prune_learning prune[PRUNE_CLASSES]; /* AUTO pruning, by batch size (prune_class) */
    bool fault_armed;
    bool no_probe; /* options.and_by_ranges */
    /* unpruned disjunctive queries with filters sample (gpu_query.sampled_floor) as those without a floor do;
     * ISN_GPU_FILTER_SAMPLING=0: they score every range in one round instead (top-10 and the like then take
     * the bound pass without a floor), to compare */
    bool filter_sampling;
    bool zone_maps; /* ISN_GPU_ZONE_MAPS=0: report lists sized for every range, filtered or not (to compare) */
    /* queries with a prior in global order score the leading ranges first (gpu_query.lead_ranges);
     * ISN_GPU_LEAD_RANGES=0: they sample as the others do, to compare */
    bool lead_ranges;
    /* their second round: pruned at the leading k-th best where the tail bound at it ends the query inside the
     * partition (gpu_lead_prunes; ISN_GPU_LEAD_PRUNE=0: never, that is then only its floor; 1: always), and ended
     * on the device where the tail bound falls below it (ISN_GPU_LEAD_STOP=0: every range visited); to compare */
    uint32_t lead_prune;
    bool lead_stop;
    gpu_zones zones; /* of the resident attribute columns (attribute_zones.h) */
    /* Streaming (isn_gpu_options.stream_bytes; stage_bytes 0: none): every list laid out on the host, with its block
     * metadata and suffix maxima (page-aligned, kept while the device lives: it reads them), and each stream's staging
     * region. A submission numbers itself (stage_epoch); staged_term[t] == stage_epoch says term t is streamed for it,
     * its blocks' metadata from staged_at[t] (gpu_stage_list). */
    uint8_t *stream_payload;
    uint64_t stream_payload_bytes;
    isn_block_meta *stream_blocks;
    float *stream_suffix;
    uint64_t stage_bytes;
    uint32_t stage_blocks;
    uint32_t stage_epoch;
    uint32_t *staged_term, *staged_at;
    uint32_t report_stride; /* the devices' report slots a (query, range): gpu_upload.report_stride */
    isn_gpu_health health;
    stream_slot slots[MAX_STREAMS];
};

/* base/'s monotonic clock in milliseconds, the unit of the health and batch statistics. */
static inline double gpu_backend_now_ms(void) { return (double)isn_now_ns() / 1e6; }

/* Whether the index's queries with a prior may score their leading ranges first (gpu_query.lead_ranges): global
 * order (score bounds) and static scores (their suffix maxima). */
static inline bool gpu_backend_leads_ranges(const isn_index *ix) {
    return isn_index_score_bounds(ix) && isn_index_prior_bounds(ix);
}

#endif
