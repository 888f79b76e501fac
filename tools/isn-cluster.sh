#!/usr/bin/env bash
# A local ISN cluster: N partitions x R replicas of isnd plus isn-agg in front, on loopback.
#
#   tools/isn-cluster.sh start --parts DIR [--replicas R] [--run-dir DIR] [--base-port P] [--agg-port P]
#                              [--agg-stats-port P] [--workers W] [--bin DIR] [--isnd-set KEY=VALUE]...
#                              [--slow P.R[,P.R..] --slow-set KEY=VALUE...] [--agg-arg ARG]...
#   tools/isn-cluster.sh addr  [--run-dir DIR] [--stats]   the aggregator's gRPC (or stats) address
#   tools/isn-cluster.sh stop  [--run-dir DIR]
#
# --parts: the output of `isn-index build --partitions N` (DIR/part-0000, part-0001...), or one index
# directory (1 partition). Every run gets its own state folder (logs, pids, addresses; default a new
# one under ${TMPDIR:-/tmp}) and free ports, so several users and runs never collide; --base-port P
# puts replica r of partition p on P + 10*p + r instead (its stats endpoint on P + 1000 + 10*p + r),
# --agg-port/--agg-stats-port fix isn-agg's. Every isnd has a stats endpoint (/metrics /readyz).
# addr and stop act on the given run dir, else on this user's last cluster started.
# --isnd-set applies to every isnd; --slow P.R[,P.R...] gives those replicas the extra settings of
# --slow-set (e.g. testing.inject_delay=20ms); --agg-arg passes an argument to isn-agg
# (e.g. --global-stats, --no-hedge). start prints one line of JSON with the addresses once every
# process is ready (also in RUN_DIR/cluster.json): isn-agg's gRPC and stats addresses, and per
# replica its partition, gRPC and stats addresses and pid.
set -euo pipefail

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
last_file="${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}}/isn-cluster-$(id -u).last"

cmd=${1:-}
case "$cmd" in
  start|stop|addr) shift ;;
  -h|--help|help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
  *) echo "isn-cluster: unknown command \"$cmd\" (start, addr, stop; --help)" >&2; exit 2 ;;
esac
parts="" replicas=1 run_dir="" base_port=0 agg_port=0 agg_stats_port=0 workers=1 want_stats=0
bin="$(cd "$(dirname "$0")/.." && pwd)/build/bin"
isnd_sets=() slow="" slow_sets=() agg_args=()
need() { [ $# -ge 2 ] || { echo "isn-cluster: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --parts) need "$@"; parts=$2; shift 2 ;;
    --replicas) need "$@"; replicas=$2; shift 2 ;;
    --run-dir) need "$@"; run_dir=$2; shift 2 ;;
    --base-port) need "$@"; base_port=$2; shift 2 ;;
    --agg-port) need "$@"; agg_port=$2; shift 2 ;;
    --agg-stats-port) need "$@"; agg_stats_port=$2; shift 2 ;;
    --workers) need "$@"; workers=$2; shift 2 ;;
    --bin) need "$@"; bin=$2; shift 2 ;;
    --isnd-set) need "$@"; isnd_sets+=(--set "$2"); shift 2 ;;
    --slow) need "$@"; slow=$2; shift 2 ;;
    --slow-set) need "$@"; slow_sets+=(--set "$2"); shift 2 ;;
    --agg-arg) need "$@"; agg_args+=("$2"); shift 2 ;;
    --stats) want_stats=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "isn-cluster: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
for n in "$replicas" "$base_port" "$agg_port" "$agg_stats_port" "$workers"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "isn-cluster: \"$n\" is not a number" >&2; exit 2; }
done

# addr and stop: the run dir given, else this user's last one.
known_run_dir() {
  if [ -z "$run_dir" ]; then
    [ -f "$last_file" ] || { echo "isn-cluster: no cluster started by this user (give --run-dir)" >&2; exit 1; }
    run_dir=$(cat "$last_file")
  fi
}

stop_cluster() {
  [ -f "$run_dir/pids" ] || return 0
  # Only the processes this script started, by id.
  while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$run_dir/pids"
  for _ in $(seq 100); do
    alive=0
    while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$run_dir/pids"
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  rm -f "$run_dir/pids"
}

# Waits for a line of the log matching the regex and prints the first such line.
wait_for_log() { # file regex
  for _ in $(seq 600); do
    if line=$(grep -m1 -E "$2" "$1" 2>/dev/null); then printf '%s\n' "$line"; return 0; fi
    sleep 0.05
  done
  echo "isn-cluster: $1 never said \"$2\":" >&2
  tail -5 "$1" >&2
  return 1
}

