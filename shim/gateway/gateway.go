// Package gateway serves trapped System V IPC calls: it receives a
// seccomp notification, identifies the calling thread, gives handlers
// safe access to its memory, and answers — exactly as the kernel would
// have, also when signals, stops, exits and removals race with the call.
// The engines plug in behind Handler. doc.go states the rules and why
// each answer is exact; README-level overview: a receiver per listener
// (this file), the caller's identity (task.go), what the kernel reports
// about signals and exits (events.go, package tasktrace), answering
// (request.go), and the handlers (sem.go, msg.go).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
	"golang.org/x/sys/unix"
)

// Handler serves decoded calls. The engines plug in here.
type Handler interface {
	// Handle serves r, on the listener's receiving goroutine: it must not
	// block. It answers at once (r.Reply, or an engine's Commit through
	// r.commit) or leaves the call asleep in an engine (r.sleep), to be
	// answered by whoever ends the sleep.
	Handle(r *Request)
	// Exit is called once when a process that made calls has exited
	// (its last thread began do_exit): the place to apply SEM_UNDO. It is
	// called before any later call is served.
	Exit(pid *ipcns.Pid)
}

// Stats counts the gateway's signal- and exit-related events.
type Stats struct {
	// Interrupted counts sleeping calls the kernel interrupted (a signal,
	// a stop, the task's death).
	Interrupted atomic.Int64
	// Restarts counts restarted calls answered EINTR, as the native call
	// would have failed (semop after any signal; msgsnd/msgrcv after a
	// handler).
	Restarts atomic.Int64
	// Resumed counts restarted msgsnd/msgrcv served again (natively they
	// resume after a stop).
	Resumed atomic.Int64
	// Confirmed counts answers delivered through ADDFD|SEND because a
	// signal could race with them; Refused those of them the task did not
	// take; Unconfirmed those whose confirmation a signal on the shim's
	// own thread cut short.
	Confirmed, Refused, Unconfirmed atomic.Int64
	// Awaited counts answers whose fate was learnt from the kernel's
	// report of the task's next signal; Discarded those found discarded
	// (and undone); Unsettled those for which no report came in time
	// (taken as delivered).
	Awaited, Discarded, Unsettled atomic.Int64
	// Exits counts processes whose exit was applied.
	Exits atomic.Int64
	// EventsLost is the number of kernel events lost to a full ring.
	EventsLost atomic.Int64
}

// ListenerOptions says what the gateway may assume of the tasks of one
// listener (one container process tree), from its seccomp profile.
type ListenerOptions struct {
	// IPCNS is the inode of the container's IPC namespace, watched from
	// the start (0: learnt from the first caller).
	IPCNS uint64
	// NSFixed: no thread can change its IPC namespace unseen (unshare and
	// setns are trapped or refused): a thread's namespace is cached.
	NSFixed bool
	// IDsFixed: no thread can change its ids unseen (the setuid family is
	// trapped or refused): a thread's credentials are cached. Otherwise
	// each call compares them with a pidfd's.
	IDsFixed bool
}

// Gateway serves listener fds with one Handler.
type Gateway struct {
	h Handler
	// tr is set, or trErr, before trReady is closed: loading the kernel's
	// BTF and the programs takes ~150-200 ms of CPU, which New does not
	// make a container's start wait for (Ready).
	tr      *tasktrace.Tracer
	trErr   error
	trReady chan struct{}
	ctx     context.Context

	// SyncWakeUp asks for SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on each
	// listener (default true; ignored where the kernel lacks it).
	SyncWakeUp bool
	// Defaults are the options of listeners served with Serve.
	Defaults ListenerOptions
	// Logf reports anomalies; nil discards them.
	Logf func(format string, args ...any)
	// Stats counts signal-related events.
	Stats Stats

	// tmu guards the tables below.
	tmu     sync.Mutex
	tasks   map[int]*Task                  // by tid
	procs   map[int]*process               // by tgid
	pidns   map[uint64]*ipcns.PidNamespace // by nsfs inode
	rootNS  *ipcns.PidNamespace            // the shim's own pid namespace
	watched map[uint64]bool                // IPC namespaces the tracer reports
	// nsListeners are the listeners whose callers are in each IPC
	// namespace (drain.go).
	nsListeners map[uint64]map[*listener]bool

	// actMu serializes draining the ring with running the actions the
	// events call for (events.go).
	actMu sync.Mutex
	// evMu guards the ring's reading, the fields below and every Task's
	// intr field.
	evMu     sync.Mutex
	seq      uint64                // events applied
	actions  []func()              // queued by events, run by syncEvents
	intrs    map[int]*interruption // interruptions of threads not (yet) known, by tid
	lostSeen uint64
	drained  chan struct{} // closed and replaced after each drain that applied events
	// seqNow is seq, for readers without evMu; queued counts the
	// actions queued and not yet run to completion.
	seqNow atomic.Uint64
	queued atomic.Int64

	wg  sync.WaitGroup
	obs Observer // observe.go
}

