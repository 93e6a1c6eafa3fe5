#!/usr/bin/env bash
# The main job: build the herd CLI and generate the stories260K story greedily,
# printing the story on stdout and pp/tg tokens per second on stderr.
# Extra arguments are passed to `herd run` (e.g. -n 64 --temp 0.8 --seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh >&2
SHARED="${HERD_SHARED:-$(cd .. && pwd)/shared}"
MODEL="$SHARED/models/stories260K.gguf"
if [[ ! -f "$MODEL" ]]; then
  echo "herd: $MODEL not found (set HERD_SHARED to the shared folder)" >&2
  exit 1
fi
bazel build //tools/herd >&2
exec bazel-bin/tools/herd/herd run -m "$MODEL" -p "Once upon a time" -n 256 --temp 0 --display-prompt "$@"
