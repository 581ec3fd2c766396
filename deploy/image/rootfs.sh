#!/bin/sh
# Lays out certsync's runtime filesystem in DEST: the one way to make it, so
# the Containerfile and CI's buildah image (.ci/image) hold the same files.
#
#   deploy/image/rootfs.sh DEST BINARY
#
# BINARY is the static (musl) certsync. Besides it: the CA roots (for a
# kubeconfig or reload hook without its own CA), /etc/passwd and /etc/group
# with the nonroot user (65532) the image runs as, its home, and /tmp.
set -eu
dest=$1
bin=$2
roots=/etc/ssl/certs/ca-certificates.crt

if [ ! -s "$roots" ]; then
  echo "rootfs.sh: $roots is missing; install Debian's ca-certificates" >&2
  exit 1
fi
if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
  echo "rootfs.sh: $bin is not an executable file" >&2
  exit 1
fi

install -d -m 0755 "$dest" "$dest/etc" "$dest/etc/ssl" "$dest/etc/ssl/certs"
install -d -m 1777 "$dest/tmp"
install -d -m 0700 -o 65532 -g 65532 "$dest/home/nonroot" 2>/dev/null \
  || install -d -m 0700 "$dest/home/nonroot"
install -m 0755 "$bin" "$dest/certsync"
install -m 0644 "$roots" "$dest/etc/ssl/certs/ca-certificates.crt"
printf '%s\n' \
  'root:x:0:0:root:/root:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$dest/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$dest/etc/group"
chmod 0644 "$dest/etc/passwd" "$dest/etc/group"