// New returns a gateway serving h. It loads the kernel event programs
// (package tasktrace), which needs CAP_BPF and CAP_PERFMON (root) and a
// kernel with BTF: without them the gateway cannot answer signals and
// exits exactly, and New fails. ctx bounds the gateway's life.
func New(ctx context.Context, h Handler) (*Gateway, error) {
	ino, err := nsInode("/proc/self/ns/pid")
	if err != nil {
		return nil, err
	}
	root := ipcns.NewPidNamespace(nil, ino)
	g := &Gateway{h: h, trReady: make(chan struct{}), ctx: ctx, SyncWakeUp: true,
		Defaults: ListenerOptions{NSFixed: true, IDsFixed: false},
		tasks:    map[int]*Task{}, procs: map[int]*process{}, pidns: map[uint64]*ipcns.PidNamespace{ino: root}, rootNS: root,
		watched: map[uint64]bool{}, nsListeners: map[uint64]map[*listener]bool{}, intrs: map[int]*interruption{}, drained: make(chan struct{})}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.tr, g.trErr = tasktrace.New()
		if g.trErr != nil {
			g.trErr = fmt.Errorf("gateway: kernel task events: %w", g.trErr)
		}
		close(g.trReady)
		if g.trErr == nil {
			g.eventLoop(ctx)
		}
	}()
	context.AfterFunc(ctx, func() {
		g.wg.Wait()
		if g.tr != nil {
			g.tr.Close()
		}
	})
	return g, nil
}

