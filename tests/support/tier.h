/* A tier on loopback for the aggregator, cluster and tier tests: a corpus split into partitions, R
 * isnd replicas of each, isn-agg in front (tests/support/isnd_harness.h starts each process), and the
 * small helpers those tests need: a free port, a file or JSON field looked up, isn-bench as a child. */
#ifndef ISN_TESTS_SUPPORT_TIER_H
#define ISN_TESTS_SUPPORT_TIER_H

#include "tests/support/files.h"
#include "tests/support/isnd_harness.h"

#define TIER_MAX_PARTITIONS 4
#define TIER_MAX_REPLICAS 3
#define TIER_MAX_QUERIES 400

typedef struct {
    harness whole;      /* its work dir holds the corpus and the partitions; its index_dir the whole
                         * corpus as one index (built only when asked for) */
    harness replicas[TIER_MAX_PARTITIONS][TIER_MAX_REPLICAS];
    harness aggregator;
    uint32_t num_partitions, num_replicas;
    char corpus[400], parts_dir[400];
} tier;

/* The queries of a corpus: Cranfield's (ids, texts, judgements) or made up from the harness' words. */
typedef struct {
    char *ids[TIER_MAX_QUERIES], *texts[TIER_MAX_QUERIES];
    uint32_t count;
    bool have_qrels;
    char qrels_path[PATH_MAX];
} tier_queries;

/* A TCP port free on every address of this host (bound on the wildcard, then closed), drawn at random below
 * the kernel's ephemeral range, or -1. */
int support_free_port(void);
/* n (at most 16) distinct such ports into ports; 0, or -1. Two calls of support_free_port may (rarely) return
 * one port twice: the first is closed before the second is picked. */
int support_free_ports(int *ports, int n);
/* Whether a line of the file at path contains needle. */
bool support_file_has(const char *path, const char *needle);
/* Lines of the file that contain every one of the NULL-terminated needles. */
uint32_t support_file_count(const char *path, const char *const *needles);
/* The number after "key": in a JSON text (first occurrence), or -1. */
long long support_json_number(const char *json, const char *key);
/* A connected client, or NULL with the reason on stderr. */
isn_grpc_client *support_connect(const char *address);

/* isn-bench (BUILD/bin) as a child against `target` with `args` (NULL-terminated, after --target);
 * its JSON goes to json_path. The child's pid, or -1. */
pid_t support_bench_start(const char *build_dir, const char *target, const char *const *args, const char *json_path);
/* Waits for it; its JSON (malloc'd) when it exited 0, else NULL with the reason on stderr. */
char *support_bench_finish(pid_t pid, const char *json_path);

/* harness_init of t->whole for the running test program; the corpus path is set, nothing is written. */
void tier_init(tier *t);
/* Writes num_docs documents of the harness' words (seeded) as JSON Lines to t->corpus. 0, or -1. */
int tier_write_synthetic_corpus(tier *t, uint64_t seed, uint32_t num_docs);
/* Cranfield ($ISN_CRANFIELD_DIR, set by make test; else build/data/cran) into t->corpus with its
 * queries (and judgements when there are), else a synthetic corpus of synthetic_docs documents and
 * synthetic_queries queries of 1..max_words words. 0, or -1. */
int tier_prepare_corpus(tier *t, tier_queries *queries, uint32_t max_queries, uint64_t seed, uint32_t synthetic_docs,
                        uint32_t synthetic_queries, uint32_t max_words);
void tier_queries_free(tier_queries *queries);
/* isn-index build of t->corpus as num_partitions partitions (t->parts_dir/part-NNNN) with `index_args`
 * ("" or more isn-index options), and as one index in t->whole.index_dir when `whole`. 0, or -1. */
int tier_build(tier *t, uint32_t num_partitions, bool whole, const char *index_args);
/* num_replicas isnd per partition (--partition-id P, --workers 1, then `extra`). 0, or -1. */
int tier_start_replicas(tier *t, uint32_t num_replicas, const char *const *extra);
/* isn-agg in front of every replica (one --partition each) with `extra`. 0, or -1. */
int tier_start_agg(tier *t, const char *const *extra);
/* Partition p's replicas as isn-agg's --partition wants them ("ADDR,ADDR"). */
void tier_partition_addresses(const tier *t, uint32_t p, char *out, size_t cap);
/* Kills what still runs and removes every work directory. */
void tier_cleanup(tier *t);

#endif
