/* The backend's CPU crew (gpu/cpu_crew.c): a started run goes on without its caller, which can do other
 * work and start or run more; every task of every run runs once; a crew of the caller alone runs a
 * started run when it is finished, on the caller's hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gpu/cpu_crew.h"
#include "tests/support/index_builder.h"

#define TASKS 64

static support_index test_index;

static size_t doc_text(void *user, uint32_t d, char *text, size_t cap) {
    (void)user;
    return (size_t)snprintf(text, cap, "crew w%u w%u", d % 7, d % 13);
}

static int setup(void **state) {
    (void)state;
    return support_index_build(&test_index, "crew", NULL, 200, doc_text, NULL);
}

static int teardown(void **state) {
    (void)state;
    support_index_close(&test_index);
    return 0;
}

typedef struct {
    atomic_uint ran[TASKS];
    atomic_uint total;
    atomic_bool gate_open; /* tasks with index below gated wait for it */
    uint32_t gated;
    cpu_hand *hand_of[TASKS];
    atomic_uint without_searcher; /* tasks given a hand with no searcher (checked on the test's thread) */
} tally;

static void count_task(void *context, uint32_t i, cpu_hand *hand) {
    tally *t = context;
    while (i < t->gated && !atomic_load(&t->gate_open)) {
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
    if (hand->searcher == NULL) atomic_fetch_add(&t->without_searcher, 1);
    t->hand_of[i] = hand;
    atomic_fetch_add(&t->ran[i], 1);
    atomic_fetch_add(&t->total, 1);
}

/* Waits for `want` tasks to have run, without finishing the run: false if they have not after a minute
 * (a liveness bound, not a timing: they never will unless the crew runs them on its own). */
static bool wait_for(tally *t, uint32_t want) {
    for (int i = 0; i < 60000 && atomic_load(&t->total) < want; i++) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    return atomic_load(&t->total) >= want;
}

static void assert_each_once(tally *t, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (atomic_load(&t->ran[i]) != 1) fail_msg("task %u ran %u times", i, atomic_load(&t->ran[i]));
    assert_int_equal(atomic_load(&t->without_searcher), 0);
}

static void test_a_started_run_goes_on_alone(void **state) {
    (void)state;
    cpu_crew *crew = cpu_crew_new(test_index.index, 4, 10, NULL, 0);
    assert_non_null(crew);
    static tally t;
    memset(&t, 0, sizeof t);
    cpu_run run;
    cpu_crew_start(crew, &run, TASKS, count_task, &t);
    assert_true(wait_for(&t, TASKS));
    cpu_crew_finish(crew, &run);
    assert_each_once(&t, TASKS);
    cpu_crew_free(crew);
}

/* Two started runs, their first tasks held, while the caller runs a third to its end on its own hand; then
 * the held ones are let go and both finish, every task once. */
static void test_runs_in_flight_together(void **state) {
    (void)state;
    cpu_crew *crew = cpu_crew_new(test_index.index, 3, 10, NULL, 0);
    assert_non_null(crew);
    static tally a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    a.gated = 2; /* both crew threads wait in run a's first two tasks */
    cpu_run ra, rb;
    cpu_crew_start(crew, &ra, TASKS, count_task, &a);
    cpu_crew_start(crew, &rb, TASKS, count_task, &b);
    cpu_crew_run(crew, TASKS, count_task, &c);
    assert_int_equal(atomic_load(&c.total), TASKS);
    assert_each_once(&c, TASKS);
    atomic_store(&a.gate_open, true);
    cpu_crew_finish(crew, &rb);
    cpu_crew_finish(crew, &ra);
    assert_each_once(&a, TASKS);
    assert_each_once(&b, TASKS);
    cpu_crew_free(crew);
}

/* A crew of the caller alone: a started run waits for its finish, which runs it whole on the caller's hand. */
static void test_a_crew_of_one_runs_at_finish(void **state) {
    (void)state;
    cpu_crew *crew = cpu_crew_new(test_index.index, 1, 10, NULL, 0);
    assert_non_null(crew);
    static tally t;
    memset(&t, 0, sizeof t);
    cpu_run run;
    cpu_crew_start(crew, &run, TASKS, count_task, &t);
    assert_int_equal(atomic_load(&t.total), 0);
    cpu_crew_finish(crew, &run);
    assert_each_once(&t, TASKS);
    for (uint32_t i = 1; i < TASKS; i++) assert_ptr_equal(t.hand_of[i], t.hand_of[0]);
    cpu_run empty;
    cpu_crew_start(crew, &empty, 0, count_task, &t);
    cpu_crew_finish(crew, &empty);
    cpu_crew_free(crew);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_started_run_goes_on_alone),
        cmocka_unit_test(test_runs_in_flight_together),
        cmocka_unit_test(test_a_crew_of_one_runs_at_finish),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