case "$cmd" in
  stop)
    known_run_dir
    stop_cluster
    [ "$(cat "$last_file" 2>/dev/null)" = "$run_dir" ] && rm -f "$last_file"
    exit 0 ;;
  addr)
    known_run_dir
    [ -f "$run_dir/agg.addr" ] || { echo "isn-cluster: no running cluster in $run_dir" >&2; exit 1; }
    if [ $want_stats -eq 1 ]; then cat "$run_dir/agg-stats.addr"; else cat "$run_dir/agg.addr"; fi
    exit 0 ;;
esac

[ -n "$parts" ] || { echo "isn-cluster: start needs --parts DIR (--help)" >&2; exit 2; }
[ -d "$parts" ] || { echo "isn-cluster: --parts $parts is not a directory" >&2; exit 2; }
[ -x "$bin/isnd" ] && [ -x "$bin/isn-agg" ] || { echo "isn-cluster: no isnd/isn-agg in $bin (run make)" >&2; exit 2; }
if [ -n "$run_dir" ]; then
  mkdir -p "$run_dir"
  stop_cluster # a cluster left in this run dir
else
  run_dir=$(mktemp -d "${TMPDIR:-/tmp}/isn-cluster.XXXXXX")
fi
run_dir=$(cd "$run_dir" && pwd)
if compgen -G "$parts/part-*" >/dev/null; then
  part_dirs=("$parts"/part-*)
else
  part_dirs=("$parts")
fi
: >"$run_dir/pids"
trap 'echo "isn-cluster: start failed; stopping what started (logs in $run_dir)" >&2; stop_cluster' ERR
for p in "${!part_dirs[@]}"; do
  for r in $(seq 0 $((replicas - 1))); do
    port=0 stats_port=0
    [ "$base_port" -ne 0 ] && port=$((base_port + 10 * p + r)) && stats_port=$((base_port + 1000 + 10 * p + r))
    extra=()
    case ",$slow," in *",$p.$r,"*) extra=("${slow_sets[@]}") ;; esac
    "$bin/isnd" --index "${part_dirs[$p]}" --listen "127.0.0.1:$port" --stats-listen "127.0.0.1:$stats_port" --partition-id "$p" \
      --workers "$workers" ${isnd_sets[@]+"${isnd_sets[@]}"} ${extra[@]+"${extra[@]}"} \
      >"$run_dir/isnd-$p-$r.log" 2>&1 &
    echo $! >>"$run_dir/pids"
    echo $! >"$run_dir/isnd-$p-$r.pid"
  done
done
agg_partitions=() replica_json=""
for p in "${!part_dirs[@]}"; do
  addrs=""
  for r in $(seq 0 $((replicas - 1))); do
    wait_for_log "$run_dir/isnd-$p-$r.log" "ready:" >/dev/null
    line=$(wait_for_log "$run_dir/isnd-$p-$r.log" "gRPC listening on ")
    addr=$(sed -E 's/.*gRPC listening on ([^" ]+).*/\1/' <<<"$line") # text or JSON log lines
    line=$(wait_for_log "$run_dir/isnd-$p-$r.log" "stats listening on http://")
    stats=$(sed -E 's|.*stats listening on http://([^" ]+).*|\1|' <<<"$line")
    addrs+="${addrs:+,}$addr"
    replica_json+="${replica_json:+,}{\"partition\":$p,\"replica\":$r,\"grpc\":\"$addr\",\"stats\":\"$stats\",\"pid\":$(cat "$run_dir/isnd-$p-$r.pid")}"
  done
  agg_partitions+=(--partition "$addrs")
done
"$bin/isn-agg" --listen "127.0.0.1:$agg_port" --stats-listen "127.0.0.1:$agg_stats_port" "${agg_partitions[@]}" \
  ${agg_args[@]+"${agg_args[@]}"} >"$run_dir/agg.log" 2>&1 &
echo $! >>"$run_dir/pids"
line=$(wait_for_log "$run_dir/agg.log" "started:.*gRPC port")
agg_port=$(sed -E 's/.*gRPC port ([0-9]+).*/\1/' <<<"$line")
agg_stats_port=$(sed -E 's/.*stats port ([0-9]+).*/\1/' <<<"$line")
trap - ERR
echo "127.0.0.1:$agg_port" >"$run_dir/agg.addr"
echo "127.0.0.1:$agg_stats_port" >"$run_dir/agg-stats.addr"
echo "$run_dir" >"$last_file"
printf '{"partitions":%d,"replicas":%d,"agg":"127.0.0.1:%d","agg_stats":"127.0.0.1:%d","run_dir":"%s","isnd":[%s]}\n' \
  "${#part_dirs[@]}" "$replicas" "$agg_port" "$agg_stats_port" "$run_dir" "$replica_json" | tee "$run_dir/cluster.json"
