#!/usr/bin/env python3
"""Where a running isnd spends its time while a load generator runs: CPU seconds per second of each
thread group (threads by name, their numbers dropped: isnd-loop-, isn-cpu-, isn-gpu-, isn-crew-; the main thread,
which runs the first loop, is isnd), seconds per second each group waited for a core ("<group> runq"),
and the change of every scheduler and server counter over the run, printed as one JSON line with the
generator's own JSON (its last line on stdout) under "bench". With --timeline MS, also how the refusal and lateness
counters (names with shed, late or refused, and the stalls the loops saw) moved in each MS of the run, and admission's state gauges
(measured job time, learned scales, queue depths, CoDel's standing flag) whenever they moved: a shed
episode in a run that is mostly clean shows which admission rule fired, when, and on what belief
(beside the bench's on_time_timeline); with --activity, every MS the devices' work too (GPU batches,
their jobs, pruned ones, device busy seconds, jobs run, the dispatchers' and the GPU backend's time by
phase), so that an episode can be set against the batches that taught admission its belief. With --states HZ, also what each thread of the groups named by
--state-groups (thread names, numbers dropped; default the loops) was doing, HZ samples a second while
the generator ran: on a core or runnable, else the kernel function it sleeps in and its system call (a
futex's address names the lock: the same address under two groups is a lock they share).

  overload_profile.py --pid PID --metrics URL [--label L] [--timeline MS [--activity]] [--states HZ] -- LOAD-GENERATOR COMMAND...
"""
import argparse, collections, json, os, re, subprocess, sys, tempfile, threading, time, urllib.request

from node_sheds import parse_metrics  # bench/ is on the path: the scripts run as bench/NAME.py


def thread_group(comm):
    """A thread's group: its name without the number (isnd-loop-3 -> isnd-loop-)."""
    return re.sub(r"\d+$", "", comm)


def thread_cpu_seconds(pid):
    """Per thread group of pid so far: CPU seconds (user + system), and seconds spent runnable but
    waiting for a core (schedstat's run delay; under "<group> runq"): a thread that is busy by the
    node's own count yet neither on a core nor waiting for one is blocked (a lock, a system call)."""
    tick = os.sysconf("SC_CLK_TCK")
    totals = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            schedstat = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
        except OSError:
            continue  # the thread ended between the listing and the read
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seconds = (int(fields[11]) + int(fields[12])) / tick
        group = thread_group(comm)
        totals[group] = totals.get(group, 0.0) + seconds
        totals[group + " runq"] = totals.get(group + " runq", 0.0) + int(schedstat[1]) / 1e9
    return totals


def metrics_of(url):
    return parse_metrics(urllib.request.urlopen(url, timeout=5).read().decode())


def counters(url):
    return {name: value for name, value in metrics_of(url).items() if "_total" in name}


# Admission's own state, sampled as it is (not as a change): what it believed when an episode began.
ADMISSION_STATE = re.compile(r"isn_scheduler_(measured_job_seconds|service_scale|prepare_backlog_standing|"
                             r"queue_depth|prepare_queue_depth|gpu_batch_fixed_seconds|gpu_batch_per_job_seconds|"
                             r"prepare_predicted_wait_seconds|prepare_still_seconds|prepare_departure_seconds)")
# The devices' work (--activity): counters that move whenever anything runs.
ACTIVITY = re.compile(r"isn_(gpu_batches|scheduler_batch_jobs|gpu_prune_batches|scheduler_busy_seconds|"
                      r"scheduler_ran|scheduler_gpu_dispatcher_seconds|gpu_host_seconds)_total")


def sample_refusals(run, url, interval, start, activity=False):
    """While the generator runs: every interval seconds, the refusal and lateness counters that moved
    since the sample before (with activity, the devices' work counters too), with the seconds since the
    start; with each such sample, admission's state gauges then ("state") and at the sample before
    ("state_before")."""
    def scrape():
        metrics = metrics_of(url)
        watched = {n: v for n, v in metrics.items() if "_total" in n and
                   (re.search(r"shed|late|refused|stalls_seen", n) or (activity and ACTIVITY.match(n)))}
        return watched, {n: round(v, 9) for n, v in metrics.items() if ADMISSION_STATE.match(n)}
    samples, (before, state_before) = [], scrape()
    while run.poll() is None:
        time.sleep(interval)
        now, state = scrape()
        moved = {n: round(v - before.get(n, 0.0), 6) for n, v in now.items() if v != before.get(n, 0.0)}
        if moved:
            samples.append({"t": round(time.monotonic() - start, 3), **moved, "state": state,
                            "state_before": state_before})
        before, state_before = now, state
    return samples


