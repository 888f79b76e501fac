#!/usr/bin/env bash
# Issue 35's measurements on the GPU machine, in stages that fit the device's per-call limit:
#   STAGES="sustained curves" BUILD=.devbin DEVDATA=.devdata bash bench/overload_device.sh
# sustained: DESIGN section 7's sustained rate of each configuration in CONFIGS (isn-bench --sustained,
#            three repeats per probed rate), SUSTAINED_RUNS times each, interleaved; each search's line
#            carries the speed of isnd's first core just before and after it (core_speed, below).
#            SUSTAINED_TIMELINE_MS also samples the node's refusal counters and admission's state that often during each search
#            (bench/overload_profile.py --timeline: sustained-<config>-<run>.profile.json), so that a
#            search failed by a short refusal episode below capacity shows which rule refused, on what belief.
#            SUSTAINED_SEARCHES=N runs N searches on each isnd, their probes taking turns (isn-bench --searches),
#            so that the machine's drift over the minutes they take falls on all of them alike; each is a line of
#            sustained.json (not with SUSTAINED_TIMELINE_MS, whose profile holds one search).
# curves:    bench/overload_curve.sh for each configuration at its 1x: RATE_<config>, or the mean of its
#            sustained searches found under SUSTAINED_FROM (default OUT), as must-show 1 wants. With
#            STEAL_RETRIES=N a point during which the VM's host took STEAL_MAX (0.01) of the CPU time is run
#            again, up to N times (overload_curve.sh; the verdicts count the runs set aside).
# spike:     SPIKE_S seconds at 3x that 1x, then 0.5x: on-time answers per 100 ms.
# trivial:   a one-term query on a 200-document index at multiples of RATE_trivial (LOOPS loops, isnd flags
#            TRIVIAL_EXTRA added; measured first when not given), from the plain generator and from one
#            that throttles itself (TRIVIAL_THROTTLE, below).
# profile:   where the node's time goes at PROFILE_MULTIPLES of that 1x: CPU seconds per second of
#            each thread group (loops, CPU workers, GPU dispatchers, the rest) and the scheduler's
#            counters over the run (bench/overload_profile.py), beside the bench's JSON; TIMELINE_MS also
#            samples the shed, late and refused counters that often (which admission rule fired, when;
#            profile-episodes.json cuts those timelines into refusal episodes, bench/shed_episodes.py);
#            STATES_HZ samples what the threads of STATE_GROUPS (default the loops) wait on that often.
# TIMELINE_ACTIVITY=1 adds the devices' work to both timelines (overload_profile.py --activity);
# GPU_CLOCKS_MS samples the GPU's clocks, power and utilisation that often (nvidia-smi, a query only) into
# gpu-clocks.csv for the whole call, to set a slow stretch of batches against the device's own state.
# A configuration other than cpu, cpu_pinned, hybrid, hybrid_pinned and gpu_all takes its isnd flags from FLAGS_<config>; in the
# sustained, curves and profile stages ISND_<config> names another isnd binary (an A/B of two builds).
# Binaries (make CUDA=1 STATIC=1 BUILD=build-gpu) in $BUILD/bin, the Debian index and short log in
# $DEVDATA (idx-deb, short.queries.tsv); INDEX and QUERIES name another partition and log (the 20M one).
# isnd on ISND_CPUS (0-11) with ISND_LOOPS loops (the CPU-only node 4, the GPU-only node 7, the hybrid isnd's
# default: 5 on 12 CPUs) and WORKERS workers (0: the GPU-only node 4, else isnd's default, which on 12 CPUs is
# 12 on the CPU alone and 6 beside a GPU with 5 loops), isn-bench on BENCH_CPUS (12-15). Where CPUs are
# hyperthread siblings the defaults are whole cores instead (bench/cpu_split.py split 4: the generator's four
# CPUs on the highest cores, isnd on the rest), so that the generator never runs on a core of isnd's;
# cpu-topology.txt says what the machine had (its CPUs, model, kernel, clocksource and mitigations, and one core's
# speed, clock read and system call: bench_cpu_speed).
set -u
B=${BUILD:-.devbin}
D=${DEVDATA:-.devdata}
O=${OUT:-$B/results-overload}
CONFIGS=${CONFIGS:-cpu hybrid gpu_all}
# (a machine too small for that split says so and keeps the fixed defaults, which then name CPUs it lacks)
read -r split_isnd split_bench < <(python3 "$(dirname "$0")/cpu_split.py" split 4 || echo 0-11 12-15)
ISND_CPUS=${ISND_CPUS:-$split_isnd}
BENCH_CPUS=${BENCH_CPUS:-$split_bench}
WORKERS=${WORKERS:-0}
# the CPU-only node: 4 loops, as isnd chose on the 16-core device before its default counted only the CPUs it
# may use; beside a GPU, isnd's default (half of what the dispatcher leaves)
CPU_LOOPS=${ISND_LOOPS:-4}
GPU_LOOPS=${ISND_LOOPS:-0}
# The GPU-only node: 7 loops and 4 workers. Its workers only prepare and pack batches, while its loops take
# every request and write every answer, and past its capacity nearly every excess request is a refusal a
# loop makes: with 6 loops they were busy 79-88% of the time at 3x, long enough at a stretch that refusals
# queued behind a backlog left past 1 ms. A worker fewer costs some of the sustained rate (README).
GPU_ALL_LOOPS=${ISND_LOOPS:-7}
GPU_ALL_WORKERS=$([ "$WORKERS" = 0 ] && echo 4 || echo "$WORKERS")
DEADLINE_MS=${DEADLINE_MS:-50}
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$O"
{ python3 "$(dirname "$0")/cpu_split.py" describe; echo "isnd on $ISND_CPUS, isn-bench on $BENCH_CPUS"
  command -v lscpu >/dev/null && lscpu -e=CPU,CORE,SOCKET,NODE
  # what else two machines of one GPU model and step speed may differ in: the CPU model and its caches, the
  # kernel, its clocksource (a clock read in user space or a system call), its mitigations, transparent huge pages
  echo; command -v lscpu >/dev/null && lscpu | grep -v '^Flags:'; echo "kernel: $(uname -r)"
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  [ -x "$B/bench/bench_cpu_speed" ] && echo "one core: $(taskset -c "${ISND_CPUS%%[-,]*}" "$B/bench/bench_cpu_speed" --seconds 0.3)"
} >"$O/cpu-topology.txt" 2>&1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device.txt"

