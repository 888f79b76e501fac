#!/usr/bin/env bash
# The front end's rate (issue 13, must-show 1): isnd answering a trivial Search (one rare term, k=10,
# a 200-document index) at RATE requests/s offered by h2load (Debian nghttp2-client), isnd and the
# load generator pinned to separate cores. A run passes when h2load completed at least 98% of the
# offered rate, every reply was gRPC OK (isnd's own counters), and p99 < P99_MS; REPEATS runs, all
# must pass. Prints JSON (every run, then "passed").
#
#   BUILD=build-gpu ISND_CPUS=0-11 BENCH_CPUS=12-15 LOOPS=4 WORKERS=8 bash bench/frontend_rate.sh
#
# Settings (environment): BUILD (isnd and isn-index, default build), ISND_CPUS / BENCH_CPUS (taskset
# lists; empty = unpinned), LOOPS (server.loops, default 0 = isnd's default), WORKERS (search workers,
# default 4), RATE (200000), P99_MS (5), DURATION (whole seconds per run, 10), WARMUP (whole seconds, 2),
# REPEATS (3), ISND_ARGS (more isnd flags, e.g. "--set scheduler.gpu_max_batch=64"), CONNECTIONS (64), STREAMS (in flight per connection at most, 32), THREADS (h2load's,
# default one per BENCH_CPUS core). h2load's --rps paces each connection at RATE/CONNECTIONS; its
# latency counts from each request's send, so a run that falls behind the offered rate fails on
# the rate instead.
# TOOL=isn-bench FIXED=1: REPEATS open-loop isn-bench runs at RATE (Poisson arrivals; h2load's --rps
# sends each connection's requests in bursts, which adds its own queueing to the latency), sent with
# DEADLINE_MS (default 1000) so that the node neither sheds nor cuts them short; judged as with h2load.
# TOOL=isn-bench (the default where there is no h2load) measures the same with `isn-bench --sustained
# MAX_RATE` (default 2 x RATE) instead:
# open-loop Poisson load from THREADS generator threads (CONNECTIONS spread over them), P99_MS sent
# as the deadline, REPEATS runs per probed rate; it passes when the sustained rate is at least RATE.
set -euo pipefail
BUILD=${BUILD:-build}
ISND_CPUS=${ISND_CPUS:-}
BENCH_CPUS=${BENCH_CPUS:-}
LOOPS=${LOOPS:-0}
WORKERS=${WORKERS:-4}
RATE=${RATE:-200000}
P99_MS=${P99_MS:-5}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
REPEATS=${REPEATS:-3}
CONNECTIONS=${CONNECTIONS:-64}
STREAMS=${STREAMS:-32}
TOOL=${TOOL:-$(command -v h2load >/dev/null && echo h2load || echo isn-bench)}
case $TOOL in
  h2load) command -v h2load >/dev/null || { echo "frontend_rate: h2load missing (apt-get install nghttp2-client)" >&2; exit 2; } ;;
  isn-bench) [ -x "$BUILD/bin/isn-bench" ] || { echo "frontend_rate: build isn-bench first (make programs)" >&2; exit 2; } ;;
  *) echo "frontend_rate: TOOL is h2load or isn-bench, not $TOOL" >&2; exit 2 ;;
esac
[ -x "$BUILD/bin/isnd" ] && [ -x "$BUILD/bin/isn-index" ] || { echo "frontend_rate: build isnd and isn-index first (make programs)" >&2; exit 2; }
PIN_ISND=(); [ -n "$ISND_CPUS" ] && PIN_ISND=(taskset -c "$ISND_CPUS")
PIN_BENCH=(); [ -n "$BENCH_CPUS" ] && PIN_BENCH=(taskset -c "$BENCH_CPUS")
THREADS=${THREADS:-$("${PIN_BENCH[@]}" nproc)}
PER_CLIENT=$(( (RATE + CONNECTIONS - 1) / CONNECTIONS ))

