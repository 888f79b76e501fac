/* isnd configuration: value parsers, FILE:LINE problems for bad files, every key documented in
 * conf/isnd.conf, command-line overrides, old key names (read, and logged as deprecated), cross-key
 * validation and the SIGHUP reload rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/base.h"
#include "conf/conf.h"

/* A call that must fail (-1) with an error that says `needle`. */
static void assert_error(int rc, const char *err, const char *needle) {
    assert_int_equal(rc, -1);
    if (!strstr(err, needle)) fail_msg("error \"%s\" does not say \"%s\"", err, needle);
}

static isn_conf default_conf(void) {
    isn_conf conf;
    isn_conf_default(&conf);
    return conf;
}

static char temp_path[64];

static const char *write_temp(const char *text) {
    snprintf(temp_path, sizeof temp_path, "/tmp/isn_test_conf_XXXXXX");
    int fd = mkstemp(temp_path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return temp_path;
}

/* What a value parser must make of each text: rc 0 and the value, or -1. */
typedef struct {
    const char *text;
    int rc;
    uint64_t value;
} parse_case;

static void test_durations(void **state) {
    (void)state;
    static const parse_case cases[] = {
        {"250ms", 0, 250},     {"10s", 0, 10000},  {"5m", 0, 300000},  {"1h", 0, 3600000},
        {"0", 0, 0},           {"1.5s", -1, 0},    {"10x", -1, 0},     {"-1s", -1, 0},
        {"1500us", -1, 0}, /* finer than 1 ms */   {"99999999999h", -1, 0},
    };
    char err[200];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t ms = 0;
        assert_int_equal(isn_conf_parse_duration_ms(cases[i].text, &ms, err, sizeof err), cases[i].rc);
        if (cases[i].rc == 0) assert_int_equal(ms, cases[i].value);
    }
    uint32_t ms;
    assert_error(isn_conf_parse_duration_ms("10", &ms, err, sizeof err), err, "needs a unit");
}

static void test_sizes(void **state) {
    (void)state;
    static const parse_case cases[] = {
        {"4096", 0, 4096}, {"64KiB", 0, 65536}, {"4MiB", 0, 4u << 20}, {"1G", 0, 1u << 30},
        {"4 MiB", -1, 0},  {"4TiB", -1, 0},     {"MiB", -1, 0},
    };
    char err[200];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t bytes = 0;
        assert_int_equal(isn_conf_parse_size(cases[i].text, &bytes, err, sizeof err), cases[i].rc);
        if (cases[i].rc == 0) assert_int_equal(bytes, cases[i].value);
    }
}

static void test_host_port(void **state) {
    (void)state;
    char err[200], host[64];
    uint16_t port;
    assert_int_equal(isn_parse_host_port("127.0.0.1:7070", host, sizeof host, &port, err, sizeof err), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 7070);
    assert_int_equal(isn_parse_host_port("[::1]:0", host, sizeof host, &port, err, sizeof err), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 0);
    assert_int_equal(isn_parse_host_port("localhost:9090", host, sizeof host, &port, err, sizeof err), 0);
    assert_string_equal(host, "localhost");
    assert_error(isn_parse_host_port("::1:80", host, sizeof host, &port, err, sizeof err), err, "brackets");
    assert_int_equal(isn_parse_host_port("host:", host, sizeof host, &port, err, sizeof err), -1);
    assert_int_equal(isn_parse_host_port("host:70000", host, sizeof host, &port, err, sizeof err), -1);
    assert_int_equal(isn_parse_host_port(":80", host, sizeof host, &port, err, sizeof err), -1);
    assert_int_equal(isn_parse_host_port("7070", host, sizeof host, &port, err, sizeof err), -1);
}

