#!/usr/bin/env bash
# Builds herd's container images offline, without a daemon: for every image in the
# table below, `bazel build -c opt` outputs -> images/rootfs.sh (binary + herd CLI +
# their shared libraries + dynamic loader + /etc/passwd) -> the image's final stage in
# images/Containerfile (FROM scratch AS NAME) with `buildah bud --isolation chroot` on the
# vfs storage driver -> an OCI archive out/images/herd-NAME.tar.
#
#   tools/images.sh              build all images (installs buildah with apt-get if missing)
#   tools/images.sh gateway ...  build only these
#   tools/images.sh --list       print "NAME BINARY" for every image (the k8s tests read it)
#   tools/images.sh --no-build   reuse the Bazel outputs already in bazel-bin
#
# Images are tagged ghcr.io/herd/herd-NAME:REV and :latest, REV = `git rev-parse --short
# HEAD` (+ "-dirty" with uncommitted changes), in buildah's storage under
# out/images/storage (HERD_IMAGES_STORAGE); each archive holds the :REV reference.
# Push one: skopeo copy oci-archive:out/images/herd-gateway.tar docker://REGISTRY/herd-gateway:REV
# (or `podman load -i`). With Docker: docker build -f images/Containerfile --target NAME . (see there).
set -euo pipefail
cd "$(dirname "$0")/.."

# name           binary (under bazel-bin; the image's entrypoint, next to tools/herd/herd)
#                [libraries it opens at run time, copied with their dependencies]
# worker-cuda: cuBLAS (dlopen'ed from /usr/local/cuda/lib64 by the CUDA backend);
# worker-hip: worker_hip (the HIP backend; ROCm's libamdhip64 is linked) and the code-object
# library libamd_comgr.so.2 that the HIP runtime opens.
IMAGES=(
  "loader        services/loader/loader"
  "worker-cpu    services/worker/worker"
  "worker-vulkan services/worker/worker /usr/lib/x86_64-linux-gnu/libvulkan.so.1"
  "worker-cuda   services/worker/worker /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda/lib64/libcublasLt.so.13"
  "worker-hip    services/worker/worker_hip /usr/lib/x86_64-linux-gnu/libamd_comgr.so.2"
  "draft      services/draft/draft"
  "gateway    services/gateway/gateway"
  "compute    services/compute/compute"
)
REGISTRY="${HERD_IMAGES_REGISTRY:-ghcr.io/herd}"

build=1
wanted=()
for a in "$@"; do
  case "$a" in
    --list) printf '%s\n' "${IMAGES[@]}" | awk '{print $1, $2}'; exit 0 ;;
    --no-build) build=0 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    -*) echo "images: unknown option $a" >&2; exit 2 ;;
    *) wanted+=("$a") ;;
  esac
done
selected=()
for row in "${IMAGES[@]}"; do
  read -r name bin <<<"$row"
  if ((${#wanted[@]} == 0)) || printf '%s\n' "${wanted[@]}" | grep -qx "$name"; then selected+=("$row"); fi
done
for w in "${wanted[@]}"; do
  printf '%s\n' "${IMAGES[@]}" | awk '{print $1}' | grep -qx "$w" || { echo "images: no image named $w" >&2; exit 2; }
done

if ! command -v buildah >/dev/null 2>&1; then
  echo "images: installing buildah (Debian package)" >&2
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends buildah >&2
fi

out="$(pwd)/out/images"
storage="${HERD_IMAGES_STORAGE:-$out/storage}"
mkdir -p "$out" "$storage"
BUILDAH=(buildah --root "$storage" --runroot "$out/run" --storage-driver vfs)

rev="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ "$rev" != unknown && -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then rev="$rev-dirty"; fi

if ((build)); then
  tools/setup.sh >&2
  # services/worker/worker_hip -> //services/worker:worker_hip (only the selected images)
  bazel build -c opt $(printf "%s\n" "${selected[@]}" | awk '{n = split($2, p, "/"); d = $2; sub(/\/[^/]*$/, "", d); print "//" d ":" p[n]}' | sort -u) //tools/herd >&2
fi
bin_dir="$(bazel info -c opt bazel-bin 2>/dev/null)"
[[ -x "$bin_dir/tools/herd/herd" ]] || { echo "images: $bin_dir/tools/herd/herd missing (bazel build -c opt //tools/herd)" >&2; exit 1; }

for row in "${selected[@]}"; do
  read -r name bin extra <<<"$row"
  ctx="$out/ctx-$name"
  rm -rf "$ctx"
  mkdir -p "$ctx"
  # shellcheck disable=SC2086  # extra: zero or more paths
  images/rootfs.sh "$ctx/rootfs" "$bin_dir/$bin" "$bin_dir/tools/herd/herd" ${extra:-} >&2
  # The image's final stage (FROM scratch AS NAME, up to the next FROM), fed the rootfs
  # staged here instead of by its rootfs-NAME stage.
  awk -v n="$name" '/^FROM / {on = ($0 == "FROM scratch AS " n)} on' images/Containerfile \
    | sed -e 's#^FROM scratch AS .*#FROM scratch#' -e 's#^COPY --from=rootfs-[a-z-]* /rootfs/ /#COPY rootfs/ /#' >"$ctx/Containerfile"
  grep -q '^COPY rootfs/ /' "$ctx/Containerfile" || { echo "images: images/Containerfile: no stage 'FROM scratch AS $name' copying its rootfs-$name stage" >&2; exit 1; }
  ref="$REGISTRY/herd-$name"
  "${BUILDAH[@]}" bud --isolation chroot --layers=false --quiet --build-arg "REVISION=$rev" \
    -t "$ref:$rev" -t "$ref:latest" -f "$ctx/Containerfile" "$ctx" >/dev/null
  rm -f "$out/herd-$name.tar"
  "${BUILDAH[@]}" push --quiet "$ref:$rev" "oci-archive:$out/herd-$name.tar:$ref:$rev" >/dev/null
  rm -rf "$ctx"
  printf 'images: %-40s %s (archive %s)\n' "$ref:$rev" "$(du -h "$out/herd-$name.tar" | cut -f1)" "out/images/herd-$name.tar"
done
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true   # earlier builds' untagged images
echo "images: built ${#selected[@]} image(s) tagged $rev and latest; list them with: ${BUILDAH[*]} images"
