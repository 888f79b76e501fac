#!/usr/bin/env bash
# The tier under overload (issue 36): 2 partitions x 2 replicas behind isn-agg with hedging on, on this
# machine. First the tier's sustained rate (isn-bench --sustained: p99 under the deadline, misses under
# 0.1%); then, for each multiple in MULTIPLES (2 and 3), a fresh tier offered that multiple of it
# (open loop), measuring:
#   - isnd Search requests per client query (every replica's isn_requests_total for Search, over the
#     Searches isn-agg answered): at most 1.1 x the partitions (retries and hedges budgeted);
#   - the tier's on-time complete answers per second (OK, complete and within the deadline): at least
#     90% of the sustained rate (the goodput under overload);
#   - isn-agg's resident memory at its peak (sampled every 100 ms) against its baseline (before the
#     load) plus its memory budget (memory_budget_mib) plus 16 MiB.
# Prints one JSON object (also BUILD/bench/agg_overload.json) with each run and whether it passed.
#   bench/agg_overload.sh [BUILD] [CORPUS.jsonl] [QUERIES.tsv]
# Environment: DEADLINE_MS (100), DURATION (10 s per overload run), SUSTAINED_MAX (16000/s),
# SUSTAINED_DURATION (3 s per probe), MULTIPLES ("2 3"), WORKERS (1 per isnd), BUDGET_MIB (64: isn-agg's
# memory_budget_mib), THREADS (isn-bench generator threads, 2).
set -euo pipefail
BUILD=${1:-build}
DATA=${DATA:-$BUILD/data}
CORPUS=${2:-$DATA/cran/cranfield.jsonl}
QUERIES=${3:-$DATA/cran/cranfield.queries.tsv}
DEADLINE_MS=${DEADLINE_MS:-100} DURATION=${DURATION:-10} SUSTAINED_MAX=${SUSTAINED_MAX:-16000}
SUSTAINED_DURATION=${SUSTAINED_DURATION:-3} MULTIPLES=${MULTIPLES:-"2 3"} WORKERS=${WORKERS:-1}
BUDGET_MIB=${BUDGET_MIB:-64} THREADS=${THREADS:-2}
BIN=$BUILD/bin
for f in "$CORPUS" "$QUERIES"; do [ -f "$f" ] || { echo "agg_overload: no $f (make $DATA/cran/cranfield.jsonl)" >&2; exit 2; }; done
RUN=$(mktemp -d "${TMPDIR:-/tmp}/isn-agg-overload.XXXXXX")
trap 'rc=$?; tools/isn-cluster.sh stop --run-dir "$RUN/cluster" >/dev/null 2>&1 || true; if [ $rc -ne 0 ]; then echo "agg_overload: failed (status $rc); logs in $RUN" >&2; else rm -rf "$RUN"; fi' EXIT
"$BIN/isn-index" build --quiet --input "$CORPUS" --out "$RUN/parts" --partitions 2 >/dev/null

start_tier() {
  tools/isn-cluster.sh start --parts "$RUN/parts" --replicas 2 --run-dir "$RUN/cluster" --bin "$BIN" \
    --workers "$WORKERS" --agg-arg --set --agg-arg "memory_budget_mib=$BUDGET_MIB" >/dev/null
}
stop_tier() { tools/isn-cluster.sh stop --run-dir "$RUN/cluster" >/dev/null; }

