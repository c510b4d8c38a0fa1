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
func (r *Request) Observe(f func()) {
	g := r.g
	go func() {
		g.Quiesce(r.Task.IPCNS)
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
func (g *Gateway) Quiesce(ino uint64) {
	if !g.ready() {
		return // nothing was served yet
	}
	deadline := time.Now().Add(drainLimit)
	g.tmu.Lock()
	var lss []*listener
	for ls := range g.nsListeners[ino] {
		lss = append(lss, ls)
	}
	g.tmu.Unlock()
	for _, ls := range lss {
		if !ls.drain(deadline) {
			g.logf("gateway: a listener of IPC namespace %d still had calls pending after %v", ino, drainLimit)
		}
	}
	g.syncEvents()
	g.sweep(ino, false)
}

// Frozen tells the gateway that tasks it serves were frozen (a container
// paused): the freezer cancels the notifications of sleepers without a
// signal, and natively a frozen sleeper has left its queue, so every
// sleeper's notification is probed.
func (g *Gateway) Frozen() {
	if !g.ready() {
		return
	}
	g.syncEvents()
	g.sweep(0, true)
}

// drain waits until nothing is pending on ls that was trapped before the
// call: no notification waits to be read (POLLIN), and every one read has
// been dispatched. A notification the receiver has just read but not yet
// counted is found with ID_VALID on the ids that follow the last one it
// counted. It reports false if the deadline passed first.
func (ls *listener) drain(deadline time.Time) bool {
	for {
		if !ls.pendingRead() && !ls.inFlight() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Microsecond)
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
		if c := t.call; c != nil && c.wait != nil && (all || t.proc.mayBeSignalled(c.recvSeq)) {
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
