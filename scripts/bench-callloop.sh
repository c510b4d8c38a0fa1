#!/usr/bin/env bash
# The trapped-call benchmark's C child (shim/gateway/testdata/callloop.c)
# in a container, under io.containerd.runc.v2 (kernel IPC) and
# io.containerd.ipc.v2 (this shim), RUNS times each, under a private
# containerd: ns per null call (semget of a missing key), per semop and
# per msgsnd/msgrcv. Compare with `go test -run XXX -bench 'TrappedCall$'
# ./shim/gateway` run right after (docs/bench-gateway.md).
#   RUNS=3 N=20000 scripts/bench-callloop.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "$(id -u)" = 0 ] || { echo "bench-callloop: needs root" >&2; exit 1; }
N=${N:-20000}
RUNS=${RUNS:-3}
tmp=$(mktemp -d /tmp/shim-ipc-callloop.XXXXXX)
cleanup() { SHIM_BIN="$root/build/bin" scripts/containerd-env.sh stop "$tmp/d" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
scripts/make-rootfs.sh "$tmp/rootfs" >/dev/null
gcc -O2 -static -o "$tmp/rootfs/bin/callloop" shim/gateway/testdata/callloop.c
eval "$(SHIM_BIN="$root/build/bin" scripts/containerd-env.sh start "$tmp/d")"
ctr="$CTR -a $CONTAINERD_ADDRESS -n callloop"
for i in $(seq "$RUNS"); do
  for rt in io.containerd.runc.v2 io.containerd.ipc.v2; do
    out=$($ctr run --rm --env PATH=/bin --runtime "$rt" --rootfs "$tmp/rootfs" "c$i-${rt//./-}" /bin/sh -c \
      "echo null=\$(callloop null $N) semop=\$(callloop semop $N) msg=\$(callloop msg $N)" 2> >(grep -v DEPRECATION >&2))
    echo "$rt $out"
  done
done
