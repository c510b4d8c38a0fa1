package semengine

import (
	"sync"
	"sync/atomic"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
)

// globalLockHysteresis is how many whole-set lock releases with no complex
// operation queued it takes before simple operations go back to the
// per-semaphore locks (USE_GLOBAL_LOCK_HYSTERESIS in ipc/sem.c). A
// variable only so that a benchmark can show what it buys.
var globalLockHysteresis int32 = 10

// sem is one semaphore. It fills exactly one 64-byte cache line, so that
// simple operations on different semaphores share nothing.
type sem struct {
	// mu is the per-semaphore lock; it protects the fields below while the
	// set is in simple mode (see doc.go).
	mu    sync.Mutex
	val   int32
	_     int32
	pid   *ipcns.Pid // sempid: last process to operate on the semaphore
	otime int64      // time of the last semop, seconds; see Set.Otime
	alter queue      // sleeping simple decrements
	zero  queue      // sleeping simple waits for zero
}

// Set is a semaphore set, struct sem_array.
type Set struct {
	ipcns.Header

	// useGlobal is non-zero while simple operations must take mu instead
	// of their semaphore's lock. It is written with mu held and read
	// without a lock by the simple-operation path.
	useGlobal atomic.Int32

	// mu is the whole-set lock. It protects the fields below, and, while
	// useGlobal is non-zero, every semaphore's fields too.
	mu           sync.Mutex
	complexCount int   // queued multi-operation waiters
	alter        queue // sleeping complex alters, and all alters in complex mode
	zero         queue // sleeping complex waits-for-zero
	ctime        int64
	undos        undo.Chain // undo entries that refer to this set

	// eng is the engine the set belongs to, for its host-side counters.
	eng *Engine
	// nwait counts the sleepers on all of the set's queues, so that host
	// tools skip the sets nobody waits on without locking them. It
	// changes under the lock of the sleeper's queue (enqueue, unlink) and
	// is read atomically.
	nwait atomic.Int32
	// otimeMax is the latest otime stamped on any semaphore: sem_otime
	// for host tools without the walk of otimeLocked. stampOtime raises
	// it with a CAS, under whichever lock it holds; read atomically.
	otimeMax atomic.Int64

	sems []sem
}

// lockFor locks s for an operation on sops (all of s when sops is not a
// single operation) and returns the index of the semaphore whose lock it
// holds, or -1 for the whole-set lock (sem_lock in ipc/sem.c).
func (s *Set) lockFor(sops []Sembuf) int {
	if len(sops) != 1 {
		s.lockAll()
		return -1
	}
	n := int(sops[0].Num)
	sm := &s.sems[n]
	if s.useGlobal.Load() == 0 {
		sm.mu.Lock()
		// A complex operation that sets useGlobal after this load waits
		// for sm.mu in enterComplexMode, so holding sm.mu is enough.
		if s.useGlobal.Load() == 0 {
			return n
		}
		sm.mu.Unlock()
	}
	s.mu.Lock()
	if s.useGlobal.Load() == 0 {
		// Complex mode ended while we waited for mu.
		sm.mu.Lock()
		s.mu.Unlock()
		return n
	}
	return -1
}

// lockAll takes the whole-set lock and enters complex mode.
func (s *Set) lockAll() {
	s.mu.Lock()
	if s.useGlobal.Load() > 0 {
		s.useGlobal.Store(globalLockHysteresis)
		return
	}
	s.useGlobal.Store(globalLockHysteresis)
	// Wait for every simple operation that saw useGlobal == 0 to finish:
	// taking and dropping each semaphore's lock is the barrier (sem.c's
	// complexmode_enter spins on each sem's lock the same way); nothing
	// is done under it.
	for i := range s.sems {
		s.sems[i].mu.Lock()
		//lint:ignore SA2001 a barrier, see above
		s.sems[i].mu.Unlock()
	}
}

// unlock releases what lockFor or lockAll returned.
func (s *Set) unlock(locknum int) {
	if locknum >= 0 {
		s.sems[locknum].mu.Unlock()
		return
	}
	s.unmergeQueues()
	if s.complexCount == 0 {
		if g := s.useGlobal.Load(); g == 1 {
			s.useGlobal.Store(0)
		} else {
			s.useGlobal.Store(g - 1)
		}
	}
	s.mu.Unlock()
}

// mergeQueues moves every sleeping simple alter to the set's queue, so that
// a complex operation queued behind them keeps FIFO order (merge_queues).
func (s *Set) mergeQueues() {
	for i := range s.sems {
		s.alter.spliceFront(&s.sems[i].alter)
	}
}

// unmergeQueues moves the alters back to their semaphores once no complex
// operation is queued (unmerge_queues). Only simple ones are left then.
func (s *Set) unmergeQueues() {
	if s.complexCount > 0 {
		return
	}
	for w := s.alter.front(); w != nil; {
		next := w.Next()
		s.alter.remove(w)
		s.sems[w.sops[0].Num].alter.pushBack(w)
		w = next
	}
}

// unlink takes w off its queue (unlink_queue).
func (s *Set) unlink(w *waiter) {
	w.on.remove(w)
	s.nwait.Add(-1)
	s.eng.sleepers.Add(-1)
	if len(w.sops) > 1 {
		s.complexCount--
	}
}

// Nsems returns the number of semaphores in the set.
func (s *Set) Nsems() int { return len(s.sems) }
