#!/usr/bin/env bash
# The one-pass second stage (gpu.h isn_gpu_l2_pass, issue 38) on the device machine:
#  (a) test_gpu_l2_pass: every feature of every candidate and every score, the CUDA pass against the
#      CPU (Cranfield with and without positions, body alone; n1 100 and 1,000; MLP, XGBoost, and XGBoost
#      then an MLP stacked on it);
#  (b) bench_l2_pass: FE + MIT + model per query, CPU (one thread, split per step; every core, qps)
#      against the GPU pass (gather on the CPU, then one copy in, kernels, one copy out), small /
#      medium tree shapes, large (1,250 inputs, 1,250 trees, then a two-layer MLP of 64 hidden units over
#      the inputs and the trees' score) and an MLP, n1 = 100, 1,000, 10,000, on the Debian short log over
#      the debpkg index and on Cranfield; GPU scores checked equal to the CPU's, and with --check every
#      feature of every candidate too (the Debian debpkg and short logs and Cranfield, issue 38 must-show 1);
#  (c) pipeline: throughput on both sides over the second stage alone at n1 = 10,000 (issue 38 must-show
#      2): every core of the CPU (cpu_all_l2) against producers gathering batches on those cores while
#      the GPU handle's in-flight slots run earlier batches' passes (gpu_pipeline, the fastest of the
#      PIPELINE list: P producers, or PxK: P producers of K gather threads each), plus the sequential
#      numbers and split as in (b), then a summary: ms a query each side, speedups, harmonic mean.
# PARTS picks what runs (default test,bench,check,pipeline); e.g. PARTS=test,pipeline for issue 38's
# must-show 2 alone (about 3 minutes).
# Staging here (binaries of make CUDA=1 STATIC=1 BUILD=build-gpu, stripped; make ranker-quality made the
# indexes and plain logs):
#   make CUDA=1 STATIC=1 BUILD=build-gpu -j2 build-gpu/tests/test_gpu_l2_pass build-gpu/bench/bench_l2_pass
#   mkdir -p .devbin/l2pass .devdata/l2pass/cran
#   cp build-gpu/tests/test_gpu_l2_pass build-gpu/bench/bench_l2_pass .devbin/l2pass/ && strip .devbin/l2pass/*
#   cp build/data/cran/cranfield.jsonl build/data/cran/cranfield.queries.tsv .devdata/l2pass/cran/
#   cp -r build/bench/l2/debian/idx .devdata/l2pass/deb-idx && cp -r build/bench/l2/cranfield/idx .devdata/l2pass/cran-idx
#   python3 bench/ranker_logs.py plain build/data/deb/short.queries.tsv .devdata/l2pass/short.tsv
#   cp build/bench/l2/cranfield/queries.tsv .devdata/l2pass/cran.tsv
#   cp build/bench/l2/debian/test.tsv .devdata/l2pass/debpkg.tsv
#   mkdir -p .devlibs && cp /lib/x86_64-linux-gnu/libcmocka.so.0 .devlibs/   # the test links cmocka dynamically
# On the device: run(carry .devbin .devdata .devlibs) bash bench/gpu_l2_pass_device.sh
# Results in $OUT (or build-gpu/results-l2pass): test_gpu_l2_pass.txt, bench_l2_pass_{debian,cranfield}.json,
# check_l2_pass.json (every feature and score, CUDA against the CPU, medium shape and the stacked large
# one on 30 queries, n1 100..10,000),
# bench_l2_pass_pipeline.json.
set -u
B=${DEVBIN:-.devbin/l2pass}
D=${DEVDATA:-.devdata/l2pass}
O=${OUT:-build-gpu/results-l2pass}
SECONDS_PER_POINT=${SECONDS_PER_POINT:-2}
MAX_QUERIES=${MAX_QUERIES:-100}
PARTS=${PARTS:-test,bench,check,pipeline}
PIPELINE=${PIPELINE:-8,16,24,32,2x8,4x4,8x2}
PIPELINE_QUERIES=${PIPELINE_QUERIES:-30}
want() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "cpus: $(nproc)"
if want test; then
ISN_CRANFIELD_DIR=$D/cran "$B/test_gpu_l2_pass" >"$O/test_gpu_l2_pass.txt" 2>&1
echo "test_gpu_l2_pass: exit $? ($(grep -c 'CUDA:' "$O/test_gpu_l2_pass.txt") CUDA comparisons)"
grep 'concurrent\|passes of' "$O/test_gpu_l2_pass.txt"
tail -4 "$O/test_gpu_l2_pass.txt"
fi
if want bench; then
"$B/bench_l2_pass" --index "$D/deb-idx" --queries "$D/short.tsv" --n1 100,1000,10000 --shapes small,medium,large \
  --threads "$(nproc)" --seconds "$SECONDS_PER_POINT" --max-queries "$MAX_QUERIES" --batch 16 >"$O/bench_l2_pass_debian.json"
