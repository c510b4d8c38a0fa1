package semengine

import (
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// WaiterInfo describes a sleeping semop, for host tools and tests.
type WaiterInfo struct {
	SemID int32
	Pid   *ipcns.Pid
	Sops  []Sembuf
	// Blocking is the index in Sops of the operation it waits on.
	Blocking int
	Since    time.Time
}

// Waiters returns every sleeping semop of the namespace, set by set in
// index order, each set's in queue order.
func (e *Engine) Waiters() []WaiterInfo {
	var out []WaiterInfo
	for _, s := range e.ids.All() {
		out = s.appendWaiters(out, -1)
	}
	return out
}

// appendWaiters appends s's sleepers, set queues first then each
// semaphore's, to out until it holds limit (no cap when limit < 0).
func (s *Set) appendWaiters(out []WaiterInfo, limit int) []WaiterInfo {
	s.lockAll()
	defer s.unlock(-1)
	// Stop at the set's last sleeper: the semaphores after it have none.
	left := int(s.nwait.Load())
	add := func(q *queue) {
		for w := q.front(); w != nil && (limit < 0 || len(out) < limit); w = w.Next() {
			left--
			out = append(out, WaiterInfo{SemID: s.ID(), Pid: w.caller.Pid,
				Sops: append([]Sembuf(nil), w.sops...), Blocking: w.blocking, Since: w.since})
		}
	}
	add(&s.alter)
	add(&s.zero)
	for i := range s.sems {
		if left <= 0 || limit >= 0 && len(out) >= limit {
			break
		}
		add(&s.sems[i].alter)
		add(&s.sems[i].zero)
	}
	return out
}
