package gateway

import (
	"time"

	"golang.org/x/sys/unix"
)

// This file makes a thread asleep in the trap a sleeper for every
// observer, whether or not the gateway has read its notification yet.
//
// Natively a task asleep in semop or msgrcv is on the object's queue: a
// process that sees it asleep (/proc/<pid>/stat says S) and then counts
// sleepers (GETNCNT, GETZCNT), removes the object (it gets EIDRM) or sets
// a value it waits for, finds it there. Under the gateway such a task may
// still be waiting for its receiver to read the notification. So an
// operation that observes or changes sleepers is served only once every
// notification pending on the namespace's listeners has been received and
// dispatched (queued in its engine, if it must wait), and every sleeper
// whose notification vanished without a report has left its queue. That
// operation runs on its own goroutine: a receiver never waits for
// another receiver.

// drainLimit bounds how long an observing operation waits for the
// receivers of its namespace to take what is pending.
const drainLimit = 200 * time.Millisecond

// Observe runs f, which answers r, once every call trapped in r's IPC
// namespace before r was received has been received and dispatched, and
// every sleeper of the namespace whose notification is gone has left its
// queue (see above). f runs on its own goroutine.
//
// If r's notification vanishes first (a signal interrupted the thread),
// f does not run: natively the call never ran, and its restart, if any,
// is served as a new call. The wait ends there, so a thread whose calls
// keep being interrupted leaves no goroutines waiting behind it.
func (r *Request) Observe(f func()) {
	g := r.g
	go func() {
		if !g.quiesce(r.Task.IPCNS, r.vanished) {
			return
		}
		r.observing.Lock()
		defer r.observing.Unlock()
		f()
	}()
}

// Quiesce waits until every call trapped in IPC namespace ino before it
// was called has been received and dispatched, applies the kernel's
// reports, and takes off their queues the sleepers whose notification is
// gone: after it, the engines show the namespace's sleepers as the
// kernel's queues would. For host-side queries too.
func (g *Gateway) Quiesce(ino uint64) { g.quiesce(ino, nil) }

// quiesce is Quiesce, given up (reporting false) as soon as abandon, if
// not nil, reports true.
func (g *Gateway) quiesce(ino uint64, abandon func() bool) bool {
	if !g.ready() {
		return true // nothing was served yet
	}
	deadline := time.Now().Add(drainLimit)
	g.tmu.Lock()
	var lss []*listener
	for ls := range g.nsListeners[ino] {
		lss = append(lss, ls)
	}
	g.tmu.Unlock()
	for _, ls := range lss {
		switch ls.drain(deadline, abandon) {
		case drainAbandoned:
			return false
		case drainLate:
			g.lateDrain(ino)
		}
	}
	g.syncEvents()
	g.sweep(ino, false)
	return true
}

// vanished reports whether r's notification is gone: the thread no
// longer waits for this call's answer.
func (r *Request) vanished() bool { return r.Valid() != nil }

// lateDrain logs a drain that passed drainLimit, at most once a second
// with the count so far: a container whose threads keep trapping calls
// (a storm of interrupted calls) can make every drain late, and must not
// flood the shim's log with them.
func (g *Gateway) lateDrain(ino uint64) {
	n := g.lateDrains.Add(1)
	now := time.Now().UnixNano()
	last := g.lateLogged.Load()
	if now-last < int64(time.Second) || !g.lateLogged.CompareAndSwap(last, now) {
		return
	}
	g.logf("gateway: a listener of IPC namespace %d still had calls pending after %v (%d late drains so far)", ino, drainLimit, n)
}

// Frozen tells the gateway that tasks it serves were frozen (a container
// paused): the freezer cancels the notifications of sleepers without a
// signal, and natively a frozen sleeper has left its queue, so every
// sleeper's notification is probed. Call it once the freeze is done and
// before the end of the fence raised for it (Freezing).
func (g *Gateway) Frozen() {
	if !g.ready() {
		return
	}
	g.syncEvents()
	g.sweep(0, true)
}

