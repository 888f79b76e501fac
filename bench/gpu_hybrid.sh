#!/usr/bin/env bash
# isnd with the real GPU first stage under the scheduler, against CPU-only (issue 5, "Must show" 4).
# One isnd per configuration on the Debian index, 16 CPU workers, driven by isn-bench --sustained (open
# loop, Poisson arrivals, 50 ms deadline, Debian short queries, OR top-k): the highest offered rate at
# which three repeats all keep p99 < 50 ms and misses (late, partial, deadline exceeded, shed, errors,
# not sent) < 0.1% of the scheduled queries, bisected from MAX_RATE (DESIGN section 7). Configurations: cpu (no GPU), hybrid (GPU + CPU, learned routing),
# gpu_all (every query to the GPU: the device alone behind the same front end).
# Binaries (make CUDA=1 STATIC=1 BUILD=build-gpu build-gpu/bin/isnd build-gpu/bin/isn-bench) stripped
# into .devbin/bin, the index and queries in .devdata (idx-deb, short.queries.tsv), shared libraries the
# device lacks in .devlibs. On the device: run(carry .devbin .devdata .devlibs) BUILD=.devbin bash bench/gpu_hybrid.sh
# JSON lines in $OUT (or build-gpu/results-hybrid) and a summary table on stdout.
# DEADLINE_MS (default 50), K (10), INDEX, QUERIES, MAX_RATE, DURATION choose the run; ISND_ARGS adds isnd
# flags to every configuration (e.g. "--set server.loops=6"), BENCH_THREADS gives isn-bench generator
# threads (one thread cannot offer much more than 50,000 requests/s).
# ISND_CPUS / BENCH_CPUS (taskset lists, e.g. 0-11 and 12-15) keep the load generator off isnd's
# cores, as it would be on another machine; unset, both share every core.
# QUARTER=1 (issue 13, must-show 4): after its sustained search, each configuration also serves a
# quarter of the first configuration's sustained rate (list cpu first) three times at that fixed
# rate; the summary gives each run's p99 and misses (QUARTER_RATE fixes the rate instead).
set -u
B=${BUILD:-build-gpu}
D=${DEVDATA:-.devdata}
O=${OUT:-$B/results-hybrid}
INDEX=${INDEX:-$D/idx-deb}
QUERIES=${QUERIES:-$D/short.queries.tsv}
MAX_RATE=${MAX_RATE:-200000}
CONFIGS=${CONFIGS:-cpu hybrid gpu_all}
WORKERS=${WORKERS:-16}
K=${K:-10}
DURATION=${DURATION:-5}
ISND_PIN= BENCH_PIN=
[ -n "${ISND_CPUS:-}" ] && ISND_PIN="taskset -c $ISND_CPUS"
[ -n "${BENCH_CPUS:-}" ] && BENCH_PIN="taskset -c $BENCH_CPUS"
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device.txt"
echo "cpus: $(nproc); isnd on ${ISND_CPUS:-all}, isn-bench on ${BENCH_CPUS:-all}; $WORKERS workers"

