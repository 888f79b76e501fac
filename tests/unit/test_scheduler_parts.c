/* The scheduler's parts that hold no threads: EDF order, routing decisions (clear, close, overload), batch
 * flush on each condition, the cost models' convergence and persistence, the GPU batch cost's split into a
 * fixed part and a part per job. The running scheduler is test_scheduler.c's. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "scheduler/scheduler_internal.h"
#include "tests/support/random.h"

/* ------------------------------------------------------------------ EDF */

static void edf_pops_earliest_deadline_first(void **state) {
    (void)state;
    isn_edf_queue q;
    assert_int_equal(isn_edf_init(&q, 16), 0);
    static const uint64_t deadlines[] = {50, 0, 10, 40, 10, 30, 0, 20};
    isn_job jobs[8];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 8; i++) {
        jobs[i].deadline_ns = deadlines[i];
        jobs[i].predicted_ns[ISN_DEVICE_CPU] = 100;
        assert_true(isn_edf_push(&q, &jobs[i]));
    }
    assert_true(q.backlog_ns[ISN_DEVICE_CPU] == 800);
    /* Equal deadlines keep arrival order; no deadline goes last. */
    const isn_job *expected[] = {&jobs[2], &jobs[4], &jobs[7], &jobs[5], &jobs[3], &jobs[0], &jobs[1], &jobs[6]};
    for (int i = 0; i < 8; i++) assert_ptr_equal(isn_edf_pop(&q), expected[i]);
    assert_null(isn_edf_pop(&q));
    assert_true(q.backlog_ns[ISN_DEVICE_CPU] == 0);
    isn_edf_destroy(&q);
}

static void edf_is_bounded_and_removes_from_the_middle(void **state) {
    (void)state;
    isn_edf_queue q;
    assert_int_equal(isn_edf_init(&q, 4), 0);
    isn_job jobs[5];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 5; i++) jobs[i].deadline_ns = 100 - (uint64_t)i * 10;
    for (int i = 0; i < 4; i++) assert_true(isn_edf_push(&q, &jobs[i]));
    assert_false(isn_edf_push(&q, &jobs[4]));
    for (uint32_t i = 0; i < q.size; i++)
        if (isn_edf_at(&q, i) == &jobs[2]) assert_ptr_equal(isn_edf_remove_at(&q, i), &jobs[2]);
    assert_int_equal(q.size, 3);
    assert_ptr_equal(isn_edf_pop(&q), &jobs[3]);
    assert_ptr_equal(isn_edf_pop(&q), &jobs[1]);
    assert_ptr_equal(isn_edf_pop(&q), &jobs[0]);
    isn_edf_destroy(&q);
}

/* ------------------------------------------------------------------ routing */

static isn_route_input route_input(double cpu_wait, double cpu_service, double gpu_wait, double gpu_service,
                                   double remaining) {
    return (isn_route_input){.wait_ns = {cpu_wait, gpu_wait},
                             .service_ns = {cpu_service, gpu_service},
                             .available = {true, true},
                             .remaining_ns = remaining,
                             .margin = 0.25};
}

