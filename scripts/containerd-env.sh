#!/usr/bin/env bash
# A private containerd for the demo and the tests.
#
#   eval "$(scripts/containerd-env.sh start DIR)"   # exports CTR, CONTAINERD_ADDRESS
#   scripts/containerd-env.sh stop DIR
#
# start writes DIR/config.toml (version 3: own root, state and sockets under
# DIR, a CRI runtime entry for io.containerd.ipc.v2 pointing at the shim),
# starts build/containerd/containerd with PATH so that it finds
# containerd-shim-ipc-v2 (build/bin) and containerd-shim-runc-v2, and waits
# for its socket. Logs go to DIR/containerd.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmd=$1 dir=$2
bin=${CONTAINERD_BIN:-$root/build/containerd}
shimbin=${SHIM_BIN:-$root/build/bin}
case $cmd in
start)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  cat >"$dir/config.toml" <<TOML
version = 3
root = "$dir/root"
state = "$dir/state"

[grpc]
  address = "$dir/containerd.sock"

[ttrpc]
  address = "$dir/containerd.sock.ttrpc"

[debug]
  level = "info"

# CRI (crictl, Kubernetes): runtime handler "ipc". The options table
# reaches the shim as CRI's generic runtimeoptions.Options.
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.ipc]
  runtime_type = "io.containerd.ipc.v2"
  runtime_path = "$shimbin/containerd-shim-ipc-v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.ipc.options]
    BinaryName = "$(command -v runc || echo runc)"

# Sandboxes ask for oom_score_adj -998: hosts (or containers) without
# CAP_SYS_RESOURCE refuse it, and runc fails with "can't get final child's PID".
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true

# Pods' sandbox image, imported locally (no registry).
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "localhost/ipct:1"

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
  PATH="$shimbin:$bin:$PATH" nohup "$bin/containerd" --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
  echo $! >"$dir/containerd.pid"
  for _ in $(seq 100); do
    if [ -S "$dir/containerd.sock" ] && "$bin/ctr" -a "$dir/containerd.sock" version >/dev/null 2>&1; then
      echo "export CONTAINERD_ADDRESS=$dir/containerd.sock CTR=$bin/ctr"
      exit 0
    fi
    if ! kill -0 "$(cat "$dir/containerd.pid")" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "containerd-env: containerd did not start; see $dir/containerd.log:" >&2
  tail -20 "$dir/containerd.log" >&2
  exit 1
  ;;
stop)
  [ -f "$dir/containerd.pid" ] || exit 0
  ctr="$bin/ctr -a $dir/containerd.sock"
  for ns in $($ctr namespaces ls -q 2>/dev/null); do
    for t in $($ctr -n "$ns" tasks ls -q 2>/dev/null); do
      $ctr -n "$ns" tasks kill -s KILL "$t" >/dev/null 2>&1 || true
      $ctr -n "$ns" tasks delete -f "$t" >/dev/null 2>&1 || true
    done
    for c in $($ctr -n "$ns" containers ls -q 2>/dev/null); do
      $ctr -n "$ns" containers delete "$c" >/dev/null 2>&1 || true
    done
  done
  pid=$(cat "$dir/containerd.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/containerd.pid"
  # Unmount anything left under the state dir (rootfs bind mounts).
  # (None left is the usual case: grep finding nothing is not a failure.)
  { grep -o " $dir/[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
