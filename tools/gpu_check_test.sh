#!/usr/bin/env bash
# Tests tools/gpu_check.sh run (//tools:gpu_check_test, a few seconds) on stub binaries: a
# tree of shell scripts that answer like gtest binaries (--gtest_list_tests, one case per
# --gtest_filter), and a fake nvidia-smi on PATH that lists a GPU with an old driver.
#   1. No NVIDIA GPU: the CUDA test's skip is not a failure; the check passes; the log has
#      the summary and says cuBLAS none / where.
#   2. A GPU whose driver supports CUDA 12.8 only: the check fails, printing "driver
#      570.124.06 supports CUDA 12.8; binaries need CUDA 13.0" first, and the CUDA test's
#      skip is a failure with its reason.
#   3. One op case of three fails: the other two still run (one process each) and the
#      failure names its case.
#   4. HERD_CUBLAS_PATH: the cuBLAS found is exported to the binaries.
set -uo pipefail
script="${1:-$(dirname "$0")/gpu_check.sh}"
[[ -f "$script" ]] || { echo "no $script"; exit 1; }
tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/gpu_check_test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}

# The stub gtest binary: STUB_KIND picks its behaviour (from its path).
mkdir -p "$tmp/tree/bin" "$tmp/tree/lib" "$tmp/tree/shared" "$tmp/fakebin" "$tmp/cublas"
cat > "$tmp/stub" <<'EOF'
#!/usr/bin/env bash
# A gtest-like stub; the kind is the file's name.
kind="$(basename "$0")"
echo "$kind CUDA_LAUNCH_BLOCKING=${CUDA_LAUNCH_BLOCKING:-} HERD_CUBLAS_PATH=${HERD_CUBLAS_PATH:-}" >> "$STUB_CALLS"
filter=""
for a in "$@"; do
  case "$a" in
    --gtest_list_tests)
      echo "Running main() from gmock_main.cc"
      if [[ "$kind" == backend_ops_test ]]; then printf 'Ops/Case.\n  Add  # GetParam() = 1\n  Mul\n  Soft\n'; else printf 'Suite.\n  Only\n'; fi
      exit 0 ;;
    --gtest_filter=*) filter="${a#--gtest_filter=}" ;;
    --version) echo "herd stub"; exit 0 ;;
  esac
done
case "$kind" in
  cuda_backend_test)
    echo "[ RUN      ] Suite.Only"
    echo "[  SKIPPED ] Suite.Only"
    echo "no CUDA device (cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA runtime version)): the CUDA backend is not tested"
    exit 0 ;;
  backend_ops_test)
    if [[ "$filter" == "${STUB_FAIL_CASE:-}" ]]; then
      echo "op.cc:12: Failure"
      echo "[  FAILED  ] Ops/Case.Mul"
      exit 1
    fi
    echo "[       OK ] $filter"
    exit 0 ;;
esac
exit 0
EOF
chmod +x "$tmp/stub"
for t in tests/backend_ops/backend_ops_test libs/backend/vulkan/vulkan_backend_test libs/backend/cuda/cuda_backend_test \
         libs/engine/engine_sched_test tests/conformance/backends_test tests/e2e/mixed_backends_test \
         libs/backend/hip/hip_backend_test tests/backend_ops/backend_ops_hip_test tests/conformance/backends_hip_test \
         tools/herd/herd bench/llama_bench bench/llama_bench_hip bench/gpu_bench bench/gpu_bench_hip; do
  mkdir -p "$tmp/tree/bin/${t%/*}"
  cp "$tmp/stub" "$tmp/tree/bin/$t"
done
printf 'cudart 13000\nbuild nvcc 13.0.88, sm_90 SASS + compute_90 PTX\n' > "$tmp/tree/cuda.txt"
: > "$tmp/cublas/libcublas.so.13"

cat > "$tmp/fakebin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
# A GPU with a driver for CUDA 12.8 (the R570 branch).
case "${1:-}" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  --query-gpu=*) echo "NVIDIA H200, 570.124.06, 143771 MiB" ;;
  *) echo "| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |" ;;
