#!/usr/bin/env bash
# Index generation swaps under load (issue 17): isnd serves the Debian sample through a `current`
# symlink; isn-bench offers half of the node's sustained rate (Poisson, short Debian queries, a
# deadline each) while the link flips SWAPS times between two generations (A: the sample; B: the
# sample without every 50th package, as a daily rebuild would differ), each flip followed by SIGHUP.
# Runs with and without swaps alternate (REPEATS of each, same warm process), so the ratio is taken
# between neighbours. Prints JSON: per run the failures (any status but OK, transport errors),
# deadline misses and p99; the medians; the p99 ratio swaps/baseline (median of the per-repeat
# ratios); RSS at the start and after the last swap run; swap durations from /metrics.
#   bash bench/generation_swap.sh [BUILD_DIR]
# Environment: CORPUS (BUILD/sample/packages.jsonl: make sample-index), QUERIES
# (BUILD/data/deb/short.queries.tsv, else examples/queries.tsv), WORKERS (isnd's, default nproc),
# RATE (default: half of the sustained rate that isn-bench --sustained finds up to MAX_RATE, 20000),
# DURATION (10 s per run), REPEATS (3), SWAPS (20), DEADLINE_MS (50), ISND_ARGS (more isnd flags, e.g.
# "--set gpu.enable=true" on the GPU machine; then GPU memory is read with nvidia-smi when present).
set -euo pipefail
BUILD=${1:-${BUILD:-build}}
CORPUS=${CORPUS:-$BUILD/sample/packages.jsonl}
QUERIES=${QUERIES:-$BUILD/data/deb/short.queries.tsv}
[ -f "$QUERIES" ] || QUERIES=examples/queries.tsv
WORKERS=${WORKERS:-$(nproc)}
RATE=${RATE:-0}
MAX_RATE=${MAX_RATE:-20000}
DURATION=${DURATION:-10}
REPEATS=${REPEATS:-3}
SWAPS=${SWAPS:-20}
DEADLINE_MS=${DEADLINE_MS:-50}
ISND_ARGS=${ISND_ARGS:-}
for program in isnd isn-index isn-bench; do
  [ -x "$BUILD/bin/$program" ] || { echo "generation_swap: $BUILD/bin/$program missing (make programs)" >&2; exit 2; }
done
[ -f "$CORPUS" ] || { echo "generation_swap: $CORPUS missing (make sample-index)" >&2; exit 2; }

