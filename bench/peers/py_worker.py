"""Tantivy and PISA workers for bench/peers/driver.py: each engine searches in its own process,
one query at a time, timed around the Python binding's call (perf_counter_ns), so a binding's
fixed cost is inside the time; the driver's "empty" command measures that cost alone.

  python py_worker.py tantivy|pisa INDEX_DIR [pisa-algorithm]
  python py_worker.py build-tantivy|build-pisa CORPUS.jsonl INDEX_DIR   (one thread; prints seconds)
  python py_worker.py tantivy-tree INDEX_DIR      (query trees, bench/peers/tree_compare.py)
  python py_worker.py build-tantivy-tree CORPUS.tsv INDEX_DIR   (lucene_export's corpus)
"""
import json
import os
import sys
import time

# Lucene's English stopwords (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET), as ISN's analyzer removes.
LUCENE_STOPWORDS = ["a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
                    "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there",
                    "these", "they", "this", "to", "was", "will", "with"]
EMPTY_QUERY = "zzqqxxjjvv"


def corpus(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            yield d["id"], " ".join(d.get(k) or "" for k in ("title", "body"))


# ------------------------------------------------------------------ Tantivy
def tantivy_analyzer():
    import tantivy
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(64))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.custom_stopword(LUCENE_STOPWORDS))
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def build_tantivy(corpus_path, out):
    import tantivy
    os.makedirs(out, exist_ok=True)
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("body", stored=False, tokenizer_name="isn_en", index_option="freq")
    index = tantivy.Index(sb.build(), path=out)
    index.register_tokenizer("isn_en", tantivy_analyzer())
    t0 = time.perf_counter()
    writer = index.writer(heap_size=1_000_000_000, num_threads=1)
    for doc_id, text in corpus(corpus_path):
        writer.add_document(tantivy.Document(id=doc_id, body=text))
    writer.commit()
    writer.wait_merging_threads()
    return time.perf_counter() - t0


class TantivyEngine:
    def __init__(self, path):
        import tantivy
        self.index = tantivy.Index.open(path)
        self.index.register_tokenizer("isn_en", tantivy_analyzer())
        self.analyzer = tantivy_analyzer()
        self.schema = self.index.schema
        self.should = tantivy.Occur.Should
        self.query = tantivy.Query
        self.searcher = self.index.searcher()
        self.version = tantivy_version()
        self.info = "segments=%d" % self.searcher.num_segments

    def search(self, text, k):
        # The same query as every engine gets: the analyzer's terms, each a SHOULD term clause (a repeated
        # term counts again, as in ISN and Lucene), not Tantivy's query parser, whose syntax refuses or
        # drops parts of log queries.
        terms = self.analyzer.analyze(text)
        q = self.query.boolean_query([(self.should, self.query.term_query(self.schema, "body", t)) for t in terms])
        return self.searcher.search(q, k, count=False).hits

    def external_ids(self, hits):
        return [self.searcher.doc(addr)["id"][0] for _, addr in hits]


# ------------------------------------------------------------------ Tantivy, query trees (issue 40)
# The corpus and queries as ISN's analyzer saw them (bench/peers/lucene_export): tokens split at spaces,
# "_" where ISN removed a stopword (a stop filter drops it and keeps its place).
TREE_GAP = " _" * 64  # between title and body in contents: no phrase spans them


def tree_analyzer():
    import tantivy
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
            .filter(tantivy.Filter.custom_stopword(["_"]))
            .build())


