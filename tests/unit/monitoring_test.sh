#!/usr/bin/env bash
# deploy/prometheus/isn-alerts.yml passes `promtool check rules`, and its unit tests
# (isn-alerts-test.yml: each alert fires on the series that should trigger it, not on a healthy tier)
# pass `promtool test rules`; deploy/prometheus/prometheus-static.yml (listed targets, what Debian's
# Prometheus loads) passes `promtool check config`, and so does deploy/prometheus/prometheus.yml (the
# scrape job for the pods' annotations) where promtool knows Kubernetes discovery (Debian's does not:
# there it is checked with static targets in its place, and says so). deploy/grafana/isn-tier.json is a dashboard whose every query is valid
# PromQL (promtool checks them as recording rules), and every isn_* metric the rules and the
# dashboard name is one isnd or isn-agg exports (found in their sources), so a renamed metric fails here.
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  echo "monitoring_test: promtool not found: tools/setup-deps.sh installs it (Debian's prometheus package)" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/isn-monitoring.XXXXXX")
trap 'rm -rf "$work"' EXIT
promtool check rules deploy/prometheus/isn-alerts.yml >/dev/null
promtool check config deploy/prometheus/prometheus-static.yml >/dev/null
config_checked="check config"
if ! out=$(promtool check config deploy/prometheus/prometheus.yml 2>&1); then
  if grep -q "kubernetes_sd_configs not found" <<<"$out"; then
    # the rest checked with static targets in place of the discovery
    cp deploy/prometheus/isn-alerts.yml "$work/"
    sed -e 's/kubernetes_sd_configs:/static_configs:/' -e 's/- role: pod/- targets: ["127.0.0.1:9090"]/' \
      deploy/prometheus/prometheus.yml >"$work/prometheus.yml"
    promtool check config "$work/prometheus.yml" >/dev/null
    config_checked="check config with static targets: this promtool lacks Kubernetes discovery (Debian's does)"
  else
    echo "$out" >&2
    exit 1
  fi
fi
(cd deploy/prometheus && promtool test rules isn-alerts-test.yml >/dev/null)
python3 - "$work" <<'PY'
import json, re, sys, pathlib
work = pathlib.Path(sys.argv[1])
dash = json.load(open("deploy/grafana/isn-tier.json"))
ids, exprs = set(), []
for p in dash["panels"]:
    if p["id"] in ids:
        sys.exit(f"monitoring_test: panel id {p['id']} repeats")
    ids.add(p["id"])
    for t in p.get("targets", []):
        exprs.append((p["id"], t["refId"], t["expr"]))
if len(exprs) < 10:
    sys.exit("monitoring_test: the dashboard has too few queries")
lines = ["groups:", "  - name: dashboard", "    rules:"]
for pid, ref, e in exprs:
    e = e.replace("$__rate_interval", "5m").replace("$namespace", ".*")
    lines += [f"      - record: isn_dashboard:panel_{pid}_{ref}", f"        expr: {json.dumps(e)}"]
(work / "dashboard-rules.yml").write_text("\n".join(lines) + "\n")
# every metric named must be exported by a server
exported = set()
for folder in ("agg", "daemon", "gpu", "scheduler", "grpc", "base"):
    for f in pathlib.Path(folder).glob("*.c*"):
        exported |= set(re.findall(r"\b(isn_[a-z0-9_]+)", f.read_text(errors="replace")))
named = set()
texts = [e for _, _, e in exprs] + [pathlib.Path("deploy/prometheus/isn-alerts.yml").read_text()]
for text in texts:
    for m in re.findall(r"\b(isn_[a-z0-9_]+)\b", text):
        named.add(re.sub(r"_(bucket|count|sum)$", "", m))
named.discard("isn_dashboard")
missing = sorted(n for n in named if n not in exported)
if missing:
    sys.exit("monitoring_test: metrics no server exports: " + ", ".join(missing))
print(f"monitoring_test: {len(exprs)} dashboard queries, {len(named)} metrics, all exported")
PY
promtool check rules "$work/dashboard-rules.yml" >/dev/null
echo "monitoring_test: promtool check rules and test rules pass on deploy/prometheus, check config on prometheus-static.yml and prometheus.yml ($config_checked); every dashboard query is valid PromQL"