SYSCALL_NAMES = {"0": "read", "1": "write", "7": "poll", "20": "writev", "23": "select", "24": "sched_yield",
                 "35": "nanosleep", "44": "sendto", "45": "recvfrom", "46": "sendmsg", "47": "recvmsg",
                 "202": "futex", "230": "clock_nanosleep", "232": "epoll_wait", "281": "epoll_pwait",
                 "441": "epoll_pwait2", "9": "mmap", "10": "mprotect", "11": "munmap", "28": "madvise",
                 "16": "ioctl", "-1": "none (in the kernel, no system call)"}


def thread_state(pid, tid):
    """One thread's state now: "running" (on a core or runnable), else its sleeping kernel function and
    system call, with the first argument for a futex (the lock's address)."""
    try:
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        if stat[stat.rindex(")") + 2] == "R":
            return "running"
        wchan = open(f"/proc/{pid}/task/{tid}/wchan").read().strip()
        try:
            call = open(f"/proc/{pid}/task/{tid}/syscall").read().split()
        except OSError:
            call = ["unreadable"]
    except OSError:
        return None  # the thread ended between the listing and the read
    if call[:1] == ["running"]:
        return "running"  # it woke between the reads
    wchan = wchan if wchan not in ("", "0") else "?"
    name = SYSCALL_NAMES.get(call[0], call[0]) if call else "?"
    if name == "futex" and len(call) > 1:
        name += " " + call[1]
    return f"{wchan} {name}"


def sample_states(pid, groups, hz, stop):
    """Until stop is set: each hz-th of a second, the state of every thread of pid whose name (numbers
    dropped) is one of groups, the main thread counted as a loop (it runs the first); the counts per
    group and state."""
    tids = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        except OSError:
            continue
        group = "isnd-loop-" if tid == str(pid) else thread_group(comm)
        if group in groups:
            tids[tid] = group
    counts = collections.defaultdict(collections.Counter)
    while not stop.wait(1.0 / hz):
        for tid, group in tids.items():
            state = thread_state(pid, tid)
            if state:
                counts[group][state] += 1
    return {g: dict(c.most_common()) for g, c in counts.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--metrics", required=True)
    parser.add_argument("--label", default="")
    parser.add_argument("--timeline", type=float, default=0.0, help="milliseconds between samples (0: none)")
    parser.add_argument("--activity", action="store_true",
                        help="the timeline also samples the devices' work counters (every sample kept)")
    parser.add_argument("--states", type=float, default=0.0, help="thread state samples a second (0: none)")
    parser.add_argument("--state-groups", default="isnd-loop-",
                        help="comma-separated thread names (numbers dropped) whose states are sampled")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a load generator command is needed after --")
    cpu_before, metrics_before, start = thread_cpu_seconds(args.pid), counters(args.metrics), time.monotonic()
    start_unix = time.time()  # the timeline's zero, to set it against other clocks' logs
    # the generator's output goes to a file, not a pipe: a pipe it filled while we sample would stop it
    with tempfile.TemporaryFile(mode="w+") as out:
        run = subprocess.Popen(command, stdout=out, text=True)
        states, stop, sampler = {}, threading.Event(), None
        if args.states > 0:
            sampler = threading.Thread(target=lambda: states.update(
                sample_states(args.pid, args.state_groups.split(","), args.states, stop)))
            sampler.start()
        timeline = sample_refusals(run, args.metrics, args.timeline / 1000.0, start, args.activity) if args.timeline > 0 else None
        run.wait()
        stop.set()
        if sampler:
            sampler.join()
        out.seek(0)
        stdout = out.read()
    cpu_after, metrics_after, wall = thread_cpu_seconds(args.pid), counters(args.metrics), time.monotonic() - start
    lines = [line for line in stdout.splitlines() if line.strip()]
    bench = None
    if lines:
        try:
            bench = json.loads(lines[-1])
        except ValueError:
            bench = lines[-1]
    delta = {name: round(metrics_after[name] - metrics_before.get(name, 0.0), 6)
             for name in metrics_after if metrics_after[name] != metrics_before.get(name, 0.0)}
    print(json.dumps({"label": args.label, "start_unix": round(start_unix, 3), "wall_s": round(wall, 3),
                      "cpu_per_s": {g: round((cpu_after[g] - cpu_before.get(g, 0.0)) / wall, 3) for g in cpu_after},
                      "counters": delta, "timeline": timeline,
                      "states": states or None, "bench": bench, "bench_rc": run.returncode}))
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
