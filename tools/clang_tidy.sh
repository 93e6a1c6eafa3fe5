#!/usr/bin/env bash
# clang-tidy-14 over libs/ (checks in .clang-tidy) with the compile commands Bazel uses;
# tools/test.sh runs it as //tools:clang_tidy.
#   tools/clang_tidy.sh [--no-cache] [-j N] [libs/FILE.cc...]   (default: every non-test .cc under libs/)
# Prints each finding as FILE:LINE:CHECK: MESSAGE, then "clang-tidy: N files (N checked, N cached),
# N findings, N s"; exits 1 when there is a finding. Results are cached per file in
# $HERD_TIDY_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/herd/clang-tidy); see tools/clang_tidy.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 tools/clang_tidy.py "$@"
