/* Zeroed memory for hash tables probed at random, on transparent huge pages where the kernel allows
 * them. Private to index/. */
#ifndef ISN_INDEX_HUGE_PAGES_H
#define ISN_INDEX_HUGE_PAGES_H

#include <stddef.h>

/* bytes of zeroed memory, or NULL; free it with index_table_free and the same size. */
void *index_table_alloc(size_t bytes);
void index_table_free(void *table, size_t bytes);

#endif
