package semengine

import (
	"math"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// A semtimedop timeout too long for a time.Duration (the kernel
// saturates it: the sleep never times out) must sleep, not expire at once
// because Sec*time.Second wrapped negative.
func TestHugeTimeoutSleeps(t *testing.T) {
	e, root := newTestEngine("t")
	c := rootCaller(root, 10)
	id, _ := e.Semget(c, ipcns.IPCPrivate, 1, 0o600)
	for _, sec := range []int64{9_223_372_035, 9_223_372_037, 10_000_000_000, math.MaxInt64} {
		ended := make(chan error, 1)
		w, err := e.Start(c, &Op{SemID: id, Sops: []Sembuf{{Num: 0, Op: -1}},
			Timeout: &unix.Timespec{Sec: sec, Nsec: 999_999_999}, Done: func(err error) { ended <- err }})
		if err != nil || w == nil {
			t.Fatalf("timeout %ds: Start = %v, %v; want asleep", sec, w, err)
		}
		select {
		case err := <-ended:
			t.Fatalf("timeout %ds: sleep ended at once: %v", sec, err)
		case <-time.After(20 * time.Millisecond):
		}
		if !w.Cancel() {
			t.Fatalf("timeout %ds: sleep ended", sec)
		}
	}
}
