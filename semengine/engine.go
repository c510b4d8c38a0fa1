package semengine

import (
	"sync"
	"sync/atomic"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
	"golang.org/x/sys/unix"
)

// Engine is the semaphore sets of one IPC namespace.
type Engine struct {
	ns  *ipcns.Resources
	ids *ipcns.Registry[Set, *Set]
	// usedSems counts the semaphores of all sets, against SEMMNS. It
	// changes with the registry's lock held (creation) or the set's
	// whole-set lock (removal), and is read atomically.
	usedSems atomic.Int64
	// sleepers counts the sleeping semops of all sets and undoEntries
	// the undo entries (process, set), for host tools: O(1) counts
	// instead of walks. Changed under the lock that changes what they
	// count, read atomically.
	sleepers, undoEntries atomic.Int64
	// undoLists maps a process (*ipcns.Pid) to its *undo.List.
	undoLists sync.Map
}

// New returns the empty semaphore engine of namespace ns.
func New(ns *ipcns.Resources) *Engine {
	return &Engine{ns: ns, ids: ipcns.NewRegistry[Set, *Set]()}
}

// Resources returns the limits and account the engine shares with the
// other engine of its namespace.
func (e *Engine) Resources() *ipcns.Resources { return e.ns }

// Registry returns the engine's id registry (for sem_next_id and listings).
func (e *Engine) Registry() *ipcns.Registry[Set, *Set] { return e.ids }

// Semget is semget(2): it returns the id of the set with key, creating one
// of nsems semaphores as flg says. Errors in Linux's order: EINVAL for
// nsems < 0 or above SEMMSL; then ENOENT, EEXIST, EINVAL (an existing set
// smaller than nsems), EACCES; for a new set EINVAL (nsems 0), ENOSPC
// (SEMMNS, then SEMMNI).
func (e *Engine) Semget(c *ipcns.Caller, key int32, nsems int, flg int) (int32, error) {
	lim := e.ns.Limits()
	if nsems < 0 || nsems > lim.SemMSL {
		return 0, unix.EINVAL
	}
	return e.ids.Get(&c.Creds, key, flg, lim.SemMNI, ipcns.GetOps[*Set]{
		New: func(ipcns.Perm) (*Set, error) {
			if nsems == 0 {
				return nil, unix.EINVAL
			}
			if e.usedSems.Load()+int64(nsems) > int64(lim.SemMNS) {
				return nil, unix.ENOSPC
			}
			// newary's allocation, charged to the caller's pod
			// (ENOMEM where the allocation fails).
			if e.ns.Charge(setBytes(nsems)) != nil {
				return nil, unix.ENOMEM
			}
			return &Set{eng: e, sems: make([]sem, nsems), ctime: now()}, nil
		},
		Added:   func(s *Set) { e.usedSems.Add(int64(len(s.sems))) },
		Discard: func(s *Set) { e.ns.Uncharge(setBytes(len(s.sems))) },
		Check: func(s *Set) error {
			if nsems > len(s.sems) {
				return unix.EINVAL
			}
			return nil
		},
	})
}

// UndoList returns the undo list of process p in this namespace, making it
// on first use. Callers may keep it: it stays p's until Exit.
func (e *Engine) UndoList(p *ipcns.Pid) *undo.List {
	if l, ok := e.undoLists.Load(p); ok {
		return l.(*undo.List)
	}
	l, _ := e.undoLists.LoadOrStore(p, undo.NewList(p))
	return l.(*undo.List)
}

// attachUndo finds or makes c's undo entry for s (find_alloc_undo).
func (e *Engine) attachUndo(c *ipcns.Caller, s *Set) (*undo.Entry, error) {
	l := e.UndoList(c.Pid)
	if un := l.Find(s); un != nil {
		return un, nil
	}
	s.lockAll()
	defer s.unlock(-1)
	if s.Deleted() {
		return nil, unix.EIDRM
	}
	// Entries for s are made only under s's whole-set lock: found now,
	// it was made by another thread of the process meanwhile.
	if un := l.Find(s); un != nil {
		return un, nil
	}
	// find_alloc_undo's allocation, charged to the caller's pod.
	if e.ns.Charge(undoBytes(len(s.sems))) != nil {
		return nil, unix.ENOMEM
	}
	un := l.Attach(s, len(s.sems), &s.undos)
	if un == nil {
		// The process has exited; Linux cannot get here.
		e.ns.Uncharge(undoBytes(len(s.sems)))
		return nil, unix.EIDRM
	}
	e.undoEntries.Add(1)
	return un, nil
}

// Exit applies and drops the undo list of process p, as the kernel does
// when the last thread of a process exits (exit_sem): each adjustment is
// added to its semaphore with the result clamped to [0, SEMVMX], the
// adjusted semaphores get p as sempid, and sleepers that can now proceed
// are woken. It never blocks on a semaphore.
func (e *Engine) Exit(p *ipcns.Pid) {
	l, ok := e.undoLists.LoadAndDelete(p)
	if !ok {
		return
	}
	for _, un := range l.(*undo.List).Exit() {
		s := un.Set().(*Set)
		s.lockAll()
		if !s.Deleted() && un.Detach(&s.undos) {
			e.ns.Uncharge(undoBytes(len(un.Adj)))
			e.undoEntries.Add(-1)
			for i, adj := range un.Adj {
				if adj == 0 {
					continue
				}
				sm := &s.sems[i]
				sm.val = min(max(sm.val+int32(adj), 0), ipcns.SemVMX)
				ipcns.StorePid(&sm.pid, p)
			}
			s.update(nil, true)
		}
		s.unlock(-1)
	}
}
