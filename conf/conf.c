/* Configuration keys as one table: parsing, writing and the reload check all walk it, so a key
 * added here is accepted, printed and classified everywhere at once. */
#include "conf/conf.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

typedef enum {
    KEY_ADDR,
    KEY_OPTIONAL_ADDR,
    KEY_PATH,
    KEY_BOOL,
    KEY_MODE,
    KEY_ALGO,
    KEY_LEVEL,
    KEY_GPU_PRUNING, /* auto, always, never: isn_gpu_options.pruning */
    KEY_GPU_CACHE,   /* auto, whole, pruned, tier: ISN_CONF_GPU_CACHE_* */
    KEY_SWITCH,      /* auto or a boolean: isn_switch */
    /* Numbers, stored as uint32_t in the unit the field's name gives. A size or a duration is
     * written with its unit in the value ("4MiB", "200us"); the key name never carries a unit. */
    KEY_U32,
    KEY_DURATION_MS,
    KEY_DURATION_US,
    KEY_DURATION_NS,
    KEY_SIZE,     /* field in bytes */
    KEY_SIZE_MIB, /* field in MiB */
    KEY_FLOAT,    /* a finite float in [min, max] (a weight, not a count) */
} key_type;

typedef struct {
    const char *section;
    const char *name;
    key_type type;
    size_t offset;
    const char *default_value; /* as the file would spell it */
    uint64_t min, max;         /* numeric keys: inclusive range in the field's unit */
    bool reloadable;           /* SIGHUP may change it */
} key_spec;

#define FIELD(f) offsetof(isn_conf, f)

/* The one convention of key names (conf/isnd.conf's header says it to users):
 *   - sizes and durations take their unit in the value, never in the name;
 *   - a limit starts with max_, a fallback with default_; a scope comes first (gpu_max_batch);
 *   - a plain number names what it counts (_percent, _permille, a rate's _per_us).
 * The table's order is the order of conf/isnd.conf and of isn_conf_write. */