flags_of() { # config -> isnd flags; FLAGS_<config> names any other configuration's
  local own=FLAGS_$1
  [ -n "${!own:-}" ] && { echo "${!own}"; return; }
  case $1 in
    cpu) echo "--workers $WORKERS --set server.loops=$CPU_LOOPS --set gpu.enable=false" ;;
    # the CPU-only node with its loops alone on CPUs of their own and a SCHED_IDLE spare behind each (README: the
    # loops); WORKERS=0: one worker on each CPU the loops leave (8 of isnd's 12)
    cpu_pinned) local workers=$WORKERS
      [ "$workers" = 0 ] && workers=$(( $(taskset -c "$ISND_CPUS" nproc) - CPU_LOOPS ))
      echo "--workers $workers --set search.spare_workers=$CPU_LOOPS --set search.spare_idle_policy=true" \
      "--set server.loops=$CPU_LOOPS --set server.pin_loops=true --set gpu.enable=false" ;;
    hybrid) echo "--workers $WORKERS --set server.loops=$GPU_LOOPS --set gpu.enable=true" ;;
    # the hybrid with its loops pinned as cpu_pinned's (5 loops: isnd's default beside a GPU on 12 CPUs); WORKERS=0:
    # isnd sizes the workers by the CPUs the loops leave, less the GPU's dispatcher
    hybrid_pinned) local loops=${ISND_LOOPS:-5}
      echo "--workers $WORKERS --set search.spare_workers=$loops --set search.spare_idle_policy=true" \
      "--set server.loops=$loops --set server.pin_loops=true --set gpu.enable=true" ;;
    gpu_all) echo "--workers $GPU_ALL_WORKERS --set server.loops=$GPU_ALL_LOOPS --set gpu.enable=true --set gpu.route_all=true --set gpu.max_batch=512" \
      "--set scheduler.gpu_max_batch=512 --set scheduler.gpu_max_batch_memory=512MiB --set server.reply_backlog_age=1ms" ;; # conf/isnd.conf: why
  esac
}

