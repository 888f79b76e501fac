#!/usr/bin/env bash
# isn-query --queries writes TREC run lines of six whitespace-separated fields whatever the documents'
# ids hold: an id with a space, a tab or a '%' is percent-encoded, and isn-eval reads the run against
# qrels naming it so.
set -euo pipefail
build=${BUILD:-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-query-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "isn_query_run_test: $*" >&2; exit 1; }
printf '%s\n' '{"id":"Branding iron","title":"branding iron","body":"a hot iron for marking cattle"}' \
  '{"id":"50%\tdone","title":"half done","body":"an iron half done"}' \
  '{"id":"plain","title":"plain","body":"nothing here"}' >"$work/docs.jsonl"
"$build/bin/isn-index" build --quiet --input "$work/docs.jsonl" --out "$work/idx" >/dev/null
printf '1\tiron\n' >"$work/q.tsv"
"$build/bin/isn-query" --index "$work/idx" --queries "$work/q.tsv" -k 10 --out "$work/run"
awk 'NF != 6 { bad = 1; print "line " NR ": " NF " fields: " $0 } END { exit bad }' "$work/run" >&2 ||
  fail "a run line has other than six fields"
grep -q ' Branding%20iron ' "$work/run" || fail "the id with a space is not written Branding%20iron: $(cat "$work/run")"
grep -q ' 50%25%09done ' "$work/run" || fail "the id with '%' and a tab is not written 50%25%09done: $(cat "$work/run")"
printf '1 0 Branding%%20iron 1\n' >"$work/qrels"
"$build/bin/isn-eval" "$work/qrels" "$work/run" | grep -q 'recip_rank_cut_10[[:space:]]*all[[:space:]]*1.0000' ||
  fail "isn-eval does not find the percent-encoded id at rank 1: $("$build/bin/isn-eval" "$work/qrels" "$work/run")"
echo "isn_query_run_test: ids with whitespace and '%' percent-encoded; six fields a line; isn-eval reads them"
