#!/usr/bin/env bash
# The second stage on the GPU, on the device machine (issue 6):
#  (a) bench_gpu_l2: 1,000 candidates x 1,000 trees (depth 6) per query, batches of 1..256 queries
#      (batch latency, kernel and exposed transfer time, GPU scores checked bit-equal to the CPU's),
#      the overlap/split variants, the 16-core CPU path and the crossover; test_gpu_l2 (GPU == CPU).
#  (b) isnd with [gpu] enable=true, rerank=true and a ranker dir, queried with
#      `isn-query --server --ranker NAME`: the TREC run must equal `isn-query --index --ranker FILE`
#      (CPU, offline) and the replies must say device "cpu+gpu-l2".
# Staging here (binaries of make CUDA=1 STATIC=1 BUILD=build-gpu, stripped):
#   mkdir -p .devbin/l2 .devdata/l2/rankers
#   cp build-gpu/bin/isnd build-gpu/bin/isn-query build-gpu/bench/bench_gpu_l2 build-gpu/tests/test_gpu_l2 .devbin/l2/
#   strip .devbin/l2/*
#   cp -r build/bench/l2/cranfield/idx .devdata/l2/idx      # bench/l2_quality.sh makes index and ranker
#   cp build/bench/l2/cranfield/cranfield-lambdamart-0.{ranker,model.json} .devdata/l2/rankers/
#   head -8 build/bench/l2/cranfield/fold.0.test.tsv > .devdata/l2/queries.tsv
# On the device: run(carry .devbin .devdata .devlibs) bash bench/gpu_l2_device.sh
# Results in $OUT (or build-gpu/results-l2): bench_gpu_l2.json, test_gpu_l2.txt, rerank_check.txt.
set -u
B=${DEVBIN:-.devbin/l2}
D=${DEVDATA:-.devdata/l2}
O=${OUT:-build-gpu/results-l2}
RANKER=${RANKER:-cranfield-lambdamart-0}
N1=${N1:-1000}
K=${K:-10}
PASSES=${PASSES:-3}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "cpus: $(nproc)"

echo "== (a) test_gpu_l2"
"$B/test_gpu_l2" >"$O/test_gpu_l2.txt" 2>&1
echo "test_gpu_l2 exit $?"
grep -E "PASSED|FAILED|SKIPPED|chunks" "$O/test_gpu_l2.txt" | tail -12

echo "== (a) bench_gpu_l2"
"$B/bench_gpu_l2" --seconds "${SECONDS_CPU:-2}" >"$O/bench_gpu_l2.json" 2>"$O/bench_gpu_l2.err"
echo "bench_gpu_l2 exit $?"
python3 - "$O/bench_gpu_l2.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in rows:
    if r["bench"] == "gpu_l2_cpu":
        print("cpu: %(threads)d threads %(qps).1f q/s; one thread %(one_thread_ms_per_query).2f ms/query" % r)
print("batch  batch_ms  kernel_ms  transfer_ms  q/s  x_cpu  groups  mismatches")
for r in rows:
    if r["bench"] == "gpu_l2_batch":
        print("%(batch)5d  %(batch_ms)8.4f  %(kernel_ms)9.4f  %(transfer_ms)11.4f  %(qps)8.1f  %(x_cpu_threads)6.2f  %(tree_groups)3d  %(mismatches)d" % r)
print("variants: batch chunks split batch_ms kernel_ms transfer_ms groups mismatches")
for r in rows:
    if r["bench"] == "gpu_l2_variant":
        print("  %(batch)4d %(overlap_chunks)2d %(split)-5s %(batch_ms)8.4f %(kernel_ms)8.4f %(transfer_ms)8.4f %(tree_groups)3d %(mismatches)d" % r)
for r in rows:
    if r["bench"] == "gpu_l2_crossover_summary":
        print("crossover: %(trees)d trees: GPU wins from %(gpu_wins_from_candidates)d candidates" % r)
PY

echo "== (b) isnd second stage on the GPU"
log="$O/isnd-l2.log"
"$B/isnd" --index "$D/idx" --listen 127.0.0.1:7611 --stats-listen 127.0.0.1:7612 --workers 4 \
  --set gpu.enable=true --set gpu.upload_before_ready=true --set gpu.rerank=true --set rerank.ranker_dir="$D/rankers" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "ready:" "$log" && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
grep -iE "gpu|rank|ready:" "$log" | head -8
"$B/isn-query" --index "$D/idx" --ranker "$D/rankers/$RANKER.ranker" --n1 "$N1" -k "$K" --queries "$D/queries.tsv" \
  --out "$O/cpu.run" 2>"$O/cpu.err"
echo "offline (CPU) isn-query exit $?"
check="$O/rerank_check.txt"
: >"$check"
for p in $(seq 1 "$PASSES"); do
  "$B/isn-query" --server 127.0.0.1:7611 --ranker "$RANKER" --n1 "$N1" -k "$K" --queries "$D/queries.tsv" \
    --out "$O/served-$p.run" --show-device 2>"$O/served-$p.err"
  echo "pass $p: served isn-query exit $?" | tee -a "$check"
  if cmp -s "$O/cpu.run" "$O/served-$p.run"; then echo "pass $p: served run == offline CPU run ($(wc -l <"$O/cpu.run") lines)"
  else echo "pass $p: DIFFERENT"; diff "$O/cpu.run" "$O/served-$p.run" | head -10; fi | tee -a "$check"
  sort "$O/served-$p.err" | sed 's/^# query [^:]*: //' | sort | uniq -c | sed "s/^/pass $p: /" | tee -a "$check"
done
exec 3<>/dev/tcp/127.0.0.1/7612 && printf 'GET /stats HTTP/1.0\r\nHost: x\r\n\r\n' >&3 && sed '1,/^\r$/d' <&3 >"$O/stats.json"
grep -o '"rerank":{[^}]*}[^}]*}' "$O/stats.json" | tee -a "$check"
kill -TERM $pid
wait $pid
echo "isnd exit $?"
