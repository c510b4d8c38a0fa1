#!/usr/bin/env bash
# Builds containerd, ctr, containerd-shim-runc-v2 (and crictl) from the Go module proxy
# at the version the shim is linked against (go.mod), into build/containerd/.
# CGO_ENABLED=0: no btrfs/devmapper, which the tests do not need.
# About 3.5 minutes cold on 2 cores; seconds once the Go build cache has it.
# Quiet: output in build/log/build-containerd.log, named when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
export PATH=/usr/local/go/bin:$PATH
ver=$(go list -m -f '{{.Version}}' github.com/containerd/containerd/v2 2>/dev/null || true)
ver=${CONTAINERD_VERSION:-${ver:-v2.3.7}}
dest=${CONTAINERD_BIN:-$PWD/build/containerd}
stamp=$dest/.version
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$ver" ] && [ -x "$dest/containerd" ] && [ -x "$dest/ctr" ] && [ -x "$dest/crictl" ]; then
  exit 0
fi
mkdir -p "$dest"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$ver" ] || [ ! -x "$dest/containerd" ]; then
echo "build-containerd: building containerd $ver into $dest (~3.5 min cold on 2 cores; log $LOGDIR/build-containerd.log)" >&2
# Outside the module so that go install resolves containerd's own go.mod.
(cd / && CGO_ENABLED=0 GOBIN="$dest" GOFLAGS=-buildvcs=false quiet build-containerd go install \
  github.com/containerd/containerd/v2/cmd/containerd@"$ver" \
  github.com/containerd/containerd/v2/cmd/ctr@"$ver" \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@"$ver")
echo "$ver" >"$stamp"
fi
# crictl, for the CRI (Kubernetes RuntimeClass) integration test.
if [ ! -x "$dest/crictl" ]; then
  (cd / && CGO_ENABLED=0 GOBIN="$dest" GOFLAGS=-buildvcs=false quiet build-crictl go install sigs.k8s.io/cri-tools/cmd/crictl@"${CRICTL_VERSION:-v1.37.0}") ||
    echo "build-containerd: crictl not built (log $LOGDIR/build-crictl.log); the CRI test will skip (fail under make test)" >&2
fi
