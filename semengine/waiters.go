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
		s.lockAll()
		add := func(q *queue) {
			for w := q.front(); w != nil; w = w.Next() {
				out = append(out, WaiterInfo{SemID: s.ID(), Pid: w.caller.Pid,
					Sops: append([]Sembuf(nil), w.sops...), Blocking: w.blocking, Since: w.since})
			}
		}
		add(&s.alter)
		add(&s.zero)
		for i := range s.sems {
			add(&s.sems[i].alter)
			add(&s.sems[i].zero)
		}
		s.unlock(-1)
	}
	return out
}