# isnd is ready on the CPU before the GPU holds the index: the measurements start once /readyz no
# longer says the GPU is loading.
wait_gpu_upload() {
  python3 - "$isnd_pid" <<'PY'
import os, sys, time, urllib.request
for _ in range(3000):
    try:
        os.kill(int(sys.argv[1]), 0)
    except OSError:
        sys.exit("isnd exited while the GPU was loading")
    try:
        body = urllib.request.urlopen("http://127.0.0.1:7612/readyz").read().decode()
    except Exception:
        body = "GPU loading"
    if "GPU loading" not in body:
        sys.exit(0)
    time.sleep(0.1)
sys.exit("isnd: the GPU upload did not end within 300 s")
PY
}

start_isnd() { # log, flags...
  local log=$1; shift
  taskset -c "$ISND_CPUS" "${isnd_bin:-$B/bin/isnd}" --index "${INDEX:-$D/idx-deb}" --listen 127.0.0.1:7611 --stats-listen 127.0.0.1:7612 \
    "$@" >"$log" 2>&1 &
  isnd_pid=$!
  for _ in $(seq 1 1200); do
    if grep -q "ready: serving" "$log"; then wait_gpu_upload || { tail -20 "$log"; return 1; }; return; fi
    kill -0 $isnd_pid 2>/dev/null || { echo "isnd exited:"; tail -20 "$log"; return 1; }
    sleep 0.1
  done
  echo "isnd not ready"; tail -20 "$log"; return 1
}

stop_isnd() { kill $isnd_pid 2>/dev/null; wait $isnd_pid 2>/dev/null; }

# What the machine took from a search (bench/machine_share.sh, as bench/overload_curve.sh takes it around a point),
# and the speed of isnd's first core while nothing else runs there (bench/bench_cpu_speed, SPEED_S seconds): the
# machine's own speed beside each search and, through SPEED_PROBE, around each curve's point, which a CPU-bound
# capacity follows. Empty when the probe was not built (said here, once).
# shellcheck source=bench/machine_share.sh
. bench/machine_share.sh
export SPEED_PROBE=$B/bench/bench_cpu_speed
if [ ! -x "$SPEED_PROBE" ]; then
  case " ${STAGES:-sustained} " in
    *" sustained "*) echo "overload_device: no $SPEED_PROBE (make BUILD=$B $SPEED_PROBE): sustained searches and curves go without the core's speed" >&2 ;;
  esac
  SPEED_PROBE=
fi
first_isnd_cpu=${ISND_CPUS%%[-,]*}
# search.json, the core's speed before and after, the steal share and the throttled milliseconds over the search
# (machine_share.sh; empty: unknown): each search's JSON line with "core_speed": {before, after}, "vm_steal_share",
# the share of the machine's CPU time its VM host took while the search ran, and "cgroup_throttled_ms", how long
# isnd's cgroup quota stopped it meanwhile (searches taking turns share them)
with_core_speed() {
  python3 - "$@" <<'PY'
import json, sys
speeds = {name: json.loads(text) for name, text in zip(("before", "after"), sys.argv[2:4]) if text.strip()}
steal = float(sys.argv[4]) if sys.argv[4] else None
throttled_ms = float(sys.argv[5]) if sys.argv[5] else None
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    run = json.loads(line)
    if speeds:
        run["core_speed"] = speeds
    run["vm_steal_share"] = steal
    run["cgroup_throttled_ms"] = throttled_ms
    print(json.dumps(run))
PY
}

