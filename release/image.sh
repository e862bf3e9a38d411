#!/usr/bin/env bash
# Assembles the Dockerfile's runtime stage around a ttlproxy binary without a
# container engine, and checks the image (docs/install.md, "Container
# image"):
#   - the base: debian:SUITE-slim is Debian's minbase variant of SUITE, made
#     here by mmdebstrap;
#   - the stage's RUN commands run in it (chroot), the binary goes where its
#     COPY puts it, and buildah gives the image the stage's configuration
#     (user, entrypoint, command, ports, labels, health check), all read
#     from the Dockerfile by release/dockerstage;
#   - release/dockerstage's TestImage compares the committed image's
#     configuration with the Dockerfile and runs the binary from the image's
#     root filesystem, mounted read-only, as the image's user: version, the
#     CA bundle, a proxy serving a query against a test PostgreSQL, and the
#     image's health check.
# Usage: release/image.sh BINARY   (VERSION: the image's version label,
# default the binary's version). Needs root (mmdebstrap, chroot, mount).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 1 ]; then
  echo "usage: release/image.sh BINARY" >&2
  exit 2
fi
bin=$(realpath "$1")
version=${VERSION:-$("$bin" version | sed -n '1s/^ttlproxy //p')}

missing=()
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
if [ ${#missing[@]} -gt 0 ]; then
  echo "image: installing ${missing[*]} (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# suite, binary_dest, base_path, runs, config_args (an assignment, so that
# set -e stops on an error of dockerstage's).
stage=$(go run ./release/dockerstage -build-arg "VERSION=$version" Dockerfile)
eval "$stage"

work=$(mktemp -d /tmp/ttlproxy-image.XXXXXX)
# Docker's format from the start: OCI configurations have no health check.
export BUILDAH_FORMAT=docker
b=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
ro=$work/ro
cleanup() {
  for m in "$ro/proc" "$ro/etc/ttlproxy" "$ro"; do
    if mountpoint -q "$m"; then umount "$m" || true; fi
  done
  "${b[@]}" rm --all >/dev/null 2>&1 || true
  "${b[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

t0=$SECONDS
ctr=$("${b[@]}" from scratch)
mnt=$("${b[@]}" mount "$ctr")
# The stage's RUN commands, each in the rootfs as docker build runs them:
# /bin/sh -c with the image's PATH. mmdebstrap runs customize hooks with
# /proc, /dev and the resolver set up, and removes them after.
hooks=()
for i in "${!runs[@]}"; do
  export "TTLPROXY_STAGE_RUN_$i=${runs[$i]}"
  hooks+=(--customize-hook "chroot \"\$1\" /usr/bin/env -i PATH=\"$base_path\" /bin/sh -c \"\$TTLPROXY_STAGE_RUN_$i\"")
done
# No mirror named: mmdebstrap's default, as the official images use.
mmdebstrap --quiet --variant=minbase "${hooks[@]}" "$suite" "$mnt" </dev/null
install -D -m 0755 "$bin" "$mnt$binary_dest"
"${b[@]}" config "${config_args[@]}" "$ctr"
"${b[@]}" unmount "$ctr" >/dev/null
# Docker's format: OCI image configurations have no health check.
"${b[@]}" commit --quiet --format docker "$ctr" ttlproxy:ci >/dev/null
echo "image: assembled ttlproxy:ci ($version, debian $suite minbase) in $((SECONDS - t0)) s"

# The committed image, mounted read-only as readOnlyRootFilesystem does,
# with a writable directory over /etc/ttlproxy for the test's configuration
# (the Kubernetes kit's ConfigMap) and /proc.
"${b[@]}" inspect --type image ttlproxy:ci >"$work/image.json"
check=$("${b[@]}" from ttlproxy:ci)
rootfs=$("${b[@]}" mount "$check")
mkdir -p "$ro" "$work/etc"
mount --bind "$rootfs" "$ro"
mount -o remount,bind,ro "$ro"
mount --bind "$work/etc" "$ro/etc/ttlproxy"
mount -t proc proc "$ro/proc"
TTLPROXY_IMAGE_CONFIG=$work/image.json TTLPROXY_IMAGE_ROOTFS=$ro TTLPROXY_IMAGE_ETC=$work/etc \
  TTLPROXY_IMAGE_VERSION=$version go test -count=1 -v -run 'TestImage' ./release/dockerstage/
