package semengine

import (
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/ilist"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/undo"
)

// statusPending is a waiter's status while it sleeps: the kernel's
// queue.status == -EINTR.
const statusPending = -1

// statusUndelivered is the status of a waiter whose operation was done and
// then rolled back because its Commit failed.
const statusUndelivered = -2

// statusCancelled is the status of a waiter that Wait.Cancel took off its
// queue.
const statusCancelled = -3

// waiter is a sleeping semop (struct sem_queue). The lock of the queue it
// is on protects every field but wake; see the locking rules in doc.go.
type waiter struct {
	ilist.Entry[waiter]
	on *queue // the list the waiter is on; nil once unlinked

	sops     []Sembuf
	alter    bool
	blocking int // index in sops of the operation it waits on
	undo     *undo.Entry
	caller   *ipcns.Caller
	commit   func() bool
	done     func(error)
	timer    *time.Timer // semtimedop's timeout, if any
	since    time.Time

	status int // statusPending, statusCancelled, statusUndelivered, 0, or an errno
}

// finish gives w, already unlinked, its final status and reports it
// through done. The caller holds the lock w was queued under.
func (w *waiter) finish(status int) {
	w.status = status
	w.stopTimer()
	w.done(statusError(status))
}

func (w *waiter) stopTimer() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// queue is a FIFO of waiters (a list_head of sem_queues) that records in
// each waiter the queue holding it.
type queue struct {
	l ilist.List[waiter, *waiter]
}

func (q *queue) empty() bool { return q.l.Empty() }

// front returns the first waiter, or nil; w.Next() walks on.
func (q *queue) front() *waiter { return q.l.Front() }

func (q *queue) pushBack(w *waiter) {
	w.on = q
	q.l.PushBack(w)
}

func (q *queue) remove(w *waiter) {
	q.l.Remove(w)
	w.on = nil
}

// spliceFront moves every waiter of o, in order, to the front of q
// (list_splice_init).
func (q *queue) spliceFront(o *queue) {
	for w := o.front(); w != nil; w = w.Next() {
		w.on = q
	}
	q.l.SpliceFront(&o.l)
}
