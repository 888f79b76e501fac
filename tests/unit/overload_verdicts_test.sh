#!/usr/bin/env bash
# bench/overload_verdicts.py judges issue 35's must-shows from overload_device.sh's output as the issue
# words them: written inputs (no load is run) where each rule holds, then each broken in turn: a repeat
# under 90% of 1x, an answered p99 at the deadline, a shed p99 of 1 ms, a failure where the generator
# lagged (named, with its lag), a failure while the VM's host took the machine's CPUs (named, with how much), a
# failure during which the node's loops saw stalls (named, with how many) or its cgroup's quota stopped it (named,
# with how long), a failure whose generator ran on hyperthread siblings of isnd's CPUs (named, with the pairs), a
# failure while the node's own CPU work ran slower than at the curve's fastest overloaded point, or on a node without
# CPU jobs while its first core did (named, with how much), runs set aside for that steal (counted, not judged), a missing multiple (not measured, never met), the trivial query with requests not sent, sustained runs 13.9% apart or under a
# floor (and, where the searches carry the machine's speed, their spread at equal core speed), a spike that never recovers; and results split over two folders (two device calls) are read
# together.
set -euo pipefail
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-overload-verdicts.XXXXXX")
trap 'rm -rf "$work"' EXIT

point() { # config repeat multiple on_time p99 shed shed_p99 [not_sent] [timeouts]
  printf '{"config": "%s", "repeat": %s, "sustained_rate": 1000.0, "multiple": %s, "offered_per_s": 0, "on_time_per_s": %s, "answered_p99_ms": %s, "shed": %s, "shed_p99_ms": %s, "not_sent": %s, "transport_errors": 0, "client_timeouts": %s}\n' \
    "$1" "$2" "$3" "$4" "$5" "$6" "$7" "${8:-0}" "${9:-0}"
}
curve() { # folder config [a line to replace the 2x point of repeat 2]
  mkdir -p "$1"
  for r in 1 2 3; do
    for m in 0.5 1.0 1.25 1.5 2.0 3.0 4.0; do
      if [ "$r.$m" = 2.2.0 ] && [ -n "${3:-}" ]; then echo "$3"; else point "$2" "$r" "$m" 950 30.0 100 0.8; fi
    done
  done >>"$1/overload-$2.json"
}
verdict() { # show [config] < report
  python3 -c 'import json, sys; r = json.load(sys.stdin)[sys.argv[1]]; print((r[sys.argv[2]] if len(sys.argv) > 2 else r)["verdict"])' "$@"
}
expect() { # what got wanted
  [ "$2" = "$3" ] || { echo "overload_verdicts_test: $1: got \"$2\", wanted \"$3\"" >&2; exit 1; }
}
judge() { python3 bench/overload_verdicts.py "$@" 2>/dev/null; }

# every rule holds
curve "$work/good" cpu
for m in 1.5 2.0 3.0; do point trivial 1 "$m" 1000 5.0 0 0; done >"$work/good/overload-trivial.json"
printf '{"label": "cpu", "sustained": {"rate": 1000}}\n{"label": "cpu", "sustained": {"rate": 1080}}\n' >"$work/good/sustained.json"
printf '{"config": "cpu", "recovered_after_ms": 0, "spike_on_time_per_s": 1100}\n' >"$work/good/spike.txt"
report=$(judge --floor cpu=900 "$work/good")
expect "a curve that holds" "$(verdict must_show_1 cpu <<<"$report")" met
expect "a trivial curve that holds" "$(verdict must_show_2 trivial <<<"$report")" met
expect "runs 8% apart" "$(verdict must_show_3 cpu <<<"$report")" met
expect "a spike recovered at once" "$(verdict must_show_4 cpu <<<"$report")" met

