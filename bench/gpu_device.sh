#!/usr/bin/env bash
# GPU first stage on the GPU machine, in stages (one device call each fits the call's time limit):
#   bash bench/gpu_device.sh tests    GPU tests (test_gpu, test_gpu_backend)
#   bash bench/gpu_device.sh small    equality and rates on Cranfield and Debian (debpkg and short logs)
#   bash bench/gpu_device.sh synth    the 20M-document synthetic partition fitted to Debian (built once)
#   bash bench/gpu_device.sh prefix   that partition with half of it resident (pruned-prefix cache)
#   bash bench/gpu_device.sh ab       that partition, OR, the range kernels' touched-slot report against the
#                                     dense one (ISN_GPU_DENSE_REPORT=1), interleaved, REPEATS times each
#   bash bench/gpu_device.sh narrow   the same with narrow accumulators (the default) against compact ones
#                                     (ISN_GPU_NARROW=0)
#   bash bench/gpu_device.sh compact  compact accumulators against wide ones (ISN_GPU_COMPACT=0), narrow off
#   bash bench/gpu_device.sh dense    narrow ranges with floors reported without their bitmap (the slots the adds
#                                     took to the floor; the default) against
#                                     their bitmap (ISN_GPU_DENSE_FLOOR=0)
#   bash bench/gpu_device.sh bound    the bound pass for top-10 and the like (groups of ranges in upper-bound
#                                     counters, then an exact rescore; the default) against the short kernel's
#                                     exact pass over every range (ISN_GPU_BOUND_PASS=0)
#   bash bench/gpu_device.sh filter   that partition, OR, every query with the filter bucket=0 (an int attribute
#                                     hashing the documents into 10 buckets: about 10% kept, issue 40) against
#                                     the same queries without it, interleaved, REPEATS times each
#                                     (ISN_GPU_FILTER_SAMPLING=0: filtered queries score every range in one round
#                                     instead of sampling first; top-10 then takes the bound pass without a floor)
#   bash bench/gpu_device.sh trees    test_gpu_trees alone (query trees and filtered bags of words on the GPU)
#   bash bench/gpu_device.sh sort     the one-kernel final sort (the default) against CUB's segmented sort
#                                     (ISN_GPU_SEGMENTED_SORT=1)
# Binaries come from
#   make CUDA=1 STATIC=1 BUILD=build-gpu build-gpu/tests/test_gpu build-gpu/tests/test_gpu_backend build-gpu/tests/test_gpu_trees \
#        build-gpu/bench/bench_gpu build-gpu/bin/isn-index
# (BUILD= another folder with the same layout works too), indexes and query logs from .devdata/ (idx-cran,
# idx-deb, *.queries.tsv), libcmocka from .devlibs/. JSON lines and a summary land in $OUT (or
# $BUILD/results). CPU rates use every core, warmed up, for at least 2 s per row. EXTRA adds bench_gpu
# options in every stage that runs it (e.g. EXTRA="--inflight 6").
set -u
STAGE=${1:-small}
B=${BUILD:-build-gpu}
D=${DEVDATA:-.devdata}
O=${OUT:-$B/results}
SYNTH=${SYNTH:-/tmp/isn-synth20m}
SYNTH_DOCS=${SYNTH_DOCS:-20000000}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device-$STAGE.txt"
echo "cores: $(nproc)"
run_bench() { # label timeout args...
  local label=$1 limit=$2; shift 2
  timeout "$limit" "$B/bench/bench_gpu" --label "$label" "$@" >"$O/$label.json" 2>"$O/$label.err"; echo "bench $label rc=$?"
  head -c 600 "$O/$label.err"
}
summary() {
python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        try: r = json.loads(line)
        except Exception: continue
        if r.get("bench") == "gpu":
            s = r["ms_per_batch"]; fb = {k: v for k, v in r["cpu_fallbacks"].items() if v}
            print(f'{r["label"]:9s} {r["mode"]:3s} k={r["k"]:<5d} b={r["batch"]:<5d} qps={r["qps"]:>10.1f} '
                  f'lat={r["mean_batch_ms"]:7.2f}ms mism={r["mismatches"]} dev={r["on_device"]}/{r["queries"]} '
                  f'rep={s["threshold_pass"]:.2f} sel={s["select_threshold"]:.2f} resc={s["score_pass"]:.2f} '
                  f'probe={s.get("and_probe", 0):.2f} sort={s["sort"]:.2f} '
                  f'list={r["list_postings_per_s"]/1e9:.1f}G/s scored={r["scored_postings_per_s"]/1e9:.1f}G/s '
                  f'kern={r["decode_score_postings_per_s"]/1e9:.1f}G/s frac={r["postings_scored"]/max(1,r["postings_in_lists"]):.3f} '
                  f'pruned={r["ranges_pruned_fraction"]:.2f} retries={r["overflow_retries"]} fallbacks={fb} '
                  f'prefix={r.get("prefix_completed", 0)} seed_us={r["probe_us_per_query"]:.1f} '
                  f'pruned_batches={r["pruned_batches"]}/{r["batches"]}')
        elif r.get("bench") == "cpu":
            print(f'{r["label"]:9s} {r["mode"]:3s} k={r["k"]:<5d} CPU {r["threads"]} threads qps={r["qps"]:.1f} ({r["passes"]} passes)')
        elif r.get("bench") == "gpu_open":
            print(json.dumps(r))
PY
}
ensure_synth() { # built once per machine (about 20 s)
  [ -f "$SYNTH/queries.tsv" ] && return
  /usr/bin/time -v "$B/bin/isn-index" synth --docs "$SYNTH_DOCS" --seed 1 --fit "$D/idx-deb" \
    --fit-queries "$D/debpkg.queries.tsv" --queries 8192 --out "$SYNTH" 2>"$O/synth.time" | tee "$O/synth.json"
  grep -E "Elapsed|Maximum resident" "$O/synth.time"
}
# The 20M partition, OR, the default (label $1) against the environment switch $3=$4 (label $2),
# interleaved, REPEATS times each; further arguments go to bench_gpu.
compare_switch() {
  local plain=$1 switched=$2 var=$3 value=$4 labels="" rep variant
  shift 4
  ensure_synth
  for rep in $(seq 1 ${REPEATS:-2}); do
    for variant in "$plain" "$switched"; do
      if [ "$variant" = "$switched" ]; then export "$var=$value"; else unset "$var"; fi
      run_bench synth20m-$variant$rep ${AB_LIMIT:-60} --index "$SYNTH" --queries "$SYNTH/queries.tsv" --ks 10,1000 \
        --batches ${BATCHES:-16,256} --max-queries 1024 --modes or --no-cpu-rate "$@" ${EXTRA:-}
      labels="$labels $O/synth20m-$variant$rep.json"
    done
  done
  unset "$var"
  summary $labels
}
case "$STAGE" in
filter)
  ensure_synth
  [ -f "$SYNTH/buckets.jsonl" ] || "$B/bench/bench_gpu" --index "$SYNTH" --write-buckets 10 | tee "$O/buckets.json"
  labels=""
  for rep in $(seq 1 ${REPEATS:-2}); do
    for variant in plain filtered; do
      extra=""; [ "$variant" = filtered ] && extra="--filter bucket=0"
      run_bench synth20m-$variant$rep ${AB_LIMIT:-120} --index "$SYNTH" --queries "$SYNTH/queries.tsv" --ks ${KS:-10,1000} \
        --batches ${BATCHES:-16,256} --max-queries 1024 --min-batches ${MIN_BATCHES:-4} --modes ${MODES:-or} --no-cpu-rate \
        $extra ${EXTRA:-}
      labels="$labels $O/synth20m-$variant$rep.json"
    done
  done
  summary $labels
  python3 - $labels <<'PY'
