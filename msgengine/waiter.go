package msgengine

import (
	"context"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/ilist"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// statusPending is a waiter's status while it sleeps.
const statusPending = -1

// statusUndelivered is the status of a waiter whose completion was undone
// because its Commit returned false.
const statusUndelivered = -2

// statusCancelled is the status of a waiter that Wait.Cancel took off its
// list.
const statusCancelled = -3

// waiter is a sleeping msgsnd (struct msg_sender) or msgrcv (struct
// msg_receiver). The lock of the queue it sleeps on protects every field.
type waiter struct {
	ilist.Entry[waiter]
	caller *ipcns.Caller
	// signalled, if set, reports that the sleeper has a signal pending:
	// a woken sender then fails with EINTR, as in do_msgsnd's loop.
	signalled func() bool

	// A sender's message, Commit and Done.
	mtype   int64
	data    []byte
	sCommit func() bool
	sDone   func(error)
	// holds: the sender still holds its message's text and charge
	// (ipcns.Resources), given back when the sleep ends without storing
	// the message.
	holds bool
	ns    *ipcns.Resources

	// A receiver's selector (r_mode, r_msgtype), r_maxsize, its msgsz,
	// Commit, Done and, once done, the message.
	mode    int
	typ     int64
	maxsize int64
	size    int64
	rCommit func(*Message) bool
	rDone   func(Message, error)
	discard bool
	thread  *ipcns.Pid
	got     Message

	// since is when it first went to sleep (introspect.go).
	since time.Time

	status int // statusPending, statusCancelled, statusUndelivered, 0 or an errno
}

// finish gives w its final status and reports it through its Done; w is
// already off its list. The caller holds the queue's lock.
func (w *waiter) finish(status int) {
	w.status = status
	w.release()
	if w.rDone != nil {
		w.rDone(w.got, w.err())
	} else {
		w.sDone(w.err())
	}
}

// release gives back a sender's message text and charge it still holds.
func (w *waiter) release() {
	if w.holds {
		w.ns.Uncharge(msgBase)
		w.ns.FreeText(w.data)
		w.data = nil
		w.holds = false
	}
}

// isSignalled reports whether the sleeper has a signal pending.
func (w *waiter) isSignalled() bool { return w.signalled != nil && w.signalled() }

// err converts a final status into Msgsnd's or Msgrcv's error.
func (w *waiter) err() error {
	switch w.status {
	case 0:
		return nil
	case statusUndelivered:
		return ErrNotDelivered
	}
	return unix.Errno(w.status)
}

// waitList is a FIFO of waiters (q_senders, q_receivers).
type waitList = ilist.List[waiter, *waiter]

// Wait is a msgsnd or msgrcv asleep in the engine, as StartSend or
// StartRecv returned it.
type Wait struct {
	q    *Queue
	w    *waiter
	list *waitList
}

// Cancel ends the sleep as a signal does (the sleeper leaves its list with
// nothing done) and reports true, unless the sleep has already ended — a
// waker completed it, the queue was removed — in which case Done has been
// or is being called and Cancel reports false.
func (wt *Wait) Cancel() bool {
	q := wt.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if wt.w.status != statusPending {
		return false
	}
	wt.list.Remove(wt.w)
	wt.w.status = statusCancelled
	wt.w.release()
	return true
}

// sleep queues w at the tail of list (ss_add, or the receivers' list) and
// returns its Wait. The caller holds q.mu.
func (q *Queue) sleep(w *waiter, list *waitList) *Wait {
	w.status = statusPending
	if w.since.IsZero() {
		w.since = time.Now()
	}
	list.PushBack(w)
	return &Wait{q: q, w: w, list: list}
}

// block waits for a sleep started with a Done that signals ended, or for
// ctx: the blocking form of the Start functions.
func block[T any](ctx context.Context, wt *Wait, ended chan T, cancelled T) T {
	select {
	case v := <-ended:
		return v
	case <-ctx.Done():
	}
	if wt.Cancel() {
		return cancelled
	}
	return <-ended
}
