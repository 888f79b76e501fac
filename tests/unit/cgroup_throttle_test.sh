#!/usr/bin/env bash
# bench/cgroup_throttle.py: the time a process's cgroup quotas stopped it, from written /proc and cgroup trees (no
# cgroup is made): v2 (throttled_usec, summed from the process's cgroup up to the mount), v1 (the cpu controller's
# throttled_time in ns, the controllers' mount named by their list), a path that a cgroup namespace hides (the
# mount's root is the cgroup), and nothing printed where no cgroup keeps the count; then bench/machine_share.sh's
# differences of such readings.
set -euo pipefail
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-cgroup-throttle.XXXXXX")
trap 'rm -rf "$work"' EXIT
expect() { [ "$2" = "$3" ] || { echo "cgroup_throttle_test: $1: got \"$2\", wanted \"$3\"" >&2; exit 1; }; }
throttled() { python3 bench/cgroup_throttle.py 42 --proc "$work/$1/proc" --cgroups "$work/$1/cg"; }
proc() { mkdir -p "$work/$1/proc/42"; printf '%b' "$2" >"$work/$1/proc/42/cgroup"; }
stat() { mkdir -p "$2"; printf '%b' "$3" >"$2/cpu.stat"; }

# v2: the pod's quota stopped it 1.5 ms, the container's 2 ms; the root keeps no throttling
proc v2 '0::/kubepods/pod1/ctr\n'
stat v2 "$work/v2/cg/kubepods/pod1/ctr" 'usage_usec 9000\nnr_throttled 3\nthrottled_usec 2000\n'
stat v2 "$work/v2/cg/kubepods/pod1" 'usage_usec 9000\nnr_throttled 2\nthrottled_usec 1500\n'
stat v2 "$work/v2/cg" 'usage_usec 9000\n'
expect "v2 summed to the mount" "$(throttled v2)" 3500000

# v1: the cpu controller's line among others, its mount named by its controllers
proc v1 '9:name=systemd:/\n4:memory:/box\n2:cpu,cpuacct:/box\n'
stat v1 "$work/v1/cg/cpu,cpuacct/box" 'nr_periods 10\nnr_throttled 1\nthrottled_time 700000\n'
stat v1 "$work/v1/cg/cpu,cpuacct" 'nr_periods 0\nnr_throttled 0\nthrottled_time 0\n'
expect "v1 in ns" "$(throttled v1)" 700000

# a cgroup namespace: the path it names is not below the mount, whose root is the process's cgroup
proc ns '0::/hidden/elsewhere\n'
stat ns "$work/ns/cg" 'nr_throttled 1\nthrottled_usec 250\n'
expect "the mount's root" "$(throttled ns)" 250000

# no cpu controller, or no cpu.stat: nothing, not 0
proc none '4:memory:/box\n'
mkdir -p "$work/none/cg"
expect "no cpu controller" "$(throttled none)" ""
proc bare '0::/box\n'
mkdir -p "$work/bare/cg/box"
expect "no cpu.stat" "$(throttled bare)" ""
expect "no such process" "$(python3 bench/cgroup_throttle.py 43 --proc "$work/v2/proc" --cgroups "$work/v2/cg")" ""

# bench/machine_share.sh, which the benchmarks source: the readings' differences, empty where a reading is
# (a quota that stopped isnd 2.5 ms; a host that took 2 of 100 ticks)
. bench/machine_share.sh
expect "throttled between" "$(throttled_ms_between 1000000 3500000)" 2.500
expect "throttled unknown" "$(throttled_ms_between "" 3500000)" ""
expect "steal between" "$(steal_between "1 100" "3 200")" 0.0200
expect "steal unknown" "$(steal_between "" "")" ""
echo "cgroup_throttle_test: all cases passed"
