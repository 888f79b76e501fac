#!/usr/bin/env python3
"""What isnd's refusals cost inside the node over a run: the difference of two /metrics scrapes
(files BEFORE and AFTER). Prints one JSON object: refusals counted by isn_shed_duration_seconds, the
share answered within 1 ms of arrival, the p99 (the upper bound of the histogram bucket that holds
it), and where the scheduler refused them (at HEADERS, on arrival by CoDel's bound, unprepared after
a wait, by routing once prepared); the loops' iterations, with how many took over 1 ms, the loops' busy
time by part (reads, replies, flushes, other) over all iterations and over those past 1 ms, with the
reads and requests each of those held, their socket reads and writes against the requests they began (loop_io),
and the stalls they saw; the CPU's first stage per job (its wall time, and on the jobs isnd samples its worker's CPU
time, which leaves out the waits for a core that the node's own threads cause), the machine's speed as the
node's own work measures it; the GPU batches sent, by why, and their mean size; and the process's CPU time
beside the loops' busy time (what is left is mostly the workers' and the dispatchers').
The client's view (isn-bench's shed_latency_us) adds the network and the load generator's own delays.

    python3 bench/node_sheds.py before.prom after.prom
"""
import json
import re
import sys

# fewer CPU jobs than this over a run make their mean time a poor measure of the machine's speed
MIN_CPU_JOBS = 1000
MIN_SAMPLED_JOBS = 125


def parse_metrics(text):
    """Prometheus text format: series (name and labels as written) -> value."""
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        try:
            values[name] = float(value)
        except ValueError:
            pass
    return values


