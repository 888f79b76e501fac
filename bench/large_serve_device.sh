#!/usr/bin/env bash
# A partition as large as one GPU holds, built from text and served (issue 39, must-show 3), on the GPU
# machine: DOCS documents of generated JSON Lines (fitted to the Debian index) indexed with the
# bounded-memory build on all cores, the GPU's answers checked against the CPU's, the node's time to
# ready (on the CPU, then with the GPU), its sustained rate (hybrid, OR top-10, DEADLINE_MS) and a
# generation swap under load. Stages (STAGES, in this order; each prints JSON lines into $O):
#   build   bench/build_large.sh (corpus in CORPUS, by default in /dev/shm; removed after the build),
#           then `isn-index verify` timed
#   genb    a second generation for the swap: `isn-index synth` of as many documents (another seed,
#           the same fit), so that the swap uploads a different partition
#   check   bench_gpu on the built index: every query's top-10 and top-1000 on the GPU against the CPU,
#           the GPU's rates and the CPU's on all cores
#   serve   isnd (GPU, hybrid) through the link WORK/current: start to ready and to the GPU serving,
#           isn-bench --sustained (3 repeats), then isn-bench at half that rate while the link flips to
#           generation B and back (SIGHUP each), counting every failed query
#   bash bench/large_serve_device.sh
# Environment: B (binaries: B/bin/{isnd,isn-index,isn-bench}, B/bench/bench_gpu; .devbin), D (data:
# D/idx-deb, D/debpkg.queries.tsv; .devdata), WORK (/tmp/isn-large), DOCS (100000000), THREADS (all
# cores), MEMORY (16GiB), CORPUS (/dev/shm/isn-large.jsonl), O (${OUT:-/tmp/isn-large-out}),
# ISND_CPUS (0-11), BENCH_CPUS (12-15), WORKERS (12), DEADLINE_MS (200), MAX_RATE (100000),
# SWAP_SECONDS (load before, between and after the two swaps: 10), EMULATE=1 (no GPU: the emulated
# device, for a trial at small DOCS).
set -euo pipefail
B=${B:-.devbin}
D=${D:-.devdata}
WORK=${WORK:-/tmp/isn-large}
DOCS=${DOCS:-100000000}
THREADS=${THREADS:-$(nproc)}
MEMORY=${MEMORY:-16GiB}
CORPUS=${CORPUS:-/dev/shm/isn-large.jsonl}
O=${O:-${OUT:-/tmp/isn-large-out}}
ISND_CPUS=${ISND_CPUS:-0-11}
BENCH_CPUS=${BENCH_CPUS:-12-15}
WORKERS=${WORKERS:-12}
DEADLINE_MS=${DEADLINE_MS:-200}
MAX_RATE=${MAX_RATE:-100000}
SWAP_SECONDS=${SWAP_SECONDS:-10}
mkdir -p "$WORK" "$O"
emulate=(); gpu_flags=(--set gpu.enable=true)
if [ "${EMULATE:-0}" = 1 ]; then emulate=(--emulate); gpu_flags+=(--set gpu.emulate=true); fi
stamp() { date +%s.%N; }
since() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$1" "$(stamp)"; }

stage_build() {
  rm -rf "$WORK/index"
  CORPUS=$CORPUS FIT_QUERIES=$D/debpkg.queries.tsv bash bench/build_large.sh "$B" "$DOCS" "$D/idx-deb" "$WORK" \
    "$THREADS" "$MEMORY" | tee "$O/build.json"
  rm -f "$CORPUS"
  local t0; t0=$(stamp)
  "$B/bin/isn-index" verify "$WORK/index" >"$O/verify.txt" 2>&1
  echo "{\"stage\":\"verify\",\"seconds\":$(since "$t0"),\"result\":\"$(tail -1 "$O/verify.txt" | tr -d '"')\"}" | tee -a "$O/stages.jsonl"
  ln -sfn index "$WORK/current"
}

stage_genb() {
  rm -rf "$WORK/gen-b"
  local t0; t0=$(stamp)
  "$B/bin/isn-index" synth --docs "$DOCS" --seed 2 --fit "$D/idx-deb" --fit-queries "$D/debpkg.queries.tsv" \
    --queries 1000 --threads "$THREADS" --out "$WORK/gen-b" >"$O/genb.json"
  echo "{\"stage\":\"genb\",\"seconds\":$(since "$t0"),\"bytes\":$(du -sb "$WORK/gen-b" | cut -f1)}" | tee -a "$O/stages.jsonl"
}

stage_check() {
  timeout 560 "$B/bench/bench_gpu" --index "$WORK/index" --queries "$WORK/queries.tsv" --ks 10,1000 --batches 16,256 \
    --modes or --max-queries 1000 --threads "$THREADS" --cpu-seconds 2 --label large "${emulate[@]}" \
    >"$O/check.jsonl" 2>"$O/check.err" || { tail -5 "$O/check.err"; return 1; }
  python3 - "$O/check.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    keep = {k: r[k] for k in ("bench", "label", "mode", "k", "batch", "qps", "threads", "mismatches", "queries",
                              "equal", "fallbacks", "open_seconds", "upload_seconds") if k in r}
    print(json.dumps(keep))
PY
}