// Ready waits until the kernel's task events are followed (New starts
// that in the background) and reports whether they could be. Nothing is
// served before: run no code of a container before Ready returns nil
// (the shim waits in Start), or a signal it takes before could be missed.
func (g *Gateway) Ready(ctx context.Context) error {
	select {
	case <-g.trReady:
		return g.trErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ready reports whether the tracer is loaded (see Ready).
func (g *Gateway) ready() bool {
	select {
	case <-g.trReady:
		return g.trErr == nil
	default:
		return false
	}
}

func (g *Gateway) logf(format string, args ...any) {
	if g.Logf != nil {
		g.Logf(format, args...)
	}
}

// SyncEvents applies everything the kernel has reported so far (exits,
// signals) before it returns: call it before answering a host-side query,
// so that it sees what the kernel's IPC would show.
func (g *Gateway) SyncEvents() {
	if g.ready() {
		g.syncEvents()
	}
}

// listener is a listener fd being served, with its options.
type listener struct {
	l    *seccompnotify.Listener
	opts ListenerOptions
	// received and dispatched count the notifications the receiver has
	// read and finished dispatching; lastID is the last one read. An
	// observer of the namespace waits for them to agree (drain.go).
	received, dispatched, lastID atomic.Uint64
	// ns is the IPC namespace its callers were last seen in (receiver
	// only).
	ns uint64
}

// Serve serves l with the gateway's Defaults; see ServeListener.
func (g *Gateway) Serve(ctx context.Context, l *seccompnotify.Listener) error {
	return g.ServeListener(ctx, l, g.Defaults)
}

// ServeListener serves l until its filter has no users left (every task
// that had it has exited), then returns nil; it does not close l. Calls
// are received and served on one goroutine locked to its OS thread,
// blocked in SECCOMP_IOCTL_NOTIF_RECV between calls (the cheapest way for
// a Go supervisor to be woken: see docs/bench-gateway.md). The wait in
// RECV cannot be interrupted: a cancelled ctx ends the loop at the next
// notification or when the filter's users are gone.
func (g *Gateway) ServeListener(ctx context.Context, l *seccompnotify.Listener, opts ListenerOptions) error {
	if err := g.Ready(ctx); err != nil {
		return err
	}
	if opts.IPCNS != 0 {
		if err := g.watch(opts.IPCNS); err != nil {
			return err
		}
	}
	if g.SyncWakeUp {
		if err := l.SetSyncWakeUp(); err != nil {
			g.logf("gateway: %v", err)
		}
	}
	ls := &listener{l: l, opts: opts}
	if opts.IPCNS != 0 {
		g.addListener(ls, opts.IPCNS)
	}
	defer g.removeListener(ls)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var n seccompnotify.Notif
	for {
		if err := l.Recv(&n); err != nil {
			switch {
			case seccompnotify.IsGone(err):
				// The notification went before it could be taken (a
				// signal, a death), or the filter has no users left.
				if l.Hungup() {
					return nil
				}
				continue
			case errors.Is(err, seccompnotify.ErrClosed):
				return err
			}
			return err
		}
		ls.lastID.Store(n.ID)
		ls.received.Add(1)
		if ctx.Err() != nil {
			_ = l.Reply(n.ID, 0, unix.ENOSYS)
			ls.dispatched.Add(1)
			return ctx.Err()
		}
		g.dispatch(ls, &n)
		ls.dispatched.Add(1)
	}
}

// addListener records that ls serves callers in IPC namespace ino, whose
// observers drain it.
func (g *Gateway) addListener(ls *listener, ino uint64) {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	ls.ns = ino
	m := g.nsListeners[ino]
	if m == nil {
		m = map[*listener]bool{}
		g.nsListeners[ino] = m
	}
	m[ls] = true
}

func (g *Gateway) removeListener(ls *listener) {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	for ino, m := range g.nsListeners {
		delete(m, ls)
		if len(m) == 0 {
			delete(g.nsListeners, ino)
		}
	}
}

// dispatch serves notification n of listener ls.
func (g *Gateway) dispatch(ls *listener, n *seccompnotify.Notif) {
	sys, verdict := Decode(&n.Data)
	switch verdict {
	case Continue:
		if sys.changesIdentity() && n.Pid != 0 {
			// The thread may move to another IPC namespace or change
			// its ids or groups: identify it afresh at its next call,
			// which it makes after this one has run. CONTINUE is safe
			// here: the profile allows the call, and nothing is decided
			// on its arguments.
			g.Forget(int(n.Pid))
		}
		_ = ls.l.Continue(n.ID)
		return
	case Refuse:
		g.logf("gateway: refused syscall %d arch %#x from tid %d", n.Data.Nr, n.Data.Arch, n.Pid)
		_ = ls.l.Reply(n.ID, 0, unix.ENOSYS)
		return
	}
	// Exits and signals the caller may already have seen take effect
	// first.
	g.syncEvents()
	if n.Pid == 0 {
		// The task is not visible in the shim's pid namespace: it cannot
		// be identified.
		_ = ls.l.Reply(n.ID, 0, unix.EPERM)
		return
	}
	cached := g.lookup(int(n.Pid)) != nil
	t, err := g.resolve(ls, int(n.Pid), n.ID)
	if err != nil {
		if !errors.Is(err, ErrTaskGone) {
			g.logf("gateway: identify tid %d: %v", n.Pid, err)
		}
		_ = ls.l.Reply(n.ID, 0, unix.ESRCH)
		return
	}
	if t.IPCNS != ls.ns {
		g.addListener(ls, t.IPCNS)
	}
	r := &Request{Notif: *n, Sysno: sys, Task: t, g: g, ls: ls, recvSeq: g.seqNow.Load(), cached: cached}
	g.observeStart(r)
	if h := dispatchHook.Load(); h != nil {
		(*h)(r)
	}
	if g.restart(r) {
		return
	}
	g.h.Handle(r)
}

// dispatchHook, if set, runs in the receiver after a call was identified
// and before it is bound to its thread: tests use it to put a signal in
// that window.
var dispatchHook atomic.Pointer[func(*Request)]

// restart makes r the thread's call and, if it is the kernel's restart
// of the thread's interrupted call, answers it as the native call would
// have ended (reporting true), or marks it r.restarted. See doc.go,
// "Signals".
func (g *Gateway) restart(r *Request) bool {
	t := r.Task
	// The previous call may have been answered by another goroutine
	// that has not yet recorded it: the task can be quicker.
	t.mu.Lock()
	prev := t.call
	t.mu.Unlock()
	if prev != nil {
		prev.settle()
	}
	// evMu, because the kernel's reports update an interruption until the
	// thread's next call takes it (events.go).
	g.evMu.Lock()
	t.mu.Lock()
	var cancel canceler
	if c := t.call; c != nil {
		// A thread makes one call at a time: its previous one is over.
		// Unanswered, it vanished with no signal taken by this thread (a
		// stop begun by another thread, a freeze, a wakeup for a signal
		// another thread took): the kernel restarts it.
		t.call = nil
		if !c.answered.Load() && !c.gone.Swap(true) {
			cancel = c.wait
			if t.intr == nil {
				t.intr = &interruption{call: c, slept: c.wait != nil}
			}
		}
	}
	taken := t.intr
	t.intr = nil
	t.call = r
	t.mu.Unlock()
	if taken == nil {
		taken = g.intrs[t.Tid]
	}
	delete(g.intrs, t.Tid)
	var in *interruption
	if taken != nil {
		c := *taken
		in = &c
	}
	g.evMu.Unlock()
	if cancel != nil {
		g.Stats.Interrupted.Add(1)
		cancel.Cancel()
	}
	if in == nil || !in.matches(r) {
		return false
	}
	if in.call == nil && r.Valid() != nil {
		// The kernel reported an interruption of a call the gateway had
		// not bound to the thread yet, and r is gone: the interruption is
		// r's own (it came between RECV and now; it would match r, its
		// restart has r's registers), not that of a call r restarts. It
		// stays for the restart, which follows.
		g.keepInterruption(r, taken)
		return true
	}
	if !in.restarts() {
		return false
	}
	switch r.Sysno {
	case SysSemop, SysSemtimedop:
		// Natively semop fails with EINTR whenever a signal or a stop
		// ends its sleep.
	case SysMsgsnd, SysMsgrcv:
		if !in.handlerRan {
			// Natively they resume after a stop (-ERESTARTNOHAND).
			g.Stats.Resumed.Add(1)
			return false
		}
	default:
		return false
	}
	if !in.slept {
		// The gateway never saw the call asleep: natively it slept (and
		// fails with EINTR) only if it could not proceed.
		r.restarted = true
		return false
	}
	g.Stats.Restarts.Add(1)
	r.Reply(0, unix.EINTR)
	return true
}

// keepInterruption undoes restart's binding of r, a call found gone, to
// its thread, and gives back the interruption restart took: it is r's,
// and the thread's next call is r's restart. A later report about the
// thread (applied meanwhile) wins.
func (g *Gateway) keepInterruption(r *Request, in *interruption) {
	t := r.Task
	r.gone.Store(true)
	g.evMu.Lock()
	t.mu.Lock()
	if t.call == r {
		t.call = nil
	}
	if t.intr == nil {
		t.intr = in
	}
	t.mu.Unlock()
	g.evMu.Unlock()
}

// Null answers every call with 0 at once, after identifying the caller:
// the baseline for benchmarks and the gateway's own tests.
type Null struct{}

// Handle answers 0.
func (Null) Handle(r *Request) { r.Reply(0, nil) }

// Exit does nothing.
func (Null) Exit(*ipcns.Pid) {}
