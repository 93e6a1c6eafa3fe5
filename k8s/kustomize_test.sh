#!/usr/bin/env bash
# Renders every overlay in k8s/overlays and k8s/monitoring with `kubectl kustomize`
# (offline) and checks what every deployment of herd needs: the four components,
# Services (headless for the worker and draft pools), probes, separate HPAs, PDBs,
# NetworkPolicies, the model volume. manifests_test.py checks the rendered args against
# the binaries and images; rules_test.sh runs promtool over k8s/monitoring.
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
overlays=()
for d in "$work"/overlays/*/; do overlays+=("$(basename "$d")"); done
for o in "${overlays[@]}"; do
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
  check $o "ConfigMap herd-config (generated, hash suffix)" "^  name: herd-config-[a-z0-9]+$"
  [[ $(count $o NetworkPolicy herd-default-deny-ingress) == 1 ]] || { echo "FAIL [$o] default-deny NetworkPolicy missing"; fail=1; }
  for p in herd-gateway herd-worker herd-draft; do
    [[ $(count $o PodDisruptionBudget $p) == 1 ]] || { echo "FAIL [$o] PodDisruptionBudget $p missing"; fail=1; }
  done
  [[ $(grep -c "clusterIP: None" "$work/$o.yaml") == 2 ]] || { echo "FAIL [$o] herd-worker and herd-draft must be headless"; fail=1; }
  check $o "exec probes with the image's herd health" "- /usr/local/bin/herd$"
  check $o "readiness = one-token generation" "^ +- generate$"
  check $o "gateway reaches the draft workers" "- --draft_workers_dns=herd-draft:50055$"
  check $o "gateway reaches the target workers" "- --workers_dns=herd-worker:50053$"
  check $o "workers' context from the ConfigMap" "- --n_ctx=\\\$\(HERD_N_CTX\)$"
  check $o "workers' sequences from the ConfigMap" "- --max_sequences=\\\$\(HERD_MAX_SEQUENCES\)$"
  check $o "workers mount the model volume read-only" "readOnly: true"
  check $o "loader mounts the model volume" "claimName: herd-models"
  check $o "namespace" "namespace: herd"
  if grep -qE "^ +- (/bin/sh|sh|bash)$" "$work/$o.yaml"; then echo "FAIL [$o] a probe needs a shell"; fail=1; fi
  if grep -qE "grpc:" "$work/$o.yaml"; then echo "FAIL [$o] native grpc probes: the manifests use herd health"; fail=1; fi
done
[[ " ${overlays[*]} " == *" cpu "* ]] || { echo "FAIL overlay cpu missing"; fail=1; }
[[ $(count cpu Deployment herd-worker-cpu) == 1 ]] || { echo "FAIL [cpu] worker-cpu missing"; fail=1; }
[[ $(count cpu HorizontalPodAutoscaler herd-worker-cpu) == 1 ]] || { echo "FAIL [cpu] worker HPA missing"; fail=1; }
# The Vulkan overlay: GPU workers next to the CPU ones, each with its own HPA.
[[ " ${overlays[*]} " == *" vulkan "* ]] || { echo "FAIL overlay vulkan missing"; fail=1; }
for d in herd-worker-cpu herd-worker-vulkan; do
  [[ $(count vulkan Deployment $d) == 1 ]] || { echo "FAIL [vulkan] Deployment $d missing"; fail=1; }
  [[ $(count vulkan HorizontalPodAutoscaler $d) == 1 ]] || { echo "FAIL [vulkan] HPA $d missing"; fail=1; }
done
check vulkan "Vulkan workers run the Vulkan backend" "- --backend=vulkan$"
check vulkan "Vulkan workers request a GPU" "nvidia.com/gpu: 1"
check vulkan "the toolkit mounts the Vulkan ICD" "value: compute,utility,graphics"
check vulkan "the Vulkan worker image" "image: ghcr.io/herd/herd-worker-vulkan:"
# The CUDA and HIP overlays: the same shape, one NVIDIA / AMD GPU per worker.
for b in cuda hip; do
  [[ " ${overlays[*]} " == *" $b "* ]] || { echo "FAIL overlay $b missing"; fail=1; continue; }
  for d in herd-worker-cpu herd-worker-$b; do
    [[ $(count $b Deployment $d) == 1 ]] || { echo "FAIL [$b] Deployment $d missing"; fail=1; }
    [[ $(count $b HorizontalPodAutoscaler $d) == 1 ]] || { echo "FAIL [$b] HPA $d missing"; fail=1; }
  done
  check $b "$b workers run the $b backend" "- --backend=$b$"
  check $b "the $b worker image" "image: ghcr.io/herd/herd-worker-$b:"
done
check cuda "CUDA workers request an NVIDIA GPU" "nvidia.com/gpu: 1"
check cuda "the toolkit mounts the CUDA driver" "value: compute,utility$"
check hip "HIP workers request an AMD GPU" "amd.com/gpu: 1"
if grep -q "nvidia.com" "$work/hip.yaml"; then echo "FAIL [hip] asks for NVIDIA resources"; fail=1; fi
if kubectl kustomize "$work/monitoring" > "$work/monitoring.yaml" 2> "$work/monitoring.err"; then
  [[ $(count monitoring PrometheusRule herd) == 1 ]] || { echo "FAIL [monitoring] PrometheusRule herd missing"; fail=1; }
else
  echo "FAIL [monitoring] kubectl kustomize: $(cat "$work/monitoring.err")"
  fail=1
fi
if (( fail )); then exit 1; fi
echo "k8s overlays ${overlays[*]} and k8s/monitoring render and have the expected shape"