# The sum of every isnd's Search requests (all codes), and of isn-agg's Searches answered.
isnd_searches() {
  python3 - "$RUN/cluster/cluster.json" <<'PY'
import json, re, sys, urllib.request
total = 0
for r in json.load(open(sys.argv[1]))["isnd"]:
    text = urllib.request.urlopen(f"http://{r['stats']}/metrics", timeout=10).read().decode()
    total += sum(int(float(v)) for v in re.findall(r'^isn_requests_total\{method="isn\.v1\.Search/Search",code="[A-Z_]+"\} (\S+)$', text, re.M))
print(total)
PY
}
agg_answered() {
  curl -s "http://$(cat "$RUN/cluster/agg-stats.addr")/metrics" |
    awk '/^isn_agg_requests_total\{/ {s += $2} END {print s + 0}'
}
agg_pid() { tail -1 "$RUN/cluster/pids"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# --- the sustained rate
start_tier
TARGET=$(cat "$RUN/cluster/agg.addr")
"$BIN/isn-bench" --target "$TARGET" --queries "$QUERIES" --sustained "$SUSTAINED_MAX" --repeats 1 \
  --duration "$SUSTAINED_DURATION" --warmup 1 --deadline-ms "$DEADLINE_MS" --threads "$THREADS" --label tier-2x2 \
  >"$RUN/sustained.json" 2>"$RUN/sustained.log"
stop_tier
SUSTAINED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sustained"]["rate"])' "$RUN/sustained.json")

# --- overload runs
for m in $MULTIPLES; do
  start_tier
  TARGET=$(cat "$RUN/cluster/agg.addr")
  pid=$(agg_pid)
  sleep 1
  baseline=$(rss_kib "$pid")
  searches0=$(isnd_searches) answered0=$(agg_answered)
  rate=$(python3 -c "print(round($SUSTAINED * $m, 1))")
  : >"$RUN/rss.$m"
  (while kill -0 "$pid" 2>/dev/null; do rss_kib "$pid" >>"$RUN/rss.$m" 2>/dev/null || true; sleep 0.1; done) &
  sampler=$!
  "$BIN/isn-bench" --target "$TARGET" --queries "$QUERIES" --rate "$rate" --duration "$DURATION" --warmup 1 \
    --deadline-ms "$DEADLINE_MS" --threads "$THREADS" >"$RUN/load.$m.json"
  searches1=$(isnd_searches) answered1=$(agg_answered)
  curl -s "http://$(cat "$RUN/cluster/agg-stats.addr")/metrics" >"$RUN/agg-metrics.$m"
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  peak=$(sort -n "$RUN/rss.$m" | tail -1)
  echo "{\"multiple\":$m,\"rate\":$rate,\"isnd_searches\":$((searches1 - searches0)),\"agg_answered\":$((answered1 - answered0)),\"rss_baseline_kib\":$baseline,\"rss_peak_kib\":$peak}" >"$RUN/run.$m.json"
  stop_tier
done

mkdir -p "$BUILD/bench"
python3 - "$RUN" "$SUSTAINED" "$DEADLINE_MS" "$DURATION" "$BUDGET_MIB" "$MULTIPLES" <<'PY' | tee "$BUILD/bench/agg_overload.json"
import json, re, sys
run, sustained, deadline_ms, duration, budget_mib, multiples = sys.argv[1:7]
sustained, duration, budget_mib = float(sustained), float(duration), int(budget_mib)
partitions = 2
out = {"tier": "2 partitions x 2 replicas, hedging on", "deadline_ms": int(deadline_ms),
       "sustained": json.load(open(f"{run}/sustained.json"))["sustained"], "runs": []}
for m in multiples.split():
    r = json.load(open(f"{run}/run.{m}.json"))
    bench = json.load(open(f"{run}/load.{m}.json"))
    metrics = open(f"{run}/agg-metrics.{m}").read()
    def metric(pattern):
        return sum(float(v) for v in re.findall(r"^" + pattern + r" (\S+)$", metrics, re.M))
    ok, late, partial = bench["status"]["ok"], bench["late"], bench["partial"]
    on_time_complete = max(ok - late - partial, 0) / duration
    per_query = r["isnd_searches"] / r["agg_answered"] if r["agg_answered"] else None
    rss_bound = r["rss_baseline_kib"] + budget_mib * 1024 + 16 * 1024
    out["runs"].append({
        "multiple": int(m), "offered_rate": r["rate"], "bench": bench,
        "client_queries": r["agg_answered"], "isnd_searches": r["isnd_searches"],
        "isnd_requests_per_client_query": per_query, "bound_requests_per_query": 1.1 * partitions,
        "hedges": metric(r"isn_agg_hedges_total"), "retries": metric(r"isn_agg_retries_total"),
        "extra_denied": metric(r"isn_agg_partition_extra_denied_total\{[^}]*\}"),
        "on_time_complete_per_s": on_time_complete, "bound_on_time_complete_per_s": 0.9 * sustained,
        "rss_baseline_kib": r["rss_baseline_kib"], "rss_peak_kib": r["rss_peak_kib"], "rss_bound_kib": rss_bound,
        "pass": {"requests_per_query": per_query is not None and per_query <= 1.1 * partitions,
                 "goodput": on_time_complete >= 0.9 * sustained, "memory": r["rss_peak_kib"] <= rss_bound}})
print(json.dumps(out))
PY
