#!/usr/bin/env bash
# Issue 40, must-show 4: the GPU's rate on the 20M partition with a filter keeping 10% of the documents
# against the same queries unfiltered. Stages:
#   bash bench/gpu_filter_device.sh device   on the GPU machine: the 20M-document synthetic partition fitted to
#                                            Debian (built once, about 20 s; bench/gpu_device.sh synth's), an int
#                                            attribute `bucket` hashing the documents into 10 buckets, then one
#                                            bench_gpu process: OR, k 10 and 1,000, batches 16 and 256, the log's
#                                            1,024 queries with the filter bucket=0 and without it on two backends,
#                                            rows alternating, ROUNDS (3) rounds; JSON lines, ending with the
#                                            ratios (best round each, and the median of each round's) in one
#                                            line. A row runs at least MIN_BATCHES (32) batches, the log over
#                                            again: four batches of 256, two in flight, were mostly the pipeline's
#                                            filling and draining
#   bash bench/gpu_filter_device.sh era      the same (ROUNDS rounds) with the filter era=0: the first tenth of the
#                                            documents, as a date keeps on a partition in crawl order, whose bitmap
#                                            keeps a tenth of the ranges; the range passes skip the rest
#   bash bench/gpu_filter_device.sh bitmaps  the same, one round each, with the filters tested on the attribute
#                                            columns (ISN_GPU_FILTER_BITMAPS=0) and on the filter bitmaps a batch's
#                                            queries share (the default), AUTO and --exhaustive
#   bash bench/gpu_filter_device.sh ab       two builds' ratios at top 10 (KS), the filter bucket=0: bench_gpu of BUILD
#                                            and of BEFORE (another build's bench_gpu, e.g. .devbin/bench/bench_gpu_old),
#                                            one process each, ROUNDS rounds of rows in each, then one line a build and
#                                            batch size with the ratio and the phases a batch of the best rounds (for a
#                                            kernel change: the ratio moves with the filtered pass alone)
#   bash bench/gpu_filter_device.sh kernels  Nsight Compute (ncu) on one bench_gpu process at top 10 (KS), batches of
#                                            256 (BATCH), KERNEL_BATCHES (6) batches a side: each kernel launch's time
#                                            and instructions, one pass, the kernels serialized; then per side and
#                                            kernel the medians, and the bound pass's instructions filtered over
#                                            plain for the same batches (bench/filter_kernels.py)
#   bash bench/gpu_filter_device.sh local    here, without a GPU: a 500,000-document synthetic partition on the
#                                            emulated device, the work per query filtered and plain (postings decoded
#                                            and scored, blocks skipped, reports), pruned and unpruned, with the
#                                            filtered queries' probe seed and without it (--no-filter-seed: what the
#                                            device got before the probe read filters); the emulated rates mean nothing
# Binaries: BUILD (default build-gpu on the GPU machine, build here), made by
#   make CUDA=1 STATIC=1 BUILD=build-gpu build-gpu/bench/bench_gpu build-gpu/bin/isn-index
# JSON lines land in OUT (default $BUILD/results). The device stage takes about two and a half minutes of
# device time with the partition built, three without.
set -u
STAGE=${1:-device}
D=${DEVDATA:-.devdata}
SYNTH=${SYNTH:-/tmp/isn-synth20m}
SYNTH_DOCS=${SYNTH_DOCS:-20000000}
ROUNDS=${ROUNDS:-3}
if [ "$STAGE" = local ]; then B=${BUILD:-build}; else B=${BUILD:-build-gpu}; fi
O=${OUT:-$B/results}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

ensure_synth() { # the partition of bench/gpu_device.sh synth, and its buckets
  if [ ! -f "$SYNTH/queries.tsv" ]; then
    "$B/bin/isn-index" synth --docs "$SYNTH_DOCS" --seed 1 --fit "$D/idx-deb" --fit-queries "$D/debpkg.queries.tsv" \
      --queries 8192 --out "$SYNTH" | tee "$O/synth.json" || exit 1
  fi
  # the attributes `bucket` and `era` (bench_gpu --write-buckets)
  grep -q '"era"' "$SYNTH/buckets.jsonl" 2>/dev/null ||
    "$B/bench/bench_gpu" --index "$SYNTH" --write-buckets 10 | tee "$O/buckets.json"
}

