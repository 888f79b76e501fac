#!/usr/bin/env python3
"""Query logs for the re-ranker's training recipe (bench/ranker_quality.sh).

    ranker_logs.py plain LOG.tsv OUT.tsv
        A log of typed text as bag-of-words queries: every ASCII byte that is neither a letter nor a
        digit becomes a space. The analyzer drops those bytes anyway (tokens are runs of letters,
        digits and marks), so the terms are unchanged, but no synopsis reads as query syntax
        ("file:lineno" as a field, "-dev" as an exclusion, a stray quote as a phrase).
    ranker_logs.py debian-train DEBPKG.jsonl HELDOUT.qrels OUT_PREFIX [--every N] [--offset K]
        The Debian train log: the known-item task that build_corpus.py writes (query = a package's
        one-line synopsis, relevant = that package), drawn from the packages of debpkg.jsonl that are
        not judged in HELDOUT.qrels: every N-th package from the K-th (default 10 and 5; the held-out
        log takes every 50th), with build_corpus.py's rule of at least 20 words of description.
        Writes OUT_PREFIX.queries.tsv and OUT_PREFIX.qrels.
    ranker_logs.py folds LOG.tsv QRELS FOLDS OUT_PREFIX
        Splits the judged queries of LOG into FOLDS folds by query id (id mod FOLDS): writes
        OUT_PREFIX.FOLD.test.tsv (the fold) and OUT_PREFIX.FOLD.train.tsv (the others), FOLD from 0.
"""
import json
import re
import sys

WORD = re.compile(r"[A-Za-z0-9]+")
SYNTAX_BYTES = re.compile(r"[\x21-\x2f\x3a-\x40\x5b-\x60\x7b-\x7e]")


def fail(message):
    sys.exit("ranker_logs.py: " + message)


def read_log(path):
    rows = []
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if not line:
            continue
        qid, tab, text = line.partition("\t")
        if not tab or not qid:
            fail("%s:%d: expected qid<TAB>text" % (path, number))
        rows.append((qid, text))
    return rows


def plain(log, out):
    with open(out, "w", encoding="utf-8") as f:
        for qid, text in read_log(log):
            f.write("%s\t%s\n" % (qid, " ".join(SYNTAX_BYTES.sub(" ", text).split())))


def judged_docs(qrels):
    docs = set()
    for number, line in enumerate(open(qrels), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4:
            fail("%s:%d: expected 'qid iter docid rel'" % (qrels, number))
        docs.add(parts[2])
    return docs


def debian_train(jsonl, heldout_qrels, prefix, every, offset):
    held = judged_docs(heldout_qrels)
    if not held:
        fail("%s judges no document" % heldout_qrels)
    qid = 0
    with open(prefix + ".queries.tsv", "w", encoding="utf-8") as q, open(prefix + ".qrels", "w") as r:
        for number, line in enumerate(open(jsonl, encoding="utf-8")):
            if number % every != offset:
                continue
            try:
                doc = json.loads(line)
            except ValueError as e:
                fail("%s:%d: %s" % (jsonl, number + 1, e))
            if doc["id"] in held or len(WORD.findall(doc["body"])) < 20 or not WORD.search(doc["title"]):
                continue
            qid += 1
            q.write("%d\t%s\n" % (qid, doc["title"]))
            r.write("%d 0 %s 1\n" % (qid, doc["id"]))
    if qid == 0:
        fail("no train query drawn from %s" % jsonl)
    print("ranker_logs.py: %d train queries, none of the %d held-out documents" % (qid, len(held)), file=sys.stderr)


def folds(log, qrels, count, prefix):
    judged = set()
    for line in open(qrels):
        parts = line.split()
        if len(parts) == 4 and int(parts[3]) > 0:
            judged.add(parts[0])
    rows = [(qid, text) for qid, text in read_log(log) if qid in judged]
    for fold in range(count):
        with open("%s.%d.test.tsv" % (prefix, fold), "w", encoding="utf-8") as test, \
                open("%s.%d.train.tsv" % (prefix, fold), "w", encoding="utf-8") as train:
            for qid, text in rows:
                (test if int(qid) % count == fold else train).write("%s\t%s\n" % (qid, text))


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "plain":
        plain(args[1], args[2])
    elif len(args) >= 4 and args[0] == "debian-train":
        opts = {"--every": 10, "--offset": 5}
        rest = args[4:]
        while rest:
            if rest[0] not in opts or len(rest) < 2:
                fail("unknown option %r\n%s" % (rest[0], __doc__))
            opts[rest[0]] = int(rest[1])
            rest = rest[2:]
        if opts["--every"] < 1 or not 0 <= opts["--offset"] < opts["--every"]:
            fail("--offset must be in [0, --every)")
        debian_train(args[1], args[2], args[3], opts["--every"], opts["--offset"])
    elif len(args) == 5 and args[0] == "folds":
        folds(args[1], args[2], int(args[3]), args[4])
    else:
        fail("bad arguments\n" + __doc__)


if __name__ == "__main__":
    main()
