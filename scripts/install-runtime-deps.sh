#!/usr/bin/env bash
# Installs the real components the demo and the integration tests use on a
# Debian 12 machine: Debian's runc and busybox-static (apt), and containerd
# + ctr built from the Go module proxy at the version the shim links
# (scripts/build-containerd.sh). Needs root for apt; skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1 || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    # Not fatal: the integration tests skip without root anyway.
    echo "install-runtime-deps: need root to apt-get install ${missing[*]}; skipping" >&2
    exit 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
scripts/build-containerd.sh
scripts/make-debian-rootfs.sh