# The ratio lines of bench_gpu --interleave, and the rows' equality with the CPU, as one JSON line.
summarize() { # label files...
  local label=$1
  shift
  python3 - "$label" "$@" <<'PY'
import json, sys
label, files = sys.argv[1], sys.argv[2:]
ratios, mismatches, off_device, rows = {}, 0, 0, 0
for f in files:
    for line in open(f):
        try: r = json.loads(line)
        except ValueError: continue
        if r.get("bench") == "gpu":
            rows += 1
            mismatches += r["mismatches"]
            off_device += r["queries"] - r["on_device"]
        elif r.get("bench") == "gpu_filter_ratio":
            key = f'k{r["k"]}_b{r["batch"]}'
            ratios[key] = {"filtered_over_plain": r["filtered_over_plain"],
                           "median_round_ratio": r.get("median_round_ratio"), "plain_qps": r["plain_qps"],
                           "filtered_qps": r["filtered_qps"], "per_query": r["per_query"]}
print(json.dumps({"bench": "gpu_filter_summary", "label": label, "rows": rows, "mismatches": mismatches,
                  "answered_on_cpu": off_device,
                  "min_filtered_over_plain": min((v["filtered_over_plain"] for v in ratios.values()), default=None),
                  "ratios": ratios}))
PY
}

run() { # label timeout args...: bench_gpu on the partition, filtered against plain
  local label=$1 limit=$2
  shift 2
  timeout "$limit" "$B/bench/bench_gpu" --label "$label" --index "$SYNTH" --queries "$SYNTH/queries.tsv" --modes or \
    --filter "${FILTER:-bucket=0}" "$@" >"$O/$label.json" 2>"$O/$label.err"
  local rc=$?
  echo "bench $label rc=$rc" >&2
  head -c 600 "$O/$label.err" >&2
  grep gpu_filter_ratio "$O/$label.json" >&2
  return $rc
}

case "$STAGE" in
device)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device-filter.txt"
  ensure_synth
  run filter40 ${LIMIT:-240} --ks 10,1000 --batches 16,256 --max-queries 1024 --min-batches ${MIN_BATCHES:-32} \
    --no-cpu-rate --interleave "$ROUNDS" ${EXTRA:-}
  summarize filter40 "$O/filter40.json" | tee "$O/filter40-summary.json"
  ;;
era)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device-filter.txt"
  ensure_synth
  FILTER=era=0 run filter40-era ${LIMIT:-240} --ks 10,1000 --batches 16,256 --max-queries 1024 \
    --min-batches ${MIN_BATCHES:-32} --no-cpu-rate --interleave "$ROUNDS" ${EXTRA:-}
  summarize filter40-era "$O/filter40-era.json" | tee "$O/filter40-era-summary.json"
  ;;
bitmaps)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device-filter.txt"
  ensure_synth
  for pruning in auto exhaustive; do
    flag=""
    [ $pruning = exhaustive ] && flag=--exhaustive
    for variant in columns bitmaps; do
      if [ $variant = columns ]; then export ISN_GPU_FILTER_BITMAPS=0; else unset ISN_GPU_FILTER_BITMAPS; fi
      run filter40-$pruning-$variant ${LIMIT:-240} --ks 10,1000 --batches 16,256 --max-queries 1024 \
        --min-batches ${MIN_BATCHES:-32} --no-cpu-rate --interleave 1 $flag ${EXTRA:-}
      summarize filter40-$pruning-$variant "$O/filter40-$pruning-$variant.json" |
        tee "$O/filter40-$pruning-$variant-summary.json"
    done
  done
  unset ISN_GPU_FILTER_BITMAPS
  ;;
ab)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device-filter.txt"
  [ -x "${BEFORE:-}" ] || { echo "ab: BEFORE must name another build's bench_gpu" >&2; exit 2; }
  ensure_synth
  run filter40-ab-after ${LIMIT:-240} --ks ${KS:-10} --batches 16,256 --max-queries 1024 --min-batches ${MIN_BATCHES:-32} \
    --no-cpu-rate --interleave "$ROUNDS" ${EXTRA:-}
  after_bin=$B/bench/bench_gpu
  B=${BEFORE%/bench/bench_gpu}
  [ "$B" = "$BEFORE" ] && { mkdir -p "$O/before/bench"; ln -sf "$(realpath "$BEFORE")" "$O/before/bench/bench_gpu"; B=$O/before; }
  run filter40-ab-before ${LIMIT:-240} --ks ${KS:-10} --batches 16,256 --max-queries 1024 --min-batches ${MIN_BATCHES:-32} \
    --no-cpu-rate --interleave "$ROUNDS" ${EXTRA:-}
  python3 - "$O/filter40-ab-after.json" "$O/filter40-ab-before.json" "$after_bin" "$BEFORE" <<'PY' | tee "$O/filter40-ab-summary.json"
