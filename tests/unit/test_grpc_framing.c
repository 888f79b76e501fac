/* gRPC message framing as isnd reads it: a unary request's one message reassembled from DATA
 * chunks split at every byte, the size limit, compression and flag errors, extra and truncated
 * messages; grpc-timeout parsing, grpc-message encoding, method paths, the request arena and
 * the latency histogram's buckets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/arena.h"
#include "grpc/framing.h"
#include "daemon/metrics.h"
#include "daemon/server.h"
#include "proto/isn.pb-c.h"

static size_t frame(uint8_t *out, const uint8_t *body, uint32_t len) {
    isn_grpc_write_prefix(out, len);
    if (len) memcpy(out + ISN_GRPC_PREFIX_BYTES, body, len);
    return ISN_GRPC_PREFIX_BYTES + len;
}

static void test_prefix(void **state) {
    (void)state;
    uint8_t p[5];
    isn_grpc_write_prefix(p, 0x01020304);
    const uint8_t want[5] = {0, 1, 2, 3, 4};
    assert_memory_equal(p, want, 5);
}

/* Every way of cutting the wire bytes into two or three chunks gives the same message. */
static void test_reassembly_at_every_split(void **state) {
    (void)state;
    uint8_t body[300], wire[400], inline_buf[64];
    for (size_t i = 0; i < sizeof body; i++) body[i] = (uint8_t)(i * 7 + 1);
    for (uint32_t len = 0; len <= 300; len += 60) {
        size_t n = frame(wire, body, len);
        for (size_t a = 0; a <= n; a += 3) {
            for (size_t b = a; b <= n; b += 17) {
                isn_grpc_reader r;
                isn_grpc_reader_init(&r, inline_buf, sizeof inline_buf, 1000);
                assert_int_equal(isn_grpc_reader_feed(&r, wire, a), ISN_GRPC_READ_OK);
                assert_int_equal(isn_grpc_reader_feed(&r, wire + a, b - a), ISN_GRPC_READ_OK);
                assert_int_equal(isn_grpc_reader_feed(&r, wire + b, n - b), ISN_GRPC_READ_OK);
                assert_int_equal(isn_grpc_reader_finish(&r), ISN_GRPC_READ_OK);
                assert_int_equal(r.length, len);
                if (len) assert_memory_equal(r.body, body, len);
                assert_true(len > sizeof inline_buf ? r.body != inline_buf : r.body == inline_buf);
                isn_grpc_reader_reset(&r);
            }
        }
    }
}

static void test_too_large(void **state) {
    (void)state;
    uint8_t wire[5], inline_buf[16];
    isn_grpc_write_prefix(wire, 4u << 20 | 1);
    isn_grpc_reader r;
    isn_grpc_reader_init(&r, inline_buf, sizeof inline_buf, 4u << 20);
    assert_int_equal(isn_grpc_reader_feed(&r, wire, 5), ISN_GRPC_READ_TOO_LARGE);
    char why[200];
    isn_grpc_reader_describe(&r, ISN_GRPC_READ_TOO_LARGE, why, sizeof why);
    assert_non_null(strstr(why, "4194305 bytes exceeds the server's limit of 4194304"));
    assert_null(r.body); /* nothing allocated for a refused message */
    isn_grpc_reader_reset(&r);
    /* exactly at the limit is fine */
    isn_grpc_write_prefix(wire, 100);
    isn_grpc_reader_init(&r, inline_buf, sizeof inline_buf, 100);
    assert_int_equal(isn_grpc_reader_feed(&r, wire, 5), ISN_GRPC_READ_OK);
    isn_grpc_reader_reset(&r);
}

/* Heap bodies are charged to the server's memory budget when their prefix arrives: past it the
 * message is refused before anything is allocated, and a reset gives the charge back. */
