/* The merge of the device's and the CPU's parts of a partly resident query. */
#include <string.h>

#include "gpu/prefix_completion.h"

/* a ranks before b: higher score, then lower doc */
static inline bool ranks_before(isn_hit a, isn_hit b) { return isn_hit_worse(b, a); }

uint32_t prefix_merge(isn_hit *a, uint32_t na, const isn_hit *b, uint32_t nb, uint32_t k, isn_hit *scratch) {
    uint32_t i = 0, j = 0, n = 0;
    while (n < k && (i < na || j < nb)) {
        if (j >= nb || (i < na && ranks_before(a[i], b[j]))) scratch[n++] = a[i++];
        else scratch[n++] = b[j++];
    }
    memcpy(a, scratch, n * sizeof *a);
    return n;
}
