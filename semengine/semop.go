package semengine

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
	"golang.org/x/sys/unix"
)

// ErrNotDelivered is returned by Semop when the operation was done but its
// Commit reported that the caller could no longer take the result: the
// operation has been rolled back as if it had never run.
var ErrNotDelivered = errors.New("semengine: result not delivered; operation rolled back")

// ErrWouldSleep is returned by Start for an Op with NoSleep that would
// have to wait: nothing was done.
var ErrWouldSleep = errors.New("semengine: operation would sleep")

// Op is one semop or semtimedop call.
type Op struct {
	SemID int32
	Sops  []Sembuf
	// Timeout is semtimedop's relative timeout; nil waits without limit.
	Timeout *unix.Timespec
	// Commit, when set, hands a successful result to the caller while the
	// set is still locked, and reports whether the caller took it. If it
	// returns false the operation is undone (values, adjustments, sempids)
	// before anyone else sees it, and the operation ends with
	// ErrNotDelivered. The gateway sends the seccomp reply here, which
	// makes completing a sleeper's operation and telling it so one atomic
	// step. Commit must not call into the engine.
	Commit func() bool
	// Done, for an operation that went to sleep (Start returned a Wait),
	// is called exactly once when the sleep ends other than by
	// Wait.Cancel: with nil after a waker completed the operation and
	// Commit took it, ErrNotDelivered when Commit refused, EIDRM when the
	// set was removed, EAGAIN when the timeout expired. It runs with the
	// set's lock held and must not call into the engine.
	Done func(error)
	// NoSleep makes Start fail with ErrWouldSleep, doing nothing, where
	// the operation would have to sleep.
	NoSleep bool
}

// Wait is an operation asleep in the engine, as Start returned it.
type Wait struct {
	s *Set
	w *waiter
}

// Cancel ends the sleep as a signal does (the sleeper leaves its queue
// with nothing done) and reports true, unless the sleep has already ended
// — a waker completed it, the set was removed, the timeout expired — in
// which case Done has been or is being called and Cancel reports false.
func (wt *Wait) Cancel() bool {
	return wt.s.endSleep(wt.w, statusCancelled)
}

// CheckCall reports the errors semop gives before it reads its operations
// from the caller's memory (do_semtimedop): E2BIG for nsops above SEMOPM,
// then EINVAL for nsops < 1. The gateway calls it before the copy, whose
// EFAULT comes next in Linux's order; a negative semid is only refused
// after the copy. Semop repeats the checks.
func (e *Engine) CheckCall(nsops int) error {
	if nsops > e.ns.Limits().SemOPM {
		return unix.E2BIG
	}
	if nsops < 1 {
		return unix.EINVAL
	}
	return nil
}

// Semop performs semop(2)/semtimedop(2) for c, sleeping while the
// operations cannot all proceed; cancelling ctx interrupts the sleep with
// EINTR (a signal), and the timeout ends it with EAGAIN. Errors are
// syscall.Errno values in Linux's order: E2BIG, EINVAL (nsops), EINVAL
// (semid, timeout), EINVAL (no such id), EFBIG, EACCES, EIDRM, ERANGE,
// EAGAIN. It is Start for callers that can block a goroutine; op.Done is
// its own.
func (e *Engine) Semop(ctx context.Context, c *ipcns.Caller, op *Op) error {
	ended := make(chan error, 1)
	op.Done = func(err error) { ended <- err }
	wt, err := e.Start(c, op)
	if wt == nil {
		return err
	}
	select {
	case err := <-ended:
		return err
	case <-ctx.Done():
	}
	if wt.Cancel() {
		return unix.EINTR
	}
	return <-ended
}

