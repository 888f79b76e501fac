/* Configuration keys as one table: parsing, writing and the reload check all walk it, so a key
 * added here is accepted, printed and classified everywhere at once. */
#include "conf/conf.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

typedef enum {
    KEY_ADDR,
    KEY_OPTIONAL_ADDR,
    KEY_PATH,
    KEY_U32,
    KEY_DURATION,
    KEY_SIZE,
    KEY_BOOL,
    KEY_MODE,
    KEY_ALGO,
    KEY_LEVEL,
    KEY_DURATION_US,
} key_type;

typedef struct {
    const char *section;
    const char *name;
    key_type type;
    size_t offset;
    uint64_t min, max; /* numeric keys: inclusive range (durations in ms, sizes in bytes) */
    bool reloadable;   /* SIGHUP may change it */
} key_spec;

#define FIELD(f) offsetof(isn_conf, f)

static const key_spec KEYS[] = {
    {"server", "listen", KEY_ADDR, FIELD(listen), 0, 0, false},
    {"server", "stats_listen", KEY_OPTIONAL_ADDR, FIELD(stats_listen), 0, 0, false},
    {"server", "max_connections", KEY_U32, FIELD(max_connections), 1, 1000000, true},
    {"server", "max_concurrent_streams", KEY_U32, FIELD(max_concurrent_streams), 1, 65536, false},
    {"server", "max_message_size", KEY_SIZE, FIELD(max_message_bytes), 64, 1u << 30, false},
    {"server", "header_timeout", KEY_DURATION, FIELD(header_timeout_ms), 1, 3600000, true},
    {"server", "idle_timeout", KEY_DURATION, FIELD(idle_timeout_ms), 1, 86400000, true},
    {"server", "drain_timeout", KEY_DURATION, FIELD(drain_timeout_ms), 0, 3600000, true},
    {"index", "path", KEY_PATH, FIELD(index_path), 0, 0, false},
    {"index", "partition_id", KEY_U32, FIELD(partition_id), 0, UINT32_MAX, false},
    {"index", "warm_up", KEY_BOOL, FIELD(warm_up), 0, 0, false},
    {"search", "workers", KEY_U32, FIELD(workers), 0, 1024, false},
    {"search", "max_queue", KEY_U32, FIELD(max_queue), 1, 10000000, false},
    {"search", "default_k", KEY_U32, FIELD(default_k), 1, ISN_MAX_K, true},
    {"search", "max_k", KEY_U32, FIELD(max_k), 1, ISN_MAX_K, true},
    {"search", "default_timeout", KEY_DURATION, FIELD(default_timeout_ms), 0, 3600000, true},
    {"search", "max_timeout", KEY_DURATION, FIELD(max_timeout_ms), 0, 3600000, true},
    {"search", "default_mode", KEY_MODE, FIELD(default_mode), 0, 0, true},
    {"search", "default_algorithm", KEY_ALGO, FIELD(default_algo), 0, 0, true},
    {"scheduler", "early_stop_percent", KEY_U32, FIELD(early_stop_percent), 1, 100, false},
    {"scheduler", "admit_percent", KEY_U32, FIELD(admit_percent), 1, 100, false},
    {"scheduler", "degraded_stop_percent", KEY_U32, FIELD(degraded_stop_percent), 1, 100, false},
    {"scheduler", "route_margin_percent", KEY_U32, FIELD(route_margin_percent), 0, 1000, false},
    {"scheduler", "overload_degrade", KEY_BOOL, FIELD(overload_degrade), 0, 0, false},
    {"scheduler", "worker_nice", KEY_U32, FIELD(worker_nice), 0, 19, false},
    {"scheduler", "analysis_min_workers", KEY_U32, FIELD(analysis_min_workers), 0, 4096, false},
    {"scheduler", "cost_model_state", KEY_PATH, FIELD(cost_model_state), 0, 0, false},
    {"scheduler", "gpu_batch_max", KEY_U32, FIELD(gpu_batch_max), 1, 4096, false},
    {"scheduler", "gpu_batch_memory", KEY_SIZE, FIELD(gpu_batch_memory_bytes), 4096, 1u << 31, false},
    {"scheduler", "gpu_batch_linger", KEY_DURATION_US, FIELD(gpu_batch_linger_us), 0, 1000000, false},
    {"scheduler", "gpu_deadline_safety", KEY_DURATION_US, FIELD(gpu_deadline_safety_us), 0, 1000000, false},
    /* Named for what it does to answers, so nobody turns it on by accident. */
    {"scheduler", "simulated_gpus_answer_without_hits", KEY_U32, FIELD(gpu_sim_devices), 0, 16, false},
    {"scheduler", "gpu_sim_launch_ns", KEY_U32, FIELD(gpu_sim_launch_ns), 0, 100000000, false},
    {"scheduler", "gpu_sim_postings_per_us", KEY_U32, FIELD(gpu_sim_postings_per_us), 1, 1000000000, false},
    {"scheduler", "gpu_sim_query_ns", KEY_U32, FIELD(gpu_sim_query_ns), 0, 100000000, false},
    {"scheduler", "gpu_sim_failure_permille", KEY_U32, FIELD(gpu_sim_failure_permille), 0, 1000, false},
    {"gpu", "enable", KEY_BOOL, FIELD(gpu_enable), 0, 0, false},
    {"gpu", "emulate", KEY_BOOL, FIELD(gpu_emulate), 0, 0, false},
    {"gpu", "device", KEY_U32, FIELD(gpu_device), 0, 255, false},
    {"gpu", "memory_budget_mib", KEY_U32, FIELD(gpu_memory_budget_mib), 0, 16u << 20, false},
    {"gpu", "max_batch", KEY_U32, FIELD(gpu_max_batch), 1, 4096, false},
    {"gpu", "max_k", KEY_U32, FIELD(gpu_max_k), 1, 10000, false},
    {"gpu", "training_queries", KEY_PATH, FIELD(gpu_training_queries), 0, 0, false},
    {"gpu", "route_all", KEY_BOOL, FIELD(gpu_route_all), 0, 0, false},
    {"gpu", "rerank", KEY_BOOL, FIELD(gpu_rerank), 0, 0, false},
    {"rerank", "ranker_dir", KEY_PATH, FIELD(ranker_dir), 0, 0, false},
    {"rerank", "default_n1", KEY_U32, FIELD(default_n1), 1, ISN_MAX_K, true},
    {"rerank", "max_n1", KEY_U32, FIELD(max_n1), 1, ISN_MAX_K, true},
    {"rerank", "gpu_model_memory", KEY_SIZE, FIELD(gpu_model_memory_bytes), 1u << 20, 1u << 31, false},
    {"log", "level", KEY_LEVEL, FIELD(log_level), 0, 0, true},
    {"testing", "job_delay", KEY_DURATION_US, FIELD(job_delay_us), 0, 60000000, true},
    {"testing", "inject_delay", KEY_DURATION, FIELD(inject_delay_ms), 0, 60000, true},
    {"testing", "inject_delay_percent", KEY_U32, FIELD(inject_delay_percent), 0, 100, true},
};
#define NUM_KEYS (sizeof KEYS / sizeof KEYS[0])