import json, sys, collections
rates = collections.defaultdict(list)  # (mode, k, batch, variant) -> qps of each repeat
for f in sys.argv[1:]:
    for line in open(f):
        try: r = json.loads(line)
        except Exception: continue
        if r.get("bench") == "gpu":
            variant = "filtered" if "filtered" in r["label"] else "plain"
            rates[(r["mode"], r["k"], r["batch"], variant)].append(r["qps"])
for (mode, k, batch, variant), qps in sorted(rates.items()):
    if variant != "plain" or (mode, k, batch, "filtered") not in rates: continue
    plain, filtered = max(qps), max(rates[(mode, k, batch, "filtered")])
    print(f"filter bucket=0 {mode} k={k} b={batch}: plain {plain:.0f} q/s, filtered {filtered:.0f} q/s, "
          f"filtered/plain {filtered / plain:.2f} (best of {len(qps)} each)")
PY
  ;;
trees)
  timeout 300 "$B/tests/test_gpu_trees" >"$O/test_gpu_trees.log" 2>&1; echo "test_gpu_trees rc=$?"
  grep -E "^GPU|FAILED|PASSED|SKIPPED|ERROR|Error|error" "$O/test_gpu_trees.log" | head -40
  ;;
tests)
  timeout 60 "$B/tests/test_gpu" 2>&1 | grep -E "GPU|PASSED|FAILED|SKIP" | head -5
  timeout 400 "$B/tests/test_gpu_backend" >"$O/test_gpu_backend.log" 2>&1; echo "test_gpu_backend rc=$?"
  grep -E "^GPU|FAILED|PASSED|SKIPPED|ERROR|Error|error" "$O/test_gpu_backend.log" | head -40
  timeout 300 "$B/tests/test_gpu_trees" >"$O/test_gpu_trees.log" 2>&1; echo "test_gpu_trees rc=$?"
  grep -E "^GPU|FAILED|PASSED|SKIPPED|ERROR|Error|error" "$O/test_gpu_trees.log" | head -20
  ;;
