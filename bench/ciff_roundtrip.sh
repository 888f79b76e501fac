#!/usr/bin/env bash
# CIFF round trip on the Debian corpus: the ISN index (default analyzer, no positions) exported with
# isn-index export-ciff and imported back with --analyzer english answers every query of the short log
# with the identical top k (same documents, ranks and scores, every line of the TREC run), for the
# default algorithm and the exhaustive OR. Prints JSON (also $BUILD/bench/ciff_roundtrip.json); exits 1
# on any difference.
#   bash bench/ciff_roundtrip.sh [K]          (K default 10)
set -euo pipefail
BUILD=${BUILD:-build}
BIN=$BUILD/bin
OUT=$BUILD/bench/ciff
DATA=${ISN_DATA:-$BUILD/data}
SHARED=${ISN_SHARED:-../shared}
K=${1:-10}
mkdir -p "$OUT" "$DATA"
if [ ! -f "$DATA/deb/debian.jsonl" ]; then
  echo "ciff_roundtrip: building the Debian corpus (installs Debian text packages; needs root or sudo)" >&2
  python3 "$SHARED/data/build_corpus.py" debian "$DATA/deb" >/dev/null
fi
log=$DATA/deb/short.queries.tsv
idx=$OUT/idx-deb
[ -f "$idx/index.isn" ] || "$BIN/isn-index" build --quiet --no-positions --input "$DATA/deb/debian.jsonl" --out "$idx" >/dev/null

rss() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1"; }
/usr/bin/time -v "$BIN/isn-index" export-ciff "$idx" --out "$OUT/debian.ciff" >"$OUT/export.json" 2>"$OUT/export.time"
/usr/bin/time -v "$BIN/isn-index" import-ciff "$OUT/debian.ciff" --analyzer english --out "$OUT/idx-deb-imported" \
  >"$OUT/import.json" 2>"$OUT/import.time"
"$BIN/isn-index" verify "$OUT/idx-deb-imported" >/dev/null

identical=true
for algo in auto or; do
  for which in idx-deb idx-deb-imported; do
    "$BIN/isn-query" --index "$OUT/$which" --algo "$algo" -k "$K" --queries "$log" --run-tag rt --out "$OUT/$which.$algo.run"
  done
  if ! cmp -s "$OUT/idx-deb.$algo.run" "$OUT/idx-deb-imported.$algo.run"; then
    identical=false
    diff "$OUT/idx-deb.$algo.run" "$OUT/idx-deb-imported.$algo.run" | head -5 >&2
  fi
done
queries=$(wc -l <"$log")
hits=$(wc -l <"$OUT/idx-deb.auto.run")
json=$(printf '{"corpus":"debian","queries":%s,"k":%s,"hits_compared_per_algorithm":%s,"algorithms":["auto","or"],"identical":%s,"ciff_bytes":%s,"index_bytes":%s,"export":%s,"import":%s,"export_peak_rss_kib":%s,"import_peak_rss_kib":%s}' \
  "$queries" "$K" "$hits" "$identical" "$(stat -c %s "$OUT/debian.ciff")" "$(stat -c %s "$idx/index.isn")" \
  "$(cat "$OUT/export.json")" "$(cat "$OUT/import.json")" "$(rss "$OUT/export.time")" "$(rss "$OUT/import.time")")
echo "$json" | tee "$BUILD/bench/ciff_roundtrip.json"
$identical
