#!/usr/bin/env bash
# Installs the Debian packages ISN builds and tests with, only those that are missing.
# Called by the Makefile before the first build, so a fresh Debian 12 machine needs nothing by hand.
set -euo pipefail

packages=(
  build-essential pkg-config python3
  libuv1-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libjemalloc-dev
  libcmocka-dev libinih-dev libutf8proc-dev libstemmer-dev libxxhash-dev libsystemd-dev
  libjansson-dev liblz4-dev
  python3-grpcio python3-grpc-tools prometheus nghttp2-client gnuplot-nox
  python3-numpy python3-xgboost
  libc-ares-dev libssl-dev openssl
  clang libclang-rt-14-dev
)
# Extra packages a caller may need (tests, benchmarks) are passed as arguments.
packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup-deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
