// Package gateway serves trapped System V IPC calls: it receives a
// seccomp notification, identifies the calling thread, gives handlers
// safe access to its memory, and answers — exactly as the kernel would
// have, also when signals, stops, exits and removals race with the call.
// The engines are found through an EngineTable. doc.go states the rules and why
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
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
	"golang.org/x/sys/unix"
)

// EngineTable finds the engines of the IPC namespace a call is made in,
// and applies process exits to them. The shim's task service keeps the
// table (containers come and go through it); the gateway's tests keep
// their own (internal/harness).
type EngineTable interface {
	// EnginesOf returns the engines of t's IPC namespace (t.IPCNS), or
	// the errno to answer t's call with when the namespace is not served.
	// It runs on the receiving goroutine, for every call: finding a
	// namespace served must be quick (the shim's takes no lock); making
	// one may wait for its first charge.
	EnginesOf(t *Task) (*Engines, error)
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
	// ByKernel counts msgrcv answers that a signal could race with,
	// delivered through a kernel queue that tells their fate (vehicle.go;
	// those found discarded are in Discarded too); NoVehicle those that
	// could not be, and were awaited; ByKernelLately those of ByKernel
	// sent that way only because their process was signalled within
	// signalMemory.
	ByKernel, NoVehicle, ByKernelLately atomic.Int64
	// Exits counts processes whose exit was applied.
	Exits atomic.Int64
	// SignalEventsLost and ExitEventsLost count the kernel's signal
	// events, and its exit and exec events, lost to a full ring
	// (tasktrace.Losses).
	SignalEventsLost, ExitEventsLost atomic.Int64
	// Resent counts restarts answered with the answer the kernel
	// discarded when it interrupted the call they restart (or that was
	// parked while a freeze was made).
	Resent atomic.Int64
	// Parked counts answers and commits that waited for a freeze's fence
	// to end (freeze.go); ServedAgain the calls whose commit was refused
	// then and that were served again at its end.
	Parked, ServedAgain atomic.Int64
	// Stale counts calls found gone before they were bound to their
	// thread: a newer call of the thread was taken up first (by another
	// receiver of the listener), or the thread exited.
	Stale atomic.Int64
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
	// Container is the id of the container whose processes call through
	// the listener (the shim's: runc's state.id), for the fence of a
	// freeze of that container (FreezingContainer); "" if unknown.
	Container string
}

