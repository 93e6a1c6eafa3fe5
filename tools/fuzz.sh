#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan + libFuzzer) and runs
# each for a bounded time over its committed seed corpus (tests/fuzz/corpus/<name>/).
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 20 s, every target)
# Prints one line per target in Bazel's format, e.g.
#   //tests/fuzz:gguf_fuzz[fuzz]   PASSED in 20.4s
# so tools/test.sh counts them; exits non-zero when a target fails to build or finds a
# crash (the reproducer is kept under $HERD_FUZZ_OUT/artifacts/, default
# ~/.cache/herd-fuzz/<worktree>/artifacts). New inputs go to a scratch corpus there,
# never into the committed seeds.
#
# Why not Bazel: Bazel 4.2.3 auto-configures one C++ toolchain (gcc-12, no libFuzzer);
# switching CC to clang re-configures @local_config_cc for the whole workspace, both
# ways, on every switch. The targets are small, so this script compiles them directly,
# incrementally (objects are rebuilt when a source or header they include changed).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

secs=${1:-20}
shift || true
CXX=${CXX_FUZZ:-clang++-14}
command -v "$CXX" >/dev/null || CXX=clang++
out=${HERD_FUZZ_OUT:-$HOME/.cache/herd-fuzz/$(echo "$root" | sha1sum | cut -c1-12)}
mkdir -p "$out/obj" "$out/artifacts" "$out/gen"

# $out/gen: C++ generated from proto/ by Debian's protoc (system headers: no warnings).
CXXFLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I"$root" -isystem "$out/gen" -Wall -Wextra -Werror
  -DBOOST_ASIO_NO_DEPRECATED
  -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all)
LDFLAGS=(-fsanitize=fuzzer,address,undefined -pthread)
for f in /usr/lib/x86_64-linux-gnu/libabsl_*.so; do LDFLAGS+=("$f"); done
LDFLAGS+=(-licui18n -licuuc -licudata)
# gRPC and protobuf only for the targets that use them (remote_compute_fuzz).
GRPC_LIBS=(-lgrpc++ -lgrpc -lgpr -lprotobuf)
declare -A LIBS=([remote_compute_fuzz]="${GRPC_LIBS[*]}")

