/* The build's JSON Lines fast path (index/jsonl_scan.c): the flat records it reads and the values it
 * finds, everything it leaves to jansson, and that an index built through it is byte for byte the one
 * built when every record goes through jansson. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "index/jsonl_scan.h"
#include "tests/support/files.h"

static const char *const keys[] = {"id", "title", "body", "id"}; /* a key may serve twice */
#define NUM_KEYS 4

static char scratch[4096];
static jsonl_value values[NUM_KEYS];

static int scan(const char *line) {
    return jsonl_scan_flat_object(line, strlen(line), keys, NUM_KEYS, values, scratch);
}

static void expect_decoded(const jsonl_value *v, const char *want, size_t want_len) {
    assert_int_equal(v->kind, JSONL_STRING);
    assert_int_equal(v->len, want_len);
    assert_memory_equal(v->text, want, want_len);
    assert_int_equal(v->text[want_len], '\0');
}

static void test_flat_records(void **state) {
    (void)state;
    assert_int_equal(scan("{\"id\": \"debpkg:0ad\", \"title\": \"A \\\"quoted\\\" game\", \"body\": \"x\\\\y\\/z\\b\\f\\n\\r\\t.\"}"), 1);
    expect_decoded(&values[0], "debpkg:0ad", 10);
    expect_decoded(&values[1], "A \"quoted\" game", 15);
    expect_decoded(&values[2], "x\\y/z\b\f\n\r\t.", 11);
    expect_decoded(&values[3], "debpkg:0ad", 10);

    assert_int_equal(scan(" \t{ \"title\" : null ,\"body\":true, \"other\": false, \"\": \"\" }\r\n "), 1);
    assert_int_equal(values[0].kind, JSONL_ABSENT);
    assert_int_equal(values[1].kind, JSONL_NULL);
    assert_int_equal(values[2].kind, JSONL_BOOL);

    /* jansson keeps a repeated key's last value */
    assert_int_equal(scan("{\"body\":\"first\",\"id\":\"x\",\"body\":\"last\"}"), 1);
    expect_decoded(&values[2], "last", 4);

    assert_int_equal(scan("{\"id\":\"Título — ünïcödé\",\"identifier\":\"not id\",\"i\":\"nor this\"}"), 1);
    expect_decoded(&values[0], "Título — ünïcödé", strlen("Título — ünïcödé"));

    /* escapes on either side of the eight-byte steps, and a run that fills them exactly */
    assert_int_equal(scan("{\"body\":\"0123456\\\"89abcdef\\\\ghijklmnopq\\/rstuvwxyzABCDEFGH\",\"title\":\"01234567\"}"), 1);
    expect_decoded(&values[2], "0123456\"89abcdef\\ghijklmnopq/rstuvwxyzABCDEFGH", 46);
    expect_decoded(&values[1], "01234567", 8);

    assert_int_equal(scan("{}"), 1);
    for (int k = 0; k < NUM_KEYS; k++) assert_int_equal(values[k].kind, JSONL_ABSENT);
    assert_int_equal(scan("{\"body\":\"\"}"), 1);
    expect_decoded(&values[2], "", 0);
}

