#!/usr/bin/env bash
# CIFF against an independent implementation, PyPI's ciff-toolkit: a collection written by its CiffWriter
# imports with isn-index import-ciff, verifies, and isnd serves it with the top 10 of brute-force BM25
# for every query (pretokenized terms: case, punctuation and non-ASCII as written); ciff-toolkit's
# CiffReader reads ISN's export of that index back as the same collection. ciff-toolkit is installed into
# a venv under the build folder on first use; where that cannot be done (no PyPI), the test says so and
# skips.
set -euo pipefail
build=${BUILD:-build}
venv="$build/venv-ciff"
toolkit_version=0.2.2
if ! "$venv/bin/python" -c 'import ciff_toolkit' >/dev/null 2>&1; then
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "ciff-toolkit==$toolkit_version"; } >"$build/venv-ciff.log" 2>&1; then
    echo "ciff_toolkit_test: SKIPPED: cannot install ciff-toolkit $toolkit_version into $venv (PyPI unreachable? see $build/venv-ciff.log)"
    exit 0
  fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-ciff-toolkit.XXXXXX")
isnd_pid=
cleanup() { [ -n "$isnd_pid" ] && kill "$isnd_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
check() { "$venv/bin/python" tests/unit/ciff_toolkit_check.py "$@"; }

check write "$work"
"$build/bin/isn-index" import-ciff "$work/toolkit.ciff" --out "$work/index" >"$work/import.json"
"$build/bin/isn-index" verify "$work/index" >/dev/null
"$build/bin/isn-index" info "$work/index" | grep -q "pretokenized" ||
  { echo "ciff_toolkit_test: isn-index info does not say the index is pretokenized" >&2; exit 1; }

"$build/bin/isnd" --index "$work/index" --listen 127.0.0.1:0 --stats-listen "" 2>"$work/isnd.log" &
isnd_pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/.*gRPC listening on \([0-9.:]*\).*/\1/p' "$work/isnd.log" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "ciff_toolkit_test: isnd did not start:" >&2; cat "$work/isnd.log" >&2; exit 1; }
"$build/bin/isn-query" --server "$addr" --wait-ready 30 --queries "$work/queries.tsv" --out "$work/served.run" 2>"$work/query.log"
check check "$work" "$work/served.run"
# the same through the in-process path
"$build/bin/isn-query" --index "$work/index" --queries "$work/queries.tsv" --out "$work/local.run"
cmp -s <(cut -d' ' -f1,3,4,5 "$work/served.run") <(cut -d' ' -f1,3,4,5 "$work/local.run") ||
  { echo "ciff_toolkit_test: isnd and isn-query --index answer differently" >&2; exit 1; }

"$build/bin/isn-index" export-ciff "$work/index" --out "$work/isn.ciff" >/dev/null
check read "$work" "$work/isn.ciff"
echo "ciff_toolkit_test: ciff-toolkit $toolkit_version's CIFF imports and serves brute-force BM25; it reads ISN's export"
