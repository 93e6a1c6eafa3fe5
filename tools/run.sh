#!/usr/bin/env bash
# The main job: start a local herd cluster (loader, one worker per model, gateway)
# on ../shared/models, generate the stories260K story greedily through the gateway
# (printed on stdout, with tokens/s on stderr), then stop the cluster cleanly.
# Extra arguments go to `herd generate` (e.g. -n 64 --temp 0.8 --seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh >&2
SHARED="${HERD_SHARED:-$(cd .. && pwd)/shared}"
if [[ ! -f "$SHARED/models/stories260K.gguf" ]]; then
  echo "herd: $SHARED/models/stories260K.gguf not found (set HERD_SHARED to the shared folder)" >&2
  exit 1
fi
bazel build //tools/herd //services/loader //services/worker //services/gateway >&2
BIN="$(bazel info bazel-bin 2>/dev/null)"
log="$(mktemp)"
"$BIN/tools/herd/herd" up --models "$SHARED/models" --model stories260K -c 2048 --max-seqs 4 --bin-dir "$BIN" >"$log" 2>&1 &
up=$!
cleanup() {
  kill -INT "$up" 2>/dev/null || true
  wait "$up" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT
addr=""
for _ in $(seq 1 600); do
  addr=$(sed -n 's/^gateway  \([^ ]*\) (gRPC)$/\1/p' "$log")
  [[ -n "$addr" ]] && break
  if ! kill -0 "$up" 2>/dev/null; then cat "$log" >&2; echo "herd: the cluster did not start" >&2; exit 1; fi
  sleep 0.1
done
[[ -n "$addr" ]] || { cat "$log" >&2; echo "herd: the cluster did not start in 60 s" >&2; exit 1; }
grep -E '^(loader|worker|gateway|metrics) ' "$log" >&2
printf 'Once upon a time'
"$BIN/tools/herd/herd" generate --gateway "$addr" -m stories260K -p "Once upon a time" -n 256 --temp 0 "$@"
echo >&2
echo "herd: stopping the cluster" >&2
