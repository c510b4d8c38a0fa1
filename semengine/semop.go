package semengine

import (
	"context"
	"errors"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
	"golang.org/x/sys/unix"
)

// ErrNotDelivered is returned by Semop when the operation was done but its
// Commit reported that the caller could no longer take the result: the
// operation has been rolled back as if it had never run.
var ErrNotDelivered = errors.New("semengine: result not delivered; operation rolled back")

// Op is one semop or semtimedop call.
type Op struct {
	SemID int32
	Sops  []Sembuf
	// Timeout is semtimedop's relative timeout; nil waits without limit.
	Timeout *unix.Timespec
	// Commit, when set, hands a successful result to the caller while the
	// set is still locked, and reports whether the caller took it. If it
	// returns false the operation is undone (values, adjustments, sempids)
	// before anyone else sees it, and Semop returns ErrNotDelivered. The
	// gateway sends the seccomp reply here, which makes completing a
	// sleeper's operation and telling it so one atomic step. Commit must
	// not call into the engine.
	Commit func() bool
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

// Semop performs semop(2)/semtimedop(2) for c. It sleeps while the
// operations cannot all proceed; cancelling ctx interrupts the sleep with
// EINTR (a signal), and the timeout ends it with EAGAIN. Errors are
// syscall.Errno values in Linux's order: E2BIG, EINVAL (nsops), EINVAL
// (semid, timeout), EINVAL (no such id), EFBIG, EACCES, EIDRM, ERANGE,
// EAGAIN.
func (e *Engine) Semop(ctx context.Context, c *ipcns.Caller, op *Op) error {
	sops := op.Sops
	if err := e.CheckCall(len(sops)); err != nil {
		return err
	}
	if op.SemID < 0 {
		return unix.EINVAL
	}
	if t := op.Timeout; t != nil && (t.Sec < 0 || t.Nsec < 0 || t.Nsec >= 1e9) {
		return unix.EINVAL
	}
	maxNum, undos, alter := 0, false, false
	for i := range sops {
		maxNum = max(maxNum, int(sops[i].Num))
		undos = undos || sops[i].Flg&SemUndo != 0
		alter = alter || sops[i].Op != 0
	}
	s, err := e.ids.Lookup(op.SemID)
	if err != nil {
		return err
	}
	var un *undo.Entry
	if undos {
		// Linux finds or allocates the undo entry before checking the
		// operations against the set; an entry so made stays, and is
		// applied (with nothing to add) at exit.
		if un, err = e.attachUndo(c, s); err != nil {
			return err
		}
	}
	if maxNum >= len(s.sems) {
		return unix.EFBIG
	}
	access := ipcns.ReadAccess
	if alter {
		access = ipcns.WriteAccess
	}
	if err := s.Perm().Check(&c.Creds, access); err != nil {
		return err
	}

	locknum := s.lockFor(sops)
	if s.Deleted() {
		s.unlock(locknum)
		return unix.EIDRM
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
			return ErrNotDelivered
		}
		if alter {
			s.update(sops, true)
		} else {
			s.stampOtime(sops)
		}
		s.unlock(locknum)
		return nil
	case performBlocks:
	default:
		s.unlock(locknum)
		return unix.Errno(r)
	}
	w := &waiter{sops: sops, alter: alter, blocking: blocking, undo: un, caller: c, commit: op.Commit}
	return s.sleep(ctx, w, locknum, op.Timeout)
}

// sleep queues w, whose operation must wait, and waits for a waker to
// complete it, for ctx to be cancelled or for the timeout. The caller holds
// the lock locknum; sleep releases it.
func (s *Set) sleep(ctx context.Context, w *waiter, locknum int, timeout *unix.Timespec) error {
	w.status = statusPending
	w.wake = make(chan struct{}, 1)
	w.since = time.Now()
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
	} else {
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
	s.unlock(locknum)

	var expired <-chan time.Time
	if timeout != nil {
		t := time.NewTimer(time.Duration(timeout.Sec)*time.Second + time.Duration(timeout.Nsec))
		defer t.Stop()
		expired = t.C
	}
	timedOut := false
	select {
	case <-w.wake:
		return statusError(w.status)
	case <-ctx.Done():
	case <-expired:
		timedOut = true
	}
	locknum = s.lockFor(w.sops)
	defer s.unlock(locknum)
	if w.status != statusPending {
		<-w.wake
		return statusError(w.status)
	}
	s.unlink(w)
	if timedOut {
		return unix.EAGAIN
	}
	return unix.EINTR
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
