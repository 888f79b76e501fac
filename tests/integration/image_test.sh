#!/usr/bin/env bash
# The image of `make image` runs under podman on loopback and answers the stock Python grpcio client:
# the image's isn-index builds an index of examples/docs.tsv (as the image's non-root user), the
# image's isnd serves it, the image's isn-agg finds it by DNS (--partition dns:localhost:PORT, the
# container's /etc/hosts) and aggregates it; grpcio asks both for Health (SERVING) and a Search, whose
# hits must equal the host's isn-query on the same index. Skips, saying why, where podman is missing,
# the image was not built, or podman cannot run a container here. `make image-test` runs it.
set -euo pipefail
image=${IMAGE:-localhost/isn:0.1.0}
build=${BUILD:-build}
skip() { echo "image_test: SKIPPED: $*"; exit 0; }
command -v podman >/dev/null 2>&1 || skip "podman is not installed (make image installs it)"
podman image exists "$image" || skip "no image $image (make image builds it)"

# How podman runs containers here: plainly, else with runc and cgroupfs, and limits this process may
# set (a container in a container: crun refuses cgroups v1/v2 hybrids, and setrlimit above our own
# limits needs CAP_SYS_RESOURCE).
nofile=$(ulimit -n)
ways=("podman run" "podman --runtime runc --cgroup-manager=cgroupfs run --ulimit nofile=$nofile:$nofile --ulimit nproc=1024:1024")
run=""
for way in "${ways[@]}"; do
  if out=$($way --rm --network=host "$image" --version 2>&1) && [[ $out == isnd* ]]; then
    run=$way
    break
  fi
  why=$out
done
[ -n "$run" ] || skip "podman cannot run a container here: ${why:-unknown}"

work=$(mktemp -d "${TMPDIR:-/tmp}/isn-image.XXXXXX")
names=()
cleanup() {
  for n in "${names[@]}"; do podman rm -f "$n" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
chmod 0777 "$work"
cp examples/docs.tsv "$work/"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# the image's isn-index, as its user (uid 65532), into a host folder
$run --rm --network=none -v "$work:/work" --entrypoint /usr/bin/isn-index "$image" \
  build --quiet --input /work/docs.tsv --format tsv --out /work/index >/dev/null
[ -f "$work/index/index.isn" ] || { echo "image_test: the image's isn-index wrote no index" >&2; exit 1; }

isnd_port=$(free_port) isnd_stats=$(free_port) agg_port=$(free_port) agg_stats=$(free_port)
isnd_name="isn-image-test-isnd-$$" agg_name="isn-image-test-agg-$$"
names+=("$isnd_name" "$agg_name")
$run -d --name "$isnd_name" --network=host -v "$work/index:/var/lib/isn/index:ro" "$image" \
  --index /var/lib/isn/index --listen "127.0.0.1:$isnd_port" --stats-listen "127.0.0.1:$isnd_stats" >/dev/null
$run -d --name "$agg_name" --network=host --entrypoint /usr/bin/isn-agg "$image" \
  --listen "127.0.0.1:$agg_port" --stats-listen "127.0.0.1:$agg_stats" --partition "dns:localhost:$isnd_port" \
  --set dns_interval_ms=500 >/dev/null
for i in $(seq 1 150); do
  if curl -sf "http://127.0.0.1:$agg_stats/readyz" >/dev/null 2>&1; then break; fi
  sleep 0.2
done
if ! curl -sf "http://127.0.0.1:$agg_stats/readyz" >/dev/null; then
  echo "image_test: isn-agg in the image did not become ready; logs:" >&2
  podman logs "$isnd_name" >&2 || true
  podman logs "$agg_name" >&2 || true
  exit 1
fi

query="boundary layer"
printf 'q1\t%s\n' "$query" >"$work/queries.tsv"
"$build/bin/isn-query" --index "$work/index" -k 5 --queries "$work/queries.tsv" | awk '{print $3}' >"$work/expected"
# Debian's python3 has python3-grpcio and python3-grpc-tools (another python3 may come first in PATH)
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
$py - "$isnd_port" "$agg_port" "$work" "$query" <<'PY'
import os, sys
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
import grpc
from grpc_tools import protoc
isnd_port, agg_port, work, query = sys.argv[1:5]
stubs = os.path.join(work, "py_stubs")
os.makedirs(stubs, exist_ok=True)
for name in ("isn.proto", "health.proto"):
    if protoc.main(["protoc", "-Iproto", f"--python_out={stubs}", f"--grpc_python_out={stubs}", f"proto/{name}"]) != 0:
        sys.exit(f"image_test: protoc failed on {name}")
sys.path.insert(0, stubs)
import isn_pb2, isn_pb2_grpc, health_pb2, health_pb2_grpc
answers = {}
for who, port in (("isnd", isnd_port), ("isn-agg", agg_port)):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=10)
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    if health.status != health_pb2.HealthCheckResponse.SERVING:
        sys.exit(f"image_test: {who} in the image says {health.status}, not SERVING")
    reply = isn_pb2_grpc.SearchStub(channel).Search(isn_pb2.SearchRequest(query=query, k=5), timeout=5)
    if not reply.hits or not reply.complete:
        sys.exit(f"image_test: {who} in the image: {len(reply.hits)} hits, complete={reply.complete}")
    answers[who] = [h.external_id for h in reply.hits]
if answers["isnd"] != answers["isn-agg"]:
    sys.exit(f"image_test: isnd {answers['isnd']} and isn-agg {answers['isn-agg']} differ")
with open(os.path.join(work, "answer"), "w") as f:
    f.write("\n".join(answers["isnd"]) + "\n")
print(f"image_test: grpcio: isnd and isn-agg in the image are SERVING and answer {answers['isnd']}")
PY
# the same hits as the host's isn-query on the same index
diff -u "$work/expected" "$work/answer" >&2 || { echo "image_test: the image's answer differs from isn-query's" >&2; exit 1; }
size=$(podman image inspect "$image" --format '{{.Size}}')
user=$(podman image inspect "$image" --format '{{.Config.User}}')
version=$(podman image inspect "$image" --format '{{index .Config.Labels "org.opencontainers.image.version"}}')
[ "$user" = "65532:65532" ] || { echo "image_test: the image runs as \"$user\", not the non-root isn user" >&2; exit 1; }
echo "image_test: $image ($((size / 1024)) KiB, version $version, user $user) ran under '$run': isn-index, isnd and isn-agg (DNS discovery) answered grpcio"
