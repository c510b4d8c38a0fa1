#!/usr/bin/env bash
# Installs the real components the demo and the integration tests use on a
# Debian 12 machine, quietly (output in build/log/, named when a step fails):
#   - Debian's runc and busybox-static (apt, as root, waiting for another
#     apt/dpkg to finish);
#   - containerd, ctr, containerd-shim-runc-v2 and crictl built from the Go
#     module proxy at the version the shim links (scripts/build-containerd.sh,
#     ~3.5 min cold on 2 cores, seconds afterwards);
#   - unless NO_DEBIAN_ROOTFS=1: build/debian-rootfs, Debian 12 with
#     stress-ng, perl, python3-sysv-ipc, apache2 for the integration tests'
#     real workloads (scripts/make-debian-rootfs.sh, ~400 MB, 3-8 min, once).
# Not root: nothing is installed (the integration tests then skip under a
# plain go test, and fail under make test/make integration, which set
# INTEGRATION_REQUIRED).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
if [ "$(id -u)" != 0 ]; then
  echo "install-runtime-deps: not root: runc, containerd and the Debian rootfs are not installed (go test ./integration/ skips; make test fails them)" >&2
  exit 0
fi
missing=()
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1 || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-runtime-deps: apt-get install ${missing[*]}" >&2
  apt_get update
  apt_get install -y --no-install-recommends "${missing[@]}"
fi
scripts/build-containerd.sh
[ -n "${NO_DEBIAN_ROOTFS:-}" ] || scripts/make-debian-rootfs.sh
