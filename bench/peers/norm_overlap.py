"""How much of the top-10 difference between ISN and Lucene its one-byte length norms explain: ISN's
top 10 against Lucene's with ISN's exact document lengths, then with the lengths Lucene's norms decode
to (LuceneTreeWorker lengths; isn_worker ISN_WORKER_LENGTHS). Prints JSON.

  python norm_overlap.py ISN_WORKER ISN_INDEX JAVA CLASSPATH LUCENE_INDEX LENGTHS.tsv NAME=ISN_LOG,LUCENE_LOG ...
ISN_LOG as tree_compare.py takes it (plain:FILE for a bag-of-words log)."""
import json
import os
import sys

from driver import Worker, overlap_at as overlap


def main():
    isn_worker, isn_index, java, classpath, lucene_index, lengths = sys.argv[1:7]
    classes = [a.split("=", 1) for a in sys.argv[7:]]
    lucene = Worker("lucene", [java, "-Xmx2g", "--enable-native-access=ALL-UNNAMED", "-cp", classpath, "LuceneTreeWorker", "serve",
                     lucene_index])
    result = {}
    for name, logs in classes:
        lucene.ask("load %s %s" % (name, logs.split(",")[1]))
    for mode in ("exact_lengths", "lucene_lengths"):
        env = dict(os.environ)
        if mode == "lucene_lengths":
            env["ISN_WORKER_LENGTHS"] = lengths
        isn = Worker("isn", [isn_worker, isn_index, "auto"], env=env)
        for name, logs in classes:
            isn_log = logs.split(",")[0]
            plain = isn_log.startswith("plain:")
            isn.ask("%s %s %s" % ("load" if plain else "load-tree", name, isn_log[6:] if plain else isn_log))
            ours = isn.ask("top %s 10" % name).split("\t")[1:]
            theirs = lucene.ask("top %s 10" % name).split("\t")[1:]
            result.setdefault(name, {})["top10_overlap_" + mode] = round(overlap(ours, theirs, 10), 4)
        isn.quit()
    lucene.quit()
    print(json.dumps({"benchmark": "norm_overlap", "classes": result}, indent=1))


if __name__ == "__main__":
    main()