void isn_conf_default(isn_conf *conf) {
    memset(conf, 0, sizeof *conf);
    strcpy(conf->listen, "127.0.0.1:7070");
    strcpy(conf->stats_listen, "127.0.0.1:9090");
    conf->max_connections = 4096;
    conf->max_concurrent_streams = 256;
    conf->max_message_bytes = 4u << 20;
    conf->header_timeout_ms = 10000;
    conf->idle_timeout_ms = 300000;
    conf->drain_timeout_ms = 30000;
    conf->warm_up = true;
    conf->workers = 0;
    conf->max_queue = 4096;
    conf->default_k = 10;
    conf->max_k = 10000;
    conf->default_timeout_ms = 0;
    conf->max_timeout_ms = 60000;
    conf->default_mode = ISN_MODE_OR;
    conf->default_algo = ISN_ALGO_AUTO;
    conf->log_level = ISN_LOG_INFO;
    conf->early_stop_percent = 90;
    conf->admit_percent = 40;
    conf->degraded_stop_percent = 50;
    conf->route_margin_percent = 25;
    conf->overload_degrade = false;
    conf->worker_nice = 5;
    conf->analysis_min_workers = 4;
    conf->gpu_batch_max = 64;
    conf->gpu_batch_memory_bytes = 256u << 20;
    conf->gpu_batch_linger_us = 200;
    conf->gpu_deadline_safety_us = 1000;
    conf->gpu_sim_launch_ns = 8500;
    conf->gpu_sim_postings_per_us = 25000;
    conf->gpu_sim_query_ns = 2000;
    conf->default_n1 = 1000;
    conf->max_n1 = 10000;
    conf->gpu_model_memory_bytes = 512u << 20;
    conf->gpu_max_batch = 256;
    conf->gpu_max_k = 1000;
    conf->gpu_rerank = true;
}

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

