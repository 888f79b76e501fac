/* Admission's measured bounds (scheduler/admission.c) on a fake clock: a device simulated event by
 * event at 3x its capacity, whose cost model runs away (in-flight time that never comes back down),
 * keeps answering at its capacity on time and sheds the rest, and admits everything again when the
 * load drops; the same device judged by the model alone collapses. Also the pieces alone: the service
 * meter's windows, the band the measured wait keeps the model in, a stale scale relaxing, CoDel's
 * standing backlog. No real time is involved. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/scheduler_internal.h"

#define MS 1000000ull

/* One server, each job JOB_NS: capacity 1e9 / JOB_NS jobs/s. */
#define JOB_NS 100000ull
#define CAPACITY_PER_S (1e9 / (double)JOB_NS)
#define DEADLINE_NS (50 * MS)
#define ADMIT_SHARE 0.4

typedef struct {
    uint64_t deadline[1 << 16]; /* FIFO of admitted jobs' deadlines */
    uint32_t head, tail;
    uint64_t busy_until, busy_total, done_total;
    uint64_t on_time, late, shed;
    double model_leak_ns; /* predicted in-flight time that is never taken back */
    isn_service_meter meter;
} sim_device;

static uint32_t queued(const sim_device *d) { return d->tail - d->head; }

/* Runs the device up to `now`: jobs start when the server frees up. */
static void advance(sim_device *d, uint64_t now) {
    while (queued(d) && d->busy_until <= now) {
        uint64_t start = d->busy_until, end = start + JOB_NS;
        if (end > now) break;
        uint64_t deadline = d->deadline[d->head++ & 0xffff];
        d->busy_until = end;
        d->busy_total += JOB_NS;
        d->done_total++;
        if (end <= deadline) d->on_time++;
        else d->late++;
    }
    if (!queued(d) && d->busy_until < now) d->busy_until = now;
}

/* Offers jobs at `rate` per second from `from` for `seconds`; measured: whether admission may use the
 * measured bound. */
static void offer(sim_device *d, double rate, uint64_t from, double seconds, bool measured) {
    uint64_t gap = (uint64_t)(1e9 / rate), end = from + (uint64_t)(seconds * 1e9);
    for (uint64_t now = from; now < end; now += gap) {
        advance(d, now);
        isn_service_meter_sample(&d->meter, d->busy_total, d->done_total, now);
        double ahead = queued(d) + (d->busy_until > now ? 1 : 0);
        double model = d->model_leak_ns + ahead * JOB_NS;
        double measured_wait = measured ? isn_service_meter_wait_ns(&d->meter, ahead, 1) : INFINITY;
        double wait = isn_admission_wait_ns(model, measured_wait, 0.0);
        if (wait + JOB_NS > ADMIT_SHARE * DEADLINE_NS) {
            d->shed++;
            continue;
        }
        d->deadline[d->tail++ & 0xffff] = now + DEADLINE_NS;
        d->model_leak_ns += JOB_NS / 4.0; /* a quarter of each job's prediction is never given back */
    }
    advance(d, end + DEADLINE_NS);
}

static void overload_keeps_goodput_and_recovers(void **state) {
    (void)state;
    static sim_device d;
    memset(&d, 0, sizeof d);
    isn_service_meter_init(&d.meter, 0);
    double seconds = 3;
    offer(&d, 3 * CAPACITY_PER_S, 0, seconds, true);
    /* at capacity, on time; the rest shed, none late */
    assert_true((double)d.on_time >= 0.9 * CAPACITY_PER_S * seconds);
    assert_int_equal(d.late, 0);
    assert_true((double)d.shed >= 0.6 * 3 * CAPACITY_PER_S * seconds);
    /* the spike ends: at half the capacity everything is admitted again */
    uint64_t shed_before = d.shed, on_time_before = d.on_time;
    offer(&d, 0.5 * CAPACITY_PER_S, (uint64_t)(seconds * 1e9) + 100 * MS, 1.0, true);
    assert_int_equal(d.shed, shed_before);
    assert_true((double)(d.on_time - on_time_before) >= 0.99 * 0.5 * CAPACITY_PER_S);
}

