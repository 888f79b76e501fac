#!/usr/bin/env bash
# bench/shed_episodes.py: the refusal episodes of an overload_profile.py timeline, from a written profile (no
# load is run): samples with refusals join one episode while they come within --gap-ms of each other; each
# episode sums its refusals by rule and the stalls the loops saw in it, and keeps admission's belief before it
# and at its largest predicted wait; a run without a timeline is an error that names the file.
set -euo pipefail
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-shed-episodes.XXXXXX")
trap 'rm -rf "$work"' EXIT
state() { # predicted still departure depth
  printf '{"isn_scheduler_prepare_predicted_wait_seconds": %s, "isn_scheduler_prepare_still_seconds": %s, "isn_scheduler_prepare_departure_seconds": %s, "isn_scheduler_prepare_queue_depth": %s}' "$@"
}
cat >"$work/profile.json" <<JSON
{"label": "hybrid@2x", "timeline": [
 {"t": 0.200, "isn_scheduler_stalls_seen_total": 1.0},
 {"t": 0.500, "isn_scheduler_stalls_seen_total": 1.0, "state": $(state 0 0 0 0), "state_before": $(state 0 0 0 0)},
 {"t": 0.510, "isn_shed_at_headers_total": 40.0, "isn_scheduler_shed_arrival_preparing_total": 40.0, "isn_shed_total": 40.0,
  "state": $(state 0.031 0.030 0.00001 120), "state_before": $(state 0 0 0 0)},
 {"t": 0.530, "isn_shed_at_headers_total": 5.0, "isn_scheduler_shed_arrival_preparing_total": 3.0,
  "isn_scheduler_shed_arrival_wait_total": 2.0, "isn_scheduler_stalls_seen_total": 1.0,
  "state": $(state 0.012 0.001 0.00001 60), "state_before": $(state 0.031 0.030 0.00001 120)},
 {"t": 0.580, "isn_scheduler_stalls_seen_total": 1.0},
 {"t": 0.900, "isn_scheduler_shed_routed_total": 7.0, "isn_scheduler_shed_unprepared_total": 2.0,
  "state": $(state 0.002 0.0005 0.00002 9), "state_before": $(state 0.001 0.0004 0.00002 8)}
]}
{"label": "quiet", "timeline": [{"t": 0.1, "isn_scheduler_stalls_seen_total": 1.0}]}
JSON
out=$(python3 bench/shed_episodes.py "$work/profile.json")
expect() { [ "$2" = "$3" ] || { echo "shed_episodes_test: $1: got \"$2\", wanted \"$3\"" >&2; exit 1; }; }
field() { python3 -c 'import json, sys; d = json.loads(sys.stdin.read().splitlines()[int(sys.argv[1])]); print(eval(sys.argv[2], {}, d))' "$@"; }
expect "episodes" "$(wc -l <<<"$out")" 2
expect "first's span" "$(field 0 '(start_s, end_s)' <<<"$out")" "(0.51, 0.53)"
expect "first's refusals" "$(field 0 'sorted(refused.items())' <<<"$out")" "[('shed_arrival_preparing', 43), ('shed_arrival_wait', 2)]"
expect "first's at HEADERS" "$(field 0 at_headers <<<"$out")" 45
# the stall seen 10 ms before the first refusal is its episode's, as is the one inside it; the one at 0.2 s
# is nobody's, and the one 50 ms after the first episode (past the 30 ms gap) is not the first's
expect "first's stalls" "$(field 0 stalls_seen <<<"$out")" 2
expect "second's stalls" "$(field 1 stalls_seen <<<"$out")" 0
expect "first's belief before" "$(field 0 'before["predicted_wait_s"]' <<<"$out")" 0
expect "first's worst" "$(field 0 '(worst["predicted_wait_s"], worst["still_s"], worst["depth"])' <<<"$out")" "(0.031, 0.03, 120)"
expect "second's refusals" "$(field 1 'sorted(refused.items())' <<<"$out")" "[('shed_routed', 7), ('shed_unprepared', 2)]"
expect "second's label" "$(field 1 label <<<"$out")" "hybrid@2x"
# a wider gap joins them, and the stalls within it
wide=$(python3 bench/shed_episodes.py --gap-ms 400 "$work/profile.json")
expect "one episode" "$(wc -l <<<"$wide")" 1
expect "its stalls" "$(field 0 stalls_seen <<<"$wide")" 4

echo '{"label": "no timeline", "timeline": null}' >"$work/bare.json"
if err=$(python3 bench/shed_episodes.py "$work/bare.json" 2>&1); then
  echo "shed_episodes_test: a run without a timeline was accepted" >&2; exit 1
fi
case "$err" in *bare.json*timeline*) ;; *) echo "shed_episodes_test: unclear error: $err" >&2; exit 1 ;; esac
echo "shed_episodes_test: all cases passed"