work=$(mktemp -d /tmp/isn_frontend_rate.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT

# A tiny partition where "zeppelin" is in one document: the query's own cost is negligible.
for i in $(seq 1 200); do
  extra=""; [ "$i" = 77 ] && extra=" zeppelin"
  printf '{"id":"d%d","title":"doc %d","body":"wind tunnel flow %d boundary layer%s"}\n' "$i" "$i" $((i % 7)) "$extra"
done >"$work/docs.jsonl"
"$BUILD/bin/isn-index" build --quiet --input "$work/docs.jsonl" --out "$work/idx" >/dev/null

"${PIN_ISND[@]}" "$BUILD/bin/isnd" --index "$work/idx" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 \
  --workers "$WORKERS" --set server.loops="$LOOPS" --set search.max_queue=100000 \
  --set server.max_connections=100000 ${ISND_ARGS:-} 2>"$work/isnd.log" &
pid=$!
for _ in $(seq 1 400); do grep -q "ready:" "$work/isnd.log" && break; sleep 0.05; done
grep -q "ready:" "$work/isnd.log" || { cat "$work/isnd.log" >&2; exit 1; }
port=$(sed -n 's/.*gRPC listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/isnd.log")
stats=$(sed -n 's|.*stats listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/isnd.log")
# isnd's /metrics (python3 rather than curl: the GPU machine may have no curl)
metrics() { python3 -c "import urllib.request as u, sys; sys.stdout.write(u.urlopen('http://127.0.0.1:$stats/metrics').read().decode())"; }
loops=$(metrics | sed -n 's/^isn_event_loops //p')

# SearchRequest{query: "zeppelin", k: 10}, framed: flags 0, length 12, then the protobuf bytes.
printf '\x00\x00\x00\x00\x0c\x0a\x08zeppelin\x18\x0a' >"$work/request.bin"

search_counts() { # "ok other": Search replies isnd answered, OK and not
  metrics | awk '/^isn_requests_total\{method="isn.v1.Search\/Search"/ {
    if ($0 ~ /code="OK"/) ok += $2; else other += $2 } END { printf "%d %d\n", ok, other }'
}

run() { # repeat
  local r=$1 before after
  before=$(search_counts)
  "${PIN_BENCH[@]}" h2load -D "$DURATION" --warm-up-time="$WARMUP" -c "$CONNECTIONS" -m "$STREAMS" -t "$THREADS" \
    --rps="$PER_CLIENT" -d "$work/request.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
    --log-file "$work/run$r.log" "http://127.0.0.1:$port/isn.v1.Search/Search" >"$work/run$r.out"
  after=$(search_counts)
  python3 - "$r" "$work/run$r.out" "$work/run$r.log" "$before" "$after" "$RATE" "$P99_MS" "$DURATION" <<'PY'
import json, re, sys
r, out, log, before, after = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5].split()
rate, p99_bound, duration = float(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])
text = open(out).read()
rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", text).group(1))
done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", text)
succeeded, failed, errored, timeout = (int(done.group(i)) for i in (2, 3, 4, 5))
lat = sorted(int(line.split("\t")[2]) for line in open(log) if line.strip())
def pct(p):
    return lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))] if lat else None
grpc_ok, grpc_other = int(after[0]) - int(before[0]), int(after[1]) - int(before[1])
p99_ms = pct(99) / 1000.0 if lat else None
passed = (rps >= 0.98 * rate and p99_ms is not None and p99_ms < p99_bound and grpc_other == 0
          and failed == 0 and errored == 0 and timeout == 0)
print(json.dumps({"repeat": r, "offered_per_s": rate, "completed_per_s": rps, "measured_requests": len(lat),
                  "h2load_succeeded": succeeded, "h2load_failed": failed, "h2load_errored": errored,
                  "h2load_timeout": timeout, "grpc_ok": grpc_ok, "grpc_not_ok": grpc_other,
                  "p50_ms": pct(50) / 1000.0 if lat else None, "p99_ms": p99_ms,
                  "p999_ms": pct(99.9) / 1000.0 if lat else None, "passed": passed}))
PY
}

if [ "$TOOL" = isn-bench ] && [ "${FIXED:-0}" = 1 ]; then
  # REPEATS open-loop runs at RATE with a generous deadline (DEADLINE_MS, 1000): a run passes when
  # isn-bench completed at least 98% of RATE, every reply was OK, and p99 < P99_MS.
  printf 'q1\tzeppelin\n' >"$work/queries.tsv"
  per_thread=$(( (CONNECTIONS + THREADS - 1) / THREADS ))
  for r in $(seq 1 "$REPEATS"); do
    "${PIN_BENCH[@]}" "$BUILD/bin/isn-bench" --target "127.0.0.1:$port" --queries "$work/queries.tsv" -k 10 \
      --rate "$RATE" --threads "$THREADS" --connections "$per_thread" --deadline-ms "${DEADLINE_MS:-1000}" \
      --duration "$DURATION" --warmup "$WARMUP" >"$work/fixed-$r.json" 2>/dev/null
  done
  python3 - "$work" "$REPEATS" "$loops" "$WORKERS" "$ISND_CPUS" "$BENCH_CPUS" "$THREADS" "$per_thread" "$RATE" \
    "$P99_MS" <<'PY'
