#!/usr/bin/env bash
# Issue-2 benchmarks: Cranfield quality, Debian-corpus build time and size, single-thread query speed
# per algorithm, codec decode speed, and the decode share of query time. Results: $BUILD/bench/*.json,
# with a summary in $BUILD/bench/summary.json.
#   BENCH_PASSES=5 BENCH_BUILDS=3 make bench
set -euo pipefail
BUILD=${BUILD:-build}
BIN=$BUILD/bin
OUT=$BUILD/bench
DATA=${ISN_DATA:-$BUILD/data}
SHARED=${ISN_SHARED:-../shared}
PASSES=${BENCH_PASSES:-5}
BUILDS=${BENCH_BUILDS:-3}
mkdir -p "$OUT" "$DATA"

log() { echo "bench: $*" >&2; }

if [ ! -f "$DATA/cran/cranfield.jsonl" ]; then
  log "building the Cranfield corpus"
  python3 "$SHARED/data/build_corpus.py" cranfield "$DATA/cran" >/dev/null
fi
if [ ! -f "$DATA/deb/debian.jsonl" ]; then
  log "building the Debian corpus (installs Debian text packages; needs root or sudo)"
  python3 "$SHARED/data/build_corpus.py" debian "$DATA/deb" >/dev/null
fi

log "Cranfield quality"
"$BIN/isn-index" build --quiet --input "$DATA/cran/cranfield.jsonl" --out "$OUT/idx-cran" >/dev/null 2>&1
"$BIN/isn-query" --index "$OUT/idx-cran" --queries "$DATA/cran/cranfield.queries.tsv" --run-tag isn-bm25 --out "$OUT/cran.run"
"$BIN/isn-eval" --json "$DATA/cran/cranfield.qrels" "$OUT/cran.run" >"$OUT/quality_cranfield.json"

log "Debian corpus: build time and size ($BUILDS builds each, median)"
build_index() { # $1 = out dir, rest = extra flags; prints the median build JSON
  local out=$1; shift
  for i in $(seq "$BUILDS"); do
    rm -rf "$out"
    "$BIN/isn-index" build --quiet --input "$DATA/deb/debian.jsonl" --out "$out" "$@" 2>/dev/null
  done | python3 -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin]
runs.sort(key=lambda r: r["seconds"])
med = runs[len(runs) // 2]
med["seconds_all"] = [r["seconds"] for r in runs]
print(json.dumps(med))'
}
{
  echo "{\"benchmark\":\"build\",\"corpus\":\"debian\",\"threads\":1,"
  echo "\"with_positions\":$(build_index "$OUT/idx-deb-pos"),"
  echo "\"without_positions\":$(build_index "$OUT/idx-deb" --no-positions)}"
} >"$OUT/build_debian.json"

log "query speed (single thread, top-10, $PASSES passes)"
"$BUILD/bench/bench_query" "$OUT/idx-deb" "$DATA/deb/short.queries.tsv" debian-short 10 "$PASSES" >"$OUT/speed_short.json"
"$BUILD/bench/bench_query" "$OUT/idx-deb" "$DATA/cran/cranfield.queries.tsv" debian-cranfield-queries 10 "$PASSES" >"$OUT/speed_long.json"

if [ -x "$BUILD/bench/bench_codec" ]; then
  log "codec decode speed"
  "$BUILD/bench/bench_codec" >"$OUT/codec.json"
fi

log "decode share of query time (long queries, auto algorithm)"
bash bench/decode_share.sh "$BUILD" "$OUT/idx-deb" "$DATA/cran/cranfield.queries.tsv" >"$OUT/decode_share.json" ||
  echo '{"benchmark":"decode_share","error":"no profiler available"}' >"$OUT/decode_share.json"

