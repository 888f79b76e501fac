#!/usr/bin/env bash
# Normal queries beside clients sending 4 MiB queries (issue 35, must-show 5): isn-bench's p50 and p99
# at RATE/s on the sample alone, then with CLIENTS h2load clients each sending 4 MiB Search requests
# back to back, in interleaved rounds; JSON per round and the medians.
#
#   bash bench/big_neighbours.sh            # RATE=300 CLIENTS=4 ROUNDS=3 DURATION=3 WORKERS=2
set -euo pipefail
BUILD=${BUILD:-build}
RATE=${RATE:-300}
CLIENTS=${CLIENTS:-4}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
WORKERS=${WORKERS:-2}
INDEX=${INDEX:-$BUILD/sample/index}
command -v h2load >/dev/null || { echo "big_neighbours: h2load missing (apt-get install nghttp2-client)" >&2; exit 2; }
for bin in isnd isn-bench isn-query; do
  [ -x "$BUILD/bin/$bin" ] || { echo "big_neighbours: build $BUILD/bin/$bin first (make programs)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/isn_big_neighbours.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# A gRPC-framed SearchRequest whose query is just under 4 MiB (field 1, then k = 10).
python3 - "$work/big.bin" <<'EOF'
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
EOF

"$BUILD/bin/isnd" --index "$INDEX" --listen 127.0.0.1:0 --stats-listen "" --workers "$WORKERS" >"$work/isnd.log" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's/.*ready: serving partition [0-9]* on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/isnd.log" | head -n 1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "big_neighbours: isnd did not start" >&2; cat "$work/isnd.log" >&2; exit 1; }

measure() { # label
  "$BUILD/bin/isn-bench" --target "127.0.0.1:$port" --queries examples/queries.tsv --rate "$RATE" \
    --duration "$DURATION" --warmup 1 --deadline-ms 1000 >"$work/run.json"
  python3 - "$work/run.json" "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"round": sys.argv[2], "p50_ms": r["latency_us"]["p50"] / 1000, "p99_ms": r["latency_us"]["p99"] / 1000,
                  "on_time_per_s": r["on_time_per_s"], "status": r["status"]}))
EOF
}

for round in $(seq 1 "$ROUNDS"); do
  measure alone
  h2load -c "$CLIENTS" -m 1 -D "$((DURATION + 3))" -d "$work/big.bin" -H "content-type: application/grpc" \
    -H "te: trailers" "http://127.0.0.1:$port/isn.v1.Search/Search" >"$work/h2load.txt" 2>&1 &
  h2=$!
  sleep 0.5
  measure "beside $CLIENTS clients of 4 MiB"
  wait $h2 || true
  grep -E "^requests:|^status codes:" "$work/h2load.txt" | tr '\n' ' ' | sed 's/^/# h2load: /'; echo
done | tee "$work/rounds.txt"
python3 - "$work/rounds.txt" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
alone = [r["p50_ms"] for r in rows if r["round"] == "alone"]
beside = [r["p50_ms"] for r in rows if r["round"] != "alone"]
print(json.dumps({"p50_alone_ms": statistics.median(alone), "p50_beside_ms": statistics.median(beside),
                  "ratio": round(statistics.median(beside) / statistics.median(alone), 2)}))
EOF
