/* Index generations for the integration tests: corpora whose document ids name their generation
 * ("a-17"), built with isn-index, their content hashes, and a `current` link flipped as a deploy
 * tool flips it. */
#ifndef ISN_TESTS_SUPPORT_GENERATIONS_H
#define ISN_TESTS_SUPPORT_GENERATIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grpc/client.h"
#include "tests/support/files.h" /* support_run_command, for the tests that build with isn-index */
#include "tests/support/isnd_harness.h"

/* Writes `docs` JSON Lines documents "PREFIX-N" (title and body of harness words, from `seed`). 0 or -1. */
int support_write_corpus(const char *path, char prefix, uint64_t seed, uint32_t docs);
/* The index's content hash as replies and Info name it (16 hex digits) into out. 0, or -1 said on stderr. */
int support_content_hash(const char *dir, char *out, size_t len);
/* Points the symbolic link `link` at `target` by renaming a new link over it (atomic). 0 or -1. */
int support_flip_link(const char *link, const char *target);

/* Asks Info until the server names generation `want` or timeout_ms pass; whether it did. */
bool support_wait_generation(isn_grpc_client *client, const char *want, int timeout_ms);
/* harness_init for the test program at self_path, with index.path work/current: a symbolic link to
 * target (as a deploy tool keeps it). 0 or -1. */
int support_init_linked(harness *h, const char *self_path, const char *target);

#endif
