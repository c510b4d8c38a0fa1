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
	// delivered is set once an answer was accepted by the kernel (for
	// Deliver: taken by the task); succeeded if that answer was not an
	// error.
	delivered, succeeded atomic.Bool

	// cached: Task came from the cache, alive and unchanged when this
	// notification was already pending, so the notification is its.
	cached bool

	// The fields below are used once the call is blocked (Block).
	cancel context.CancelFunc
	done   chan struct{} // closed when the blocked call has finished
	// gone is set when the notification is known to be gone (a signal
	// or the task's death), before cancel.
	gone atomic.Bool
	// stopped is set when the task was seen stopped after its
	// notification went: the kernel will restart the call on SIGCONT.
	stopped atomic.Bool

	obsStart int64 // observe.go
}

// Arg returns the i-th argument register.
func (r *Request) Arg(i int) uint64 { return r.Notif.Data.Args[i] }

// Valid checks that the notification is still pending (ID_VALID): the
// caller still waits, so everything bound to its tid is its. An error
// means the task left (a signal or death); do not act for it.
func (r *Request) Valid() error { return r.l.IDValid(r.Notif.ID) }

// Bound reports that the notification is known to be the Task's without
// an ID_VALID: the Task was cached and found alive and unchanged after the
// notification was received, so its tid could not have been reused. A
// handler whose effect is undone when the answer is not taken (Deliver)
// may then skip Valid.
func (r *Request) Bound() bool { return r.cached }

// Reply answers the call with val, or with err if it is not nil (a
// syscall.Errno; any other error is logged and answered with EIO). Only
// the first answer counts; it reports whether the kernel accepted the
// answer. An accepted answer can still be discarded by the kernel if a
// signal reaches the task at the same instant (the call is then
// restarted or fails with EINTR): Deliver with Gateway.ExactDelivery
// closes that window for answers of 0.
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
	r.g.observeReply(r, errno, serr)
	if serr != nil {
		if seccompnotify.IsGone(serr) {
			r.sendRefused()
		} else {
			r.g.logf("gateway: reply to tid %d: %v", r.Task.Tid, serr)
		}
	}
	if serr == nil {
		r.delivered.Store(true)
		r.succeeded.Store(errno == 0)
	}
	return serr == nil
}

// Deliver answers the call with the return value 0 and reports whether
// the kernel accepted the answer: when it returns false the task never
// saw it and the caller (an engine's Commit) must undo the call's effect,
// which the engines do exactly. Only the first answer counts.
//
// By default it is a plain SEND (Reply(0, nil)): exact except in the
// kernel's window where a SEND that returned 0 is discarded because a
// signal woke the task at that instant (Stats.Repeats measures it). With
// Gateway.ExactDelivery it uses seccompnotify.ReplyZeroConfirmed instead,
// which closes that window at a cost (see ExactDelivery).
func (r *Request) Deliver() bool {
	if !r.g.ExactDelivery {
		return r.Reply(0, nil)
	}
	if !r.replied.CompareAndSwap(false, true) {
		return false
	}
	src, err := r.Task.dupFD0()
	if err == nil {
		err = r.l.ReplyZeroConfirmed(r.Notif.ID, src)
		r.g.observeReply(r, 0, err) // observe.go
		unix.Close(src)
		switch {
		case err == nil:
			r.delivered.Store(true)
			r.succeeded.Store(true)
			return true
		case errors.Is(err, seccompnotify.ErrUnconfirmed):
			r.g.Stats.Unconfirmed.Add(1)
			r.delivered.Store(true)
			r.succeeded.Store(true)
			return true
		case seccompnotify.IsGone(err):
			r.g.Stats.Refused.Add(1)
			r.sendRefused()
			return false
		}
		r.g.logf("gateway: confirmed reply to tid %d: %v", r.Task.Tid, err)
	}
	// No fd 0 in the task (or the confirmed reply failed without
	// queueing anything): a plain reply, exact except in the window.
	r.g.Stats.Plain.Add(1)
	if err := r.l.Reply(r.Notif.ID, 0, 0); err != nil {
		return false
	}
	r.delivered.Store(true)
	r.succeeded.Store(true)
	return true
}

// sendRefused records that the kernel refused r's answer: the
// notification is gone. For a blocked call (a sleeper answered from a
// waker's Commit) that makes it an interrupted call whose restart is
// recognised; the task is probed for a stop, which decides how the
// restart is answered. The wait is not cancelled here: the engine is
// finishing it.
func (r *Request) sendRefused() {
	if r.done == nil || r.gone.Load() {
		return // not blocked, or already known gone (and probed)
	}
	if r.Task.isStopped() {
		r.stopped.Store(true)
	}
	r.gone.Store(true)
}

