#!/usr/bin/env bash
# Tail latency with and without hedging: P partitions x 2 replicas behind isn-agg, one replica made
# slow on purpose (isnd testing.inject_delay on testing.inject_delay_percent of its requests), the
# same open-loop load through isn-agg with hedging off and on. Prints one JSON object: both isn-bench
# results and what hedging cost (hedged requests per query, upstream requests per partition-query).
#   bench/hedging.sh [BUILD] [PARTS_DIR] [QUERIES.tsv]
# Environment: RATE (300), DURATION (15), DELAY (20ms), PERCENT (5), DEADLINE_MS (200), REPEAT (3:
# the two modes alternate, so that other load on the machine hits both alike; medians are reported),
# WORKERS (2 per isnd, so a delayed request mostly delays itself), SLOW (0.0: replica 0 of partition
# 0; "0.0,0.1": both replicas of partition 0 have random hiccups, which replica choice cannot avoid).
set -euo pipefail
BUILD=${1:-build}
PARTS=${2:-}
DATA=${DATA:-${ISN_DATA:-${BUILD:-build}/data}}
QUERIES=${3:-$DATA/cran/cranfield.queries.tsv}
SLOW=${SLOW:-0.0} RATE=${RATE:-300} DURATION=${DURATION:-15} REPEAT=${REPEAT:-3} WORKERS=${WORKERS:-2} DELAY=${DELAY:-20ms} PERCENT=${PERCENT:-5} DEADLINE_MS=${DEADLINE_MS:-200}
BIN=$BUILD/bin
RUN=$(mktemp -d /tmp/isn-hedging-XXXXXX)
trap 'tools/isn-cluster.sh stop --run-dir "$RUN/cluster" >/dev/null 2>&1 || true; rm -rf "$RUN"' EXIT
if [ -z "$PARTS" ]; then
  PARTS=$RUN/parts
  "$BIN/isn-index" build --quiet --input "${CORPUS:-$DATA/cran/cranfield.jsonl}" --out "$PARTS" --partitions 3 >/dev/null 2>&1
fi

metric() { curl -s "http://127.0.0.1:8090/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

run_one() { # hedge|no-hedge  repeat
  local args=()
  [ "$1" = no-hedge ] && args=(--agg-arg --no-hedge)
  tools/isn-cluster.sh start --parts "$PARTS" --replicas 2 --run-dir "$RUN/cluster" --bin "$BIN" --workers "$WORKERS" \
    --base-port 7100 --agg-port 8070 --agg-stats-port 8090 \
    --slow "$SLOW" --slow-set "testing.inject_delay=$DELAY" --slow-set "testing.inject_delay_percent=$PERCENT" \
    ${args[@]+"${args[@]}"} >/dev/null
  "$BIN/isn-bench" --target 127.0.0.1:8070 --queries "$QUERIES" --rate "$RATE" --duration "$DURATION" --warmup 2 \
    --deadline-ms "$DEADLINE_MS" >"$RUN/$1.$2.json"
  local answered hedges upstream
  answered=$(metric 'isn_agg_requests_total{code="OK"}')
  hedges=$(metric isn_agg_hedges_total)
  upstream=$(metric isn_agg_upstream_requests_total)
  echo "{\"queries\":$answered,\"hedges\":$hedges,\"upstream_requests\":$upstream}" >"$RUN/$1.$2.agg.json"
  tools/isn-cluster.sh stop --run-dir "$RUN/cluster"
}

for i in $(seq "$REPEAT"); do
  run_one no-hedge "$i"
  run_one hedge "$i"
done
python3 - "$RUN" "$RATE" "$DELAY" "$PERCENT" "$REPEAT" "$SLOW" <<'EOF'
import json, statistics, sys
run, rate, delay, percent, repeat = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
out = {"rate": rate, "slow": {"replicas": sys.argv[6], "delay": delay, "percent": percent}, "repeat": repeat}
for mode in ("no-hedge", "hedge"):
    runs = []
    for i in range(1, repeat + 1):
        bench = json.load(open(f"{run}/{mode}.{i}.json"))
        agg = json.load(open(f"{run}/{mode}.{i}.agg.json"))
        q = max(agg["queries"], 1)
        runs.append({"p50_us": bench["latency_us"]["p50"], "p90_us": bench["latency_us"]["p90"],
                     "p99_us": bench["latency_us"]["p99"], "p999_us": bench["latency_us"]["p999"],
                     "throughput": bench["throughput"], "deadline_miss_rate": bench["deadline_miss_rate"],
                     "errors": bench["error_rate"], "hedges_per_query": agg["hedges"] / q,
                     "upstream_requests_per_query": agg["upstream_requests"] / q})
    out[mode] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out[mode]["runs"] = runs
base = out["no-hedge"]["upstream_requests_per_query"]
out["extra_requests_fraction"] = (out["hedge"]["upstream_requests_per_query"] - base) / base if base else None
out["p99_ratio_hedge_vs_none"] = out["hedge"]["p99_us"] / max(out["no-hedge"]["p99_us"], 1)
print(json.dumps(out))
EOF
