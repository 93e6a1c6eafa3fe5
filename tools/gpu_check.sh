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
# What `run` does first and how it reports: it prints the NVIDIA driver against what the
# binaries need ("driver X supports CUDA Y; binaries need CUDA 13.0 ...: NVIDIA driver >=
# 580"; an older driver fails the check) and where cuBLAS is. Each step runs under its own
# `timeout`; the correctness steps with CUDA_LAUNCH_BLOCKING=1 (a fault names its kernel);
# every gtest binary one case per process (--gtest_list_tests, then --gtest_filter;
# GPU_CHECK_JOBS=4 at a time, GPU_CHECK_CASE_SECONDS=120 each) so that a sticky CUDA error
# fails only its case; a binary that lists one test runs once (GPU_CHECK_STEP_SECONDS=300).
# On a machine with an NVIDIA GPU (/dev/nvidia*, or nvidia-smi listing one) a test that
# skips CUDA fails the check with its reason (likewise HIP with /dev/kfd); without one the
# skip is only reported. A compute-sanitizer memcheck pass over the CUDA op cases follows
# where compute-sanitizer is packed, on PATH or in /usr/local/cuda* (else "compute-sanitizer:
# not available"; GPU_CHECK_SANITIZER_SECONDS=180). All of it goes to stdout and to
# $OUT/gpu_check.log (GPU_CHECK_LOG), ending with a summary: step, exit code, state
# (passed / FAILED / skipped / found / none), note (reason, first failures).
# cuBLAS is searched in $HERD_CUBLAS_PATH, LD_LIBRARY_PATH, ldconfig -p, /usr/local/cuda*/lib64,
# /usr/lib/x86_64-linux-gnu, a pip wheel's nvidia/cublas/lib, and what is found is exported as
# HERD_CUBLAS_PATH, which the backend dlopens first. GPU_CHECK_TREE=DIR runs on an unpacked or
# local tree (DIR/bin = bazel-bin's layout, DIR/shared) instead of .gpu; //tools:gpu_check_test
# runs `run` so on stubs with a fake nvidia-smi.
# With the device tool: run(command="bash tools/gpu_check.sh run", carry=[".gpu"],
# timeout_s=600). `run` also works here (lavapipe; GPU_CHECK_BACKENDS=vulkan to benchmark
# it), which is how the packing is tested.
# A new GPU backend adds its test binaries to TESTS, its name to BACKENDS and its device
# test to has_device (and, for a kind only some binaries link, its bench to bench_for), and
# to GPU_BENCH_BACKENDS (with gpu_bench_for) to be benchmarked by gpu_bench.
# CUDA: the binaries link the CUDA runtime statically and need only the target's driver, one
# for CUDA 13 (>= 580; no fallback for older drivers: see docs/testing.md); the pack records
# the cudart version (cuda.txt). cuBLAS (dlopen'ed, ~600 MiB with cuBLASLt) is not packed, so
# unless the target has libcublas.so.13 batched products run on the backend's own tiled
# kernel (the unit test prints which).
# HIP: the tests and llama_bench_hip link ROCm's libamdhip64 (packed with its libraries);
# on an NVIDIA machine the HIP tests skip. The kernels are gfx90a and gfx940 code objects
# only (no gfx942 / MI300: Debian's clang-15 and ROCm 5.2 device libraries lack it): on other
# AMD GPUs the HIP runtime refuses to start the HIP binaries.
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
cd "$(dirname "$0")/.." || exit 2
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
  # What the CUDA binaries need of the driver (run prints it beside the driver's version).
  {
    echo "cudart $(awk '/#define CUDART_VERSION/{print $3}' /usr/local/cuda/include/cuda_runtime_api.h)"
    echo "build nvcc $(/usr/local/cuda/bin/nvcc --version | grep -o 'V[0-9][0-9.]*' | tr -d V), sm_90 SASS + compute_90 PTX"
  } > "$PACK/cuda.txt"
  # compute-sanitizer (run's memcheck pass), where this CUDA install has it and it fits.
  local san=/usr/local/cuda/compute-sanitizer
  if [[ -x "$san/compute-sanitizer" ]] && (( $(du -sm "$san" | cut -f1) <= ${GPU_CHECK_SANITIZER_MAX_MB:-60} )); then
    cp -r "$san" "$PACK/compute-sanitizer"
  else
    echo "note: compute-sanitizer: not available here (not packed; run uses one on the target's PATH or CUDA install)"
  fi
  # The Vulkan loader, for a target without one (unpacked there only if missing).
  (cd "$PACK/debs" && apt-get download libvulkan1 >/dev/null 2>&1) || echo "note: could not download libvulkan1" >&2
  find "$PACK/bin" "$PACK/lib" -type f -exec strip --strip-unneeded {} \; 2>/dev/null
  mkdir -p .gpu && rm -f .gpu/herd-gpu.tar.xz
  tar -C "$PACK" -cf - . | xz -T2 -6 > .gpu/herd-gpu.tar.xz || return 1
  rm -rf "$PACK"
  ls -l .gpu/herd-gpu.tar.xz
}