static void test_memory_budget(void **state) {
    (void)state;
    uint8_t wire[5], inline_buf[16];
    isn_grpc_memory_budget budget = {.limit = 2000};
    isn_grpc_reader first, second, small;
    isn_grpc_reader_init(&first, inline_buf, sizeof inline_buf, 4096);
    isn_grpc_reader_init(&second, inline_buf, sizeof inline_buf, 4096);
    isn_grpc_reader_init(&small, inline_buf, sizeof inline_buf, 4096);
    isn_grpc_reader_set_budget(&first, &budget);
    isn_grpc_reader_set_budget(&second, &budget);
    isn_grpc_reader_set_budget(&small, &budget);
    isn_grpc_write_prefix(wire, 1500);
    assert_int_equal(isn_grpc_reader_feed(&first, wire, 5), ISN_GRPC_READ_OK);
    assert_int_equal(budget.used, 1500);
    isn_grpc_write_prefix(wire, 1000);
    assert_int_equal(isn_grpc_reader_feed(&second, wire, 5), ISN_GRPC_READ_OVER_BUDGET);
    assert_null(second.body);
    assert_int_equal(budget.refused, 1);
    char why[200];
    isn_grpc_reader_describe(&second, ISN_GRPC_READ_OVER_BUDGET, why, sizeof why);
    assert_non_null(strstr(why, "memory budget"));
    isn_grpc_write_prefix(wire, 16); /* inline bodies cost the budget nothing */
    assert_int_equal(isn_grpc_reader_feed(&small, wire, 5), ISN_GRPC_READ_OK);
    assert_int_equal(budget.used, 1500);
    isn_grpc_reader_reset(&first);
    isn_grpc_reader_reset(&second);
    isn_grpc_reader_reset(&small);
    assert_int_equal(budget.used, 0);
    assert_int_equal(budget.peak, 1500);
    assert_ptr_equal(first.budget, &budget); /* kept across resets */
}

/* A pooled call's exchange gives back what it takes: within the limit nothing changes and it fits; past
 * the limit (a lowered budget) the release happens and the pooled charge does not fit. */
static void test_memory_budget_exchange(void **state) {
    (void)state;
    isn_grpc_memory_budget budget = {.limit = 2000, .used = 1500, .peak = 1500};
    assert_true(isn_grpc_budget_exchange(&budget, 300, 300));
    assert_int_equal(budget.used, 1500);
    assert_true(isn_grpc_budget_exchange(&budget, 300, 500));
    assert_int_equal(budget.used, 1700);
    assert_int_equal(budget.peak, 1700);
    assert_false(isn_grpc_budget_exchange(&budget, 100, 500));
    assert_int_equal(budget.used, 1600);
    budget.limit = 1000; /* a reload lowered it */
    assert_false(isn_grpc_budget_exchange(&budget, 400, 400));
    assert_int_equal(budget.used, 1200);
    assert_int_equal(budget.refused, 2);
    budget.limit = 0; /* none: everything fits */
    assert_true(isn_grpc_budget_exchange(&budget, 200, 200));
    assert_int_equal(budget.used, 1200);
    isn_grpc_budget_release(&budget, 0);
    assert_int_equal(budget.used, 1200);
    isn_grpc_budget_release(&budget, 5000); /* never below zero */
    assert_int_equal(budget.used, 0);
}

static void test_flags(void **state) {
    (void)state;
    uint8_t wire[8] = {1, 0, 0, 0, 1, 'x'}, inline_buf[16];
    isn_grpc_reader r;
    isn_grpc_reader_init(&r, inline_buf, sizeof inline_buf, 100);
    assert_int_equal(isn_grpc_reader_feed(&r, wire, 6), ISN_GRPC_READ_COMPRESSED);
    isn_grpc_reader_reset(&r);
    wire[0] = 0x80;
    assert_int_equal(isn_grpc_reader_feed(&r, wire, 6), ISN_GRPC_READ_BAD_FLAGS);
    char why[200];
    isn_grpc_reader_describe(&r, ISN_GRPC_READ_BAD_FLAGS, why, sizeof why);
    assert_non_null(strstr(why, "0x80"));
    isn_grpc_reader_reset(&r);
}

static void test_extra_message(void **state) {
    (void)state;
    uint8_t wire[64], inline_buf[16];
    size_t n = frame(wire, (const uint8_t *)"abc", 3);
    n += frame(wire + n, (const uint8_t *)"de", 2);
    isn_grpc_reader r;
    isn_grpc_reader_init(&r, inline_buf, sizeof inline_buf, 100);
    assert_int_equal(isn_grpc_reader_feed(&r, wire, n), ISN_GRPC_READ_EXTRA_MESSAGE);
    isn_grpc_reader_reset(&r);
    /* the second message in a later chunk, and after a zero-length first message */
    n = frame(wire, NULL, 0);
    assert_int_equal(isn_grpc_reader_feed(&r, wire, n), ISN_GRPC_READ_OK);
    assert_int_equal(isn_grpc_reader_feed(&r, wire, 1), ISN_GRPC_READ_EXTRA_MESSAGE);
    isn_grpc_reader_reset(&r);
}

