#!/usr/bin/env bash
# Wide tree models on the GPU (gpu/l2_forest_plan.c: the kernel whose warps split the trees, issue 38's
# medium and large rankers) and the one-pass stage's gather on a crew of threads, on the device machine:
#  (a) test_gpu_forest_plan (the plan, CPU only), test_gpu_l2 (models of 500, 1,250 and 2,048 inputs and
#      trees of depth 9 and 10 at 1 to 10,000 rows, bit for bit against the CPU), test_gpu_l2_pass (the
#      one-pass stage with a 300-input forest, and every batch gathered again on a crew);
#  (b) bench_l2_pass, small / medium / large at n1 1,000 and 10,000 on the Debian short log, with --check
#      (every feature and score of the GPU pass against the CPU's);
#  (c) the same with the gather on a crew of every core (--gather-threads);
#  (d) the small shape through the wide rows' kernel too (ISN_GPU_TREE_WARPS_ABOVE_INPUTS=0), to compare
#      the two kernels where both can run.
# Staging here: as bench/gpu_l2_pass_device.sh says, with test_gpu_l2 and test_gpu_forest_plan built and
# copied into .devbin/l2pass as well:
#   make CUDA=1 STATIC=1 BUILD=build-gpu -j2 build-gpu/tests/test_gpu_forest_plan build-gpu/tests/test_gpu_l2 \
#     build-gpu/tests/test_gpu_l2_pass build-gpu/bench/bench_l2_pass
# On the device: run(carry .devbin .devdata .devlibs) bash bench/gpu_l2_wide_device.sh
# Results in $OUT (or build-gpu/results-l2wide): the tests' output and wide*.json.
set -u
B=${DEVBIN:-.devbin/l2pass}
D=${DEVDATA:-.devdata/l2pass}
O=${OUT:-build-gpu/results-l2wide}
SECONDS_PER_POINT=${SECONDS_PER_POINT:-2}
MAX_QUERIES=${MAX_QUERIES:-30}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "cpus: $(nproc)"
for t in test_gpu_forest_plan test_gpu_l2; do
  "$B/$t" >"$O/$t.txt" 2>&1
  echo "$t: exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |ERROR" "$O/$t.txt" | head -8
done
ISN_CRANFIELD_DIR=$D/cran "$B/test_gpu_l2_pass" >"$O/test_gpu_l2_pass.txt" 2>&1
echo "test_gpu_l2_pass: exit $?"
grep -E "^test_gpu_l2_pass:|^\[  (PASSED|FAILED) |ERROR" "$O/test_gpu_l2_pass.txt" | head -8
common=(--index "$D/deb-idx" --queries "$D/short.tsv" --threads "$(nproc)" --seconds "$SECONDS_PER_POINT"
        --max-queries "$MAX_QUERIES" --batch 16)
"$B/bench_l2_pass" "${common[@]}" --shapes small,medium,large --n1 1000,10000 --check >"$O/wide.json"
"$B/bench_l2_pass" "${common[@]}" --shapes small,medium,large --n1 1000,10000 --gather-threads "$(nproc)" \
  >"$O/wide_crew.json"
ISN_GPU_TREE_WARPS_ABOVE_INPUTS=0 "$B/bench_l2_pass" "${common[@]}" --shapes small --n1 1000,10000 \
  >"$O/wide_small_tree_warps.json"
cat "$O/wide.json" "$O/wide_crew.json" "$O/wide_small_tree_warps.json"