small)
  run_bench cran 100 --index "$D/idx-cran" --queries "$D/cranfield.queries.tsv" --ks 10,1000 --batches 1,16,256 \
    ${EXTRA:-}
  run_bench debpkg 200 --index "$D/idx-deb" --queries "$D/debpkg.queries.tsv" --ks 10,1000 --batches 1,16,256,4096 \
    ${EXTRA:-}
  run_bench short 200 --index "$D/idx-deb" --queries "$D/short.queries.tsv" --ks 10,1000 --batches 16,256,4096 \
    --max-queries 8192 ${EXTRA:-}
  summary "$O"/cran.json "$O"/debpkg.json "$O"/short.json
  ;;
synth)
  ensure_synth
  # at least MIN_BATCHES batches a row: a batch of 4,096 is the whole log, and one batch alone measures its
  # latency (nothing overlaps its copies and host work), not the rate batches of that size sustain
  run_bench synth20m ${SYNTH_LIMIT:-400} --index "$SYNTH" --queries "$SYNTH/queries.tsv" --ks ${KS:-10,1000} \
    --batches ${BATCHES:-16,256,4096} --max-queries 4096 --min-batches ${MIN_BATCHES:-8} --modes ${MODES:-or,and} \
    ${EXTRA:-}
  # pruning forced on and off, same log, for the comparison AUTO makes
  for mode in pruned exhaustive; do
    run_bench synth20m-$mode 200 --index "$SYNTH" --queries "$SYNTH/queries.tsv" --ks 10,1000 --batches 16,256 \
      --max-queries 1024 --modes or --no-cpu-rate --$mode
  done
  summary "$O"/synth20m.json "$O"/synth20m-pruned.json "$O"/synth20m-exhaustive.json
  ;;
prefix)
  ensure_synth
  run_bench synth20m-prefix 300 --index "$SYNTH" --queries "$SYNTH/queries.tsv" --ks 10,1000 --batches 16,256 \
    --max-queries 2048 --modes or --budget-mb ${PREFIX_MB:-800} ${EXTRA:-}
  summary "$O"/synth20m-prefix.json
  ;;
ab)
  compare_switch touched dense ISN_GPU_DENSE_REPORT 1
  ;;
narrow)
  compare_switch narrow compact ISN_GPU_NARROW 0 --exhaustive
  ;;
compact)
  ISN_GPU_NARROW=0 compare_switch compact wide ISN_GPU_COMPACT 0 --exhaustive
  ;;
dense)
  compare_switch dense bitmap ISN_GPU_DENSE_FLOOR 0 --exhaustive
  ;;
sort)
  compare_switch block segmented ISN_GPU_SEGMENTED_SORT 1 --exhaustive
  ;;
bound)
  compare_switch bound exact ISN_GPU_BOUND_PASS 0 --exhaustive
  ;;
esac