# A configuration's 1x: RATE_<config>, or else the mean of its sustained searches in the sustained.json
# files under SUSTAINED_FROM (default this run's OUT: a sustained stage before, or an earlier call's folder).
# A search that stopped at its ceiling found a lower bound, not a sustained rate: no 1x is made from it.
rate_of() {
  local var=RATE_$1
  [ -n "${!var:-}" ] && { echo "${!var}"; return; }
  python3 - "$1" "${SUSTAINED_FROM:-$O}" <<'PY'
import glob, json, os, sys
runs = [run["sustained"] for path in glob.glob(os.path.join(sys.argv[2], "**", "sustained.json"), recursive=True)
        for run in map(json.loads, filter(str.strip, open(path))) if run["label"] == sys.argv[1]]
if not runs:
    sys.exit("overload_device: no RATE_%s and no sustained search of %s under %s" % (sys.argv[1], sys.argv[1], sys.argv[2]))
if any(run.get("at_ceiling") for run in runs):
    sys.exit("overload_device: a sustained search of %s under %s stopped at its ceiling (a lower bound): raise MAX_%s"
             " and search again, or give RATE_%s" % (sys.argv[1], sys.argv[2], sys.argv[1], sys.argv[1]))
rates = [run["rate"] for run in runs]
print(round(sum(rates) / len(rates), 1))
PY
}

clocks_pid=
if [ -n "${GPU_CLOCKS_MS:-}" ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,pstate --format=csv,noheader \
    -lms "$GPU_CLOCKS_MS" >"$O/gpu-clocks.csv" 2>&1 &
  clocks_pid=$!
  trap '[ -n "$clocks_pid" ] && kill $clocks_pid 2>/dev/null' EXIT
fi

if [ "${SUSTAINED_SEARCHES:-1}" != 1 ] && [ "${SUSTAINED_TIMELINE_MS:-0}" != 0 ]; then
  echo "overload_device: SUSTAINED_SEARCHES and SUSTAINED_TIMELINE_MS together: the profile holds one search" >&2
  exit 2
fi
for stage in ${STAGES:-sustained}; do
  case $stage in
    sustained)
      for run in $(seq 1 "${SUSTAINED_RUNS:-1}"); do
        for c in $CONFIGS; do
          max_var=MAX_$c; max=${!max_var:-250000}
          bin_var=ISND_$c; isnd_bin=${!bin_var:-}
          speed_before=$(core_speed "$first_isnd_cpu")
          start_isnd "$O/isnd-sustained-$c-$run.log" $(flags_of $c) || continue
          ticks_before=$(cpu_ticks) throttled_before=$(throttled_ns "$isnd_pid")
          search=(taskset -c "$BENCH_CPUS" "$B/bin/isn-bench" --target 127.0.0.1:7611 --queries "${QUERIES:-$D/short.queries.tsv}"
            --sustained "$max" --deadline-ms "$DEADLINE_MS" -k 10 --duration "${DURATION:-3}" --warmup 1
            --threads 4 --resolution "${RESOLUTION:-0.05}" --label "$c" --searches "${SUSTAINED_SEARCHES:-1}")
          if [ "${SUSTAINED_TIMELINE_MS:-0}" != 0 ]; then
            taskset -c "$BENCH_CPUS" python3 bench/overload_profile.py --pid "$isnd_pid" --metrics http://127.0.0.1:7612/metrics \
              --label "$c-$run" --timeline "$SUSTAINED_TIMELINE_MS" ${TIMELINE_ACTIVITY:+--activity} -- "${search[@]}" \
              >"$O/sustained-$c-$run.profile.json" 2>>"$O/sustained.txt"
            python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["bench"]))' \
              "$O/sustained-$c-$run.profile.json" >"$O/search.json"
          else
            "${search[@]}" >"$O/search.json" 2>>"$O/sustained.txt"
          fi
          ticks_after=$(cpu_ticks) throttled_after=$(throttled_ns "$isnd_pid")
          tail -1 "$O/sustained.txt"
          stop_isnd
          if [ -s "$O/search.json" ]; then
            with_core_speed "$O/search.json" "$speed_before" "$(core_speed "$first_isnd_cpu")" "$(steal_between "$ticks_before" "$ticks_after")" \
              "$(throttled_ms_between "$throttled_before" "$throttled_after")" >>"$O/sustained.json"
          else
            echo "overload_device: the sustained search of $c (run $run) gave no result" >&2
          fi
          rm -f "$O/search.json"
        done
      done
      isnd_bin= ;; # also after a configuration whose isnd did not start: later stages use $B's
    curves)
      for c in $CONFIGS; do
        rate=$(rate_of "$c") || continue
        bin_var=ISND_$c
        ISND_BIN=${!bin_var:-} ISND_CPUS=$ISND_CPUS BENCH_CPUS=$BENCH_CPUS BENCH_THREADS=4 CONNECTIONS=${CONNECTIONS:-16} BUILD=$B OUT=$O \
          INDEX="${INDEX:-$D/idx-deb}" \
          QUERIES="${QUERIES:-$D/short.queries.tsv}" DEADLINE_MS=$DEADLINE_MS DURATION=${DURATION:-3} \
          bash bench/overload_curve.sh "$c" "$rate" $(flags_of $c) 2>&1 | tee -a "$O/curves.txt"
      done ;;
    spike)
      for c in $CONFIGS; do
        rate=$(rate_of "$c") || continue
        start_isnd "$O/isnd-spike-$c.log" $(flags_of $c) || continue
        taskset -c "$BENCH_CPUS" "$B/bin/isn-bench" --target 127.0.0.1:7611 --queries "${QUERIES:-$D/short.queries.tsv}" \
          --rate "$(python3 -c "print($rate*0.5)")" --spike "$(python3 -c "print($rate*3)"):${SPIKE_S:-10}" \
          --duration "$(( ${SPIKE_S:-10} + 5 ))" --warmup 1 --deadline-ms "$DEADLINE_MS" -k 10 --threads 4 \
          >"$O/spike-$c.json"
        python3 - "$O/spike-$c.json" "$rate" "${SPIKE_S:-10}" "$c" <<'EOF' | tee -a "$O/spike.txt"
