#!/usr/bin/env bash
# The GPU check: build here, run on a machine with a GPU (the device tool's NVIDIA H200,
# or an AMD machine with a gfx90a / gfx940 GPU).
#
#   tools/gpu_check.sh pack   # here: bazel build, then the binaries (stripped), every shared
#                             # library `ldd` lists (but glibc's and the C++ runtime, which
#                             # the target's newer system has), the Vulkan loader package
#                             # and the test data, as one .gpu/herd-gpu.tar.xz (git-ignored,
#                             # ~33 MiB: the device tool carries at most 64 MiB)
#   tools/gpu_check.sh pack amd   # the same plus what the HIP runtime opens at run time
#                             # (libamd_comgr.so.2 with LLVM 15: larger), for an AMD machine
#                             # without ROCm 5's comgr installed
#   tools/gpu_check.sh run    # there, from the repo root with .gpu carried: backend_ops on
#                             # every backend present, the Vulkan, CUDA and HIP unit tests, the
#                             # greedy checks (engine, reference models, a CPU + Vulkan cluster,
#                             # the reference models on hip), then llama_bench on each device
#                             # backend this machine has, then gpu_bench (random-weight 7B:
#                             # pp512, tg128, batched decode, decode as a fraction of the
#                             # bandwidth) on cuda / hip where that device is; exit status 0
#                             # when all pass
#
# With the device tool: run(command="bash tools/gpu_check.sh run", carry=[".gpu"],
# timeout_s=600). `run` also works here (lavapipe; GPU_CHECK_BACKENDS=vulkan to benchmark
# it), which is how the packing is tested.
# A new GPU backend adds its test binaries to TESTS, its name to BACKENDS and its device
# test to has_device (and, for a kind only some binaries link, its bench to bench_for), and
# to GPU_BENCH_BACKENDS (with gpu_bench_for) to be benchmarked by gpu_bench.
# CUDA: the binaries link the CUDA runtime statically and need only the target's driver;
# cuBLAS (dlopen'ed, ~600 MiB with cuBLASLt) is not packed, so unless the target has
# libcublas.so.13 batched products run on the backend's own tiled kernel (the unit test
# prints which).
# HIP: the tests and llama_bench_hip link ROCm's libamdhip64 (packed with its libraries);
# on an NVIDIA machine the HIP tests skip. The kernels are gfx90a and gfx940 code objects
# only: on other AMD GPUs the HIP runtime refuses to start the HIP binaries.
# GPU_CHECK_TYPES=q4_0 narrows the benchmark (default f16,q8_0,q4_0).
# GPU_CHECK_BACKENDS="hip vulkan" picks the benchmarked backends (default: has_device).
# Time: the device tool gives one command at most 600 s, and the whole run must fit in
# ~10 minutes on an H200, so gpu_bench gets what is left of GPU_CHECK_SECONDS (default 540)
# after the tests and llama_bench, less 30 s for a step in flight, as its --max_seconds
# (it starts nothing new once that is spent and lists what it skipped), and runs only when
# 60 s or more are left. By default it runs 7B Q4_0 alone (3.6 GiB, written on the
# machine first; estimated from this machine's writer speed at ~10-20 s on 16 cores and
# about a minute with its tests, not yet timed on the H200): GPU_CHECK_GPU_BENCH_MODELS=
# "tinyllama-1.1b,7b" and GPU_CHECK_GPU_BENCH_TYPES=q4_0,f16 widen it (7B F16 writes
# 12.6 GiB first: ask for it only in a run with time to spare), GPU_CHECK_GPU_BENCH=0
# skips it. Its peak column is 4500 GB/s on cuda (the H200's measured 4.50 TB/s) and
# absent on hip, unless GPU_CHECK_PEAK_GBPS says otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.gpu                                  # what travels: herd-gpu.tar.xz
STAGE=.gpu-stage                           # staged here before compression
UNPACKED="${HERD_GPU_DIR:-/tmp/herd-gpu}"  # where `run` unpacks it
BACKENDS=(vulkan cuda hip)
TESTS=(
  tests/backend_ops/backend_ops_test
  libs/backend/vulkan/vulkan_backend_test
  libs/backend/cuda/cuda_backend_test
  libs/engine/engine_sched_test
  tests/conformance/backends_test
  tests/e2e/mixed_backends_test
  libs/backend/hip/hip_backend_test
  tests/backend_ops/backend_ops_hip_test
  tests/conformance/backends_hip_test
)
BINARIES=(services/loader/loader services/worker/worker services/gateway/gateway tools/herd/herd bench/llama_bench
          bench/llama_bench_hip bench/gpu_bench bench/gpu_bench_hip)
GPU_BENCH_BACKENDS=(cuda hip)              # where gpu_bench runs (when has_device)

# The llama_bench / gpu_bench binary that has a backend kind (hip is linked only into
# *_hip binaries).
bench_for() { if [[ "$1" == hip ]]; then echo bench/llama_bench_hip; else echo bench/llama_bench; fi; }
gpu_bench_for() { if [[ "$1" == hip ]]; then echo bench/gpu_bench_hip; else echo bench/gpu_bench; fi; }

# Whether this machine has a device for a backend (which llama_bench runs). NVIDIA: cuda
# and vulkan (the driver's ICD); AMD: hip (/dev/kfd, the amdgpu kernel driver).
has_device() {
  case "$1" in
    cuda | vulkan) [[ -e /dev/nvidiactl ]] || { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; } ;;
    hip) [[ -e /dev/kfd ]] ;;
    *) return 1 ;;
  esac
}

