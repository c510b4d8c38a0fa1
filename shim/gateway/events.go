package gateway

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/tasktrace"
)

// This file applies what the kernel reports about the watched tasks
// (package tasktrace) to the gateway's tables: a thread's interrupted
// call, a thread's exit, a process's exit, an exec. See doc.go for why
// each answer that depends on them is exact.
//
// Locks: evMu serializes reading the ring and applying events to Tasks;
// it is never held while calling into an engine, so a goroutine holding
// an engine lock (an answer being committed) may take it. What an event
// makes the engines do (cancel a sleeper, apply SEM_UNDO) is queued as an
// action and run by syncEvents, under actMu and no other lock. Order:
// actMu, then evMu; actMu, then engine locks; engine locks, then evMu.
//
// Every queued action runs without waiting for another call: a drain
// that cannot run them (syncEventsLocked, await: an engine lock is held)
// leaves them queued and empties the ring, so the event loop, woken by
// the ring, finds nothing pending and sleeps again. queue therefore
// kicks runActions, which runs them as soon as the locks allow. (Without
// it a killed process's SEM_UNDO, and the wakeups it makes, waited for
// the next call the shim served: TestQueuedActionsRun.)
//
// Events the kernel dropped (a full ring) are made up for by lostLocked.
// The sweep it asks for after a dropped exit runs in syncEvents once
// actMu is released: a sweep settles answers in flight, holding no lock.

// interruption records a trapped call of a thread that the kernel
// interrupted: the thread's next notification may be its restart. Its
// fields are guarded by evMu once it is published (Task.intr or intrs):
// reports keep updating it until the thread's next call takes it.
type interruption struct {
	// nr, ip and the argument registers of the interrupted call, as the
	// thread's registers held them.
	nr   int64
	ip   uint64
	regs tasktrace.Regs
	// call is the interrupted Request if the gateway had received it, and
	// slept whether it was asleep in an engine then (natively: asleep in
	// the call).
	call  *Request
	slept bool
	// origin is the Request whose restart this is: call, or the call an
	// earlier interruption reported, when this one ended its restart
	// before the gateway read it. Its outcome decides how the restart is
	// served (Gateway.restart waits for it).
	origin *Request
	// evented: the kernel reported the interruption (a signal the thread
	// took); without it the call vanished with no signal taken by the
	// thread (a group stop begun by another thread, a freezer, a wakeup
	// for a signal another thread took).
	evented bool
	// The first handler the thread ran after the interruption decides
	// what the kernel does (handle_signal): without SA_RESTART the call
	// fails with EINTR, with it the call restarts; with no handler at all
	// (a stop, a freeze) it restarts. decided is set once a handler
	// was seen.
	decided, firstHandler, firstRestart bool
	// handlerRan: any handler ran before the restart (msgsnd and msgrcv
	// then fail with EINTR natively, -ERESTARTNOHAND).
	handlerRan bool
	// resend is the answer the interrupted call was given and did not
	// take, its effects done (Request.deliver): natively the call
	// completed, so its restart gets this answer.
	resend *answer
}

// sameCall reports whether regs describe the interrupted call.
func (in *interruption) sameCall(regs *tasktrace.Regs) bool {
	return int64(regs.OrigAx) == in.nr && regs.IP == in.ip && regs.Args(false) == in.regs.Args(false) &&
		regs.Args(true) == in.regs.Args(true)
}

// restarts reports whether the kernel restarts the interrupted call.
func (in *interruption) restarts() bool { return !in.firstHandler || in.firstRestart }

// matches reports whether notification r is the restart of the
// interrupted call: same number, arguments and instruction pointer.
func (in *interruption) matches(r *Request) bool {
	d := &r.Notif.Data
	if in.call != nil {
		c := &in.call.Notif.Data
		return c.Nr == d.Nr && c.Arch == d.Arch && c.InstructionPointer == d.InstructionPointer && c.Args == d.Args
	}
	return int64(d.Nr) == in.nr && d.InstructionPointer == in.ip && in.regs.Args(d.Arch == archI386) == d.Args
}

// syncEvents applies every event recorded so far and runs the actions
// they call for, before it returns. Calling it before serving a call, or
// answering a host-side query, gives the kernel's order: an exit, a
// signal taken, happened before anything that could observe it.
func (g *Gateway) syncEvents() {
	if !g.tr.Behind(g.lostTotal.Load()) && g.queued.Load() == 0 {
		return
	}
	g.applyEvents()
	// A sweep settles answers in flight: not under actMu.
	if g.sweepDue.Swap(false) {
		g.sweep(0, true)
		g.reapLost()
	}
}

