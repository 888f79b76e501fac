# shellcheck shell=bash
# Sourced by the benchmark scripts that start their own isnd on an ephemeral port:
#   port=$(isnd_port_of NAME LOG PID [TENTHS])
# waits up to TENTHS (default 300) tenths of a second for isnd's "ready" line in LOG and prints its port;
# when isnd exits or never says it, prints why (NAME: isnd ..., then the log) on stderr and fails.
isnd_port_of() {
  local name=$1 log=$2 pid=$3 tries=${4:-300} port
  for _ in $(seq 1 "$tries"); do
    port=$(sed -n 's/.*ready: serving partition [0-9]* on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$port" ] && { echo "$port"; return 0; }
    kill -0 "$pid" 2>/dev/null || { echo "$name: isnd exited:" >&2; cat "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "$name: isnd did not say its port:" >&2
  cat "$log" >&2
  return 1
}
