/* isn-agg configuration: command line and an INI file (the same keys). Self-contained. */
#ifndef ISN_TOOLS_AGG_CONFIG_H
#define ISN_TOOLS_AGG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGG_MAX_PARTITIONS 64
#define AGG_MAX_REPLICAS 8
#define AGG_ADDR_MAX 272

typedef struct {
    char replicas[AGG_MAX_REPLICAS][AGG_ADDR_MAX];
    uint32_t num_replicas;
} agg_partition_config;

typedef struct {
    char listen[AGG_ADDR_MAX];
    char stats_listen[AGG_ADDR_MAX]; /* "" = none */
    agg_partition_config partitions[AGG_MAX_PARTITIONS];
    uint32_t num_partitions;
    uint32_t default_timeout_ms; /* when the request gives no deadline */
    uint32_t margin_ms;          /* partitions get the remaining deadline minus this */
    uint32_t default_k, max_k;
    bool hedge;
    uint32_t hedge_min_us;       /* never hedge sooner than this */
    uint32_t hedge_initial_ms;   /* hedge delay until a partition has enough latency samples */
    bool global_stats;
    uint32_t probe_interval_ms;  /* a replica taken out is probed this often */
    uint32_t failures_to_eject;  /* consecutive failures that take a replica out */
} agg_config;

void agg_config_default(agg_config *config);
/* "partition = ADDR,ADDR,..." adds a partition; every other key sets one value. 0, or -1 with err. */
int agg_config_set(agg_config *config, const char *key, const char *value, char *err, size_t err_len);
/* Reads an INI file (section [agg] or none). 0, or -1 with err naming the line. */
int agg_config_load(agg_config *config, const char *path, char *err, size_t err_len);
int agg_config_validate(const agg_config *config, char *err, size_t err_len);

#endif
