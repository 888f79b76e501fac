/* The builder's interning tables (index/strtab.h for terms, index/id_table.h for external ids and keyword
 * attributes) over their shared string store: ids dense in first-seen order, every string given back
 * byte for byte through the slots' and the store's growth, and lengths past the slots' inline head and
 * past what a slot's length field holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/id_table.h"     /* private to index/: the tables are what this test is for */
#include "index/string_store.h"
#include "index/strtab.h"
#include "tests/support/random.h"

enum { NUM_STRINGS = 50000, LONG_LEN = 70000 };

/* String i: its number in decimal, then a length of its own up to 40 bytes (past the 16-byte head),
 * a few thousand bytes every 997th string, so that the store's bytes grow many times. */
static size_t make_string(uint32_t i, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "s%u-", i);
    size_t len = i % 997 == 0 ? 3000 : n + i % 41;
    for (size_t j = n; j < len; j++) out[j] = (char)('a' + (i * 7 + j) % 26);
    return len;
}

static void test_store_appends_and_gives_back(void **state) {
    (void)state;
    isn_string_store store;
    assert_int_equal(isn_string_store_init(&store, 16), 0);
    char buf[4000];
    for (uint32_t i = 0; i < 5000; i++) {
        size_t len = make_string(i, buf, sizeof buf);
        assert_int_equal(isn_string_store_append(&store, buf, len), i);
    }
    assert_int_equal(isn_string_store_append(&store, "", 0), 5000); /* an empty string is a string */
    assert_int_equal(store.count, 5001);
    for (uint32_t i = 0; i < 5000; i++) {
        size_t len = make_string(i, buf, sizeof buf), got_len;
        const char *got = isn_string_store_get(&store, i, &got_len);
        assert_int_equal(got_len, len);
        assert_memory_equal(got, buf, len);
    }
    size_t empty_len = 1;
    (void)isn_string_store_get(&store, 5000, &empty_len);
    assert_int_equal(empty_len, 0);
    assert_true(isn_string_store_footprint(&store) >= store.bytes_len);
    isn_string_store_free(&store);
}

static void test_strtab_interns_in_order(void **state) {
    (void)state;
    isn_strtab t;
    assert_int_equal(isn_strtab_init(&t, 16), 0); /* far fewer slots than strings: they must grow */
    char buf[4000];
    bool added;
    for (uint32_t i = 0; i < NUM_STRINGS; i++) {
        size_t len = make_string(i, buf, sizeof buf);
        assert_int_equal(isn_strtab_intern(&t, buf, len, &added), i);
        assert_true(added);
    }
    support_rng_seed(3);
    for (uint32_t r = 0; r < NUM_STRINGS; r++) { /* again, in another order: found, not added */
        uint32_t i = support_rng_below(NUM_STRINGS);
        size_t len = make_string(i, buf, sizeof buf), got_len;
        assert_int_equal(isn_strtab_intern(&t, buf, len, &added), i);
        assert_false(added);
        assert_int_equal(isn_strtab_find(&t, buf, len), i);
        const char *got = isn_strtab_get(&t, i, &got_len);
        assert_int_equal(got_len, len);
        assert_memory_equal(got, buf, len);
    }
    assert_int_equal(isn_strtab_count(&t), NUM_STRINGS);
    /* string 40's first 16 bytes (its head in the slot) with another tail, or shorter: neither is there */
    size_t len = make_string(40, buf, sizeof buf);
    assert_true(len > ISN_STRTAB_HEAD_BYTES + 4);
    buf[len - 1] ^= 1;
    assert_int_equal(isn_strtab_find(&t, buf, len), UINT32_MAX);
    buf[len - 1] ^= 1;
    assert_int_equal(isn_strtab_find(&t, buf, len - 3), UINT32_MAX);
    assert_int_equal(isn_strtab_find(&t, buf, len), 40);
    isn_strtab_free(&t);
}

static void test_strtab_takes_strings_longer_than_a_slot_says(void **state) {
    (void)state;
    isn_strtab t;
    assert_int_equal(isn_strtab_init(&t, 4), 0);
    char *a = malloc(LONG_LEN), *b = malloc(LONG_LEN);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 'x', LONG_LEN);
    memcpy(b, a, LONG_LEN);
    b[LONG_LEN - 1] = 'y'; /* differs only in its last byte, past 0xFFFF */
    bool added;
    assert_int_equal(isn_strtab_intern(&t, a, LONG_LEN, &added), 0);
    assert_int_equal(isn_strtab_intern(&t, b, LONG_LEN, &added), 1);
    assert_true(added);
    assert_int_equal(isn_strtab_intern(&t, a, LONG_LEN - 1, &added), 2); /* a prefix is another string */
    assert_int_equal(isn_strtab_find(&t, a, LONG_LEN), 0);
    assert_int_equal(isn_strtab_find(&t, b, LONG_LEN), 1);
    size_t len;
    const char *got = isn_strtab_get(&t, 1, &len);
    assert_int_equal(len, LONG_LEN);
    assert_memory_equal(got, b, LONG_LEN);
    free(a);
    free(b);
    isn_strtab_free(&t);
}

static void test_id_table_interns_in_order(void **state) {
    (void)state;
    id_table t;
    assert_int_equal(id_table_init(&t), 0);
    char buf[4000];
    bool added;
    for (uint32_t i = 0; i < NUM_STRINGS; i++) {
        size_t len = make_string(i, buf, sizeof buf);
        assert_int_equal(id_table_intern(&t, buf, len, &added), i);
        assert_true(added);
    }
    uint64_t bytes = id_table_bytes(&t);
    for (uint32_t i = 0; i < NUM_STRINGS; i += 7) {
        size_t len = make_string(i, buf, sizeof buf), got_len;
        assert_int_equal(id_table_intern(&t, buf, len, &added), i);
        assert_false(added);
        const char *got = id_table_get(&t, i, &got_len);
        assert_int_equal(got_len, len);
        assert_memory_equal(got, buf, len);
    }
    assert_int_equal(id_table_count(&t), NUM_STRINGS);
    assert_int_equal(id_table_bytes(&t), bytes); /* finding adds nothing */
    assert_true(bytes >= t.strings.bytes_len + (uint64_t)NUM_STRINGS * sizeof(uint64_t));
    id_table_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_appends_and_gives_back),
        cmocka_unit_test(test_strtab_interns_in_order),
        cmocka_unit_test(test_strtab_takes_strings_longer_than_a_slot_says),
        cmocka_unit_test(test_id_table_interns_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
