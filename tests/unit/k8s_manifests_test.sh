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
for k in "" 1.30.0; do
  validate ${k:+-k $k} "$work/cpu.yaml" "$work/gpu.yaml" "$work/one.yaml" deploy/kubernetes/example-2x2.yaml
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
echo "k8s_manifests_test: CPU 2x2, GPU 4x3, 1x1 and the example pass kubernetes-validate $validator_version --strict (newest and 1.30); isn-agg takes the ConfigMap"