static void test_good_file(void **state) {
    (void)state;
    const char *path = write_temp("# comment\n[server]\nlisten = 0.0.0.0:1234\nmax_message_size = 1MiB\n"
                                  "header_timeout = 500ms\n\n[index]\npath = /srv/isn/part-0003\npartition_id = 3\n"
                                  "[search]\nworkers = 4\nmax_k = 500\ndefault_k = 20\ndefault_mode = and\n"
                                  "default_algorithm = bmand\n[log]\nlevel = debug\n");
    isn_conf conf = default_conf();
    char err[1024];
    assert_int_equal(isn_conf_load_file(&conf, path, err, sizeof err), 0);
    unlink(path);
    assert_string_equal(conf.listen, "0.0.0.0:1234");
    assert_int_equal(conf.max_message_bytes, 1u << 20);
    assert_int_equal(conf.header_timeout_ms, 500);
    assert_string_equal(conf.index_path, "/srv/isn/part-0003");
    assert_int_equal(conf.partition_id, 3);
    assert_int_equal(conf.workers, 4);
    assert_int_equal(conf.max_k, 500);
    assert_int_equal(conf.default_k, 20);
    assert_int_equal(conf.default_mode, ISN_MODE_AND);
    assert_int_equal(conf.default_algo, ISN_ALGO_BMAND);
    assert_int_equal(conf.log_level, ISN_LOG_DEBUG);
    assert_string_equal(conf.stats_listen, "127.0.0.1:9090"); /* untouched default */
    assert_int_equal(isn_conf_validate(&conf, err, sizeof err), 0);
}

static void test_bad_file_reports_every_line(void **state) {
    (void)state;
    const char *path = write_temp("[server]\n"                   /* 1 */
                                  "listen = 127.0.0.1:7070\n"    /* 2 */
                                  "listne = 127.0.0.1:7070\n"    /* 3: unknown key */
                                  "idle_timeout = 30\n"          /* 4: no unit */
                                  "[serch]\n"                    /* 5 */
                                  "workers = 2\n"                /* 6: unknown section */
                                  "[search]\n"                   /* 7 */
                                  "max_k = 0\n"                  /* 8: out of range */
                                  "default_algorithm = fast\n"   /* 9: unknown algorithm */
                                  "this line is not ini\n"       /* 10: syntax */
                                  "[index]\n"                    /* 11 */
                                  "warm_up = maybe\n");          /* 12: not a boolean */
    isn_conf conf = default_conf();
    char err[4096];
    int problems = isn_conf_load_file(&conf, path, err, sizeof err);
    assert_int_equal(problems, 7);
    char expect[256];
    const int lines[] = {3, 4, 6, 8, 9, 10, 12};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        snprintf(expect, sizeof expect, "%s:%d: ", path, lines[i]);
        assert_non_null(strstr(err, expect));
    }
    assert_non_null(strstr(err, "unknown key \"listne\" in [server]"));
    assert_non_null(strstr(err, "unknown section [serch]"));
    assert_non_null(strstr(err, "needs a unit"));
    assert_non_null(strstr(err, "out of range"));
    assert_non_null(strstr(err, "unknown algorithm \"fast\""));
    assert_non_null(strstr(err, "not a boolean"));
    unlink(path);
}

static void test_missing_file(void **state) {
    (void)state;
    isn_conf conf = default_conf();
    char err[512];
    assert_error(isn_conf_load_file(&conf, "/nonexistent/isnd.conf", err, sizeof err), err, "/nonexistent/isnd.conf: cannot open");
}

/* The documented example must load cleanly and mention every key the parser knows. */
static void test_example_documents_every_key(void **state) {
    (void)state;
    isn_conf conf = default_conf();
    char err[4096];
    assert_int_equal(isn_conf_load_file(&conf, "conf/isnd.conf", err, sizeof err), 0);
    isn_conf defaults = default_conf();
    /* the example shows the defaults, and points at the built sample so that it runs as shipped */
    snprintf(defaults.index_path, sizeof defaults.index_path, "%s", "build/sample/index");
    assert_memory_equal(&conf, &defaults, sizeof conf);

    FILE *example = fopen("conf/isnd.conf", "r");
    assert_non_null(example);
    char text[32768];
    size_t n = fread(text, 1, sizeof text - 1, example);
    text[n] = '\0';
    fclose(example);

    char written[8192];
    FILE *out = fmemopen(written, sizeof written, "w");
    isn_conf_write(&conf, out);
    fclose(out);
    char section[64] = "", *save = NULL;
    int keys = 0;
    for (char *line = strtok_r(written, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '[') {
            snprintf(section, sizeof section, "%s", line);
            assert_non_null(strstr(text, section));
            continue;
        }
        char key[64];
        assert_int_equal(sscanf(line, "%63s =", key), 1);
        char needle[80];
        snprintf(needle, sizeof needle, "\n%s =", key);
        if (!strstr(text, needle)) fail_msg("key %s of %s is not documented in conf/isnd.conf", key, section);
        keys++;
    }
    assert_true(keys >= 20);
}

