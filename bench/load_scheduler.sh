#!/usr/bin/env bash
# Open-loop load against isnd on loopback with the scheduler (issue 4): starts isnd on the Debian
# index, runs isn-bench at each rate (Poisson arrivals, short Debian queries, a deadline per query)
# and writes one JSON line per rate plus the scheduler's /stats to build/bench/load_<tag>.json.
#   bench/load_scheduler.sh TAG WORKERS GPU_SIM_DEVICES OVERLOAD(shed|degrade) RATE1,RATE2,...
# e.g. bench/load_scheduler.sh cpu 1 0 shed 500,1000,2000
#      bench/load_scheduler.sh hybrid 1 1 shed 2000,4000,6000
# Environment: INDEX (build/bench/idx-deb), QUERIES (/work/data/deb/short.queries.tsv or
# $DATA/deb/short.queries.tsv), DEADLINE_MS (50), DURATION (5), BUILD (build).
set -euo pipefail
tag=${1:?tag} workers=${2:?workers} gpus=${3:?gpu sim devices} overload=${4:?shed or degrade} rates=${5:?rates}
BUILD=${BUILD:-build}
INDEX=${INDEX:-$BUILD/bench/idx-deb}
QUERIES=${QUERIES:-${DATA:-/work/data}/deb/short.queries.tsv}
DEADLINE_MS=${DEADLINE_MS:-50}
DURATION=${DURATION:-5}
out=$BUILD/bench/load_$tag.json
log=$BUILD/bench/load_$tag.isnd.log
mkdir -p "$BUILD/bench"
degrade=false; [ "$overload" = degrade ] && degrade=true
"$BUILD/bin/isnd" --index "$INDEX" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 --workers "$workers" \
  --set scheduler.gpu_sim_devices="$gpus" --set scheduler.overload_degrade=$degrade \
  --set scheduler.cost_model_state="$BUILD/bench/cost_model.state" --set search.max_queue=100000 \
  >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q 'ready: serving' "$log" && break; sleep 0.1; done
grpc=$(sed -n 's/.*gRPC listening on \([0-9.:]*\).*/\1/p' "$log" | head -1)
stats=$(sed -n 's/.*stats listening on http:\/\/\([0-9.:]*\).*/\1/p' "$log" | head -1)
: >"$out"
for rate in ${rates//,/ }; do
  result=$("$BUILD/bin/isn-bench" --target "$grpc" --queries "$QUERIES" --rate "$rate" --duration "$DURATION" \
             --warmup 1 --deadline-ms "$DEADLINE_MS")
  rss=$(awk '/VmRSS/ {print $2 * 1024}' /proc/$pid/status)
  echo "{\"tag\":\"$tag\",\"workers\":$workers,\"gpu_sim_devices\":$gpus,\"overload\":\"$overload\",\"rate\":$rate,\"isnd_rss_bytes\":$rss,\"bench\":$result}" | tee -a "$out"
done
curl -s "http://$stats/stats" | python3 -c 'import json,sys; print(json.dumps({"tag":"'"$tag"'","scheduler":json.load(sys.stdin)["scheduler"]}))' | tee -a "$out"
