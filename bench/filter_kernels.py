#!/usr/bin/env python3
"""Summarises Nsight Compute's raw CSV of one bench_gpu --filter --interleave 1 process (bench/gpu_filter_device.sh
kernels): each launch belongs to the side (filtered or plain) of the last report-pass kernel launched before it or
itself (the filtered queries' report kernels are the _bitmap ones; a bitmap's build is the filtered side's), and the
side's kernels are summarised by name. The backends' warm-up launches at open count for the side before them.
Then the bound pass's launches of the two sides are paired in order (the n-th batch of each runs the same queries)
for the filtered kernel's instructions and time over the plain one's."""
import csv
import json
import statistics
import sys


def launches(path):
    lines = [line for line in open(path) if line.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        sys.exit(f"{path}: no launches (did ncu profile anything?)")
    header = rows[0]
    for row in rows[2:]:  # the second row holds the units
        d = dict(zip(header, row))
        yield (d["Kernel Name"].split("(")[0].split("<")[0].replace("first_stage::", "").replace("void ", ""),
               float(d["gpu__time_duration.sum"].replace(",", "")), int(d["sm__inst_executed.sum"].replace(",", "")))


def main():
    side, by_kernel, bound = "plain", {}, {"filtered": [], "plain": []}
    for name, ns, instructions in launches(sys.argv[1]):
        if "report_kernel" in name:
            side = "filtered" if name.endswith("_bitmap") or name.endswith("_ranked") else "plain"
        # a filter bitmap's build (its bits, range bits and ranks) comes before its batch's report kernel
        built = name.startswith("pass_") or name.startswith("cub::")
        by_kernel.setdefault(("filtered" if built else side, name), []).append((ns, instructions))
        if name.startswith("bound_report_kernel"):
            bound[side].append((ns, instructions))
    for (s, name), runs in sorted(by_kernel.items()):
        print(json.dumps({"bench": "gpu_filter_kernel", "side": s, "kernel": name, "launches": len(runs),
                          "median_us": round(statistics.median(r[0] for r in runs) / 1e3, 2),
                          "median_instructions": int(statistics.median(r[1] for r in runs))}))
    pairs = list(zip(bound["filtered"], bound["plain"]))
    if pairs:
        print(json.dumps({"bench": "gpu_filter_bound_pass", "batches": len(pairs),
                          "instructions_filtered_over_plain": [round(f[1] / p[1], 4) for f, p in pairs],
                          "time_filtered_over_plain": [round(f[0] / p[0], 4) for f, p in pairs]}))


if __name__ == "__main__":
    main()
