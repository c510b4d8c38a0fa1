package gateway_test

import (
	"strings"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// invariants returns the "invariants:" line of torture's output.
func invariants(t *testing.T, out []byte) string {
	t.Helper()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "invariants:") {
			return l
		}
	}
	t.Fatalf("no invariants in %q", out)
	return ""
}

// TestTorture runs testdata/torture.c: workers lock and unlock a SEM_UNDO
// mutex while being signalled (SA_RESTART and not), stopped and
// continued, and killed. The invariants (mutual exclusion, final value 1,
// no starvation from a lost unit) must hold natively and under the
// gateway, with exact delivery and, to measure the kernel's window, with
// a plain SEND.
func TestTorture(t *testing.T) {
	torture(t, "sem")
}

// TestTortureMsg is TestTorture's message mode: workers pass numbered
// messages through a small queue (blocking msgsnd and msgrcv) under the
// same signals, stops and kills; no message may be received twice, and
// no more may be lost than workers were killed.
func TestTortureMsg(t *testing.T) {
	torture(t, "msg")
}

func torture(t *testing.T, mode string) {
	bin := buildC(t, "testdata/torture.c")
	args := []string{bin, "6", "3000", "7", mode}
	if testing.Short() {
		args[2] = "800"
	}
	native, err := harness.NativeCommand(args...).Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	want := invariants(t, native)
	t.Logf("native:  %s", strings.TrimSpace(strings.ReplaceAll(string(native), "\n", " | ")))
	out, g := serveWith(t, harness.NewEnginesByInode(), nil, args...)
	t.Logf("trapped: %s", strings.TrimSpace(strings.ReplaceAll(string(out), "\n", " | ")))
	logStats(t, g)
	if got := invariants(t, out); got != want {
		t.Errorf("invariants differ:\n native  %s\n trapped %s", want, got)
	}
}
