#!/usr/bin/env bash
# make test: named steps, each timed, then a summary (one line per step and
# a closing line). Install steps stop the run when they fail; a failing test
# step does not stop the others. Each step's output is also in
# build/log/test-<step>.log. Exit status 0 only if every step passed.
#
# Steps, with their times in a fresh clone on a quiet 2-vCPU machine at
# ba8e3c0 (apt's and Go's caches warm, build/ copied from an earlier
# clone; 13m28s in all; about twice that at load 9-11):
#   deps          Go toolchain/modules, gcc and the test programs (apt)   1 s
#   runtime-deps  runc, busybox (apt); containerd+ctr+crictl from the Go
#                 module proxy; Debian rootfs (debootstrap, once)
#                 (0 s with build/ present; 1m33s-2m23s without it,
#                 5m36s on a new machine)
#   vet           go vet ./...                                            7 s
#   unit          every package but integration/: unit and differential
#                 tests (root: unshare(CLONE_NEWIPC) for the kernel
#                 oracle); shim/gateway 7m50s of it, its two signal
#                 torture tests ~6.5 min                                 8m02s
#   integration   integration/: the shim under a real containerd and runc 1m16s
#   race          go test -race -short ./... (integration skips in -short),
#                 the gateway with receivers overlapping on every call   3m59s
#   deploy        deploy/ (own module): manifests decoded strictly with the
#                 Kubernetes API types, install.sh run twice on temp roots 2 s
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
GO=${GO:-go}
LOGDIR=${LOGDIR:-$PWD/build/log}
mkdir -p "$LOGDIR"
names=() results=() times=()
failed=0
start_all=$SECONDS

# step NAME FATAL CMD...: runs CMD with its output on the terminal and in
# the step's log; FATAL=1 ends the run when it fails.
step() {
  local name=$1 fatal=$2 t0=$SECONDS rc
  shift 2
  echo "== make test: $name: $*"
  "$@" 2>&1 | tee "$LOGDIR/test-$name.log"
  rc=${PIPESTATUS[0]}
  names+=("$name") times+=($((SECONDS - t0)))
  if [ "$rc" -eq 0 ]; then
    results+=(ok)
  else
    results+=(FAIL) failed=$((failed + 1))
    echo "== make test: $name FAILED (exit $rc); output in $LOGDIR/test-$name.log"
    [ "$fatal" = 1 ] && summary && exit 1
  fi
  return 0
}

fmt_t() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# excerpt NAME: what a failed step's log says went wrong, so that the tail
# of the output (all a CI page may keep) names it: the failing tests and
# packages, panics, and the first data race report in full.
excerpt() {
  local log="$LOGDIR/test-$1.log"
  echo "== make test: $1: what failed (from $log)"
  grep -E '^(--- FAIL|FAIL|panic:|fatal error:|\s+--- FAIL)' "$log" | head -n 40 | sed 's/^/  /'
  awk '/^WARNING: DATA RACE/ {on=1} on {print "  " $0; n++} on && /^==================/ && n > 1 {exit} n >= 120 {exit}' "$log"
}

summary() {
  local i slow=0
  for i in "${!names[@]}"; do
    [ "${results[$i]}" = FAIL ] && excerpt "${names[$i]}"
  done
  echo "== make test: summary"
  for i in "${!names[@]}"; do
    printf '  %-4s  %-13s %8s\n' "${results[$i]}" "${names[$i]}" "$(fmt_t "${times[$i]}")"
    [ "${times[$i]}" -gt "${times[$slow]}" ] && slow=$i
  done
  if [ $failed -eq 0 ]; then
    echo "make test: PASS, ${#names[@]} steps in $(fmt_t $((SECONDS - start_all))) (slowest: ${names[$slow]}, $(fmt_t "${times[$slow]}"))"
  else
    echo "make test: FAIL, $failed of ${#names[@]} steps failed, in $(fmt_t $((SECONDS - start_all))) (logs: $LOGDIR/test-*.log)"
  fi
}

step deps 1 scripts/install-deps.sh
step runtime-deps 1 scripts/install-runtime-deps.sh
step vet 0 $GO vet ./...
# shellcheck disable=SC2046
# -timeout 30m: go test's 10-minute default is a hang detector that a loaded
# CI host (load average 20 on 2 vCPUs) can trip with a slow but live run.
step unit 0 $GO test -count=1 -timeout 30m $($GO list ./... | grep -v /integration)
step integration 0 env INTEGRATION_REQUIRED=1 $GO test -count=1 ./integration/
step race 0 env GATEWAY_HANDOFF=always $GO test -count=1 -timeout 30m -race -short ./...
# deploy/ is its own module (k8s.io/api stays out of the shim's go.mod).
step deploy 0 sh -c "cd deploy && $GO vet ./... && $GO test -count=1 ./..."
summary
[ $failed -eq 0 ]