static int parse_duration_us(const char *text, uint64_t *us, char *err, size_t err_len) {
    uint64_t v;
    const char *unit;
    if (parse_digits(text, &v, &unit) < 0)
        return isn_error(err, err_len, "bad duration \"%s\": expected a number with a unit (250ms, 10s, 5m)", text);
    uint64_t scale;
    if (*unit == '\0') {
        if (v != 0) return isn_error(err, err_len, "duration \"%s\" needs a unit: us, ms, s, m or h", text);
        scale = 0;
    } else if (!strcmp(unit, "us")) scale = 1;
    else if (!strcmp(unit, "ms")) scale = 1000;
    else if (!strcmp(unit, "s")) scale = 1000000;
    else if (!strcmp(unit, "m")) scale = 60000000;
    else if (!strcmp(unit, "h")) scale = 3600000000ull;
    else return isn_error(err, err_len, "bad duration unit in \"%s\": use us, ms, s, m or h", text);
    if (scale && v > UINT64_MAX / scale) return isn_error(err, err_len, "duration \"%s\" is too large", text);
    *us = v * scale;
    return 0;
}

int isn_conf_parse_duration_ms(const char *text, uint32_t *ms, char *err, size_t err_len) {
    uint64_t us;
    if (parse_duration_us(text, &us, err, err_len) < 0) return -1;
    if (us % 1000) return isn_error(err, err_len, "duration \"%s\" is finer than a millisecond", text);
    if (us / 1000 > UINT32_MAX) return isn_error(err, err_len, "duration \"%s\" is too large", text);
    *ms = (uint32_t)(us / 1000);
    return 0;
}

int isn_conf_parse_size(const char *text, uint64_t *bytes, char *err, size_t err_len) {
    uint64_t v;
    const char *unit;
    if (parse_digits(text, &v, &unit) < 0)
        return isn_error(err, err_len, "bad size \"%s\": expected a number, optionally with KiB, MiB or GiB", text);
    static const struct {
        const char *name;
        unsigned shift;
    } units[] = {{"", 0},    {"k", 10},   {"K", 10},   {"KB", 10}, {"KiB", 10}, {"M", 20},
                 {"MB", 20}, {"MiB", 20}, {"G", 30},   {"GB", 30}, {"GiB", 30}, {"B", 0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(unit, units[i].name)) continue;
        if (v > (UINT64_MAX >> units[i].shift)) return isn_error(err, err_len, "size \"%s\" is too large", text);
        *bytes = v << units[i].shift;
        return 0;
    }
    return isn_error(err, err_len, "bad size unit in \"%s\": use KiB, MiB or GiB", text);
}

int isn_conf_parse_host_port(const char *text, char *host, size_t host_len, uint16_t *port, char *err,
                             size_t err_len) {
    const char *host_start = text, *host_end, *colon;
    if (*text == '[') {
        host_start = text + 1;
        host_end = strchr(host_start, ']');
        if (!host_end || host_end[1] != ':')
            return isn_error(err, err_len, "bad address \"%s\": expected [IPV6]:PORT", text);
        colon = host_end + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon) return isn_error(err, err_len, "bad address \"%s\": expected HOST:PORT", text);
        if (memchr(text, ':', (size_t)(colon - text)))
            return isn_error(err, err_len, "bad address \"%s\": write an IPv6 host in brackets, [::1]:PORT", text);
        host_end = colon;
    }
    size_t n = (size_t)(host_end - host_start);
    if (n == 0) return isn_error(err, err_len, "bad address \"%s\": the host is empty", text);
    if (n >= host_len) return isn_error(err, err_len, "bad address \"%s\": the host is too long", text);
    uint64_t p;
    const char *end;
    if (parse_digits(colon + 1, &p, &end) < 0 || *end || p > 65535)
        return isn_error(err, err_len, "bad address \"%s\": the port must be a number from 0 to 65535", text);
    memcpy(host, host_start, n);
    host[n] = '\0';
    *port = (uint16_t)p;
    return 0;
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

