#!/usr/bin/env bash
# Issue 39's "same bytes" on a real corpus: for each configuration (input, id, bp and global order, --no-positions,
# --store, --partitions 3), the in-memory single-threaded build of REFERENCE_BINARY (say, an older build's
# isn-index) against BINARY's bounded builds on 1, 2 and 16 threads with budgets small enough for many runs
# (MEMORY_1, MEMORY_2, MEMORY_16: 32MiB, 48MiB, 256MiB). One line per build: the runs merged and whether
# every index file is byte-identical to the reference's; exits 1 when one differs.
#   bash bench/build_same_bytes.sh CORPUS.jsonl REFERENCE_BINARY BINARY
set -euo pipefail
[ $# -eq 3 ] || { sed -n 2,7p "$0" >&2; exit 2; }
corpus=$1 ref=$2 new=$3
out=$(mktemp -d /tmp/isn_same_bytes.XXXXXX)
trap 'rm -rf "$out"' EXIT
export SOURCE_DATE_EPOCH=1
declare -A memory=([1]=${MEMORY_1:-32MiB} [2]=${MEMORY_2:-48MiB} [16]=${MEMORY_16:-256MiB})
status=0
while IFS='|' read -r name opts; do
  # shellcheck disable=SC2086  # opts holds several flags
  "$ref" build --quiet --input "$corpus" --out "$out/ref" $opts >/dev/null
  for t in 1 2 16; do
    # shellcheck disable=SC2086
    summary=$("$new" build --quiet --input "$corpus" --out "$out/new" $opts --threads "$t" --memory "${memory[$t]}")
    runs=$(echo "$summary" | grep -o '"runs":[0-9]*' | cut -d: -f2)
    verdict=same
    while IFS= read -r file; do
      cmp -s "$out/ref/$file" "$out/new/$file" || verdict=DIFFERENT
    done < <(cd "$out/ref" && find . -name index.isn)
    [ "$verdict" = same ] || status=1
    echo "$name: --threads $t --memory ${memory[$t]}: $runs runs, $verdict bytes"
    rm -rf "$out/new"
  done
  rm -rf "$out/ref"
done <<'CONFIGS'
input order|
id order|--order id
bp order|--order bp
bp order, no positions|--order bp --no-positions
global order|--order global
global order, no positions, 3 partitions|--order global --no-positions --partitions 3
stored, no positions|--store title,body --no-positions
3 partitions, stored|--partitions 3 --store title
CONFIGS
exit $status