static void routing_clear_close_and_overload(void **state) {
    (void)state;
    isn_device_kind best;
    isn_route_input in = route_input(0, 100e3, 0, 20e3, 50e6); /* GPU 5x faster */
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_GPU);
    assert_int_equal(best, ISN_DEVICE_GPU);
    in = route_input(0, 20e3, 0, 100e3, 50e6);
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_CPU);
    /* The GPU is faster per query but its queue makes it finish later: the CPU wins. */
    in = route_input(0, 100e3, 1e6, 20e3, 50e6);
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_CPU);
    /* Within the margin: a close call. */
    in = route_input(0, 100e3, 0, 90e3, 50e6);
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_UNDECIDED);
    /* No GPU: the CPU, whatever the numbers. */
    in = route_input(0, 100e3, 0, 1e3, 50e6);
    in.available[ISN_DEVICE_GPU] = false;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_CPU);
    /* Nobody finishes in time: shed; or, when allowed, degrade on the CPU if the time left after the
     * wait is at least the minimum share of its predicted service. */
    in = route_input(20e6, 40e6, 60e6, 1e6, 50e6);
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_SHED);
    in.degrade_ok = true;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_DEGRADE);
    assert_int_equal(best, ISN_DEVICE_CPU);
    /* 20 ms left for a 60 ms query, at least half required: shed. */
    in = route_input(30e6, 60e6, 60e6, 1e6, 50e6);
    in.degrade_ok = true;
    in.degrade_min_share = 0.5;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_SHED);
    in.degrade_min_share = 0.25;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_DEGRADE);
    /* The GPU would finish first but not in time either; only the CPU can stop a query early. */
    in = route_input(30e6, 40e6, 55e6, 1e6, 50e6);
    in.degrade_ok = true;
    in.degrade_min_share = 0.5;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_DEGRADE);
    assert_int_equal(best, ISN_DEVICE_CPU);
    in = route_input(60e6, 20e6, 60e6, 1e6, 50e6);
    in.degrade_ok = true;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_SHED);
    /* The queue ahead takes at most max_queue_share of the budget: the query's own cost misses the
     * deadline, not overload: it runs cut short (a partial answer) even under the shed policy; a long
     * queue is overload and still sheds. */
    in = route_input(0, 80e6, 0, 70e6, 50e6);
    in.max_queue_share = 0.5;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_DEGRADE);
    assert_int_equal(best, ISN_DEVICE_CPU);
    in = route_input(20e6, 80e6, 30e6, 70e6, 50e6);
    in.max_queue_share = 0.5;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_DEGRADE);
    in = route_input(30e6, 40e6, 60e6, 1e6, 50e6);
    in.max_queue_share = 0.5;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_SHED);
    in.available[ISN_DEVICE_CPU] = false; /* only the CPU can stop early */
    in.wait_ns[ISN_DEVICE_CPU] = 0;
    assert_int_equal(isn_route_decide(&in, &best), ISN_ROUTE_SHED);
    /* No deadline: never overloaded. */
    in = route_input(60e9, 20e6, 60e9, 1e6, 0);
    assert_int_not_equal(isn_route_decide(&in, &best), ISN_ROUTE_SHED);
}

/* ------------------------------------------------------------------ batch flush */

static void batch_flushes_on_each_condition(void **state) {
    (void)state;
    isn_batch_policy policy = {
        .max_batch = 4, .memory_budget = 10000, .linger_ns = 1000000, .safety_ns = 100000, .launch_ns = 10000};
    isn_job jobs[4];
    isn_job *batch[4];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 4; i++) {
        jobs[i].features.total = 1000;
        jobs[i].predicted_ns[ISN_DEVICE_GPU] = 5000;
        batch[i] = &jobs[i];
    }
    isn_flush_reason reason;
    uint64_t until;
    uint64_t t0 = 1000000000ull;
    /* Two jobs, no deadline, just added: wait until the linger time is up. */
    assert_false(isn_batch_should_flush(&policy, batch, 2, 0, t0, t0, &reason, &until));
    assert_true(until == t0 + policy.linger_ns);
    assert_true(isn_batch_should_flush(&policy, batch, 2, 0, t0, t0 + policy.linger_ns, &reason, &until));
    assert_int_equal(reason, ISN_FLUSH_LINGER);
    assert_true(isn_batch_should_flush(&policy, batch, 4, 0, t0, t0, &reason, &until));
    assert_int_equal(reason, ISN_FLUSH_FULL);
    /* 2 x 1000 postings in, a job of 9000 would pass the 10000-byte budget. */
    assert_true(isn_batch_should_flush(&policy, batch, 2, 9000, t0, t0, &reason, &until));
    assert_int_equal(reason, ISN_FLUSH_MEMORY);
    assert_false(isn_batch_should_flush(&policy, batch, 2, 1000, t0, t0, &reason, &until));
    /* Deadline: service 10 + 2 x 5 us, safety 100 us; a deadline 500 us away leaves 380 us. */
    jobs[1].deadline_ns = t0 + 500000;
    assert_false(isn_batch_should_flush(&policy, batch, 2, 0, t0, t0, &reason, &until));
    assert_true(until == t0 + 500000 - 100000 - 20000);
    assert_true(isn_batch_should_flush(&policy, batch, 2, 0, t0, until, &reason, &until));
    assert_int_equal(reason, ISN_FLUSH_DEADLINE);
}