def scrape(path):
    with open(path) as f:
        return parse_metrics(f.read())


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, after = scrape(sys.argv[1]), scrape(sys.argv[2])
    delta = lambda name: after.get(name, 0.0) - before.get(name, 0.0)
    def cumulative(family):
        """A histogram's (upper bound, count) pairs over the run, smallest bound first."""
        pairs = []
        for name in after:
            m = re.fullmatch(family + r'_bucket\{le="([^"]+)"\}', name)
            if m:
                pairs.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), delta(name)))
        return sorted(pairs)

    def mean_ms(total, count):
        n = delta(count)
        return round(delta(total) / n * 1000, 3) if n else None

    buckets = cumulative("isn_shed_duration_seconds")
    count = delta("isn_shed_duration_seconds_count")
    within_1ms = next((c for le, c in buckets if le >= 0.001), 0.0)
    p99 = next((le for le, c in buckets if count and c >= 0.99 * count), None)
    # the loops' iterations (isn_loop_iteration_seconds): a request reaching its socket during a long one
    # waits for the rest of it
    iterations = delta("isn_loop_iteration_seconds_count")
    iterations_within_1ms = next((c for le, c in cumulative("isn_loop_iteration_seconds") if le >= 0.001), 0.0)
    # the machine's speed as the node's own work measures it: the CPU's first stage per job (the same log's
    # queries; admission changes how many, not what each costs), so that a point answered fewer on time
    # because the machine ran slower can be told from one where admission let less in
    cpu_jobs = delta('isn_scheduler_ran_total{device="cpu"}')
    cpu_retrieval = delta('isn_search_stage_duration_seconds_sum{stage="retrieval",device="cpu"}')
    # the same on the sampled jobs whose worker's CPU time was taken (isnd samples one in a few): CPU time
    # leaves out a worker's waits for a core mid-search, which the node's own threads cause when they
    # outnumber its cores; wall over CPU time is how much of the wall time those waits were
    sampled_jobs = delta("isn_search_retrieval_sampled_jobs_total")
    sampled_cpu = delta('isn_search_retrieval_sampled_seconds_total{clock="cpu"}')
    sampled_wall = delta('isn_search_retrieval_sampled_seconds_total{clock="wall"}')
    # GPU batches by why they were sent (isn_scheduler_batches_total{reason}), any reason the node names: how its
    # batches formed beside the CPU time they took
    batches_by_reason = {}
    for name in after:
        m = re.fullmatch(r'isn_scheduler_batches_total\{reason="([^"]+)"\}', name)
        if m and delta(name):
            batches_by_reason[m.group(1)] = int(delta(name))
    batches = sum(batches_by_reason.values())
    # the loops' busy time by part (isn_loop_work_seconds_total{part}), over all iterations and over those past
    # 1 ms, with what those read: what a long iteration, behind which a refusal waits, was spent on
    def by_part(family):
        parts = {}
        for name in after:
            m = re.fullmatch(family + r'\{part="([^"]+)"\}', name)
            if m:
                parts[m.group(1)] = round(delta(name), 6)
        return parts
    long_iterations = delta("isn_loop_long_iterations_total")
    # the loops' socket reads and writes against the requests they began: how many a system call carried
    loop_reads, loop_writes = delta("isn_loop_reads_total"), delta("isn_loop_writes_total")
    loop_requests = delta("isn_loop_requests_total")
    print(json.dumps({
        "node_shed": int(count),
        "node_shed_within_1ms_share": round(within_1ms / count, 4) if count else None,
        "node_shed_p99_ms_at_most": None if p99 is None else (p99 * 1000 if p99 != float("inf") else "inf"),
        "shed_at_headers": int(delta("isn_shed_at_headers_total")),
        "shed_arrival_codel": int(delta("isn_scheduler_shed_arrival_codel_total")),
        # the arrival check's own refusals by bound; for the predicted-wait ones, the mean predicted
        # finish against the mean bound it missed (how far the prediction ran past the budget)
        "shed_arrival_late": int(delta("isn_scheduler_shed_arrival_late_total")),
        "shed_arrival_preparing": int(delta("isn_scheduler_shed_arrival_preparing_total")),
        "shed_arrival_wait": int(delta("isn_scheduler_shed_arrival_wait_total")),
        "arrival_refused_predicted_ms_mean": mean_ms("isn_scheduler_arrival_refused_predicted_seconds_total",
                                                     "isn_scheduler_shed_arrival_wait_total"),
        "arrival_refused_bound_ms_mean": mean_ms("isn_scheduler_arrival_refused_bound_seconds_total",
                                                 "isn_scheduler_shed_arrival_wait_total"),
        "shed_unprepared": int(delta("isn_scheduler_shed_unprepared_total")),
        "shed_unprepared_late": int(delta("isn_scheduler_shed_unprepared_late_total")),
        "shed_routed": int(delta("isn_scheduler_shed_routed_total")),
        # replies with results the node wrote after their deadline, by the device that searched
        "node_late_cpu": int(delta('isn_answered_late_total{device="cpu"}')),
        "node_late_gpu": int(delta('isn_answered_late_total{device="gpu"}')),
        "loop_iterations": int(iterations),
        "loop_iterations_over_1ms": int(iterations - iterations_within_1ms) if iterations else None,
        "loop_iteration_seconds": round(delta("isn_loop_iteration_seconds_sum"), 6),
        "loop_work_seconds": by_part("isn_loop_work_seconds_total"),
        "long_iterations": {
            "count": int(long_iterations),
            "seconds": by_part("isn_loop_long_iteration_seconds_total"),
            "reads_each": round(delta("isn_loop_long_iteration_reads_total") / long_iterations, 1) if long_iterations else None,
            "requests_each": round(delta("isn_loop_long_iteration_requests_total") / long_iterations, 1)
            if long_iterations else None,
        },
        "loop_io": {
            "reads": int(loop_reads),
            "writes": int(loop_writes),
            "requests": int(loop_requests),
            "requests_per_read": round(loop_requests / loop_reads, 2) if loop_reads else None,
            "requests_per_write": round(loop_requests / loop_writes, 2) if loop_writes else None,
        },
        # the loops' wait for a CPU while ready to run (absent on kernels that keep no run delays)
        "loop_cpu_wait_seconds": round(sum(delta(name) for name in after
                                           if name.startswith("isn_loop_cpu_wait_seconds_total{")), 6),
        # polls that blocked 15 ms or more past their timeout, or requests a keeping-up loop found held unread
        # that long: the node (or a loop) was stopped then, and every request it held waited as long
        "stalls_seen": int(delta("isn_scheduler_stalls_seen_total")),
        "cpu_jobs": int(cpu_jobs),
        "cpu_retrieval_us_per_job": round(cpu_retrieval / cpu_jobs * 1e6, 2) if cpu_jobs >= MIN_CPU_JOBS else None,
        "cpu_retrieval_cpu_us_per_job":
            round(sampled_cpu / sampled_jobs * 1e6, 2) if sampled_jobs >= MIN_SAMPLED_JOBS and sampled_cpu > 0 else None,
        "cpu_retrieval_wall_over_cpu":
            round(sampled_wall / sampled_cpu, 3) if sampled_jobs >= MIN_SAMPLED_JOBS and sampled_cpu > 0 else None,
        "gpu_batches": batches,
        "gpu_batches_by_reason": batches_by_reason,
        "gpu_batch_jobs_mean": round(delta("isn_scheduler_batch_jobs_total") / batches, 1) if batches else None,
        "process_cpu_seconds": round(delta("process_cpu_seconds_total"), 3),
        "loop_busy_seconds": round(sum(delta(name) for name in after if name.startswith("isn_loop_busy_seconds_total{")), 3),
    }))


if __name__ == "__main__":
    main()
