#!/bin/sh
# install.sh [--root DIR] [--src DIR] [--no-restart] [--systemd-cgroup | --cgroupfs]
#
# Installs the shim on a node (the DaemonSet's init container runs it with
# the host's / at /host: --root /host):
#   SRC/containerd-shim-ipc-v2, SRC/ipcctl -> ROOT/usr/local/bin/
#   SRC/containerd-ipc-runtime.toml        -> ROOT/etc/containerd/conf.d/ipc-runtime.toml
#   ROOT/etc/containerd/config.toml        imports /etc/containerd/conf.d/*.toml
#                                          (created with only that if missing)
# and restarts containerd (systemctl in pid 1's namespaces) when its
# configuration changed; running containers and their shims keep running.
# The drop-in gets runc's option SystemdCgroup = true when the node's
# containerd configuration (config.toml, then the other conf.d drop-ins)
# sets it for the CRI plugin's default runtime (default_runtime_name,
# runc unless set): the cgroup driver the kubelet was configured for, or
# reads from that runtime. Pods of RuntimeClass ipc then get their cgroups
# the way the node's other pods do. --systemd-cgroup or --cgroupfs says
# which instead of looking.
# Idempotent: a second run changes nothing and restarts nothing. Prints one
# line per change and "unchanged" when there was none.
set -eu
usage="usage: install.sh [--root DIR] [--src DIR] [--no-restart] [--systemd-cgroup | --cgroupfs]"
root=/ src=$(cd "$(dirname "$0")" && pwd) restart=1 systemd=
while [ $# -gt 0 ]; do
  case $1 in
  --root | --src)
    case ${2:--} in
    -*) echo "install.sh: $1 needs a directory ($usage)" >&2; exit 2 ;;
    esac
    [ -d "$2" ] || { echo "install.sh: $1 $2: no such directory" >&2; exit 2; }
    if [ "$1" = --root ]; then root=$2; else src=$2; fi
    shift 2 ;;
  --no-restart) restart=0; shift ;;
  --systemd-cgroup) systemd=1; shift ;;
  --cgroupfs) systemd=0; shift ;;
  *) echo "install.sh: unknown argument $1 ($usage)" >&2; exit 2 ;;
  esac
done
pattern=/etc/containerd/conf.d/*.toml
changed=0 config=0

# default_runtime_systemd FILE...: the SystemdCgroup option ("true",
# "false" or nothing) of the CRI plugin's default runtime, as the
# containerd configuration FILEs set it, a later file's value winning.
# Reads TOML tables, dotted keys and an inline options table, for config
# versions 2 and 3 (the keys' quotes and the plugin's name are ignored).
default_runtime_systemd() {
  awk '
    function bare(x) { gsub(/["\047 \t]/, "", x); return x }
    FNR == 1 { table = "" }
    /^[ \t]*#/ { next }
    /^[ \t]*\[/ { table = $0; sub(/^[ \t]*\[+/, "", table); sub(/\].*/, "", table); table = bare(table); next }
    /=/ {
      key = $0; sub(/=.*/, "", key); key = bare(key)
      value = $0; sub(/^[^=]*=/, "", value); sub(/#[^"]*$/, "", value)
      if (table != "") key = table "." key
      if (key ~ /cri.*\.containerd\.default_runtime_name$/) def = bare(value)
      if (key ~ /\.containerd\.runtimes\.[^.]+\.options$/ && match(value, /SystemdCgroup[ \t]*=[ \t]*[a-z]+/)) {
        key = key ".SystemdCgroup"; value = substr(value, RSTART, RLENGTH); sub(/.*=/, "", value)
      }
      if (key ~ /\.containerd\.runtimes\.[^.]+\.options\.SystemdCgroup$/) {
        runtime = key; sub(/.*\.containerd\.runtimes\./, "", runtime); sub(/\.options\.SystemdCgroup$/, "", runtime)
        systemd[runtime] = bare(value)
      }
    }
    END { if (def == "") def = "runc"; if (def in systemd) print systemd[def] }
  ' "$@"
}

# put SRC DEST MODE: installs SRC as DEST unless identical (atomic rename).
put() {
  last=0
  if [ -f "$2" ] && cmp -s "$1" "$2"; then return 0; fi
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2.tmp.$$"
  chmod "$3" "$2.tmp.$$"
  mv -f "$2.tmp.$$" "$2"
  echo "installed ${2#"${root%/}"}"
  changed=1 last=1
}

for b in containerd-shim-ipc-v2 ipcctl; do
  [ -f "$src/$b" ] || { echo "install.sh: $src/$b missing" >&2; exit 1; }
  put "$src/$b" "$root/usr/local/bin/$b" 0755
done
cfg=$root/etc/containerd/config.toml
if [ -z "$systemd" ]; then
  set --
  [ -f "$cfg" ] && set -- "$cfg"
  for f in "$root"/etc/containerd/conf.d/*.toml; do
    [ -f "$f" ] && [ "${f##*/}" != ipc-runtime.toml ] && set -- "$@" "$f"
  done
  systemd=0
  if [ $# -gt 0 ] && [ "$(default_runtime_systemd "$@")" = true ]; then
    systemd=1
  fi
fi
dropin=$(mktemp)
trap 'rm -f "$dropin"' EXIT
cat "$src/containerd-ipc-runtime.toml" >"$dropin"
if [ $systemd = 1 ]; then
  printf '\n# install.sh: the default runtime has SystemdCgroup = true (or --systemd-cgroup).\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.ipc.options]\n  SystemdCgroup = true\n' >>"$dropin"
fi
put "$dropin" "$root/etc/containerd/conf.d/ipc-runtime.toml" 0644
[ $last = 0 ] || config=1

if [ ! -f "$cfg" ]; then
  mkdir -p "$(dirname "$cfg")"
  printf 'version = 3\nimports = ["%s"]\n' "$pattern" >"$cfg"
  echo "created /etc/containerd/config.toml importing $pattern"
  config=1
elif ! grep -qF "\"$pattern\"" "$cfg"; then
  cp "$cfg" "$cfg.bak-containerd-shim-ipc"
  if grep -q '^[[:space:]]*imports[[:space:]]*=' "$cfg"; then
    # Prepend the pattern to the existing top-level array.
    sed -i "0,/^[[:space:]]*imports[[:space:]]*=[[:space:]]*\[/s||imports = [\"$pattern\", |" "$cfg"
  else
    # A top-level key goes before the first table: right after "version".
    if grep -q '^version[[:space:]]*=' "$cfg"; then
      sed -i "0,/^version[[:space:]]*=.*/s||&\nimports = [\"$pattern\"]|" "$cfg"
    else
      sed -i "1i imports = [\"$pattern\"]" "$cfg"
    fi
  fi
  echo "added $pattern to the imports of /etc/containerd/config.toml (backup: config.toml.bak-containerd-shim-ipc)"
  config=1
fi

if [ $config = 1 ] && [ $restart = 1 ]; then
  echo "restarting containerd"
  nsenter -t 1 -m -u -i -n -p -- systemctl restart containerd
elif [ $config = 1 ]; then
  echo "containerd's configuration changed: restart containerd"
fi
[ $changed = 1 ] || [ $config = 1 ] || echo unchanged
