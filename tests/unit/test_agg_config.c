/* isn-agg configuration (agg/config.c): partitions and replicas from flags and files, and a clear
 * error for every bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agg/agg.h"

/* A call that must fail (-1) with an error that says `needle`. */
static void assert_error(int rc, const char *err, const char *needle) {
    assert_int_equal(rc, -1);
    if (!strstr(err, needle)) fail_msg("error \"%s\" does not say \"%s\"", err, needle);
}

static void expect_error(const char *key, const char *value, const char *needle) {
    agg_config c;
    agg_config_default(&c);
    char err[512] = "";
    assert_int_equal(agg_config_set(&c, key, value, err, sizeof err), -1);
    if (!strstr(err, needle)) fail_msg("%s=%s: error \"%s\" does not say \"%s\"", key, value, err, needle);
}

static void test_partitions_and_keys(void **state) {
    (void)state;
    agg_config c;
    agg_config_default(&c);
    char err[512];
    assert_error(agg_config_validate(&c, err, sizeof err), err, "no partitions");
    assert_int_equal(agg_config_set(&c, "partition", "127.0.0.1:7100,127.0.0.1:7101", err, sizeof err), 0);
    assert_int_equal(agg_config_set(&c, "partition", "[::1]:7110", err, sizeof err), 0);
    assert_int_equal(agg_config_set(&c, "global_stats", "on", err, sizeof err), 0);
    assert_int_equal(agg_config_set(&c, "margin_ms", "5", err, sizeof err), 0);
    assert_int_equal(c.num_partitions, 2);
    assert_int_equal(c.partitions[0].num_replicas, 2);
    assert_string_equal(c.partitions[0].replicas[1], "127.0.0.1:7101");
    assert_string_equal(c.partitions[1].replicas[0], "[::1]:7110");
    assert_true(c.global_stats);
    assert_int_equal(c.margin_ms, 5);
    assert_true(c.ready_coverage == 1.0);
    assert_int_equal(agg_config_set(&c, "ready_coverage", "0.5", err, sizeof err), 0);
    assert_true(c.ready_coverage == 0.5);
    assert_int_equal(agg_config_set(&c, "log_json", "true", err, sizeof err), 0);
    assert_int_equal(agg_config_set(&c, "access_log", "yes", err, sizeof err), 0);
    assert_true(c.log_json && c.access_log);
    assert_int_equal(agg_config_validate(&c, err, sizeof err), 0);
}

/* The shipped example (conf/isn-agg.conf) loads and validates as it is. */
static void test_shipped_example(void **state) {
    (void)state;
    agg_config c;
    agg_config_default(&c);
    char err[512];
    if (agg_config_load(&c, "conf/isn-agg.conf", err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(agg_config_validate(&c, err, sizeof err), 0);
    assert_int_equal(c.num_partitions, 2);
    agg_config defaults;
    agg_config_default(&defaults);
    /* every key but the partitions shows its default */
    c.num_partitions = 0;
    memset(c.partitions, 0, sizeof c.partitions);
    assert_memory_equal(&c, &defaults, sizeof c);
}

static void test_bad_values_are_named(void **state) {
    (void)state;
    expect_error("partition", "", "lists no replica");
    expect_error("partition", "localhost", "HOST:PORT");
    expect_error("partition", "127.0.0.1:http", "HOST:PORT"); /* replicas are checked as the client will parse them */
    expect_error("partition", "::1:7070", "IPv6 host in brackets");
    expect_error("listen", "nowhere", "listen must be HOST:PORT");
    expect_error("margin_ms", "-1", "margin_ms must be an integer");
    expect_error("hedge", "maybe", "hedge must be true or false");
    expect_error("max_k", "0", "max_k must be an integer in 1..");
    expect_error("colour", "blue", "unknown key \"colour\"");
    expect_error("ready_coverage", "0", "ready_coverage must be a number in (0, 1]");
    expect_error("ready_coverage", "1.5", "ready_coverage must be a number in (0, 1]");
    agg_config c;
    agg_config_default(&c);
    char err[512];
    agg_config_set(&c, "partition", "a:1", err, sizeof err);
    agg_config_set(&c, "default_k", "50", err, sizeof err);
    agg_config_set(&c, "max_k", "20", err, sizeof err);
    assert_error(agg_config_validate(&c, err, sizeof err), err, "default_k 50 is above max_k 20");
}

static void test_file(void **state) {
    (void)state;
    char path[] = "/tmp/agg_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("[agg]\nlisten = 127.0.0.1:0\npartition = 127.0.0.1:1,127.0.0.1:2\npartition = 127.0.0.1:3\n"
          "hedge = false\n", f);
    fclose(f);
    agg_config c;
    agg_config_default(&c);
    char err[512];
    assert_int_equal(agg_config_load(&c, path, err, sizeof err), 0);
    assert_int_equal(c.num_partitions, 2);
    assert_false(c.hedge);
    f = fopen(path, "w");
    fputs("[agg]\npartition = 127.0.0.1:1\nhedge = sometimes\n", f);
    fclose(f);
    agg_config_default(&c);
    assert_int_equal(agg_config_load(&c, path, err, sizeof err), -1);
    if (!strstr(err, path) || !strstr(err, "hedge must be true or false")) fail_msg("error: %s", err);
    f = fopen(path, "w");
    fputs("[other]\nx = 1\n", f);
    fclose(f);
    agg_config_default(&c);
    assert_error(agg_config_load(&c, path, err, sizeof err), err, "unknown section [other]");
    unlink(path);
    assert_error(agg_config_load(&c, path, err, sizeof err), err, "cannot open");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partitions_and_keys),
        cmocka_unit_test(test_bad_values_are_named),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_shipped_example),
    };
    return cmocka_run_group_tests_name("agg_config", tests, NULL, NULL);
}
