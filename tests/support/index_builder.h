/* Small test indexes: the build options most unit tests want (one "body" field, terms as written). */
#ifndef ISN_TESTS_SUPPORT_INDEX_H
#define ISN_TESTS_SUPPORT_INDEX_H

#include "index/index.h"

/* One field "body", no stemming or stopwords (tests name their terms exactly), documents kept in input
 * order (doc d is the d-th added), no positions, one partition, no progress output. */
void support_plain_build_options(isn_build_options *options);

/* Removes a test's temporary index directory and everything in it; 0 on success. */
int support_remove_tree(const char *dir);

#endif