// Replied reports whether an answer was sent (or attempted).
func (r *Request) Replied() bool { return r.replied.Load() }

// Block runs f on its own goroutine, so that a call that sleeps does not
// hold up the listener's other callers, and answers with its result
// unless f already answered (for example through Deliver in an engine's
// commit callback). Call Block only for a call that, natively, would
// sleep now: if a signal interrupts it, the kernel restarts the trapped
// call (SA_RESTART, stop/continue) and the gateway answers the restarted
// call as the native call would have been answered (see Gateway.restart).
//
// f's ctx is cancelled when the notification is gone: at once when the
// same thread raises a new notification (a thread makes one call at a
// time), when the task's process exits, when a waiter count is queried
// (Request.Sweep), and otherwise within Gateway.PollInterval, by which
// the notification is polled with ID_VALID (the kernel gives no event).
func (r *Request) Block(f func(ctx context.Context) (int64, error)) {
	ctx, cancel := context.WithCancel(r.g.ctx)
	r.cancel = cancel
	r.done = make(chan struct{})
	t := r.Task
	t.callMu.Lock()
	prev := t.blocked
	t.blocked = r
	t.callMu.Unlock()
	if prev != nil {
		// Cannot happen: dispatch ends a thread's blocked call before
		// serving its next one.
		r.g.abandon(prev)
	}
	r.g.track(r, true)
	r.g.blocked.Add(1)
	go func() {
		defer r.g.blocked.Done()
		defer cancel()
		// The validity poll is a timer, not a goroutine: most blocked
		// calls are woken before it first fires.
		var mu sync.Mutex // guards stopped and the timer's re-arming
		stopped := false
		var tm *time.Timer
		mu.Lock()
		tm = time.AfterFunc(r.g.PollInterval, func() {
			if r.Valid() != nil {
				r.markGone(true)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !stopped {
				tm.Reset(r.g.PollInterval)
			}
		})
		mu.Unlock()
		val, err := f(ctx)
		mu.Lock()
		stopped = true
		tm.Stop()
		mu.Unlock()
		if !r.Replied() {
			r.Reply(val, err)
		}
		r.g.track(r, false)
		t.callMu.Lock()
		if t.blocked == r {
			t.blocked = nil
		}
		if r.gone.Load() && !r.delivered.Load() {
			r.g.Stats.Interrupted.Add(1)
			t.intr = &interruption{
				nr: r.Notif.Data.Nr, arch: r.Notif.Data.Arch, ip: r.Notif.Data.InstructionPointer,
				args: r.Notif.Data.Args, sysno: r.Sysno, at: time.Now(), stopped: r.stopped.Load(),
			}
		}
		t.callMu.Unlock()
		close(r.done)
	}()
}

// markGone records that r's notification is gone and cancels its wait.
// With probe, the task's state is read to learn whether it is stopped.
func (r *Request) markGone(probe bool) {
	if probe && r.Task.isStopped() {
		r.stopped.Store(true)
	}
	r.gone.Store(true)
	r.cancel()
}

// Sweep checks every blocked call of the gateway with ID_VALID and ends
// those whose notification is gone, waiting for them to leave the
// engines: a query of waiter counts (GETNCNT, GETZCNT) then sees what the
// kernel's would, since a native waiter leaves its queue the moment a
// signal interrupts it.
func (r *Request) Sweep() { r.g.sweep() }

// interruption is a blocked call whose notification went away unanswered
// (a signal, or a stop): the kernel will restart it with the same number,
// arguments and instruction pointer unless the task saw EINTR.
type interruption struct {
	nr      int32
	arch    uint32
	ip      uint64
	args    [6]uint64
	sysno   Sysno
	at      time.Time
	stopped bool
}

func (in *interruption) matches(d *seccompnotify.Data) bool {
	return in.nr == d.Nr && in.arch == d.Arch && in.ip == d.InstructionPointer && in.args == d.Args
}

// Stats counts the gateway's signal-related events.
type Stats struct {
	// Interrupted counts blocked calls whose notification went away
	// unanswered.
	Interrupted atomic.Int64
	// Restarts counts restarted calls recognised as the restart of an
	// interrupted blocked call and answered EINTR (as native semop).
	Restarts atomic.Int64
	// Resumed counts restarted calls recognised and served again
	// (native msgsnd/msgrcv after stop/continue).
	Resumed atomic.Int64
	// Refused counts exact deliveries the task did not take (a signal
	// raced the answer: the effect was undone). With a plain SEND each
	// would have been a reply that was either refused (ENOENT) or, in the
	// kernel's window, accepted and discarded.
	Refused atomic.Int64
	// Unconfirmed counts exact deliveries whose confirmation was lost to
	// a signal on the gateway's own thread.
	Unconfirmed atomic.Int64
	// Repeats counts calls identical to the same thread's previous call
	// (number, arguments, instruction pointer) when that one had been
	// answered with success. For a program that never repeats a
	// successful call (the torture test's), each is a kernel restart after an answer was accepted
	// and then discarded: with a plain SEND, a lost or doubled effect.
	Repeats atomic.Int64
	// Plain counts deliveries that fell back to a plain SEND (the task
	// had no fd 0).
	Plain atomic.Int64
}

// Gateway serves listener fds with one Handler and one Resolver.
type Gateway struct {
	h   Handler
	res *Resolver
	// PollInterval is how often a blocked call's notification is checked
	// with ID_VALID (default 10ms): the delay before a signalled task's
	// waiter is cancelled in the engine.
	PollInterval time.Duration
	// NSCallsTrapped says that the filter traps unshare and setns (as
	// ipcfilter's does), or refuses them: the thread's IPC namespace is
	// then cached and reread only after one of them, instead of on every
	// call. It is Serve's default; ServeListener takes it per listener.
	NSCallsTrapped bool
	// SyncWakeUp asks for SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on each
	// listener (default true; ignored where the kernel lacks it).
	SyncWakeUp bool
	// Logf reports anomalies; nil discards them.
	Logf func(format string, args ...any)

	// ExactDelivery makes Request.Deliver confirm that the task took
	// the answer (SECCOMP_IOCTL_NOTIF_ADDFD with SEND|SETFD replacing
	// the task's fd 0 with a duplicate of itself; see
	// seccompnotify.ReplyZeroConfirmed). Off by default: it costs 12-20
	// µs per successful semop or msgsnd (the supervisor waits for the
	// task to run), and it has side effects the task can see: POSIX
	// record locks the process holds on fd 0's file are released, and
	// FD_CLOEXEC on fd 0 is cleared. It only serves answers of 0 (semop,
	// msgsnd); msgrcv always uses a plain SEND. Set it before Serve.
	ExactDelivery bool
	// RestartWindow is how long after a blocked call was interrupted a
	// call with the same thread, number, arguments and instruction
	// pointer is taken for its restart (default 1s) when the task was
	// not seen stopped; after a stop the next call of the thread is
	// compared, however late.
	RestartWindow time.Duration
	// Stats counts signal-related events.
	Stats Stats

	ctx     context.Context
	blocked sync.WaitGroup

	// mu guards waiting.
	mu      sync.Mutex
	waiting map[*Request]struct{} // blocked calls

	obs Observer // observe.go
}

// New returns a gateway serving h. ctx bounds the life of blocked calls.
func New(ctx context.Context, h Handler) (*Gateway, error) {
	g := &Gateway{h: h, PollInterval: 10 * time.Millisecond, SyncWakeUp: true,
		RestartWindow: time.Second, ctx: ctx, waiting: make(map[*Request]struct{})}
	res, err := NewResolver(func(pid *ipcns.Pid) {
		// The process's blocked calls are gone with it: end them before
		// its SEM_UNDO adjustments are applied.
		g.mu.Lock()
		var mine []*Request
		for r := range g.waiting {
			if r.Task.Caller.Pid == pid {
				mine = append(mine, r)
			}
		}
		g.mu.Unlock()
		for _, r := range mine {
			g.abandon(r)
		}
		h.Exit(pid)
	})
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
	return g.ServeListener(ctx, l, g.NSCallsTrapped)
}

// ServeListener is Serve with NSCallsTrapped given for this listener: a
// shim serves containers whose seccomp profiles differ, and the IPC
// namespace of a thread may be cached only where no thread can change it
// unseen (see spec.Plan.NSFixed).
func (g *Gateway) ServeListener(ctx context.Context, l *seccompnotify.Listener, nsCallsTrapped bool) error {
	if g.SyncWakeUp {
		if err := l.SetSyncWakeUp(); err != nil {
			g.logf("gateway: %v", err)
		}
	}
	return l.Serve(ctx, func(n *seccompnotify.Notif) { g.dispatch(l, n, !nsCallsTrapped) })
}

// Wait waits for the blocked calls to finish (after ctx's cancellation).
func (g *Gateway) Wait() { g.blocked.Wait() }

// dispatch serves notification n of listener l; checkNS makes the caller's
// identification reread its IPC namespace.
func (g *Gateway) dispatch(l *seccompnotify.Listener, n *seccompnotify.Notif, checkNS bool) {
	sys, verdict := Decode(&n.Data)
	switch verdict {
	case Continue:
		if (sys == SysNSChange || sys == SysGroupsChange) && n.Pid != 0 {
			// The thread may move to another IPC namespace or change
			// its groups: identify it afresh at its next call, which it
			// makes after this one has run. CONTINUE is safe here: the
			// profile allows the call, and nothing is decided on its
			// arguments.
			g.res.Forget(int(n.Pid))
		}
		_ = l.Continue(n.ID)
		return
	case Refuse:
		g.logf("gateway: refused syscall %d arch %#x from tid %d", n.Data.Nr, n.Data.Arch, n.Pid)
		_ = l.Reply(n.ID, 0, unix.ENOSYS)
		return
	}
	// Exits the caller may already have seen take effect first.
	g.res.Reap()
	if n.Pid == 0 {
		// The task is not visible in the shim's pid namespace: it cannot
		// be identified.
		_ = l.Reply(n.ID, 0, unix.EPERM)
		return
	}
	t, hit, err := g.res.resolve(int(n.Pid), checkNS)
	if err != nil {
		if !errors.Is(err, ErrTaskGone) {
			g.logf("gateway: identify tid %d: %v", n.Pid, err)
		}
		_ = l.Reply(n.ID, 0, unix.ESRCH)
		return
	}
	r := &Request{Notif: n, Sysno: sys, Task: t, l: l, g: g, cached: hit}
	g.observeStart(r)
	if g.restart(r) {
		return
	}
	g.h.Handle(r)
}

// restart ends the thread's previous blocked call, whose notification is
// necessarily gone (a thread makes one system call at a time), and
// answers r if it is the kernel's restart of that interrupted call,
// reporting whether it did. Natively semop and semtimedop fail with EINTR
// whenever a signal interrupts their sleep (a handler with or without
// SA_RESTART, a stop), and msgsnd and msgrcv fail with EINTR when a
// handler ran but resume after a stop; under seccomp the kernel gives
// EINTR itself only for a handler without SA_RESTART, and restarts the
// call otherwise.
//
// Only calls that were blocked are considered: a call interrupted while
// it was being served (it would not have slept natively, e.g. preempted
// by the Go runtime's SIGURG) is served again, since natively it would
// not have failed.
func (g *Gateway) restart(r *Request) bool {
	t := r.Task
	t.callMu.Lock()
	prev := t.blocked
	t.callMu.Unlock()
	if prev != nil {
		g.abandon(prev)
	}
	t.callMu.Lock()
	in := t.intr
	t.intr = nil
	last := t.last
	t.last = r
	t.callMu.Unlock()
	if last != nil && last.succeeded.Load() && last.Sysno == r.Sysno && r.Notif.Data.Args == last.Notif.Data.Args &&
		r.Notif.Data.InstructionPointer == last.Notif.Data.InstructionPointer {
		g.Stats.Repeats.Add(1)
	}
	if in == nil || !in.matches(&r.Notif.Data) || (!in.stopped && time.Since(in.at) > g.RestartWindow) {
		return false
	}
	switch in.sysno {
	case SysSemop, SysSemtimedop:
	case SysMsgsnd, SysMsgrcv:
		if in.stopped {
			g.Stats.Resumed.Add(1)
			return false
		}
	default:
		return false
	}
	g.Stats.Restarts.Add(1)
	r.Reply(0, unix.EINTR)
	return true
}

// abandon ends blocked call r, whose notification is gone, and waits until
// it has left the engine.
func (g *Gateway) abandon(r *Request) {
	r.markGone(false)
	<-r.done
}

func (g *Gateway) track(r *Request, on bool) {
	g.mu.Lock()
	if on {
		g.waiting[r] = struct{}{}
	} else {
		delete(g.waiting, r)
	}
	g.mu.Unlock()
}

func (g *Gateway) sweep() {
	g.mu.Lock()
	all := make([]*Request, 0, len(g.waiting))
	for r := range g.waiting {
		all = append(all, r)
	}
	g.mu.Unlock()
	for _, r := range all {
		if r.Valid() != nil && !r.Replied() {
			r.markGone(true)
			<-r.done
		}
	}
}
