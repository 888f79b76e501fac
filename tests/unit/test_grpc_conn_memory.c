/* What a connection's nghttp2 allocations charge (grpc/conn_memory.c): each block at least what was
 * asked and its header, given back whole when freed or grown, through malloc, calloc and realloc;
 * an allocation whose size would overflow is refused, not wrapped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc/server_internal.h"

static void blocks_are_charged_and_given_back(void **state) {
    (void)state;
    isn_grpc_server *server = calloc(1, sizeof *server);
    isn_grpc_conn *conn = calloc(1, sizeof *conn);
    assert_non_null(server);
    assert_non_null(conn);
    server->budget = &server->own_budget;
    conn->server = server;
    isn_grpc_conn_memory_init(conn);
    uint64_t base = conn->charged;
    assert_true(base >= sizeof *conn);
    nghttp2_mem *mem = &conn->mem;

    char *a = mem->malloc(100, mem->mem_user_data);
    assert_non_null(a);
    memset(a, 1, 100); /* the whole block is the caller's */
    assert_true(conn->charged >= base + 100);
    uint64_t with_a = conn->charged;
    uint32_t *b = mem->calloc(50, sizeof *b, mem->mem_user_data);
    assert_non_null(b);
    for (int i = 0; i < 50; i++) assert_int_equal(b[i], 0);
    assert_true(conn->charged >= with_a + 200);
    a = mem->realloc(a, 10000, mem->mem_user_data);
    assert_non_null(a);
    assert_int_equal(a[99], 1); /* kept across the move */
    assert_true(conn->charged >= base + 10000 + 200);
    mem->free(a, mem->mem_user_data);
    mem->free(b, mem->mem_user_data);
    mem->free(NULL, mem->mem_user_data);
    assert_int_equal(conn->charged, base);
    char *c = mem->realloc(NULL, 64, mem->mem_user_data); /* realloc of nothing allocates */
    assert_non_null(c);
    mem->free(c, mem->mem_user_data);
    assert_int_equal(conn->charged, base);

    assert_null(mem->malloc(SIZE_MAX - 4, mem->mem_user_data));
    assert_null(mem->calloc(SIZE_MAX / 2, 4, mem->mem_user_data));
    assert_int_equal(conn->charged, base);
    assert_true(server->own_budget.used >= base); /* the connection's reserve holds it */
    isn_grpc_conn_memory_release(conn);
    assert_int_equal(server->own_budget.used, 0);
    free(conn);
    free(server);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(blocks_are_charged_and_given_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