# must-show 1, each rule broken in one repeat of one point
curve "$work/low" cpu "$(point cpu 2 2.0 899 30.0 100 0.8)"
expect "one repeat under 90%" "$(judge "$work/low" | verdict must_show_1 cpu)" "not met"
curve "$work/slow" cpu "$(point cpu 2 2.0 950 50.0 100 0.8)"
expect "answered p99 at the deadline" "$(judge "$work/slow" | verdict must_show_1 cpu)" "not met"
expect "a deadline of 200 ms" "$(judge --deadline cpu=200 "$work/slow" | verdict must_show_1 cpu)" met
curve "$work/shed" cpu "$(point cpu 2 2.0 950 30.0 100 1.0)"
expect "shed p99 of 1 ms" "$(judge "$work/shed" | verdict must_show_1 cpu)" "not met"
curve "$work/noshed" cpu "$(point cpu 2 2.0 950 30.0 0 7.0)"
expect "no shed, no shed p99 judged" "$(judge "$work/noshed" | verdict must_show_1 cpu)" met
# a failure where the generator fell behind says so, with its lag: from the row, or from the point's JSON
curve "$work/lagged" cpu "$(point cpu 2 2.0 950 80.0 100 0.8 500 | sed 's/}$/, "send_lag_p50_ms": 3.0, "send_lag_p99_ms": 12.5}/')"
failures=$(judge "$work/lagged" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "a lagging generator named" "$failures" "2x: answered p99 80.0 ms, deadline 50 (the generator lagged: send lag p99 12.5 ms, 500 not sent, busy ? of its time)"
curve "$work/lagged-old" cpu "$(point cpu 2 2.0 950 80.0 100 0.8)"
printf '{"send_lag_us": {"p50": 200, "p99": 4000}, "generator_busy": 0.42}\n' >"$work/lagged-old/point-cpu-2-2.json"
failures=$(judge "$work/lagged-old" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "the lag from the point's JSON" "$failures" "2x: answered p99 80.0 ms, deadline 50 (the generator lagged: send lag p99 4.0 ms, 0 not sent, busy 0.42 of its time)"
# a generator that sent on time but never waited for input read its answers late: named too
curve "$work/busy" cpu "$(point cpu 2 2.0 950 30.0 100 1.4 | sed 's/}$/, "send_lag_p99_ms": 0.1, "generator_busy": 0.97}/')"
failures=$(judge "$work/busy" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "a busy generator named" "$failures" "2x: shed p99 1.40 ms (the generator lagged: send lag p99 0.1 ms, 0 not sent, busy 0.97 of its time)"
# a point while the VM's host took the machine's CPUs says how much was taken; under 1% it says nothing
curve "$work/stolen" cpu "$(point cpu 2 2.0 850 30.0 100 0.8 | sed 's/}$/, "vm_steal_share": 0.0543}/')"
failures=$(judge "$work/stolen" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "steal named" "$failures" "2x: on time 0.850 of 1x (the VM's host took 5.4% of the machine's CPU time)"
curve "$work/little-stolen" cpu "$(point cpu 2 2.0 850 30.0 100 0.8 | sed 's/}$/, "vm_steal_share": 0.002}/')"
failures=$(judge "$work/little-stolen" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "little steal not named" "$failures" "2x: on time 0.850 of 1x"
# a point during which the node's loops saw stalls says how many, one during which its cgroup's quota stopped it says
# for how long; each keeps its maximum in the cell and is judged all the same; none, nothing
with_field() { # folder field value shed_p99: a curve whose 2x point of repeat 2 carries field=value
  curve "$work/$1" cpu "$(point cpu 2 2.0 950 30.0 100 "$4" | sed "s|}\$|, \"$2\": $3}|")"
  judge "$work/$1"
}
failures_of() { python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))'; }
cell_max() { python3 -c 'import json, sys; print(json.load(sys.stdin)["must_show_1"]["cpu"]["points"]["2.0"][sys.argv[1] + "_max"])' "$1"; }
report=$(with_field stalled stalls_seen 3 3.7)
expect "stalls named" "$(failures_of <<<"$report")" "2x: shed p99 3.70 ms (the node stalled: its loops saw 3 stalls of 15 ms or more)"
expect "stalls in the cell" "$(cell_max stalls_seen <<<"$report")" 3
expect "a stall is no excuse" "$(verdict must_show_1 cpu <<<"$report")" "not met"
expect "no stall not named" "$(with_field unstalled stalls_seen 0 1.2 | failures_of)" "2x: shed p99 1.20 ms"
report=$(with_field throttled cgroup_throttled_ms 42.5 2.5)
expect "throttling named" "$(failures_of <<<"$report")" "2x: shed p99 2.50 ms (the node's cgroup CPU quota stopped it for 42.5 ms)"
expect "throttling in the cell" "$(cell_max cgroup_throttled_ms <<<"$report")" 42.5
expect "no throttling not named" "$(with_field unthrottled cgroup_throttled_ms 0.0 1.2 | failures_of)" "2x: shed p99 1.20 ms"
# a point whose generator ran on hyperthread siblings of isnd's CPUs names them (bench/cpu_split.py); none, nothing
expect "shared cores named" "$(with_field shared cpus_sharing_cores '["4/12", "5/13"]' 1.6 | failures_of)" \
  "2x: shed p99 1.60 ms (the generator ran on hyperthread siblings of isnd's CPUs: 4/12, 5/13)"
expect "no shared core not named" "$(with_field apart cpus_sharing_cores '[]' 1.6 | failures_of)" "2x: shed p99 1.60 ms"
# a point whose node took longer a CPU job than at the curve's fastest overloaded point says the machine was that
# much slower; under 5%, or with no point carrying the measure, it says nothing; points under 1.25x are no reference
with_cpu_job() { # file us: every point without the measure gets it
  sed -i "/cpu_retrieval_us_per_job/! s/}\$/, \"cpu_retrieval_us_per_job\": $2}/" "$1"
}
curve "$work/machine" cpu "$(point cpu 2 2.0 870 30.0 100 0.8 | sed 's/}$/, "cpu_retrieval_us_per_job": 112.8}/')"
with_cpu_job "$work/machine/overload-cpu.json" 97.5
sed -i '/"multiple": 0.5,/ s/97.5}$/80.0}/' "$work/machine/overload-cpu.json"
failures=$(judge "$work/machine" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "a slower machine named" "$failures" \
  "2x: on time 0.870 of 1x (the machine was 16% slower than at the curve's fastest overloaded point: the CPU's first stage took 112.8 us a job against 97.5 us)"
curve "$work/machine-near" cpu "$(point cpu 2 2.0 870 30.0 100 0.8 | sed 's/}$/, "cpu_retrieval_us_per_job": 101.0}/')"
with_cpu_job "$work/machine-near/overload-cpu.json" 97.5
failures=$(judge "$work/machine-near" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "a machine 3.6% slower not named" "$failures" "2x: on time 0.870 of 1x"
curve "$work/machine-unknown" cpu "$(point cpu 2 2.0 870 30.0 100 0.8 | sed 's/}$/, "cpu_retrieval_us_per_job": 112.8}/')"
failures=$(judge "$work/machine-unknown" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "no other point's speed: nothing named" "$failures" "2x: on time 0.870 of 1x"
# where the node samples its workers' CPU time a job, that is the measure: a point whose wall time a job rose 16%
# (workers waiting for a core behind the node's own loops) but whose CPU time did not names no slower machine
with_cpu_time() { # file us: every point without the CPU-time measure gets it
  sed -i "/cpu_retrieval_cpu_us_per_job/! s/}\$/, \"cpu_retrieval_cpu_us_per_job\": $2}/" "$1"
}
cp -r "$work/machine" "$work/crowded"
with_cpu_time "$work/crowded/overload-cpu.json" 90.0
failures=$(judge "$work/crowded" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "the node's own crowding is no slower machine" "$failures" "2x: on time 0.870 of 1x"
curve "$work/machine-cpu" cpu "$(point cpu 2 2.0 870 30.0 100 0.8 | sed 's/}$/, "cpu_retrieval_us_per_job": 112.8, "cpu_retrieval_cpu_us_per_job": 104.4}/')"
with_cpu_job "$work/machine-cpu/overload-cpu.json" 97.5
with_cpu_time "$work/machine-cpu/overload-cpu.json" 90.0
failures=$(judge "$work/machine-cpu" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "a slower machine by CPU time" "$failures" \
  "2x: on time 0.870 of 1x (the machine was 16% slower than at the curve's fastest overloaded point: the CPU's first stage took 104.4 us of CPU time a job against 90.0 us)"
# a refusal tail that the generator's own stall made: from their sending the refusals left in under 1 ms
curve "$work/sent-late" cpu "$(point cpu 2 2.0 950 30.0 100 20.9 | sed 's/}$/, "send_lag_p99_ms": 0.07, "send_lag_max_ms": 50.2, "shed_from_send_p99_ms": 0.31}/')"
failures=$(judge "$work/sent-late" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "a generator's stall named" "$failures" \
  "2x: shed p99 20.90 ms (sent late by the generator: from their sending the refusals' p99 was 0.31 ms; send lag max 50.2 ms)"
curve "$work/node-late" cpu "$(point cpu 2 2.0 950 30.0 100 1.8 | sed 's/}$/, "send_lag_max_ms": 0.3, "shed_from_send_p99_ms": 1.75}/')"
failures=$(judge "$work/node-late" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_1"]["cpu"]["failures"]))')
expect "a tail of the node's own not excused" "$failures" "2x: shed p99 1.80 ms"
# past the judged multiples (4x, reported) a failure whose generator lagged is judged, and the verdict where the
# generator kept up leaves it out; one whose generator kept up, or one at a judged multiple, it does not
kept_up() { python3 -c 'import json, sys; print(json.load(sys.stdin)["must_show_1"]["cpu"]["verdict_where_the_generator_kept_up"])'; }
curve "$work/four-lagged" cpu
sed -i '/"repeat": 1, .*"multiple": 4.0,/ s/"shed_p99_ms": 0.8, "not_sent": 0/"shed_p99_ms": 15.7, "not_sent": 45200/' "$work/four-lagged/overload-cpu.json"
report=$(judge "$work/four-lagged")
expect "a lagging generator's 4x judged" "$(verdict must_show_1 cpu <<<"$report")" "not met"
expect "and left out where the generator kept up" "$(kept_up <<<"$report")" met
curve "$work/four-node" cpu
sed -i '/"repeat": 1, .*"multiple": 4.0,/ s/"shed_p99_ms": 0.8,/"shed_p99_ms": 1.7,/' "$work/four-node/overload-cpu.json"
expect "the node's own 4x tail counted" "$(judge "$work/four-node" | kept_up)" "not met"
expect "a lagging generator at 2x counted" "$(judge "$work/lagged" | kept_up)" "not met"
# runs set aside for the steal during them (overload_curve.sh STEAL_RETRIES) are counted, not judged: a failing one
# beside a curve that holds leaves it met
curve "$work/retried" cpu
point cpu 2 2.0 500 80.0 100 4.0 | sed 's/}$/, "vm_steal_share": 0.08, "attempt": 1}/' >"$work/retried/steal-retried-cpu.json"
point cpu 3 3.0 600 30.0 100 2.0 | sed 's/}$/, "vm_steal_share": 0.03, "attempt": 1}/' >>"$work/retried/steal-retried-cpu.json"
report=$(judge "$work/retried")
expect "set-aside runs not judged" "$(verdict must_show_1 cpu <<<"$report")" met
expect "set-aside runs counted" "$(python3 -c 'import json, sys; print(json.load(sys.stdin)["must_show_1"]["cpu"]["runs_set_aside_for_steal"])' <<<"$report")" 2
mkdir -p "$work/part"
grep -v '"multiple": 1.5,' "$work/good/overload-cpu.json" >"$work/part/overload-cpu.json"
expect "1.5x missing" "$(judge "$work/part" | verdict must_show_1 cpu)" "not measured"

# must-show 2: requests the client could not send are unanswered
mkdir -p "$work/trivial"
for m in 1.5 2.0 3.0; do point trivial 1 "$m" 1000 5.0 0 0 "$([ "$m" = 3.0 ] && echo 12 || echo 0)"; done \
  >"$work/trivial/overload-trivial.json"
expect "not sent at 3x" "$(judge "$work/trivial" | verdict must_show_2 trivial)" "not met"
expect "no trivial curve" "$(judge "$work/part" | verdict must_show_2 trivial)" "not measured"
# a throttling client's curve is judged on its own, beside the plain one's
for m in 1.5 2.0 3.0; do point trivial-throttled 1 "$m" 950 5.0 3 0.1; done >"$work/trivial/overload-trivial-throttled.json"
report=$(judge "$work/trivial")
expect "the throttled client's curve" "$(verdict must_show_2 trivial-throttled <<<"$report")" met
expect "the plain one's still" "$(verdict must_show_2 trivial <<<"$report")" "not met"
expect "neither is must-show 1's" "$(python3 -c 'import json, sys; print(sorted(json.load(sys.stdin)["must_show_1"]))' <<<"$report")" "[]"

# must-show 3: spread and floor, and the runs of two calls read together
mkdir -p "$work/call1" "$work/call2"
printf '{"label": "gpu_all", "sustained": {"rate": 192776}}\n' >"$work/call1/sustained.json"
expect "one run only" "$(judge "$work/call1" | verdict must_show_3 gpu_all)" "not measured"
printf '{"label": "gpu_all", "sustained": {"rate": 219532}}\n' >"$work/call2/sustained.json"
expect "runs 13.9% apart" "$(judge "$work/call1" "$work/call2" | verdict must_show_3 gpu_all)" "not met"
expect "under the floor" "$(judge --floor cpu=1050 "$work/good" | verdict must_show_3 cpu)" "not met"
# searches carrying the machine's speed: the spread at equal core speed explains, the verdict stays the runs'
mkdir -p "$work/speeds"
speed() { printf '{"ns_per_step": %s, "p10": 0, "p90": 0, "slices": 200, "seconds": 1.0}' "$1"; }
printf '{"label": "cpu", "sustained": {"rate": 49674}, "core_speed": {"before": %s, "after": %s}}
' \
  "$(speed 2.28)" "$(speed 2.22)" >"$work/speeds/sustained.json"
printf '{"label": "cpu", "sustained": {"rate": 56568}, "core_speed": {"before": %s, "after": %s}}
' \
  "$(speed 2.10)" "$(speed 2.08)" >>"$work/speeds/sustained.json"
report=$(judge "$work/speeds")
expect "runs 13.9% apart on a core 7.7% slower" "$(verdict must_show_3 cpu <<<"$report")" "not met"
expect "the spread at equal core speed" "$(python3 -c 'import json, sys; r = json.load(sys.stdin)["must_show_3"]["cpu"]
print(r["spread_at_equal_core_speed"], r["rates_at_equal_core_speed"], "; ".join(r["failures"]))' <<<"$report")" \
  "0.0578 [53476.8, 56568.0] runs 13.9% apart (5.8% at equal core speed; the core's speed moved 7.7% between them)"
# searches during which the VM's host took the machine's CPUs: a spread says how much was taken
mkdir -p "$work/stolen-search"
printf '{"label": "gpu_all", "sustained": {"rate": 256227}, "vm_steal_share": 0.031}\n{"label": "gpu_all", "sustained": {"rate": 318198}, "vm_steal_share": 0.0004}\n' \
  >"$work/stolen-search/sustained.json"
expect "a spread with steal named" "$(judge "$work/stolen-search" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_3"]["gpu_all"]["failures"]))')" \
  "runs 24.2% apart; the VM's host took 3.1%, 0.0% of the machine's CPU time during them"
# and searches during which isnd's cgroup quota stopped it: a spread says for how long
mkdir -p "$work/throttled-search"
printf '{"label": "gpu_all", "sustained": {"rate": 256227}, "cgroup_throttled_ms": 180.0}\n{"label": "gpu_all", "sustained": {"rate": 318198}, "cgroup_throttled_ms": 0.0}\n' \
  >"$work/throttled-search/sustained.json"
expect "a spread with throttling named" "$(judge "$work/throttled-search" | python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_3"]["gpu_all"]["failures"]))')" \
  "runs 24.2% apart; the node's cgroup CPU quota stopped it for 180.0, 0.0 ms during them"
printf '{"label": "cpu", "sustained": {"rate": 56000}}\n' >>"$work/speeds/sustained.json"
# a node with no CPU jobs to time (GPU-only) takes its first core's speed around each point as the machine's: a point
# whose core ran 10% slower than at the curve's fastest overloaded point says so; a CPU job's time, where there is
# one, stays the measure
with_core_speed() { # file ns: every point without the core's speed gets it, before and after alike
  sed -i "/core_speed/! s/}\$/, \"core_speed\": {\"before\": $(speed "$2"), \"after\": $(speed "$2")}}/" "$1"
}
curve "$work/core" cpu "$(point cpu 2 2.0 870 30.0 100 0.8 | sed "s/}\$/, \"core_speed\": {\"before\": $(speed 2.25), \"after\": $(speed 2.21)}}/")"
with_core_speed "$work/core/overload-cpu.json" 2.02
report=$(judge "$work/core")
expect "a slower core named" "$(failures_of <<<"$report")" \
  "2x: on time 0.870 of 1x (the machine was 10% slower than at the curve's fastest overloaded point: isnd's first core took 2.230 ns a step of bench_cpu_speed around the point against 2.020 ns)"
