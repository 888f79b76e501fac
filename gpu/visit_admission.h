/* Private to gpu/: the pruned-prefix cache's admission by visit frequency (isn_gpu_options.admission). The
 * training log is replayed on the CPU with the early termination the device uses: each query's exact k-th
 * score, then the first document from which its tail bound (tail_bound.h) cannot beat it. The blocks of its
 * lists below that document are the ones the query visits before it is settled: with them resident, the
 * device answers it with no CPU completion. On an index without score bounds a query visits all its blocks.
 * The replay weights the static prior of isn_gpu_options.training_prior_weight (0: BM25 alone), its settle point
 * the tail bound with the prior's part: a log of queries that weight a prior replayed without it measures where BM25
 * alone settles them, which may be earlier or later than where the prior does (answers stay exact either way: what
 * the resident blocks do not settle, the CPU completes). */
#ifndef ISN_GPU_VISIT_ADMISSION_H
#define ISN_GPU_VISIT_ADMISSION_H

#include <stdint.h>

#include "gpu/cpu_crew.h"
#include "gpu/gpu.h"
#include "gpu/tail_bound.h"

/* Grows term_blocks (each list's resident leading blocks) by visits per byte (the next block of a list
 * is a candidate only once the blocks before it are in, so every list stays a prefix) while the budget
 * lasts, counting each block's bytes as the device layout's (widths, gpu_layout_measure). With rates (not
 * NULL), a list the log never names is expected to be visited by rates[t] (naming_rates.h) times the share of
 * the training queries still unsettled at a block's first document: its leading blocks compete with the logged
 * lists' by those visits. Blocks no query visits are left to the caller. *used: bytes admitted so far, updated.
 * 0, or -1 with err. */
int visit_admission(const isn_index *index, const isn_gpu_options *options, const tail_bounds *tails,
                    cpu_crew *crew, const uint8_t *widths, const double *rates, uint64_t budget, uint32_t *term_blocks,
                    uint64_t *used, char *err, size_t err_len);

#endif