static const key_spec KEYS[] = {
    {"server", "listen", KEY_ADDR, FIELD(listen), "127.0.0.1:7070", 0, 0, false},
    {"server", "stats_listen", KEY_OPTIONAL_ADDR, FIELD(stats_listen), "127.0.0.1:9090", 0, 0, false},
    {"server", "loops", KEY_U32, FIELD(loops), "0", 0, 256, false},
    {"server", "loop_slice", KEY_DURATION_US, FIELD(loop_slice_us), "100us", 0, 100000, false},
    {"server", "loop_realtime_priority", KEY_U32, FIELD(loop_realtime_priority), "0", 0, 99, false},
    {"server", "pin_loops", KEY_BOOL, FIELD(pin_loops), "false", 0, 0, false},
    {"server", "reply_backlog_age", KEY_DURATION_US, FIELD(reply_backlog_age_us), "0", 0, 1000000, false},
    {"server", "max_connections", KEY_U32, FIELD(max_connections), "4096", 1, 1000000, true},
    {"server", "max_concurrent_streams", KEY_U32, FIELD(max_concurrent_streams), "256", 1, 65536, false},
    {"server", "adaptive_stream_limit", KEY_BOOL, FIELD(adaptive_stream_limit), "true", 0, 0, false},
    {"server", "stream_limit_target", KEY_DURATION_US, FIELD(stream_limit_target_us), "2ms", 50, 1000000, true},
    {"server", "max_message_size", KEY_SIZE, FIELD(max_message_bytes), "4MiB", 64, 1u << 30, false},
    {"server", "header_timeout", KEY_DURATION_MS, FIELD(header_timeout_ms), "10s", 1, 3600000, true},
    {"server", "idle_timeout", KEY_DURATION_MS, FIELD(idle_timeout_ms), "5m", 1, 86400000, true},
    {"server", "drain_timeout", KEY_DURATION_MS, FIELD(drain_timeout_ms), "30s", 0, 3600000, true},
    {"server", "max_requests_per_connection", KEY_U32, FIELD(max_requests_per_connection), "512", 1, 1000000, true},
    {"server", "memory_budget", KEY_SIZE_MIB, FIELD(memory_budget_mib), "256MiB", 1, 1u << 20, true},
    {"server", "write_timeout", KEY_DURATION_MS, FIELD(write_timeout_ms), "30s", 1, 3600000, true},
    {"server", "min_send_rate", KEY_SIZE, FIELD(min_send_rate_bytes), "1KiB", 1, 1u << 30, true},
    {"server", "max_header_list_size", KEY_SIZE, FIELD(max_header_list_bytes), "16KiB", 1024, 1u << 24, true},
    {"server", "max_early_resets_per_second", KEY_U32, FIELD(max_early_resets_per_second), "5000", 1, 10000000, true},
    {"server", "reset_hold", KEY_DURATION_MS, FIELD(reset_hold_ms), "1s", 0, 60000, true},
    {"server", "stats_max_connections", KEY_U32, FIELD(stats_max_connections), "64", 1, 100000, true},
    {"server", "stats_write_timeout", KEY_DURATION_MS, FIELD(stats_write_timeout_ms), "10s", 1, 3600000, true},
    {"server", "tls_cert", KEY_PATH, FIELD(tls_cert), "", 0, 0, false},
    {"server", "tls_key", KEY_PATH, FIELD(tls_key), "", 0, 0, false},
    {"server", "tls_client_ca", KEY_PATH, FIELD(tls_client_ca), "", 0, 0, false},
    {"server", "tls_allowed_peers", KEY_PATH, FIELD(tls_allowed_peers), "", 0, 0, false},
    {"server", "tls_watch_interval", KEY_DURATION_MS, FIELD(tls_watch_interval_ms), "1s", 0, 3600000, false},
    {"index", "path", KEY_PATH, FIELD(index_path), "", 0, 0, true},
    {"index", "partition_id", KEY_U32, FIELD(partition_id), "0", 0, UINT32_MAX, false},
    {"index", "warm_up", KEY_BOOL, FIELD(warm_up), "true", 0, 0, false},
    {"index", "derive_field_data", KEY_BOOL, FIELD(derive_field_data), "true", 0, 0, false},
    {"index", "watch_interval", KEY_DURATION_MS, FIELD(index_watch_interval_ms), "1s", 0, 3600000, true},
    {"search", "workers", KEY_U32, FIELD(workers), "0", 0, 1024, false},
    {"search", "spare_workers", KEY_U32, FIELD(spare_workers), "0", 0, 1024, false},
    {"search", "spare_idle_policy", KEY_BOOL, FIELD(spare_idle_policy), "false", 0, 0, false},
    {"search", "max_queue", KEY_U32, FIELD(max_queue), "4096", 1, 10000000, false},
    {"search", "default_k", KEY_U32, FIELD(default_k), "10", 1, ISN_MAX_K, true},
    {"search", "max_k", KEY_U32, FIELD(max_k), "10000", 1, ISN_MAX_K, true},
    {"search", "default_timeout", KEY_DURATION_MS, FIELD(default_timeout_ms), "0", 0, 3600000, true},
    {"search", "max_timeout", KEY_DURATION_MS, FIELD(max_timeout_ms), "1m", 0, 3600000, true},
    {"search", "default_mode", KEY_MODE, FIELD(default_mode), "or", 0, 0, true},
    {"search", "default_algorithm", KEY_ALGO, FIELD(default_algo), "auto", 0, 0, true},
    {"search", "prior_weight", KEY_FLOAT, FIELD(prior_weight), "0", 0, 1000000, false},
    {"scheduler", "early_stop_percent", KEY_U32, FIELD(early_stop_percent), "80", 1, 100, false},
    {"scheduler", "admit_percent", KEY_U32, FIELD(admit_percent), "40", 1, 100, false},
    {"scheduler", "degraded_stop_percent", KEY_U32, FIELD(degraded_stop_percent), "50", 1, 100, false},
    {"scheduler", "route_margin_percent", KEY_U32, FIELD(route_margin_percent), "25", 0, 1000, false},
    {"scheduler", "overload_degrade", KEY_BOOL, FIELD(overload_degrade), "false", 0, 0, false},
    {"scheduler", "codel_drop_waited", KEY_BOOL, FIELD(codel_drop_waited), "false", 0, 0, false},
    {"scheduler", "forgive_stalls", KEY_BOOL, FIELD(forgive_stalls), "true", 0, 0, false},
    {"scheduler", "worker_nice", KEY_U32, FIELD(worker_nice), "5", 0, 19, false},
    {"scheduler", "worker_idle_policy", KEY_SWITCH, FIELD(worker_idle_policy), "auto", 0, 0, false},
    {"scheduler", "worker_slice", KEY_DURATION_US, FIELD(worker_slice_us), "0", 0, 100000, false},
    {"scheduler", "analysis_min_workers", KEY_U32, FIELD(analysis_min_workers), "4", 0, 4096, false},
    {"scheduler", "cost_model_state", KEY_PATH, FIELD(cost_model_state), "", 0, 0, false},
    {"scheduler", "gpu_max_batch", KEY_U32, FIELD(gpu_batch_max), "256", 1, 4096, false},
    {"scheduler", "gpu_max_batch_memory", KEY_SIZE, FIELD(gpu_batch_memory_bytes), "256MiB", 4096, 1u << 31, false},
    {"scheduler", "gpu_batch_linger", KEY_DURATION_US, FIELD(gpu_batch_linger_us), "200us", 0, 1000000, false},
    {"scheduler", "gpu_deadline_safety", KEY_DURATION_US, FIELD(gpu_deadline_safety_us), "1ms", 0, 1000000, false},
    /* Named for what it does to answers, so nobody turns it on by accident. */
    {"scheduler", "simulated_gpus_answer_without_hits", KEY_U32, FIELD(gpu_sim_devices), "0", 0, 16, false},
    {"scheduler", "simulated_gpu_launch", KEY_DURATION_NS, FIELD(gpu_sim_launch_ns), "8500ns", 0, 100000000, false},
    {"scheduler", "simulated_gpu_postings_per_us", KEY_U32, FIELD(gpu_sim_postings_per_us), "25000", 1, 1000000000,
     false},
    {"scheduler", "simulated_gpu_query", KEY_DURATION_NS, FIELD(gpu_sim_query_ns), "2us", 0, 100000000, false},
    {"scheduler", "simulated_gpu_failure_permille", KEY_U32, FIELD(gpu_sim_failure_permille), "0", 0, 1000, false},
    {"gpu", "enable", KEY_BOOL, FIELD(gpu_enable), "false", 0, 0, false},
    {"gpu", "emulate", KEY_BOOL, FIELD(gpu_emulate), "false", 0, 0, false},
    {"gpu", "device", KEY_U32, FIELD(gpu_device), "0", 0, 255, false},
    {"gpu", "devices", KEY_U32, FIELD(gpu_devices), "1", 1, 16, false},
    {"gpu", "index_memory", KEY_SIZE_MIB, FIELD(gpu_memory_budget_mib), "0", 0, 16u << 20, false},
    {"gpu", "max_batch", KEY_U32, FIELD(gpu_max_batch), "256", 1, 4096, false},
    {"gpu", "max_k", KEY_U32, FIELD(gpu_max_k), "1000", 1, 10000, false},
    {"gpu", "streams", KEY_U32, FIELD(gpu_streams), "2", 1, 8, false},
    {"gpu", "cpu_threads", KEY_U32, FIELD(gpu_cpu_threads), "0", 0, 4096, false},
    {"gpu", "pruning", KEY_GPU_PRUNING, FIELD(gpu_pruning), "auto", 0, 0, false},
    {"gpu", "training_queries", KEY_PATH, FIELD(gpu_training_queries), "", 0, 0, false},
    {"gpu", "cache", KEY_GPU_CACHE, FIELD(gpu_cache), "auto", 0, 0, false},
    {"gpu", "stream_memory", KEY_SIZE_MIB, FIELD(gpu_stream_mib), "0", 0, 1u << 20, false},
    {"gpu", "route_all", KEY_BOOL, FIELD(gpu_route_all), "false", 0, 0, false},
    {"gpu", "upload_before_ready", KEY_BOOL, FIELD(gpu_upload_before_ready), "false", 0, 0, false},
    {"gpu", "rerank", KEY_BOOL, FIELD(gpu_rerank), "true", 0, 0, false},
    {"rerank", "ranker_dir", KEY_PATH, FIELD(ranker_dir), "", 0, 0, false},
    {"rerank", "default_n1", KEY_U32, FIELD(default_n1), "1000", 1, ISN_MAX_K, true},
    {"rerank", "max_n1", KEY_U32, FIELD(max_n1), "10000", 1, ISN_MAX_K, true},
    {"rerank", "gpu_model_memory", KEY_SIZE, FIELD(gpu_model_memory_bytes), "512MiB", 1u << 20, 1u << 31, false},
    {"log", "level", KEY_LEVEL, FIELD(log_level), "info", 0, 0, true},
    {"log", "json", KEY_BOOL, FIELD(log_json), "false", 0, 0, true},
    {"log", "access", KEY_BOOL, FIELD(log_access), "false", 0, 0, true},
    {"testing", "job_delay", KEY_DURATION_US, FIELD(job_delay_us), "0", 0, 60000000, true},
    {"testing", "inject_delay", KEY_DURATION_MS, FIELD(inject_delay_ms), "0", 0, 60000, true},
    {"testing", "inject_delay_percent", KEY_U32, FIELD(inject_delay_percent), "0", 0, 100, true},
};
#define NUM_KEYS (sizeof KEYS / sizeof KEYS[0])

