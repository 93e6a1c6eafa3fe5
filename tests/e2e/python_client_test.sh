#!/usr/bin/env bash
# The Python client (tools/python/herd_client.py, Debian python3-grpcio) against a
# local cluster started with `herd up`.
set -uo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
SHARED="${HERD_SHARED:-}"
if [[ -z "$SHARED" || ! -d "$SHARED/models" ]]; then
  echo "SKIPPED: ../shared not found: set HERD_SHARED to run the Python client test"
  exit 0
fi
if ! /usr/bin/python3 -c "import grpc, google.protobuf" 2>/dev/null; then
  echo "FAIL: Debian's python3-grpcio / python3-protobuf are missing (tools/setup.sh installs them)"
  exit 1
fi
log="$TEST_TMPDIR/up.log"
source "$R/tests/e2e/herd_up.sh"
start_herd_up "$log" "$R/tools/herd/herd" up --models "$SHARED/models" --model stories260K
out=$(PYTHONPATH="$R" /usr/bin/python3 "$R/tools/python/herd_client.py" --gateway "$addr" -m stories260K \
      -p "Once upon a time" -n 16 --temp 0 2>"$TEST_TMPDIR/py.err")
rc=$?
cat "$TEST_TMPDIR/py.err"
echo "client printed: $out"
[[ $rc -eq 0 ]] || { echo "FAIL: client exit $rc"; exit 1; }
[[ "$out" == ", there was a little girl named Lily"* ]] || { echo "FAIL: unexpected text"; exit 1; }
grep -q "finish: FINISH_REASON_LENGTH, completion tokens: 16" "$TEST_TMPDIR/py.err" || { echo "FAIL: usage line"; exit 1; }
echo "PASS python client"
