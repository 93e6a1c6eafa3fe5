#!/usr/bin/env bash
# Smoke test of the images tools/images.sh built, without a daemon: starts loader,
# worker-cpu, draft and gateway from their images with `buildah run --isolation chroot`
# on the host network (loopback, ports picked by the services), the models of
# ../shared/models bind-mounted read-only at /models as in k8s/, probes each one with the
# `herd health` of its image, generates the stories260K story (greedy, 256 tokens) with
# the `herd generate` inside the gateway image, and compares it with run.c's text
# (stories260K.run_c_t0_n256.txt). Prints the story's first line, MATCH or MISMATCH, the
# services' user ids and peak RSS; exit status 0 on a match.
#
#   tools/images.sh && tools/images_smoke.sh     (HERD_SHARED: the shared folder; HERD_IMAGES_TAG: latest)
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${HERD_SHARED:-$(cd .. && pwd)/shared}"
MODELS="$SHARED/models"
REF="$MODELS/stories260K.run_c_t0_n256.txt"
[[ -f "$MODELS/stories260K.gguf" && -f "$REF" ]] || { echo "smoke: $MODELS/stories260K.{gguf,run_c_t0_n256.txt} not found (set HERD_SHARED)" >&2; exit 1; }
command -v buildah >/dev/null || { echo "smoke: buildah not found: run tools/images.sh first" >&2; exit 1; }
out="$(pwd)/out/images"
storage="${HERD_IMAGES_STORAGE:-$out/storage}"
BUILDAH=(buildah --root "$storage" --runroot "$out/run" --storage-driver vfs)
REGISTRY="${HERD_IMAGES_REGISTRY:-ghcr.io/herd}"
tag="${HERD_IMAGES_TAG:-latest}"
# The workers' context settings of the manifests (the ConfigMap's k8s/base/config.env).
cfg() { sed -n "s/^$1=//p" k8s/base/config.env; }
n_ctx="$(cfg HERD_N_CTX)" max_seqs="$(cfg HERD_MAX_SEQUENCES)" spec_type="$(cfg HERD_SPEC_TYPE)"