// Gateway serves listener fds, each call with the engines of its
// caller's IPC namespace.
type Gateway struct {
	engines EngineTable
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
	// Receivers bounds the receivers of one listener (0 or 1: one
	// receiver serves each listener's calls in turn; more lets a
	// container's processes be served in parallel where CPUs are free,
	// at most one per CPU is useful). Set it before serving.
	Receivers int
	// Logf reports anomalies; nil discards them.
	Logf func(format string, args ...any)
	// Stats counts signal-related events.
	Stats Stats

	// buildMu serializes identifying one thread (by tid, sharded).
	buildMu [64]sync.Mutex

	// tmu guards the tables below.
	tmu     sync.Mutex
	tasks   map[int]*Task                  // by tid
	procs   map[int]*process               // by tgid
	pidns   map[uint64]*ipcns.PidNamespace // by nsfs inode
	rootNS  *ipcns.PidNamespace            // the shim's own pid namespace
	watched map[uint64]bool                // IPC namespaces the tracer reports
	// vns is the vehicle state of each IPC namespace that used one
	// (vehicle.go), dropped by Unwatch; vnsMu guards it (a leaf).
	vnsMu sync.Mutex
	vns   map[uint64]*vehicleNS
	// nsListeners are the listeners whose callers are in each IPC
	// namespace (drain.go).
	nsListeners map[uint64]map[*listener]bool

	// actMu serializes draining the ring with running the actions the
	// events call for (events.go).
	actMu sync.Mutex
	// evMu guards the ring's reading, the fields below and every Task's
	// intr field.
	evMu    sync.Mutex
	seq     uint64                // events applied, and drains that found signal events lost
	actions []func()              // queued by events, run by syncEvents
	intrs   map[int]*interruption // interruptions of threads not (yet) known, by tid
	// lostSeen is what the tracer had lost at the last drain, lostLogged
	// when a loss was last logged (events.go).
	lostSeen   tasktrace.Losses
	lostLogged time.Time
	// sigLostSeq is the event sequence number given to the last drain
	// that found signal events dropped whose thread group the kernel
	// could not keep (mayBeSignalled).
	sigLostSeq atomic.Uint64
	// lostTotal is lostSeen.Total(), for readers without evMu: events
	// are pending until the losses counted were made up for.
	lostTotal atomic.Uint64
	// sweepDue asks the next syncEvents for a sweep of every sleeper (a
	// lost exit).
	sweepDue atomic.Bool
	// lateDrains counts Quiesce's drains that passed drainLimit;
	// lateLogged is when one was last logged (drain.go).
	lateDrains, lateLogged atomic.Int64
	drained                chan struct{} // closed and replaced after each drain that applied events
	// seqNow is seq, for readers without evMu; queued counts the
	// actions queued and not yet run to completion.
	seqNow atomic.Uint64
	queued atomic.Int64
	// kick wakes runActions when an action is queued (capacity 1).
	kick chan struct{}

	// fenceMu protects fences, and is held for reading across each
	// plain SEND of an answer and each parking (sendUnfenced, keep,
	// parkIfFenced, commitWrite; never across commitWrite's write):
	// Freezing's write lock waits for the SENDs under way.
	// fences counts the freezes being made (freeze.go): fenceAll those
	// over every listener, fenceOf those over one container's; fencedNow
	// is fences > 0, for readers without the lock.
	fenceMu   sync.RWMutex
	fences    int
	fenceAll  int
	fenceOf   map[string]int
	fencedNow atomic.Bool
	// parkMu protects parked, the calls that wait for the fences' end,
	// among the holders of fenceMu's read lock (parkLocked); the fence's
	// end takes the list under the write lock.
	parkMu sync.Mutex
	parked []*Request

	wg  sync.WaitGroup
	obs Observer // observe.go
}