static void the_model_alone_collapses(void **state) {
    (void)state;
    static sim_device d;
    memset(&d, 0, sizeof d);
    isn_service_meter_init(&d.meter, 0);
    offer(&d, 3 * CAPACITY_PER_S, 0, 3, false);
    /* the leak reaches the admission budget after a few hundred jobs: then nothing is admitted */
    assert_true((double)d.on_time < 0.1 * CAPACITY_PER_S * 3);
    uint64_t on_time_before = d.on_time;
    offer(&d, 0.5 * CAPACITY_PER_S, 3100 * MS, 1.0, false);
    assert_int_equal(d.on_time, on_time_before); /* and it never recovers */
}

static void meter_measures_busy_time_per_job_in_windows(void **state) {
    (void)state;
    isn_service_meter m;
    isn_service_meter_init(&m, 0);
    assert_true(isinf(isn_service_meter_wait_ns(&m, 10, 1)));
    isn_service_meter_sample(&m, 4 * MS, 40, SCHED_METER_WINDOW_NS / 2); /* window not over: nothing */
    assert_true(m.job_ns == 0);
    isn_service_meter_sample(&m, 4 * MS, 40, SCHED_METER_WINDOW_NS);
    assert_true(fabs(m.job_ns - 100000.0) < 1e-6);
    assert_true(fabs(isn_service_meter_wait_ns(&m, 8, 4) - 200000.0) < 1e-6);
    /* a window with too few jobs says nothing yet */
    isn_service_meter_sample(&m, 24 * MS, 41, 2 * SCHED_METER_WINDOW_NS);
    assert_true(fabs(m.job_ns - 100000.0) < 1e-6);
    /* ... until it has stayed open for the long window: slow jobs are measured too */
    isn_service_meter_sample(&m, 24 * MS, 41, SCHED_METER_WINDOW_NS + SCHED_METER_LONG_WINDOW_NS);
    assert_true(m.job_ns > 100000.0);
}

static void admission_wait_is_capped_and_floored(void **state) {
    (void)state;
    assert_true(isn_admission_wait_ns(1e9, 1e6, 0) == SCHED_MEASURED_SLACK * 1e6);
    assert_true(isn_admission_wait_ns(1e4, 1e6, 0) == SCHED_MEASURED_FLOOR * 1e6); /* an under-predicting model too */
    assert_true(isn_admission_wait_ns(8e5, 1e6, 0) == 8e5);                         /* within the band: the model's */
    assert_true(isn_admission_wait_ns(1e5, INFINITY, 0) == 1e5);
    assert_true(isn_admission_wait_ns(1e9, 1e6, 5e6) == 5e6); /* the oldest job's age is a floor */
}

static void stale_scale_relaxes_to_one(void **state) {
    (void)state;
    assert_true(isn_scale_relaxed(8.0, 1000, 1000) == 8.0);
    double later = isn_scale_relaxed(8.0, 0, (uint64_t)SCHED_SCALE_RELAX_NS);
    assert_true(later < 8.0 && later > 1.0);
    assert_true(fabs(isn_scale_relaxed(8.0, 0, (uint64_t)(20 * SCHED_SCALE_RELAX_NS)) - 1.0) < 1e-6);
    assert_true(isn_scale_relaxed(0.5, 0, (uint64_t)(20 * SCHED_SCALE_RELAX_NS)) > 0.99);
}

static void codel_drops_only_in_a_standing_backlog(void **state) {
    (void)state;
    isn_codel c;
    isn_codel_init(&c, 0);
    double budget = 20.0 * MS;
    /* a burst: long waits, but one job in the interval went through quickly */
    isn_codel_observe(&c, 9.0 * MS, 10 * MS, 0);
    isn_codel_observe(&c, 0.1 * MS, 20 * MS, 0);
    isn_codel_observe(&c, 9.0 * MS, SCHED_CODEL_INTERVAL_NS, 0);
    assert_false(c.standing);
    assert_false(isn_codel_drops(&c, 9.0 * MS, budget));
    /* a whole interval whose least wait stayed above the target */
    for (uint64_t t = SCHED_CODEL_INTERVAL_NS + MS; t <= 2 * SCHED_CODEL_INTERVAL_NS; t += MS)
        isn_codel_observe(&c, SCHED_CODEL_TARGET_NS + MS, t, 0);
    assert_true(c.standing);
    assert_true(isn_codel_drops(&c, SCHED_CODEL_TARGET_NS + MS, budget));
    assert_false(isn_codel_drops(&c, SCHED_CODEL_TARGET_NS / 2, budget));
    /* a short budget lowers the target to its share */
    assert_true(isn_codel_drops(&c, 1.5 * MS, 4.0 * MS));
    /* the backlog drains: one quick job in an interval ends the standing state */
    isn_codel_observe(&c, 0.1 * MS, 2 * SCHED_CODEL_INTERVAL_NS + MS, 0);
    isn_codel_observe(&c, 0.1 * MS, 3 * SCHED_CODEL_INTERVAL_NS + MS, 0);
    assert_false(c.standing);
}

