#!/usr/bin/env python3
"""How long the CPU quota of a process's cgroups has stopped it so far: CFS bandwidth throttling, summed over
its cgroup and each ancestor up to the hierarchy's mount (an ancestor's quota, a Kubernetes pod's or a
container's, stops every cgroup below it). A throttled cgroup runs none of its threads until the next period,
on every CPU at once, which the guest kernel counts as the threads' wait to run, not as steal. Prints the total
in nanoseconds, or nothing where no cgroup keeps the count (no cpu controller, or no cpu.stat).

    python3 bench/cgroup_throttle.py PID [--proc /proc] [--cgroups /sys/fs/cgroup]

cgroup v2 ("0::/path" in /proc/PID/cgroup) keeps throttled_usec in cpu.stat; v1 (a line whose controllers
include cpu) keeps throttled_time in nanoseconds. Under a cgroup namespace the path the process sees may not
exist below the mount: then the mount's root is its cgroup.
"""
import argparse
import os
import sys


def stat_ns(directory, v2):
    """The throttled time in a cgroup directory's cpu.stat (ns), or None without one."""
    try:
        with open(os.path.join(directory, "cpu.stat")) as f:
            fields = dict(line.split(None, 1) for line in f if " " in line)
    except OSError:
        return None
    key = "throttled_usec" if v2 else "throttled_time"
    if key not in fields:
        return None
    return int(fields[key]) * (1000 if v2 else 1)


def along(mount, path, v2):
    """The throttled time summed from the cgroup at path up to the mount (None when none keeps it)."""
    directory = os.path.join(mount, path.lstrip("/"))
    if not os.path.isdir(directory):
        directory = mount
    total, seen = 0, False
    while True:
        ns = stat_ns(directory, v2)
        if ns is not None:
            total, seen = total + ns, True
        if os.path.normpath(directory) == os.path.normpath(mount):
            break
        directory = os.path.dirname(directory)
    return total if seen else None


def throttled_ns(pid, proc, cgroups):
    try:
        with open(os.path.join(proc, str(pid), "cgroup")) as f:
            lines = [line.rstrip("\n") for line in f]
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and not controllers:
            ns = along(cgroups, path, True)
        elif "cpu" in controllers.split(","):
            ns = along(os.path.join(cgroups, controllers), path, False)
        else:
            continue
        if ns is not None:
            return ns
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pid")
    parser.add_argument("--proc", default="/proc")
    parser.add_argument("--cgroups", default="/sys/fs/cgroup")
    args = parser.parse_args()
    ns = throttled_ns(args.pid, args.proc, args.cgroups)
    if ns is not None:
        sys.stdout.write("%d\n" % ns)


if __name__ == "__main__":
    main()
