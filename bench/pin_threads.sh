#!/usr/bin/env bash
# Pins a running isnd's event loops (its main thread, which runs the first loop, and isnd-loop-N) to
# LOOP_CPUS and every other thread of it (workers, GPU dispatchers, the rest) to REST_CPUS: an experiment
# on whether loops that share no core with busy workers refuse and answer sooner.
#   bash bench/pin_threads.sh PID LOOP_CPUS REST_CPUS      e.g. bench/pin_threads.sh 1234 0-2 3-11
# overload_curve.sh runs it through AFTER_START='bash bench/pin_threads.sh $ISND_PID 0-2 3-11'.
set -euo pipefail
[ $# -eq 3 ] || { sed -n '2,7p' "$0" >&2; exit 2; }
pid=$1 loops=$2 rest=$3
[ -d "/proc/$pid/task" ] || { echo "pin_threads: no process $pid" >&2; exit 1; }
n_loops=0 n_rest=0
for task in /proc/"$pid"/task/*; do
  tid=${task##*/}
  comm=$(cat "$task/comm" 2>/dev/null) || continue # the thread ended meanwhile
  is_loop=0
  if [ "$tid" = "$pid" ] || [[ $comm == isnd-loop-* ]]; then is_loop=1; fi
  cpus=$rest
  [ $is_loop = 1 ] && cpus=$loops
  if ! taskset -p -c "$cpus" "$tid" >/dev/null 2>&1; then
    [ -d "$task" ] || continue # a short-lived thread ended between the listing and here
    echo "pin_threads: cannot pin thread $tid ($comm) to CPUs $cpus" >&2
    exit 1
  fi
  if [ $is_loop = 1 ]; then n_loops=$((n_loops + 1)); else n_rest=$((n_rest + 1)); fi
done
echo "pin_threads: $n_loops loop threads on CPUs $loops, $n_rest other threads on CPUs $rest"
