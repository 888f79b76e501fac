#!/usr/bin/env bash
# Before/after speed of two builds on the same machine, in alternating rounds so that the machine's
# load hits both alike: bench_query (single thread, every algorithm, top-10) on the Debian short and
# Cranfield logs, and bench/rpc_overhead.sh. Prints one JSON object: per measure, each round's value,
# the median per build and the ratio after/before of the medians (> 1: the after build is faster).
#   bash bench/compare_builds.sh BEFORE_BUILD AFTER_BUILD INDEX_DIR SHORT.tsv CRANFIELD.tsv
#   (ROUNDS=5 rounds, PASSES=3 bench_query passes per round, BENCH_N=rpc_overhead requests per run;
#    RAW_DIR=DIR keeps each round's JSON there, and the summary counts the rounds completed, so a run
#    cut short by a time limit still reports: run it again with ROUNDS=0 and the same RAW_DIR)
set -euo pipefail
[ $# -eq 5 ] || { sed -n 2,7p "$0" >&2; exit 2; }
BEFORE=$1 AFTER=$2 INDEX=$3 SHORT=$4 CRAN=$5
ROUNDS=${ROUNDS:-5}
PASSES=${PASSES:-3}
export BENCH_N=${BENCH_N:-50000}
for b in "$BEFORE" "$AFTER"; do
  for p in bench/bench_query bin/isnd bin/isn-index; do
    [ -x "$b/$p" ] || { echo "compare_builds: $b/$p missing (make programs $b/bench/bench_query)" >&2; exit 2; }
  done
done

if [ -n "${RAW_DIR:-}" ]; then
  out=$RAW_DIR
  mkdir -p "$out"
else
  out=$(mktemp -d /tmp/isn_compare.XXXXXX)
  trap 'rm -rf "$out"' EXIT
fi
for r in $(seq "$ROUNDS"); do  # ROUNDS=0: only the summary of what RAW_DIR holds
  # Alternate which build goes first, so neither always runs on a warmer (or busier) machine.
  if [ $((r % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    if [ "$which" = before ]; then b=$BEFORE; else b=$AFTER; fi
    "$b/bench/bench_query" "$INDEX" "$SHORT" short 10 "$PASSES" >"$out/$which.short.$r.json"
    "$b/bench/bench_query" "$INDEX" "$CRAN" cranfield 10 "$PASSES" >"$out/$which.cran.$r.json"
    bash bench/rpc_overhead.sh "$b" >"$out/$which.rpc.$r.json"
  done
  echo "compare_builds: round $r of $ROUNDS done" >&2
  echo "$r" >"$out/rounds_done"
done

[ -f "$out/rounds_done" ] || { echo "compare_builds: no completed round in $out" >&2; exit 1; }
python3 - "$out" "$(cat "$out/rounds_done")" "$BEFORE" "$AFTER" <<'PY'
import json, statistics, sys
out, rounds, before, after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(which, kind, r):
    return json.load(open(f"{out}/{which}.{kind}.{r}.json"))
measures = {}
def add(name, which, value):
    measures.setdefault(name, {"before": [], "after": []})[which].append(value)
for r in range(1, rounds + 1):
    for which in ("before", "after"):
        for kind in ("short", "cran"):
            for res in load(which, kind, r)["results"]:
                add(f"bench_query.{kind}.{res['algo']}.qps", which, res["qps_median"])
        for run in load(which, "rpc", r)["runs"]:
            add(f"rpc_overhead.{run['run']}.requests_per_s", which, run["requests_per_s"])
            add(f"rpc_overhead.{run['run']}.p50_us", which, run["p50_us"])
result = {"benchmark": "compare_builds", "before": before, "after": after, "rounds": rounds, "measures": {}}
for name, v in measures.items():
    mb, ma = statistics.median(v["before"]), statistics.median(v["after"])
    # Latencies: lower is better, so the ratio is before/after to keep "> 1 = after faster".
    ratio = (mb / ma) if name.endswith("_us") else (ma / mb)
    result["measures"][name] = {"before": v["before"], "after": v["after"], "median_before": mb,
                                "median_after": ma, "after_speed_ratio": round(ratio, 4)}
print(json.dumps(result, indent=1))
PY