/* A preparation queue served by one preparer at PREP_NS a job, offered 3x what it prepares for 2 s
 * (the first 0.5 s, while CoDel finds the standing backlog, not counted), then half of it for 1 s. With
 * the arrival check's half of CoDel, what is refused is refused on arrival, and the requests dropped
 * after waiting in the queue are a small share of the sheds; without it, every shed is a drop after a
 * wait of at least CoDel's target. Returns the counted drops after a wait; *refused_on_arrival counts
 * the counted arrival refusals, *refused_after counts those in the last 0.7 s at half the capacity. */
#define PREP_NS 100000ull
static double longest_served_wait_ns; /* of the last prepare_queue_sheds run's counted preparations */

static uint64_t prepare_queue_sheds_as(bool arrival_check, bool drop_waited, uint64_t *refused_on_arrival,
                                       uint64_t *prepared, uint64_t *refused_after) {
    static uint64_t enqueued[1 << 16];
    uint32_t head = 0, tail = 0;
    isn_codel codel;
    isn_codel_init(&codel, 0);
    double budget = ADMIT_SHARE * (double)DEADLINE_NS;
    uint64_t busy_until = 0, dropped = 0, refusals = 0;
    *refused_on_arrival = *prepared = *refused_after = 0;
    longest_served_wait_ns = 0;
    for (uint64_t now = 0; now < 3000 * MS;) {
        bool counted = now >= 500 * MS && now < 2000 * MS;
        while (head != tail && busy_until <= now) { /* the preparer takes jobs in order */
            uint64_t taken = busy_until > enqueued[head & 0xffff] ? busy_until : enqueued[head & 0xffff];
            double sojourn = (double)(taken - enqueued[head & 0xffff]);
            head++;
            isn_codel_observe(&codel, sojourn, taken, refusals);
            /* past its admission budget a job is refused whatever the mode (the scheduler's "late") */
            if (sojourn > budget || (drop_waited && isn_codel_drops(&codel, sojourn, budget))) {
                if (counted) dropped++;
                busy_until = taken;
            } else {
                if (counted) (*prepared)++;
                if (counted && sojourn > longest_served_wait_ns) longest_served_wait_ns = sojourn;
                busy_until = taken + PREP_NS;
            }
        }
        double preparing = (double)(tail - head) * (double)PREP_NS;
        if (arrival_check && isn_codel_refuses_arrival(codel.bounding, preparing, budget)) {
            refusals++;
            if (counted) (*refused_on_arrival)++;
            if (now >= 2300 * MS) (*refused_after)++;
        } else if (tail - head < (1u << 16)) {
            enqueued[tail++ & 0xffff] = now;
        }
        now += now < 2000 * MS ? PREP_NS / 3 : 2 * PREP_NS;
    }
    return dropped;
}

static uint64_t prepare_queue_sheds(bool arrival_check, uint64_t *refused_on_arrival, uint64_t *prepared,
                                    uint64_t *refused_after) {
    return prepare_queue_sheds_as(arrival_check, true, refused_on_arrival, prepared, refused_after);
}