/* ------------------------------------------------------------------ cost model */

static isn_job_features random_features(void) {
    isn_job_features f = {.k = 10, .mode = ISN_MODE_OR, .algo = ISN_ALGO_MAXSCORE};
    f.num_terms = 1 + (uint32_t)(support_rng_unit() * 4);
    f.shortest = (uint64_t)exp(2 + support_rng_unit() * 9);
    f.second_shortest = f.num_terms > 1 ? f.shortest + (uint64_t)exp(2 + support_rng_unit() * 9) : 0;
    f.total = f.shortest + f.second_shortest * (f.num_terms - 1);
    f.longest = f.num_terms > 1 ? f.second_shortest : f.shortest;
    f.essential = f.expected_postings = f.total;
    f.blocks = (f.total + 127) / 128 + f.num_terms;
    return f;
}

/* A synthetic device: fixed cost plus per-posting cost, 5% noise. */
static double synthetic_ns(const isn_job_features *f) {
    return (3000.0 + 2.0 * (double)f->total + 500.0 * f->num_terms) * (0.95 + 0.1 * support_rng_unit());
}

static void cost_model_converges_on_synthetic_times(void **state) {
    (void)state;
    isn_cost_model model;
    isn_cost_model_init(&model);
    model.warm_up = 3000;
    double before = 0;
    for (int i = 0; i < 500; i++) {
        isn_job_features f = random_features();
        double t = synthetic_ns(&f);
        before += fabs(isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &f) - t) / t;
    }
    for (int i = 0; i < 6000; i++) {
        isn_job_features f = random_features();
        isn_cost_learn(&model, ISN_DEVICE_CPU, &f, synthetic_ns(&f));
    }
    double mape = isn_cost_mape(&model, ISN_DEVICE_CPU);
    print_message("cost model: MAPE %.1f%% before learning, %.1f%% after warm-up\n", 100 * before / 500, mape);
    assert_true(mape < 15.0);
    assert_true(mape < 100 * before / 500);
    assert_true(isnan(isn_cost_mape(&model, ISN_DEVICE_GPU)));

    char path[] = "/tmp/isn-test-cost-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    assert_int_equal(isn_cost_model_save(&model, path, err, sizeof err), 0);
    isn_cost_model loaded;
    isn_cost_model_init(&loaded);
    assert_int_equal(isn_cost_model_load(&loaded, path, err, sizeof err), 0);
    isn_job_features f = random_features();
    assert_true(fabs(isn_cost_predict_ns(&loaded, ISN_DEVICE_CPU, &f) - isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &f)) <
                1e-6 * isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &f));
    assert_int_equal(loaded.device[ISN_DEVICE_CPU].updates, 6000);

    FILE *bad = fopen(path, "w");
    fprintf(bad, "isn-cost-model 4 features %d keys %d memo %d\ndevice cpu updates 3 bias 0 0\nw 1 2 x\n",
            ISN_COST_FEATURES, ISN_COST_KEY_SLOTS, ISN_COST_MEMO_SLOTS);
    fclose(bad);
    assert_int_equal(isn_cost_model_load(&loaded, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "bad weight"));
    bad = fopen(path, "w");
    fputs("isn-cost-model 1 features 11\ndevice cpu updates 3\nw 1 2 3\n", bad);
    fclose(bad);
    assert_int_equal(isn_cost_model_load(&loaded, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "another version"));
    bad = fopen(path, "w"); /* the previous format: 19 features, before the probe's work features */
    fprintf(bad, "isn-cost-model 3 features 19 keys %d memo %d\ndevice cpu updates 3 bias 0 0\nw 1 2 3\n",
            ISN_COST_KEY_SLOTS, ISN_COST_MEMO_SLOTS);
    fclose(bad);
    assert_int_equal(isn_cost_model_load(&loaded, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "another version"));
    bad = fopen(path, "w"); /* version 2, without bias and memo */
    fprintf(bad, "isn-cost-model 2 features 16 keys %d\ndevice cpu updates 3\nw 1 2 3\n", ISN_COST_KEY_SLOTS);
    fclose(bad);
    assert_int_equal(isn_cost_model_load(&loaded, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "another version"));
    remove(path);
    assert_int_equal(isn_cost_model_load(&loaded, path, err, sizeof err), 1); /* missing: keep the start */
}

