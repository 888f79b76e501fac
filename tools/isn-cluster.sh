#!/usr/bin/env bash
# Starts (or stops) a local ISN cluster: N partitions x R replicas of isnd plus isn-agg in front.
#
#   tools/isn-cluster.sh start --parts DIR [--replicas R] [--run-dir DIR] [--base-port P] [--agg-port P]
#                              [--agg-stats-port P] [--workers W] [--bin DIR] [--isnd-set KEY=VALUE]...
#                              [--slow P.R[,P.R..] --slow-set KEY=VALUE...] [--agg-arg ARG]...
#   tools/isn-cluster.sh stop  [--run-dir DIR]
#
# --parts: the output of `isn-index build --partitions N` (DIR/part-0000, part-0001...), or one index
# directory (1 partition). Replica r of partition p listens on base-port + 10*p + r (stats off).
# --isnd-set applies to every isnd; --slow P.R[,P.R...] gives those replicas the extra settings of
# --slow-set (e.g. testing.inject_delay=20ms); --agg-arg passes an argument to isn-agg
# (e.g. --global-stats, --no-hedge). Logs and pids go to the run dir (default /tmp/isn-cluster).
# Prints one line of JSON with the addresses once every process is ready.
set -euo pipefail

cmd=${1:-}
[ -n "$cmd" ] && shift || { sed -n '2,15p' "$0"; exit 2; }
parts="" replicas=1 run_dir=/tmp/isn-cluster base_port=7100 agg_port=8070 agg_stats_port=8090 workers=1
bin="$(cd "$(dirname "$0")/.." && pwd)/build/bin"
isnd_sets=() slow="" slow_sets=() agg_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --parts) parts=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --run-dir) run_dir=$2; shift 2 ;;
    --base-port) base_port=$2; shift 2 ;;
    --agg-port) agg_port=$2; shift 2 ;;
    --agg-stats-port) agg_stats_port=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --isnd-set) isnd_sets+=(--set "$2"); shift 2 ;;
    --slow) slow=$2; shift 2 ;;
    --slow-set) slow_sets+=(--set "$2"); shift 2 ;;
    --agg-arg) agg_args+=("$2"); shift 2 ;;
    *) echo "isn-cluster: unknown option $1" >&2; exit 2 ;;
  esac
done

stop_cluster() {
  [ -f "$run_dir/pids" ] || return 0
  # Only the processes this script started, by id.
  while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$run_dir/pids"
  for _ in $(seq 50); do
    alive=0
    while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$run_dir/pids"
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  rm -f "$run_dir/pids"
}

wait_for_log() { # file needle
  for _ in $(seq 300); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "isn-cluster: $1 never said \"$2\":" >&2
  tail -5 "$1" >&2
  return 1
}

case "$cmd" in
  stop) stop_cluster; exit 0 ;;
  start) ;;
  *) echo "isn-cluster: command must be start or stop" >&2; exit 2 ;;
esac

[ -n "$parts" ] || { echo "isn-cluster: --parts DIR is required" >&2; exit 2; }
mkdir -p "$run_dir"
stop_cluster
if compgen -G "$parts/part-*" >/dev/null; then
  part_dirs=("$parts"/part-*)
else
  part_dirs=("$parts")
fi
: >"$run_dir/pids"
agg_partitions=()
for p in "${!part_dirs[@]}"; do
  addrs=""
  for r in $(seq 0 $((replicas - 1))); do
    port=$((base_port + 10 * p + r))
    extra=()
    case ",$slow," in *",$p.$r,"*) extra=("${slow_sets[@]}") ;; esac
    "$bin/isnd" --index "${part_dirs[$p]}" --listen "127.0.0.1:$port" --stats-listen "" --partition-id "$p" \
      --workers "$workers" ${isnd_sets[@]+"${isnd_sets[@]}"} ${extra[@]+"${extra[@]}"} \
      >"$run_dir/isnd-$p-$r.log" 2>&1 &
    echo $! >>"$run_dir/pids"
    addrs+="${addrs:+,}127.0.0.1:$port"
  done
  agg_partitions+=(--partition "$addrs")
done
for p in "${!part_dirs[@]}"; do
  for r in $(seq 0 $((replicas - 1))); do wait_for_log "$run_dir/isnd-$p-$r.log" "ready:"; done
done
"$bin/isn-agg" --listen "127.0.0.1:$agg_port" --stats-listen "127.0.0.1:$agg_stats_port" "${agg_partitions[@]}" \
  ${agg_args[@]+"${agg_args[@]}"} >"$run_dir/agg.log" 2>&1 &
echo $! >>"$run_dir/pids"
wait_for_log "$run_dir/agg.log" "ready:"
printf '{"partitions":%d,"replicas":%d,"agg":"127.0.0.1:%d","agg_stats":"127.0.0.1:%d","run_dir":"%s"}\n' \
  "${#part_dirs[@]}" "$replicas" "$agg_port" "$agg_stats_port" "$run_dir"