static void codel_refuses_on_arrival_what_it_would_drop_after_a_wait(void **state) {
    (void)state;
    assert_false(isn_codel_refuses_arrival(false, 40.0 * MS, 400.0 * MS)); /* a burst passes */
    assert_true(isn_codel_refuses_arrival(true, SCHED_CODEL_TARGET_NS, 40.0 * MS));
    assert_false(isn_codel_refuses_arrival(true, SCHED_CODEL_ARRIVAL_SHARE * SCHED_CODEL_TARGET_NS / 2, 40.0 * MS));
    assert_true(isn_codel_refuses_arrival(true, 0.75 * MS, 4.0 * MS)); /* a short budget's share */

    uint64_t arrival = 0, prepared = 0, after = 0;
    uint64_t drops = prepare_queue_sheds(true, &arrival, &prepared, &after);
    print_message("with the arrival check: %llu refused on arrival, %llu dropped after a wait, %llu prepared, "
                  "%llu refused once the load fell\n",
                  (unsigned long long)arrival, (unsigned long long)drops, (unsigned long long)prepared,
                  (unsigned long long)after);
    assert_true(arrival > 0);
    assert_true(drops * 100 < arrival);                          /* under 1% of the sheds cost a wait */
    assert_true((double)prepared >= 0.9 * 1500 * MS / PREP_NS); /* the preparer stays busy */
    assert_int_equal(after, 0);                                  /* the bound lets go when the load falls */

    uint64_t drops_only = prepare_queue_sheds(false, &arrival, &prepared, &after);
    assert_int_equal(arrival, 0);
    assert_true(drops_only > 100 * drops);
}

/* scheduler.codel_drop_waited = false: no request is dropped for having waited past the target in a
 * standing backlog; the arrival check alone bounds the queue. At 3x the preparer's capacity it still
 * refuses the excess on arrival, keeps the preparer busy, keeps every served request's wait under the
 * target, and lets go when the load falls. */
static void the_arrival_check_alone_bounds_the_queue(void **state) {
    (void)state;
    uint64_t arrival = 0, prepared = 0, after = 0;
    uint64_t dropped = prepare_queue_sheds_as(true, false, &arrival, &prepared, &after);
    print_message("without drops after a wait: %llu refused on arrival, %llu dropped (past the budget), %llu prepared, "
                  "longest wait %.2f ms\n",
                  (unsigned long long)arrival, (unsigned long long)dropped, (unsigned long long)prepared,
                  longest_served_wait_ns / 1e6);
    assert_true(arrival > 0);
    assert_int_equal(dropped, 0);
    assert_true((double)prepared >= 0.9 * 1500 * MS / PREP_NS);
    assert_true(longest_served_wait_ns <= SCHED_CODEL_TARGET_NS);
    assert_int_equal(after, 0);
    /* without the arrival check either, nothing bounds the queue but the budget: waits grow to it */
    prepare_queue_sheds_as(false, false, &arrival, &prepared, &after);
    assert_true(longest_served_wait_ns > SCHED_CODEL_TARGET_NS);
}

/* One preparer at PREP_NS a job offered `load` times what it prepares (evenly spaced arrivals), which
 * stops for stall_ns at 300 ms, with the arrival check and no drops after a wait; returns the arrivals
 * refused, and the longest wait of a prepared job in *longest_wait_ns. */
static uint64_t stalled_preparer_refusals(double load, uint64_t stall_ns, double *longest_wait_ns) {
    static uint64_t enqueued[1 << 16];
    uint32_t head = 0, tail = 0;
    isn_codel codel;
    isn_codel_init(&codel, 0);
    double budget = ADMIT_SHARE * (double)DEADLINE_NS;
    uint64_t busy_until = 0, refusals = 0;
    bool stalled = false;
    *longest_wait_ns = 0;
    for (uint64_t now = 0; now < 1500 * MS; now += (uint64_t)((double)PREP_NS / load)) {
        if (!stalled && now >= 300 * MS) {
            busy_until = (busy_until > now ? busy_until : now) + stall_ns;
            stalled = true;
        }
        while (head != tail && busy_until <= now) {
            uint64_t taken = busy_until > enqueued[head & 0xffff] ? busy_until : enqueued[head & 0xffff];
            double sojourn = (double)(taken - enqueued[head & 0xffff]);
            head++;
            isn_codel_observe(&codel, sojourn, taken, refusals);
            if (sojourn > *longest_wait_ns) *longest_wait_ns = sojourn;
            busy_until = taken + PREP_NS;
        }
        double preparing = (double)(tail - head) * (double)PREP_NS;
        if (isn_codel_refuses_arrival(codel.bounding, preparing, budget)) refusals++;
        else if (tail - head < (1u << 16)) enqueued[tail++ & 0xffff] = now;
    }
    return refusals;
}

/* Near capacity a stall leaves a backlog that drains for longer than CoDel's interval (at 95% of
 * capacity 15 ms of arrivals take about 300 ms to work off) while every request in it meets its
 * deadline: it shrinks, so it starts no bound, and no arrival is refused for it. Past capacity the
 * same stall's backlog grows or holds, and the bound still takes hold. */