pack() {
  local amd="${1:-}"
  [[ -z "$amd" || "$amd" == amd ]] || { echo "usage: tools/gpu_check.sh pack [amd]"; return 2; }
  # The repository's exclude file (a worktree's .git is a file; its common dir holds info/).
  local exclude; exclude="$(git rev-parse --git-common-dir 2>/dev/null || echo .git)/info/exclude"
  mkdir -p "$(dirname "$exclude")"
  for d in /.gpu/ /.gpu-stage/; do grep -qx "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"; done
  local targets=()
  for t in "${TESTS[@]}" "${BINARIES[@]}"; do targets+=("//${t%/*}:${t##*/}"); done
  bazel build --config=ci "${targets[@]}" || return 1
  local PACK="$STAGE"
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/shared/models" "$PACK/shared/reference/arch" "$PACK/debs"
  local extra=()
  # The HIP runtime opens its code-object library (and that its LLVM) at run time.
  [[ "$amd" == amd ]] && extra+=(/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2)
  for lib in "${extra[@]}"; do cp -Ln "$lib" "$PACK/lib/" || return 1; done
  for t in "${TESTS[@]}" "${BINARIES[@]}" "${extra[@]}"; do
    if [[ "$t" != /* ]]; then
      mkdir -p "$PACK/bin/${t%/*}"
      cp -L "bazel-bin/$t" "$PACK/bin/$t"
      t="bazel-bin/$t"
    fi
    ldd "$t" | awk '/=> \// {print $3}' | while read -r lib; do
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
  if [[ -e /dev/kfd ]]; then
    echo "AMD GPU (/dev/kfd): $(cat /sys/class/kfd/kfd/topology/nodes/*/name 2>/dev/null | grep -v '^$' | sort -u | tr '\n' ' ')"
    if [[ ! -e "$PACK/lib/libamd_comgr.so.2" ]] && ! ldconfig -p 2>/dev/null | grep -q 'libamd_comgr.so.2'; then
      echo "note: libamd_comgr.so.2 is neither packed ('tools/gpu_check.sh pack amd') nor installed: HIP kernels will not load"
    fi
  fi
  "$PACK/bin/tools/herd/herd" --version 2>/dev/null
  local failed=0
  for t in "${TESTS[@]}"; do
    echo "=== $t"
    local rc=0
    "$PACK/bin/$t" --gtest_brief=1 > "$PACK/test.log" 2>&1 || rc=$?
    grep -vE '^\[( RUN|       OK) ' "$PACK/test.log"
    ((rc == 0)) || { echo "FAILED: $t (exit $rc)"; failed=1; }
  done
  local benched=()
  if [[ -n "${GPU_CHECK_BACKENDS:-}" ]]; then
    read -r -a benched <<<"$GPU_CHECK_BACKENDS"
  else
    for b in "${BACKENDS[@]}"; do
      if has_device "$b"; then benched+=("$b"); else echo "=== llama_bench --backend $b: skipped (no $b device here)"; fi
    done
  fi
  for b in "${benched[@]}"; do
    echo "=== llama_bench --backend $b"
    "$PACK/bin/$(bench_for "$b")" --backend "$b" --model llama-110m --types "${GPU_CHECK_TYPES:-f16,q8_0,q4_0}" \
      --threads 4 --reps 2 \
      || { echo "FAILED: llama_bench --backend $b"; failed=1; }
  done
  for b in "${GPU_BENCH_BACKENDS[@]}"; do
    [[ "${GPU_CHECK_GPU_BENCH:-1}" == 0 ]] && { echo "=== gpu_bench: skipped (GPU_CHECK_GPU_BENCH=0)"; break; }
    has_device "$b" || { echo "=== gpu_bench --backend $b: skipped (no $b device here)"; continue; }
    local left=$(( ${GPU_CHECK_SECONDS:-540} - SECONDS ))
    if (( left < 60 )); then
      echo "=== gpu_bench --backend $b: skipped (${left} s left of GPU_CHECK_SECONDS=${GPU_CHECK_SECONDS:-540})"
      continue
    fi
    local peak="${GPU_CHECK_PEAK_GBPS:-}"
    [[ -n "$peak" ]] || { [[ "$b" == cuda ]] && peak=4500 || peak=0; }
    echo "=== gpu_bench --backend $b (--max_seconds $((left - 30)))"
    "$PACK/bin/$(gpu_bench_for "$b")" --backend "$b" --models "${GPU_CHECK_GPU_BENCH_MODELS:-7b}" \
      --types "${GPU_CHECK_GPU_BENCH_TYPES:-q4_0}" --reps 3 --threads 4 --peak_gbps "$peak" \
      --max_seconds $((left - 30)) --cache_dir "${TMPDIR:-/tmp}/herd-bench" \
      || { echo "FAILED: gpu_bench --backend $b"; failed=1; }
  done
  echo "gpu_check: $([[ $failed -eq 0 ]] && echo passed || echo FAILED)"
  return $failed
}

case "${1:-}" in
  pack) pack "${2:-}" ;;
  run) run ;;
  *) echo "usage: tools/gpu_check.sh pack [amd] | run"; exit 2 ;;
esac
