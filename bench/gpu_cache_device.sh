#!/usr/bin/env bash
# Issue 41: the pruned-prefix cache on an index in global order (the tail bound's early termination and the
# admission by visit frequency) against a whole-list cache in the same device memory. Stages:
#   bash bench/gpu_cache_device.sh device   on the GPU machine (about 5 minutes of device time before the resident
#     rows and the 16-batch cells came in; not timed since):
#     1. the 20M-document synthetic partition fitted to Debian in global order (isn-index synth --order global,
#        built once), its log split into a training log (the first TRAIN queries) and a measured one (the next
#        QUERIES, disjoint); postings at 8% and 16% of the partition's device bytes (--budget-fraction), OR and
#        AND, k 10 and 1,000, batch 256: the whole-list cache (--cache whole, one run per budget) and the pruned
#        cache (--cache pruned, trained at the k it serves, OR), against the 16-core CPU (rates in the first
#        run, with the whole partition resident, AUTO and --exhaustive), every answer compared with the CPU's
#        (mismatches); at least MIN_BATCHES (16) batches a cell;
#     2. the Debian index in global order (.devdata/idx-deb exported to CIFF and imported with --order global),
#        debpkg's queries (first half trains, second half measured), OR, k 10: cached fraction 5, 10, 20, 35
#        and 50% against the rate, the caches of DEB_CACHES (whole pruned tier), MIN_BATCHES batches a cell too (the measured half is 592
#        queries: three batches of 256 would time AUTO's start-up).
#   bash bench/gpu_cache_device.sh ab       on the GPU machine: the whole-list cache, the pruned cache and the tier
#     (AB_CACHES, default "whole pruned tier"; a name with "+stream", e.g. whole+stream, streams the lists a batch
#     lacks into STREAM_MB, default 512, MiB a stream: bench_gpu --stream-mb) alternating, ROUNDS
#     (3) rounds, each a process of its own, at PERCENTS (8 16), OR and AND, top 10 and 1,000 (AB_KS, each trained at
#     the k it serves), on the 20M partition, between two runs with the whole partition resident and the CPU's rates
#     (RESIDENT=0: none); each cell's median rates, each cache's ratio to whole lists of the medians and the median of
#     the rounds' ratios (gpu_cache_ab lines: pruned_over_whole, tier_over_whole, ...); EMULATE=1 runs it on the emulated device (the work per query only: its
#     rates mean nothing). About 3 minutes of device time with the partition built.
#   bash bench/gpu_cache_device.sh local    here, without a GPU: a LOCAL_DOCS (2,000,000) document partition in
#     global order on the emulated device, the work per query (CPU completions and fallbacks, queries answered
#     on the device alone, settled by the bound, postings decoded and scored on the device and by the CPU) of
#     the whole, pruned (list prefixes by the training queries' needs completed per byte), queries (the training
#     queries' visited blocks whole, cheapest first), visits (blocks by visits per byte) and
#     capped caches at 4, 8 and 16% (LOCAL_PERCENTS), OR and AND, k 10 and 1,000; the emulated rates mean nothing.
# LOG=transplant: the synthetic partitions' log is Debian's own queries transplanted (isn-index synth
# --transplant-queries: each distinct term its own synthetic term), its first half the training log and the rest
# measured, so that held-out queries name terms the training half never does about as often as the real log's; the
# partitions then live in folders of their own. Otherwise (LOG=drawn) TRAIN + QUERIES draws of Debian's queries, each
# term the synthetic term nearest its df fraction: 72% of the held-out queries name only terms of the training log.
# PRIOR (e.g. lognormal:1) gives the synthetic partitions static scores (isn-index synth --prior) ordered in with
# weight PRIOR_WEIGHT (default 1), and every search weights them by PRIOR_WEIGHT (bench_gpu --prior-weight: the
# score BM25 + W x prior); the partitions then live in SYNTH/LOCAL_SYNTH folders of their own. SKIP_DEB=1 leaves
# out the device stage's Debian curve. PERCENTS (default "8 16") picks the budgets, RESIDENT=0 leaves out the rows
# with the whole partition resident (to split the stage over two calls; the partition stays built in SYNTH).
# Binaries: BUILD (default build-gpu on the GPU machine, build here), made by
#   make CUDA=1 STATIC=1 BUILD=build-gpu build-gpu/bench/bench_gpu build-gpu/bin/isn-index
# Data from DEVDATA (.devdata: idx-deb, debpkg.queries.tsv). JSON lines land in OUT (default $BUILD/results),
# ending with one summary line per cell (gpu_cache_summary).
set -u
STAGE=${1:-device}
D=${DEVDATA:-.devdata}
if [ "$STAGE" = local ]; then B=${BUILD:-build}; else B=${BUILD:-build-gpu}; fi
O=${OUT:-$B/results}
PRIOR=${PRIOR:-}
PRIOR_WEIGHT=${PRIOR_WEIGHT:-1}
prior_tag=${PRIOR:+-prior-${PRIOR//:/}-w$PRIOR_WEIGHT}
synth_prior=${PRIOR:+--prior $PRIOR --prior-weight $PRIOR_WEIGHT}
search_prior=${PRIOR:+--prior-weight $PRIOR_WEIGHT}
LOG=${LOG:-drawn}
case "$LOG" in
transplant) log_tag=-transplant log_flag=--transplant-queries ;;
drawn) log_tag="" log_flag="" ;;
*) echo "LOG must be drawn or transplant, not '$LOG'" >&2; exit 2 ;;
esac
SYNTH=${SYNTH:-/tmp/isn-synth20m-global$prior_tag$log_tag}
SYNTH_DOCS=${SYNTH_DOCS:-20000000}
DEBG=${DEBG:-/tmp/isn-deb-global}
TRAIN=${TRAIN:-2048}
QUERIES=${QUERIES:-1024}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The partition in global order and its two logs: train.tsv (the first TRAIN queries), measured.tsv (the next
# QUERIES); a transplanted log's first half and the rest.
ensure_synth() { # dir docs fit...
  local dir=$1 docs=$2
  shift 2
  if [ ! -f "$dir/queries.tsv" ]; then
    "$B/bin/isn-index" synth --docs "$docs" --seed 1 "$@" $synth_prior --queries $((TRAIN + QUERIES)) --order global \
      $log_flag --out "$dir" | tee "$O/synth-$(basename "$dir").json" || exit 1
  fi
  if [ "$LOG" = transplant ]; then
    local half=$(($(wc -l <"$dir/queries.tsv") / 2))
    head -n "$half" "$dir/queries.tsv" >"$dir/train.tsv"
    tail -n +"$((half + 1))" "$dir/queries.tsv" >"$dir/measured.tsv"
    QUERIES=$(wc -l <"$dir/measured.tsv")
    return
  fi
  head -n "$TRAIN" "$dir/queries.tsv" >"$dir/train.tsv"
  sed -n "$((TRAIN + 1)),$((TRAIN + QUERIES))p" "$dir/queries.tsv" >"$dir/measured.tsv"
}

run() { # label timeout args...
  local label=$1 limit=$2
  shift 2
  timeout "$limit" "$B/bench/bench_gpu" --label "$label" "$@" $search_prior >"$O/$label.json" 2>"$O/$label.err"
  echo "bench $label rc=$?" >&2
  head -c 600 "$O/$label.err" >&2
}

# One line per (label, mode, k): the rate, the CPU's rate of that cell when measured, the work per query.
summarize() { # files...
  python3 - "$@" <<'PY'
import json, sys
cpu = {}
rows = []
for f in sys.argv[1:]:
    for line in open(f):
        try: r = json.loads(line)
        except ValueError: continue
        if r.get("bench") == "cpu": cpu[(r["mode"], r["k"])] = r["qps"]
        elif r.get("bench") == "gpu": rows.append(r)
for r in rows:
    pq = r.get("per_query", {})
    out = {"bench": "gpu_cache_summary", "label": r["label"], "mode": r["mode"], "k": r["k"], "batch": r["batch"],
           "qps": r["qps"], "cpu_qps": cpu.get((r["mode"], r["k"])), "mismatches": r["mismatches"],
           "cpu_completions_per_query": pq.get("cpu_completions"), "cpu_fallbacks_per_query": pq.get("cpu_fallbacks"),
           "device_only_per_query": pq.get("device_only"), "bound_settled": r.get("bound_settled"),
           "completions_avoided": r.get("completions_avoided"),
           "ranges_bound_skipped_per_query": r.get("ranges_bound_skipped_per_query"),
           "ranges_visited_per_query": r.get("ranges_visited_per_query"),
           "ranges_stopped_per_query": r.get("ranges_stopped_per_query"),
           "reports_per_query": r.get("reports_per_query"), "ms_per_batch": r.get("ms_per_batch"),
           "device_postings_decoded_per_query": pq.get("postings_decoded"),
           "device_postings_scored_per_query": pq.get("postings_scored"), "cpu_postings_per_query": pq.get("cpu_postings"),
           "fallback_reasons": {k: v for k, v in r.get("cpu_fallbacks", {}).items() if v},
           "cpu_early": r.get("cpu_early"),
           "host_complete_ms_per_batch": r.get("host_ms_per_batch", {}).get("complete"),
           "pruned_batches": r.get("pruned_batches"), "batches": r.get("batches")}
    if out["cpu_qps"]: out["over_cpu"] = round(r["qps"] / out["cpu_qps"], 3)
    print(json.dumps(out))
PY
}

case "$STAGE" in
device)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device-cache.txt"
  echo "cores: $(nproc)"
  ensure_synth "$SYNTH" "$SYNTH_DOCS" --fit "$D/idx-deb" --fit-queries "$D/debpkg.queries.tsv"
  # AUTO pruning learns only from batches without CPU work (isn_gpu_complete), and on a cache every batch of 256 has
  # some (its queries with a list not resident): a size class then serves exhaustive batches only (prune_choose).
  # With the whole partition resident it learns, and starts with runs of each mode. Cells of at least MIN_BATCHES
  # (16) batches, the log over again, so that such a start is a small part of a cell; the rows' pruned_batches say
  # how many ran pruned.
  common="--index $SYNTH --queries $SYNTH/measured.tsv --train-queries $SYNTH/train.tsv --batches 256 --max-queries $QUERIES
    --min-batches ${MIN_BATCHES:-16}"
  # the whole partition resident, AUTO and every batch exhaustive: the device's own rate against the CPU's
  files=""
  if [ "${RESIDENT:-1}" != 0 ]; then
    run synth-resident ${LIMIT:-90} $common --ks 10,1000 --modes or,and --cpu-seconds 2
    run synth-resident-exhaustive ${LIMIT:-90} $common --ks 10,1000 --modes or,and --exhaustive --no-cpu-rate
    files="$O/synth-resident.json $O/synth-resident-exhaustive.json"
  fi
  for pct in ${PERCENTS:-8 16}; do
    f=0.$(printf %02d "$pct")
    cpu_rate="--no-cpu-rate"
    run synth-whole-$pct ${LIMIT:-90} $common --budget-fraction "$f" --cache whole --ks 10,1000 --modes or,and $cpu_rate
    files="$files $O/synth-whole-$pct.json"
    for k in 10 1000; do
      run synth-pruned-$pct-k$k ${LIMIT:-90} $common --budget-fraction "$f" --cache pruned --ks $k --modes or,and \
        --train-k $k --train-mode or --no-cpu-rate
      files="$files $O/synth-pruned-$pct-k$k.json"
    done
  done
  # the Debian index in global order, the cached fraction against the rate
  if [ -n "${SKIP_DEB:-}" ]; then
    summarize $files | tee "$O/cache41-summary.json"
    exit 0
  fi
  if [ ! -f "$DEBG/index.isn" ]; then
    "$B/bin/isn-index" export-ciff "$D/idx-deb" --out /tmp/isn-deb.ciff &&
      "$B/bin/isn-index" import-ciff /tmp/isn-deb.ciff --analyzer english --order global --out "$DEBG" || exit 1
  fi
  half=$(($(wc -l <"$D/debpkg.queries.tsv") / 2))
  head -n "$half" "$D/debpkg.queries.tsv" >/tmp/isn-deb-train.tsv
  tail -n +"$((half + 1))" "$D/debpkg.queries.tsv" >/tmp/isn-deb-measured.tsv
  for pct in 5 10 20 35 50; do
    f=0.$(printf %02d "$pct")
    for cache in ${DEB_CACHES:-whole pruned tier}; do
      cpu_rate="--no-cpu-rate"
      [ "$pct$cache" = 5whole ] && cpu_rate="--cpu-seconds 2"
      run deb-$cache-$pct ${LIMIT:-60} --index "$DEBG" --queries /tmp/isn-deb-measured.tsv \
        --train-queries /tmp/isn-deb-train.tsv --batches 256 --max-queries 2048 --min-batches ${MIN_BATCHES:-16} \
        --ks 10 --modes or \
        --budget-fraction "$f" --cache $cache $cpu_rate
      files="$files $O/deb-$cache-$pct.json"
    done
  done
  summarize $files | tee "$O/cache41-summary.json"
  ;;