// applyEvents drains the ring and runs the actions queued so far.
func (g *Gateway) applyEvents() {
	g.actMu.Lock()
	defer g.actMu.Unlock()
	g.evMu.Lock()
	g.drainLocked()
	acts := g.actions
	g.actions = nil
	// The kick for what was queued so far is spent: these run here.
	select {
	case <-g.kick:
	default:
	}
	g.evMu.Unlock()
	for _, a := range acts {
		a()
	}
	// Only now: a caller that finds nothing pending must find the
	// actions done, not merely taken by another syncEvents (an exit's
	// SEM_UNDO seen undone by the parent's next call otherwise).
	g.queued.Add(-int64(len(acts)))
}

// syncEventsLocked applies every event recorded so far without running
// the actions they call for (they wait for the next syncEvents): for a
// caller that holds an engine lock.
func (g *Gateway) syncEventsLocked() {
	if !g.tr.Behind(g.lostTotal.Load()) {
		return
	}
	g.evMu.Lock()
	g.drainLocked()
	g.evMu.Unlock()
}

func (g *Gateway) drainLocked() {
	if g.tr.Drain(g.apply) > 0 {
		close(g.drained)
		g.drained = make(chan struct{})
	}
	if lost := g.tr.Lost(); lost != g.lostSeen {
		// Taken after Lost was read: a loss counted after the take is
		// taken at a later drain.
		var tgids []int
		var err error
		if lost.Signals != g.lostSeen.Signals {
			err = g.tr.TakeLostSignals(func(tgid int) { tgids = append(tgids, tgid) })
		}
		g.lostLocked(lost, tgids, err)
	}
}

// lostLocked makes up for events the kernel dropped (a full ring), and
// logs the loss at most once a second with the counts so far: a
// container that signals itself without pause drops events at every
// drain, and must not flood the shim's log. evMu is held.
//
// A dropped signal event is taken as a signal queued, at a sequence
// number of its own and no known time (so before any SEND it may have
// raced with: signalQueuedBefore), for the thread group it was about (or
// for every process, when the kernel could not keep which:
// Losses.Unplaced): until that process takes a signal, its answers go
// the raced way and its sleepers are probed by every sweep. A dropped exit or exec (only when
// exits fill the ring's last quarter, tasktrace.lifecycleRoom) is made up
// for by the sweep it asks for: every sleeper is probed, a dead thread's
// call taken off its queue, and the exits /proc shows are applied,
// SEM_UNDO included (reapLost).
//
// tgids are the thread groups whose signal events were dropped, as taken
// from the tracer (takeErr: if that failed).
func (g *Gateway) lostLocked(lost tasktrace.Losses, tgids []int, takeErr error) {
	seen := g.lostSeen
	g.lostSeen = lost
	if lost.Signals != seen.Signals {
		g.seq++
		g.seqNow.Store(g.seq)
		for _, tgid := range tgids {
			g.signalProcess(tgid).recordSignalLocked(g.seq, 0)
		}
		if takeErr != nil || lost.Unplaced != seen.Unplaced {
			if takeErr != nil {
				g.logf("gateway: %v", takeErr)
			}
			g.sigLostSeq.Store(g.seq)
		}
	}
	if lost.Lifecycle != seen.Lifecycle && !g.sweepDue.Swap(true) {
		g.queue(func() {}) // a syncEvents runs and sweeps
	}
	g.lostTotal.Store(lost.Total())
	g.Stats.SignalEventsLost.Store(int64(lost.Signals))
	g.Stats.ExitEventsLost.Store(int64(lost.Lifecycle))
	if time.Since(g.lostLogged) < time.Second {
		return
	}
	g.lostLogged = time.Now()
	g.logf("gateway: the kernel dropped task events (ring full): %d signal events so far (an interrupted call may be answered inexactly), %d exit and exec events (a process's exit and SEM_UNDO may have been missed)",
		lost.Signals, lost.Lifecycle)
}

