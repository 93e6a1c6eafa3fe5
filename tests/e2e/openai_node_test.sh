#!/usr/bin/env bash
# The official OpenAI Node client (npm `openai`, installed by tools/setup.sh into
# $HERD_NODE_MODULES) against a local cluster started with `herd up`.
set -uo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
SHARED="${HERD_SHARED:-}"
if [[ -z "$SHARED" || ! -d "$SHARED/models" ]]; then
  echo "SKIPPED: ../shared not found: set HERD_SHARED to run the OpenAI client test"
  exit 0
fi
if [[ -z "${HERD_NODE_MODULES:-}" || ! -d "$HERD_NODE_MODULES/openai" ]]; then
  echo "SKIPPED: the openai npm package is not installed (tools/setup.sh installs it; tools/test.sh passes HERD_NODE_MODULES)"
  exit 0
fi
log="$TEST_TMPDIR/up.log"
"$R/tools/herd/herd" up --models "$SHARED/models" --model stories260K >"$log" 2>&1 &
up=$!
trap 'kill -INT $up 2>/dev/null; wait $up 2>/dev/null' EXIT
addr=""
for _ in $(seq 1 600); do
  addr=$(sed -n 's/^gateway  \([^ ]*\) (HTTP, OpenAI-compatible)$/\1/p' "$log")
  [[ -n "$addr" ]] && break
  kill -0 $up 2>/dev/null || { cat "$log"; echo "FAIL: herd up exited"; exit 1; }
  sleep 0.1
done
[[ -n "$addr" ]] || { cat "$log"; echo "FAIL: no gateway HTTP address"; exit 1; }
mkdir -p "$TEST_TMPDIR/js"
cp "$R/tests/e2e/openai_node/client.mjs" "$TEST_TMPDIR/js/"
ln -s "$HERD_NODE_MODULES" "$TEST_TMPDIR/js/node_modules"
node "$TEST_TMPDIR/js/client.mjs" "http://$addr/v1" stories260K
rc=$?
[[ $rc -eq 0 ]] || { tail -50 "$log"; echo "FAIL: the OpenAI client reported failures"; exit 1; }
echo "PASS openai node client"