import json, sys
r = json.load(open(sys.argv[1])); rate = float(sys.argv[2]); spike = float(sys.argv[3])
t = r["on_time_timeline"]; half = rate * 0.5 / 10  # on-time per 100 ms expected at 0.5x
after = t[int(spike * 10):]
recovered = next((i for i in range(len(after)) if all(x >= 0.9 * half for x in after[i:i + 5])), None)
print(json.dumps({"config": sys.argv[4], "sustained": rate, "spike_on_time_per_s": sum(t[:int(spike * 10)]) / spike,
                  "after_spike_first_100ms": after[:15], "recovered_after_ms": None if recovered is None else recovered * 100}))
EOF
        stop_isnd
      done ;;
    profile)
      for c in $CONFIGS; do
        rate=$(rate_of "$c") || continue
        bin_var=ISND_$c; isnd_bin=${!bin_var:-}
        start_isnd "$O/isnd-profile-$c.log" $(flags_of $c) || continue
        for m in ${PROFILE_MULTIPLES:-1 2}; do
          r=$(python3 -c "print(round($rate*$m))")
          taskset -c "$BENCH_CPUS" python3 bench/overload_profile.py --pid $isnd_pid --metrics http://127.0.0.1:7612/metrics \
            --label "$c@${m}x" --timeline "${TIMELINE_MS:-0}" ${TIMELINE_ACTIVITY:+--activity} --states "${STATES_HZ:-0}" \
            --state-groups "${STATE_GROUPS:-isnd-loop-}" -- \
            taskset -c "$BENCH_CPUS" "$B/bin/isn-bench" --target 127.0.0.1:7611 --queries "${QUERIES:-$D/short.queries.tsv}" \
            --rate "$r" --duration "${DURATION:-3}" --warmup 1 --deadline-ms "$DEADLINE_MS" -k 10 --threads 4 \
            | tee -a "$O/profile.json"
        done
        stop_isnd
        # each refusal episode of the timelines: its refusals by rule, the stalls the loops saw, and what
        # admission believed of the preparation queue before it and at its worst
        [ "${TIMELINE_MS:-0}" = 0 ] || python3 bench/shed_episodes.py "$O/profile.json" >"$O/profile-episodes.json"
      done
      isnd_bin= ;;
    trivial)
      # The front end alone: isnd on TRIVIAL_ISND_CPUS (LOOPS loops, 2 workers), the generator on the
      # other cores, one generator thread per core, so that it can offer 3x what the loops sustain.
      # RATE_trivial, unless given, is measured first (DESIGN section 7, TRIVIAL_MAX at most).
      work=$(mktemp -d)
      for i in $(seq 1 200); do
        extra=""; [ "$i" = 77 ] && extra=" zeppelin"
        printf '{"id":"d%d","title":"doc %d","body":"wind tunnel flow %d boundary layer%s"}\n' "$i" "$i" $((i % 7)) "$extra"
      done >"$work/docs.jsonl"
      printf '1\tzeppelin\n' >"$work/q.tsv"
      "$B/bin/isn-index" build --quiet --input "$work/docs.jsonl" --out "$work/idx" >/dev/null
      t_isnd=${TRIVIAL_ISND_CPUS:-0-3} t_bench=${TRIVIAL_BENCH_CPUS:-4-15}
      t_threads=$(taskset -c "$t_bench" nproc)
      t_flags="--workers 2 --set server.loops=${LOOPS:-2} --set gpu.enable=false ${TRIVIAL_EXTRA:-}"
      if [ -z "${RATE_trivial:-}" ]; then
        ISND_CPUS=$t_isnd INDEX=$work/idx start_isnd "$O/isnd-trivial-sustained.log" $t_flags || continue
        taskset -c "$t_bench" "$B/bin/isn-bench" --target 127.0.0.1:7611 --queries "$work/q.tsv" \
          --sustained "${TRIVIAL_MAX:-600000}" --deadline-ms "${TRIVIAL_DEADLINE_MS:-50}" -k 10 --duration "${DURATION:-3}" \
          --warmup 1 --threads "$t_threads" --connections 4 --resolution "${RESOLUTION:-0.05}" --label trivial \
          >"$O/trivial-sustained.json" 2>>"$O/sustained.txt"
        stop_isnd
        RATE_trivial=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sustained"]["rate"])' "$O/trivial-sustained.json")
        echo "trivial sustained rate: $RATE_trivial" | tee -a "$O/curves.txt"
      fi
      # Two clients: the plain generator (the node alone), then, unless TRIVIAL_THROTTLE=0, one that refuses
      # itself what the node is refusing (isn-bench --client-throttle TRIVIAL_THROTTLE, 1.1 by default).
      for client in trivial trivial-throttled; do
        bench_flags=
        if [ $client = trivial-throttled ]; then
          [ "${TRIVIAL_THROTTLE:-1.1}" = 0 ] && continue
          bench_flags="--client-throttle ${TRIVIAL_THROTTLE:-1.1}"
        fi
        ISND_CPUS=$t_isnd BENCH_CPUS=$t_bench BENCH_THREADS=$t_threads CONNECTIONS=4 BUILD=$B OUT=$O INDEX="$work/idx" \
          QUERIES="$work/q.tsv" DEADLINE_MS=${TRIVIAL_DEADLINE_MS:-50} DURATION=${DURATION:-3} \
          MULTIPLES="${TRIVIAL_MULTIPLES:-1 1.5 2 3}" BENCH_FLAGS="$bench_flags" \
          bash bench/overload_curve.sh $client "$RATE_trivial" $t_flags 2>&1 | tee -a "$O/curves.txt"
      done ;;
  esac
done