/* Old spellings, still read exactly as before and logged as deprecated with the new spelling of the
 * same value. Each stores into its replacement's field in the same unit, so it is that key with the
 * old name and the old value syntax (a bare number where the old name carried the unit). Never
 * written back; the reload check sees them through their replacement. */
typedef struct {
    const char *section, *old_name, *new_name;
    key_type old_type;
} deprecated_key;

static const deprecated_key DEPRECATED_KEYS[] = {
    {"scheduler", "gpu_batch_max", "gpu_max_batch", KEY_U32},
    {"scheduler", "gpu_batch_memory", "gpu_max_batch_memory", KEY_SIZE},
    {"scheduler", "gpu_sim_launch_ns", "simulated_gpu_launch", KEY_U32},
    {"scheduler", "gpu_sim_postings_per_us", "simulated_gpu_postings_per_us", KEY_U32},
    {"scheduler", "gpu_sim_query_ns", "simulated_gpu_query", KEY_U32},
    {"scheduler", "gpu_sim_failure_permille", "simulated_gpu_failure_permille", KEY_U32},
    {"gpu", "memory_budget_mib", "index_memory", KEY_U32},
};
#define NUM_DEPRECATED_KEYS (sizeof DEPRECATED_KEYS / sizeof DEPRECATED_KEYS[0])

