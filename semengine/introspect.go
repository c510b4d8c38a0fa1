package semengine

import (
	"golang.org/x/sys/unix"

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
	// Adj[i] is semaphore AdjOffset+i's adjustment; the set has Nsems.
	// Undos copies them all, UndosN and SetUndos a window.
	Adj       []int16
	AdjOffset int
	Nsems     int
}

// Undos returns every undo entry of the namespace, set by set in index
// order, each set's newest first.
func (e *Engine) Undos() []UndoInfo {
	var out []UndoInfo
	for _, s := range e.ids.All() {
		s.lockAll()
		if !s.Deleted() {
			s.undos.Each(func(un *undo.Entry) {
				out = append(out, UndoInfo{SemID: s.ID(), Pid: un.Owner(), Adj: append([]int16(nil), un.Adj...), Nsems: len(un.Adj)})
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

// Host-side reads that cost what is asked: counts in O(1), set headers
// without the semaphores, one set's semaphores a page at a time, and
// capped lists of sleepers and undo entries that skip the sets with none.
// None of them takes a set's whole-set lock (lockAll, a sweep of every
// semaphore lock) except to copy a page of one set or the sleepers of a
// set that has some.

// Summary is what the namespace holds, counted without a walk.
type Summary struct {
	Sets, Sems  int
	Waiters     int // sleeping semops
	UndoEntries int
}

// Summary returns the namespace's counts.
func (e *Engine) Summary() Summary {
	sets, sems := e.Usage()
	return Summary{Sets: sets, Sems: sems, Waiters: int(e.sleepers.Load()), UndoEntries: int(e.undoEntries.Load())}
}

// SetHeader is one set as IPC_STAT reports it, with its counts of
// sleepers and undo entries: no semaphore is read.
type SetHeader struct {
	ID           int32
	Perm         ipcns.Perm
	Otime, Ctime int64
	Nsems        int
	Waiters      int
	Undos        int
}

// header reads s's header under the whole-set mutex alone, which guards
// ctime and the undo chain (every writer of them holds it through
// lockAll); it does not wait for simple operations. ok is false for a
// removed set.
func (s *Set) header() (h SetHeader, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Deleted() {
		return h, false
	}
	return SetHeader{ID: s.ID(), Perm: *s.Perm(), Otime: s.otimeMax.Load(), Ctime: s.ctime, Nsems: len(s.sems),
		Waiters: int(s.nwait.Load()), Undos: s.undos.Len()}, true
}

// SetHeaders returns the headers of at most limit sets, from the
// offset-th in index order, and the number of sets.
func (e *Engine) SetHeaders(offset, limit int) (out []SetHeader, total int) {
	all := e.ids.All()
	if offset < len(all) {
		all = all[max(offset, 0):]
	} else {
		all = nil
	}
	out = make([]SetHeader, 0, min(max(limit, 0), len(all)))
	for _, s := range all {
		if len(out) >= limit {
			break
		}
		if h, ok := s.header(); ok {
			out = append(out, h)
		}
	}
	return out, e.ids.InUse()
}

// SetPage returns set semid's header and its semaphores offset to
// offset+limit, copied under the whole-set lock; EINVAL or EIDRM, as
// semctl, when there is no such set.
func (e *Engine) SetPage(semid int32, offset, limit int) (SetHeader, []SemState, error) {
	s, err := e.ids.Lookup(semid)
	if err != nil {
		return SetHeader{}, nil, err
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return SetHeader{}, nil, unix.EIDRM
	}
	h := SetHeader{ID: s.ID(), Perm: *s.Perm(), Otime: s.otimeMax.Load(), Ctime: s.ctime, Nsems: len(s.sems),
		Waiters: int(s.nwait.Load()), Undos: s.undos.Len()}
	lo := min(max(offset, 0), len(s.sems))
	hi := lo + min(max(limit, 0), len(s.sems)-lo)
	sems := make([]SemState, 0, hi-lo)
	for i := lo; i < hi; i++ {
		sm := &s.sems[i]
		sems = append(sems, SemState{Val: sm.val, Pid: sm.pid, Ncnt: s.countLocked(i, false), Zcnt: s.countLocked(i, true)})
	}
	return h, sems, nil
}

// WaitersN returns at most limit sleeping semops in the order of
// Waiters, and how many sleep in all. Sets nobody sleeps on are skipped
// unlocked.
func (e *Engine) WaitersN(limit int) (out []WaiterInfo, total int) {
	total = int(e.sleepers.Load())
	if limit <= 0 || total == 0 {
		return nil, total
	}
	for _, s := range e.ids.All() {
		if len(out) >= limit {
			break
		}
		if s.nwait.Load() == 0 {
			continue
		}
		out = s.appendWaiters(out, limit)
	}
	return out, total
}

// UndosN returns at most limit undo entries in the order of Undos, each
// with the adjustments of semaphores adjOffset to adjOffset+adjLimit,
// and how many entries there are in all. Only the sets that have entries
// are locked whole.
func (e *Engine) UndosN(limit, adjOffset, adjLimit int) (out []UndoInfo, total int) {
	total = int(e.undoEntries.Load())
	if limit <= 0 || total == 0 {
		return nil, total
	}
	for _, s := range e.ids.All() {
		if len(out) >= limit {
			break
		}
		out = s.appendUndos(out, limit, adjOffset, adjLimit)
	}
	return out, total
}

// SetUndos is UndosN for set semid alone; total counts its entries.
func (e *Engine) SetUndos(semid int32, limit, adjOffset, adjLimit int) (out []UndoInfo, total int) {
	s, err := e.ids.Lookup(semid)
	if err != nil {
		return nil, 0
	}
	s.mu.Lock()
	total = s.undos.Len()
	s.mu.Unlock()
	return s.appendUndos(nil, limit, adjOffset, adjLimit), total
}

// appendUndos appends s's undo entries to out until it holds limit,
// copying the window of their adjustments under the whole-set lock (a
// simple semop changes Adj[i] under semaphore i's lock alone). A set
// without entries is seen so under its mutex (which guards the chain)
// without the lockAll sweep.
func (s *Set) appendUndos(out []UndoInfo, limit, adjOffset, adjLimit int) []UndoInfo {
	s.mu.Lock()
	n := s.undos.Len()
	s.mu.Unlock()
	if n == 0 {
		return out
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return out
	}
	lo := min(max(adjOffset, 0), len(s.sems))
	hi := lo + min(max(adjLimit, 0), len(s.sems)-lo)
	s.undos.Each(func(un *undo.Entry) {
		if len(out) < limit {
			out = append(out, UndoInfo{SemID: s.ID(), Pid: un.Owner(), Adj: append([]int16(nil), un.Adj[lo:hi]...),
				AdjOffset: lo, Nsems: len(un.Adj)})
		}
	})
	return out
}