import json, sys
a = sys.argv
runs = []
for r in range(1, int(a[2]) + 1):
    d = json.load(open(f"{a[1]}/fixed-{r}.json"))
    p99 = d["latency_us"]["p99"] / 1000.0
    not_ok = d["scheduled"] - d["status"]["ok"]
    runs.append({"repeat": r, "offered_per_s": d["offered_rate"], "completed_per_s": d["throughput"],
                 "p50_ms": d["latency_us"]["p50"] / 1000.0, "p99_ms": p99, "p999_ms": d["latency_us"]["p999"] / 1000.0,
                 "not_ok": not_ok, "status": d["status"],
                 "passed": d["throughput"] >= 0.98 * float(a[9]) and not_ok == 0 and p99 < float(a[10])})
print(json.dumps({"benchmark": "frontend_rate", "query": "zeppelin (df 1), k=10, 200-document index",
                  "isnd_loops": int(a[3] or 0), "isnd_workers": int(a[4]), "isnd_cpus": a[5] or "all",
                  "bench_cpus": a[6] or "all", "tool": "isn-bench --rate", "threads": int(a[7]),
                  "connections_per_thread": int(a[8]), "offered_per_s": float(a[9]), "p99_bound_ms": float(a[10]),
                  "runs": runs, "passed": all(r["passed"] for r in runs)}, indent=2))
PY
  exit 0
fi
if [ "$TOOL" = isn-bench ]; then
  printf 'q1\tzeppelin\n' >"$work/queries.tsv"
  per_thread=$(( (CONNECTIONS + THREADS - 1) / THREADS ))
  "${PIN_BENCH[@]}" "$BUILD/bin/isn-bench" --target "127.0.0.1:$port" --queries "$work/queries.tsv" -k 10 \
    --sustained "${MAX_RATE:-$((2 * RATE))}" --threads "$THREADS" --connections "$per_thread" --deadline-ms "$P99_MS" \
    --duration "$DURATION" --warmup "$WARMUP" --repeats "$REPEATS" --label "loops=$loops" >"$work/sustained.json"
  python3 - "$work/sustained.json" "$loops" "$WORKERS" "$ISND_CPUS" "$BENCH_CPUS" "$THREADS" "$per_thread" "$RATE" \
    "$P99_MS" <<'PY'
import json, sys
a = sys.argv
result = json.load(open(a[1]))
print(json.dumps({"benchmark": "frontend_rate", "query": "zeppelin (df 1), k=10, 200-document index",
                  "isnd_loops": int(a[2] or 0), "isnd_workers": int(a[3]), "isnd_cpus": a[4] or "all",
                  "bench_cpus": a[5] or "all", "tool": "isn-bench --sustained", "threads": int(a[6]),
                  "connections_per_thread": int(a[7]), "wanted_per_s": float(a[8]), "p99_bound_ms": float(a[9]),
                  "sustained": result["sustained"], "probes": result["probes"],
                  "passed": result["sustained"]["rate"] >= float(a[8])}, indent=2))
PY
  exit 0
fi
for r in $(seq 1 "$REPEATS"); do run "$r"; done >"$work/runs.jsonl"
python3 - "$work/runs.jsonl" "$loops" "$WORKERS" "$ISND_CPUS" "$BENCH_CPUS" "$CONNECTIONS" "$STREAMS" "$THREADS" \
  "$RATE" "$P99_MS" "$DURATION" "$(nproc)" <<'PY'
import json, sys
a = sys.argv
runs = [json.loads(l) for l in open(a[1])]
print(json.dumps({"benchmark": "frontend_rate", "query": "zeppelin (df 1), k=10, 200-document index",
                  "isnd_loops": int(a[2] or 0), "isnd_workers": int(a[3]), "isnd_cpus": a[4] or "all",
                  "bench_cpus": a[5] or "all", "connections": int(a[6]), "streams_per_connection": int(a[7]),
                  "h2load_threads": int(a[8]), "offered_per_s": float(a[9]), "p99_bound_ms": float(a[10]),
                  "seconds_per_run": float(a[11]), "cpus": int(a[12]), "tool": "h2load --rps", "runs": runs,
                  "passed": all(r["passed"] for r in runs)}, indent=2))
PY
