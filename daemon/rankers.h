/* The rankers isnd serves (second stage): every *.ranker file of [rerank] ranker_dir, loaded at start
 * and re-read on SIGHUP. A worker holds a reference for the length of one request, so a reload never
 * frees a ranker a query is still using; the old version goes when its last user lets go.
 * Process-wide (one index per isnd); safe from any thread. */
#ifndef ISN_DAEMON_RANKERS_H
#define ISN_DAEMON_RANKERS_H

#include <stddef.h>
#include <stdint.h>

#include "ranking/ranking.h"

typedef struct ranker_ref ranker_ref;

/* Loads every ranker file of dir ("" = none) for the index. A file that does not load, or two files
 * with one ranker name, fail the start: 0, or -1 with err naming the file. */
int rankers_start(const char *dir, const isn_index_info *info, uint32_t default_n1, uint32_t max_n1, char *err,
                  size_t err_len);
/* SIGHUP: re-reads every file. A file that fails is logged and its old version keeps serving; a new
 * good one is added, a removed one dropped. Also takes the (reloadable) n1 limits. Returns the number
 * of files that failed. */
int rankers_reload(uint32_t default_n1, uint32_t max_n1);
/* A new index generation serves: rankers load against it from now on. Its fields named as the old
 * one's keep the loaded rankers (their features are the same); other fields reload every file
 * (rankers_reload). Returns the number of files that failed. */
int rankers_set_index(const isn_index_info *info);
/* Drops every ranker (exit); references still held free theirs on release. */
void rankers_stop(void);

/* The ranker served under `name`, or NULL (unknown). Release it once the request is done. */
ranker_ref *rankers_acquire(const char *name);
const isn_ranker *ranker_ref_get(const ranker_ref *ref);
void rankers_release(ranker_ref *ref);

/* n1 for a request that asks for `requested` (0 = default) and wants k hits: at least k.
 * -1 when above max_n1 (*max_n1 says the limit). */
int rankers_n1(uint32_t requested, uint32_t k, uint32_t *n1, uint32_t *max_n1);
/* The served names, comma-separated, for error messages. */
void rankers_names(char *buf, size_t len);
uint32_t rankers_count(void);

#endif