def build_tantivy_tree(corpus_tsv, out):
    import tantivy
    os.makedirs(out, exist_ok=True)
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    for field in ("contents", "title", "body"):
        sb.add_text_field(field, stored=False, tokenizer_name="isn_tokens", index_option="position")
    for field in ("source", "section", "priority"):
        sb.add_text_field(field, stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("words", indexed=True, fast=True)
    index = tantivy.Index(sb.build(), path=out)
    index.register_tokenizer("isn_tokens", tree_analyzer())
    t0 = time.perf_counter()
    writer = index.writer(heap_size=1_000_000_000, num_threads=1)
    with open(corpus_tsv, encoding="utf-8") as f:
        for line in f:
            doc_id, title, body, source, section, priority, words = line.rstrip("\n").split("\t")
            fields = {"id": doc_id, "contents": title + TREE_GAP + " " + body, "title": title, "body": body}
            for name, value in (("source", source), ("section", section), ("priority", priority)):
                if value:
                    fields[name] = value
            if int(words) >= 0:
                fields["words"] = int(words)
            writer.add_document(tantivy.Document(**fields))
    writer.commit()
    writer.wait_merging_threads()
    return time.perf_counter() - t0


class TantivyTreeEngine:
    """Query trees as Tantivy users build them: a BooleanQuery of TermQuery and PhraseQuery clauses, and
    filters as zero-score required (or excluded) clauses around it."""

    def __init__(self, path):
        import tantivy
        self.tantivy = tantivy
        self.index = tantivy.Index.open(path)
        self.index.register_tokenizer("isn_tokens", tree_analyzer())
        self.schema = self.index.schema
        self.searcher = self.index.searcher()
        self.version = tantivy_version()
        self.info = "segments=%d" % self.searcher.num_segments
        self.occur = {"should": tantivy.Occur.Should, "must": tantivy.Occur.Must, "must_not": tantivy.Occur.MustNot}

    def query(self, line):
        Q, schema = self.tantivy.Query, self.schema
        parts = line.split("\t")
        clauses = []
        for clause in parts[0].split(";") if parts[0] else []:
            occur, field, terms = clause.split("|", 2)
            words = [(int(t.split(":", 1)[0]), t.split(":", 1)[1]) for t in terms.split(",")]
            q = (Q.term_query(schema, field, words[0][1]) if len(words) == 1
                 else Q.phrase_query(schema, field, words))
            clauses.append((self.occur[occur], q))
        q = Q.boolean_query(clauses)
        flt = parts[1].strip() if len(parts) > 1 else ""
        if not flt:
            return q
        negate = False
        if ">=" in flt:
            name, value = flt.split(">=")
            fq = Q.range_query(schema, name, self.tantivy.FieldType.Integer, int(value), None)
        elif " in {" in flt:
            name, rest = flt.split(" in {")
            fq = Q.boolean_query([(self.tantivy.Occur.Should, Q.term_query(schema, name, v.strip()))
                                  for v in rest.rstrip("}").split(",")])
        elif "!=" in flt:
            name, value = flt.split("!=")
            fq, negate = Q.term_query(schema, name, value), True
        else:
            name, value = flt.split("=")
            fq = Q.term_query(schema, name, value)
        if negate:
            return Q.boolean_query([(self.tantivy.Occur.Must, q), (self.tantivy.Occur.MustNot, fq)])
        return Q.boolean_query([(self.tantivy.Occur.Must, q), (self.tantivy.Occur.Must, Q.const_score_query(fq, 0.0))])

    def search(self, line, k):
        return self.searcher.search(self.query(line), k, count=False).hits

    def count(self, line):
        return self.searcher.search(self.query(line), 1, count=True).count

    def external_ids(self, hits):
        return [self.searcher.doc(addr)["id"][0] for _, addr in hits]


def tantivy_version():
    from importlib.metadata import version
    return version("tantivy")


# ------------------------------------------------------------------ PISA (pyterrier-pisa)
def build_pisa(corpus_path, out):
    import pyterrier_pisa
    t0 = time.perf_counter()
    index = pyterrier_pisa.PisaIndex(out, stemmer="porter2", stops="lucene", threads=1, overwrite=True)
    index.index({"docno": i, "text": t} for i, t in corpus(corpus_path))
    # pyterrier-pisa compresses the lists (block_simdbp) and writes the block-max data when a
    # retriever is first made: part of building an index that serves.
    index.bm25(k1=1.2, b=0.75, threads=1)
    return time.perf_counter() - t0


class PisaEngine:
    def __init__(self, path, algorithm):
        import numpy as np
        import pyterrier_pisa
        from pyterrier_pisa import _pisathon
        self.np = np
        self._pisathon = _pisathon
        self.index = pyterrier_pisa.PisaIndex(path, stops="lucene", threads=1)
        # The retrieval context pyterrier-pisa builds (index mapped, BM25 1.2/0.75, Lucene stopwords).
        self.retriever = self.index.bm25(k1=1.2, b=0.75, num_results=1000, threads=1, query_algorithm=algorithm)
        self.ctxt = self.retriever._ctxt
        self.algorithm = algorithm
        from importlib.metadata import version
        self.version = version("pyterrier-pisa")
        self.info = "algorithm=%s encoding=%s" % (algorithm, self.index.index_encoding.value)
        self.buffers = {}

    def _buffers(self, k):
        if k not in self.buffers:
            np = self.np
            self.buffers[k] = (np.empty(k, dtype=np.int32), np.empty(k, dtype=object),
                               np.empty(k, dtype=np.int32), np.empty(k, dtype=np.float32))
        return self.buffers[k]

    def search(self, text, k):
        qidxs, docnos, ranks, scores = self._buffers(k)
        n = self._pisathon.retrieve(self.ctxt, self.algorithm, [(0, text)], k=k, threads=1, query_weighted=0,
                                    pretokenised=False, result_qidxs=qidxs, result_docnos=docnos,
                                    result_ranks=ranks, result_scores=scores)
        return docnos[:n]

    def external_ids(self, hits):
        return list(hits)


# ------------------------------------------------------------------ protocol
def serve(engine, name):
    logs = {}
    out = sys.stdout
    out.write("ready %s %s %s\n" % (name, engine.version, engine.info))
    out.flush()
    clock = time.perf_counter_ns
    for line in sys.stdin:
        w = line.rstrip("\n").split(" ", 2)
        if w[0] == "quit":
            break
        if w[0] == "load":
            texts = []
            with open(w[2], encoding="utf-8") as f:
                for l in f:
                    l = l.rstrip("\r\n")
                    tab = l.find("\t")
                    if tab >= 0 and tab + 1 < len(l):
                        texts.append(l[tab + 1:])
            logs[w[1]] = texts
            out.write("ok %d\n" % len(texts))
        elif w[0] == "run":
            texts, k = logs[w[1]], int(w[2])
            times = []
            search = engine.search
            for t in texts:
                t0 = clock()
                search(t, k)
                times.append(clock() - t0)
            out.write("ns " + " ".join(map(str, times)) + "\n")
        elif w[0] == "empty":
            times = []
            for _ in range(int(w[1])):
                t0 = clock()
                engine.search(EMPTY_QUERY, 10)
                times.append(clock() - t0)
            out.write("ns " + " ".join(map(str, times)) + "\n")
        elif w[0] == "count":
            out.write("count " + " ".join(str(engine.count(t)) for t in logs[w[1]]) + "\n")
        elif w[0] == "top":
            texts, k = logs[w[1]], int(w[2])
            parts = []
            for t in texts:
                ids = engine.external_ids(engine.search(t, k))
                parts.append("\x1f".join(ids) if ids else "-")
            out.write("top\t" + "\t".join(parts) + "\n")
        else:
            out.write("error unknown command %s\n" % w[0])
        out.flush()


def main():
    cmd = sys.argv[1]
    if cmd == "build-tantivy":
        print("%.3f" % build_tantivy(sys.argv[2], sys.argv[3]))
    elif cmd == "build-pisa":
        print("%.3f" % build_pisa(sys.argv[2], sys.argv[3]))
    elif cmd == "build-tantivy-tree":
        print("%.3f" % build_tantivy_tree(sys.argv[2], sys.argv[3]))
    elif cmd == "tantivy-tree":
        serve(TantivyTreeEngine(sys.argv[2]), "tantivy-tree")
    elif cmd == "tantivy":
        serve(TantivyEngine(sys.argv[2]), "tantivy")
    elif cmd == "pisa":
        serve(PisaEngine(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "block_max_wand"), "pisa")
    else:
        sys.exit("usage: py_worker.py tantivy|pisa|build-tantivy|build-pisa ...")


if __name__ == "__main__":
    main()
