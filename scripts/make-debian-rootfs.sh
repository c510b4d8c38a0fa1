#!/usr/bin/env bash
# Builds build/debian-rootfs (or $DEBIAN_ROOTFS): Debian 12 (debootstrap,
# minbase) with the real System V IPC workloads of the integration tests and
# the benchmark: stress-ng, perl (IPC::SysV), python3-sysv-ipc, apache2.
# ~400 MB, 3-8 min (the Debian mirror's speed); skipped when present. Needs
# root and the Debian mirror; quiet (output in build/log/debootstrap.log,
# named when it fails).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
dest=${DEBIAN_ROOTFS:-$PWD/build/debian-rootfs}
[ -x "$dest/usr/bin/stress-ng" ] && [ -x "$dest/usr/sbin/apache2" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "make-debian-rootfs: needs root; the Debian workload tests will skip (fail under make test)" >&2
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  apt_get update
  apt_get install -y --no-install-recommends debootstrap
fi
mirror=$(awk '/^URIs:/{print $2; exit} /^deb /{print $2; exit}' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1)
echo "make-debian-rootfs: debootstrap bookworm into $dest (${mirror:-http://deb.debian.org/debian}; ~400 MB, 3-8 min, once; log $LOGDIR/debootstrap.log)" >&2
rm -rf "$dest.tmp"
quiet debootstrap debootstrap --variant=minbase --include=stress-ng,perl,python3,python3-sysv-ipc,apache2 \
  bookworm "$dest.tmp" "${mirror:-http://deb.debian.org/debian}"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
