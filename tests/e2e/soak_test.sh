#!/usr/bin/env bash
# Soak (manual: minutes long): bazel test //tests/e2e:soak_test --test_env=HERD_SHARED=$PWD/../shared \
#   [--test_arg=--streams=9 --test_arg=--minutes=3]
set -uo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
if [[ -z "${HERD_SHARED:-}" || ! -d "$HERD_SHARED/models" ]]; then
  echo "SKIPPED: ../shared not found: set HERD_SHARED to run the soak"
  exit 0
fi
exec /usr/bin/python3 "$R/tests/e2e/soak.py" --herd "$R/tools/herd/herd" --models "$HERD_SHARED/models" "$@"