# The MLP shape (1,250 inputs, two layers of 256) costs the CPU ~1 s a query at 10,000 candidates: 100 and 1,000.
"$B/bench_l2_pass" --index "$D/deb-idx" --queries "$D/short.tsv" --n1 100,1000 --shapes mlp \
  --threads "$(nproc)" --seconds "$SECONDS_PER_POINT" --max-queries "$MAX_QUERIES" --batch 16 >>"$O/bench_l2_pass_debian.json"
"$B/bench_l2_pass" --index "$D/cran-idx" --queries "$D/cran.tsv" --n1 100,1000 --shapes small,medium,large --threads "$(nproc)" \
  --seconds "$SECONDS_PER_POINT" --max-queries "$MAX_QUERIES" --batch 16 >"$O/bench_l2_pass_cranfield.json"
cat "$O"/bench_l2_pass_debian.json "$O"/bench_l2_pass_cranfield.json
fi
if want check; then
for log in debpkg short; do
  "$B/bench_l2_pass" --index "$D/deb-idx" --queries "$D/$log.tsv" --n1 100,1000,10000 --shapes medium --threads 1 \
    --seconds 0.2 --max-queries "$MAX_QUERIES" --check | sed "s/^{/{\"log\":\"$log\",/"
  # the stacked large ranker (trees on the wide-rows kernel, then the MLP reading their scores): fewer
  # queries, its CPU side costs ~0.3 s a query at 10,000 candidates
  "$B/bench_l2_pass" --index "$D/deb-idx" --queries "$D/$log.tsv" --n1 100,1000,10000 --shapes large --threads 1 \
    --seconds 0.2 --max-queries 30 --check | sed "s/^{/{\"log\":\"$log\",/"
done >"$O/check_l2_pass.json"
"$B/bench_l2_pass" --index "$D/cran-idx" --queries "$D/cran.tsv" --n1 100,1000 --shapes medium --threads 1 \
  --seconds 0.2 --max-queries 225 --check | sed 's/^{/{"log":"cranfield",/' >>"$O/check_l2_pass.json"
cat "$O/check_l2_pass.json"
fi
if want pipeline; then
"$B/bench_l2_pass" --index "$D/deb-idx" --queries "$D/short.tsv" --n1 10000 --shapes small,medium,large \
  --threads "$(nproc)" --gather-threads "$(nproc)" --seconds "$SECONDS_PER_POINT" --max-queries "$PIPELINE_QUERIES" \
  --batch 16 --pipeline "$PIPELINE" >"$O/bench_l2_pass_pipeline.json"
echo "bench_l2_pass --pipeline: exit $?"
cat "$O/bench_l2_pass_pipeline.json"
if command -v python3 >/dev/null; then
python3 - "$O/bench_l2_pass_pipeline.json" <<'PY'
import json, sys
speedups = []
for line in open(sys.argv[1]):
    d = json.loads(line)
    c, g = d["cpu_all_l2"], d["gpu_pipeline"]
    seq, split = d.get("gpu", {}).get("per_query_ms", {}), d.get("gpu", {}).get("kernels_ms", {})
    one = d["cpu_1t_ms"]
    speedups.append(g["speedup_vs_cpu_all_l2"])
    print(f'{d["shape"]:6} n1 {d["n1"]}: CPU {c["threads"]} cores {c["per_query_ms"]:.3f} ms/query ({c["qps"]:.0f} q/s); '
          f'GPU pipelined {g["per_query_ms"]:.3f} ms/query ({g["qps"]:.0f} q/s, {g["producers"]}x{g["gather_threads_each"]}) '
          f'= {g["speedup_vs_cpu_all_l2"]:.2f}x, mismatches {g["mismatches"]} of {g["compared"]}')
    print(f'       CPU one core: gather {one["gather"]:.3f} + rows {one["rows"]:.3f} + transforms {one["transforms"]:.3f} '
          f'+ model {one["model"]:.3f} ms; GPU one query at a time: gather {seq.get("gather_cpu", 0):.3f} + pack '
          f'{seq.get("pack", 0):.3f} + copies {seq.get("transfer", 0):.3f} + kernels {seq.get("kernels", 0):.3f} '
          f'(features {split.get("features", 0):.3f}, transforms {split.get("transforms", 0):.3f}, model '
          f'{split.get("model", 0):.3f}) ms; pipelined step means/query {g["step_ms_per_query"]}')
if speedups:
    print(f'harmonic mean {len(speedups) / sum(1 / s for s in speedups):.2f}x over {len(speedups)} shapes')
PY
fi
fi
