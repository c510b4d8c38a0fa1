#!/usr/bin/env bash
# Installs what the build and tests need on a fresh Debian 12 machine:
# a Go toolchain new enough for go.mod, and the Go modules.
set -euo pipefail
need_go=$(awk '/^go /{print $2}' "$(dirname "$0")/../go.mod")
if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH=/usr/local/go/bin:$PATH
  else
    echo "install-deps: no Go toolchain found; Go >= $need_go is required" >&2
    exit 1
  fi
fi
go mod download
# shim/gateway differential tests: real programs using System V IPC
# (stress-ng, perl IPC::SysV, python3-sysv-ipc, php sysvsem/sysvmsg) and
# gcc for the C test programs. Tests skip what is missing.
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    gcc libc6-dev stress-ng perl python3 python3-sysv-ipc php-cli
fi
