#!/usr/bin/env bash
# Throughput vs p99 through isn-agg for 1, 2 and 4 partitions of one corpus on this machine, and the
# aggregator's own cost per query (1 partition: through isn-agg vs straight to isnd at the same
# rates, and the time the isn-agg thread spent per query from its /metrics).
#   bench/cluster_curves.sh [BUILD] [OUT_DIR]
# Environment: CORPUS (Debian debian.jsonl), QUERIES (Debian short.queries.tsv), RATES (sweep),
# PARTITIONS ("1 2 4"), DURATION (5 s per rate), DEADLINE_MS (100). Writes OUT_DIR/cluster_P.png and
# prints one JSON object.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-$BUILD/bench}
DATA=${DATA:-${ISN_DATA:-${BUILD:-build}/data}}
CORPUS=${CORPUS:-$DATA/deb/debian.jsonl}
QUERIES=${QUERIES:-$DATA/deb/short.queries.tsv}
RATES=${RATES:-250,500,1000,1500,2000,3000}
PARTITIONS=${PARTITIONS:-1 2 4}
DURATION=${DURATION:-5}
DEADLINE_MS=${DEADLINE_MS:-100}
BIN=$BUILD/bin
CORES=$(nproc)
RUN=$(mktemp -d /tmp/isn-curves-XXXXXX)
trap 'tools/isn-cluster.sh stop --run-dir "$RUN/cluster" >/dev/null 2>&1 || true; rm -rf "$RUN"' EXIT
mkdir -p "$OUT"

bench() { # target plot
  "$BIN/isn-bench" --target "$1" --queries "$QUERIES" --sweep "$RATES" --duration "$DURATION" --warmup 1 \
    --deadline-ms "$DEADLINE_MS" --plot "$2"
}
metric() { curl -s "http://127.0.0.1:8090/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

for P in $PARTITIONS; do
  parts=$RUN/parts-$P
  "$BIN/isn-index" build --quiet --no-positions --input "$CORPUS" --out "$parts" --partitions "$P" >/dev/null 2>&1
  workers=$(( CORES / P )); [ "$workers" -ge 1 ] || workers=1
  tools/isn-cluster.sh start --parts "$parts" --replicas 1 --workers "$workers" --run-dir "$RUN/cluster" \
    --base-port 7100 --agg-port 8070 --agg-stats-port 8090 --bin "$BIN" --agg-arg --no-hedge >/dev/null
  bench 127.0.0.1:8070 "$OUT/cluster_$P.png" >"$RUN/agg-$P.json"
  echo "{\"processing_seconds_sum\":$(metric isn_agg_processing_seconds_sum),\"count\":$(metric isn_agg_processing_seconds_count)}" \
    >"$RUN/agg-cpu-$P.json"
  if [ "$P" = 1 ]; then
    bench 127.0.0.1:7100 "$OUT/cluster_1_direct.png" >"$RUN/direct.json"
    # One query at a time, alternating: the extra hop with nothing queued.
    for i in 1 2 3; do
      for t in agg:127.0.0.1:8070 direct:127.0.0.1:7100; do
        "$BIN/isn-bench" --target "${t#*:}" --queries "$QUERIES" --concurrency 1 --duration "$DURATION" --warmup 1 \
          --deadline-ms "$DEADLINE_MS" --connections 1 >"$RUN/c1-${t%%:*}-$i.json"
      done
    done
  fi
  tools/isn-cluster.sh stop --run-dir "$RUN/cluster"
done

python3 - "$RUN" "$PARTITIONS" "$CORES" "$CORPUS" "$QUERIES" <<'EOF'
import json, sys
run, parts, cores, corpus, queries = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def brief(s):
    return {"rate": s["target_rate"], "throughput": s["throughput"], "p50_us": s["latency_us"]["p50"],
            "p99_us": s["latency_us"]["p99"], "p999_us": s["latency_us"]["p999"],
            "deadline_miss_rate": s["deadline_miss_rate"], "errors": s["error_rate"],
            "status": {k: v for k, v in s["status"].items() if v}, "partial": s["partial"]}
out = {"benchmark": "cluster_curves", "cores": cores, "corpus": corpus, "queries": queries, "curves": {}}
for p in parts:
    sweep = json.load(open(f"{run}/agg-{p}.json"))["sweep"]
    cpu = json.load(open(f"{run}/agg-cpu-{p}.json"))
    out["curves"][p] = {"through_agg": [brief(s) for s in sweep],
                        "agg_thread_us_per_query": 1e6 * cpu["processing_seconds_sum"] / max(cpu["count"], 1)}
if "1" in parts:
    direct = json.load(open(f"{run}/direct.json"))["sweep"]
    via = json.load(open(f"{run}/agg-1.json"))["sweep"]
    out["curves"]["1"]["direct_to_isnd"] = [brief(s) for s in direct]
    out["agg_overhead_p50_us_by_rate"] = {str(d["target_rate"]): v["latency_us"]["p50"] - d["latency_us"]["p50"]
                                         for d, v in zip(direct, via)}
    c1 = {k: [json.load(open(f"{run}/c1-{k}-{i}.json"))["latency_us"] for i in (1, 2, 3)] for k in ("agg", "direct")}
    med = lambda k, q: sorted(r[q] for r in c1[k])[1]
    out["agg_overhead_one_at_a_time_us"] = {
        "p50_agg": med("agg", "p50"), "p50_direct": med("direct", "p50"), "p50_added": med("agg", "p50") - med("direct", "p50"),
        "mean_added": med("agg", "mean") - med("direct", "mean"), "p99_agg": med("agg", "p99"), "p99_direct": med("direct", "p99")}
print(json.dumps(out))
EOF
