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
// each on its own set) are served in parallel. The first semop served is
// held in its receiver until a call of the other process read after it
// has reached dispatch: with one receiver per listener that never
// happens (the other call waits to be read), so the hold would run into
// its deadline — a hang detector, not a timing assertion. The other call
// may reach dispatch before the held one does (its receiver ran first)
// and then wait behind it (a get or ctl call is ordered after every call
// read before it): it counts, as it was read while the first was being
// served. Every call is then answered, and the program's output says so.
func TestReceiversOverlap(t *testing.T) {
	defer gateway.SetHandOffAlways(gateway.SetHandOffAlways(true))
	bin := buildC(t, "testdata/callloop.c")
	type call struct {
		tgid int
		id   uint64
	}
	var (
		mu      sync.Mutex
		seen    []call // every call that reached dispatch
		held    *call  // the first semop
		other   = make(chan struct{})
		closed  bool
		overlap atomic.Bool
	)
	defer gateway.SetDispatchHook(func(r *gateway.Request) {
		c := call{r.Task.Tgid, r.Notif.ID}
		mu.Lock()
		seen = append(seen, c)
		hold := held == nil && (r.Sysno == gateway.SysSemop || r.Sysno == gateway.SysSemtimedop)
		if hold {
			held = &c
		}
		if held != nil && !closed {
			// Notification ids grow in the order the calls were trapped,
			// which is the order they are read.
			for _, s := range seen {
				if s.tgid != held.tgid && s.id > held.id {
					close(other)
					closed = true
					break
				}
			}
		}
		mu.Unlock()
		if hold {
			select {
			case <-other:
				overlap.Store(true)
			case <-time.After(10 * time.Second):
			}
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
