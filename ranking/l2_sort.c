/* In-place heapsort of 64-bit keys: the second stage sorts candidates without allocating (glibc's
 * qsort may allocate a merge buffer). */
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
