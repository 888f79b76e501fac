#!/usr/bin/env bash
# bench/node_sheds.py: what the node's refusals and loop iterations did between two /metrics scrapes,
# from written scrapes (no load is run): the refusals' share within 1 ms and the bucket holding their p99,
# where they were refused, the loop iterations over 1 ms, the loops' wait for a CPU summed over the loops, the
# stalls they saw, the loops' busy time by part and that of their iterations past 1 ms, the CPU's first stage
# per job (none from too few jobs), the GPU batches by why they were sent and their size, and the process's CPU
# time beside its loops' busy time;
# a run with no refusal says so (null), not 0%.
set -euo pipefail
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-node-sheds.XXXXXX")
trap 'rm -rf "$work"' EXIT
scrape() { # file shed<=0.5ms shed<=1ms shed<=2.5ms shed_total iter<=1ms iter_total iter_sum at_headers unprepared wait0 wait1
  cat >"$1" <<PROM
# HELP isn_shed_duration_seconds whatever
# TYPE isn_shed_duration_seconds histogram
isn_shed_duration_seconds_bucket{le="0.0005"} $2
isn_shed_duration_seconds_bucket{le="0.001"} $3
isn_shed_duration_seconds_bucket{le="0.0025"} $4
isn_shed_duration_seconds_bucket{le="+Inf"} $5
isn_shed_duration_seconds_count $5
isn_loop_iteration_seconds_bucket{le="0.001"} $6
isn_loop_iteration_seconds_bucket{le="+Inf"} $7
isn_loop_iteration_seconds_count $7
isn_loop_iteration_seconds_sum $8
isn_shed_at_headers_total $9
isn_scheduler_shed_unprepared_total ${10}
isn_loop_cpu_wait_seconds_total{loop="0"} ${11}
isn_loop_cpu_wait_seconds_total{loop="1"} ${12}
PROM
}
field() { python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
expect() { [ "$2" = "$3" ] || { echo "node_sheds_test: $1: got \"$2\", wanted \"$3\"" >&2; exit 1; }; }

scrape "$work/before" 10 10 10 10 100 100 0.01 10 0 1.0 2.0
# 1,000 refusals more: 900 within 0.5 ms, 80 more within 1 ms, 18 more within 2.5 ms, 2 beyond; 1,000
# iterations more, 990 of them within 1 ms; 950 refused at HEADERS, 50 unprepared; the loops waited 0.5 s
# and 0.25 s for a CPU
scrape "$work/after" 910 990 1008 1010 1090 1100 0.51 960 50 1.5 2.25
# the CPU ran 2,000 jobs more, whose first stage took 0.2 s: 100 us a job
cpu_work() { printf 'isn_scheduler_ran_total{device="cpu"} %s\nisn_search_stage_duration_seconds_sum{stage="retrieval",device="cpu"} %s\n' "$2" "$3" >>"$1"; }
cpu_work "$work/before" 500 0.05
cpu_work "$work/after" 2500 0.25
# of those, 250 sampled for their worker's CPU time: 0.02 s of it, 0.025 s of wall time
sampled() { printf 'isn_search_retrieval_sampled_jobs_total %s\nisn_search_retrieval_sampled_seconds_total{clock="wall"} %s\nisn_search_retrieval_sampled_seconds_total{clock="cpu"} %s\n' "$2" "$3" "$4" >>"$1"; }
cp "$work/before" "$work/before-unsampled"
sampled "$work/before" 50 0.005 0.004
sampled "$work/after" 300 0.030 0.024
# the loops saw 3 stalls before and 5 after
printf 'isn_scheduler_stalls_seen_total 3\n' >>"$work/before"
printf 'isn_scheduler_stalls_seen_total 5\n' >>"$work/after"
# 30 GPU batches more, 20 sent at their linger end and 10 for a near deadline, of 3,000 jobs; the process took 12 s of
# CPU time, its two loops 4.5 s busy
gpu_work() { printf 'isn_scheduler_batches_total{reason="full"} 7\nisn_scheduler_batches_total{reason="linger"} %s\nisn_scheduler_batches_total{reason="deadline"} %s\nisn_scheduler_batch_jobs_total %s\nprocess_cpu_seconds_total %s\nisn_loop_busy_seconds_total{loop="0"} %s\nisn_loop_busy_seconds_total{loop="1"} %s\n' "$2" "$3" "$4" "$5" "$6" "$7" >>"$1"; }
gpu_work "$work/before" 5 0 500 3.0 1.0 1.0
gpu_work "$work/after" 25 10 3500 15.0 3.5 3.0
# the loops' parts: 2 s reading, 1 s replying, 0.5 s flushing, 0.25 s else; 4 iterations past 1 ms, 6 ms of
# reading and 2 ms of flushing in them, 12 reads and 600 requests
loop_parts() { printf 'isn_loop_work_seconds_total{part="reads"} %s\nisn_loop_work_seconds_total{part="replies"} %s\nisn_loop_work_seconds_total{part="flushes"} %s\nisn_loop_work_seconds_total{part="other"} %s\nisn_loop_long_iteration_seconds_total{part="reads"} %s\nisn_loop_long_iteration_seconds_total{part="flushes"} %s\nisn_loop_long_iterations_total %s\nisn_loop_long_iteration_reads_total %s\nisn_loop_long_iteration_requests_total %s\n' "$@" >>"$LOOP_PARTS_FILE"; }
LOOP_PARTS_FILE=$work/before loop_parts 1 1 1 1 0.001 0.001 1 3 100
LOOP_PARTS_FILE=$work/after loop_parts 3 2 1.5 1.25 0.007 0.003 5 15 700
# and over all iterations 400 socket reads, 250 writes, 2,000 requests
loop_io() { printf 'isn_loop_reads_total %s\nisn_loop_writes_total %s\nisn_loop_requests_total %s\n' "$2" "$3" "$4" >>"$1"; }
loop_io "$work/before" 100 50 500
loop_io "$work/after" 500 300 2500
out=$(python3 bench/node_sheds.py "$work/before" "$work/after")
expect "loops' parts" "$(field loop_work_seconds <<<"$out")" "{'reads': 2.0, 'replies': 1.0, 'flushes': 0.5, 'other': 0.25}"
expect "long iterations" "$(field long_iterations <<<"$out")" \
  "{'count': 4, 'seconds': {'reads': 0.006, 'flushes': 0.002}, 'reads_each': 3.0, 'requests_each': 150.0}"
expect "loops' reads and writes" "$(field loop_io <<<"$out")" \
  "{'reads': 400, 'writes': 250, 'requests': 2000, 'requests_per_read': 5.0, 'requests_per_write': 8.0}"
expect "stalls seen" "$(field stalls_seen <<<"$out")" 2
expect "GPU batches" "$(field gpu_batches <<<"$out")" 30
expect "GPU batches by why" "$(field gpu_batches_by_reason <<<"$out")" "{'linger': 20, 'deadline': 10}"
expect "GPU batch size" "$(field gpu_batch_jobs_mean <<<"$out")" 100.0
expect "process CPU time" "$(field process_cpu_seconds <<<"$out")" 12.0
expect "loops busy" "$(field loop_busy_seconds <<<"$out")" 4.5
expect "refusals" "$(field node_shed <<<"$out")" 1000
expect "share within 1 ms" "$(field node_shed_within_1ms_share <<<"$out")" 0.98
expect "p99's bucket" "$(field node_shed_p99_ms_at_most <<<"$out")" 2.5
expect "at HEADERS" "$(field shed_at_headers <<<"$out")" 950
expect "unprepared" "$(field shed_unprepared <<<"$out")" 50
expect "iterations" "$(field loop_iterations <<<"$out")" 1000
expect "iterations over 1 ms" "$(field loop_iterations_over_1ms <<<"$out")" 10
expect "iterations' time" "$(field loop_iteration_seconds <<<"$out")" 0.5
expect "loops' wait for a CPU" "$(field loop_cpu_wait_seconds <<<"$out")" 0.75
expect "CPU jobs" "$(field cpu_jobs <<<"$out")" 2000
expect "first stage per CPU job" "$(field cpu_retrieval_us_per_job <<<"$out")" 100.0
expect "CPU time per sampled job" "$(field cpu_retrieval_cpu_us_per_job <<<"$out")" 80.0
expect "wall over CPU time" "$(field cpu_retrieval_wall_over_cpu <<<"$out")" 1.25
# a node that samples nothing (older): null
out=$(python3 bench/node_sheds.py "$work/before-unsampled" "$work/before-unsampled")
expect "no sampled job" "$(field cpu_retrieval_cpu_us_per_job <<<"$out")" None

# nothing refused, no iteration counted: null, not a share of 0
out=$(python3 bench/node_sheds.py "$work/before" "$work/before")
expect "no refusal" "$(field node_shed_within_1ms_share <<<"$out")" None
expect "no iteration" "$(field loop_iterations_over_1ms <<<"$out")" None
expect "no long iteration" "$(field long_iterations <<<"$out")" \
  "{'count': 0, 'seconds': {'reads': 0.0, 'flushes': 0.0}, 'reads_each': None, 'requests_each': None}"
expect "no read or write" "$(field loop_io <<<"$out")" \
  "{'reads': 0, 'writes': 0, 'requests': 0, 'requests_per_read': None, 'requests_per_write': None}"
expect "no CPU job" "$(field cpu_retrieval_us_per_job <<<"$out")" None
expect "no GPU batch" "$(field gpu_batch_jobs_mean <<<"$out")" None
# too few CPU jobs to measure the machine by
cp "$work/before" "$work/few"
cpu_work "$work/few" 1400 0.14
out=$(python3 bench/node_sheds.py "$work/before" "$work/few")
expect "few CPU jobs" "$(field cpu_retrieval_us_per_job <<<"$out")" None
echo "node_sheds_test: all cases passed"
