#!/usr/bin/env bash
# Installs what the build and the unit/differential tests need on a fresh
# Debian 12 machine, quietly (output in build/log/, named when a step fails):
#   - a Go toolchain at go.mod's version, when none is on PATH or in
#     /usr/local/go: golang.org/toolchain from the Go module proxy (the
#     module `go` itself switches to; ~70 MB) into /usr/local/go;
#   - the Go modules (go mod download);
#   - as root, with apt (waiting for another apt/dpkg to finish): gcc for
#     the C test programs and the real System V IPC programs the
#     differential tests run (stress-ng, perl, python3-sysv-ipc, php-cli).
# Seconds when everything is there. `install-deps.sh go`: only Go and the
# modules (what the demo needs).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_go=$(awk '/^go /{print $2}' go.mod)
export PATH=$PATH:/usr/local/go/bin
root=$([ "$(id -u)" = 0 ] && echo 1 || true)
have_apt=$(command -v apt-get >/dev/null 2>&1 && echo 1 || true)

# missing PKG...: prints the packages dpkg does not have installed.
missing() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || echo "$p"
  done
}

apt_install() {
  local want
  want=$(missing "$@")
  [ -n "$want" ] || return 0
  if [ -z "$root" ] || [ -z "$have_apt" ]; then
    echo "install-deps: not root (or no apt): not installing $(echo $want); tests that need them skip" >&2
    return 0
  fi
  echo "install-deps: apt-get install $(echo $want)" >&2
  if [ -z "${apt_updated:-}" ]; then
    apt_get update
    apt_updated=1
  fi
  # shellcheck disable=SC2086
  apt_get install -y --no-install-recommends $want
}

if ! command -v go >/dev/null 2>&1; then
  [ -n "$root" ] || { echo "install-deps: no Go toolchain on PATH; Go >= $need_go is needed (as root this script installs it)" >&2; exit 1; }
  arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
  case $arch in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; esac
  apt_install curl ca-certificates unzip
  proxy=$(echo "${GOPROXY:-https://proxy.golang.org}" | cut -d, -f1)
  url=$proxy/golang.org/toolchain/@v/v0.0.1-go$need_go.linux-$arch.zip
  echo "install-deps: Go $need_go from $url into /usr/local/go" >&2
  tmp=$(mktemp -d)
  quiet go-toolchain curl -fsSL -o "$tmp/go.zip" "$url"
  quiet go-toolchain unzip -q "$tmp/go.zip" -d "$tmp"
  # Module zips keep no file modes: the executables are bin/* and pkg/tool/*/*.
  chmod -R a+rX "$tmp"/golang.org/toolchain@*/
  chmod a+x "$tmp"/golang.org/toolchain@*/bin/* "$tmp"/golang.org/toolchain@*/pkg/tool/*/*
  rm -rf /usr/local/go
  mv "$tmp"/golang.org/toolchain@*/ /usr/local/go
  rm -rf "$tmp"
fi
# An older go (>= 1.21) switches to go.mod's version by itself (GOTOOLCHAIN=auto).
quiet go-mod go mod download
[ "${1:-}" = go ] && exit 0
apt_install gcc libc6-dev stress-ng perl python3 python3-sysv-ipc php-cli
