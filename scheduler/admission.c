/* Admission's measured bounds (DESIGN.md section 7): what the cost model may claim about a wait is
 * capped by what the devices were measured to do, a scale nobody feeds relaxes, and the preparation
 * queue drops, CoDel-style, what has waited too long to be worth preparing. Pure functions over
 * explicit times, so that tests drive them with a fake clock. */
#include <math.h>

#include "scheduler/scheduler_internal.h"

void isn_service_meter_init(isn_service_meter *meter, uint64_t now_ns) {
    *meter = (isn_service_meter){.window_start_ns = now_ns};
}

void isn_service_meter_sample(isn_service_meter *meter, uint64_t busy_ns_total, uint64_t jobs_total, uint64_t now_ns) {
    if (now_ns < meter->window_start_ns + SCHED_METER_WINDOW_NS) return;
    uint64_t jobs = jobs_total - meter->jobs_at_start, busy = busy_ns_total - meter->busy_at_start;
    /* Slow jobs fill a window slowly: it stays open (up to SCHED_METER_LONG_WINDOW_NS) until enough
     * finished, and then says what even one of them took. */
    bool long_enough = now_ns >= meter->window_start_ns + SCHED_METER_LONG_WINDOW_NS;
    if (jobs < SCHED_METER_MIN_JOBS && !(long_enough && jobs > 0)) {
        if (long_enough) {
            meter->window_start_ns = now_ns;
            meter->busy_at_start = busy_ns_total;
        }
        return;
    }
    double job_ns = (double)busy / (double)jobs;
    meter->job_ns = meter->job_ns > 0 ? meter->job_ns + SCHED_METER_WEIGHT * (job_ns - meter->job_ns) : job_ns;
    meter->measured_ns = now_ns;
    meter->window_start_ns = now_ns;
    meter->jobs_at_start = jobs_total;
    meter->busy_at_start = busy_ns_total;
}

double isn_service_meter_wait_ns(const isn_service_meter *meter, double ahead, double servers) {
    if (!(meter->job_ns > 0) || !(servers > 0)) return INFINITY;
    return ahead * meter->job_ns / servers;
}

void isn_departure_meter_taken(isn_departure_meter *meter, uint32_t left_behind, uint32_t backlog, uint64_t now_ns) {
    if (!left_behind) {
        meter->window_start_ns = 0;
        return;
    }
    if (!meter->window_start_ns) {
        if (left_behind >= backlog)
            *meter = (isn_departure_meter){
                .per_job_ns = meter->per_job_ns, .window_start_ns = now_ns, .last_taken_ns = now_ns};
        return;
    }
    uint64_t gap = now_ns > meter->last_taken_ns ? now_ns - meter->last_taken_ns : 0;
    if (gap > meter->longest_gap_ns) meter->longest_gap_ns = gap;
    meter->last_taken_ns = now_ns;
    meter->taken++;
    uint64_t elapsed = now_ns > meter->window_start_ns ? now_ns - meter->window_start_ns : 0;
    uint32_t jobs = meter->taken;
    if (meter->longest_gap_ns >= SCHED_DEPARTURE_MIN_NS && meter->longest_gap_ns > elapsed - meter->longest_gap_ns) {
        elapsed -= meter->longest_gap_ns;
        jobs--;
    }
    if (jobs < SCHED_DEPARTURE_MIN_JOBS || elapsed < SCHED_DEPARTURE_MIN_NS) return;
    double per_job = (double)elapsed / (double)jobs;
    meter->per_job_ns =
        meter->per_job_ns > 0 ? meter->per_job_ns + SCHED_METER_WEIGHT * (per_job - meter->per_job_ns) : per_job;
    *meter = (isn_departure_meter){.per_job_ns = meter->per_job_ns, .window_start_ns = now_ns, .last_taken_ns = now_ns};
}

double isn_admission_wait_ns(double model_ns, double measured_ns, double oldest_ns) {
    double wait = model_ns;
    if (isfinite(measured_ns)) {
        double high = SCHED_MEASURED_SLACK * measured_ns, low = SCHED_MEASURED_FLOOR * measured_ns;
        wait = wait > high ? high : wait < low ? low : wait;
    }
    return wait > oldest_ns ? wait : oldest_ns;
}

double isn_scale_relaxed(double scale, uint64_t learned_ns, uint64_t now_ns) {
    if (now_ns <= learned_ns || scale == 1.0) return scale;
    return 1.0 + (scale - 1.0) * exp(-(double)(now_ns - learned_ns) / SCHED_SCALE_RELAX_NS);
}

void isn_codel_init(isn_codel *codel, uint64_t now_ns) {
    *codel = (isn_codel){.interval_end_ns = now_ns + SCHED_CODEL_INTERVAL_NS, .min_sojourn_ns = INFINITY,
                         .first_sojourn_ns = NAN};
}

void isn_codel_observe(isn_codel *codel, double sojourn_ns, uint64_t now_ns, uint64_t arrival_refusals) {
    if (isnan(codel->first_sojourn_ns)) codel->first_sojourn_ns = sojourn_ns;
    if (sojourn_ns < codel->min_sojourn_ns) codel->min_sojourn_ns = sojourn_ns;
    if (now_ns < codel->interval_end_ns) return;
    /* The least wait of an interval above the target: the queue never emptied below it, a standing
     * backlog rather than a burst passing through. It starts the bound unless it shrank through the
     * interval (the last job, this one, waited less than the first), as a stall's backlog being
     * worked off does. */
    codel->standing = codel->min_sojourn_ns > SCHED_CODEL_TARGET_NS;
    bool shrank = sojourn_ns < codel->first_sojourn_ns;
    codel->bounding = (codel->standing && !shrank) ||
                      (codel->bounding && arrival_refusals != codel->refusals_at_interval_start);
    codel->refusals_at_interval_start = arrival_refusals;
    codel->min_sojourn_ns = INFINITY;
    codel->first_sojourn_ns = NAN;
    codel->interval_end_ns = now_ns + SCHED_CODEL_INTERVAL_NS;
}

double isn_codel_target_ns(double admit_budget_ns) {
    double target = SCHED_CODEL_TARGET_NS;
    if (admit_budget_ns > 0 && SCHED_CODEL_BUDGET_SHARE * admit_budget_ns < target)
        target = SCHED_CODEL_BUDGET_SHARE * admit_budget_ns;
    return target;
}

bool isn_codel_drops(const isn_codel *codel, double sojourn_ns, double admit_budget_ns) {
    return codel->standing && sojourn_ns > isn_codel_target_ns(admit_budget_ns);
}

bool isn_codel_refuses_arrival(bool bounding, double preparing_ns, double admit_budget_ns) {
    return bounding && preparing_ns > SCHED_CODEL_ARRIVAL_SHARE * isn_codel_target_ns(admit_budget_ns);
}
