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
	since    time.Time

	status int           // statusPending, 0, or an errno
	wake   chan struct{} // buffered; a send tells the sleeper status changed
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
