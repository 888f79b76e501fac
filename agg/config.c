/* The aggregator's configuration: command line and an INI file (the same keys). */
#include "agg/agg.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

void agg_config_default(agg_config *config) {
    memset(config, 0, sizeof *config);
    strcpy(config->listen, "127.0.0.1:8070");
    strcpy(config->stats_listen, "127.0.0.1:8090");
    config->default_timeout_ms = 1000;
    config->margin_ms = 2;
    config->drain_timeout_ms = 10000;
    config->default_k = 10;
    config->max_k = 10000;
    config->hedge = true;
    config->hedge_min_us = 500;
    config->hedge_initial_ms = 20;
    config->extra_requests_ratio = 0.1;
    config->extra_requests_burst = 10;
    config->max_inflight_per_replica = 256;
    config->global_stats = false;
    config->probe_interval_ms = 500;
    config->failures_to_eject = 3;
    config->ready_coverage = 1.0;
    config->dns_interval_ms = 5000;
    config->max_connections = 1024;
    config->max_concurrent_streams = 4096;
    config->max_requests_per_connection = 8192;
    config->header_timeout_ms = 10000;
    config->idle_timeout_ms = 300000;
    config->write_timeout_ms = 30000;
    config->min_send_rate = 1024;
    config->memory_budget_mib = 256;
    config->max_header_list_size = 16384;
    config->max_early_resets_per_second = 5000;
    config->reset_hold_ms = 1000;
    config->stats_max_connections = 64;
    config->stats_write_timeout_ms = 10000;
    config->tls_watch_interval_ms = 1000;
}

static int parse_fraction(const char *key, const char *value, double *out, char *err, size_t err_len) {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end || !(v > 0.0 && v <= 1.0))
        return isn_error(err, err_len, "%s must be a number in (0, 1], got \"%s\"", key, value);
    *out = v;
    return 0;
}

static int parse_u32(const char *key, const char *value, uint32_t min, uint32_t max, uint32_t *out, char *err,
                     size_t err_len) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(value, &end, 10);
    if (errno || end == value || *end || v < min || v > max)
        return isn_error(err, err_len, "%s must be an integer in %u..%u, got \"%s\"", key, min, max, value);
    *out = (uint32_t)v;
    return 0;
}

static int parse_bool(const char *key, const char *value, bool *out, char *err, size_t err_len) {
    if (!strcmp(value, "true") || !strcmp(value, "on") || !strcmp(value, "1") || !strcmp(value, "yes")) *out = true;
    else if (!strcmp(value, "false") || !strcmp(value, "off") || !strcmp(value, "0") || !strcmp(value, "no"))
        *out = false;
    else
        return isn_error(err, err_len, "%s must be true or false, got \"%s\"", key, value);
    return 0;
}

static int copy_address(const char *key, const char *value, char *out, bool may_be_empty, char *err,
                        size_t err_len) {
    size_t len = strlen(value);
    if ((!len && !may_be_empty) || len >= AGG_ADDR_MAX)
        return isn_error(err, err_len, "%s must be HOST:PORT, got \"%s\"", key, value);
    char host[AGG_ADDR_MAX], why[160];
    uint16_t port;
    if (len && isn_parse_host_port(value, host, sizeof host, &port, why, sizeof why) != 0)
        return isn_error(err, err_len, "%s must be HOST:PORT (%s)", key, why);
    memcpy(out, value, len + 1);
    return 0;
}

/* "dns:NAME:PORT": the partition's replicas are NAME's addresses (isn-agg resolves it again and again). */
static int add_dns_partition(agg_config *config, agg_partition_config *p, const char *target, char *err,
                             size_t err_len) {
    char why[160];
    if (strlen(target) >= AGG_ADDR_MAX ||
        isn_parse_host_port(target, p->dns_name, sizeof p->dns_name, &p->dns_port, why, sizeof why) != 0 || !p->dns_port)
        return isn_error(err, err_len, "partition %u: dns: wants dns:NAME:PORT, got \"dns:%s\"", config->num_partitions,
                         target);
    config->num_partitions++;
    return 0;
}