/* Saves the model to a temporary state file and loads it into *loaded. */
static void save_and_reload(const isn_cost_model *model, isn_cost_model *loaded) {
    char path[] = "/tmp/isn-test-cost-model-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    assert_int_equal(isn_cost_model_save(model, path, err, sizeof err), 0);
    isn_cost_model_init(loaded);
    assert_int_equal(isn_cost_model_load(loaded, path, err, sizeof err), 0);
    remove(path);
}

/* Two terms with the same list lengths, one twice as costly (its documents co-occur so that pruning
 * starts late): only the per-term correction can tell them apart, and it must, and survive a save. */
static void cost_model_learns_per_term_corrections(void **state) {
    (void)state;
    isn_cost_model model;
    isn_cost_model_init(&model);
    isn_job_features cheap = {.num_terms = 2, .shortest = 500, .second_shortest = 5000, .longest = 5000,
                              .total = 5500, .essential = 5500, .expected_postings = 5500, .blocks = 45, .k = 10, .num_keys = 2,
                              .keys = {11, 12}};
    isn_job_features costly = cheap;
    costly.keys[0] = 977;
    for (int i = 0; i < 400; i++) {
        isn_cost_learn(&model, ISN_DEVICE_CPU, &cheap, 50e3);
        isn_cost_learn(&model, ISN_DEVICE_CPU, &costly, 100e3);
    }
    double a = isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &cheap), b = isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &costly);
    print_message("per-term correction: %.0f ns and %.0f ns (measured 50000 and 100000)\n", a, b);
    assert_true(fabs(a - 50e3) < 5e3);
    assert_true(fabs(b - 100e3) < 10e3);

    isn_cost_model loaded;
    save_and_reload(&model, &loaded);
    assert_true(fabs(isn_cost_predict_ns(&loaded, ISN_DEVICE_CPU, &costly) - b) < 1e-3 * b);
}

/* Queries with the same features and terms but different costs (as when only k's effect or the
 * documents' co-occurrence differ): the weights can only predict between them; the memo predicts
 * each repeated query from its own times, and survives a save. A query never seen, or one without a
 * signature, is predicted by the weights. */
/* A three-term query with a signature, as the memo keeps them. */
static isn_job_features signed_query(void) {
    return (isn_job_features){.num_terms = 3, .shortest = 800, .second_shortest = 4000, .longest = 9000,
                              .total = 13800, .essential = 13800, .expected_postings = 13800, .blocks = 110, .k = 10,
                              .signature = 0x1234567890abcdefull};
}

