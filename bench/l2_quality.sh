#!/usr/bin/env bash
# Second-stage quality: LambdaMART (XGBoost rank:ndcg, tools/train-ranker.py) trained on the odd-numbered
# queries re-ranks the first stage's best N1 on the even-numbered ones; MRR@10 and nDCG@10 against BM25
# alone on the same (even) queries, for the Debian known-item task (debpkg.jsonl, body only) and Cranfield.
# Writes build/bench/l2_quality.json.   Usage: bench/l2_quality.sh [N1 (default 100)] [TREES (default 300)]
set -euo pipefail
BUILD=${BUILD:-build}
N1=${1:-100}
TREES=${2:-300}
DATA=${ISN_DATA:-$BUILD/data} # corpora from ../shared/data/build_corpus.py (bench/run.sh builds them)
PY=${ISN_PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}
W=$BUILD/bench/l2
mkdir -p "$W"

corpus() { # name input fields queries qrels
  local name=$1 input=$2 fields=$3 queries=$4 qrels=$5 d=$W/$1
  mkdir -p "$d"
  [ -f "$d/idx/index.isn" ] || "$BUILD/bin/isn-index" build --quiet --input "$input" --fields "$fields" --out "$d/idx" >&2
  awk -F'\t' '$1 % 2 == 1' "$queries" > "$d/train.tsv"
  awk -F'\t' '$1 % 2 == 0' "$queries" > "$d/test.tsv"
  cut -f1 "$d/train.tsv" > "$d/train.qids"
  "$BUILD/bin/isn-query" --index "$d/idx" --queries "$d/train.tsv" --qrels "$qrels" --n1 "$N1" \
      --dump-features "$d/train.letor"
  "$PY" tools/train-ranker.py --features "$d/train.letor" --qids "$d/train.qids" --out-dir "$d" \
      --name "$name-lambdamart" --trees "$TREES"
  "$BUILD/bin/isn-query" --index "$d/idx" --queries "$d/test.tsv" -k "$N1" --run-tag bm25 --out "$d/bm25.run"
  "$BUILD/bin/isn-query" --index "$d/idx" --queries "$d/test.tsv" -k "$N1" --n1 "$N1" \
      --ranker "$d/$name-lambdamart.ranker" --run-tag l2 --out "$d/l2.run"
  local bm25 l2
  bm25=$("$BUILD/bin/isn-eval" --json "$qrels" "$d/bm25.run")
  l2=$("$BUILD/bin/isn-eval" --json "$qrels" "$d/l2.run")
  printf '"%s": {"n1": %s, "trees": %s, "train_queries": %s, "test_queries": %s, "bm25": %s, "lambdamart": %s}' \
      "$name" "$N1" "$TREES" "$(wc -l < "$d/train.tsv")" "$(wc -l < "$d/test.tsv")" "$bm25" "$l2"
}

{
  echo "{"
  corpus debian "$DATA"/deb/debpkg.jsonl body "$DATA"/deb/debpkg.queries.tsv "$DATA"/deb/debpkg.qrels
  echo ","
  corpus cranfield "$DATA"/cran/cranfield.jsonl title,body "$DATA"/cran/cranfield.queries.tsv "$DATA"/cran/cranfield.qrels
  echo "}"
} > "$BUILD/bench/l2_quality.json"
cat "$BUILD/bench/l2_quality.json"