/* Digits only, no sign, no overflow past UINT64_MAX; *end points after them. */
static int parse_digits(const char *text, uint64_t *value, const char **end) {
    if (!isdigit((unsigned char)*text)) return -1;
    uint64_t v = 0;
    const char *p = text;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *value = v;
    *end = p;
    return 0;
}

typedef struct {
    const char *name;
    uint64_t scale;
} unit;

/* Largest first: isn_conf_write spells a value in the largest unit that divides it. */
static const unit DURATION_UNITS[] = {{"m", 60000000000ull}, {"s", 1000000000ull}, {"ms", 1000000},
                                      {"us", 1000},          {"ns", 1},              {"h", 3600000000000ull}};
#define NUM_WRITTEN_DURATION_UNITS 5 /* hours are read, never written (60m reads better in a config) */
static const unit SIZE_UNITS[] = {{"GiB", 1u << 30}, {"MiB", 1u << 20}, {"KiB", 1u << 10}, {"", 1},
                                  {"k", 1u << 10},   {"K", 1u << 10},   {"KB", 1u << 10},  {"M", 1u << 20},
                                  {"MB", 1u << 20},  {"G", 1u << 30},   {"GB", 1u << 30},  {"B", 1}};
#define NUM_WRITTEN_SIZE_UNITS 4

/* A number followed by one of `units`. `what` names the kind of value in messages. */
static int parse_with_unit(const char *text, const unit *units, size_t num_units, const char *what,
                           const char *unit_list, uint64_t *amount, char *err, size_t err_len) {
    uint64_t v;
    const char *suffix;
    if (parse_digits(text, &v, &suffix) < 0)
        return isn_error(err, err_len, "bad %s \"%s\": expected a number with a unit (%s)", what, text, unit_list);
    for (size_t i = 0; i < num_units; i++) {
        if (strcmp(suffix, units[i].name)) continue;
        if (v > UINT64_MAX / units[i].scale) return isn_error(err, err_len, "%s \"%s\" is too large", what, text);
        *amount = v * units[i].scale;
        return 0;
    }
    return isn_error(err, err_len, "bad %s unit in \"%s\": use %s", what, text, unit_list);
}

static int parse_duration_ns(const char *text, uint64_t *ns, char *err, size_t err_len) {
    /* A bare number is a mistake waiting to happen (seconds? milliseconds?), except zero. */
    uint64_t v;
    const char *suffix;
    if (parse_digits(text, &v, &suffix) == 0 && *suffix == '\0') {
        if (v != 0) return isn_error(err, err_len, "duration \"%s\" needs a unit: ns, us, ms, s, m or h", text);
        return *ns = 0, 0;
    }
    return parse_with_unit(text, DURATION_UNITS, sizeof DURATION_UNITS / sizeof DURATION_UNITS[0], "duration",
                           "ns, us, ms, s, m or h", ns, err, err_len);
}

int isn_conf_parse_duration_ms(const char *text, uint32_t *ms, char *err, size_t err_len) {
    uint64_t ns;
    if (parse_duration_ns(text, &ns, err, err_len) < 0) return -1;
    if (ns % 1000000) return isn_error(err, err_len, "duration \"%s\" is finer than a millisecond", text);
    if (ns / 1000000 > UINT32_MAX) return isn_error(err, err_len, "duration \"%s\" is too large", text);
    *ms = (uint32_t)(ns / 1000000);
    return 0;
}

int isn_conf_parse_size(const char *text, uint64_t *bytes, char *err, size_t err_len) {
    return parse_with_unit(text, SIZE_UNITS, sizeof SIZE_UNITS / sizeof SIZE_UNITS[0], "size", "KiB, MiB or GiB",
                           bytes, err, err_len);
}

/* A numeric key's field unit, in nanoseconds or bytes (1 for a plain number). */
static uint64_t field_scale(key_type type) {
    switch (type) {
    case KEY_DURATION_MS: return 1000000;
    case KEY_DURATION_US: return 1000;
    case KEY_SIZE_MIB: return 1u << 20;
    default: return 1;
    }
}

static const char *field_unit_name(key_type type) {
    switch (type) {
    case KEY_DURATION_MS: return " milliseconds";
    case KEY_DURATION_US: return " microseconds";
    case KEY_DURATION_NS: return " nanoseconds";
    case KEY_SIZE: return " bytes";
    case KEY_SIZE_MIB: return " MiB";
    default: return "";
    }
}