ab)
  ensure_synth "$SYNTH" "$SYNTH_DOCS" --fit "$D/idx-deb" --fit-queries "$D/debpkg.queries.tsv"
  emulate=""
  [ "${EMULATE:-0}" = 1 ] && emulate=--emulate
  resident_ab() { # label
    [ "${RESIDENT:-1}" = 1 ] || return 0
    run $1 ${LIMIT:-120} $emulate --index "$SYNTH" --queries "$SYNTH/measured.tsv" --batches 256 --max-queries "$QUERIES" \
      --min-batches ${MIN_BATCHES:-16} --ks "$(echo ${AB_KS:-10 1000} | tr ' ' ,)" --modes or,and --cpu-seconds 2
    files="$files $O/$1.json"
  }
  files=""
  resident_ab ab-resident-before
  for r in $(seq "${ROUNDS:-3}"); do
    for k in ${AB_KS:-10 1000}; do
      for pct in ${PERCENTS:-8 16}; do
        for cache in ${AB_CACHES:-whole pruned tier}; do
          # CACHE+stream: that cache with streaming (--stream-mb STREAM_MB, default 512, a stream)
          stream=""
          [ "${cache%+stream}" != "$cache" ] && stream="--stream-mb ${STREAM_MB:-512}"
          run ab-$cache-$pct-k$k-r$r ${LIMIT:-90} $emulate --index "$SYNTH" --queries "$SYNTH/measured.tsv" \
            --train-queries "$SYNTH/train.tsv" --batches 256 --max-queries "$QUERIES" --min-batches ${MIN_BATCHES:-16} \
            --budget-fraction 0.$(printf %02d "$pct") --cache ${cache%+stream} --ks $k --modes or,and --train-k $k \
            --train-mode or --no-cpu-rate $stream
          files="$files $O/ab-$cache-$pct-k$k-r$r.json"
        done
      done
    done
  done
  resident_ab ab-resident-after
  python3 - $files <<'PY' | tee "$O/cache41-ab.json"
