#!/usr/bin/env bash
# tools/isn-cluster.sh: a 2 x 2 cluster on loopback whose cluster.json names every isnd's stats
# endpoint (each answers /readyz "ready"), isn-agg's start line says its readiness as /readyz does,
# and isn-query through it shows each hit's partition; stop ends every process it started.
set -euo pipefail
build=${BUILD:-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-cluster-test.XXXXXX")
trap 'tools/isn-cluster.sh stop --run-dir "$work/run" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$build/bin/isn-index" build --quiet --input examples/docs.tsv --format tsv --out "$work/parts" --partitions 2 >/dev/null
tools/isn-cluster.sh start --parts "$work/parts" --replicas 2 --run-dir "$work/run" --bin "$build/bin" >/dev/null
python3 - "$work/run/cluster.json" <<'PY'
import json, sys, urllib.request
c = json.load(open(sys.argv[1]))
assert len(c["isnd"]) == 4, c
for r in c["isnd"]:
    body = urllib.request.urlopen(f"http://{r['stats']}/readyz", timeout=10).read().decode()
    assert body.startswith("ready"), (r, body)
body = urllib.request.urlopen(f"http://{c['agg_stats']}/readyz", timeout=10).read().decode()
assert body.startswith("ready"), body
PY
grep -q "started: 2 partitions.*; ready (coverage 2/2" "$work/run/agg.log" ||
  { echo "cluster_script_test: isn-agg's start line does not say ready:" >&2; cat "$work/run/agg.log" >&2; exit 1; }
out=$("$build/bin/isn-query" --server "$(tools/isn-cluster.sh addr --run-dir "$work/run")" -k 8 "search engine index")
grep -q "of partition [01])" <<<"$out" || { echo "cluster_script_test: no partition in isn-query's hits:" >&2; echo "$out" >&2; exit 1; }
pids=$(python3 -c "import json,sys; print(' '.join(str(r['pid']) for r in json.load(open(sys.argv[1]))['isnd']))" "$work/run/cluster.json")
tools/isn-cluster.sh stop --run-dir "$work/run"
for pid in $pids; do
  if kill -0 "$pid" 2>/dev/null; then echo "cluster_script_test: isnd $pid still runs after stop" >&2; exit 1; fi
done
echo "cluster_script_test: cluster.json names 4 isnd stats endpoints, all ready; isn-agg started ready; hits show their partition"
