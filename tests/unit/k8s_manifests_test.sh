#!/usr/bin/env bash
# deploy/kubernetes/generate.py: the manifests it writes (CPU and GPU tiers of several sizes, and the
# example shipped in deploy/kubernetes/) pass kubernetes-validate --strict against the newest
# Kubernetes it knows and against 1.30 (the first with the preStop sleep action); a misspelled field is
# caught; the isn-agg.conf of the ConfigMap passes isn-agg --check-config with one dns: partition per
# StatefulSet; the shipped example is what the generator writes. kubernetes-validate (PyPI) is
# installed into a venv under the build folder on first use; where that cannot be done (no network),
# the test says so and skips.
set -euo pipefail
build=${BUILD:-build}
venv="$build/venv-k8s"
validator_version=1.37.0
if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "kubernetes-validate==$validator_version"; } >"$build/venv-k8s.log" 2>&1; then
    echo "k8s_manifests_test: SKIPPED: cannot install kubernetes-validate into $venv (see $build/venv-k8s.log)"
    exit 0
  fi
fi
validate() { "$venv/bin/kubernetes-validate" --strict --quiet "$@"; }
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-k8s.XXXXXX")
trap 'rm -rf "$work"' EXIT
gen=deploy/kubernetes/generate.py

python3 $gen --partitions 2 --replicas 2 --out "$work/cpu.yaml"
python3 $gen --partitions 4 --replicas 3 --gpu --runtime-class nvidia --namespace search --storage-class fast \
  --global-stats --ready-coverage 0.75 --out "$work/gpu.yaml"
python3 $gen --partitions 1 --replicas 1 --agg-replicas 1 --out "$work/one.yaml"
# TLS (issue 37): certificates from cert-manager, or from Secrets made elsewhere
python3 $gen --partitions 2 --replicas 2 --cert-manager-issuer isn-ca --namespace search --agg-client-certs \
  --out "$work/tls.yaml"
python3 $gen --partitions 3 --replicas 2 --gpu --tls-secret-isnd isnd-cert --tls-secret-agg agg-cert --out "$work/tls-secrets.yaml"
for k in "" 1.30.0; do
  validate ${k:+-k $k} "$work/cpu.yaml" "$work/gpu.yaml" "$work/one.yaml" deploy/kubernetes/example-2x2.yaml \
    "$work/tls.yaml" "$work/tls-secrets.yaml" deploy/kubernetes/example-2x2-tls.yaml
done

# the validator does reject a wrong manifest
sed 's/readinessProbe:/readinesProbe:/' "$work/cpu.yaml" >"$work/bad.yaml"
if validate "$work/bad.yaml" >/dev/null 2>&1; then
  echo "k8s_manifests_test: kubernetes-validate accepted a misspelled readinessProbe" >&2
  exit 1
fi

