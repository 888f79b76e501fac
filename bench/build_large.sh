#!/usr/bin/env bash
# A large generated corpus through the bounded-memory build (issue 39: 100M documents on the GPU machine,
# 20M on a 2-core one). Writes DOCS documents fitted to FIT_INDEX as JSON Lines (isn-index synth --jsonl,
# with 1,000 queries over its terms; FIT_QUERIES=QUERIES.tsv draws their shape from a real log) unless
# WORK/corpus.jsonl exists, then builds WORK/index with --threads THREADS --memory MEMORY and prints one
# JSON object: the corpus's bytes and generation seconds, the build's wall and CPU seconds, peak resident
# memory (and whether it stayed under MEMORY + 64 MiB), documents per second, runs, the index's bytes and
# the most disk WORK/index took while building.
#   bash bench/build_large.sh BUILD DOCS FIT_INDEX WORK [THREADS (all cores)] [MEMORY (4GiB)]
#   (EXTRA="--no-positions" adds build options; NICE=19 runs both at low priority; CORPUS=FILE keeps the
#   corpus elsewhere than WORK/corpus.jsonl, e.g. in /dev/shm when the disk holds only the index)
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,10p "$0" >&2; exit 2; }
build=$1 docs=$2 fit=$3 work=$4 threads=${5:-$(nproc)} memory=${6:-4GiB}
bin=$build/bin/isn-index
[ -x "$bin" ] || { echo "build_large: no $bin (make first)" >&2; exit 2; }
[ -f "$fit/index.isn" ] || { echo "build_large: $fit is not an index folder (the index to fit, e.g. the Debian one)" >&2; exit 2; }
mkdir -p "$work"
corpus=${CORPUS:-$work/corpus.jsonl}
nice=(nice -n "${NICE:-0}")
gen_seconds=0
if [ ! -f "$corpus" ]; then
  start=$SECONDS
  fit_queries=()
  [ -n "${FIT_QUERIES:-}" ] && fit_queries=(--fit-queries "$FIT_QUERIES")
  "${nice[@]}" "$bin" synth --jsonl --docs "$docs" --fit "$fit" "${fit_queries[@]}" --queries 1000 \
    --queries-out "$work/queries.tsv" --threads "$threads" --out "$corpus.tmp" >&2
  mv "$corpus.tmp" "$corpus"
  gen_seconds=$((SECONDS - start))
fi
rm -rf "$work/index"
WORK=$work CORPUS=$corpus BIN=$bin THREADS=$threads MEMORY=$memory GEN=$gen_seconds EXTRA=${EXTRA:-} NICE=${NICE:-0} exec python3 - <<'PY'
import json, os, re, shlex, subprocess, threading, time

work, binary = os.environ["WORK"], os.environ["BIN"]
memory = os.environ["MEMORY"]
m = re.fullmatch(r"(\d+)(MiB|GiB)", memory)
bound = int(m.group(1)) * (1 << (20 if m.group(2) == "MiB" else 30)) + (64 << 20) if m else None
cmd = ["nice", "-n", os.environ["NICE"], binary, "build", "--quiet", "--input", os.environ["CORPUS"],
       "--out", os.path.join(work, "index"), "--threads", os.environ["THREADS"], "--memory", memory] + shlex.split(os.environ["EXTRA"])
peak_disk = 0
done = threading.Event()

def watch_disk():
    global peak_disk
    while not done.wait(1.0):
        total = 0
        for root, _, files in os.walk(os.path.join(work, "index")):
            for f in files:
                try:
                    total += os.stat(os.path.join(root, f)).st_blocks * 512
                except OSError:
                    pass
        peak_disk = max(peak_disk, total)

watcher = threading.Thread(target=watch_disk)
watcher.start()
start = time.monotonic()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=dict(os.environ, SOURCE_DATE_EPOCH="1"))
summary = p.stdout.read()
_, status, usage = os.wait4(p.pid, 0)
wall = time.monotonic() - start
done.set()
watcher.join()
if status != 0:
    raise SystemExit("build_large: %s exited with status %d" % (" ".join(cmd), status))
s = json.loads(summary)
rss = usage.ru_maxrss * 1024
print(json.dumps({
    "benchmark": "build_large", "command": " ".join(cmd), "corpus_bytes": os.path.getsize(os.environ["CORPUS"]),
    "generation_seconds": float(os.environ["GEN"]), "docs": s["docs"], "postings": s["postings"], "tokens": s["tokens"],
    "runs": s["runs"], "index_bytes": s["bytes"]["total"], "wall_seconds": round(wall, 2),
    "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2), "docs_per_second": round(s["docs"] / wall),
    "peak_rss_mib": round(rss / 2**20, 1), "rss_bound_mib": bound / 2**20 if bound else None,
    "rss_within_bound": rss <= bound if bound else None, "peak_disk_mib": round(peak_disk / 2**20, 1),
    "load_average_after": [round(x, 2) for x in os.getloadavg()]}, indent=1))
PY