// How a drain ended.
const (
	drainDone      = iota // nothing pending
	drainLate             // the deadline passed first
	drainAbandoned        // abandon reported true first
)

// Polling intervals of a drain: a receiver between its read and its
// dispatch takes µs; a wait longer than that polls less often, so that
// waiting drains cost little CPU.
const (
	drainPollMin = 20 * time.Microsecond
	drainPollMax = time.Millisecond
)

// drain waits until nothing is pending on ls that was trapped before the
// call: no notification waits to be read (POLLIN), and every one read has
// been dispatched. A notification the receiver has just read but not yet
// counted is found with ID_VALID on the ids that follow the last one it
// counted. It gives up at the deadline, or when abandon (if not nil)
// reports true.
func (ls *listener) drain(deadline time.Time, abandon func() bool) int {
	for pause := drainPollMin; ; pause = min(2*pause, drainPollMax) {
		if !ls.pendingRead() && !ls.inFlight() {
			return drainDone
		}
		if abandon != nil && abandon() {
			return drainAbandoned
		}
		if time.Now().After(deadline) {
			return drainLate
		}
		time.Sleep(pause)
	}
}

// pendingRead reports whether a notification waits to be read (poll(2)
// POLLIN: one is in the INIT state).
func (ls *listener) pendingRead() bool {
	fds := []unix.PollFd{{Fd: int32(ls.l.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
}

// inFlightProbe is how many ids past the last one counted are probed:
// notifications that vanished unread leave gaps.
const inFlightProbe = 4

// inFlight reports whether the receiver holds a notification it has not
// finished dispatching.
func (ls *listener) inFlight() bool {
	if ls.dispatched.Load() != ls.received.Load() {
		return true
	}
	last := ls.lastID.Load()
	if last == 0 {
		return false
	}
	for id := last + 1; id <= last+inFlightProbe; id++ {
		if ls.l.IDValid(id) == nil {
			// Read (SENT) but not yet counted: the receiver is between
			// the ioctl and dispatch.
			return true
		}
	}
	return false
}

// sweep takes off their queues the sleepers of IPC namespace ino (every
// namespace if ino is 0) whose notification is gone with no report (their
// thread stopped with its group, or was woken for a signal another thread
// took; or was frozen, if all): natively they left the queue when the
// signal woke them.
//
// Only a signal can do that, so only the sleepers of processes that had
// one queued since their call was received, or one not yet taken, are
// probed (ID_VALID) unless all is set: a probe walks the filter's list
// of pending notifications under its lock, and probing every one of N
// sleepers at every observation cost O(N²) (10,000 sleepers: seconds of
// CPU per GETNCNT). A freeze (cgroup freezer) cancels notifications
// without a signal: Frozen sweeps with all set.
func (g *Gateway) sweep(ino uint64, all bool) {
	var sleeping []*Request
	g.tmu.Lock()
	for _, t := range g.tasks {
		if ino != 0 && t.IPCNS != ino {
			continue
		}
		t.mu.Lock()
		if c := t.call; c != nil && c.wait != nil && (all || g.mayBeSignalled(t.proc, c.recvSeq)) {
			sleeping = append(sleeping, c)
		}
		t.mu.Unlock()
	}
	g.tmu.Unlock()
	for _, c := range sleeping {
		if c.Valid() == nil {
			continue
		}
		c.settle() // an answer in flight also ends the notification
		t := c.Task
		t.mu.Lock()
		w := c.wait
		vanished := t.call == c && !c.answered.Load() && !c.gone.Swap(true)
		if vanished {
			t.call = nil
			if t.intr == nil {
				t.intr = &interruption{call: c, origin: c, slept: true}
			}
		}
		t.mu.Unlock()
		if vanished && w.Cancel() {
			g.Stats.Interrupted.Add(1)
		}
	}
}