/* A numeric key's value in its field's unit, range-checked. */
static int parse_number(const key_spec *key, const char *value, uint32_t *field_value, char *err, size_t err_len) {
    uint64_t amount;
    const char *end;
    switch (key->type) {
    case KEY_U32:
        if (parse_digits(value, &amount, &end) < 0 || *end)
            return isn_error(err, err_len, "\"%s\" is not a non-negative integer", value);
        break;
    case KEY_DURATION_MS:
    case KEY_DURATION_US:
    case KEY_DURATION_NS:
        if (parse_duration_ns(value, &amount, err, err_len) < 0) return -1;
        break;
    default:
        if (isn_conf_parse_size(value, &amount, err, err_len) < 0) return -1;
        break;
    }
    uint64_t scale = field_scale(key->type);
    if (amount % scale)
        return isn_error(err, err_len, "\"%s\" is not a whole number of%s", value, field_unit_name(key->type));
    amount /= scale;
    if (amount < key->min || amount > key->max)
        return isn_error(err, err_len, "%s is out of range [%" PRIu64 ", %" PRIu64 "]%s", value, key->min, key->max,
                         field_unit_name(key->type));
    *field_value = (uint32_t)amount;
    return 0;
}

/* The value as the file would spell it, in the largest unit that divides it. */
static void format_number(key_type type, uint32_t field_value, char *out, size_t out_len) {
    uint64_t amount = field_value * field_scale(type);
    const unit *units = type == KEY_SIZE || type == KEY_SIZE_MIB ? SIZE_UNITS : DURATION_UNITS;
    size_t num_units = type == KEY_SIZE || type == KEY_SIZE_MIB ? NUM_WRITTEN_SIZE_UNITS : NUM_WRITTEN_DURATION_UNITS;
    if (type == KEY_U32 || amount == 0) {
        snprintf(out, out_len, "%" PRIu64, amount);
        return;
    }
    for (size_t i = 0; i < num_units; i++) {
        if (amount % units[i].scale) continue;
        snprintf(out, out_len, "%" PRIu64 "%s", amount / units[i].scale, units[i].name);
        return;
    }
}

static int parse_bool(const char *text, bool *value) {
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(text, yes[i])) return *value = true, 0;
        if (!strcasecmp(text, no[i])) return *value = false, 0;
    }
    return -1;
}

static const key_spec *find_key(const char *section, const char *name) {
    for (size_t i = 0; i < NUM_KEYS; i++)
        if (!strcmp(KEYS[i].section, section) && !strcmp(KEYS[i].name, name)) return &KEYS[i];
    return NULL;
}

static const deprecated_key *find_deprecated_key(const char *section, const char *name) {
    for (size_t i = 0; i < NUM_DEPRECATED_KEYS; i++)
        if (!strcmp(DEPRECATED_KEYS[i].section, section) && !strcmp(DEPRECATED_KEYS[i].old_name, name))
            return &DEPRECATED_KEYS[i];
    return NULL;
}

static bool known_section(const char *section) {
    for (size_t i = 0; i < NUM_KEYS; i++)
        if (!strcmp(KEYS[i].section, section)) return true;
    return false;
}

/* By ISN_GPU_PRUNE_* (gpu/gpu.h). */
static const char *const gpu_pruning_names[3] = {"auto", "always", "never"};
/* By ISN_CONF_GPU_CACHE_* (conf.h). */
static const char *const gpu_cache_names[ISN_CONF_GPU_CACHES] = {"auto", "whole", "pruned", "tier"};

