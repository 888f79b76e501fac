/* A loop's completion queue (daemon/completion_queue.c): a push wakes the loop only while the loop may
 * block in its poll, once for any number of jobs; the loop is never left asleep with jobs queued;
 * jobs come out oldest first. */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/search_job.h"

static bool woken(const completion_queue *queue) {
    struct pollfd pfd = {.fd = queue->wake_fd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 1;
}

static uint64_t wakes(completion_queue *queue) {
    uint64_t count = 0;
    if (read(queue->wake_fd, &count, sizeof count) != sizeof count) return 0;
    return count;
}

static void init(completion_queue *queue) {
    char err[256];
    assert_int_equal(completion_queue_init(queue, err, sizeof err), 0);
}

/* A take handed out exactly these two jobs, in this order. */
static void assert_took_two(const search_job *taken, const search_job *first, const search_job *second) {
    assert_ptr_equal(taken, first);
    assert_ptr_equal(taken->next, second);
    assert_null(second->next);
}

static void test_a_running_loop_is_not_woken(void **state) {
    (void)state;
    completion_queue queue;
    init(&queue);
    search_job a = {0}, b = {0};
    completion_queue_push(&queue, &a);
    completion_queue_push(&queue, &b);
    assert_false(woken(&queue));
    assert_took_two(completion_queue_take(&queue, SIZE_MAX, 0, 0), &a, &b);
    assert_null(completion_queue_take(&queue, SIZE_MAX, 0, 0));
    completion_queue_close(&queue);
}

static void test_a_polling_loop_is_woken_once(void **state) {
    (void)state;
    completion_queue queue;
    init(&queue);
    assert_true(completion_queue_may_poll(&queue));
    search_job jobs[3] = {0};
    for (int i = 0; i < 3; i++) completion_queue_push(&queue, &jobs[i]);
    assert_true(woken(&queue));
    assert_int_equal(wakes(&queue), 1); /* the first push woke it; the others joined it */
    completion_queue_clear_wake(&queue); /* nothing left to clear: must not block */
    assert_false(woken(&queue));
    search_job *taken = completion_queue_take(&queue, SIZE_MAX, 0, 0);
    for (int i = 0; i < 3; i++, taken = taken->next) assert_ptr_equal(taken, &jobs[i]);
    assert_null(taken);
    /* polled again (the loop runs): pushes no longer wake */
    completion_queue_polled(&queue);
    completion_queue_push(&queue, &jobs[0]);
    assert_false(woken(&queue));
    completion_queue_close(&queue);
}

static void test_jobs_waiting_keep_the_loop_from_polling(void **state) {
    (void)state;
    completion_queue queue;
    init(&queue);
    search_job a = {0}, b = {0};
    completion_queue_push(&queue, &a);
    assert_false(completion_queue_may_poll(&queue));
    completion_queue_push(&queue, &b); /* the loop is taking, not polling */
    assert_false(woken(&queue));
    assert_ptr_equal(completion_queue_take(&queue, SIZE_MAX, 0, 0), &a);
    assert_true(completion_queue_may_poll(&queue));
    completion_queue_close(&queue);
}

/* A bounded take hands out the oldest jobs and keeps the rest, in order, ahead of later pushes; while
 * any wait the loop may not block, and once it has taken them all a push wakes it again. */
static void test_a_bounded_take_keeps_the_rest_in_order(void **state) {
    (void)state;
    completion_queue queue;
    init(&queue);
    search_job jobs[6] = {0};
    for (int i = 0; i < 3; i++) completion_queue_push(&queue, &jobs[i]);
    assert_took_two(completion_queue_take(&queue, 1, 0, 0), &jobs[0], &jobs[1]); /* half of three: two */
    assert_false(completion_queue_may_poll(&queue)); /* one waits, though none was pushed since */
    for (int i = 3; i < 6; i++) completion_queue_push(&queue, &jobs[i]);
    assert_took_two(completion_queue_take(&queue, 1, 0, 0), &jobs[2], &jobs[3]); /* half of four */
    assert_took_two(completion_queue_take(&queue, 10, 0, 0), &jobs[4], &jobs[5]);
    assert_null(completion_queue_take(&queue, 10, 0, 0));
    assert_true(completion_queue_may_poll(&queue));
    completion_queue_push(&queue, &jobs[0]);
    assert_true(woken(&queue));
    completion_queue_close(&queue);
}

/* A loop that takes less than arrives between its takes still keeps up: it takes half of what waits,
 * so what waits stays at twice what arrives. */
static void test_a_backlog_is_taken_by_halves(void **state) {
    (void)state;
    completion_queue queue;
    init(&queue);
    enum { ROUNDS = 50, ARRIVING = 40, LEAST = 8 };
    search_job *jobs = calloc(ROUNDS * ARRIVING, sizeof *jobs);
    assert_non_null(jobs);
    size_t pushed = 0, taken_total = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < ARRIVING; i++) completion_queue_push(&queue, &jobs[pushed++]);
        for (search_job *job = completion_queue_take(&queue, LEAST, 0, 0); job; job = job->next) {
            assert_ptr_equal(job, &jobs[taken_total]); /* oldest first, across takes */
            taken_total++;
        }
        assert_true(pushed - taken_total <= 2 * ARRIVING);
    }
    free(jobs);
    completion_queue_close(&queue);
}

