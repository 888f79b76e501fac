#!/usr/bin/env bash
# Generation swaps under load on the GPU machine (issue 39, must-show 3), with the detail to find what a
# failed query met: isnd (hybrid) on WORK/current, isn-bench at RATE in back-to-back 1-s runs (each run's
# start time and status counts), /metrics polled every 0.5 s (sheds by reason, routing, queue depths,
# the devices' service scales), and the link flipped to each of TARGETS in turn (SIGHUP each, SETTLE s
# of load after each move). WORK holds the partitions: index/ and gen-b/ (bench/large_serve_device.sh's
# stages build and genb, or two `isn-index synth --seed 1|2` runs), and queries.tsv.
#   RATE=7500 TARGETS=gen-b bash bench/swap_under_load_device.sh
# Binaries in B (.devbin/bin: isnd, isn-bench); results in O (${OUT:-/tmp/isn-swap-out}).
B=${B:-.devbin} W=${WORK:-/tmp/isn-large} O=${O:-${OUT:-/tmp/isn-swap-out}} RATE=${RATE:-5000} SETTLE=${SETTLE:-10}
mkdir -p "$O"
T0=$SECONDS
ln -sfn index $W/current
taskset -c 0-11 $B/bin/isnd --index $W/current --listen 127.0.0.1:7621 --stats-listen 127.0.0.1:7622 --workers 12 \
  --set index.watch_interval=0 --set gpu.enable=true > $O/isnd.log 2>&1 &
pid=$!
for i in $(seq 900); do grep -q "gpu: the first stage serves generation" $O/isnd.log && break; sleep 0.1; done
echo "serving on the GPU at $((SECONDS-T0)) s"
POLL_STOP=$W/poll-stop python3 - > $O/metrics-poll.txt <<'PY' &
import re, time, urllib.request, os
keys = ("isn_shed_at_headers_total", "isn_shed_total", "isn_scheduler_dropped_dead_total", "isn_scheduler_partial_total",
        'isn_scheduler_routed_total{queue="cpu"}', 'isn_scheduler_routed_total{queue="gpu"}', 'isn_scheduler_ran_total{device="cpu"}',
        "isn_scheduler_prepare_wait_seconds_total", "isn_scheduler_arrival_wait_seconds_total", "isn_stream_limit",
        'isn_scheduler_shed_total{reason="overload"}', "isn_scheduler_shed_arrival_codel_total", "isn_scheduler_shed_unprepared_total",
        "isn_scheduler_shed_unprepared_late_total", "isn_scheduler_shed_routed_total", "isn_scheduler_refused_at_analysis_total",
        'isn_scheduler_queue_depth{queue="cpu"}', 'isn_scheduler_queue_depth{queue="gpu"}', "isn_scheduler_prepare_queue_depth",
        'isn_scheduler_service_scale{device="cpu"}', 'isn_scheduler_service_scale{device="gpu"}', "isn_inflight_requests")
while not os.path.exists(os.environ["POLL_STOP"]):
    try:
        m = urllib.request.urlopen("http://127.0.0.1:7622/metrics", timeout=2).read().decode()
        vals = []
        for k in keys:
            x = re.search("^" + re.escape(k) + r" (\S+)$", m, re.M)
            vals.append(x.group(1) if x else "-")
        print("%.3f" % time.time(), " ".join(vals), flush=True)
    except Exception as e:
        print("%.3f error %s" % (time.time(), e), flush=True)
    time.sleep(0.5)
PY
poll=$!
rm -f $W/poll-stop $W/stop
(for i in $(seq 600); do [ -e $W/stop ] && break; echo "$(date +%s.%N)" >> $O/run-starts.txt
   taskset -c 12-15 $B/bin/isn-bench --target 127.0.0.1:7621 --queries $W/queries.tsv --rate $RATE --duration 1 --warmup 0 \
   --deadline-ms 200 -k 10 --mode or --connections 16 --threads 4 --label swap 2>/dev/null >> $O/swap1s.jsonl; done) &
bp=$!
sleep 5
for target in ${TARGETS:-gen-b index}; do
  before=$(grep -c "gpu: the first stage serves generation [0-9a-f]* (" $O/isnd.log)
  ln -sfn $target $W/current.next && mv -T $W/current.next $W/current; echo "HUP $target $(date +%s.%N)"; kill -HUP $pid
  for i in $(seq 2400); do [ "$(grep -c "gpu: the first stage serves generation [0-9a-f]* (" $O/isnd.log)" -gt "$before" ] && break; sleep 0.1; done
  echo "moved to $target at $((SECONDS-T0)) s"
  sleep "$SETTLE"
done
touch $W/stop; wait $bp; touch $W/poll-stop; wait $poll
python3 - $O/swap1s.jsonl $O/run-starts.txt <<'PY'
import json, sys
starts = [float(x) for x in open(sys.argv[2])]
tot = {}
for i, l in enumerate(open(sys.argv[1])):
    r = json.loads(l); st = r["status"]
    for k, v in st.items(): tot[k] = tot.get(k, 0) + v
    tot["deadline_miss"] = tot.get("deadline_miss", 0) + r["deadline_miss"]
    bad = sum(v for k, v in st.items() if k != "ok")
    if bad or r["deadline_miss"] or i % 30 == 0:
        print(i, "%.3f" % starts[i] if i < len(starts) else "-", {k: v for k, v in st.items() if v}, "miss", r["deadline_miss"], "p99", r["latency_us"]["p99"] / 1e3)
print("total", tot)
PY
grep -E "SIGHUP|serves|freed|gpu:|generation" $O/isnd.log | tail -10 | cut -c1-400
python3 -c 'import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:7622/metrics").read().decode())' > $O/metrics-end.prom
grep -E "isn_gpu_prune|isn_scheduler_service_scale|isn_scheduler_routed" $O/metrics-end.prom | grep -v "^#"
kill $pid; wait $pid
