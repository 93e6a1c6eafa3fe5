#!/usr/bin/env bash
# The GPU check: build here, run on a machine with a GPU (the device tool's NVIDIA H200).
#
#   tools/gpu_check.sh pack   # here: bazel build, then the binaries (stripped), every shared
#                             # library `ldd` lists (but glibc's and the C++ runtime, which
#                             # the target's newer system has), the Vulkan loader package
#                             # and the test data, as one .gpu/herd-gpu.tar.xz (git-ignored,
#                             # ~25 MiB: the device tool carries at most 64 MiB)
#   tools/gpu_check.sh run    # there, from the repo root with .gpu carried: backend_ops on
#                             # every backend present, the Vulkan and CUDA unit tests, the greedy
#                             # checks (engine, reference models, a CPU + Vulkan cluster),
#                             # then llama_bench on the device; exit status 0 when all pass
#
# With the device tool: run(command="bash tools/gpu_check.sh run", carry=[".gpu"],
# timeout_s=600). `run` also works here (lavapipe), which is how the packing is tested.
# A new GPU backend adds its test binaries to TESTS and its name to BACKENDS.
# CUDA: the binaries link the CUDA runtime statically and need only the target's driver;
# cuBLAS (dlopen'ed, ~600 MiB with cuBLASLt) is not packed, so unless the target has
# libcublas.so.13 batched products run on the backend's own tiled kernel (the unit test
# prints which).
# GPU_CHECK_TYPES=q4_0 narrows the benchmark (default f16,q8_0,q4_0).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.gpu                                  # what travels: herd-gpu.tar.xz
STAGE=.gpu-stage                           # staged here before compression
UNPACKED="${HERD_GPU_DIR:-/tmp/herd-gpu}"  # where `run` unpacks it
BACKENDS=(vulkan cuda)
TESTS=(
  tests/backend_ops/backend_ops_test
  libs/backend/vulkan/vulkan_backend_test
  libs/backend/cuda/cuda_backend_test
  libs/engine/engine_sched_test
  tests/conformance/backends_test
  tests/e2e/mixed_backends_test
)
BINARIES=(services/loader/loader services/worker/worker services/gateway/gateway tools/herd/herd bench/llama_bench)

pack() {
  # The repository's exclude file (a worktree's .git is a file; its common dir holds info/).
  local exclude; exclude="$(git rev-parse --git-common-dir 2>/dev/null || echo .git)/info/exclude"
  mkdir -p "$(dirname "$exclude")"
  for d in /.gpu/ /.gpu-stage/; do grep -qx "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"; done
  local targets=()
  for t in "${TESTS[@]}" "${BINARIES[@]}"; do targets+=("//${t%/*}:${t##*/}"); done
  bazel build --config=ci "${targets[@]}" || return 1
  local PACK="$STAGE"
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/shared/models" "$PACK/shared/reference/arch" "$PACK/debs"
  for t in "${TESTS[@]}" "${BINARIES[@]}"; do
    mkdir -p "$PACK/bin/${t%/*}"
    cp -L "bazel-bin/$t" "$PACK/bin/$t"
    ldd "bazel-bin/$t" | awk '/=> \// {print $3}' | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
        *) cp -Ln "$lib" "$PACK/lib/" 2>/dev/null || true ;;
      esac
    done
  done
  # Test data: stories260K and its references, the llama- and mpt-family synthetic models.
  local S="${HERD_SHARED:-../shared}"
  cp "$S"/models/stories260K.gguf "$S"/models/stories260K.run_c_t0_n256.txt "$PACK/shared/models/"
  cp "$S"/reference/A-stories260K-*.json "$PACK/shared/reference/"
  cp -r "$S"/reference/perf "$PACK/shared/reference/"
  for m in mpt-clamp8 mpt-noclamp refact baichuan; do cp "$S/reference/arch/synth-$m".* "$PACK/shared/reference/arch/"; done
  # The Vulkan loader, for a target without one (unpacked there only if missing).
  (cd "$PACK/debs" && apt-get download libvulkan1 >/dev/null 2>&1) || echo "note: could not download libvulkan1" >&2
  find "$PACK/bin" "$PACK/lib" -type f -exec strip --strip-unneeded {} \; 2>/dev/null
  mkdir -p .gpu && rm -f .gpu/herd-gpu.tar.xz
  tar -C "$PACK" -cf - . | xz -T2 -6 > .gpu/herd-gpu.tar.xz || return 1
  rm -rf "$PACK"
  ls -l .gpu/herd-gpu.tar.xz
}

run() {
  [[ -f .gpu/herd-gpu.tar.xz ]] || { echo "no .gpu/herd-gpu.tar.xz: run 'tools/gpu_check.sh pack' here first and carry .gpu"; return 2; }
  rm -rf "$UNPACKED" && mkdir -p "$UNPACKED" && xz -dc .gpu/herd-gpu.tar.xz | tar -C "$UNPACKED" -xf - || return 2
  local PACK="$UNPACKED"
  if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1'; then
    for f in "$PACK"/debs/*.deb; do [[ -e "$f" ]] && dpkg -x "$f" /; done
    ldconfig 2>/dev/null || true
  fi
  # NVIDIA's ICD where the driver put it (the device tool's machines), else the system's.
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
             /etc/vulkan/icd.d/nvidia_icd.json; do
    if [[ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" && -e "$icd" ]]; then export VK_DRIVER_FILES="$icd"; fi
  done
  export LD_LIBRARY_PATH="$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export HERD_SHARED="$PACK/shared" HERD_BIN_DIR="$PACK/bin"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$PACK/bin/tools/herd/herd" --version 2>/dev/null
  local failed=0
  for t in "${TESTS[@]}"; do
    echo "=== $t"
    local rc=0
    "$PACK/bin/$t" --gtest_brief=1 > "$PACK/test.log" 2>&1 || rc=$?
    grep -vE '^\[( RUN|       OK) ' "$PACK/test.log"
    ((rc == 0)) || { echo "FAILED: $t (exit $rc)"; failed=1; }
  done
  for b in "${BACKENDS[@]}"; do
    echo "=== llama_bench --backend $b"
    "$PACK/bin/bench/llama_bench" --backend "$b" --model llama-110m --types "${GPU_CHECK_TYPES:-f16,q8_0,q4_0}" \
      --threads 4 --reps 2 \
      || { echo "FAILED: llama_bench --backend $b"; failed=1; }
  done
  echo "gpu_check: $([[ $failed -eq 0 ]] && echo passed || echo FAILED)"
  return $failed
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: tools/gpu_check.sh pack|run"; exit 2 ;;
esac
