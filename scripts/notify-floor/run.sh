#!/usr/bin/env bash
# The floor of a seccomp-notify round trip for a Go supervisor, on this
# machine, now: a static C child traps N getppid calls; a minimal Go
# supervisor (goroutine on a locked OS thread) answers each at once.
# Prints ns per trapped call for each mode, 5 runs each, and native getppid.
#   scripts/notify-floor/run.sh [N]
# (The team's shared measuring program, copied here unchanged on
# 2026-12-06 so the figures in docs/ can be reproduced from the repository.)
# Compare a figure of yours with these in the same run (ratios, not times).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${1:-20000}
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
gcc -O2 -static -o "$w/trapchild" "$here/c/trapchild.c"
(cd "$here" && GOFLAGS=-mod=mod go build -o "$w/floor" .)
runs() { for _ in 1 2 3 4 5; do "$w/floor" -child "$w/trapchild" -n "$n" "$@"; done | sort -n | tr '\n' ' '; }
echo "blocking RECV + SYNC_WAKE_UP (ns/call): $(runs -sync)"
echo "poll + RECV + SYNC_WAKE_UP   (ns/call): $(runs -poll -sync)"
echo "blocking RECV, no sync       (ns/call): $(runs)"
echo "native getppid               (ns/call): $("$w/trapchild" 200000 native)"
