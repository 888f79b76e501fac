#!/usr/bin/env bash
# Open-loop load against isnd on loopback with the scheduler (issue 4): for each rate, starts a fresh
# isnd on the Debian index, runs isn-bench (Poisson arrivals, short Debian queries, a deadline per
# query), reads the scheduler's /stats, stops isnd, and appends one JSON line to
# build/bench/load_<tag>.json.
#   bench/load_scheduler.sh TAG WORKERS SIMULATED_GPUS OVERLOAD(shed|degrade) RATE1,RATE2,...
# e.g. bench/load_scheduler.sh cpu 1 0 shed 1000,2000,3000
#      bench/load_scheduler.sh hybrid 1 1 shed 6000,9000
# Every run starts cold: no cost model state, so the CPU side starts from the fitted formula and the
# simulated GPU side from the simulator's latency model; isn-bench's warm-up (WARMUP seconds, 1) is
# sent but not measured (WARMUP=0 measures from the first query). Each line carries the 1-minute
# load average just before the run and isnd's peak RSS.
# Environment: INDEX (build/bench/idx-deb), QUERIES (build/data/deb/short.queries.tsv or
# $DATA/deb/short.queries.tsv), DEADLINE_MS (50), DURATION (5), REPEAT (1: runs per rate; the
# machine is shared, so take medians), BUILD (build).
set -euo pipefail
tag=${1:?tag} workers=${2:?workers} gpus=${3:?simulated gpus} overload=${4:?shed or degrade} rates=${5:?rates}
BUILD=${BUILD:-build}
INDEX=${INDEX:-$BUILD/bench/idx-deb}
QUERIES=${QUERIES:-${DATA:-${ISN_DATA:-build/data}}/deb/short.queries.tsv}
DEADLINE_MS=${DEADLINE_MS:-50}
DURATION=${DURATION:-5}
REPEAT=${REPEAT:-1}
WARMUP=${WARMUP:-1}
out=$BUILD/bench/load_$tag.json
log=$BUILD/bench/load_$tag.isnd.log
mkdir -p "$BUILD/bench"
degrade=false; [ "$overload" = degrade ] && degrade=true
pid=
trap '[ -n "$pid" ] && kill -TERM $pid 2>/dev/null; wait 2>/dev/null || true' EXIT
for rate in ${rates//,/ }; do
 for run in $(seq "$REPEAT"); do
  "$BUILD/bin/isnd" --index "$INDEX" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 --workers "$workers" \
    --set scheduler.simulated_gpus_answer_without_hits="$gpus" --set scheduler.overload_degrade=$degrade \
    --set search.max_queue=100000 ${ISND_SET:-} >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q 'ready: serving' "$log" && break; sleep 0.1; done
  grpc=$(sed -n 's/.*gRPC listening on \([0-9.:]*\).*/\1/p' "$log" | head -1)
  stats=$(sed -n 's/.*stats listening on http:\/\/\([0-9.:]*\).*/\1/p' "$log" | head -1)
  load=$(cut -d' ' -f1 /proc/loadavg)
  result=$("$BUILD/bin/isn-bench" --target "$grpc" --queries "$QUERIES" --rate "$rate" --duration "$DURATION" \
             --warmup "$WARMUP" --deadline-ms "$DEADLINE_MS")
  peak_rss=$(awk '/VmHWM/ {print $2 * 1024}' /proc/$pid/status)
  scheduler=$(curl -s "http://$stats/stats" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["scheduler"]))')
  kill -TERM $pid
  wait $pid || true
  pid=
  echo "{\"tag\":\"$tag\",\"workers\":$workers,\"simulated_gpus\":$gpus,\"overload\":\"$overload\",\"rate\":$rate,\"run\":$run,\"warmup_s\":$WARMUP,\"load1_before\":$load,\"isnd_peak_rss_bytes\":$peak_rss,\"bench\":$result,\"scheduler\":$scheduler}" | tee -a "$out"
 done
done
