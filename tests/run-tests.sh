#!/usr/bin/env bash
# Runs each test program given; prints one summary line "N passed, N failed" at the end.
set -u
passed=0 failed=0 failed_names=()
for t in "$@"; do
  echo "== $t"
  if "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names+=("$t"); fi
done
[ $failed -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "tests: $passed passed, $failed failed"
[ $failed -eq 0 ]
