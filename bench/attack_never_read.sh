#!/usr/bin/env bash
# Clients that never read, against isnd or isn-agg (issue 16): CONNECTIONS x STREAMS Search requests
# with big replies (k=K on a broad QUERY) from connections with an HTTP/2 window of 0 that read nothing
# for HOLD seconds (past the default 30 s write_timeout, so the server is the one that closes them). The
# target's RSS (VmRSS) is sampled every 50 ms from before the attack to AFTER seconds after it; a normal
# client (isn-query --server) searches every 0.5 s during the attack; then SIGTERM and the target's exit
# status. With -t agg the targets are isn-agg binaries, each in front of one isnd (BACKEND) serving
# INDEX, with the memory budget (-b, in MiB) and a 30 s default deadline so that the replies are built.
# Each target given (LABEL=PATH) runs REPEATS times, interleaved (a, b, a, b, ...); one JSON line per
# run, then one JSON line with the medians per label.
#   usage: bench/attack_never_read.sh [-t isnd|agg] [-b BUDGET] [-r REPEATS] LABEL=BINARY [LABEL=BINARY ...]
#   env:   BUILD (build), INDEX ($BUILD/sample/index), CONNECTIONS (20), STREAMS (256), K (1000),
#          QUERY (library), FIELD (a stored field each hit brings back: bigger replies; none), HOLD (35),
#          AFTER (10), BACKEND (-t agg: the isnd behind it; $BUILD/bin/isnd)
set -euo pipefail
BUILD=${BUILD:-build}
INDEX=${INDEX:-$BUILD/sample/index}
CONNECTIONS=${CONNECTIONS:-20} STREAMS=${STREAMS:-256} K=${K:-1000} QUERY=${QUERY:-library}
HOLD=${HOLD:-35} AFTER=${AFTER:-10} FIELD=${FIELD:-}
BUDGET=256MiB REPEATS=3 TARGET=isnd
BACKEND=${BACKEND:-$BUILD/bin/isnd}
export INDEX K FIELD
while getopts "t:b:r:" opt; do
    case $opt in
        t) TARGET=$OPTARG ;;
        b) BUDGET=$OPTARG ;;
        r) REPEATS=$OPTARG ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
usage="usage: $0 [-t isnd|agg] [-b BUDGET] [-r REPEATS] LABEL=BINARY ..."
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
case $TARGET in
    isnd) ;;
    agg) [[ $BUDGET =~ ^[0-9]+MiB$ ]] || { echo "$0: -t agg takes the budget in MiB (64MiB)" >&2; exit 2; }
         [ -x "$BACKEND" ] || { echo "$0: $BACKEND missing (make $BACKEND)" >&2; exit 2; } ;;
    *) echo "$usage" >&2; exit 2 ;;
esac
ATTACK=$BUILD/bench/attack_never_read QUERY_BIN=$BUILD/bin/isn-query
for f in "$ATTACK" "$QUERY_BIN" "$INDEX/index.isn"; do
    [ -e "$f" ] || { echo "$0: $f missing (make $ATTACK $QUERY_BIN sample-index)" >&2; exit 2; }
done