http_get() { # port path
  exec 3<>/dev/tcp/127.0.0.1/"$1" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$2" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

run_config() { # name, isnd --set options...
  local name=$1; shift
  local log="$O/isnd-$name.log"
  $ISND_PIN "$B/bin/isnd" --index "$INDEX" --listen 127.0.0.1:7601 --stats-listen 127.0.0.1:7602 --workers "$WORKERS" \
    --set search.max_queue=100000 --set gpu.upload_before_ready=true "$@" ${ISND_ARGS:-} >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 600); do grep -q "ready:" "$log" && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  grep -E "gpu:|ready:" "$log" | head -5
  http_get 7602 /readyz
  # Which threads are busy, a few times into the sweep (TOP_AT seconds).
  (for t in ${TOP_AT:-}; do sleep "$t"; top -H -b -n 1 -w 160 -p $pid | head -25 >>"$O/top-$name.txt"; done) &
  timeout 580 $BENCH_PIN "$B/bin/isn-bench" --target 127.0.0.1:7601 --queries "$QUERIES" --sustained "$MAX_RATE" \
    --repeats 3 --label "$name" --duration "$DURATION" --warmup 1 --deadline-ms "${DEADLINE_MS:-50}" -k "$K" --mode or --connections 8 --threads "${BENCH_THREADS:-1}" \
    >"$O/bench-$name.json" 2>"$O/bench-$name.err"
  cat "$O/bench-$name.err"
  if [ "${QUARTER:-0}" = 1 ]; then
    [ -n "${QUARTER_RATE:-}" ] || QUARTER_RATE=$(python3 -c 'import json,sys; print(max(1, int(json.load(open(sys.argv[1]))["sustained"]["rate"] / 4)))' "$O/bench-$name.json")
    for r in 1 2 3; do
      $BENCH_PIN "$B/bin/isn-bench" --target 127.0.0.1:7601 --queries "$QUERIES" --rate "$QUARTER_RATE" --duration "$DURATION" \
        --warmup 1 --deadline-ms "${DEADLINE_MS:-50}" -k "$K" --mode or --connections 8 --threads "${BENCH_THREADS:-1}" \
        >"$O/quarter-$name-$r.json" 2>/dev/null
    done
  fi
  http_get 7602 /stats >"$O/stats-$name.json"
  http_get 7602 /metrics >"$O/metrics-$name.txt"
  kill -TERM $pid; wait $pid
}

for config in $CONFIGS; do
  case $config in
  cpu) run_config cpu ;;
  cpu_nice0) run_config cpu_nice0 --set scheduler.worker_nice=0 ;;
  hybrid_nice0) run_config hybrid_nice0 --set gpu.enable=true --set scheduler.worker_nice=0 ;;
  hybrid) run_config hybrid --set gpu.enable=true --set gpu.training_queries="$QUERIES" ;;
  gpu_all) run_config gpu_all --set gpu.enable=true --set gpu.route_all=true ;;
  esac
done

python3 - "$O" $CONFIGS <<'PY'
import json, sys
out, configs = sys.argv[1], sys.argv[2:]
summary = []
for c in configs:
    try:
        result = json.load(open(f"{out}/bench-{c}.json"))
    except Exception as e:
        print(f"{c}: no result ({e})"); continue
    try:
        stats = json.load(open(f"{out}/stats-{c}.json"))
    except Exception:
        stats = {}
    best = result["sustained"]["rate"]
    print(f"== {c}: sustained {best:.0f}/s, p50 {result['sustained']['p50_ms']:.2f} ms, p99 {result['sustained']['p99_ms']:.2f} ms, "
          f"misses {100*result['sustained']['misses']:.3f}%, on time {result['sustained']['on_time_per_s']:.0f}/s")
    sch = stats.get("scheduler", {})
    row = {"config": c, "sustained_rate": best, "ran": sch.get("ran"), "routed": sch.get("routed"),
           "gpu_batch_us": sch.get("gpu_batch_us"), "batches": sch.get("batches"),
           "batch_jobs": sch.get("batch_jobs"), "mape_percent": sch.get("cost_model_mape_percent"),
           "gpu": (stats.get("gpu") or {}).get("first_stage")}
    quarter = []
    for r in (1, 2, 3):
        try:
            q = json.load(open(f"{out}/quarter-{c}-{r}.json"))
        except Exception:
            continue
        misses = q["scheduled"] - q["status"]["ok"] + q["partial"] + q["late"]
        quarter.append({"rate": q["target_rate"], "p99_ms": q["latency_us"]["p99"] / 1000, "misses": misses,
                        "shed": q["status"]["resource_exhausted"]})
    if quarter:
        row["quarter_rate_runs"] = quarter
        print(f"   at {quarter[0]['rate']:.0f}/s: p99 " + ", ".join(f"{q['p99_ms']:.2f}" for q in quarter) +
              " ms; misses " + ", ".join(str(q["misses"]) for q in quarter) + "; shed " + ", ".join(str(q["shed"]) for q in quarter))
    print(json.dumps(row))
    summary.append(row)
json.dump(summary, open(f"{out}/summary.json", "w"))
PY
