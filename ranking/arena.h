/* Private to ranking/: the per-query bump arena. A search first states how many bytes it needs in
 * all (the sum of ranking_arena_size of each piece), then takes pieces that cannot run out. */
#ifndef ISN_RANKING_ARENA_H
#define ISN_RANKING_ARENA_H

#include <stddef.h>

#include "ranking/ranking_internal.h"

size_t ranking_arena_size(size_t bytes);
/* Empties the arena and grows it when `needed` exceeds its capacity. 0, or -1 when out of memory. */
int ranking_arena_reset(ranking_arena *arena, size_t needed);
void *ranking_arena_take(ranking_arena *arena, size_t bytes);
/* Bytes taken since the last reset beyond what it reserved: 0 unless the search's sizing is wrong. */
size_t ranking_arena_overrun(const ranking_arena *arena);
void ranking_arena_free(ranking_arena *arena);

#endif