/* Parses `value` into the key's field. The message in err lacks the "section.key: " prefix. */
static int set_field(isn_conf *conf, const key_spec *key, const char *value, char *err, size_t err_len) {
    void *field = (char *)conf + key->offset;
    switch (key->type) {
    case KEY_OPTIONAL_ADDR:
        if (!*value) return *(char *)field = '\0', 0;
        /* fall through */
    case KEY_ADDR: {
        char host[256];
        uint16_t port;
        if (isn_parse_host_port(value, host, sizeof host, &port, err, err_len) < 0) return -1;
        if (strlen(value) >= ISN_CONF_ADDR_MAX) return isn_error(err, err_len, "address too long");
        strcpy((char *)field, value);
        return 0;
    }
    case KEY_PATH:
        if (strlen(value) >= ISN_CONF_PATH_MAX) return isn_error(err, err_len, "path too long");
        strcpy((char *)field, value);
        return 0;
    case KEY_BOOL:
        if (parse_bool(value, (bool *)field) < 0)
            return isn_error(err, err_len, "\"%s\" is not a boolean (true/false, yes/no, on/off)", value);
        return 0;
    case KEY_MODE:
        if (!strcmp(value, "or")) *(isn_mode *)field = ISN_MODE_OR;
        else if (!strcmp(value, "and")) *(isn_mode *)field = ISN_MODE_AND;
        else return isn_error(err, err_len, "\"%s\" is not a mode (or, and)", value);
        return 0;
    case KEY_ALGO:
        if (!isn_algo_from_name(value, (isn_algo *)field))
            return isn_error(err, err_len, "unknown algorithm \"%s\" (auto, or, and, maxscore, wand, bmw, bmm, bmand)", value);
        return 0;
    case KEY_LEVEL:
        if (isn_log_level_parse(value, (isn_log_level *)field) == 0) return 0;
        return isn_error(err, err_len, "\"%s\" is not a level (error, warn, info, debug)", value);
    case KEY_GPU_PRUNING:
        for (int mode = 0; mode < 3; mode++)
            if (!strcmp(value, gpu_pruning_names[mode])) return *(uint32_t *)field = (uint32_t)mode, 0;
        return isn_error(err, err_len, "\"%s\" is not a pruning mode (auto, always, never)", value);
    case KEY_GPU_CACHE:
        for (uint32_t c = 0; c < ISN_CONF_GPU_CACHES; c++)
            if (!strcmp(value, gpu_cache_names[c])) return *(uint32_t *)field = c, 0;
        return isn_error(err, err_len, "\"%s\" is not a cache (auto, whole, pruned, tier)", value);
    case KEY_SWITCH: {
        bool on;
        if (!strcmp(value, "auto")) return *(isn_switch *)field = ISN_SWITCH_AUTO, 0;
        if (parse_bool(value, &on) < 0)
            return isn_error(err, err_len, "\"%s\" is neither auto nor a boolean (true/false, yes/no, on/off)", value);
        *(isn_switch *)field = on ? ISN_SWITCH_ON : ISN_SWITCH_OFF;
        return 0;
    }
    case KEY_U32:
    case KEY_DURATION_MS:
    case KEY_DURATION_US:
    case KEY_DURATION_NS:
    case KEY_SIZE:
    case KEY_SIZE_MIB: return parse_number(key, value, (uint32_t *)field, err, err_len);
    case KEY_FLOAT: {
        char *end;
        errno = 0;
        float v = strtof(value, &end);
        if (end == value || *end || errno || !isfinite(v) || v < (float)key->min || v > (float)key->max)
            return isn_error(err, err_len, "\"%s\" is not a number in [%llu, %llu]", value,
                             (unsigned long long)key->min, (unsigned long long)key->max);
        *(float *)field = v;
        return 0;
    }
    }
    return isn_error(err, err_len, "unhandled key type");
}

static void format_value(const isn_conf *conf, const key_spec *key, char *out, size_t out_len) {
    const void *field = (const char *)conf + key->offset;
    switch (key->type) {
    case KEY_ADDR:
    case KEY_OPTIONAL_ADDR:
    case KEY_PATH: snprintf(out, out_len, "%s", (const char *)field); break;
    case KEY_BOOL: snprintf(out, out_len, "%s", *(const bool *)field ? "true" : "false"); break;
    case KEY_MODE: snprintf(out, out_len, "%s", *(const isn_mode *)field == ISN_MODE_AND ? "and" : "or"); break;
    case KEY_ALGO: snprintf(out, out_len, "%s", isn_algo_name(*(const isn_algo *)field)); break;
    case KEY_LEVEL: snprintf(out, out_len, "%s", isn_log_level_name(*(const isn_log_level *)field)); break;
    case KEY_GPU_PRUNING: snprintf(out, out_len, "%s", gpu_pruning_names[*(const uint32_t *)field % 3]); break;
    case KEY_GPU_CACHE:
        snprintf(out, out_len, "%s", gpu_cache_names[*(const uint32_t *)field % ISN_CONF_GPU_CACHES]);
        break;
    case KEY_SWITCH: {
        isn_switch value = *(const isn_switch *)field;
        snprintf(out, out_len, "%s", value == ISN_SWITCH_AUTO ? "auto" : value == ISN_SWITCH_ON ? "true" : "false");
        break;
    }
    case KEY_U32:
    case KEY_DURATION_MS:
    case KEY_DURATION_US:
    case KEY_DURATION_NS:
    case KEY_SIZE:
    case KEY_SIZE_MIB: format_number(key->type, *(const uint32_t *)field, out, out_len); break;
    case KEY_FLOAT: snprintf(out, out_len, "%g", (double)*(const float *)field); break;
    }
}

/* `where` prefixes the deprecation warning: "FILE:LINE: ", "--set " or "". */
static int set_key(isn_conf *conf, const char *section, const char *name, const char *value, const char *where,
                   char *err, size_t err_len) {
    const key_spec *key = find_key(section, name), *replacement = NULL;
    const deprecated_key *old = key ? NULL : find_deprecated_key(section, name);
    key_spec old_spelling;
    if (old) {
        replacement = find_key(section, old->new_name);
        old_spelling = *replacement;
        old_spelling.name = old->old_name;
        old_spelling.type = old->old_type;
        key = &old_spelling;
    }
    if (!key) {
        if (!known_section(section)) return isn_error(err, err_len, "unknown section [%s]", section);
        return isn_error(err, err_len, "unknown key \"%s\" in [%s]", name, section);
    }
    char why[400];
    if (set_field(conf, key, value, why, sizeof why) < 0) return isn_error(err, err_len, "%s.%s: %s", section, name, why);
    if (old) {
        char spelled[64];
        format_value(conf, replacement, spelled, sizeof spelled);
        log_warn("%s%s.%s is deprecated: write %s.%s = %s instead (the same setting)", where, section, name, section,
                 old->new_name, spelled);
    }
    return 0;
}