expect "the core's speed in the cell" "$(cell_max core_ns_per_step <<<"$report")" 2.23
cp -r "$work/core" "$work/core-and-jobs"
with_cpu_job "$work/core-and-jobs/overload-cpu.json" 97.5
expect "a CPU job's time is the measure where there is one" "$(judge "$work/core-and-jobs" | failures_of)" "2x: on time 0.870 of 1x"
# a search that stopped at the ceiling it was given found a lower bound: not measured, and said why
mkdir -p "$work/ceiling"
printf '{"label": "gpu_all", "sustained": {"rate": 324210}}\n{"label": "gpu_all", "sustained": {"rate": 330000, "at_ceiling": true}}\n' \
  >"$work/ceiling/sustained.json"
report=$(judge "$work/ceiling")
expect "a search at its ceiling" "$(verdict must_show_3 gpu_all <<<"$report")" "not measured"
expect "the ceiling named" "$(python3 -c 'import json, sys; print("; ".join(json.load(sys.stdin)["must_show_3"]["gpu_all"]["failures"]))' <<<"$report")" \
  "a search stopped at its ceiling, 330000: a lower bound, not a sustained rate (raise its MAX)"
expect "a search without the speed: none at equal speed" "$(judge "$work/speeds" | python3 -c 'import json, sys
print("rates_at_equal_core_speed" in json.load(sys.stdin)["must_show_3"]["cpu"])')" False

# must-show 4: a spike after which service never came back
mkdir -p "$work/spike"
printf '{"config": "hybrid", "recovered_after_ms": null, "spike_on_time_per_s": 10}\n' >"$work/spike/spike.txt"
expect "never recovered" "$(judge "$work/spike" | verdict must_show_4 hybrid)" "not met"

# bad input is named
if out=$(python3 bench/overload_verdicts.py --floor cpu "$work/good" 2>&1); then
  echo "overload_verdicts_test: --floor without a value was taken" >&2
  exit 1
fi
grep -q "CONFIG=VALUE" <<<"$out" || { echo "overload_verdicts_test: unclear error: $out" >&2; exit 1; }
echo "overload_verdicts_test: all cases passed"
