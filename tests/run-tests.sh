#!/usr/bin/env bash
# Runs each test program given; prints one summary line "N passed, N failed" at the end, after the slowest
# tests' wall-clock seconds (CI must finish well under its hour: this says where the time goes; no test
# passes or fails by it).
set -u
passed=0 failed=0 failed_names=() times=()
for t in "$@"; do
  echo "== $t"
  start=$(date +%s%N)
  if "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names+=("$t"); fi
  times+=("$((($(date +%s%N) - start) / 1000000)) $t")
done
if [ ${#times[@]} -gt 0 ]; then
  echo "slowest tests (wall-clock seconds):"
  printf '%s\n' "${times[@]}" | sort -rn | head -8 | awk '{ printf "  %7.1f  %s\n", $1 / 1000, $2 }'
fi
[ $failed -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "tests: $passed passed, $failed failed"
[ $failed -eq 0 ]
