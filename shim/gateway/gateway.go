// Package gateway serves trapped System V IPC calls: it decodes a seccomp
// notification, identifies the calling thread (Resolver), gives handlers
// safe access to the caller's memory, and delivers the answer. The
// engines plug in behind Handler.
//
// The TOCTOU rule: a notification's pid is a tid that can be reused as
// soon as the task dies (a SIGKILL does not wait for the supervisor).
// Everything learnt through the tid is bound to the task first (a pidfd,
// a /proc/<tid>/mem fd), and the notification is checked with ID_VALID
// after binding and before acting (Request.Valid). Answers to a task that
// left are detected by SEND failing with ENOENT.
package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
	"golang.org/x/sys/unix"
)

// Handler serves decoded calls. The engines plug in here.
type Handler interface {
	// Handle serves r. It runs on the listener's receive goroutine and
	// must not block: it answers at once (r.Reply) or hands a call that
	// may sleep to r.Block.
	Handle(r *Request)
	// Exit is called once when a process that made calls has exited
	// (its last thread): the place to apply SEM_UNDO.
	Exit(pid *ipcns.Pid)
}

// Request is one trapped call.
type Request struct {
	// Notif is the notification as received.
	Notif *seccompnotify.Notif
	// Sysno is the decoded call.
	Sysno Sysno
	// Task is the caller.
	Task *Task

	l       *seccompnotify.Listener
	g       *Gateway
	replied atomic.Bool
}

// Arg returns the i-th argument register.
func (r *Request) Arg(i int) uint64 { return r.Notif.Data.Args[i] }

// Valid checks that the notification is still pending (ID_VALID): the
// caller still waits, so everything bound to its tid is its. An error
// means the task left (a signal or death); do not act for it.
func (r *Request) Valid() error { return r.l.IDValid(r.Notif.ID) }

// Reply answers the call with val, or with err if it is not nil (a
// syscall.Errno; any other error is logged and answered with EIO). Only
// the first answer counts; it reports whether the answer was delivered.
func (r *Request) Reply(val int64, err error) bool {
	if !r.replied.CompareAndSwap(false, true) {
		return false
	}
	var errno unix.Errno
	if err != nil && !errors.As(err, &errno) {
		r.g.logf("gateway: %v from tid %d: %v", r.Sysno, r.Task.Tid, err)
		errno = unix.EIO
	}
	serr := r.l.Reply(r.Notif.ID, val, errno)
	if serr != nil && !seccompnotify.IsGone(serr) {
		r.g.logf("gateway: reply to tid %d: %v", r.Task.Tid, serr)
	}
	return serr == nil
}

// Replied reports whether an answer was sent (or attempted).
func (r *Request) Replied() bool { return r.replied.Load() }

// Block runs f on its own goroutine, so that a call that sleeps does not
// hold up the listener's other callers, and answers with its result
// unless f already answered (for example through Reply in an engine's
// commit callback). f's ctx is cancelled when the notification becomes
// invalid: the task was interrupted by a signal or died. The kernel gives
// no event for that, so the notification is polled with ID_VALID every
// Gateway.PollInterval while f runs.
func (r *Request) Block(f func(ctx context.Context) (int64, error)) {
	ctx, cancel := context.WithCancel(r.g.ctx)
	r.g.blocked.Add(1)
	go func() {
		defer r.g.blocked.Done()
		defer cancel()
		// The validity poll is a timer, not a goroutine: most calls that
		// may sleep do not, and finish before it first fires.
		var mu sync.Mutex // guards stopped and the timer's re-arming
		stopped := false
		var t *time.Timer
		mu.Lock()
		t = time.AfterFunc(r.g.PollInterval, func() {
			if r.Valid() != nil {
				cancel()
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !stopped {
				t.Reset(r.g.PollInterval)
			}
		})
		mu.Unlock()
		val, err := f(ctx)
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		if !r.Replied() {
			r.Reply(val, err)
		}
	}()
}

// Gateway serves listener fds with one Handler and one Resolver.
type Gateway struct {
	h   Handler
	res *Resolver
	// PollInterval is how often a blocked call's notification is checked
	// with ID_VALID (default 10ms): the delay before a signalled task's
	// waiter is cancelled in the engine.
	PollInterval time.Duration
	// SyncWakeUp asks for SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on each
	// listener (default true; ignored where the kernel lacks it).
	SyncWakeUp bool
	// Logf reports anomalies; nil discards them.
	Logf func(format string, args ...any)

	ctx     context.Context
	blocked sync.WaitGroup
}

// New returns a gateway serving h. ctx bounds the life of blocked calls.
func New(ctx context.Context, h Handler) (*Gateway, error) {
	g := &Gateway{h: h, PollInterval: 10 * time.Millisecond, SyncWakeUp: true, ctx: ctx}
	res, err := NewResolver(h.Exit)
	if err != nil {
		return nil, err
	}
	g.res = res
	return g, nil
}

// Resolver returns the gateway's resolver (for its options and tests).
func (g *Gateway) Resolver() *Resolver { return g.res }

func (g *Gateway) logf(format string, args ...any) {
	if g.Logf != nil {
		g.Logf(format, args...)
	}
}

// Serve serves l until its filter has no users left or ctx is cancelled;
// it returns like seccompnotify.Listener.Serve, and does not close l.
func (g *Gateway) Serve(ctx context.Context, l *seccompnotify.Listener) error {
	if g.SyncWakeUp {
		if err := l.SetSyncWakeUp(); err != nil {
			g.logf("gateway: %v", err)
		}
	}
	return l.Serve(ctx, func(n *seccompnotify.Notif) { g.dispatch(l, n) })
}

// Wait waits for the blocked calls to finish (after ctx's cancellation).
func (g *Gateway) Wait() { g.blocked.Wait() }

func (g *Gateway) dispatch(l *seccompnotify.Listener, n *seccompnotify.Notif) {
	sys, verdict := Decode(&n.Data)
	switch verdict {
	case Continue:
		_ = l.Continue(n.ID)
		return
	case Refuse:
		g.logf("gateway: refused syscall %d arch %#x from tid %d", n.Data.Nr, n.Data.Arch, n.Pid)
		_ = l.Reply(n.ID, 0, unix.ENOSYS)
		return
	}
	if n.Pid == 0 {
		// The task is not visible in the shim's pid namespace: it cannot
		// be identified.
		_ = l.Reply(n.ID, 0, unix.EPERM)
		return
	}
	t, err := g.res.Resolve(int(n.Pid))
	if err != nil {
		if !errors.Is(err, ErrTaskGone) {
			g.logf("gateway: identify tid %d: %v", n.Pid, err)
		}
		_ = l.Reply(n.ID, 0, unix.ESRCH)
		return
	}
	g.h.Handle(&Request{Notif: n, Sysno: sys, Task: t, l: l, g: g})
}
