#!/usr/bin/env bash
# The official OpenAI Node client (npm `openai`) and the Vercel AI SDK (npm `ai`,
# `@ai-sdk/openai`), installed by tools/setup.sh into $HERD_NODE_MODULES, against a
# local cluster started with `herd up` with a tool-calling chat template (Qwen2.5's,
# Hermes syntax): client.mjs (models, completions, chat, responses, embeddings) and agent.mjs (a
# two-turn agent loop with forced tool calls).
set -uo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
SHARED="${HERD_SHARED:-}"
if [[ -z "$SHARED" || ! -d "$SHARED/models" ]]; then
  echo "SKIPPED: ../shared not found: set HERD_SHARED to run the OpenAI client test"
  exit 0
fi
if [[ -z "${HERD_NODE_MODULES:-}" || ! -d "$HERD_NODE_MODULES/openai" || ! -d "$HERD_NODE_MODULES/ai" ]]; then
  echo "SKIPPED: the openai / ai npm packages are not installed (tools/setup.sh installs them; tools/test.sh passes HERD_NODE_MODULES)"
  exit 0
fi
log="$TEST_TMPDIR/up.log"
tmpl="$SHARED/reference/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"
[[ -f "$tmpl" ]] || { echo "FAIL: $tmpl is missing"; exit 1; }
"$R/tools/herd/herd" up --models "$SHARED/models" --model stories260K --chat-template "$tmpl" >"$log" 2>&1 &
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
cp "$R/tests/e2e/openai_node/client.mjs" "$R/tests/e2e/openai_node/agent.mjs" "$TEST_TMPDIR/js/"
ln -s "$HERD_NODE_MODULES" "$TEST_TMPDIR/js/node_modules"
node "$TEST_TMPDIR/js/client.mjs" "http://$addr/v1" stories260K
rc=$?
# (node exits 13 if a top-level await never settles, so a stalled stream fails too)
node "$TEST_TMPDIR/js/agent.mjs" "http://$addr/v1" stories260K || rc=1
[[ $rc -eq 0 ]] || { tail -50 "$log"; echo "FAIL: the OpenAI client reported failures"; exit 1; }
echo "PASS openai node client"