static void test_truncated_and_missing(void **state) {
    (void)state;
    uint8_t wire[64], inline_buf[16];
    char why[200];
    isn_grpc_reader r;
    isn_grpc_reader_init(&r, inline_buf, sizeof inline_buf, 100);
    assert_int_equal(isn_grpc_reader_finish(&r), ISN_GRPC_READ_NO_MESSAGE);
    size_t n = frame(wire, (const uint8_t *)"0123456789", 10);
    assert_int_equal(isn_grpc_reader_feed(&r, wire, 3), ISN_GRPC_READ_OK);
    assert_int_equal(isn_grpc_reader_finish(&r), ISN_GRPC_READ_TRUNCATED);
    isn_grpc_reader_describe(&r, ISN_GRPC_READ_TRUNCATED, why, sizeof why);
    assert_non_null(strstr(why, "prefix"));
    assert_int_equal(isn_grpc_reader_feed(&r, wire + 3, n - 3 - 4), ISN_GRPC_READ_OK);
    assert_int_equal(isn_grpc_reader_finish(&r), ISN_GRPC_READ_TRUNCATED);
    isn_grpc_reader_describe(&r, ISN_GRPC_READ_TRUNCATED, why, sizeof why);
    assert_non_null(strstr(why, "announces 10 bytes, stream ended after 6"));
    /* a frame longer than its body: prefix says 1000, a heap body was reserved, freed by reset */
    isn_grpc_reader_reset(&r);
    isn_grpc_write_prefix(wire, 90);
    assert_int_equal(isn_grpc_reader_feed(&r, wire, 5), ISN_GRPC_READ_OK);
    assert_int_equal(isn_grpc_reader_feed(&r, (const uint8_t *)"abc", 3), ISN_GRPC_READ_OK);
    assert_int_equal(isn_grpc_reader_finish(&r), ISN_GRPC_READ_TRUNCATED);
    isn_grpc_reader_reset(&r);
}

static void test_timeout_header(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int rc;
        uint64_t ns;
    } cases[] = {
        {"100m", 0, 100000000ull},
        {"5S", 0, 5000000000ull},
        {"2H", 0, 7200000000000ull},
        {"1M", 0, 60000000000ull},
        {"250u", 0, 250000ull},
        {"99999999n", 0, 99999999ull},
        {"123456789m", -1, 0}, /* 9 digits */
        {"m", -1, 0},
        {"10x", -1, 0},
        {"1.5S", -1, 0},
        {"-1S", -1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t ns = 0;
        assert_int_equal(isn_grpc_parse_timeout(cases[i].text, strlen(cases[i].text), &ns), cases[i].rc);
        if (cases[i].rc == 0) assert_int_equal(ns, cases[i].ns);
    }
}

