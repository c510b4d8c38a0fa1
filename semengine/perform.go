package semengine

import (
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
	"golang.org/x/sys/unix"
)

// performBlocks is perform's result for an operation that must sleep.
const performBlocks = 1

// perform applies sops to the set all-or-nothing, in order, each operation
// seeing the values left by the ones before it (perform_atomic_semop_slow,
// which the kernel's fast path matches whenever no semaphore is altered
// twice). It returns 0 on success, performBlocks with *blocking set to the
// index of the operation that cannot proceed, or the errno: ERANGE for a
// value above SEMVMX or an adjustment out of range, EAGAIN for a blocking
// operation with IPC_NOWAIT. The caller holds the locks of every semaphore
// in sops.
func (s *Set) perform(sops []Sembuf, un *undo.Entry, pid *ipcns.Pid, blocking *int) int {
	for i := range sops {
		op := &sops[i]
		sm := &s.sems[op.Num]
		v := sm.val
		if op.Op == 0 && v != 0 || v+int32(op.Op) < 0 {
			s.revert(sops[:i], un)
			*blocking = i
			if op.Flg&IPCNoWait != 0 {
				return int(unix.EAGAIN)
			}
			return performBlocks
		}
		v += int32(op.Op)
		if v > ipcns.SemVMX {
			s.revert(sops[:i], un)
			return int(unix.ERANGE)
		}
		if op.Flg&SemUndo != 0 {
			adj := int32(un.Adj[op.Num]) - int32(op.Op)
			if adj < undo.MinAdj || adj > undo.MaxAdj {
				s.revert(sops[:i], un)
				return int(unix.ERANGE)
			}
			un.Adj[op.Num] = int16(adj)
		}
		sm.val = v
	}
	for i := range sops {
		ipcns.StorePid(&s.sems[sops[i].Num].pid, pid)
	}
	return 0
}

// revert undoes the values and adjustments of sops, which perform has
// applied.
func (s *Set) revert(sops []Sembuf, un *undo.Entry) {
	for i := len(sops) - 1; i >= 0; i-- {
		op := &sops[i]
		s.sems[op.Num].val -= int32(op.Op)
		if op.Flg&SemUndo != 0 {
			un.Adj[op.Num] += op.Op
		}
	}
}

// savePids appends to dst the sempids an operation on sops is about to
// overwrite, so that a completed operation whose result cannot be
// delivered is rolled back exactly.
func (s *Set) savePids(sops []Sembuf, dst []*ipcns.Pid) []*ipcns.Pid {
	for i := range sops {
		dst = append(dst, s.sems[sops[i].Num].pid)
	}
	return dst
}

// restorePids puts back what savePids saved.
func (s *Set) restorePids(sops []Sembuf, saved []*ipcns.Pid) {
	for i := len(sops) - 1; i >= 0; i-- {
		s.sems[sops[i].Num].pid = saved[i]
	}
}

// complete runs w's operation for a waker (perform_atomic_semop on a queued
// sem_queue) and, if it is done, unlinks w and hands it its result. It
// returns perform's result, with statusUndelivered when the operation was
// done and rolled back because w's Commit failed.
func (s *Set) complete(w *waiter) int {
	var buf [8]*ipcns.Pid
	var saved []*ipcns.Pid
	if w.commit != nil {
		saved = s.savePids(w.sops, buf[:0])
	}
	r := s.perform(w.sops, w.undo, w.caller.Pid, &w.blocking)
	if r == performBlocks {
		return r
	}
	s.unlink(w)
	if r == 0 && w.commit != nil && !w.commit() {
		s.revert(w.sops, w.undo)
		s.restorePids(w.sops, saved)
		r = statusUndelivered
	}
	w.finish(r)
	return r
}

// wakeZero retries the waits-for-zero of semaphore num, or of the set's
// queue for -1, and reports whether one completed (wake_const_ops).
func (s *Set) wakeZero(num int) bool {
	q := &s.zero
	if num >= 0 {
		q = &s.sems[num].zero
	}
	done := false
	for w := q.front(); w != nil; {
		next := w.Next()
		if s.complete(w) == 0 {
			done = true
		}
		w = next
	}
	return done
}

// wakeZeroAfter wakes the waits-for-zero that an operation on sops (all
// semaphores when sops is nil) may have released (do_smart_wakeup_zero).
func (s *Set) wakeZeroAfter(sops []Sembuf) bool {
	done, gotZero := false, false
	try := func(num int) {
		if s.sems[num].val == 0 {
			gotZero = true
			if s.wakeZero(num) {
				done = true
			}
		}
	}
	if sops != nil {
		for i := range sops {
			try(int(sops[i].Num))
		}
	} else {
		for i := range s.sems {
			try(i)
		}
	}
	if gotZero && s.wakeZero(-1) {
		done = true
	}
	return done
}

// wakeAlter retries the sleeping alters of semaphore num, or of the set's
// queue for -1, in FIFO order, and reports whether one completed
// (update_queue). Every waiter that can proceed does; one that cannot
// does not hold back those behind it.
func (s *Set) wakeAlter(num int) bool {
	q := &s.alter
	if num >= 0 {
		q = &s.sems[num].alter
	}
	done := false
again:
	for w := q.front(); w != nil; {
		next := w.Next()
		// Only decrements sleep on a semaphore's own queue: none can
		// proceed while its value is 0.
		if num >= 0 && s.sems[num].val == 0 {
			break
		}
		r := s.complete(w)
		if r == 0 {
			done = true
			s.wakeZeroAfter(w.sops)
			// A completed complex operation, or one with complex
			// operations still queued, may have enabled anyone: rescan.
			if !s.alter.empty() || len(w.sops) > 1 {
				goto again
			}
		}
		w = next
	}
	return done
}

// update wakes whatever an operation on sops (all semaphores when sops is
// nil) has made possible, and stamps otime if something completed
// (do_smart_update). otime forces the stamp.
func (s *Set) update(sops []Sembuf, otime bool) {
	if s.wakeZeroAfter(sops) {
		otime = true
	}
	if !s.alter.empty() {
		if s.wakeAlter(-1) {
			otime = true
		}
	} else if sops == nil {
		for i := range s.sems {
			if s.wakeAlter(i) {
				otime = true
			}
		}
	} else {
		// Without complex operations only decrements sleep, and only an
		// increment can let one proceed.
		for i := range sops {
			if sops[i].Op > 0 && s.wakeAlter(int(sops[i].Num)) {
				otime = true
			}
		}
	}
	if otime {
		s.stampOtime(sops)
	}
}

// stampOtime records the time of an operation on the first semaphore it
// touched, or on semaphore 0 when that is not known (set_semotime).
func (s *Set) stampOtime(sops []Sembuf) {
	n := 0
	if sops != nil {
		n = int(sops[0].Num)
	}
	t := now()
	s.sems[n].otime = t
	for cur := s.otimeMax.Load(); t > cur && !s.otimeMax.CompareAndSwap(cur, t); cur = s.otimeMax.Load() {
	}
}

// now returns the time in seconds, as the kernel's ktime_get_real_seconds.
func now() int64 { return ipcns.Now() }