static int add_partition(agg_config *config, const char *value, char *err, size_t err_len) {
    if (config->num_partitions == AGG_MAX_PARTITIONS)
        return isn_error(err, err_len, "at most %d partitions", AGG_MAX_PARTITIONS);
    agg_partition_config *p = &config->partitions[config->num_partitions];
    memset(p, 0, sizeof *p);
    if (!strncmp(value, "dns:", 4)) return add_dns_partition(config, p, value + 4, err, err_len);
    char copy[AGG_MAX_REPLICAS * AGG_ADDR_MAX + 64];
    if (strlen(value) >= sizeof copy)
        return isn_error(err, err_len, "partition list too long");
    strcpy(copy, value);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (p->num_replicas == AGG_MAX_REPLICAS)
            return isn_error(err, err_len, "partition %u: at most %d replicas", config->num_partitions, AGG_MAX_REPLICAS);
        if (copy_address("partition replica", tok, p->replicas[p->num_replicas], false, err, err_len) != 0) return -1;
        p->num_replicas++;
    }
    if (!p->num_replicas)
        return isn_error(err, err_len, "partition %u lists no replica (partition = HOST:PORT[,HOST:PORT...])",
                 config->num_partitions);
    config->num_partitions++;
    return 0;
}

int agg_config_set(agg_config *c, const char *key, const char *value, char *err, size_t err_len) {
    if (!strcmp(key, "partition")) return add_partition(c, value, err, err_len);
    if (!strcmp(key, "listen")) return copy_address(key, value, c->listen, false, err, err_len);
    if (!strcmp(key, "stats_listen")) return copy_address(key, value, c->stats_listen, true, err, err_len);
    if (!strcmp(key, "default_timeout_ms")) return parse_u32(key, value, 1, 3600000, &c->default_timeout_ms, err, err_len);
    if (!strcmp(key, "drain_timeout_ms")) return parse_u32(key, value, 1, 3600000, &c->drain_timeout_ms, err, err_len);
    if (!strcmp(key, "margin_ms")) return parse_u32(key, value, 0, 60000, &c->margin_ms, err, err_len);
    if (!strcmp(key, "default_k")) return parse_u32(key, value, 1, 100000, &c->default_k, err, err_len);
    if (!strcmp(key, "max_k")) return parse_u32(key, value, 1, 100000, &c->max_k, err, err_len);
    if (!strcmp(key, "hedge")) return parse_bool(key, value, &c->hedge, err, err_len);
    if (!strcmp(key, "hedge_min_us")) return parse_u32(key, value, 0, 60000000, &c->hedge_min_us, err, err_len);
    if (!strcmp(key, "hedge_initial_ms")) return parse_u32(key, value, 0, 60000, &c->hedge_initial_ms, err, err_len);
    if (!strcmp(key, "extra_requests_ratio")) return parse_fraction(key, value, &c->extra_requests_ratio, err, err_len);
    if (!strcmp(key, "max_inflight_per_replica"))
        return parse_u32(key, value, 1, 1000000, &c->max_inflight_per_replica, err, err_len);
    if (!strcmp(key, "extra_requests_burst")) return parse_u32(key, value, 1, 1000, &c->extra_requests_burst, err, err_len);
    if (!strcmp(key, "global_stats")) return parse_bool(key, value, &c->global_stats, err, err_len);
    if (!strcmp(key, "probe_interval_ms")) return parse_u32(key, value, 1, 3600000, &c->probe_interval_ms, err, err_len);
    if (!strcmp(key, "failures_to_eject")) return parse_u32(key, value, 1, 1000, &c->failures_to_eject, err, err_len);
    if (!strcmp(key, "ready_coverage")) return parse_fraction(key, value, &c->ready_coverage, err, err_len);
    if (!strcmp(key, "log_json")) return parse_bool(key, value, &c->log_json, err, err_len);
    if (!strcmp(key, "access_log")) return parse_bool(key, value, &c->access_log, err, err_len);
    if (!strcmp(key, "dns_interval_ms")) return parse_u32(key, value, 10, 3600000, &c->dns_interval_ms, err, err_len);
    if (!strcmp(key, "dns_servers")) {
        if (strlen(value) >= sizeof c->dns_servers) return isn_error(err, err_len, "dns_servers is too long");
        strcpy(c->dns_servers, value);
        return 0;
    }
    static const struct {
        const char *key;
        size_t offset, size;
    } TEXTS[] = {
        {"tls_cert", offsetof(agg_config, tls_cert), AGG_PATH_MAX},
        {"tls_key", offsetof(agg_config, tls_key), AGG_PATH_MAX},
        {"tls_client_ca", offsetof(agg_config, tls_client_ca), AGG_PATH_MAX},
        {"tls_ca", offsetof(agg_config, tls_ca), AGG_PATH_MAX},
        {"tls_allowed_peers", offsetof(agg_config, tls_allowed_peers), AGG_PATH_MAX},
        {"tls_server_name", offsetof(agg_config, tls_server_name), AGG_ADDR_MAX},
    };
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++)
        if (!strcmp(key, TEXTS[i].key)) {
            if (strlen(value) >= TEXTS[i].size)
                return isn_error(err, err_len, "%s is too long (at most %zu bytes)", key, TEXTS[i].size - 1);
            strcpy((char *)c + TEXTS[i].offset, value);
            return 0;
        }
    if (!strcmp(key, "tls_watch_interval_ms"))
        return parse_u32(key, value, 0, 3600000, &c->tls_watch_interval_ms, err, err_len);
    static const struct {
        const char *key;
        size_t offset;
        uint32_t min, max;
    } LIMITS[] = {
        {"max_connections", offsetof(agg_config, max_connections), 1, 1000000},
        {"max_concurrent_streams", offsetof(agg_config, max_concurrent_streams), 1, 65536},
        {"max_requests_per_connection", offsetof(agg_config, max_requests_per_connection), 1, 1000000},
        {"header_timeout_ms", offsetof(agg_config, header_timeout_ms), 1, 3600000},
        {"idle_timeout_ms", offsetof(agg_config, idle_timeout_ms), 1, 86400000},
        {"write_timeout_ms", offsetof(agg_config, write_timeout_ms), 1, 3600000},
        {"min_send_rate", offsetof(agg_config, min_send_rate), 1, 1u << 30},
        {"memory_budget_mib", offsetof(agg_config, memory_budget_mib), 1, 1u << 20},
        {"max_header_list_size", offsetof(agg_config, max_header_list_size), 1024, 1u << 24},
        {"max_early_resets_per_second", offsetof(agg_config, max_early_resets_per_second), 1, 10000000},
        {"reset_hold_ms", offsetof(agg_config, reset_hold_ms), 0, 60000},
        {"stats_max_connections", offsetof(agg_config, stats_max_connections), 1, 100000},
        {"stats_write_timeout_ms", offsetof(agg_config, stats_write_timeout_ms), 1, 3600000},
    };
    for (size_t i = 0; i < sizeof LIMITS / sizeof LIMITS[0]; i++)
        if (!strcmp(key, LIMITS[i].key))
            return parse_u32(key, value, LIMITS[i].min, LIMITS[i].max, (uint32_t *)((char *)c + LIMITS[i].offset), err,
                             err_len);
    return isn_error(err, err_len, "unknown key \"%s\"", key);
}