WORK=$(mktemp -d)
TARGET_PID= BACKEND_PID=
cleanup() {
    [ -n "$TARGET_PID" ] && kill -9 "$TARGET_PID" 2>/dev/null
    [ -n "$BACKEND_PID" ] && kill -9 "$BACKEND_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
gauge() {
    local v
    v=$(curl -s --max-time 1 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 ~ ("_" m "$") {print $2; exit}')
    echo "${v:-0}"
}

# Starts the target (isnd, or isn-agg in front of a BACKEND isnd) on port and sport, TARGET_PID its pid.
start_target() {
    local binary=$1 port=$2 sport=$3 dir=$4
    if [ "$TARGET" = isnd ]; then
        printf '[server]\nmemory_budget = %s\n' "$BUDGET" >"$dir/isnd.conf"
        "$binary" --config "$dir/isnd.conf" --index "$INDEX" --listen "127.0.0.1:$port" \
            --stats-listen "127.0.0.1:$sport" >"$dir/target.log" 2>&1 &
        TARGET_PID=$!
        return
    fi
    local bport=$((port + 2))
    "$BACKEND" --index "$INDEX" --listen "127.0.0.1:$bport" --stats-listen "" >"$dir/backend.log" 2>&1 &
    BACKEND_PID=$!
    "$QUERY_BIN" --server "127.0.0.1:$bport" --wait-ready 60 -k 10 "image editor" >/dev/null
    "$binary" --listen "127.0.0.1:$port" --stats-listen "127.0.0.1:$sport" --partition "127.0.0.1:$bport" --no-hedge \
        --set "memory_budget_mib=${BUDGET%MiB}" --set default_timeout_ms=30000 >"$dir/target.log" 2>&1 &
    TARGET_PID=$!
}

# One run: label, target binary; prints one JSON line.
run_once() {
    local label=$1 binary=$2 port=$((20000 + RANDOM % 20000)) sport
    sport=$((port + 1))
    local dir=$WORK/$label.$RANDOM
    mkdir -p "$dir"
    start_target "$binary" "$port" "$sport" "$dir"
    "$QUERY_BIN" --server "127.0.0.1:$port" --wait-ready 60 -k 10 "image editor" >/dev/null
    "$QUERY_BIN" --server "127.0.0.1:$port" -k "$K" ${FIELD:+--fields "$FIELD"} "$QUERY" >/dev/null # warm: the pools a reply needs
    sleep 1
    local baseline
    baseline=$(rss_kib "$TARGET_PID")

    # Samplers: RSS every 50 ms, the budget gauge every 200 ms, until told to stop.
    (while [ ! -e "$dir/stop" ]; do echo "$(date +%s%3N) $(rss_kib "$TARGET_PID")"; sleep 0.05; done) >"$dir/rss" &
    local rss_sampler=$!
    (while [ ! -e "$dir/stop" ]; do
        echo "$(gauge "$sport" request_memory_bytes) $(gauge "$sport" heap_allocated_bytes)"
        sleep 0.2
    done) >"$dir/gauge" &
    local gauge_sampler=$!

    "$ATTACK" "$port" "$CONNECTIONS" "$STREAMS" "$K" "$HOLD" "$QUERY" ${FIELD:+"$FIELD"} >"$dir/attack.json" &
    local attack=$! ok=0 failed=0
    : >"$dir/client.err"
    while kill -0 "$attack" 2>/dev/null; do
        if timeout 5 "$QUERY_BIN" --server "127.0.0.1:$port" -k 10 "image editor" >/dev/null 2>>"$dir/client.err"; then
            ok=$((ok + 1))
        else
            failed=$((failed + 1))
        fi
        sleep 0.5
    done
    wait "$attack"
    local attack_end over_budget
    attack_end=$(date +%s%3N)
    sleep "$AFTER"
    touch "$dir/stop"
    wait "$rss_sampler" "$gauge_sampler"
    over_budget=$(gauge "$sport" over_memory_budget_total)
    kill -TERM "$TARGET_PID"
    local status=0
    wait "$TARGET_PID" || status=$?
    TARGET_PID=
    if [ -n "$BACKEND_PID" ]; then
        kill -TERM "$BACKEND_PID"
        wait "$BACKEND_PID" || true
        BACKEND_PID=
    fi

    python3 - "$TARGET" "$label" "$BUDGET" "$baseline" "$attack_end" "$dir" "$ok" "$failed" "$status" "${over_budget:-0}" <<'PY'
import json, os, sys
target, label, budget, baseline, attack_end, d, ok, failed, status, over = sys.argv[1:]
samples = [tuple(map(int, l.split())) for l in open(d + "/rss") if len(l.split()) == 2]
during = [r for t, r in samples if t <= int(attack_end)]
after = [r for t, r in samples if t > int(attack_end)]
gauges = [list(map(float, l.split())) for l in open(d + "/gauge") if len(l.split()) == 2]
print(json.dumps({
    "target": target, "label": label, "memory_budget": budget, "index": os.environ["INDEX"], "k": int(os.environ["K"]),
    "stored_field": os.environ["FIELD"],
    "baseline_rss_mib": round(int(baseline) / 1024, 1),
    "peak_rss_mib": round(max(during) / 1024, 1),
    "rss_after_mib": round(after[-1] / 1024, 1) if after else None,
    "peak_request_memory_mib": round(max(g[0] for g in gauges) / 2**20, 1) if gauges else None,
    "peak_heap_allocated_mib": round(max(g[1] for g in gauges) / 2**20, 1) if gauges else None,
    "over_memory_budget_total": int(float(over)),
    "attack": json.load(open(d + "/attack.json")),
    "normal_client_ok": int(ok), "normal_client_failed": int(failed),
    "normal_client_errors": sorted(set(l.strip()[:160] for l in open(d + "/client.err") if l.strip()))[:5],
    "exit_status": int(status), "rss_samples": len(samples)}))
PY
}

RUNS=$WORK/runs.jsonl
for ((r = 0; r < REPEATS; r++)); do
    for spec in "$@"; do
        run_once "${spec%%=*}" "${spec#*=}" | tee -a "$RUNS"
    done
done
python3 - "$RUNS" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
out = {}
for label in dict.fromkeys(r["label"] for r in runs):
    rs = [r for r in runs if r["label"] == label]
    med = lambda key: statistics.median(r[key] for r in rs)
    out[label] = {"runs": len(rs), "target": rs[0]["target"], "memory_budget": rs[0]["memory_budget"],
                  **{"median_" + k: med(k) for k in ("baseline_rss_mib", "peak_rss_mib", "rss_after_mib",
                                                      "peak_request_memory_mib", "peak_heap_allocated_mib", "normal_client_ok",
                                                      "normal_client_failed")},
                  "max_peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
                  "exit_statuses": [r["exit_status"] for r in rs]}
print(json.dumps({"medians": out}))
PY
