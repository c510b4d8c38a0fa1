#!/usr/bin/env bash
# Container start: `ctr run --rm true` under runc's shim and this shim,
# interleaved (runc, ipc, runc, ipc, ...), STARTS times each, under a
# private containerd. Prints a markdown table (docs/bench-shim.md) with,
# per runtime, the median wall time and the median CPU time that one run
# cost containerd, the shim's three processes (start, the daemon, delete)
# and the runc commands the shim runs: they all stay in a cgroup made for
# containerd (the containers' own processes go to theirs): in the v1
# cpuacct hierarchy (cpuacct.usage), or on cgroup v2 a child of the root
# (cpu.stat's usage_usec, there whether or not the cpu controller is). For
# this shim, also its daemon's own CPU time, which it logs as it exits.
#
#   STARTS=12 scripts/bench-start.sh
#   VARIANTS="runc=io.containerd.runc.v2 ipc=io.containerd.ipc.v2 old=/path/to/containerd-shim-ipc-v2" scripts/bench-start.sh
#
# VARIANTS: label=runtime pairs, run in that order in each round; a
# runtime is a type name or a shim binary's absolute path. The first
# variant is the reference for the ratios. Load average before and after
# is printed: read ratios within one run, not absolute times.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "$(id -u)" = 0 ] || { echo "bench-start: needs root" >&2; exit 1; }
STARTS=${STARTS:-12}
VARIANTS=${VARIANTS:-"runc=io.containerd.runc.v2 ipc=io.containerd.ipc.v2"}
SETTLE=${SETTLE:-0.3} # seconds after each run: the shim exits and containerd runs its delete after ctr returns
tmp=$(mktemp -d /tmp/shim-ipc-bench-start.XXXXXX)
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  cgroot=/sys/fs/cgroup # cgroup v2 (unified)
  usage() { awk '$1 == "usage_usec" {print $2 "000"}' "$cg/cpu.stat"; } # ns, as cpuacct.usage
elif [ -d /sys/fs/cgroup/cpuacct ]; then
  cgroot=/sys/fs/cgroup/cpuacct
  usage() { cat "$cg/cpuacct.usage"; }
else
  echo "bench-start: neither a cgroup v2 hierarchy nor a v1 cpuacct one at /sys/fs/cgroup" >&2
  exit 1
fi
cg=$cgroot/shim-ipc-bench-start.$$
cleanup() {
  SHIM_BIN="$root/build/bin" scripts/containerd-env.sh stop "$tmp/d" || true
  if [ -d "$cg" ]; then
    while read -r p; do echo "$p" >"$cgroot/cgroup.procs" 2>/dev/null || true; done <"$cg/cgroup.procs"
    rmdir "$cg" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
scripts/make-rootfs.sh "$tmp/rootfs"
eval "$(SHIM_BIN="$root/build/bin" scripts/containerd-env.sh start "$tmp/d")"
mkdir "$cg"
echo "$(cat "$tmp/d/containerd.pid")" >"$cg/cgroup.procs"
ctr="$CTR -a $CONTAINERD_ADDRESS -n bench"
log=$tmp/d/containerd.log
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
run() { $ctr run --rm --runtime "$1" --rootfs "$tmp/rootfs" "$2" /bin/true 2> >(grep -v DEPRECATION >&2); }
labels=()
declare -A rt wall cpu shim
for v in $VARIANTS; do labels+=("${v%%=*}"); rt[${v%%=*}]=${v#*=}; done
# One unmeasured run of each: the first shim after boot (or of a new
# build) parses the kernel's BTF and caches what it needs.
for l in "${labels[@]}"; do run "${rt[$l]}" "warm-$l"; sleep "$SETTLE"; done
for i in $(seq "$STARTS"); do
  for l in "${labels[@]}"; do
    n0=$(grep -c 'shim exits' "$log" || true)
    c0=$(usage)
    t0=$(date +%s%N)
    run "${rt[$l]}" "s$i-$l"
    t1=$(date +%s%N)
    sleep "$SETTLE"
    c1=$(usage)
    wall[$l]+="$(( (t1 - t0) / 1000000 )) "
    cpu[$l]+="$(( (c1 - c0) / 1000000 )) "
    # This shim's daemon logs its CPU time as it exits (ms).
    s=$(grep 'shim exits' "$log" | sed -n "$((n0 + 1)),\$p" | grep -o 'CPU time [0-9.]*[mµ]*s' | tail -1 |
      awk '{v=$3; if (v ~ /ms$/) {sub(/ms/,"",v); print int(v+0.5)} else if (v ~ /µs$/) print 0; else {sub(/s/,"",v); print int(v*1000+0.5)}}' || true)
    shim[$l]+="${s:--} "
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
med() { tr ' ' '\n' | grep -E '^[0-9]+$' | sort -n | awk '{a[NR]=$1} END{ if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print int((a[NR/2]+a[NR/2+1])/2+0.5) }'; }
range() { tr ' ' '\n' | grep -E '^[0-9]+$' | sort -n | awk 'NR==1{lo=$1} {hi=$1} END{ if (NR) print lo "–" hi; else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a+0>0 && b+0>0) printf "%.2fx", b/a; else print "-" }'; }
ref=${labels[0]}
rw=$(med <<<"${wall[$ref]}") rc=$(med <<<"${cpu[$ref]}")
echo "| runtime (ctr run --rm true, $STARTS interleaved) | wall median (range) | ratio | CPU per run: containerd + shim + runc, median (range) | ratio | shim daemon's own CPU, median |"
echo "|---|---|---|---|---|---|"
for l in "${labels[@]}"; do
  w=$(med <<<"${wall[$l]}") c=$(med <<<"${cpu[$l]}")
  echo "| $l (${rt[$l]##*/}) | $w ms ($(range <<<"${wall[$l]}")) | $(ratio "$rw" "$w") | $c ms ($(range <<<"${cpu[$l]}")) | $(ratio "$rc" "$c") | $(med <<<"${shim[$l]}") ms |"
done