typedef struct {
    agg_config *config;
    char *err;
    size_t err_len;
    const char *path;
    int line; /* of the last key handled, for messages (inih counts lines itself) */
} load_ctx;

static int on_ini_value(void *user, const char *section, const char *name, const char *value) {
    load_ctx *ctx = user;
    int line = ++ctx->line;
    char why[512];
    if (section[0] && strcmp(section, "agg")) {
        snprintf(ctx->err, ctx->err_len, "%s: key %d: unknown section [%s] (only [agg])", ctx->path, line, section);
        return 0;
    }
    if (agg_config_set(ctx->config, name, value, why, sizeof why) != 0) {
        snprintf(ctx->err, ctx->err_len, "%s: key %d (%s): %s", ctx->path, line, name, why);
        return 0;
    }
    return 1;
}

int agg_config_load(agg_config *config, const char *path, char *err, size_t err_len) {
    FILE *f = isn_fopen_regular(path, "r");
    if (!f)
        return isn_error(err, err_len, "cannot open %s: %s", path, isn_open_regular_strerror(errno));
    load_ctx ctx = {.config = config, .err = err, .err_len = err_len, .path = path};
    err[0] = '\0';
    int rc = ini_parse_file(f, on_ini_value, &ctx);
    fclose(f);
    if (rc != 0) {
        if (!err[0]) isn_error(err, err_len, "%s:%d: syntax error", path, rc);
        return -1;
    }
    return 0;
}

int agg_config_validate(const agg_config *config, char *err, size_t err_len) {
    if (!config->num_partitions)
        return isn_error(err, err_len, "no partitions: give --partition HOST:PORT[,HOST:PORT...] once per partition");
    if (config->default_k > config->max_k)
        return isn_error(err, err_len, "default_k %u is above max_k %u", config->default_k, config->max_k);
    if (!config->tls_cert[0] != !config->tls_key[0])
        return isn_error(err, err_len, "tls_cert and tls_key go together (%s is set alone)",
                         config->tls_cert[0] ? "tls_cert" : "tls_key");
    if (config->tls_client_ca[0] && !config->tls_cert[0])
        return isn_error(err, err_len, "tls_client_ca needs tls_cert and tls_key (TLS on)");
    if (config->tls_allowed_peers[0] && !config->tls_client_ca[0])
        return isn_error(err, err_len, "tls_allowed_peers needs tls_client_ca (client certificates)");
    if (config->tls_server_name[0] && !config->tls_ca[0])
        return isn_error(err, err_len, "tls_server_name needs tls_ca (TLS to the replicas)");
    return 0;
}
