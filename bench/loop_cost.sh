#!/usr/bin/env bash
# What one request costs isnd's event loop, in CPU time of the loop's thread (its schedstat run time,
# which counts only the time it held a core, so other processes on a busy machine change it little):
# the trivial one-term Search on the sample index, answered (OK) and refused at HEADERS
# (RESOURCE_EXHAUSTED by admission before any body is read: the request carries grpc-timeout 1n, so no
# device could start it before its deadline), each sent N times by h2load on CONNECTIONS connections
# with STREAMS in flight on each, in three regimes: "closed" (as fast as they are answered: the loop
# takes many requests per read and many replies per write, as a saturated loop does), "paced" (RATE
# requests/s in all: few per read, a wake per reply) and "single" (closed loop, SINGLE_CONNECTIONS
# connections of one stream each: one request per read and one reply per write, as isn-bench's
# Poisson arrivals spread over many connections bring them). Plaintext, and with TLS=1 also over TLS.
# A third kind, mixed, sends every other request to a method isnd does not have (UNIMPLEMENTED at
# HEADERS), the rest answered, on the same connections: per request of either. Prints JSON: for each
# build (BUILDS, several for an A/B comparison, run in alternating rounds), mode, regime and kind, the
# loop's microseconds per request in every round and their median.
#
#   bash bench/loop_cost.sh                        (make loop-cost: build/, plaintext and TLS)
#   BUILDS="old-build build" ROUNDS=7 bash bench/loop_cost.sh
#
# Settings (environment): BUILDS (build directories holding bin/isnd, default build), INDEX (default
# build/sample/index: make sample-index), QUERY ("zeppelin": three packages), N (requests per run,
# 40000), CONNECTIONS (8), STREAMS (16), REGIMES ("closed paced"), RATE (the paced regime's requests/s,
# 20000, h2load --rps RATE/CONNECTIONS), SINGLE_CONNECTIONS (64), KINDS ("answered refused mixed"), ROUNDS (5), TLS (1: TLS runs too), ISND_CPUS / BENCH_CPUS (taskset lists),
# ISND_ARGS (more isnd flags), LOOP_CPU and WORKER_CPUS (the loop's thread alone on LOOP_CPU and isnd's
# other threads on WORKER_CPUS, as on a host where loops and workers have cores of their own). Queries are analysed on the worker, not on the loop, as on a node with a
# GPU or enough workers (scheduler.analysis_min_workers=1): what is measured is the front end's part.
set -euo pipefail
BUILDS=${BUILDS:-build}
INDEX=${INDEX:-build/sample/index}
QUERY=${QUERY:-zeppelin}
N=${N:-40000}
CONNECTIONS=${CONNECTIONS:-8}
STREAMS=${STREAMS:-16}
RATE=${RATE:-20000}
REGIMES=${REGIMES:-closed paced single}
KINDS=${KINDS:-answered refused mixed}
SINGLE_CONNECTIONS=${SINGLE_CONNECTIONS:-64}
ROUNDS=${ROUNDS:-5}
TLS=${TLS:-1}
PIN_ISND=(); [ -n "${ISND_CPUS:-}" ] && PIN_ISND=(taskset -c "$ISND_CPUS")
PIN_BENCH=(); [ -n "${BENCH_CPUS:-}" ] && PIN_BENCH=(taskset -c "$BENCH_CPUS")
command -v h2load >/dev/null || { echo "loop_cost: h2load missing (apt-get install nghttp2-client)" >&2; exit 2; }
[ -f "$INDEX/index.isn" ] || { echo "loop_cost: no index at $INDEX (make sample-index)" >&2; exit 2; }
for b in $BUILDS; do
  [ -x "$b/bin/isnd" ] || { echo "loop_cost: no $b/bin/isnd (make programs)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/isn_loop_cost.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
[ "$TLS" = 1 ] && bash "$(dirname "$0")/../tests/support/tls_certs.sh" "$work/certs" >/dev/null

# SearchRequest{query: QUERY, k: 10}, framed: flags 0, the length, then the protobuf bytes.
python3 - "$QUERY" "$work/request.bin" <<'PY'
import struct, sys
q = sys.argv[1].encode()
body = b"\x0a" + bytes([len(q)]) + q + b"\x18\x0a"
open(sys.argv[2], "wb").write(b"\x00" + struct.pack(">I", len(body)) + body)
PY

start() { # BUILD MODE: one isnd with one loop; sets port, stats, scheme
  local build=$1 mode=$2 tls=()
  scheme=http
  if [ "$mode" = tls ]; then
    tls=(--set "server.tls_cert=$work/certs/server.crt" --set "server.tls_key=$work/certs/server.key")
    scheme=https
  fi
  rm -f "$work/isnd.log" # the last isnd's "ready:" must not be taken for this one's
  "${PIN_ISND[@]}" "$build/bin/isnd" --index "$INDEX" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 --workers 1 \
    --set server.loops=1 --set search.max_queue=100000 --set server.max_connections=100000 \
    --set scheduler.analysis_min_workers=1 "${tls[@]}" ${ISND_ARGS:-} 2>"$work/isnd.log" &
  pid=$!
  for _ in $(seq 1 400); do grep -qs "ready:" "$work/isnd.log" && break; sleep 0.05; done
  grep -q "ready:" "$work/isnd.log" || { cat "$work/isnd.log" >&2; exit 1; }
  if [ -n "${LOOP_CPU:-}" ]; then # the loop (isnd's main thread) alone on LOOP_CPU, the rest on WORKER_CPUS
    for task in /proc/$pid/task/*; do
      tid=${task##*/}
      if [ "$tid" = "$pid" ]; then taskset -p -c "$LOOP_CPU" "$tid" >/dev/null; else taskset -p -c "$WORKER_CPUS" "$tid" >/dev/null; fi
    done
  fi
  port=$(sed -n 's/.*gRPC listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/isnd.log")
  stats=$(sed -n 's|.*stats listening on https*://127.0.0.1:\([0-9]*\).*|\1|p' "$work/isnd.log")
}
stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=""; }