# What the CUDA binaries need of the driver. The pack records its cudart's CUDART_VERSION
# (13000 = CUDA 13.0); every CUDA 13.x runtime needs a driver for CUDA 13, i.e. NVIDIA's
# >= 580 (580.65.06 came with CUDA 13.0; "minimum required driver" of CUDA's minor
# version compatibility: CUDA 13.x >= 580, 12.x >= 525).
CUDA_DRIVER_FLOOR=580

# Steps of `run`, for the summary: name, exit code, state (passed, FAILED, skipped, found,
# none), a note (the reason, or the first failures).
S_NAME=() S_RC=() S_STATE=() S_NOTE=()
record() { S_NAME+=("$1") S_RC+=("$2") S_STATE+=("$3") S_NOTE+=("${4:-}"); }

# Whether an NVIDIA GPU is present (a driver's device nodes, or an nvidia-smi that lists
# one: tests put a fake nvidia-smi on PATH).
nvidia_present() {
  compgen -G '/dev/nvidia[0-9]*' >/dev/null || [[ -e /dev/nvidiactl ]] ||
    { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }
}
amd_present() { [[ -e /dev/kfd ]]; }

# The driver against what the binaries need; prints "driver X supports CUDA Y; binaries
# need Z" first. Fails where the driver is older than the runtime's floor.
check_cuda_driver() {
  local cudart need_maj need_min line driver cuda_v
  cudart="$(awk '/^cudart /{print $2}' "$PACK/cuda.txt" 2>/dev/null)"
  [[ "$cudart" =~ ^[0-9]+$ ]] || cudart=13000
  need_maj=$((cudart / 1000)) need_min=$((cudart % 1000 / 10))
  local build need
  build="$(awk '/^build /{sub(/^build /, ""); print}' "$PACK/cuda.txt" 2>/dev/null)"
  need="CUDA $need_maj.$need_min (static cudart $cudart${build:+, $build}): NVIDIA driver >= $CUDA_DRIVER_FLOOR"
  if ! nvidia_present; then
    echo "cuda driver: no NVIDIA GPU here (no /dev/nvidia*, no nvidia-smi listing one); binaries need $need"
    record "cuda driver" - skipped "no NVIDIA GPU"
    return 0
  fi
  if ! command -v nvidia-smi >/dev/null; then
    echo "cuda driver: NVIDIA device nodes but no nvidia-smi: driver version unknown; binaries need $need"
    record "cuda driver" - unknown "no nvidia-smi"
    return 0
  fi
  line="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
  driver="$(awk -F', *' '{print $2}' <<<"$line")"
  cuda_v="$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*' | head -n 1 | grep -o '[0-9.]*$')"
  local msg="driver ${driver:-?} supports CUDA ${cuda_v:-?}; binaries need $need"
  echo "$msg"
  echo "GPU: ${line:-?}"
  local ok=1
  if [[ "$cuda_v" =~ ^([0-9]+)\.([0-9]+) ]]; then
    ((BASH_REMATCH[1] * 1000 + BASH_REMATCH[2] * 10 >= cudart)) || ok=0
  elif [[ "$driver" =~ ^([0-9]+) ]]; then
    ((BASH_REMATCH[1] >= CUDA_DRIVER_FLOOR)) || ok=0
  fi
  if ((ok)); then
    record "cuda driver" 0 passed "$msg"
  else
    echo "FAILED: cuda driver: the CUDA backend cannot start here (cudaErrorInsufficientDriver): update the driver"
    record "cuda driver" 1 FAILED "$msg"
    failed=1
  fi
}

