#!/usr/bin/env bash
# Runs clang-tidy (Debian's clang-tidy-14, checks in .clang-tidy) over the library sources.
#   tools/clang_tidy.sh [FILE.cc...]      (default: every non-test .cc under libs/)
# Bazel 4.2.3 cannot export compile commands offline, so this writes a
# compile_commands.json for the given files (flags as in their BUILD files: -std=c++17,
# the repo root on the include path, the SIMD -m flags of libs/kernels/cpu) into
# $HERD_TIDY_OUT (default ~/.cache/herd-tidy/<worktree>) and runs clang-tidy with -p there.
# Exit status non-zero when clang-tidy reports a warning (WarningsAsErrors: '*').
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
TIDY=${CLANG_TIDY:-clang-tidy}
out=${HERD_TIDY_OUT:-$HOME/.cache/herd-tidy/$(echo "$root" | sha1sum | cut -c1-12)}
mkdir -p "$out"

files=("$@")
if ((${#files[@]} == 0)); then
  mapfile -t files < <(find libs -name '*.cc' ! -name '*_test.cc' ! -name '*_bench.cc' | sort)
fi

# bazel-bin holds generated headers (protos) when a build has run.
python3 - "$root" "$out/compile_commands.json" "${files[@]}" <<'PY'
import json, sys
root, dest, files = sys.argv[1], sys.argv[2], sys.argv[3:]
cmds = []
for f in files:
    args = ["clang++", "-std=c++17", "-I" + root, "-I" + root + "/bazel-bin", "-DNDEBUG", "-c", f]
    if f.endswith("kernels_avx2.cc"):
        args += ["-mavx2", "-mfma", "-mf16c"]
    elif f.endswith("kernels_avx512.cc"):
        args += ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mavx2", "-mfma", "-mf16c"]
    cmds.append({"directory": root, "file": f, "arguments": args})
json.dump(cmds, open(dest, "w"), indent=1)
PY

rc=0
for f in "${files[@]}"; do
  if ! "$TIDY" -p "$out" --quiet "$f" 2>/dev/null; then
    echo "clang-tidy: $f has findings" >&2
    rc=1
  fi
done
exit $rc