// New returns a gateway serving calls with the engines in table. It loads the kernel event programs
// (package tasktrace), which needs CAP_BPF and CAP_PERFMON (root) and a
// kernel with BTF: without them the gateway cannot answer signals and
// exits exactly, and New fails. ctx bounds the gateway's life.
func New(ctx context.Context, table EngineTable) (*Gateway, error) {
	ino, err := nsInode("/proc/self/ns/pid")
	if err != nil {
		return nil, err
	}
	root := ipcns.NewPidNamespace(nil, ino)
	g := &Gateway{engines: table, trReady: make(chan struct{}), ctx: ctx, SyncWakeUp: true,
		Defaults: ListenerOptions{NSFixed: true, IDsFixed: false},
		tasks:    map[int]*Task{}, procs: map[int]*process{}, pidns: map[uint64]*ipcns.PidNamespace{ino: root}, rootNS: root,
		watched: map[uint64]bool{}, vns: map[uint64]*vehicleNS{}, nsListeners: map[uint64]map[*listener]bool{}, intrs: map[int]*interruption{}, drained: make(chan struct{}),
		kick: make(chan struct{}, 1)}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.tr, g.trErr = tasktrace.New()
		if g.trErr != nil {
			g.trErr = fmt.Errorf("gateway: kernel task events: %w", g.trErr)
		}
		close(g.trReady)
		if g.trErr == nil {
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.runActions(ctx)
			}()
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

// TracerLoad says how the kernel's task events were set up (whether the
// kernel's BTF was parsed or its facts cached, how long it took), once
// Ready would return nil; ok is false before, or if they could not be.
func (g *Gateway) TracerLoad() (info tasktrace.LoadInfo, ok bool) {
	if !g.ready() {
		return info, false
	}
	return g.tr.LoadInfo(), true
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
	// received and dispatched count the notifications the receivers have
	// read and finished dispatching; lastID is the last one read. An
	// observer of the namespace waits for them to agree (drain.go).
	received, dispatched, lastID atomic.Uint64
	// ns is the IPC namespace its callers were last seen in.
	ns atomic.Uint64

	// turn is the right to read (RECV), held by one receiver at a time,
	// so notifications are counted in the order they are read. A
	// receiver that finds more calls waiting hands it on before it
	// dispatches (receive).
	turn turn
	// err is why serving ended (nil: the filter has no users left); set
	// once, before turn is closed.
	err     error
	errOnce sync.Once
	// receivers counts the receivers started.
	receivers atomic.Int32
	// lastTid is the thread of the last call read (turn holder only).
	lastTid uint32

	// orderMu protects inOrder and orderSeq, and is orderCond's lock.
	// inOrder lists the calls read while others may be in dispatch and
	// not yet handed to their handler, in the order read (see ordered).
	orderMu    sync.Mutex
	orderCond  sync.Cond
	inOrder    []orderedCall
	orderSeq   uint64
	orderWaits int
	// overlapped is set once the turn was first handed on: from then on
	// every call read is put in inOrder.
	overlapped bool // turn holder only
}

// orderedCall is a call read while receivers of its listener overlap:
// seq is its place in the order read (from 1), key the object it works
// on (objectKey).
type orderedCall struct {
	seq, key uint64
}

// maxReceivers bounds the receivers (each a goroutine on its own OS
// thread) of one listener where Gateway.Receivers does not. One: on the
// 2-vCPU machines this was measured on, a second receiver made two
// processes 1.5x slower per call and stress-ng --msg 2.5x slower (the
// hand-off's wake-ups cost more than the overlap gains when no CPU is
// free; docs/bench-gateway.md). Atomic: tests change it between runs.
var maxReceivers atomic.Int32

func init() { maxReceivers.Store(1) }

// handOffAlways makes every receiver hand the turn on after each read,
// as if calls always waited: tests use it to make receivers of one
// listener overlap as much as they can.
var handOffAlways atomic.Bool

// Serve serves l with the gateway's Defaults; see ServeListener.
func (g *Gateway) Serve(ctx context.Context, l *seccompnotify.Listener) error {
	return g.ServeListener(ctx, l, g.Defaults)
}

// ServeListener serves l until its filter has no users left (every task
// that had it has exited), then returns nil; it does not close l.
//
// Calls are read and served by receivers: goroutines locked to their OS
// threads, one of them blocked in SECCOMP_IOCTL_NOTIF_RECV at a time (the
// cheapest way for a Go supervisor to be woken: see
// docs/bench-gateway.md). A receiver that reads a call while others wait
// (several threads calling at once) hands the turn to read on to an idle
// receiver, starting one if none is idle (up to maxReceivers), and
// serves its call meanwhile: the processes of a container are served in
// parallel, not one after the other. The wait in RECV cannot be
// interrupted: a cancelled ctx ends serving at the next notification or
// when the filter's users are gone.
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
	ls.receivers.Store(1)
	ls.orderCond.L = &ls.orderMu
	if opts.IPCNS != 0 {
		g.addListener(ls, opts.IPCNS)
	}
	defer g.removeListener(ls)
	var wg sync.WaitGroup
	g.receive(ctx, ls, &wg, true)
	wg.Wait()
	return ls.err
}

// receive is one receiver of ls: it takes the turn, reads a call, hands
// the turn on if more calls wait, and dispatches the call; until the
// listener is done. It runs on its own OS thread (RECV blocks it).
func (g *Gateway) receive(ctx context.Context, ls *listener, wg *sync.WaitGroup, haveTurn bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	limit := g.receiverLimit()
	var n seccompnotify.Notif
	for {
		if !haveTurn && !ls.turn.take() {
			return
		}
		haveTurn = true
		if err := ls.l.Recv(&n); err != nil {
			if seccompnotify.IsGone(err) && !ls.l.Hungup() {
				// The notification went before it could be taken (a
				// signal, a death).
				continue
			}
			if seccompnotify.IsGone(err) {
				err = nil // the filter has no users left
			}
			ls.finish(err)
			return
		}
		ls.lastID.Store(n.ID)
		ls.received.Add(1)
		if ctx.Err() != nil {
			_ = ls.l.Reply(n.ID, 0, unix.ENOSYS)
			ls.dispatched.Add(1)
			ls.finish(ctx.Err())
			return
		}
		handOn := limit > 1 && ls.shouldHandOn(n.Pid)
		var oc uint64
		if handOn || ls.overlapped {
			// Put in inOrder before the turn is handed on, so that its
			// place is its place in the order read.
			ls.overlapped = true
			oc = ls.enter(&n)
		}
		if handOn {
			ls.turn.give()
			haveTurn = false
			g.startReceiver(ctx, ls, wg)
		}
		g.dispatch(ls, &n, oc)
		ls.leave(oc)
		ls.dispatched.Add(1)
	}
}

