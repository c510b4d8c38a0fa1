package gateway

import (
	"os"
	"strconv"
	"time"
)

var CapEff = capEff

// NewTestTask returns a Task for thread tid that can only read and write
// the thread's memory: for the memory tests.
func NewTestTask(tid int) *Task { return &Task{Tid: tid, pidfd: -1} }

// SetDispatchHook makes f run in the receiver after each call is
// identified and before it is bound to its thread; the returned func
// removes it.
func SetDispatchHook(f func(r *Request)) func() {
	dispatchHook.Store(&f)
	return func() { dispatchHook.Store(nil) }
}

// AwaitInterruption applies the kernel's reports until one says that
// thread tid's call was interrupted, or limit passes; it reports which.
func (g *Gateway) AwaitInterruption(tid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		g.syncEvents()
		g.evMu.Lock()
		in := g.pendingIntr(g.lookup(tid), tid)
		g.evMu.Unlock()
		if in != nil && in.evented {
			return true
		}
		time.Sleep(100 * time.Microsecond)
	}
	return false
}

// FirstCall reports whether r is the first call the gateway received from
// its thread.
func (r *Request) FirstCall() bool { return !r.cached }

// AwaitInterruption applies the kernel's reports until one says that r's
// thread was interrupted in a trapped call, or limit passes; it reports
// which.
//
// With several receivers on the listener, the call's restart may be read
// and take the report before r's receiver looks: a newer call of the
// thread taken up counts too (the report precedes the restart's trap,
// and a receiver applies reports before it binds a call).
func (r *Request) AwaitInterruption(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if r.g.AwaitInterruption(r.Task.Tid, time.Millisecond) {
			return true
		}
		t := r.Task
		t.mu.Lock()
		newer := t.lastLs == r.ls && t.lastID > r.Notif.ID
		t.mu.Unlock()
		if newer {
			return true
		}
	}
	return false
}

// Tables returns the number of threads (Tasks) and processes the gateway
// holds state for.
func (g *Gateway) Tables() (tasks, procs int) {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	return len(g.tasks), len(g.procs)
}

// GATEWAY_HANDOFF=always makes every receiver hand the turn to read on
// after each call, with up to 4 receivers per listener: the suite then
// runs with the receivers of one listener overlapping as much as they
// can (scripts/test.sh's race step sets it).
func init() {
	if os.Getenv("GATEWAY_HANDOFF") == "always" {
		SetHandOffAlways(true)
	}
	// GATEWAY_RECEIVERS bounds the receivers per listener (benchmarks:
	// 1 is serving with one receiver).
	if n, err := strconv.Atoi(os.Getenv("GATEWAY_RECEIVERS")); err == nil && n > 0 {
		maxReceivers.Store(int32(n))
	}
}

// SetHandOffAlways sets whether receivers hand the turn on after every
// read (with up to 4 receivers per listener) and returns the previous
// setting. Call it while no listener is served.
func SetHandOffAlways(on bool) bool {
	if on {
		maxReceivers.Store(4)
	} else {
		maxReceivers.Store(1)
	}
	return handOffAlways.Swap(on)
}

// Watched reports whether the kernel's reports about IPC namespace ino
// are followed.
func (g *Gateway) Watched(ino uint64) bool {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	return g.watched[ino]
}

// SetPublishHook makes f run after a thread's identity was read and before
// it is published; the returned func removes it.
func SetPublishHook(f func(tid int)) func() {
	publishHook.Store(&f)
	return func() { publishHook.Store(nil) }
}

// HasTask reports whether the gateway holds a Task for thread tid.
func (g *Gateway) HasTask(tid int) bool { return g.lookup(tid) != nil }

// SetAnswerHook makes f run when an answer is about to be sent, before
// the way it goes is chosen; the returned func removes it.
func SetAnswerHook(f func(r *Request)) func() {
	answerHook.Store(&f)
	return func() { answerHook.Store(nil) }
}

// SetTakenHook makes f run when an answer was sent and before its fate is
// judged; the returned func removes it.
func SetTakenHook(f func(r *Request)) func() {
	takenHook.Store(&f)
	return func() { takenHook.Store(nil) }
}

// SetVehicles turns vehicles (vehicle.go) off or back on; the returned
// func restores the setting. Benchmarks compare with the await they
// replace.
func SetVehicles(on bool) func() {
	old := noVehicles.Swap(!on)
	return func() { noVehicles.Store(old) }
}

// SignalTakenSinceAnswer reports whether r's thread has taken a signal
// since the window in which r's answer is judged opened (the kernel's
// report was applied).
func (r *Request) SignalTakenSinceAnswer() bool {
	t := r.Task
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sigSeq > t.sigFrom
}

// MsgrcvFlags returns the msgflg argument of a msgrcv call.
func (r *Request) MsgrcvFlags() uint64 { return r.Notif.Data.Args[4] }

// SendRefused reports whether the kernel refused an answer to r because
// its notification was gone.
func (r *Request) SendRefused() bool { return r.gone.Load() }

// SetEventLoopHook makes f run in every gateway's event loop before each
// wait for the kernel's reports; the returned func removes it.
func SetEventLoopHook(f func(g *Gateway)) func() {
	eventLoopHook.Store(&f)
	return func() { eventLoopHook.Store(nil) }
}

// SyncEventsLocked applies the kernel's reports as an answer being
// committed does: the actions they call for are left queued.
func (g *Gateway) SyncEventsLocked() { g.syncEventsLocked() }

// SetSignalMemory sets how long after a signal a process's msgrcv
// answers go by vehicle; the returned func restores it.
func SetSignalMemory(d time.Duration) func() {
	old := signalMemory.Swap(int64(d))
	return func() { signalMemory.Store(old) }
}

// VehiclesUsable reports whether this host can carry answers by vehicle.
func VehiclesUsable() bool { return vehiclesUsable() }
