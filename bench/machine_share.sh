# shellcheck shell=bash
# Sourced by the benchmark scripts that time a run of isnd: what the machine took from it meanwhile, read before
# and after the run, so that a run the machine slowed is read as the machine's, not the node's.
#   ticks=$(cpu_ticks)          the machine's steal and total CPU ticks (/proc/stat; empty where there is none)
#   steal_between BEFORE AFTER  the share of the CPU time the VM's host took between two readings (empty: unknown)
#   ns=$(throttled_ns PID)      how long PID's cgroup CPU quotas have stopped it so far (bench/cgroup_throttle.py:
#                               a throttled cgroup runs none of its threads, on every CPU at once; empty: unknown)
#   throttled_ms_between BEFORE AFTER  milliseconds between two throttled_ns readings (empty: unknown)
#   core_speed CPU              the speed of that CPU now: bench_cpu_speed's JSON line, pinned there for SPEED_S seconds
#                               (default 1), from SPEED_PROBE (the caller sets it; empty: no probe, nothing printed).
#                               On a VM whose host shares its cores the speed moves by several percent within minutes.
cpu_ticks() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat 2>/dev/null || true; }
steal_between() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
  if (y[2] > x[2]) printf "%.4f", (y[1] - x[1]) / (y[2] - x[2]) }'; }
throttled_ns() { python3 "$(dirname "${BASH_SOURCE[0]}")/cgroup_throttle.py" "$1" 2>/dev/null || true; }
throttled_ms_between() {
  if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e6 }'; fi
}
core_speed() {
  if [ -n "${SPEED_PROBE:-}" ]; then taskset -c "$1" "$SPEED_PROBE" --seconds "${SPEED_S:-1}" 2>/dev/null || true; fi
}
