/* Idle workers (scheduler/idle_workers.c): a wake claims one sleeper and posts its own semaphore, with
 * no lock between wakers and sleepers; every claim's post is consumed by the worker it claimed; no
 * wake is lost. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "scheduler/scheduler_internal.h"

static int posts(sched_idle_set *set, uint32_t worker) {
    int value = 0;
    sem_getvalue(&set->wakes[worker], &value);
    return value;
}

/* Three announced (one of them past the first word's 64): one wake posts exactly one of them, a wake
 * of all posts the other two, and nothing is left to claim. */
static void test_a_wake_claims_one_sleeper_and_posts_it_alone(void **state) {
    (void)state;
    sched_idle_set set;
    assert_int_equal(sched_idle_init(&set, 70), 0);
    assert_int_equal(sched_idle_wake(&set, false), 0); /* nobody sleeps */
    sched_idle_announce(&set, 3);
    sched_idle_announce(&set, 5);
    sched_idle_announce(&set, 66);
    assert_int_equal(atomic_load(&set.count), 3);
    assert_int_equal(sched_idle_wake(&set, false), 1);
    assert_int_equal(posts(&set, 3) + posts(&set, 5) + posts(&set, 66), 1);
    assert_int_equal(atomic_load(&set.count), 2);
    assert_int_equal(sched_idle_wake(&set, true), 2);
    assert_int_equal(posts(&set, 3), 1);
    assert_int_equal(posts(&set, 5), 1);
    assert_int_equal(posts(&set, 66), 1);
    assert_int_equal(atomic_load(&set.count), 0);
    assert_int_equal(sched_idle_wake(&set, true), 0);
    /* each worker consumes its post: its sleep returns at once, and leaves nothing behind */
    for (uint32_t w = 3; w < 70; w++) {
        if (w != 3 && w != 5 && w != 66) continue;
        sched_idle_sleep(&set, w, true, isn_now_ns() + 10000000000ull);
        assert_int_equal(posts(&set, w), 0);
    }
    sched_idle_destroy(&set);
}

/* After worker w withdrew: nobody is counted idle, no wake claims anyone, and nothing was posted to w. */
static void assert_withdrawn(sched_idle_set *set, uint32_t w) {
    assert_int_equal(atomic_load(&set->count), 0);
    assert_int_equal(sched_idle_wake(set, false), 0);
    assert_int_equal(posts(set, w), 0);
}

/* A worker that found work on its last look withdraws: no wake claims it, and nothing is posted. One
 * whose wait timed out withdraws the same way. */
static void test_a_worker_that_withdraws_is_not_posted(void **state) {
    (void)state;
    sched_idle_set set;
    assert_int_equal(sched_idle_init(&set, 4), 0);
    sched_idle_announce(&set, 1);
    sched_idle_sleep(&set, 1, false, 0);
    assert_withdrawn(&set, 1);
    sched_idle_announce(&set, 2);
    sched_idle_sleep(&set, 2, true, isn_now_ns() + 1000000); /* nobody wakes it: times out */
    assert_withdrawn(&set, 2);
    sched_idle_destroy(&set);
}

/* Claimed after its last look found work, before it withdrew: it consumes the post, so that its next
 * sleep is not ended by it, and passes the wake on to a worker that sleeps. */
static void test_a_claim_of_a_worker_that_did_not_wait_is_passed_on(void **state) {
    (void)state;
    sched_idle_set set;
    assert_int_equal(sched_idle_init(&set, 3), 0);
    sched_idle_announce(&set, 0);
    sched_idle_announce(&set, 2);
    assert_int_equal(sched_idle_wake(&set, false), 1); /* the lowest: 0 */
    assert_int_equal(posts(&set, 0), 1);
    sched_idle_sleep(&set, 0, false, 0); /* found work itself, but was claimed */
    assert_int_equal(posts(&set, 0), 0);
    assert_int_equal(posts(&set, 2), 1); /* the wake went on to the sleeper */
    assert_int_equal(atomic_load(&set.count), 0);
    sched_idle_sleep(&set, 2, true, isn_now_ns() + 10000000000ull);
    assert_int_equal(posts(&set, 2), 0);
    sched_idle_destroy(&set);
}

/* Sleepers on threads, each waiting with a 20 s bound, and a waker that queues a token and wakes one
 * sleeper for each: every token is taken, and no sleep runs into its bound (a lost wake). */
enum { SLEEPERS = 6, TOKENS = 20000 };
#define BOUND_NS 20000000000ull

typedef struct {
    sched_idle_set *set;
    uint32_t id;
    atomic_uint *tokens, *taken;
    atomic_bool *done;
    atomic_uint *lost;
} sleeper;

static bool take_token(atomic_uint *tokens) {
    unsigned n = atomic_load(tokens);
    while (n && !atomic_compare_exchange_weak(tokens, &n, n - 1)) {}
    return n != 0;
}

static void *sleep_and_take(void *arg) {
    sleeper *p = arg;
    while (!atomic_load(p->done)) {
        if (take_token(p->tokens)) {
            atomic_fetch_add(p->taken, 1);
            continue;
        }
        sched_idle_announce(p->set, p->id);
        bool idle = !atomic_load(p->tokens) && !atomic_load(p->done);
        uint64_t start = isn_now_ns();
        sched_idle_sleep(p->set, p->id, idle, start + BOUND_NS);
        if (idle && isn_now_ns() - start >= BOUND_NS) atomic_fetch_add(p->lost, 1);
    }
    return NULL;
}

static void test_no_wake_is_lost(void **state) {
    (void)state;
    sched_idle_set set;
    assert_int_equal(sched_idle_init(&set, SLEEPERS), 0);
    atomic_uint tokens = 0, taken = 0, lost = 0;
    atomic_bool done = false;
    pthread_t threads[SLEEPERS];
    sleeper sleepers[SLEEPERS];
    for (uint32_t i = 0; i < SLEEPERS; i++) {
        sleepers[i] = (sleeper){.set = &set, .id = i, .tokens = &tokens, .taken = &taken, .done = &done, .lost = &lost};
        assert_int_equal(pthread_create(&threads[i], NULL, sleep_and_take, &sleepers[i]), 0);
    }
    for (int i = 0; i < TOKENS && !atomic_load(&lost); i++) {
        atomic_fetch_add(&tokens, 1);
        if (atomic_load(&set.count)) sched_idle_wake(&set, false);
        if (i % 64 == 0) usleep(10); /* lets the sleepers fall asleep */
    }
    while (atomic_load(&taken) < TOKENS && !atomic_load(&lost)) usleep(1000);
    atomic_store(&done, true);
    sched_idle_wake(&set, true);
    for (uint32_t i = 0; i < SLEEPERS; i++) {
        /* a sleeper between its check of done and its announce is woken by the next wake of all */
        while (pthread_tryjoin_np(threads[i], NULL) != 0) {
            sched_idle_wake(&set, true);
            usleep(1000);
        }
    }
    assert_int_equal(atomic_load(&lost), 0);
    assert_int_equal(atomic_load(&taken), TOKENS);
    sched_idle_destroy(&set);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_wake_claims_one_sleeper_and_posts_it_alone),
        cmocka_unit_test(test_a_worker_that_withdraws_is_not_posted),
        cmocka_unit_test(test_a_claim_of_a_worker_that_did_not_wait_is_passed_on),
        cmocka_unit_test(test_no_wake_is_lost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