/* Everything else is jansson's to read or to refuse in its own words. */
static void test_left_to_jansson(void **state) {
    (void)state;
    static const char *const others[] = {
        "{\"id\":7,\"body\":\"integer id\"}",
        "{\"id\":\"x\",\"score\":-1.5e3}",
        "{\"id\":\"x\",\"tags\":[\"a\"]}",
        "{\"id\":\"x\",\"meta\":{\"a\":\"b\"}}",
        "{\"id\":\"x\",\"body\":\"caf\\u00e9\"}",
        "{\"id\":\"x\",\"body\":\"nul \\u0000 inside\"}",
        "{\"i\\u0064\":\"x\"}",
        "{\"id\\n\":\"x\"}",
        "{\"id\":\"x\",\"body\":\"bad \\x escape\"}",
        "{\"id\":\"x\",\"body\":\"raw\ttab\"}",
        "{\"id\":\"x\",\"body\":\"abcdefghi\tjklmnopqrstu\"}",
        "{\"id\":\"x\",\"body\":\"abcdefghijklmnopqrstuvwxyz",
        "{\"id\":\"x\",\"body\":\"open",
        "{\"id\":\"x\",\"body\":\"ok\"",
        "{\"id\":\"x\",}",
        "{\"id\":\"x\"} trailing",
        "{\"id\":\"x\"}{}",
        "{\"id\" \"x\"}",
        "{\"id\":\"x\" \"body\":\"y\"}",
        "{\"id\":tru}",
        "{\"id\":truex}",
        "{\"id\":nul}",
        "{id:\"x\"}",
        "[\"an\",\"array\"]",
        "\"a string\"",
        "",
        "   ",
        "{",
        "{\"id\":\"x\",\"body\":\"a\\",
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (scan(others[i]) != 0) fail_msg("read, not left to jansson: %s", others[i]);
    /* a raw NUL byte is not whitespace */
    assert_int_equal(jsonl_scan_flat_object("{}\0", 3, keys, NUM_KEYS, values, scratch), 0);
}

/* The same documents written as flat records (the fast path) and with a number added to each (which
 * sends every record to jansson) give the same index bytes; bad records are skipped alike. */
static void test_same_index_either_way(void **state) {
    (void)state;
    static const char *const records[] = {
        "{\"id\":\"a\",\"title\":\"Hello \\\"world\\\"\",\"body\":\"line one\\nline two\\tand a \\/ slash\"}",
        "{\"id\":\"b\",\"title\":null,\"body\":\"only a body, café\"}",
        "{\"id\":\"c\",\"title\":\"repeated\",\"body\":\"first\",\"body\":\"the last body wins\"}",
        "{\"id\":\"d\",\"title\":true,\"body\":\"a boolean title: skipped\"}",
        "{\"title\":\"no id: skipped\"}",
        "{\"id\":\"\",\"body\":\"empty id: skipped\"}",
        "{\"id\":\"e\",\"extra\":\"ignored\",\"body\":\"searching worlds\"}",
    };
    char tmp[] = "/tmp/isn-test-jsonl-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    setenv("SOURCE_DATE_EPOCH", "1", 1);
    uint8_t *bytes[2];
    size_t len[2];
    for (int jansson = 0; jansson < 2; jansson++) {
        char input[128], dir[128], path[160], err[ISN_ERR_LEN], text[4096] = "";
        for (size_t r = 0; r < sizeof records / sizeof records[0]; r++) {
            size_t at = strlen(text);
            snprintf(text + at, sizeof text - at, "%s%s\n", jansson ? "{\"n\":1," : "{", records[r] + 1);
        }
        snprintf(input, sizeof input, "%s/in%d.jsonl", tmp, jansson);
        snprintf(dir, sizeof dir, "%s/ix%d", tmp, jansson);
        assert_int_equal(support_write_text(input, text), 0);
        isn_build_options o;
        isn_build_options_default(&o);
        o.num_stored = 2;
        strcpy(o.stored[0], "title");
        strcpy(o.stored[1], "body");
        isn_build_summary s;
        if (isn_build_from_file(input, dir, &o, &s, err, sizeof err) != 0) fail_msg("%s", err);
        assert_int_equal(s.records_skipped, 3);
        assert_int_equal(s.docs, 4);
        snprintf(path, sizeof path, "%s/%s", dir, ISN_INDEX_FILE);
        bytes[jansson] = support_read_file(path, &len[jansson]);
        assert_non_null(bytes[jansson]);
    }
    unsetenv("SOURCE_DATE_EPOCH");
    assert_int_equal(len[0], len[1]);
    assert_memory_equal(bytes[0], bytes[1], len[0]);
    free(bytes[0]);
    free(bytes[1]);
    assert_int_equal(support_remove_tree(tmp), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_records),
        cmocka_unit_test(test_left_to_jansson),
        cmocka_unit_test(test_same_index_either_way),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
