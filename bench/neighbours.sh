#!/usr/bin/env bash
# Normal queries beside hostile neighbours (issue 35, must-show 5): isn-bench's p50 and p99 at RATE/s on
# the sample alone, then beside NEIGHBOURS, in interleaved rounds; JSON per round and the medians.
#   NEIGHBOURS=big          CLIENTS h2load clients each sending 4 MiB Search requests back to back
#   NEIGHBOURS=rapid-reset  CLIENTS processes of bench/rapid_reset_attacker.py (gRPC streams opened and
#                           reset at once, connection after connection, as the node cuts each with
#                           GOAWAY); also the streams each connection got before its cut
#
#   NEIGHBOURS=big bash bench/neighbours.sh     # RATE=300 CLIENTS=4 ROUNDS=3 DURATION=3 WORKERS=2
#   NEIGHBOURS=rapid-reset CLIENTS=2 bash bench/neighbours.sh
# ISND_ARGS adds isnd flags (e.g. ISND_ARGS="--set server.loop_realtime_priority=1").
set -euo pipefail
# shellcheck source=bench/isnd_ready.sh
. "$(dirname "$0")/isnd_ready.sh"
BUILD=${BUILD:-build}
NEIGHBOURS=${NEIGHBOURS:-big}
RATE=${RATE:-300}
CLIENTS=${CLIENTS:-4}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
WORKERS=${WORKERS:-2}
INDEX=${INDEX:-$BUILD/sample/index}
case $NEIGHBOURS in
  big) command -v h2load >/dev/null || { echo "neighbours: h2load missing (apt-get install nghttp2-client)" >&2; exit 2; } ;;
  rapid-reset) ;;
  *) echo "neighbours: NEIGHBOURS must be big or rapid-reset, not '$NEIGHBOURS'" >&2; exit 2 ;;
esac
for bin in isnd isn-bench; do
  [ -x "$BUILD/bin/$bin" ] || { echo "neighbours: build $BUILD/bin/$bin first (make programs)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/isn_neighbours.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

if [ "$NEIGHBOURS" = big ]; then
  # A gRPC-framed SearchRequest whose query is just under 4 MiB (field 1, then k = 10).
  python3 - "$work/big.bin" <<'PY'
import sys
text = ("lorem ipsum dolor sit amet image editor " * 110000)[:4 * 1024 * 1024 - 200].encode()
def varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n: return bytes(out)
message = b"\x0a" + varint(len(text)) + text + b"\x18\x0a"
open(sys.argv[1], "wb").write(b"\x00" + len(message).to_bytes(4, "big") + message)
PY
fi

# shellcheck disable=SC2086 # ISND_ARGS: more isnd flags, word-split
"$BUILD/bin/isnd" --index "$INDEX" --listen 127.0.0.1:0 --stats-listen "" --workers "$WORKERS" ${ISND_ARGS:-} >"$work/isnd.log" 2>&1 &
pid=$!
port=$(isnd_port_of neighbours "$work/isnd.log" $pid) || exit 1

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

start_neighbours() { # one h2load of CLIENTS connections, or CLIENTS attackers; their pids in `neighbours`
  neighbours=()
  if [ "$NEIGHBOURS" = big ]; then
    h2load -c "$CLIENTS" -m 1 -D "$((DURATION + 3))" -d "$work/big.bin" -H "content-type: application/grpc" \
      -H "te: trailers" "http://127.0.0.1:$port/isn.v1.Search/Search" >"$work/neighbour-1.txt" 2>&1 &
    neighbours+=($!)
    return
  fi
  for c in $(seq 1 "$CLIENTS"); do
    python3 bench/rapid_reset_attacker.py --port "$port" --seconds "$((DURATION + 2))" >"$work/neighbour-$c.txt" &
    neighbours+=($!)
  done
}

for round in $(seq 1 "$ROUNDS"); do
  measure alone
  start_neighbours
  sleep 0.5
  measure "beside $CLIENTS $NEIGHBOURS neighbours"
  for n in "${neighbours[@]}"; do wait "$n" || true; done
  if [ "$NEIGHBOURS" = big ]; then
    grep -E "^requests:|^status codes:" "$work/neighbour-1.txt" | tr '\n' ' ' | sed 's/^/# h2load: /'; echo
  else
    for c in $(seq 1 "$CLIENTS"); do sed 's/^/# attacker: /' "$work/neighbour-$c.txt"; done
  fi
done | tee "$work/rounds.txt"
python3 - "$work/rounds.txt" <<'PY'
import json, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
rows = [json.loads(l) for l in lines if l.startswith("{")]
alone = [r["p50_ms"] for r in rows if r["round"] == "alone"]
beside = [r["p50_ms"] for r in rows if r["round"] != "alone"]
out = {"p50_alone_ms": statistics.median(alone), "p50_beside_ms": statistics.median(beside),
       "ratio": round(statistics.median(beside) / statistics.median(alone), 2)}
attacks = [json.loads(l[len("# attacker: "):]) for l in lines if l.startswith("# attacker: {")]
if attacks:
    medians = [a["median_streams_before_cut"] for a in attacks if a["median_streams_before_cut"] is not None]
    cuts = [a["max_streams_before_cut"] for a in attacks if a["max_streams_before_cut"] is not None]
    out.update({"attacker_connections": sum(a["connections"] for a in attacks),
                "attacker_streams_sent": sum(a["streams_sent"] for a in attacks),
                "median_streams_before_cut": statistics.median(medians) if medians else None,
                "max_streams_before_cut": max(cuts) if cuts else None})
print(json.dumps(out))
PY
