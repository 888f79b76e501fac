#!/usr/bin/env bash
# bench/cpu_split.py on written topology trees (no CPU is pinned): whole cores for the generator where CPUs are
# hyperthread siblings (cpuN and cpuN+8 one core), the plain split where each CPU is a core, the isnd CPUs that
# share a core with the generator's, a CPU without topology taken as a core of its own, and clear refusals.
set -euo pipefail
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-cpu-split.XXXXXX")
trap 'rm -rf "$work"' EXIT
expect() { [ "$2" = "$3" ] || { echo "cpu_split_test: $1: got \"$2\", wanted \"$3\"" >&2; exit 1; }; }
tree() { # dir cpus core_of(cpu) as an awk expression of c
  for c in $(seq 0 $(($2 - 1))); do
    mkdir -p "$work/$1/cpu$c/topology"
    echo 0 >"$work/$1/cpu$c/topology/physical_package_id"
    awk -v c="$c" "BEGIN { print $3 }" >"$work/$1/cpu$c/topology/core_id"
  done
}
split() { python3 bench/cpu_split.py --sysfs "$work/$1" split "$2" --cpus "$3"; }
shared() { python3 bench/cpu_split.py --sysfs "$work/$1" shared "$2" "$3"; }

tree smt 16 'c % 8'
expect "siblings: whole cores for the generator" "$(split smt 4 0-15)" "0-5,8-13 6-7,14-15"
expect "siblings: the old default split shares four cores" "$(shared smt 0-11 12-15)" "4/12 5/13 6/14 7/15"
expect "siblings: the split shares none" "$(shared smt 0-5,8-13 6-7,14-15)" ""
expect "siblings: an odd count takes whole cores" "$(split smt 3 0-15)" "0-5,8-13 6-7,14-15"

tree flat 16 'c'
expect "one CPU a core: the plain split" "$(split flat 4 0-15)" "0-11 12-15"
expect "one CPU a core: nothing shared" "$(shared flat 0-11 12-15)" ""

tree gaps 4 'c % 2'
rm -r "$work/gaps/cpu3/topology"
expect "a CPU without topology is its own core" "$(split gaps 1 0-3)" "0-2 3"
expect "shared with a CPU without topology" "$(shared gaps 0 2)" "0/2"

if out=$(split smt 16 0-15 2>&1); then echo "cpu_split_test: all CPUs to the generator accepted" >&2; exit 1; fi
expect "too many for the generator" "$out" "cpu_split: 16 CPUs on 8 cores cannot give the generator 16 CPUs of whole cores and isnd the rest"
if out=$(split smt 2 0-x 2>&1); then echo "cpu_split_test: a bad list accepted" >&2; exit 1; fi
expect "a bad list" "$out" "cpu_split: not a CPU list: '0-x'"
echo "cpu_split_test: splits by whole cores, finds shared cores, refuses what cannot be split"
