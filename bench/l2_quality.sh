#!/usr/bin/env bash
# The re-ranker's training recipe and its held-out gains over BM25 (make ranker-quality).
#
# Debian known-item task (debpkg.jsonl, body only: the title IS the query): LambdaMART (XGBoost
# rank:ndcg, tools/train-ranker.py) learns from the Debian train log, the same task drawn from other
# packages than the judged ones (bench/ranker_logs.py debian-train), and re-ranks the first stage's
# best N1 for every query of the held-out log debpkg.queries.tsv. Cranfield (title, body): two folds
# of its queries by id, each re-ranked by the model trained on the other; the two halves make one run.
# Each re-ranked run is compared with BM25 alone on the same queries by isn-eval --compare (paired
# t-test and paired randomization test, per measure). Query logs are read as plain words
# (bench/ranker_logs.py plain): a synopsis is not query syntax.
#
# Writes the results to $OUTPUT (JSON) and prints them.
#   bench/l2_quality.sh            environment: BUILD (build), N1 (100), TREES (300), DEPTH (6), ETA (0.1),
#                                  VALID (share of training queries held out for early stopping, 0),
#                                  CORPORA ("debian cranfield"), WORK ($BUILD/bench/l2), ISN_DATA ($BUILD/data),
#                                  TRIALS (randomization test trials, 100000), OUTPUT ($BUILD/bench/l2_quality.json)
set -euo pipefail
BUILD=${BUILD:-build}
N1=${N1:-100}
TREES=${TREES:-300}
DEPTH=${DEPTH:-6}
ETA=${ETA:-0.1}
VALID=${VALID:-0}
TRIALS=${TRIALS:-100000}
CORPORA=${CORPORA:-debian cranfield}
DATA=${ISN_DATA:-$BUILD/data}
W=${WORK:-$BUILD/bench/l2}
OUTPUT=${OUTPUT:-$BUILD/bench/l2_quality.json}
PY=${ISN_PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}
mkdir -p "$W"

index() { # dir input fields
  [ -f "$1/idx/index.isn" ] || "$BUILD/bin/isn-index" build --quiet --input "$2" --fields "$3" --out "$1/idx" >&2
}

train() { # dir name train.tsv qrels
  "$BUILD/bin/isn-query" --index "$1/idx" --queries "$3" --qrels "$4" --n1 "$N1" --dump-features "$1/$2.letor"
  "$PY" tools/train-ranker.py --features "$1/$2.letor" --out-dir "$1" --name "$2" --trees "$TREES" \
      --depth "$DEPTH" --eta "$ETA" --valid-fraction "$VALID"
}

runs() { # dir ranker test.tsv tag-suffix: BM25 alone and re-ranked, both the best N1
  "$BUILD/bin/isn-query" --index "$1/idx" --queries "$3" -k "$N1" --run-tag bm25 --out "$1/bm25$4.run"
  "$BUILD/bin/isn-query" --index "$1/idx" --queries "$3" -k "$N1" --n1 "$N1" --ranker "$1/$2.ranker" \
      --run-tag lambdamart --out "$1/lambdamart$4.run"
}

report() { # name dir qrels train-queries test-queries
  local eval
  eval=$("$BUILD/bin/isn-eval" --json --trials "$TRIALS" --compare "$2/bm25.run" "$3" "$2/lambdamart.run")
  printf '"%s": {"n1": %s, "trees": %s, "depth": %s, "eta": %s, "train_queries": %s, "test_queries": %s, "eval": %s}' \
      "$1" "$N1" "$TREES" "$DEPTH" "$ETA" "$4" "$5" "$eval"
}

debian() {
  local d=$W/debian D=$DATA/deb
  mkdir -p "$d"
  index "$d" "$D/debpkg.jsonl" body
  "$PY" bench/ranker_logs.py debian-train "$D/debpkg.jsonl" "$D/debpkg.qrels" "$d/train-log"
  "$PY" bench/ranker_logs.py plain "$d/train-log.queries.tsv" "$d/train.tsv"
  "$PY" bench/ranker_logs.py plain "$D/debpkg.queries.tsv" "$d/test.tsv"
  train "$d" debian-lambdamart "$d/train.tsv" "$d/train-log.qrels"
  runs "$d" debian-lambdamart "$d/test.tsv" ""
  report debian "$d" "$D/debpkg.qrels" "$(wc -l < "$d/train.tsv")" "$(wc -l < "$d/test.tsv")"
}

cranfield() {
  local d=$W/cranfield C=$DATA/cran
  mkdir -p "$d"
  index "$d" "$C/cranfield.jsonl" title,body
  "$PY" bench/ranker_logs.py plain "$C/cranfield.queries.tsv" "$d/queries.tsv"
  "$PY" bench/ranker_logs.py folds "$d/queries.tsv" "$C/cranfield.qrels" 2 "$d/fold"
  : > "$d/bm25.run"
  : > "$d/lambdamart.run"
  for fold in 0 1; do
    train "$d" "cranfield-lambdamart-$fold" "$d/fold.$fold.train.tsv" "$C/cranfield.qrels"
    runs "$d" "cranfield-lambdamart-$fold" "$d/fold.$fold.test.tsv" ".$fold"
    cat "$d/bm25.$fold.run" >> "$d/bm25.run"
    cat "$d/lambdamart.$fold.run" >> "$d/lambdamart.run"
  done
  report cranfield "$d" "$C/cranfield.qrels" "$(( $(wc -l < "$d/fold.0.train.tsv") + $(wc -l < "$d/fold.1.train.tsv") ))" \
      "$(( $(wc -l < "$d/fold.0.test.tsv") + $(wc -l < "$d/fold.1.test.tsv") ))"
}

{
  echo "{"
  sep=""
  for corpus in $CORPORA; do
    case $corpus in
      debian|cranfield) printf '%s' "$sep"; "$corpus"; sep=$',\n' ;;
      *) echo "l2_quality.sh: unknown corpus '$corpus' (debian, cranfield)" >&2; exit 2 ;;
    esac
  done
  printf '\n}\n'
} > "$OUTPUT"
cat "$OUTPUT"