import json, statistics, sys
rates, cpu, resident = {}, {}, {}
for f in sys.argv[1:]:
    for line in open(f):
        try: r = json.loads(line)
        except ValueError: continue
        if r.get("bench") == "cpu": cpu.setdefault((r["mode"], r["k"]), []).append(r["qps"])
        if r.get("bench") != "gpu": continue
        parts = r["label"].split("-")
        if parts[1] == "resident":
            resident.setdefault((r["mode"], r["k"]), []).append(r["qps"])
            continue
        cache, pct, rnd = parts[1], parts[2], parts[4]
        rates.setdefault((pct, r["mode"], r["k"]), {}).setdefault(cache, {})[rnd] = r["qps"]
for (pct, mode, k), by in sorted(rates.items()):
    whole = by.get("whole", {})
    mw = statistics.median(whole.values()) if whole else 0
    c = cpu.get((mode, k))
    line = {"bench": "gpu_cache_ab", "percent": int(pct), "mode": mode, "k": k,
            "whole_qps": [whole[x] for x in sorted(whole)], "cpu_qps": c, "resident_qps": resident.get((mode, k))}
    for cache in sorted(x for x in by if x != "whole"):
        other = by[cache]
        ratios = [other[x] / whole[x] for x in sorted(whole) if x in other and whole[x]]
        mo = statistics.median(other.values())
        line[cache + "_qps"] = [other[x] for x in sorted(other)]
        line[cache + "_over_whole"] = round(mo / mw, 3) if mw else None
        line[cache + "_round_ratios"] = [round(x, 3) for x in ratios]
        line[cache + "_median_round_ratio"] = round(statistics.median(ratios), 3) if ratios else None
        line[cache + "_over_cpu"] = round(mo / statistics.median(c), 3) if c else None
    print(json.dumps(line))
