/* The stem cache is probed at random once per token: with 4 KiB pages nearly every probe of its
 * 2 MiB also missed the TLB and walked the page tables, even with the slot prefetched. On a 2 MiB page
 * (transparent huge pages, asked for with madvise: the kernel may say no, and then the pages stay
 * small) one TLB entry covers it. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "index/huge_pages.h"

#define HUGE_PAGE_BYTES ((size_t)2 << 20)

#if defined(__SANITIZE_ADDRESS__)
/* AddressSanitizer sees overflows of malloc'd blocks, not of mappings: keep the tables there. */
void *index_table_alloc(size_t bytes) {
    return calloc(1, bytes ? bytes : 1);
}

void index_table_free(void *table, size_t bytes) {
    (void)bytes;
    free(table);
}
#else
static size_t mapped_bytes(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return bytes ? (bytes + page - 1) / page * page : page;
}

void *index_table_alloc(size_t bytes) {
    size_t want = mapped_bytes(bytes), span = want + HUGE_PAGE_BYTES;
    uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    /* Huge pages need 2 MiB-aligned addresses: map more, then give back the ends. */
    uint8_t *table = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(HUGE_PAGE_BYTES - 1));
    size_t head = (size_t)(table - raw), tail = span - head - want;
    if (head) munmap(raw, head);
    if (tail) munmap(table + want, tail);
    if (want >= HUGE_PAGE_BYTES) madvise(table, want, MADV_HUGEPAGE); /* a hint: refused, pages stay small */
    return table;
}

void index_table_free(void *table, size_t bytes) {
    if (table) munmap(table, mapped_bytes(bytes));
}
#endif