static void a_stalls_draining_backlog_starts_no_bound(void **state) {
    (void)state;
    double longest = 0;
    uint64_t refused = stalled_preparer_refusals(0.95, 15 * MS, &longest);
    print_message("at 0.95 of capacity, a 15 ms stall: %llu refused, longest wait %.2f ms\n", (unsigned long long)refused,
                  longest / 1e6);
    assert_true(longest > SCHED_CODEL_TARGET_NS);             /* the backlog outlasted the target ... */
    assert_true(longest < ADMIT_SHARE * (double)DEADLINE_NS); /* ... within every request's budget */
    assert_int_equal(refused, 0);

    refused = stalled_preparer_refusals(1.1, 15 * MS, &longest);
    print_message("at 1.1 of capacity, a 15 ms stall: %llu refused, longest wait %.2f ms\n", (unsigned long long)refused,
                  longest / 1e6);
    assert_true(refused > 0);
}

/* The preparation queue's departure meter: it measures only while the takers have a backlog (a window
 * opens at a take leaving at least `backlog` behind and is dropped when one leaves none: then the
 * arrivals set the pace), closes after SCHED_DEPARTURE_MIN_JOBS jobs and SCHED_DEPARTURE_MIN_NS, and
 * averages the time between departures over its windows. */
static void departure_meter_measures_the_drain_of_a_backlog(void **state) {
    (void)state;
    isn_departure_meter m = {0};
    uint64_t t = 1000 * MS;
    /* takes that leave less than the backlog behind open no window */
    for (int i = 0; i < 200; i++) isn_departure_meter_taken(&m, 3, 4, t += 10000);
    assert_true(m.per_job_ns == 0.0);
    /* a backlog drained at one job per 50 us: measured once the window holds enough jobs and time */
    isn_departure_meter_taken(&m, 100, 4, t);
    for (uint32_t i = 0; i < SCHED_DEPARTURE_MIN_JOBS - 1; i++) isn_departure_meter_taken(&m, 50, 4, t += 50000);
    assert_true(m.per_job_ns == 0.0); /* one job short */
    isn_departure_meter_taken(&m, 50, 4, t += 50000);
    assert_true(fabs(m.per_job_ns - 50000.0) < 1.0);
    /* many jobs taken at once within less than the least time: not yet a window */
    for (uint32_t i = 0; i < 2 * SCHED_DEPARTURE_MIN_JOBS; i++) isn_departure_meter_taken(&m, 50, 4, t + 1000);
    assert_true(fabs(m.per_job_ns - 50000.0) < 1.0);
    /* the queue emptied: that window says nothing, and the next opens only with a backlog again */
    isn_departure_meter_taken(&m, 0, 4, t += 1000000);
    for (uint32_t i = 0; i < 2 * SCHED_DEPARTURE_MIN_JOBS; i++) isn_departure_meter_taken(&m, 2, 4, t += 1000000);
    assert_true(fabs(m.per_job_ns - 50000.0) < 1.0);
    /* a slower drain (200 us a job) moves the average by the newest window's weight */
    isn_departure_meter_taken(&m, 100, 4, t);
    for (uint32_t i = 0; i < SCHED_DEPARTURE_MIN_JOBS; i++) isn_departure_meter_taken(&m, 90, 4, t += 200000);
    assert_true(fabs(m.per_job_ns - (50000.0 + SCHED_METER_WEIGHT * 150000.0)) < 1.0);
}

/* One stall inside a window (the node stopped 30 ms while the queue held a backlog) is not the queue's
 * pace: the window measures the takes around it. Regular long gaps (the workers prepare in bursts
 * between long searches), and a hold shorter than a window's least time, are the pace, and count
 * whole. */