# what the manifests say
count() { grep -c "$1" "$2" || true; }
[ "$(count '^kind: "StatefulSet"' "$work/gpu.yaml")" = 4 ] || { echo "k8s_manifests_test: not 4 StatefulSets" >&2; exit 1; }
[ "$(count '^  replicas: 3$' "$work/gpu.yaml")" = 4 ] || { echo "k8s_manifests_test: not 3 replicas each" >&2; exit 1; }
[ "$(count '^kind: "PodDisruptionBudget"' "$work/gpu.yaml")" = 5 ] || { echo "k8s_manifests_test: PDBs missing" >&2; exit 1; }
[ "$(count 'clusterIP: "None"' "$work/gpu.yaml")" = 4 ] || { echo "k8s_manifests_test: headless Services missing" >&2; exit 1; }
[ "$(count 'nvidia.com/gpu: 1' "$work/gpu.yaml")" = 8 ] || { echo "k8s_manifests_test: GPU requests missing" >&2; exit 1; }
[ "$(count 'nvidia.com/gpu' "$work/cpu.yaml")" = 0 ] || { echo "k8s_manifests_test: a CPU tier asks for GPUs" >&2; exit 1; }
[ "$(count '^ *grpc:$' "$work/cpu.yaml")" = 9 ] || { echo "k8s_manifests_test: gRPC probes missing" >&2; exit 1; }
[ "$(count 'service: "liveness"' "$work/cpu.yaml")" = 2 ] || { echo "k8s_manifests_test: isn-agg's liveness probes" >&2; exit 1; }
[ "$(count 'prometheus.io/scrape: "true"' "$work/cpu.yaml")" = 3 ] || { echo "k8s_manifests_test: scrape annotations" >&2; exit 1; }
# NetworkPolicies: isnd's gRPC from isn-agg only, the stats ports from Prometheus only
[ "$(count '^kind: "NetworkPolicy"' "$work/cpu.yaml")" = 2 ] || { echo "k8s_manifests_test: NetworkPolicies missing" >&2; exit 1; }
python3 - "$work/cpu.yaml" <<'PY' || { echo "k8s_manifests_test: the NetworkPolicies admit the wrong peers" >&2; exit 1; }
import sys
text = open(sys.argv[1]).read().split("\n---\n")
isnd = next(d for d in text if 'kind: "NetworkPolicy"' in d and 'name: "isn-isnd"' in d)
rules = isnd.split("    - from:")[1:]
assert len(rules) == 2, rules
assert 'app.kubernetes.io/component: "isn-agg"' in rules[0] and "port: 7070" in rules[0], rules[0]
assert 'kubernetes.io/metadata.name: "monitoring"' in rules[1] and "port: 9090" in rules[1], rules[1]
PY
python3 $gen --no-network-policy | grep -q NetworkPolicy && { echo "k8s_manifests_test: --no-network-policy" >&2; exit 1; }
# with TLS: two Certificates (isn-agg's with its SPIFFE ID, for client auth too), the Secrets mounted,
# isnd requiring isn-agg's certificate, HTTPS probes and scrapes instead of plaintext gRPC probes
[ "$(count '^kind: "Certificate"' "$work/tls.yaml")" = 2 ] || { echo "k8s_manifests_test: Certificates missing" >&2; exit 1; }
[ "$(count '^kind: "Certificate"' "$work/tls-secrets.yaml")" = 0 ] || { echo "k8s_manifests_test: Certificates with Secrets given" >&2; exit 1; }
grep -q '"spiffe://cluster.local/ns/search/sa/isn-agg"' "$work/tls.yaml" || { echo "k8s_manifests_test: isn-agg's SPIFFE ID" >&2; exit 1; }
grep -q '"client auth"' "$work/tls.yaml" || { echo "k8s_manifests_test: isn-agg's certificate is no client certificate" >&2; exit 1; }
[ "$(count '"server.tls_allowed_peers=spiffe://cluster.local/ns/search/sa/isn-agg"' "$work/tls.yaml")" = 2 ] ||
  { echo "k8s_manifests_test: isnd does not require isn-agg's certificate" >&2; exit 1; }
[ "$(count 'secretName: "isnd-cert"' "$work/tls-secrets.yaml")" = 3 ] || { echo "k8s_manifests_test: isnd's Secret not mounted" >&2; exit 1; }
[ "$(count '^ *grpc:$' "$work/tls.yaml")" = 0 ] || { echo "k8s_manifests_test: plaintext gRPC probes on TLS ports" >&2; exit 1; }
[ "$(count 'scheme: "HTTPS"' "$work/tls.yaml")" = 9 ] || { echo "k8s_manifests_test: HTTPS probes missing" >&2; exit 1; }
[ "$(count 'prometheus.io/scheme: "https"' "$work/tls.yaml")" = 3 ] || { echo "k8s_manifests_test: HTTPS scrapes" >&2; exit 1; }
python3 $gen --partitions 2 --cert-manager-issuer isn-ca --agg-client-certs --agg-config >"$work/isn-agg-tls.conf"
"$build/bin/isn-agg" --config "$work/isn-agg-tls.conf" --check-config | grep -q "configuration OK: 2 partitions"
grep -q '^tls_server_name = isn-isnd.default.svc$' "$work/isn-agg-tls.conf"
if python3 $gen --tls-secret-isnd a >/dev/null 2>&1 || python3 $gen --agg-client-certs >/dev/null 2>&1; then
  echo "k8s_manifests_test: the generator took TLS arguments it must refuse" >&2
  exit 1
fi
python3 $gen --partitions 4 --replicas 3 --namespace search --agg-config >"$work/isn-agg.conf"
"$build/bin/isn-agg" --config "$work/isn-agg.conf" --check-config | grep -q "configuration OK: 4 partitions"
grep -q '^partition = dns:isn-part-3.search.svc.cluster.local.:7070$' "$work/isn-agg.conf"

# refused: more replicas than isn-agg keeps, a preStop shorter than the DNS interval
if python3 $gen --replicas 9 >/dev/null 2>&1 || python3 $gen --prestop-seconds 1 --dns-interval-ms 2000 >/dev/null 2>&1; then
  echo "k8s_manifests_test: the generator took arguments it must refuse" >&2
  exit 1
fi

# the shipped example is the generator's output
python3 $gen --partitions 2 --replicas 2 --out "$work/example.yaml"
sed -i 's|--out [^ ]*example.yaml|--out deploy/kubernetes/example-2x2.yaml|' "$work/example.yaml"
diff -u deploy/kubernetes/example-2x2.yaml "$work/example.yaml" >&2 ||
  { echo "k8s_manifests_test: deploy/kubernetes/example-2x2.yaml is stale: run $gen --out deploy/kubernetes/example-2x2.yaml" >&2; exit 1; }
python3 $gen --partitions 2 --replicas 2 --cert-manager-issuer isn-ca --out "$work/example-tls.yaml"
sed -i 's|--out [^ ]*example-tls.yaml|--out deploy/kubernetes/example-2x2-tls.yaml|' "$work/example-tls.yaml"
diff -u deploy/kubernetes/example-2x2-tls.yaml "$work/example-tls.yaml" >&2 ||
  { echo "k8s_manifests_test: deploy/kubernetes/example-2x2-tls.yaml is stale: run $gen --partitions 2 --replicas 2 --cert-manager-issuer isn-ca --out deploy/kubernetes/example-2x2-tls.yaml" >&2; exit 1; }
echo "k8s_manifests_test: CPU 2x2, GPU 4x3, 1x1, TLS (cert-manager, Secrets) and the examples pass kubernetes-validate $validator_version --strict (newest and 1.30); isn-agg takes the ConfigMap"
