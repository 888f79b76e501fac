#!/usr/bin/env bash
# Share of first-stage time spent decoding postings vs scoring, for one query log.
# Uses perf (cpu-clock sampling) when it works, else callgrind (instruction counts).
# usage: decode_share.sh BUILD INDEX_DIR QUERIES.tsv   -> one JSON object on stdout
set -euo pipefail
build=$1 index=$2 queries=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Decoding = the codec (bit unpacking, exceptions) and turning gaps into doc ids when a block is loaded.
decode_re='isn_codec|unpack|codec_|load_block|decode_docs|isn_block_decode'

if perf record -q -e cpu-clock -F 4999 -o "$tmp/perf.data" -- "$build/bench/bench_query" "$index" "$queries" profile 10 5 auto >/dev/null 2>&1 &&
   perf report -i "$tmp/perf.data" --stdio --no-children --sort symbol 2>/dev/null >"$tmp/report.txt"; then
  tool=perf
  grep -E '^ +[0-9.]+%' "$tmp/report.txt" | awk '{gsub("%","",$1); print $1 "\t" $3}' >"$tmp/rows.tsv"
else
  tool=callgrind
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$build/bench/bench_query" "$index" "$queries" profile 10 1 auto >/dev/null 2>&1
  callgrind_annotate --inclusive=no "$tmp/cg.out" 2>/dev/null | grep -E '^ *[0-9,]+ ' |
    awk '{n=$1; gsub(",","",n); print n "\t" $NF}' >"$tmp/rows.tsv"
fi
python3 - "$tmp/rows.tsv" "$tool" "$decode_re" <<'PY'
import json, re, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if "\t" in l]
decode = re.compile(sys.argv[3])
total = sum(float(w) for w, _ in rows)
dec = sum(float(w) for w, s in rows if decode.search(s))
# Everything else inside ranking/ is scoring and traversal (BM25, heap, pivot selection, cursor moves).
top = sorted(rows, key=lambda r: -float(r[0]))[:8]
print(json.dumps({"benchmark": "decode_share", "tool": sys.argv[2], "workload": "debian index, Cranfield queries, auto, top-10",
                  "decode_fraction": round(dec / total, 4) if total else None,
                  "other_fraction": round(1 - dec / total, 4) if total else None,
                  "top_symbols": [{"symbol": s, "share": round(float(w) / total, 4)} for w, s in top]}))
PY
