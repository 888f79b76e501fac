#!/usr/bin/env python3
"""Which CPUs share a physical core, for benchmarks that pin isnd and its load generator apart.

Two hyperthreads of one core share its execution units: a generator on the sibling of one of isnd's CPUs takes
that core's time from the node, the more so the busier the generator gets (at the higher multiples of a curve),
which reads as the node's own decline. The kernel's topology (cpuN/topology/physical_package_id and core_id
under /sys/devices/system/cpu) says which CPUs are siblings.

  cpu_split.py split N [--cpus LIST]   "ISND_LIST BENCH_LIST": whole cores, the highest-numbered ones holding at
                                       least N CPUs for the generator, the rest for isnd (LIST: the CPUs to split,
                                       default those this process may run on)
  cpu_split.py shared ISND BENCH       the CPUs of ISND that share a core with one of BENCH, as "isnd/bench" pairs
                                       separated by spaces (nothing when none)
  cpu_split.py describe                "C CPUs on K cores (T threads a core at most)" for the CPUs one may run on
--sysfs DIR reads another topology tree (tests)."""
import argparse
import os
import sys


def parse_list(text):
    """A taskset/cpuset list ("0-3,8,10-11") as a sorted list of CPU numbers."""
    cpus = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            sys.exit("cpu_split: not a CPU list: %r" % text)
        if first < 0 or last < first:
            sys.exit("cpu_split: not a CPU list: %r" % text)
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def format_list(cpus):
    """Sorted CPU numbers as the shortest taskset list."""
    runs, cpus = [], sorted(cpus)
    for cpu in cpus:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in runs)


def core_of(sysfs, cpu):
    """(package, core) of a CPU; a CPU whose topology the kernel does not give is a core of its own."""
    base = os.path.join(sysfs, "cpu%d" % cpu, "topology")
    try:
        with open(os.path.join(base, "physical_package_id")) as f:
            package = int(f.read())
        with open(os.path.join(base, "core_id")) as f:
            core = int(f.read())
    except (OSError, ValueError):
        return ("cpu", cpu)
    return (package, core)


def cores(sysfs, cpus):
    """{(package, core): [cpus]} for the given CPUs."""
    by_core = {}
    for cpu in cpus:
        by_core.setdefault(core_of(sysfs, cpu), []).append(cpu)
    return by_core


def split(sysfs, cpus, bench_n):
    by_core = sorted(cores(sysfs, cpus).values(), key=min)
    bench = []
    while by_core and len(bench) < bench_n:
        bench += by_core.pop()
    isnd = [cpu for group in by_core for cpu in group]
    if not isnd or len(bench) < bench_n:
        sys.exit("cpu_split: %d CPUs on %d cores cannot give the generator %d CPUs of whole cores and isnd the rest"
                 % (len(cpus), len(cores(sysfs, cpus)), bench_n))
    return sorted(isnd), sorted(bench)


def shared(sysfs, isnd, bench):
    bench_cores = {}
    for cpu in bench:
        bench_cores.setdefault(core_of(sysfs, cpu), cpu)
    return ["%d/%d" % (cpu, bench_cores[core_of(sysfs, cpu)]) for cpu in isnd
            if core_of(sysfs, cpu) in bench_cores and cpu not in bench]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sysfs", default="/sys/devices/system/cpu")
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("split")
    p.add_argument("bench_cpus", type=int)
    p.add_argument("--cpus")
    p = sub.add_parser("shared")
    p.add_argument("isnd")
    p.add_argument("bench")
    sub.add_parser("describe")
    args = parser.parse_args()
    if args.what == "split":
        if args.bench_cpus < 1:
            sys.exit("cpu_split: the generator needs at least one CPU")
        cpus = parse_list(args.cpus) if args.cpus else sorted(os.sched_getaffinity(0))
        isnd, bench = split(args.sysfs, cpus, args.bench_cpus)
        print(format_list(isnd), format_list(bench))
    elif args.what == "shared":
        print(" ".join(shared(args.sysfs, parse_list(args.isnd), parse_list(args.bench))))
    else:
        cpus = sorted(os.sched_getaffinity(0))
        by_core = cores(args.sysfs, cpus)
        print("%d CPUs on %d cores (%d threads a core at most)"
              % (len(cpus), len(by_core), max(len(group) for group in by_core.values())))


if __name__ == "__main__":
    main()