static void cost_model_remembers_repeated_queries(void **state) {
    (void)state;
    isn_cost_model model;
    isn_cost_model_init(&model);
    isn_job_features fast = signed_query();
    isn_job_features slow = fast, unseen = fast, unsigned_query = fast;
    slow.signature = 0xfedcba0987654321ull;
    unseen.signature = 0x0f0f0f0f0f0f0f0full;
    unsigned_query.signature = 0;
    for (int i = 0; i < 50; i++) {
        isn_cost_learn(&model, ISN_DEVICE_CPU, &fast, 40e3);
        isn_cost_learn(&model, ISN_DEVICE_CPU, &slow, 120e3);
    }
    double a = isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &fast), b = isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &slow);
    double u = isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &unseen);
    print_message("memo: %.0f ns and %.0f ns (measured 40000 and 120000), unseen %.0f ns\n", a, b, u);
    assert_true(fabs(a - 40e3) < 4e3);
    assert_true(fabs(b - 120e3) < 12e3);
    /* Between the two (MAPE's best single guess for a 1:3 mix is the cheaper one, so near 40000). */
    assert_true(u > 30e3 && u < 120e3);
    assert_true(fabs(isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &unsigned_query) - u) < 1e-9 * u);

    isn_cost_model loaded;
    save_and_reload(&model, &loaded);
    assert_true(fabs(isn_cost_predict_ns(&loaded, ISN_DEVICE_CPU, &slow) - b) < 1e-3 * b);
    assert_true(fabs(isn_cost_predict_ns(&loaded, ISN_DEVICE_CPU, &unseen) - u) < 1e-3 * u);
}

/* Every device's prediction at once (what admission asks for each job) equals each device's alone, whether the
 * memo answers for one device, for none or for a query with no signature: the features' vector they share is
 * computed once, and only where a device needs it. */
static void cost_model_predicts_every_device_as_each_alone(void **state) {
    (void)state;
    isn_cost_model model;
    isn_cost_model_init(&model);
    isn_job_features remembered = signed_query(), unseen = remembered, unsigned_query = remembered;
    unseen.signature = 0x0f0f0f0f0f0f0f0full;
    unsigned_query.signature = 0;
    for (int i = 0; i < 30; i++) {
        isn_cost_learn(&model, ISN_DEVICE_CPU, &remembered, 90e3); /* the CPU's memo holds it, the GPU's does not */
        isn_job_features other = random_features();
        isn_cost_learn(&model, ISN_DEVICE_GPU, &other, synthetic_ns(&other) / 20);
    }
    const isn_job_features *queries[] = {&remembered, &unseen, &unsigned_query};
    for (size_t q = 0; q < sizeof queries / sizeof queries[0]; q++) {
        double all[ISN_DEVICE_KINDS];
        isn_cost_predict_all_ns(&model, queries[q], all);
        for (int d = 0; d < ISN_DEVICE_KINDS; d++) {
            double alone = isn_cost_predict_ns(&model, (isn_device_kind)d, queries[q]);
            if (all[d] != alone) fail_msg("query %zu, device %d: %.3f ns together, %.3f ns alone", q, d, all[d], alone);
        }
    }
    /* the memo answered the CPU for the remembered query, the weights the GPU */
    double all[ISN_DEVICE_KINDS];
    isn_cost_predict_all_ns(&model, &remembered, all);
    assert_true(fabs(all[ISN_DEVICE_CPU] - 90e3) < 9e3);
}

/* Seeded from the simulator's latency model, the GPU side predicts it from the start. */
static void cost_model_seeds_from_a_latency_model(void **state) {
    (void)state;
    isn_cost_model model;
    isn_cost_model_init(&model);
    isn_gpu_sim_config sim;
    isn_gpu_sim_config_default(&sim);
    isn_cost_model_seed(&model, ISN_DEVICE_GPU, isn_gpu_sim_job_ns, &sim);
    double worst = 0;
    for (int i = 0; i < 200; i++) {
        isn_job_features f = random_features();
        double truth = isn_gpu_sim_job_ns(&f, &sim), predicted = isn_cost_predict_ns(&model, ISN_DEVICE_GPU, &f);
        double error = fabs(predicted - truth) / truth;
        if (error > worst) worst = error;
    }
    print_message("seeded GPU model: worst error %.1f%% over 200 queries\n", 100 * worst);
    assert_true(worst < 0.25);
    assert_int_equal(model.device[ISN_DEVICE_GPU].updates, 0);
}

/* ------------------------------------------------------------------ GPU batch cost */

/* Batches of varied sizes with a large fixed part: the fit separates the fixed part from the
 * part per job; batches all of one size leave the start in place instead of drifting. */
