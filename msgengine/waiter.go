package msgengine

import (
	"context"
	"sync"
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

// waiter is a sleeping msgsnd (struct msg_sender) or msgrcv (struct
// msg_receiver). The lock of the queue it sleeps on protects every field
// but wake.
type waiter struct {
	ilist.Entry[waiter]
	caller *ipcns.Caller
	ctx    context.Context

	// A sender's message and Commit.
	mtype   int64
	data    []byte
	sCommit func() bool

	// A receiver's selector (r_mode, r_msgtype), r_maxsize, its msgsz,
	// Commit and, once done, the message.
	mode    int
	typ     int64
	maxsize int64
	size    int64
	rCommit func(*Message) bool
	thread  *ipcns.Pid
	got     Message

	// since is when it first went to sleep (introspect.go).
	since time.Time

	status int           // statusPending, 0, statusUndelivered or an errno
	wake   chan struct{} // buffered; a send says status is final
}

var waiterPool = sync.Pool{New: func() any { return &waiter{wake: make(chan struct{}, 1)} }}

func newWaiter(ctx context.Context, c *ipcns.Caller) *waiter {
	w := waiterPool.Get().(*waiter)
	w.ctx, w.caller, w.status = ctx, c, statusPending
	return w
}

// release returns w to the pool; its wake channel is empty by then.
func (w *waiter) release() {
	wake := w.wake
	*w = waiter{wake: wake}
	waiterPool.Put(w)
}

// finish gives w its final status and wakes it; w is already unlinked.
func (w *waiter) finish(status int) {
	w.status = status
	w.wake <- struct{}{}
}

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

// sleep waits for a waker to finish w, which is on list, or for ctx to be
// cancelled (a signal: EINTR), and leaves the final status in w. The
// caller holds q.mu; sleep releases it.
func (q *Queue) sleep(w *waiter, list *waitList) {
	if w.since.IsZero() {
		w.since = time.Now()
	}
	q.mu.Unlock()
	select {
	case <-w.wake:
		return
	case <-w.ctx.Done():
	}
	q.mu.Lock()
	if w.status != statusPending {
		// A waker finished w first: its result stands.
		q.mu.Unlock()
		<-w.wake
		return
	}
	list.Remove(w)
	w.status = int(unix.EINTR)
	q.mu.Unlock()
}