# GPU first stage against the CPU (equality and queries/s per batch size) when this machine has a GPU
# and the build has CUDA; bench/gpu_device.sh runs the full set (20M synthetic partition) there.
if [ -x "$BUILD/bench/bench_gpu" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  log "GPU first stage (Cranfield and Debian; bench/gpu_device.sh for the 20M partition)"
  "$BUILD/bench/bench_gpu" --label cran --index "$OUT/idx-cran" --queries "$DATA/cran/cranfield.queries.tsv" \
    --ks 10,1000 --batches 1,16,256 >"$OUT/gpu_cran.json" || echo '{"bench":"gpu","error":"failed"}' >"$OUT/gpu_cran.json"
  "$BUILD/bench/bench_gpu" --label debian --index "$OUT/idx-deb" --queries "$DATA/deb/debpkg.queries.tsv" \
    --ks 10,1000 --batches 1,16,256 >"$OUT/gpu_debian.json" || echo '{"bench":"gpu","error":"failed"}' >"$OUT/gpu_debian.json"
else
  log "GPU first stage skipped: no GPU here (or a build without CUDA); bench/gpu_device.sh runs it on a GPU machine"
  echo '{"bench":"gpu","skipped":"no GPU on this machine"}' >"$OUT/gpu_cran.json"
fi

log "scheduler cost model: MAPE per log (first sight and with repeats)"
"$BUILD/bench/bench_scheduler" --sampled 6000 "$OUT/idx-deb" "$DATA/deb/short.queries.tsv" "$DATA/deb/debpkg.queries.tsv" \
  "$DATA/cran/cranfield.queries.tsv" >"$OUT/cost_model.json" || echo '{"benchmark":"cost_model","error":"failed"}' >"$OUT/cost_model.json"

log "second stage: LambdaMART vs BM25 (Debian known-item, Cranfield) and tree-evaluation speed"
ISN_DATA="$DATA" BUILD="$BUILD" bash bench/l2_quality.sh >/dev/null || echo '{"benchmark":"l2_quality","error":"failed"}' >"$OUT/l2_quality.json"
if [ -f "$BUILD/l2-oracle/xgb_model.json" ]; then
  "$BUILD/bench/bench_l2_trees" "$BUILD/l2-oracle/xgb_model.json" 1000 >"$OUT/l2_trees.json" ||
    echo '{"benchmark":"l2_trees","error":"failed"}' >"$OUT/l2_trees.json"
fi

log "RPC overhead (h2load, trivial query)"
bash bench/rpc_overhead.sh "$BUILD" >"$OUT/rpc_overhead.json" || echo '{"benchmark":"rpc_overhead","error":"failed"}' >"$OUT/rpc_overhead.json"

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
summary = {"quality_cranfield": load("quality_cranfield.json"), "build_debian": load("build_debian.json"),
           "codec": load("codec.json"), "decode_share": load("decode_share.json")}
for name in ("speed_short.json", "speed_long.json"):
    s = load(name)
    summary[s["label"]] = {r["algo"]: {"qps_median": r["qps_median"], "p50_us": r["latency_us"]["p50"],
                                       "p99_us": r["latency_us"]["p99"], "mismatches": r["mismatches"]}
                           for r in s["results"]}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(summary, indent=1))
EOF

log "cluster: throughput vs p99 through isn-agg for 1, 2, 4 partitions; the aggregator's own cost"
DATA="$DATA" bash bench/cluster_curves.sh "$BUILD" "$OUT" >"$OUT/cluster_curves.json" ||
  echo '{"benchmark":"cluster_curves","error":"failed"}' >"$OUT/cluster_curves.json"
log "hedging: p99 with and without, one replica slowed on 5% of its requests"
DATA="$DATA" bash bench/hedging.sh "$BUILD" >"$OUT/hedging.json" || echo '{"benchmark":"hedging","error":"failed"}' >"$OUT/hedging.json"
log "hedging: both replicas of a partition with random hiccups on 5% of requests"
SLOW=0.0,0.1 DATA="$DATA" bash bench/hedging.sh "$BUILD" >"$OUT/hedging_hiccups.json" ||
  echo '{"benchmark":"hedging","error":"failed"}' >"$OUT/hedging_hiccups.json"
