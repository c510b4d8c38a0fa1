#!/usr/bin/env bash
# make-rootfs.sh DIR: a minimal container root filesystem: busybox-static
# (with its applets as links) and ipct, the static IPC test tool.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
bb=$(command -v busybox || echo /bin/busybox)
mkdir -p "$dir"/{bin,proc,sys,dev,tmp,etc,run}
cp "$bb" "$dir/bin/busybox"
# One process makes the ~270 applet links (an ln per applet took 13-25 s
# on a loaded 2-vCPU machine); perl-base is essential on Debian.
"$dir/bin/busybox" --list | (cd "$dir/bin" && xargs perl -e 'for (@ARGV) { -e $_ or symlink("busybox", $_) or die "$_: $!\n" }')
CGO_ENABLED=0 go build -trimpath -o "$dir/bin/ipct" ./integration/ipct
echo 'root:x:0:0:root:/:/bin/sh' >"$dir/etc/passwd"
echo 'root:x:0:' >"$dir/etc/group"