import json, sys
for path, binary in ((sys.argv[1], sys.argv[3]), (sys.argv[2], sys.argv[4])):
    rows, mismatches = {}, {}
    for line in open(path):
        try: r = json.loads(line)
        except ValueError: continue
        if r.get("bench") == "gpu":
            mismatches[(r["k"], r["batch"])] = mismatches.get((r["k"], r["batch"]), 0) + r["mismatches"]
            key = (r["k"], r["batch"], "filtered" if r["label"].endswith("-filtered") else "plain")
            if key not in rows or r["qps"] > rows[key]["qps"]: rows[key] = r
        elif r.get("bench") == "gpu_filter_ratio":
            phases = {side: {name: round(rows[(r["k"], r["batch"], side)]["ms_per_batch"][name], 4)
                             for name in ("threshold_pass", "select_threshold", "score_pass", "sort")}
                      for side in ("plain", "filtered") if (r["k"], r["batch"], side) in rows}
            print(json.dumps({"bench": "gpu_filter_ab", "binary": binary, "k": r["k"], "batch": r["batch"],
                              "filtered_over_plain": r["filtered_over_plain"],
                              "median_round_ratio": r.get("median_round_ratio"), "plain_qps": r["plain_qps"],
                              "filtered_qps": r["filtered_qps"], "ms_per_batch": phases,
                              "mismatches": mismatches.get((r["k"], r["batch"]), 0)}))
PY
  ;;
kernels)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device-filter.txt"
  ensure_synth
  NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
  timeout ${LIMIT:-240} "$NCU" --clock-control none --metrics gpu__time_duration.sum,sm__inst_executed.sum,launch__grid_size \
    --csv --page raw --log-file "$O/filter40-kernels.csv" "$B/bench/bench_gpu" --label filter40-kernels --index "$SYNTH" \
    --queries "$SYNTH/queries.tsv" --modes or --filter "${FILTER:-bucket=0}" --ks ${KS:-10} --batches ${BATCH:-256} \
    --max-queries 1024 --min-batches ${KERNEL_BATCHES:-6} --no-cpu-rate --interleave 1 ${EXTRA:-} \
    >"$O/filter40-kernels.json" 2>"$O/filter40-kernels.err"
  echo "ncu rc=$?" >&2
  python3 bench/filter_kernels.py "$O/filter40-kernels.csv" | tee "$O/filter40-kernels-summary.json"
  ;;
local)
  SYNTH=${SYNTH_LOCAL:-$B/synth-filter40}
  if [ ! -f "$SYNTH/queries.tsv" ]; then
    "$B/bin/isn-index" synth --docs ${LOCAL_DOCS:-500000} --seed 1 --queries 512 --out "$SYNTH" >"$O/synth-local.json" ||
      exit 1
  fi
  [ -f "$SYNTH/buckets.jsonl" ] || "$B/bench/bench_gpu" --index "$SYNTH" --write-buckets 10 >"$O/buckets-local.json"
  for pruning in pruned exhaustive; do
    for seeding in seeded no-filter-seed; do
      seed_flag=""
      [ $seeding = no-filter-seed ] && seed_flag=--no-filter-seed
      run local-$pruning-$seeding 600 --emulate --ks 10,1000 --batches 16 --max-queries ${LOCAL_QUERIES:-256} \
        --no-cpu-rate --threads 2 --interleave 1 --$pruning $seed_flag 2>/dev/null
      summarize local-$pruning-$seeding "$O/local-$pruning-$seeding.json"
    done
  done >"$O/local-summary.json"
  python3 - "$O/local-summary.json" <<'PY'
import json, sys
print("work per query on the emulated device, plain / filtered (no-filter-seed: the filtered queries without the")
print("probe's seed, as the device ran them before the probe read filters; the plain ones are seeded in both)")
for line in open(sys.argv[1]):
    s = json.loads(line)
    for key, r in sorted(s["ratios"].items()):
        p, f = r["per_query"]["plain"], r["per_query"]["filtered"]
        print("%-28s %-8s decoded %8.0f / %8.0f (%.2f)  scored %7.0f / %7.0f  blocks skipped %6.1f / %6.1f  "
              "reports %7.1f / %7.1f  mismatches %d" % (s["label"], key, p["postings_decoded"], f["postings_decoded"],
              f["postings_decoded"] / max(1, p["postings_decoded"]), p["postings_scored"], f["postings_scored"],
              p["blocks_skipped"], f["blocks_skipped"], p["reports"], f["reports"], s["mismatches"]))
PY
  ;;
*)
  echo "usage: bash bench/gpu_filter_device.sh device|era|bitmaps|ab|kernels|local" >&2
  exit 2
  ;;
esac