static void test_write_round_trip(void **state) {
    (void)state;
    isn_conf conf = default_conf();
    char err[512];
    assert_int_equal(isn_conf_set_option(&conf, "index.path=/data/idx", err, sizeof err), 0);
    assert_int_equal(isn_conf_set_option(&conf, "server.idle_timeout=90s", err, sizeof err), 0);
    assert_int_equal(isn_conf_set_option(&conf, "server.max_message_size=1536KiB", err, sizeof err), 0);
    assert_int_equal(isn_conf_set_option(&conf, "testing.job_delay=1500us", err, sizeof err), 0);
    assert_int_equal(isn_conf_set_option(&conf, "server.stats_listen=", err, sizeof err), 0);
    char text[8192];
    FILE *out = fmemopen(text, sizeof text, "w");
    isn_conf_write(&conf, out);
    fclose(out);
    const char *path = write_temp(text);
    isn_conf again = default_conf();
    assert_int_equal(isn_conf_load_file(&again, path, err, sizeof err), 0);
    unlink(path);
    assert_memory_equal(&conf, &again, sizeof conf);
    assert_int_equal(again.job_delay_us, 1500);
    assert_string_equal(again.stats_listen, "");
}

static void test_overrides(void **state) {
    (void)state;
    isn_conf conf = default_conf();
    char err[512];
    assert_int_equal(isn_conf_set_option(&conf, "search.workers=3", err, sizeof err), 0);
    assert_int_equal(conf.workers, 3);
    assert_error(isn_conf_set_option(&conf, "workers=3", err, sizeof err), err, "SECTION.KEY=VALUE");
    assert_error(isn_conf_set_option(&conf, "search.workerz=3", err, sizeof err), err, "unknown key \"workerz\"");
    assert_int_equal(isn_conf_set_option(&conf, "search.workers=-3", err, sizeof err), -1);
    assert_error(isn_conf_set_option(&conf, "server.listen=nowhere", err, sizeof err), err, "server.listen");
    /* the GPU's pruning mode, by name (ISN_GPU_PRUNE_AUTO, _ALWAYS, _NEVER = 0, 1, 2) */
    assert_int_equal(conf.gpu_pruning, 0);
    assert_int_equal(isn_conf_set_option(&conf, "gpu.pruning=never", err, sizeof err), 0);
    assert_int_equal(conf.gpu_pruning, 2);
    assert_int_equal(isn_conf_set_option(&conf, "gpu.pruning=always", err, sizeof err), 0);
    assert_int_equal(conf.gpu_pruning, 1);
    assert_error(isn_conf_set_option(&conf, "gpu.pruning=sometimes", err, sizeof err), err,
                 "not a pruning mode (auto, always, never)");
    assert_int_equal(conf.gpu_pruning, 1);
    /* what the device keeps of a partition larger than its memory, by name (ISN_CONF_GPU_CACHE_*) */
    assert_int_equal(conf.gpu_cache, ISN_CONF_GPU_CACHE_AUTO);
    assert_int_equal(isn_conf_set_option(&conf, "gpu.cache=tier", err, sizeof err), 0);
    assert_int_equal(conf.gpu_cache, ISN_CONF_GPU_CACHE_TIER);
    assert_int_equal(isn_conf_set_option(&conf, "gpu.cache=whole", err, sizeof err), 0);
    assert_int_equal(conf.gpu_cache, ISN_CONF_GPU_CACHE_WHOLE);
    assert_int_equal(conf.gpu_stream_mib, 0);
    assert_int_equal(isn_conf_set_option(&conf, "gpu.stream_memory=1GiB", err, sizeof err), 0);
    assert_int_equal(conf.gpu_stream_mib, 1024);
    assert_error(isn_conf_set_option(&conf, "gpu.cache=lru", err, sizeof err), err,
                 "not a cache (auto, whole, pruned, tier)");
    assert_int_equal(conf.gpu_cache, ISN_CONF_GPU_CACHE_WHOLE);
    /* the workers' SCHED_IDLE: auto (without gpu.enable, at three CPUs a loop or more) or a boolean */
    assert_int_equal(conf.worker_idle_policy, ISN_SWITCH_AUTO);
    assert_true(isn_conf_worker_idle_policy(&conf, 12, 4));
    assert_true(isn_conf_worker_idle_policy(&conf, 3, 1));
    assert_false(isn_conf_worker_idle_policy(&conf, 11, 4));
    assert_false(isn_conf_worker_idle_policy(&conf, 2, 1));
    conf.gpu_enable = true;
    assert_false(isn_conf_worker_idle_policy(&conf, 12, 4));
    assert_int_equal(isn_conf_set_option(&conf, "scheduler.worker_idle_policy=on", err, sizeof err), 0);
    assert_true(isn_conf_worker_idle_policy(&conf, 12, 4));
    assert_true(isn_conf_worker_idle_policy(&conf, 1, 1));
    conf.gpu_enable = false;
    assert_int_equal(isn_conf_set_option(&conf, "scheduler.worker_idle_policy=false", err, sizeof err), 0);
    assert_false(isn_conf_worker_idle_policy(&conf, 12, 4));
    assert_error(isn_conf_set_option(&conf, "scheduler.worker_idle_policy=sometimes", err, sizeof err), err,
                 "neither auto nor a boolean");
    assert_int_equal(isn_conf_set_option(&conf, "scheduler.worker_idle_policy=auto", err, sizeof err), 0);
    assert_int_equal(conf.worker_idle_policy, ISN_SWITCH_AUTO);
    /* event loops: 0 (from the core count) up to 256 */
    assert_int_equal(conf.loops, 0);
    assert_int_equal(isn_conf_set_option(&conf, "server.loops=4", err, sizeof err), 0);
    assert_int_equal(conf.loops, 4);
    assert_error(isn_conf_set_option(&conf, "server.loops=257", err, sizeof err), err, "server.loops");
    assert_error(isn_conf_set_option(&conf, "server.loops=many", err, sizeof err), err, "server.loops");
}

