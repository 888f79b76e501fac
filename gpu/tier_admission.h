/* Private to gpu/: the pruned-prefix cache's tier admission (ISN_GPU_ADMIT_TIER). Every list of more than one block
 * keeps the blocks that may hold a document below one cut, the highest cut whose blocks fit the budget, so that a
 * query naming only such lists has all of them resident below the cut. On an index in global order those are the
 * documents of the highest global scores, where a query with a static prior finds most of its top k: the device
 * settles it there when its bound at the coverage cannot beat the device's k-th score, and otherwise the CPU
 * completes it from the coverage on, seeded with that score. No training log: most held-out queries of a real log
 * name a list its training part never names, and a query's coverage is its shallowest list's, so a cache deep in
 * the logged lists and shallow or absent in the others leaves their queries to the CPU. A list of one block has no
 * prefix to cut: its one block is all of it, and such lists are the rare terms, many lists named by few queries
 * (a query naming one is answered on the CPU). */
#ifndef ISN_GPU_TIER_ADMISSION_H
#define ISN_GPU_TIER_ADMISSION_H

#include <stdint.h>

#include "index/index.h"

/* Sets term_blocks[t] for every list (0 for lists of one block and for all of them when not even the first blocks
 * fit) for the highest cut whose blocks fit budget bytes, counting each block's bytes as the device layout's
 * (widths, gpu_layout_measure); *used: those bytes, *cut: the cut (0 when nothing is admitted). 0, or -1 with
 * err. */
int tier_admission(const isn_index *index, const uint8_t *widths, uint64_t budget, uint32_t *term_blocks,
                   uint64_t *used, uint32_t *cut, char *err, size_t err_len);

#endif
