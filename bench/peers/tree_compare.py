"""ISN against Lucene 10 on query trees (issue 40, must-shows 1 and 3): the same queries, analysed by ISN's
analyzer for both (bench/peers/lucene_export), Lucene's index holding the same tokens at the same positions.
Per query class: matching-document counts (ISN's exhaustive count against IndexSearcher.count), top-10
overlap, and single-thread speed in interleaved rounds (each engine's worker times every query itself;
ISN's time includes parsing and analysing the query text, Lucene's building its Query from the terms).
Prints JSON.

  python tree_compare.py --isn-worker BIN --isn-index DIR --java JAVA --classpath CP --lucene-index DIR \\
      --class NAME=ISN_LOG,LUCENE_LOG ... [--rounds 5] [--k 10]
ISN_LOG: id TAB query text [TAB filter] (isn_worker load-tree), or plain:FILE for a bag-of-words log.
"""
import argparse
import json
import statistics
import subprocess
import sys


class Worker:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     encoding="utf-8")
        self.ready = self.proc.stdout.readline().strip()
        if not self.ready.startswith("ready"):
            sys.exit("tree_compare: %s did not start (%r)" % (argv[0], self.ready))

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().rstrip("\n")
        if not answer or answer.startswith("error"):
            sys.exit("tree_compare: %s -> %r" % (line, answer))
        return answer

    def quit(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=60)


def overlap(a, b, depth):
    vals = []
    for x, y in zip(a, b):
        xs = [] if x == "-" else x.split("\x1f")[:depth]
        ys = [] if y == "-" else y.split("\x1f")[:depth]
        if xs or ys:
            vals.append(len(set(xs) & set(ys)) / max(len(xs), len(ys)))
    return sum(vals) / len(vals) if vals else 1.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--isn-worker", required=True)
    p.add_argument("--isn-index", required=True)
    p.add_argument("--java", required=True)
    p.add_argument("--classpath", required=True)
    p.add_argument("--lucene-index", required=True)
    p.add_argument("--class", dest="classes", action="append", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--k", type=int, default=10)
    a = p.parse_args()
    isn = Worker([a.isn_worker, a.isn_index, "auto"])
    lucene = Worker([a.java, "-Xms2g", "-Xmx2g", "-XX:+UseParallelGC", "-XX:ActiveProcessorCount=1",
                     "--enable-native-access=ALL-UNNAMED", "-cp", a.classpath, "LuceneTreeWorker", "serve",
                     a.lucene_index])
    classes = []
    for spec in a.classes:
        name, logs = spec.split("=", 1)
        isn_log, lucene_log = logs.split(",")
        plain = isn_log.startswith("plain:")
        isn.ask("%s %s %s" % ("load" if plain else "load-tree", name, isn_log[6:] if plain else isn_log))
        lucene.ask("load %s %s" % (name, lucene_log))
        classes.append(name)
    result = {"benchmark": "tree_compare", "k": a.k, "rounds": a.rounds, "lucene": lucene.ready, "classes": {}}
    for name in classes:
        isn_counts = [int(x) for x in isn.ask("count " + name).split()[1:]]
        lucene_counts = [int(x) for x in lucene.ask("count " + name).split()[1:]]
        differ = [i for i, (x, y) in enumerate(zip(isn_counts, lucene_counts)) if x != y]
        isn_top = isn.ask("top %s 10" % name).split("\t")[1:]
        lucene_top = lucene.ask("top %s 10" % name).split("\t")[1:]
        result["classes"][name] = {
            "queries": len(isn_counts),
            "count_mismatches": len(differ),
            "first_count_mismatches": [(i, isn_counts[i], lucene_counts[i]) for i in differ[:5]],
            "matching_documents_total": sum(isn_counts),
            "top10_overlap_with_lucene": round(overlap(isn_top, lucene_top, 10), 4),
        }
    # speed: a warm-up round, then interleaved rounds (the order alternates)
    for name in classes:
        isn.ask("run %s %d" % (name, a.k))
        lucene.ask("run %s %d" % (name, a.k))
    for name in classes:
        per_round = {"isn": [], "lucene": []}
        for r in range(a.rounds):
            order = [("isn", isn), ("lucene", lucene)] if r % 2 == 0 else [("lucene", lucene), ("isn", isn)]
            for engine, w in order:
                ns = [int(x) for x in w.ask("run %s %d" % (name, a.k)).split()[1:]]
                per_round[engine].append(len(ns) / (sum(ns) / 1e9))
        c = result["classes"][name]
        c["isn_qps_median"] = round(statistics.median(per_round["isn"]), 1)
        c["lucene_qps_median"] = round(statistics.median(per_round["lucene"]), 1)
        c["isn_over_lucene_per_round"] = [round(x / y, 3) for x, y in zip(per_round["isn"], per_round["lucene"])]
        c["isn_over_lucene_median"] = round(statistics.median(c["isn_over_lucene_per_round"]), 3)
    isn.quit()
    lucene.quit()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
