#!/usr/bin/env bash
# Goodput under overload (issue 35, DESIGN section 7): one isnd per configuration, then `isn-bench
# --rate` at fixed multiples of a given rate (the configuration's own sustained rate as 1x), REPEATS
# times. One JSON line per point and repeat: offered and on-time answers per second, shed, late,
# deadline exceeded, client timeouts, not sent, the other errors by status (INVALID_ARGUMENT: a query the index
# cannot answer, such as a phrase without positions), p50/p99 of the answered requests and p99 of the shed
# ones as the client saw them, the generator's send lag p50/p99 (where it fell behind its schedule, it
# may be the limit, not the node), the share of the machine's CPU time its VM host took meanwhile (steal), how
# long isnd's cgroup CPU quotas stopped it meanwhile (cgroup_throttled_ms, bench/cgroup_throttle.py), the speed of
# isnd's first CPU just before and after the point while the node idles (core_speed, bench_cpu_speed: the machine's
# speed for a node that has no CPU work of its own to measure it by, as the GPU-only node has none), isnd's CPUs
# that share a physical core with the generator's (cpus_sharing_cores, "isnd/generator" pairs of hyperthread
# siblings, bench/cpu_split.py; empty when ISND_CPUS and BENCH_CPUS keep apart), and the node's own view of its
# refusals (bench/node_sheds.py: time from arrival to refusal, and where they were refused), of its late replies
# (node late: CPU/GPU), of its loops' wait for a CPU while ready to run (loop wait, seconds over all loops) and
# of its CPU's first stage per job (cpu_retrieval_us_per_job: the machine's speed as the node's own work
# measures it). A
# summary table (medians over the repeats) goes to stderr; --plot draws on-time/s against offered/s
# with gnuplot.
#
#   bench/overload_curve.sh [--plot] NAME RATE [isnd flags...]
#   ISND_CPUS=0-11 BENCH_CPUS=12-15 BENCH_THREADS=4 bash bench/overload_curve.sh hybrid 165000 --workers 12
#
# Environment: BUILD (default build), ISND_BIN (the isnd to run, default $BUILD/bin/isnd: another build's, to
# compare), INDEX (build/sample/index), QUERIES (examples/queries.tsv),
# DEADLINE_MS (50), K (10), DURATION (4 s per point), WARMUP (1), REPEATS (3), MULTIPLES
# ("0.5 1 1.25 1.5 2 3 4"), ISND_CPUS / BENCH_CPUS (taskset lists), BENCH_THREADS (isn-bench
# generator threads, 1), CONNECTIONS (per thread, 4), OUT (folder for JSON and the plot,
# $BUILD/bench/overload), AFTER_START (a command run once isnd is ready, its pid in ISND_PID; isnd's
# own server.pin_loops pins its threads), BENCH_FLAGS (more isn-bench flags: for example
# '--client-throttle 1.1', a client that refuses itself what the node is refusing, whose refusals the rows
# count as client_refused apart from the node's shed), STEAL_RETRIES (0) and STEAL_MAX (0.01): a point during
# which the VM's host took STEAL_MAX or more of the machine's CPU time is run again, up to STEAL_RETRIES more
# times; the runs set aside go to steal-retried-NAME.json (the same rows), the kept row says its attempt.
# SPEED_PROBE (default $BUILD/bench/bench_cpu_speed where built; empty: none) and SPEED_S (0.5 s a probe) time the core.
set -euo pipefail
# shellcheck source=bench/isnd_ready.sh
. "$(dirname "$0")/isnd_ready.sh"
# shellcheck source=bench/machine_share.sh
. "$(dirname "$0")/machine_share.sh"
plot=0
if [ "${1:-}" = --plot ]; then plot=1; shift; fi
[ $# -ge 2 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
name=$1 rate=$2
shift 2
BUILD=${BUILD:-build}
INDEX=${INDEX:-$BUILD/sample/index}
QUERIES=${QUERIES:-examples/queries.tsv}
DEADLINE_MS=${DEADLINE_MS:-50}
K=${K:-10}
DURATION=${DURATION:-4}
WARMUP=${WARMUP:-1}
REPEATS=${REPEATS:-3}
MULTIPLES=${MULTIPLES:-0.5 1 1.25 1.5 2 3 4}
BENCH_THREADS=${BENCH_THREADS:-1}
CONNECTIONS=${CONNECTIONS:-4}
OUT=${OUT:-$BUILD/bench/overload}
ISND_BIN=${ISND_BIN:-$BUILD/bin/isnd}
for bin in "$ISND_BIN" "$BUILD/bin/isn-bench"; do
  [ -x "$bin" ] || { echo "overload_curve: build $bin first (make programs)" >&2; exit 2; }
done
[ -e "$INDEX" ] || { echo "overload_curve: no index at $INDEX (make sample-index, or set INDEX)" >&2; exit 2; }
[ -f "$QUERIES" ] || { echo "overload_curve: no query log at $QUERIES" >&2; exit 2; }
PIN_ISND=(); [ -n "${ISND_CPUS:-}" ] && PIN_ISND=(taskset -c "$ISND_CPUS")
PIN_BENCH=(); [ -n "${BENCH_CPUS:-}" ] && PIN_BENCH=(taskset -c "$BENCH_CPUS")
SPEED_PROBE=${SPEED_PROBE-$BUILD/bench/bench_cpu_speed}
[ -x "$SPEED_PROBE" ] || SPEED_PROBE=
SPEED_S=${SPEED_S:-0.5}
probe_cpu=${ISND_CPUS:-0}
probe_cpu=${probe_cpu%%[-,]*}
# isnd's CPUs that share a physical core with the generator's (hyperthread siblings): each row names them
shared_cores=
if [ -n "${ISND_CPUS:-}" ] && [ -n "${BENCH_CPUS:-}" ]; then
  shared_cores=$(python3 "$(dirname "$0")/cpu_split.py" shared "$ISND_CPUS" "$BENCH_CPUS")
  [ -z "$shared_cores" ] || echo "overload_curve: isnd's and the generator's CPUs share physical cores" \
    "(isnd/generator: $shared_cores): bench/cpu_split.py split gives whole cores to each" >&2
fi
mkdir -p "$OUT"
json="$OUT/overload-$name.json"
log="$OUT/isnd-$name.log"
: >"$json"
: >"$log" # before isnd's redirect opens it: the loop below reads it at once

"${PIN_ISND[@]}" "$ISND_BIN" --index "$INDEX" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 "$@" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
port=$(isnd_port_of overload_curve "$log" $pid 600) || exit 1
stats=$(sed -n 's|.*stats listening on http://\(127\.0\.0\.1:[0-9]*\).*|\1|p' "$log" | head -n 1)
# Ready on the CPU comes before the GPU holds the index (gpu.upload_before_ready = false): wait for it.
python3 - "http://$stats/readyz" <<'PY' || { echo "overload_curve: the GPU upload did not end" >&2; exit 1; }
import sys, time, urllib.request
for _ in range(3000):
    if "GPU loading" not in urllib.request.urlopen(sys.argv[1]).read().decode():
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
PY
if [ -n "${AFTER_START:-}" ]; then
  ISND_PID=$pid bash -c "$AFTER_START" >"$OUT/after-start-$name.log" 2>&1 ||
    { echo "overload_curve: AFTER_START failed:" >&2; cat "$OUT/after-start-$name.log" >&2; exit 1; }
fi

# One isn-bench run per point, with the node's metrics scraped around it: the refusals' time inside
# the node (bench/node_sheds.py) beside the client's view of it. (Python rather than curl: the GPU
# machine has no curl.)
scrape() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://$stats/metrics"; }
# A VM whose host took its CPUs during a point slows the node and the generator alike, and the row says how much
# (vm_steal_share; how long isnd's cgroup quota stopped it, cgroup_throttled_ms): machine_share.sh. Whether a
# point's steal reached STEAL_MAX with a retry left:
retry_for_steal() { [ "$2" -le "${STEAL_RETRIES:-0}" ] && [ -n "$1" ] && awk -v s="$1" -v m="${STEAL_MAX:-0.01}" 'BEGIN { exit !(s >= m) }'; }
: >"$OUT/steal-retried-$name.json"
for repeat in $(seq 1 "$REPEATS"); do
  for m in $MULTIPLES; do
    r=$(python3 -c "print('%.0f' % ($m * $rate))")
    point="$OUT/point-$name-$repeat-$m"
    for attempt in $(seq 1 $((${STEAL_RETRIES:-0} + 1))); do
      speed_before=$(core_speed "$probe_cpu")
      scrape >"$point.before.prom"
      ticks_before=$(cpu_ticks) throttled_before=$(throttled_ns "$pid")
      "${PIN_BENCH[@]}" "$BUILD/bin/isn-bench" --target "127.0.0.1:$port" --queries "$QUERIES" --rate "$r" \
        --duration "$DURATION" --warmup "$WARMUP" --deadline-ms "$DEADLINE_MS" -k "$K" --threads "$BENCH_THREADS" \
        --connections "$CONNECTIONS" ${BENCH_FLAGS:-} >"$point.json"
      ticks_after=$(cpu_ticks) throttled_after=$(throttled_ns "$pid")
      scrape >"$point.after.prom"
      speed_after=$(core_speed "$probe_cpu")
      python3 "$(dirname "$0")/node_sheds.py" "$point.before.prom" "$point.after.prom" >"$point.node.json"
      steal=$(steal_between "$ticks_before" "$ticks_after")
      rows_to=$json
      retry_for_steal "$steal" "$attempt" && rows_to="$OUT/steal-retried-$name.json"
      throttled_ms=$(throttled_ms_between "$throttled_before" "$throttled_after")
      python3 - "$point.json" "$point.node.json" "$name" "$rate" "$repeat" "$m" "$steal" "$attempt" "$throttled_ms" \
        "$speed_before" "$speed_after" "$shared_cores" >>"$rows_to" <<'EOF'
import json, sys
p, node = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
name, rate, repeat, m = sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
steal = float(sys.argv[7]) if sys.argv[7] else None
s = p["status"]
row = {"config": name, "repeat": repeat, "sustained_rate": rate, "multiple": m,
       "offered_per_s": p["offered_rate"], "on_time_per_s": p["on_time_per_s"],
       "on_time_share_of_sustained": round(p["on_time_per_s"] / rate, 4),
       "shed": s["resource_exhausted"], "late": p["late"], "partial": p["partial"],
       "deadline_exceeded": s["deadline_exceeded"], "client_timeouts": s["client_timeout"],
       "transport_errors": s["transport_error"], "refused_streams": s.get("refused_stream", 0), "not_sent": p["not_sent"],
       "invalid_argument": s.get("invalid_argument", 0), "unavailable": s.get("unavailable", 0), "other_errors": s.get("other", 0),
       "client_refused": p.get("client_refused", 0), "client_refused_no_room": p.get("client_refused_no_room", 0),
       "answered_p50_ms": p["latency_us"]["p50"] / 1000, "answered_p99_ms": p["latency_us"]["p99"] / 1000,
       "shed_p99_ms": p["shed_latency_us"]["p99"] / 1000,
       "shed_from_send_p99_ms": p["shed_from_send_us"]["p99"] / 1000 if "shed_from_send_us" in p else None,
       "send_lag_p50_ms": p["send_lag_us"]["p50"] / 1000, "send_lag_p99_ms": p["send_lag_us"]["p99"] / 1000,
       "send_lag_max_ms": p["send_lag_us"]["max"] / 1000,
       "receive_lag_p99_ms": p.get("receive_lag_us", {}).get("p99", 0) / 1000, "arrivals_unknown": p.get("arrivals_unknown"),
       "generator_busy": p.get("generator_busy"), "vm_steal_share": steal, "attempt": int(sys.argv[8]),
       "cgroup_throttled_ms": float(sys.argv[9]) if sys.argv[9] else None}
speeds = {when: json.loads(text) for when, text in zip(("before", "after"), sys.argv[10:12]) if text.strip()}
if speeds:
    row["core_speed"] = speeds
row["cpus_sharing_cores"] = sys.argv[12].split()
row.update(node)
print(json.dumps(row))
EOF
      [ "$rows_to" = "$json" ] && break
      echo "overload_curve: $name ${m}x repeat $repeat: the VM's host took $steal of the CPU time; running it again" >&2
    done
  done
done

python3 - "$json" "$OUT/overload-$name.png" "$plot" <<'EOF' >&2
import json, statistics, subprocess, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
by = {}
for r in rows: by.setdefault(r["multiple"], []).append(r)
print("%-10s %5s %11s %11s %8s %9s %9s %9s %9s %9s %9s %9s %11s %10s" % ("config", "x", "offered/s", "on-time/s", "share",
      "shed", "client ref", "late", "p99 ms", "shed p99", "node <1ms", "timeouts", "node late", "loop wait"))
points = []
for m in sorted(by):
    rs = by[m]; med = lambda k: statistics.median(r[k] for r in rs)
    within = [r["node_shed_within_1ms_share"] for r in rs if r.get("node_shed_within_1ms_share") is not None]
    late_by = lambda d: statistics.median(r.get("node_late_" + d, 0) for r in rs)
    # the loops' wait for a CPU while ready to run, seconds summed over the loops (isn_loop_cpu_wait_seconds_total)
    wait = statistics.median(r.get("loop_cpu_wait_seconds", 0) for r in rs)
    print("%-10s %5.2f %11.0f %11.0f %8.3f %9.0f %9.0f %9.0f %9.2f %9.3f %9s %9.0f %11s %10.4f" % (
          rs[0]["config"], m, med("offered_per_s"),
          med("on_time_per_s"), med("on_time_share_of_sustained"), med("shed"), med("client_refused"), med("late"),
          med("answered_p99_ms"),
          med("shed_p99_ms"), "%.4f" % statistics.median(within) if within else "-", med("client_timeouts"),
          "%.0f/%.0f" % (late_by("cpu"), late_by("gpu")), wait))
    points.append((med("offered_per_s"), med("on_time_per_s")))
if sys.argv[3] == "1":
    script = ("set terminal pngcairo size 900,600\nset output '%s'\nset title 'on-time answers under overload (%s)'\n"
              "set xlabel 'offered queries/s'\nset ylabel 'on-time answers/s'\nset grid\nset key off\n"
              "plot '-' using 1:2 with linespoints pt 7\n" % (sys.argv[2], rows[0]["config"]))
    script += "".join("%f %f\n" % p for p in points) + "e\n"
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    print("plot: %s" % sys.argv[2])
EOF
