#!/usr/bin/env bash
# Stored fields on the Debian sample (make sample-index): the size --store adds and what fetching
# costs per query, in process and through isnd. Queries: the title of every 50th package. Prints the
# JSON of bench_stored (medians over BENCH_REPEATS passes, default 7).
#   bash bench/stored_fields.sh [BUILD_DIR] [FIELDS]      (FIELDS default title)
set -euo pipefail
BUILD=${1:-${BUILD:-build}}
FIELDS=${2:-title}
REPEATS=${BENCH_REPEATS:-7}
sample=$BUILD/sample/packages.jsonl
for f in "$BUILD/bin/isnd" "$BUILD/bin/isn-index" "$BUILD/bench/bench_stored" "$sample"; do
  [ -e "$f" ] || { echo "stored_fields: $f missing (make programs sample-index $BUILD/bench/bench_stored)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/isn_stored_bench.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

"$BUILD/bin/isn-index" build --quiet --input "$sample" --out "$work/plain" >/dev/null
"$BUILD/bin/isn-index" build --quiet --input "$sample" --out "$work/stored" --store "$FIELDS" >/dev/null
python3 - "$sample" >"$work/queries.tsv" <<'PY'
import json, sys
for n, line in enumerate(open(sys.argv[1], encoding="utf-8")):
    if n % 50 == 0:
        title = " ".join(json.loads(line)["title"].split())
        if title:
            print(f"{n}\t{title}")
PY

"$BUILD/bin/isnd" --index "$work/stored" --listen 127.0.0.1:0 --stats-listen "" --workers 1 2>"$work/isnd.log" &
pid=$!
for _ in $(seq 1 400); do grep -q "ready:" "$work/isnd.log" && break; sleep 0.05; done
grep -q "ready:" "$work/isnd.log" || { cat "$work/isnd.log" >&2; exit 1; }
port=$(sed -n 's/.*gRPC listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/isnd.log")

"$BUILD/bench/bench_stored" "$work/stored" "$work/queries.tsv" --fields "$FIELDS" --k 10 --repeats "$REPEATS" \
  --plain "$work/plain" --server "127.0.0.1:$port"