metric() { python3 -c '
import re, sys, urllib.request
body = urllib.request.urlopen("http://127.0.0.1:7622/metrics").read().decode()
m = re.search("^" + re.escape(sys.argv[1]) + r" (\S+)$", body, re.M)
print(m.group(1) if m else "null")' "$1"; }
readyz() { python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:7622/readyz").read().decode().strip())' 2>/dev/null || true; }

stage_serve() {
  [ -e "$WORK/current" ] || ln -sfn index "$WORK/current"
  local log="$O/isnd.log" t0 pid
  t0=$(stamp)
  taskset -c "$ISND_CPUS" "$B/bin/isnd" --index "$WORK/current" --listen 127.0.0.1:7621 --stats-listen 127.0.0.1:7622 \
    --workers "$WORKERS" --set index.watch_interval=0 "${gpu_flags[@]}" >"$log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' RETURN
  local ready_at="" loading_seen=false
  for _ in $(seq 1 6000); do
    if [ -z "$ready_at" ] && grep -q "ready: serving" "$log"; then ready_at=$(since "$t0"); fi
    if [ -n "$ready_at" ]; then
      case "$(readyz)" in *"GPU loading"*) loading_seen=true ;; ready*) break ;; esac
    fi
    kill -0 $pid 2>/dev/null || { tail -20 "$log"; return 1; }
    sleep 0.1
  done
  echo "{\"stage\":\"start\",\"ready_seconds_seen\":$ready_at,\"gpu_loading_seen\":$loading_seen,\"isn_startup_seconds\":$(metric isn_startup_seconds),\"isn_gpu_startup_seconds\":$(metric isn_gpu_startup_seconds),\"readyz\":\"$(readyz)\"}" | tee -a "$O/stages.jsonl"
  grep -E "opened in|gpu:|ready:" "$log" | head -12
  taskset -c "$BENCH_CPUS" "$B/bin/isn-bench" --target 127.0.0.1:7621 --queries "$WORK/queries.tsv" --sustained "$MAX_RATE" \
    --repeats 3 --duration 2 --warmup 1 --deadline-ms "$DEADLINE_MS" -k 10 --mode or --connections 16 --threads 4 \
    --label large-hybrid >"$O/sustained.json" 2>"$O/sustained.err"
  tail -3 "$O/sustained.err"
  # what the node learned meanwhile (the GPU's pruned/exhaustive choice per batch size, the scheduler's
  # scales), for a search that ends far below the fixed-rate capacity
  python3 -c 'import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:7622/metrics").read().decode())' \
    >"$O/metrics-after-sustained.prom" || true
  local rate half
  rate=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sustained"]["rate"])' "$O/sustained.json")
  half=$(python3 -c "print(max(1, int($rate / 2)))")
  echo "{\"stage\":\"sustained\",\"rate\":$rate}" | tee -a "$O/stages.jsonl"
  [ -d "$WORK/gen-b" ] || { echo "no generation B (stage genb): no swap"; return 0; }
  # The swaps under load: the link to B, SIGHUP, then back to A, SWAP_SECONDS of load around each
  # (isn-bench in back-to-back runs of 5 s until the swaps are done, each run's JSON a line).
  rm -f "$O/swap-bench.jsonl" "$WORK/swaps-done"
  (while [ ! -e "$WORK/swaps-done" ]; do
     taskset -c "$BENCH_CPUS" "$B/bin/isn-bench" --target 127.0.0.1:7621 --queries "$WORK/queries.tsv" --rate "$half" \
       --duration 5 --warmup 0 --deadline-ms "$DEADLINE_MS" -k 10 --mode or --connections 16 --threads 4 \
       --label large-swap >>"$O/swap-bench.jsonl" 2>>"$O/swap-bench.err"
   done) &
  local bench=$! s target
  sleep "$SWAP_SECONDS"
  for s in 1 2; do
    if [ $s = 1 ]; then target=gen-b; else target=index; fi
    local done_before; done_before=$(grep -c "serves new requests" "$log" || true)
    local moved_before; moved_before=$(grep -c "gpu: the first stage serves generation [0-9a-f]* (" "$log" || true)
    local t1; t1=$(stamp)
    ln -sfn "$target" "$WORK/current.next" && mv -T "$WORK/current.next" "$WORK/current"
    kill -HUP $pid
    for _ in $(seq 1 3000); do
      [ "$(grep -c "gpu: the first stage serves generation [0-9a-f]* (" "$log" || true)" -gt "$moved_before" ] && break
      grep -q "index generation refused" "$log" && break
      sleep 0.1
    done
    echo "{\"stage\":\"swap\",\"to\":\"$target\",\"seconds_to_gpu\":$(since "$t1"),\"swapped\":$([ "$(grep -c "serves new requests" "$log" || true)" -gt "$done_before" ] && echo true || echo false)}" | tee -a "$O/stages.jsonl"
    sleep "$SWAP_SECONDS"
  done
  touch "$WORK/swaps-done"
  wait $bench || true
  grep -E "SIGHUP|generation|gpu:" "$log" | tail -8
  python3 - "$O/swap-bench.jsonl" <<'PY' | tee -a "$O/stages.jsonl"
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
keys = ("ok", "resource_exhausted", "unavailable", "other", "transport_error", "client_timeout")
status = {k: sum(r["status"][k] for r in runs) for k in keys}
failed = sum(v for k, v in status.items() if k != "ok")
print(json.dumps({"stage": "swap_load", "runs": len(runs), "offered_rate": runs[0]["offered_rate"] if runs else None,
                  "failed": failed, "status": status, "deadline_miss": sum(r["deadline_miss"] for r in runs),
                  "p99_ms_max": max(r["latency_us"]["p99"] for r in runs) / 1e3 if runs else None}))
PY
}

for stage in ${STAGES:-build genb check serve}; do
  echo "== $stage ($(date +%T))"
  "stage_$stage"
done
