#!/usr/bin/env bash
# The demo (make demo; needs root), 5-12 s once built (quiet to loaded):
#   1. a busybox rootfs with ipct (the static IPC tool) in a temp dir;
#   2. a private containerd (own root, state and socket in the temp dir;
#      never the system's) with build/bin/containerd-shim-ipc-v2 on its PATH;
#   3. one container under runtime io.containerd.ipc.v2 whose processes
#      share a System V semaphore set and a message queue served by the
#      shim (the kernel holds none of them):
#      - a process sleeps in semop(-1) until another one posts;
#      - two workers pass a counter through the queue 500 times each,
#        under the semaphore;
#      - ipcs-style listing (keys in hex) and /proc/sysvipc/{sem,msg} as the
#        container sees them (the shim's own files);
#   4. the shim's log lines from containerd's log, then clean-up: the
#      container, containerd and the temp dir are gone.
# The output is the same on every run but for pids and times.
# `make demo` first builds what it needs (see the README).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "$(id -u)" = 0 ] || { echo "demo: needs root (containerd and runc)" >&2; exit 1; }
for f in build/bin/containerd-shim-ipc-v2 build/containerd/containerd build/containerd/ctr; do
  [ -x "$f" ] || { echo "demo: $f missing: run make demo (it builds it)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/shim-ipc-demo.XXXXXX)
cleanup() {
  SHIM_BIN="$root/build/bin" scripts/containerd-env.sh stop "$tmp/d" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
echo "== rootfs: busybox-static + ipct (static IPC tool) in $tmp/rootfs"
scripts/make-rootfs.sh "$tmp/rootfs"
echo "== starting a private containerd $(cat build/containerd/.version) in $tmp/d ($(build/bin/containerd-shim-ipc-v2 -v | awk '/Version:/{print "shim " $2; exit}'))"
eval "$(SHIM_BIN="$root/build/bin" scripts/containerd-env.sh start "$tmp/d")"
ctr="$CTR -a $CONTAINERD_ADDRESS -n demo"
# Inside the container. Every line is printed by the script's main process
# once what it reports has happened, so the order is fixed.
script='
set -e
echo "semaphore set 0x00005eed (2 semaphores, both 0): id $(ipct semget 0x5eed 2 create)"
ipct semop 0x5eed 1 -1 >/tmp/woke &
waiter=$!
# Wait until the waiter sleeps in semop: the set counts it (GETNCNT).
until [ "$(ipct getncnt 0x5eed 1)" = 1 ]; do sleep 0.01; done
echo "process $waiter sleeps in semop(sem 1, -1): semncnt of sem 1 = 1"
echo "another process posts sem 1 (semop +1): $(ipct semop 0x5eed 1 1 | cut -d" " -f1)"
wait $waiter
echo "process $waiter woke up: its semop returned $(cut -d" " -f1 /tmp/woke)"
ipct setval 0x5eed 0 1 >/dev/null
echo "message queue 0x00090e0e: id $(ipct msgget 0x90e0e create), holding one message: the counter, 0"
ipct msgsnd 0x90e0e 1 0 >/dev/null
echo "two workers, 500 times each: take sem 0, receive the counter, send it back plus one, release sem 0"
ipct worker 0x5eed 0x90e0e 500 >/tmp/w1 & w1=$!
ipct worker 0x5eed 0x90e0e 500 >/tmp/w2 & w2=$!
wait $w1 $w2
echo "counter = $(ipct msgrcv 0x90e0e 1) (expected 1000)"
ipct msgsnd 0x90e0e 1 1000 >/dev/null
echo "-- the objects, in ipcs's layout (keys in hex; busybox has no ipcs):"
awk "NR > 1 { printf \"sem  key 0x%08x  semid %-3s perms %s  nsems %s\\n\", \$1, \$2, \$3, \$4 }" /proc/sysvipc/sem
awk "NR > 1 { printf \"msg  key 0x%08x  msqid %-3s perms %s  used-bytes %s  messages %s\\n\", \$1, \$2, \$3, \$4, \$5 }" /proc/sysvipc/msg
echo "-- /proc/sysvipc/sem and /proc/sysvipc/msg in the container (served by the shim; the kernel prints keys in decimal: 24301 = 0x5eed, 593422 = 0x90e0e):"
cat /proc/sysvipc/sem /proc/sysvipc/msg
'
echo "== ctr run --rm --env PATH=/bin --runtime io.containerd.ipc.v2 --rootfs $tmp/rootfs demo /bin/sh -c <script>"
$ctr run --rm --env PATH=/bin --runtime io.containerd.ipc.v2 --rootfs "$tmp/rootfs" demo /bin/sh -c "$script" 2> >(grep -v DEPRECATION >&2)
echo "== shim log lines (from containerd's log):"
grep -E 'io.containerd.ipc.v2' "$tmp/d/containerd.log" | grep -E 'trapping|engine namespace' | sed 's/^time="[^"]*" //'
echo "== cleaning up: container, containerd, $tmp"
