#!/usr/bin/env bash
# make image: an OCI image of isnd, isn-agg, isn-index and isn-query, built offline with podman from
# the binaries of `make STATIC=1` (no base image is pulled: FROM scratch plus the programs, the
# shared libraries they still load — glibc and libsystemd with its own — and /etc/passwd, /etc/group
# and /etc/nsswitch.conf for the non-root user "isn", uid 65532). Labelled with the version
# (org.opencontainers.image.*). Prints the image's size.
#
#   deploy/image/build.sh BUILD_DIR TAG [--gpu]
#
# --gpu: the binaries of `make CUDA=1 STATIC=1 BUILD=build-gpu` (CUDA runtime linked in statically).
# The host then needs the NVIDIA driver and the NVIDIA container toolkit, which mounts the driver's
# libcuda into the container (NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES below; in
# Kubernetes, the NVIDIA device plugin and an nvidia.com/gpu request: deploy/kubernetes/generate.py --gpu).
set -euo pipefail
build=${1:?usage: build.sh BUILD_DIR TAG [--gpu]}
tag=${2:?usage: build.sh BUILD_DIR TAG [--gpu]}
gpu=0
[ "${3:-}" = "--gpu" ] && gpu=1
version=$(sed -n 's/^#define ISND_VERSION "\(.*\)"$/\1/p' daemon/server.h)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
programs=(isnd isn-agg isn-index isn-query)
uid=65532

if ! command -v podman >/dev/null 2>&1; then
  echo "build.sh: podman is not installed (tools/setup-deps.sh podman installs it)" >&2
  exit 1
fi
context="$build/image"
root="$context/rootfs"
rm -rf "$context"
mkdir -p "$root/usr/bin" "$root/etc" "$root/var/lib/isn" "$root/tmp"
chmod 1777 "$root/tmp"
for p in "${programs[@]}"; do
  [ -x "$build/bin/$p" ] || { echo "build.sh: $build/bin/$p is missing (make STATIC=1 BUILD=$build)" >&2; exit 1; }
  install -m 0755 "$build/bin/$p" "$root/usr/bin/$p"
  strip --strip-debug "$root/usr/bin/$p"
done

# What the programs still load at run time: the loader and the libraries ldd names, each at the
# path the loader looks for it (the file the symbolic link names, copied under the link's name).
libs=$(for p in "${programs[@]}"; do ldd "$build/bin/$p"; done | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | sort -u)
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# /lib64/ld-linux-x86-64.so.2 is what the programs name as interpreter
interp=$(readelf -l "$build/bin/isnd" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
if [ -n "$interp" ] && [ ! -e "$root$interp" ]; then
  mkdir -p "$root$(dirname "$interp")"
  cp -L "$interp" "$root$interp"
fi

printf 'root:x:0:0:root:/:/nonexistent\nisn:x:%d:%d:isn:/var/lib/isn:/nonexistent\n' $uid $uid >"$root/etc/passwd"
printf 'root:x:0:\nisn:x:%d:\n' $uid >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"

gpu_lines=""
suffix=""
if [ $gpu = 1 ]; then
  suffix=" (GPU: needs the NVIDIA driver and the NVIDIA container toolkit on the host)"
  gpu_lines=$'ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility\nLABEL org.isn.gpu.requires="NVIDIA driver >= 535 (CUDA 12), NVIDIA container toolkit; Kubernetes: NVIDIA device plugin, nvidia.com/gpu"'
fi
cat >"$context/Containerfile" <<EOF
FROM scratch
COPY rootfs/ /
USER $uid:$uid
WORKDIR /var/lib/isn
EXPOSE 7070 9090 8070 8090
ENTRYPOINT ["/usr/bin/isnd"]
CMD ["--index", "/var/lib/isn/index", "--listen", "0.0.0.0:7070", "--stats-listen", "0.0.0.0:9090"]
$gpu_lines
LABEL org.opencontainers.image.title="isn" \\
      org.opencontainers.image.description="ISN index-serving node: isnd, isn-agg, isn-index, isn-query$suffix" \\
      org.opencontainers.image.version="$version" \\
      org.opencontainers.image.revision="$revision" \\
      org.opencontainers.image.source="https://example.org/isn" \\
      org.opencontainers.image.licenses="NOASSERTION"
EOF
# offline: FROM scratch pulls nothing, and the build runs no command (no network needed)
podman build --quiet --network=none --pull=never -t "$tag" -f "$context/Containerfile" "$context" >/dev/null
# the image this tag named before, now untagged
podman image prune -f --filter label=org.opencontainers.image.title=isn >/dev/null 2>&1 || true
size=$(podman image inspect "$tag" --format '{{.Size}}')
echo "image $tag: version $version ($revision), $((size / 1024)) KiB ($(du -sk "$root" | cut -f1) KiB of files: ${programs[*]} and $(echo "$libs" | wc -w) libraries)"
