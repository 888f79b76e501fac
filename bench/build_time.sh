#!/usr/bin/env bash
# Index build time of several isn-index binaries on one corpus, in interleaved rounds (the order
# rotates each round, so that no binary always runs first on a cooler or busier machine), one warm-up
# build each first. Each build is single-threaded: `isn-index build --quiet --no-positions` in input
# order, the Debian corpus's issue-14 configuration. Prints one JSON object: per binary, each round's
# CPU seconds (user + sys of the build process) and wall seconds, their medians, the ratio of the
# first binary's median to each one's and within each round (> 1: faster than the first), the load average before and
# after, and whether every binary wrote the same index bytes (SOURCE_DATE_EPOCH is fixed).
#   bash bench/build_time.sh CORPUS.jsonl ISN_INDEX_BINARY... (ROUNDS=7; EXTRA="--store title" adds options)
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0" >&2; exit 2; }
corpus=$1
shift
for b in "$@"; do [ -x "$b" ] || { echo "build_time: $b is not an executable" >&2; exit 2; }; done
[ -f "$corpus" ] || { echo "build_time: no corpus $corpus (python3 ../shared/data/build_corpus.py debian DIR)" >&2; exit 2; }
out=$(mktemp -d /tmp/isn_build_time.XXXXXX)
trap 'rm -rf "$out"' EXIT
ROUNDS=${ROUNDS:-7} EXTRA=${EXTRA:-} exec python3 - "$corpus" "$out" "$@" <<'EOF'
import hashlib, json, os, shlex, statistics, subprocess, sys, time

corpus, out, binaries = sys.argv[1], sys.argv[2], sys.argv[3:]
rounds = int(os.environ["ROUNDS"])
extra = shlex.split(os.environ["EXTRA"])
env = dict(os.environ, SOURCE_DATE_EPOCH="1")

def build(i):
    """One build by binary i: (cpu seconds, wall seconds, sha256 of the index file)."""
    d = os.path.join(out, "idx-%d" % i)
    subprocess.run(["rm", "-rf", d], check=True)
    cmd = [binaries[i], "build", "--quiet", "--no-positions", "--input", corpus, "--out", d] + extra
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - start
    if status != 0:
        sys.exit("build_time: %s exited with status %d" % (" ".join(cmd), status))
    with open(os.path.join(d, "index.isn"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return usage.ru_utime + usage.ru_stime, wall, digest

load_before = os.getloadavg()
digests = [build(i)[2] for i in range(len(binaries))]  # warm-up: page cache, binaries
cpu = [[] for _ in binaries]
wall = [[] for _ in binaries]
for r in range(rounds):
    for k in range(len(binaries)):
        i = (r + k) % len(binaries)
        c, w, _ = build(i)
        cpu[i].append(round(c, 3))
        wall[i].append(round(w, 3))
    print("build_time: round %d of %d done" % (r + 1, rounds), file=sys.stderr)
load_after = os.getloadavg()
base_cpu, base_wall = statistics.median(cpu[0]), statistics.median(wall[0])
result = {
    "benchmark": "build_time",
    "corpus": corpus,
    "command": "isn-index build --quiet --no-positions --input CORPUS --out DIR " + " ".join(extra),
    "rounds": rounds,
    "load_average_before": [round(x, 2) for x in load_before],
    "load_average_after": [round(x, 2) for x in load_after],
    "same_index_bytes": len(set(digests)) == 1,
    "builds": [],
}
for i, b in enumerate(binaries):
    mc, mw = statistics.median(cpu[i]), statistics.median(wall[i])
    result["builds"].append({
        "binary": b, "cpu_seconds": cpu[i], "wall_seconds": wall[i],
        "median_cpu_seconds": mc, "median_wall_seconds": mw,
        "cpu_speedup_vs_first": round(base_cpu / mc, 3), "wall_speedup_vs_first": round(base_wall / mw, 3),
        "cpu_speedup_vs_first_per_round": [round(a / b, 3) for a, b in zip(cpu[0], cpu[i])],
    })
print(json.dumps(result, indent=1))
EOF