# cuBLAS wherever this machine has it, in this order: $HERD_CUBLAS_PATH, LD_LIBRARY_PATH,
# ldconfig's cache, /usr/local/cuda*/lib64, /usr/lib/x86_64-linux-gnu, a pip wheel's
# nvidia/cublas/lib. The backend dlopens $HERD_CUBLAS_PATH first, so exporting what was
# found makes it use the same library.
find_cublas() {
  local name=libcublas.so.13 c d
  local cands=()
  [[ -n "${HERD_CUBLAS_PATH:-}" ]] && cands+=("$HERD_CUBLAS_PATH")
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do [[ -n "$d" ]] && cands+=("$d/$name"); done
  unset IFS
  while read -r c; do cands+=("$c"); done < <(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n {print $NF}')
  for d in /usr/local/cuda*/lib64 /usr/lib/x86_64-linux-gnu; do cands+=("$d/$name"); done
  local py
  for py in python3 python; do
    command -v "$py" >/dev/null || continue
    while read -r d; do cands+=("$d/nvidia/cublas/lib/$name"); done < <("$py" -c \
      'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null)
    break
  done
  for c in "${cands[@]}"; do
    if [[ -f "$c" ]]; then echo "$c"; return 0; fi
  done
  return 1
}

# compute-sanitizer: packed (tools/gpu_check.sh pack, where the CUDA install has it), on
# PATH, or in a CUDA install of this machine.
find_sanitizer() {
  local c
  for c in "$PACK/compute-sanitizer/compute-sanitizer" "$(command -v compute-sanitizer 2>/dev/null)" \
           /usr/local/cuda*/compute-sanitizer/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer; do
    if [[ -n "$c" && -x "$c" ]]; then echo "$c"; return 0; fi
  done
  return 1
}

# A skip of a backend whose GPU is here is a failure: the line saying why (e.g.
# "no CUDA device (cudaGetDeviceCount: cudaErrorInsufficientDriver ...)"), or nothing.
device_skip() {
  local log="$1" pat=''
  nvidia_present && pat='backend cuda: no device here|no CUDA device|cuda: no device found'
  amd_present && pat="${pat:+$pat|}backend hip: no device here|no HIP device|hip: no device found"
  [[ -n "$pat" ]] && grep -m 1 -E "$pat" "$log"
}

# One gtest binary: every case in its own process (--gtest_list_tests, then --gtest_filter
# per case, GPU_CHECK_JOBS at a time) so that a sticky CUDA error (a faulting kernel spoils
# its context for the rest of the process) fails only its case; one run when the listing
# gives a single test. Each process under `timeout` GPU_CHECK_CASE_SECONDS (default 120).
run_cases() {
  local t="$1" name="$2" dir="$3"
  shift 3
  local bin="$PACK/bin/$t" cases=() c
  while read -r c; do cases+=("$c"); done < <(timeout -k 5 60 env "$@" "$bin" --gtest_list_tests 2>/dev/null |
    awk '/^[^ #]/ { suite = ($1 ~ /\.$/) ? $1 : ""; next } /^  [^ ]/ && suite != "" { print suite $1 }')
  mkdir -p "$dir"
  local per="${GPU_CHECK_CASE_SECONDS:-120}" jobs="${GPU_CHECK_JOBS:-4}"
  if ((${#cases[@]} <= 1)); then
    local rc=0
    timeout -k 5 "${GPU_CHECK_STEP_SECONDS:-300}" env "$@" "$bin" --gtest_brief=1 > "$dir/all.log" 2>&1 || rc=$?
    grep -vE '^\[( RUN|       OK) ' "$dir/all.log"
    cp "$dir/all.log" "$dir/cases.log"
    CASE_FAILS=() CASE_COUNTS="1 run"
    if ((rc == 124 || rc == 137)); then
      CASE_FAILS=("$name (exit $rc: timed out after ${GPU_CHECK_STEP_SECONDS:-300} s)")
    elif ((rc != 0)); then
      CASE_FAILS=("$name (exit $rc: $(grep -m 1 -E 'Failure|error|Error|FAILED|Segmentation|Aborted' "$dir/all.log" | cut -c1-160))")
    fi
    return $rc
  fi
  # Waits name the case processes: a bare `wait` would also wait for run's tee.
  local i=0 pids=()
  for c in "${cases[@]}"; do
    (
      rc=0
      timeout -k 5 "$per" env "$@" "$bin" --gtest_filter="$c" --gtest_brief=1 > "$dir/$i.log" 2>&1 || rc=$?
      echo "$rc" > "$dir/$i.rc"
    ) &
    pids+=($!)
    i=$((i + 1))
    if ((${#pids[@]} >= jobs)); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  ((${#pids[@]} == 0)) || wait "${pids[@]}"
  CASE_FAILS=()
  local passed=0 skipped=0 rc
  : > "$dir/cases.log"
  for ((i = 0; i < ${#cases[@]}; i++)); do
    rc="$(cat "$dir/$i.rc" 2>/dev/null || echo 125)"
    { echo "--- ${cases[i]} (exit $rc)"; cat "$dir/$i.log"; } >> "$dir/cases.log"
    if ((rc != 0)); then
      local why
      why="$(grep -m 1 -E 'Failure|error|Error|FAILED|Segmentation|Aborted' "$dir/$i.log" | cut -c1-160)"
      ((rc == 124 || rc == 137)) && why="timed out after ${per} s"
      CASE_FAILS+=("${cases[i]} (exit $rc${why:+: $why})")
      echo "FAILED case: ${cases[i]} (exit $rc)"
      grep -vE '^\[( RUN|       OK) ' "$dir/$i.log" | tail -n 20
    elif grep -q '^\[  SKIPPED \]' "$dir/$i.log"; then
      skipped=$((skipped + 1))
    else
      passed=$((passed + 1))
    fi
  done
  CASE_COUNTS="${#cases[@]} cases, one per process: $passed passed, ${#CASE_FAILS[@]} failed, $skipped skipped"
  echo "$name: $CASE_COUNTS"
  ((${#CASE_FAILS[@]} == 0))
}

summary() {
  echo
  echo "=== gpu_check summary ($(date -u +%FT%TZ), $SECONDS s)"
  printf '%-40s %-5s %-8s %s\n' step exit state note
  local i
  for ((i = 0; i < ${#S_NAME[@]}; i++)); do
    printf '%-40s %-5s %-8s %s\n' "${S_NAME[i]}" "${S_RC[i]}" "${S_STATE[i]}" "${S_NOTE[i]}"
  done
  echo "gpu_check: $([[ $failed -eq 0 ]] && echo passed || echo FAILED) (log: $LOG)"
}

run() {
  # Everything goes to $OUT/gpu_check.log (the device tool brings $OUT back) and stdout.
  LOG="${GPU_CHECK_LOG:-${OUT:-${TMPDIR:-/tmp}}/gpu_check.log}"
  mkdir -p "$(dirname "$LOG")" && : > "$LOG"
  exec > >(tee -a "$LOG") 2>&1
  local PACK="$UNPACKED"
  if [[ -n "${GPU_CHECK_TREE:-}" ]]; then
    # An unpacked or locally built tree: bin/<package>/<target> (bazel-bin's layout), lib/,
    # shared/. For testing the script here (tools/gpu_check_test.sh) and against a build.
    PACK="$GPU_CHECK_TREE"
  else
    [[ -f .gpu/herd-gpu.tar.xz ]] || { echo "no .gpu/herd-gpu.tar.xz: run 'tools/gpu_check.sh pack' here first and carry .gpu"; return 2; }
    rm -rf "$UNPACKED" && mkdir -p "$UNPACKED" && xz -dc .gpu/herd-gpu.tar.xz | tar -C "$UNPACKED" -xf - || return 2
  fi
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
  export HERD_SHARED="${GPU_CHECK_SHARED:-$PACK/shared}" HERD_BIN_DIR="$PACK/bin"
  failed=0
  echo "=== gpu_check run on $(hostname 2>/dev/null) ($(date -u +%FT%TZ))"
  check_cuda_driver
  local cublas
  if cublas="$(find_cublas)"; then
    echo "cuBLAS: $cublas"
    export HERD_CUBLAS_PATH="$cublas"
    record "cublas" - found "$cublas"
  else
    echo "cuBLAS: none (batched products run on the backend's tiled kernel)"
    record "cublas" - none "libcublas.so.13 not found"
  fi
  if amd_present; then
    echo "AMD GPU (/dev/kfd): $(cat /sys/class/kfd/kfd/topology/nodes/*/name 2>/dev/null | grep -v '^$' | sort -u | tr '\n' ' ')"
    if [[ ! -e "$PACK/lib/libamd_comgr.so.2" ]] && ! ldconfig -p 2>/dev/null | grep -q 'libamd_comgr.so.2'; then
      echo "note: libamd_comgr.so.2 is neither packed ('tools/gpu_check.sh pack amd') nor installed: HIP kernels will not load"
    fi
  fi
  "$PACK/bin/tools/herd/herd" --version 2>/dev/null
  local logs="${TMPDIR:-/tmp}/gpu_check.$$"
  rm -rf "$logs" && mkdir -p "$logs"
  # Correctness: CUDA_LAUNCH_BLOCKING=1 so that a faulting kernel is reported by its own
  # launch (the error names it) rather than by a later call.
  local t
  for t in "${TESTS[@]}"; do
    local name="${t##*/}" dir="$logs/${t##*/}" rc=0
    echo "=== $t"
    if [[ ! -x "$PACK/bin/$t" ]]; then
      echo "FAILED: $t: not in the pack"
      record "$name" 127 FAILED "missing binary"
      failed=1
      continue
    fi
    CASE_FAILS=() CASE_COUNTS=""
    run_cases "$t" "$name" "$dir" CUDA_LAUNCH_BLOCKING=1 || rc=$?
    local skip note state=passed
    skip="$(device_skip "$dir/cases.log")"
    if ((${#CASE_FAILS[@]} > 0)); then
      local first
      first="$(printf '%s; ' "${CASE_FAILS[@]:0:3}")"
      state=FAILED note="$CASE_COUNTS; first: ${first%; }"
    elif [[ -n "$skip" ]]; then
      state=FAILED note="GPU present but skipped: $(cut -c1-200 <<<"$skip")"
      echo "FAILED: $t skipped a backend whose GPU is here: $skip"
      ((rc == 0)) && rc=1
    else
      note="$CASE_COUNTS"
      # Skipped: the first line of the tests' own output says why.
      grep -q '^\[  SKIPPED \]' "$dir/cases.log" && state=skipped note="$CASE_COUNTS; $(grep -m 1 -vE \
        '^(\[|---|Running main|Note: |$)|: Skipped$' "$dir/cases.log" | cut -c1-160)"
    fi
    [[ "$state" == FAILED ]] && { failed=1; echo "FAILED: $t"; }
    record "$name" "$rc" "$state" "$note"
  done
  # compute-sanitizer memcheck over the CUDA op cases (one process: it is slow).
  local san
  if ! nvidia_present; then
    record "compute-sanitizer memcheck" - skipped "no NVIDIA GPU"
  elif ! san="$(find_sanitizer)"; then
    echo "compute-sanitizer: not available"
    record "compute-sanitizer memcheck" - skipped "compute-sanitizer: not available"
  else
    local secs="${GPU_CHECK_SANITIZER_SECONDS:-180}" rc=0
    echo "=== compute-sanitizer memcheck: backend_ops_test on cuda ($san, ${secs} s)"
    timeout -k 5 "$secs" env HERD_BACKEND_OPS_BACKENDS=cuda CUDA_LAUNCH_BLOCKING=1 "$san" --tool memcheck \
      --error-exitcode 86 --print-limit 20 "$PACK/bin/tests/backend_ops/backend_ops_test" --gtest_brief=1 \
      > "$logs/memcheck.log" 2>&1 || rc=$?
    grep -vE '^\[( RUN|       OK) ' "$logs/memcheck.log" | tail -n 60
    if ((rc == 0)); then
      record "compute-sanitizer memcheck" 0 passed "$(grep -m 1 'ERROR SUMMARY' "$logs/memcheck.log")"
    else
      failed=1
      local why
      why="$(grep -m 1 -E 'Invalid|ERROR SUMMARY|FAILED' "$logs/memcheck.log" | cut -c1-160)"
      ((rc == 124 || rc == 137)) && why="timed out after ${secs} s (GPU_CHECK_SANITIZER_SECONDS)"
      record "compute-sanitizer memcheck" "$rc" FAILED "$why"
    fi
  fi
  local benched=() b
  if [[ -n "${GPU_CHECK_BACKENDS:-}" ]]; then
    read -r -a benched <<<"$GPU_CHECK_BACKENDS"
  else
    for b in "${BACKENDS[@]}"; do
      if has_device "$b"; then benched+=("$b"); else
        echo "=== llama_bench --backend $b: skipped (no $b device here)"
        record "llama_bench $b" - skipped "no $b device here"
      fi
    done
  fi
  for b in "${benched[@]}"; do
    echo "=== llama_bench --backend $b"
    local rc=0
    timeout -k 5 "${GPU_CHECK_BENCH_SECONDS:-240}" "$PACK/bin/$(bench_for "$b")" --backend "$b" --model llama-110m \
      --types "${GPU_CHECK_TYPES:-f16,q8_0,q4_0}" --threads 4 --reps 2 || rc=$?
    if ((rc == 0)); then record "llama_bench $b" 0 passed; else
      echo "FAILED: llama_bench --backend $b (exit $rc)"; failed=1; record "llama_bench $b" "$rc" FAILED
    fi
  done
  for b in "${GPU_BENCH_BACKENDS[@]}"; do
    [[ "${GPU_CHECK_GPU_BENCH:-1}" == 0 ]] && { echo "=== gpu_bench: skipped (GPU_CHECK_GPU_BENCH=0)"; record "gpu_bench" - skipped "GPU_CHECK_GPU_BENCH=0"; break; }
    has_device "$b" || { echo "=== gpu_bench --backend $b: skipped (no $b device here)"; record "gpu_bench $b" - skipped "no $b device here"; continue; }
    local left=$(( ${GPU_CHECK_SECONDS:-540} - SECONDS ))
    if (( left < 60 )); then
      echo "=== gpu_bench --backend $b: skipped (${left} s left of GPU_CHECK_SECONDS=${GPU_CHECK_SECONDS:-540})"
      record "gpu_bench $b" - skipped "${left} s left of GPU_CHECK_SECONDS"
      continue
    fi
    local peak="${GPU_CHECK_PEAK_GBPS:-}"
    [[ -n "$peak" ]] || { [[ "$b" == cuda ]] && peak=4500 || peak=0; }
    echo "=== gpu_bench --backend $b (--max_seconds $((left - 30)))"
    local rc=0
    timeout -k 10 "$left" "$PACK/bin/$(gpu_bench_for "$b")" --backend "$b" --models "${GPU_CHECK_GPU_BENCH_MODELS:-7b}" \
      --types "${GPU_CHECK_GPU_BENCH_TYPES:-q4_0}" --reps 3 --threads 4 --peak_gbps "$peak" \
      --max_seconds $((left - 30)) --cache_dir "${TMPDIR:-/tmp}/herd-bench" || rc=$?
    if ((rc == 0)); then record "gpu_bench $b" 0 passed; else
      echo "FAILED: gpu_bench --backend $b (exit $rc)"; failed=1; record "gpu_bench $b" "$rc" FAILED
    fi
  done
  summary
  return $failed
}

case "${1:-}" in
  pack) pack "${2:-}" ;;
  run) run ;;
  *) echo "usage: tools/gpu_check.sh pack [amd] | run"; exit 2 ;;
esac
