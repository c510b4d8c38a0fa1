package gateway_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// TestReceiversOverlap: two processes of one listener (callloop's K=2,
// each on its own set) are served in parallel. The first call served is
// held in its receiver until a call of the other process has reached
// dispatch: with one receiver per listener that never happens (the
// other call waits to be read), so the hold would run into its
// deadline — a hang detector, not a timing assertion. Every call is
// then answered, and the program's output says so.
func TestReceiversOverlap(t *testing.T) {
	defer gateway.SetHandOffAlways(gateway.SetHandOffAlways(true))
	bin := buildC(t, "testdata/callloop.c")
	var (
		once     sync.Once
		first    atomic.Int64
		other    = make(chan struct{})
		otherSet sync.Once
		overlap  atomic.Bool
	)
	defer gateway.SetDispatchHook(func(r *gateway.Request) {
		held := false
		if r.Sysno == gateway.SysSemop || r.Sysno == gateway.SysSemtimedop {
			once.Do(func() { first.Store(int64(r.Task.Tgid)); held = true })
		}
		if held {
			select {
			case <-other:
				overlap.Store(true)
			case <-time.After(10 * time.Second):
			}
			return
		}
		if f := first.Load(); f != 0 && int64(r.Task.Tgid) != f {
			otherSet.Do(func() { close(other) })
		}
	})()
	out, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, "semop", "500", "2")
	if !overlap.Load() {
		t.Fatalf("the other process's call did not reach dispatch while the first was held: receivers do not overlap (output %q)", out)
	}
	var ns float64
	if _, err := fmt.Sscan(string(out), &ns); err != nil {
		t.Fatalf("callloop output %q: %v", out, err)
	}
	logStats(t, g)
}
