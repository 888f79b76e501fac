#!/usr/bin/env bash
# Normal queries during a rapid-reset flood (issue 35, must-show 5): isn-bench's p50 and p99 at RATE/s
# on the sample alone, then beside ATTACKERS processes of bench/rapid_reset_attacker.py (each opens
# gRPC streams and resets them at once, connection after connection, as the node cuts each with GOAWAY),
# in interleaved rounds; JSON per round, the attackers' streams per connection before the cut, and the
# medians.
#
#   bash bench/rapid_reset.sh            # RATE=300 ATTACKERS=2 ROUNDS=3 DURATION=3 WORKERS=2
set -euo pipefail
BUILD=${BUILD:-build}
RATE=${RATE:-300}
ATTACKERS=${ATTACKERS:-2}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
WORKERS=${WORKERS:-2}
INDEX=${INDEX:-$BUILD/sample/index}
for bin in isnd isn-bench; do
  [ -x "$BUILD/bin/$bin" ] || { echo "rapid_reset: build $BUILD/bin/$bin first (make programs)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/isn_rapid_reset.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$BUILD/bin/isnd" --index "$INDEX" --listen 127.0.0.1:0 --stats-listen "" --workers "$WORKERS" >"$work/isnd.log" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's/.*ready: serving partition [0-9]* on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/isnd.log" | head -n 1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "rapid_reset: isnd did not start" >&2; cat "$work/isnd.log" >&2; exit 1; }

measure() { # label
  "$BUILD/bin/isn-bench" --target "127.0.0.1:$port" --queries examples/queries.tsv --rate "$RATE" \
    --duration "$DURATION" --warmup 1 --deadline-ms 1000 >"$work/run.json"
  python3 - "$work/run.json" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"round": sys.argv[2], "p50_ms": r["latency_us"]["p50"] / 1000, "p99_ms": r["latency_us"]["p99"] / 1000,
                  "on_time_per_s": r["on_time_per_s"], "status": r["status"]}))
PY
}

for round in $(seq 1 "$ROUNDS"); do
  measure alone
  for a in $(seq 1 "$ATTACKERS"); do
    python3 bench/rapid_reset_attacker.py --port "$port" --seconds "$((DURATION + 2))" >"$work/attacker-$a.json" &
  done
  sleep 0.5
  measure "beside $ATTACKERS rapid-reset attackers"
  wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
  for a in $(seq 1 "$ATTACKERS"); do sed 's/^/# attacker: /' "$work/attacker-$a.json"; done
done | tee "$work/rounds.txt"
python3 - "$work/rounds.txt" <<'PY'
import json, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
rows = [json.loads(l) for l in lines if l.startswith("{")]
attacks = [json.loads(l[len("# attacker: "):]) for l in lines if l.startswith("# attacker: {")]
alone = [r["p50_ms"] for r in rows if r["round"] == "alone"]
beside = [r["p50_ms"] for r in rows if r["round"] != "alone"]
cuts = [a["max_streams_before_cut"] for a in attacks if a["max_streams_before_cut"] is not None]
print(json.dumps({"p50_alone_ms": statistics.median(alone), "p50_beside_ms": statistics.median(beside),
                  "ratio": round(statistics.median(beside) / statistics.median(alone), 2),
                  "attacker_connections": sum(a["connections"] for a in attacks),
                  "attacker_streams_sent": sum(a["streams_sent"] for a in attacks),
                  "median_streams_before_cut": statistics.median(a["median_streams_before_cut"] for a in attacks
                                                                 if a["median_streams_before_cut"] is not None),
                  "max_streams_before_cut": max(cuts) if cuts else None}))
PY
