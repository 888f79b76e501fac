/* isnd's stored-field hook (daemon/stored_fields.c) on its own: the hits get the text asked for, in
 * the order asked, from the request's arena; a field the index does not keep is INVALID_ARGUMENT
 * naming it and what the index keeps; a request whose text outgrows its arena is RESOURCE_EXHAUSTED,
 * never a larger allocation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/search_job.h"
#include "grpc/framing.h"

#define NUM_DOCS 300

static char dir[] = "/tmp/isn-test-stored-reply-XXXXXX";
static isn_index *index_;

static void text_of(uint32_t n, uint32_t field, char *out, size_t len) {
    if (field == 0) snprintf(out, len, "title %u", n);
    else snprintf(out, len, "body of document %u %0*u", n, (int)(n % 50) * 20, n);
}

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    isn_build_options o;
    isn_build_options_default(&o);
    o.num_stored = 2;
    strcpy(o.stored[0], "title");
    strcpy(o.stored[1], "body");
    isn_builder *b = isn_builder_new(&o);
    char id[32], title[64], body[2048], err[ISN_ERR_LEN];
    for (uint32_t n = 0; n < NUM_DOCS; n++) {
        snprintf(id, sizeof id, "d%u", n);
        text_of(n, 0, title, sizeof title);
        text_of(n, 1, body, sizeof body);
        const char *fields[2] = {title, body};
        size_t lens[2] = {strlen(title), strlen(body)};
        if (isn_builder_add(b, id, fields, lens, 0.0f, err, sizeof err) != 0) return -1;
    }
    int rc = isn_builder_write(b, dir, NULL, err, sizeof err);
    isn_builder_free(b);
    return rc == 0 && (index_ = isn_index_open(dir, err, sizeof err)) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    isn_index_close(index_);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Attaches `names` to hits on docs 0, 7, 14, ... with an arena allowing `limit` extra bytes. */
static int attach(const char *const *names, size_t num_names, uint32_t num_hits, size_t limit, Isn__V1__Hit *hits,
                  arena *memory, char *err, size_t err_len) {
    static uint8_t first_chunk[1024];
    static Isn__V1__SearchRequest request;
    isn__v1__search_request__init(&request);
    request.n_stored_fields = num_names;
    request.stored_fields = (char **)names;
    static search_job job;
    memset(&job, 0, sizeof job);
    job.request = &request;
    arena_init(memory, first_chunk, sizeof first_chunk, limit);
    job.memory = memory;
    for (uint32_t i = 0; i < num_hits; i++) {
        isn__v1__hit__init(&hits[i]);
        hits[i].doc = (i * 7) % NUM_DOCS;
    }
    return stored_fields_attach(index_, &job, hits, num_hits, err, err_len);
}

static void test_fields_in_order(void **state) {
    (void)state;
    static const char *const names[] = {"body", "title", "body"};
    Isn__V1__Hit hits[40];
    arena memory;
    char err[ISN_ERR_LEN], want[2048];
    assert_int_equal(attach(names, 3, 40, 1 << 20, hits, &memory, err, sizeof err), ISN_GRPC_STATUS_OK);
    for (uint32_t i = 0; i < 40; i++) {
        assert_int_equal(hits[i].n_fields, 3);
        for (uint32_t j = 0; j < 3; j++) {
            assert_string_equal(hits[i].fields[j]->name, names[j]);
            text_of(hits[i].doc, strcmp(names[j], "title") ? 1 : 0, want, sizeof want);
            assert_string_equal(hits[i].fields[j]->value, want);
        }
    }
    arena_reset(&memory);
    /* none asked: nothing attached, nothing allocated */
    assert_int_equal(attach(NULL, 0, 40, 0, hits, &memory, err, sizeof err), ISN_GRPC_STATUS_OK);
    assert_int_equal(hits[0].n_fields, 0);
    assert_int_equal(memory.used, 0);
}

static void test_unknown_field(void **state) {
    (void)state;
    static const char *const names[] = {"title", "url"};
    Isn__V1__Hit hits[4];
    arena memory;
    char err[ISN_ERR_LEN];
    assert_int_equal(attach(names, 2, 4, 1 << 20, hits, &memory, err, sizeof err), ISN_GRPC_STATUS_INVALID_ARGUMENT);
    if (!strstr(err, "\"url\"") || !strstr(err, "title, body")) fail_msg("unclear: %s", err);
    /* even with no hits to fill, a wrong name is an error */
    assert_int_equal(attach(names, 2, 0, 1 << 20, hits, &memory, err, sizeof err), ISN_GRPC_STATUS_INVALID_ARGUMENT);
    arena_reset(&memory);
}

static void test_over_the_arena(void **state) {
    (void)state;
    static const char *const names[] = {"body"};
    Isn__V1__Hit hits[200];
    arena memory;
    char err[ISN_ERR_LEN];
    assert_int_equal(attach(names, 1, 200, 16 << 10, hits, &memory, err, sizeof err), ISN_GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err, "exceed this request's memory"));
    assert_true(memory.extra_bytes <= 16 << 10);
    arena_reset(&memory);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fields_in_order), cmocka_unit_test(test_unknown_field),
                                       cmocka_unit_test(test_over_the_arena)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
