#!/usr/bin/env bash
# The bounded-memory build (issue 39) on one corpus: `isn-index build --threads N --memory SIZE` for N in
# THREADS (default "1 2") and SIZE in MEMORY (default "64MiB 256MiB"), in interleaved rounds (the order
# rotates each round), after one warm-up build each and the in-memory build whose bytes each must equal.
# Prints one JSON object: per configuration each round's wall seconds, CPU seconds and peak resident
# memory (ru_maxrss), their medians, whether the peak stayed under SIZE + 64 MiB, the speed-up of each N
# over the first N at the same SIZE (ratio of medians), the runs merged, the load average before and after,
# and whether every build wrote the in-memory build's bytes (SOURCE_DATE_EPOCH is fixed).
# On a shared machine other processes take cores from the builds: each build records the CPU the rest of the
# machine used meanwhile (others_cores: their CPU seconds from /proc/stat over the build's wall seconds), and
# with MAX_OTHERS=C a round in which any build saw others use more than C cores is run again (up to RETRIES
# times, default 20; then the build stops with an error); the JSON says how many rounds were run again.
#   bash bench/build_threads.sh CORPUS.jsonl ISN_INDEX_BINARY (ROUNDS=5; EXTRA="--no-positions" adds options)
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,9p "$0" >&2; exit 2; }
corpus=$1
binary=$2
[ -x "$binary" ] || { echo "build_threads: $binary is not an executable" >&2; exit 2; }
[ -f "$corpus" ] || { echo "build_threads: no corpus $corpus (python3 ../shared/data/build_corpus.py debian DIR)" >&2; exit 2; }
out=$(mktemp -d /tmp/isn_build_threads.XXXXXX)
trap 'rm -rf "$out"' EXIT
ROUNDS=${ROUNDS:-5} EXTRA=${EXTRA:-} THREADS=${THREADS:-"1 2"} MEMORY=${MEMORY:-"64MiB 256MiB"} \
  MAX_OTHERS=${MAX_OTHERS:-} RETRIES=${RETRIES:-20} \
  exec python3 - "$corpus" "$out" "$binary" <<'PY'
import hashlib, json, os, re, shlex, statistics, subprocess, sys, time

corpus, out, binary = sys.argv[1:4]
rounds = int(os.environ["ROUNDS"])
extra = shlex.split(os.environ["EXTRA"])
threads = [int(t) for t in os.environ["THREADS"].split()]
memory = os.environ["MEMORY"].split()
env = dict(os.environ, SOURCE_DATE_EPOCH="1")
units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

def size_bytes(text):
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB)", text)
    if not m:
        sys.exit("build_threads: MEMORY sizes are like 64MiB, got %s" % text)
    return int(m.group(1)) * units[m.group(2)]

max_others = float(os.environ["MAX_OTHERS"]) if os.environ["MAX_OTHERS"] else None
retries = int(os.environ["RETRIES"])
tick = os.sysconf("SC_CLK_TCK")

def busy_seconds():
    """CPU seconds every process on the machine has used (all of /proc/stat's cpu line but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / tick

def build(args, name):
    """One build: (wall s, cpu s, peak rss bytes, sha256 of the index, runs, cores the rest of the machine used)."""
    d = os.path.join(out, name)
    subprocess.run(["rm", "-rf", d], check=True)
    cmd = [binary, "build", "--quiet", "--input", corpus, "--out", d] + extra + args
    busy_before = busy_seconds()
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    summary = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - start
    others = max(0.0, busy_seconds() - busy_before - usage.ru_utime - usage.ru_stime) / wall
    if status != 0:
        sys.exit("build_threads: %s exited with status %d" % (" ".join(cmd), status))
    with open(os.path.join(d, "index.isn"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    subprocess.run(["rm", "-rf", d], check=True)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, digest, json.loads(summary).get("runs", 0), others

configs = [(t, m) for m in memory for t in threads]
reference = build([], "memory")[3]
for t, m in configs:  # warm-up
    build(["--threads", str(t), "--memory", m], "warm")
load_before = os.getloadavg()
runs = {c: [] for c in configs}
same = True
rerun = 0
for r in range(rounds):
    while True:
        got = {}
        for k in range(len(configs)):
            t, m = configs[(r + k) % len(configs)]
            wall, cpu, rss, digest, nruns, others = build(["--threads", str(t), "--memory", m], "t%d-%s" % (t, m))
            same = same and digest == reference
            got[(t, m)] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mib": round(rss / 2**20, 1),
                           "runs": nruns, "others_cores": round(others, 2)}
        busiest = max(x["others_cores"] for x in got.values())
        if max_others is None or busiest <= max_others:
            break
        rerun += 1
        print("build_threads: round %d again: other processes used %.2f cores" % (r + 1, busiest), file=sys.stderr)
        if rerun > retries:
            sys.exit("build_threads: other processes kept more than MAX_OTHERS=%s cores busy in %d rounds" % (max_others, rerun))
    for c, x in got.items():
        runs[c].append(x)
    print("build_threads: round %d of %d done" % (r + 1, rounds), file=sys.stderr)
load_after = os.getloadavg()
result = {"benchmark": "build_threads", "corpus": corpus, "binary": binary, "rounds": rounds,
          "command": "isn-index build --quiet --input CORPUS --out DIR --threads N --memory SIZE " + " ".join(extra),
          "load_average_before": [round(x, 2) for x in load_before], "load_average_after": [round(x, 2) for x in load_after],
          "max_others_cores": max_others, "rounds_run_again": rerun,
          "same_bytes_as_in_memory_build": same, "configs": []}
for t, m in configs:
    rs = runs[(t, m)]
    med_wall = statistics.median(x["wall_s"] for x in rs)
    med_rss = statistics.median(x["peak_rss_mib"] for x in rs)
    max_rss = max(x["peak_rss_mib"] for x in rs)
    base = statistics.median(x["wall_s"] for x in runs[(threads[0], m)])
    result["configs"].append({
        "threads": t, "memory": m, "rounds": rs, "median_wall_s": med_wall,
        "median_cpu_s": statistics.median(x["cpu_s"] for x in rs), "median_peak_rss_mib": med_rss,
        "median_others_cores": statistics.median(x["others_cores"] for x in rs),
        "max_peak_rss_mib": max_rss, "rss_bound_mib": size_bytes(m) / 2**20 + 64,
        "rss_within_bound": max_rss <= size_bytes(m) / 2**20 + 64,
        "speedup_over_%d_threads" % threads[0]: round(base / med_wall, 3)})
print(json.dumps(result, indent=1))
PY
