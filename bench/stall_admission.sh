#!/usr/bin/env bash
# Admission after a stall of the whole node (scheduler.forgive_stalls): isnd at RATE queries a second
# while the process is stopped (SIGSTOP) for PAUSE_MS every EVERY_MS, and again at OVER_RATE (past its
# capacity) without stops, with forgive_stalls off and on in turns, ROUNDS rounds. One JSON line per run
# (on-time answers per second, shed, late, partial, answered p99), then the medians of each setting.
#
#   bash bench/stall_admission.sh        (make bench-stall)
#
# Environment: BUILD (build), INDEX (the sample's), QUERIES (examples/queries.tsv), RATE (2000),
# OVER_RATE (0: skip), PAUSE_MS (20), EVERY_MS (300), DEADLINE_MS (50), DURATION (4), ROUNDS (3),
# ISND_ARGS (more isnd flags), OUT ($BUILD/bench/stall_admission.json).
set -euo pipefail
# shellcheck source=bench/isnd_ready.sh
. "$(dirname "$0")/isnd_ready.sh"
BUILD=${BUILD:-build}
INDEX=${INDEX:-$BUILD/sample/index}
QUERIES=${QUERIES:-examples/queries.tsv}
RATE=${RATE:-2000}
OVER_RATE=${OVER_RATE:-0}
PAUSE_MS=${PAUSE_MS:-20}
EVERY_MS=${EVERY_MS:-300}
DEADLINE_MS=${DEADLINE_MS:-50}
DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-$BUILD/bench/stall_admission.json}
for bin in isnd isn-bench; do
  [ -x "$BUILD/bin/$bin" ] || { echo "stall_admission: build $BUILD/bin/$bin first (make programs)" >&2; exit 2; }
done
[ -e "$INDEX" ] || { echo "stall_admission: no index at $INDEX (make sample-index, or set INDEX)" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"
: >"$OUT"
log=$(mktemp "${TMPDIR:-/tmp}/isn-stall.XXXXXX")
pid=
trap 'if [ -n "$pid" ]; then kill -CONT $pid 2>/dev/null || true; kill $pid 2>/dev/null || true; fi; rm -f "$log"' EXIT

start_isnd() { # forgive_stalls -> port in $port
  # shellcheck disable=SC2086
  "$BUILD/bin/isnd" --index "$INDEX" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 \
    --set scheduler.forgive_stalls="$1" ${ISND_ARGS:-} >"$log" 2>&1 &
  pid=$!
  port=$(isnd_port_of stall_admission "$log" $pid) || exit 1
}

bench() { # rate
  "$BUILD/bin/isn-bench" --target "127.0.0.1:$port" --queries "$QUERIES" --rate "$1" --duration "$DURATION" \
    --warmup 1 --deadline-ms "$DEADLINE_MS" -k 10
}

# Stops the process PAUSE_MS every EVERY_MS for as long as the bench runs (warm-up included).
stopper() {
  python3 - "$pid" "$PAUSE_MS" "$EVERY_MS" "$((DURATION + 1))" <<'EOF'
import os, signal, sys, time
pid, pause, every, total = int(sys.argv[1]), float(sys.argv[2]) / 1e3, float(sys.argv[3]) / 1e3, float(sys.argv[4])
end = time.monotonic() + total
while time.monotonic() < end:
    time.sleep(every - pause)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(pause)
    os.kill(pid, signal.SIGCONT)
EOF
}

row() { # forgive round case rate < bench JSON
  python3 -c '
import json, sys
p = json.load(sys.stdin)
print(json.dumps({"forgive_stalls": sys.argv[1] == "true", "round": int(sys.argv[2]), "case": sys.argv[3],
                  "offered_per_s": float(sys.argv[4]), "pause_ms": float(sys.argv[5]) if sys.argv[3] == "stalls" else 0,
                  "on_time_per_s": p["on_time_per_s"], "shed": p["status"]["resource_exhausted"], "late": p["late"],
                  "partial": p["partial"], "answered_p99_ms": p["latency_us"]["p99"] / 1000}))' "$@" "$PAUSE_MS"
}

for round in $(seq 1 "$ROUNDS"); do
  order="false true"; [ $((round % 2)) = 0 ] && order="true false"
  for forgive in $order; do
    start_isnd "$forgive"
    bench "$RATE" >/dev/null # warm
    stopper &
    stops=$!
    bench "$RATE" | row "$forgive" "$round" stalls "$RATE" >>"$OUT"
    wait $stops
    if [ "$OVER_RATE" != 0 ]; then bench "$OVER_RATE" | row "$forgive" "$round" overload "$OVER_RATE" >>"$OUT"; fi
    kill $pid; wait $pid 2>/dev/null || true
  done
done

python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
summary = []
for case in ("stalls", "overload"):
    for forgive in (False, True):
        rs = [r for r in rows if r["case"] == case and r["forgive_stalls"] == forgive]
        if not rs:
            continue
        med = lambda k: statistics.median(r[k] for r in rs)
        summary.append({"case": case, "forgive_stalls": forgive, "runs": len(rs), "offered_per_s": rs[0]["offered_per_s"],
                        "on_time_per_s": med("on_time_per_s"), "shed": med("shed"), "late": med("late"),
                        "partial": med("partial"), "answered_p99_ms": med("answered_p99_ms")})
print(json.dumps({"pause_ms": rows[0]["pause_ms"] if rows else None, "medians": summary}))
EOF
