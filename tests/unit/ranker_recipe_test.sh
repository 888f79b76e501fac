#!/usr/bin/env bash
# The re-ranker's training recipe (bench/l2_quality.sh) end to end at toy size: Cranfield's two folds
# (or, without ../shared/data, a synthetic collection of the same shape) with at most 5 trees over the
# best 20, early-stopped on 30% of the training queries;
# the trained rankers load and re-rank, and isn-eval --compare reports both paired tests. Then
# bench/ranker_logs.py: the Debian train log never holds a held-out package, and plain keeps words only.
# Quality is make ranker-quality's to measure; this only checks the recipe runs and reports.
set -euo pipefail
build=${BUILD:-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-ranker-recipe.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "ranker_recipe_test: $*" >&2; exit 1; }
py=$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
"$py" -c 'import xgboost' 2>/dev/null || fail "python3-xgboost is missing (tools/setup-deps.sh installs it)"

mkdir -p "$work/data/cran"
cran=${ISN_CRANFIELD_DIR:-$build/data/cran}
if [ -f "$cran/cranfield.jsonl" ]; then
  cp "$cran"/cranfield.jsonl "$cran"/cranfield.queries.tsv "$cran"/cranfield.qrels "$work/data/cran/"
else
  echo "ranker_recipe_test: no Cranfield in $cran: a synthetic collection instead"
  "$py" - "$work/data/cran" <<'PY'
import json, random, sys
out, rnd = sys.argv[1], random.Random(7)
words = ["w%d" % i for i in range(300)]
with open(out + "/cranfield.jsonl", "w") as d, open(out + "/cranfield.queries.tsv", "w") as q, \
        open(out + "/cranfield.qrels", "w") as r:
    for n in range(400):
        d.write(json.dumps({"id": str(n), "title": " ".join(rnd.sample(words, 4)),
                            "body": " ".join(rnd.choice(words) for _ in range(40))}) + "\n")
    for qid in range(1, 61):
        topic = rnd.sample(words, 3)
        q.write("%d\t%s\n" % (qid, " ".join(topic)))
        for n in rnd.sample(range(400), 3):
            r.write("%d 0 %d %d\n" % (qid, n, rnd.choice([1, 2, 3])))
PY
fi

BUILD=$build ISN_DATA="$work/data" WORK="$work/l2" OUTPUT="$work/quality.json" CORPORA=cranfield N1=20 TREES=5 VALID=0.3 \
  TRIALS=500 bash bench/l2_quality.sh >"$work/out.txt" 2>"$work/err.txt" ||
  { cat "$work/err.txt" >&2; fail "bench/l2_quality.sh failed"; }
for fold in 0 1; do
  [ -s "$work/l2/cranfield/cranfield-lambdamart-$fold.ranker" ] || fail "no ranker for fold $fold"
done
"$py" - "$work/quality.json" <<'PY' || fail "the report lacks what it must hold"
import json, math, sys
report = json.load(open(sys.argv[1]))["cranfield"]
compare = report["eval"]["compare"]
assert report["test_queries"] > 0, report
for measure in ("recip_rank_cut_10", "ndcg_cut_10"):
    c = compare[measure]
    assert c["queries"] == report["eval"]["queries"], c
    for key in ("baseline", "run", "difference", "p_t", "p_randomization"):
        assert isinstance(c[key], (int, float)) and math.isfinite(c[key]), (measure, key, c)
    assert 0 < c["p_randomization"] <= 1 and 0 <= c["p_t"] <= 1, c
PY

# The train log draws from packages the held-out qrels do not judge, with build_corpus.py's 20-word rule.
"$py" - "$work/deb.jsonl" "$work/held.qrels" <<'PY'
import json, sys
with open(sys.argv[1], "w") as d, open(sys.argv[2], "w") as q:
    for n in range(100):
        body = " ".join("word%d" % (i % 7) for i in range(25 if n % 3 else 5))
        d.write(json.dumps({"id": "pkg%d" % n, "title": "Tool number %d: \"fast\" -dev" % n, "body": body}) + "\n")
        if n % 4 == 1:
            q.write("%d 0 pkg%d 1\n" % (n, n))
PY
"$py" bench/ranker_logs.py debian-train "$work/deb.jsonl" "$work/held.qrels" "$work/train" --every 2 --offset 1 2>/dev/null
[ -s "$work/train.queries.tsv" ] || fail "the Debian train log is empty"
if awk '{print $3}' "$work/train.qrels" | grep -qxFf <(awk '{print $3}' "$work/held.qrels"); then
  fail "the Debian train log judges a held-out package"
fi
awk '{sub("pkg", "", $3); if ($3 % 2 != 1 || $3 % 3 == 0) bad = 1} END {exit bad}' "$work/train.qrels" ||
  fail "the train log takes a package off its stride, or one with under 20 words of description"
"$py" bench/ranker_logs.py plain "$work/train.queries.tsv" "$work/plain.tsv"
! cut -f2 "$work/plain.tsv" | grep -q '[^A-Za-z0-9 ]' || fail "plain left query syntax in: $(head -2 "$work/plain.tsv")"
echo "ranker_recipe_test: the recipe trained two Cranfield folds, re-ranked and reported both paired tests; the train log avoids held-out packages"