work=$(mktemp -d /tmp/isn_generation_swap.XXXXXX)
pid="" bench_pid=""
cleanup() {
  [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$BUILD/bin/isn-index" build --quiet --input "$CORPUS" --out "$work/gen-a" >/dev/null
awk 'NR % 50' "$CORPUS" >"$work/b.jsonl"
"$BUILD/bin/isn-index" build --quiet --input "$work/b.jsonl" --out "$work/gen-b" >/dev/null
ln -s gen-a "$work/current"

# shellcheck disable=SC2086 # ISND_ARGS is a list of flags
"$BUILD/bin/isnd" --index "$work/current" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 --workers "$WORKERS" \
  --set gpu.upload_before_ready=true \
  --set search.max_queue=100000 --set index.watch_interval=0 $ISND_ARGS >"$work/isnd.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q 'ready: serving' "$work/isnd.log" && break; sleep 0.1; done
grep -q 'ready: serving' "$work/isnd.log" || { cat "$work/isnd.log" >&2; exit 1; }
grpc=$(sed -n 's/.*gRPC listening on \([0-9.:]*\).*/\1/p' "$work/isnd.log" | head -1)
stats=$(sed -n 's|.*stats listening on http://\([0-9.:]*\).*|\1|p' "$work/isnd.log" | head -1)

rss() { curl -s "http://$stats/stats" | sed -n 's/.*"resident_memory_bytes":\([0-9]*\).*/\1/p'; }
gpu_mib() { command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 || echo null; }
swaps_done() { grep -c 'serves new requests' "$work/isnd.log" || true; }
bench() { # rate duration
  "$BUILD/bin/isn-bench" --target "$grpc" --queries "$QUERIES" --rate "$1" --duration "$2" --warmup 1 \
    --deadline-ms "$DEADLINE_MS" --max-inflight 100000
}

sustained=null
if [ "$RATE" = 0 ]; then
  "$BUILD/bin/isn-bench" --target "$grpc" --queries "$QUERIES" --sustained "$MAX_RATE" --repeats 3 --duration 2 \
    --warmup 0.5 --deadline-ms "$DEADLINE_MS" --label isnd >"$work/sustained.json" 2>"$work/sustained.txt"
  sustained=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sustained"]["rate"])' "$work/sustained.json")
  RATE=$(python3 -c 'import sys; print(max(1.0, float(sys.argv[1]) / 2))' "$sustained")
fi
bench "$RATE" 2 >/dev/null # warm
rss_start=$(rss) gpu_start=$(gpu_mib)

target=a
: >"$work/runs.jsonl"
for repeat in $(seq "$REPEATS"); do
  bench "$RATE" "$DURATION" | sed "s/^/{\"repeat\":$repeat,\"swaps\":false,\"bench\":/; s/\$/}/" >>"$work/runs.jsonl"
  bench "$RATE" "$DURATION" >"$work/swap.json" &
  bench_pid=$!
  sleep 1 # isn-bench's warm-up: the swaps fall in the measured seconds
  gap=$(python3 -c 'import sys; print(0.9 * float(sys.argv[1]) / int(sys.argv[2]))' "$DURATION" "$SWAPS")
  start_swaps=$(swaps_done)
  for s in $(seq "$SWAPS"); do
    if [ $target = a ]; then target=b; else target=a; fi
    ln -s "gen-$target" "$work/current.next" && mv -T "$work/current.next" "$work/current"
    kill -HUP "$pid"
    for _ in $(seq 3000); do [ "$(swaps_done)" -ge $((start_swaps + s)) ] && break; sleep 0.01; done
    [ "$(swaps_done)" -ge $((start_swaps + s)) ] || { tail -20 "$work/isnd.log" >&2; echo "generation_swap: swap $s did not happen" >&2; exit 1; }
    sleep "$gap"
  done
  wait "$bench_pid"
  bench_pid=""
  sed "s/^/{\"repeat\":$repeat,\"swaps\":true,\"bench\":/; s/\$/}/" "$work/swap.json" >>"$work/runs.jsonl"
done
sleep 1 # the last replaced generation's requests end; jemalloc returns what it freed over a few seconds
rss_end=$(rss) gpu_end=$(gpu_mib)
curl -s "http://$stats/metrics" >"$work/metrics.txt"

python3 - "$work/runs.jsonl" "$work/metrics.txt" "$RATE" "$sustained" "$rss_start" "$rss_end" "$gpu_start" "$gpu_end" \
  "$WORKERS" "$SWAPS" "$DURATION" "$DEADLINE_MS" "$QUERIES" "$ISND_ARGS" <<'PY'
import json, re, statistics, sys
(runs_path, metrics_path, rate, sustained, rss_start, rss_end, gpu_start, gpu_end, workers, swaps, duration,
 deadline_ms, queries, isnd_args) = sys.argv[1:]
runs = [json.loads(line) for line in open(runs_path)]
metrics = open(metrics_path).read()
def metric(pattern):
    m = re.search(pattern, metrics, re.M)
    return float(m.group(1)) if m else None
def row(r):
    b = r["bench"]
    st = b["status"]
    failed = st["resource_exhausted"] + st["unavailable"] + st["other"] + st["transport_error"] + st["client_timeout"]
    return {"repeat": r["repeat"], "swaps": r["swaps"], "offered_rate": b["offered_rate"], "ok": st["ok"],
            "failed": failed, "status": st, "deadline_miss": b["deadline_miss"],
            "deadline_miss_rate": b["deadline_miss_rate"], "p50_ms": b["latency_us"]["p50"] / 1e3,
            "p99_ms": b["latency_us"]["p99"] / 1e3, "partial": b["partial"]}
rows = [row(r) for r in runs]
base = [r for r in rows if not r["swaps"]]
swap = [r for r in rows if r["swaps"]]
ratios = [s["p99_ms"] / b["p99_ms"] for b, s in zip(base, swap) if b["p99_ms"] > 0]
med = lambda xs: statistics.median(xs) if xs else None
num = lambda s: None if s in ("", "null") else float(s)
swap_count, swap_sum = metric(r"^isn_index_swap_duration_seconds_count (\S+)"), metric(r"^isn_index_swap_duration_seconds_sum (\S+)")
print(json.dumps({
    "benchmark": "generation_swap", "queries": queries, "deadline_ms": int(deadline_ms), "isnd_workers": int(workers),
    "isnd_args": isnd_args, "sustained_rate": num(sustained), "offered_rate": float(rate),
    "swaps_per_run": int(swaps), "run_seconds": float(duration),
    "baseline": {"failed": sum(r["failed"] for r in base), "deadline_miss": sum(r["deadline_miss"] for r in base),
                 "p99_ms_median": med([r["p99_ms"] for r in base])},
    "with_swaps": {"failed": sum(r["failed"] for r in swap), "deadline_miss": sum(r["deadline_miss"] for r in swap),
                   "p99_ms_median": med([r["p99_ms"] for r in swap])},
    "p99_ratio_median": med(ratios), "p99_ratios": ratios,
    "swaps_ok": metric(r'^isn_index_swaps_total\{result="ok"\} (\S+)'),
    "swaps_refused": metric(r'^isn_index_swaps_total\{result="refused"\} (\S+)'),
    "swap_seconds_mean": swap_sum / swap_count if swap_count else None,
    "generations_retiring_at_end": metric(r"^isn_index_generations_retiring (\S+)"),
    "rss_bytes": {"start": num(rss_start), "end": num(rss_end)},
    "gpu_memory_used_mib": {"start": num(gpu_start), "end": num(gpu_end)},
    "runs": rows}, indent=2))
PY