static size_t list_length(const search_job *job) {
    size_t n = 0;
    for (; job; job = job->next) n++;
    return n;
}

/* With a backlog age, a landing's answers go out `least` at a time while the oldest is younger than the
 * age, and by halves once it is older (the loop is falling behind). */
static void test_half_only_once_behind(void **state) {
    (void)state;
    completion_queue queue;
    init(&queue);
    enum { JOBS = 12 };
    search_job jobs[JOBS] = {0};
    const uint64_t finished = 1000000, age = 1000000;
    for (int i = 0; i < JOBS; i++) {
        jobs[i].sched.finished_ns = finished;
        completion_queue_push(&queue, &jobs[i]);
    }
    assert_int_equal(list_length(completion_queue_take(&queue, 2, age, finished + age / 2)), 2); /* young */
    assert_int_equal(list_length(completion_queue_take(&queue, 2, age, finished + age)), 2);     /* not older */
    assert_int_equal(list_length(completion_queue_take(&queue, 2, age, finished + 2 * age)), 4); /* half of 8 */
    assert_int_equal(list_length(completion_queue_take(&queue, 2, 0, 0)), 2);                    /* no age: half */
    assert_int_equal(list_length(completion_queue_take(&queue, 2, age, finished)), 2);
    assert_null(completion_queue_take(&queue, 2, age, finished));
    completion_queue_close(&queue);
}

/* Pushers on threads and a loop that blocks in poll() whenever the queue lets it: every job is taken,
 * and no poll waits for a wake that never comes (a bound of 20 s a poll, not a timing). */
enum { PUSHERS = 4, JOBS_EACH = 20000 };

typedef struct {
    completion_queue *queue;
    search_job *jobs;
} pusher;

static void *push_all(void *arg) {
    pusher *p = arg;
    for (int i = 0; i < JOBS_EACH; i++) {
        completion_queue_push(p->queue, &p->jobs[i]);
        if (i % 64 == 0) usleep(1); /* lets the loop catch up and poll */
    }
    return NULL;
}

static void test_no_wake_is_lost(void **state) {
    (void)state;
    completion_queue queue;
    init(&queue);
    search_job *jobs = calloc(PUSHERS * JOBS_EACH, sizeof *jobs);
    assert_non_null(jobs);
    pthread_t threads[PUSHERS];
    pusher pushers[PUSHERS];
    for (int t = 0; t < PUSHERS; t++) {
        pushers[t] = (pusher){.queue = &queue, .jobs = jobs + t * JOBS_EACH};
        assert_int_equal(pthread_create(&threads[t], NULL, push_all, &pushers[t]), 0);
    }
    uint32_t taken = 0, polls = 0, lost = 0;
    while (taken < PUSHERS * JOBS_EACH && !lost) {
        for (search_job *job = completion_queue_take(&queue, 7, 0, 0); job; job = job->next) taken++; /* bounded, as loops take */
        if (taken == PUSHERS * JOBS_EACH) break;
        if (!completion_queue_may_poll(&queue)) continue;
        struct pollfd pfd = {.fd = queue.wake_fd, .events = POLLIN};
        int ready = poll(&pfd, 1, 20000);
        polls++;
        if (ready == 1) completion_queue_clear_wake(&queue);
        else lost = 1; /* asleep with jobs still to come: a push did not wake it */
        completion_queue_polled(&queue);
    }
    for (int t = 0; t < PUSHERS; t++) pthread_join(threads[t], NULL);
    assert_int_equal(lost, 0);
    assert_int_equal(taken, PUSHERS * JOBS_EACH);
    assert_true(polls > 0);
    free(jobs);
    completion_queue_close(&queue);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_running_loop_is_not_woken),
        cmocka_unit_test(test_a_polling_loop_is_woken_once),
        cmocka_unit_test(test_jobs_waiting_keep_the_loop_from_polling),
        cmocka_unit_test(test_a_bounded_take_keeps_the_rest_in_order),
        cmocka_unit_test(test_a_backlog_is_taken_by_halves),
        cmocka_unit_test(test_half_only_once_behind),
        cmocka_unit_test(test_no_wake_is_lost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
