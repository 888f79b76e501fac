#!/usr/bin/env bash
# What a document order costs the CPU (issue 41, must-show 4): the same corpus built by this build in
# input order, in --order bp and in --order global, then bench_query (one thread, every algorithm, the
# exhaustive oracle checking each) on each index in rotating order, ROUNDS rounds, at top-10 and
# top-1000. Prints one JSON object: per order its build seconds and bytes (total, postings, document
# table), per k and algorithm the median queries per second over the rounds (each round's value is
# bench_query's median of PASSES passes), its ratio to input order, and the mismatches against each
# index's exhaustive oracle summed over every run (0: every algorithm gave the oracle's hits).
#   bash bench/order_cost.sh BUILD CORPUS.jsonl QUERIES.tsv [WORK_DIR]
#   (ROUNDS=5, PASSES=3, KS="10 1000"; WORK_DIR keeps the indexes and each run's JSON, default a
#    temporary folder removed at exit)
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,11p "$0" >&2; exit 2; }
B=$1 CORPUS=$2 QUERIES=$3
ROUNDS=${ROUNDS:-5}
PASSES=${PASSES:-3}
KS=${KS:-10 1000}
ORDERS="input bp global"
for p in bin/isn-index bench/bench_query; do
  [ -x "$B/$p" ] || { echo "order_cost: $B/$p missing (make programs $B/bench/bench_query)" >&2; exit 2; }
done
if [ $# -ge 4 ]; then
  work=$4
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/isn_order_cost.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
for o in $ORDERS; do
  start=$(date +%s.%N)
  "$B/bin/isn-index" build --quiet --input "$CORPUS" --order "$o" --out "$work/idx-$o" >"$work/build-$o.json"
  python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$start" "$(date +%s.%N)" >"$work/build-$o.seconds"
done
set -- $ORDERS
for r in $(seq "$ROUNDS"); do
  for o in "$@"; do
    for k in $KS; do
      "$B/bench/bench_query" "$work/idx-$o" "$QUERIES" "$o" "$k" "$PASSES" >"$work/run-$o-k$k-$r.json"
    done
  done
  set -- "${@:2}" "$1" # the next round starts with the next order: none always runs on a warmer machine
  echo "order_cost: round $r of $ROUNDS done" >&2
done
python3 - "$work" "$ROUNDS" "$ORDERS" "$KS" <<'EOF'
import json, statistics, sys
work, rounds, orders, ks = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
out = {"rounds": rounds, "orders": {}, "qps": {}, "mismatches": 0}
for o in orders:
    built = json.load(open(f"{work}/build-{o}.json"))
    out["orders"][o] = {"build_seconds": round(float(open(f"{work}/build-{o}.seconds").read()), 2),
                        "bytes": {key: built["bytes"][key] for key in ("total", "postings", "docs")}}
for k in ks:
    per_algo = {}
    for o in orders:
        for r in range(1, rounds + 1):
            for row in json.load(open(f"{work}/run-{o}-k{k}-{r}.json"))["results"]:
                per_algo.setdefault(row["algo"], {}).setdefault(o, []).append(row["qps_median"])
                out["mismatches"] += row["mismatches"]
    cells = {}
    for algo, by_order in per_algo.items():
        medians = {o: statistics.median(v) for o, v in by_order.items()}
        cells[algo] = {o: {"qps": round(medians[o], 1), "vs_input": round(medians[o] / medians["input"], 3)}
                       for o in orders}
    out["qps"][f"k{k}"] = cells
print(json.dumps(out))
EOF