tmp="$(mktemp -d)"
ctrs=()
pgids=()
cleanup() {
  local rc=$?
  for ((i = ${#pgids[@]} - 1; i >= 0; i--)); do kill -TERM -- "-${pgids[i]}" 2>/dev/null || true; done
  for p in "${pgids[@]}"; do
    for _ in $(seq 1 100); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  for c in "${ctrs[@]}"; do "${BUILDAH[@]}" rm "$c" >/dev/null 2>&1 || true; done
  if ((rc != 0)); then
    for f in "$tmp"/*.log; do [[ -f "$f" ]] && { echo "--- $(basename "$f")"; tail -n 20 "$f"; } >&2; done
  fi
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT INT TERM

# container IMAGE: CTR = a working container of ghcr.io/herd/herd-IMAGE:TAG (its USER, no pull)
container() {
  CTR="$("${BUILDAH[@]}" from --pull-never --quiet --name "smoke-$1-$$" "$REGISTRY/herd-$1:$tag")"
  ctrs+=("$CTR")
}

# start NAME CONTAINER BINARY ARGS... : run the service in its own process group; its
# "listening on HOST:PORT" line gives ADDR.
start() {
  local name="$1" ctr="$2" bin="$3"
  shift 3
  setsid "${BUILDAH[@]}" run --isolation chroot --network host -v "$MODELS:/models:ro" "$ctr" -- \
    "/usr/local/bin/$bin" "$@" >"$tmp/$name.log" 2>&1 &
  pgids+=($!)
  ADDR=""
  for _ in $(seq 1 600); do
    ADDR="$(sed -n 's/^.* listening on \([^ ]*\)$/\1/p' "$tmp/$name.log" | head -1)"
    [[ -n "$ADDR" ]] && break
    kill -0 "$!" 2>/dev/null || { echo "smoke: $name exited before it was ready" >&2; return 1; }
    sleep 0.1
  done
  [[ -n "$ADDR" ]] || { echo "smoke: $name did not listen within 60 s" >&2; return 1; }
}

# health NAME CONTAINER ADDR SERVICE: the image's probe, as the manifests run it.
health() {
  if ! "${BUILDAH[@]}" run --isolation chroot --network host "$2" -- /usr/local/bin/herd health "$3" \
      ${4:+--service "$4"} --timeout 5 2>"$tmp/health-$1.err"; then
    echo "smoke: $1: $(cat "$tmp/health-$1.err")" >&2
    return 1
  fi
  printf 'smoke: %-8s %-22s %s\n' "$1" "$3" "$(cat "$tmp/health-$1.err")"
}

# rss NAME BINARY: user id and peak RSS of the service process in that process group.
rss() {
  local pid
  for p in $(pgrep -g "$2" -x "$3" || true); do pid=$p; done
  [[ -n "${pid:-}" ]] || { echo "$1: ?"; return; }
  awk -v n="$1" '/^Uid:/ {u=$2} /^VmHWM:/ {h=$2} END {printf "%s uid %s, peak RSS %.1f MiB", n, u, h/1024}' "/proc/$pid/status"
}

container loader && c_loader="$CTR"
container worker-cpu && c_worker="$CTR"
container draft && c_draft="$CTR"
container gateway && c_gateway="$CTR"
echo "smoke: images $REGISTRY/herd-{loader,worker-cpu,draft,gateway}:$tag; models $MODELS -> /models (read-only)"

start loader "$c_loader" loader --models_dir=/models --host=127.0.0.1 --port=0 --metrics_port=0
loader="$ADDR"
start worker "$c_worker" worker --loader="$loader" --model=stories260K --host=127.0.0.1 --port=0 \
  --metrics_port=0 --threads=2 --n_ctx="$n_ctx" --max_sequences="$max_seqs"
worker="$ADDR"
start draft "$c_draft" draft --spec_type="$spec_type" --host=127.0.0.1 --port=0 --metrics_port=0
draft="$ADDR"
start gateway "$c_gateway" gateway --loader="$loader" --workers="$worker" --draft_workers="$draft" \
  --spec_type="$spec_type" --host=127.0.0.1 --port=0 --http_port=-1 --metrics_port=0
gateway="$ADDR"

health loader "$c_loader" "$loader" herd.v1.Loader
health worker "$c_worker" "$worker" herd.v1.Worker
health draft "$c_draft" "$draft" herd.v1.Draft
health gateway "$c_gateway" "$gateway" ""
grep -h "mapped the loader's file\|streamed" "$tmp/worker.log" | sed 's/^/smoke: /' || true

# The story, through the gateway with the herd CLI of the gateway image.
"${BUILDAH[@]}" run --isolation chroot --network host "$c_gateway" -- /usr/local/bin/herd generate \
  --gateway "$gateway" -m stories260K -p "Once upon a time" -n 256 --temp 0 >"$tmp/story.txt" 2>"$tmp/generate.log"
sed 's/^/smoke: /' "$tmp/generate.log"
n=$(($(wc -c <"$REF") - 1))   # run.c ends with a newline of its own
{ printf 'Once upon a time'; cat "$tmp/story.txt"; } | head -c "$n" >"$tmp/story.cut"
head -c "$n" "$REF" >"$tmp/ref.cut"
echo "smoke: story: $(head -n 1 "$tmp/story.cut")"
echo "smoke: $(rss loader "${pgids[0]}" loader); $(rss worker "${pgids[1]}" worker); $(rss draft "${pgids[2]}" draft); $(rss gateway "${pgids[3]}" gateway)"
if cmp -s "$tmp/ref.cut" "$tmp/story.cut"; then
  echo "smoke: MATCH: the story generated through the images equals run.c's text ($n bytes)"
else
  echo "smoke: MISMATCH against $REF:"
  diff <(cat "$tmp/ref.cut") <(cat "$tmp/story.cut") | head -5
  exit 1
fi