PY
  ;;
local)
  LOCAL=${LOCAL_SYNTH:-/tmp/isn-synth2m-global$prior_tag$log_tag}
  fit=""
  [ -d "$D/idx-deb" ] && fit="--fit $D/idx-deb --fit-queries $D/debpkg.queries.tsv"
  ensure_synth "$LOCAL" "${LOCAL_DOCS:-2000000}" $fit
  files=""
  for pct in ${LOCAL_PERCENTS:-4 8 16}; do
    f=0.$(printf %02d "$pct")
    for cache in whole pruned queries visits capped; do
      for k in 10 1000; do
        run local-$cache-$pct-k$k ${LIMIT:-1200} --emulate --index "$LOCAL" --queries "$LOCAL/measured.tsv" \
          --train-queries "$LOCAL/train.tsv" --max-queries ${LOCAL_QUERIES:-256} --batches 256 --ks $k --modes or,and \
          --budget-fraction "$f" --cache $cache --train-k $k --train-mode or --no-cpu-rate
        files="$files $O/local-$cache-$pct-k$k.json"
      done
    done
  done
  summarize $files | tee "$O/cache41-local-summary.json"
  ;;
*)
  echo "usage: bash bench/gpu_cache_device.sh device|ab|local" >&2
  exit 2
  ;;
esac
