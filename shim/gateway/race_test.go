package gateway_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// TestRaceSignalsDifferential runs testdata/racesig.c natively in a fresh
// IPC namespace and under the gateway: children asleep in semop (-1 and
// wait-for-zero), semtimedop, msgrcv on an empty queue and msgsnd on a
// full one get a signal (handler without and with SA_RESTART,
// SIGSTOP+SIGCONT, an ignored signal), have their object removed, or are
// counted by GETNCNT/GETZCNT, at 0, 3, 30 and 1000 µs after /proc shows
// them asleep — often before the gateway has read the notification. Each
// case is repeated reps times per delay (200 per call and event in the
// long run) and prints how many reps gave each outcome; the counts must
// be identical. The "busy" variant keeps the gateway's receiver busy with
// another process's calls so that the sleeper's notification waits
// unread.
func TestRaceSignalsDifferential(t *testing.T) {
	bin := buildC(t, "testdata/racesig.c")
	defer func(d time.Duration) { serveTimeout = d }(serveTimeout)
	serveTimeout = 10 * time.Minute
	reps := 50
	if testing.Short() {
		reps = 6
	}
	for _, mode := range []string{"quiet", "busy"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{bin, strconv.Itoa(reps), mode}
			native, err := harness.NativeCommand(args...).Output()
			if err != nil {
				t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
			}
			out, g := serveWith(t, harness.NewEnginesByInode(), nil, args...)
			if t.Failed() {
				return
			}
			diff(t, native, out)
			if t.Failed() {
				logStats(t, g)
			}
		})
	}
}

// TestRaceSigDebug runs racesig under the gateway with RACESIG_ARGS and prints its output.
func TestRaceSigDebug(t *testing.T) {
	a := os.Getenv("RACESIG_ARGS")
	if a == "" {
		t.Skip()
	}
	bin := buildC(t, "testdata/racesig.c")
	start := time.Now()
	out, g := serveWith(t, harness.NewEnginesByInode(), nil, append([]string{bin}, strings.Fields(a)...)...)
	t.Logf("%v\n%s", time.Since(start), out)
	logStats(t, g)
}

// TestExitCausality runs testdata/exitcause.c natively and under the
// gateway: a process holding SEM_UNDO units, killed asleep (SIGKILL) or
// exiting by itself, hundreds of times; the parent's waitpid or the EOF
// of a pipe the child held must find the adjustment applied and the
// sleeper gone from GETNCNT, every time.
func TestExitCausality(t *testing.T) {
	bin := buildC(t, "testdata/exitcause.c")
	reps := "300"
	if testing.Short() {
		reps = "100"
	}
	native, err := harness.NativeCommand(bin, reps).Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	out, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, reps)
	diff(t, native, out)
	if t.Failed() {
		logStats(t, g)
	}
}
