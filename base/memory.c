/* Allocation helpers (see base.h). */
#include <stdlib.h>
#include <unistd.h>

#include "base/base.h"

void *isn_calloc_written(size_t count, size_t size) {
    char *p = calloc(count, size);
    if (!p) return NULL;
    /* A write to each page, not a memset: calloc's fresh pages are not mapped yet, and the kernel
     * zeroes a page on its first touch; only that touch must be a write. */
    static size_t page;
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = count * size;
    for (size_t at = 0; at < bytes; at += page) ((volatile char *)p)[at] = 0;
    return p;
}