static void batch_cost_separates_fixed_part_from_jobs(void **state) {
    (void)state;
    isn_batch_cost cost;
    isn_batch_cost_init(&cost, 8500, 2000);
    uint64_t seed = 7;
    for (int i = 0; i < 400; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t jobs = 1 + (uint32_t)(seed >> 33) % 64;
        double noise = 1.0 + 0.1 * ((double)((seed >> 20) & 1023) / 1023.0 - 0.5);
        isn_batch_cost_learn(&cost, jobs, (150000.0 + 3000.0 * jobs) * noise);
    }
    double fixed = isn_batch_cost_fixed_ns(&cost), per_job = isn_batch_cost_per_job_ns(&cost);
    print_message("batch cost: fixed %.1f us (truth 150), per job %.2f us (truth 3)\n", fixed / 1e3, per_job / 1e3);
    assert_true(fabs(fixed - 150000.0) < 15000.0);
    assert_true(fabs(per_job - 3000.0) < 600.0);
    assert_int_equal(cost.batches, 400);

    /* A saturated device: every batch full, times noisy. The fit must not drift to a fixed part
     * beyond a batch's time or a negative part per job. */
    isn_batch_cost_init(&cost, 100000, 2000);
    for (int i = 0; i < 20000; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        double noise = 1.0 + 0.3 * ((double)((seed >> 20) & 1023) / 1023.0 - 0.5);
        uint32_t size = (seed >> 40) % 16 == 0 ? 60 + (uint32_t)(seed >> 44) % 4 : 64; /* almost always full */
        isn_batch_cost_learn(&cost, size, 500000.0 * noise);
        assert_true(isn_batch_cost_fixed_ns(&cost) <= 500000.0 * 1.15 + 1.0);
        assert_true(cost.w[1] >= 0);
    }
    double full = isn_batch_cost_fixed_ns(&cost) + 64 * isn_batch_cost_per_job_ns(&cost);
    print_message("saturated: fixed %.0f us + 64 x %.2f us = %.0f us (batches take 500 us)\n",
                  isn_batch_cost_fixed_ns(&cost) / 1e3, isn_batch_cost_per_job_ns(&cost) / 1e3, full / 1e3);
    assert_true(fabs(full - 500000.0) < 75000.0);

    isn_batch_cost_init(&cost, 100000, 2000);
    for (int i = 0; i < 1000; i++) isn_batch_cost_learn(&cost, 8, 100000.0 + 8 * 2000.0);
    assert_true(fabs(isn_batch_cost_fixed_ns(&cost) - 100000.0) < 1000.0);
    assert_true(isfinite(cost.p[0][0]) && isfinite(cost.p[1][1]));
    /* Nonsense measurements are ignored. */
    isn_batch_cost_learn(&cost, 0, 5e6);
    isn_batch_cost_learn(&cost, 8, NAN);
    isn_batch_cost_learn(&cost, 8, -1.0);
    assert_int_equal(cost.batches, 1000);
}

/* Each test draws from the same stream whatever ran before it. */
static int seed_random(void **state) {
    (void)state;
    support_rng_seed(88172645463325252ull);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(edf_pops_earliest_deadline_first, seed_random),
        cmocka_unit_test_setup(edf_is_bounded_and_removes_from_the_middle, seed_random),
        cmocka_unit_test_setup(routing_clear_close_and_overload, seed_random),
        cmocka_unit_test_setup(batch_flushes_on_each_condition, seed_random),
        cmocka_unit_test_setup(cost_model_converges_on_synthetic_times, seed_random),
        cmocka_unit_test_setup(cost_model_learns_per_term_corrections, seed_random),
        cmocka_unit_test_setup(cost_model_remembers_repeated_queries, seed_random),
        cmocka_unit_test_setup(cost_model_predicts_every_device_as_each_alone, seed_random),
        cmocka_unit_test_setup(cost_model_seeds_from_a_latency_model, seed_random),
        cmocka_unit_test_setup(batch_cost_separates_fixed_part_from_jobs, seed_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