// Start begins semop(2)/semtimedop(2) for c. It returns (nil, nil) when
// the operation was done at once (Commit, if set, took it), (nil, err)
// when it failed, with the errors of Semop or ErrNotDelivered, and (w,
// nil) when it went to sleep: it was queued in the same critical section
// that found it must wait, as in ipc/sem.c, and it ends either with
// op.Done or with w.Cancel. op.Done must be set unless op.NoSleep.
func (e *Engine) Start(c *ipcns.Caller, op *Op) (*Wait, error) {
	sops := op.Sops
	if err := e.CheckCall(len(sops)); err != nil {
		return nil, err
	}
	if op.SemID < 0 {
		return nil, unix.EINVAL
	}
	if t := op.Timeout; t != nil && (t.Sec < 0 || t.Nsec < 0 || t.Nsec >= 1e9) {
		return nil, unix.EINVAL
	}
	maxNum, undos, alter := 0, false, false
	for i := range sops {
		maxNum = max(maxNum, int(sops[i].Num))
		undos = undos || sops[i].Flg&SemUndo != 0
		alter = alter || sops[i].Op != 0
	}
	s, err := e.ids.Lookup(op.SemID)
	if err != nil {
		return nil, err
	}
	var un *undo.Entry
	if undos {
		// Linux finds or allocates the undo entry before checking the
		// operations against the set; an entry so made stays, and is
		// applied (with nothing to add) at exit.
		if un, err = e.attachUndo(c, s); err != nil {
			return nil, err
		}
	}
	if maxNum >= len(s.sems) {
		return nil, unix.EFBIG
	}
	access := ipcns.ReadAccess
	if alter {
		access = ipcns.WriteAccess
	}
	if err := s.Perm().Check(&c.Creds, access); err != nil {
		return nil, err
	}

	locknum := s.lockFor(sops)
	if s.Deleted() {
		s.unlock(locknum)
		return nil, unix.EIDRM
	}
	var buf [8]*ipcns.Pid
	var saved []*ipcns.Pid
	if op.Commit != nil {
		saved = s.savePids(sops, buf[:0])
	}
	var blocking int
	switch r := s.perform(sops, un, c.Pid, &blocking); r {
	case 0:
		if op.Commit != nil && !op.Commit() {
			s.revert(sops, un)
			s.restorePids(sops, saved)
			s.unlock(locknum)
			return nil, ErrNotDelivered
		}
		if alter {
			s.update(sops, true)
		} else {
			s.stampOtime(sops)
		}
		s.unlock(locknum)
		return nil, nil
	case performBlocks:
	default:
		s.unlock(locknum)
		return nil, unix.Errno(r)
	}
	if t := op.Timeout; t != nil && t.Sec == 0 && t.Nsec == 0 {
		// A zero timeout expires as the sleep begins: EAGAIN, with no
		// waiter left for anyone to see.
		s.unlock(locknum)
		return nil, unix.EAGAIN
	}
	if op.NoSleep {
		s.unlock(locknum)
		return nil, ErrWouldSleep
	}
	w := &waiter{sops: sops, alter: alter, blocking: blocking, undo: un, caller: c, commit: op.Commit, done: op.Done}
	s.enqueue(w)
	if d, ok := timeoutDuration(op.Timeout); ok {
		w.timer = time.AfterFunc(d, func() { s.endSleep(w, int(unix.EAGAIN)) })
	}
	s.unlock(locknum)
	return &Wait{s: s, w: w}, nil
}

// timeoutDuration is a valid semtimedop timeout as a Duration, and false
// for none: nil, or one too long for a Duration (over ~292 years), which
// the kernel saturates (ktime_add_safe to KTIME_MAX; MAX_JIFFY_OFFSET
// before hrtimers) into a sleep that never times out. The product
// Sec*time.Second would wrap negative there and expire at once.
func timeoutDuration(t *unix.Timespec) (time.Duration, bool) {
	if t == nil || t.Sec > (math.MaxInt64-t.Nsec)/int64(time.Second) {
		return 0, false
	}
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Nsec), true
}

// enqueue puts w, whose operation must wait, on its queue (the tail of
// the list do_semtimedop picks). The caller holds the lock for w.sops.
func (s *Set) enqueue(w *waiter) {
	w.status = statusPending
	w.since = time.Now()
	s.nwait.Add(1)
	s.eng.sleepers.Add(1)
	if len(w.sops) == 1 {
		sm := &s.sems[w.sops[0].Num]
		switch {
		case !w.alter:
			sm.zero.pushBack(w)
		case s.complexCount > 0:
			s.alter.pushBack(w)
		default:
			sm.alter.pushBack(w)
		}
		return
	}
	if s.complexCount == 0 {
		s.mergeQueues()
	}
	if w.alter {
		s.alter.pushBack(w)
	} else {
		s.zero.pushBack(w)
	}
	s.complexCount++
}

// endSleep ends w's sleep from outside (Cancel: statusCancelled; the
// timeout: EAGAIN) unless a waker or IPC_RMID ended it first, and reports
// whether it did. A timeout reports through w.done; a cancellation does
// not.
func (s *Set) endSleep(w *waiter, status int) bool {
	locknum := s.lockFor(w.sops)
	defer s.unlock(locknum)
	if w.status != statusPending {
		return false
	}
	s.unlink(w)
	if status == statusCancelled {
		w.status = status
		w.stopTimer()
		return true
	}
	w.finish(status)
	return true
}

func statusError(status int) error {
	switch status {
	case 0:
		return nil
	case statusUndelivered:
		return ErrNotDelivered
	}
	return unix.Errno(status)
}
