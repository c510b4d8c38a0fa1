package gateway

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// turn is the right to read a listener's notifications: one token, held
// by one receiver at a time (gateway.go, receive).
//
// Receivers waiting for it sleep in futex(2), not on a Go channel: a
// receiver is a goroutine locked to its OS thread, and waking one through
// the Go scheduler hands the waker's P to the sleeper's thread and puts
// the waker's thread to sleep (runtime.startlockedm), several context
// switches per hand-off; a futex wakes the sleeping thread directly, as
// the kernel wakes a receiver blocked in RECV. (Receivers do not all wait
// in RECV instead: the kernel wakes every RECV waiter of a filter for
// each notification, recv_wait_event being non-exclusive.)
type turn struct {
	// word is 1 while the token is free, 0 while a receiver holds it.
	word atomic.Uint32
	// sleepers counts receivers in (or about to enter) FUTEX_WAIT: a
	// hand-off with none makes no system call.
	sleepers atomic.Int32
	// closed ends every wait (the listener is done).
	closed atomic.Bool
}

// take waits for the token; false if the turn was closed first.
func (t *turn) take() bool {
	for {
		if t.closed.Load() {
			return false
		}
		if t.word.CompareAndSwap(1, 0) {
			return true
		}
		t.sleepers.Add(1)
		// Sleeps only while word is still 0: a hand-off between the CAS
		// and here makes FUTEX_WAIT return at once (EAGAIN).
		if !t.closed.Load() {
			futex(&t.word, futexWaitPrivate, 0)
		}
		t.sleepers.Add(-1)
	}
}

// give hands the token on: a sleeping receiver, if any, is woken to take
// it; otherwise the next receiver to call take gets it.
func (t *turn) give() {
	t.word.Store(1)
	if t.sleepers.Load() > 0 {
		futex(&t.word, futexWakePrivate, 1)
	}
}

// close ends every take, now and later.
func (t *turn) close() {
	t.closed.Store(true)
	t.word.Store(1)
	futex(&t.word, futexWakePrivate, 1<<30)
}

// FUTEX_WAIT and FUTEX_WAKE with FUTEX_PRIVATE_FLAG (linux/futex.h; not
// in x/sys/unix).
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// futex is futex(2) on w with no timeout; errors (EAGAIN when *w changed,
// EINTR) send the caller round its loop again.
func futex(w *atomic.Uint32, op int, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), uintptr(op), uintptr(val), 0, 0, 0)
}
