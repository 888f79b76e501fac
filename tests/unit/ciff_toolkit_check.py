"""The ciff-toolkit side of tests/unit/ciff_toolkit_test.sh (runs in the venv that has ciff-toolkit).

  write DIR        a synthetic collection as DIR/toolkit.ciff, written with ciff-toolkit's CiffWriter and
                   protobuf classes, DIR/queries.tsv (pretokenized) and DIR/collection.json
  check DIR RUN    the TREC run of isn-query (top 10 per query) against brute-force BM25 over the collection
  read DIR FILE    ciff-toolkit's CiffReader reads FILE (ISN's export) back into the same collection
Exits non-zero, saying why, on any difference.
"""
import json
import math
import random
import sys
from pathlib import Path

from ciff_toolkit.ciff_pb2 import DocRecord, Header, Posting, PostingsList
from ciff_toolkit.read import CiffReader
from ciff_toolkit.write import CiffWriter

NUM_DOCS = 900
VOCAB = 120
K1, B = 1.2, 0.75
TOLERANCE = 1e-3


def collection():
    rng = random.Random(17)
    # terms as an external analyzer might leave them: case kept, punctuation, non-ASCII
    shapes = ["w%03d", "W%03d", "c++%03d", "straße%03d", "über-%03d"]
    vocab = sorted({shapes[t % len(shapes)] % t for t in range(VOCAB)}, key=lambda s: s.encode())
    docs = []
    for d in range(NUM_DOCS):
        tf = {}
        for _ in range(1 + rng.randrange(40)):
            t = vocab[int(len(vocab) * rng.random() ** 2)]
            tf[t] = tf.get(t, 0) + 1
        # a document's BM25 length as its source counted it (here: tokens plus a few removed ones)
        docs.append({"id": "doc-%05d" % d, "tf": tf, "length": sum(tf.values()) + rng.randrange(3)})
    return vocab, docs


def write(out):
    vocab, docs = collection()
    postings = {t: [] for t in vocab}
    for d, doc in enumerate(docs):
        for t, f in doc["tf"].items():
            postings[t].append((d, f))
    vocab = [t for t in vocab if postings[t]]
    header = Header(version=1, num_postings_lists=len(vocab), num_docs=len(docs), total_postings_lists=len(vocab),
                    total_docs=len(docs), total_terms_in_collection=sum(d["length"] for d in docs),
                    average_doclength=sum(d["length"] for d in docs) / len(docs),
                    description="ciff-toolkit test collection, pretokenized terms")
    lists = []
    for t in vocab:
        pl = PostingsList(term=t, df=len(postings[t]), cf=sum(f for _, f in postings[t]))
        prev = 0
        for d, f in postings[t]:
            pl.postings.append(Posting(docid=d - prev, tf=f))  # d-gaps, the first from 0
            prev = d
        lists.append(pl)
    with CiffWriter(str(out / "toolkit.ciff")) as writer:
        writer.write_header(header)
        writer.write_postings_lists(lists)
        writer.write_documents(DocRecord(docid=d, collection_docid=doc["id"], doclength=doc["length"])
                               for d, doc in enumerate(docs))
    rng = random.Random(5)
    with open(out / "queries.tsv", "w", encoding="utf-8") as f:
        for q in range(200):
            f.write("q%d\t%s\n" % (q, " ".join(rng.choice(vocab) for _ in range(1 + rng.randrange(4)))))
    (out / "collection.json").write_text(json.dumps(docs))


def brute_force(docs, terms):
    n = len(docs)
    avg = sum(d["length"] for d in docs) / n
    scores = {}
    for t in terms:  # a repeated query term counts once per occurrence
        df = sum(1 for d in docs if t in d["tf"])
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            f = d["tf"].get(t)
            if f:
                norm = K1 * (1 - B + B * d["length"] / avg)
                scores[i] = scores.get(i, 0.0) + idf * f * (K1 + 1) / (f + norm)
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))


def check(out, run_path):
    docs = json.loads((out / "collection.json").read_text())
    index_of = {d["id"]: i for i, d in enumerate(docs)}
    got = {}
    for line in open(run_path, encoding="utf-8"):
        qid, _, doc, rank, score, _ = line.split()
        got.setdefault(qid, []).append((index_of[doc], float(score)))
    checked = 0
    for line in open(out / "queries.tsv", encoding="utf-8"):
        qid, text = line.rstrip("\n").split("\t")
        want = brute_force(docs, text.split(" "))
        hits = got.get(qid, [])
        if len(hits) != min(10, len(want)):
            sys.exit("query %s (%s): %d hits, brute force has %d" % (qid, text, len(hits), min(10, len(want))))
        scores = dict(want)
        cutoff = want[len(hits) - 1][1] if hits else 0.0
        for rank, (doc, score) in enumerate(hits):
            if doc not in scores or abs(scores[doc] - score) > TOLERANCE * max(1.0, score):
                sys.exit("query %s (%s) rank %d: doc %s score %.6f, brute force %s" % (
                    qid, text, rank + 1, docs[doc]["id"], score, scores.get(doc)))
            if scores[doc] < cutoff - TOLERANCE * max(1.0, cutoff):
                sys.exit("query %s (%s): doc %s (%.6f) is below the brute-force top 10" % (qid, text, docs[doc]["id"], score))
            checked += 1
    print("ciff_toolkit_check: %d hits of %d queries equal brute-force BM25" % (checked, len(got)))


def read(out, ciff_path):
    docs = json.loads((out / "collection.json").read_text())
    with CiffReader(ciff_path) as reader:
        header = reader.read_header()
        if header.num_docs != len(docs):
            sys.exit("ISN's export: header says %d docs, the collection has %d" % (header.num_docs, len(docs)))
        expected_terms = sorted({t for d in docs for t in d["tf"]}, key=lambda s: s.encode())
        seen = []
        for pl in reader.read_postings_lists():
            doc = 0
            for i, p in enumerate(pl.postings):
                doc = p.docid if i == 0 else doc + p.docid
                if docs[doc]["tf"].get(pl.term) != p.tf:
                    sys.exit("ISN's export: term %s doc %d tf %d, the collection has %s" % (
                        pl.term, doc, p.tf, docs[doc]["tf"].get(pl.term)))
            if pl.df != len(pl.postings) or pl.cf != sum(p.tf for p in pl.postings):
                sys.exit("ISN's export: term %s df %d cf %d for %d postings" % (pl.term, pl.df, pl.cf, len(pl.postings)))
            if pl.df != sum(1 for d in docs if pl.term in d["tf"]):
                sys.exit("ISN's export: term %s has df %d" % (pl.term, pl.df))
            seen.append(pl.term)
        if seen != expected_terms:
            sys.exit("ISN's export: %d terms, the collection has %d (or in another order)" % (len(seen), len(expected_terms)))
        for i, rec in enumerate(reader.read_documents()):
            if rec.docid != i or rec.collection_docid != docs[i]["id"] or rec.doclength != docs[i]["length"]:
                sys.exit("ISN's export: doc record %d is (%d, %s, %d), the collection has (%d, %s, %d)" % (
                    i, rec.docid, rec.collection_docid, rec.doclength, i, docs[i]["id"], docs[i]["length"]))
    print("ciff_toolkit_check: ciff-toolkit reads ISN's export: %d terms, %d documents, as written" % (len(seen), len(docs)))


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "write":
        write(folder)
    elif command == "check":
        check(folder, sys.argv[3])
    elif command == "read":
        read(folder, sys.argv[3])
    else:
        sys.exit("usage: ciff_toolkit_check.py write|check|read DIR [FILE]")
