"""ISN against Lucene 10 on query trees (issue 40, must-shows 1 and 3): the same queries, analysed by ISN's
analyzer for both (bench/peers/lucene_export), Lucene's index holding the same tokens at the same positions.
Per query class: matching-document counts (ISN's exhaustive count against IndexSearcher.count), top-10
overlap, and single-thread speed in interleaved rounds (each engine's worker times every query itself;
ISN's time includes parsing and analysing the query text, Lucene's building its Query from the terms).
Prints JSON.

  python tree_compare.py --isn-worker BIN --isn-index DIR --java JAVA --classpath CP --lucene-index DIR \\
      [--tantivy-python VENV_PYTHON --tantivy-index DIR] [--isn-baseline BIN] --class NAME=ISN_LOG,PEER_LOG ...
      [--rounds 5] [--k 10]
--isn-baseline: another build's isn_worker (say main's) joins the rounds as "isn_baseline", so that a
change's before and after are measured in the same interleaved run (isn_over_isn_baseline_*).
ISN_LOG: id TAB query text [TAB filter] (isn_worker load-tree), or plain:FILE for a bag-of-words log.
"""
import argparse
import json
import statistics


from driver import Worker, overlap_at as overlap


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--isn-worker", required=True)
    p.add_argument("--isn-index", required=True)
    p.add_argument("--java", required=True)
    p.add_argument("--classpath", required=True)
    p.add_argument("--lucene-index", required=True)
    p.add_argument("--class", dest="classes", action="append", required=True)
    p.add_argument("--tantivy-python", help="the peers' venv python: Tantivy joins (py_worker.py tantivy-tree)")
    p.add_argument("--tantivy-index")
    p.add_argument("--isn-baseline")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--k", type=int, default=10)
    a = p.parse_args()
    isn = Worker("isn", [a.isn_worker, a.isn_index, "auto"])
    lucene = Worker("lucene", [a.java, "-Xms2g", "-Xmx2g", "-XX:+UseParallelGC", "-XX:ActiveProcessorCount=1",
                     "--enable-native-access=ALL-UNNAMED", "-cp", a.classpath, "LuceneTreeWorker", "serve",
                     a.lucene_index])
    peers = {"lucene": lucene}
    if a.isn_baseline:
        peers["isn_baseline"] = Worker("isn_baseline", [a.isn_baseline, a.isn_index, "auto"])
    if a.tantivy_python:
        here = __file__.rsplit("/", 1)[0]
        peers["tantivy"] = Worker("tantivy", [a.tantivy_python, here + "/py_worker.py", "tantivy-tree", a.tantivy_index])
    classes = []
    for spec in a.classes:
        name, logs = spec.split("=", 1)
        isn_log, peer_log = logs.split(",")
        plain = isn_log.startswith("plain:")
        isn.ask("%s %s %s" % ("load" if plain else "load-tree", name, isn_log[6:] if plain else isn_log))
        for e, w in peers.items():
            if e == "isn_baseline":
                w.ask("%s %s %s" % ("load" if plain else "load-tree", name, isn_log[6:] if plain else isn_log))
            else:
                w.ask("load %s %s" % (name, peer_log))
        classes.append(name)
    result = {"benchmark": "tree_compare", "k": a.k, "rounds": a.rounds,
              "peers": {e: w.ready for e, w in peers.items()}, "classes": {}}
    for name in classes:
        isn_counts = [int(x) for x in isn.ask("count " + name).split()[1:]]
        isn_top = isn.ask("top %s 10" % name).split("\t")[1:]
        c = result["classes"][name] = {"queries": len(isn_counts), "matching_documents_total": sum(isn_counts)}
        for e, w in peers.items():
            counts = [int(x) for x in w.ask("count " + name).split()[1:]]
            differ = [i for i, (x, y) in enumerate(zip(isn_counts, counts)) if x != y]
            c[e + "_count_mismatches"] = len(differ)
            c[e + "_first_count_mismatches"] = [(i, isn_counts[i], counts[i]) for i in differ[:5]]
            c["top10_overlap_with_" + e] = round(overlap(isn_top, w.ask("top %s 10" % name).split("\t")[1:], 10), 4)
    # speed: a warm-up round, then interleaved rounds (the order rotates)
    engines = [("isn", isn)] + list(peers.items())
    for name in classes:
        for _, w in engines:
            w.ask("run %s %d" % (name, a.k))
    for name in classes:
        per_round = {e: [] for e, _ in engines}
        for r in range(a.rounds):
            for engine, w in engines[r % len(engines):] + engines[:r % len(engines)]:
                ns = [int(x) for x in w.ask("run %s %d" % (name, a.k)).split()[1:]]
                per_round[engine].append(len(ns) / (sum(ns) / 1e9))
        c = result["classes"][name]
        c["isn_qps_median"] = round(statistics.median(per_round["isn"]), 1)
        for e in peers:
            c[e + "_qps_median"] = round(statistics.median(per_round[e]), 1)
            ratios = [round(x / y, 3) for x, y in zip(per_round["isn"], per_round[e])]
            c["isn_over_%s_per_round" % e] = ratios
            c["isn_over_%s_median" % e] = round(statistics.median(ratios), 3)
    for _, w in engines:
        w.quit()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