# Every non-test source of libs/base, so a new helper there cannot break the link.
BASE=()
for f in libs/base/*.cc; do [[ "$f" == *_test.cc ]] || BASE+=("$f"); done
GGUF=(libs/gguf/gguf.cc libs/gguf/ggml_type.cc "${BASE[@]}")
TOKENIZER=(libs/tokenizer/pre_tokenizers.cc libs/tokenizer/tokenize_bpe.cc libs/tokenizer/tokenize_spm.cc
  libs/tokenizer/tokenize_wpm.cc libs/tokenizer/tokenizer.cc libs/tokenizer/unicode.cc
  libs/tokenizer/vocab_load.cc tests/fuzz/vocab_builder.cc services/gateway/text_stream.cc "${GGUF[@]}")
# The CPU backend with its kernels (libs/backend, libs/kernels/cpu, libs/tensor).
CPU_BACKEND=(libs/backend/backend.cc libs/backend/op_support.cc libs/backend/cpu_backend.cc
  libs/kernels/cpu/graph_ops.cc libs/kernels/cpu/flash_attn.cc libs/kernels/cpu/flash_attn_shared.cc
  libs/tensor/graph_alloc.cc libs/tensor/op_params.cc libs/tensor/tensor.cc
  libs/tensor/quants.cc libs/kernels/cpu/kernels.cc libs/kernels/cpu/ops.cc libs/kernels/cpu/kernels_avx2.cc
  libs/kernels/cpu/kernels_avx512.cc libs/kernels/cpu/kernels_avx512_vnni.cc libs/kernels/cpu/model_ops.cc
  "${GGUF[@]}")
# Per-file copts of the Bazel rules (libs/kernels/cpu/BUILD, libs/tensor/BUILD); the
# SIMD kernels silence gcc-only warnings by name, which clang does not know.
AVX2_COPTS="-mavx2 -mfma -mf16c -ffp-contract=off -Wno-unknown-warning-option"
AVX512_COPTS="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni $AVX2_COPTS"
declare -A COPTS=(
  [libs/kernels/cpu/kernels.cc]="-ffp-contract=off"
  [libs/kernels/cpu/ops.cc]="-ffp-contract=off"
  [libs/kernels/cpu/graph_ops.cc]="-ffp-contract=off"
  [libs/kernels/cpu/flash_attn.cc]="-ffp-contract=off"
  [libs/kernels/cpu/flash_attn_shared.cc]="-ffp-contract=off"
  [libs/tensor/quants.cc]="-ffp-contract=off"
  [libs/kernels/cpu/kernels_avx2.cc]="$AVX2_COPTS"
  [libs/kernels/cpu/kernels_avx512.cc]="$AVX512_COPTS"
  [libs/kernels/cpu/kernels_avx512_vnni.cc]="$AVX512_COPTS"
)
# Protos compiled into $out/gen (gen/<path> in SRCS): C++ messages, and gRPC services.
PROTOS=(proto/herd/v1/remote.proto)
REMOTE=(libs/backend/remote/wire.cc libs/backend/remote/remote_server.cc gen/proto/herd/v1/remote.pb.cc
  gen/proto/herd/v1/remote.grpc.pb.cc "${CPU_BACKEND[@]}")
declare -A SRCS=(
  [gguf_fuzz]="tests/fuzz/gguf_fuzz.cc ${GGUF[*]}"
  [tokenizer_fuzz]="tests/fuzz/tokenizer_fuzz.cc ${TOKENIZER[*]}"
  [detokenizer_fuzz]="tests/fuzz/detokenizer_fuzz.cc ${TOKENIZER[*]}"
  [ngram_cache_fuzz]="tests/fuzz/ngram_cache_fuzz.cc libs/engine/spec/ngram_cache.cc libs/engine/spec/spec_config.cc ${BASE[*]}"
  [http_request_fuzz]="tests/fuzz/http_request_fuzz.cc libs/serving/http_parse.cc libs/base/json_nesting.cc"
  [remote_compute_fuzz]="tests/fuzz/remote_compute_fuzz.cc ${REMOTE[*]}"
)
# Objects built with other flags (or another compiler) are stale: start over.
flags="$CXX ${CXXFLAGS[*]}"
if [[ "$(cat "$out/obj/flags" 2>/dev/null)" != "$flags" ]]; then
  rm -f "$out"/obj/*.o "$out"/obj/*.d
  printf '%s' "$flags" >"$out/obj/flags"
fi
targets=("$@")
((${#targets[@]} == 0)) && targets=(gguf_fuzz tokenizer_fuzz detokenizer_fuzz ngram_cache_fuzz http_request_fuzz
  remote_compute_fuzz)

# Regenerates a proto's C++ when the .proto is newer than it.
gen_proto() {
  local p=$1 base="$out/gen/${1%.proto}"
  [[ -f $base.pb.cc && -f $base.grpc.pb.cc && $base.pb.cc -nt $p && $base.grpc.pb.cc -nt $p ]] && return 0
  protoc -I"$root" --cpp_out="$out/gen" --grpc_out="$out/gen" \
    --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" "$p"
}

# Compiles $1 (gen/... = under $out/gen) to an object unless it and every header it
# included are older than it.
compile() {
  local src=$1 obj="$out/obj/${1//\//_}.o" dep="$out/obj/${1//\//_}.d"
  [[ $src == gen/* ]] && src="$out/$src"
  if [[ -f $obj && -f $dep ]]; then
    local stale=0 d
    for d in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$dep"); do
      if [[ ! -e $d || $d -nt $obj ]]; then stale=1; break; fi
    done
    ((stale == 0)) && return 0
  fi
  # shellcheck disable=SC2086  # COPTS: words
  "$CXX" "${CXXFLAGS[@]}" ${COPTS[$1]:-} -MMD -MF "$dep" -c "$src" -o "$obj"
}

rc=0
for t in "${targets[@]}"; do
  label="//tests/fuzz:${t}[fuzz]"
  objs=()
  ok=1
  if [[ ${SRCS[$t]} == *gen/* ]]; then
    for p in "${PROTOS[@]}"; do gen_proto "$p" || ok=0; done
  fi
  for s in ${SRCS[$t]}; do
    ((ok)) || break
    compile "$s" || { ok=0; break; }
    objs+=("$out/obj/${s//\//_}.o")
  done
  # shellcheck disable=SC2086  # LIBS: words
  if ((ok)) && ! "$CXX" "${objs[@]}" "${LDFLAGS[@]}" ${LIBS[$t]:-} -o "$out/$t"; then ok=0; fi
  if ((!ok)); then
    printf '%-39s FAILED in 0.0s (build)\n' "$label"
    rc=1
    continue
  fi
  scratch="$out/corpus/$t"
  mkdir -p "$scratch"
  log="$out/$t.log"
  run_start=$(date +%s.%N)
  "$out/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -artifact_prefix="$out/artifacts/$t-" "$scratch" "tests/fuzz/corpus/$t" >"$log" 2>&1
  status=$?
  el=$(awk -v a="$run_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if ((status == 0)); then
    printf '%-39s PASSED in %ss\n' "$label" "$el"
    grep -E '^(stat::number_of_executed_units|Done [0-9]+ runs)' "$log" | sed "s#^#  $t: #" >&2
  else
    printf '%-39s FAILED in %ss\n' "$label" "$el"
    tail -40 "$log"
    rc=1
  fi
done
exit $rc
