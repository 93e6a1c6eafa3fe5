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
mkdir -p "$out/obj" "$out/artifacts"

CXXFLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I"$root" -Wall -Wextra -Werror
  -DBOOST_ASIO_NO_DEPRECATED
  -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all)
LDFLAGS=(-fsanitize=fuzzer,address,undefined -pthread)
for f in /usr/lib/x86_64-linux-gnu/libabsl_*.so; do LDFLAGS+=("$f"); done
LDFLAGS+=(-licui18n -licuuc -licudata)

# Every non-test source of libs/base, so a new helper there cannot break the link.
BASE=()
for f in libs/base/*.cc; do [[ "$f" == *_test.cc ]] || BASE+=("$f"); done
GGUF=(libs/gguf/gguf.cc libs/gguf/ggml_type.cc "${BASE[@]}")
TOKENIZER=(libs/tokenizer/pre_tokenizers.cc libs/tokenizer/tokenize_bpe.cc libs/tokenizer/tokenize_spm.cc
  libs/tokenizer/tokenize_wpm.cc libs/tokenizer/tokenizer.cc libs/tokenizer/unicode.cc
  libs/tokenizer/vocab_load.cc tests/fuzz/vocab_builder.cc services/gateway/text_stream.cc "${GGUF[@]}")
declare -A SRCS=(
  [gguf_fuzz]="tests/fuzz/gguf_fuzz.cc ${GGUF[*]}"
  [tokenizer_fuzz]="tests/fuzz/tokenizer_fuzz.cc ${TOKENIZER[*]}"
  [detokenizer_fuzz]="tests/fuzz/detokenizer_fuzz.cc ${TOKENIZER[*]}"
  [ngram_cache_fuzz]="tests/fuzz/ngram_cache_fuzz.cc libs/engine/spec/ngram_cache.cc libs/engine/spec/spec_config.cc ${BASE[*]}"
  [http_request_fuzz]="tests/fuzz/http_request_fuzz.cc libs/serving/http_parse.cc libs/base/json_nesting.cc"
)
# Objects built with other flags (or another compiler) are stale: start over.
flags="$CXX ${CXXFLAGS[*]}"
if [[ "$(cat "$out/obj/flags" 2>/dev/null)" != "$flags" ]]; then
  rm -f "$out"/obj/*.o "$out"/obj/*.d
  printf '%s' "$flags" >"$out/obj/flags"
fi
targets=("$@")
((${#targets[@]} == 0)) && targets=(gguf_fuzz tokenizer_fuzz detokenizer_fuzz ngram_cache_fuzz http_request_fuzz)

# Compiles $1 to an object unless it and every header it included are older than it.
compile() {
  local src=$1 obj="$out/obj/${1//\//_}.o" dep="$out/obj/${1//\//_}.d"
  if [[ -f $obj && -f $dep ]]; then
    local stale=0 d
    for d in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$dep"); do
      if [[ ! -e $d || $d -nt $obj ]]; then stale=1; break; fi
    done
    ((stale == 0)) && return 0
  fi
  "$CXX" "${CXXFLAGS[@]}" -MMD -MF "$dep" -c "$src" -o "$obj"
}

rc=0
for t in "${targets[@]}"; do
  label="//tests/fuzz:${t}[fuzz]"
  objs=()
  ok=1
  for s in ${SRCS[$t]}; do
    compile "$s" || { ok=0; break; }
    objs+=("$out/obj/${s//\//_}.o")
  done
  if ((ok)) && ! "$CXX" "${objs[@]}" "${LDFLAGS[@]}" -o "$out/$t"; then ok=0; fi
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
