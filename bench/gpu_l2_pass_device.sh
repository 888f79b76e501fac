#!/usr/bin/env bash
# The one-pass second stage (gpu.h isn_gpu_l2_pass, issue 38) on the device machine:
#  (a) test_gpu_l2_pass: every feature of every candidate and every score, the CUDA pass against the
#      CPU (Cranfield with and without positions, body alone; n1 100 and 1,000; MLP and XGBoost);
#  (b) bench_l2_pass: FE + MIT + model per query, CPU (one thread, split per step; every core, qps)
#      against the GPU pass (gather on the CPU, then one copy in, kernels, one copy out), small /
#      medium / large tree shapes and an MLP, n1 = 100, 1,000, 10,000, on the Debian short log over
#      the debpkg index and on Cranfield; GPU scores checked equal to the CPU's, and with --check every
#      feature of every candidate too (the Debian debpkg and short logs and Cranfield, issue 38 must-show 1).
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
# check_l2_pass.json (every feature and score, CUDA against the CPU, medium shape, n1 100..10,000).
set -u
B=${DEVBIN:-.devbin/l2pass}
D=${DEVDATA:-.devdata/l2pass}
O=${OUT:-build-gpu/results-l2pass}
SECONDS_PER_POINT=${SECONDS_PER_POINT:-2}
MAX_QUERIES=${MAX_QUERIES:-100}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "cpus: $(nproc)"
ISN_CRANFIELD_DIR=$D/cran "$B/test_gpu_l2_pass" >"$O/test_gpu_l2_pass.txt" 2>&1
echo "test_gpu_l2_pass: exit $? ($(grep -c 'CUDA:' "$O/test_gpu_l2_pass.txt") CUDA comparisons)"
tail -4 "$O/test_gpu_l2_pass.txt"
"$B/bench_l2_pass" --index "$D/deb-idx" --queries "$D/short.tsv" --n1 100,1000,10000 --shapes small,medium,large \
  --threads "$(nproc)" --seconds "$SECONDS_PER_POINT" --max-queries "$MAX_QUERIES" --batch 16 >"$O/bench_l2_pass_debian.json"
# The MLP shape (1,250 inputs, two layers of 256) costs the CPU ~1 s a query at 10,000 candidates: 100 and 1,000.
"$B/bench_l2_pass" --index "$D/deb-idx" --queries "$D/short.tsv" --n1 100,1000 --shapes mlp \
  --threads "$(nproc)" --seconds "$SECONDS_PER_POINT" --max-queries "$MAX_QUERIES" --batch 16 >>"$O/bench_l2_pass_debian.json"
"$B/bench_l2_pass" --index "$D/cran-idx" --queries "$D/cran.tsv" --n1 100,1000 --shapes small,medium,large --threads "$(nproc)" \
  --seconds "$SECONDS_PER_POINT" --max-queries "$MAX_QUERIES" --batch 16 >"$O/bench_l2_pass_cranfield.json"
for log in debpkg short; do
  "$B/bench_l2_pass" --index "$D/deb-idx" --queries "$D/$log.tsv" --n1 100,1000,10000 --shapes medium --threads 1 \
    --seconds 0.2 --max-queries "$MAX_QUERIES" --check | sed "s/^{/{\"log\":\"$log\",/"
done >"$O/check_l2_pass.json"
"$B/bench_l2_pass" --index "$D/cran-idx" --queries "$D/cran.tsv" --n1 100,1000 --shapes medium --threads 1 \
  --seconds 0.2 --max-queries 225 --check | sed 's/^{/{"log":"cranfield",/' >>"$O/check_l2_pass.json"
cat "$O"/bench_l2_pass_*.json "$O/check_l2_pass.json"
