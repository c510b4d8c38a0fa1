package gateway

import (
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
)

// TestSignalLossMarksEveryProcess: once a drain finds signal events
// dropped, any process may have a signal the gateway did not see: calls
// received before it, and later calls of a process that has taken no
// signal since, are answered as if a signal may race. A process that took
// a signal after the loss is judged by its own events again. A dropped
// exit does not mark anything (it queues a sweep instead).
func TestSignalLossMarksEveryProcess(t *testing.T) {
	g := &Gateway{}
	quiet, signalled := &process{tgid: 1}, &process{tgid: 2}
	g.evMu.Lock()
	defer g.evMu.Unlock()
	g.seq = 10
	if g.mayBeSignalled(quiet, 10) {
		t.Fatal("a process with no signal event is taken as signalled before any loss")
	}
	g.lostLocked(tasktrace.Losses{Lifecycle: 1})
	if g.mayBeSignalled(quiet, 10) {
		t.Error("a dropped exit event marked a process as signalled")
	}
	if len(g.actions) != 1 {
		t.Errorf("a dropped exit event queued %d actions, want 1 (a sweep of every sleeper)", len(g.actions))
	}
	g.lostLocked(tasktrace.Losses{Signals: 5, Lifecycle: 1})
	lost := g.seq
	if lost != 11 {
		t.Fatalf("the loss was given sequence number %d, want 11", lost)
	}
	if !g.mayBeSignalled(quiet, 10) {
		t.Error("a call received before the loss is not taken as raced")
	}
	if !g.mayBeSignalled(quiet, lost) {
		t.Error("a later call of a process that took no signal since the loss is not taken as raced")
	}
	// The signalled process takes a signal after the loss.
	g.seq++
	signalled.sigDel.Store(g.seq)
	if g.mayBeSignalled(signalled, g.seq) {
		t.Error("a process that took a signal after the loss is still taken as signalled")
	}
	// The same loss count seen again marks nothing new.
	g.lostLocked(tasktrace.Losses{Signals: 5, Lifecycle: 1})
	if g.seq != lost+1 || len(g.actions) != 1 {
		t.Errorf("a loss already seen was taken again: seq %d, %d actions", g.seq, len(g.actions))
	}
}