/* grpc-timeout as the client writes it: at most 8 digits, exact when they allow, else rounded up. */
static void test_timeout_format(void **state) {
    (void)state;
    static const struct {
        uint64_t ns;
        const char *text;
    } cases[] = {
        {0, "0n"},
        {99999999ull, "99999999n"},
        {100000000ull, "100000u"},              /* 100 ms, exact in microseconds */
        {100000001ull, "100001u"},              /* rounded up, not down */
        {1000000000ull, "1000000u"},            /* 1 s */
        {4294967295ull * 1000000ull, "4294968S"}, /* the largest uint32 ms: 49.7 days, 10 digits of ms */
        {100000000ull * 1000000ull, "100000S"}, /* 100,000,000 ms: one more than 8 digits of ms */
        {99999999ull * 1000000000ull, "99999999S"},
        {100000000ull * 1000000000ull, "1666667M"},
        {UINT64_MAX, "5124096H"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[ISN_GRPC_TIMEOUT_MAX_LEN];
        size_t len = isn_grpc_format_timeout(cases[i].ns, text, sizeof text);
        assert_string_equal(text, cases[i].text);
        assert_int_equal(len, strlen(cases[i].text));
    }
    /* Every value parses back to at least what was asked, within one unit, and has at most 8 digits. */
    uint64_t value = 1;
    for (int step = 0; step < 64 * 4; step++) {
        uint64_t ns = value > UINT64_MAX - 7 ? value : value + (uint64_t)step % 7;
        char text[ISN_GRPC_TIMEOUT_MAX_LEN];
        size_t len = isn_grpc_format_timeout(ns, text, sizeof text);
        assert_true(len >= 2 && len <= 9);
        uint64_t back = 0;
        assert_int_equal(isn_grpc_parse_timeout(text, len, &back), 0);
        assert_true(back >= ns);
        uint64_t unit = 1;
        switch (text[len - 1]) {
        case 'u': unit = 1000ull; break;
        case 'm': unit = 1000000ull; break;
        case 'S': unit = 1000000000ull; break;
        case 'M': unit = 60000000000ull; break;
        case 'H': unit = 3600000000000ull; break;
        }
        if (back != UINT64_MAX) assert_true(back - ns < unit);
        value = value > UINT64_MAX / 5 * 4 ? UINT64_MAX - (uint64_t)step : value + value / 4 + 1;
    }
}

/* A NUL inside a string field (which protobuf-c's C strings would cut) is found and named, at any
 * depth; NUL bytes in other fields (numbers, doubles) are not strings. */
static void test_nul_in_string_fields(void **state) {
    (void)state;
    static const struct {
        const char *name;
        uint8_t wire[48];
        size_t len;
        const char *field; /* NULL: none */
    } cases[] = {
        {"clean", {0x0a, 4, 'w', 'i', 'n', 'd', 0x18, 0x00, 0x2a, 3, 'w', 'a', 'n'}, 13, NULL},
        {"query", {0x0a, 5, 'w', 'i', 0, 'n', 'd'}, 7, "query"},
        {"trailing NUL", {0x0a, 5, 'w', 'i', 'n', 'd', 0}, 7, "query"},
        {"algorithm", {0x0a, 1, 'a', 0x2a, 4, 'b', 'm', 'w', 0}, 9, "algorithm"},
        {"ranker", {0x0a, 1, 'a', 0x52, 3, 'x', 0, 'y'}, 8, "ranker"},
        {"terms", {0x12, 1, 'a', 0x12, 2, 0, 'b'}, 7, "terms"},
        {"request_id", {0x42, 1, 0}, 3, "request_id"},
        /* zeros in k, timeout_ms and a double are not strings */
        {"numbers", {0x18, 0, 0x30, 0, 0x3a, 9, 0x11, 0, 0, 0, 0, 0, 0, 0, 0}, 15, NULL},
        /* global_stats { num_docs 0, terms { term "a\0" df 0 } } */
        {"nested", {0x3a, 10, 0x08, 0, 0x1a, 6, 0x0a, 2, 'a', 0, 0x10, 0}, 12, "global_stats.terms.term"},
        {"nested clean", {0x3a, 10, 0x08, 0, 0x1a, 6, 0x0a, 2, 'a', 'b', 0x10, 0}, 12, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* every case is a valid message: the scan runs after protobuf-c accepted it */
        Isn__V1__SearchRequest *request = isn__v1__search_request__unpack(NULL, cases[i].len, cases[i].wire);
        if (!request) fail_msg("case %s does not unpack", cases[i].name);
        isn__v1__search_request__free_unpacked(request, NULL);
        char field[128] = "";
        bool found = isn_grpc_message_nul_string_field(&isn__v1__search_request__descriptor, cases[i].wire, cases[i].len,
                                                   field, sizeof field);
        if (found != (cases[i].field != NULL) || (found && strcmp(field, cases[i].field)))
            fail_msg("case %s: found %d \"%s\"", cases[i].name, found, field);
    }
    /* a truncated or garbled wire form ends the walk without reading past it */
    const uint8_t cut[] = {0x0a, 200, 'a', 0};
    char field[8];
    assert_false(isn_grpc_message_nul_string_field(&isn__v1__search_request__descriptor, cut, sizeof cut, field, sizeof field));
    const uint8_t endless[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_false(
        isn_grpc_message_nul_string_field(&isn__v1__search_request__descriptor, endless, sizeof endless, field, sizeof field));
}

/* The top-level flag a load generator reads of a reply, against protobuf-c's own unpack of the same
 * bytes, and the wire forms it must not take for a message. */
static void test_varint_field(void **state) {
    (void)state;
    const ProtobufCFieldDescriptor *complete_field =
        protobuf_c_message_descriptor_get_field_by_name(&isn__v1__search_response__descriptor, "complete");
    assert_non_null(complete_field);
    for (int hits = 0; hits <= 12; hits += 4) {
        for (int complete = 0; complete <= 1; complete++) {
            Isn__V1__SearchResponse response = ISN__V1__SEARCH_RESPONSE__INIT;
            Isn__V1__Hit hit[12], *hit_ptrs[12];
            for (int i = 0; i < hits; i++) {
                isn__v1__hit__init(&hit[i]);
                hit[i].doc = (uint32_t)(1000 + i); /* nested varints the reader must not take for its field */
                hit[i].score = 2.5f;
                hit[i].external_id = "pkg";
                hit_ptrs[i] = &hit[i];
            }
            response.n_hits = (size_t)hits;
            response.hits = hit_ptrs;
            response.complete = complete;
            response.partition_id = 7;
            uint8_t wire[1024];
            size_t len = isn__v1__search_response__pack(&response, wire);
            assert_true(len <= sizeof wire);
            uint64_t value = 99;
            assert_true(isn_grpc_message_varint_field(wire, len, complete_field->id, &value));
            Isn__V1__SearchResponse *unpacked = isn__v1__search_response__unpack(NULL, len, wire);
            assert_non_null(unpacked);
            assert_int_equal(value != 0, unpacked->complete);
            assert_int_equal(value, (uint64_t)complete);
            isn__v1__search_response__free_unpacked(unpacked, NULL);
        }
    }
    uint64_t value;
    /* absent: proto3's default; repeated: the last one */
    assert_true(isn_grpc_message_varint_field((const uint8_t *)"", 0, 2, &value));
    assert_int_equal(value, 0);
    const uint8_t twice[] = {0x10, 1, 0x10, 0};
    assert_true(isn_grpc_message_varint_field(twice, sizeof twice, 2, &value));
    assert_int_equal(value, 0);
    const uint8_t multi_byte[] = {0x10, 0x96, 0x01};
    assert_true(isn_grpc_message_varint_field(multi_byte, sizeof multi_byte, 2, &value));
    assert_int_equal(value, 150);
    /* skips 64- and 32-bit fields and strings of other numbers */
    const uint8_t skipped[] = {0x09, 1, 2, 3, 4, 5, 6, 7, 8, 0x1d, 1, 2, 3, 4, 0x22, 2, 0x10, 0, 0x10, 1};
    assert_true(isn_grpc_message_varint_field(skipped, sizeof skipped, 2, &value));
    assert_int_equal(value, 1);
    static const struct {
        const char *name;
        uint8_t wire[16];
        size_t len;
    } bad[] = {
        {"cut varint", {0x10, 0x80}, 2},
        {"cut key", {0x80}, 1},
        {"string past the end", {0x0a, 5, 'a'}, 3},
        {"cut fixed64", {0x09, 1, 2}, 3},
        {"group", {0x0b, 0x0c}, 2},
        {"field number 0", {0x00, 1}, 2},
        {"the field as a string", {0x12, 1, 1}, 3},
        {"endless varint", {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 12},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (isn_grpc_message_varint_field(bad[i].wire, bad[i].len, 2, &value)) fail_msg("case %s was taken", bad[i].name);
}

static void test_percent_encoding(void **state) {
    (void)state;
    char out[64];
    assert_int_equal(isn_grpc_percent_encode("k = 0 is 100% wrong\n", out, sizeof out), 24);
    assert_string_equal(out, "k = 0 is 100%25 wrong%0A");
    isn_grpc_percent_encode("caf\xc3\xa9", out, sizeof out);
    assert_string_equal(out, "caf%C3%A9");
    /* cut at a whole escape, never inside one */
    isn_grpc_percent_encode("ab\n", out, 5);
    assert_string_equal(out, "ab");
}

static void test_status_names_and_paths(void **state) {
    (void)state;
    assert_string_equal(isn_grpc_status_name(0), "OK");
    assert_string_equal(isn_grpc_status_name(3), "INVALID_ARGUMENT");
    assert_string_equal(isn_grpc_status_name(8), "RESOURCE_EXHAUSTED");
    assert_string_equal(isn_grpc_status_name(12), "UNIMPLEMENTED");
    assert_string_equal(isn_grpc_status_name(14), "UNAVAILABLE");
    assert_string_equal(isn_grpc_status_name(99), "UNKNOWN");
    const char *p = "/isn.v1.Search/Search";
    assert_int_equal(rpc_method_from_path(p, strlen(p)), RPC_SEARCH);
    p = "/isn.v1.Search/Info";
    assert_int_equal(rpc_method_from_path(p, strlen(p)), RPC_INFO);
    p = "/grpc.health.v1.Health/Check";
    assert_int_equal(rpc_method_from_path(p, strlen(p)), RPC_HEALTH_CHECK);
    p = "/isn.v1.Search/Searc";
    assert_int_equal(rpc_method_from_path(p, strlen(p)), RPC_UNKNOWN);
    p = "/isn.v1.Search/SearchX";
    assert_int_equal(rpc_method_from_path(p, strlen(p)), RPC_UNKNOWN);
}

static void test_arena(void **state) {
    (void)state;
    max_align_t first[64];
    arena a;
    arena_init(&a, first, sizeof first, 1 << 16);
    void *p = arena_alloc(&a, 10);
    assert_ptr_equal(p, first);
    assert_int_equal((uintptr_t)arena_alloc(&a, 3) % 16, 0);
    void *big = arena_alloc(&a, 20000); /* beyond the first chunk */
    assert_non_null(big);
    memset(big, 1, 20000);
    assert_null(arena_alloc(&a, 1 << 17)); /* past the limit */
    /* protobuf-c's allocator interface goes through the arena */
    void *q = a.allocator.alloc(a.allocator.allocator_data, 64);
    assert_non_null(q);
    a.allocator.free(a.allocator.allocator_data, q);
    arena_reset(&a);
    assert_null(a.extra);
    assert_ptr_equal(arena_alloc(&a, 1), first);
}

/* Charged to a memory budget (arena_charge_to): extra chunks count against it, a chunk it cannot take
 * is refused (over_budget says why), and the reset gives everything back. */
static void test_arena_charged_to_budget(void **state) {
    (void)state;
    max_align_t first[64];
    arena a;
    arena_init(&a, first, sizeof first, 1 << 20);
    isn_grpc_memory_budget budget = {.limit = 100000};
    assert_non_null(arena_alloc(&a, 20000)); /* before charging: not counted */
    assert_int_equal(budget.used, 0);
    arena_charge_to(&a, &budget);
    assert_non_null(arena_alloc(&a, 30000));
    uint64_t used = __atomic_load_n(&budget.used, __ATOMIC_RELAXED);
    assert_true(used >= 30000 && used < 100000);
    assert_false(a.over_budget);
    assert_null(arena_alloc(&a, 80000)); /* would pass the limit */
    assert_true(a.over_budget);
    assert_int_equal(__atomic_load_n(&budget.used, __ATOMIC_RELAXED), used);
    arena_reset(&a);
    assert_int_equal(__atomic_load_n(&budget.used, __ATOMIC_RELAXED), 0);
    assert_false(a.over_budget);
    assert_non_null(arena_alloc(&a, 80000)); /* the reset ended the charging too */
    assert_int_equal(__atomic_load_n(&budget.used, __ATOMIC_RELAXED), 0);
    arena_reset(&a);
}

static void test_histogram_buckets(void **state) {
    (void)state;
    histogram h;
    memset(&h, 0, sizeof h);
    histogram_observe(&h, 0.000005);  /* <= 10 us */
    histogram_observe(&h, 0.00001);   /* exactly a bound: that bucket */
    histogram_observe(&h, 0.0003);    /* <= 0.5 ms */
    histogram_observe(&h, 60.0);      /* +Inf */
    assert_int_equal(h.buckets[0], 2);
    assert_int_equal(h.buckets[5], 1);
    assert_int_equal(h.buckets[HISTOGRAM_BUCKETS], 1);
    assert_int_equal(h.count, 4);
    assert_true(h.sum > 60.0 && h.sum < 60.001);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_reassembly_at_every_split),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_memory_budget),
        cmocka_unit_test(test_memory_budget_exchange),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_extra_message),
        cmocka_unit_test(test_truncated_and_missing),
        cmocka_unit_test(test_timeout_header),
        cmocka_unit_test(test_timeout_format),
        cmocka_unit_test(test_nul_in_string_fields),
        cmocka_unit_test(test_varint_field),
        cmocka_unit_test(test_percent_encoding),
        cmocka_unit_test(test_status_names_and_paths),
        cmocka_unit_test(test_arena),
        cmocka_unit_test(test_arena_charged_to_budget),
        cmocka_unit_test(test_histogram_buckets),
    };
    return cmocka_run_group_tests_name("grpc_framing", tests, NULL, NULL);
}
