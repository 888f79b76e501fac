/* Private to gpu/: how many queries of a log as long as the training log are expected to name each list, for
 * the pruned-prefix cache's admission. A list the log names: the queries naming it. A list it never names: the
 * Good-Turing estimate of its band's unseen namings (a band: the lists whose df has the same binary order of
 * magnitude), the band's lists named by exactly one query spread evenly over its lists named by none, each count
 * one more (a band whose logged lists are all named more than once, as the most frequent are, would otherwise
 * expect its other lists never to be named). Queries favour terms of some document frequencies over others, and
 * most held-out queries of a real log name a term its training part never names, so a cache for them must weigh
 * the lists the log does not name as well. Used with ISN_GPU_UNNAMED_LISTS=1 (backend_open.c). */
#ifndef ISN_GPU_NAMING_RATES_H
#define ISN_GPU_NAMING_RATES_H

#include <stdbool.h>
#include <stdint.h>

#include "index/index.h"
#include "ranking/ranking.h"

/* rates[t] for each of the index's terms (rates has num_terms entries); named[t] (may be NULL): whether the log
 * names it. */
void naming_rates(const isn_index *index, const isn_query *log, uint32_t log_length, double *rates, bool *named);

#endif
