#!/usr/bin/env bash
# Renders every kustomize overlay of k8s/ and validates the result offline:
#   1. `kubectl kustomize` must render each overlay (needs kubectl; offline);
#   2. each object must match its API schema (kubernetes-models@5, yaml@2 and, for the
#      PrometheusRule of k8s/monitoring, @kubernetes-models/prometheus-operator@6;
#      installed once with `npm install` into tools/k8s-validate/node_modules, git-ignored).
# Usage: tools/k8s-validate/validate.sh        (from anywhere in the checkout)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command -v kubectl >/dev/null || { echo "validate: kubectl not found" >&2; exit 2; }
if [[ ! -d "$here/node_modules/kubernetes-models" || ! -d "$here/node_modules/@kubernetes-models/prometheus-operator" ]]; then
  command -v npm >/dev/null || { echo "validate: npm not found" >&2; exit 2; }
  (cd "$here" && npm install --no-audit --no-fund --silent)
fi
rc=0
for dir in "$root"/k8s/overlays/*/ "$root"/k8s/monitoring/; do
  name="${dir#"$root"/}"
  name="${name%/}"
  if out="$(kubectl kustomize "$dir" | node "$here/validate.mjs" 2>&1)"; then
    echo "$name: $out"
  else
    echo "$name: INVALID" >&2
    echo "$out" >&2
    rc=1
  fi
done
exit $rc