int isn_conf_set(isn_conf *conf, const char *section, const char *name, const char *value, char *err,
                 size_t err_len) {
    return set_key(conf, section, name, value, "", err, err_len);
}

void isn_conf_default(isn_conf *conf) {
    memset(conf, 0, sizeof *conf);
    for (size_t i = 0; i < NUM_KEYS; i++) {
        char err[400];
        /* The table's defaults are tested (tests/unit/test_conf.c): a failure here is a typo in KEYS. */
        if (set_field(conf, &KEYS[i], KEYS[i].default_value, err, sizeof err) < 0) {
            fprintf(stderr, "isn_conf_default: %s.%s: %s\n", KEYS[i].section, KEYS[i].name, err);
            abort();
        }
    }
}

int isn_conf_set_option(isn_conf *conf, const char *option, char *err, size_t err_len) {
    const char *dot = strchr(option, '.'), *eq = strchr(option, '=');
    if (!dot || !eq || dot > eq)
        return isn_error(err, err_len, "bad option \"%s\": expected SECTION.KEY=VALUE", option);
    char section[64], name[64];
    size_t section_len = (size_t)(dot - option), name_len = (size_t)(eq - dot - 1);
    if (section_len == 0 || section_len >= sizeof section || name_len == 0 || name_len >= sizeof name)
        return isn_error(err, err_len, "bad option \"%s\": expected SECTION.KEY=VALUE", option);
    memcpy(section, option, section_len);
    section[section_len] = '\0';
    memcpy(name, dot + 1, name_len);
    name[name_len] = '\0';
    return set_key(conf, section, name, eq + 1, "--set ", err, err_len);
}

/* ------------------------------------------------------------------ file */

typedef struct {
    FILE *file;
    const char *path;
    int line; /* line most recently read; inih calls the handler right after reading it */
    isn_conf *conf;
    char *err;
    size_t err_len, err_used;
    int problems;
} file_ctx;

static void add_problem(file_ctx *ctx, int line, const char *message) {
    ctx->problems++;
    if (ctx->err_used + 1 >= ctx->err_len) return;
    int n = snprintf(ctx->err + ctx->err_used, ctx->err_len - ctx->err_used, "%s%s:%d: %s",
                     ctx->err_used ? "\n" : "", ctx->path, line, message);
    if (n > 0) ctx->err_used += (size_t)n < ctx->err_len - ctx->err_used ? (size_t)n : ctx->err_len - ctx->err_used - 1;
}

static char *read_line(char *str, int num, void *stream) {
    file_ctx *ctx = stream;
    char *line = fgets(str, num, ctx->file);
    if (line) ctx->line++;
    return line;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
    file_ctx *ctx = user;
    char why[512], where[ISN_CONF_PATH_MAX + 16];
    snprintf(where, sizeof where, "%s:%d: ", ctx->path, ctx->line);
    if (set_key(ctx->conf, section, name, value, where, why, sizeof why) < 0) add_problem(ctx, ctx->line, why);
    /* Keep going: every problem of the file is reported at once. Returning 1 keeps inih's own
     * return value for syntax errors only. */
    return 1;
}

int isn_conf_load_file(isn_conf *conf, const char *path, char *err, size_t err_len) {
    FILE *file = isn_fopen_regular(path, "r");
    if (!file) {
        isn_error(err, err_len, "%s: cannot open: %s", path, isn_open_regular_strerror(errno));
        return -1;
    }
    file_ctx ctx = {.file = file, .path = path, .conf = conf, .err = err, .err_len = err_len};
    if (err_len) err[0] = '\0';
    /* A value continued on an indented next line would silently join two lines; refuse it. */
    ini_allow_multiline = false;
    int syntax_line = ini_parse_stream(read_line, &ctx, on_key, &ctx);
    fclose(file);
    if (syntax_line > 0) add_problem(&ctx, syntax_line, "syntax error (expected [section] or key = value)");
    else if (syntax_line < 0) add_problem(&ctx, 0, "cannot parse the file");
    return ctx.problems;
}

/* ------------------------------------------------------------------ checks */

