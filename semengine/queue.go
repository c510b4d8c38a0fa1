package semengine

import (
	"time"

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
	prev, next *waiter
	on         *queue // the list the waiter is on; nil once unlinked

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

// queue is a FIFO of waiters (a list_head of sem_queues).
type queue struct {
	head, tail *waiter
}

func (q *queue) empty() bool { return q.head == nil }

func (q *queue) pushBack(w *waiter) {
	w.on, w.prev, w.next = q, q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *queue) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.on, w.prev, w.next = nil, nil, nil
}

// spliceFront moves every waiter of o, in order, to the front of q
// (list_splice_init).
func (q *queue) spliceFront(o *queue) {
	if o.empty() {
		return
	}
	for w := o.head; w != nil; w = w.next {
		w.on = q
	}
	o.tail.next = q.head
	if q.head != nil {
		q.head.prev = o.tail
	} else {
		q.tail = o.tail
	}
	q.head = o.head
	o.head, o.tail = nil, nil
}