static void departure_meter_leaves_a_stall_out(void **state) {
    (void)state;
    isn_departure_meter m = {0};
    uint64_t t = 1000 * MS;
    isn_departure_meter_taken(&m, 100, 4, t);
    for (int i = 0; i < 32; i++) isn_departure_meter_taken(&m, 90, 4, t += 10000);
    isn_departure_meter_taken(&m, 90, 4, t += 30 * MS);
    for (int i = 0; i < 200; i++) isn_departure_meter_taken(&m, 80, 4, t += 10000);
    assert_true(fabs(m.per_job_ns - 10000.0) < 1.0);

    m = (isn_departure_meter){0};
    isn_departure_meter_taken(&m, 100, 4, t);
    for (int burst = 0; burst < 64; burst++) {
        t += 2 * MS;
        for (int i = 0; i < 4; i++) isn_departure_meter_taken(&m, 90, 4, t);
    }
    assert_true(fabs(m.per_job_ns - 2.0 * MS / 4) < 1.0);

    /* a hold shorter than a window's least time is the pace too, however long beside the other gaps */
    m = (isn_departure_meter){0};
    isn_departure_meter_taken(&m, 100, 4, t);
    for (uint32_t i = 0; i < SCHED_DEPARTURE_MIN_JOBS; i++) isn_departure_meter_taken(&m, 90, 4, t += 1000);
    isn_departure_meter_taken(&m, 90, 4, t += 950000);
    assert_true(fabs(m.per_job_ns - (SCHED_DEPARTURE_MIN_JOBS * 1000.0 + 950000.0) / (SCHED_DEPARTURE_MIN_JOBS + 1)) < 1.0);
}

/* One preparer at PREP_NS a job, offered 0.3 of what it prepares in bursts of 8 (a loop reads several
 * requests at once), stopped with the whole node for 30 ms mid-burst: the stall's arrivals are read at
 * its end. An arrival is refused when the jobs ahead of it times the pace the departure meter measured
 * (at least PREP_NS) would hold it past its budget. Returns the refusals, and the meter's pace at the
 * end in *per_job_ns. */
static uint64_t node_stall_refusals(double *per_job_ns) {
    const uint64_t tick = 10000, burst = 8, every = 2660 * 1000, stall_ns = 30 * MS;
    const uint64_t stall_from = (300 * MS / every + 1) * every + 3 * PREP_NS, budget = 20 * MS;
    isn_departure_meter meter = {0};
    uint32_t head = 0, tail = 0;
    uint64_t unread = 0, busy_until = 0, refusals = 0;
    for (uint64_t now = 0; now < 600 * MS; now += tick) {
        if (now % every == 0) unread += burst;
        if (now >= stall_from && now < stall_from + stall_ns) continue;
        for (; unread; unread--) {
            double pace = meter.per_job_ns > (double)PREP_NS ? meter.per_job_ns : (double)PREP_NS;
            if ((double)(tail - head) * pace > (double)budget) refusals++;
            else tail++;
        }
        if (head != tail && busy_until <= now) {
            head++;
            isn_departure_meter_taken(&meter, tail - head, 4, now);
            busy_until = now + PREP_NS;
        }
    }
    *per_job_ns = meter.per_job_ns;
    return refusals;
}

/* After a stall of the whole node the backlog it left drains at the preparers' pace (about 9 ms for the
 * stall's arrivals here, within the 20 ms budget): nothing is refused for it. With the stall counted
 * as the queue's pace, the window measured 5.6 times the preparation time and refused arrivals. */
static void a_node_stall_teaches_no_slow_pace(void **state) {
    (void)state;
    double per_job = 0;
    uint64_t refused = node_stall_refusals(&per_job);
    print_message("a 30 ms stall at 0.3 of capacity: %llu refused, pace %.1f us\n", (unsigned long long)refused,
                  per_job / 1e3);
    assert_int_equal(refused, 0);
    assert_true(per_job > 0.0 && fabs(per_job - (double)PREP_NS) < 0.02 * (double)PREP_NS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(overload_keeps_goodput_and_recovers),
        cmocka_unit_test(the_model_alone_collapses),
        cmocka_unit_test(meter_measures_busy_time_per_job_in_windows),
        cmocka_unit_test(admission_wait_is_capped_and_floored),
        cmocka_unit_test(stale_scale_relaxes_to_one),
        cmocka_unit_test(codel_drops_only_in_a_standing_backlog),
        cmocka_unit_test(codel_refuses_on_arrival_what_it_would_drop_after_a_wait),
        cmocka_unit_test(the_arrival_check_alone_bounds_the_queue),
        cmocka_unit_test(a_stalls_draining_backlog_starts_no_bound),
        cmocka_unit_test(departure_meter_measures_the_drain_of_a_backlog),
        cmocka_unit_test(departure_meter_leaves_a_stall_out),
        cmocka_unit_test(a_node_stall_teaches_no_slow_pace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
