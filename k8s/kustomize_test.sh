#!/usr/bin/env bash
# Renders k8s/overlays/* with `kubectl kustomize` (offline) and checks what every
# deployment of herd needs: the four components, probes, the headless worker Service,
# separate HPAs, and GPU requests + node selectors in the GPU overlays.
set -euo pipefail
if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIP: kubectl not found; k8s manifests not rendered"
  exit 0
fi
src="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-herd}/k8s"
[[ -d "$src" ]] || src="$(dirname "$0")"
work="${TEST_TMPDIR:-$(mktemp -d)}/k8s"
rm -rf "$work" && cp -rL "$src" "$work"   # real files: kustomize refuses some symlinks

fail=0
check() {  # check OVERLAY DESCRIPTION PATTERN (grep -E over the rendered YAML)
  if ! grep -qE -- "$3" "$work/$1.yaml"; then
    echo "FAIL [$1] $2 (pattern: $3)"
    fail=1
  fi
}
count() {  # count OVERLAY KIND NAME -> number of objects
  awk -v k="kind: $2" -v n="  name: $3" '
    /^---/ {kind=""; meta=0}
    $0 == k {kind=1}
    /^metadata:/ {meta=1}
    meta && $0 == n && kind {c++}
    END {print c+0}' "$work/$1.yaml"
}
for o in cpu cuda hip; do
  if ! kubectl kustomize "$work/overlays/$o" > "$work/$o.yaml" 2> "$work/$o.err"; then
    echo "FAIL [$o] kubectl kustomize: $(cat "$work/$o.err")"
    fail=1
    continue
  fi
  for d in herd-gateway herd-loader herd-draft; do
    [[ $(count $o Deployment $d) == 1 ]] || { echo "FAIL [$o] Deployment $d missing"; fail=1; }
  done
  for s in herd-gateway herd-loader herd-draft herd-worker; do
    [[ $(count $o Service $s) == 1 ]] || { echo "FAIL [$o] Service $s missing"; fail=1; }
  done
  [[ $(count $o PersistentVolumeClaim herd-models) == 1 ]] || { echo "FAIL [$o] PVC herd-models missing"; fail=1; }
  [[ $(count $o HorizontalPodAutoscaler herd-draft) == 1 ]] || { echo "FAIL [$o] draft HPA missing"; fail=1; }
  check $o "headless worker Service" "clusterIP: None"
  check $o "grpc liveness probes" "grpc:"
  # (YAML output may fold the long command line: check its parts)
  check $o "readiness = one-token generation" "exec herd generate --gateway 127.0.0.1:50051 -m"
  check $o "readiness generates one token" "^ +-n 1 >/dev/null|-n 1 >/dev/null"
  check $o "loader mounts the model volume" "claimName: herd-models"
  check $o "namespace" "namespace: herd"
done
[[ $(count cpu Deployment herd-worker-cpu) == 1 ]] || { echo "FAIL [cpu] worker-cpu missing"; fail=1; }
[[ $(count cpu HorizontalPodAutoscaler herd-worker-cpu) == 1 ]] || { echo "FAIL [cpu] worker HPA missing"; fail=1; }
for o in cuda hip; do
  [[ $(count $o Deployment herd-worker-$o) == 1 ]] || { echo "FAIL [$o] worker-$o missing"; fail=1; }
  [[ $(count $o Deployment herd-worker-cpu) == 0 ]] || { echo "FAIL [$o] still has CPU workers"; fail=1; }
  [[ $(count $o HorizontalPodAutoscaler herd-worker-$o) == 1 ]] || { echo "FAIL [$o] worker HPA missing"; fail=1; }
  check $o "node selector" "nodeSelector:"
done
check cuda "GPU request" "nvidia.com/gpu: 1"
check hip "GPU request" "amd.com/gpu: 1"
if (( fail )); then exit 1; fi
echo "k8s overlays cpu, cuda, hip render and have the expected shape"
