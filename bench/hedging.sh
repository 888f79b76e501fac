#!/usr/bin/env bash
# Tail latency with and without hedging: P partitions x 2 replicas behind isn-agg, one replica made
# slow on purpose (isnd testing.inject_delay on testing.inject_delay_percent of its requests), the
# same open-loop load through isn-agg with hedging off and on. Prints one JSON object: both isn-bench
# results and what hedging cost (hedged requests per query, upstream requests per partition-query).
#   bench/hedging.sh [BUILD] [PARTS_DIR] [QUERIES.tsv]
# Environment: RATE (300), DURATION (20), DELAY (20ms), PERCENT (5), DEADLINE_MS (200).
set -euo pipefail
BUILD=${1:-build}
PARTS=${2:-}
DATA=${DATA:-/work/data}
QUERIES=${3:-$DATA/cran/cranfield.queries.tsv}
RATE=${RATE:-300} DURATION=${DURATION:-20} DELAY=${DELAY:-20ms} PERCENT=${PERCENT:-5} DEADLINE_MS=${DEADLINE_MS:-200}
BIN=$BUILD/bin
RUN=$(mktemp -d /tmp/isn-hedging-XXXXXX)
trap 'tools/isn-cluster.sh stop --run-dir "$RUN/cluster" >/dev/null 2>&1 || true; rm -rf "$RUN"' EXIT
if [ -z "$PARTS" ]; then
  PARTS=$RUN/parts
  "$BIN/isn-index" build --quiet --input "${CORPUS:-$DATA/cran/cranfield.jsonl}" --out "$PARTS" --partitions 3 >/dev/null 2>&1
fi

metric() { curl -s "http://127.0.0.1:8090/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

run_one() { # hedge|no-hedge
  local args=()
  [ "$1" = no-hedge ] && args=(--agg-arg --no-hedge)
  tools/isn-cluster.sh start --parts "$PARTS" --replicas 2 --run-dir "$RUN/cluster" --bin "$BIN" \
    --slow 0.0 --slow-set "testing.inject_delay=$DELAY" --slow-set "testing.inject_delay_percent=$PERCENT" \
    ${args[@]+"${args[@]}"} >/dev/null
  "$BIN/isn-bench" --target 127.0.0.1:8070 --queries "$QUERIES" --rate "$RATE" --duration "$DURATION" --warmup 2 \
    --deadline-ms "$DEADLINE_MS" >"$RUN/$1.json"
  local answered hedges upstream
  answered=$(metric 'isn_agg_requests_total{code="0"}')
  hedges=$(metric isn_agg_hedges_total)
  upstream=$(metric isn_agg_upstream_requests_total)
  echo "{\"queries\":$answered,\"hedges\":$hedges,\"upstream_requests\":$upstream}" >"$RUN/$1.agg.json"
  tools/isn-cluster.sh stop --run-dir "$RUN/cluster"
}

run_one no-hedge
run_one hedge
python3 - "$RUN" "$RATE" "$DELAY" "$PERCENT" <<'EOF'
import json, sys
run, rate, delay, percent = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
out = {"rate": rate, "slow_replica": {"delay": delay, "percent": percent}}
parts = None
for mode in ("no-hedge", "hedge"):
    bench = json.load(open(f"{run}/{mode}.json"))
    agg = json.load(open(f"{run}/{mode}.agg.json"))
    q = max(agg["queries"], 1)
    out[mode] = {"p50_us": bench["latency_us"]["p50"], "p90_us": bench["latency_us"]["p90"],
                 "p99_us": bench["latency_us"]["p99"], "p999_us": bench["latency_us"]["p999"],
                 "throughput": bench["throughput"], "deadline_miss_rate": bench["deadline_miss_rate"],
                 "hedges_per_query": agg["hedges"] / q, "upstream_requests_per_query": agg["upstream_requests"] / q,
                 "bench": bench}
base = out["no-hedge"]["upstream_requests_per_query"]
out["extra_requests_fraction"] = (out["hedge"]["upstream_requests_per_query"] - base) / base if base else None
out["p99_ratio_hedge_vs_none"] = out["hedge"]["p99_us"] / max(out["no-hedge"]["p99_us"], 1)
print(json.dumps(out))
EOF
