package semengine

import (
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
)

// Introspection for host tools (ipcctl, metrics): consistent snapshots of
// one set at a time, taken under the whole-set lock like semctl's, never
// on the trapped path.

// SemState is one semaphore as GETVAL, GETPID, GETNCNT and GETZCNT see it;
// Pid is the handle, for the reader to translate into any pid namespace.
type SemState struct {
	Val        int32
	Pid        *ipcns.Pid
	Ncnt, Zcnt int
}

// SetInfo is one semaphore set: what IPC_STAT reports, and its semaphores.
type SetInfo struct {
	ID           int32
	Perm         ipcns.Perm
	Otime, Ctime int64
	Sems         []SemState
	// Undos is the number of undo entries (processes with SEM_UNDO
	// adjustments) that refer to the set.
	Undos int
}

// Sets returns every set of the namespace in index order.
func (e *Engine) Sets() []SetInfo {
	var out []SetInfo
	for _, s := range e.ids.All() {
		s.lockAll()
		if !s.Deleted() {
			si := SetInfo{ID: s.ID(), Perm: *s.Perm(), Otime: s.otimeLocked(), Ctime: s.ctime,
				Sems: make([]SemState, len(s.sems)), Undos: s.undos.Len()}
			for i := range s.sems {
				sm := &s.sems[i]
				si.Sems[i] = SemState{Val: sm.val, Pid: sm.pid, Ncnt: s.countLocked(i, false), Zcnt: s.countLocked(i, true)}
			}
			out = append(out, si)
		}
		s.unlock(-1)
	}
	return out
}

// UndoInfo is one process's SEM_UNDO adjustments for one set (struct
// sem_undo): what the engine adds to the set's semaphores when the
// process exits.
type UndoInfo struct {
	SemID int32
	Pid   *ipcns.Pid
	Adj   []int16
}

// Undos returns every undo entry of the namespace, set by set in index
// order, each set's newest first.
func (e *Engine) Undos() []UndoInfo {
	var out []UndoInfo
	for _, s := range e.ids.All() {
		s.lockAll()
		if !s.Deleted() {
			s.undos.Each(func(un *undo.Entry) {
				out = append(out, UndoInfo{SemID: s.ID(), Pid: un.Owner(), Adj: append([]int16(nil), un.Adj...)})
			})
		}
		s.unlock(-1)
	}
	return out
}

// Usage returns what the namespace holds against its limits: sets
// (against SEMMNI) and semaphores (against SEMMNS).
func (e *Engine) Usage() (sets, sems int) {
	return e.ids.InUse(), int(e.usedSems.Load())
}