static bool known_section(const char *section) {
    for (size_t i = 0; i < NUM_KEYS; i++)
        if (!strcmp(KEYS[i].section, section)) return true;
    return false;
}

static int check_range(const key_spec *key, uint64_t v, const char *value, char *err, size_t err_len) {
    if (v >= key->min && v <= key->max) return 0;
    return isn_error(err, err_len, "%s.%s = %s is out of range [%" PRIu64 ", %" PRIu64 "]%s", key->section, key->name,
                value, key->min, key->max,
                key->type == KEY_DURATION ? " milliseconds" : key->type == KEY_SIZE ? " bytes" : "");
}

int isn_conf_set(isn_conf *conf, const char *section, const char *name, const char *value, char *err,
                 size_t err_len) {
    const key_spec *key = find_key(section, name);
    if (!key) {
        if (!known_section(section)) return isn_error(err, err_len, "unknown section [%s]", section);
        return isn_error(err, err_len, "unknown key \"%s\" in [%s]", name, section);
    }
    void *field = (char *)conf + key->offset;
    char why[160];
    switch (key->type) {
    case KEY_OPTIONAL_ADDR:
        if (!*value) return *(char *)field = '\0', 0;
        /* fall through */
    case KEY_ADDR: {
        char host[256];
        uint16_t port;
        if (isn_conf_parse_host_port(value, host, sizeof host, &port, why, sizeof why) < 0)
            return isn_error(err, err_len, "%s.%s: %s", section, name, why);
        if (strlen(value) >= ISN_CONF_ADDR_MAX) return isn_error(err, err_len, "%s.%s: address too long", section, name);
        strcpy((char *)field, value);
        return 0;
    }
    case KEY_PATH:
        if (strlen(value) >= ISN_CONF_PATH_MAX) return isn_error(err, err_len, "%s.%s: path too long", section, name);
        strcpy((char *)field, value);
        return 0;
    case KEY_U32: {
        uint64_t v;
        const char *end;
        if (parse_digits(value, &v, &end) < 0 || *end)
            return isn_error(err, err_len, "%s.%s: \"%s\" is not a non-negative integer", section, name, value);
        if (check_range(key, v, value, err, err_len) < 0) return -1;
        *(uint32_t *)field = (uint32_t)v;
        return 0;
    }
    case KEY_DURATION: {
        uint32_t ms;
        if (isn_conf_parse_duration_ms(value, &ms, why, sizeof why) < 0)
            return isn_error(err, err_len, "%s.%s: %s", section, name, why);
        if (check_range(key, ms, value, err, err_len) < 0) return -1;
        *(uint32_t *)field = ms;
        return 0;
    }
    case KEY_DURATION_US: {
        uint64_t us;
        if (parse_duration_us(value, &us, why, sizeof why) < 0)
            return isn_error(err, err_len, "%s.%s: %s", section, name, why);
        if (check_range(key, us, value, err, err_len) < 0) return -1;
        *(uint32_t *)field = (uint32_t)us;
        return 0;
    }
    case KEY_SIZE: {
        uint64_t bytes;
        if (isn_conf_parse_size(value, &bytes, why, sizeof why) < 0)
            return isn_error(err, err_len, "%s.%s: %s", section, name, why);
        if (check_range(key, bytes, value, err, err_len) < 0) return -1;
        *(uint32_t *)field = (uint32_t)bytes;
        return 0;
    }
    case KEY_BOOL:
        if (parse_bool(value, (bool *)field) < 0)
            return isn_error(err, err_len, "%s.%s: \"%s\" is not a boolean (true/false, yes/no, on/off)", section,
                        name, value);
        return 0;
    case KEY_MODE:
        if (!strcmp(value, "or")) *(isn_mode *)field = ISN_MODE_OR;
        else if (!strcmp(value, "and")) *(isn_mode *)field = ISN_MODE_AND;
        else return isn_error(err, err_len, "%s.%s: \"%s\" is not a mode (or, and)", section, name, value);
        return 0;
    case KEY_ALGO:
        if (!isn_algo_from_name(value, (isn_algo *)field))
            return isn_error(err, err_len,
                        "%s.%s: unknown algorithm \"%s\" (auto, or, and, maxscore, wand, bmw, bmand)", section,
                        name, value);
        return 0;
    case KEY_LEVEL:
        if (isn_log_level_parse(value, (isn_log_level *)field) == 0) return 0;
        return isn_error(err, err_len, "%s.%s: \"%s\" is not a level (error, warn, info, debug)", section, name,
                    value);
    }
    return isn_error(err, err_len, "%s.%s: unhandled key type", section, name);
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
    return isn_conf_set(conf, section, name, eq + 1, err, err_len);
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
    char why[512];
    if (isn_conf_set(ctx->conf, section, name, value, why, sizeof why) < 0) add_problem(ctx, ctx->line, why);
    /* Keep going: every problem of the file is reported at once. Returning 1 keeps inih's own
     * return value for syntax errors only. */
    return 1;
}

