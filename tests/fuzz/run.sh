#!/usr/bin/env bash
# Runs each libFuzzer target for FUZZ_SECONDS from its seed corpus (tests/fuzz/corpus/NAME), keeping
# what it finds in BUILD/fuzz-corpus/NAME. A crash stops with the input saved as
# BUILD/fuzz-artifacts/NAME/crash-*: copy it to tests/fuzz/regressions/NAME/ once fixed, so that
# `make test` replays it from then on. Prints each target's last status line (execs/s, coverage).
# FUZZ_RUNS=N instead runs N inputs per target from a fixed seed (FUZZ_SEED, default 1; FUZZ_SECONDS
# still caps the time): the same exploration on every machine, as CI needs (a red CI must mean a change
# broke something, not that a fuzzer got lucky).
#   usage: FUZZ_SECONDS=60 tests/fuzz/run.sh BUILD NAME...
set -u
build=$1
shift
seconds=${FUZZ_SECONDS:-60}
budget=(-max_total_time="$seconds")
[ -n "${FUZZ_RUNS:-}" ] && budget+=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}")
failed=()
for name in "$@"; do
  corpus=$build/fuzz-corpus/$name
  artifacts=$build/fuzz-artifacts/$name
  mkdir -p "$corpus" "$artifacts" "tests/fuzz/corpus/$name"
  log=$build/fuzz-$name.log
  echo "== fuzz $name for ${FUZZ_RUNS:+$FUZZ_RUNS runs, at most }${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
      "$build/fuzz/$name" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "tests/fuzz/corpus/$name" >"$log" 2>&1; then
    failed+=("$name")
    tail -40 "$log"
  fi
  grep -E '^#[0-9]+.*(DONE|pulse|NEW)' "$log" | tail -1
  grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec' "$log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]} (inputs under $build/fuzz-artifacts/)"
  exit 1
fi
echo "fuzz: no crash in $*"