// queue adds an action for the next syncEvents, and makes sure there is
// one. evMu is held.
func (g *Gateway) queue(a func()) {
	g.actions = append(g.actions, a)
	g.queued.Add(1)
	select {
	case g.kick <- struct{}{}:
	default: // a kick is already pending
	}
}

// runActions runs the actions queued by drains that could not run them.
func (g *Gateway) runActions(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
			g.syncEvents()
		}
	}
}

// eventLoop applies events as they come, so that a sleeper's signal or a
// process's exit takes effect without waiting for a call to be served.
func (g *Gateway) eventLoop(ctx context.Context) {
	for {
		if h := eventLoopHook.Load(); h != nil {
			(*h)(g)
		}
		if err := g.tr.Wait(ctx); err != nil {
			return
		}
		g.syncEvents()
	}
}

// eventLoopHook, if set, runs in the event loop before each wait for
// the ring: tests use it to hold the loop there.
var eventLoopHook atomic.Pointer[func(g *Gateway)]

// apply applies one event. evMu is held.
func (g *Gateway) apply(ev *tasktrace.Event) {
	g.seq++
	g.seqNow.Store(g.seq)
	switch ev.Kind {
	case tasktrace.Generate:
		g.signalProcess(int(ev.Tgid)).recordSignalLocked(g.seq, ev.Queued)
	case tasktrace.Deliver:
		g.signalProcess(int(ev.Tgid)).sigDel.Store(g.seq)
		g.delivered(ev)
	case tasktrace.Exit:
		g.exited(int(ev.Tid), int(ev.Tgid), ev.GroupDead)
	case tasktrace.Exec:
		for _, tid := range []int{int(ev.OldTid), int(ev.Tid)} {
			if t := g.lookup(tid); t != nil {
				t.dead.Store(true)
				g.forgetLocked(t)
			}
		}
	}
}

// signalProcess returns the process record of tgid for signal
// bookkeeping, making an anonymous one if the process has not called yet
// (its first call may be the one a signal interrupts).
func (g *Gateway) signalProcess(tgid int) *process {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	p := g.procs[tgid]
	if p == nil {
		p = &process{tgid: tgid}
		g.procs[tgid] = p
	}
	return p
}

// delivered handles a signal taken by a thread: the thread's registers
// tell whether its trapped call was interrupted (ax = -ERESTARTSYS, the
// call's number in orig_ax) or answered, before any handler runs.
func (g *Gateway) delivered(ev *tasktrace.Event) {
	tid := int(ev.Tid)
	t := g.lookup(tid)
	if t != nil {
		// An answer in doubt (Request.await) reads its fate here.
		t.mu.Lock()
		if t.sigSeq <= t.sigFrom {
			t.sigSeq, t.sigRegs = g.seq, ev.Regs
		}
		t.mu.Unlock()
	}
	in := g.pendingIntr(t, tid)
	if ev.Regs.Interrupted() && trappedNr(int64(ev.Regs.OrigAx)) {
		if in == nil || in.decided || !in.sameCall(&ev.Regs) {
			// A new interruption. (Signals taken in the same return to
			// user mode after the first handler no longer see
			// -ERESTARTSYS: handle_signal has rewritten ax.)
			prev := in
			in = &interruption{nr: int64(ev.Regs.OrigAx), ip: ev.Regs.IP, regs: ev.Regs, evented: true}
			if prev != nil && prev.sameCall(&ev.Regs) {
				// prev was not taken up by a notification: this ends
				// its call's restart, before the gateway read it. It is
				// still that call.
				in.origin, in.resend = prev.origin, prev.resend
			}
			if prev != nil && !prev.evented && prev.call != nil && prev.call.matchesRegs(&ev.Regs) {
				// prev was judged gone with no report (a freeze, a
				// stop begun by another thread: callOverLocked, sweep,
				// keepGone) and this is its report, or that of its
				// restart, interrupted before the gateway read it:
				// still that call, and the answer kept for it.
				in.call, in.slept, in.origin, in.resend = prev.call, prev.slept, prev.origin, prev.resend
			}
			if t != nil {
				t.mu.Lock()
				if c := t.call; c != nil && c.matchesRegs(&ev.Regs) {
					in.call, in.slept, in.origin = c, c.wait != nil, c
					t.call = nil
					g.abandonLocked(c)
				}
				if p := t.resend; p != nil && p.call.matchesRegs(&ev.Regs) {
					in.call, in.origin, in.resend = p.call, p.call, &p.a
					t.resend = nil
				}
				t.intr = in
				t.mu.Unlock()
			} else {
				g.intrs[tid] = in
			}
		}
		if ev.HasHandler() && !in.decided {
			in.decided = true
			in.firstHandler = true
			in.firstRestart = ev.Flags&tasktrace.SaRestart != 0
		}
	}
	if in != nil && ev.HasHandler() {
		in.handlerRan = true
	}
}

