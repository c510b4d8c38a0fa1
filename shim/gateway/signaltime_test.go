package gateway

import (
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
)

// TestSignalQueuedBefore: after a plain SEND, only a signal queued for
// the process after the answer was claimed (pre) and before the SEND
// returned (give or take queueSlack) may have made the kernel discard
// the answer; one whose time is unknown (its report dropped) may have;
// and when more signals came than the process's record holds, an older
// one may have.
func TestSignalQueuedBefore(t *testing.T) {
	g := &Gateway{procs: map[int]*process{}}
	p := g.signalProcess(1)
	slack := int64(queueSlack)
	queue := func(tgid int32, at int64) uint64 {
		g.evMu.Lock()
		defer g.evMu.Unlock()
		g.apply(&tasktrace.Event{Kind: tasktrace.Generate, Tid: tgid, Tgid: tgid, Queued: at})
		return g.seq
	}
	const sent = int64(1_000_000)
	pre := queue(1, 10) // before the answer was claimed
	if g.signalQueuedBefore(p, pre, sent) {
		t.Error("a signal queued before pre counts")
	}
	queue(2, sent-5) // another process's
	if g.signalQueuedBefore(p, pre, sent) {
		t.Error("another process's signal counts")
	}
	queue(1, sent+slack+1)
	if g.signalQueuedBefore(p, pre, sent) {
		t.Error("a signal queued after the SEND returned counts")
	}
	queue(1, sent+slack)
	if !g.signalQueuedBefore(p, pre, sent) {
		t.Error("a signal queued within queueSlack of the SEND's return does not count")
	}

	pre = queue(1, sent+2*slack)
	later := sent + 10*slack
	queue(1, sent) // queued before the SEND, reported after later ones
	for range len(p.queued) - 1 {
		queue(1, later)
	}
	if !g.signalQueuedBefore(p, pre, sent) {
		t.Error("an early signal among a full record does not count")
	}
	queue(1, later) // the early one leaves the record: it may have been after pre
	if !g.signalQueuedBefore(p, pre, sent) {
		t.Error("a signal no longer recorded, maybe after pre, does not count")
	}
	if g.signalQueuedBefore(p, g.seq-uint64(len(p.queued))+1, sent) {
		t.Error("with every signal after pre recorded and late, one counts")
	}

	pre = g.seq
	g.evMu.Lock()
	g.lostLocked(tasktrace.Losses{Signals: 1}, []int{1}, nil)
	g.evMu.Unlock()
	if !g.signalQueuedBefore(p, pre, sent) {
		t.Error("a dropped signal report (time unknown) does not count")
	}
	pre = g.seq
	g.evMu.Lock()
	g.lostLocked(tasktrace.Losses{Signals: 2, Unplaced: 1}, nil, nil)
	g.evMu.Unlock()
	if !g.signalQueuedBefore(g.signalProcess(3), pre, sent) {
		t.Error("a dropped report of an unknown process does not count for every process")
	}
}
