#!/usr/bin/env bash
# Runs every test (the README's test command; .ci/run calls it):
#   1. bazel test //...            (all unit, conformance and e2e tests)
#   2. bazel test --config=asan    (targets tagged asan: GGUF reader, tokenizer, ... under ASan + UBSan)
#   3. bazel test --config=tsan    (targets tagged tsan: scheduler, HTTP server, worker, gateway and
#                                   the e2e cluster test under ThreadSanitizer,
#                                   tools/tsan.supp for the un-instrumented Debian gRPC/protobuf/abseil)
#   4. tools/fuzz.sh               (each libFuzzer target of tests/fuzz for $HERD_FUZZ_SECONDS, default 20 s)
#   5. clang-format-14             (every C++ file as .clang-format formats it; drift fails, naming the files)
#   6. tools/clang_tidy.sh         (clang-tidy-14 on libs/ with .clang-tidy's checks; a finding fails,
#                                   named FILE:LINE:CHECK; results cached per file in ~/.cache/herd/clang-tidy)
# and ends with one plain line "N passed, N failed" over all of them. Our code builds with
# -Wall -Wextra -Werror (.bazelrc --per_file_copt; tools/fuzz.sh likewise with clang).
# Installs missing Debian packages first (tools/setup.sh is idempotent).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh >&2 || { echo "0 passed, 1 failed"; exit 1; }

if [[ -z "${HERD_SHARED:-}" && -d ../shared/models ]]; then
  HERD_SHARED="$(cd ../shared && pwd)"
fi
export HERD_SHARED="${HERD_SHARED:-}"
# The OpenAI Node client tools/setup.sh installed (tests/e2e:openai_node_test).
export HERD_NODE_MODULES="${HERD_NODE_CACHE:-$HOME/.cache/herd-openai-node}/node_modules"
if [[ -z "$HERD_SHARED" ]]; then
  echo "note: ../shared not found; tests that need its models and reference data will skip" >&2
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
bazel test --config=ci --test_env=HERD_SHARED="$HERD_SHARED" --test_env=HERD_NODE_MODULES="$HERD_NODE_MODULES" \
  --test_tag_filters=-asan_only //... 2>&1 | tee -a "$log"
rc1=${PIPESTATUS[0]}
bazel test --config=ci --config=asan --test_env=HERD_SHARED="$HERD_SHARED" \
  --build_tests_only --test_tag_filters=asan //... 2>&1 | sed -E 's#^(//[^ ]+)( +)#\1[asan]\2#' | tee -a "$log"
rc2=${PIPESTATUS[0]}
# Absolute path: the tests run in Bazel's sandbox, their child processes elsewhere.
tsan_options="suppressions=$(pwd)/tools/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
bazel test --config=ci --config=tsan --test_env=HERD_SHARED="$HERD_SHARED" --test_env=TSAN_OPTIONS="$tsan_options" \
  --build_tests_only --test_tag_filters=tsan //... 2>&1 | sed -E 's#^(//[^ ]+)( +)#\1[tsan]\2#' | tee -a "$log"
rc3=${PIPESTATUS[0]}
tools/fuzz.sh "${HERD_FUZZ_SECONDS:-20}" 2>&1 | tee -a "$log"
rc4=${PIPESTATUS[0]}
# Formatting: counted as one test, //tools:clang_format.
t0=$SECONDS
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  cxx_files=$(git ls-files '*.cc' '*.h')
else
  cxx_files=$(find libs services tools tests bench -name '*.cc' -o -name '*.h')
fi
# shellcheck disable=SC2086  # the file list is meant to split
drift=$(clang-format-14 --dry-run -Werror $cxx_files 2>&1 | grep -E 'error: code should be clang-formatted' |
  cut -d: -f1 | sort -u)
if [[ -z "$drift" ]]; then
  echo "//tools:clang_format                                                    PASSED in $((SECONDS - t0)).0s" | tee -a "$log"
else
  echo "//tools:clang_format                                                    FAILED: $(echo "$drift" | wc -l) files differ from .clang-format (clang-format-14 -i FILE):" | tee -a "$log"
  echo "$drift" | sed 's/^/  /'
  rc=1
fi
# Static analysis: counted as one test, //tools:clang_tidy.
t0=$SECONDS
tidy=$(tools/clang_tidy.sh 2>&1)
tidy_rc=$?
if ((tidy_rc == 0)); then
  echo "//tools:clang_tidy                                                      PASSED in $((SECONDS - t0)).0s" | tee -a "$log"
else
  echo "//tools:clang_tidy                                                      FAILED: clang-tidy findings (tools/clang_tidy.sh [FILE.cc]):" | tee -a "$log"
  echo "$tidy" | grep -v '^clang-tidy: ' | sed 's/^/  /'
  rc=1
fi
echo "$tidy" | grep '^clang-tidy: ' || true
(( rc1 != 0 )) && rc=$rc1
(( rc2 != 0 )) && rc=$rc2
(( rc3 != 0 )) && rc=$rc3
(( rc4 != 0 )) && rc=$rc4
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED in' "$log")
failed=$(grep -cE '^//[^ ]+ +.*(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log")
echo "$passed passed, $failed failed"
exit "$rc"