/* Runs `set` with stderr (where log_warn writes) sent to a file; returns what was logged. */
static const char *capture_log(void (*set)(isn_conf *conf), isn_conf *conf) {
    static char logged[4096];
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    FILE *capture = tmpfile();
    assert_true(saved >= 0 && capture);
    dup2(fileno(capture), STDERR_FILENO);
    set(conf);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(capture);
    size_t n = fread(logged, 1, sizeof logged - 1, capture);
    logged[n] = '\0';
    fclose(capture);
    return logged;
}

static size_t count(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static const char *old_names_path;

static void load_old_names(isn_conf *conf) {
    char err[1024];
    assert_int_equal(isn_conf_load_file(conf, old_names_path, err, sizeof err), 0);
}

static void set_old_name(isn_conf *conf) {
    char err[512];
    assert_int_equal(isn_conf_set_option(conf, "scheduler.gpu_sim_launch_ns=7000", err, sizeof err), 0);
}

static void set_new_names(isn_conf *conf) {
    char err[512];
    assert_int_equal(isn_conf_set_option(conf, "scheduler.gpu_max_batch=16", err, sizeof err), 0);
    assert_int_equal(isn_conf_set_option(conf, "scheduler.simulated_gpu_query=1500ns", err, sizeof err), 0);
    assert_int_equal(isn_conf_set_option(conf, "gpu.index_memory=2GiB", err, sizeof err), 0);
}

/* Renamed keys: the old name is read as before (its bare number in the old unit) and logged once,
 * naming the new key with the same value; the configuration written back uses the new names. */
static void test_old_key_names_still_work_and_warn(void **state) {
    (void)state;
    old_names_path = write_temp("[scheduler]\n"
                                "gpu_batch_max = 32\n" /* line 2 */
                                "gpu_sim_query_ns = 1500\n"
                                "[gpu]\n"
                                "memory_budget_mib = 8192\n"); /* line 5 */
    isn_conf conf = default_conf();
    const char *logged = capture_log(load_old_names, &conf);
    assert_int_equal(conf.gpu_batch_max, 32);
    assert_int_equal(conf.gpu_sim_query_ns, 1500);
    assert_int_equal(conf.gpu_memory_budget_mib, 8192);
    char expect[256];
    snprintf(expect, sizeof expect, "%s:2: scheduler.gpu_batch_max is deprecated: write scheduler.gpu_max_batch = 32",
             old_names_path);
    if (!strstr(logged, expect)) fail_msg("expected \"%s\" in the log:\n%s", expect, logged);
    assert_non_null(strstr(logged, "write scheduler.simulated_gpu_query = 1500ns"));
    snprintf(expect, sizeof expect, "%s:5: gpu.memory_budget_mib is deprecated: write gpu.index_memory = 8GiB",
             old_names_path);
    if (!strstr(logged, expect)) fail_msg("expected \"%s\" in the log:\n%s", expect, logged);
    assert_int_equal(count(logged, "deprecated"), 3);
    unlink(old_names_path);

    logged = capture_log(set_old_name, &conf);
    assert_int_equal(conf.gpu_sim_launch_ns, 7000);
    assert_non_null(strstr(logged, "--set scheduler.gpu_sim_launch_ns is deprecated: write "
                                   "scheduler.simulated_gpu_launch = 7us"));
    assert_int_equal(count(logged, "deprecated"), 1);

    char written[8192];
    FILE *out = fmemopen(written, sizeof written, "w");
    isn_conf_write(&conf, out);
    fclose(out);
    assert_non_null(strstr(written, "\ngpu_max_batch = 32\n"));
    assert_non_null(strstr(written, "\nindex_memory = 8GiB\n"));
    assert_null(strstr(written, "gpu_batch_max"));
    assert_null(strstr(written, "memory_budget_mib"));

    isn_conf fresh = default_conf();
    logged = capture_log(set_new_names, &fresh);
    assert_string_equal(logged, "");
    assert_int_equal(fresh.gpu_batch_max, 16);
    assert_int_equal(fresh.gpu_sim_query_ns, 1500);
    assert_int_equal(fresh.gpu_memory_budget_mib, 2048);
    char err[512];
    assert_error(isn_conf_set_option(&fresh, "gpu.index_memory=1000KiB", err, sizeof err), err, "whole number of MiB");
    assert_error(isn_conf_set_option(&fresh, "scheduler.simulated_gpu_launch=8500", err, sizeof err), err, "needs a unit");
}

static void test_validate(void **state) {
    (void)state;
    isn_conf conf = default_conf();
    char err[512];
    assert_error(isn_conf_validate(&conf, err, sizeof err), err, "--index");
    strcpy(conf.index_path, "/idx");
    assert_int_equal(isn_conf_validate(&conf, err, sizeof err), 0);
    conf.default_k = 50;
    conf.max_k = 20;
    assert_error(isn_conf_validate(&conf, err, sizeof err), err, "default_k");
    isn_conf_default(&conf);
    strcpy(conf.index_path, "/idx");
    conf.default_mode = ISN_MODE_AND;
    conf.default_algo = ISN_ALGO_WAND;
    assert_error(isn_conf_validate(&conf, err, sizeof err), err, "default_algorithm");
    isn_conf_default(&conf);
    strcpy(conf.index_path, "/idx");
    strcpy(conf.stats_listen, conf.listen);
    assert_int_equal(isn_conf_validate(&conf, err, sizeof err), -1);
    isn_conf_default(&conf);
    strcpy(conf.index_path, "/idx");
    conf.loop_slice_us = 50;
    assert_error(isn_conf_validate(&conf, err, sizeof err), err, "server.loop_slice");
    conf.loop_slice_us = 0;
    assert_int_equal(isn_conf_validate(&conf, err, sizeof err), 0);
}

static void test_reloadable(void **state) {
    (void)state;
    isn_conf a, b;
    isn_conf_default(&a);
    isn_conf_default(&b);
    char key[64];
    assert_true(isn_conf_reloadable(&a, &b, key, sizeof key));
    b.log_level = ISN_LOG_DEBUG;
    b.max_k = 50;
    b.idle_timeout_ms = 1000;
    strcpy(b.index_path, "/srv/isn/next"); /* a new index generation, swapped in while serving */
    b.index_watch_interval_ms = 250;
    assert_true(isn_conf_reloadable(&a, &b, key, sizeof key));
    strcpy(b.listen, "127.0.0.1:1");
    assert_false(isn_conf_reloadable(&a, &b, key, sizeof key));
    assert_string_equal(key, "server.listen");
    isn_conf_default(&b);
    b.workers = 7;
    assert_false(isn_conf_reloadable(&a, &b, key, sizeof key));
    assert_string_equal(key, "search.workers");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_host_port),
        cmocka_unit_test(test_good_file),
        cmocka_unit_test(test_bad_file_reports_every_line),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_example_documents_every_key),
        cmocka_unit_test(test_write_round_trip),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_old_key_names_still_work_and_warn),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_reloadable),
    };
    return cmocka_run_group_tests_name("conf", tests, NULL, NULL);
}
