#!/usr/bin/env bash
# Installs every Debian 12 package herd needs to build and test. Idempotent:
# packages already present are skipped, so re-running is cheap and safe.
set -euo pipefail

PKGS=(
  bazel-bootstrap protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev pkg-config libicu-dev
  libcpp-httplib-dev libboost1.74-dev libssl-dev openssl nlohmann-json3-dev python3 python3-grpcio python3-yaml python3-jsonschema
  # clang + its runtimes: tools/fuzz.sh (libFuzzer, ASan, UBSan)
  clang-14 libclang-rt-14-dev
  # tools/test.sh checks the formatting of every C++ file
  clang-format-14
  # promtool: //k8s:rules_test checks the alerting rules, the *_main_tests every /metrics
  prometheus
  # The Vulkan backend: headers, glslc (tools/glsl.bzl), and lavapipe (Mesa's CPU Vulkan
  # driver) that //libs/backend/vulkan:vulkan_backend_test runs on
  libvulkan-dev glslc mesa-vulkan-drivers
  # The HIP backend (//libs/backend/hip, worker_hip): hipcc (ROCm 5.2.3, clang-15;
  # tools/hip.bzl), the HIP runtime libamdhip64 and the AMD GPU device libraries
  hipcc libamdhip64-dev rocm-device-libs
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js + npm for the OpenAI Node client test (images with their own Node keep it).
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)

# The official OpenAI Node client and the AI SDK for tests/e2e:openai_node_test, from the npm registry
# into a cache outside the repo (tools/test.sh passes it as HERD_NODE_MODULES).
install_openai_node() {
  local dir="${HERD_NODE_CACHE:-$HOME/.cache/herd-openai-node}"
  local pkg; pkg="$(dirname "$0")/../tests/e2e/openai_node/package.json"
  # Installed already when the cache holds this package.json and its packages.
  if cmp -s "$pkg" "$dir/package.json" && [[ -f "$dir/node_modules/openai/package.json" ]] &&
    [[ -f "$dir/node_modules/ai/package.json" ]]; then
    return 0
  fi
  mkdir -p "$dir"
  cp "$pkg" "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --silent) || echo "setup: warning: npm install of the Node clients failed" >&2
}

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PKGS[@]} packages present"
  install_openai_node
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The prometheus package is here for promtool only: do not leave its server running on
# :9090 where this script just installed it (systemd machines start it on install).
if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1 \
    && [[ -d /run/systemd/system ]]; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
install_openai_node
echo "setup: done"
