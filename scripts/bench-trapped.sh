#!/usr/bin/env bash
# The gateway's trapped path against the seccomp-notify floor, in the same
# run, for one or more commits interleaved (ratios, not times: the
# machines are noisy):
#   scripts/bench-trapped.sh [-n RUNS] COMMIT...
# Builds each commit's gateway test binary from an export in a temp dir,
# runs scripts/notify-floor/run.sh, then RUNS rounds (default 5) of
# BenchmarkTrappedCall (null, semop, msgsnd/msgrcv) for each commit in
# turn, then the floor again; prints the load before and after. Root
# (the benchmarks trap a child with seccomp user notification).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin GOFLAGS=-buildvcs=false
runs=5
if [ "${1:-}" = -n ]; then
  [ $# -ge 2 ] && [ "$2" -gt 0 ] 2>/dev/null || { echo "bench-trapped: -n needs a number of rounds > 0" >&2; exit 2; }
  runs=$2
  shift 2
fi
[ $# -gt 0 ] || { echo "usage: scripts/bench-trapped.sh [-n RUNS] COMMIT..." >&2; exit 2; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
# Each commit (any name git knows: a branch, origin/main, a tag, a hash)
# is exported to $w/N and its gateway test binary built there.
n=0
for c in "$@"; do
  n=$((n + 1))
  sha=$(git rev-parse --verify -q "$c^{commit}") || { echo "bench-trapped: $c: no such commit" >&2; exit 2; }
  mkdir "$w/$n"
  git archive "$sha" | tar -x -C "$w/$n"
  (cd "$w/$n" && go test -c -o "$w/$n/gw.test" ./shim/gateway/)
done
echo "load before: $(cat /proc/loadavg)"
scripts/notify-floor/run.sh
for i in $(seq "$runs"); do
  n=0
  for c in "$@"; do
    n=$((n + 1))
    echo "== $c round $i"
    # In the commit's own shim/gateway: the binary finds its testdata there.
    (cd "$w/$n/shim/gateway" && ./../../gw.test -test.run '^$' -test.bench 'TrappedCall$' -test.benchtime 40000x 2>&1 | grep -E '^Benchmark')
  done
done
scripts/notify-floor/run.sh
echo "load after: $(cat /proc/loadavg) $(date +%H:%M)"
