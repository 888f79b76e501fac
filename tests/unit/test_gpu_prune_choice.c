/* AUTO pruning's choice (gpu/prune_choice.c), driven with chosen batch times and no device: it settles on
 * the cheaper mode; one batch that waited on the host (as a driver call of a concurrent upload, or a
 * completion thread off its core, makes one) does not switch a class to the mode several times dearer;
 * a lasting change of costs still does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "gpu/prune_choice.h"

#define STREAMS 4
#define POSTINGS 2000000ull

/* Runs n batches of one class at the given costs (ms per million postings, [0] exhaustive, [1] pruned),
 * the first with stall_ms added; returns how many pruned. */
static uint32_t run_batches(prune_learning *l, uint32_t n, const double cost[2], double stall_ms) {
    uint32_t pruned_count = 0;
    for (uint32_t i = 0; i < n; i++) {
        bool pruned = prune_choose(l, STREAMS);
        pruned_count += pruned;
        double ms = cost[pruned] * (double)POSTINGS / 1e6 + (i == 0 ? stall_ms : 0.0);
        prune_learn(l, pruned, ms, POSTINGS, false);
    }
    return pruned_count;
}

static void test_settles_on_the_cheaper_mode(void **state) {
    (void)state;
    prune_learning l = {0};
    const double cost[2] = {1.0, 4.0};
    run_batches(&l, 200, cost, 0.0);
    uint32_t pruned = run_batches(&l, 1000, cost, 0.0);
    /* exploring the pruned mode costs a fixed share of the device: a run every 32 runs times 4 */
    assert_true(pruned <= 1000 / 32);
    assert_true(l.ms_per_mposting[0] < l.ms_per_mposting[1]);
}

static void test_one_stalled_batch_does_not_switch(void **state) {
    (void)state;
    prune_learning l = {0};
    const double cost[2] = {1.0, 4.0};
    run_batches(&l, 1000, cost, 0.0);
    /* the next exhaustive batch waited two seconds on the host */
    uint32_t pruned = 0;
    bool stalled = false;
    for (uint32_t i = 0; i < 1000; i++) {
        bool p = prune_choose(&l, STREAMS);
        pruned += p;
        double ms = cost[p] * (double)POSTINGS / 1e6;
        if (!p && !stalled) ms += 2000.0, stalled = true;
        prune_learn(&l, p, ms, POSTINGS, false);
    }
    assert_true(stalled);
    if (pruned > 1000 / 32)
        fail_msg("after one stalled exhaustive batch, %u of the next 1000 batches pruned at 4x the cost", pruned);
    assert_true(l.ms_per_mposting[0] < 2.0);
}

static void test_a_lasting_change_switches(void **state) {
    (void)state;
    prune_learning l = {0};
    const double before[2] = {1.0, 4.0}, after[2] = {10.0, 4.0};
    run_batches(&l, 1000, before, 0.0);
    run_batches(&l, 200, after, 0.0);
    uint32_t pruned = run_batches(&l, 1000, after, 0.0);
    if (pruned < 1000 - 1000 / 8) fail_msg("exhaustive now costs 2.5x pruned, yet only %u of 1000 batches pruned", pruned);
}

/* A filter's first batches also build its bitmaps (a one-off cost, prune_learn's one_off): the exhaustive
 * mode they ran in must not look dearer for it. Learnt as ordinary samples, a few such batches kept the
 * class pruned at twice the cost. And a class whose every batch is one-off still learns both modes. */
static void test_one_off_batches_do_not_decide(void **state) {
    (void)state;
    prune_learning l = {0};
    const double cost[2] = {1.0, 2.0};
    uint32_t pruned = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        bool p = prune_choose(&l, STREAMS);
        pruned += i >= 200 && p;
        const bool one_off = i < 3; /* the first run's batches build the filters' bitmaps */
        prune_learn(&l, p, cost[p] * (double)POSTINGS / 1e6 + (one_off ? 40.0 : 0.0), POSTINGS, one_off);
    }
    if (pruned > 800 / 32) fail_msg("after three exhaustive batches that built bitmaps, %u of 800 pruned at 2x", pruned);
    assert_true(l.ms_per_mposting[0] < 1.5);
    prune_learning all = {0};
    for (uint32_t i = 0; i < 100; i++) {
        bool p = prune_choose(&all, STREAMS);
        prune_learn(&all, p, cost[p] * (double)POSTINGS / 1e6, POSTINGS, true);
    }
    /* each mode took one, after PRUNE_ONE_OFF_RUN of them */
    assert_int_equal(all.batches[0], 1);
    assert_int_equal(all.batches[1], 1);
    assert_int_equal(all.one_offs[0], PRUNE_ONE_OFF_RUN);
    assert_true(all.ms_per_mposting[0] < all.ms_per_mposting[1]);
}

/* A class whose batches are never learnt from (each of a cache's batches of 256 waits on CPU answers for its
 * queries with a list not resident, and isn_gpu_complete learns from none of those) serves exhaustive
 * batches, the choice it ends in anyway, without first spending its pruned patience (20 batches here, each
 * several exhaustive ones' cost on such a partition). */
static void test_an_unmeasured_class_stays_exhaustive(void **state) {
    (void)state;
    prune_learning l = {0};
    uint32_t pruned = 0;
    for (uint32_t i = 0; i < 1000; i++) pruned += prune_choose(&l, STREAMS);
    assert_int_equal(pruned, 0);
    /* once exhaustive is measured, pruned runs are tried and learnt: a cheaper pruned mode takes over */
    const double cost[2] = {4.0, 1.0};
    run_batches(&l, 200, cost, 0.0);
    assert_true(run_batches(&l, 1000, cost, 0.0) > 900);
}

static void test_size_classes(void **state) {
    (void)state;
    assert_int_equal(prune_class(1), 0);
    assert_int_equal(prune_class(3), 0);
    assert_int_equal(prune_class(4), 1);
    assert_int_equal(prune_class(16), 2);
    assert_int_equal(prune_class(63), 2);
    assert_int_equal(prune_class(256), 4);
    assert_int_equal(prune_class(100000), PRUNE_CLASSES - 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settles_on_the_cheaper_mode),
        cmocka_unit_test(test_one_stalled_batch_does_not_switch),
        cmocka_unit_test(test_a_lasting_change_switches),
        cmocka_unit_test(test_one_off_batches_do_not_decide),
        cmocka_unit_test(test_an_unmeasured_class_stays_exhaustive),
        cmocka_unit_test(test_size_classes),
    };
    return cmocka_run_group_tests_name("gpu_prune_choice", tests, NULL, NULL);
}
