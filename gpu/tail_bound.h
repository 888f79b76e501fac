/* Private to gpu/: on an index in global order (isn_index_score_bounds), a bound on the score of every
 * document from a given id on, for a query's terms, so that the backend can stop a query's range passes
 * early and settle a query answered on resident prefixes without a CPU completion, with the answers
 * unchanged.
 *
 * Each posting's tf part is at most its document's best part P(d), and the index's bound at doc is
 * the largest P from doc on; it is also at most the largest block maximum among its list's blocks that
 * hold documents from doc on (the list's suffix maximum). So no document from doc on scores above
 *     sum over the query's terms of weight x min(bound(doc), the term's suffix maximum at doc),
 * which is never above the index's own bound (its summed weights x bound(doc)) and much below it for
 * terms that are rarely a document's best. Weights are the device's (gpu_term.weight: IDFs under
 * whatever statistics the request carries); norms are the index's, as the device's tf parts are.
 *
 * With a static prior (isn_gpu_request.prior_weight) the bound adds what the prior adds at most from doc on
 * (isn_prior_bound of the static scores' suffix maximum, isn_index_prior_bounds), on any order: without the
 * index's score bounds each term's part is then its list's suffix maximum alone. So where the prior decides
 * the top k, a query ends early in input order too, as the CPU's searches do. */
#ifndef ISN_GPU_TAIL_BOUND_H
#define ISN_GPU_TAIL_BOUND_H

#include <stdbool.h>
#include <stdint.h>

#include "index/index.h"

typedef struct {
    const float *doc_bounds; /* isn_index_score_bounds; NULL: no bound (any other order) */
    const float *prior_bounds; /* isn_index_prior_bounds; NULL: no static prior can be weighted */
    const isn_block_meta *blocks;
    /* per block of the index: the largest max_tf_part from it to its list's end (NULL without doc_bounds and
     * prior_bounds) */
    float *suffix_max;
    uint32_t num_docs;
    /* the bound's factor: 1, or ISN_GPU_TAIL_BOUND_PERCENT / 100 to check that a wrong bound is caught (below
     * 100 a bound that is no bound: answers change; far above it, a bound that settles nothing) */
    double stretch;
} tail_bounds;

/* Fills tb for the index (no bound, nothing allocated, when the index is neither in global order nor with
 * finite static scores). 0, or -1 with err when out of memory. */
int tail_bounds_init(tail_bounds *tb, const isn_index *index, char *err, size_t err_len);
void tail_bounds_free(tail_bounds *tb);

/* One term of a query as the bound reads it: its list (index block range) and weight (<= 0: scores
 * nothing, as an excluded term). */
typedef struct {
    uint32_t first_block, num_blocks;
    float weight;
} tail_term;

/* The bound on the score of every document with id >= doc (0 from num_docs on), margin for float rounding
 * included, the prior's part too with prior_weight > 0 (its scores are isn_prior_score's); +inf when the
 * index has none (not in global order, and no prior weighted). */
double tail_bound(const tail_bounds *tb, const tail_term *terms, uint32_t num_terms, uint32_t doc, float prior_weight);

/* The first id in [from, to) from which no document can reach the score whose float key is score_key
 * (a tail bound below it, gpu_bound_below), or `to` when there is none (or no bound, or score_key 0). The
 * bound falls as ids rise, so the documents below the id are all that can. */
uint32_t tail_stop(const tail_bounds *tb, const tail_term *terms, uint32_t num_terms, uint32_t from, uint32_t to,
                   uint32_t score_key, float prior_weight);

#endif
