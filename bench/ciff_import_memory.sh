#!/usr/bin/env bash
# Peak RSS of isn-index import-ciff on a large CIFF file: a synthetic partition (isn-index synth) large
# enough that its CIFF export is about CIFF_TARGET_GB (default 1) GB, exported, then imported under
# /usr/bin/time -v. The import streams (index/ciff_import.c), so its peak RSS grows with documents and
# terms, not with the file. Prints JSON (also $BUILD/bench/ciff_import_memory.json). Needs about 3 times
# the CIFF's size of disk under $BUILD/bench/ciff-large (removed at the end unless CIFF_KEEP=1).
#   CIFF_TARGET_GB=1 bash bench/ciff_import_memory.sh
set -euo pipefail
BUILD=${BUILD:-build}
BIN=$BUILD/bin
OUT=$BUILD/bench/ciff-large
target_gb=${CIFF_TARGET_GB:-1}
mkdir -p "$OUT"
[ "${CIFF_KEEP:-0}" = 1 ] || trap 'rm -rf "$OUT"' EXIT
# about 6.6 CIFF bytes a posting (tags, lengths, a gap and a tf) and 40 postings a document
docs=$(python3 -c "print(int($target_gb * 1e9 / (6.6 * 40)))")
"$BIN/isn-index" synth --docs "$docs" --queries 0 --out "$OUT/synth" >"$OUT/synth.json"
/usr/bin/time -v "$BIN/isn-index" export-ciff "$OUT/synth" --out "$OUT/large.ciff" >"$OUT/export.json" 2>"$OUT/export.time"
/usr/bin/time -v "$BIN/isn-index" import-ciff "$OUT/large.ciff" --out "$OUT/imported" >"$OUT/import.json" 2>"$OUT/import.time"
"$BIN/isn-index" verify "$OUT/imported" >/dev/null
rss() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1"; }
json=$(printf '{"docs":%s,"ciff_bytes":%s,"index_bytes":%s,"import":%s,"import_peak_rss_kib":%s,"export_peak_rss_kib":%s,"synth":%s}' \
  "$docs" "$(stat -c %s "$OUT/large.ciff")" "$(stat -c %s "$OUT/imported/index.isn")" "$(cat "$OUT/import.json")" \
  "$(rss "$OUT/import.time")" "$(rss "$OUT/export.time")" "$(cat "$OUT/synth.json")")
echo "$json" | tee "$BUILD/bench/ciff_import_memory.json"
