#!/usr/bin/env bash
# Checks the alerting rules of k8s/monitoring/prometheusrule.yaml (the PrometheusRule's
# spec.groups) with `promtool check rules`, and their behaviour with `promtool test
# rules` over k8s/monitoring/rules_test.yaml. promtool comes with Debian's prometheus
# package (tools/setup.sh installs it); skips with a message when it is absent.
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool not found (Debian package prometheus; tools/setup.sh installs it)"
  exit 0
fi
src="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-herd}/k8s/monitoring"
[[ -d "$src" ]] || src="$(dirname "$0")/monitoring"
work="${TEST_TMPDIR:-$(mktemp -d)}/rules"
mkdir -p "$work"
# spec.groups of the PrometheusRule, as a plain Prometheus rules file.
/usr/bin/python3 - "$src/prometheusrule.yaml" >"$work/herd-rules.yaml" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
assert doc["kind"] == "PrometheusRule", doc["kind"]
yaml.safe_dump({"groups": doc["spec"]["groups"]}, sys.stdout, sort_keys=False)
PY
promtool check rules "$work/herd-rules.yaml"
cp "$src/rules_test.yaml" "$work/rules_test.yaml"
(cd "$work" && promtool test rules rules_test.yaml)

# prometheus-adapter rules: one for every custom metric an HPA scales on, and each query
# (templates filled in as the adapter does) parses: as recording rules for promtool.
base="${src%/monitoring}/base"
/usr/bin/python3 - "$src/prometheus-adapter-rules.yaml" "$base/hpa.yaml" >"$work/adapter-rules.yaml" <<'PY'
import re, sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))["rules"]["custom"]
served = {r["name"]["as"]: r for r in rules}
wanted = [m["pods"]["metric"]["name"] for h in yaml.safe_load_all(open(sys.argv[2])) if h
          for m in h["spec"]["metrics"] if m["type"] == "Pods"]
missing = sorted(set(wanted) - set(served))
if missing:
    sys.exit(f"FAIL: HPA metrics without a prometheus-adapter rule: {missing}")
out = []
for name, r in served.items():
    series = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", r["seriesQuery"]).group(0)
    q = (r["metricsQuery"].replace("<<.Series>>", series)
         .replace("<<.LabelMatchers>>", 'namespace="herd",pod=~"herd-.*"').replace("<<.GroupBy>>", "pod"))
    out.append({"record": "adapter:" + name, "expr": q})
yaml.safe_dump({"groups": [{"name": "prometheus-adapter", "rules": out}]}, sys.stdout, sort_keys=False)
PY
promtool check rules "$work/adapter-rules.yaml"
echo "k8s/monitoring: rules valid, alert tests pass, every HPA metric has a valid prometheus-adapter rule"