esac
EOF
chmod +x "$tmp/fakebin/nvidia-smi"

run_check() {  # run_check OUTFILE [PATH prefix [failing op case]]: the check's exit status; its stdout in OUTFILE
  local out="$1" path="${2:-}"
  export STUB_FAIL_CASE="${3:-}"
  export STUB_CALLS="$tmp/calls"
  : > "$STUB_CALLS"
  env -u HERD_CUBLAS_PATH PATH="${path:+$path:}$PATH" GPU_CHECK_TREE="$tmp/tree" OUT="$tmp/out" TMPDIR="$tmp" \
    GPU_CHECK_GPU_BENCH=0 GPU_CHECK_BACKENDS="" LD_LIBRARY_PATH="$tmp/cublas" bash "$script" run > "$out" 2>&1
}

if [[ -e /dev/nvidiactl ]] || compgen -G '/dev/nvidia[0-9]*' >/dev/null || command -v nvidia-smi >/dev/null; then
  echo "skipped case 1: this machine has an NVIDIA GPU or nvidia-smi"
else
  rc=0
  run_check "$tmp/nogpu.txt" || rc=$?
  check "no NVIDIA GPU: the check passes (exit $rc)" test "$rc" -eq 0
  check "no NVIDIA GPU: the CUDA skip is reported as skipped" grep -qE '^cuda_backend_test +0 +skipped' "$tmp/nogpu.txt"
  check "no NVIDIA GPU: said so" grep -q 'cuda driver: no NVIDIA GPU here' "$tmp/nogpu.txt"
  check "the log is written to \$OUT/gpu_check.log" grep -q '=== gpu_check summary' "$tmp/out/gpu_check.log"
fi

rc=0
run_check "$tmp/old.txt" "$tmp/fakebin" Ops/Case.Mul || rc=$?
check "old driver: the check fails (exit $rc)" test "$rc" -ne 0
first="$(grep -m 1 -E 'driver|cuda' "$tmp/old.txt")"
check "old driver: the driver line comes first: $first" \
  grep -q '^driver 570.124.06 supports CUDA 12.8; binaries need CUDA 13.0 (static cudart 13000' <<<"$first"
check "old driver: the floor is printed" grep -q 'NVIDIA driver >= 580' "$tmp/old.txt"
check "old driver: the CUDA skip is a failure with its reason" \
  grep -qE '^cuda_backend_test +1 +FAILED +GPU present but skipped: no CUDA device \(cudaGetDeviceCount: cudaErrorInsufficientDriver' \
  "$tmp/old.txt"
check "old driver: the summary says FAILED" grep -q '^gpu_check: FAILED' "$tmp/old.txt"

check "op cases: one process each, all three run" test "$(grep -c '^backend_ops_test ' "$tmp/calls")" -eq 4
check "op cases: the failed case is named" grep -qE '^backend_ops_test +1 +FAILED +3 cases.*Ops/Case.Mul \(exit 1: op.cc:12: Failure' "$tmp/old.txt"
check "op cases: the counts" grep -q '2 passed, 1 failed, 0 skipped' "$tmp/old.txt"
check "correctness steps run with CUDA_LAUNCH_BLOCKING=1" grep -q 'cuda_backend_test CUDA_LAUNCH_BLOCKING=1' "$tmp/calls"
check "cuBLAS: found on LD_LIBRARY_PATH and exported as HERD_CUBLAS_PATH" \
  grep -q "HERD_CUBLAS_PATH=$tmp/cublas/libcublas.so.13" "$tmp/calls"
check "cuBLAS: where it is, printed" grep -q "^cuBLAS: $tmp/cublas/libcublas.so.13" "$tmp/old.txt"
check "compute-sanitizer: reported" grep -qE 'compute-sanitizer memcheck +- +skipped +compute-sanitizer: not available|compute-sanitizer memcheck +[0-9]' "$tmp/old.txt"

if ((fails > 0)); then
  echo "--- old driver output:"
  cat "$tmp/old.txt"
  echo "$fails checks failed"
  exit 1
fi
echo "all checks passed"