// shouldHandOn reports, after a read of a call from thread tid, whether
// the turn should be handed on: whether other calls may wait. A thread
// makes one call at a time, so while one thread calls alone nothing else
// can wait and nothing is checked (no cost on that path); otherwise a
// poll says whether a notification waits to be read.
func (ls *listener) shouldHandOn(tid uint32) bool {
	prev := ls.lastTid
	ls.lastTid = tid
	return handOffAlways.Load() || (tid != prev && ls.pendingRead())
}

// Calls of one listener served by overlapping receivers keep the order
// in which they were read (the order the kernel trapped them) wherever
// it can be seen: a call reaches its handler only after every call read
// before it that works on the same object did. A process that sees
// another asleep in the trap (/proc) and then acts on the object it
// waits for finds it queued there, as it would with one receiver, and
// as natively; calls on different objects run in parallel.
//
// objectKey names what a call works on: the set or queue of a semop,
// semtimedop, msgsnd or msgrcv (its first argument; i386 and ipc(2)
// calls are refused, so that is where the id is), or keyAll for every
// other call (the get and ctl calls, which can create, remove or list
// objects), ordered with everything.
func objectKey(n *seccompnotify.Notif) uint64 {
	sys, verdict := Decode(&n.Data)
	if verdict != Serve {
		return keyNone
	}
	id := uint64(uint32(n.Data.Args[0]))
	switch sys {
	case SysSemop, SysSemtimedop:
		return 1<<33 | id
	case SysMsgsnd, SysMsgrcv:
		return 2<<33 | id
	}
	return keyAll
}

// keyAll orders a call with every other; keyNone with none (a call the
// gateway does not serve).
const (
	keyAll  = ^uint64(0)
	keyNone = 0
)

// enter puts call n at the end of ls's inOrder and returns its place.
func (ls *listener) enter(n *seccompnotify.Notif) uint64 {
	key := objectKey(n)
	ls.orderMu.Lock()
	defer ls.orderMu.Unlock()
	ls.orderSeq++
	ls.inOrder = append(ls.inOrder, orderedCall{seq: ls.orderSeq, key: key})
	return ls.orderSeq
}

// ordered waits until every call read before call seq that works on its
// object has reached its handler. Those calls never wait for it (only
// for calls before them): the wait cannot close a cycle. It is short
// unless an earlier call's handler waits itself — for its IPC namespace
// to be made (shim/task: a namespace made inside a container, whose
// first charge waits for the pod's helper): later calls on that object
// of the listener then wait with it, as they would behind one receiver.
func (ls *listener) ordered(seq uint64) {
	if seq == 0 {
		return
	}
	ls.orderMu.Lock()
	defer ls.orderMu.Unlock()
	for ls.waitsLocked(seq) {
		ls.orderWaits++
		ls.orderCond.Wait()
		ls.orderWaits--
	}
}

// waitsLocked reports whether a call read before call seq works on the
// same object and has not reached its handler.
func (ls *listener) waitsLocked(seq uint64) bool {
	var key uint64
	for _, e := range ls.inOrder {
		if e.seq == seq {
			key = e.key
			break
		}
	}
	if key == keyNone {
		return false
	}
	for _, e := range ls.inOrder {
		if e.seq == seq {
			return false
		}
		if e.key != keyNone && (e.key == key || e.key == keyAll || key == keyAll) {
			return true
		}
	}
	return false
}

