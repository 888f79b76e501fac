/* In-place heapsort of 64-bit keys: the second stage sorts candidates without allocating (glibc's
 * qsort may allocate a merge buffer). */
#include <string.h>

#include "ranking/l2_internal.h"

static void sift_down(uint64_t *a, size_t root, size_t n) {
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && a[child + 1] > a[child])
            child++;
        if (a[root] >= a[child])
            return;
        uint64_t tmp = a[root];
        a[root] = a[child];
        a[child] = tmp;
        root = child;
    }
}

void l2_sort_u64(uint64_t *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;)
        sift_down(a, i, n);
    for (size_t end = n; end > 1; end--) {
        uint64_t tmp = a[0];
        a[0] = a[end - 1];
        a[end - 1] = tmp;
        sift_down(a, 0, end - 1);
    }
}

/* Least significant digit first, a byte a pass, each pass stable; the bytes every key shares are
 * skipped (doc ids of a small index leave the top bytes zero). The same order as l2_sort_u64. */
void l2_sort_u64_radix(uint64_t *a, uint64_t *scratch, size_t n) {
    uint32_t counts[8][256] = {{0}};
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            counts[b][(a[i] >> (8 * b)) & 0xFF]++;
    uint64_t *from = a, *to = scratch;
    for (int b = 0; b < 8; b++) {
        if (n == 0 || counts[b][(a[0] >> (8 * b)) & 0xFF] == n)
            continue;
        uint32_t at = 0;
        for (int d = 0; d < 256; d++) {
            uint32_t c = counts[b][d];
            counts[b][d] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++)
            to[counts[b][(from[i] >> (8 * b)) & 0xFF]++] = from[i];
        uint64_t *t = from;
        from = to;
        to = t;
    }
    if (from != a)
        memcpy(a, from, n * sizeof *a);
}