# The loop's CPU time in ns: with server.loops=1 the loop runs on isnd's main thread.
loop_ns() { cut -d' ' -f1 "/proc/$pid/task/$pid/schedstat"; }
metrics() {
  python3 - "$stats" "$scheme" "$work/certs/ca.crt" <<'PY'
import ssl, sys, urllib.request
port, scheme, ca = sys.argv[1:4]
context = ssl.create_default_context(cafile=ca) if scheme == "https" else None
sys.stdout.write(urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/metrics", context=context).read().decode())
PY
}
search_counts() { # "ok refused_at_headers other all": Searches answered, refused at HEADERS, other; every request
  metrics | awk '/^isn_requests_total\{method="isn.v1.Search\/Search"/ { if ($0 ~ /code="OK"/) ok += $2; else other += $2 }
    /^isn_requests_total\{/ { all += $2 }
    /^isn_shed_at_headers_total / { headers = $2 } END { printf "%d %d %d %d\n", ok, headers, other - headers, all }'
}

one_run() { # BUILD MODE REGIME KIND ROUND: prints one JSON line
  local build=$1 mode=$2 regime=$3 kind=$4 round=$5 timeout=() rps=() c=$CONNECTIONS m=$STREAMS targets=()
  [ "$kind" = refused ] && timeout=(-H 'grpc-timeout: 1n')
  [ "$regime" = paced ] && rps=(--rps=$(( (RATE + CONNECTIONS - 1) / CONNECTIONS )))
  [ "$regime" = single ] && c=$SINGLE_CONNECTIONS m=1
  start "$build" "$mode"
  if [ "$kind" = mixed ]; then # every other request to a method isnd does not have: UNIMPLEMENTED at HEADERS
    printf '%s\n' "$scheme://127.0.0.1:$port/isn.v1.Search/Search" "$scheme://127.0.0.1:$port/isn.v1.Search/NoSuchMethod" \
      >"$work/uris"
    targets=(-i "$work/uris")
  else
    targets=("$scheme://127.0.0.1:$port/isn.v1.Search/Search")
  fi
  # a warm-up: pools, HPACK tables and allocator caches filled as in steady state
  "${PIN_BENCH[@]}" h2load -n 2000 -c "$c" -m "$m" -t 1 -d "$work/request.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' "${timeout[@]}" "${targets[@]}" >/dev/null 2>&1
  local before after ns0 ns1 t0 t1
  before=$(search_counts)
  ns0=$(loop_ns)
  t0=$(date +%s%N)
  "${PIN_BENCH[@]}" h2load -n "$N" -c "$c" -m "$m" -t 1 -d "$work/request.bin" "${rps[@]}" \
    -H 'content-type: application/grpc' -H 'te: trailers' "${timeout[@]}" "${targets[@]}" >"$work/h2load.out" 2>&1
  t1=$(date +%s%N)
  ns1=$(loop_ns)
  after=$(search_counts)
  stop
  python3 - "$build" "$mode" "$regime" "$kind" "$round" "$before" "$after" "$ns0" "$ns1" "$t0" "$t1" "$work/h2load.out" <<'PY'
import json, re, sys
build, mode, regime, kind, rnd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
before, after = [int(x) for x in sys.argv[6].split()], [int(x) for x in sys.argv[7].split()]
ns0, ns1, t0, t1 = (int(x) for x in sys.argv[8:12])
ok, refused, other, every = (a - b for a, b in zip(after, before))
text = open(sys.argv[12]).read()
done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", text)
wanted = {"answered": ok, "refused": refused, "mixed": every}[kind]
print(json.dumps({"build": build, "mode": mode, "regime": regime, "kind": kind, "round": rnd, "requests": wanted, "ok": ok,
                  "refused_at_headers": refused, "other": other, "all_methods": every,
                  "h2load_done": int(done.group(1)) if done else 0,
                  "loop_cpu_s": (ns1 - ns0) / 1e9, "wall_s": (t1 - t0) / 1e9,
                  "loop_us_per_request": round((ns1 - ns0) / 1e3 / wanted, 3) if wanted else None}))
PY
}

modes=(plain); [ "$TLS" = 1 ] && modes+=(tls)
: >"$work/runs.jsonl"
for r in $(seq 1 "$ROUNDS"); do
  for mode in "${modes[@]}"; do
    for regime in $REGIMES; do
      for kind in $KINDS; do
        for b in $BUILDS; do one_run "$b" "$mode" "$regime" "$kind" "$r" >>"$work/runs.jsonl"; done
      done
    done
  done
done

python3 - "$work/runs.jsonl" "$BUILDS" "$QUERY" "$N" "$CONNECTIONS" "$STREAMS" "$RATE" "$(nproc)" "$SINGLE_CONNECTIONS" \
  "${ISND_CPUS:-}" "${BENCH_CPUS:-}" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
builds = sys.argv[2].split()
result = {"benchmark": "loop_cost", "query": f"{sys.argv[3]}, k=10, sample index", "loops": 1, "workers": 1,
          "requests_per_run": int(sys.argv[4]), "connections": int(sys.argv[5]), "streams_per_connection": int(sys.argv[6]),
          "paced_per_s": int(sys.argv[7]), "single_connections": int(sys.argv[9]), "machine_cores": int(sys.argv[8]),
          "isnd_cpus": sys.argv[10] or "all", "bench_cpus": sys.argv[11] or "all",
          "measure": "CPU time of the loop thread (schedstat) / requests of the kind (isnd's counters)",
          "builds": {}}
problems = []
for b in builds:
    out = {}
    for mode in sorted({r["mode"] for r in runs}):
        out[mode] = {}
        for regime in sorted({r["regime"] for r in runs}):
            per = {}
            for kind in [k for k in ("answered", "refused", "mixed") if any(r["kind"] == k for r in runs)]:
                sel = [r for r in runs if r["build"] == b and r["mode"] == mode and r["regime"] == regime and r["kind"] == kind]
                for r in sel:
                    if r["other"] or r["requests"] < 0.99 * int(sys.argv[4]):
                        problems.append(f"{b} {mode} {regime} {kind} round {r['round']}: {r['requests']} {kind}, {r['other']} other")
                vals = [r["loop_us_per_request"] for r in sel if r["loop_us_per_request"]]
                per[kind] = {"loop_us_per_request": vals, "median": round(statistics.median(vals), 3) if vals else None}
            if "answered" in per and "refused" in per and per["answered"]["median"] and per["refused"]["median"]:
                per["refused_over_answered"] = round(per["refused"]["median"] / per["answered"]["median"], 3)
            out[mode][regime] = per
    result["builds"][b] = out
if len(builds) > 1:  # each later build against the first, kind by kind
    first = result["builds"][builds[0]]
    result["ratio_to_first"] = {b: {f"{m} {g} {k}": round(result["builds"][b][m][g][k]["median"] / first[m][g][k]["median"], 3)
                                    for m in first for g in first[m] for k in ("answered", "refused", "mixed")
                                    if k in first[m][g] and first[m][g][k]["median"] and result["builds"][b][m][g][k]["median"]}
                                for b in builds[1:]}
result["problems"] = problems
print(json.dumps(result, indent=2))
PY
