#!/usr/bin/env bash
# RPC overhead of isnd: a trivial Search (one term, k=10, tiny index) over gRPC on loopback, driven
# by h2load (Debian nghttp2-client). Prints JSON: requests/s, latency p50/p90/p99/p99.9 in
# microseconds, for one request at a time (pure round trip) and for many in flight (throughput).
#   bash bench/rpc_overhead.sh [BUILD_DIR]        (BENCH_N=requests per run, default 100000)
# LOOPS=N sets isnd's server.loops (unset: isnd's default; a build older than server.loops takes none).
# ISND_ARGS adds isnd flags (e.g. "--set scheduler.worker_nice=0").
set -euo pipefail
BUILD=${1:-${BUILD:-build}}
N=${BENCH_N:-100000}
WORKERS=${BENCH_WORKERS:-1}
command -v h2load >/dev/null || { echo "rpc_overhead: h2load missing (apt-get install nghttp2-client)" >&2; exit 2; }
[ -x "$BUILD/bin/isnd" ] && [ -x "$BUILD/bin/isn-index" ] || { echo "rpc_overhead: build isnd and isn-index first (make programs)" >&2; exit 2; }

work=$(mktemp -d /tmp/isn_rpc_bench.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# A tiny partition: the query cost is negligible next to the RPC path being measured.
for i in $(seq 1 200); do
  printf '{"id":"d%d","title":"doc %d","body":"wind tunnel flow %d boundary layer"}\n' "$i" "$i" $((i % 7))
done >"$work/docs.jsonl"
"$BUILD/bin/isn-index" build --quiet --input "$work/docs.jsonl" --out "$work/idx" >/dev/null

"$BUILD/bin/isnd" --index "$work/idx" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 --workers "$WORKERS" \
  --set search.max_queue=100000 ${LOOPS:+--set server.loops=$LOOPS} ${ISND_ARGS:-} 2>"$work/isnd.log" &
pid=$!
for _ in $(seq 1 200); do grep -q "ready:" "$work/isnd.log" && break; sleep 0.05; done
grep -q "ready:" "$work/isnd.log" || { cat "$work/isnd.log" >&2; exit 1; }
port=$(sed -n 's/.*gRPC listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/isnd.log")
stats=$(sed -n 's|.*stats listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/isnd.log")

# SearchRequest{query: "wind", k: 10}, framed: flags 0, length 8, then the protobuf bytes.
printf '\x00\x00\x00\x00\x08\x0a\x04wind\x18\x0a' >"$work/request.bin"

ok_count() { curl -s "http://127.0.0.1:$stats/metrics" | sed -n 's/^isn_requests_total{method="isn.v1.Search\/Search",code="OK"} //p'; }

run() { # name clients streams_per_client threads
  local name=$1 c=$2 m=$3 t=$4 before after
  before=$(ok_count)
  h2load -n "$N" -c "$c" -m "$m" -t "$t" -d "$work/request.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    --log-file "$work/$name.log" "http://127.0.0.1:$port/isn.v1.Search/Search" >"$work/$name.out"
  after=$(ok_count)
  python3 - "$name" "$c" "$m" "$work/$name.out" "$work/$name.log" "$((after - before))" <<'PY'
import json, re, sys
name, c, m, out, log, ok = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
text = open(out).read()
rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", text).group(1))
lat = sorted(int(line.split("\t")[2]) for line in open(log) if line.strip())
def pct(p):
    return lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))]
print(json.dumps({"run": name, "clients": c, "streams_per_client": m, "requests": len(lat), "grpc_ok": ok,
                  "requests_per_s": rps, "p50_us": pct(50), "p90_us": pct(90), "p99_us": pct(99),
                  "p999_us": pct(99.9)}))
PY
}

{
  run sequential 1 1 1
  run concurrent 4 32 1
} >"$work/runs.jsonl"
loops=$(curl -s "http://127.0.0.1:$stats/metrics" | sed -n 's/^isn_event_loops //p')
python3 - "$work/runs.jsonl" "$WORKERS" "$(nproc)" "${loops:-1}" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(json.dumps({"benchmark": "rpc_overhead", "query": "wind, k=10, 200-doc index", "isnd_workers": int(sys.argv[2]),
                  "isnd_loops": int(sys.argv[4]), "cpus": int(sys.argv[3]), "tool": "h2load", "runs": runs}, indent=2))
PY