// pendingIntr returns the thread's interruption not yet matched by a
// notification, if any.
func (g *Gateway) pendingIntr(t *Task, tid int) *interruption {
	if t == nil {
		return g.intrs[tid]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.intr
}

// exited handles the start of a thread's exit: its Task is gone, its call
// (if any) is abandoned, and with the last thread the process's SEM_UNDO
// adjustments are applied — queued now, so that the next call served
// sees them.
func (g *Gateway) exited(tid, tgid int, groupDead bool) {
	delete(g.intrs, tid)
	if t := g.lookup(tid); t != nil {
		t.dead.Store(true)
		t.mu.Lock()
		if c := t.call; c != nil {
			t.call = nil
			g.abandonLocked(c)
		}
		t.mu.Unlock()
		g.forgetLocked(t)
	}
	if !groupDead {
		return
	}
	g.tmu.Lock()
	p := g.procs[tgid]
	delete(g.procs, tgid)
	g.tmu.Unlock()
	if p != nil && p.pid != nil {
		g.Stats.Exits.Add(1)
		g.queue(func() { g.engines.Exit(p.pid) })
	}
}

// reapLost applies the exits the kernel could not report (exit events
// dropped from a full ring, Stats.ExitEventsLost): a known thread whose
// /proc entry is gone exited, and a known process whose leader is gone
// or a zombie exited whole, its SEM_UNDO applied. It reads /proc once per
// known thread and process, and runs only after a drain that found exit
// or exec events dropped. A pid reused between the exit and the reap
// (milliseconds) hides that exit, as before.
func (g *Gateway) reapLost() {
	type thread struct{ tid, tgid int }
	var threads []thread
	var tgids []int
	g.tmu.Lock()
	for _, t := range g.tasks {
		threads = append(threads, thread{t.Tid, t.Tgid})
	}
	for tgid := range g.procs {
		tgids = append(tgids, tgid)
	}
	g.tmu.Unlock()
	dead := map[int]bool{}
	for _, tgid := range tgids {
		if procGone("/proc/" + strconv.Itoa(tgid)) {
			dead[tgid] = true
		}
	}
	g.evMu.Lock()
	defer g.evMu.Unlock()
	for _, t := range threads {
		if dead[t.tgid] || procGone("/proc/"+strconv.Itoa(t.tgid)+"/task/"+strconv.Itoa(t.tid)) {
			g.exited(t.tid, t.tgid, false)
		}
	}
	for tgid := range dead {
		g.exited(tgid, tgid, true)
	}
}

// procGone reports whether the task whose /proc directory is dir has
// exited: the directory is gone, or the task is a zombie (its exit, and
// SEM_UNDO's, are done).
func procGone(dir string) bool {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// abandonLocked marks c gone (its notification no longer exists) and
// queues the cancellation of its sleep. The Task's mu is held.
func (g *Gateway) abandonLocked(c *Request) {
	if c.gone.Swap(true) {
		return
	}
	if w := c.wait; w != nil {
		g.Stats.Interrupted.Add(1)
		g.queue(func() { w.Cancel() })
	}
}

// forgetLocked drops t from the table and queues the release of its
// pidfd. evMu is held.
func (g *Gateway) forgetLocked(t *Task) {
	g.tmu.Lock()
	if g.tasks[t.Tid] == t {
		delete(g.tasks, t.Tid)
		t.proc.threads--
	}
	g.tmu.Unlock()
	g.queue(t.release)
}

// trappedNr reports whether a system call number, as a thread's orig_ax
// holds it, is one the filter traps to the gateway: the x86_64 and x32
// numbers, and the i386 ones (ipc(2) and the direct calls).
func trappedNr(nr int64) bool {
	switch nr &^ x32Bit {
	case 64, 65, 66, 68, 69, 70, 71, 220:
		return true
	}
	switch nr {
	case i386IPC, 393, 394, 399, 400, 401, 402, 420:
		return true
	}
	return false
}
