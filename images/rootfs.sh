#!/usr/bin/env bash
# Stages the root file system of a herd image: the given binaries in /usr/local/bin,
# the given shared libraries (arguments named *.so*: libraries a binary opens at run
# time, e.g. the Vulkan loader) at their own path, every shared library `ldd` lists for
# all of them (the dynamic loader included) at the path ldd names, a minimal /etc/passwd + /etc/group with the non-root user herd
# (65532:65532), and an empty /tmp. Nothing else: no shell, no package manager.
# Used by the rootfs-NAME stages of images/Containerfile and by tools/images.sh.
#
#   images/rootfs.sh DEST BINARY|LIBRARY.so...
set -euo pipefail
if (($# < 2)); then
  echo "usage: images/rootfs.sh DEST BINARY..." >&2
  exit 2
fi
dest="$1"
shift
rm -rf "$dest"
mkdir -p "$dest/usr/local/bin" "$dest/etc" "$dest/tmp" "$dest/models"
chmod 1777 "$dest/tmp"

libs=()
for bin in "$@"; do
  if [[ "$(basename "$bin")" == *.so* ]]; then
    [[ -f "$bin" ]] || { echo "rootfs: $bin is not a file" >&2; exit 1; }
    libs+=("$bin")
  else
    [[ -x "$bin" ]] || { echo "rootfs: $bin is not an executable file" >&2; exit 1; }
    install -m 0755 "$bin" "$dest/usr/local/bin/$(basename "$bin")"
    if command -v strip >/dev/null 2>&1; then strip --strip-unneeded "$dest/usr/local/bin/$(basename "$bin")"; fi
  fi
  out="$(ldd "$bin")"
  if grep -q "not found" <<<"$out"; then
    echo "rootfs: $bin: missing libraries:" >&2
    grep "not found" <<<"$out" >&2
    exit 1
  fi
  # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
  while read -r path; do libs+=("$path"); done < <(awk '
    $2 == "=>" && $3 ~ /^\// {print $3}
    $1 ~ /^\// {print $1}' <<<"$out")
done
for lib in $(printf '%s\n' "${libs[@]}" | sort -u); do
  mkdir -p "$dest$(dirname "$lib")"
  cp -L "$lib" "$dest$lib"   # the file the soname points to, under the soname
done

cat >"$dest/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/nonexistent
herd:x:65532:65532:herd:/nonexistent:/nonexistent
EOF
cat >"$dest/etc/group" <<'EOF'
root:x:0:
herd:x:65532:
EOF
# The model volume's mount point belongs to the service user (an emptyDir or a bind mount covers it).
chown 65532:65532 "$dest/models" 2>/dev/null || true
echo "rootfs: $dest: $# binaries, $(printf '%s\n' "${libs[@]}" | sort -u | wc -l) shared libraries, $(du -sh "$dest" | cut -f1)"
