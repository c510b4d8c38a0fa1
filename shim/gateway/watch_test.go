package gateway_test

import (
	"sync/atomic"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// TestRewatchAfterUnwatch: a namespace the shim stops watching (its
// engine namespace refused, at MaxNested) while a thread in it is known
// is watched again at that thread's next call, if it is served then:
// otherwise its exits (SEM_UNDO) and signals would go unreported.
func TestRewatchAfterUnwatch(t *testing.T) {
	bin := buildC(t, "testdata/callloop.c")
	var g *gateway.Gateway
	var calls atomic.Int32
	var rewatched atomic.Int32 // 1: watched again, 2: not
	defer gateway.SetDispatchHook(func(r *gateway.Request) {
		switch calls.Add(1) {
		case 1:
			g.Unwatch(r.Task.IPCNS)
		case 2:
			if g.Watched(r.Task.IPCNS) {
				rewatched.Store(1)
			} else {
				rewatched.Store(2)
			}
		}
	})()
	serveWith(t, harness.NewEnginesByInode(), func(gw *gateway.Gateway) { g = gw }, bin, "null", "10")
	if rewatched.Load() != 1 {
		t.Fatalf("after Unwatch, the thread's next call left its IPC namespace unwatched (state %d)", rewatched.Load())
	}
}