// leave marks call seq as having reached its handler (or ended before)
// and drops it from inOrder.
func (ls *listener) leave(seq uint64) {
	if seq == 0 {
		return
	}
	ls.orderMu.Lock()
	defer ls.orderMu.Unlock()
	for i, e := range ls.inOrder {
		if e.seq == seq {
			ls.inOrder = append(ls.inOrder[:i], ls.inOrder[i+1:]...)
			break
		}
	}
	if ls.orderWaits > 0 {
		ls.orderCond.Broadcast()
	}
}

// receiverLimit is the bound on a listener's receivers.
func (g *Gateway) receiverLimit() int {
	if g.Receivers > 0 {
		return g.Receivers
	}
	return int(maxReceivers.Load())
}

// startReceiver starts a receiver of ls if none is idle to take the turn
// just handed on and fewer than the limit run; otherwise the first
// receiver to finish its call takes it.
func (g *Gateway) startReceiver(ctx context.Context, ls *listener, wg *sync.WaitGroup) {
	limit := g.receiverLimit()
	if ls.turn.sleepers.Load() > 0 {
		return
	}
	for {
		n := ls.receivers.Load()
		if int(n) >= limit {
			return
		}
		if ls.receivers.CompareAndSwap(n, n+1) {
			break
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.receive(ctx, ls, wg, false)
	}()
}

// finish ends serving ls (err: why, nil when its filter has no users
// left): receivers waiting for the turn return.
func (ls *listener) finish(err error) {
	ls.errOnce.Do(func() {
		ls.err = err
		ls.turn.close()
	})
}

// addListener records that ls serves callers in IPC namespace ino, whose
// observers drain it.
func (g *Gateway) addListener(ls *listener, ino uint64) {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	ls.ns.Store(ino)
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

// dispatch serves notification n of listener ls; oc is its place in the
// order of calls read if receivers overlap (ordered), or 0.
func (g *Gateway) dispatch(ls *listener, n *seccompnotify.Notif, oc uint64) {
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
	if t.IPCNS != ls.ns.Load() {
		g.addListener(ls, t.IPCNS)
	}
	r := &Request{Notif: *n, Sysno: sys, Task: t, g: g, ls: ls, recvSeq: g.seqNow.Load(), cached: cached}
	r.serving.Lock()
	defer r.serving.Unlock()
	g.observeStart(r)
	if h := dispatchHook.Load(); h != nil {
		(*h)(r)
	}
	if g.restart(r) {
		return
	}
	ls.ordered(oc)
	e, err := g.engines.EnginesOf(t)
	if err != nil {
		r.Reply(0, err)
		return
	}
	call(e, r)
}

// call serves r with e, the engines of its caller's namespace. The
// handler answers at once (r.Reply, or an engine's Commit through
// r.commit) or leaves the call asleep in an engine (r.sleep), to be
// answered by whoever ends the sleep; it must not block.
func call(e *Engines, r *Request) {
	switch r.Sysno {
	case SysSemget:
		e.semget(r)
	case SysSemop:
		e.semop(r, false)
	case SysSemtimedop:
		e.semop(r, true)
	case SysSemctl:
		e.semctl(r)
	case SysMsgget:
		e.msgget(r)
	case SysMsgsnd:
		e.msgsnd(r)
	case SysMsgrcv:
		e.msgrcv(r)
	case SysMsgctl:
		e.msgctl(r)
	default:
		r.Reply(0, unix.ENOSYS)
	}
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
	// The previous call, or the interrupted one r may restart, may still
	// be served by another receiver, or answered by another goroutine
	// that has not yet recorded it: the task can be quicker. How it ended
	// decides how r is served.
	// Both were read before r (a notification newer than r taken up
	// makes r stale, and a stale r waits for nothing): r waits only for
	// older calls, which never wait for it (ordered).
	t.mu.Lock()
	prev, intrCall := t.call, (*Request)(nil)
	if t.intr != nil {
		intrCall = t.intr.origin
	}
	if t.staleLocked(r.ls, r.Notif.ID) {
		prev, intrCall = nil, nil
	}
	t.mu.Unlock()
	for _, c := range [...]*Request{prev, intrCall} {
		if c != nil {
			c.awaitServed()
		}
	}
	// evMu, because the kernel's reports update an interruption until the
	// thread's next call takes it (events.go).
	g.evMu.Lock()
	t.mu.Lock()
	if t.dead.Load() || t.staleLocked(r.ls, r.Notif.ID) {
		// The thread exited, or a newer call of it was taken up by
		// another receiver of the listener first: r is gone, and what
		// the kernel reported about it belongs to the newer one.
		t.mu.Unlock()
		g.evMu.Unlock()
		r.gone.Store(true)
		g.Stats.Stale.Add(1)
		return true
	}
	t.lastLs, t.lastID = r.ls, r.Notif.ID
	cancel := t.callOverLocked()
	taken, fromMap := t.intr, false
	if taken == nil {
		taken, fromMap = g.intrs[t.Tid], true
	}
	if taken != nil && taken.call == nil && taken.matches(r) && r.Valid() != nil {
		// The kernel reported an interruption of a call the gateway had
		// not bound to the thread, and r is gone: the interruption is
		// r's own (it came between RECV and now; it matches r, and r's
		// restart has r's registers), not that of a call r restarts. It
		// stays, on the Task, for the restart that follows. Decided under
		// the locks: another receiver may be serving that restart now.
		if fromMap {
			delete(g.intrs, t.Tid)
			t.intr = taken
		}
		t.mu.Unlock()
		g.evMu.Unlock()
		r.gone.Store(true)
		g.cancelVanished(cancel)
		return true
	}
	taken = t.pendingRestartLocked(taken, r)
	if taken != nil && taken.origin != nil {
		// An answer parked while a freeze was made, which the call r
		// restarts did not take (freeze.go): natively that call
		// completed with it. Taken here or by unpark, under evMu and
		// the Task's lock: by one of them.
		if a := taken.origin.kept.Swap(nil); a != nil && taken.resend == nil {
			taken.resend = a
		}
	}
	t.intr = nil
	if p := t.resend; p != nil && taken == nil {
		// An answer the thread's last call did not take, whose
		// interruption was never reported: the notification went with
		// no signal taken by the thread (a freeze, a stop begun by
		// another thread), and the kernel restarts the call: r, if it
		// matches (a thread makes no call in between). Before, such an
		// answer was dropped and the call run again (TestFreezeReplies).
		if in := (&interruption{call: p.call, origin: p.call, resend: &p.a}); in.matches(r) {
			taken = in
		}
	}
	t.resend = nil
	t.call = r
	t.mu.Unlock()
	delete(g.intrs, t.Tid)
	var in *interruption
	if taken != nil {
		c := *taken
		in = &c
	}
	g.evMu.Unlock()
	g.cancelVanished(cancel)
	if in == nil || !in.matches(r) {
		return false
	}
	if !in.restarts() {
		return false
	}
	if a := in.resend; a != nil {
		// The interrupted call did not take its answer (Request.deliver):
		// natively it completed with it.
		g.Stats.Resent.Add(1)
		var err error
		if a.errno != 0 {
			err = a.errno
		}
		r.Reply(a.val, err)
		return true
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

// pendingRestartLocked returns the interruption that r may restart: taken
// (the thread's last one) if r matches it, or the one kept in t.outer.
// An interruption the kernel restarts after a handler ran, followed by a
// call that does not match it, is kept for the restart to come: the
// thread makes no call between an interruption and its restart except
// from the handler (which may call semop, msgsnd, ...), and natively that
// call does not change how the interrupted one ends. t.mu and evMu are
// held.
func (t *Task) pendingRestartLocked(taken *interruption, r *Request) *interruption {
	if taken != nil && taken.matches(r) {
		return taken
	}
	if taken != nil && taken.evented && taken.handlerRan && taken.restarts() {
		// r is the handler's: the interrupted call restarts when it
		// returns (a handler left through siglongjmp never returns:
		// doc.go, "What is not exact").
		t.outer = taken
		return nil
	}
	if o := t.outer; o != nil && o.matches(r) {
		t.outer = nil
		return o
	}
	return taken
}

// cancelVanished cancels the sleep of a call found vanished, if any.
func (g *Gateway) cancelVanished(w canceler) {
	if w != nil {
		g.Stats.Interrupted.Add(1)
		w.Cancel()
	}
}
