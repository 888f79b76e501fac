/* The Chase-Lev deque: owner order (LIFO), thief order (FIFO), the full case, and every item taken
 * exactly once while the owner pushes and pops and several thieves steal (run it under
 * ThreadSanitizer with `make tsan-test`). */
#include <setjmp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "scheduler/scheduler_internal.h"

#define ITEM(i) ((void *)(uintptr_t)(i))

static void owner_pops_newest_thief_steals_oldest(void **state) {
    (void)state;
    isn_deque d;
    assert_int_equal(isn_deque_init(&d, 8), 0);
    assert_null(isn_deque_pop(&d));
    assert_null(isn_deque_steal(&d));
    for (uintptr_t i = 1; i <= 5; i++) assert_true(isn_deque_push(&d, ITEM(i)));
    assert_int_equal(isn_deque_size(&d), 5);
    assert_ptr_equal(isn_deque_pop(&d), ITEM(5));
    assert_ptr_equal(isn_deque_steal(&d), ITEM(1));
    assert_ptr_equal(isn_deque_steal(&d), ITEM(2));
    assert_ptr_equal(isn_deque_pop(&d), ITEM(4));
    assert_ptr_equal(isn_deque_pop(&d), ITEM(3));
    assert_null(isn_deque_pop(&d));
    assert_null(isn_deque_steal(&d));
    assert_int_equal(isn_deque_size(&d), 0);
    isn_deque_destroy(&d);
}

static void full_deque_refuses_then_wraps(void **state) {
    (void)state;
    isn_deque d;
    assert_int_equal(isn_deque_init(&d, 4), 0);
    for (uintptr_t i = 1; i <= 4; i++) assert_true(isn_deque_push(&d, ITEM(i)));
    assert_false(isn_deque_push(&d, ITEM(99)));
    /* Indices keep growing past the capacity: slots are reused modulo it. */
    for (uintptr_t round = 0; round < 100; round++) {
        void *stolen = isn_deque_steal(&d);
        assert_non_null(stolen);
        assert_true(isn_deque_push(&d, ITEM(1000 + round)));
    }
    uint32_t left = 0;
    while (isn_deque_pop(&d)) left++;
    assert_int_equal(left, 4);
    isn_deque_destroy(&d);
}

#define ITEMS 200000
#define THIEVES 3

typedef struct {
    isn_deque *deque;
    _Atomic uint32_t *seen;
    atomic_bool *done;
    uint64_t taken;
} thief_arg;

static void *thief_main(void *arg) {
    thief_arg *t = arg;
    for (;;) {
        bool finished = atomic_load(t->done);
        void *item = isn_deque_steal(t->deque);
        if (item) {
            atomic_fetch_add(&t->seen[(uintptr_t)item], 1);
            t->taken++;
        } else if (finished && isn_deque_size(t->deque) == 0) {
            return NULL;
        }
    }
}

static void concurrent_push_pop_steal_takes_each_item_once(void **state) {
    (void)state;
    isn_deque d;
    assert_int_equal(isn_deque_init(&d, 256), 0);
    _Atomic uint32_t *seen = calloc(ITEMS + 1, sizeof *seen);
    assert_non_null(seen);
    atomic_bool done = false;
    pthread_t threads[THIEVES];
    thief_arg args[THIEVES];
    for (int i = 0; i < THIEVES; i++) {
        args[i] = (thief_arg){.deque = &d, .seen = seen, .done = &done};
        assert_int_equal(pthread_create(&threads[i], NULL, thief_main, &args[i]), 0);
    }
    uint64_t owner_taken = 0, rng = 12345;
    for (uintptr_t next = 1; next <= ITEMS;) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if ((rng >> 60) < 11) { /* push about 2 of 3 times, so the deque fills and empties */
            if (isn_deque_push(&d, ITEM(next))) next++;
        } else {
            void *item = isn_deque_pop(&d);
            if (item) {
                atomic_fetch_add(&seen[(uintptr_t)item], 1);
                owner_taken++;
            }
        }
    }
    void *item;
    while ((item = isn_deque_pop(&d))) {
        atomic_fetch_add(&seen[(uintptr_t)item], 1);
        owner_taken++;
    }
    atomic_store(&done, true);
    uint64_t total = owner_taken;
    for (int i = 0; i < THIEVES; i++) {
        pthread_join(threads[i], NULL);
        total += args[i].taken;
    }
    assert_int_equal(total, ITEMS);
    for (uint32_t i = 1; i <= ITEMS; i++)
        if (atomic_load(&seen[i]) != 1) fail_msg("item %u taken %u times", i, atomic_load(&seen[i]));
    free(seen);
    isn_deque_destroy(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(owner_pops_newest_thief_steals_oldest),
        cmocka_unit_test(full_deque_refuses_then_wraps),
        cmocka_unit_test(concurrent_push_pop_steal_takes_each_item_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
