#!/usr/bin/env bash
# The same IPC workload in a container under io.containerd.runc.v2 (kernel
# IPC) and under io.containerd.ipc.v2 (this shim), one run each, under a
# private containerd. Prints a markdown table (docs/bench-shim.md).
#   N=20000 scripts/bench-shim.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "$(id -u)" = 0 ] || { echo "bench: needs root" >&2; exit 1; }
N=${N:-20000}
STARTS=${STARTS:-7}
SNG_T=${SNG_T:-5}
deb=${DEBIAN_ROOTFS:-$root/build/debian-rootfs}
tmp=$(mktemp -d /tmp/shim-ipc-bench.XXXXXX)
cleanup() { SHIM_BIN="$root/build/bin" scripts/containerd-env.sh stop "$tmp/d" || true; rm -rf "$tmp"; }
trap cleanup EXIT
scripts/make-rootfs.sh "$tmp/rootfs"
eval "$(SHIM_BIN="$root/build/bin" scripts/containerd-env.sh start "$tmp/d")"
ctr="$CTR -a $CONTAINERD_ADDRESS -n bench"
run() { # runtime id script
  $ctr run --rm --env PATH=/bin --runtime "$1" --rootfs "$tmp/rootfs" "$2" /bin/sh -c "$3" 2> >(grep -v DEPRECATION >&2)
}
script="
ipct semget 1 1 create >/dev/null; ipct setval 1 0 1 >/dev/null
echo one=\$(ipct semloop 1 $N)
echo undo=\$(ipct semloop 1 $N undo)
t0=\$(ipct now)
ipct semloop 1 $N >/dev/null & ipct semloop 1 $N >/dev/null & wait
echo two=\$(( (\$(ipct now) - t0) / 1000000 ))
# K processes, each on a private set of its own: wall time for N pairs each.
for k in 1 2 4; do
  t0=\$(ipct now)
  i=0; while [ \$i -lt \$k ]; do ipct semlooppriv $((N*2)) >/dev/null & i=\$((i+1)); done; wait
  echo k\$k=\$(( (\$(ipct now) - t0) / 1000 ))
done
echo getppid=\$(ipct sysloop getppid $((N*20)))
echo write=\$(ipct sysloop write $((N*20)))
ipct msgget 2 create >/dev/null
timeout 120 ipct pingpong 2 $((N/4)) pong & echo ping=\$(timeout 120 ipct pingpong 2 $((N/4)) ping); wait
"
declare -A R
for rt in io.containerd.runc.v2 io.containerd.ipc.v2; do
  out=$(run $rt "b-${rt//./-}" "$script" || true)
  while IFS='=' read -r k v; do R[$rt.$k]=$v; done <<<"$out"
  R[$rt.sng]=- R[$rt.sngmsg]=-
  if [ -x "$deb/usr/bin/stress-ng" ]; then
    for s in sem-sysv msg; do
      v=$($ctr run --rm --runtime $rt --rootfs "$deb" "sng-$s-${rt//./-}" /usr/bin/stress-ng --$s 2 -t "$SNG_T" --metrics-brief 2>&1 |
        awk -v s=$s '$4==s && $5 ~ /^[0-9]+$/ {printf "%.0f", $9}')
      [ "$s" = msg ] && R[$rt.sngmsg]=${v:-failed} || R[$rt.sng]=${v:--}
    done
  fi
done
# Container starts, interleaved (runc, ipc, runc, ipc, ...): run back to
# back, the second runtime's starts met another load than the first's
# (scripts/bench-start.sh measures starts alone, with their CPU time).
declare -A TS
for i in $(seq "$STARTS"); do
  for rt in io.containerd.runc.v2 io.containerd.ipc.v2; do
    t0=$(date +%s%N); run $rt "s$i-${rt//./-}" true; TS[$rt]+="$(( ($(date +%s%N) - t0) / 1000000 )) "
  done
done
for rt in io.containerd.runc.v2 io.containerd.ipc.v2; do
  R[$rt.start]=$(tr ' ' '\n' <<<"${TS[$rt]}" | grep . | sort -n | sed -n "$(( (STARTS+1)/2 ))p")
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a+0>0 && b+0>0) printf "%.1fx", b/a; else print "-" }'; }
r=io.containerd.runc.v2 i=io.containerd.ipc.v2
echo "| workload (N=$N) | runc shim (kernel) | ipc shim | ratio |"
echo "|---|---|---|---|"
echo "| semop -1/+1 pair, 1 process | ${R[$r.one]} ns | ${R[$i.one]} ns | $(ratio ${R[$r.one]} ${R[$i.one]}) |"
echo "| same with SEM_UNDO | ${R[$r.undo]} ns | ${R[$i.undo]} ns | $(ratio ${R[$r.undo]} ${R[$i.undo]}) |"
echo "| 2 processes lock/unlock, N pairs each | ${R[$r.two]} ms | ${R[$i.two]} ms | $(ratio ${R[$r.two]} ${R[$i.two]}) |"
echo "| msgsnd/msgrcv ping-pong, 8 bytes, per round trip | ${R[$r.ping]} ns | ${R[$i.ping]} ns | $(ratio ${R[$r.ping]} ${R[$i.ping]}) |"
echo "| stress-ng --sem-sysv 2, ${SNG_T}s, bogo ops/s | ${R[$r.sng]} | ${R[$i.sng]} | $(ratio ${R[$i.sng]} ${R[$r.sng]}) slower |"
echo "| stress-ng --msg 2, ${SNG_T}s, bogo ops/s | ${R[$r.sngmsg]} | ${R[$i.sngmsg]} | $(ratio ${R[$i.sngmsg]} ${R[$r.sngmsg]}) slower |"
gain() { awk -v a="$1" -v b="$2" -v k="$3" 'BEGIN{ if (a+0>0 && b+0>0) printf "%.2fx", k*a/b; else print "-" }'; }
echo "| K processes on their own sets, throughput gain 1 → 2 | $(gain ${R[$r.k1]} ${R[$r.k2]} 2) | $(gain ${R[$i.k1]} ${R[$i.k2]} 2) | |"
echo "| same, 1 → 4 | $(gain ${R[$r.k1]} ${R[$r.k4]} 4) | $(gain ${R[$i.k1]} ${R[$i.k4]} 4) | |"
diff_ns() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a!="" && b!="") printf "%+d ns", b-a; else print "-" }'; }
echo "| getppid loop (not trapped), per call | ${R[$r.getppid]} ns | ${R[$i.getppid]} ns | $(diff_ns ${R[$r.getppid]} ${R[$i.getppid]}) |"
echo "| write(2) to /dev/null loop (not trapped), per call | ${R[$r.write]} ns | ${R[$i.write]} ns | $(diff_ns ${R[$r.write]} ${R[$i.write]}) |"
echo "| container start (ctr run --rm true, interleaved, median of $STARTS) | ${R[$r.start]} ms | ${R[$i.start]} ms | $(ratio ${R[$r.start]} ${R[$i.start]}) |"
