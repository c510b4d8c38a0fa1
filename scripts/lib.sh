# Sourced by the install scripts: quiet steps with a log, and apt-get that
# waits for the package manager's locks.
#
#   . "$(dirname "$0")/lib.sh"
#   quiet NAME cmd args...   # output to $LOGDIR/NAME.log; on failure the
#                            # log's tail and its path go to stderr
#   apt_get args...          # apt-get, quiet, waiting up to 600 s for locks

LOGDIR=${LOGDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/log}

# quiet NAME cmd...: runs cmd with its output appended to $LOGDIR/NAME.log.
# Silent on success; on failure prints the last lines and the log's path.
quiet() {
  local name=$1 rc=0
  shift
  mkdir -p "$LOGDIR"
  local log=$LOGDIR/$name.log
  echo "== $(date -u +%FT%TZ) $*" >>"$log"
  "$@" >>"$log" 2>&1 </dev/null || rc=$?
  if [ $rc -ne 0 ]; then
    {
      echo "$name: failed (exit $rc): $*"
      echo "---- last lines of $log"
      tail -n 25 "$log"
      echo "---- full output: $log"
    } >&2
  fi
  return $rc
}

# apt_get ARGS...: apt-get, non-interactive and quiet (log apt.log). dpkg's
# frontend lock is awaited by apt itself (DPkg::Lock::Timeout); the lists
# and archives locks (another apt-get update or download) are not, so a
# "Could not get lock" failure is retried until the same 600 s deadline.
apt_get() {
  local deadline=$((SECONDS + 600)) rc
  mkdir -p "$LOGDIR"
  while :; do
    rc=0
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q "$@" \
      >"$LOGDIR/apt.last" 2>&1 </dev/null || rc=$?
    cat "$LOGDIR/apt.last" >>"$LOGDIR/apt.log"
    if [ $rc -ne 0 ] && grep -q 'Could not get lock' "$LOGDIR/apt.last" && [ $SECONDS -lt $deadline ]; then
      [ -n "${apt_waiting:-}" ] || echo "apt: waiting for another package manager ($(grep -m1 'Could not get lock' "$LOGDIR/apt.last"))" >&2
      apt_waiting=1
      sleep 2
      continue
    fi
    break
  done
  if [ $rc -ne 0 ]; then
    {
      echo "apt-get $*: failed (exit $rc)"
      echo "---- last lines of $LOGDIR/apt.log"
      tail -n 25 "$LOGDIR/apt.last"
      echo "---- full output: $LOGDIR/apt.log"
    } >&2
  fi
  rm -f "$LOGDIR/apt.last"
  return $rc
}