int isn_conf_load_file(isn_conf *conf, const char *path, char *err, size_t err_len) {
    FILE *file = fopen(path, "r");
    if (!file) {
        isn_error(err, err_len, "%s: cannot open: %s", path, strerror(errno));
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
    if (isn_conf_parse_host_port(conf->listen, host, sizeof host, &port, why, sizeof why) < 0)
        return isn_error(err, err_len, "server.listen: %s", why);
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

static void write_value(const isn_conf *conf, const key_spec *key, FILE *out) {
    const void *field = (const char *)conf + key->offset;
    uint32_t v;
    switch (key->type) {
    case KEY_ADDR:
    case KEY_OPTIONAL_ADDR:
    case KEY_PATH: fputs((const char *)field, out); break;
    case KEY_U32: fprintf(out, "%u", *(const uint32_t *)field); break;
    case KEY_DURATION:
        v = *(const uint32_t *)field;
        if (v == 0) fputs("0", out);
        else if (v % 60000 == 0) fprintf(out, "%um", v / 60000);
        else if (v % 1000 == 0) fprintf(out, "%us", v / 1000);
        else fprintf(out, "%ums", v);
        break;
    case KEY_DURATION_US:
        v = *(const uint32_t *)field;
        if (v == 0) fputs("0", out);
        else if (v % 1000 == 0) fprintf(out, "%ums", v / 1000);
        else fprintf(out, "%uus", v);
        break;
    case KEY_SIZE:
        v = *(const uint32_t *)field;
        if (v % (1u << 20) == 0) fprintf(out, "%uMiB", v >> 20);
        else if (v % 1024 == 0) fprintf(out, "%uKiB", v >> 10);
        else fprintf(out, "%u", v);
        break;
    case KEY_BOOL: fputs(*(const bool *)field ? "true" : "false", out); break;
    case KEY_MODE: fputs(*(const isn_mode *)field == ISN_MODE_AND ? "and" : "or", out); break;
    case KEY_ALGO: fputs(isn_algo_name(*(const isn_algo *)field), out); break;
    case KEY_LEVEL: fputs(isn_log_level_name(*(const isn_log_level *)field), out); break;
    }
}

void isn_conf_write(const isn_conf *conf, FILE *out) {
    const char *section = NULL;
    for (size_t i = 0; i < NUM_KEYS; i++) {
        if (!section || strcmp(section, KEYS[i].section)) {
            section = KEYS[i].section;
            fprintf(out, "%s[%s]\n", i ? "\n" : "", section);
        }
        fprintf(out, "%s = ", KEYS[i].name);
        write_value(conf, &KEYS[i], out);
        fputc('\n', out);
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
