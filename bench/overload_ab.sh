#!/usr/bin/env bash
# An A/B of isnd builds: bench/overload_device.sh's STAGES once per build and round, the builds' order
# reversed every other round, so that a machine whose speed drifts during the run (the GPU machine's
# does, by up to a third between calls) charges every build alike; then one table of each build's
# results side by side, a column per round.
#
#   BUILDS="main=bin-main new=bin-new" ROUNDS=2 STAGES=curves CONFIGS="gpu_all hybrid" \
#     MULTIPLES="1.25 2 3" REPEATS=1 RATE_gpu_all=189162 RATE_hybrid=165000 bash bench/overload_ab.sh
#
# Each build folder holds bin/isnd, bin/isn-bench and bin/isn-index (make CUDA=1 STATIC=1 BUILD=...);
# every other setting is overload_device.sh's and passes through. Results: $OUT/round<N>-<name>/ (OUT
# defaults to build/bench/overload-ab); the table goes to stdout and $OUT/ab.txt.
set -euo pipefail
[ -n "${BUILDS:-}" ] || { sed -n '2,13p' "$0" >&2; exit 2; }
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-build/bench/overload-ab}
names=()
declare -A dir_of
for b in $BUILDS; do
  name=${b%%=*}
  dir_of[$name]=${b#*=}
  for bin in isnd isn-bench isn-index; do
    [ -x "${dir_of[$name]}/bin/$bin" ] || { echo "overload_ab: ${dir_of[$name]}/bin/$bin is missing (build $name)" >&2; exit 2; }
  done
  names+=("$name")
done
mkdir -p "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  order=("${names[@]}")
  if [ $((round % 2)) = 0 ]; then
    order=()
    for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[$i]}"); done
  fi
  for name in "${order[@]}"; do
    echo "overload_ab: round $round, $name" >&2
    BUILD=${dir_of[$name]} OUT=$OUT/round$round-$name bash "$(dirname "$0")/overload_device.sh" >"$OUT/round$round-$name.log" 2>&1 ||
      echo "overload_ab: round $round, $name failed (its log: $OUT/round$round-$name.log)" >&2
  done
done
python3 - "$OUT" "$ROUNDS" "${names[@]}" <<'PY' | tee "$OUT/ab.txt"
import glob, json, os, re, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def fmt(v):
    return "-" if v is None else (f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}")
# curves: one JSON line per point and repeat (overload_curve.sh)
points = {}
for r in range(1, rounds + 1):
    for name in names:
        for path in glob.glob(os.path.join(out, f"round{r}-{name}", "overload-*.json")):
            for line in open(path):
                p = json.loads(line)
                key = (p["config"], p["multiple"])
                points.setdefault(key, {}).setdefault(name, []).append(p)
if points:
    cols = [("on-time/s", "on_time_per_s"), ("shed p99 ms", "shed_p99_ms"),
            ("node <1ms", "node_shed_within_1ms_share"), ("late", "late"), ("answered p99 ms", "answered_p99_ms")]
    print("curves: each build's values per round and repeat, in run order")
    print(f"{'config':10} {'x':>5}  {'measure':16} " + "  ".join(f"{n:>28}" for n in names))
    for (config, m), by in sorted(points.items()):
        for label, field in cols:
            cells = ["/".join(fmt(p.get(field)) for p in by.get(n, [])) for n in names]
            print(f"{config:10} {m:5.2f}  {label:16} " + "  ".join(f"{c:>28}" for c in cells))
# sustained: the summary line of each search (isn-bench --sustained)
rows = {}
for r in range(1, rounds + 1):
    for name in names:
        path = os.path.join(out, f"round{r}-{name}", "sustained.txt")
        if not os.path.exists(path):
            continue
        for line in open(path):
            m = re.match(r"(\S+)\s+sustained ([0-9.]+)/s", line)
            if m:
                rows.setdefault(m.group(1), {}).setdefault(name, []).append(float(m.group(2)))
if rows:
    print("sustained rate (q/s), each build's searches in run order")
    for config, by in sorted(rows.items()):
        print(f"{config:10} " + "  ".join(f"{n}: " + " / ".join(f"{v:.0f}" for v in by.get(n, [])) for n in names))
PY