int isn_conf_validate(const isn_conf *conf, char *err, size_t err_len) {
    char host[256], why[160];
    uint16_t port;
    if (isn_parse_host_port(conf->listen, host, sizeof host, &port, why, sizeof why) < 0)
        return isn_error(err, err_len, "server.listen: %s", why);
    if (!conf->tls_cert[0] != !conf->tls_key[0])
        return isn_error(err, err_len, "server.tls_cert and server.tls_key go together (%s is set alone)",
                         conf->tls_cert[0] ? "tls_cert" : "tls_key");
    if (conf->tls_client_ca[0] && !conf->tls_cert[0])
        return isn_error(err, err_len, "server.tls_client_ca needs server.tls_cert and server.tls_key (TLS on)");
    if (conf->tls_allowed_peers[0] && !conf->tls_client_ca[0])
        return isn_error(err, err_len, "server.tls_allowed_peers needs server.tls_client_ca (client certificates)");
    if (conf->worker_slice_us && conf->worker_slice_us < 100)
        return isn_error(err, err_len, "scheduler.worker_slice (%uus) is below the 100us the kernel takes (0: the kernel's own)",
                         conf->worker_slice_us);
    if (conf->loop_slice_us && conf->loop_slice_us < 100)
        return isn_error(err, err_len, "server.loop_slice (%uus) is below the 100us the kernel takes (0: the kernel's own)",
                         conf->loop_slice_us);
    if (!conf->index_path[0])
        return isn_error(err, err_len, "no index: set index.path in the configuration file or pass --index DIR");
    if (conf->default_k > conf->max_k)
        return isn_error(err, err_len, "search.default_k (%u) is above search.max_k (%u)", conf->default_k, conf->max_k);
    if (conf->max_timeout_ms && conf->default_timeout_ms > conf->max_timeout_ms)
        return isn_error(err, err_len, "search.default_timeout (%ums) is above search.max_timeout (%ums)",
                    conf->default_timeout_ms, conf->max_timeout_ms);
    if (conf->default_algo != ISN_ALGO_AUTO && conf->default_algo != ISN_ALGO_OR &&
        conf->default_algo != ISN_ALGO_AND &&
        isn_algo_mode(conf->default_algo, conf->default_mode) != conf->default_mode)
        return isn_error(err, err_len, "search.default_algorithm %s does not implement search.default_mode %s",
                    isn_algo_name(conf->default_algo), conf->default_mode == ISN_MODE_AND ? "and" : "or");
    if (conf->default_n1 > conf->max_n1)
        return isn_error(err, err_len, "rerank.default_n1 (%u) is above rerank.max_n1 (%u)", conf->default_n1, conf->max_n1);
    if (!strcmp(conf->listen, conf->stats_listen) && port != 0)
        return isn_error(err, err_len, "server.listen and server.stats_listen are the same address %s", conf->listen);
    return 0;
}

void isn_conf_write(const isn_conf *conf, FILE *out) {
    const char *section = NULL;
    for (size_t i = 0; i < NUM_KEYS; i++) {
        if (!section || strcmp(section, KEYS[i].section)) {
            section = KEYS[i].section;
            fprintf(out, "%s[%s]\n", i ? "\n" : "", section);
        }
        char value[ISN_CONF_PATH_MAX];
        format_value(conf, &KEYS[i], value, sizeof value);
        fprintf(out, "%s = %s\n", KEYS[i].name, value);
    }
}

static size_t key_size(key_type type) {
    switch (type) {
    case KEY_ADDR:
    case KEY_OPTIONAL_ADDR: return ISN_CONF_ADDR_MAX;
    case KEY_PATH: return ISN_CONF_PATH_MAX;
    case KEY_BOOL: return sizeof(bool);
    case KEY_MODE: return sizeof(isn_mode);
    case KEY_ALGO: return sizeof(isn_algo);
    case KEY_LEVEL: return sizeof(isn_log_level);
    default: return sizeof(uint32_t);
    }
}

bool isn_conf_reloadable(const isn_conf *old_conf, const isn_conf *new_conf, char *key, size_t key_len) {
    for (size_t i = 0; i < NUM_KEYS; i++) {
        if (KEYS[i].reloadable) continue;
        const char *a = (const char *)old_conf + KEYS[i].offset, *b = (const char *)new_conf + KEYS[i].offset;
        bool same = KEYS[i].type == KEY_ADDR || KEYS[i].type == KEY_OPTIONAL_ADDR || KEYS[i].type == KEY_PATH
                        ? !strcmp(a, b)
                        : !memcmp(a, b, key_size(KEYS[i].type));
        if (!same) {
            if (key_len) snprintf(key, key_len, "%s.%s", KEYS[i].section, KEYS[i].name);
            return false;
        }
    }
    return true;
}

bool isn_conf_worker_idle_policy(const isn_conf *conf, uint32_t cpus, uint32_t loops) {
    if (conf->worker_idle_policy != ISN_SWITCH_AUTO) return conf->worker_idle_policy == ISN_SWITCH_ON;
    return !conf->gpu_enable && cpus >= ISN_IDLE_WORKERS_CPUS_PER_LOOP * (uint64_t)loops;
}
