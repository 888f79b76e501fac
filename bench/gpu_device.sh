#!/usr/bin/env bash
# One call on the GPU machine: GPU tests, then equality and throughput of the GPU first stage against the
# CPU on Cranfield, Debian and a 20M-document synthetic partition. Binaries come from
#   make CUDA=1 STATIC=1 BUILD=build-gpu build-gpu/tests/test_gpu build-gpu/tests/test_gpu_backend \
#        build-gpu/bench/bench_gpu build-gpu/bin/isn-index
# indexes and query logs from .devdata/ (idx-cran, idx-deb, *.queries.tsv), libcmocka from .devlibs/.
# JSON lines land in $OUT (or build-gpu/results).
set -u
B=${BUILD:-build-gpu}
D=${DEVDATA:-.devdata}
# Everything is written under $O and packed into one archive in $OUT at the end (the device tool brings
# back only a few files).
O=/tmp/gpu-results
FINAL=${OUT:-$B/results}
SYNTH_DOCS=${SYNTH_DOCS:-20000000}
mkdir -p "$O" "$FINAL"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device.txt"
nproc
timeout 60 "$B/tests/test_gpu" 2>&1 | grep -E "GPU|PASSED|FAILED|SKIP" | head -5
timeout 240 "$B/tests/test_gpu_backend" >"$O/test_gpu_backend.log" 2>&1; echo "test_gpu_backend rc=$?"
grep -E "^GPU|FAILED|PASSED|SKIPPED|Error|error" "$O/test_gpu_backend.log" | head -20
run_bench() { # label timeout args...
  local label=$1 limit=$2; shift 2
  timeout "$limit" "$B/bench/bench_gpu" --label "$label" "$@" >"$O/$label.json" 2>"$O/$label.err"; echo "bench $label rc=$?"
  head -c 600 "$O/$label.err"
}
run_bench cran 60 --index "$D/idx-cran" --queries "$D/cranfield.queries.tsv" --ks 10,1000 --batches 1,16,256
run_bench debian 120 --index "$D/idx-deb" --queries "$D/debpkg.queries.tsv" --ks 10,1000 --batches 1,16,256
/usr/bin/time -v "$B/bin/isn-index" synth --docs "$SYNTH_DOCS" --seed 1 --fit "$D/idx-deb" \
  --fit-queries "$D/debpkg.queries.tsv" --queries 8192 --out /tmp/synth 2>"$O/synth.time" | tee "$O/synth.json"
grep -E "Elapsed|Maximum resident" "$O/synth.time"
run_bench synth20m 330 --index /tmp/synth --queries /tmp/synth/queries.tsv --ks 10,1000 --batches 1,16,256,4096 --max-queries 4096
# variants, for comparison: double accumulators instead of exact fixed point; a pruned-prefix cache of
# half the partition (trained on the same log) with CPU completion
run_bench synth20m-double 120 --index /tmp/synth --queries /tmp/synth/queries.tsv --ks 10,1000 --batches 16,256 \
  --max-queries 1024 --modes or --no-cpu-rate --double-acc
run_bench synth20m-prefix 150 --index /tmp/synth --queries /tmp/synth/queries.tsv --ks 10,1000 --batches 16,256 \
  --max-queries 1024 --budget-mb 800
python3 - "$O" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for line in open(f):
        try: r = json.loads(line)
        except Exception: continue
        if r.get("bench") == "gpu":
            s = r["ms_per_batch"]
            print(f'{r["label"]:9s} {r["mode"]:3s} k={r["k"]:<5d} b={r["batch"]:<5d} qps={r["qps"]:>10.1f} '
                  f'lat={r["mean_batch_ms"]:8.2f}ms mism={r["mismatches"]} dev={r["on_device"]}/{r["queries"]} '
                  f'rep={s["threshold_pass"]:.2f} sel={s["select_threshold"]:.2f} resc={s["score_pass"]:.2f} '
                  f'probe={s.get("and_probe", 0):.2f} sort={s["sort"]:.2f} '
                  f'Gpost/s={r["decode_score_postings_per_s"]/1e9:.1f} pruned={r["ranges_pruned_fraction"]:.2f} '
                  f'resc/q={r.get("ranges_rescored_per_query", 0):.2f} cand/q={r["candidates_per_query"]:.0f} cpu={r.get("cpu_answered", 0)} '
                  f'prefix={r.get("prefix_completed", 0)}')
        elif r.get("bench") == "cpu":
            print(f'{r["label"]:9s} {r["mode"]:3s} k={r["k"]:<5d} CPU {r["threads"]} threads qps={r["qps"]:.1f}')
        elif r.get("bench") == "gpu_open":
            print(json.dumps(r))
PY
tar czf "$FINAL/gpu-results.tgz" -C "$O" .
