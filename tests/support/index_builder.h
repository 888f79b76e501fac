/* Small test indexes: the build options most unit tests want (one "body" field, terms as written). */
#ifndef ISN_TESTS_SUPPORT_INDEX_H
#define ISN_TESTS_SUPPORT_INDEX_H

#include <stdio.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/files.h" /* support_remove_tree, for the tests that use both */

/* One field "body", no stemming or stopwords (tests name their terms exactly), documents kept in input
 * order (doc d is the d-th added), no positions, one partition, no progress output. */
void support_plain_build_options(isn_build_options *options);

/* A temporary index of generated documents, open, with a searcher: what most tests search. */
typedef struct {
    char dir[64];
    isn_index *index;
    isn_searcher *searcher;
} support_index;

/* Writes document `doc`'s body into text[0..cap) and returns its length. */
typedef size_t (*support_doc_text)(void *user, uint32_t doc, char *text, size_t cap);

/* Builds documents "d0".."d<num_docs - 1>" with the given options (NULL: support_plain_build_options)
 * into a new directory /tmp/isn-test-<name>-XXXXXX, opens it and makes a searcher; 0 on success, else
 * -1 with the reason printed. */
int support_index_build(support_index *ix, const char *name, const isn_build_options *options, uint32_t num_docs,
                        support_doc_text doc_text, void *user);
/* isn_build_options_default with terms as written (no stemming or stopwords) and no progress output: the
 * options of an index built from JSON Lines, to which a test adds its attributes. */
void support_jsonl_build_options(isn_build_options *options);

/* Writes the documents as JSON Lines to f. */
typedef void (*support_jsonl_writer)(void *user, FILE *f);

/* The same from JSON Lines (attributes and all, as the options say): write_docs fills
 * /tmp/isn-test-<name>-XXXXXX/docs.jsonl, which isn_build_from_file builds into index/ beside it,
 * opened with a searcher; 0 on success, else -1 with the reason printed. */
int support_index_build_jsonl(support_index *ix, const char *name, const isn_build_options *options,
                              support_jsonl_writer write_docs, void *user);
/* isn_search_options_default with the mode, algorithm and k most tests vary. */
isn_search_options support_search_options(isn_mode mode, isn_algo algo, uint32_t k);

/* Parses text and searches it with the given mode, algorithm and k (other options default); 0 on
 * success, else -1 with the reason in err (ISN_ERR_LEN bytes). */
int support_search_text(isn_searcher *searcher, const char *text, isn_mode mode, isn_algo algo, uint32_t k,
                        isn_hit *hits, uint32_t *num_hits, char *err);

/* Frees the searcher and index and removes the directory. */
void support_index_close(support_index *ix);

/* The number after `prefix` in document `doc`'s external id ("doc00042" -> 42 for prefix "doc"), or -1
 * when the id is not the prefix followed by digits only. Reads within the id's length: the reader's ids
 * are not NUL-terminated, and what follows the last one is uninitialized memory. */
long support_doc_id_number(const isn_index *index, uint32_t doc, const char *prefix);

/* Recomputes section `section`'s checksum and the header checksum of an index file held in memory,
 * as a crafted file (or a writer with a bug) would have them: damage then reaches the structural checks. */
void support_reseal_index(uint8_t *data, int section);

#endif
