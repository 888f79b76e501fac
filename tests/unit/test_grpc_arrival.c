/* The arrival marks (grpc/arrival_marks.c): when the bytes a connection reads can have reached its
 * socket. A socket that keeps up dates its bytes from the last read; in a standing backlog (full reads
 * with bytes left behind) the bytes date from where the backlog began, however many reads ago, and
 * once a read empties the socket the next bytes are fresh again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grpc/server_internal.h"

#define MS 1000000ull
#define FULL 65536

static void a_socket_that_keeps_up_dates_bytes_from_the_last_read(void **state) {
    (void)state;
    isn_grpc_arrival_marks m = {0};
    assert_int_equal(isn_grpc_arrival_since(&m, 5), 5); /* nothing read yet: the connection's start */
    isn_grpc_arrival_note_read(&m, 300, 0, 10 * MS);
    assert_int_equal(isn_grpc_arrival_since(&m, 5), 10 * MS);
    isn_grpc_arrival_note_read(&m, 200, 0, 11 * MS);
    assert_int_equal(isn_grpc_arrival_since(&m, 5), 11 * MS);
    assert_true(m.count <= 2);
}

static void a_standing_backlog_dates_bytes_from_where_it_began(void **state) {
    (void)state;
    isn_grpc_arrival_marks m = {0};
    isn_grpc_arrival_note_read(&m, 100, 0, 1 * MS); /* the socket emptied at 1 ms */
    /* then a backlog: each read fills the buffer and leaves 3 buffers' worth behind */
    isn_grpc_arrival_note_read(&m, FULL, 3 * FULL, 20 * MS);
    /* the next read's bytes were already there at 20 ms, and may have come any time after 1 ms */
    assert_int_equal(isn_grpc_arrival_since(&m, 0), 1 * MS);
    isn_grpc_arrival_note_read(&m, FULL, 3 * FULL, 30 * MS);
    isn_grpc_arrival_note_read(&m, FULL, 3 * FULL, 40 * MS);
    assert_int_equal(isn_grpc_arrival_since(&m, 0), 1 * MS);
    /* the bytes read next lie past what was queued at 20 ms (100 + 4 buffers): they came after it */
    isn_grpc_arrival_note_read(&m, FULL, 3 * FULL, 50 * MS);
    assert_int_equal(isn_grpc_arrival_since(&m, 0), 20 * MS);
    /* the backlog drains (what was queued at 50 ms is read, nothing behind it) ... */
    isn_grpc_arrival_note_read(&m, FULL, 2 * FULL, 60 * MS);
    isn_grpc_arrival_note_read(&m, FULL, FULL, 61 * MS);
    isn_grpc_arrival_note_read(&m, FULL, 0, 62 * MS);
    /* ... and what comes next is fresh */
    assert_int_equal(isn_grpc_arrival_since(&m, 0), 62 * MS);
    isn_grpc_arrival_note_read(&m, 1000, 0, 70 * MS);
    assert_int_equal(isn_grpc_arrival_since(&m, 0), 70 * MS);
    assert_int_equal(m.count, 1);
}

static void more_backlog_reads_than_marks_stay_conservative(void **state) {
    (void)state;
    isn_grpc_arrival_marks m = {0};
    isn_grpc_arrival_note_read(&m, 10, 0, 1 * MS);
    /* a backlog that keeps growing: far more reads than marks */
    for (uint64_t i = 0; i < 40; i++) isn_grpc_arrival_note_read(&m, FULL, (100 + i) * FULL, (2 + i) * MS);
    assert_true(m.count <= ISN_GRPC_ARRIVAL_MARKS);
    assert_int_equal(isn_grpc_arrival_since(&m, 0), 1 * MS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_socket_that_keeps_up_dates_bytes_from_the_last_read),
        cmocka_unit_test(a_standing_backlog_dates_bytes_from_where_it_began),
        cmocka_unit_test(more_backlog_reads_than_marks_stay_conservative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
