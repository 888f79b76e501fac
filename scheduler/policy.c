/* The scheduler's decisions as pure functions: where a job goes, and when a GPU batch must leave. */
#include <math.h>

#include "scheduler/scheduler_internal.h"

isn_route isn_route_decide(const isn_route_input *in, isn_device_kind *best) {
    double completion[ISN_DEVICE_KINDS];
    for (int d = 0; d < ISN_DEVICE_KINDS; d++)
        completion[d] = in->available[d] ? in->wait_ns[d] + in->service_ns[d] : INFINITY;
    isn_device_kind winner = completion[ISN_DEVICE_GPU] < completion[ISN_DEVICE_CPU] ? ISN_DEVICE_GPU : ISN_DEVICE_CPU;
    isn_device_kind other = winner == ISN_DEVICE_CPU ? ISN_DEVICE_GPU : ISN_DEVICE_CPU;
    *best = winner;
    if (in->remaining_ns > 0 && !(completion[winner] <= in->remaining_ns)) {
        /* Degrading helps only a job that starts with time to do something: early termination
         * shortens the run, not the wait. Only the CPU can stop a query early. */
        double left = in->remaining_ns - in->wait_ns[ISN_DEVICE_CPU];
        bool can_start = in->available[ISN_DEVICE_CPU] && left > 0;
        /* The work queued ahead took little of the budget: what misses the deadline is the query's
         * own cost, not overload, so it runs and answers with what it found by then. */
        if (can_start && in->wait_ns[ISN_DEVICE_CPU] <= in->max_queue_share * in->remaining_ns) {
            *best = ISN_DEVICE_CPU;
            return ISN_ROUTE_DEGRADE;
        }
        if (in->degrade_ok && can_start && left >= in->degrade_min_share * in->service_ns[ISN_DEVICE_CPU]) {
            *best = ISN_DEVICE_CPU;
            return ISN_ROUTE_DEGRADE;
        }
        return ISN_ROUTE_SHED;
    }
    if (!in->available[other] || completion[winner] * (1.0 + in->margin) < completion[other])
        return winner == ISN_DEVICE_CPU ? ISN_ROUTE_CPU : ISN_ROUTE_GPU;
    return ISN_ROUTE_UNDECIDED;
}

double isn_job_seed_threshold(const isn_job_features *features, isn_mode mode, uint32_t k, bool global_stats) {
    bool usable = features->threshold_probe > 0.0 && mode == ISN_MODE_OR && !global_stats && k <= features->k;
    return usable ? features->threshold_probe : 0.0;
}

static const char *const FLUSH_NAMES[ISN_FLUSH_REASONS] = {"full", "memory", "deadline", "linger"};

const char *isn_flush_reason_name(isn_flush_reason reason) {
    return (unsigned)reason < ISN_FLUSH_REASONS ? FLUSH_NAMES[reason] : "?";
}

uint64_t isn_job_memory_bytes(const isn_job *job) {
    /* Compressed postings run at about a byte per posting for doc gaps and frequencies; block
     * metadata adds 16 bytes per block. */
    return job->features.total + 16 * job->features.blocks;
}

bool isn_batch_should_flush(const isn_batch_policy *policy, isn_job *const *jobs, uint32_t n, uint64_t next_job_bytes,
                            uint64_t first_added_ns, uint64_t now_ns, isn_flush_reason *reason,
                            uint64_t *wait_until_ns) {
    *wait_until_ns = UINT64_MAX;
    if (n == 0) return false;
    if (n >= policy->max_batch) {
        *reason = ISN_FLUSH_FULL;
        return true;
    }
    uint64_t bytes = 0, earliest = UINT64_MAX;
    double service = policy->launch_ns;
    for (uint32_t i = 0; i < n; i++) {
        bytes += isn_job_memory_bytes(jobs[i]);
        service += jobs[i]->predicted_ns[ISN_DEVICE_GPU];
        if (jobs[i]->deadline_ns && jobs[i]->deadline_ns < earliest) earliest = jobs[i]->deadline_ns;
    }
    if (next_job_bytes && bytes + next_job_bytes > policy->memory_budget) {
        *reason = ISN_FLUSH_MEMORY;
        return true;
    }
    if (earliest != UINT64_MAX) {
        double latest_start = (double)earliest - (double)policy->safety_ns - service;
        if ((double)now_ns >= latest_start) {
            *reason = ISN_FLUSH_DEADLINE;
            return true;
        }
        *wait_until_ns = (uint64_t)latest_start;
    }
    uint64_t linger_end = first_added_ns + policy->linger_ns;
    if (now_ns >= linger_end) {
        *reason = ISN_FLUSH_LINGER;
        return true;
    }
    if (linger_end < *wait_until_ns) *wait_until_ns = linger_end;
    return false;
}
