#!/usr/bin/env bash
# Issue 38 must-show 3 on the GPU machine: the sustained rate (DESIGN section 7, isn-bench --sustained) of
# CPU-only and hybrid isnd serving the first stage plus the second stage with a large ranker (1,250 inputs,
# 1,250 trees of depth 6, then a two-layer MLP reading the inputs and the trees' score, as
# bench_l2_pass --keep-rankers writes it) at each n1 in N1S, 50 ms deadline,
# top-10. isnd on ISND_CPUS (0-11), isn-bench on BENCH_CPUS (12-15).
#   RANKERS=DIR INDEX=DIR QUERIES=FILE.tsv BUILD=.devbin bash bench/rerank_serving_device.sh
# JSON lines (isn-bench's) in $OUT/rerank_sustained.json, the probe tables in $OUT/rerank_sustained.txt.
set -u
B=${BUILD:-.devbin}
O=${OUT:-$B/results-rerank}
RANKER=${RANKER:-large}
ISND_CPUS=${ISND_CPUS:-0-11}
BENCH_CPUS=${BENCH_CPUS:-12-15}
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$O"
for n1 in ${N1S:-1000 10000}; do
  for c in ${CONFIGS:-cpu hybrid}; do
    case $c in
      cpu) flags="--set gpu.enable=false"; max_var=MAX_CPU_$n1 ;;
      hybrid) flags="--set gpu.enable=true"; max_var=MAX_HYBRID_$n1 ;;
    esac
    log=$O/isnd-$c-$n1.log
    taskset -c "$ISND_CPUS" "$B/bin/isnd" --index "$INDEX" --listen 127.0.0.1:7611 --stats-listen 127.0.0.1:7612 \
      --workers "${WORKERS:-12}" $flags --set gpu.upload_before_ready=true --set rerank.ranker_dir="$RANKERS" --set rerank.max_n1=10000 >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do grep -q "ready: serving" "$log" && break; sleep 0.1; done
    grep -q "ready: serving" "$log" || { echo "isnd not ready:"; tail -5 "$log"; kill $pid; continue; }
    taskset -c "$BENCH_CPUS" "$B/bin/isn-bench" --target 127.0.0.1:7611 --queries "$QUERIES" --ranker "$RANKER" --n1 "$n1" \
      --sustained "${!max_var:-5000}" --deadline-ms 50 -k 10 --duration "${DURATION:-2}" --warmup 1 --threads 4 \
      --resolution "${RESOLUTION:-0.08}" --label "$c-n1-$n1" >>"$O/rerank_sustained.json" 2>>"$O/rerank_sustained.txt"
    tail -1 "$O/rerank_sustained.txt"
    python3 -c 'import urllib.request; print(" ".join(l for l in urllib.request.urlopen("http://127.0.0.1:7612/metrics").read().decode().splitlines() if l.startswith(("isn_rerank_device", "isn_rerank_gpu_failures"))))'
    kill $pid; wait $pid 2>/dev/null
  done
done
